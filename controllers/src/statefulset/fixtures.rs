//! Test objects: StatefulSets and their pods as the API returns them.

use k8s_openapi::api::apps::v1::StatefulSet;
use serde_json::json;

pub use crate::common::fixtures::{ago, pod, PodBuilder, NOW};

use crate::history::CONTROLLER_REVISION_HASH;

/// A StatefulSet `name` of `replicas` in `default`, selecting and
/// templating `app=web`, with service `nginx` and a `data` claim template.
pub fn stateful_set(name: &str, replicas: i32) -> StatefulSet {
    serde_json::from_value(json!({
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {
            "name": name, "namespace": "default", "uid": format!("uid-{name}"),
            "generation": 1, "resourceVersion": "10",
        },
        "spec": {
            "replicas": replicas,
            "serviceName": "nginx",
            "selector": {"matchLabels": {"app": "web"}},
            "podManagementPolicy": "OrderedReady",
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": "nginx"}]},
            },
            "volumeClaimTemplates": [{
                "metadata": {"name": "data"},
                "spec": {"accessModes": ["ReadWriteOnce"],
                         "resources": {"requests": {"storage": "1Gi"}}},
            }],
        },
    }))
    .unwrap()
}

/// The pod `<set>-<ordinal>` of `set` at `revision`.
pub fn member(set: &str, ordinal: usize, revision: &str) -> PodBuilder {
    pod(&format!("{set}-{ordinal}"))
        .controlled_by("StatefulSet", set)
        .label(CONTROLLER_REVISION_HASH, revision)
}
