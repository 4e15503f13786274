//! The container processes a kubelet under test started, found through its
//! runtime's state files (`<root>/containers/<uid>/<container>/<attempt>/
//! state.json`): a test reads their pids, and at its end every one still
//! running is SIGKILLed with its process group, so a failed test leaves no
//! process behind even when its `skiff` was SIGKILLed.

use std::path::{Path, PathBuf};

use serde_json::Value;

/// One started container as its state file records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerProcess {
    pub pod_uid: String,
    pub container: String,
    pub attempt: u64,
    /// The container's main process, leader of its process group.
    pub pid: u32,
    pub shim_pid: u32,
}

/// Every container the kubelet rooted at `root` has started.
pub fn containers(root: &Path) -> Vec<ContainerProcess> {
    let mut found = Vec::new();
    for pod in dirs(&root.join("containers")) {
        for container in dirs(&pod) {
            for attempt in dirs(&container) {
                if let Some(process) = read_state(&attempt.join("state.json")) {
                    found.push(process);
                }
            }
        }
    }
    found
}

fn dirs(path: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(path)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.is_dir())
                .collect()
        })
        .unwrap_or_default()
}

fn read_state(path: &Path) -> Option<ContainerProcess> {
    let state: Value = serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()?;
    let id = &state["id"];
    Some(ContainerProcess {
        pod_uid: id["pod_uid"].as_str()?.to_string(),
        container: id["container"].as_str()?.to_string(),
        attempt: id["attempt"].as_u64()?,
        pid: u32::try_from(state["pid"].as_u64()?).ok()?,
        shim_pid: u32::try_from(state["shim_pid"].as_u64()?).ok()?,
    })
}

/// Whether process `pid` is alive (a zombie is not).
pub fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the parenthesised command name.
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

/// SIGKILLs, on drop, what the kubelet at `root` left running.
pub struct NodeProcesses {
    root: PathBuf,
}

impl NodeProcesses {
    pub fn new(root: &Path) -> NodeProcesses {
        NodeProcesses {
            root: root.to_path_buf(),
        }
    }
}

impl Drop for NodeProcesses {
    fn drop(&mut self) {
        kill_all(&self.root);
    }
}

/// SIGKILLs every container process (and its shim) the kubelet rooted at
/// `root` started that still runs. Stop that kubelet first, or it
/// restarts them.
pub fn kill_all(root: &Path) {
    {
        for process in containers(root) {
            for (pid, group) in [(process.pid, true), (process.shim_pid, false)] {
                let Ok(pid) = libc::pid_t::try_from(pid) else {
                    continue;
                };
                if pid <= 1 || !alive(pid as u32) {
                    continue;
                }
                let target = if group { -pid } else { pid };
                // SAFETY: kill only sends a signal; these pids were started
                // by the kubelet under test and are checked alive above.
                unsafe {
                    libc::kill(target, libc::SIGKILL);
                }
            }
        }
    }
}
