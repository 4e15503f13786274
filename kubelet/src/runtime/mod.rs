//! The process runtime: each container is a local process group run by its
//! own shim ([`crate::shim`]), with state on disk so a restarted kubelet
//! recovers it, and cgroup v2 limits where the host allows. No images.

pub(crate) mod cgroup;
mod container;
mod exec;
mod exec_context;
mod handle;
pub(crate) mod proc;
mod recover;
mod start;
pub(crate) mod state;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub use cgroup::{CgroupConfig, LimitsEnforcement};
pub use container::{ContainerId, ContainerSpec, ExitStatus, Limits};
pub use exec_context::ExecContext;
pub use handle::ContainerHandle;
pub use recover::{RecoveredContainer, RecoveredState};

use crate::logs::ContainerLogs;

/// Where the runtime keeps its state and logs, and how it starts shims.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeConfig {
    /// Holds `containers/` (state) and `pods/` (logs, the kubelet's
    /// `/var/log/pods` layout).
    pub root: PathBuf,
    /// The program and leading arguments that run the shim, e.g.
    /// `[current_exe, "kubelet-shim"]`; the spec path is appended.
    pub shim: Vec<OsString>,
    pub cgroup: CgroupConfig,
}

impl RuntimeConfig {
    /// A configuration with the default cgroup setup.
    pub fn new(root: impl Into<PathBuf>, shim: Vec<OsString>) -> Self {
        RuntimeConfig {
            root: root.into(),
            shim,
            cgroup: CgroupConfig::default(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("container {container} has no command to run")]
    EmptyCommand { container: String },
    #[error("exec: \"{program}\": executable file not found in $PATH")]
    ExecutableNotFound { program: String },
    #[error("exec: \"{program}\": stat {}: {source}", path.display())]
    ExecutableMissing {
        program: String,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("exec: \"{program}\": permission denied")]
    NotExecutable { program: String },
    #[error("chdir to cwd ({}) set for the container failed: {source}", path.display())]
    WorkingDir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("container {container} is already running")]
    AlreadyRunning { container: String },
    #[error("invalid {what} {value:?}: it must be a single path component")]
    InvalidName { what: &'static str, value: String },
    #[error("cannot {action} {}: {source}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("corrupt runtime state {}: {source}", path.display())]
    CorruptState {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error("no shim command configured (RuntimeConfig::shim is empty)")]
    NoShim,
    #[error("cannot start the shim {}: {source}", program.display())]
    ShimSpawn {
        program: PathBuf,
        source: std::io::Error,
    },
    #[error("the shim of container {container} did not report within {timeout:?}")]
    ShimTimeout {
        container: String,
        timeout: Duration,
    },
    #[error("the shim of container {container} exited without starting it: {detail}")]
    ShimExited { container: String, detail: String },
    #[error("the shim of container {container} sent an unreadable report ({line}): {source}")]
    ShimReport {
        container: String,
        line: String,
        source: serde_json::Error,
    },
    /// The shim could not execute the program (e.g. it changed after the
    /// runtime checked it).
    #[error("{message}")]
    StartFailed { container: String, message: String },
}

/// Runs containers as local processes under shims; see the module docs.
#[derive(Debug)]
pub struct ProcessRuntime {
    config: RuntimeConfig,
    cgroups: cgroup::Cgroups,
}

impl ProcessRuntime {
    pub fn new(config: RuntimeConfig) -> Self {
        let cgroups = cgroup::Cgroups::new(config.cgroup.clone());
        ProcessRuntime { config, cgroups }
    }

    pub fn root(&self) -> &Path {
        &self.config.root
    }

    /// The log files of a container (all its attempts).
    pub fn container_logs(&self, id: &ContainerId) -> ContainerLogs {
        ContainerLogs::new(
            self.root(),
            &id.pod_namespace,
            &id.pod_name,
            &id.pod_uid,
            &id.container,
        )
    }

    /// The cgroup containers are created under, or why this host runs them
    /// without limits. Prepares the cgroup on first call.
    pub fn cgroup_parent(&self) -> Result<&Path, &str> {
        self.cgroups.parent()
    }
}
