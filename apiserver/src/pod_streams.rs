//! `pods/exec`, `pods/attach` and `pods/portforward`: connections into a
//! pod, proxied to the kubelet of its node as kube-apiserver proxies them.
//! The client's upgrade request (WebSocket or SPDY/3.1, GET or POST) is
//! checked here (the pod, its container, its node), sent on to the
//! kubelet's `/exec`, `/attach` or `/portForward` path with the headers
//! that choose the protocol, and the kubelet's answer relayed: a refusal
//! as a Status, a `101 Switching Protocols` by upgrading the client's
//! connection too and copying bytes both ways until both sides have
//! closed (see [`relay`]).
//! The protocols themselves (channels, SPDY streams, exit codes) are the
//! kubelet's; this side never reads the stream.

use axum::body::Body;
use axum::extract::{Query, Request};
use axum::http::{header, HeaderMap, HeaderName, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http_body_util::Empty;
use hyper_util::rt::TokioIo;

use crate::kubelet;
use crate::limits::StreamSlot;
use crate::pod_logs::container_of;
use crate::registry::{Registry, Target};
use crate::resources;
use crate::status::{ApiError, ApiResult};

/// Which connection into a pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PodStream {
    Exec,
    Attach,
    PortForward,
}

impl PodStream {
    pub fn subresource(self) -> &'static str {
        match self {
            PodStream::Exec => "exec",
            PodStream::Attach => "attach",
            PodStream::PortForward => "portforward",
        }
    }

    /// The kubelet's path segment for it.
    fn kubelet_path(self) -> &'static str {
        match self {
            PodStream::Exec => "exec",
            PodStream::Attach => "attach",
            PodStream::PortForward => "portForward",
        }
    }
}

/// The request headers that choose and open the protocol, sent on to the
/// kubelet; credentials and the rest stay here.
const FORWARDED_HEADERS: &[&str] = &[
    "connection",
    "upgrade",
    "sec-websocket-key",
    "sec-websocket-version",
    "sec-websocket-protocol",
    "x-stream-protocol-version",
    "user-agent",
];

/// The kubelet's 101 headers passed back to the client.
const RELAYED_HEADERS: &[&str] = &[
    "connection",
    "upgrade",
    "sec-websocket-accept",
    "sec-websocket-protocol",
    "x-stream-protocol-version",
];

/// Whether `headers` ask to upgrade the connection.
fn is_upgrade(headers: &HeaderMap) -> bool {
    let connection_upgrade = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|token| token.trim().eq_ignore_ascii_case("upgrade"));
    connection_upgrade && headers.contains_key(header::UPGRADE)
}

/// Serves one exec, attach or port-forward request on the pod `name` in
/// `namespace`.
pub async fn connect(
    registry: &Registry,
    namespace: &str,
    name: &str,
    stream: PodStream,
    request: Request,
) -> Response {
    match open(registry, namespace, name, stream, request).await {
        Ok(response) => response,
        Err(err) => err.into_response(),
    }
}

async fn open(
    registry: &Registry,
    namespace: &str,
    name: &str,
    stream: PodStream,
    mut request: Request,
) -> ApiResult<Response> {
    if !matches!(*request.method(), Method::GET | Method::POST) {
        return Err(ApiError::method_not_allowed(format!(
            "the server does not allow this method on the requested resource ({} pods/{})",
            request.method(),
            stream.subresource()
        )));
    }
    if !is_upgrade(request.headers()) {
        return Err(ApiError::bad_request("Upgrade request required"));
    }
    let pods = resources::find("", "v1", "pods").expect("pods are served");
    let target = Target {
        resource: pods,
        namespace: Some(namespace),
    };
    let pod = registry.get(&target, name).await?;
    let query = request.uri().query().unwrap_or("").to_string();
    let pairs: Vec<(String, String)> = Query::try_from_uri(request.uri())
        .map(|Query(pairs)| pairs)
        .map_err(|err| ApiError::bad_request(format!("the query could not be read: {err}")))?;
    let container = match stream {
        PodStream::PortForward => None,
        PodStream::Exec | PodStream::Attach => {
            let asked = pairs
                .iter()
                .rev()
                .find(|(key, _)| key == "container")
                .map(|(_, value)| value.as_str());
            Some(container_of(&pod, name, asked)?)
        }
    };
    if stream == PodStream::Exec && !pairs.iter().any(|(key, _)| key == "command") {
        return Err(ApiError::bad_request(
            "you must specify at least one command for the container",
        ));
    }
    let Some(node) = pod["spec"]["nodeName"].as_str().filter(|n| !n.is_empty()) else {
        return Err(ApiError::bad_request(format!(
            "pod {name} does not have a host assigned"
        )));
    };
    let authority =
        kubelet::authority_of(registry, node, &format!("connect to pod \"{name}\"")).await?;
    let mut path = format!(
        "/{}/{}/{}",
        stream.kubelet_path(),
        kubelet::encode(namespace),
        kubelet::encode(name)
    );
    if let Some(container) = &container {
        path.push('/');
        path.push_str(&kubelet::encode(container));
    }
    if !query.is_empty() {
        path.push('?');
        path.push_str(&query);
    }
    let tls = registry.kubelet_client();
    let scheme = if tls.is_some() { "https" } else { "http" };
    let url = format!("{scheme}://{authority}{path}");
    let mut sender = kubelet::connect::<Empty<Bytes>>(&authority, tls, &url).await?;
    let mut forwarded = hyper::Request::builder()
        .method(request.method().clone())
        .uri(&path)
        .header(header::HOST, &authority);
    for name in FORWARDED_HEADERS {
        for value in request.headers().get_all(*name) {
            forwarded = forwarded.header(*name, value);
        }
    }
    let forwarded = forwarded
        .body(Empty::<Bytes>::new())
        .map_err(|err| ApiError::internal(format!("building the kubelet request: {err}")))?;
    let mut answer = sender
        .send_request(forwarded)
        .await
        .map_err(|err| ApiError::internal(format!("error dialing backend: {url}: {err}")))?;
    if answer.status() != StatusCode::SWITCHING_PROTOCOLS {
        return Err(kubelet::refusal(answer).await);
    }
    let kubelet_side = hyper::upgrade::on(&mut answer);
    let client_side = hyper::upgrade::on(&mut request);
    let slot = request
        .extensions()
        .get::<StreamSlot>()
        .and_then(StreamSlot::take);
    let what = format!("{} {namespace}/{name}", stream.subresource());
    tokio::spawn(async move {
        // Counted against the client's streams until the relay ends.
        let _slot = slot;
        let (client, kubelet) = match tokio::join!(client_side, kubelet_side) {
            (Ok(client), Ok(kubelet)) => (client, kubelet),
            (client, kubelet) => {
                tracing::info!(
                    %what,
                    client = ?client.err(),
                    kubelet = ?kubelet.err(),
                    "a pod stream was not upgraded"
                );
                return;
            }
        };
        let (sent, received) = relay(TokioIo::new(client), TokioIo::new(kubelet)).await;
        tracing::debug!(%what, ?sent, ?received, "a pod stream ended");
    });
    let mut response = Response::new(Body::empty());
    *response.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    for name in RELAYED_HEADERS {
        let name = HeaderName::from_static(name);
        for value in answer.headers().get_all(&name) {
            response.headers_mut().append(name.clone(), value.clone());
        }
    }
    Ok(response)
}

/// How long the client may keep sending once the kubelet has closed.
const CLOSE_LINGER: std::time::Duration = std::time::Duration::from_secs(5);

/// Copies bytes both ways, each direction on its own: one ending (or
/// failing) shuts down the other side's writing but never cuts short what
/// the other direction still carries, so the kubelet's last bytes (an exit
/// code, a WebSocket Close) reach the client even when the client's own
/// last bytes find the kubelet gone. Once the kubelet has closed, the
/// client has [`CLOSE_LINGER`] to close too: dropping its connection with
/// its bytes unread would reset it and lose what is still queued for it.
/// The bytes sent to the kubelet and to the client, or why each ended.
async fn relay<C, K>(client: C, kubelet: K) -> (std::io::Result<u64>, std::io::Result<u64>)
where
    C: tokio::io::AsyncRead + tokio::io::AsyncWrite,
    K: tokio::io::AsyncRead + tokio::io::AsyncWrite,
{
    use tokio::io::AsyncWriteExt;
    let (mut client_read, mut client_write) = tokio::io::split(client);
    let (mut kubelet_read, mut kubelet_write) = tokio::io::split(kubelet);
    let up = async {
        let copied = tokio::io::copy(&mut client_read, &mut kubelet_write).await;
        let _ = kubelet_write.shutdown().await;
        if copied.is_err() {
            // The kubelet is gone: read the client to its end all the same.
            let _ = tokio::io::copy(&mut client_read, &mut tokio::io::sink()).await;
        }
        copied
    };
    let down = async {
        let copied = tokio::io::copy(&mut kubelet_read, &mut client_write).await;
        let _ = client_write.shutdown().await;
        copied
    };
    let mut up = std::pin::pin!(up);
    let mut down = std::pin::pin!(down);
    tokio::select! {
        sent = &mut up => (sent, down.await),
        received = &mut down => {
            let sent = tokio::time::timeout(CLOSE_LINGER, up)
                .await
                .unwrap_or_else(|_| Err(std::io::ErrorKind::TimedOut.into()));
            (sent, received)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An exec's status is the kubelet's last write; the client may still
    /// be sending (stdin's close) when the kubelet has gone.
    #[tokio::test]
    async fn the_kubelets_last_bytes_reach_the_client_though_the_clients_find_it_gone() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (client_near, mut client_far) = tokio::io::duplex(64);
        let (kubelet_near, mut kubelet_far) = tokio::io::duplex(64);
        kubelet_far.write_all(b"exit code 3").await.unwrap();
        drop(kubelet_far);
        client_far.write_all(b"stdin closed").await.unwrap();
        let relaying = tokio::spawn(relay(client_near, kubelet_near));
        let mut seen = Vec::new();
        client_far.read_to_end(&mut seen).await.unwrap();
        assert_eq!(seen, b"exit code 3");
        drop(client_far);
        let (sent, received) = relaying.await.unwrap();
        assert_eq!(
            sent.unwrap_err().kind(),
            std::io::ErrorKind::BrokenPipe,
            "the kubelet is gone"
        );
        assert_eq!(received.unwrap(), 11);
    }

    /// A client that half-closes (port-forward's end of upload) still gets
    /// everything the kubelet sends after.
    #[tokio::test]
    async fn a_clients_half_close_leaves_the_kubelets_direction_open() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (client_near, client_far) = tokio::io::duplex(64);
        let (kubelet_near, kubelet_far) = tokio::io::duplex(64);
        let relaying = tokio::spawn(relay(client_near, kubelet_near));
        let (mut client_read, mut client_write) = tokio::io::split(client_far);
        let (mut kubelet_read, mut kubelet_write) = tokio::io::split(kubelet_far);
        client_write.write_all(b"request").await.unwrap();
        client_write.shutdown().await.unwrap();
        let mut request = Vec::new();
        kubelet_read.read_to_end(&mut request).await.unwrap();
        assert_eq!(request, b"request");
        kubelet_write.write_all(b"answer").await.unwrap();
        kubelet_write.shutdown().await.unwrap();
        let mut answer = Vec::new();
        client_read.read_to_end(&mut answer).await.unwrap();
        assert_eq!(answer, b"answer");
        let (sent, received) = relaying.await.unwrap();
        assert_eq!((sent.unwrap(), received.unwrap()), (7, 6));
    }

    #[test]
    fn only_connection_upgrade_with_an_upgrade_header_is_an_upgrade() {
        let mut headers = HeaderMap::new();
        assert!(!is_upgrade(&headers));
        headers.insert(header::CONNECTION, "keep-alive, Upgrade".parse().unwrap());
        assert!(!is_upgrade(&headers), "no Upgrade header");
        headers.insert(header::UPGRADE, "websocket".parse().unwrap());
        assert!(is_upgrade(&headers));
        headers.insert(header::CONNECTION, "close".parse().unwrap());
        assert!(!is_upgrade(&headers));
    }
}

#[cfg(test)]
mod relay_tests {
    use serde_json::json;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};
    use tower::ServiceExt;

    /// A kubelet that answers the first request with `answer` and, after a
    /// 101, echoes every byte; it reports the request head it read.
    async fn fake_kubelet(answer: &'static str) -> (u16, tokio::sync::oneshot::Receiver<String>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (tx, rx) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            let head = read_head(&mut stream).await;
            let _ = tx.send(head);
            stream.write_all(answer.as_bytes()).await.unwrap();
            let mut buffer = [0u8; 1024];
            loop {
                match stream.read(&mut buffer).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        if stream.write_all(&buffer[..n]).await.is_err() {
                            break;
                        }
                    }
                }
            }
        });
        (port, rx)
    }

    async fn read_head(stream: &mut TcpStream) -> String {
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            if stream.read(&mut byte).await.unwrap() == 0 {
                break;
            }
            head.push(byte[0]);
        }
        String::from_utf8_lossy(&head).into_owned()
    }

    /// The API (its router on a real port, upgrades and all) with a node
    /// whose kubelet is at `kubelet_port`, a pod `p` on it and a pod
    /// `pending` on none.
    async fn api(kubelet_port: u16) -> (std::net::SocketAddr, tempfile::TempDir) {
        let (registry, dir) = crate::registry::test_registry().await;
        let app = crate::server::router(registry);
        let post = |path: &str, body: serde_json::Value| {
            let app = app.clone();
            let request = axum::extract::Request::post(path)
                .header("content-type", "application/json")
                .body(axum::body::Body::from(body.to_string()))
                .unwrap();
            async move {
                let response = app.oneshot(request).await.unwrap();
                assert!(response.status().is_success(), "{:?}", response.status());
            }
        };
        post(
            "/api/v1/nodes",
            json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"},
                   "status": {"addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
                              "daemonEndpoints": {"kubeletEndpoint": {"Port": kubelet_port}}}}),
        )
        .await;
        post(
            "/api/v1/nodes",
            json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "simulated"},
                   "status": {"addresses": [{"type": "InternalIP", "address": "10.0.3.1"}],
                              "daemonEndpoints": {"kubeletEndpoint": {"Port": 0}}}}),
        )
        .await;
        for (name, node) in [
            ("p", json!("n1")),
            ("pending", json!(null)),
            ("sim", json!("simulated")),
        ] {
            post(
                "/api/v1/namespaces/default/pods",
                json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
                       "spec": {"nodeName": node, "containers": [{"name": "main", "image": "busybox"}]}}),
            )
            .await;
        }
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        (address, dir)
    }

    const UPGRADE: &str = "Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Protocol: v5.channel.k8s.io\r\nAuthorization: Bearer secret\r\n";

    async fn send(address: std::net::SocketAddr, line: &str, headers: &str) -> (TcpStream, String) {
        let mut stream = TcpStream::connect(address).await.unwrap();
        let request = format!("{line} HTTP/1.1\r\nHost: api\r\n{headers}\r\n");
        stream.write_all(request.as_bytes()).await.unwrap();
        let head = read_head(&mut stream).await;
        (stream, head)
    }

    #[tokio::test]
    async fn an_upgrade_is_relayed_to_the_kubelet_and_bytes_flow_both_ways() {
        let (port, seen) = fake_kubelet(
            "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\nSec-WebSocket-Protocol: v5.channel.k8s.io\r\n\r\n",
        )
        .await;
        let (address, _dir) = api(port).await;
        let (mut stream, head) = send(
            address,
            "GET /api/v1/namespaces/default/pods/p/exec?command=cat&command=-u&stdin=true&stdout=true",
            UPGRADE,
        )
        .await;
        assert!(head.starts_with("HTTP/1.1 101"), "{head}");
        let lower = head.to_ascii_lowercase();
        assert!(
            lower.contains("sec-websocket-protocol: v5.channel.k8s.io"),
            "{head}"
        );
        assert!(
            lower.contains("sec-websocket-accept: s3pplmbitxaq9kygzzhzrbk+xoo="),
            "{head}"
        );
        let kubelet_head = seen.await.unwrap();
        assert!(
            kubelet_head.starts_with(
                "GET /exec/default/p/main?command=cat&command=-u&stdin=true&stdout=true HTTP/1.1\r\n"
            ),
            "{kubelet_head}"
        );
        let kubelet_lower = kubelet_head.to_ascii_lowercase();
        assert!(kubelet_lower.contains("sec-websocket-key: dghlihnhbxbszsbub25jzq=="));
        assert!(
            !kubelet_lower.contains("authorization"),
            "credentials stay: {kubelet_head}"
        );
        stream.write_all(b"\x00hello").await.unwrap();
        let mut echoed = [0u8; 6];
        stream.read_exact(&mut echoed).await.unwrap();
        assert_eq!(&echoed, b"\x00hello");
    }

    #[tokio::test]
    async fn refusals_are_statuses() {
        let (port, _seen) = fake_kubelet(
            "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\nContent-Length: 26\r\n\r\ncontainer main not running",
        )
        .await;
        let (address, _dir) = api(port).await;
        let status_of = |head: &str| head.split(' ').nth(1).unwrap_or_default().to_string();
        let cases = [
            (
                "GET /api/v1/namespaces/default/pods/p/exec?command=ls",
                "",
                "400",
                "Upgrade request required",
            ),
            (
                "GET /api/v1/namespaces/default/pods/p/exec",
                UPGRADE,
                "400",
                "you must specify at least one command",
            ),
            (
                "GET /api/v1/namespaces/default/pods/p/exec?command=ls&container=other",
                UPGRADE,
                "400",
                "container other is not valid for pod p",
            ),
            (
                "GET /api/v1/namespaces/default/pods/gone/exec?command=ls",
                UPGRADE,
                "404",
                "pods \\\"gone\\\" not found",
            ),
            (
                "GET /api/v1/namespaces/default/pods/pending/exec?command=ls",
                UPGRADE,
                "400",
                "pod pending does not have a host assigned",
            ),
            (
                "PUT /api/v1/namespaces/default/pods/p/exec?command=ls",
                UPGRADE,
                "405",
                "does not allow this method",
            ),
            (
                "GET /api/v1/namespaces/default/pods/sim/exec?command=ls",
                UPGRADE,
                "400",
                "node \\\"simulated\\\" runs no kubelet to stream from",
            ),
            (
                "GET /api/v1/namespaces/default/pods/p/exec?command=ls",
                UPGRADE,
                "400",
                "container main not running",
            ),
        ];
        for (line, headers, code, message) in cases {
            let (mut stream, head) = send(address, line, headers).await;
            assert_eq!(status_of(&head), code, "{line}: {head}");
            let mut body = vec![0u8; 4096];
            let n = tokio::time::timeout(std::time::Duration::from_secs(5), stream.read(&mut body))
                .await
                .unwrap()
                .unwrap();
            let text = String::from_utf8_lossy(&body[..n]).into_owned();
            assert!(text.contains("\"kind\":\"Status\""), "{line}: {text}");
            assert!(text.contains(message), "{line}: {text}");
        }
    }
}
