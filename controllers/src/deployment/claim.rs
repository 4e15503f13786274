//! Which ReplicaSets a Deployment manages: those whose controller
//! ownerReference is the Deployment, plus orphans its selector matches
//! (adopted); owned ones the selector no longer matches are released.

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use skiff_machinery::selectors::LabelSelector;

use super::PlanError;
use crate::common::owners::controller_reference;

/// The ReplicaSets the Deployment keeps, and the writes ownership needs.
#[derive(Debug, Default)]
pub struct Claim {
    /// Owned ReplicaSets; `true` when this claim adopted it (it must be
    /// written back with the new ownerReference).
    pub owned: Vec<(ReplicaSet, bool)>,
    /// ReplicaSets to write back without the Deployment's ownerReference.
    pub released: Vec<ReplicaSet>,
}

/// The Deployment's `spec.selector` as a selector; `None` when it is empty
/// (selects everything, which the controller refuses to act on).
pub fn selector(d: &Deployment) -> Result<Option<LabelSelector>, PlanError> {
    let Some(spec) = d.spec.as_ref() else {
        return Ok(None);
    };
    let json = serde_json::to_value(&spec.selector).unwrap_or_default();
    let selector = LabelSelector::from_json(&json)
        .map_err(|e| PlanError::InvalidSelector(e.message.to_string()))?;
    Ok((!selector.is_empty()).then_some(selector))
}

fn controller_of(rs: &ReplicaSet) -> Option<&OwnerReference> {
    rs.metadata
        .owner_references
        .as_ref()?
        .iter()
        .find(|r| r.controller == Some(true))
}

fn matches(selector: &LabelSelector, rs: &ReplicaSet) -> bool {
    let labels = rs.metadata.labels.as_ref();
    selector.matches_by(|key| labels.and_then(|l| l.get(key)).map(String::as_str))
}

/// Sorts `replica_sets` (of the Deployment's namespace) into owned,
/// adopted and released, as kube-controller-manager's ControllerRefManager.
pub fn claim(d: &Deployment, selector: &LabelSelector, replica_sets: &[ReplicaSet]) -> Claim {
    let uid = d.metadata.uid.as_deref().unwrap_or_default();
    let deleting = d.metadata.deletion_timestamp.is_some();
    let mut claim = Claim::default();
    for rs in replica_sets {
        let matched = matches(selector, rs);
        match controller_of(rs) {
            Some(owner) if owner.uid == uid => {
                if matched || deleting {
                    claim.owned.push((rs.clone(), false));
                } else {
                    claim.released.push(release(rs, uid));
                }
            }
            Some(_) => {}
            None if matched && !deleting && rs.metadata.deletion_timestamp.is_none() => {
                let mut adopted = rs.clone();
                adopted
                    .metadata
                    .owner_references
                    .get_or_insert_with(Vec::new)
                    .push(controller_reference(d));
                claim.owned.push((adopted, true));
            }
            None => {}
        }
    }
    claim
}

fn release(rs: &ReplicaSet, uid: &str) -> ReplicaSet {
    let mut released = rs.clone();
    if let Some(refs) = released.metadata.owner_references.as_mut() {
        refs.retain(|r| r.uid != uid);
    }
    released
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deployment() -> Deployment {
        serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "default", "uid": "d-1"},
            "spec": {"selector": {"matchLabels": {"app": "web"}}, "template": {}}
        }))
        .unwrap()
    }

    fn replica_set(name: &str, app: &str, owner: Option<&str>) -> ReplicaSet {
        let refs: Vec<_> = owner
            .map(|uid| {
                json!({"apiVersion": "apps/v1", "kind": "Deployment", "name": "x",
                              "uid": uid, "controller": true})
            })
            .into_iter()
            .collect();
        serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {"app": app}, "ownerReferences": refs}
        }))
        .unwrap()
    }

    #[test]
    fn owned_orphaned_foreign_and_unmatched_replica_sets() {
        let d = deployment();
        let selector = selector(&d).unwrap().unwrap();
        let sets = [
            replica_set("mine", "web", Some("d-1")),
            replica_set("orphan", "web", None),
            replica_set("theirs", "web", Some("d-2")),
            replica_set("other-app", "db", None),
            replica_set("relabelled", "db", Some("d-1")),
        ];
        let claim = claim(&d, &selector, &sets);
        let owned: Vec<_> = claim
            .owned
            .iter()
            .map(|(rs, adopted)| (rs.metadata.name.as_deref().unwrap(), *adopted))
            .collect();
        assert_eq!(owned, [("mine", false), ("orphan", true)]);
        let adopted = &claim.owned[1].0;
        assert_eq!(controller_of(adopted).unwrap().uid, "d-1");
        assert_eq!(
            controller_of(adopted).unwrap().block_owner_deletion,
            Some(true)
        );
        assert_eq!(claim.released.len(), 1);
        assert!(controller_of(&claim.released[0]).is_none());
    }

    #[test]
    fn an_empty_selector_selects_nothing_to_act_on() {
        let mut d = deployment();
        d.spec.as_mut().unwrap().selector = Default::default();
        assert!(selector(&d).unwrap().is_none());
    }
}
