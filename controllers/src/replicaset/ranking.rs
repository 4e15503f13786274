//! Which pods a ReplicaSet deletes first when it scales down, in the order
//! kube-controller-manager prefers (its `ActivePods` ordering).

use std::cmp::Ordering;
use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;

use crate::common::pods::{is_ready, max_container_restarts, phase, ready_since};

/// `Less` when `a` should be deleted before `b`: unassigned before
/// assigned, Pending before Unknown before Running, not ready before
/// ready, ready for less time before more, more restarts before fewer,
/// newer before older.
pub fn deletion_order(a: &Pod, b: &Pod) -> Ordering {
    is_assigned(a)
        .cmp(&is_assigned(b))
        .then_with(|| phase_ordinal(a).cmp(&phase_ordinal(b)))
        .then_with(|| is_ready(a).cmp(&is_ready(b)))
        .then_with(|| ready_time_order(a, b))
        .then_with(|| max_container_restarts(b).cmp(&max_container_restarts(a)))
        .then_with(|| newer_first(created(a), created(b)))
}

/// The `count` pods to delete first.
pub fn pods_to_delete(pods: &[Arc<Pod>], count: usize) -> Vec<Arc<Pod>> {
    let mut ranked = pods.to_vec();
    ranked.sort_by(|a, b| deletion_order(a, b));
    ranked.truncate(count);
    ranked
}

fn is_assigned(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .is_some_and(|n| !n.is_empty())
}

fn phase_ordinal(pod: &Pod) -> u8 {
    match phase(pod) {
        "Unknown" => 1,
        "Running" => 2,
        _ => 0,
    }
}

/// Between two ready pods, the one ready for less time goes first.
fn ready_time_order(a: &Pod, b: &Pod) -> Ordering {
    if !(is_ready(a) && is_ready(b)) {
        return Ordering::Equal;
    }
    newer_first(ready_since(a), ready_since(b))
}

fn created(pod: &Pod) -> Option<Timestamp> {
    pod.metadata.creation_timestamp.as_ref().map(|t| t.0)
}

/// Unknown times first, then later before earlier.
fn newer_first(a: Option<Timestamp>, b: Option<Timestamp>) -> Ordering {
    match (a, b) {
        (None, None) => Ordering::Equal,
        (None, Some(_)) => Ordering::Less,
        (Some(_), None) => Ordering::Greater,
        (Some(a), Some(b)) => b.cmp(&a),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::common::fixtures::{ago, pod};

    fn names(pods: &[Arc<Pod>]) -> Vec<&str> {
        pods.iter()
            .map(|p| p.metadata.name.as_deref().unwrap())
            .collect()
    }

    #[test]
    fn scale_down_deletes_in_kubernetes_order() {
        let ready = ago(600);
        let pods: Vec<Arc<Pod>> = [
            pod("old-ready")
                .node("n1")
                .ready_since(ready)
                .created(ago(7200)),
            pod("new-ready").node("n1").ready_since(ready),
            pod("restarted").node("n1").ready_since(ready).restarts(3),
            pod("ready-recently").node("n1").ready_since(ago(10)),
            pod("not-ready").node("n1").not_ready(),
            pod("unknown").node("n1").phase("Unknown"),
            pod("pending").node("n1").phase("Pending"),
            pod("unassigned").phase("Pending"),
        ]
        .into_iter()
        .map(|p| Arc::new(p.build()))
        .collect();
        let order = pods_to_delete(&pods, pods.len());
        assert_eq!(
            names(&order),
            [
                "unassigned",
                "pending",
                "unknown",
                "not-ready",
                "ready-recently",
                "restarted",
                "new-ready",
                "old-ready"
            ]
        );
        assert_eq!(names(&pods_to_delete(&pods, 2)), ["unassigned", "pending"]);
    }

    #[test]
    fn unassigned_goes_first_even_when_running() {
        let assigned = pod("assigned").node("n1").phase("Pending").build();
        let unassigned = pod("unassigned").not_ready().build();
        assert_eq!(deletion_order(&unassigned, &assigned), Ordering::Less);
    }
}
