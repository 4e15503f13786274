//! A `store-writer` child process as the crash tests drive it: start it on a data
//! directory, SIGKILL it, and collect every ack it printed before it died. The child
//! is killed on drop, so a failing test leaves no writer behind. Unix only.

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use anyhow::{bail, ensure, Context, Result};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, ChildStdout, Command};

use crate::writer_protocol::{Ack, WriterLine, DEFAULT_VALUE_SIZE};

/// Opening a store (sled plus log replay) on a loaded 2-core machine.
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// Reaping a SIGKILLed child and draining its pipe.
const EXIT_TIMEOUT: Duration = Duration::from_secs(10);
const SIGKILL: i32 = 9;

/// A running store-writer that has printed `ready`.
pub struct WriterProcess {
    child: Child,
    stdout: BufReader<ChildStdout>,
    ready_revision: i64,
}

/// What a killed store-writer printed.
#[derive(Debug, Default)]
pub struct KilledWriter {
    /// Every `ack` line, in print order.
    pub acks: Vec<Ack>,
    /// The output ended in a line without its newline (not counted as an ack).
    pub torn_last_line: bool,
}

impl WriterProcess {
    /// Starts `binary` (store-writer) with `writers` put loops on `data_dir`, writing
    /// keys under `prefix`, and waits until it has opened the store.
    pub async fn start(
        binary: &Path,
        data_dir: &Path,
        prefix: &str,
        writers: usize,
    ) -> Result<WriterProcess> {
        Self::start_with(binary, data_dir, prefix, writers, &[]).await
    }

    /// [`WriterProcess::start`] with more store-writer flags.
    pub async fn start_with(
        binary: &Path,
        data_dir: &Path,
        prefix: &str,
        writers: usize,
        extra_args: &[&str],
    ) -> Result<WriterProcess> {
        let mut child = Command::new(binary)
            .arg("--data-dir")
            .arg(data_dir)
            .args(["--writers", &writers.to_string()])
            .args(["--prefix", prefix])
            .args(["--value-size", &DEFAULT_VALUE_SIZE.to_string()])
            .args(extra_args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {}", binary.display()))?;
        let stdout = child
            .stdout
            .take()
            .context("store-writer has no stdout pipe")?;
        let mut stdout = BufReader::new(stdout);
        let first = tokio::time::timeout(READY_TIMEOUT, next_line(&mut stdout))
            .await
            .context("store-writer did not print `ready` in time")??;
        let ready_revision = match first {
            Some(Ok(WriterLine::Ready { revision })) => revision,
            other => bail!("store-writer's first line was {other:?}, expected `ready <revision>`; its stderr above says why"),
        };
        Ok(WriterProcess {
            child,
            stdout,
            ready_revision,
        })
    }

    /// The store's current revision when the writer opened it.
    pub fn ready_revision(&self) -> i64 {
        self.ready_revision
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// Lets the writer run for `run_for` while its output is read, SIGKILLs it, and
    /// returns every ack it printed, including those still in the pipe.
    pub async fn kill_after(mut self, run_for: Duration) -> Result<KilledWriter> {
        let reader = tokio::spawn(read_to_eof(self.stdout));
        tokio::time::sleep(run_for).await;
        self.child
            .start_kill()
            .context("sending SIGKILL to store-writer")?;
        let status = tokio::time::timeout(EXIT_TIMEOUT, self.child.wait())
            .await
            .context("store-writer did not exit after SIGKILL")??;
        ensure!(
            status.signal() == Some(SIGKILL),
            "store-writer exited by itself ({status}) before it was killed; its stderr above says why"
        );
        tokio::time::timeout(EXIT_TIMEOUT, reader)
            .await
            .context("store-writer's stdout did not reach EOF after it died")?
            .context("the stdout reader panicked")?
    }
}

/// The next complete line: `None` at EOF, `Some(Err(partial))` for a last line
/// cut off before its newline.
pub(crate) async fn next_line(
    stdout: &mut BufReader<ChildStdout>,
) -> Result<Option<Result<WriterLine, String>>> {
    let mut line = Vec::new();
    if stdout.read_until(b'\n', &mut line).await? == 0 {
        return Ok(None);
    }
    let text = String::from_utf8(line).context("the child printed non-UTF-8")?;
    match text.strip_suffix('\n') {
        Some(complete) => Ok(Some(Ok(complete.parse()?))),
        None => Ok(Some(Err(text))),
    }
}

async fn read_to_eof(mut stdout: BufReader<ChildStdout>) -> Result<KilledWriter> {
    let mut killed = KilledWriter::default();
    while let Some(line) = next_line(&mut stdout).await? {
        match line {
            Ok(WriterLine::Ack(ack)) => killed.acks.push(ack),
            Ok(other) => bail!("store-writer printed {other} again after it was ready"),
            Err(_partial) => killed.torn_last_line = true,
        }
    }
    Ok(killed)
}
