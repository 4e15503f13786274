//! Nodes, Leases and pods for the node lifecycle controller's tests.

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod, Taint, Toleration};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::{json, Value};

pub fn at(second: i64) -> Timestamp {
    Timestamp::from_second(second).unwrap()
}

fn time(t: Timestamp) -> String {
    t.to_string()
}

pub struct NodeBuilder(Value);

pub fn node(name: &str) -> NodeBuilder {
    NodeBuilder(json!({"metadata": {"name": name}, "spec": {}, "status": {"conditions": []}}))
}

impl NodeBuilder {
    pub fn created(mut self, t: Timestamp) -> Self {
        self.0["metadata"]["creationTimestamp"] = json!(time(t));
        self
    }

    pub fn ready(self, status: &str, heartbeat: Timestamp) -> Self {
        self.push_condition(json!({"type": "Ready", "status": status,
            "lastHeartbeatTime": time(heartbeat), "lastTransitionTime": time(at(0))}))
    }

    pub fn condition(self, type_: &str, status: &str) -> Self {
        self.push_condition(json!({"type": type_, "status": status}))
    }

    fn push_condition(mut self, condition: Value) -> Self {
        self.0["status"]["conditions"]
            .as_array_mut()
            .unwrap()
            .push(condition);
        self
    }

    pub fn zone(mut self, zone: &str) -> Self {
        self.0["metadata"]["labels"] = json!({"topology.kubernetes.io/zone": zone});
        self
    }

    pub fn taint(mut self, taint: Taint) -> Self {
        if self.0["spec"]["taints"].is_null() {
            self.0["spec"]["taints"] = json!([]);
        }
        self.0["spec"]["taints"]
            .as_array_mut()
            .unwrap()
            .push(serde_json::to_value(taint).unwrap());
        self
    }

    pub fn build(self) -> Node {
        serde_json::from_value(self.0).unwrap()
    }
}

pub fn lease(node: &str, renewed: Timestamp) -> Lease {
    serde_json::from_value(json!({
        "metadata": {"name": node, "namespace": "kube-node-lease"},
        "spec": {"holderIdentity": node, "renewTime": renewed.strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()},
    }))
    .unwrap()
}

pub fn taint(key: &str, effect: &str, added: Option<Timestamp>) -> Taint {
    Taint {
        key: key.into(),
        effect: effect.into(),
        time_added: added.map(Time),
        value: None,
    }
}

pub fn toleration(key: &str, seconds: Option<i64>) -> Toleration {
    Toleration {
        key: Some(key.into()),
        operator: Some("Exists".into()),
        effect: Some("NoExecute".into()),
        toleration_seconds: seconds,
        value: None,
    }
}

pub fn pod(name: &str, node: &str, tolerations: Vec<Toleration>) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"nodeName": node, "containers": [{"name": "c"}],
                 "tolerations": serde_json::to_value(tolerations).unwrap()},
        "status": {"phase": "Running",
                   "conditions": [{"type": "Ready", "status": "True"}]},
    }))
    .unwrap()
}
