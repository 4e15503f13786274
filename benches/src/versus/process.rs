//! The server processes a run starts (skiff store members, etcd members):
//! each spawned in its own process group with its output in a log file,
//! stopped with SIGTERM then SIGKILL, and never left behind — not on an
//! error, not on Ctrl-C, not when the benchmark itself is killed.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::Mutex;
use std::time::Duration;

use anyhow::{Context, Result};
use tokio::process::{Child, Command};

/// Lines of a member's log shown when it fails.
const LOG_TAIL_LINES: usize = 12;
/// How long a SIGKILLed process may take to be reaped.
const REAP_TIMEOUT: Duration = Duration::from_secs(5);

/// Processes whose owner was dropped before it stopped them (an error or an
/// interrupt unwound past it): already sent SIGTERM, waiting to be reaped by
/// `stop_abandoned`.
static ABANDONED: Mutex<Vec<Abandoned>> = Mutex::new(Vec::new());

struct Abandoned {
    name: String,
    child: Child,
}

/// One running server process.
pub struct ServerProcess {
    name: String,
    pid: u32,
    log: PathBuf,
    /// `None` once stopped (or handed to `ABANDONED`).
    child: Option<Child>,
}

impl ServerProcess {
    /// Starts `program args…` with stdout and stderr appended to `log`. Call
    /// it from the thread that runs the benchmark's main future: the child
    /// is SIGKILLed when that thread dies.
    pub fn spawn(name: &str, program: &Path, args: &[String], log: &Path) -> Result<ServerProcess> {
        let out = File::create(log).with_context(|| format!("creating {}", log.display()))?;
        let err = out
            .try_clone()
            .with_context(|| format!("opening {}", log.display()))?;
        let mut command = Command::new(program);
        command
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(err))
            // Ctrl-C in a terminal reaches the benchmark only; it stops
            // the servers itself, in order.
            .process_group(0)
            .kill_on_drop(true);
        die_with_parent(&mut command);
        let child = command
            .spawn()
            .with_context(|| format!("starting {name} ({})", program.display()))?;
        let pid = child
            .id()
            .with_context(|| format!("{name} exited as it started"))?;
        Ok(ServerProcess {
            name: name.to_string(),
            pid,
            log: log.to_path_buf(),
            child: Some(child),
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// CPU time (user + system) the process has used so far; zero once it
    /// is gone or where /proc cannot tell.
    pub fn cpu_time(&self) -> Duration {
        cpu_time(self.pid).unwrap_or_default()
    }

    /// How the process ended, if it has.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child.as_mut()?.try_wait().ok().flatten()
    }

    /// The end of the process's log, indented, to show why it failed.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
        let start = lines.len().saturating_sub(LOG_TAIL_LINES);
        let mut tail = format!("    (last lines of {})\n", self.log.display());
        for line in &lines[start..] {
            tail.push_str("    ");
            tail.push_str(line);
            tail.push('\n');
        }
        tail
    }

    /// SIGTERM, then SIGKILL if it has not exited after `grace`. Returns
    /// how it ended and whether it needed the SIGKILL.
    pub async fn stop(mut self, grace: Duration) -> Result<(ExitStatus, bool)> {
        let Some(child) = self.child.take() else {
            anyhow::bail!("{} was already stopped", self.name);
        };
        stop_child(&self.name, child, grace).await
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        if let Some(child) = self.child.take() {
            signal(&child, libc::SIGTERM);
            if let Ok(mut abandoned) = ABANDONED.lock() {
                abandoned.push(Abandoned {
                    name: self.name.clone(),
                    child,
                });
            }
            // A poisoned lock drops the child instead: kill_on_drop SIGKILLs it.
        }
    }
}

async fn stop_child(name: &str, mut child: Child, grace: Duration) -> Result<(ExitStatus, bool)> {
    signal(&child, libc::SIGTERM);
    if let Ok(status) = tokio::time::timeout(grace, child.wait()).await {
        let status = status.with_context(|| format!("waiting for {name} to stop"))?;
        return Ok((status, false));
    }
    signal(&child, libc::SIGKILL);
    let status = tokio::time::timeout(REAP_TIMEOUT, child.wait())
        .await
        .with_context(|| format!("{name} did not exit even after SIGKILL"))?
        .with_context(|| format!("waiting for {name} to stop"))?;
    Ok((status, true))
}

/// Stops every process whose owner went away without stopping it;
/// returns how many there were.
pub async fn stop_abandoned(grace: Duration) -> usize {
    let abandoned = match ABANDONED.lock() {
        Ok(mut list) => std::mem::take(&mut *list),
        Err(_) => return 0,
    };
    let count = abandoned.len();
    for Abandoned { name, child } in abandoned {
        if let Err(err) = stop_child(&name, child, grace).await {
            eprintln!("skiff-bench: {err:#}");
        }
    }
    count
}

/// utime + stime of `/proc/PID/stat`, in clock ticks turned into time.
fn cpu_time(pid: u32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces: the fields start after its ')'.
    let fields: Vec<&str> = stat.get(stat.rfind(')')? + 2..)?.split(' ').collect();
    // Fields 14 and 15 of the whole line: 12th and 13th after the name.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    // SAFETY: sysconf reads a constant of the system; no memory is touched.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    let ticks = u64::try_from(ticks).ok().filter(|&t| t > 0)?;
    Some(Duration::from_nanos(
        (utime + stime) * 1_000_000_000 / ticks,
    ))
}

fn signal(child: &Child, signal: libc::c_int) {
    let Some(pid) = child.id().and_then(|pid| libc::pid_t::try_from(pid).ok()) else {
        return; // already reaped
    };
    // SAFETY: kill has no memory effects; the pid is our child, not yet reaped.
    unsafe { libc::kill(pid, signal) };
}

/// On Linux the server gets SIGKILL if the thread that started it dies
/// (the benchmark was killed, or aborted on a panic), so that no orphan
/// keeps its ports, its data directory and the machine's cores.
fn die_with_parent(command: &mut Command) {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: prctl is async-signal-safe and touches no memory of the parent.
        unsafe {
            command.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) == -1 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = command;
}
