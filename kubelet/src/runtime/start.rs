//! Starting a container: check its program and working directory, lay out
//! its state and log files, create its cgroup, and launch its shim in a
//! session of its own.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use super::cgroup::{self, LimitsEnforcement};
use super::container::ContainerSpec;
use super::handle::ContainerHandle;
use super::state::{read_json, write_json, ContainerDir, ContainerRecord};
use super::{exec, proc, ProcessRuntime, RuntimeError};
use crate::logs::ContainerLogs;
use crate::shim::{ShimReport, ShimSpec, ShimStarted};

/// How long a shim may take to report that it started the container.
const SHIM_REPORT_TIMEOUT: Duration = Duration::from_secs(30);
/// How much of the shim's own log goes into an error message.
const SHIM_LOG_EXCERPT: usize = 2048;

impl ProcessRuntime {
    /// Starts a container under a new shim and returns its handle once the
    /// container's process runs. Fails before starting anything if the
    /// program cannot be executed or the working directory is missing.
    pub async fn start(&self, spec: ContainerSpec) -> Result<ContainerHandle, RuntimeError> {
        let program = resolve(&spec)?;
        let dir = ContainerDir::new(self.root(), &spec.id)?;
        prepare_state_dir(&dir, &spec)?;
        let logs = self.container_logs(&spec.id);
        let log_path = prepare_log_file(&logs, spec.id.attempt)?;
        let limits = self.cgroups.create(&spec.id, spec.limits);
        let shim_spec = shim_spec_of(&spec, program, log_path, &dir, &limits);
        write_json(&dir.spec_path(), &shim_spec)?;
        let (child, started) = match self.launch_shim(&dir, &spec).await {
            Ok(launched) => launched,
            Err(err) => {
                if let Some(cgroup) = &shim_spec.cgroup {
                    cgroup::remove(cgroup);
                }
                return Err(err);
            }
        };
        let record = record_of(&spec, started, limits);
        let handle = ContainerHandle::new(record.clone(), dir.exit_path());
        if let Err(err) = write_json(&dir.state_path(), &record) {
            // Untracked, it could not be recovered: do not leave it running.
            handle.signal(libc::SIGKILL);
            return Err(err);
        }
        tokio::spawn(reap_shim(child, handle.clone()));
        self.remove_old_attempts(&spec, &logs);
        tracing::info!(container = %spec.id, pid = handle.pid(), "container started");
        Ok(handle)
    }

    async fn launch_shim(
        &self,
        dir: &ContainerDir,
        spec: &ContainerSpec,
    ) -> Result<(Child, ShimStarted), RuntimeError> {
        let mut child = spawn_shim(&self.config.shim, dir)?;
        let Some(stdout) = child.stdout.take() else {
            return Err(RuntimeError::ShimExited {
                container: spec.id.to_string(),
                detail: "its stdout was not captured".to_string(),
            });
        };
        let mut line = String::new();
        let mut stdout = BufReader::new(stdout);
        let read = stdout.read_line(&mut line);
        match tokio::time::timeout(SHIM_REPORT_TIMEOUT, read).await {
            Err(_) => {
                let _ = child.start_kill();
                Err(RuntimeError::ShimTimeout {
                    container: spec.id.to_string(),
                    timeout: SHIM_REPORT_TIMEOUT,
                })
            }
            Ok(Ok(read)) if read > 0 => parse_report(child, &line, spec, dir).await,
            Ok(_) => {
                let status = child.wait().await;
                Err(RuntimeError::ShimExited {
                    container: spec.id.to_string(),
                    detail: format!("{status:?}; {}", shim_log_excerpt(&dir.shim_log_path())),
                })
            }
        }
    }

    /// Keeps the state and logs of the current and previous attempt only.
    fn remove_old_attempts(&self, spec: &ContainerSpec, logs: &ContainerLogs) {
        if let Err(err) = logs.remove_old_attempts(2) {
            tracing::warn!(container = %spec.id, %err, "cannot remove old container logs");
        }
        let oldest_kept = spec.id.attempt.saturating_sub(1);
        let Ok(current) = ContainerDir::new(self.root(), &spec.id) else {
            return;
        };
        let Some(Ok(entries)) = current.path().parent().map(std::fs::read_dir) else {
            return;
        };
        for entry in entries.flatten() {
            let attempt = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<u32>().ok());
            let old = ContainerDir::from_path(entry.path());
            if attempt.is_some_and(|a| a < oldest_kept) && has_exited(&old) {
                let _ = std::fs::remove_dir_all(old.path());
            }
        }
    }
}

/// Whether the container of a state directory is over (its shim recorded
/// the exit, or is gone).
pub(super) fn has_exited(dir: &ContainerDir) -> bool {
    if dir.exit_path().exists() {
        return true;
    }
    match read_json::<ContainerRecord>(&dir.state_path()) {
        Ok(Some(record)) => !proc::is_running(record.shim_pid, record.shim_start_time),
        _ => true,
    }
}

fn resolve(spec: &ContainerSpec) -> Result<PathBuf, RuntimeError> {
    let Some(program) = spec.argv.first() else {
        return Err(RuntimeError::EmptyCommand {
            container: spec.id.to_string(),
        });
    };
    match std::fs::metadata(&spec.working_dir) {
        Ok(meta) if meta.is_dir() => {}
        Ok(_) => {
            return Err(RuntimeError::WorkingDir {
                path: spec.working_dir.clone(),
                source: std::io::Error::from_raw_os_error(libc::ENOTDIR),
            })
        }
        Err(source) => {
            return Err(RuntimeError::WorkingDir {
                path: spec.working_dir.clone(),
                source,
            })
        }
    }
    exec::resolve_program(program, &spec.env, &spec.working_dir)
}

/// A fresh state directory; an attempt whose shim still runs is not replaced.
fn prepare_state_dir(dir: &ContainerDir, spec: &ContainerSpec) -> Result<(), RuntimeError> {
    if !has_exited(dir) {
        return Err(RuntimeError::AlreadyRunning {
            container: spec.id.to_string(),
        });
    }
    let io_error = |action: &'static str| {
        move |source| RuntimeError::Io {
            action,
            path: dir.path().to_path_buf(),
            source,
        }
    };
    match std::fs::remove_dir_all(dir.path()) {
        Err(err) if err.kind() != std::io::ErrorKind::NotFound => {
            return Err(io_error("remove old container state")(err))
        }
        _ => {}
    }
    std::fs::create_dir_all(dir.path()).map_err(io_error("create container state directory"))
}

/// The attempt's log file, empty: a start of the same attempt is a new run.
fn prepare_log_file(logs: &ContainerLogs, attempt: u32) -> Result<PathBuf, RuntimeError> {
    let io_error = |action: &'static str, path: &Path| {
        let path = path.to_path_buf();
        move |source| RuntimeError::Io {
            action,
            path,
            source,
        }
    };
    std::fs::create_dir_all(logs.dir()).map_err(io_error("create log directory", logs.dir()))?;
    let path = logs.path(attempt);
    match std::fs::remove_file(&path) {
        Err(err) if err.kind() != std::io::ErrorKind::NotFound => {
            Err(io_error("remove old log file", &path)(err))
        }
        _ => Ok(path),
    }
}

fn spawn_shim(shim: &[std::ffi::OsString], dir: &ContainerDir) -> Result<Child, RuntimeError> {
    let Some((program, args)) = shim.split_first() else {
        return Err(RuntimeError::NoShim);
    };
    let shim_log_path = dir.shim_log_path();
    let shim_log = std::fs::File::create(&shim_log_path).map_err(|source| RuntimeError::Io {
        action: "create shim log",
        path: shim_log_path,
        source,
    })?;
    let mut command = Command::new(program);
    command
        .args(args)
        .arg(dir.spec_path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(shim_log)
        .kill_on_drop(false);
    // SAFETY: setsid(2) is async-signal-safe and touches no memory.
    unsafe {
        command.pre_exec(|| {
            if libc::setsid() < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    command.spawn().map_err(|source| RuntimeError::ShimSpawn {
        program: PathBuf::from(program),
        source,
    })
}

async fn parse_report(
    mut child: Child,
    line: &str,
    spec: &ContainerSpec,
    dir: &ContainerDir,
) -> Result<(Child, ShimStarted), RuntimeError> {
    match serde_json::from_str::<ShimReport>(line.trim_end()) {
        Ok(ShimReport::Started(started)) => Ok((child, started)),
        Ok(ShimReport::Failed { message }) => {
            let _ = child.wait().await;
            Err(RuntimeError::StartFailed {
                container: spec.id.to_string(),
                message,
            })
        }
        Err(source) => {
            let _ = child.start_kill();
            Err(RuntimeError::ShimReport {
                container: spec.id.to_string(),
                line: format!(
                    "{}; {}",
                    line.trim_end(),
                    shim_log_excerpt(&dir.shim_log_path())
                ),
                source,
            })
        }
    }
}

fn shim_spec_of(
    spec: &ContainerSpec,
    program: PathBuf,
    log_path: PathBuf,
    dir: &ContainerDir,
    limits: &LimitsEnforcement,
) -> ShimSpec {
    ShimSpec {
        program,
        argv: spec.argv.clone(),
        env: spec.env.clone(),
        working_dir: spec.working_dir.clone(),
        log_path,
        exit_status_path: dir.exit_path(),
        cgroup: match limits {
            LimitsEnforcement::Applied { cgroup } => Some(cgroup.clone()),
            LimitsEnforcement::Skipped { .. } => None,
        },
        // A terminal's output reaches attach through the socket too.
        stdin_socket: (spec.stdin || spec.tty).then(|| dir.stdin_socket_path()),
        stdin: spec.stdin,
        stdin_once: spec.stdin_once,
        tty: spec.tty,
        netns: spec.netns.clone(),
        files: spec.files.clone(),
        mounts: spec.mounts.clone(),
    }
}

fn record_of(
    spec: &ContainerSpec,
    started: ShimStarted,
    limits: LimitsEnforcement,
) -> ContainerRecord {
    ContainerRecord {
        id: spec.id.clone(),
        shim_pid: started.shim_pid,
        shim_start_time: started.shim_start_time,
        pid: started.pid,
        pid_start_time: started.pid_start_time,
        started_at: started.started_at,
        limits,
    }
}

/// Reaps the shim (our child) and wakes the handle's waiters at once rather
/// than at their next poll.
async fn reap_shim(mut child: Child, handle: ContainerHandle) {
    if let Err(err) = child.wait().await {
        tracing::warn!(container = %handle.id(), %err, "cannot wait for shim");
    }
    handle.exited();
}

fn shim_log_excerpt(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let text = text.trim();
    let start = text.len().saturating_sub(SHIM_LOG_EXCERPT);
    let start = (start..text.len())
        .find(|i| text.is_char_boundary(*i))
        .unwrap_or(text.len());
    match &text[start..] {
        "" => "the shim wrote nothing to its log".to_string(),
        excerpt => format!("shim log: {excerpt}"),
    }
}
