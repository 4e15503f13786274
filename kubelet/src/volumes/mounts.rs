//! volumeMounts as symlinks in the pod root, and the `SKIFF_VOLUME_…` name
//! each one is announced under.

use std::collections::BTreeMap;
use std::io;
use std::os::unix::fs::symlink;
use std::path::{Component, Path, PathBuf};

use k8s_openapi::api::core::v1::{Container, Pod, VolumeMount};

use super::sources::VolumePlan;
use super::{pod_root, ContainerMount, VolumeError};
use crate::env::{self, NodeFacts};

/// Every (container, mount) of the pod, shallowest mountPath first so an
/// outer link exists before one nested inside it.
pub(super) fn plan_mounts(
    pod_dir: &Path,
    pod: &Pod,
    plans: &[VolumePlan],
) -> Result<Vec<(String, ContainerMount)>, VolumeError> {
    let volumes: BTreeMap<&str, &Path> = plans
        .iter()
        .map(|p| (p.name.as_str(), p.path.as_path()))
        .collect();
    let root = pod_root(pod_dir);
    let mut mounts = Vec::new();
    for container in env::all_containers(pod) {
        for mount in container.volume_mounts.iter().flatten() {
            let planned = plan_mount(&root, pod, container, mount, &volumes)?;
            mounts.push((container.name.clone(), planned));
        }
    }
    mounts.sort_by_key(|(container, m)| {
        (
            depth(&m.mount_path),
            m.mount_path.clone(),
            container.clone(),
        )
    });
    check_conflicts(&mounts)?;
    Ok(mounts)
}

fn plan_mount(
    root: &Path,
    pod: &Pod,
    container: &Container,
    mount: &VolumeMount,
    volumes: &BTreeMap<&str, &Path>,
) -> Result<ContainerMount, VolumeError> {
    let invalid = |field, path: &str, why| VolumeError::InvalidPath {
        container: container.name.clone(),
        field,
        path: path.to_string(),
        why,
    };
    let volume = volumes
        .get(mount.name.as_str())
        .ok_or_else(|| VolumeError::UnknownVolume {
            container: container.name.clone(),
            volume: mount.name.clone(),
        })?;
    let relative = mount.mount_path.trim_start_matches('/');
    if !mount.mount_path.starts_with('/') || !only_names(relative) {
        return Err(invalid(
            "mountPath",
            &mount.mount_path,
            "must be absolute, below /, without '..'",
        ));
    }
    let sub_path = sub_path(pod, container, mount);
    if !sub_path.is_empty() && (sub_path.starts_with('/') || !only_names(&sub_path)) {
        return Err(invalid(
            "subPath",
            &sub_path,
            "must be relative, without '..'",
        ));
    }
    let source = if sub_path.is_empty() {
        volume.to_path_buf()
    } else {
        volume.join(&sub_path)
    };
    Ok(ContainerMount {
        volume: mount.name.clone(),
        mount_path: mount.mount_path.clone(),
        source,
        link: root.join(relative),
        read_only: mount.read_only == Some(true),
        env_name: env_name(&mount.mount_path),
    })
}

/// `subPath`, or `subPathExpr` expanded against the container's literal
/// env values and fieldRefs (the rest of the env needs the volumes first).
fn sub_path(pod: &Pod, container: &Container, mount: &VolumeMount) -> String {
    if let Some(path) = mount.sub_path.as_deref().filter(|p| !p.is_empty()) {
        return path.to_string();
    }
    let Some(expr) = mount.sub_path_expr.as_deref().filter(|p| !p.is_empty()) else {
        return String::new();
    };
    let node = NodeFacts::from_pod(pod);
    let mut vars: Vec<(String, String)> = Vec::new();
    for var in container.env.iter().flatten() {
        let field = var.value_from.as_ref().and_then(|f| f.field_ref.as_ref());
        let value = match (&var.value, field) {
            (Some(value), _) => Some(env::expand_references(value, &vars)),
            (None, Some(field)) => env::field_ref_value(pod, field, &node).ok(),
            (None, None) => None,
        };
        if let Some(value) = value {
            vars.retain(|(name, _)| name != &var.name);
            vars.push((var.name.clone(), value));
        }
    }
    env::expand_references(expr, &vars)
}

/// Two containers may share a mountPath only for the same source.
fn check_conflicts(mounts: &[(String, ContainerMount)]) -> Result<(), VolumeError> {
    let mut seen: BTreeMap<&str, (&str, &Path)> = BTreeMap::new();
    for (container, mount) in mounts {
        let path = mount.mount_path.trim_end_matches('/');
        match seen.get(path) {
            Some((first, source)) if *source != mount.source.as_path() => {
                return Err(VolumeError::MountConflict {
                    path: mount.mount_path.clone(),
                    first: first.to_string(),
                    second: container.clone(),
                });
            }
            Some(_) => {}
            None => {
                seen.insert(path, (container, &mount.source));
            }
        }
    }
    Ok(())
}

/// Whether every mount of `volume` is readOnly (false when none mounts it).
pub(super) fn every_mount_reads_only(mounts: &[(String, ContainerMount)], volume: &str) -> bool {
    let mut of_volume = mounts.iter().filter(|(_, m)| m.volume == volume).peekable();
    of_volume.peek().is_some() && of_volume.all(|(_, m)| m.read_only)
}

/// Creates each mount's link, and a missing subPath as a directory.
pub(super) fn link_all(mounts: &[(String, ContainerMount)]) -> Result<(), VolumeError> {
    for (_, mount) in mounts {
        if std::fs::symlink_metadata(&mount.source).is_err() {
            std::fs::create_dir_all(&mount.source)
                .map_err(VolumeError::io("create subPath", &mount.source))?;
        }
        link(&mount.link, &mount.source).map_err(VolumeError::io("link mountPath", &mount.link))?;
    }
    Ok(())
}

/// Makes `link` point at `source`, replacing an older link atomically.
fn link(link: &Path, source: &Path) -> io::Result<()> {
    if let Some(parent) = link.parent() {
        std::fs::create_dir_all(parent)?;
    }
    match std::fs::symlink_metadata(link) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => symlink(source, link),
        Err(e) => Err(e),
        Ok(meta) if meta.file_type().is_symlink() => {
            if std::fs::read_link(link)? == source {
                return Ok(());
            }
            let next = sibling(link, ".skiff-link-next");
            let _ = std::fs::remove_file(&next);
            symlink(source, &next)?;
            std::fs::rename(&next, link)
        }
        // An empty directory left by a nested mount's parent creation.
        Ok(meta) if meta.is_dir() => {
            std::fs::remove_dir(link)?;
            symlink(source, link)
        }
        Ok(_) => Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            "a file that is not a link is already there",
        )),
    }
}

fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(suffix);
    path.with_file_name(name)
}

/// `/etc/config` → `SKIFF_VOLUME_ETC_CONFIG`.
pub(crate) fn env_name(mount_path: &str) -> String {
    let upper: String = mount_path
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_uppercase()
            } else {
                '_'
            }
        })
        .collect();
    format!("SKIFF_VOLUME_{}", upper.trim_matches('_'))
}

fn only_names(path: &str) -> bool {
    !path.is_empty()
        && Path::new(path)
            .components()
            .all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
}

fn depth(path: &str) -> usize {
    path.split('/').filter(|p| !p.is_empty()).count()
}
