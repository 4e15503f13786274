//! What the ReplicaSet controller reads off a pod: its controller
//! reference, whether it is active, ready or available.

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Pod, PodCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

/// The ownerReference with `controller: true`, if any.
pub fn controller_ref(pod: &Pod) -> Option<&OwnerReference> {
    pod.metadata
        .owner_references
        .as_ref()?
        .iter()
        .find(|owner| owner.controller == Some(true))
}

/// `status.phase`, "" when unset.
pub fn phase(pod: &Pod) -> &str {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or_default()
}

/// Counts toward replicas: not being deleted and not terminal
/// (kube-controller-manager's `FilterActivePods`).
pub fn is_active(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_none() && !matches!(phase(pod), "Succeeded" | "Failed")
}

fn ready_condition(pod: &Pod) -> Option<&PodCondition> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")
}

/// The `Ready` condition is `True`.
pub fn is_ready(pod: &Pod) -> bool {
    ready_condition(pod).is_some_and(|c| c.status == "True")
}

/// Since when the pod is ready (the Ready condition's lastTransitionTime).
pub fn ready_since(pod: &Pod) -> Option<Timestamp> {
    let condition = ready_condition(pod).filter(|c| c.status == "True")?;
    condition.last_transition_time.as_ref().map(|t| t.0)
}

/// When a ready pod becomes available: ready for `min_ready_seconds`.
/// `None` when it is not ready (or its ready time is unknown).
pub fn available_at(pod: &Pod, min_ready_seconds: i32) -> Option<Timestamp> {
    if !is_ready(pod) {
        return None;
    }
    if min_ready_seconds <= 0 {
        return Some(Timestamp::MIN);
    }
    let since = ready_since(pod)?;
    since
        .checked_add(jiff::SignedDuration::from_secs(i64::from(
            min_ready_seconds,
        )))
        .ok()
}

/// Ready for at least `min_ready_seconds` at `now` (`IsPodAvailable`).
pub fn is_available(pod: &Pod, min_ready_seconds: i32, now: Timestamp) -> bool {
    match available_at(pod, min_ready_seconds) {
        Some(at) if min_ready_seconds <= 0 => at <= now,
        Some(at) => at < now,
        None => false,
    }
}

/// The most restarts of any of its containers.
pub fn max_container_restarts(pod: &Pod) -> i32 {
    let Some(status) = &pod.status else {
        return 0;
    };
    let init = status.init_container_statuses.iter().flatten();
    let main = status.container_statuses.iter().flatten();
    init.chain(main).map(|c| c.restart_count).max().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::common::fixtures::{pod, NOW};

    #[test]
    fn terminal_and_terminating_pods_are_not_active() {
        assert!(is_active(&pod("a").phase("Running").build()));
        assert!(is_active(&pod("a").phase("Pending").build()));
        assert!(!is_active(&pod("a").phase("Failed").build()));
        assert!(!is_active(&pod("a").phase("Succeeded").build()));
        assert!(!is_active(&pod("a").phase("Running").terminating().build()));
    }

    #[test]
    fn available_after_min_ready_seconds() {
        let ready = pod("a")
            .ready_since(
                NOW.checked_sub(jiff::SignedDuration::from_secs(10))
                    .unwrap(),
            )
            .build();
        assert!(is_available(&ready, 0, NOW));
        assert!(is_available(&ready, 9, NOW));
        assert!(!is_available(&ready, 10, NOW));
        assert!(!is_available(&pod("b").phase("Running").build(), 0, NOW));
    }
}
