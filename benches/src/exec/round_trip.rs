//! One `exec` of `true` as kubectl 1.30+ opens it: a new TLS connection to
//! the API, a WebSocket upgrade to `v5.channel.k8s.io`, then frames read
//! until the error channel's `Status` and the server's close.

use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use futures::StreamExt;
use tokio_tungstenite::tungstenite::Message;

use super::channel::{self, CLOSE_SIGNAL, ERROR, STDERR, STDOUT};
use super::sink::{pod_path, CONTAINER};
use super::tls_api::TlsApi;

pub const PROTOCOL: &str = "v5.channel.k8s.io";
/// Far above a round trip, so that only a stuck stream fails the run.
const PATIENCE: Duration = Duration::from_secs(30);

/// The phases of one exec, each from its start.
#[derive(Debug, Clone, Copy)]
pub struct ExecTimes {
    /// TCP connected and the TLS handshake done.
    pub connected: Duration,
    /// The upgrade answered 101.
    pub upgraded: Duration,
    /// The Success `Status` read and the socket closed.
    pub total: Duration,
}

pub fn exec_path() -> String {
    format!(
        "{}/exec?command=true&container={CONTAINER}&stdout=true&stderr=true",
        pod_path()
    )
}

pub async fn exec_true(api: &TlsApi) -> Result<ExecTimes> {
    let path = exec_path();
    let started = Instant::now();
    let tls = api.connect().await?;
    let connected = started.elapsed();
    let mut socket = api.upgrade(tls, &path, PROTOCOL).await?;
    let upgraded = started.elapsed();
    let mut status = Vec::new();
    let mut output = Vec::new();
    loop {
        let message = tokio::time::timeout(PATIENCE, socket.next())
            .await
            .with_context(|| format!("exec of true sent nothing for {PATIENCE:?}"))?;
        match message {
            Some(Ok(Message::Binary(bytes))) => {
                let (channel, payload) = channel::decode(&bytes)?;
                match channel {
                    ERROR => status.extend_from_slice(payload),
                    STDOUT | STDERR => output.extend_from_slice(payload),
                    CLOSE_SIGNAL => {}
                    other => bail!("exec sent a message on channel {other}"),
                }
            }
            Some(Ok(Message::Close(_))) | None => break,
            Some(Ok(Message::Text(text))) => {
                bail!("exec sent a text message over {PROTOCOL}: {text:?}")
            }
            Some(Ok(_)) => {}
            Some(Err(err)) => return Err(err).context("reading the exec stream"),
        }
    }
    let total = started.elapsed();
    check_success(&status, &output)?;
    Ok(ExecTimes {
        connected,
        upgraded,
        total,
    })
}

/// The error channel's `Status` says Success.
fn check_success(status: &[u8], output: &[u8]) -> Result<()> {
    ensure!(
        !status.is_empty(),
        "exec of true closed without a Status on the error channel (output: {:?})",
        String::from_utf8_lossy(output)
    );
    let value: serde_json::Value = serde_json::from_slice(status).with_context(|| {
        format!(
            "the error channel is not a Status: {:?}",
            String::from_utf8_lossy(status)
        )
    })?;
    ensure!(
        value["status"] == "Success",
        "exec of true did not succeed: {value}"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_success_status_counts() {
        assert!(check_success(br#"{"metadata":{},"status":"Success"}"#, b"").is_ok());
        let failed = br#"{"status":"Failure","reason":"NonZeroExitCode"}"#;
        assert!(check_success(failed, b"").is_err());
        let err = check_success(b"", b"oops").err().unwrap();
        assert!(err.to_string().contains("without a Status"), "{err}");
        assert!(check_success(b"not json", b"").is_err());
    }

    #[test]
    fn the_exec_asks_for_true_in_the_sink_container() {
        assert_eq!(
            exec_path(),
            "/api/v1/namespaces/default/pods/exec-bench/exec?command=true&container=sink&stdout=true&stderr=true"
        );
    }
}
