//! persistentVolumeClaim volumes: the claim resolved to its bound
//! PersistentVolume, whose hostPath (or local) directory the pod then uses
//! as it would a hostPath volume. A claim not bound yet holds the pod back
//! with the kubelet's message until it is.

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};

/// What a claim gives a pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimVolume {
    /// The bound volume's directory, and its hostPath type ("" for none).
    Bound { path: String, kind: String },
    /// Why the pod must wait (the claim is missing or not bound, or its
    /// volume is not one a local process can use).
    NotReady(String),
}

/// The claims the pod's volumes name, in spec order.
pub fn claim_names(pod: &Pod) -> Vec<String> {
    let volumes = pod.spec.as_ref().and_then(|s| s.volumes.as_ref());
    let mut names: Vec<String> = volumes
        .into_iter()
        .flatten()
        .filter_map(|v| v.persistent_volume_claim.as_ref())
        .map(|c| c.claim_name.clone())
        .collect();
    names.dedup();
    names
}

/// What `claim` (named `name` in `namespace`; `None` when it does not
/// exist) gives a pod, with `volume` its bound volume as read.
pub fn resolve_claim(
    namespace: &str,
    name: &str,
    claim: Option<&PersistentVolumeClaim>,
    volume: Option<&PersistentVolume>,
) -> ClaimVolume {
    let Some(claim) = claim else {
        return ClaimVolume::NotReady(format!("persistentvolumeclaim \"{name}\" not found"));
    };
    let phase = claim
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or_default();
    let volume_name = claim
        .spec
        .as_ref()
        .and_then(|s| s.volume_name.as_deref())
        .unwrap_or_default();
    if phase != "Bound" || volume_name.is_empty() {
        return ClaimVolume::NotReady(format!(
            "PVC {namespace}/{name} has non-bound phase (\"{phase}\") or empty pvc.Spec.VolumeName (\"{volume_name}\")"
        ));
    }
    let Some(volume) = volume else {
        return ClaimVolume::NotReady(format!("persistentvolume \"{volume_name}\" not found"));
    };
    let bound_to_claim = volume
        .spec
        .as_ref()
        .and_then(|s| s.claim_ref.as_ref())
        .is_some_and(|r| r.uid.is_none() || r.uid == claim.metadata.uid);
    if !bound_to_claim {
        return ClaimVolume::NotReady(format!(
            "persistentvolume \"{volume_name}\" is not bound to PVC {namespace}/{name}"
        ));
    }
    let spec = volume.spec.as_ref();
    if let Some(host_path) = spec.and_then(|s| s.host_path.as_ref()) {
        return ClaimVolume::Bound {
            path: host_path.path.clone(),
            kind: host_path.type_.clone().unwrap_or_default(),
        };
    }
    if let Some(local) = spec.and_then(|s| s.local.as_ref()) {
        return ClaimVolume::Bound {
            path: local.path.clone(),
            kind: "Directory".into(),
        };
    }
    ClaimVolume::NotReady(format!(
        "persistentvolume \"{volume_name}\" has no hostPath or local path; skiff runs pods as local processes and mounts no other volume types"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn claim(phase: &str, volume: &str) -> PersistentVolumeClaim {
        serde_json::from_value(json!({
            "metadata": {"name": "data", "namespace": "default", "uid": "c1"},
            "spec": {"volumeName": volume}, "status": {"phase": phase},
        }))
        .unwrap()
    }

    fn volume(source: serde_json::Value) -> PersistentVolume {
        let mut spec = json!({"claimRef": {"namespace": "default", "name": "data", "uid": "c1"}});
        spec.as_object_mut()
            .unwrap()
            .extend(source.as_object().unwrap().clone());
        serde_json::from_value(json!({"metadata": {"name": "pv1"}, "spec": spec})).unwrap()
    }

    #[test]
    fn a_bound_claim_resolves_to_its_volumes_directory() {
        let pv = volume(json!({"hostPath": {"path": "/srv/pv1", "type": "DirectoryOrCreate"}}));
        assert_eq!(
            resolve_claim("default", "data", Some(&claim("Bound", "pv1")), Some(&pv)),
            ClaimVolume::Bound {
                path: "/srv/pv1".into(),
                kind: "DirectoryOrCreate".into()
            }
        );
        let local = volume(json!({"local": {"path": "/mnt/disk"}}));
        assert!(matches!(
            resolve_claim("default", "data", Some(&claim("Bound", "pv1")), Some(&local)),
            ClaimVolume::Bound { path, .. } if path == "/mnt/disk"
        ));
        let nfs = volume(json!({"nfs": {"server": "x", "path": "/"}}));
        assert!(matches!(
            resolve_claim("default", "data", Some(&claim("Bound", "pv1")), Some(&nfs)),
            ClaimVolume::NotReady(_)
        ));
    }

    #[test]
    fn a_pending_or_missing_claim_waits_with_the_kubelets_message() {
        assert_eq!(
            resolve_claim("default", "data", Some(&claim("Pending", "")), None),
            ClaimVolume::NotReady(
                "PVC default/data has non-bound phase (\"Pending\") or empty pvc.Spec.VolumeName (\"\")"
                    .into()
            )
        );
        assert_eq!(
            resolve_claim("default", "data", None, None),
            ClaimVolume::NotReady("persistentvolumeclaim \"data\" not found".into())
        );
        assert_eq!(
            resolve_claim("default", "data", Some(&claim("Bound", "pv1")), None),
            ClaimVolume::NotReady("persistentvolume \"pv1\" not found".into())
        );
    }

    #[test]
    fn claim_names_come_from_the_pods_volumes() {
        let pod: Pod = serde_json::from_value(json!({"spec": {"containers": [], "volumes": [
            {"name": "a", "persistentVolumeClaim": {"claimName": "data"}},
            {"name": "b", "emptyDir": {}},
            {"name": "c", "persistentVolumeClaim": {"claimName": "logs", "readOnly": true}},
        ]}}))
        .unwrap();
        assert_eq!(claim_names(&pod), ["data", "logs"]);
    }
}
