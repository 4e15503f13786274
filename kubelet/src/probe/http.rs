//! httpGet probes over plain HTTP/1.1: success for 200 ≤ status < 400,
//! redirects not followed, body ignored.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::Empty;
use hyper::header::{HeaderMap, HeaderName, HeaderValue, ACCEPT, CONNECTION, HOST, USER_AGENT};
use hyper::Request;
use hyper_util::rt::TokioIo;
use k8s_openapi::api::core::v1::HTTPGetAction;
use tokio::net::TcpStream;

use super::tcp::address;
use super::{probe_host, resolve_port, ProbeResult, ProbeTarget};

/// The User-Agent Kubernetes' prober sends, for the API version skiff
/// serves.
const PROBE_USER_AGENT: &str = skiff_machinery::version::PROBE_USER_AGENT;

pub(super) async fn run(
    action: &HTTPGetAction,
    target: &ProbeTarget,
    timeout: Duration,
) -> ProbeResult {
    let scheme = action.scheme.as_deref().unwrap_or("HTTP");
    if scheme.eq_ignore_ascii_case("HTTPS") {
        return ProbeResult::Failure(
            "HTTPS probes are not supported; probe over HTTP, tcpSocket or exec".to_string(),
        );
    }
    if !scheme.eq_ignore_ascii_case("HTTP") {
        return ProbeResult::Failure(format!("unsupported httpGet scheme {scheme:?}"));
    }
    let port = match resolve_port(&action.port, &target.ports) {
        Ok(port) => port,
        Err(message) => return ProbeResult::Failure(message),
    };
    let host = probe_host(action.host.as_deref(), target);
    let path = request_path(action.path.as_deref());
    let url = format!("http://{}{path}", address(&host, port));
    let headers = match request_headers(action, &host, port) {
        Ok(headers) => headers,
        Err(message) => return ProbeResult::Failure(message),
    };
    match tokio::time::timeout(timeout, get(&host, port, &path, headers)).await {
        Ok(Ok(status)) if (200..400).contains(&status) => ProbeResult::Success,
        Ok(Ok(status)) => ProbeResult::Failure(format!("HTTP probe failed with statuscode: {status}")),
        Ok(Err(e)) => ProbeResult::Failure(format!("Get \"{url}\": {e}")),
        Err(_) => ProbeResult::Failure(format!(
            "Get \"{url}\": context deadline exceeded (Client.Timeout exceeded while awaiting headers)"
        )),
    }
}

fn request_path(path: Option<&str>) -> String {
    match path.filter(|p| !p.is_empty()) {
        Some(p) if p.starts_with('/') => p.to_string(),
        Some(p) => format!("/{p}"),
        None => "/".to_string(),
    }
}

/// The probe's httpHeaders, then the prober's defaults for what they leave out.
fn request_headers(action: &HTTPGetAction, host: &str, port: u16) -> Result<HeaderMap, String> {
    let mut headers = HeaderMap::new();
    for header in action.http_headers.iter().flatten() {
        let name = HeaderName::from_bytes(header.name.as_bytes())
            .map_err(|_| format!("invalid httpHeaders name {:?}", header.name))?;
        let value = HeaderValue::from_str(&header.value)
            .map_err(|_| format!("invalid value for httpHeaders {:?}", header.name))?;
        headers.append(name, value);
    }
    let host_value = HeaderValue::from_str(&address(host, port))
        .map_err(|_| format!("invalid probe host {host:?}"))?;
    headers.entry(HOST).or_insert(host_value);
    headers
        .entry(USER_AGENT)
        .or_insert(HeaderValue::from_static(PROBE_USER_AGENT));
    headers
        .entry(ACCEPT)
        .or_insert(HeaderValue::from_static("*/*"));
    headers.insert(CONNECTION, HeaderValue::from_static("close"));
    Ok(headers)
}

/// One GET on a fresh connection; the response status.
async fn get(host: &str, port: u16, path: &str, headers: HeaderMap) -> Result<u16, String> {
    let stream = TcpStream::connect((host, port))
        .await
        .map_err(|e| format!("dial tcp {}: {e}", address(host, port)))?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| e.to_string())?;
    let mut request = Request::get(path)
        .body(Empty::<Bytes>::new())
        .map_err(|e| format!("invalid path {path:?}: {e}"))?;
    *request.headers_mut() = headers;
    let response = sender.send_request(request);
    tokio::pin!(connection, response);
    let status = |r: hyper::Result<hyper::Response<hyper::body::Incoming>>| {
        r.map(|r| r.status().as_u16()).map_err(|e| e.to_string())
    };
    tokio::select! {
        biased;
        answered = &mut response => status(answered),
        // A `Connection: close` exchange may end the connection first; the
        // response is then already waiting for `response`.
        closed = &mut connection => match closed {
            Ok(()) => status(response.await),
            Err(e) => Err(e.to_string()),
        },
    }
}
