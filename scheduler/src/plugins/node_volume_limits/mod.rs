//! NodeVolumeLimits: a node takes no more attachable volumes of a CSI
//! driver than its limit. Volumes are those of PersistentVolumeClaims and
//! generic ephemeral volumes, counted once per volume however many pods
//! share it.
//!
//! skiff does not watch CSINode, PersistentVolume or StorageClass objects,
//! so: limits come from the node's `status.allocatable`
//! (`attachable-volumes-csi-<driver>`, as kube's `GetCSIAttachLimitKey`
//! names them); a claim's driver is its provisioner annotation
//! (`volume.kubernetes.io/storage-provisioner`, in-tree provisioners
//! translated to their CSI drivers); the volume is the bound PV's name or,
//! unbound, the claim. Claims with no provisioner annotation, inline
//! in-tree volumes (counted by kube only with a CSINode showing migration)
//! and CSI ephemeral inline volumes (not attached) are not counted.

mod sha1;

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};

use crate::framework::{
    ClusterObjects, CycleState, NodeInfo, Plugin, PodInfo, Point, PreFilterResult, Snapshot, Status,
};

pub const NAME: &str = "NodeVolumeLimits";

pub const ERR_REASON_MAX_VOLUME_COUNT_EXCEEDED: &str = "node(s) exceed max volume count";

const PRE_FILTER_KEY: &str = "PreFilterNodeVolumeLimits";

/// Prefix of every attach limit in a node's allocatable.
const ATTACHABLE_VOLUMES_PREFIX: &str = "attachable-volumes-";
const CSI_ATTACH_LIMIT_PREFIX: &str = "attachable-volumes-csi-";
/// Kubernetes' longest resource name.
const RESOURCE_NAME_LENGTH_LIMIT: usize = 63;

/// The provisioner annotations the PV controller sets on a claim.
const PROVISIONER_ANNOTATIONS: &[&str] = &[
    "volume.kubernetes.io/storage-provisioner",
    "volume.beta.kubernetes.io/storage-provisioner",
];

/// In-tree provisioners and the CSI drivers they migrated to.
const MIGRATED_PROVISIONERS: &[(&str, &str)] = &[
    ("kubernetes.io/aws-ebs", "ebs.csi.aws.com"),
    ("kubernetes.io/gce-pd", "pd.csi.storage.gke.io"),
    ("kubernetes.io/cinder", "cinder.csi.openstack.org"),
    ("kubernetes.io/azure-disk", "disk.csi.azure.com"),
    ("kubernetes.io/azure-file", "file.csi.azure.com"),
    ("kubernetes.io/vsphere-volume", "csi.vsphere.vmware.com"),
    ("kubernetes.io/portworx-volume", "pxd.portworx.com"),
];

pub struct NodeVolumeLimits;

pub fn new(args: &serde_json::Value) -> Result<Arc<dyn Plugin>, String> {
    super::no_args(NAME, args)?;
    Ok(Arc::new(NodeVolumeLimits))
}

/// The allocatable key of `driver`'s attach limit; names too long for a
/// resource name are shortened with a hash, as kube does.
pub fn csi_attach_limit_key(driver: &str) -> String {
    if CSI_ATTACH_LIMIT_PREFIX.len() + driver.len() < RESOURCE_NAME_LENGTH_LIMIT {
        return format!("{CSI_ATTACH_LIMIT_PREFIX}{driver}");
    }
    let head = String::from_utf8_lossy(&driver.as_bytes()[..23.min(driver.len())]).into_owned();
    let digest = sha1::hex_digest(driver.as_bytes());
    format!("{CSI_ATTACH_LIMIT_PREFIX}{head}{}", &digest[..16])
}

/// Unique volume name → the limit key it counts against.
type AttachableVolumes = HashMap<String, String>;

/// What PreFilter keeps: the pod's volumes (or why they cannot be
/// resolved), and the claims, to resolve the volumes of pods on a node.
struct PreFilterState {
    new_volumes: Result<AttachableVolumes, Status>,
    cluster: Arc<ClusterObjects>,
}

fn controller_uid(claim: &PersistentVolumeClaim) -> Option<&str> {
    claim
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|r| r.controller == Some(true))
        .map(|r| r.uid.as_str())
}

/// The claim's CSI driver, or `None` when the claim does not say.
fn claim_driver(claim: &PersistentVolumeClaim) -> Option<String> {
    let annotations = claim.metadata.annotations.as_ref()?;
    let provisioner = PROVISIONER_ANNOTATIONS
        .iter()
        .find_map(|a| annotations.get(*a).filter(|p| !p.is_empty()))?;
    let driver = MIGRATED_PROVISIONERS
        .iter()
        .find(|(in_tree, _)| in_tree == provisioner)
        .map_or(provisioner.as_str(), |(_, csi)| csi);
    Some(driver.to_string())
}

/// Adds `pod`'s attachable volumes to `out`. For the pod being scheduled
/// (`new_pod`) a missing claim is an error; for pods already on the node
/// it is skipped, as kube counts them.
fn attachable_volumes(
    pod: &Pod,
    cluster: &ClusterObjects,
    new_pod: bool,
    out: &mut AttachableVolumes,
) -> Result<(), Status> {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    let pod_name = pod.metadata.name.as_deref().unwrap_or_default();
    let volumes = pod
        .spec
        .as_ref()
        .and_then(|s| s.volumes.as_deref())
        .unwrap_or_default();
    for volume in volumes {
        let (claim_name, ephemeral) = match (&volume.persistent_volume_claim, &volume.ephemeral) {
            (Some(source), _) => (source.claim_name.clone(), false),
            (None, Some(_)) => (format!("{pod_name}-{}", volume.name), true),
            (None, None) => continue,
        };
        if claim_name.is_empty() {
            return Err(Status::error("PersistentVolumeClaim had no name"));
        }
        let Some(claim) = cluster.claims.get(&format!("{namespace}/{claim_name}")) else {
            if new_pod {
                return Err(Status::unresolvable(format!(
                    "looking up PVC {namespace}/{claim_name}: persistentvolumeclaim \"{claim_name}\" not found"
                )));
            }
            continue;
        };
        if ephemeral
            && controller_uid(claim) != Some(pod.metadata.uid.as_deref().unwrap_or_default())
        {
            return Err(Status::error(format!(
                "PVC {namespace}/{claim_name} was not created for pod {namespace}/{pod_name} (pod is not owner)"
            )));
        }
        let Some(driver) = claim_driver(claim) else {
            continue;
        };
        let bound = claim
            .spec
            .as_ref()
            .and_then(|s| s.volume_name.as_deref())
            .filter(|v| !v.is_empty());
        let handle = match bound {
            Some(volume_name) => format!("pv:{volume_name}"),
            None => format!("claim:{namespace}/{claim_name}"),
        };
        out.insert(format!("{driver}/{handle}"), csi_attach_limit_key(&driver));
    }
    Ok(())
}

/// The node's attach limits by key.
fn volume_limits(node: &NodeInfo) -> HashMap<&str, i64> {
    node.allocatable
        .scalar
        .iter()
        .filter(|(name, _)| name.starts_with(ATTACHABLE_VOLUMES_PREFIX))
        .map(|(name, limit)| (name.as_str(), *limit))
        .collect()
}

impl Plugin for NodeVolumeLimits {
    fn name(&self) -> &'static str {
        NAME
    }

    fn points(&self) -> &'static [Point] {
        &[Point::PreFilter, Point::Filter]
    }

    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
    ) -> (PreFilterResult, Status) {
        let volumes = pod
            .pod
            .spec
            .as_ref()
            .and_then(|s| s.volumes.as_deref())
            .unwrap_or_default();
        if !volumes
            .iter()
            .any(|v| v.persistent_volume_claim.is_some() || v.ephemeral.is_some())
        {
            return (PreFilterResult::default(), Status::skip());
        }
        let mut new_volumes = AttachableVolumes::new();
        let resolved = attachable_volumes(&pod.pod, &snapshot.cluster, true, &mut new_volumes);
        state.write(
            PRE_FILTER_KEY,
            PreFilterState {
                new_volumes: resolved.map(|()| new_volumes),
                cluster: snapshot.cluster.clone(),
            },
        );
        (PreFilterResult::default(), Status::success())
    }

    fn filter(&self, state: &CycleState, _: &PodInfo, node: &NodeInfo) -> Status {
        let Some(s) = state.read::<PreFilterState>(PRE_FILTER_KEY) else {
            return Status::error(format!(
                "reading {PRE_FILTER_KEY:?} from cycleState: not found ({NAME} needs its PreFilter to look claims up)"
            ));
        };
        let new_volumes = match &s.new_volumes {
            Ok(volumes) if volumes.is_empty() => return Status::success(),
            Ok(volumes) => volumes,
            Err(status) => return status.clone(),
        };
        let limits = volume_limits(node);
        if limits.is_empty() {
            return Status::success();
        }
        let mut attached = AttachableVolumes::new();
        for existing in &node.pods {
            if let Err(status) = attachable_volumes(&existing.pod, &s.cluster, false, &mut attached)
            {
                return status;
            }
        }
        let mut attached_count: HashMap<&str, i64> = HashMap::new();
        for key in attached.values() {
            *attached_count.entry(key.as_str()).or_default() += 1;
        }
        let mut new_count: HashMap<&str, i64> = HashMap::new();
        for (volume, key) in new_volumes {
            // A volume already attached for another pod is not attached again.
            if !attached.contains_key(volume) {
                *new_count.entry(key.as_str()).or_default() += 1;
            }
        }
        for (key, count) in new_count {
            if let Some(limit) = limits.get(key) {
                if attached_count.get(key).copied().unwrap_or(0) + count > *limit {
                    return Status::unschedulable(ERR_REASON_MAX_VOLUME_COUNT_EXCEEDED);
                }
            }
        }
        Status::success()
    }
}

#[cfg(test)]
mod tests;
