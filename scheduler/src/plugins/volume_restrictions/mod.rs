//! VolumeRestrictions: volumes that only one pod (or one node) may use at
//! a time. Inline GCE PD, AWS EBS, RBD and iSCSI disks conflict with the
//! same disk on the node (unless every user mounts it read-only, where the
//! volume type allows that); a ReadWriteOncePod claim conflicts with any
//! other user anywhere.
//!
//! Beyond kube-scheduler, a claim whose access modes are ReadWriteOnce
//! only (no ReadWriteOncePod, ReadOnlyMany or ReadWriteMany) keeps a pod
//! off every node but the one where the claim is already in use: in
//! Kubernetes the attach/detach controller refuses the second attachment
//! (a Multi-Attach error) after scheduling, and skiff has no attach step to
//! catch it, so the scheduler does. Capacity of volumes per node is
//! NodeVolumeLimits' job.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Volume};

use crate::framework::{
    CycleState, NodeInfo, Plugin, PodInfo, Point, PreFilterResult, Snapshot, Status,
};

pub const NAME: &str = "VolumeRestrictions";

/// An inline disk of the pod is in use on the node.
pub const ERR_REASON_DISK_CONFLICT: &str = "node(s) had no available disk";
/// A ReadWriteOncePod claim of the pod is in use by another pod.
pub const ERR_REASON_READ_WRITE_ONCE_POD_CONFLICT: &str =
    "node has pod using PersistentVolumeClaim with the same name and ReadWriteOncePod access mode";
/// A ReadWriteOnce claim of the pod is in use on another node (skiff's
/// wording: kube-scheduler has no such check).
pub const ERR_REASON_READ_WRITE_ONCE_CONFLICT: &str =
    "node(s) unavailable due to ReadWriteOnce PersistentVolumeClaim in use on another node";

const PRE_FILTER_KEY: &str = "PreFilterVolumeRestrictions";

const READ_WRITE_ONCE_POD: &str = "ReadWriteOncePod";
const READ_WRITE_ONCE: &str = "ReadWriteOnce";

pub struct VolumeRestrictions;

pub fn new(args: &serde_json::Value) -> Result<Arc<dyn Plugin>, String> {
    super::no_args(NAME, args)?;
    Ok(Arc::new(VolumeRestrictions))
}

/// What PreFilter found about the pod's claims; AddPod and RemovePod keep
/// the counts current during preemption's what-ifs.
#[derive(Debug, Clone, Default)]
struct PreFilterState {
    /// The pod's ReadWriteOncePod claims, `namespace/name`.
    read_write_once_pod: BTreeSet<String>,
    /// References from pods in the cluster to those claims.
    read_write_once_pod_refs: i64,
    /// The pod's ReadWriteOnce-only claims.
    read_write_once: BTreeSet<String>,
    /// Node name → references from its pods to those claims.
    read_write_once_refs: HashMap<String, i64>,
}

impl PreFilterState {
    fn update(&mut self, pod: &Pod, node: &str, by: i64) {
        let rwop = claim_refs(pod, &self.read_write_once_pod);
        self.read_write_once_pod_refs += by * rwop;
        let rwo = claim_refs(pod, &self.read_write_once);
        if rwo != 0 {
            *self
                .read_write_once_refs
                .entry(node.to_string())
                .or_default() += by * rwo;
        }
    }

    /// Whether a ReadWriteOnce claim of the pod is in use off `node`.
    fn read_write_once_elsewhere(&self, node: &str) -> bool {
        self.read_write_once_refs
            .iter()
            .any(|(n, refs)| n != node && *refs > 0)
    }
}

fn volumes(pod: &Pod) -> &[Volume] {
    pod.spec
        .as_ref()
        .and_then(|s| s.volumes.as_deref())
        .unwrap_or_default()
}

/// The `namespace/name` of each claim `pod` mounts, once per volume.
fn claim_keys(pod: &Pod) -> impl Iterator<Item = String> + '_ {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    volumes(pod)
        .iter()
        .filter_map(|v| v.persistent_volume_claim.as_ref())
        .map(move |c| format!("{namespace}/{}", c.claim_name))
}

/// How many of `pod`'s volumes mount one of `claims`.
fn claim_refs(pod: &Pod, claims: &BTreeSet<String>) -> i64 {
    if claims.is_empty() {
        return 0;
    }
    claim_keys(pod).filter(|k| claims.contains(k)).count() as i64
}

fn access_modes(claim: &PersistentVolumeClaim) -> &[String] {
    claim
        .spec
        .as_ref()
        .and_then(|s| s.access_modes.as_deref())
        .unwrap_or_default()
}

/// ReadWriteOnce without a mode that lets several nodes attach it.
fn read_write_once_only(modes: &[String]) -> bool {
    modes.iter().any(|m| m == READ_WRITE_ONCE)
        && !modes.iter().any(|m| {
            matches!(
                m.as_str(),
                "ReadOnlyMany" | "ReadWriteMany" | READ_WRITE_ONCE_POD
            )
        })
}

/// Volume types whose disks can conflict on a node.
fn needs_restrictions_check(v: &Volume) -> bool {
    v.gce_persistent_disk.is_some()
        || v.aws_elastic_block_store.is_some()
        || v.rbd.is_some()
        || v.iscsi.is_some()
}

/// Whether `volume` is the same disk as one of `existing`'s volumes,
/// mounted so that the two cannot share it.
fn is_volume_conflict(volume: &Volume, existing: &Pod) -> bool {
    volumes(existing).iter().any(|other| {
        if let (Some(disk), Some(other)) = (&volume.gce_persistent_disk, &other.gce_persistent_disk)
        {
            let read_only = disk.read_only.unwrap_or(false) && other.read_only.unwrap_or(false);
            if disk.pd_name == other.pd_name && !read_only {
                return true;
            }
        }
        if let (Some(disk), Some(other)) = (
            &volume.aws_elastic_block_store,
            &other.aws_elastic_block_store,
        ) {
            if disk.volume_id == other.volume_id {
                return true;
            }
        }
        if let (Some(disk), Some(other)) = (&volume.iscsi, &other.iscsi) {
            let read_only = disk.read_only.unwrap_or(false) && other.read_only.unwrap_or(false);
            if disk.iqn == other.iqn && !read_only {
                return true;
            }
        }
        if let (Some(disk), Some(other)) = (&volume.rbd, &other.rbd) {
            let pool = |p: &Option<String>| {
                p.clone()
                    .filter(|p| !p.is_empty())
                    .unwrap_or_else(|| "rbd".into())
            };
            let read_only = disk.read_only.unwrap_or(false) && other.read_only.unwrap_or(false);
            let shared_monitor = disk.monitors.iter().any(|m| other.monitors.contains(m));
            if shared_monitor
                && pool(&disk.pool) == pool(&other.pool)
                && disk.image == other.image
                && !read_only
            {
                return true;
            }
        }
        false
    })
}

fn satisfies_volume_conflicts(pod: &Pod, node: &NodeInfo) -> bool {
    volumes(pod)
        .iter()
        .filter(|v| needs_restrictions_check(v))
        .all(|v| {
            node.pods
                .iter()
                .all(|existing| !is_volume_conflict(v, &existing.pod))
        })
}

impl Plugin for VolumeRestrictions {
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
        let needs_check = volumes(&pod.pod).iter().any(needs_restrictions_check);
        let mut s = PreFilterState::default();
        for key in claim_keys(&pod.pod) {
            let Some(claim) = snapshot.cluster.claims.get(&key) else {
                let name = key.split_once('/').map_or(key.as_str(), |(_, n)| n);
                return (
                    PreFilterResult::default(),
                    Status::unresolvable(format!("persistentvolumeclaim \"{name}\" not found")),
                );
            };
            let modes = access_modes(claim);
            if modes.iter().any(|m| m == READ_WRITE_ONCE_POD) {
                s.read_write_once_pod.insert(key);
            } else if read_write_once_only(modes) {
                s.read_write_once.insert(key);
            }
        }
        if !s.read_write_once_pod.is_empty() || !s.read_write_once.is_empty() {
            for node in &snapshot.nodes {
                for other in &node.pods {
                    s.update(&other.pod, node.name(), 1);
                }
            }
        }
        let rwo_in_use = s.read_write_once_refs.values().any(|r| *r > 0);
        if !needs_check && s.read_write_once_pod_refs == 0 && !rwo_in_use {
            return (PreFilterResult::default(), Status::skip());
        }
        state.write(PRE_FILTER_KEY, s);
        (PreFilterResult::default(), Status::success())
    }

    fn add_pod(
        &self,
        state: &mut CycleState,
        _: &PodInfo,
        added: &PodInfo,
        node: &NodeInfo,
    ) -> Status {
        if let Some(s) = state.read_mut::<PreFilterState>(PRE_FILTER_KEY) {
            s.update(&added.pod, node.name(), 1);
        }
        Status::success()
    }

    fn remove_pod(
        &self,
        state: &mut CycleState,
        _: &PodInfo,
        removed: &PodInfo,
        node: &NodeInfo,
    ) -> Status {
        if let Some(s) = state.read_mut::<PreFilterState>(PRE_FILTER_KEY) {
            s.update(&removed.pod, node.name(), -1);
        }
        Status::success()
    }

    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        if !satisfies_volume_conflicts(&pod.pod, node) {
            return Status::unschedulable(ERR_REASON_DISK_CONFLICT);
        }
        let Some(s) = state.read::<PreFilterState>(PRE_FILTER_KEY) else {
            return Status::error(format!(
                "reading {PRE_FILTER_KEY:?} from cycleState: not found"
            ));
        };
        if s.read_write_once_pod_refs > 0 {
            return Status::unschedulable(ERR_REASON_READ_WRITE_ONCE_POD_CONFLICT);
        }
        if s.read_write_once_elsewhere(node.name()) {
            return Status::unresolvable(ERR_REASON_READ_WRITE_ONCE_CONFLICT);
        }
        Status::success()
    }
}

#[cfg(test)]
mod tests;
