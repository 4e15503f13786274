//! GET `nodes/NAME/proxy/PATH`: the API server fetches PATH from the
//! node's kubelet (with its kubelet client certificate) and answers what
//! the kubelet answered, status, type and body, as kube-apiserver's node
//! proxy does. What operators read a kubelet's `/metrics`, `/stats/summary`
//! or `/metrics/resource` with (`kubectl get --raw`), with the API's
//! authentication and RBAC (`nodes/proxy`) in front.

use std::collections::HashMap;

use axum::body::Body;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http_body_util::Empty;

use crate::kubelet;
use crate::registry::Registry;
use crate::status::{ApiError, ApiResult};

/// The kubelet path of `rest` (the segments after `proxy`) with `query`
/// (its pairs in a fixed order, each escaped).
pub fn kubelet_path(rest: &[String], query: &HashMap<String, String>) -> String {
    let mut path = String::from("/");
    path.push_str(
        &rest
            .iter()
            .map(|segment| kubelet::encode(segment))
            .collect::<Vec<_>>()
            .join("/"),
    );
    let mut pairs: Vec<_> = query.iter().collect();
    pairs.sort();
    if !pairs.is_empty() {
        path.push('?');
        path.push_str(
            &pairs
                .iter()
                .map(|(k, v)| format!("{}={}", kubelet::encode(k), kubelet::encode(v)))
                .collect::<Vec<_>>()
                .join("&"),
        );
    }
    path
}

/// GET `nodes/node/proxy/rest…`.
pub async fn get(
    registry: &Registry,
    node: &str,
    rest: &[String],
    query: &HashMap<String, String>,
) -> ApiResult<Response> {
    let authority = kubelet::authority_of(registry, node, "proxy to the node").await?;
    let path = kubelet_path(rest, query);
    let tls = registry.kubelet_client();
    let scheme = if tls.is_some() { "https" } else { "http" };
    let url = format!("{scheme}://{authority}{path}");
    let mut sender = kubelet::connect::<Empty<Bytes>>(&authority, tls, &url).await?;
    let request = hyper::Request::get(&path)
        .header(header::HOST, &authority)
        .body(Empty::<Bytes>::new())
        .map_err(|err| ApiError::internal(format!("building the kubelet request: {err}")))?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|err| ApiError::internal(format!("Get \"{url}\": {err}")))?;
    let status = StatusCode::from_u16(response.status().as_u16())
        .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let content_type = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("text/plain")
        .to_string();
    let body = Body::new(response.into_body());
    Ok((status, [(header::CONTENT_TYPE, content_type)], body).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kubelet_path_is_the_rest_with_its_query_escaped() {
        let rest = ["metrics".to_string(), "resource".to_string()];
        assert_eq!(kubelet_path(&rest, &HashMap::new()), "/metrics/resource");
        let query = HashMap::from([
            ("b".to_string(), "x y".to_string()),
            ("a".to_string(), "1".to_string()),
        ]);
        assert_eq!(
            kubelet_path(&["stats".to_string(), "summary".to_string()], &query),
            "/stats/summary?a=1&b=x%20y"
        );
        assert_eq!(kubelet_path(&[], &HashMap::new()), "/");
        // A segment cannot climb out of the path.
        assert_eq!(
            kubelet_path(&["a/../b".to_string()], &HashMap::new()),
            "/a%2F..%2Fb"
        );
    }
}
