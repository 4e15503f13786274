//! A Deployment's status as kube-controller-manager computes it: replica
//! counts summed over its ReplicaSets, the Available, Progressing and
//! ReplicaFailure conditions, and when a rollout counts as complete or stuck.

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::{Deployment, DeploymentCondition, DeploymentStatus, ReplicaSet};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::{strategy, PlanError};

pub const AVAILABLE: &str = "Available";
pub const PROGRESSING: &str = "Progressing";
pub const REPLICA_FAILURE: &str = "ReplicaFailure";

pub const MINIMUM_REPLICAS_AVAILABLE: &str = "MinimumReplicasAvailable";
pub const MINIMUM_REPLICAS_UNAVAILABLE: &str = "MinimumReplicasUnavailable";
pub const NEW_REPLICA_SET_CREATED: &str = "NewReplicaSetCreated";
pub const FOUND_NEW_REPLICA_SET: &str = "FoundNewReplicaSet";
pub const REPLICA_SET_UPDATED: &str = "ReplicaSetUpdated";
pub const NEW_REPLICA_SET_AVAILABLE: &str = "NewReplicaSetAvailable";
pub const PROGRESS_DEADLINE_EXCEEDED: &str = "ProgressDeadlineExceeded";
pub const DEPLOYMENT_PAUSED: &str = "DeploymentPaused";
pub const DEPLOYMENT_RESUMED: &str = "DeploymentResumed";

/// A condition that changed (or appeared) at `now`.
pub fn condition(
    type_: &str,
    status: &str,
    reason: &str,
    message: String,
    now: Timestamp,
) -> DeploymentCondition {
    DeploymentCondition {
        type_: type_.to_string(),
        status: status.to_string(),
        reason: Some(reason.to_string()),
        message: Some(message),
        last_update_time: Some(Time(now)),
        last_transition_time: Some(Time(now)),
    }
}

pub fn get_condition<'a>(
    status: &'a DeploymentStatus,
    type_: &str,
) -> Option<&'a DeploymentCondition> {
    status
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
}

pub fn remove_condition(status: &mut DeploymentStatus, type_: &str) {
    if let Some(conditions) = status.conditions.as_mut() {
        conditions.retain(|c| c.type_ != type_);
    }
}

/// Sets `new` unless the same status and reason are already there; keeps
/// lastTransitionTime when only the reason changes.
pub fn set_condition(status: &mut DeploymentStatus, mut new: DeploymentCondition) {
    if let Some(current) = get_condition(status, &new.type_) {
        if current.status == new.status && current.reason == new.reason {
            return;
        }
        if current.status == new.status {
            new.last_transition_time = current.last_transition_time.clone();
        }
    }
    remove_condition(status, &new.type_);
    status.conditions.get_or_insert_with(Vec::new).push(new);
}

fn spec_replicas(rs: &ReplicaSet) -> i32 {
    rs.spec.as_ref().and_then(|s| s.replicas).unwrap_or(0)
}

fn sum(replica_sets: &[&ReplicaSet], count: impl Fn(&ReplicaSet) -> i32) -> i32 {
    replica_sets.iter().map(|rs| count(rs)).sum()
}

pub fn status_replicas(rs: &ReplicaSet) -> i32 {
    rs.status.as_ref().map_or(0, |s| s.replicas)
}

pub fn available_replicas(rs: &ReplicaSet) -> i32 {
    rs.status
        .as_ref()
        .and_then(|s| s.available_replicas)
        .unwrap_or(0)
}

fn ready_replicas(rs: &ReplicaSet) -> i32 {
    rs.status
        .as_ref()
        .and_then(|s| s.ready_replicas)
        .unwrap_or(0)
}

/// Counts from the ReplicaSets, the conditions of `base`, and the
/// Available condition for `replicas − maxUnavailable`.
pub fn calculate_status(
    d: &Deployment,
    all: &[&ReplicaSet],
    new: Option<&ReplicaSet>,
    base: &DeploymentStatus,
    now: Timestamp,
) -> Result<DeploymentStatus, PlanError> {
    let available = sum(all, available_replicas);
    let mut status = DeploymentStatus {
        observed_generation: d.metadata.generation,
        replicas: Some(sum(all, status_replicas)),
        updated_replicas: Some(new.map_or(0, status_replicas)),
        ready_replicas: Some(sum(all, ready_replicas)),
        available_replicas: Some(available),
        unavailable_replicas: Some((sum(all, spec_replicas) - available).max(0)),
        collision_count: base.collision_count,
        conditions: base.conditions.clone(),
        terminating_replicas: None,
    };
    let minimum = strategy::replicas(d) - strategy::max_unavailable(d)?;
    let available_condition = if available >= minimum {
        condition(
            AVAILABLE,
            "True",
            MINIMUM_REPLICAS_AVAILABLE,
            "Deployment has minimum availability.".into(),
            now,
        )
    } else {
        condition(
            AVAILABLE,
            "False",
            MINIMUM_REPLICAS_UNAVAILABLE,
            "Deployment does not have minimum availability.".into(),
            now,
        )
    };
    set_condition(&mut status, available_condition);
    Ok(status)
}

/// The first ReplicaFailure condition of the ReplicaSets (new one first),
/// as a Deployment condition.
pub fn replica_failure(
    all: &[&ReplicaSet],
    new: Option<&ReplicaSet>,
) -> Option<DeploymentCondition> {
    let ordered = new.into_iter().chain(all.iter().copied());
    ordered
        .flat_map(|rs| rs.status.iter().flat_map(|s| s.conditions.iter().flatten()))
        .find(|c| c.type_ == REPLICA_FAILURE && c.status == "True")
        .map(|c| DeploymentCondition {
            type_: c.type_.clone(),
            status: c.status.clone(),
            reason: c.reason.clone(),
            message: c.message.clone(),
            last_update_time: c.last_transition_time.clone(),
            last_transition_time: c.last_transition_time.clone(),
        })
}

fn count(value: Option<i32>) -> i32 {
    value.unwrap_or(0)
}

/// Every pod updated, no old pod left, all available, and this generation
/// observed (what `kubectl rollout status` waits for).
pub fn deployment_complete(d: &Deployment, status: &DeploymentStatus) -> bool {
    let replicas = strategy::replicas(d);
    count(status.updated_replicas) == replicas
        && count(status.replicas) == replicas
        && count(status.available_replicas) == replicas
        && status.observed_generation.unwrap_or(0) >= d.metadata.generation.unwrap_or(0)
}

/// Whether `new` shows progress over `old`: more updated, ready or
/// available pods, or fewer old ones.
pub fn deployment_progressing(old: &DeploymentStatus, new: &DeploymentStatus) -> bool {
    let old_pods = |s: &DeploymentStatus| count(s.replicas) - count(s.updated_replicas);
    count(new.updated_replicas) > count(old.updated_replicas)
        || old_pods(new) < old_pods(old)
        || count(new.ready_replicas) > count(old.ready_replicas)
        || count(new.available_replicas) > count(old.available_replicas)
}

/// Whether the Progressing condition was last updated more than
/// progressDeadlineSeconds before `now` (and the rollout is not complete).
pub fn deployment_timed_out(d: &Deployment, status: &DeploymentStatus, now: Timestamp) -> bool {
    let Some(deadline) = strategy::progress_deadline_seconds(d) else {
        return false;
    };
    let Some(progressing) = get_condition(status, PROGRESSING) else {
        return false;
    };
    match progressing.reason.as_deref() {
        Some(NEW_REPLICA_SET_AVAILABLE) => false,
        Some(PROGRESS_DEADLINE_EXCEEDED) => true,
        _ => progressing
            .last_update_time
            .as_ref()
            .is_some_and(|t| t.0 + jiff::SignedDuration::from_secs(i64::from(deadline)) < now),
    }
}

/// Equality of two statuses where an absent count is zero, as the API
/// serializes them.
pub fn same_status(a: &DeploymentStatus, b: &DeploymentStatus) -> bool {
    let counts = |s: &DeploymentStatus| {
        [
            s.replicas,
            s.updated_replicas,
            s.ready_replicas,
            s.available_replicas,
            s.unavailable_replicas,
            s.collision_count,
        ]
        .map(count)
    };
    counts(a) == counts(b)
        && a.observed_generation.unwrap_or(0) == b.observed_generation.unwrap_or(0)
        && a.conditions.as_deref().unwrap_or_default()
            == b.conditions.as_deref().unwrap_or_default()
}
