//! What the runtime is asked to run (`ContainerSpec`) and what a run ends
//! with (`ExitStatus`), in the terms of the pod's container statuses.

use std::path::PathBuf;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use super::state::rfc3339;

/// One run of one container of one pod; `attempt` is the container's restart
/// count, so each restart is a new container with its own log file.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ContainerId {
    pub pod_uid: String,
    pub pod_namespace: String,
    pub pod_name: String,
    pub container: String,
    pub attempt: u32,
}

impl std::fmt::Display for ContainerId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}/{}/{}#{}",
            self.pod_namespace, self.pod_name, self.container, self.attempt
        )
    }
}

/// Resource limits of a container; enforced through cgroup v2 when the host
/// allows it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    pub cpu_millis: Option<u64>,
    pub memory_bytes: Option<u64>,
}

/// A container to start: its command already resolved from `command`/`args`
/// and its environment already expanded by the caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerSpec {
    pub id: ContainerId,
    /// Program and arguments; must not be empty.
    pub argv: Vec<String>,
    /// Exactly the environment the process sees.
    pub env: Vec<(String, String)>,
    pub working_dir: PathBuf,
    pub limits: Limits,
    /// The container's `stdin`: kept open for attach rather than
    /// `/dev/null`.
    pub stdin: bool,
    /// The container's `stdinOnce`: its stdin is closed when the first
    /// attached client's stdin ends.
    pub stdin_once: bool,
    /// The container's `tty`: it runs on a terminal of its own, which
    /// attach relays and resizes.
    pub tty: bool,
    /// The pod's network namespace, which the container joins; `None`:
    /// the host's network.
    pub netns: Option<PathBuf>,
    /// The pod's own files (hosts, resolv.conf) for its mount namespace;
    /// `None`: beside `netns`, or none.
    pub files: Option<PathBuf>,
    /// The container's volumes, bind-mounted at their mountPaths in its
    /// mount namespace (with `netns` or `files` only).
    pub mounts: Vec<crate::volumes::BindMount>,
}

/// How a container ended, as its `state.terminated` reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExitStatus {
    /// The exit code, or 128 + the signal number when killed by a signal.
    pub exit_code: i32,
    /// The signal that killed the process, if one did.
    pub signal: Option<i32>,
    #[serde(with = "rfc3339")]
    pub finished_at: Timestamp,
    /// `Completed`, `Error`, `OOMKilled`, or `ContainerStatusUnknown` when
    /// the shim vanished without recording how the container ended.
    pub reason: String,
}

impl ExitStatus {
    pub const COMPLETED: &'static str = "Completed";
    pub const ERROR: &'static str = "Error";
    pub const OOM_KILLED: &'static str = "OOMKilled";
    pub const STATUS_UNKNOWN: &'static str = "ContainerStatusUnknown";

    /// The status of a process that exited with `code` or was killed by
    /// `signal`; `oom_killed` when its cgroup recorded an OOM kill.
    pub fn new(code: Option<i32>, signal: Option<i32>, oom_killed: bool) -> Self {
        let exit_code = match (code, signal) {
            (Some(code), _) => code,
            (None, Some(signal)) => 128 + signal,
            (None, None) => 128,
        };
        let reason = if oom_killed {
            Self::OOM_KILLED
        } else if exit_code == 0 {
            Self::COMPLETED
        } else {
            Self::ERROR
        };
        ExitStatus {
            exit_code,
            signal: code.is_none().then_some(signal).flatten(),
            finished_at: Timestamp::now(),
            reason: reason.to_string(),
        }
    }

    /// What is reported when the shim died without writing a status: exit
    /// code 137 as if SIGKILLed, like the kubelet's `ContainerStatusUnknown`.
    pub fn unknown() -> Self {
        ExitStatus {
            exit_code: 137,
            signal: None,
            finished_at: Timestamp::now(),
            reason: Self::STATUS_UNKNOWN.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_follow_the_exit() {
        assert_eq!(ExitStatus::new(Some(0), None, false).reason, "Completed");
        let failed = ExitStatus::new(Some(3), None, false);
        assert_eq!((failed.exit_code, failed.reason.as_str()), (3, "Error"));
        let killed = ExitStatus::new(None, Some(libc::SIGKILL), true);
        assert_eq!(killed.exit_code, 137);
        assert_eq!(killed.signal, Some(9));
        assert_eq!(killed.reason, "OOMKilled");
        assert_eq!(
            ExitStatus::new(None, Some(libc::SIGTERM), false).exit_code,
            143
        );
    }

    #[test]
    fn exit_status_round_trips_through_json() {
        let status = ExitStatus::new(None, Some(15), false);
        let json = serde_json::to_string(&status).unwrap();
        assert!(json.contains("\"finished_at\":\"20"), "{json}");
        assert_eq!(serde_json::from_str::<ExitStatus>(&json).unwrap(), status);
    }
}
