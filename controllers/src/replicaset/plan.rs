//! The pure part of a ReplicaSet sync: which pods it claims (owns, adopts,
//! releases) and how it scales (create how many, delete which).
//! Nothing here talks to the API.

use std::sync::Arc;

use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::Pod;
use skiff_machinery::selectors::LabelSelector;

use super::ranking::pods_to_delete;
use crate::common::pods::{controller_ref, is_active};

/// At most this many pods are created or deleted by one sync
/// (kube-controller-manager's `BurstReplicas`).
pub const BURST_REPLICAS: usize = 500;

/// `spec.selector` as a matcher.
pub fn selector(rs: &ReplicaSet) -> Result<LabelSelector, String> {
    let value =
        serde_json::to_value(rs.spec.as_ref().map(|s| &s.selector)).map_err(|e| e.to_string())?;
    if value.is_null() {
        return Err("spec.selector is missing".into());
    }
    LabelSelector::from_json(&value).map_err(|e| e.message)
}

/// How the active pods of a namespace stand with a ReplicaSet.
#[derive(Debug, Default)]
pub struct Claim {
    /// Controlled by it and matching its selector.
    pub owned: Vec<Arc<Pod>>,
    /// Orphans matching its selector: to get its controller reference.
    pub adopt: Vec<Arc<Pod>>,
    /// Controlled by it but no longer matching: to lose the reference.
    pub release: Vec<Arc<Pod>>,
}

/// Sorts `pods` (any namespace; only active pods of the ReplicaSet's
/// namespace count) into owned, to adopt and to release. A ReplicaSet
/// being deleted neither adopts nor releases.
pub fn claim(rs: &ReplicaSet, selector: &LabelSelector, pods: &[Arc<Pod>]) -> Claim {
    let mut claim = Claim::default();
    let deleting = rs.metadata.deletion_timestamp.is_some();
    let namespace = rs.metadata.namespace.as_deref();
    let uid = rs.metadata.uid.as_deref();
    for pod in pods
        .iter()
        .filter(|p| p.metadata.namespace.as_deref() == namespace && is_active(p))
    {
        let labels = pod.metadata.labels.as_ref();
        let matches =
            selector.matches_by(|key| labels.and_then(|l| l.get(key)).map(String::as_str));
        match controller_ref(pod) {
            Some(owner) if Some(owner.uid.as_str()) != uid => {}
            Some(_) if matches => claim.owned.push(pod.clone()),
            Some(_) if !deleting => claim.release.push(pod.clone()),
            Some(_) => {}
            None if matches && !deleting => claim.adopt.push(pod.clone()),
            None => {}
        }
    }
    claim
}

/// What a sync does about the number of pods.
#[derive(Debug)]
pub enum Scale {
    /// As many active pods as `spec.replicas`, or being deleted.
    Steady,
    /// The last sync's creates or deletes are not observed yet.
    AwaitingExpectations,
    /// Create this many pods from the template.
    Create(usize),
    /// Delete these pods, the first in deletion order.
    Delete(Vec<Arc<Pod>>),
}

/// How to bring the `claimed` active pods to `spec.replicas`.
pub fn scale(rs: &ReplicaSet, claimed: &[Arc<Pod>], expectations_satisfied: bool) -> Scale {
    if rs.metadata.deletion_timestamp.is_some() {
        return Scale::Steady;
    }
    if !expectations_satisfied {
        return Scale::AwaitingExpectations;
    }
    let wanted = desired_replicas(rs);
    let have = claimed.len();
    if have < wanted {
        Scale::Create((wanted - have).min(BURST_REPLICAS))
    } else if have > wanted {
        Scale::Delete(pods_to_delete(claimed, (have - wanted).min(BURST_REPLICAS)))
    } else {
        Scale::Steady
    }
}

/// `spec.replicas`, 1 when unset.
pub fn desired_replicas(rs: &ReplicaSet) -> usize {
    let replicas = rs.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    usize::try_from(replicas).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::common::fixtures::{pod, replica_set, NOW};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn arcs(pods: Vec<Pod>) -> Vec<Arc<Pod>> {
        pods.into_iter().map(Arc::new).collect()
    }

    fn names(pods: &[Arc<Pod>]) -> Vec<&str> {
        pods.iter()
            .map(|p| p.metadata.name.as_deref().unwrap())
            .collect()
    }

    fn claim_of(rs: &ReplicaSet, pods: &[Arc<Pod>]) -> Claim {
        claim(rs, &selector(rs).unwrap(), pods)
    }

    #[test]
    fn scale_up_from_zero_creates_what_is_missing() {
        let rs = replica_set("web", 5);
        assert!(matches!(scale(&rs, &[], true), Scale::Create(5)));
        let many = replica_set("web", 2000);
        assert!(matches!(
            scale(&many, &[], true),
            Scale::Create(BURST_REPLICAS)
        ));
        assert!(matches!(
            scale(&replica_set("web", 0), &[], true),
            Scale::Steady
        ));
    }

    #[test]
    fn scale_down_deletes_the_surplus_in_deletion_order() {
        let rs = replica_set("web", 1);
        let pods = arcs(vec![
            pod("running")
                .node("n1")
                .ready_since(NOW)
                .owned_by(&rs)
                .build(),
            pod("unassigned").owned_by(&rs).build(),
            pod("pending").node("n1").owned_by(&rs).build(),
        ]);
        let Scale::Delete(victims) = scale(&rs, &pods, true) else {
            panic!("expected a delete");
        };
        assert_eq!(names(&victims), ["unassigned", "pending"]);
    }

    #[test]
    fn expectations_not_met_prevent_a_second_create() {
        let rs = replica_set("web", 3);
        assert!(matches!(
            scale(&rs, &[], false),
            Scale::AwaitingExpectations
        ));
    }

    #[test]
    fn orphans_are_adopted_and_non_matching_pods_released() {
        let rs = replica_set("web", 3);
        let other = replica_set("other", 1);
        let pods = arcs(vec![
            pod("mine").owned_by(&rs).build(),
            pod("orphan").build(),
            pod("orphan-other-app").labels(&[("app", "db")]).build(),
            pod("orphan-terminating").terminating().build(),
            pod("relabelled")
                .labels(&[("app", "db")])
                .owned_by(&rs)
                .build(),
            pod("someone-elses").owned_by(&other).build(),
        ]);
        let claim = claim_of(&rs, &pods);
        assert_eq!(names(&claim.owned), ["mine"]);
        assert_eq!(names(&claim.adopt), ["orphan"]);
        assert_eq!(names(&claim.release), ["relabelled"]);
    }

    #[test]
    fn failed_pods_do_not_count_and_are_replaced() {
        let rs = replica_set("web", 2);
        let pods = arcs(vec![
            pod("ok").node("n1").ready_since(NOW).owned_by(&rs).build(),
            pod("failed")
                .node("n1")
                .phase("Failed")
                .owned_by(&rs)
                .build(),
            pod("done")
                .node("n1")
                .phase("Succeeded")
                .owned_by(&rs)
                .build(),
            pod("leaving")
                .node("n1")
                .phase("Running")
                .terminating()
                .owned_by(&rs)
                .build(),
        ]);
        let claim = claim_of(&rs, &pods);
        assert_eq!(names(&claim.owned), ["ok"]);
        assert!(matches!(scale(&rs, &claim.owned, true), Scale::Create(1)));
    }

    #[test]
    fn a_replica_set_being_deleted_does_nothing() {
        let mut rs = replica_set("web", 3);
        rs.metadata.deletion_timestamp = Some(Time(NOW));
        let pods = arcs(vec![
            pod("orphan").build(),
            pod("relabelled")
                .labels(&[("app", "db")])
                .owned_by(&rs)
                .build(),
        ]);
        let claim = claim_of(&rs, &pods);
        assert!(claim.adopt.is_empty() && claim.release.is_empty() && claim.owned.is_empty());
        assert!(matches!(scale(&rs, &[], true), Scale::Steady));
    }

    #[test]
    fn match_expressions_select_pods() {
        let mut rs = replica_set("web", 1);
        rs.spec.as_mut().unwrap().selector = serde_json::from_value(serde_json::json!({
            "matchExpressions": [{"key": "app", "operator": "In", "values": ["web", "api"]},
                                 {"key": "canary", "operator": "DoesNotExist"}],
        }))
        .unwrap();
        let pods = arcs(vec![
            pod("api").labels(&[("app", "api")]).build(),
            pod("canary")
                .labels(&[("app", "web"), ("canary", "yes")])
                .build(),
        ]);
        assert_eq!(names(&claim_of(&rs, &pods).adopt), ["api"]);
    }
}
