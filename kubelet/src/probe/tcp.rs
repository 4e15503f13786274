//! tcpSocket probes: success when a TCP connection opens in time.

use std::time::Duration;

use k8s_openapi::api::core::v1::TCPSocketAction;
use tokio::net::TcpStream;

use super::{probe_host, resolve_port, ProbeResult, ProbeTarget};

pub(super) async fn run(
    action: &TCPSocketAction,
    target: &ProbeTarget,
    timeout: Duration,
) -> ProbeResult {
    let port = match resolve_port(&action.port, &target.ports) {
        Ok(port) => port,
        Err(message) => return ProbeResult::Failure(message),
    };
    let host = probe_host(action.host.as_deref(), target);
    match tokio::time::timeout(timeout, TcpStream::connect((host.as_str(), port))).await {
        Ok(Ok(_stream)) => ProbeResult::Success,
        Ok(Err(e)) => ProbeResult::Failure(format!("dial tcp {}: {e}", address(&host, port))),
        Err(_) => ProbeResult::Failure(format!(
            "dial tcp {}: i/o timeout after {}s",
            address(&host, port),
            timeout.as_secs()
        )),
    }
}

/// `host:port`, with IPv6 literals in brackets.
pub(super) fn address(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}
