//! Whether a node still heartbeats: its Lease in `kube-node-lease` or its
//! Ready condition, whichever moved last. As kube-controller-manager, the
//! controller times a heartbeat by when it saw it change (its own clock),
//! so a skewed kubelet clock or a controller restart does not fail nodes
//! at once; a node gone quiet for the grace period has its conditions set
//! Unknown.

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, NodeCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

/// The conditions the controller sets Unknown on a silent node (not
/// NetworkUnavailable, which the network plugin owns).
pub const WATCHED_CONDITIONS: &[&str] = &["Ready", "MemoryPressure", "DiskPressure", "PIDPressure"];

/// What the controller last saw of a node's heartbeat, and when.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Probe {
    /// The heartbeat (lease renewal or condition heartbeat) last seen.
    pub heartbeat: Option<Timestamp>,
    /// When (by this controller's clock) it was seen to change.
    pub seen_at: Timestamp,
}

/// The node's latest heartbeat: the later of its Lease's renewTime and its
/// Ready condition's lastHeartbeatTime.
pub fn heartbeat(node: &Node, lease: Option<&Lease>) -> Option<Timestamp> {
    let lease_renewed = lease
        .and_then(|l| l.spec.as_ref())
        .and_then(|s| s.renew_time.as_ref())
        .map(|t| t.0);
    let ready_heartbeat = condition(node, "Ready")
        .and_then(|c| c.last_heartbeat_time.as_ref())
        .map(|t| t.0);
    lease_renewed.max(ready_heartbeat)
}

/// The probe after looking at the node at `now`: a first look, or a
/// heartbeat newer than the one seen before, counts from `now`. A node
/// that never posted a status counts from its creation.
pub fn observe(
    previous: Option<Probe>,
    node: &Node,
    heartbeat: Option<Timestamp>,
    now: Timestamp,
) -> Probe {
    match previous {
        Some(seen) if heartbeat <= seen.heartbeat => seen,
        Some(_) => Probe {
            heartbeat,
            seen_at: now,
        },
        None if never_posted(node) => Probe {
            heartbeat,
            seen_at: node
                .metadata
                .creation_timestamp
                .as_ref()
                .map_or(now, |t| t.0.min(now)),
        },
        None => Probe {
            heartbeat,
            seen_at: now,
        },
    }
}

/// The node has no Ready condition: its kubelet never posted a status.
pub fn never_posted(node: &Node) -> bool {
    condition(node, "Ready").is_none()
}

/// Whether the node has been silent for longer than its grace period
/// (`startup` for a node that never posted a status, else `monitor`).
pub fn is_silent(
    node: &Node,
    probe: &Probe,
    now: Timestamp,
    monitor: Duration,
    startup: Duration,
) -> bool {
    let grace = if never_posted(node) { startup } else { monitor };
    let silent_for = now.duration_since(probe.seen_at);
    silent_for.is_positive() && silent_for.unsigned_abs() > grace
}

pub fn condition<'a>(node: &'a Node, type_: &str) -> Option<&'a NodeCondition> {
    node.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
}

/// The status of the node's Ready condition ("True", "False", "Unknown");
/// `None` while the node has not posted one (just registered).
pub fn ready_status(node: &Node) -> Option<&str> {
    condition(node, "Ready").map(|c| c.status.as_str())
}

/// The conditions of a silent node: each watched one Unknown
/// (`NodeStatusUnknown`), or added as never updated; `None` when they
/// already are.
pub fn unknown_conditions(node: &Node, now: Timestamp) -> Option<Vec<NodeCondition>> {
    let mut conditions = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default();
    let mut changed = false;
    for type_ in WATCHED_CONDITIONS {
        match conditions.iter_mut().find(|c| c.type_ == *type_) {
            Some(condition) if condition.status == "Unknown" => {}
            Some(condition) => {
                condition.status = "Unknown".into();
                condition.reason = Some("NodeStatusUnknown".into());
                condition.message = Some("Kubelet stopped posting node status.".into());
                condition.last_transition_time = Some(Time(now));
                changed = true;
            }
            None => {
                conditions.push(NodeCondition {
                    type_: type_.to_string(),
                    status: "Unknown".into(),
                    reason: Some("NodeStatusNeverUpdated".into()),
                    message: Some("Kubelet never posted node status.".into()),
                    last_heartbeat_time: node.metadata.creation_timestamp.clone(),
                    last_transition_time: Some(Time(now)),
                });
                changed = true;
            }
        }
    }
    changed.then_some(conditions)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nodelifecycle::fixtures::{at, lease, node};

    const MONITOR: Duration = Duration::from_secs(50);
    const STARTUP: Duration = Duration::from_secs(60);

    #[test]
    fn a_node_that_posted_no_ready_condition_has_no_ready_status() {
        assert_eq!(ready_status(&node("n").build()), None);
        assert_eq!(
            ready_status(&node("n").ready("False", at(5)).build()),
            Some("False")
        );
    }

    #[test]
    fn the_heartbeat_is_the_later_of_lease_and_ready_condition() {
        let ready = node("a").ready("True", at(100)).build();
        assert_eq!(heartbeat(&ready, None), Some(at(100)));
        assert_eq!(heartbeat(&ready, Some(&lease("a", at(130)))), Some(at(130)));
        assert_eq!(heartbeat(&ready, Some(&lease("a", at(90)))), Some(at(100)));
        assert_eq!(heartbeat(&node("b").build(), None), None);
    }

    #[test]
    fn a_node_is_silent_once_no_heartbeat_moved_for_the_grace_period() {
        let ready = node("a").ready("True", at(100)).build();
        let first = observe(None, &ready, Some(at(100)), at(1_000));
        // A first look counts from now, not from the (old) heartbeat.
        assert_eq!(first.seen_at, at(1_000));
        assert!(!is_silent(&ready, &first, at(1_050), MONITOR, STARTUP));
        assert!(is_silent(&ready, &first, at(1_051), MONITOR, STARTUP));
        // A newer heartbeat restarts the clock; the same one does not.
        let same = observe(Some(first), &ready, Some(at(100)), at(1_040));
        assert_eq!(same, first);
        let renewed = observe(Some(first), &ready, Some(at(1_030)), at(1_040));
        assert_eq!(renewed.seen_at, at(1_040));
        assert!(!is_silent(&ready, &renewed, at(1_060), MONITOR, STARTUP));
    }

    #[test]
    fn a_node_that_never_posted_gets_the_startup_grace_from_its_creation() {
        let new = node("a").created(at(1_000)).build();
        let probe = observe(None, &new, None, at(1_030));
        assert_eq!(probe.seen_at, at(1_000));
        assert!(!is_silent(&new, &probe, at(1_055), MONITOR, STARTUP));
        assert!(is_silent(&new, &probe, at(1_061), MONITOR, STARTUP));
    }

    #[test]
    fn silent_nodes_get_unknown_conditions_once() {
        let ready = node("a")
            .ready("True", at(100))
            .condition("MemoryPressure", "False")
            .build();
        let conditions = unknown_conditions(&ready, at(200)).unwrap();
        let ready_now = conditions.iter().find(|c| c.type_ == "Ready").unwrap();
        assert_eq!(ready_now.status, "Unknown");
        assert_eq!(ready_now.reason.as_deref(), Some("NodeStatusUnknown"));
        assert_eq!(
            ready_now.message.as_deref(),
            Some("Kubelet stopped posting node status.")
        );
        assert_eq!(ready_now.last_heartbeat_time, Some(Time(at(100))));
        assert_eq!(ready_now.last_transition_time, Some(Time(at(200))));
        let disk = conditions
            .iter()
            .find(|c| c.type_ == "DiskPressure")
            .unwrap();
        assert_eq!(disk.reason.as_deref(), Some("NodeStatusNeverUpdated"));
        assert_eq!(conditions.len(), 4);

        let mut marked = ready.clone();
        marked.status.as_mut().unwrap().conditions = Some(conditions);
        assert_eq!(unknown_conditions(&marked, at(300)), None);
    }
}
