//! The pure part of the PersistentVolume binder: which volume satisfies a
//! claim, and what to do about a claim or a volume in each of its states.
//! Nothing here talks to the API.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;
use skiff_machinery::quantity::Quantity;
use skiff_machinery::selectors::LabelSelector;

/// On a claim or volume whose binding the controller finished.
pub const BIND_COMPLETED: &str = "pv.kubernetes.io/bind-completed";
/// On a claim or volume the controller (not the user) bound.
pub const BOUND_BY_CONTROLLER: &str = "pv.kubernetes.io/bound-by-controller";
/// On a volume a provisioner made: which one.
pub const PROVISIONED_BY: &str = "pv.kubernetes.io/provisioned-by";
/// On a claim: the provisioner expected to make its volume.
pub const STORAGE_PROVISIONER: &str = "volume.kubernetes.io/storage-provisioner";
pub const BETA_STORAGE_PROVISIONER: &str = "volume.beta.kubernetes.io/storage-provisioner";
/// On a claim of a WaitForFirstConsumer class: the node of its first pod.
pub const SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";
/// The StorageClass used by claims that name none.
pub const IS_DEFAULT_CLASS: &str = "storageclass.kubernetes.io/is-default-class";
/// The class annotation of old claims and volumes.
const BETA_CLASS: &str = "volume.beta.kubernetes.io/storage-class";

/// The phase of a claim, volume, or a fact about either.
pub fn claim_phase(claim: &PersistentVolumeClaim) -> &str {
    let status = claim.status.as_ref().and_then(|s| s.phase.as_deref());
    status.unwrap_or("Pending")
}

pub fn volume_phase(volume: &PersistentVolume) -> &str {
    let status = volume.status.as_ref().and_then(|s| s.phase.as_deref());
    status.unwrap_or("Pending")
}

fn annotation<'a>(
    meta: &'a k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    key: &str,
) -> Option<&'a str> {
    meta.annotations.as_ref()?.get(key).map(String::as_str)
}

/// The default StorageClass: the newest one annotated as default.
pub fn default_class(classes: &[Arc<StorageClass>]) -> Option<&StorageClass> {
    classes
        .iter()
        .filter(|c| annotation(&c.metadata, IS_DEFAULT_CLASS) == Some("true"))
        .max_by_key(|c| c.metadata.creation_timestamp.as_ref().map(|t| t.0))
        .map(Arc::as_ref)
}

/// The class a claim asks for: its storageClassName ("" is "no class"),
/// else the beta annotation, else the default class, else "".
pub fn claim_class(claim: &PersistentVolumeClaim, classes: &[Arc<StorageClass>]) -> String {
    if let Some(class) = annotation(&claim.metadata, BETA_CLASS) {
        return class.to_string();
    }
    match claim
        .spec
        .as_ref()
        .and_then(|s| s.storage_class_name.clone())
    {
        Some(class) => class,
        None => default_class(classes)
            .and_then(|c| c.metadata.name.clone())
            .unwrap_or_default(),
    }
}

pub fn volume_class(volume: &PersistentVolume) -> String {
    if let Some(class) = annotation(&volume.metadata, BETA_CLASS) {
        return class.to_string();
    }
    let spec = volume.spec.as_ref();
    spec.and_then(|s| s.storage_class_name.clone())
        .unwrap_or_default()
}

fn requested(claim: &PersistentVolumeClaim) -> Quantity {
    let requests = claim
        .spec
        .as_ref()
        .and_then(|s| s.resources.as_ref())
        .and_then(|r| r.requests.as_ref());
    requests
        .and_then(|r| r.get("storage"))
        .and_then(|q| Quantity::parse(&q.0))
        .unwrap_or_default()
}

fn capacity(volume: &PersistentVolume) -> Quantity {
    let capacity = volume.spec.as_ref().and_then(|s| s.capacity.as_ref());
    capacity
        .and_then(|c| c.get("storage"))
        .and_then(|q| Quantity::parse(&q.0))
        .unwrap_or_default()
}

fn volume_mode_of(mode: Option<&String>) -> &str {
    mode.map(String::as_str).unwrap_or("Filesystem")
}

/// The claim reference points at this claim (by namespace and name, and
/// by uid once the reference carries one).
pub fn is_bound_to(volume: &PersistentVolume, claim: &PersistentVolumeClaim) -> bool {
    let Some(reference) = volume.spec.as_ref().and_then(|s| s.claim_ref.as_ref()) else {
        return false;
    };
    reference.name == claim.metadata.name
        && reference.namespace == claim.metadata.namespace
        && (reference.uid.as_deref().unwrap_or_default().is_empty()
            || reference.uid == claim.metadata.uid)
}

/// Every condition of kube's `FindMatchingVolume` but binding state: class,
/// access modes, capacity, selector, volume mode.
pub fn satisfies(volume: &PersistentVolume, claim: &PersistentVolumeClaim, class: &str) -> bool {
    let (Some(spec), Some(want)) = (volume.spec.as_ref(), claim.spec.as_ref()) else {
        return false;
    };
    if volume_class(volume) != class || volume.metadata.deletion_timestamp.is_some() {
        return false;
    }
    let has = spec.access_modes.clone().unwrap_or_default();
    let modes_ok = want.access_modes.iter().flatten().all(|m| has.contains(m));
    let mode_ok =
        volume_mode_of(spec.volume_mode.as_ref()) == volume_mode_of(want.volume_mode.as_ref());
    let selector_ok = match &want.selector {
        None => true,
        Some(selector) => {
            let labels = volume.metadata.labels.as_ref();
            serde_json::to_value(selector)
                .ok()
                .and_then(|v| LabelSelector::from_json(&v).ok())
                .is_some_and(|s| {
                    s.matches_by(|k| labels.and_then(|l| l.get(k)).map(String::as_str))
                })
        }
    };
    modes_ok && mode_ok && selector_ok && capacity(volume) >= requested(claim)
}

/// The volume for an unbound claim: one already reserved for it (a
/// claimRef naming it) if it fits, else the smallest free one that fits.
pub fn best_volume<'a>(
    claim: &PersistentVolumeClaim,
    class: &str,
    volumes: &'a [Arc<PersistentVolume>],
) -> Option<&'a Arc<PersistentVolume>> {
    let fitting = volumes.iter().filter(|v| satisfies(v, claim, class));
    let (reserved, free): (Vec<_>, Vec<_>) = fitting
        .filter(|v| {
            let bound = v.spec.as_ref().and_then(|s| s.claim_ref.as_ref()).is_some();
            !bound || is_bound_to(v, claim)
        })
        .partition(|v| is_bound_to(v, claim));
    if let Some(volume) = reserved.into_iter().next() {
        return Some(volume);
    }
    free.into_iter()
        .filter(|v| volume_phase(v) == "Available" || volume_phase(v) == "Pending")
        .min_by_key(|v| capacity(v))
}

/// How a claim's class wants its volumes made.
#[derive(Debug, Clone, PartialEq)]
pub struct Provisioning {
    pub class: String,
    pub provisioner: String,
    pub reclaim_policy: String,
    pub wait_for_first_consumer: bool,
}

/// The class's provisioning, when it is one this controller runs.
pub fn provisioning(class: &str, classes: &[Arc<StorageClass>]) -> Option<Provisioning> {
    let found = classes
        .iter()
        .find(|c| c.metadata.name.as_deref() == Some(class))?;
    if !super::provisioner::is_host_path(&found.provisioner) {
        return None;
    }
    Some(Provisioning {
        class: class.to_string(),
        provisioner: found.provisioner.clone(),
        reclaim_policy: found
            .reclaim_policy
            .clone()
            .unwrap_or_else(|| "Delete".into()),
        wait_for_first_consumer: found.volume_binding_mode.as_deref()
            == Some("WaitForFirstConsumer"),
    })
}

/// What a claim sync does.
#[derive(Debug, Clone, PartialEq)]
pub enum ClaimAction {
    /// Bound and consistent, or nothing can be done yet.
    Nothing,
    /// Write phase (and message) into the claim's status.
    Phase(&'static str),
    /// Bind to this volume (by name).
    Bind(String),
    /// Make a volume for it.
    Provision(Provisioning),
    /// WaitForFirstConsumer: its first pod is scheduled to this node.
    SelectNode(String),
}

/// kube's `syncClaim`, as a decision.
pub fn claim_action(
    claim: &PersistentVolumeClaim,
    volumes: &[Arc<PersistentVolume>],
    classes: &[Arc<StorageClass>],
    pods: &[Arc<Pod>],
) -> ClaimAction {
    if claim.metadata.deletion_timestamp.is_some() {
        return ClaimAction::Nothing;
    }
    let volume_name = claim
        .spec
        .as_ref()
        .and_then(|s| s.volume_name.clone())
        .unwrap_or_default();
    let find = |name: &str| {
        volumes
            .iter()
            .find(|v| v.metadata.name.as_deref() == Some(name))
    };
    let completed = annotation(&claim.metadata, BIND_COMPLETED).is_some();
    let phase_is = |phase: &'static str| match claim_phase(claim) == phase {
        true => ClaimAction::Nothing,
        false => ClaimAction::Phase(phase),
    };
    if completed {
        return match find(&volume_name) {
            Some(volume) if is_bound_to(volume, claim) => phase_is("Bound"),
            _ => phase_is("Lost"),
        };
    }
    if !volume_name.is_empty() {
        // Asked for a volume by name: bind to it when it is free or ours.
        return match find(&volume_name) {
            Some(volume) => {
                let free = volume
                    .spec
                    .as_ref()
                    .and_then(|s| s.claim_ref.as_ref())
                    .is_none();
                if free || is_bound_to(volume, claim) {
                    ClaimAction::Bind(volume_name)
                } else {
                    phase_is("Pending")
                }
            }
            None => phase_is("Pending"),
        };
    }
    let class = claim_class(claim, classes);
    if let Some(volume) = best_volume(claim, &class, volumes) {
        return ClaimAction::Bind(volume.metadata.name.clone().unwrap_or_default());
    }
    let Some(provisioning) = provisioning(&class, classes) else {
        return phase_is("Pending");
    };
    if provisioning.wait_for_first_consumer && annotation(&claim.metadata, SELECTED_NODE).is_none()
    {
        return match first_consumer_node(claim, pods) {
            Some(node) => ClaimAction::SelectNode(node),
            None => phase_is("Pending"),
        };
    }
    ClaimAction::Provision(provisioning)
}

/// The node of a scheduled pod that uses the claim.
fn first_consumer_node(claim: &PersistentVolumeClaim, pods: &[Arc<Pod>]) -> Option<String> {
    pods.iter()
        .filter(|p| p.metadata.namespace == claim.metadata.namespace)
        .filter(|p| uses_claim(p, claim.metadata.name.as_deref().unwrap_or_default()))
        .find_map(|p| p.spec.as_ref()?.node_name.clone())
}

/// The pod has a persistentVolumeClaim volume naming `claim`.
pub fn uses_claim(pod: &Pod, claim: &str) -> bool {
    let volumes = pod.spec.as_ref().and_then(|s| s.volumes.as_ref());
    volumes.into_iter().flatten().any(|v| {
        v.persistent_volume_claim
            .as_ref()
            .is_some_and(|c| c.claim_name == claim)
    })
}

/// What a volume sync does.
#[derive(Debug, Clone, PartialEq)]
pub enum VolumeAction {
    Nothing,
    /// Write this phase (and message) into the volume's status.
    Phase(&'static str, Option<String>),
    /// Its claim is gone and its policy says delete it.
    Delete,
    /// The claim reference names a claim that went: released, the
    /// reference is cleared only by the user (Retain).
    Release,
    /// The controller bound it to a claim that now uses another volume.
    Unbind,
}

/// kube's `syncVolume`, as a decision; `claims` are the cached claims.
pub fn volume_action(
    volume: &PersistentVolume,
    claims: &[Arc<PersistentVolumeClaim>],
) -> VolumeAction {
    let phase_is = |phase: &'static str| match volume_phase(volume) == phase {
        true => VolumeAction::Nothing,
        false => VolumeAction::Phase(phase, None),
    };
    if volume.metadata.deletion_timestamp.is_some() {
        return VolumeAction::Nothing;
    }
    let spec = volume.spec.as_ref();
    let Some(reference) = spec.and_then(|s| s.claim_ref.as_ref()) else {
        return phase_is("Available");
    };
    let reserved = reference.uid.as_deref().unwrap_or_default().is_empty();
    let claim = claims.iter().find(|c| {
        c.metadata.name == reference.name
            && c.metadata.namespace == reference.namespace
            && (reserved || c.metadata.uid == reference.uid)
    });
    match claim {
        None if reserved => phase_is("Available"),
        None => match volume_phase(volume) {
            "Released" => reclaim(volume),
            "Failed" => VolumeAction::Nothing,
            _ => VolumeAction::Release,
        },
        Some(claim) => {
            let claimed = claim
                .spec
                .as_ref()
                .and_then(|s| s.volume_name.as_deref())
                .unwrap_or_default();
            if claimed.is_empty() || Some(claimed) == volume.metadata.name.as_deref() {
                match reserved && claimed.is_empty() {
                    true => phase_is("Available"),
                    false => phase_is("Bound"),
                }
            } else if annotation(&volume.metadata, BOUND_BY_CONTROLLER).is_some() {
                VolumeAction::Unbind
            } else {
                phase_is("Released")
            }
        }
    }
}

/// A Released volume's `persistentVolumeReclaimPolicy`.
fn reclaim(volume: &PersistentVolume) -> VolumeAction {
    let policy = volume
        .spec
        .as_ref()
        .and_then(|s| s.persistent_volume_reclaim_policy.as_deref());
    match policy.unwrap_or("Retain") {
        "Delete" => VolumeAction::Delete,
        "Recycle" => VolumeAction::Phase(
            "Failed",
            Some(
                "Recycle is deprecated and not supported by skiff; delete and recreate the volume"
                    .into(),
            ),
        ),
        _ => VolumeAction::Nothing,
    }
}

/// The claim's annotations after binding.
pub fn bound_claim_annotations(
    claim: &PersistentVolumeClaim,
    by_controller: bool,
) -> BTreeMap<String, String> {
    let mut annotations = claim.metadata.annotations.clone().unwrap_or_default();
    annotations.insert(BIND_COMPLETED.into(), "yes".into());
    if by_controller {
        annotations.insert(BOUND_BY_CONTROLLER.into(), "yes".into());
    }
    annotations
}

#[cfg(test)]
mod tests;
