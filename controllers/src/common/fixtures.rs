//! Test objects: ReplicaSets and pods as the API would return them.

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{ContainerStatus, Pod, PodCondition, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
use serde_json::json;

pub const NOW: Timestamp = Timestamp::constant(1_750_000_000, 0);

pub fn ago(seconds: i64) -> Timestamp {
    NOW.checked_sub(SignedDuration::from_secs(seconds)).unwrap()
}

/// A ReplicaSet `name` in `default` selecting and templating `app=web`.
pub fn replica_set(name: &str, replicas: i32) -> ReplicaSet {
    serde_json::from_value(json!({
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {
            "name": name, "namespace": "default", "uid": format!("uid-{name}"),
            "generation": 2, "resourceVersion": "10",
        },
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web", "tier": "front"}, "annotations": {"note": "x"}},
                "spec": {"containers": [{"name": "web", "image": "nginx"}]},
            },
        },
    }))
    .unwrap()
}

pub struct PodBuilder(Pod);

/// A pod `name` in `default` labelled `app=web`, created an hour ago.
pub fn pod(name: &str) -> PodBuilder {
    let pod = serde_json::from_value(json!({
        "metadata": {
            "name": name, "namespace": "default", "uid": format!("uid-{name}"),
            "resourceVersion": "5", "labels": {"app": "web", "tier": "front"},
            "creationTimestamp": ago(3600).to_string(),
        },
        "spec": {"containers": [{"name": "web", "image": "nginx"}]},
        "status": {"phase": "Pending"},
    }))
    .unwrap();
    PodBuilder(pod)
}

impl PodBuilder {
    pub fn build(self) -> Pod {
        self.0
    }

    fn status(&mut self) -> &mut PodStatus {
        self.0.status.get_or_insert_with(Default::default)
    }

    pub fn labels(mut self, labels: &[(&str, &str)]) -> Self {
        let map = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        self.0.metadata.labels = Some(map);
        self
    }

    pub fn phase(mut self, phase: &str) -> Self {
        self.status().phase = Some(phase.to_string());
        self
    }

    pub fn node(mut self, node: &str) -> Self {
        self.0.spec.get_or_insert_with(Default::default).node_name = Some(node.to_string());
        self
    }

    pub fn created(mut self, at: Timestamp) -> Self {
        self.0.metadata.creation_timestamp = Some(Time(at));
        self
    }

    /// Running, with Ready True since `since`.
    pub fn ready_since(self, since: Timestamp) -> Self {
        self.phase("Running").condition("Ready", "True", since)
    }

    /// Running, with Ready False.
    pub fn not_ready(self) -> Self {
        self.phase("Running").condition("Ready", "False", ago(60))
    }

    fn condition(mut self, type_: &str, status: &str, since: Timestamp) -> Self {
        let condition = PodCondition {
            type_: type_.to_string(),
            status: status.to_string(),
            last_transition_time: Some(Time(since)),
            ..Default::default()
        };
        self.status().conditions = Some(vec![condition]);
        self
    }

    pub fn restarts(mut self, count: i32) -> Self {
        let container = ContainerStatus {
            name: "web".into(),
            restart_count: count,
            ..Default::default()
        };
        self.status().container_statuses = Some(vec![container]);
        self
    }

    pub fn terminating(mut self) -> Self {
        self.0.metadata.deletion_timestamp = Some(Time(NOW));
        self
    }

    pub fn owned_by(mut self, rs: &ReplicaSet) -> Self {
        let owner = OwnerReference {
            api_version: "apps/v1".into(),
            kind: "ReplicaSet".into(),
            name: rs.metadata.name.clone().unwrap(),
            uid: rs.metadata.uid.clone().unwrap(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        };
        self.0.metadata.owner_references = Some(vec![owner]);
        self
    }

    /// Controlled by the `kind` (apps/v1) object `name` with uid `uid-<name>`.
    pub fn controlled_by(mut self, kind: &str, name: &str) -> Self {
        let owner = OwnerReference {
            api_version: "apps/v1".into(),
            kind: kind.into(),
            name: name.into(),
            uid: format!("uid-{name}"),
            controller: Some(true),
            block_owner_deletion: Some(true),
        };
        self.0.metadata.owner_references = Some(vec![owner]);
        self
    }

    /// Adds one label.
    pub fn label(mut self, key: &str, value: &str) -> Self {
        self.0
            .metadata
            .labels
            .get_or_insert_with(Default::default)
            .insert(key.to_string(), value.to_string());
        self
    }
}
