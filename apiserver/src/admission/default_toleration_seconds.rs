//! DefaultTolerationSeconds: a new pod tolerates a not-ready or unreachable
//! node for 300 seconds unless it says otherwise, so that the node
//! lifecycle controller evicts it after five minutes, not at once.

use serde_json::{json, Value};

use super::{Attributes, Operation};

/// `--default-not-ready-toleration-seconds` and
/// `--default-unreachable-toleration-seconds` of kube-apiserver.
pub const DEFAULT_TOLERATION_SECONDS: i64 = 300;

pub const NOT_READY: &str = "node.kubernetes.io/not-ready";
pub const UNREACHABLE: &str = "node.kubernetes.io/unreachable";

pub fn admit(attrs: &mut Attributes) {
    if attrs.operation != Operation::Create || !attrs.is_core("Pod") || !attrs.on_object() {
        return;
    }
    let Some(spec) = attrs
        .object
        .as_mut()
        .and_then(|pod| pod.get_mut("spec"))
        .filter(|s| s.is_object())
    else {
        return;
    };
    let mut tolerations = match spec.get("tolerations") {
        Some(Value::Array(list)) => list.clone(),
        None | Some(Value::Null) => Vec::new(),
        Some(_) => return,
    };
    let before = tolerations.len();
    for key in [NOT_READY, UNREACHABLE] {
        if !tolerations.iter().any(|t| tolerates_no_execute(t, key)) {
            tolerations.push(json!({
                "key": key,
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": DEFAULT_TOLERATION_SECONDS,
            }));
        }
    }
    if tolerations.len() != before {
        spec["tolerations"] = Value::Array(tolerations);
    }
}

/// Whether `toleration` already covers a NoExecute taint with `key`.
fn tolerates_no_execute(toleration: &Value, key: &str) -> bool {
    let effect_matches = matches!(
        toleration["effect"].as_str(),
        None | Some("") | Some("NoExecute")
    );
    let key_matches = match toleration["key"].as_str() {
        None | Some("") => toleration["operator"] == "Exists",
        Some(k) => k == key,
    };
    effect_matches && key_matches
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::tests::attrs;

    #[test]
    fn a_new_pod_tolerates_unready_nodes_for_five_minutes() {
        let mut a = attrs(
            Operation::Create,
            "pods",
            json!({"spec": {"containers": []}}),
        );
        admit(&mut a);
        let tolerations = &a.object.as_ref().unwrap()["spec"]["tolerations"];
        assert_eq!(tolerations.as_array().unwrap().len(), 2);
        assert_eq!(tolerations[0]["key"], NOT_READY);
        assert_eq!(tolerations[1]["tolerationSeconds"], 300);
    }

    #[test]
    fn a_pod_that_tolerates_already_keeps_its_own() {
        let own = json!({"key": NOT_READY, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 5});
        let mut a = attrs(
            Operation::Create,
            "pods",
            json!({"spec": {"tolerations": [own]}}),
        );
        admit(&mut a);
        let tolerations = a.object.unwrap()["spec"]["tolerations"].clone();
        assert_eq!(tolerations.as_array().unwrap().len(), 2);
        assert_eq!(tolerations[0]["tolerationSeconds"], 5);
        assert_eq!(tolerations[1]["key"], UNREACHABLE);
        let mut all = attrs(
            Operation::Create,
            "pods",
            json!({"spec": {"tolerations": [{"operator": "Exists"}]}}),
        );
        admit(&mut all);
        assert_eq!(
            all.object.unwrap()["spec"]["tolerations"]
                .as_array()
                .unwrap()
                .len(),
            1
        );
    }
}
