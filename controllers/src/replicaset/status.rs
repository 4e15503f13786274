//! A ReplicaSet's `status` as kube-controller-manager computes it from its
//! active pods, and the merge patch that writes it.

use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::{ReplicaSet, ReplicaSetCondition, ReplicaSetStatus};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::{json, Value};

use crate::common::pods::{available_at, is_available, is_ready};

/// The condition type set while creates or deletes fail.
pub const REPLICA_FAILURE: &str = "ReplicaFailure";

/// Margin added to a requeue so that the pod is available when it runs.
const AVAILABILITY_MARGIN: Duration = Duration::from_millis(100);

/// Why this sync could not reach `spec.replicas`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ManageFailure {
    /// A pod create failed (reason `FailedCreate`), with the error.
    Create(String),
    /// A pod delete failed (reason `FailedDelete`), with the error.
    Delete(String),
}

impl std::fmt::Display for ManageFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ManageFailure::Create(message) => write!(f, "creating pods failed: {message}"),
            ManageFailure::Delete(message) => write!(f, "deleting pods failed: {message}"),
        }
    }
}

/// The status to write and when to look again.
#[derive(Debug, Clone, PartialEq)]
pub struct ComputedStatus {
    pub status: ReplicaSetStatus,
    /// When a ready pod becomes available (after `minReadySeconds`).
    pub recheck_after: Option<Duration>,
}

/// The status for the `claimed` active pods at `now`, with `failure` as
/// the ReplicaFailure condition (kept as it was if already set).
pub fn compute_status(
    rs: &ReplicaSet,
    claimed: &[Arc<Pod>],
    failure: Option<&ManageFailure>,
    now: Timestamp,
) -> ComputedStatus {
    let spec = rs.spec.as_ref();
    let min_ready_seconds = spec.and_then(|s| s.min_ready_seconds).unwrap_or(0);
    let count = |f: &dyn Fn(&Pod) -> bool| count_i32(claimed.iter().filter(|p| f(p)).count());
    let status = ReplicaSetStatus {
        replicas: count_i32(claimed.len()),
        fully_labeled_replicas: Some(count(&|p| has_template_labels(rs, p))),
        ready_replicas: Some(count(&is_ready)),
        available_replicas: Some(count(&|p| is_available(p, min_ready_seconds, now))),
        observed_generation: rs.metadata.generation,
        conditions: conditions(rs, failure, now),
        terminating_replicas: rs.status.as_ref().and_then(|s| s.terminating_replicas),
    };
    let recheck_after = claimed
        .iter()
        .filter(|p| !is_available(p, min_ready_seconds, now))
        .filter_map(|p| available_at(p, min_ready_seconds))
        .map(|at| {
            Duration::try_from(at.duration_since(now)).unwrap_or_default() + AVAILABILITY_MARGIN
        })
        .min();
    ComputedStatus {
        status,
        recheck_after,
    }
}

fn count_i32(n: usize) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

/// The pod carries every label of the template, with the same values.
fn has_template_labels(rs: &ReplicaSet, pod: &Pod) -> bool {
    let template = rs.spec.as_ref().and_then(|s| s.template.as_ref());
    let wanted = template
        .and_then(|t| t.metadata.as_ref())
        .and_then(|m| m.labels.as_ref());
    let have = pod.metadata.labels.as_ref();
    wanted
        .into_iter()
        .flatten()
        .all(|(key, value)| have.and_then(|l| l.get(key)) == Some(value))
}

fn conditions(
    rs: &ReplicaSet,
    failure: Option<&ManageFailure>,
    now: Timestamp,
) -> Option<Vec<ReplicaSetCondition>> {
    let mut conditions = rs
        .status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default();
    let existing = conditions.iter().any(|c| c.type_ == REPLICA_FAILURE);
    match failure {
        Some(failure) if !existing => conditions.push(failure_condition(failure, now)),
        Some(_) => {}
        None => conditions.retain(|c| c.type_ != REPLICA_FAILURE),
    }
    (!conditions.is_empty()).then_some(conditions)
}

fn failure_condition(failure: &ManageFailure, now: Timestamp) -> ReplicaSetCondition {
    let (reason, message) = match failure {
        ManageFailure::Create(message) => ("FailedCreate", message),
        ManageFailure::Delete(message) => ("FailedDelete", message),
    };
    ReplicaSetCondition {
        type_: REPLICA_FAILURE.to_string(),
        status: "True".to_string(),
        reason: Some(reason.to_string()),
        message: Some(message.clone()),
        last_transition_time: Some(Time(now)),
    }
}

/// Whether `current` already says what `next` says (absent counts as 0).
pub fn is_current(current: Option<&ReplicaSetStatus>, next: &ReplicaSetStatus) -> bool {
    let Some(current) = current else {
        return false;
    };
    let n = |v: Option<i32>| v.unwrap_or(0);
    current.replicas == next.replicas
        && n(current.fully_labeled_replicas) == n(next.fully_labeled_replicas)
        && n(current.ready_replicas) == n(next.ready_replicas)
        && n(current.available_replicas) == n(next.available_replicas)
        && current.observed_generation == next.observed_generation
        && current.conditions.as_deref().unwrap_or_default()
            == next.conditions.as_deref().unwrap_or_default()
}

/// A merge patch of the `status` subresource that sets every field the
/// controller owns, zeros and a removed condition list included.
pub fn status_patch(status: &ReplicaSetStatus) -> Value {
    let conditions = match &status.conditions {
        Some(conditions) => serde_json::to_value(conditions).unwrap_or(Value::Null),
        None => Value::Null,
    };
    json!({
        "status": {
            "replicas": status.replicas,
            "fullyLabeledReplicas": status.fully_labeled_replicas.unwrap_or(0),
            "readyReplicas": status.ready_replicas.unwrap_or(0),
            "availableReplicas": status.available_replicas.unwrap_or(0),
            "observedGeneration": status.observed_generation,
            "conditions": conditions,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::common::fixtures::{ago, pod, replica_set, NOW};

    fn pods(rs: &ReplicaSet) -> Vec<Arc<Pod>> {
        [
            pod("ready-long").ready_since(ago(60)),
            pod("ready-just-now").ready_since(ago(4)),
            pod("not-ready").not_ready(),
            pod("partly-labelled")
                .labels(&[("app", "web")])
                .ready_since(ago(60)),
        ]
        .into_iter()
        .map(|p| Arc::new(p.owned_by(rs).build()))
        .collect()
    }

    #[test]
    fn counts_with_min_ready_seconds() {
        let mut rs = replica_set("web", 4);
        rs.spec.as_mut().unwrap().min_ready_seconds = Some(10);
        let computed = compute_status(&rs, &pods(&rs), None, NOW);
        let status = &computed.status;
        assert_eq!(status.replicas, 4);
        assert_eq!(status.fully_labeled_replicas, Some(3));
        assert_eq!(status.ready_replicas, Some(3));
        assert_eq!(status.available_replicas, Some(2));
        assert_eq!(status.observed_generation, Some(2));
        assert_eq!(status.conditions, None);
        // The pod ready 4s ago becomes available 6s from now.
        assert_eq!(
            computed.recheck_after,
            Some(Duration::from_secs(6) + AVAILABILITY_MARGIN)
        );
    }

    #[test]
    fn without_min_ready_seconds_ready_is_available() {
        let rs = replica_set("web", 4);
        let computed = compute_status(&rs, &pods(&rs), None, NOW);
        assert_eq!(computed.status.available_replicas, Some(3));
        assert_eq!(computed.recheck_after, None);
    }

    #[test]
    fn failed_creates_set_replica_failure_until_a_sync_succeeds() {
        let mut rs = replica_set("web", 4);
        let failure = ManageFailure::Create("pods \"web-x\" is forbidden: exceeded quota".into());
        let failed = compute_status(&rs, &[], Some(&failure), NOW).status;
        let condition = &failed.conditions.as_ref().unwrap()[0];
        assert_eq!(condition.type_, "ReplicaFailure");
        assert_eq!(condition.status, "True");
        assert_eq!(condition.reason.as_deref(), Some("FailedCreate"));
        assert!(condition
            .message
            .as_deref()
            .unwrap()
            .contains("exceeded quota"));

        rs.status = Some(failed.clone());
        let again = compute_status(&rs, &[], Some(&failure), ago(-30)).status;
        assert!(
            is_current(Some(&failed), &again),
            "the condition keeps its first transition time"
        );
        let healed = compute_status(&rs, &[], None, NOW).status;
        assert_eq!(healed.conditions, None);
        assert_eq!(status_patch(&healed)["status"]["conditions"], Value::Null);
    }

    #[test]
    fn status_patch_writes_zeros() {
        let rs = replica_set("web", 0);
        let status = compute_status(&rs, &[], None, NOW).status;
        let patch = status_patch(&status);
        assert_eq!(patch["status"]["readyReplicas"], 0);
        assert_eq!(patch["status"]["availableReplicas"], 0);
        assert_eq!(patch["status"]["observedGeneration"], 2);
        assert!(!is_current(None, &status));
        assert!(is_current(Some(&status), &status));
    }
}
