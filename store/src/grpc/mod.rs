//! etcd's v3 gRPC API over the store, so that `etcdctl` and every etcd
//! client work against skiff. Only translation lives here (protobuf ↔
//! `api`, `StoreError` → status): what a request does is the store's call.
//!
//! ```no_run
//! # async fn run(store: skiff_store::Store) -> Result<(), Box<dyn std::error::Error>> {
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:2379").await?;
//! let listeners = vec![skiff_store::grpc::ClientListener::plain(listener)];
//! skiff_store::grpc::serve(store, listeners, async {
//!     let _ = tokio::signal::ctrl_c().await;
//! })
//! .await?;
//! # Ok(())
//! # }
//! ```

mod cluster;
mod codec;
mod convert;
/// The fuzz targets' bodies (`fuzz/`), replayed by a stable test.
#[doc(hidden)]
pub mod fuzzing;
mod http;
mod kv;
mod learner;
mod lease;
mod maintenance;
mod status;
mod watch;

#[cfg(test)]
mod tests;

use std::future::Future;

use tokio::sync::watch as signal;
use tokio_stream::StreamExt;

use crate::Store;

/// The generated protobuf messages, servers and clients of etcd's v3 API
/// (`pb::etcdserverpb::kv_client::KvClient` and so on).
pub mod pb {
    /// Keys, values and events (etcd's `mvccpb`).
    #[allow(clippy::all, clippy::pedantic, missing_docs)]
    pub mod mvccpb {
        tonic::include_proto!("mvccpb");
    }
    /// Auth records (etcd's `authpb`); no Auth service is served.
    #[allow(clippy::all, clippy::pedantic, missing_docs)]
    pub mod authpb {
        tonic::include_proto!("authpb");
    }
    /// Requests, responses and the KV, Watch, Lease, Cluster and
    /// Maintenance services (etcd's `etcdserverpb`).
    #[allow(clippy::all, clippy::pedantic, missing_docs)]
    pub mod etcdserverpb {
        tonic::include_proto!("etcdserverpb");
    }
}

/// What etcd accepts on top of `--max-request-bytes` for a gRPC message's
/// own framing and fields (etcd's `grpcOverheadBytes`).
pub const GRPC_OVERHEAD_BYTES: usize = 512 * 1024;

/// The etcd version skiff reports in `Status`: the API it speaks.
pub const ETCD_VERSION: &str = "3.5.0";

/// etcd's `--grpc-keepalive-interval` and `--grpc-keepalive-timeout`.
const KEEPALIVE_INTERVAL: std::time::Duration = std::time::Duration::from_secs(2 * 60 * 60);
const KEEPALIVE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(20);
/// How long a client's TLS handshake may take.
const TLS_HANDSHAKE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Where clients connect: a listener, and the TLS it serves (`None`:
/// plain HTTP/2).
pub struct ClientListener {
    pub listener: tokio::net::TcpListener,
    pub tls: Option<tonic::transport::ServerTlsConfig>,
}

impl ClientListener {
    pub fn plain(listener: tokio::net::TcpListener) -> ClientListener {
        ClientListener {
            listener,
            tls: None,
        }
    }
}

/// Serves etcd's v3 API for `store` on every listener until `shutdown`
/// resolves.
pub async fn serve(
    store: Store,
    listeners: Vec<ClientListener>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), tonic::transport::Error> {
    let (stop_tx, stop_rx) = signal::channel(false);
    let stopping = Stopping(stop_rx);
    // Watch and keep-alive streams never end by themselves: they are told
    // to, or the graceful shutdown would wait for them forever.
    tokio::spawn(async move {
        shutdown.await;
        stop_tx.send_replace(true);
    });
    let servers = listeners
        .into_iter()
        .map(|listener| serve_one(store.clone(), listener, stopping.clone()));
    futures::future::try_join_all(servers).await?;
    Ok(())
}

async fn serve_one(
    store: Store,
    client: ClientListener,
    stopping: Stopping,
) -> Result<(), tonic::transport::Error> {
    use pb::etcdserverpb::{
        cluster_server::ClusterServer, kv_server::KvServer, lease_server::LeaseServer,
        maintenance_server::MaintenanceServer, watch_server::WatchServer,
    };

    let max_receive = store.config().max_request_bytes + GRPC_OVERHEAD_BYTES;
    let incoming = tokio_stream::wrappers::TcpListenerStream::new(client.listener).map(|conn| {
        conn.inspect(|stream| {
            // Small responses (watch events, keep-alives) go out at once.
            let _ = stream.set_nodelay(true);
        })
    });
    macro_rules! limited {
        ($server:expr) => {
            $server
                .max_decoding_message_size(max_receive)
                .max_encoding_message_size(usize::MAX)
        };
    }
    let mut builder = tonic::transport::Server::builder();
    if let Some(tls) = client.tls {
        builder = builder.tls_config(tls.timeout(TLS_HANDSHAKE_TIMEOUT))?;
    }
    let routes =
        tonic::service::Routes::new(limited!(KvServer::new(kv::KvService::new(store.clone()))))
            .add_service(limited!(WatchServer::new(watch::WatchService::new(
                store.clone(),
                stopping.clone()
            ))))
            .add_service(limited!(LeaseServer::new(lease::LeaseService::new(
                store.clone(),
                stopping.clone()
            ))))
            .add_service(limited!(ClusterServer::new(cluster::ClusterService::new(
                store.clone()
            ))))
            .add_service(limited!(MaintenanceServer::new(
                maintenance::MaintenanceService::new(store.clone())
            )));
    let routes = learner::refuse_on_learners(routes, store.clone());
    let routes = http::with_http_endpoints(routes, store);
    let mut stopped = stopping;
    builder
        // etcd serves HTTP/1.1 (health, version, metrics) beside gRPC.
        .accept_http1(true)
        // etcd's defaults: a client silent this long is pinged, and its
        // connection (with its watches) dropped if it does not answer.
        .http2_keepalive_interval(Some(KEEPALIVE_INTERVAL))
        .http2_keepalive_timeout(Some(KEEPALIVE_TIMEOUT))
        .layer(tower::util::MapResponseLayer::new(
            status::over_receive_limit_in_headers
                as fn(
                    tonic::codegen::http::Response<tonic::body::Body>,
                ) -> tonic::codegen::http::Response<tonic::body::Body>,
        ))
        .add_routes(routes)
        .serve_with_incoming_shutdown(incoming, async move { stopped.wait().await })
        .await
}

/// Tells long-lived streams that the server is shutting down.
#[derive(Clone)]
pub(crate) struct Stopping(signal::Receiver<bool>);

impl Stopping {
    /// Resolves once the server is shutting down.
    pub(crate) async fn wait(&mut self) {
        // An error means the server is gone: stopping too.
        let _ = self.0.wait_for(|&stopping| stopping).await;
    }
}
