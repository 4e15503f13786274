//! The container shim: a small process (like containerd-shim) that runs one
//! container as its child, writes its output to the CRI log file and records
//! its exit status, so containers outlive a restarting kubelet. No tokio here.

pub mod terminal;

use std::ffi::OsString;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixListener;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use jiff::Timestamp;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use crate::logs::cri::{encode_record, LineSplitter, LogStream};
use crate::runtime::state::{rfc3339, write_atomic};
use crate::runtime::{cgroup, proc, ExitStatus};

/// How long the shim waits for the output pipes to drain once the
/// container's process group is gone (a process that escaped the group may
/// hold them open).
const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

/// What the shim runs; written by the runtime as JSON, its path the shim's
/// only argument.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShimSpec {
    /// The program to execute, already resolved by the runtime.
    pub program: PathBuf,
    /// The argument vector, `argv[0]` as the container's command names it.
    pub argv: Vec<String>,
    pub env: Vec<(String, String)>,
    pub working_dir: PathBuf,
    /// The CRI log file, appended to.
    pub log_path: PathBuf,
    /// Where the [`ExitStatus`] is written when the container exits.
    pub exit_status_path: PathBuf,
    /// The container's cgroup, entered before exec.
    pub cgroup: Option<PathBuf>,
    /// For a container with `stdin`: a Unix socket whose connections'
    /// bytes go to the container's stdin (attach); else stdin is
    /// `/dev/null`.
    /// With `tty`, the socket also carries the terminal's output and
    /// [`terminal::Frame`]s instead of raw stdin.
    #[serde(default)]
    pub stdin_socket: Option<PathBuf>,
    /// The container's `stdin`: without it a terminal takes no input.
    #[serde(default)]
    pub stdin: bool,
    /// The container's `stdinOnce`: without a terminal, its stdin is
    /// closed when the first attached client's stdin ends.
    #[serde(default)]
    pub stdin_once: bool,
    /// The container's `tty`: it runs on a terminal of its own.
    #[serde(default)]
    pub tty: bool,
    /// The pod's network namespace, entered before exec; `None`: the
    /// host's network.
    #[serde(default)]
    pub netns: Option<PathBuf>,
    /// The pod's own files (hosts, resolv.conf), bind-mounted in the
    /// process's mount namespace; `None`: beside `netns` (a spec of an
    /// older kubelet), or none in the host's network.
    #[serde(default)]
    pub files: Option<PathBuf>,
    /// The container's volumes, bind-mounted at their mountPaths in its
    /// mount namespace before exec (with `netns` or `files` only).
    #[serde(default)]
    pub mounts: Vec<crate::volumes::BindMount>,
}

/// The one line the shim writes to its stdout, telling the runtime whether
/// the container started.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "report", rename_all = "snake_case")]
pub enum ShimReport {
    Started(ShimStarted),
    Failed { message: String },
}

/// The processes of a started container, with their `/proc` start times so
/// that reused pids are not mistaken for them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShimStarted {
    pub shim_pid: u32,
    pub shim_start_time: u64,
    pub pid: u32,
    pub pid_start_time: Option<u64>,
    #[serde(with = "rfc3339")]
    pub started_at: Timestamp,
}

#[derive(Debug, thiserror::Error)]
enum ShimError {
    #[error("usage: kubelet-shim <spec.json>")]
    Usage,
    #[error("cannot read shim spec {path}: {source}")]
    ReadSpec { path: PathBuf, source: io::Error },
    #[error("invalid shim spec {path}: {source}")]
    ParseSpec {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error("shim spec {path} has an empty argv")]
    EmptyArgv { path: PathBuf },
    #[error("cannot open container log {path}: {source}")]
    OpenLog { path: PathBuf, source: io::Error },
    #[error("cannot open a terminal for the container (tty: true): {0}")]
    OpenTerminal(io::Error),
    #[error("cannot open {path} to enter the container's cgroup: {source}")]
    OpenCgroup { path: PathBuf, source: io::Error },
    #[error("cannot open the pod's network namespace {path}: {source}")]
    OpenNetns { path: PathBuf, source: io::Error },
    #[error("exec {program}: {source}")]
    Exec { program: PathBuf, source: io::Error },
    #[error("cannot write exit status {path}: {source}")]
    WriteExitStatus { path: PathBuf, source: io::Error },
}

/// The shim's entry point; `args` are its arguments without the program
/// name. Returns the shim's own exit code (not the container's).
pub fn main(args: Vec<OsString>) -> i32 {
    let result = read_spec(&args).and_then(|spec| {
        install_signal_handlers();
        run(&spec)
    });
    match result {
        Ok(()) => 0,
        Err(err) => {
            eprintln!("kubelet-shim: {err}");
            1
        }
    }
}

fn read_spec(args: &[OsString]) -> Result<ShimSpec, ShimError> {
    let [path] = args else {
        report(&ShimReport::Failed {
            message: ShimError::Usage.to_string(),
        });
        return Err(ShimError::Usage);
    };
    let path = PathBuf::from(path);
    let spec = parse_spec(&path);
    if let Err(err) = &spec {
        report(&ShimReport::Failed {
            message: err.to_string(),
        });
    }
    spec
}

fn parse_spec(path: &Path) -> Result<ShimSpec, ShimError> {
    let bytes = std::fs::read(path).map_err(|source| ShimError::ReadSpec {
        path: path.to_path_buf(),
        source,
    })?;
    let spec: ShimSpec = serde_json::from_slice(&bytes).map_err(|source| ShimError::ParseSpec {
        path: path.to_path_buf(),
        source,
    })?;
    if spec.argv.is_empty() {
        return Err(ShimError::EmptyArgv {
            path: path.to_path_buf(),
        });
    }
    Ok(spec)
}

/// Runs the container to its end; reports the start (or why it failed) on
/// stdout, then records the exit status.
fn run(spec: &ShimSpec) -> Result<(), ShimError> {
    // Bound before the start is reported, so attach finds it at once.
    let stdin_listener = spec.stdin_socket.as_deref().and_then(bind_stdin_socket);
    let started = start_container(spec, stdin_listener.is_some());
    let (mut child, log, terminal) = match started {
        Ok(started) => started,
        Err(err) => {
            report(&ShimReport::Failed {
                message: err.to_string(),
            });
            return Err(err);
        }
    };
    let pid = child.id();
    report(&ShimReport::Started(ShimStarted {
        shim_pid: std::process::id(),
        shim_start_time: proc::start_time(std::process::id()).unwrap_or(0),
        pid,
        pid_start_time: proc::start_time(pid),
        started_at: Timestamp::now(),
    }));
    detach_stdout();
    let oom_kills_before = spec
        .cgroup
        .as_deref()
        .and_then(cgroup::oom_kills)
        .unwrap_or(0);
    let (drained, streams) = match terminal {
        Some(primary) => {
            let terminal = terminal::Terminal::new(primary, spec.stdin);
            if let Some(listener) = stdin_listener {
                terminal.spawn_clients(listener);
            }
            let (done, drained) = mpsc::channel();
            terminal.spawn_output(log, done);
            (drained, 1)
        }
        None => {
            if let (Some(listener), Some(stdin)) = (stdin_listener, child.stdin.take()) {
                let once = spec.stdin_once;
                std::thread::spawn(move || serve_stdin(listener, stdin, once));
            }
            (copy_output(&mut child, log), 2)
        }
    };
    let status = wait_for_exit(&mut child);
    end_process_group(pid, spec.cgroup.as_deref());
    wait_drained(&drained, streams);
    let oom_killed = spec
        .cgroup
        .as_deref()
        .and_then(cgroup::oom_kills)
        .is_some_and(|after| after > oom_kills_before);
    let exit = ExitStatus::new(status.code(), status.signal(), oom_killed);
    record_exit(&spec.exit_status_path, &exit)?;
    if let Some(cgroup) = &spec.cgroup {
        cgroup::remove(cgroup);
    }
    if let Some(socket) = &spec.stdin_socket {
        let _ = std::fs::remove_file(socket);
    }
    Ok(())
}

/// The socket attach writes the container's stdin through; without it
/// (a path too long for a socket, say) stdin is `/dev/null`.
fn bind_stdin_socket(path: &Path) -> Option<UnixListener> {
    let _ = std::fs::remove_file(path);
    match UnixListener::bind(path) {
        Ok(listener) => Some(listener),
        Err(err) => {
            eprintln!(
                "kubelet-shim: cannot listen on {} for stdin: {err}",
                path.display()
            );
            None
        }
    }
}

/// Copies what each attached client sends into the container's stdin; the
/// container's stdin stays open between clients, unless `once`
/// (`stdinOnce`): then the first client's end closes it, and later
/// clients are disconnected at once, their input going nowhere.
fn serve_stdin(listener: UnixListener, stdin: ChildStdin, once: bool) {
    let stdin = Arc::new(Mutex::new(Some(stdin)));
    for connection in listener.incoming() {
        let Ok(connection) = connection else {
            continue;
        };
        if stdin.lock().is_none() {
            continue;
        }
        let stdin = stdin.clone();
        std::thread::spawn(move || {
            copy_to_stdin(connection, &stdin);
            if once {
                stdin.lock().take();
            }
        });
    }
}

fn copy_to_stdin(mut connection: impl Read, stdin: &Mutex<Option<ChildStdin>>) {
    let mut buf = [0u8; 32 * 1024];
    loop {
        match connection.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                let mut stdin = stdin.lock();
                let written = stdin.as_mut().map(|stdin| stdin.write_all(&buf[..n]));
                if !matches!(written, Some(Ok(()))) {
                    return;
                }
            }
        }
    }
}

/// The started container, its log, and its terminal's primary side when it
/// has one.
type Started = (Child, Arc<Mutex<File>>, Option<File>);

fn start_container(spec: &ShimSpec, keep_stdin: bool) -> Result<Started, ShimError> {
    let log = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&spec.log_path)
        .map_err(|source| ShimError::OpenLog {
            path: spec.log_path.clone(),
            source,
        })?;
    let cgroup_procs = match &spec.cgroup {
        Some(cgroup) => Some(open_cgroup_procs(cgroup)?),
        None => None,
    };
    let (primary, replica) = if spec.tty {
        let (primary, replica) = terminal::open().map_err(ShimError::OpenTerminal)?;
        (Some(primary), Some(replica))
    } else {
        (None, None)
    };
    let tty = replica.is_some();
    let pod =
        crate::network::PodEntry::open(spec.netns.as_deref(), spec.files.as_deref(), &spec.mounts)
            .map_err(|source| ShimError::OpenNetns {
                path: spec
                    .netns
                    .clone()
                    .or(spec.files.clone())
                    .unwrap_or_default(),
                source,
            })?;
    let mut command = container_command(spec, keep_stdin, replica)?;
    if let Some(pod) = &pod {
        let enter = pod.in_child();
        // SAFETY: setns(2), unshare(2) and mount(2) only, on what was
        // opened and made before the fork (`pod` outlives the spawn).
        unsafe {
            command.pre_exec(enter);
        }
    }
    let cgroup_fd = cgroup_procs.as_ref().map(|f| f.as_raw_fd());
    // SAFETY: the closure only calls setpgid(2) or setsid(2) and ioctl(2),
    // and write(2), which are async-signal-safe, on fds opened before the
    // fork.
    unsafe {
        command.pre_exec(move || enter_container_group(cgroup_fd, tty));
    }
    let child = command.spawn().map_err(|source| ShimError::Exec {
        program: spec.program.clone(),
        source,
    })?;
    // `command` and the replica copies it holds are dropped here: the
    // terminal's end of file must come when the container's side closes.
    Ok((child, Arc::new(Mutex::new(log)), primary))
}

/// The container's command; with a terminal (`replica`), that is its
/// stdin, stdout and stderr.
fn container_command(
    spec: &ShimSpec,
    keep_stdin: bool,
    replica: Option<OwnedFd>,
) -> Result<Command, ShimError> {
    let mut command = Command::new(&spec.program);
    command
        .arg0(&spec.argv[0])
        .args(&spec.argv[1..])
        .env_clear()
        .envs(spec.env.iter().map(|(name, value)| (name, value)))
        .current_dir(&spec.working_dir);
    match replica {
        Some(replica) => {
            let clone = || replica.try_clone().map_err(ShimError::OpenTerminal);
            command
                .stdin(Stdio::from(clone()?))
                .stdout(Stdio::from(clone()?))
                .stderr(Stdio::from(replica));
        }
        None => {
            command
                .stdin(if keep_stdin {
                    Stdio::piped()
                } else {
                    Stdio::null()
                })
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
        }
    }
    Ok(command)
}

fn open_cgroup_procs(cgroup: &Path) -> Result<File, ShimError> {
    let path = cgroup.join("cgroup.procs");
    OpenOptions::new()
        .write(true)
        .open(&path)
        .map_err(|source| ShimError::OpenCgroup { path, source })
}

/// In the forked child before exec: become the leader of the container's own
/// process group (so signals to it spare the shim) — on a terminal, of a
/// session with the terminal as its controlling terminal — and enter its
/// cgroup (writing "0" to `cgroup.procs` moves the writing process).
fn enter_container_group(cgroup_procs: Option<i32>, tty: bool) -> io::Result<()> {
    if tty {
        terminal::take_controlling_terminal()?;
    }
    // SAFETY: setpgid and write are async-signal-safe; the buffer is static.
    unsafe {
        if !tty && libc::setpgid(0, 0) != 0 {
            return Err(io::Error::last_os_error());
        }
        if let Some(fd) = cgroup_procs {
            if libc::write(fd, b"0".as_ptr().cast(), 1) != 1 {
                return Err(io::Error::last_os_error());
            }
        }
    }
    Ok(())
}

/// Writes the report line for the runtime; ignored if the runtime is gone.
fn report(report: &ShimReport) {
    if let Ok(mut line) = serde_json::to_vec(report) {
        line.push(b'\n');
        let mut stdout = io::stdout().lock();
        let _ = stdout.write_all(&line).and_then(|()| stdout.flush());
    }
}

/// Points stdout at /dev/null: the runtime stops reading after the report,
/// and a kubelet that died must not make the shim fail with EPIPE.
fn detach_stdout() {
    if let Ok(null) = File::options().write(true).open("/dev/null") {
        // SAFETY: dup2 onto fd 1, which this process owns; `null` stays valid
        // for the call.
        unsafe {
            libc::dup2(null.as_raw_fd(), libc::STDOUT_FILENO);
        }
    }
}

/// A no-op handler, not SIG_IGN: signals sent to the shim (SIGTERM to
/// everything at node shutdown, SIGHUP, SIGINT) must not end it before the
/// container's status is recorded, and handlers, unlike ignored signals, are
/// reset to the default in the container when it execs.
fn install_signal_handlers() {
    extern "C" fn ignore(_: libc::c_int) {}
    for signal in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP, libc::SIGQUIT] {
        // SAFETY: a zeroed sigaction with a valid handler and SA_RESTART is a
        // well-formed argument; the handler does nothing.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = ignore as extern "C" fn(libc::c_int) as libc::sighandler_t;
            action.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(signal, &action, std::ptr::null_mut());
        }
    }
}

/// Starts a thread per output stream copying it into the log; each reports
/// on the channel when its pipe closed.
fn copy_output(child: &mut Child, log: Arc<Mutex<File>>) -> mpsc::Receiver<()> {
    let (done, drained) = mpsc::channel();
    if let Some(stdout) = child.stdout.take() {
        spawn_copier(stdout, LogStream::Stdout, log.clone(), done.clone());
    }
    if let Some(stderr) = child.stderr.take() {
        spawn_copier(stderr, LogStream::Stderr, log, done);
    }
    drained
}

fn spawn_copier(
    pipe: impl Read + Send + 'static,
    stream: LogStream,
    log: Arc<Mutex<File>>,
    done: mpsc::Sender<()>,
) {
    std::thread::spawn(move || {
        copy_stream(pipe, stream, &log);
        let _ = done.send(());
    });
}

/// Copies one output stream into CRI log records until it closes.
fn copy_stream(mut pipe: impl Read, stream: LogStream, log: &Mutex<File>) {
    let mut splitter = LineSplitter::default();
    let mut buf = vec![0u8; 32 * 1024];
    let mut records = Vec::new();
    loop {
        let read = match pipe.read(&mut buf) {
            Ok(0) => break,
            Ok(read) => read,
            Err(err) if err.kind() == io::ErrorKind::Interrupted => continue,
            Err(err) => {
                eprintln!("kubelet-shim: reading container {}: {err}", stream.as_str());
                break;
            }
        };
        let now = Timestamp::now();
        splitter.push(&buf[..read], |tag, content| {
            encode_record(now, stream, tag, content, &mut records)
        });
        append_records(log, &mut records);
    }
    let now = Timestamp::now();
    splitter.finish(|tag, content| encode_record(now, stream, tag, content, &mut records));
    append_records(log, &mut records);
}

/// Appends whole records in one write, so the two streams' records do not
/// interleave inside a line.
fn append_records(log: &Mutex<File>, records: &mut Vec<u8>) {
    if records.is_empty() {
        return;
    }
    if let Err(err) = log.lock().write_all(records) {
        eprintln!("kubelet-shim: writing container log: {err}");
    }
    records.clear();
}

fn wait_for_exit(child: &mut Child) -> std::process::ExitStatus {
    loop {
        match child.wait() {
            Ok(status) => return status,
            Err(err) if err.kind() == io::ErrorKind::Interrupted => continue,
            Err(err) => {
                // Only possible if the child was already reaped, which the
                // shim never does elsewhere; report it as killed.
                eprintln!("kubelet-shim: waiting for the container: {err}");
                return std::process::ExitStatus::from_raw(libc::SIGKILL);
            }
        }
    }
}

/// The container's main process has exited: like a container's pid 1, it
/// takes the rest of its process group (and cgroup) with it.
fn end_process_group(pid: u32, cgroup: Option<&Path>) {
    if let Ok(pgid) = i32::try_from(pid) {
        // SAFETY: kill(2) has no memory-safety preconditions.
        unsafe {
            libc::kill(-pgid, libc::SIGKILL);
        }
    }
    if let Some(cgroup) = cgroup {
        let _ = std::fs::write(cgroup.join("cgroup.kill"), "1");
    }
}

/// Waits for `streams` output copiers to finish.
fn wait_drained(drained: &mpsc::Receiver<()>, streams: usize) {
    let deadline = Instant::now() + DRAIN_TIMEOUT;
    for _ in 0..streams {
        let left = deadline.saturating_duration_since(Instant::now());
        if drained.recv_timeout(left).is_err() {
            eprintln!(
                "kubelet-shim: container output still open after its exit; log may be cut short"
            );
            return;
        }
    }
}

fn record_exit(path: &Path, exit: &ExitStatus) -> Result<(), ShimError> {
    let bytes = serde_json::to_vec_pretty(exit).map_err(|err| ShimError::WriteExitStatus {
        path: path.to_path_buf(),
        source: io::Error::other(err),
    })?;
    write_atomic(path, &bytes).map_err(|source| ShimError::WriteExitStatus {
        path: path.to_path_buf(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_lines_are_tagged_json() {
        let report = ShimReport::Started(ShimStarted {
            shim_pid: 1,
            shim_start_time: 2,
            pid: 3,
            pid_start_time: None,
            started_at: "2024-05-01T10:00:00Z".parse().unwrap(),
        });
        let json = serde_json::to_string(&report).unwrap();
        assert!(json.starts_with("{\"report\":\"started\""), "{json}");
        assert_eq!(serde_json::from_str::<ShimReport>(&json).unwrap(), report);
    }

    #[test]
    fn spec_with_empty_argv_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("spec.json");
        let spec = ShimSpec {
            program: "/bin/true".into(),
            argv: vec![],
            env: vec![],
            working_dir: "/".into(),
            log_path: dir.path().join("0.log"),
            exit_status_path: dir.path().join("exit.json"),
            cgroup: None,
            stdin_socket: None,
            stdin: false,
            stdin_once: false,
            tty: false,
            netns: None,
            files: None,
            mounts: Vec::new(),
        };
        std::fs::write(&path, serde_json::to_vec(&spec).unwrap()).unwrap();
        assert!(matches!(
            parse_spec(&path),
            Err(ShimError::EmptyArgv { .. })
        ));
        assert!(matches!(
            parse_spec(&dir.path().join("missing.json")),
            Err(ShimError::ReadSpec { .. })
        ));
    }

    #[test]
    fn copy_stream_writes_cri_records() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("0.log");
        let log = Mutex::new(File::create(&path).unwrap());
        copy_stream(&b"hello\nno newline"[..], LogStream::Stderr, &log);
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<_> = text.lines().map(|l| l.split_once(' ').unwrap().1).collect();
        assert_eq!(lines, vec!["stderr F hello", "stderr P no newline"]);
    }
}
