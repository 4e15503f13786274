//! Waiting for the signals that stop a long-running command: SIGINT
//! (Ctrl-C) and SIGTERM. A second signal while stopping ends the process.

use anyhow::{Context, Result};
use tokio::signal::unix::{signal, Signal, SignalKind};

/// Exit code when a second signal cuts a clean stop short (128 + SIGINT).
const FORCED_EXIT_CODE: i32 = 130;

/// SIGINT and SIGTERM, registered once so none is missed between waits.
pub struct StopSignals {
    interrupt: Signal,
    terminate: Signal,
}

impl StopSignals {
    pub fn register() -> Result<StopSignals> {
        Ok(StopSignals {
            interrupt: signal(SignalKind::interrupt()).context("cannot handle SIGINT")?,
            terminate: signal(SignalKind::terminate()).context("cannot handle SIGTERM")?,
        })
    }

    /// Waits for the next SIGINT or SIGTERM; returns its name.
    pub async fn recv(&mut self) -> &'static str {
        tokio::select! {
            _ = self.interrupt.recv() => "SIGINT",
            _ = self.terminate.recv() => "SIGTERM",
        }
    }

    /// From now on, another signal exits at once: the user asked twice.
    pub fn exit_on_next(mut self, what: &'static str) {
        tokio::spawn(async move {
            let name = self.recv().await;
            eprintln!("{name} again: exiting without finishing {what}");
            std::process::exit(FORCED_EXIT_CODE);
        });
    }
}
