//! Accepting connections for the REST API: HTTPS (TLS with an optional
//! client certificate, which names the user), or plain HTTP on the
//! loopback port an operator asks for. HTTP/1.1, and HTTP/2 (by ALPN, or
//! with prior knowledge on plain HTTP) so one client can multiplex its
//! watches on one connection, up to 1000 streams per connection as
//! kube-apiserver allows. Request heads are bounded in time and size as
//! kube-apiserver's Go server bounds them.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::response::{IntoResponse, Response};
use axum::Router;
use futures::future::Either;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tower::ServiceExt;

use crate::authn::Transport;
use crate::coalesce::Coalescing;
use crate::status::ApiError;

/// kube-apiserver's default `--http2-max-streams-per-connection`.
pub const MAX_STREAMS_PER_CONNECTION: u32 = 1000;
/// Pause after an accept error (e.g. too many open files) before retrying.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);
/// How long a graceful stop waits for requests in flight.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a client may take to finish its TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// The first bytes of every HTTP/2 connection (RFC 9113 §3.4).
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// kube-apiserver's `ReadHeaderTimeout`: an HTTP/1.1 client that has not
/// sent a whole request head this long after it began one (or after the
/// connection was accepted) is disconnected, so idle half-requests do not
/// hold connections for ever. It ends idle keep-alive connections too
/// (hyper times the wait for the next head; Go's 90 s idle timeout does
/// that there). Bodies and responses are not timed by it.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(32);
/// Go's `http.DefaultMaxHeaderBytes`, which kube-apiserver serves with: the
/// request line and headers together. More is answered 431 with a Status.
pub const MAX_HEADER_BYTES: usize = 1 << 20;
/// The longest request target (path and query) served; longer is answered
/// 414 with a Status. Go has no limit of its own below the 1 MiB of the
/// head, but hyper refuses a target over 65 534 bytes itself, with an
/// empty 414; this limit is below that so a Status says what was wrong,
/// and far above what a Kubernetes client sends.
pub const MAX_URI_BYTES: usize = 32 * 1024;
/// hyper's own bounds on a head (HTTP/1.1 read buffer, HTTP/2 header list),
/// above ours so a head a little over ours reaches [`oversized_head`] for
/// a Status; hyper answers a head over these itself, with an empty 431.
const HYPER_MAX_HEAD_BYTES: usize = MAX_HEADER_BYTES + 64 * 1024;
/// How many header fields hyper parses in an HTTP/1.1 head. Go counts no
/// fields, only the bytes of the head; hyper stops at 100 by default with
/// an empty 431. This many fit any real client, and a head with more is
/// past [`MAX_HEADER_BYTES`] long before (or answered by hyper, empty).
const HYPER_MAX_HEADERS: usize = 2048;

/// How connections are served; tests shorten the timeout.
#[derive(Debug, Clone, Copy)]
struct ConnectionSettings {
    header_read_timeout: Duration,
}

impl Default for ConnectionSettings {
    fn default() -> Self {
        ConnectionSettings {
            header_read_timeout: HEADER_READ_TIMEOUT,
        }
    }
}

/// Serves `router` on `listener` until `shutdown` resolves, then stops
/// accepting and waits (up to 10 s) for the connections' requests in
/// flight. With `tls`, connections are HTTPS; without, plain HTTP, each
/// request marked as coming over the insecure port.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    tls: Option<Arc<rustls::ServerConfig>>,
    shutdown: impl Future<Output = ()> + Send,
) -> std::io::Result<()> {
    serve_with(
        listener,
        router,
        tls,
        shutdown,
        ConnectionSettings::default(),
    )
    .await
}

async fn serve_with(
    listener: TcpListener,
    router: Router,
    tls: Option<Arc<rustls::ServerConfig>>,
    shutdown: impl Future<Output = ()> + Send,
    settings: ConnectionSettings,
) -> std::io::Result<()> {
    let acceptor = tls.map(|config| {
        let mut config = (*config).clone();
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        tokio_rustls::TlsAcceptor::from(Arc::new(config))
    });
    let graceful = GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(err) => {
                    tracing::warn!(error = %err, "accepting an API connection failed");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            },
            _ = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        let router = router.clone();
        let watcher = graceful.watcher();
        let Some(acceptor) = acceptor.clone() else {
            // Which protocol is known from the first bytes: the task
            // waits for them, not the accept loop.
            tokio::spawn(async move {
                let transport = Transport::Insecure;
                let wait = settings.header_read_timeout.min(HANDSHAKE_TIMEOUT);
                if sends_h2_preface(&stream, wait).await {
                    let stream = Coalescing::new(stream);
                    serve_h2(watcher, stream, router, peer, transport, settings);
                } else {
                    serve_connection(watcher, stream, router, peer, transport, settings);
                }
            });
            continue;
        };
        // The handshake runs in its own task, so a slow client never
        // holds up the accept loop.
        tokio::spawn(async move {
            let stream =
                match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                    Ok(Ok(stream)) => stream,
                    Ok(Err(err)) => {
                        tracing::debug!(%peer, error = %err, "TLS handshake failed");
                        return;
                    }
                    Err(_) => {
                        tracing::debug!(%peer, "TLS handshake timed out");
                        return;
                    }
                };
            let client = stream
                .get_ref()
                .1
                .peer_certificates()
                .and_then(|chain| chain.first())
                .and_then(|cert| crate::authn::x509::user_of(cert))
                .map(Arc::new);
            let transport = Transport::Tls { client };
            if stream.get_ref().1.alpn_protocol() == Some(b"h2") {
                let stream = Coalescing::new(stream);
                serve_h2(watcher, stream, router, peer, transport, settings);
            } else {
                serve_connection(watcher, stream, router, peer, transport, settings);
            }
        });
    }
    drop(listener);
    if tokio::time::timeout(DRAIN_TIMEOUT, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("API connections still busy after {DRAIN_TIMEOUT:?}; stopping anyway");
    }
    Ok(())
}

/// hyper's server settings for a connection whose streams `executor` runs.
fn builder<E>(executor: E, settings: ConnectionSettings) -> auto::Builder<E> {
    let mut builder = auto::Builder::new(executor);
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(settings.header_read_timeout)
        .max_headers(HYPER_MAX_HEADERS)
        .max_buf_size(HYPER_MAX_HEAD_BYTES);
    builder
        .http2()
        .max_concurrent_streams(MAX_STREAMS_PER_CONNECTION)
        .max_header_list_size(HYPER_MAX_HEAD_BYTES as u32);
    builder
}

/// A 414 or 431 `Status` for a request whose target or head is over our
/// limits, as the Go server refuses it before any handler (and before the
/// audit log) sees it. The head is counted as HTTP/1.1 writes it.
fn oversized_head<B>(request: &axum::http::Request<B>) -> Option<Response> {
    let uri = request.uri();
    let target = uri.path_and_query().map_or(0, |p| p.as_str().len());
    if target > MAX_URI_BYTES {
        let message = format!(
            "the request URI is {target} bytes long; the API server reads at most {MAX_URI_BYTES}"
        );
        return Some(ApiError::new(414, "RequestURITooLong", message).into_response());
    }
    // "METHOD target HTTP/1.1\r\n", each "name: value\r\n", and the end.
    let line = request.method().as_str().len() + target + 12;
    let authority = uri.authority().map_or(0, |a| a.as_str().len());
    let headers: usize = request
        .headers()
        .iter()
        .map(|(name, value)| name.as_str().len() + value.len() + 4)
        .sum();
    let head = line + authority + headers + 2;
    if head > MAX_HEADER_BYTES {
        let message = format!(
            "the request's line and headers are {head} bytes long; the API server reads at most {MAX_HEADER_BYTES}"
        );
        return Some(ApiError::new(431, "RequestHeaderFieldsTooLarge", message).into_response());
    }
    None
}

/// Marks a request with the connection's remote address (for the
/// per-client limits) and how it came (for authentication).
fn mark(
    request: &mut axum::extract::Request<hyper::body::Incoming>,
    peer: std::net::SocketAddr,
    transport: &Transport,
) {
    request.extensions_mut().insert(crate::limits::Peer(peer));
    request.extensions_mut().insert(transport.clone());
}

/// Serves one HTTP/1.1 connection in its own task, which runs its
/// requests' handlers one after another.
fn serve_connection<S>(
    graceful: Watcher,
    stream: S,
    router: Router,
    peer: std::net::SocketAddr,
    transport: Transport,
    settings: ConnectionSettings,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let requested = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let service = {
        let requested = requested.clone();
        TowerToHyperService::new(tower::service_fn(
            move |mut request: axum::extract::Request<hyper::body::Incoming>| {
                requested.store(true, std::sync::atomic::Ordering::Relaxed);
                if let Some(refused) = oversized_head(&request) {
                    return Either::Left(std::future::ready(Ok(refused)));
                }
                mark(&mut request, peer, &transport);
                Either::Right(router.clone().oneshot(request))
            },
        ))
    };
    let connection = builder(TokioExecutor::new(), settings)
        .serve_connection_with_upgrades(
            TokioIo::new(crate::refusal_bodies::RefusalBodies::new(stream)),
            service,
        )
        .into_owned();
    let connection = graceful.watch(connection);
    tokio::spawn(async move {
        let mut connection = std::pin::pin!(connection);
        // hyper times a head from when it knows the connection is
        // HTTP/1.1; a client that stops within the first bytes (a part of
        // HTTP/2's preface) would keep it guessing for ever.
        let first_head = tokio::time::sleep(settings.header_read_timeout);
        let ended = tokio::select! {
            ended = &mut connection => Some(ended),
            () = first_head => None,
        };
        let ended = match ended {
            Some(ended) => ended,
            None if !requested.load(std::sync::atomic::Ordering::Relaxed) => {
                tracing::debug!(%peer, "no request head in time; the connection is closed");
                return;
            }
            None => connection.await,
        };
        if let Err(err) = ended {
            tracing::debug!(error = %err, "an API connection ended with an error");
        }
    });
}

/// Serves one HTTP/2 connection in its own task, which also sends its
/// streams' responses (see [`crate::h2_streams`]); each request's handler
/// runs in a task of its own, so streams are served side by side.
fn serve_h2<S>(
    graceful: Watcher,
    stream: S,
    router: Router,
    peer: std::net::SocketAddr,
    transport: Transport,
    settings: ConnectionSettings,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = TowerToHyperService::new(tower::service_fn(
        move |mut request: axum::extract::Request<hyper::body::Incoming>| {
            if let Some(refused) = oversized_head(&request) {
                return Either::Left(std::future::ready(Ok(refused)));
            }
            mark(&mut request, peer, &transport);
            // hyper drops this future when the client resets the stream;
            // the handler then stops too, as it would in the stream's task.
            let handler =
                crate::abort_on_drop::AbortOnDrop(tokio::spawn(router.clone().oneshot(request)));
            Either::Right(async move {
                let mut handler = handler;
                match (&mut handler.0).await {
                    Ok(response) => response,
                    Err(err) => {
                        tracing::error!(error = %err, "an API request's handler failed");
                        Ok(crate::status::ApiError::internal(
                            "the request's handler failed; see the API server's log".to_string(),
                        )
                        .into_response())
                    }
                }
            })
        },
    ));
    let (executor, spawned) = crate::h2_streams::executor();
    let connection = builder(executor, settings)
        .serve_connection_with_upgrades(TokioIo::new(stream), service)
        .into_owned();
    let connection = crate::h2_streams::WithStreams::new(graceful.watch(connection), spawned);
    tokio::spawn(async move {
        if let Err(err) = connection.await {
            tracing::debug!(error = %err, "an API connection ended with an error");
        }
    });
}

/// Whether a plain connection starts with HTTP/2's preface (a client with
/// prior knowledge). Reads nothing: the bytes are left for hyper. A client
/// that sends nothing within `wait` is served as HTTP/1.1, whose own
/// timeout on the request head then applies.
async fn sends_h2_preface(stream: &tokio::net::TcpStream, wait: Duration) -> bool {
    let look = async {
        let mut first = [0u8; 24];
        loop {
            let seen = match stream.peek(&mut first).await {
                Ok(0) | Err(_) => return false,
                Ok(seen) => seen,
            };
            if first[..seen] != H2_PREFACE[..seen] {
                return false;
            }
            if seen == H2_PREFACE.len() {
                return true;
            }
            // Part of the preface so far: peek returns at once while any
            // byte is waiting, so wait a little for the rest.
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    };
    tokio::time::timeout(wait, look).await.unwrap_or(false)
}

/// The API for clients in the server's own process — `skiff up`'s
/// scheduler, controllers and kubelet — without a socket: each request
/// goes through the same router and layers (authentication as the user
/// the client was made for, authorization, limits, audit) that a request
/// over TCP goes through, only without TCP, TLS and HTTP framing.
/// Cloned handles share one router, set when the API starts serving.
#[derive(Clone)]
pub struct InProcess {
    state: tokio::sync::watch::Sender<InProcessState>,
}

#[derive(Clone)]
enum InProcessState {
    Starting,
    Serving(Router),
    Stopped,
}

impl Default for InProcess {
    fn default() -> Self {
        InProcess {
            state: tokio::sync::watch::Sender::new(InProcessState::Starting),
        }
    }
}

impl std::fmt::Debug for InProcess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = match &*self.state.borrow() {
            InProcessState::Starting => "starting",
            InProcessState::Serving(_) => "serving",
            InProcessState::Stopped => "stopped",
        };
        f.debug_struct("InProcess").field("state", &state).finish()
    }
}

impl InProcess {
    /// Serves `router` once `ready` turns true; requests made before wait
    /// for it. Once stopped, it is not served again.
    pub(crate) fn serve_when(
        &self,
        router: Router,
        mut ready: tokio::sync::watch::Receiver<bool>,
    ) -> tokio::task::JoinHandle<()> {
        let state = self.state.clone();
        tokio::spawn(async move {
            if ready.wait_for(|ready| *ready).await.is_err() {
                return;
            }
            state.send_if_modified(|state| match state {
                InProcessState::Starting => {
                    *state = InProcessState::Serving(router);
                    true
                }
                _ => false,
            });
        })
    }

    /// Requests from now on are answered 503, as a stopped server's would
    /// fail to connect.
    pub(crate) fn stop(&self) {
        self.state.send_replace(InProcessState::Stopped);
    }

    /// A client transport whose requests are authenticated as `user`, as
    /// a client certificate naming that user would be.
    pub fn service(&self, user: crate::user::UserInfo) -> InProcessService {
        InProcessService {
            state: self.state.subscribe(),
            transport: Transport::InProcess {
                user: Arc::new(user),
            },
        }
    }
}

/// One in-process client's transport: a `tower::Service` taking requests
/// with any body (e.g. a `kube::Client`'s).
#[derive(Clone)]
pub struct InProcessService {
    state: tokio::sync::watch::Receiver<InProcessState>,
    transport: Transport,
}

/// The address in-process requests come from, for the per-client limits
/// and the audit log.
const IN_PROCESS_PEER: std::net::SocketAddr =
    std::net::SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 0);

impl<B> tower::Service<axum::http::Request<B>> for InProcessService
where
    B: axum::body::HttpBody<Data = bytes::Bytes> + Send + 'static,
    B::Error: Into<axum::BoxError>,
{
    type Response = axum::response::Response;
    type Error = std::convert::Infallible;
    type Future = std::pin::Pin<
        Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send + 'static>,
    >;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: axum::http::Request<B>) -> Self::Future {
        let mut state = self.state.clone();
        let transport = self.transport.clone();
        Box::pin(async move {
            let router = match state
                .wait_for(|s| !matches!(s, InProcessState::Starting))
                .await
                .map(|s| s.clone())
            {
                Ok(InProcessState::Serving(router)) => router,
                _ => {
                    return Ok(crate::status::ApiError::unavailable(
                        "the API server in this process has stopped".to_string(),
                    )
                    .into_response());
                }
            };
            let (mut parts, body) = request.into_parts();
            parts
                .extensions
                .insert(crate::limits::Peer(IN_PROCESS_PEER));
            parts.extensions.insert(transport);
            let request = axum::http::Request::from_parts(parts, axum::body::Body::new(body));
            router.oneshot(request).await
        })
    }
}

#[cfg(test)]
mod in_process_tests {
    use super::*;
    use crate::user::UserInfo;
    use axum::body::Body;
    use axum::http::{Method, Request, StatusCode};
    use serde_json::{json, Value};

    fn user(name: &str, groups: &[&str]) -> UserInfo {
        UserInfo {
            name: name.into(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
        }
    }

    async fn send(
        service: &InProcessService,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        let request = Request::builder()
            .method(method)
            .uri(path)
            .header("content-type", "application/json")
            .body(Body::from(body))
            .unwrap();
        let response = service.clone().oneshot(request).await.unwrap();
        let status = response.status();
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        (
            status,
            serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        )
    }

    /// In-process requests wait for the API to serve, are authenticated
    /// as the client's user and authorized as that user, and get 503
    /// once the API has stopped.
    #[tokio::test]
    async fn in_process_clients_are_their_user_and_stop_with_the_api() {
        let dir = tempfile::tempdir().unwrap();
        let store = skiff_store::Store::open(skiff_store::StoreConfig::new(dir.path()))
            .await
            .unwrap();
        let registry = crate::Registry::new(crate::Storage::local(store));
        let in_process = InProcess::default();
        let alice = in_process.service(user("alice", &[]));
        let admin = in_process.service(user("root", &["system:masters"]));
        let review = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"});
        // Sent before the API serves: it waits.
        let early = {
            let alice = alice.clone();
            let review = review.clone();
            tokio::spawn(async move {
                send(
                    &alice,
                    Method::POST,
                    "/apis/authentication.k8s.io/v1/selfsubjectreviews",
                    Some(review),
                )
                .await
            })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!early.is_finished());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let options = crate::ServeOptions {
            in_process: Some(in_process.clone()),
            ..Default::default()
        };
        let serving = tokio::spawn(crate::serve(Vec::new(), registry, options, async move {
            let _ = stopped.await;
        }));
        // Answered once it serves, which is once the bootstrap roles (which
        // let anyone review themselves) are there: allowed.
        let (code, body) = early.await.unwrap();
        assert_eq!(code, StatusCode::CREATED, "{body}");
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        let (code, body) = loop {
            let (code, body) = send(
                &alice,
                Method::POST,
                "/apis/authentication.k8s.io/v1/selfsubjectreviews",
                Some(review.clone()),
            )
            .await;
            if code != StatusCode::FORBIDDEN || tokio::time::Instant::now() > deadline {
                break (code, body);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        assert_eq!(code, StatusCode::CREATED, "{body}");
        assert_eq!(body["status"]["userInfo"]["username"], "alice");
        assert_eq!(
            body["status"]["userInfo"]["groups"],
            json!(["system:authenticated"])
        );
        // RBAC applies to the user: alice may not read secrets, an
        // administrator may.
        let secrets = "/api/v1/namespaces/default/secrets";
        let (code, body) = send(&alice, Method::GET, secrets, None).await;
        assert_eq!(code, StatusCode::FORBIDDEN, "{body}");
        assert_eq!(body["reason"], "Forbidden");
        let (code, body) = send(&admin, Method::GET, secrets, None).await;
        assert_eq!(code, StatusCode::OK, "{body}");
        assert_eq!(body["kind"], "SecretList");
        let _ = stop.send(());
        serving.await.unwrap().unwrap();
        let (code, body) = send(&admin, Method::GET, secrets, None).await;
        assert_eq!(code, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    }

    #[tokio::test]
    async fn in_process_requests_wait_until_ready_and_a_stop_is_final() {
        let router = || Router::new().route("/ok", axum::routing::get(|| async { "{}" }));
        let in_process = InProcess::default();
        let client = in_process.service(user("alice", &[]));
        let (ready, waiting) = tokio::sync::watch::channel(false);
        in_process.serve_when(router(), waiting);
        let early = {
            let client = client.clone();
            tokio::spawn(async move { send(&client, Method::GET, "/ok", None).await })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!early.is_finished(), "answered before the API was ready");
        ready.send(true).unwrap();
        assert_eq!(early.await.unwrap().0, StatusCode::OK);

        // Stopped before it was ready: never served.
        let in_process = InProcess::default();
        let client = in_process.service(user("alice", &[]));
        let (ready, waiting) = tokio::sync::watch::channel(false);
        let serving = in_process.serve_when(router(), waiting);
        in_process.stop();
        ready.send(true).unwrap();
        serving.await.unwrap();
        let (code, _) = send(&client, Method::GET, "/ok", None).await;
        assert_eq!(code, StatusCode::SERVICE_UNAVAILABLE);
    }
}

#[cfg(test)]
mod connection_tests {
    use super::*;
    use axum::body::Body;
    use axum::http::{Request, StatusCode};
    use axum::routing::{get, post};
    use bytes::Bytes;
    use http_body_util::BodyExt;
    use hyper::body::Frame;
    use serde_json::Value;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    /// The header timeout of these tests.
    const SHORT: Duration = Duration::from_millis(300);

    async fn panics() -> &'static str {
        panic!("a handler made to panic")
    }

    /// A router as the API's: a panicking route, a slow one, a streamed
    /// one and an echo of the body's length, behind the panic recovery.
    fn router() -> Router {
        Router::new()
            .route("/ok", get(|| async { "fine" }))
            .route("/panic", get(panics))
            .route(
                "/slow",
                get(|| async {
                    tokio::time::sleep(SHORT * 2).await;
                    "slow"
                }),
            )
            .route(
                "/stream",
                get(|| async {
                    let chunks = futures::stream::unfold(0, |sent| async move {
                        if sent == 3 {
                            return None;
                        }
                        tokio::time::sleep(SHORT).await;
                        Some((Ok::<_, std::io::Error>(Bytes::from("chunk;")), sent + 1))
                    });
                    Body::from_stream(chunks)
                }),
            )
            .route(
                "/echo",
                post(|body: Bytes| async move { body.len().to_string() }),
            )
            .layer(axum::middleware::from_fn(crate::panic_recovery::recover))
    }

    /// A plain-HTTP server with a short header timeout; stops when the
    /// sender is dropped.
    async fn start() -> (std::net::SocketAddr, tokio::sync::oneshot::Sender<()>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let settings = ConnectionSettings {
            header_read_timeout: SHORT,
        };
        tokio::spawn(serve_with(
            listener,
            router(),
            None,
            async move {
                let _ = stopped.await;
            },
            settings,
        ));
        (address, stop)
    }

    type Sender<B> = hyper::client::conn::http1::SendRequest<B>;

    async fn http1<B>(address: std::net::SocketAddr) -> Sender<B>
    where
        B: hyper::body::Body + Send + 'static,
        B::Data: Send,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let stream = TcpStream::connect(address).await.unwrap();
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .unwrap();
        tokio::spawn(connection);
        sender
    }

    async fn http2(address: std::net::SocketAddr) -> hyper::client::conn::http2::SendRequest<Body> {
        let stream = TcpStream::connect(address).await.unwrap();
        let (sender, connection) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
                .await
                .unwrap();
        tokio::spawn(connection);
        sender
    }

    fn request(path: &str) -> Request<Body> {
        Request::get(path)
            .header("host", "localhost")
            .body(Body::empty())
            .unwrap()
    }

    async fn read(response: hyper::Response<hyper::body::Incoming>) -> (StatusCode, Bytes) {
        let code = response.status();
        (
            code,
            response.into_body().collect().await.unwrap().to_bytes(),
        )
    }

    fn status_of(body: &Bytes) -> Value {
        serde_json::from_slice(body).unwrap_or(Value::Null)
    }

    /// Over HTTP/1.1 and HTTP/2 alike, a panicking handler answers a 500
    /// Status and the same connection serves the next request.
    #[tokio::test]
    async fn a_panic_is_a_500_and_the_connection_goes_on() {
        let (address, _stop) = start().await;
        let mut one = http1::<Body>(address).await;
        let (code, body) = read(one.send_request(request("/panic")).await.unwrap()).await;
        assert_eq!(code, StatusCode::INTERNAL_SERVER_ERROR);
        let status = status_of(&body);
        assert_eq!(
            (
                status["kind"].as_str(),
                status["reason"].as_str(),
                status["code"].as_u64()
            ),
            (Some("Status"), Some("InternalError"), Some(500)),
            "{status}"
        );
        // The same connection: hyper's client sends on it once it is idle.
        one.ready().await.unwrap();
        let (code, body) = read(one.send_request(request("/ok")).await.unwrap()).await;
        assert_eq!((code, &body[..]), (StatusCode::OK, &b"fine"[..]));

        let mut two = http2(address).await;
        let uri = format!("http://{address}/panic");
        let (code, body) = read(two.send_request(request(&uri)).await.unwrap()).await;
        assert_eq!(code, StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(status_of(&body)["reason"], "InternalError");
        let uri = format!("http://{address}/ok");
        let (code, body) = read(two.send_request(request(&uri)).await.unwrap()).await;
        assert_eq!((code, &body[..]), (StatusCode::OK, &b"fine"[..]));
    }

    /// Reads until the server closes the connection; what it sent.
    async fn until_closed(stream: &mut TcpStream) -> Vec<u8> {
        let mut seen = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut seen));
        read.await
            .expect("the server should close the connection")
            .unwrap();
        seen
    }

    /// A connection that starts a request head and never ends it, that
    /// sends nothing, or that stops within HTTP/2's preface is closed once
    /// the header timeout has passed, and not before.
    #[tokio::test]
    async fn an_unfinished_head_is_disconnected_after_the_timeout() {
        let (address, _stop) = start().await;
        for (first, bytes) in [
            ("a partial head", &b"GET /ok HTTP/1.1\r\nHost: x\r\n"[..]),
            ("nothing", &b""[..]),
            ("part of the HTTP/2 preface", &b"PRI * HTTP/2.0\r\n"[..]),
        ] {
            let began = tokio::time::Instant::now();
            let mut stream = TcpStream::connect(address).await.unwrap();
            stream.write_all(bytes).await.unwrap();
            let answered = until_closed(&mut stream).await;
            let took = began.elapsed();
            assert!(answered.is_empty(), "{first}: {answered:?}");
            assert!(took >= SHORT, "{first}: closed after {took:?}");
        }
        // A whole request is answered; the unfinished one after it on
        // the same connection is timed the same.
        let mut stream = TcpStream::connect(address).await.unwrap();
        let two = b"GET /ok HTTP/1.1\r\nHost: x\r\n\r\nGET /ok HTTP/1.1\r\n";
        stream.write_all(two).await.unwrap();
        let answered = String::from_utf8(until_closed(&mut stream).await).unwrap();
        assert!(answered.starts_with("HTTP/1.1 200 OK\r\n"), "{answered}");
        assert!(answered.ends_with("\r\n\r\nfine"), "{answered}");
        assert_eq!(answered.matches("HTTP/1.1").count(), 1, "{answered}");
    }

    /// The timeout is on the head only: a body sent slowly, a slow
    /// handler and a response streamed for longer are all served, one
    /// after another on one connection.
    #[tokio::test]
    async fn slow_bodies_and_long_responses_outlive_the_header_timeout() {
        let (address, _stop) = start().await;
        type Chunk = Result<Frame<Bytes>, std::convert::Infallible>;
        // A body whose chunks are sent by the test as it likes.
        let streamed = || {
            let (chunks, body) = tokio::sync::mpsc::channel::<Chunk>(4);
            let body = tokio_stream::wrappers::ReceiverStream::new(body);
            (chunks, http_body_util::StreamBody::new(body))
        };
        let (chunks, upload) = streamed();
        let mut sender = http1(address).await;
        let upload = Request::post("/echo")
            .header("host", "localhost")
            .header("content-length", "10")
            .body(upload)
            .unwrap();
        let answer = tokio::spawn(sender.send_request(upload));
        chunks
            .send(Ok(Frame::data(Bytes::from("12345"))))
            .await
            .unwrap();
        tokio::time::sleep(SHORT * 2).await;
        chunks
            .send(Ok(Frame::data(Bytes::from("12345"))))
            .await
            .unwrap();
        drop(chunks);
        let (code, body) = read(answer.await.unwrap().unwrap()).await;
        assert_eq!((code, &body[..]), (StatusCode::OK, &b"10"[..]));
        let mut sender = sender;
        for (path, want) in [("/slow", &b"slow"[..]), ("/stream", b"chunk;chunk;chunk;")] {
            let (_, empty) = streamed();
            sender.ready().await.unwrap();
            let request = Request::get(path).header("host", "x").body(empty).unwrap();
            let (code, body) = read(sender.send_request(request).await.unwrap()).await;
            assert_eq!((code, &body[..]), (StatusCode::OK, want), "{path}");
        }
    }

    /// A target or head over our limits (but within hyper's) is answered
    /// 414 or 431 with a Status, over HTTP/1.1 and HTTP/2.
    #[tokio::test]
    async fn oversized_targets_and_heads_are_answered_with_a_status() {
        let (address, _stop) = start().await;
        let long_path = format!("/ok?q={}", "a".repeat(MAX_URI_BYTES));
        let big_headers = |mut request: Request<Body>| {
            // 20 headers of 53 KB: over 1 MiB together.
            for i in 0..20 {
                let value = "v".repeat(53 * 1000);
                request.headers_mut().insert(
                    axum::http::HeaderName::try_from(format!("x-big-{i}")).unwrap(),
                    value.parse().unwrap(),
                );
            }
            request
        };
        let mut one = http1::<Body>(address).await;
        let (code, body) = read(one.send_request(request(&long_path)).await.unwrap()).await;
        assert_eq!(code, StatusCode::URI_TOO_LONG);
        let status = status_of(&body);
        assert_eq!(
            (
                status["kind"].as_str(),
                status["code"].as_u64(),
                status["reason"].as_str()
            ),
            (Some("Status"), Some(414), Some("RequestURITooLong")),
            "{status}"
        );
        assert_eq!(
            status["message"],
            format!(
                "the request URI is {} bytes long; the API server reads at most 32768",
                long_path.len()
            )
        );
        // Past hyper's own limits (a 65 534-byte target, 2 048 fields, its
        // buffer): its answers carry a Status too.
        for (line, extra, code, reason) in [
            (
                format!("GET /ok?q={} HTTP/1.1", "a".repeat(70_000)),
                String::new(),
                414,
                "RequestURITooLong",
            ),
            (
                "GET /ok HTTP/1.1".to_string(),
                (0..3000)
                    .map(|i| format!("x-f{i}: v\r\n"))
                    .collect::<String>(),
                431,
                "RequestHeaderFieldsTooLarge",
            ),
            (
                "GET /ok HTTP/1.1".to_string(),
                format!("x-big: {}\r\n", "v".repeat(1_200_000)),
                431,
                "RequestHeaderFieldsTooLarge",
            ),
            (
                "GET /ok HTTP/9.9".to_string(),
                String::new(),
                400,
                "BadRequest",
            ),
        ] {
            let mut raw = tokio::net::TcpStream::connect(address).await.unwrap();
            let head = format!("{line}\r\nhost: x\r\n{extra}\r\n");
            let _ = tokio::io::AsyncWriteExt::write_all(&mut raw, head.as_bytes()).await;
            let mut answer = Vec::new();
            let _ = tokio::io::AsyncReadExt::read_to_end(&mut raw, &mut answer).await;
            let answer = String::from_utf8_lossy(&answer);
            assert!(answer.starts_with(&format!("HTTP/1.1 {code} ")), "{answer}");
            let body = answer
                .split_once("\r\n\r\n")
                .map(|(_, b)| b)
                .unwrap_or_default();
            let status: serde_json::Value =
                serde_json::from_str(body).unwrap_or_else(|e| panic!("{code}: {e}: {answer}"));
            assert_eq!(
                (
                    status["kind"].as_str(),
                    status["code"].as_u64(),
                    status["reason"].as_str()
                ),
                (Some("Status"), Some(code), Some(reason)),
                "{answer}"
            );
        }

        let mut one = http1::<Body>(address).await;
        let (code, body) = read(one.send_request(big_headers(request("/ok"))).await.unwrap()).await;
        assert_eq!(code, StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE);
        let status = status_of(&body);
        assert_eq!(
            (status["code"].as_u64(), status["reason"].as_str()),
            (Some(431), Some("RequestHeaderFieldsTooLarge")),
            "{status}"
        );
        let message = status["message"].as_str().unwrap_or_default();
        assert!(
            message.starts_with("the request's line and headers are 10")
                && message.ends_with(" bytes long; the API server reads at most 1048576"),
            "{message}"
        );
        // A head within the limits is served on a new connection, also
        // with more fields than hyper's default of 100.
        let mut one = http1::<Body>(address).await;
        let (code, _) = read(one.send_request(request("/ok?q=short")).await.unwrap()).await;
        assert_eq!(code, StatusCode::OK);
        let mut many = request("/ok");
        for i in 0..500 {
            many.headers_mut().insert(
                axum::http::HeaderName::try_from(format!("x-field-{i}")).unwrap(),
                "v".parse().unwrap(),
            );
        }
        let (code, _) = read(one.send_request(many).await.unwrap()).await;
        assert_eq!(code, StatusCode::OK);

        let mut two = http2(address).await;
        let uri = format!("http://{address}{long_path}");
        let (code, body) = read(two.send_request(request(&uri)).await.unwrap()).await;
        assert_eq!(code, StatusCode::URI_TOO_LONG);
        assert_eq!(status_of(&body)["reason"], "RequestURITooLong");
        let uri = format!("http://{address}/ok");
        let (code, body) = read(two.send_request(big_headers(request(&uri))).await.unwrap()).await;
        assert_eq!(code, StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE);
        assert_eq!(status_of(&body)["reason"], "RequestHeaderFieldsTooLarge");
        let (code, _) = read(two.send_request(request(&uri)).await.unwrap()).await;
        assert_eq!(code, StatusCode::OK);
    }
}
