//! Prometheus metrics every skiff component exports the same way, under
//! the names of Kubernetes' component-base: the process's (`process_*`)
//! and the work queues' (`workqueue_*`), and the text every `/metrics`
//! endpoint answers. The metrics of one component are its own.

pub mod process;
pub mod workqueue;

pub use process::ProcessCollector;
pub use prometheus::Registry;
pub use workqueue::{QueueMetrics, Workqueues};

/// The content type of the text exposition format.
pub const TEXT_CONTENT_TYPE: &str = prometheus::TEXT_FORMAT;

/// Everything `registry` holds, in the text exposition format.
pub fn encode(registry: &prometheus::Registry) -> String {
    use prometheus::Encoder;
    let mut text = Vec::new();
    if let Err(err) = prometheus::TextEncoder::new().encode(&registry.gather(), &mut text) {
        // Only a broken collector gets here; the others are still written.
        text.extend_from_slice(format!("# error writing the metrics: {err}\n").as_bytes());
    }
    String::from_utf8(text).unwrap_or_default()
}

/// Runs `promtool check metrics` on `text` when `promtool` is on PATH:
/// `None` when it is not there, else its verdict (its complaints on
/// failure). For the components' tests.
pub fn promtool_check(text: &str) -> Option<Result<(), String>> {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .ok()?;
    let written = child
        .stdin
        .take()
        .map(|mut stdin| stdin.write_all(text.as_bytes()));
    let output = match child.wait_with_output() {
        Ok(output) => output,
        Err(err) => return Some(Err(format!("running promtool: {err}"))),
    };
    if let Some(Err(err)) = written {
        return Some(Err(format!("writing to promtool: {err}")));
    }
    // Lint warnings (missing units, counters not ending in _total) make
    // it exit 3; only errors of the format itself fail the check.
    match output.status.code() {
        Some(0) | Some(3) => Some(Ok(())),
        _ => Some(Err(format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ))),
    }
}
