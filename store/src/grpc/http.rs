//! etcd's HTTP endpoints on the client port, beside the gRPC API on the
//! same listener (plain or TLS): `/health`, `/livez`, `/readyz`,
//! `/version` and `/metrics`. Requests that are not gRPC reach these
//! routes; everything under a gRPC service path stays gRPC's.

use std::time::Duration;

use axum::extract::{Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use crate::api::RangeRequest;
use crate::Store;

/// How long a health check's read may take (etcd: about a second).
const HEALTH_TIMEOUT: Duration = Duration::from_secs(2);

/// Adds the HTTP endpoints to the gRPC `routes`.
pub(crate) fn with_http_endpoints(
    mut routes: tonic::service::Routes,
    store: Store,
) -> tonic::service::Routes {
    let endpoints = axum::Router::new()
        .route("/health", get(health))
        .route("/livez", get(livez))
        .route("/readyz", get(readyz))
        .route("/version", get(version))
        .route("/metrics", get(metrics))
        .with_state(store);
    let grpc = std::mem::take(routes.axum_router_mut());
    *routes.axum_router_mut() = grpc.merge(endpoints).fallback(unknown_path);
    routes
}

/// A path nobody serves: gRPC's Unimplemented for a gRPC call, HTTP's 404
/// for anything else, as etcd answers.
async fn unknown_path(request: axum::extract::Request) -> Response {
    let grpc = request
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|t| t.as_bytes().starts_with(b"application/grpc"));
    if grpc {
        return tonic::Status::unimplemented("unknown service").into_http();
    }
    (StatusCode::NOT_FOUND, "404 page not found\n").into_response()
}

#[derive(serde::Deserialize)]
struct HealthQuery {
    #[serde(default)]
    serializable: bool,
}

/// etcd's `/health`: a leader is known and a read of the `health` key
/// goes through (linearizable unless `?serializable=true`).
async fn health(State(store): State<Store>, Query(query): Query<HealthQuery>) -> Response {
    let serializable = query.serializable;
    let verdict = match check_read(&store, serializable).await {
        Ok(()) => (StatusCode::OK, "true", String::new()),
        Err(reason) => (StatusCode::SERVICE_UNAVAILABLE, "false", reason),
    };
    let body = serde_json::json!({ "health": verdict.1, "reason": verdict.2 });
    (
        verdict.0,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// etcd's `/livez`: the member serves reads from its own state.
async fn livez(State(store): State<Store>) -> Response {
    probe(check_read(&store, true).await, "livez")
}

/// etcd's `/readyz`: a leader is known and a linearizable read goes
/// through.
async fn readyz(State(store): State<Store>) -> Response {
    probe(check_read(&store, false).await, "readyz")
}

fn probe(result: Result<(), String>, what: &str) -> Response {
    match result {
        Ok(()) => (StatusCode::OK, "ok\n").into_response(),
        Err(reason) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("{what} check failed: {reason}\n"),
        )
            .into_response(),
    }
}

async fn check_read(store: &Store, serializable: bool) -> Result<(), String> {
    if !serializable && store.leader_id() == 0 {
        return Err("RAFT NO LEADER".into());
    }
    let read = store.range(RangeRequest {
        serializable,
        ..RangeRequest::key("health")
    });
    match tokio::time::timeout(HEALTH_TIMEOUT, read).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(err)) => Err(format!("QGET ERROR:{err}")),
        Err(_) => Err("QGET ERROR:etcdserver: request timed out".into()),
    }
}

/// etcd's `/version`: the server's version and the cluster's (major.minor.0).
async fn version() -> Response {
    let cluster = match super::ETCD_VERSION.rsplit_once('.') {
        Some((major_minor, _)) => format!("{major_minor}.0"),
        None => super::ETCD_VERSION.to_string(),
    };
    let body = serde_json::json!({
        "etcdserver": super::ETCD_VERSION,
        "etcdcluster": cluster,
    });
    (
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

async fn metrics(State(store): State<Store>) -> Response {
    (
        [(header::CONTENT_TYPE, crate::metrics::CONTENT_TYPE)],
        crate::metrics::render(&store),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use crate::grpc::pb::etcdserverpb::{kv_client::KvClient, RangeRequest};

    /// `GET path` over HTTP/1.1 on a connection of its own: status and body.
    pub(super) async fn get(addr: SocketAddr, path: &str) -> (u16, String) {
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await.unwrap();
        let status = answer
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("no status in {answer:?}"));
        let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
        // Bodies come chunked or with a length; decode the chunked ones.
        let body = if head
            .to_ascii_lowercase()
            .contains("transfer-encoding: chunked")
        {
            let mut out = String::new();
            let mut rest = body;
            while let Some((size, tail)) = rest.split_once("\r\n") {
                let size = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
                if size == 0 {
                    break;
                }
                out.push_str(&tail[..size]);
                rest = &tail[size + 2..];
            }
            out
        } else {
            body.to_string()
        };
        (status, body)
    }

    #[tokio::test]
    async fn http_endpoints_share_the_port_with_grpc() {
        let (store, _dir) = crate::node::testing::open_temp().await;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let serving = tokio::spawn(crate::grpc::serve(
            store.clone(),
            vec![crate::grpc::ClientListener::plain(listener)],
            async {
                let _ = stopped.await;
            },
        ));
        crate::node::testing::put(&store, "k", "v").await;

        assert_eq!(
            get(addr, "/health").await,
            (200, r#"{"health":"true","reason":""}"#.to_string())
        );
        assert_eq!(get(addr, "/health?serializable=true").await.0, 200);
        assert_eq!(get(addr, "/livez").await, (200, "ok\n".to_string()));
        assert_eq!(get(addr, "/readyz").await, (200, "ok\n".to_string()));
        assert_eq!(
            get(addr, "/version").await,
            (
                200,
                r#"{"etcdcluster":"3.5.0","etcdserver":"3.5.0"}"#.to_string()
            )
        );
        let (status, metrics) = get(addr, "/metrics").await;
        assert_eq!(status, 200);
        assert!(
            metrics.contains("\netcd_server_has_leader 1\n"),
            "{metrics}"
        );
        assert!(
            metrics.contains("\netcd_debugging_mvcc_keys_total 1\n"),
            "{metrics}"
        );
        assert_eq!(get(addr, "/no-such-page").await.0, 404);

        // gRPC on the same port, still.
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
            .unwrap()
            .connect()
            .await
            .unwrap();
        let read = KvClient::new(channel)
            .range(RangeRequest {
                key: b"k".to_vec(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(read.kvs[0].value, b"v");

        let _ = stop.send(());
        serving.await.unwrap().unwrap();
        store.close().await.unwrap();
    }
}

#[cfg(test)]
mod no_leader_tests {
    use std::net::{SocketAddr, TcpListener};

    use crate::node::testing::test_config;
    use crate::{ClusterConfig, Store};

    fn free_addr() -> SocketAddr {
        TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
    }

    #[tokio::test]
    async fn without_a_leader_health_is_false_and_unready() {
        // One of three founding members, alone: it never learns a leader.
        let dir = tempfile::tempdir().unwrap();
        let initial: Vec<(String, SocketAddr)> =
            (1..=3).map(|i| (format!("n{i}"), free_addr())).collect();
        let mut config = test_config(dir.path());
        config.cluster = Some(ClusterConfig {
            name: "n1".into(),
            peer_listen: initial[0].1,
            initial_cluster: initial,
            initial_cluster_state: Default::default(),
            initial_cluster_token: String::new(),
        });
        let store = Store::open(config).await.unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let serving = tokio::spawn(crate::grpc::serve(
            store.clone(),
            vec![crate::grpc::ClientListener::plain(listener)],
            async {
                let _ = stopped.await;
            },
        ));
        assert_eq!(
            super::tests::get(addr, "/health").await,
            (
                503,
                r#"{"health":"false","reason":"RAFT NO LEADER"}"#.to_string()
            )
        );
        assert_eq!(super::tests::get(addr, "/readyz").await.0, 503);
        // Its own state still reads: alive, not ready.
        assert_eq!(super::tests::get(addr, "/livez").await.0, 200);
        let metrics = super::tests::get(addr, "/metrics").await.1;
        assert!(
            metrics.contains("\netcd_server_has_leader 0\n"),
            "{metrics}"
        );
        let _ = stop.send(());
        serving.await.unwrap().unwrap();
        store.close().await.unwrap();
    }
}
