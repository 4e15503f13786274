//! NodeName: a pod that names its node in `spec.nodeName` fits there and
//! nowhere else.

use std::collections::BTreeSet;
use std::sync::Arc;

use serde_json::Value;

use crate::framework::{
    CycleState, NodeInfo, Plugin, PodInfo, Point, PreFilterResult, Snapshot, Status,
};

pub const NAME: &str = "NodeName";

pub const ERR_REASON: &str = "node(s) didn't match the requested node name";

pub struct NodeName;

pub fn new(args: &Value) -> Result<Arc<dyn Plugin>, String> {
    super::no_args(NAME, args)?;
    Ok(Arc::new(NodeName))
}

impl Plugin for NodeName {
    fn name(&self) -> &'static str {
        NAME
    }

    fn points(&self) -> &'static [Point] {
        &[Point::PreFilter, Point::Filter]
    }

    /// Narrows the search to the named node; nothing to do for other pods.
    fn pre_filter(
        &self,
        _: &mut CycleState,
        pod: &PodInfo,
        _: &Snapshot,
    ) -> (PreFilterResult, Status) {
        match pod.node_name() {
            Some(node) => (
                PreFilterResult {
                    node_names: Some(BTreeSet::from([node.to_string()])),
                    ..Default::default()
                },
                Status::success(),
            ),
            None => (PreFilterResult::default(), Status::skip()),
        }
    }

    fn filter(&self, _: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        match pod.node_name() {
            Some(wanted) if wanted != node.name() => Status::unresolvable(ERR_REASON),
            _ => Status::success(),
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{Node, Pod};
    use serde_json::json;

    use super::*;
    use crate::framework::Code;

    fn pod(node_name: Option<&str>) -> PodInfo {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "default"},
            "spec": {"nodeName": node_name, "containers": [{"name": "c", "image": "i"}]},
        }))
        .unwrap();
        PodInfo::new(Arc::new(pod))
    }

    fn node(name: &str) -> Arc<NodeInfo> {
        let node: Node = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
        Arc::new(NodeInfo::new(Arc::new(node)))
    }

    #[test]
    fn filter_matches_the_requested_node_only() {
        let cases = [
            (None, "n1", true),
            (Some(""), "n1", true),
            (Some("n1"), "n1", true),
            (Some("n2"), "n1", false),
        ];
        for (wanted, on, fits) in cases {
            let status = NodeName.filter(&CycleState::default(), &pod(wanted), &node(on));
            match fits {
                true => assert!(status.is_success(), "{wanted:?} on {on}"),
                false => {
                    assert_eq!(status.code, Code::UnschedulableAndUnresolvable);
                    assert_eq!(status.reasons[..], vec![ERR_REASON]);
                }
            }
        }
    }

    #[test]
    fn pre_filter_narrows_to_the_requested_node() {
        let snapshot = Snapshot::new(vec![node("n1"), node("n2")], Arc::default());
        let mut state = CycleState::default();
        let (result, status) = NodeName.pre_filter(&mut state, &pod(Some("n2")), &snapshot);
        assert!(status.is_success());
        assert_eq!(result.node_names, Some(BTreeSet::from(["n2".to_string()])));
        let (result, status) = NodeName.pre_filter(&mut state, &pod(None), &snapshot);
        assert_eq!(status.code, Code::Skip);
        assert_eq!(result.node_names, None);
    }

    #[test]
    fn takes_no_args() {
        assert!(new(&Value::Null).is_ok());
        assert!(new(&json!({"kind": "NodeNameArgs"})).is_ok());
        assert!(new(&json!({"x": 1})).is_err());
    }
}
