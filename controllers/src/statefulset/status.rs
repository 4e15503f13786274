//! A StatefulSet's `status` as kube-controller-manager computes it: pods
//! created, ready, available, at the current and at the update revision,
//! and the current revision moving to the update revision once a rolling
//! update has replaced every pod (`completeRollingUpdate`).

use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::{StatefulSet, StatefulSetStatus};
use k8s_openapi::api::core::v1::Pod;
use serde_json::{json, Value};

use super::identity::{ordinal_of, revision_of};
use super::plan::{is_rolling_update, is_running_and_ready, is_terminating, Revisions};
use crate::common::pods::{available_at, is_available, phase};

/// Margin added to a requeue so that the pod is available when it runs.
const AVAILABILITY_MARGIN: Duration = Duration::from_millis(100);

fn count(n: usize) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

/// The status for the set's `pods` at `now`, and when a ready pod becomes
/// available (after minReadySeconds).
pub fn compute_status(
    set: &StatefulSet,
    pods: &[Arc<Pod>],
    revisions: &Revisions<'_>,
    collision_count: Option<i32>,
    now: Timestamp,
) -> (StatefulSetStatus, Option<Duration>) {
    let min_ready = set
        .spec
        .as_ref()
        .and_then(|s| s.min_ready_seconds)
        .unwrap_or(0);
    let members: Vec<&Arc<Pod>> = pods
        .iter()
        .filter(|p| ordinal_of(set, p).is_some())
        .collect();
    let created = |p: &Pod| !phase(p).is_empty();
    let (mut replicas, mut ready, mut available, mut current, mut updated) = (0, 0, 0, 0, 0);
    let mut recheck: Option<Duration> = None;
    for pod in members {
        if created(pod) {
            replicas += 1;
        }
        if is_running_and_ready(pod) {
            ready += 1;
            if is_available(pod, min_ready, now) {
                available += 1;
            } else if let Some(at) = available_at(pod, min_ready) {
                let wait = Duration::try_from(at.duration_since(now)).unwrap_or_default();
                let wait = wait + AVAILABILITY_MARGIN;
                recheck = Some(recheck.map_or(wait, |r| r.min(wait)));
            }
        }
        if created(pod) && !is_terminating(pod) {
            let revision = revision_of(pod);
            if revision == revisions.current {
                current += 1;
            }
            if revision == revisions.update {
                updated += 1;
            }
        }
    }
    let mut status = StatefulSetStatus {
        replicas: count(replicas),
        ready_replicas: Some(count(ready)),
        available_replicas: Some(count(available)),
        current_replicas: Some(count(current)),
        updated_replicas: Some(count(updated)),
        current_revision: Some(revisions.current.to_string()),
        update_revision: Some(revisions.update.to_string()),
        observed_generation: set.metadata.generation,
        collision_count,
        conditions: set.status.as_ref().and_then(|s| s.conditions.clone()),
    };
    if is_rolling_update(set) && updated == replicas && ready == replicas {
        status.current_replicas = status.updated_replicas;
        status.current_revision = status.update_revision.clone();
    }
    (status, recheck)
}

/// Whether `current` already says what `next` says (absent counts as 0).
pub fn is_current(current: Option<&StatefulSetStatus>, next: &StatefulSetStatus) -> bool {
    let Some(current) = current else {
        return false;
    };
    let n = |v: Option<i32>| v.unwrap_or(0);
    current.replicas == next.replicas
        && n(current.ready_replicas) == n(next.ready_replicas)
        && n(current.available_replicas) == n(next.available_replicas)
        && n(current.current_replicas) == n(next.current_replicas)
        && n(current.updated_replicas) == n(next.updated_replicas)
        && current.current_revision == next.current_revision
        && current.update_revision == next.update_revision
        && current.observed_generation == next.observed_generation
        && n(current.collision_count) == n(next.collision_count)
}

/// A merge patch of the status subresource with every field it owns.
pub fn status_patch(status: &StatefulSetStatus) -> Value {
    json!({
        "status": {
            "replicas": status.replicas,
            "readyReplicas": status.ready_replicas.unwrap_or(0),
            "availableReplicas": status.available_replicas.unwrap_or(0),
            "currentReplicas": status.current_replicas.unwrap_or(0),
            "updatedReplicas": status.updated_replicas.unwrap_or(0),
            "currentRevision": status.current_revision,
            "updateRevision": status.update_revision,
            "observedGeneration": status.observed_generation,
            "collisionCount": status.collision_count.unwrap_or(0),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::statefulset::fixtures::{ago, member, stateful_set, NOW};

    fn pods(revisions: &[&str]) -> Vec<Arc<Pod>> {
        revisions
            .iter()
            .enumerate()
            .map(|(i, r)| Arc::new(member("web", i, r).ready_since(ago(60)).build()))
            .collect()
    }

    #[test]
    fn counts_pods_per_revision_mid_update() {
        let set = stateful_set("web", 3);
        let revisions = Revisions {
            current: "web-1",
            update: "web-2",
        };
        let mut pods = pods(&["web-1", "web-1", "web-2"]);
        pods.push(Arc::new(member("other", 0, "web-2").build()));
        let (status, recheck) = compute_status(&set, &pods, &revisions, None, NOW);
        assert_eq!(status.replicas, 3);
        assert_eq!(status.ready_replicas, Some(3));
        assert_eq!(status.available_replicas, Some(3));
        assert_eq!(status.current_replicas, Some(2));
        assert_eq!(status.updated_replicas, Some(1));
        assert_eq!(status.current_revision.as_deref(), Some("web-1"));
        assert_eq!(status.update_revision.as_deref(), Some("web-2"));
        assert_eq!(status.observed_generation, Some(1));
        assert_eq!(recheck, None);
        assert_eq!(status_patch(&status)["status"]["updatedReplicas"], 1);
    }

    #[test]
    fn a_finished_rolling_update_makes_the_update_revision_current() {
        let set = stateful_set("web", 2);
        let revisions = Revisions {
            current: "web-1",
            update: "web-2",
        };
        let (status, _) =
            compute_status(&set, &pods(&["web-2", "web-2"]), &revisions, Some(1), NOW);
        assert_eq!(status.current_revision.as_deref(), Some("web-2"));
        assert_eq!(status.current_replicas, Some(2));
        assert_eq!(status.collision_count, Some(1));
        assert!(is_current(Some(&status), &status));
        assert!(!is_current(None, &status));
    }

    #[test]
    fn ready_pods_count_as_available_after_min_ready_seconds() {
        let mut set = stateful_set("web", 1);
        set.spec.as_mut().unwrap().min_ready_seconds = Some(10);
        let revisions = Revisions {
            current: "web-1",
            update: "web-1",
        };
        let fresh = vec![Arc::new(
            member("web", 0, "web-1").ready_since(ago(4)).build(),
        )];
        let (status, recheck) = compute_status(&set, &fresh, &revisions, None, NOW);
        assert_eq!(status.ready_replicas, Some(1));
        assert_eq!(status.available_replicas, Some(0));
        assert_eq!(recheck, Some(Duration::from_secs(6) + AVAILABILITY_MARGIN));
    }
}
