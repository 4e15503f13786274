//! Test objects: Services and pods as the API would return them.

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Pod, PodCondition, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::{json, Value};

pub const NOW: Timestamp = Timestamp::constant(1_750_000_000, 0);

/// A Service `name` in `default` selecting `app=web` with `ports`.
pub fn service(name: &str, ports: Value) -> Service {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}"),
                     "labels": {"team": "a"}, "resourceVersion": "3"},
        "spec": {"selector": {"app": "web"}, "ports": ports, "clusterIP": "10.96.0.10"},
    }))
    .unwrap()
}

pub struct PodBuilder(Pod);

/// A ready running pod `name` in `default` labelled `app=web`, on
/// `node-1` with IP 127.0.0.1, serving container port `http` 8080.
pub fn pod(name: &str) -> PodBuilder {
    let pod = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}"),
                     "labels": {"app": "web"}},
        "spec": {"nodeName": "node-1", "containers": [
            {"name": "web", "image": "nginx", "ports": [{"name": "http", "containerPort": 8080}]}
        ]},
        "status": {"phase": "Running", "podIP": "127.0.0.1",
                   "conditions": [{"type": "Ready", "status": "True"}]},
    }))
    .unwrap();
    PodBuilder(pod)
}

impl PodBuilder {
    pub fn build(self) -> Pod {
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

    pub fn ip(mut self, ip: &str) -> Self {
        self.0.status.as_mut().unwrap().pod_ip = Some(ip.into());
        self
    }

    pub fn no_ip(mut self) -> Self {
        self.0.status.as_mut().unwrap().pod_ip = None;
        self
    }

    pub fn phase(mut self, phase: &str) -> Self {
        self.0.status.as_mut().unwrap().phase = Some(phase.into());
        self
    }

    pub fn not_ready(mut self) -> Self {
        self.0.status.as_mut().unwrap().conditions = Some(vec![PodCondition {
            type_: "Ready".into(),
            status: "False".into(),
            ..Default::default()
        }]);
        self
    }

    pub fn terminating(mut self) -> Self {
        self.0.metadata.deletion_timestamp = Some(Time(NOW));
        self
    }

    pub fn hostname(mut self, hostname: &str, subdomain: &str) -> Self {
        let spec = self.0.spec.as_mut().unwrap();
        spec.hostname = Some(hostname.into());
        spec.subdomain = Some(subdomain.into());
        self
    }

    pub fn port(mut self, name: &str, number: i32) -> Self {
        let container = &mut self.0.spec.as_mut().unwrap().containers[0];
        let port = serde_json::from_value(json!({"name": name, "containerPort": number})).unwrap();
        container.ports = Some(vec![port]);
        self
    }
}
