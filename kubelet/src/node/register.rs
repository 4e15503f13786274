//! Registering the Node with the API: create it, or, when it exists
//! (the kubelet restarted), merge our labels and taints into it and write
//! our status through the `status` subresource.

use k8s_openapi::api::core::v1::{Node, Taint};
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

use super::build::build_node;
use super::config::NodeConfig;
use super::host::HostInfo;
use super::NodeError;

/// Read-merge-write attempts on an existing Node before giving up.
const ATTEMPTS: usize = 5;

/// Registers this host's Node as `config` describes it.
pub async fn register(
    client: Client,
    config: &NodeConfig,
    host: &HostInfo,
) -> Result<Node, NodeError> {
    register_node(&Api::all(client), build_node(config, host)).await
}

/// Creates `node`, or merges it into the Node of that name; returns the
/// Node as stored (with its uid).
pub async fn register_node(api: &Api<Node>, node: Node) -> Result<Node, NodeError> {
    let name = node.metadata.name.clone().unwrap_or_default();
    match api.create(&PostParams::default(), &node).await {
        Ok(created) => Ok(created),
        Err(kube::Error::Api(status)) if status.code == 409 => {
            let merged = merge_into_existing(api, &name, &node).await?;
            write_status(api, &name, &node).await?;
            tracing::info!(node = %name, "node already registered; merged our labels, taints and status");
            Ok(merged)
        }
        Err(source) => Err(NodeError::Create { node: name, source }),
    }
}

async fn merge_into_existing(api: &Api<Node>, name: &str, ours: &Node) -> Result<Node, NodeError> {
    for _ in 0..ATTEMPTS {
        let current = api.get(name).await.map_err(|source| NodeError::Update {
            node: name.to_string(),
            source,
        })?;
        match api
            .replace(name, &PostParams::default(), &merged(current, ours))
            .await
        {
            Ok(updated) => return Ok(updated),
            Err(kube::Error::Api(status)) if status.code == 409 => continue,
            Err(source) => {
                return Err(NodeError::Update {
                    node: name.to_string(),
                    source,
                })
            }
        }
    }
    Err(NodeError::Conflicts {
        node: name.to_string(),
    })
}

/// Our status fields (not the conditions: the status loop owns those).
async fn write_status(api: &Api<Node>, name: &str, ours: &Node) -> Result<(), NodeError> {
    let status = ours.status.clone().unwrap_or_default();
    let patch = json!({"status": {
        "capacity": status.capacity,
        "allocatable": status.allocatable,
        "addresses": status.addresses,
        "daemonEndpoints": status.daemon_endpoints,
        "nodeInfo": status.node_info,
    }});
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map(drop)
        .map_err(|source| NodeError::Status {
            node: name.to_string(),
            source,
        })
}

/// The existing Node with our labels and annotations set over its own
/// and our taints added where it lacks them; spec.unschedulable and other writers'
/// taints are kept.
pub fn merged(mut current: Node, ours: &Node) -> Node {
    let labels = current.metadata.labels.get_or_insert_with(Default::default);
    labels.extend(ours.metadata.labels.clone().unwrap_or_default());
    if let Some(ours) = ours.metadata.annotations.clone().filter(|a| !a.is_empty()) {
        let annotations = current
            .metadata
            .annotations
            .get_or_insert_with(Default::default);
        annotations.extend(ours);
    }
    let our_taints = ours
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default();
    if !our_taints.is_empty() {
        let spec = current.spec.get_or_insert_with(Default::default);
        let taints = spec.taints.get_or_insert_with(Vec::new);
        for taint in our_taints {
            if !taints.iter().any(|t| same_taint(t, &taint)) {
                taints.push(taint);
            }
        }
    }
    current
}

fn same_taint(a: &Taint, b: &Taint) -> bool {
    a.key == b.key && a.effect == b.effect
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::build::tests::host;
    use crate::node::config::{parse_labels, parse_taints};
    use k8s_openapi::api::core::v1::NodeSpec;

    #[test]
    fn an_existing_node_keeps_its_own_and_gains_ours() {
        let mut config = NodeConfig::new("n1", "10.0.0.5");
        config.labels = parse_labels("zone=b").unwrap();
        config.taints = parse_taints("dedicated=gpu:NoSchedule,spot:NoExecute").unwrap();
        let mut ours = build_node(&config, &host());
        ours.metadata.annotations = Some([("url".to_string(), "new".to_string())].into());
        let mut existing = Node::default();
        existing.metadata.labels = Some(parse_labels("zone=a,team=infra").unwrap());
        existing.metadata.annotations = Some(parse_labels("url=old,note=kept").unwrap());
        existing.spec = Some(NodeSpec {
            unschedulable: Some(true),
            taints: Some(
                parse_taints("dedicated=cpu:NoSchedule,node.kubernetes.io/unreachable:NoExecute")
                    .unwrap(),
            ),
            ..NodeSpec::default()
        });
        let node = merged(existing, &ours);
        let annotations = node.metadata.annotations.unwrap();
        assert_eq!(
            (annotations["url"].as_str(), annotations["note"].as_str()),
            ("new", "kept")
        );
        let labels = node.metadata.labels.unwrap();
        assert_eq!(labels["zone"], "b");
        assert_eq!(labels["team"], "infra");
        assert_eq!(labels["kubernetes.io/hostname"], "n1");
        let spec = node.spec.unwrap();
        assert_eq!(spec.unschedulable, Some(true));
        let taints = spec.taints.unwrap();
        let keys: Vec<_> = taints
            .iter()
            .map(|t| (t.key.as_str(), t.value.as_deref()))
            .collect();
        assert_eq!(
            keys,
            vec![
                ("dedicated", Some("cpu")),
                ("node.kubernetes.io/unreachable", None),
                ("spot", None)
            ]
        );
    }
}
