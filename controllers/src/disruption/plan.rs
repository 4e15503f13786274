//! The pure part of a PodDisruptionBudget sync: the pods it covers, how
//! many should be healthy (from minAvailable or maxUnavailable, counts or
//! percentages of the pods' controllers' scale), how many are, and the
//! status that follows. Nothing here talks to the API.

use std::collections::BTreeMap;
use std::sync::Arc;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{Pod, ReplicationController};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use skiff_machinery::selectors::LabelSelector;

use crate::common::pods::{controller_ref, is_ready};

/// The condition type kube writes on every budget.
pub const DISRUPTION_ALLOWED: &str = "DisruptionAllowed";
/// How long an eviction's entry in `disruptedPods` waits for the pod to go
/// (kube's `DeletionTimeout`).
pub const DELETION_TIMEOUT: SignedDuration = SignedDuration::from_secs(2 * 60);

/// The controllers a budget's pods may have, as cached.
#[derive(Default)]
pub struct Controllers {
    pub replica_sets: Vec<Arc<ReplicaSet>>,
    pub deployments: Vec<Arc<Deployment>>,
    pub stateful_sets: Vec<Arc<StatefulSet>>,
    pub replication_controllers: Vec<Arc<ReplicationController>>,
}

/// The pods of the budget's namespace its selector matches (policy/v1: an
/// empty selector matches every pod, a missing one none).
pub fn covered(pdb: &PodDisruptionBudget, pods: &[Arc<Pod>]) -> Result<Vec<Arc<Pod>>, String> {
    let Some(selector) = pdb.spec.as_ref().and_then(|s| s.selector.as_ref()) else {
        return Ok(Vec::new());
    };
    let value = serde_json::to_value(selector).map_err(|e| e.to_string())?;
    let selector = LabelSelector::from_json(&value).map_err(|e| e.message)?;
    Ok(pods
        .iter()
        .filter(|p| p.metadata.namespace == pdb.metadata.namespace)
        .filter(|p| {
            let labels = p.metadata.labels.as_ref();
            selector.matches_by(|k| labels.and_then(|l| l.get(k)).map(String::as_str))
        })
        .cloned()
        .collect())
}

fn replicas(uid: &str, controllers: &Controllers) -> Option<(String, i32)> {
    if let Some(rs) = controllers
        .replica_sets
        .iter()
        .find(|r| r.metadata.uid.as_deref() == Some(uid))
    {
        // A Deployment's ReplicaSet scales with the Deployment.
        let owner = rs
            .metadata
            .owner_references
            .iter()
            .flatten()
            .find(|o| o.controller == Some(true) && o.kind == "Deployment");
        if let Some(owner) = owner {
            let deployment = controllers
                .deployments
                .iter()
                .find(|d| d.metadata.uid.as_deref() == Some(owner.uid.as_str()))?;
            let count = deployment
                .spec
                .as_ref()
                .and_then(|s| s.replicas)
                .unwrap_or(1);
            return Some((owner.uid.clone(), count));
        }
        return Some((
            uid.to_string(),
            rs.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1),
        ));
    }
    if let Some(set) = controllers
        .stateful_sets
        .iter()
        .find(|s| s.metadata.uid.as_deref() == Some(uid))
    {
        return Some((
            uid.to_string(),
            set.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1),
        ));
    }
    let rc = controllers
        .replication_controllers
        .iter()
        .find(|r| r.metadata.uid.as_deref() == Some(uid))?;
    Some((
        uid.to_string(),
        rc.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1),
    ))
}

/// kube's `getExpectedScale`: the summed scale of the pods' controllers,
/// each counted once; every pod needs a known controller.
pub fn expected_scale(pods: &[Arc<Pod>], controllers: &Controllers) -> Result<i32, String> {
    let mut scales: BTreeMap<String, i32> = BTreeMap::new();
    for pod in pods {
        let name = pod.metadata.name.as_deref().unwrap_or_default();
        let Some(owner) = controller_ref(pod) else {
            return Err(format!("found no controller ref for pod \"{name}\""));
        };
        let Some((uid, count)) = replicas(&owner.uid, controllers) else {
            return Err(format!("found no controllers for pod \"{name}\""));
        };
        scales.insert(uid, count);
    }
    Ok(scales.values().sum())
}

/// An IntOrString as a count of `total`: percentages round up.
pub fn scaled(value: &IntOrString, total: i32) -> Result<i32, String> {
    match value {
        IntOrString::Int(n) => Ok(*n),
        IntOrString::String(text) => {
            let percent: f64 = text
                .strip_suffix('%')
                .and_then(|p| p.parse().ok())
                .ok_or_else(|| format!("invalid value for IntOrString: invalid value {text:?}: must be an integer or a percentage"))?;
            Ok((percent * f64::from(total) / 100.0).ceil() as i32)
        }
    }
}

/// (expectedPods, desiredHealthy), as kube's `getExpectedPodCount`.
pub fn expected_and_desired(
    pdb: &PodDisruptionBudget,
    pods: &[Arc<Pod>],
    controllers: &Controllers,
) -> Result<(i32, i32), String> {
    let spec = pdb.spec.as_ref();
    if let Some(max) = spec.and_then(|s| s.max_unavailable.as_ref()) {
        let expected = expected_scale(pods, controllers)?;
        let unavailable = scaled(max, expected)?;
        return Ok((expected, (expected - unavailable).max(0)));
    }
    match spec.and_then(|s| s.min_available.as_ref()) {
        Some(IntOrString::Int(min)) => Ok((pods.len() as i32, *min)),
        Some(min) => {
            let expected = expected_scale(pods, controllers)?;
            Ok((expected, scaled(min, expected)?))
        }
        None => Ok((pods.len() as i32, 0)),
    }
}

/// `disruptedPods` without the pods that went, are being deleted, or
/// whose eviction is older than [`DELETION_TIMEOUT`]; and when the next
/// entry expires.
pub fn live_disruptions(
    pdb: &PodDisruptionBudget,
    pods: &[Arc<Pod>],
    now: Timestamp,
) -> (BTreeMap<String, Time>, Option<Timestamp>) {
    let mut kept = BTreeMap::new();
    let mut recheck: Option<Timestamp> = None;
    let disrupted = pdb.status.as_ref().and_then(|s| s.disrupted_pods.as_ref());
    for (name, at) in disrupted.into_iter().flatten() {
        let pod = pods
            .iter()
            .find(|p| p.metadata.name.as_deref() == Some(name.as_str()));
        let Some(pod) = pod else { continue };
        if pod.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let Ok(expires) = at.0.checked_add(DELETION_TIMEOUT) else {
            continue;
        };
        if expires <= now {
            continue;
        }
        recheck = Some(recheck.map_or(expires, |r| r.min(expires)));
        kept.insert(name.clone(), at.clone());
    }
    (kept, recheck)
}

/// Ready, not being deleted, and not just evicted.
pub fn current_healthy(pods: &[Arc<Pod>], disrupted: &BTreeMap<String, Time>) -> i32 {
    pods.iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| !disrupted.contains_key(p.metadata.name.as_deref().unwrap_or_default()))
        .filter(|p| is_ready(p))
        .count() as i32
}

/// The budget's new status, and when to look again (an entry of
/// `disruptedPods` expiring).
pub fn status(
    pdb: &PodDisruptionBudget,
    pods: &[Arc<Pod>],
    controllers: &Controllers,
    now: Timestamp,
) -> (PodDisruptionBudgetStatus, Option<Timestamp>) {
    let (disrupted, recheck) = live_disruptions(pdb, pods, now);
    let generation = pdb.metadata.generation;
    let old = pdb.status.clone().unwrap_or_default();
    let counts = covered(pdb, pods).and_then(|covered| {
        let (expected, desired) = expected_and_desired(pdb, &covered, controllers)?;
        Ok((covered, expected, desired))
    });
    let (covered, expected, desired) = match counts {
        Ok(counts) => counts,
        Err(message) => {
            let status = PodDisruptionBudgetStatus {
                disruptions_allowed: 0,
                observed_generation: generation,
                conditions: Some(vec![condition(
                    &old,
                    false,
                    "SyncFailed",
                    &message,
                    generation,
                    now,
                )]),
                disrupted_pods: (!disrupted.is_empty()).then_some(disrupted),
                ..old
            };
            return (status, recheck);
        }
    };
    let healthy = current_healthy(&covered, &disrupted);
    let allowed = match expected <= 0 {
        true => 0,
        false => (healthy - desired).max(0),
    };
    let (reason, ok) = match allowed > 0 {
        true => ("SufficientPods", true),
        false => ("InsufficientPods", false),
    };
    let status = PodDisruptionBudgetStatus {
        current_healthy: healthy,
        desired_healthy: desired,
        expected_pods: expected,
        disruptions_allowed: allowed,
        observed_generation: generation,
        conditions: Some(vec![condition(&old, ok, reason, "", generation, now)]),
        disrupted_pods: (!disrupted.is_empty()).then_some(disrupted),
    };
    (status, recheck)
}

/// The DisruptionAllowed condition, keeping its transition time when its
/// status stays.
fn condition(
    old: &PodDisruptionBudgetStatus,
    allowed: bool,
    reason: &str,
    message: &str,
    generation: Option<i64>,
    now: Timestamp,
) -> Condition {
    let status = if allowed { "True" } else { "False" };
    let previous = old
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == DISRUPTION_ALLOWED);
    let since = match previous {
        Some(c) if c.status == status => c.last_transition_time.clone(),
        _ => Time(now),
    };
    Condition {
        type_: DISRUPTION_ALLOWED.into(),
        status: status.into(),
        reason: reason.into(),
        message: message.into(),
        observed_generation: generation,
        last_transition_time: since,
    }
}

/// The status differs in something but the condition's timestamps.
pub fn changed(old: Option<&PodDisruptionBudgetStatus>, new: &PodDisruptionBudgetStatus) -> bool {
    let Some(old) = old else { return true };
    let strip = |s: &PodDisruptionBudgetStatus| {
        let mut s = s.clone();
        for c in s.conditions.iter_mut().flatten() {
            c.last_transition_time = Time(Timestamp::UNIX_EPOCH);
        }
        s
    };
    strip(old) != strip(new)
}

#[cfg(test)]
mod tests;
