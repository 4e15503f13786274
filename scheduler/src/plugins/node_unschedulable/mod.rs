//! NodeUnschedulable: a cordoned node (`spec.unschedulable`) takes only
//! pods that tolerate the `node.kubernetes.io/unschedulable:NoSchedule`
//! taint.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Taint, Toleration};
use serde_json::Value;
use skiff_machinery::scheduling::taints::{tolerates, NO_SCHEDULE};

use crate::framework::{CycleState, NodeInfo, Plugin, PodInfo, Point, Status};

pub const NAME: &str = "NodeUnschedulable";

pub const ERR_REASON_UNSCHEDULABLE: &str = "node(s) were unschedulable";

const TAINT_NODE_UNSCHEDULABLE: &str = "node.kubernetes.io/unschedulable";

pub struct NodeUnschedulable;

pub fn new(args: &Value) -> Result<Arc<dyn Plugin>, String> {
    super::no_args(NAME, args)?;
    Ok(Arc::new(NodeUnschedulable))
}

/// Whether `toleration` tolerates the taint `node.kubernetes.io/unschedulable`
/// (no value) with effect NoSchedule.
fn tolerates_unschedulable(toleration: &Toleration) -> bool {
    let taint = Taint {
        key: TAINT_NODE_UNSCHEDULABLE.to_string(),
        effect: NO_SCHEDULE.to_string(),
        value: None,
        time_added: None,
    };
    tolerates(toleration, &taint)
}

impl Plugin for NodeUnschedulable {
    fn name(&self) -> &'static str {
        NAME
    }

    fn points(&self) -> &'static [Point] {
        &[Point::Filter]
    }

    fn filter(&self, _: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        if !node.unschedulable {
            return Status::success();
        }
        let tolerated = pod
            .pod
            .spec
            .as_ref()
            .and_then(|s| s.tolerations.as_ref())
            .is_some_and(|tolerations| tolerations.iter().any(tolerates_unschedulable));
        match tolerated {
            true => Status::success(),
            false => Status::unresolvable(ERR_REASON_UNSCHEDULABLE),
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{Node, Pod};
    use serde_json::json;

    use super::*;
    use crate::framework::Code;

    fn pod(tolerations: Value) -> PodInfo {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "default"},
            "spec": {"tolerations": tolerations, "containers": [{"name": "c", "image": "i"}]},
        }))
        .unwrap();
        PodInfo::new(Arc::new(pod))
    }

    fn node(unschedulable: Option<bool>) -> NodeInfo {
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": "n"},
            "spec": {"unschedulable": unschedulable},
        }))
        .unwrap();
        NodeInfo::new(Arc::new(node))
    }

    #[test]
    fn cordoned_nodes_take_only_tolerating_pods() {
        let key = TAINT_NODE_UNSCHEDULABLE;
        let cases = [
            ("schedulable node", None, json!(null), true),
            ("explicitly schedulable", Some(false), json!(null), true),
            ("cordoned, no tolerations", Some(true), json!(null), false),
            (
                "cordoned, exists",
                Some(true),
                json!([{"key": key, "operator": "Exists", "effect": "NoSchedule"}]),
                true,
            ),
            (
                "cordoned, any effect",
                Some(true),
                json!([{"key": key, "operator": "Exists"}]),
                true,
            ),
            (
                "cordoned, tolerate everything",
                Some(true),
                json!([{"operator": "Exists"}]),
                true,
            ),
            (
                "cordoned, equal empty value",
                Some(true),
                json!([{"key": key, "effect": "NoSchedule"}]),
                true,
            ),
            (
                "cordoned, equal other value",
                Some(true),
                json!([{"key": key, "value": "x", "effect": "NoSchedule"}]),
                false,
            ),
            (
                "cordoned, NoExecute only",
                Some(true),
                json!([{"key": key, "operator": "Exists", "effect": "NoExecute"}]),
                false,
            ),
            (
                "cordoned, other key",
                Some(true),
                json!([{"key": "other", "operator": "Exists"}]),
                false,
            ),
        ];
        for (name, unschedulable, tolerations, fits) in cases {
            let status = NodeUnschedulable.filter(
                &CycleState::default(),
                &pod(tolerations),
                &node(unschedulable),
            );
            match fits {
                true => assert!(status.is_success(), "{name}: {status}"),
                false => {
                    assert_eq!(status.code, Code::UnschedulableAndUnresolvable, "{name}");
                    assert_eq!(status.reasons[..], vec![ERR_REASON_UNSCHEDULABLE], "{name}");
                }
            }
        }
    }

    #[test]
    fn takes_no_args() {
        assert!(new(&Value::Null).is_ok());
        assert!(new(&json!([])).is_err());
    }
}
