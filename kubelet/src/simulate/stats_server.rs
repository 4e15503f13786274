//! The simulation's one plain-HTTP listener for its nodes' usage:
//! `GET /nodes/{node}/stats/summary` answers that node's Summary, and each
//! simulated Node names its URL in an annotation, which the API server
//! follows (for Nodes labelled simulated) instead of a kubelet port.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

use super::usage::SimulatedUsage;

/// Where a simulated Node's Summary is served.
pub const STATS_URL_ANNOTATION: &str = "skiff.dev/simulated-stats-url";

/// The Summary of each simulated node.
pub fn router(usage: Arc<SimulatedUsage>) -> Router {
    Router::new()
        .route("/nodes/{node}/stats/summary", get(node_summary))
        .with_state(usage)
}

async fn node_summary(
    State(usage): State<Arc<SimulatedUsage>>,
    Path(node): Path<String>,
) -> Response {
    match usage.summary(&node, jiff::Timestamp::now()) {
        Some(summary) => axum::Json(summary).into_response(),
        None => (
            StatusCode::NOT_FOUND,
            [(header::CONTENT_TYPE, "text/plain")],
            format!("node {node:?} is not simulated here"),
        )
            .into_response(),
    }
}

/// The host the URLs name: `advertise` if given, else the address the
/// listener is bound to, or loopback when that is any address.
pub fn advertised_host(bound: SocketAddr, advertise: Option<IpAddr>) -> IpAddr {
    match advertise {
        Some(host) => host,
        None if bound.ip().is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        None => bound.ip(),
    }
}

/// `http://HOST:PORT`, with an IPv6 host in brackets.
pub fn base_url(host: IpAddr, port: u16) -> String {
    format!("http://{}", SocketAddr::new(host, port))
}

/// The Summary URL of `node` under `base`.
pub fn node_url(base: &str, node: &str) -> String {
    format!("{base}/nodes/{node}/stats/summary")
}

#[cfg(test)]
mod tests {
    use super::*;
    use tower::ServiceExt;

    #[test]
    fn urls_name_the_advertised_host() {
        let any: SocketAddr = "0.0.0.0:4000".parse().unwrap();
        let bound: SocketAddr = "10.1.2.3:4000".parse().unwrap();
        assert_eq!(advertised_host(any, None), IpAddr::V4(Ipv4Addr::LOCALHOST));
        assert_eq!(advertised_host(bound, None), bound.ip());
        let given: IpAddr = "192.0.2.9".parse().unwrap();
        assert_eq!(advertised_host(any, Some(given)), given);
        let v6 = base_url("fd00::1".parse().unwrap(), 80);
        assert_eq!(
            node_url(&v6, "sim-1"),
            "http://[fd00::1]:80/nodes/sim-1/stats/summary"
        );
    }

    #[tokio::test]
    async fn each_simulated_node_answers_its_summary() {
        let usage = Arc::new(SimulatedUsage::new(
            ["sim-0"],
            Some(1 << 30),
            jiff::Timestamp::now() - jiff::SignedDuration::from_secs(60),
        ));
        let app = router(usage);
        let get = |uri: &str| {
            axum::http::Request::get(uri)
                .body(axum::body::Body::empty())
                .unwrap()
        };
        let answer = app
            .clone()
            .oneshot(get("/nodes/sim-0/stats/summary"))
            .await
            .unwrap();
        assert_eq!(answer.status(), StatusCode::OK);
        let body = axum::body::to_bytes(answer.into_body(), 1 << 20)
            .await
            .unwrap();
        let summary: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(summary["node"]["nodeName"], "sim-0");
        assert!(summary["node"]["cpu"]["usageNanoCores"].as_u64().unwrap() > 0);
        assert_eq!(summary["pods"], serde_json::json!([]));
        let missing = app
            .oneshot(get("/nodes/other/stats/summary"))
            .await
            .unwrap();
        assert_eq!(missing.status(), StatusCode::NOT_FOUND);
    }
}
