//! The API server's request limits on the command line, with
//! kube-apiserver's flag names and defaults where it has them.

use std::time::Duration;

use clap::Args;
use skiff_apiserver::limits::Limits;

#[derive(Debug, Clone, Args)]
pub struct LimitFlags {
    /// Read requests the API serves at once; more get 429 with
    /// Retry-After (0: no cap). Watches and followed logs do not count.
    #[arg(long, default_value_t = 400)]
    pub max_requests_inflight: usize,
    /// Writes (create, update, patch, delete) the API serves at once;
    /// more get 429 (0: no cap).
    #[arg(long, default_value_t = 200)]
    pub max_mutating_requests_inflight: usize,
    /// Requests per second each client (its user; its remote address when
    /// anonymous or on the plain-HTTP port) may make on
    /// average; over it, 429 with Retry-After (0: no limit).
    #[arg(long, default_value_t = 5000.0)]
    pub client_qps: f64,
    /// Requests a client may make in a burst after being idle.
    #[arg(long, default_value_t = 10_000)]
    pub client_burst: u32,
    /// Watches each client may hold open; more get 429 (0: no cap).
    #[arg(long, default_value_t = 20_000)]
    pub max_watches_per_client: usize,
    /// exec, attach and port-forward streams each client may hold open;
    /// more get 429 (0: no cap).
    #[arg(long, default_value_t = 100)]
    pub max_streams_per_client: usize,
    /// Longest a request other than a watch, followed log or exec may
    /// take before it is answered 504 (a Go duration: 60s, 2m).
    #[arg(long, default_value = "60s", value_parser = parse_timeout)]
    pub request_timeout: Duration,
    /// Record the request metrics (apiserver_request_*, inflight,
    /// long-running, watch events). On by default; `false` is for
    /// measuring what recording them costs, as `skiff-bench api` does.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, hide = true)]
    pub request_metrics: bool,
}

fn parse_timeout(text: &str) -> Result<Duration, String> {
    match skiff_machinery::duration::parse(text) {
        Ok(d) if !d.is_zero() => Ok(d),
        _ => Err(format!(
            "{text:?} is not a positive duration such as 60s or 2m"
        )),
    }
}

impl LimitFlags {
    /// The limits, after turning the process's request metrics on or off.
    pub fn apply(&self) -> Limits {
        skiff_apiserver::metrics::set_recording(self.request_metrics);
        Limits {
            max_requests_inflight: self.max_requests_inflight,
            max_mutating_requests_inflight: self.max_mutating_requests_inflight,
            client_qps: self.client_qps.max(0.0),
            client_burst: self.client_burst,
            max_watches_per_client: self.max_watches_per_client,
            max_streams_per_client: self.max_streams_per_client,
            request_timeout: self.request_timeout,
        }
    }
}
