//! The hostPath provisioner: a claim of a class whose provisioner is
//! `skiff.dev/host-path` (or Kubernetes' `kubernetes.io/host-path`) gets a
//! volume `pvc-<uid>`, a directory under the provisioner's base directory,
//! removed again when the volume is deleted. For one-host clusters, as
//! kube's own hostPath provisioner.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{
    HostPathVolumeSource, ObjectReference, PersistentVolume, PersistentVolumeClaim,
    PersistentVolumeSpec,
};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::plan::{Provisioning, BOUND_BY_CONTROLLER, IS_DEFAULT_CLASS, PROVISIONED_BY};

/// skiff's provisioner name.
pub const PROVISIONER: &str = "skiff.dev/host-path";
/// Kubernetes' name for the same thing (its test-only hostPath provisioner).
pub const KUBERNETES_PROVISIONER: &str = "kubernetes.io/host-path";
/// The class `skiff up` starts with.
pub const DEFAULT_CLASS: &str = "standard";

pub fn is_host_path(provisioner: &str) -> bool {
    provisioner == PROVISIONER || provisioner == KUBERNETES_PROVISIONER
}

/// `pvc-<claim uid>`, as external provisioners name volumes.
pub fn volume_name(claim: &PersistentVolumeClaim) -> String {
    format!("pvc-{}", claim.metadata.uid.as_deref().unwrap_or_default())
}

/// The volume for `claim`: its requested size and access modes, a
/// directory under `base`, reserved for the claim by its claimRef.
pub fn new_volume(
    claim: &PersistentVolumeClaim,
    provisioning: &Provisioning,
    base: &Path,
) -> PersistentVolume {
    let name = volume_name(claim);
    let spec = claim.spec.clone().unwrap_or_default();
    let storage = spec
        .resources
        .as_ref()
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("storage").cloned())
        .unwrap_or_else(|| Quantity("1Gi".into()));
    let annotations = BTreeMap::from([
        (PROVISIONED_BY.to_string(), provisioning.provisioner.clone()),
        (BOUND_BY_CONTROLLER.to_string(), "yes".to_string()),
    ]);
    PersistentVolume {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            annotations: Some(annotations),
            ..Default::default()
        },
        spec: Some(PersistentVolumeSpec {
            capacity: Some(BTreeMap::from([("storage".to_string(), storage)])),
            access_modes: spec.access_modes.clone(),
            persistent_volume_reclaim_policy: Some(provisioning.reclaim_policy.clone()),
            storage_class_name: Some(provisioning.class.clone()),
            volume_mode: spec.volume_mode.clone(),
            host_path: Some(HostPathVolumeSource {
                path: base.join(&name).to_string_lossy().into_owned(),
                type_: Some("DirectoryOrCreate".into()),
            }),
            claim_ref: Some(ObjectReference {
                kind: Some("PersistentVolumeClaim".into()),
                api_version: Some("v1".into()),
                namespace: claim.metadata.namespace.clone(),
                name: claim.metadata.name.clone(),
                uid: claim.metadata.uid.clone(),
                resource_version: claim.metadata.resource_version.clone(),
                ..Default::default()
            }),
            ..Default::default()
        }),
        status: None,
    }
}

/// The directory of a volume this provisioner made under `base`, which
/// may be removed with it; `None` for any other volume.
pub fn owned_dir(volume: &PersistentVolume, base: &Path) -> Option<PathBuf> {
    let by = volume.metadata.annotations.as_ref()?.get(PROVISIONED_BY)?;
    if !is_host_path(by) {
        return None;
    }
    let path = PathBuf::from(&volume.spec.as_ref()?.host_path.as_ref()?.path);
    let inside = path.parent() == Some(base)
        && path
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("pvc-"));
    inside.then_some(path)
}

/// The default class a new cluster gets: `standard`, this provisioner,
/// Immediate binding, Delete reclaim.
pub fn default_storage_class() -> StorageClass {
    StorageClass {
        metadata: ObjectMeta {
            name: Some(DEFAULT_CLASS.into()),
            annotations: Some(BTreeMap::from([(
                IS_DEFAULT_CLASS.to_string(),
                "true".to_string(),
            )])),
            ..Default::default()
        },
        provisioner: PROVISIONER.into(),
        reclaim_policy: Some("Delete".into()),
        volume_binding_mode: Some("Immediate".into()),
        ..Default::default()
    }
}

/// Creates the volume's directory (mode 0777, so any pod may write).
pub async fn create_dir(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    tokio::fs::create_dir_all(path).await?;
    tokio::fs::set_permissions(path, std::fs::Permissions::from_mode(0o777)).await
}

/// Removes the volume's directory; one already gone is fine.
pub async fn remove_dir(path: &Path) -> std::io::Result<()> {
    match tokio::fs::remove_dir_all(path).await {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}
