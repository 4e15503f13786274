//! Container log files in the kubelet's `/var/log/pods` layout and CRI format,
//! and reading them back as the `pods/log` subresource returns them.
//! Writing happens in the shim ([`crate::shim`]); this module owns the format.

pub mod cri;
mod reader;
mod tail;

use std::io;
use std::path::{Path, PathBuf};

pub use reader::read_log;

/// The query parameters of `GET .../pods/{name}/log` that shape the output.
/// `sinceSeconds` and `sinceTime` arrive here already turned into `since`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogOptions {
    /// Keep streaming new lines until the container has exited.
    pub follow: bool,
    /// Only the last this many lines (negative or absent: all).
    pub tail_lines: Option<i64>,
    /// Only lines logged at or after this instant.
    pub since: Option<jiff::Timestamp>,
    /// Prefix each line with its RFC3339Nano timestamp and a space.
    pub timestamps: bool,
    /// Read the previous attempt of the container instead of the current one.
    pub previous: bool,
    /// Stop after this many bytes of output (absent or not positive: no limit).
    pub limit_bytes: Option<i64>,
}

/// The log directory of one container of one pod:
/// `<root>/pods/<namespace>_<name>_<uid>/<container>/`, with one
/// `<attempt>.log` per run of the container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerLogs {
    dir: PathBuf,
}

impl ContainerLogs {
    pub fn new(
        root: &Path,
        namespace: &str,
        pod_name: &str,
        pod_uid: &str,
        container: &str,
    ) -> Self {
        let dir = pod_log_dir(root, namespace, pod_name, pod_uid).join(container);
        ContainerLogs { dir }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The log file of one attempt (restart count) of the container.
    pub fn path(&self, attempt: u32) -> PathBuf {
        self.dir.join(format!("{attempt}.log"))
    }

    /// The attempts that have a log file, oldest first; empty if none was
    /// ever written.
    pub fn attempts(&self) -> io::Result<Vec<u32>> {
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(entries) => entries,
            Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(err) => return Err(err),
        };
        let mut attempts = Vec::new();
        for entry in entries {
            let name = entry?.file_name();
            let attempt = name
                .to_str()
                .and_then(|n| n.strip_suffix(".log"))
                .and_then(|n| n.parse::<u32>().ok());
            attempts.extend(attempt);
        }
        attempts.sort_unstable();
        Ok(attempts)
    }

    /// The attempt a `pods/log` request reads: the latest, or with `previous`
    /// the one before it. `None` when there is no such log.
    pub fn attempt_to_read(&self, previous: bool) -> io::Result<Option<u32>> {
        let attempts = self.attempts()?;
        let skip = usize::from(previous);
        Ok(attempts.iter().rev().nth(skip).copied())
    }

    /// Deletes the log files of all but the `keep` latest attempts, as the
    /// kubelet keeps only the current and the previous container's logs.
    pub fn remove_old_attempts(&self, keep: usize) -> io::Result<()> {
        let attempts = self.attempts()?;
        let old = attempts.len().saturating_sub(keep);
        for attempt in &attempts[..old] {
            match std::fs::remove_file(self.path(*attempt)) {
                Err(err) if err.kind() != io::ErrorKind::NotFound => return Err(err),
                _ => {}
            }
        }
        Ok(())
    }
}

/// `<root>/pods/<namespace>_<name>_<uid>`: every log of one pod.
pub fn pod_log_dir(root: &Path, namespace: &str, pod_name: &str, pod_uid: &str) -> PathBuf {
    root.join("pods")
        .join(format!("{namespace}_{pod_name}_{pod_uid}"))
}

/// Finds the log directory of a pod by its uid alone (namespace and name
/// cannot contain `_`, so the suffix is unambiguous).
pub fn find_pod_log_dir(root: &Path, pod_uid: &str) -> io::Result<Option<PathBuf>> {
    let entries = match std::fs::read_dir(root.join("pods")) {
        Ok(entries) => entries,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(err) => return Err(err),
    };
    for entry in entries {
        let entry = entry?;
        if entry
            .file_name()
            .to_str()
            .and_then(|n| n.rsplit_once('_'))
            .is_some_and(|(_, uid)| uid == pod_uid)
        {
            return Ok(Some(entry.path()));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn logs_with(attempts: &[u32]) -> (tempfile::TempDir, ContainerLogs) {
        let root = tempfile::tempdir().unwrap();
        let logs = ContainerLogs::new(root.path(), "default", "web", "uid-1", "app");
        std::fs::create_dir_all(logs.dir()).unwrap();
        for attempt in attempts {
            std::fs::write(logs.path(*attempt), b"").unwrap();
        }
        std::fs::write(logs.dir().join("notes.txt"), b"").unwrap();
        (root, logs)
    }

    #[test]
    fn layout_is_the_kubelets() {
        let logs = ContainerLogs::new(Path::new("/var/log"), "ns", "web", "u1", "app");
        assert_eq!(logs.path(3), Path::new("/var/log/pods/ns_web_u1/app/3.log"));
    }

    #[test]
    fn attempts_are_sorted_numerically() {
        let (_root, logs) = logs_with(&[10, 2, 1]);
        assert_eq!(logs.attempts().unwrap(), vec![1, 2, 10]);
        assert_eq!(logs.attempt_to_read(false).unwrap(), Some(10));
        assert_eq!(logs.attempt_to_read(true).unwrap(), Some(2));
    }

    #[test]
    fn no_directory_means_no_attempts() {
        let root = tempfile::tempdir().unwrap();
        let logs = ContainerLogs::new(root.path(), "ns", "web", "u1", "app");
        assert_eq!(logs.attempts().unwrap(), Vec::<u32>::new());
        assert_eq!(logs.attempt_to_read(true).unwrap(), None);
    }

    #[test]
    fn previous_needs_two_attempts() {
        let (_root, logs) = logs_with(&[0]);
        assert_eq!(logs.attempt_to_read(true).unwrap(), None);
    }

    #[test]
    fn old_attempts_beyond_two_are_removed() {
        let (_root, logs) = logs_with(&[0, 1, 2, 3]);
        logs.remove_old_attempts(2).unwrap();
        assert_eq!(logs.attempts().unwrap(), vec![2, 3]);
        assert!(logs.dir().join("notes.txt").exists());
    }

    #[test]
    fn pod_log_dir_is_found_by_uid() {
        let (root, logs) = logs_with(&[0]);
        let found = find_pod_log_dir(root.path(), "uid-1").unwrap();
        assert_eq!(found.as_deref(), logs.dir().parent());
        assert_eq!(find_pod_log_dir(root.path(), "uid-2").unwrap(), None);
    }
}
