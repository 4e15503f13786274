//! A `store-member` child process as the Raft tests drive it: start it as one member of a
//! cluster, watch its acks and role changes while it runs, SIGKILL it and collect every
//! line it printed. The child is killed on drop, so a failing test leaves no member behind.
//! Unix only.

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use tokio::io::BufReader;
use tokio::process::{Child, ChildStdout, Command};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::writer_process::next_line;
use crate::writer_protocol::{Ack, Role, WriterLine, DEFAULT_VALUE_SIZE};

/// Opening a store (sled plus log replay) on a loaded 2-core machine.
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// Reaping a SIGKILLed child and draining its pipe.
const EXIT_TIMEOUT: Duration = Duration::from_secs(10);
const SIGKILL: i32 = 9;

/// The flags one store-member is started with.
#[derive(Debug, Clone)]
pub struct MemberArgs {
    pub name: String,
    pub data_dir: PathBuf,
    /// `n1=127.0.0.1:P1,...`, the same for every member.
    pub initial_cluster: String,
    /// Keys go under `{prefix}{name}/`.
    pub prefix: String,
    pub writers: usize,
}

/// Everything a store-member has printed since `ready`.
#[derive(Debug, Clone, Default)]
pub struct MemberOutput {
    /// Every `ack` line, in print order.
    pub acks: Vec<Ack>,
    /// Every `role` line with when the test read it, in print order.
    pub roles: Vec<(Instant, Role)>,
    /// The output ended in a line without its newline (not counted as an ack).
    pub torn_last_line: bool,
    /// Stdout reached EOF: the process is gone.
    pub ended: bool,
}

impl MemberOutput {
    /// The role the member printed last.
    pub fn role(&self) -> Option<Role> {
        self.roles.last().map(|&(_, role)| role)
    }
}

/// A running store-member that has printed `ready`; its stdout is read in the background.
pub struct MemberProcess {
    name: String,
    child: Child,
    output: watch::Receiver<MemberOutput>,
    reader: JoinHandle<Result<()>>,
    ready_revision: i64,
}

impl MemberProcess {
    /// Starts `binary` (store-member) with `args` and waits until it has opened its store.
    pub async fn start(binary: &Path, args: &MemberArgs) -> Result<MemberProcess> {
        let mut child = Command::new(binary)
            .args(["--name", &args.name])
            .arg("--data-dir")
            .arg(&args.data_dir)
            .args(["--initial-cluster", &args.initial_cluster])
            .args(["--writers", &args.writers.to_string()])
            .args(["--prefix", &args.prefix])
            .args(["--value-size", &DEFAULT_VALUE_SIZE.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {} as {}", binary.display(), args.name))?;
        let stdout = child
            .stdout
            .take()
            .context("store-member has no stdout pipe")?;
        let mut stdout = BufReader::new(stdout);
        let first = tokio::time::timeout(READY_TIMEOUT, next_line(&mut stdout))
            .await
            .with_context(|| format!("{} did not print `ready` in time", args.name))??;
        let ready_revision = match first {
            Some(Ok(WriterLine::Ready { revision })) => revision,
            other => bail!(
                "{}'s first line was {other:?}, expected `ready <revision>`; its stderr above says why",
                args.name
            ),
        };
        let (sender, output) = watch::channel(MemberOutput::default());
        let reader = tokio::spawn(read_to_eof(args.name.clone(), stdout, sender));
        Ok(MemberProcess {
            name: args.name.clone(),
            child,
            output,
            reader,
            ready_revision,
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The store's current revision when the member opened it.
    pub fn ready_revision(&self) -> i64 {
        self.ready_revision
    }

    /// What the member has printed so far; do not hold it across an await.
    pub fn output(&self) -> watch::Ref<'_, MemberOutput> {
        self.output.borrow()
    }

    /// SIGKILLs the member and returns everything it printed, including what was still
    /// in the pipe.
    pub async fn kill(mut self) -> Result<MemberOutput> {
        let name = self.name;
        self.child
            .start_kill()
            .with_context(|| format!("sending SIGKILL to {name}"))?;
        let status = tokio::time::timeout(EXIT_TIMEOUT, self.child.wait())
            .await
            .with_context(|| format!("{name} did not exit after SIGKILL"))??;
        ensure!(
            status.signal() == Some(SIGKILL),
            "{name} exited by itself ({status}) before it was killed; its stderr above says why"
        );
        tokio::time::timeout(EXIT_TIMEOUT, self.reader)
            .await
            .with_context(|| format!("{name}'s stdout did not reach EOF after it died"))?
            .context("the stdout reader panicked")??;
        let output = self.output.borrow().clone();
        Ok(output)
    }
}

async fn read_to_eof(
    name: String,
    mut stdout: BufReader<ChildStdout>,
    output: watch::Sender<MemberOutput>,
) -> Result<()> {
    let result = async {
        while let Some(line) = next_line(&mut stdout).await? {
            match line {
                Ok(WriterLine::Ack(ack)) => output.send_modify(|out| out.acks.push(ack)),
                Ok(WriterLine::Role(role)) => {
                    output.send_modify(|out| out.roles.push((Instant::now(), role)))
                }
                Ok(other @ WriterLine::Ready { .. }) => {
                    bail!("{name} printed {other} again after it was ready")
                }
                Err(_partial) => output.send_modify(|out| out.torn_last_line = true),
            }
        }
        Ok(())
    }
    .await;
    output.send_modify(|out| out.ended = true);
    result
}
