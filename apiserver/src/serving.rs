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
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http2()
        .max_concurrent_streams(MAX_STREAMS_PER_CONNECTION);
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
        let builder = builder.clone();
        let watcher = graceful.watcher();
        let Some(acceptor) = acceptor.clone() else {
            // Which protocol is known from the first bytes: the task
            // waits for them, not the accept loop.
            tokio::spawn(async move {
                let transport = Transport::Insecure;
                if sends_h2_preface(&stream).await {
                    let stream = Coalescing::new(stream);
                    serve_connection(&builder, watcher, stream, router, peer, transport);
                } else {
                    serve_connection(&builder, watcher, stream, router, peer, transport);
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
                serve_connection(&builder, watcher, stream, router, peer, transport);
            } else {
                serve_connection(&builder, watcher, stream, router, peer, transport);
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

/// Serves one connection in its own task; each request carries the
/// connection's remote address (for the per-client limits) and how it
/// came (for authentication).
fn serve_connection<S>(
    builder: &auto::Builder<TokioExecutor>,
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
            request.extensions_mut().insert(crate::limits::Peer(peer));
            request.extensions_mut().insert(transport.clone());
            router.clone().oneshot(request)
        },
    ));
    let connection = builder
        .serve_connection_with_upgrades(TokioIo::new(stream), service)
        .into_owned();
    let connection = graceful.watch(connection);
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
