//! The runtime's records on disk, from which a restarted kubelet finds its
//! containers: `<root>/containers/<pod uid>/<container>/<attempt>/` holds the
//! shim's spec, the runtime's `state.json` and the shim's `exit.json`.

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use jiff::Timestamp;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::cgroup::LimitsEnforcement;
use super::container::ContainerId;
use super::RuntimeError;

/// What the runtime knows of a started container, written once it started.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainerRecord {
    pub id: ContainerId,
    pub shim_pid: u32,
    /// Field 22 of `/proc/<shim_pid>/stat`, so a reused pid is not taken
    /// for the shim.
    pub shim_start_time: u64,
    /// The container's main process, leader of its process group.
    pub pid: u32,
    pub pid_start_time: Option<u64>,
    #[serde(with = "rfc3339")]
    pub started_at: Timestamp,
    pub limits: LimitsEnforcement,
}

/// `<root>/containers`: the state of every container.
pub fn containers_dir(root: &Path) -> PathBuf {
    root.join("containers")
}

/// `<root>/containers/<pod uid>`: the state of every container of one pod.
pub fn pod_state_dir(root: &Path, pod_uid: &str) -> Result<PathBuf, RuntimeError> {
    check_component("pod uid", pod_uid)?;
    Ok(containers_dir(root).join(pod_uid))
}

/// The state directory of one container attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerDir {
    path: PathBuf,
}

impl ContainerDir {
    pub fn new(root: &Path, id: &ContainerId) -> Result<Self, RuntimeError> {
        check_component("container name", &id.container)?;
        check_component("pod namespace", &id.pod_namespace)?;
        check_component("pod name", &id.pod_name)?;
        let path = pod_state_dir(root, &id.pod_uid)?
            .join(&id.container)
            .join(id.attempt.to_string());
        Ok(ContainerDir { path })
    }

    pub fn from_path(path: PathBuf) -> Self {
        ContainerDir { path }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The [`crate::shim::ShimSpec`] the shim runs.
    pub fn spec_path(&self) -> PathBuf {
        self.path.join("spec.json")
    }

    /// The [`ContainerRecord`].
    pub fn state_path(&self) -> PathBuf {
        self.path.join("state.json")
    }

    /// The [`super::ExitStatus`], written by the shim when the container exits.
    pub fn exit_path(&self) -> PathBuf {
        self.path.join("exit.json")
    }

    /// The socket attach writes a container's stdin through.
    pub fn stdin_socket_path(&self) -> PathBuf {
        self.path.join("stdin.sock")
    }

    /// The shim's own diagnostics (its stderr).
    pub fn shim_log_path(&self) -> PathBuf {
        self.path.join("shim.log")
    }
}

/// Names become path components; refuse anything that could leave the root.
fn check_component(what: &'static str, value: &str) -> Result<(), RuntimeError> {
    let bad = value.is_empty() || value == "." || value == ".." || value.contains(['/', '\0']);
    if bad {
        return Err(RuntimeError::InvalidName {
            what,
            value: value.to_string(),
        });
    }
    Ok(())
}

/// Replaces `path` with `bytes` so that readers see the old or the new file,
/// never a part: write a temporary file beside it, sync it, rename it.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".tmp.{}", std::process::id()));
    let tmp = PathBuf::from(tmp);
    let mut file = std::fs::File::create(&tmp)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    std::fs::rename(&tmp, path)
}

/// Serializes `value` as JSON and writes it with [`write_atomic`].
pub fn write_json<T: Serialize>(path: &Path, value: &T) -> Result<(), RuntimeError> {
    let bytes = serde_json::to_vec_pretty(value).map_err(|source| RuntimeError::CorruptState {
        path: path.to_path_buf(),
        source,
    })?;
    write_atomic(path, &bytes).map_err(|source| RuntimeError::Io {
        action: "write",
        path: path.to_path_buf(),
        source,
    })
}

/// Reads a JSON record; `None` if the file does not exist (yet).
pub fn read_json<T: DeserializeOwned>(path: &Path) -> Result<Option<T>, RuntimeError> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(RuntimeError::Io {
                action: "read",
                path: path.to_path_buf(),
                source,
            })
        }
    };
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|source| RuntimeError::CorruptState {
            path: path.to_path_buf(),
            source,
        })
}

/// Timestamps as RFC 3339 strings in state files (jiff's own serde support
/// is not enabled in this workspace).
pub mod rfc3339 {
    use jiff::Timestamp;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(ts: &Timestamp, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(ts)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Timestamp, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id() -> ContainerId {
        ContainerId {
            pod_uid: "7f1c".into(),
            pod_namespace: "default".into(),
            pod_name: "web".into(),
            container: "app".into(),
            attempt: 2,
        }
    }

    #[test]
    fn container_dir_layout() {
        let dir = ContainerDir::new(Path::new("/var/lib/skiff"), &id()).unwrap();
        assert_eq!(
            dir.path(),
            Path::new("/var/lib/skiff/containers/7f1c/app/2")
        );
        assert_eq!(
            dir.exit_path(),
            Path::new("/var/lib/skiff/containers/7f1c/app/2/exit.json")
        );
    }

    #[test]
    fn names_that_leave_the_root_are_refused() {
        for bad in ["", ".", "..", "a/b"] {
            let mut id = id();
            id.container = bad.into();
            let err = ContainerDir::new(Path::new("/r"), &id).unwrap_err();
            assert!(
                matches!(err, RuntimeError::InvalidName { .. }),
                "{bad:?}: {err}"
            );
        }
        assert!(pod_state_dir(Path::new("/r"), "../x").is_err());
    }

    #[test]
    fn record_round_trips_and_missing_is_none() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        assert_eq!(read_json::<ContainerRecord>(&path).unwrap(), None);
        let record = ContainerRecord {
            id: id(),
            shim_pid: 10,
            shim_start_time: 1234,
            pid: 11,
            pid_start_time: Some(1240),
            started_at: "2024-05-01T10:00:00.25Z".parse().unwrap(),
            limits: LimitsEnforcement::Skipped {
                reason: "no cgroup v2".into(),
            },
        };
        write_json(&path, &record).unwrap();
        assert_eq!(read_json::<ContainerRecord>(&path).unwrap(), Some(record));
        let leftovers: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(leftovers.len(), 1, "no temporary file left behind");
    }

    #[test]
    fn corrupt_record_is_reported_with_its_path() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        std::fs::write(&path, b"{\"id\":").unwrap();
        let err = read_json::<ContainerRecord>(&path).unwrap_err();
        assert!(err.to_string().contains("state.json"), "{err}");
    }
}
