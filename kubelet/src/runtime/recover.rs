//! After a kubelet restart: finding the containers a previous kubelet
//! started (still running or how they ended), and removing what is left of
//! pods that are gone.

use std::collections::{BTreeSet, HashSet};
use std::path::Path;
use std::time::Duration;

use jiff::Timestamp;

use super::cgroup::{self, LimitsEnforcement};
use super::container::{ContainerId, ExitStatus};
use super::handle::ContainerHandle;
use super::state::{containers_dir, pod_state_dir, read_json, ContainerDir, ContainerRecord};
use super::{ProcessRuntime, RuntimeError};
use crate::logs;

/// How long removing a pod waits for its killed containers' shims to record
/// their exit.
const KILL_WAIT: Duration = Duration::from_secs(10);

/// A container found on disk by [`ProcessRuntime::recover`].
#[derive(Debug, Clone)]
pub struct RecoveredContainer {
    pub id: ContainerId,
    pub started_at: Timestamp,
    pub state: RecoveredState,
}

#[derive(Debug, Clone)]
pub enum RecoveredState {
    /// Its shim still runs: the handle waits for and signals it as usual.
    Running(ContainerHandle),
    /// It has exited; `ContainerStatusUnknown` if its shim vanished without
    /// recording how.
    Exited(ExitStatus),
}

impl ProcessRuntime {
    /// The containers of a previous kubelet process found under the root,
    /// ordered by pod uid, container name and attempt. Records that cannot
    /// be read are skipped with a warning.
    pub fn recover(&self) -> Result<Vec<RecoveredContainer>, RuntimeError> {
        let mut found = Vec::new();
        for pod_uid in list_names(&containers_dir(self.root()))? {
            for dir in container_dirs(&containers_dir(self.root()).join(pod_uid)) {
                found.extend(recover_container(&dir));
            }
        }
        found.sort_by(|a, b| {
            let key = |c: &RecoveredContainer| {
                (c.id.pod_uid.clone(), c.id.container.clone(), c.id.attempt)
            };
            key(a).cmp(&key(b))
        });
        Ok(found)
    }

    /// Kills whatever still runs of a pod and deletes its state and its logs
    /// (a deleted pod's logs cannot be asked for any more).
    pub async fn remove_pod(&self, pod_uid: &str) -> Result<(), RuntimeError> {
        let pod_dir = pod_state_dir(self.root(), pod_uid)?;
        for dir in container_dirs(&pod_dir) {
            if let Ok(Some(record)) = read_json::<ContainerRecord>(&dir.state_path()) {
                kill_and_wait(record, &dir).await;
            }
        }
        remove_tree(&pod_dir, "remove pod state")?;
        let log_dir =
            logs::find_pod_log_dir(self.root(), pod_uid).map_err(|source| RuntimeError::Io {
                action: "look for pod logs under",
                path: self.root().join("pods"),
                source,
            })?;
        if let Some(log_dir) = log_dir {
            remove_tree(&log_dir, "remove pod logs")?;
        }
        Ok(())
    }

    /// Removes every pod with state or logs here whose uid is not in `keep`,
    /// e.g. pods deleted while the kubelet was down. Returns the removed uids;
    /// a pod that cannot be removed is logged and skipped.
    pub async fn remove_pods_except(
        &self,
        keep: &HashSet<String>,
    ) -> Result<Vec<String>, RuntimeError> {
        let mut removed = Vec::new();
        for pod_uid in self.pod_uids()? {
            if keep.contains(&pod_uid) {
                continue;
            }
            tracing::info!(pod_uid, "removing containers of a pod no longer bound here");
            match self.remove_pod(&pod_uid).await {
                Ok(()) => removed.push(pod_uid),
                Err(err) => tracing::warn!(pod_uid, %err, "cannot remove pod"),
            }
        }
        Ok(removed)
    }

    /// The uids of pods with state or logs under the root.
    fn pod_uids(&self) -> Result<BTreeSet<String>, RuntimeError> {
        let mut uids = BTreeSet::new();
        uids.extend(list_names(&containers_dir(self.root()))?);
        let log_dirs = list_names(&self.root().join("pods"))?;
        uids.extend(
            log_dirs
                .iter()
                .filter_map(|name| name.rsplit_once('_').map(|(_, uid)| uid.to_string())),
        );
        Ok(uids)
    }
}

fn list_names(dir: &Path) -> Result<Vec<String>, RuntimeError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(RuntimeError::Io {
                action: "list",
                path: dir.to_path_buf(),
                source,
            })
        }
    };
    Ok(entries
        .flatten()
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .collect())
}

/// `<pod dir>/<container>/<attempt>` for every container attempt of a pod.
fn container_dirs(pod_dir: &Path) -> Vec<ContainerDir> {
    let subdirs = |dir: &Path| -> Vec<std::path::PathBuf> {
        std::fs::read_dir(dir)
            .map(|entries| {
                entries
                    .flatten()
                    .map(|e| e.path())
                    .filter(|p| p.is_dir())
                    .collect()
            })
            .unwrap_or_default()
    };
    subdirs(pod_dir)
        .iter()
        .flat_map(|container| subdirs(container))
        .map(ContainerDir::from_path)
        .collect()
}

fn recover_container(dir: &ContainerDir) -> Option<RecoveredContainer> {
    let record = match read_json::<ContainerRecord>(&dir.state_path()) {
        Ok(Some(record)) => record,
        Ok(None) => {
            tracing::warn!(dir = %dir.path().display(), "container state directory without state.json; skipped");
            return None;
        }
        Err(err) => {
            tracing::warn!(%err, "unreadable container state; skipped");
            return None;
        }
    };
    let id = record.id.clone();
    let started_at = record.started_at;
    let handle = ContainerHandle::new(record, dir.exit_path());
    let state = match handle.exited() {
        Some(status) => RecoveredState::Exited(status),
        None => RecoveredState::Running(handle),
    };
    Some(RecoveredContainer {
        id,
        started_at,
        state,
    })
}

async fn kill_and_wait(record: ContainerRecord, dir: &ContainerDir) {
    let limits = record.limits.clone();
    let handle = ContainerHandle::new(record, dir.exit_path());
    handle.signal(libc::SIGKILL);
    if tokio::time::timeout(KILL_WAIT, handle.wait())
        .await
        .is_err()
    {
        tracing::warn!(container = %handle.id(), "container did not exit after SIGKILL");
    }
    if let LimitsEnforcement::Applied { cgroup } = limits {
        if cgroup.exists() {
            let _ = tokio::task::spawn_blocking(move || cgroup::remove(&cgroup)).await;
        }
    }
}

fn remove_tree(path: &Path, action: &'static str) -> Result<(), RuntimeError> {
    match std::fs::remove_dir_all(path) {
        Err(err) if err.kind() != std::io::ErrorKind::NotFound => Err(RuntimeError::Io {
            action,
            path: path.to_path_buf(),
            source: err,
        }),
        _ => Ok(()),
    }
}
