//! The events the node lifecycle controller records, in the v1.33
//! controller's words: `RegisteredNode` when it first sees a Node
//! (`monitorNodeHealth`), `NodeNotReady` on a Node it marks not ready
//! (`RecordNodeStatusChange`) and on each of its pods marked not ready
//! (`MarkPodsNotReady`).

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::ResourceExt;
use skiff_machinery::events::{Event, EventType};

use crate::common::events::event;

/// The controller saw `node` for the first time.
pub fn registered_node(node: &Node) -> Event {
    event(
        node,
        EventType::Normal,
        "RegisteredNode",
        format!("Registered Node {} in Controller", node.name_any()),
    )
}

/// The controller changed `node`'s status to `status` (`NodeNotReady`).
pub fn node_status_change(node: &Node, status: &str) -> Event {
    event(
        node,
        EventType::Normal,
        status,
        format!("Node {} status is now: {status}", node.name_any()),
    )
}

/// `pod` was marked not ready because its node is.
pub fn pod_node_not_ready(pod: &Pod) -> Event {
    event(
        pod,
        EventType::Warning,
        "NodeNotReady",
        "Node is not ready".into(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node() -> Node {
        serde_json::from_value(serde_json::json!({"metadata": {"name": "n1", "uid": "uid-n1"}}))
            .unwrap()
    }

    #[test]
    fn node_events_are_recorded_on_the_node() {
        let registered = registered_node(&node());
        assert_eq!(registered.regarding.kind.as_deref(), Some("Node"));
        assert_eq!(registered.regarding.uid.as_deref(), Some("uid-n1"));
        assert_eq!(
            (
                registered.type_,
                registered.reason.as_str(),
                registered.message.as_str()
            ),
            (
                EventType::Normal,
                "RegisteredNode",
                "Registered Node n1 in Controller"
            )
        );
        let not_ready = node_status_change(&node(), "NodeNotReady");
        assert_eq!(
            (
                not_ready.type_,
                not_ready.reason.as_str(),
                not_ready.message.as_str()
            ),
            (
                EventType::Normal,
                "NodeNotReady",
                "Node n1 status is now: NodeNotReady"
            )
        );
    }

    #[test]
    fn a_pod_marked_not_ready_is_warned_about() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web-0", "namespace": "default"}}))
        .unwrap();
        let event = pod_node_not_ready(&pod);
        assert_eq!(event.regarding.kind.as_deref(), Some("Pod"));
        assert_eq!(event.regarding.namespace.as_deref(), Some("default"));
        assert_eq!(
            (event.type_, event.reason.as_str(), event.message.as_str()),
            (EventType::Warning, "NodeNotReady", "Node is not ready")
        );
    }
}
