//! Test objects: DaemonSets, nodes and daemon pods as the API returns them.

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, Pod, Taint};
use serde_json::json;

pub use crate::common::fixtures::{ago, pod, PodBuilder, NOW};

use super::eligibility::pin_to_node;
use crate::history::CONTROLLER_REVISION_HASH;

/// A DaemonSet `name` in `default` selecting and templating `app=web`.
pub fn daemon_set(name: &str) -> DaemonSet {
    serde_json::from_value(json!({
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {
            "name": name, "namespace": "default", "uid": format!("uid-{name}"),
            "generation": 1, "resourceVersion": "10",
        },
        "spec": {
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web", "tier": "front"}},
                "spec": {"containers": [{"name": "web", "image": "nginx"}]},
            },
            "updateStrategy": {"type": "RollingUpdate",
                               "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}},
            "revisionHistoryLimit": 10,
        },
    }))
    .unwrap()
}

pub struct NodeBuilder(Node);

/// A Ready node `name` without labels or taints.
pub fn node(name: &str) -> NodeBuilder {
    NodeBuilder(
        serde_json::from_value(json!({
            "metadata": {"name": name, "uid": format!("uid-{name}")},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]},
        }))
        .unwrap(),
    )
}

impl NodeBuilder {
    pub fn build(self) -> Node {
        self.0
    }

    pub fn labels(mut self, labels: &[(&str, &str)]) -> Self {
        let map = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        self.0.metadata.labels = Some(map);
        self
    }

    pub fn taint(mut self, key: &str, value: &str, effect: &str) -> Self {
        let spec = self.0.spec.get_or_insert_with(Default::default);
        spec.taints.get_or_insert_with(Vec::new).push(Taint {
            key: key.into(),
            value: (!value.is_empty()).then(|| value.to_string()),
            effect: effect.into(),
            time_added: None,
        });
        self
    }

    pub fn unschedulable(mut self) -> Self {
        self.0
            .spec
            .get_or_insert_with(Default::default)
            .unschedulable = Some(true);
        self
    }
}

/// A pod of DaemonSet `ds` at revision `hash`, pinned to and bound on `node`.
pub fn daemon_pod(name: &str, ds: &str, node: &str, hash: &str) -> PodBuilder {
    pod(name)
        .controlled_by("DaemonSet", ds)
        .label(CONTROLLER_REVISION_HASH, hash)
        .node(node)
}

/// As [`daemon_pod`], not yet bound: pinned by node affinity only.
pub fn pending_daemon_pod(name: &str, ds: &str, node: &str, hash: &str) -> Pod {
    let mut pod = pod(name)
        .controlled_by("DaemonSet", ds)
        .label(CONTROLLER_REVISION_HASH, hash)
        .build();
    pin_to_node(pod.spec.as_mut().unwrap(), node);
    pod
}
