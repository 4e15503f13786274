//! Pod volumes as plain directories: emptyDir, configMap, secret,
//! hostPath, downwardAPI, projected (with ServiceAccount tokens) and
//! persistentVolumeClaim (its bound volume's hostPath or local path),
//! linked into a per-pod root and announced through env, and bind-mounted
//! at their mountPaths for pods with a mount namespace (see
//! [`PreparedVolumes`]).

mod atomic_writer;
mod claims;
mod host_path;
mod mounts;
mod sources;

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::Pod;

use crate::env::EnvSources;

pub use claims::{claim_names, resolve_claim, ClaimVolume};
pub use sources::{token_key, token_projections};

/// Where emptyDir volumes live under the pod directory, as the kubelet names it.
const EMPTY_DIR_PLUGIN: &str = "kubernetes.io~empty-dir";

/// A pod's volumes on disk and what each container sees of them.
///
/// Every volume is a directory under `<pods_dir>/<uid>/volumes/` (hostPath
/// is the host path itself). A container finds a volume two ways:
/// - links: the pod has a root `<pods_dir>/<uid>/root/`, and each
///   volumeMount's mountPath is a symlink inside it to the volume (or its
///   subPath), so a program run with the root as cwd, or that prefixes
///   `$SKIFF_POD_ROOT`, finds `etc/config`;
/// - env: `SKIFF_POD_ROOT=<root>` and one `SKIFF_VOLUME_<MOUNT_PATH>=<dir>`
///   per mount, the mountPath upper-cased with other characters as `_`
///   (`/etc/config` → `SKIFF_VOLUME_ETC_CONFIG`).
///
/// The root is shared by the pod's containers, so two containers may not
/// mount different volumes at one mountPath, and a mountPath nested in
/// another mount's path is created inside that volume. emptyDir with medium
/// Memory is an ordinary directory and sizeLimit is not enforced here.
/// readOnly is recorded on each mount; only an emptyDir that every mount
/// reads is made read-only (mode 0555), and hostPath files are never
/// touched. serviceAccountToken projections hold the tokens the caller
/// asked for (see [`crate::token`]); clusterTrustBundle projections are
/// skipped and listed in `notes`.
///
/// A pod with a mount namespace (its own network) also sees each mount at
/// its mountPath: see [`PreparedVolumes::bind_mounts`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PreparedVolumes {
    /// `<pods_dir>/<uid>`; empty when nothing was prepared.
    pub pod_dir: PathBuf,
    /// Volume name → its directory (or hostPath file).
    pub volumes: BTreeMap<String, PathBuf>,
    /// Container name → its mounts, in mountPath order.
    pub mounts: BTreeMap<String, Vec<ContainerMount>>,
    /// What was left out on purpose (e.g. serviceAccountToken projections).
    pub notes: Vec<String>,
}

/// One volumeMount of one container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerMount {
    pub volume: String,
    pub mount_path: String,
    /// The volume directory, or the subPath inside it.
    pub source: PathBuf,
    /// The symlink in the pod root that points at `source`.
    pub link: PathBuf,
    pub read_only: bool,
    /// `SKIFF_VOLUME_…`, whose value is `source`.
    pub env_name: String,
}

/// One volume (or subPath of one) that a container sees at `mount_path`:
/// bind-mounted there in the container's mount namespace when the pod has
/// one (see [`crate::network::files::prepare`]).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct BindMount {
    /// The volume directory (or file) on the host.
    pub source: PathBuf,
    /// Where the container sees it: an absolute path.
    pub mount_path: String,
    pub read_only: bool,
}

/// Why a pod's volumes could not be prepared.
#[derive(Debug, thiserror::Error)]
pub enum VolumeError {
    #[error("pod has no metadata.uid, so it has no directory")]
    MissingUid,
    #[error("pod uid {0:?} cannot name a directory")]
    InvalidUid(String),
    #[error("unsupported volume type \"{kind}\" (volume \"{volume}\"); skiff runs emptyDir, configMap, secret, hostPath, downwardAPI, projected and persistentVolumeClaim volumes")]
    UnsupportedType { volume: String, kind: String },
    #[error("MountVolume.SetUp failed for volume \"{volume}\" : {reason}")]
    SetUp { volume: String, reason: String },
    #[error("unable to attach or mount volumes: unmounted volumes=[{volume}]: {reason}")]
    ClaimNotReady { volume: String, reason: String },
    #[error("container \"{container}\" mounts volume \"{volume}\", which the pod does not define")]
    UnknownVolume { container: String, volume: String },
    #[error("container \"{container}\": invalid {field} \"{path}\": {why}")]
    InvalidPath {
        container: String,
        field: &'static str,
        path: String,
        why: &'static str,
    },
    #[error("containers \"{first}\" and \"{second}\" mount different volumes at \"{path}\"; a skiff pod has one root, so give them different mountPaths")]
    MountConflict {
        path: String,
        first: String,
        second: String,
    },
    #[error("cannot {action} {}: {source}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        source: io::Error,
    },
    #[error("volume work stopped before it finished: {0}")]
    Interrupted(String),
}

impl VolumeError {
    fn set_up(volume: &str, reason: impl ToString) -> VolumeError {
        VolumeError::SetUp {
            volume: volume.to_string(),
            reason: reason.to_string(),
        }
    }

    pub(crate) fn io(action: &'static str, path: &Path) -> impl FnOnce(io::Error) -> VolumeError {
        let path = path.to_path_buf();
        move |source| VolumeError::Io {
            action,
            path,
            source,
        }
    }
}

impl PreparedVolumes {
    /// The pod root, `<pods_dir>/<uid>/root`, once prepared.
    pub fn root(&self) -> Option<PathBuf> {
        (!self.pod_dir.as_os_str().is_empty()).then(|| pod_root(&self.pod_dir))
    }

    /// The directory (or hostPath file) of volume `name`.
    pub fn volume_path(&self, name: &str) -> Option<&Path> {
        self.volumes.get(name).map(PathBuf::as_path)
    }

    /// The mounts of `container`, in mountPath order.
    pub fn container_mounts(&self, container: &str) -> &[ContainerMount] {
        self.mounts.get(container).map(Vec::as_slice).unwrap_or(&[])
    }

    /// The mounts of `container` as bind mounts, shallowest mountPath
    /// first (an outer mount before one nested in it).
    pub fn bind_mounts(&self, container: &str) -> Vec<BindMount> {
        self.container_mounts(container)
            .iter()
            .map(|m| BindMount {
                source: m.source.clone(),
                mount_path: m.mount_path.clone(),
                read_only: m.read_only,
            })
            .collect()
    }

    /// `SKIFF_POD_ROOT` and one `SKIFF_VOLUME_…` per mount of `container`.
    pub fn container_env(&self, container: &str) -> Vec<(String, String)> {
        let root = self
            .root()
            .map(|r| ("SKIFF_POD_ROOT".to_string(), path_text(&r)));
        let mounts = self.container_mounts(container).iter();
        let volumes = mounts.map(|m| (m.env_name.clone(), path_text(&m.source)));
        root.into_iter().chain(volumes).collect()
    }
}

/// Creates or refreshes every volume of `pod` under `<pods_dir>/<uid>` and
/// links each container's mountPaths into the pod root. Safe to run again:
/// configMap, secret and downward API contents are swapped atomically.
pub async fn prepare(
    pods_dir: &Path,
    pod: &Pod,
    sources: &EnvSources,
) -> Result<PreparedVolumes, VolumeError> {
    let uid = pod.metadata.uid.as_deref().filter(|u| !u.is_empty());
    let uid = uid.ok_or(VolumeError::MissingUid)?;
    if uid.contains('/') || uid == "." || uid == ".." {
        return Err(VolumeError::InvalidUid(uid.to_string()));
    }
    let pods_dir = std::path::absolute(pods_dir).map_err(VolumeError::io("resolve", pods_dir))?;
    let pod_dir = pods_dir.join(uid);
    let plans = sources::plan_volumes(&pod_dir, pod, sources)?;
    let mounts = mounts::plan_mounts(&pod_dir, pod, &plans)?;
    let blocking_dir = pod_dir.clone();
    let links = mounts.clone();
    let (volumes, notes) = run_blocking(move || apply(&blocking_dir, plans, &links)).await?;
    let mut by_container = BTreeMap::<String, Vec<ContainerMount>>::new();
    for (container, mount) in mounts {
        by_container.entry(container).or_default().push(mount);
    }
    Ok(PreparedVolumes {
        pod_dir,
        volumes,
        mounts: by_container,
        notes,
    })
}

/// Writes every volume, then the links; returns volume paths and notes.
fn apply(
    pod_dir: &Path,
    plans: Vec<sources::VolumePlan>,
    mounts: &[(String, ContainerMount)],
) -> Result<(BTreeMap<String, PathBuf>, Vec<String>), VolumeError> {
    let root = pod_root(pod_dir);
    std::fs::create_dir_all(&root).map_err(VolumeError::io("create pod root", &root))?;
    let mut volumes = BTreeMap::new();
    let mut notes = Vec::new();
    for plan in plans {
        plan.apply(mounts::every_mount_reads_only(mounts, &plan.name))?;
        notes.extend(plan.notes);
        volumes.insert(plan.name, plan.path);
    }
    mounts::link_all(mounts)?;
    Ok((volumes, notes))
}

/// Removes the pod's directory: its volumes' copies and links, never what
/// a hostPath or a link points to.
pub async fn cleanup(pods_dir: &Path, uid: &str) -> Result<(), VolumeError> {
    if uid.is_empty() || uid.contains('/') || uid == "." || uid == ".." {
        return Err(VolumeError::InvalidUid(uid.to_string()));
    }
    let pod_dir = pods_dir.join(uid);
    run_blocking(move || remove_pod_dir(&pod_dir)).await
}

fn remove_pod_dir(pod_dir: &Path) -> Result<(), VolumeError> {
    // Read-only emptyDirs get their write bit back so their files can go.
    let empty_dirs = pod_dir.join("volumes").join(EMPTY_DIR_PLUGIN);
    if let Ok(entries) = std::fs::read_dir(&empty_dirs) {
        for entry in entries.flatten() {
            let _ = set_mode(&entry.path(), 0o777);
        }
    }
    match std::fs::remove_dir_all(pod_dir) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => {
            Err(VolumeError::io("remove pod directory", pod_dir)(e))
        }
        _ => Ok(()),
    }
}

async fn run_blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, VolumeError> + Send + 'static,
) -> Result<T, VolumeError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| VolumeError::Interrupted(e.to_string()))?
}

fn pod_root(pod_dir: &Path) -> PathBuf {
    pod_dir.join("root")
}

fn path_text(path: &Path) -> String {
    path.to_string_lossy().into_owned()
}

pub(crate) fn set_mode(path: &Path, mode: u32) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
}

#[cfg(test)]
mod tests;
