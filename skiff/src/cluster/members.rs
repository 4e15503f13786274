//! The `skiff store` child processes of a local cluster: each started with
//! its output in a log file, watched for its exit, and stopped with SIGTERM,
//! then SIGKILL if it does not stop in time.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, Result};
use tokio::process::Command;
use tokio::sync::mpsc;

use super::layout::MemberLayout;
use super::manifest::{ClusterManifest, ManifestMember};

/// Lines of a member's log shown when it dies unexpectedly.
const LOG_TAIL_LINES: usize = 8;
/// How long a SIGKILLed member may take to be reaped.
const REAP_TIMEOUT: Duration = Duration::from_secs(5);

/// One member's process.
pub struct MemberProcess {
    pub layout: MemberLayout,
    pub data_dir: PathBuf,
    pub log: PathBuf,
    pub pid: u32,
    /// How the process ended (`exit status: 1`), once it has.
    pub ended: Option<String>,
}

/// Every member's process and the exits not yet looked at.
pub struct Members {
    pub processes: Vec<MemberProcess>,
    exits: mpsc::UnboundedSender<(usize, String)>,
    exited: mpsc::UnboundedReceiver<(usize, String)>,
}

impl Members {
    pub fn new() -> Members {
        let (exits, exited) = mpsc::unbounded_channel();
        Members {
            processes: Vec::new(),
            exits,
            exited,
        }
    }

    /// Starts `skiff store` for `layout` with its data in `dir/NAME` and its
    /// output in `dir/NAME.log`. Call it from the main task: the child is
    /// told to stop when the thread that started it dies.
    pub fn spawn(
        &mut self,
        dir: &Path,
        layout: &MemberLayout,
        initial_cluster: &str,
        pki_dir: &Path,
        store: &crate::store::StoreMaintenanceFlags,
    ) -> Result<()> {
        let data_dir = dir.join(&layout.name);
        let log = dir.join(format!("{}.log", layout.name));
        let mut log_file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .with_context(|| format!("opening {}", log.display()))?;
        // Runs on the same directory append to one log; mark where each starts.
        writeln!(
            log_file,
            "--- skiff cluster up: starting {} ---",
            layout.name
        )
        .with_context(|| format!("writing {}", log.display()))?;
        let stderr = log_file
            .try_clone()
            .with_context(|| format!("opening {}", log.display()))?;
        // One encryption configuration for every member: each must read
        // what another wrote.
        let encryption =
            crate::encryption::ensure_config(&dir.join(crate::encryption::DEFAULT_FILE))?;
        let exe = std::env::current_exe().context("finding the skiff executable")?;
        let mut command = Command::new(exe);
        command
            .arg("server")
            .args(["--name", &layout.name])
            .arg("--data-dir")
            .arg(&data_dir)
            .args(["--client-listen", &layout.client.to_string()])
            .args(["--peer-listen", &layout.peer.to_string()])
            .args(["--initial-cluster", initial_cluster])
            .args(["--initial-cluster-state", "new"])
            .args(["--api-listen", &layout.api.to_string()])
            .arg("--encryption-provider-config")
            .arg(&encryption)
            .arg("--pki-dir")
            .arg(pki_dir)
            .args(store.to_args())
            .stdin(Stdio::null())
            .stdout(Stdio::from(log_file))
            .stderr(Stdio::from(stderr))
            // Ctrl-C reaches `cluster up` alone, which stops the members in order.
            .process_group(0);
        stop_with_parent(&mut command);
        let mut child = command
            .spawn()
            .with_context(|| format!("starting member {}", layout.name))?;
        let pid = child.id().context("a member exited as it started")?;
        let index = self.processes.len();
        let exits = self.exits.clone();
        tokio::spawn(async move {
            let ended = match child.wait().await {
                Ok(status) => status.to_string(),
                Err(err) => format!("lost track of it: {err}"),
            };
            let _ = exits.send((index, ended));
        });
        self.processes.push(MemberProcess {
            layout: layout.clone(),
            data_dir,
            log,
            pid,
            ended: None,
        });
        Ok(())
    }

    /// Waits for the next member to exit; returns its index.
    pub async fn next_exit(&mut self) -> Option<usize> {
        let (index, ended) = self.exited.recv().await?;
        self.processes[index].ended = Some(ended);
        Some(index)
    }

    pub fn running(&self) -> usize {
        self.processes.iter().filter(|p| p.ended.is_none()).count()
    }

    /// SIGTERM to every running member; SIGKILL to those still running
    /// after `grace`. Returns once every member has exited.
    pub async fn stop(&mut self, grace: Duration) {
        self.signal_running(libc::SIGTERM);
        if !self.wait_all(grace).await {
            for process in self.processes.iter().filter(|p| p.ended.is_none()) {
                eprintln!(
                    "skiff cluster: {} (pid {}) did not stop within {grace:?}; sending SIGKILL",
                    process.layout.name, process.pid
                );
            }
            self.signal_running(libc::SIGKILL);
            self.wait_all(REAP_TIMEOUT).await;
        }
    }

    fn signal_running(&self, signal: libc::c_int) {
        for process in self.processes.iter().filter(|p| p.ended.is_none()) {
            if let Ok(pid) = libc::pid_t::try_from(process.pid) {
                // SAFETY: kill has no memory effects; the pid is our unreaped child.
                unsafe { libc::kill(pid, signal) };
            }
        }
    }

    /// True if every member exited within `timeout`.
    async fn wait_all(&mut self, timeout: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        while self.running() > 0 {
            match tokio::time::timeout_at(deadline, self.next_exit()).await {
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => return false,
            }
        }
        true
    }

    pub fn manifest(&self, ready: bool) -> ClusterManifest {
        let layouts: Vec<MemberLayout> = self.processes.iter().map(|p| p.layout.clone()).collect();
        ClusterManifest {
            ready,
            endpoints: super::layout::endpoints(&layouts),
            members: self
                .processes
                .iter()
                .map(|p| ManifestMember {
                    name: p.layout.name.clone(),
                    pid: p.ended.is_none().then_some(p.pid),
                    client: p.layout.client.to_string(),
                    peer: p.layout.peer.to_string(),
                    api: Some(p.layout.api.to_string()),
                    data_dir: p.data_dir.clone(),
                    log: p.log.clone(),
                })
                .collect(),
        }
    }
}

/// On Linux, the member gets SIGTERM if `cluster up` dies without stopping
/// it (SIGKILL), so no orphan keeps its ports and data directory.
fn stop_with_parent(command: &mut Command) {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: prctl is async-signal-safe and touches no memory of the parent.
        unsafe {
            command.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) == -1 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = command;
}

/// The last lines of a member's log, indented, to show why it died.
pub fn log_tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let start = lines.len().saturating_sub(LOG_TAIL_LINES);
    lines[start..]
        .iter()
        .map(|line| format!("    {line}\n"))
        .collect()
}

/// Whether `pid` is a running skiff process (a member of an earlier run).
pub fn is_running_skiff(pid: u32) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|cmdline| {
            let cmdline = String::from_utf8_lossy(&cmdline);
            cmdline.contains("skiff") && (cmdline.contains("store") || cmdline.contains("server"))
        })
        .unwrap_or(false)
}
