//! Accepting connections for the REST API: HTTPS (TLS with an optional
//! client certificate, which names the user), or plain HTTP on the
//! loopback port an operator asks for. HTTP/1.1, and HTTP/2 (by ALPN, or
//! with prior knowledge on plain HTTP) so one client can multiplex its
//! watches on one connection, up to 1000 streams per connection as
//! kube-apiserver allows.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tower::ServiceExt;

use crate::authn::Transport;
use crate::coalesce::Coalescing;

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
                if sends_h2_preface(&stream).await {
                    serve_h2(watcher, Coalescing::new(stream), router, peer, transport);
                } else {
                    serve_connection(watcher, stream, router, peer, transport);
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
                serve_h2(watcher, Coalescing::new(stream), router, peer, transport);
            } else {
                serve_connection(watcher, stream, router, peer, transport);
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
fn builder<E>(executor: E) -> auto::Builder<E> {
    let mut builder = auto::Builder::new(executor);
    builder
        .http2()
        .max_concurrent_streams(MAX_STREAMS_PER_CONNECTION);
    builder
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
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = TowerToHyperService::new(tower::service_fn(
        move |mut request: axum::extract::Request<hyper::body::Incoming>| {
            mark(&mut request, peer, &transport);
            router.clone().oneshot(request)
        },
    ));
    let connection = builder(TokioExecutor::new())
        .serve_connection_with_upgrades(TokioIo::new(stream), service)
        .into_owned();
    let connection = graceful.watch(connection);
    tokio::spawn(async move {
        if let Err(err) = connection.await {
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
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = TowerToHyperService::new(tower::service_fn(
        move |mut request: axum::extract::Request<hyper::body::Incoming>| {
            mark(&mut request, peer, &transport);
            // hyper drops this future when the client resets the stream;
            // the handler then stops too, as it would in the stream's task.
            let handler =
                crate::abort_on_drop::AbortOnDrop(tokio::spawn(router.clone().oneshot(request)));
            async move {
                let mut handler = handler;
                match (&mut handler.0).await {
                    Ok(response) => response,
                    Err(err) => {
                        use axum::response::IntoResponse;
                        tracing::error!(error = %err, "an API request's handler failed");
                        Ok(crate::status::ApiError::internal(
                            "the request's handler failed; see the API server's log".to_string(),
                        )
                        .into_response())
                    }
                }
            }
        },
    ));
    let (executor, spawned) = crate::h2_streams::executor();
    let connection = builder(executor)
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
/// that sends nothing within the handshake timeout is served as HTTP/1.1,
/// whose own timeouts then apply.
async fn sends_h2_preface(stream: &tokio::net::TcpStream) -> bool {
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
    tokio::time::timeout(HANDSHAKE_TIMEOUT, look)
        .await
        .unwrap_or(false)
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
                    use axum::response::IntoResponse;
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
