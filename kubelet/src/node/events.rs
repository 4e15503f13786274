//! The Events the kubelet records about its Node, as Kubernetes' kubelet
//! (v1.33) records them: `Starting` when it starts, and one
//! `Node N status is now: R` whenever its status setters move a condition.
//! Builders and the decision only; the status loop posts and records.

use k8s_openapi::api::core::v1::{NodeCondition, ObjectReference};
use skiff_machinery::events::{Event, EventType};

/// The Node as the kubelet refers to it: kind Node, with its name as the
/// uid too (the kubelet does not wait for the object to learn its uid).
pub fn node_reference(node: &str) -> ObjectReference {
    ObjectReference {
        kind: Some("Node".to_string()),
        name: Some(node.to_string()),
        uid: Some(node.to_string()),
        ..ObjectReference::default()
    }
}

/// `Starting`, once per kubelet start.
pub fn starting(node: &str) -> Event {
    Event {
        regarding: node_reference(node),
        type_: EventType::Normal,
        reason: "Starting".to_string(),
        message: "Starting kubelet.".to_string(),
    }
}

/// A status event: the reason is also what the message says the status
/// now is.
pub fn status_event(node: &str, reason: &str) -> Event {
    Event {
        regarding: node_reference(node),
        type_: EventType::Normal,
        reason: reason.to_string(),
        message: format!("Node {node} status is now: {reason}"),
    }
}

/// The status events for posting `next` over `previous` (the conditions
/// last posted, or read from the Node at start), in the kubelet's setter
/// order. A pressure condition says so when its status moves, and on the
/// first post of a kubelet (`first`): the kubelet builds its Node afresh
/// at each start. Ready says so when its status moves, or when the Node
/// had none: the kubelet registers NotReady until its runtime is up, then
/// turns Ready; skiff's Node is Ready from its first post.
pub fn status_events(
    previous: &[NodeCondition],
    next: &[NodeCondition],
    first: bool,
) -> Vec<&'static str> {
    next.iter()
        .filter_map(|condition| {
            let before = previous.iter().find(|c| c.type_ == condition.type_);
            let moved = before.is_none_or(|c| c.status != condition.status);
            let announce = match condition.type_.as_str() {
                "Ready" => moved,
                _ => moved || first,
            };
            if !announce {
                return None;
            }
            status_reason(&condition.type_, condition.status == "True")
        })
        .collect()
}

/// The event reason of a condition type in that status.
fn status_reason(type_: &str, on: bool) -> Option<&'static str> {
    Some(match (type_, on) {
        ("MemoryPressure", true) => "NodeHasInsufficientMemory",
        ("MemoryPressure", false) => "NodeHasSufficientMemory",
        ("DiskPressure", true) => "NodeHasDiskPressure",
        ("DiskPressure", false) => "NodeHasNoDiskPressure",
        ("PIDPressure", true) => "NodeHasInsufficientPID",
        ("PIDPressure", false) => "NodeHasSufficientPID",
        ("Ready", true) => "NodeReady",
        ("Ready", false) => "NodeNotReady",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::conditions::{node_conditions, Pressure};
    use k8s_openapi::jiff::Timestamp;

    fn conditions(pressure: Pressure) -> Vec<NodeCondition> {
        node_conditions(&[], &pressure, Timestamp::UNIX_EPOCH)
    }

    #[test]
    fn node_events_refer_to_the_node_by_name() {
        let e = starting("n1");
        assert_eq!(
            (e.type_, e.reason.as_str(), e.message.as_str()),
            (EventType::Normal, "Starting", "Starting kubelet.")
        );
        assert_eq!(e.regarding.kind.as_deref(), Some("Node"));
        assert_eq!(e.regarding.name.as_deref(), Some("n1"));
        assert_eq!(e.regarding.uid.as_deref(), Some("n1"));
        assert_eq!(e.regarding.namespace, None);
        let status = status_event("n1", "NodeHasSufficientMemory");
        assert_eq!(
            (status.type_, status.message.as_str()),
            (
                EventType::Normal,
                "Node n1 status is now: NodeHasSufficientMemory"
            )
        );
    }

    #[test]
    fn a_fresh_node_says_each_status_once() {
        let calm = conditions(Pressure::default());
        assert_eq!(
            status_events(&[], &calm, true),
            [
                "NodeHasSufficientMemory",
                "NodeHasNoDiskPressure",
                "NodeHasSufficientPID",
                "NodeReady"
            ]
        );
        assert!(
            status_events(&calm, &calm, false).is_empty(),
            "a heartbeat says nothing"
        );
    }

    #[test]
    fn a_restart_repeats_pressure_but_not_an_unchanged_ready() {
        let calm = conditions(Pressure::default());
        assert_eq!(
            status_events(&calm, &calm, true),
            [
                "NodeHasSufficientMemory",
                "NodeHasNoDiskPressure",
                "NodeHasSufficientPID"
            ]
        );
        let mut unknown = calm.clone();
        unknown[3].status = "Unknown".to_string();
        assert_eq!(status_events(&unknown, &calm, false), ["NodeReady"]);
        assert_eq!(status_events(&calm, &unknown, false), ["NodeNotReady"]);
    }

    #[test]
    fn a_flip_says_the_new_status() {
        let calm = conditions(Pressure::default());
        let pressed = conditions(Pressure {
            memory: true,
            disk: true,
            pid: true,
            ..Pressure::default()
        });
        assert_eq!(
            status_events(&calm, &pressed, false),
            [
                "NodeHasInsufficientMemory",
                "NodeHasDiskPressure",
                "NodeHasInsufficientPID"
            ]
        );
        assert_eq!(
            status_events(&pressed, &calm, false),
            [
                "NodeHasSufficientMemory",
                "NodeHasNoDiskPressure",
                "NodeHasSufficientPID"
            ]
        );
    }
}
