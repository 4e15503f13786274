//! `pods/log`: the pod's container is found here, its log is streamed from
//! the kubelet of the pod's node (`GET /containerLogs/{ns}/{pod}/{container}`
//! on the port the Node advertises), as kube-apiserver does.

use std::collections::HashMap;
use std::time::Duration;

use axum::body::Body;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::{header, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::Value;

use crate::registry::{Registry, Target};
use crate::resources;
use crate::status::{ApiError, ApiResult, Cause};

/// Connecting to a kubelet.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// The kubelet's port when the Node does not say.
const DEFAULT_KUBELET_PORT: i64 = 10250;

/// The query parameters of `pods/log` passed on to the kubelet, checked
/// first as kube-apiserver validates PodLogOptions.
const FORWARDED: [&str; 7] = [
    "follow",
    "previous",
    "timestamps",
    "sinceSeconds",
    "sinceTime",
    "tailLines",
    "limitBytes",
];

/// GET pods/NAME/log.
pub async fn logs(
    registry: &Registry,
    target: &Target<'_>,
    name: &str,
    query: &HashMap<String, String>,
) -> ApiResult<Response> {
    let options = log_options(name, query)?;
    let pod = registry.get(target, name).await?;
    let container = container_of(&pod, name, query.get("container").map(String::as_str))?;
    let Some(node) = pod["spec"]["nodeName"].as_str().filter(|n| !n.is_empty()) else {
        return Err(ApiError::bad_request(format!(
            "container \"{container}\" in pod \"{name}\" is waiting to start: the pod is not scheduled to a node"
        )));
    };
    let nodes = resources::find("", "v1", "nodes").expect("nodes are served");
    let node_object = registry
        .get(
            &Target {
                resource: nodes,
                namespace: None,
            },
            node,
        )
        .await
        .map_err(|_| {
            ApiError::unavailable(format!(
                "cannot get the logs of pod \"{name}\": its node \"{node}\" is not registered"
            ))
        })?;
    let authority = kubelet_authority(&node_object).ok_or_else(|| {
        ApiError::unavailable(format!(
            "cannot get the logs of pod \"{name}\": node \"{node}\" has no address"
        ))
    })?;
    let namespace = target.namespace.unwrap_or("default");
    let path = format!(
        "/containerLogs/{}/{}/{}{}",
        encode(namespace),
        encode(name),
        encode(&container),
        options
    );
    stream_from(&authority, &path, registry.kubelet_client()).await
}

/// The container whose log is asked for: the one named, or the pod's only
/// container.
fn container_of(pod: &Value, name: &str, container: Option<&str>) -> ApiResult<String> {
    let names: Vec<&str> = ["containers", "initContainers", "ephemeralContainers"]
        .iter()
        .flat_map(|list| pod["spec"][*list].as_array().into_iter().flatten())
        .filter_map(|c| c["name"].as_str())
        .collect();
    let regular = pod["spec"]["containers"]
        .as_array()
        .map(Vec::len)
        .unwrap_or(0);
    match container.filter(|c| !c.is_empty()) {
        Some(c) if names.contains(&c) => Ok(c.to_string()),
        Some(c) => Err(ApiError::bad_request(format!(
            "container {c} is not valid for pod {name}"
        ))),
        None if regular == 1 => Ok(names[0].to_string()),
        None => Err(ApiError::bad_request(format!(
            "a container name must be specified for pod {name}, choose one of: [{}]",
            names.join(" ")
        ))),
    }
}

/// The forwarded query string (with its `?`), after checking each value.
fn log_options(name: &str, query: &HashMap<String, String>) -> ApiResult<String> {
    let mut causes = Vec::new();
    let mut invalid = |field: &str, value: &str, message: &str| {
        causes.push(Cause {
            reason: "FieldValueInvalid",
            message: format!("Invalid value: \"{value}\": {message}"),
            field: field.to_string(),
        });
    };
    for flag in ["follow", "previous", "timestamps"] {
        if let Some(value) = query.get(flag) {
            if !matches!(
                value.as_str(),
                "" | "true" | "false" | "1" | "0" | "True" | "False"
            ) {
                invalid(flag, value, "must be a boolean");
            }
        }
    }
    for (field, minimum) in [("sinceSeconds", 1), ("tailLines", 0), ("limitBytes", 1)] {
        if let Some(value) = query.get(field) {
            match value.parse::<i64>() {
                Ok(n) if n >= minimum => {}
                Ok(_) if minimum == 0 => {
                    invalid(field, value, "must be greater than or equal to 0")
                }
                Ok(_) => invalid(field, value, "must be greater than 0"),
                Err(_) => invalid(field, value, "must be an integer"),
            }
        }
    }
    if let Some(value) = query.get("sinceTime") {
        if value.parse::<jiff::Timestamp>().is_err() {
            invalid("sinceTime", value, "must be an RFC 3339 time");
        }
    }
    if query.contains_key("sinceSeconds") && query.contains_key("sinceTime") {
        causes.push(Cause {
            reason: "FieldValueForbidden",
            message: "Forbidden: at most one of `sinceTime` or `sinceSeconds` may be specified"
                .into(),
            field: "sinceSeconds".into(),
        });
    }
    if !causes.is_empty() {
        return Err(ApiError::invalid("", "PodLogOptions", "pods", name, causes));
    }
    let pairs: Vec<String> = FORWARDED
        .iter()
        .filter_map(|key| {
            query
                .get(*key)
                .map(|value| format!("{key}={}", encode(value)))
        })
        .collect();
    Ok(if pairs.is_empty() {
        String::new()
    } else {
        format!("?{}", pairs.join("&"))
    })
}

/// `host:port` of the node's kubelet: its first address by kube-apiserver's
/// preference of address types, and its advertised port.
fn kubelet_authority(node: &Value) -> Option<String> {
    let addresses = node["status"]["addresses"].as_array()?;
    let host = [
        "InternalIP",
        "ExternalIP",
        "InternalDNS",
        "ExternalDNS",
        "Hostname",
    ]
    .iter()
    .find_map(|kind| {
        addresses
            .iter()
            .find(|a| a["type"] == *kind)
            .and_then(|a| a["address"].as_str())
            .filter(|a| !a.is_empty())
    })?;
    let port = node["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"]
        .as_i64()
        .filter(|p| (1..=65535).contains(p))
        .unwrap_or(DEFAULT_KUBELET_PORT);
    Some(if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    })
}

/// Calls the kubelet and streams its answer back; its errors become a
/// Status with the kubelet's code and words.
async fn stream_from(
    authority: &str,
    path: &str,
    tls: Option<&std::sync::Arc<rustls::ClientConfig>>,
) -> ApiResult<Response> {
    let scheme = if tls.is_some() { "https" } else { "http" };
    let url = format!("{scheme}://{authority}{path}");
    let unreachable =
        |err: &dyn std::fmt::Display| ApiError::internal(format!("Get \"{url}\": {err}"));
    let stream = tokio::time::timeout(CONNECT_TIMEOUT, tokio::net::TcpStream::connect(authority))
        .await
        .map_err(|_| unreachable(&"dial tcp: i/o timeout"))?
        .map_err(|err| unreachable(&format!("dial tcp {authority}: {err}")))?;
    let mut sender = match tls {
        None => handshake(stream).await.map_err(|err| unreachable(&err))?,
        Some(tls) => {
            // The kubelet's certificate is not checked (see the config), so
            // any name does.
            let host = authority
                .rsplit_once(':')
                .map_or(authority, |(host, _)| host);
            let name =
                rustls::pki_types::ServerName::try_from(host.trim_matches(['[', ']']).to_string())
                    .unwrap_or_else(|_| {
                        rustls::pki_types::ServerName::try_from("kubelet").expect("a DNS name")
                    });
            let stream = tokio::time::timeout(
                CONNECT_TIMEOUT,
                tokio_rustls::TlsConnector::from(tls.clone()).connect(name, stream),
            )
            .await
            .map_err(|_| unreachable(&"net/http: TLS handshake timeout"))?
            .map_err(|err| unreachable(&format!("remote error: tls: {err}")))?;
            handshake(stream).await.map_err(|err| unreachable(&err))?
        }
    };
    let request = hyper::Request::get(path)
        .header(header::HOST, authority)
        .body(Empty::<Bytes>::new())
        .map_err(|err| ApiError::internal(format!("building the kubelet request: {err}")))?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|err| unreachable(&err))?;
    let status = response.status();
    if status != StatusCode::OK {
        let body = response
            .into_body()
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        let message = String::from_utf8_lossy(&body).trim().to_string();
        return Err(kubelet_error(status, message));
    }
    let body = Body::new(response.into_body());
    Ok((StatusCode::OK, [(header::CONTENT_TYPE, "text/plain")], body).into_response())
}

/// An HTTP/1.1 connection over `io`, driven by a task of its own.
async fn handshake<T>(
    io: T,
) -> Result<hyper::client::conn::http1::SendRequest<Empty<Bytes>>, hyper::Error>
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(io)).await?;
    tokio::spawn(connection);
    Ok(sender)
}

/// A kubelet's refusal as the Status kube-apiserver would answer.
fn kubelet_error(status: StatusCode, message: String) -> ApiError {
    match status {
        StatusCode::BAD_REQUEST => ApiError::bad_request(message),
        StatusCode::NOT_FOUND => ApiError::new(404, "NotFound", message),
        _ => ApiError::new(
            status.as_u16(),
            "InternalError",
            format!("the kubelet answered {status}: {message}"),
        ),
    }
}

/// Percent-encodes what is not safe in a path segment or query value.
fn encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~' | b':') {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn query(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn log_options_are_forwarded_in_a_fixed_order() {
        let q = query(&[("tailLines", "5"), ("follow", "true"), ("container", "c")]);
        assert_eq!(log_options("p", &q).unwrap(), "?follow=true&tailLines=5");
        assert_eq!(log_options("p", &query(&[])).unwrap(), "");
        let since = query(&[("sinceTime", "2026-01-02T03:04:05Z")]);
        assert_eq!(
            log_options("p", &since).unwrap(),
            "?sinceTime=2026-01-02T03:04:05Z"
        );
    }

    #[test]
    fn bad_log_options_are_invalid_with_the_field_named() {
        for (pairs, field) in [
            (vec![("tailLines", "-1")], "tailLines"),
            (vec![("tailLines", "x")], "tailLines"),
            (vec![("limitBytes", "0")], "limitBytes"),
            (vec![("sinceSeconds", "0")], "sinceSeconds"),
            (vec![("sinceTime", "yesterday")], "sinceTime"),
            (vec![("follow", "yes")], "follow"),
            (
                vec![("sinceSeconds", "5"), ("sinceTime", "2026-01-02T03:04:05Z")],
                "sinceSeconds",
            ),
        ] {
            let err = log_options("p", &query(&pairs)).unwrap_err();
            let status = err.to_status();
            assert_eq!(status["code"], 422, "{pairs:?}");
            assert_eq!(status["details"]["causes"][0]["field"], field, "{pairs:?}");
        }
    }

    #[test]
    fn the_kubelet_is_reached_at_the_nodes_preferred_address_and_port() {
        let node = json!({"status": {
            "addresses": [
                {"type": "Hostname", "address": "box"},
                {"type": "InternalIP", "address": "10.0.0.7"}
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10300}}
        }});
        assert_eq!(kubelet_authority(&node).unwrap(), "10.0.0.7:10300");
        let bare = json!({"status": {"addresses": [{"type": "Hostname", "address": "box"}]}});
        assert_eq!(kubelet_authority(&bare).unwrap(), "box:10250");
        let v6 = json!({"status": {"addresses": [{"type": "InternalIP", "address": "::1"}]}});
        assert_eq!(kubelet_authority(&v6).unwrap(), "[::1]:10250");
        assert!(kubelet_authority(&json!({"status": {}})).is_none());
    }

    #[test]
    fn the_only_container_is_chosen_and_others_must_be_named() {
        let pod = json!({"spec": {
            "initContainers": [{"name": "setup"}],
            "containers": [{"name": "app"}]
        }});
        assert_eq!(container_of(&pod, "p", None).unwrap(), "app");
        assert_eq!(container_of(&pod, "p", Some("setup")).unwrap(), "setup");
        let err = container_of(&pod, "p", Some("nope")).unwrap_err();
        assert_eq!(err.to_status()["code"], 400);
        let two = json!({"spec": {"containers": [{"name": "a"}, {"name": "b"}]}});
        let err = container_of(&two, "p", None).unwrap_err();
        assert!(err.to_status()["message"]
            .as_str()
            .unwrap()
            .contains("choose one of: [a b]"));
    }

    #[test]
    fn path_segments_are_percent_encoded() {
        assert_eq!(encode("a b/c"), "a%20b%2Fc");
        assert_eq!(encode("2026-01-02T03:04:05Z"), "2026-01-02T03:04:05Z");
    }
}
