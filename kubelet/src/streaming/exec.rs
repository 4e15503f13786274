//! One exec session, whatever protocol carries it: starts the command in
//! the container's context (on a terminal for `tty`), feeds it the client's
//! stdin and resizes, passes its output on, and says how it ended.

use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::ExitStatusExt;
use std::process::Stdio;
use std::time::Duration;

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::process::{Child, Command};
use tokio::sync::{mpsc, oneshot, watch};

use super::pty::{self, PtyResizer};
use super::status::ExecOutcome;
use crate::runtime::ExecContext;

/// How long output is still awaited once the command exited and its
/// streams went quiet (a background process may hold them open).
const OUTPUT_GRACE: Duration = Duration::from_secs(2);
/// The most read from one output at a time, so one message stays small.
const CHUNK: usize = 32 * 1024;

/// What the client asked to run, and which streams it wants.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ExecRequest {
    pub command: Vec<String>,
    pub stdin: bool,
    pub stdout: bool,
    pub stderr: bool,
    pub tty: bool,
}

/// What the client sends during a session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientEvent {
    Stdin(Bytes),
    /// The client closed stdin; the command reads end of file.
    StdinClosed,
    Resize {
        width: u16,
        height: u16,
    },
}

/// The command's output streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutputStream {
    Stdout,
    Stderr,
}

/// Runs the session until the command exits and its output is passed on.
/// `input` ending means the client is gone: the command is killed.
pub async fn run(
    context: &ExecContext,
    request: &ExecRequest,
    input: mpsc::Receiver<ClientEvent>,
    output: mpsc::Sender<(OutputStream, Bytes)>,
) -> ExecOutcome {
    let started = match start(context, request) {
        Ok(started) => started,
        Err(message) => return ExecOutcome::Failed { message },
    };
    let Started {
        mut child,
        stdin,
        stdout,
        stderr,
        resizer,
    } = started;
    let group = child.id();
    // Whatever ends this session early (its client, the idle timeout)
    // stops what the command started.
    let mut stopper = GroupKiller(group);
    let (exited_tx, exited) = watch::channel(false);
    let mut pumps = tokio::task::JoinSet::new();
    for (reader, stream) in [
        (stdout, OutputStream::Stdout),
        (stderr, OutputStream::Stderr),
    ] {
        if let Some(reader) = reader {
            pumps.spawn(pump(reader, stream, output.clone(), exited.clone()));
        }
    }
    drop(output);
    let (gone_tx, gone) = oneshot::channel();
    let feeding = tokio::spawn(feed(input, stdin, resizer, gone_tx));
    let status = tokio::select! {
        status = child.wait() => status,
        _ = gone => {
            drop(stopper);
            feeding.abort();
            pumps.abort_all();
            let _ = child.wait().await;
            return ExecOutcome::Failed { message: "the client went away".into() };
        }
    };
    // Exited by itself: what it left in the background may go on.
    stopper.0 = None;
    let _ = exited_tx.send(true);
    while pumps.join_next().await.is_some() {}
    feeding.abort();
    match status {
        Ok(status) => ExecOutcome::Exited {
            code: status
                .code()
                .or_else(|| status.signal().map(|signal| 128 + signal))
                .unwrap_or(128),
        },
        Err(err) => ExecOutcome::Failed {
            message: format!("waiting for the command: {err}"),
        },
    }
}

type Reader = Box<dyn AsyncRead + Send + Unpin>;
type Writer = Box<dyn AsyncWrite + Send + Unpin>;

struct Started {
    child: Child,
    stdin: Option<Writer>,
    stdout: Option<Reader>,
    stderr: Option<Reader>,
    resizer: Option<PtyResizer>,
}

/// Starts the command; an `Err` is the message the client is given.
fn start(context: &ExecContext, request: &ExecRequest) -> Result<Started, String> {
    let Some((name, args)) = request.command.split_first() else {
        return Err("no command given".into());
    };
    let program = context.resolve(name).map_err(|err| err.to_string())?;
    let cgroup_procs = match &context.cgroup {
        Some(cgroup) => {
            let path = cgroup.join("cgroup.procs");
            let file = std::fs::OpenOptions::new()
                .write(true)
                .open(&path)
                .map_err(|err| {
                    format!(
                        "cannot enter the container's cgroup {}: {err}",
                        path.display()
                    )
                })?;
            Some(OwnedFd::from(file))
        }
        None => None,
    };
    let pod = crate::network::PodEntry::open(
        context.netns.as_deref(),
        context.files.as_deref(),
        &context.mounts,
    )
    .map_err(|err| {
        let path = context.netns.as_ref().or(context.files.as_ref());
        format!(
            "cannot enter the pod's namespaces ({}): {err}",
            path.map(|p| p.display().to_string()).unwrap_or_default()
        )
    })?;
    let mut command = Command::new(&program);
    if let Some(pod) = &pod {
        let enter = pod.in_child();
        // SAFETY: setns(2), unshare(2) and mount(2) only, on what was
        // opened and made before the fork (`pod` outlives the spawn).
        unsafe {
            command.pre_exec(enter);
        }
    }
    command
        .arg0(name)
        .args(args)
        .env_clear()
        .envs(context.env.iter().map(|(k, v)| (k, v)))
        .kill_on_drop(true);
    if !context.working_dir.as_os_str().is_empty() {
        command.current_dir(&context.working_dir);
    }
    let cgroup_fd = cgroup_procs.as_ref().map(AsRawFd::as_raw_fd);
    if request.tty {
        start_on_terminal(command, request, cgroup_fd)
    } else {
        start_with_pipes(command, request, cgroup_fd)
    }
    .map_err(|err| format!("exec: {name:?}: {err}"))
}

fn start_with_pipes(
    mut command: Command,
    request: &ExecRequest,
    cgroup_fd: Option<i32>,
) -> std::io::Result<Started> {
    let piped = |wanted: bool| {
        if wanted {
            Stdio::piped()
        } else {
            Stdio::null()
        }
    };
    command
        .stdin(piped(request.stdin))
        .stdout(piped(request.stdout))
        .stderr(piped(request.stderr));
    // SAFETY: the closure calls only setsid(2) and write(2), which are
    // async-signal-safe, on an fd opened before the fork.
    unsafe {
        command.pre_exec(move || enter_session(cgroup_fd, false));
    }
    let mut child = command.spawn()?;
    Ok(Started {
        stdin: child.stdin.take().map(|w| Box::new(w) as Writer),
        stdout: child.stdout.take().map(|r| Box::new(r) as Reader),
        stderr: child.stderr.take().map(|r| Box::new(r) as Reader),
        child,
        resizer: None,
    })
}

fn start_on_terminal(
    mut command: Command,
    request: &ExecRequest,
    cgroup_fd: Option<i32>,
) -> std::io::Result<Started> {
    let (primary, replica) = pty::open()?;
    command
        .stdin(replica.try_clone()?)
        .stdout(replica.try_clone()?)
        .stderr(replica);
    // SAFETY: setsid(2), ioctl(2) and write(2) are async-signal-safe.
    unsafe {
        command.pre_exec(move || enter_session(cgroup_fd, true));
    }
    let child = command.spawn()?;
    // The Command held the replica's copies; with it gone, only the
    // command's processes hold the terminal open.
    drop(command);
    let resizer = primary.resizer()?;
    let (reader, writer) = tokio::io::split(primary);
    Ok(Started {
        child,
        stdin: request.stdin.then(|| Box::new(writer) as Writer),
        stdout: request.stdout.then(|| Box::new(reader) as Reader),
        stderr: None,
        resizer: Some(resizer),
    })
}

/// In the forked child: a session (and process group) of its own, the
/// terminal as its controlling terminal, the container's cgroup.
fn enter_session(cgroup_procs: Option<i32>, terminal: bool) -> std::io::Result<()> {
    // SAFETY: async-signal-safe calls with integer arguments and a static
    // buffer.
    unsafe {
        if libc::setsid() < 0 {
            return Err(std::io::Error::last_os_error());
        }
        if terminal && libc::ioctl(0, libc::TIOCSCTTY, 0) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        if let Some(fd) = cgroup_procs {
            if libc::write(fd, b"0".as_ptr().cast(), 1) != 1 {
                return Err(std::io::Error::last_os_error());
            }
        }
    }
    Ok(())
}

/// Passes one output stream on until it ends, the client is gone, or the
/// command exited and the stream stayed quiet for [`OUTPUT_GRACE`].
async fn pump(
    mut reader: Reader,
    stream: OutputStream,
    output: mpsc::Sender<(OutputStream, Bytes)>,
    mut exited: watch::Receiver<bool>,
) {
    let mut buf = vec![0u8; CHUNK];
    loop {
        let read = if *exited.borrow() {
            match tokio::time::timeout(OUTPUT_GRACE, reader.read(&mut buf)).await {
                Ok(read) => read,
                Err(_) => return,
            }
        } else {
            tokio::select! {
                read = reader.read(&mut buf) => read,
                _ = exited.wait_for(|exited| *exited) => continue,
            }
        };
        match read {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                let chunk = Bytes::copy_from_slice(&buf[..n]);
                if output.send((stream, chunk)).await.is_err() {
                    return;
                }
            }
        }
    }
}

/// Writes the client's stdin to the command and applies resizes; tells
/// `gone` when the client's side ends.
async fn feed(
    mut input: mpsc::Receiver<ClientEvent>,
    mut stdin: Option<Writer>,
    resizer: Option<PtyResizer>,
    gone: oneshot::Sender<()>,
) {
    while let Some(event) = input.recv().await {
        match event {
            ClientEvent::Stdin(data) => {
                if let Some(writer) = stdin.as_mut() {
                    let written = writer.write_all(&data).await;
                    if written.is_err() || writer.flush().await.is_err() {
                        stdin = None;
                    }
                }
            }
            ClientEvent::StdinClosed => {
                if let Some(mut writer) = stdin.take() {
                    let _ = writer.shutdown().await;
                }
            }
            ClientEvent::Resize { width, height } => {
                if let Some(resizer) = &resizer {
                    if let Err(err) = resizer.resize(width, height) {
                        tracing::debug!(%err, "cannot resize an exec terminal");
                    }
                }
            }
        }
    }
    let _ = gone.send(());
}

/// SIGKILLs the session's process group when dropped, unless disarmed.
struct GroupKiller(Option<u32>);

impl Drop for GroupKiller {
    fn drop(&mut self) {
        if let Some(pgid) = self.0.and_then(|pid| libc::pid_t::try_from(pid).ok()) {
            // SAFETY: kill(2) takes plain integers; a gone group is ESRCH.
            unsafe {
                libc::kill(-pgid, libc::SIGKILL);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn context(cgroup: Option<std::path::PathBuf>) -> ExecContext {
        ExecContext {
            env: vec![("PATH".into(), "/usr/bin:/bin".into())],
            working_dir: "/".into(),
            cgroup,
            stdin_socket: None,
            stdin: false,
            tty: false,
            netns: None,
            files: None,
            mounts: Vec::new(),
        }
    }

    async fn run_true(context: &ExecContext) -> ExecOutcome {
        let request = ExecRequest {
            command: vec!["true".into()],
            stdout: true,
            ..Default::default()
        };
        let (_input_tx, input) = mpsc::channel(1);
        let (output, mut output_rx) = mpsc::channel(1);
        let draining = tokio::spawn(async move { while output_rx.recv().await.is_some() {} });
        let outcome = run(context, &request, input, output).await;
        draining.await.unwrap();
        outcome
    }

    #[tokio::test]
    async fn the_command_enters_the_containers_cgroup_before_it_runs() {
        // A stand-in cgroup: joining writes "0" to its cgroup.procs.
        let cgroup = tempfile::tempdir().unwrap();
        std::fs::write(cgroup.path().join("cgroup.procs"), "").unwrap();
        let outcome = run_true(&context(Some(cgroup.path().to_path_buf()))).await;
        assert_eq!(outcome, ExecOutcome::Exited { code: 0 });
        let written = std::fs::read_to_string(cgroup.path().join("cgroup.procs")).unwrap();
        assert_eq!(written, "0");
    }

    #[tokio::test]
    async fn a_cgroup_that_is_gone_fails_the_exec() {
        let gone = tempfile::tempdir().unwrap().path().join("gone");
        let ExecOutcome::Failed { message } = run_true(&context(Some(gone))).await else {
            panic!("ran outside its cgroup");
        };
        assert!(
            message.starts_with("cannot enter the container's cgroup"),
            "{message}"
        );
    }
}
