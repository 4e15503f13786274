//! A started (or recovered) container: its process group to signal, and its
//! exit status as the shim records it, waited for by any number of callers.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use tokio::sync::watch;

use super::cgroup::LimitsEnforcement;
use super::container::{ContainerId, ExitStatus};
use super::proc;
use super::state::{read_json, write_json, ContainerRecord};

/// How often a waiter looks at the exit status file and the shim.
const EXIT_POLL: Duration = Duration::from_millis(100);

/// A container run by a shim; cheap to clone.
#[derive(Debug, Clone)]
pub struct ContainerHandle {
    inner: Arc<HandleInner>,
}

#[derive(Debug)]
struct HandleInner {
    record: ContainerRecord,
    exit_path: PathBuf,
    /// The exit status once known; waiters are woken when it is set.
    exit: watch::Sender<Option<ExitStatus>>,
}

impl ContainerHandle {
    pub(crate) fn new(record: ContainerRecord, exit_path: PathBuf) -> Self {
        let inner = HandleInner {
            record,
            exit_path,
            exit: watch::Sender::new(None),
        };
        ContainerHandle {
            inner: Arc::new(inner),
        }
    }

    pub fn id(&self) -> &ContainerId {
        &self.inner.record.id
    }

    /// The container's main process, also its process group id.
    pub fn pid(&self) -> u32 {
        self.inner.record.pid
    }

    pub fn started_at(&self) -> Timestamp {
        self.inner.record.started_at
    }

    /// Whether the container runs in a cgroup with its limits, or why not.
    pub fn limits(&self) -> &LimitsEnforcement {
        &self.inner.record.limits
    }

    /// How the container ended, or `None` while it runs. Does not block.
    pub fn exited(&self) -> Option<ExitStatus> {
        if let Some(status) = self.inner.exit.borrow().clone() {
            return Some(status);
        }
        let status = self.observe_exit()?;
        self.inner.exit.send_if_modified(|slot| {
            let first = slot.is_none();
            if first {
                *slot = Some(status);
            }
            first
        });
        self.inner.exit.borrow().clone()
    }

    /// Waits until the container has exited and its status is recorded.
    pub async fn wait(&self) -> ExitStatus {
        let mut changed = self.inner.exit.subscribe();
        loop {
            if let Some(status) = self.exited() {
                return status;
            }
            tokio::select! {
                _ = changed.changed() => {}
                _ = tokio::time::sleep(EXIT_POLL) => {}
            }
        }
    }

    /// Sends `signal` to the container's process group, unless it has exited.
    pub fn signal(&self, signal: i32) {
        if self.exited().is_some() {
            return;
        }
        signal_group(self.pid(), signal, self.id());
    }

    /// Stops the container as the kubelet does: SIGTERM, then SIGKILL if it
    /// still runs after `grace`. Returns its exit status.
    pub async fn stop(&self, grace: Duration) -> ExitStatus {
        self.signal(libc::SIGTERM);
        if let Ok(status) = tokio::time::timeout(grace, self.wait()).await {
            return status;
        }
        tracing::info!(container = %self.id(), ?grace, "grace period over; killing container");
        self.signal(libc::SIGKILL);
        self.wait().await
    }

    /// Reads the status the shim wrote; if there is none and the shim is
    /// gone, the status is unknown (and recorded so it stays the same).
    fn observe_exit(&self) -> Option<ExitStatus> {
        let record = &self.inner.record;
        if let Some(status) = self.read_exit_status() {
            return Some(status);
        }
        if proc::is_running(record.shim_pid, record.shim_start_time) {
            return None;
        }
        // The shim writes the status before it exits: look once more.
        if let Some(status) = self.read_exit_status() {
            return Some(status);
        }
        tracing::warn!(container = %record.id, shim_pid = record.shim_pid,
            "shim exited without recording the container's exit status");
        self.kill_orphaned_container();
        let status = ExitStatus::unknown();
        if let Err(err) = write_json(&self.inner.exit_path, &status) {
            tracing::warn!(container = %record.id, %err, "cannot record unknown exit status");
        }
        Some(status)
    }

    fn read_exit_status(&self) -> Option<ExitStatus> {
        match read_json(&self.inner.exit_path) {
            Ok(status) => status,
            Err(err) => {
                tracing::warn!(container = %self.id(), %err, "unreadable exit status");
                None
            }
        }
    }

    /// With its shim gone nobody would record how the container ends, so it
    /// is not left running.
    fn kill_orphaned_container(&self) {
        let record = &self.inner.record;
        if record
            .pid_start_time
            .is_some_and(|start| proc::is_running(record.pid, start))
        {
            signal_group(record.pid, libc::SIGKILL, &record.id);
        }
    }
}

fn signal_group(pgid: u32, signal: i32, id: &ContainerId) {
    let Ok(pgid) = i32::try_from(pgid) else {
        return;
    };
    // SAFETY: kill(2) has no memory-safety preconditions.
    let result = unsafe { libc::kill(-pgid, signal) };
    if result != 0 {
        let err = std::io::Error::last_os_error();
        if err.raw_os_error() != Some(libc::ESRCH) {
            tracing::warn!(container = %id, signal, %err, "cannot signal container");
        }
    }
}
