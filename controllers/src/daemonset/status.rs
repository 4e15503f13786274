//! A DaemonSet's `status` as kube-controller-manager computes it
//! (`updateDaemonSetStatus`): desired, current, misscheduled, ready,
//! available, unavailable and updated counts over the nodes, which
//! `kubectl rollout status daemonset` reads.

use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::{DaemonSet, DaemonSetStatus};
use k8s_openapi::api::core::v1::{Node, Pod};
use serde_json::{json, Value};

use super::plan::{eligibilities, is_updated, pods_by_node};
use crate::common::pods::{available_at, is_available, is_ready};

/// Margin added to a requeue so that the pod is available when it runs.
const AVAILABILITY_MARGIN: Duration = Duration::from_millis(100);

fn count(n: usize) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

/// The status for `pods` on `nodes` at `now`, and when a ready pod will
/// become available (after minReadySeconds) so that it is counted then.
pub fn compute_status(
    ds: &DaemonSet,
    nodes: &[Arc<Node>],
    pods: &[Arc<Pod>],
    hash: &str,
    now: Timestamp,
) -> (DaemonSetStatus, Option<Duration>) {
    let min_ready = ds
        .spec
        .as_ref()
        .and_then(|s| s.min_ready_seconds)
        .unwrap_or(0);
    let by_node = pods_by_node(pods);
    let (mut desired, mut current, mut misscheduled) = (0, 0, 0);
    let (mut ready, mut available, mut updated) = (0, 0, 0);
    let mut recheck: Option<Duration> = None;
    for (node, eligibility) in eligibilities(ds, nodes) {
        let on_node = by_node
            .get(&Some(node))
            .map(Vec::as_slice)
            .unwrap_or_default();
        if !eligibility.should_run {
            if !on_node.is_empty() {
                misscheduled += 1;
            }
            continue;
        }
        desired += 1;
        let Some(pod) = on_node.first() else {
            continue;
        };
        current += 1;
        if is_ready(pod) {
            ready += 1;
            if is_available(pod, min_ready, now) {
                available += 1;
            } else if let Some(at) = available_at(pod, min_ready) {
                let wait = Duration::try_from(at.duration_since(now)).unwrap_or_default();
                let wait = wait + AVAILABILITY_MARGIN;
                recheck = Some(recheck.map_or(wait, |r| r.min(wait)));
            }
        }
        if is_updated(ds, pod, hash) {
            updated += 1;
        }
    }
    let status = DaemonSetStatus {
        desired_number_scheduled: count(desired),
        current_number_scheduled: count(current),
        number_misscheduled: count(misscheduled),
        number_ready: count(ready),
        number_available: Some(count(available)),
        number_unavailable: Some(count(desired.saturating_sub(available))),
        updated_number_scheduled: Some(count(updated)),
        observed_generation: ds.metadata.generation,
        collision_count: ds.status.as_ref().and_then(|s| s.collision_count),
        conditions: ds.status.as_ref().and_then(|s| s.conditions.clone()),
    };
    (status, recheck)
}

/// Whether `current` already says what `next` says (absent counts as 0).
pub fn is_current(current: Option<&DaemonSetStatus>, next: &DaemonSetStatus) -> bool {
    let Some(current) = current else {
        return false;
    };
    let n = |v: Option<i32>| v.unwrap_or(0);
    current.desired_number_scheduled == next.desired_number_scheduled
        && current.current_number_scheduled == next.current_number_scheduled
        && current.number_misscheduled == next.number_misscheduled
        && current.number_ready == next.number_ready
        && n(current.number_available) == n(next.number_available)
        && n(current.number_unavailable) == n(next.number_unavailable)
        && n(current.updated_number_scheduled) == n(next.updated_number_scheduled)
        && current.observed_generation == next.observed_generation
        && current.collision_count == next.collision_count
}

/// A merge patch of the status subresource with every counted field.
pub fn status_patch(status: &DaemonSetStatus) -> Value {
    json!({
        "status": {
            "desiredNumberScheduled": status.desired_number_scheduled,
            "currentNumberScheduled": status.current_number_scheduled,
            "numberMisscheduled": status.number_misscheduled,
            "numberReady": status.number_ready,
            "numberAvailable": status.number_available.unwrap_or(0),
            "numberUnavailable": status.number_unavailable.unwrap_or(0),
            "updatedNumberScheduled": status.updated_number_scheduled.unwrap_or(0),
            "observedGeneration": status.observed_generation,
            "collisionCount": status.collision_count,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::daemonset::fixtures::{ago, daemon_pod, daemon_set, node, NOW};

    #[test]
    fn counts_over_the_nodes_that_should_run_the_pod() {
        let mut ds = daemon_set("agent");
        ds.spec.as_mut().unwrap().min_ready_seconds = Some(10);
        let nodes: Vec<Arc<Node>> = vec![
            Arc::new(node("n1").build()),
            Arc::new(node("n2").build()),
            Arc::new(node("n3").build()),
            Arc::new(node("n4").build()),
            Arc::new(node("tainted").taint("gpu", "", "NoSchedule").build()),
        ];
        let pod = |name: &str, node: &str, hash: &str| daemon_pod(name, "agent", node, hash);
        let pods: Vec<Arc<Pod>> = vec![
            pod("a", "n1", "new").ready_since(ago(60)).build(),
            pod("b", "n2", "old").ready_since(ago(4)).build(),
            pod("c", "n3", "new").not_ready().build(),
            pod("d", "tainted", "new").ready_since(ago(60)).build(),
        ]
        .into_iter()
        .map(Arc::new)
        .collect();
        let (status, recheck) = compute_status(&ds, &nodes, &pods, "new", NOW);
        assert_eq!(status.desired_number_scheduled, 4);
        assert_eq!(status.current_number_scheduled, 3);
        assert_eq!(status.number_misscheduled, 1);
        assert_eq!(status.number_ready, 2);
        assert_eq!(status.number_available, Some(1));
        assert_eq!(status.number_unavailable, Some(3));
        assert_eq!(status.updated_number_scheduled, Some(2));
        assert_eq!(status.observed_generation, Some(1));
        assert_eq!(recheck, Some(Duration::from_secs(6) + AVAILABILITY_MARGIN));
        assert!(is_current(Some(&status), &status));
        assert!(!is_current(None, &status));
        assert_eq!(status_patch(&status)["status"]["numberUnavailable"], 3);
    }
}
