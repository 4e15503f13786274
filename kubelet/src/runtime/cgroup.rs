//! cgroup v2 limits: a cgroup per container under a parent the kubelet may
//! delegate to, with `cpu.max` and `memory.max`. Hosts that do not allow it
//! run containers unlimited, and say why once.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::container::{ContainerId, Limits};

/// The CFS period written to `cpu.max`, in microseconds.
const CPU_PERIOD_MICROS: u64 = 100_000;
/// The smallest quota the kernel accepts, in microseconds.
const CPU_MIN_QUOTA_MICROS: u64 = 1_000;

/// Where cgroup v2 lives and which cgroup holds the containers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupConfig {
    /// The cgroup v2 mount (default `/sys/fs/cgroup`).
    pub mount: PathBuf,
    /// The cgroup (a directory under `mount`) to create containers under;
    /// by default a `skiff-kubelet` child of the kubelet's own cgroup.
    pub parent: Option<PathBuf>,
}

impl Default for CgroupConfig {
    fn default() -> Self {
        CgroupConfig {
            mount: PathBuf::from("/sys/fs/cgroup"),
            parent: None,
        }
    }
}

/// Whether a container runs under its limits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum LimitsEnforcement {
    /// The container runs in its own cgroup, with its limits written there.
    Applied { cgroup: PathBuf },
    /// The container runs without a cgroup of its own, unlimited.
    Skipped { reason: String },
}

/// The runtime's cgroups: the parent, prepared on first use, and one child
/// per container.
#[derive(Debug)]
pub struct Cgroups {
    config: CgroupConfig,
    parent: OnceLock<Result<PathBuf, String>>,
}

impl Cgroups {
    pub fn new(config: CgroupConfig) -> Self {
        Cgroups {
            config,
            parent: OnceLock::new(),
        }
    }

    /// The parent cgroup, or why containers cannot have cgroups on this host
    /// (logged once, the first time it is asked).
    pub fn parent(&self) -> Result<&Path, &str> {
        let prepared = self.parent.get_or_init(|| {
            let prepared = prepare_parent(&self.config);
            if let Err(reason) = &prepared {
                tracing::warn!(%reason, "container resource limits are not enforced");
            }
            prepared
        });
        prepared.as_deref().map_err(String::as_str)
    }

    /// Creates the cgroup of one container with its limits.
    pub fn create(&self, id: &ContainerId, limits: Limits) -> LimitsEnforcement {
        let parent = match self.parent() {
            Ok(parent) => parent,
            Err(reason) => {
                return LimitsEnforcement::Skipped {
                    reason: reason.to_string(),
                }
            }
        };
        let cgroup = parent.join(format!("{}_{}_{}", id.pod_uid, id.container, id.attempt));
        match create_container_cgroup(&cgroup, limits) {
            Ok(()) => LimitsEnforcement::Applied { cgroup },
            Err(reason) => {
                tracing::warn!(container = %id, %reason, "container runs without resource limits");
                remove(&cgroup);
                LimitsEnforcement::Skipped { reason }
            }
        }
    }
}

fn prepare_parent(config: &CgroupConfig) -> Result<PathBuf, String> {
    if !config.mount.join("cgroup.controllers").exists() {
        return Err(format!(
            "cgroup v2 is not mounted at {} (no cgroup.controllers)",
            config.mount.display()
        ));
    }
    let parent = match &config.parent {
        Some(parent) => parent.clone(),
        None => {
            let own = std::fs::read_to_string("/proc/self/cgroup")
                .map_err(|err| format!("cannot read /proc/self/cgroup: {err}"))?;
            let own = unified_path(&own).ok_or("/proc/self/cgroup has no cgroup v2 (0::) entry")?;
            let own = config.mount.join(own.trim_start_matches('/'));
            enable_controllers(&own)?;
            own.join("skiff-kubelet")
        }
    };
    std::fs::create_dir_all(&parent)
        .map_err(|err| format!("cannot create cgroup {}: {err}", parent.display()))?;
    enable_controllers(&parent)?;
    Ok(parent)
}

/// The kubelet's own cgroup v2 path from `/proc/self/cgroup`.
fn unified_path(proc_self_cgroup: &str) -> Option<&str> {
    proc_self_cgroup
        .lines()
        .find_map(|line| line.strip_prefix("0::"))
}

/// Makes the cpu and memory controllers available to the children of `dir`.
fn enable_controllers(dir: &Path) -> Result<(), String> {
    let read = |name: &str| {
        std::fs::read_to_string(dir.join(name))
            .map_err(|err| format!("cannot read {}: {err}", dir.join(name).display()))
    };
    let available = read("cgroup.controllers")?;
    let missing: Vec<_> = ["cpu", "memory"]
        .into_iter()
        .filter(|c| !available.split_whitespace().any(|a| a == *c))
        .collect();
    if !missing.is_empty() {
        return Err(format!(
            "controllers {} are not delegated to {}",
            missing.join(", "),
            dir.display()
        ));
    }
    let enabled = read("cgroup.subtree_control")?;
    if ["cpu", "memory"]
        .iter()
        .all(|c| enabled.split_whitespace().any(|e| e == *c))
    {
        return Ok(());
    }
    write_file(&dir.join("cgroup.subtree_control"), "+cpu +memory").map_err(|err| {
        format!(
            "cannot enable cpu and memory for the children of {}: {err} \
             (a cgroup holding processes cannot; configure an empty delegated cgroup as parent)",
            dir.display()
        )
    })
}

fn create_container_cgroup(cgroup: &Path, limits: Limits) -> Result<(), String> {
    if cgroup.exists() {
        // Left over from a run that was never cleaned up.
        remove(cgroup);
    }
    std::fs::create_dir(cgroup)
        .map_err(|err| format!("cannot create cgroup {}: {err}", cgroup.display()))?;
    let mut settings = Vec::new();
    if let Some(millis) = limits.cpu_millis {
        settings.push(("cpu.max", cpu_max(millis)));
    }
    if let Some(bytes) = limits.memory_bytes {
        settings.push(("memory.max", bytes.to_string()));
    }
    for (file, value) in settings {
        write_file(&cgroup.join(file), &value).map_err(|err| {
            format!(
                "cannot write {value:?} to {}: {err}",
                cgroup.join(file).display()
            )
        })?;
    }
    Ok(())
}

/// `cpu.max` for a CPU limit in millicores: the quota per 100 ms period.
fn cpu_max(millis: u64) -> String {
    let quota = (millis.saturating_mul(CPU_PERIOD_MICROS) / 1000).max(CPU_MIN_QUOTA_MICROS);
    format!("{quota} {CPU_PERIOD_MICROS}")
}

fn write_file(path: &Path, value: &str) -> std::io::Result<()> {
    std::fs::OpenOptions::new()
        .write(true)
        .open(path)?
        .write_all(value.as_bytes())
}

/// How many times the kernel OOM-killed a process of the cgroup
/// (`oom_kill` in `memory.events`).
pub fn oom_kills(cgroup: &Path) -> Option<u64> {
    let events = std::fs::read_to_string(cgroup.join("memory.events")).ok()?;
    parse_oom_kills(&events)
}

fn parse_oom_kills(events: &str) -> Option<u64> {
    events
        .lines()
        .find_map(|line| line.strip_prefix("oom_kill "))
        .and_then(|count| count.trim().parse().ok())
}

/// Kills whatever still runs in the cgroup and removes it. Best effort: the
/// kernel refuses to remove a cgroup until its processes are gone.
pub fn remove(cgroup: &Path) {
    let _ = write_file(&cgroup.join("cgroup.kill"), "1");
    for _ in 0..50 {
        match std::fs::remove_dir(cgroup) {
            Err(err) if err.raw_os_error() == Some(libc::EBUSY) => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(err) if err.kind() != std::io::ErrorKind::NotFound => {
                tracing::warn!(cgroup = %cgroup.display(), %err, "cannot remove cgroup");
                return;
            }
            _ => return,
        }
    }
    tracing::warn!(cgroup = %cgroup.display(), "cgroup still busy; left behind");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_max_is_the_quota_per_period() {
        assert_eq!(cpu_max(1000), "100000 100000");
        assert_eq!(cpu_max(250), "25000 100000");
        assert_eq!(cpu_max(2500), "250000 100000");
        assert_eq!(cpu_max(1), "1000 100000", "the kernel's minimum quota");
    }

    #[test]
    fn unified_path_comes_from_the_0_entry() {
        let text = "4:memory:/x\n0::/system.slice/kubelet.service\n";
        assert_eq!(unified_path(text), Some("/system.slice/kubelet.service"));
        assert_eq!(unified_path("4:memory:/x\n"), None);
    }

    #[test]
    fn oom_kills_are_read_from_memory_events() {
        let events = "low 0\nhigh 0\nmax 4\noom 1\noom_kill 2\noom_group_kill 0\n";
        assert_eq!(parse_oom_kills(events), Some(2));
        assert_eq!(parse_oom_kills("low 0\n"), None);
    }

    #[test]
    fn no_cgroup_v2_mount_skips_limits_with_the_reason() {
        let fake = tempfile::tempdir().unwrap();
        let cgroups = Cgroups::new(CgroupConfig {
            mount: fake.path().to_path_buf(),
            parent: None,
        });
        let id = ContainerId {
            pod_uid: "u".into(),
            pod_namespace: "ns".into(),
            pod_name: "p".into(),
            container: "c".into(),
            attempt: 0,
        };
        let outcome = cgroups.create(&id, Limits::default());
        let LimitsEnforcement::Skipped { reason } = outcome else {
            panic!("limits applied without cgroup v2: {outcome:?}");
        };
        assert!(reason.contains("no cgroup.controllers"), "{reason}");
        assert_eq!(cgroups.parent(), Err(reason.as_str()));
    }

    #[test]
    fn controllers_that_are_not_delegated_are_named() {
        let fake = tempfile::tempdir().unwrap();
        std::fs::write(
            fake.path().join("cgroup.controllers"),
            "cpuset io memory pids\n",
        )
        .unwrap();
        let err = enable_controllers(fake.path()).unwrap_err();
        assert!(
            err.starts_with("controllers cpu are not delegated"),
            "{err}"
        );
    }

    #[test]
    fn enabled_controllers_are_not_written_again() {
        let fake = tempfile::tempdir().unwrap();
        std::fs::write(fake.path().join("cgroup.controllers"), "cpu memory\n").unwrap();
        std::fs::write(fake.path().join("cgroup.subtree_control"), "memory cpu\n").unwrap();
        enable_controllers(fake.path()).unwrap();
        let written = std::fs::read_to_string(fake.path().join("cgroup.subtree_control")).unwrap();
        assert_eq!(written, "memory cpu\n");
    }
}
