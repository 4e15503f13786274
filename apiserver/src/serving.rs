//! Accepting connections for the REST API: HTTP/1.1, and HTTP/2 with prior
//! knowledge so one client can multiplex its watches on one connection, up
//! to 1000 streams per connection as kube-apiserver allows. Not TLS.

use std::future::Future;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tower::ServiceExt;

/// kube-apiserver's default `--http2-max-streams-per-connection`.
pub const MAX_STREAMS_PER_CONNECTION: u32 = 1000;
/// Pause after an accept error (e.g. too many open files) before retrying.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);
/// How long a graceful stop waits for requests in flight.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// Serves `router` on `listener` until `shutdown` resolves, then stops
/// accepting and waits (up to 10 s) for the connections' requests in
/// flight.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    shutdown: impl Future<Output = ()> + Send,
) -> std::io::Result<()> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http2()
        .max_concurrent_streams(MAX_STREAMS_PER_CONNECTION);
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
        // Each request carries the connection's remote address, for the
        // per-client limits.
        let router = router.clone();
        let service = TowerToHyperService::new(tower::service_fn(
            move |mut request: axum::extract::Request<hyper::body::Incoming>| {
                request.extensions_mut().insert(crate::limits::Peer(peer));
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
    drop(listener);
    if tokio::time::timeout(DRAIN_TIMEOUT, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("API connections still busy after {DRAIN_TIMEOUT:?}; stopping anyway");
    }
    Ok(())
}
