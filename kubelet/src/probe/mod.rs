//! Container probes: one check (`run_once`: exec, httpGet, tcpSocket) and
//! the [`Prober`] that repeats it with Kubernetes' period and thresholds.
//! Not for acting on results; the pod worker restarts or marks Ready.

mod exec;
mod http;
mod prober;
mod tcp;

use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ContainerPort, Probe};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

pub use prober::{ProbeKind, ProbeState, ProbeStatus, Prober};

/// Where a probe runs: the container's address, env, cwd and ports.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProbeTarget {
    /// The pod IP, the host httpGet and tcpSocket use unless they name one.
    pub host: String,
    /// The container's environment, which exec probes run with.
    pub env: Vec<(String, String)>,
    /// The container's working directory, where exec probes run.
    pub working_dir: PathBuf,
    /// The container's ports, to resolve named probe ports.
    pub ports: Vec<ContainerPort>,
    /// The pod's network namespace, where exec probes run; `None`: the
    /// host's network.
    pub netns: Option<PathBuf>,
    /// The pod's own files, for exec probes' mount namespace.
    pub files: Option<PathBuf>,
    /// The container's volumes at their mountPaths, for exec probes
    /// (with `netns` or `files` only).
    pub mounts: Vec<crate::volumes::BindMount>,
}

/// The outcome of one probe, with Kubernetes' message on failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProbeResult {
    Success,
    Failure(String),
    /// The probe could not be judged (e.g. gRPC, which skiff cannot run).
    Unknown(String),
}

/// Runs `probe` once against `target`, within its timeoutSeconds (default 1).
pub async fn run_once(probe: &Probe, target: &ProbeTarget) -> ProbeResult {
    let timeout = Duration::from_secs(positive(probe.timeout_seconds, 1));
    if let Some(action) = &probe.exec {
        let command = action.command.as_deref().unwrap_or_default();
        exec::run(command, target, timeout).await
    } else if let Some(action) = &probe.http_get {
        http::run(action, target, timeout).await
    } else if let Some(action) = &probe.tcp_socket {
        tcp::run(action, target, timeout).await
    } else if probe.grpc.is_some() {
        ProbeResult::Unknown("gRPC probes are not supported".to_string())
    } else {
        ProbeResult::Unknown("probe has no exec, httpGet, tcpSocket or grpc action".to_string())
    }
}

/// A probe port: a number, or the name of one of the container's ports.
fn resolve_port(port: &IntOrString, ports: &[ContainerPort]) -> Result<u16, String> {
    let number = match port {
        IntOrString::Int(n) => *n,
        IntOrString::String(name) => match name.parse::<i32>() {
            Ok(n) => n,
            Err(_) => ports
                .iter()
                .find(|p| p.name.as_deref() == Some(name.as_str()))
                .map(|p| p.container_port)
                .ok_or_else(|| format!("couldn't find port: {name} in the container's ports"))?,
        },
    };
    u16::try_from(number)
        .ok()
        .filter(|p| *p > 0)
        .ok_or_else(|| format!("invalid port number: {number}"))
}

/// The probe's own host, or the target's (the pod IP).
fn probe_host(host: Option<&str>, target: &ProbeTarget) -> String {
    host.filter(|h| !h.is_empty())
        .unwrap_or(&target.host)
        .to_string()
}

/// A seconds field as a count of at least 1, `default` when unset.
fn positive(seconds: Option<i32>, default: i32) -> u64 {
    u64::try_from(seconds.unwrap_or(default).max(1)).unwrap_or(1)
}

#[cfg(test)]
mod tests;
