//! Reaching a node's kubelet from the API server, as kube-apiserver does
//! for `pods/log`, `pods/exec`, `pods/attach` and `pods/portforward`: the
//! node's preferred address and advertised port, an HTTP/1.1 connection
//! (over TLS with the API server's kubelet client certificate when it has
//! one) that may be upgraded, and the kubelet's refusals as a Status.

use std::time::Duration;

use hyper::body::Body as HttpBody;
use hyper::client::conn::http1::SendRequest;
use hyper::StatusCode;
use hyper_util::rt::TokioIo;
use serde_json::Value;

use crate::registry::{Registry, Target};
use crate::resources;
use crate::status::ApiError;

/// Connecting to a kubelet.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// The kubelet's port when the Node does not say.
const DEFAULT_KUBELET_PORT: i64 = 10250;

/// `host:port` of the kubelet of `node`; `doing` says what for, in the
/// error when the node is not registered or has no address.
pub async fn authority_of(
    registry: &Registry,
    node: &str,
    doing: &str,
) -> Result<String, ApiError> {
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
                "cannot {doing}: its node \"{node}\" is not registered"
            ))
        })?;
    if node_object["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"] == 0 {
        // A simulated node: nothing of it listens.
        return Err(ApiError::bad_request(format!(
            "cannot {doing}: node \"{node}\" runs no kubelet to stream from (it advertises kubelet port 0)"
        )));
    }
    node_authority(&node_object).ok_or_else(|| {
        ApiError::unavailable(format!("cannot {doing}: node \"{node}\" has no address"))
    })
}

/// An HTTP/1.1 connection to the kubelet at `authority`, driven by a task
/// of its own, which may be upgraded; `url` names the request in errors,
/// as Go's client words them.
pub async fn connect<B>(
    authority: &str,
    tls: Option<&std::sync::Arc<rustls::ClientConfig>>,
    url: &str,
) -> Result<SendRequest<B>, ApiError>
where
    B: HttpBody + Send + Unpin + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let method = "Get";
    let unreachable =
        |err: &dyn std::fmt::Display| ApiError::internal(format!("{method} \"{url}\": {err}"));
    let stream = tokio::time::timeout(CONNECT_TIMEOUT, tokio::net::TcpStream::connect(authority))
        .await
        .map_err(|_| unreachable(&"dial tcp: i/o timeout"))?
        .map_err(|err| unreachable(&format!("dial tcp {authority}: {err}")))?;
    let _ = stream.set_nodelay(true);
    match tls {
        None => handshake(stream).await.map_err(|err| unreachable(&err)),
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
            handshake(stream).await.map_err(|err| unreachable(&err))
        }
    }
}

async fn handshake<T, B>(io: T) -> Result<SendRequest<B>, hyper::Error>
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    B: HttpBody + Send + Unpin + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(io)).await?;
    tokio::spawn(connection.with_upgrades());
    Ok(sender)
}

/// `host:port` of the node's kubelet: its first address by kube-apiserver's
/// preference of address types, and its advertised port.
pub fn node_authority(node: &Value) -> Option<String> {
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

/// The kubelet's answer `response`, a refusal, as the Status
/// kube-apiserver would answer: its code, and its (plain text) words.
pub async fn refusal(response: hyper::Response<hyper::body::Incoming>) -> ApiError {
    use http_body_util::BodyExt;
    let status = response.status();
    let body = response
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    error(status, String::from_utf8_lossy(&body).trim().to_string())
}

/// A kubelet's refusal as the Status kube-apiserver would answer.
pub fn error(status: StatusCode, message: String) -> ApiError {
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
pub fn encode(text: &str) -> String {
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

    #[test]
    fn the_kubelet_is_reached_at_the_nodes_preferred_address_and_port() {
        let node = json!({"status": {
            "addresses": [
                {"type": "Hostname", "address": "box"},
                {"type": "InternalIP", "address": "10.0.0.7"}
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10300}}
        }});
        assert_eq!(node_authority(&node).unwrap(), "10.0.0.7:10300");
        let bare = json!({"status": {"addresses": [{"type": "Hostname", "address": "box"}]}});
        assert_eq!(node_authority(&bare).unwrap(), "box:10250");
        let v6 = json!({"status": {"addresses": [{"type": "InternalIP", "address": "::1"}]}});
        assert_eq!(node_authority(&v6).unwrap(), "[::1]:10250");
        assert!(node_authority(&json!({"status": {}})).is_none());
    }

    #[test]
    fn path_segments_are_percent_encoded() {
        assert_eq!(encode("a b/c"), "a%20b%2Fc");
        assert_eq!(encode("2026-01-02T03:04:05Z"), "2026-01-02T03:04:05Z");
    }
}
