//! What a command exec'd into a running container runs with: the
//! environment, working directory and cgroup its shim gave the container,
//! read back from the shim's spec so a recovered container has them too.

use std::path::PathBuf;

use super::container::ContainerId;
use super::state::{read_json, ContainerDir};
use super::{exec, ProcessRuntime, RuntimeError};
use crate::shim::ShimSpec;

/// The context of a running container that `kubectl exec` enters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecContext {
    pub env: Vec<(String, String)>,
    pub working_dir: PathBuf,
    /// The container's cgroup, which the command joins, if it has one.
    pub cgroup: Option<PathBuf>,
    /// Where attach writes the container's stdin, if it keeps one.
    pub stdin_socket: Option<PathBuf>,
    /// The container was started with `stdin`, so attach may write it.
    pub stdin: bool,
    /// The container runs on a terminal; attach speaks
    /// [`crate::shim::terminal`]'s frames on its socket.
    pub tty: bool,
    /// The pod's network namespace, which the command joins, if it has
    /// one.
    pub netns: Option<PathBuf>,
    /// The pod's own files, mounted for the command as for the container.
    pub files: Option<PathBuf>,
    /// The container's volumes, mounted at their mountPaths for the
    /// command as for the container (with `netns` or `files` only).
    pub mounts: Vec<crate::volumes::BindMount>,
}

impl ExecContext {
    /// Finds `program` as the container's own start would (its PATH, its
    /// working directory), failing with runc's words when it cannot run.
    pub fn resolve(&self, program: &str) -> Result<PathBuf, RuntimeError> {
        exec::resolve_program(program, &self.env, &self.working_dir)
    }
}

impl ProcessRuntime {
    /// The context of the container run `id`, from the spec its shim runs.
    pub fn exec_context(&self, id: &ContainerId) -> Result<ExecContext, RuntimeError> {
        let dir = ContainerDir::new(self.root(), id)?;
        let path = dir.spec_path();
        let spec: ShimSpec = read_json(&path)?.ok_or_else(|| RuntimeError::Io {
            action: "read the spec of",
            path: path.clone(),
            source: std::io::Error::from(std::io::ErrorKind::NotFound),
        })?;
        Ok(ExecContext {
            env: spec.env,
            working_dir: spec.working_dir,
            cgroup: spec.cgroup,
            // A spec written before `stdin` was recorded had a socket
            // exactly for stdin.
            stdin: spec.stdin || (spec.stdin_socket.is_some() && !spec.tty),
            stdin_socket: spec.stdin_socket,
            tty: spec.tty,
            netns: spec.netns,
            files: spec.files,
            mounts: spec.mounts,
        })
    }
}
