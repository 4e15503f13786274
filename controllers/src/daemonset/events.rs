//! The event a DaemonSet records about a failed daemon pod it deletes, as
//! the v1.33 DaemonSet controller words it (`podsShouldBeOnNode`); its
//! pods' creates and deletes are `common::events'`.

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::Pod;
use skiff_machinery::events::{Event, EventType};

use crate::common::events::event;

/// `FailedDaemonPodReason`.
pub const FAILED_DAEMON_POD: &str = "FailedDaemonPod";

/// The failed daemon pod `pod` on `node` is deleted (to be created anew).
pub fn failed_daemon_pod(ds: &DaemonSet, pod: &Pod, node: &str) -> Event {
    event(
        ds,
        EventType::Warning,
        FAILED_DAEMON_POD,
        format!(
            "Found failed daemon pod {}/{} on node {node}, will try to kill it",
            pod.metadata.namespace.as_deref().unwrap_or_default(),
            pod.metadata.name.as_deref().unwrap_or_default(),
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::daemonset::fixtures::daemon_set;

    #[test]
    fn a_failed_daemon_pod_is_warned_about_on_its_daemon_set() {
        let ds = daemon_set("agent");
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "agent-x7k2p", "namespace": "default"},
            "status": {"phase": "Failed"},
        }))
        .unwrap();
        let event = failed_daemon_pod(&ds, &pod, "n1");
        assert_eq!(event.regarding.kind.as_deref(), Some("DaemonSet"));
        assert_eq!(event.type_, EventType::Warning);
        assert_eq!(event.reason, "FailedDaemonPod");
        assert_eq!(
            event.message,
            "Found failed daemon pod default/agent-x7k2p on node n1, will try to kill it"
        );
    }
}
