//! exec probes: the command runs with the container's env and cwd in its
//! own process group, which is killed when the probe ends or times out.

use std::io::{PipeReader, PipeWriter};
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::io::AsyncReadExt;
use tokio::net::unix::pipe;
use tokio::process::{Child, Command};

use super::{ProbeResult, ProbeTarget};

/// How much of the command's output (stdout and stderr together) is kept
/// for the failure message.
pub(super) const OUTPUT_LIMIT: usize = 10 * 1024;

/// How long output still in the pipe is awaited once the command ended.
const OUTPUT_GRACE: Duration = Duration::from_secs(1);

pub(super) async fn run(
    command: &[String],
    target: &ProbeTarget,
    timeout: Duration,
) -> ProbeResult {
    let Some((program, args)) = command.split_first() else {
        return ProbeResult::Failure("exec probe has no command".to_string());
    };
    let (reader, writer) = match std::io::pipe() {
        Ok(pipe) => pipe,
        Err(e) => return ProbeResult::Unknown(format!("cannot make a pipe for probe output: {e}")),
    };
    let mut child = match spawn(program, args, target, writer) {
        Ok(child) => child,
        Err(e) => return ProbeResult::Failure(format!("failed to run {program:?}: {e}")),
    };
    let group = child.id();
    let output = Arc::new(Mutex::new(Vec::new()));
    let mut reading = tokio::spawn(collect_output(reader, Arc::clone(&output)));
    let waited = tokio::time::timeout(timeout, child.wait()).await;
    // Whatever the command left running (or the command itself, on timeout).
    if let Some(group) = group {
        kill_group(group);
    }
    if waited.is_err() {
        let _ = child.wait().await;
    }
    if tokio::time::timeout(OUTPUT_GRACE, &mut reading)
        .await
        .is_err()
    {
        reading.abort();
    }
    let text = String::from_utf8_lossy(&output.lock()).into_owned();
    match waited {
        Err(_) => ProbeResult::Failure(format!("command {:?} timed out", command.join(" "))),
        Ok(Err(e)) => ProbeResult::Unknown(format!("cannot wait for {program:?}: {e}")),
        Ok(Ok(status)) => judge(status, text, command),
    }
}

fn judge(status: ExitStatus, output: String, command: &[String]) -> ProbeResult {
    if status.success() {
        return ProbeResult::Success;
    }
    if !output.is_empty() {
        return ProbeResult::Failure(output);
    }
    let ended = match status.code() {
        Some(code) => format!("exited with code {code}"),
        None => "was killed by a signal".to_string(),
    };
    ProbeResult::Failure(format!("command {:?} {ended}", command.join(" ")))
}

/// Starts the command; the Command (and its copies of the pipe's write end)
/// is dropped here so the pipe closes when the command's group is gone.
fn spawn(
    program: &str,
    args: &[String],
    target: &ProbeTarget,
    writer: PipeWriter,
) -> std::io::Result<Child> {
    let pod = crate::network::PodEntry::open(
        target.netns.as_deref(),
        target.files.as_deref(),
        &target.mounts,
    )?;
    let mut command = Command::new(program);
    if let Some(pod) = &pod {
        let enter = pod.in_child();
        // SAFETY: setns(2), unshare(2) and mount(2) only, on what was
        // opened and made before the fork (`pod` outlives the spawn).
        unsafe {
            command.pre_exec(enter);
        }
    }
    command
        .args(args)
        .env_clear()
        .envs(target.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(writer.try_clone()?)
        .stderr(writer)
        .process_group(0)
        .kill_on_drop(true);
    if !target.working_dir.as_os_str().is_empty() {
        command.current_dir(&target.working_dir);
    }
    command.spawn()
}

/// Reads the pipe to its end, keeping the first [`OUTPUT_LIMIT`] bytes.
async fn collect_output(reader: PipeReader, output: Arc<Mutex<Vec<u8>>>) {
    let Ok(mut receiver) = pipe::Receiver::from_owned_fd(reader.into()) else {
        return;
    };
    let mut chunk = [0u8; 4096];
    while let Ok(read) = receiver.read(&mut chunk).await {
        if read == 0 {
            break;
        }
        let mut kept = output.lock();
        let room = OUTPUT_LIMIT.saturating_sub(kept.len());
        kept.extend_from_slice(&chunk[..read.min(room)]);
    }
}

/// SIGKILL to the whole process group led by `pid`.
fn kill_group(pid: u32) {
    if let Ok(pgid) = libc::pid_t::try_from(pid) {
        // SAFETY: kill(2) takes plain integers; a group that is gone is ESRCH.
        unsafe {
            libc::kill(-pgid, libc::SIGKILL);
        }
    }
}
