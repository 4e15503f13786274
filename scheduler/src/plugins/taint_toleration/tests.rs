use k8s_openapi::api::core::v1::Pod;
use serde_json::{json, Value};

use super::*;
use crate::framework::Code;

/// `None` when the node passes, else the code and reason.
type Outcome = Option<(Code, String)>;

fn node(name: &str, taints: Value, conditions: Value) -> Arc<NodeInfo> {
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"taints": taints},
        "status": {"conditions": conditions, "allocatable": {"cpu": "4", "pods": "110"}},
    }))
    .unwrap();
    Arc::new(NodeInfo::new(Arc::new(node)))
}

fn pod(tolerations: Value) -> PodInfo {
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "p", "namespace": "default"},
        "spec": {"containers": [{"name": "c", "image": "i"}], "tolerations": tolerations},
    }))
    .unwrap();
    PodInfo::new(Arc::new(pod))
}

fn taint(key: &str, value: &str, effect: &str) -> Value {
    json!({"key": key, "value": value, "effect": effect})
}

fn condition(kind: &str, status: &str) -> Value {
    json!({"type": kind, "status": status})
}

fn rejected(reason: &str) -> Outcome {
    Some((Code::UnschedulableAndUnresolvable, reason.to_string()))
}

fn filter(tolerations: Value, node: &NodeInfo) -> Outcome {
    let plugin = new(&Value::Null).unwrap();
    let status = plugin.filter(&CycleState::default(), &pod(tolerations), node);
    match status.is_success() {
        true => None,
        false => Some((status.code, status.message())),
    }
}

#[test]
fn filter_needs_a_toleration_for_every_no_schedule_and_no_execute_taint() {
    let gpu = || json!([taint("dedicated", "gpu", "NoSchedule")]);
    let cases: Vec<(&str, Value, Value, Outcome)> = vec![
        ("no taints", json!([]), json!([]), None),
        (
            "untolerated NoSchedule",
            gpu(),
            json!([]),
            rejected("node(s) had untolerated taint {dedicated: gpu}"),
        ),
        (
            "untolerated NoExecute",
            json!([taint("evict", "now", "NoExecute")]),
            json!([]),
            rejected("node(s) had untolerated taint {evict: now}"),
        ),
        (
            "PreferNoSchedule does not filter",
            json!([taint("soft", "x", "PreferNoSchedule")]),
            json!([]),
            None,
        ),
        (
            "Equal with the same value",
            gpu(),
            json!([{"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}]),
            None,
        ),
        (
            "no operator means Equal",
            gpu(),
            json!([{"key": "dedicated", "value": "gpu"}]),
            None,
        ),
        (
            "Equal with another value",
            gpu(),
            json!([{"key": "dedicated", "operator": "Equal", "value": "cpu", "effect": "NoSchedule"}]),
            rejected("node(s) had untolerated taint {dedicated: gpu}"),
        ),
        (
            "Exists on the key",
            gpu(),
            json!([{"key": "dedicated", "operator": "Exists"}]),
            None,
        ),
        (
            "Exists on another key",
            gpu(),
            json!([{"key": "other", "operator": "Exists"}]),
            rejected("node(s) had untolerated taint {dedicated: gpu}"),
        ),
        (
            "an empty key with Exists tolerates everything",
            json!([taint("a", "1", "NoSchedule"), taint("b", "2", "NoExecute")]),
            json!([{"operator": "Exists"}]),
            None,
        ),
        (
            "another effect does not tolerate",
            gpu(),
            json!([{"key": "dedicated", "operator": "Exists", "effect": "NoExecute"}]),
            rejected("node(s) had untolerated taint {dedicated: gpu}"),
        ),
        (
            "an unknown operator tolerates nothing",
            gpu(),
            json!([{"key": "dedicated", "operator": "Gt", "value": "gpu"}]),
            rejected("node(s) had untolerated taint {dedicated: gpu}"),
        ),
        (
            "the first untolerated taint is reported",
            json!([
                taint("a", "1", "NoSchedule"),
                taint("b", "2", "NoSchedule"),
                taint("c", "3", "NoExecute")
            ]),
            json!([{"key": "a", "operator": "Exists"}]),
            rejected("node(s) had untolerated taint {b: 2}"),
        ),
        (
            "a taint without a value",
            json!([{"key": "bare", "effect": "NoSchedule"}]),
            json!([]),
            rejected("node(s) had untolerated taint {bare: }"),
        ),
    ];
    for (name, taints, tolerations, want) in cases {
        let node = node("n1", taints, json!([]));
        assert_eq!(filter(tolerations, &node), want, "{name}");
    }
}

#[test]
fn node_conditions_count_as_their_lifecycle_taints() {
    let default_tolerations = json!([
        {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
        {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
    ]);
    let cases: Vec<(&str, Value, Value, Value, Outcome)> = vec![
        (
            "no conditions reported yet",
            json!([]),
            json!([]),
            json!([]),
            None,
        ),
        (
            "Ready",
            json!([]),
            json!([condition("Ready", "True")]),
            json!([]),
            None,
        ),
        (
            "NotReady",
            json!([]),
            json!([condition("Ready", "False")]),
            default_tolerations.clone(),
            rejected("node(s) had untolerated taint {node.kubernetes.io/not-ready: }"),
        ),
        (
            "Unreachable",
            json!([]),
            json!([condition("Ready", "Unknown")]),
            default_tolerations.clone(),
            rejected("node(s) had untolerated taint {node.kubernetes.io/unreachable: }"),
        ),
        (
            "memory pressure",
            json!([]),
            json!([
                condition("Ready", "True"),
                condition("MemoryPressure", "True")
            ]),
            json!([]),
            rejected("node(s) had untolerated taint {node.kubernetes.io/memory-pressure: }"),
        ),
        (
            "no memory pressure",
            json!([]),
            json!([condition("MemoryPressure", "False")]),
            json!([]),
            None,
        ),
        (
            "disk pressure",
            json!([]),
            json!([condition("DiskPressure", "True")]),
            json!([]),
            rejected("node(s) had untolerated taint {node.kubernetes.io/disk-pressure: }"),
        ),
        (
            "pid pressure",
            json!([]),
            json!([condition("PIDPressure", "True")]),
            json!([]),
            rejected("node(s) had untolerated taint {node.kubernetes.io/pid-pressure: }"),
        ),
        (
            "network unavailable",
            json!([]),
            json!([condition("NetworkUnavailable", "True")]),
            json!([]),
            rejected("node(s) had untolerated taint {node.kubernetes.io/network-unavailable: }"),
        ),
        (
            "a tolerated pressure",
            json!([]),
            json!([condition("DiskPressure", "True")]),
            json!([{"key": "node.kubernetes.io/disk-pressure", "operator": "Exists", "effect": "NoSchedule"}]),
            None,
        ),
        (
            "the node's own taints come first",
            json!([taint("dedicated", "gpu", "NoSchedule")]),
            json!([condition("Ready", "False")]),
            json!([]),
            rejected("node(s) had untolerated taint {dedicated: gpu}"),
        ),
        (
            "a taint the node carries is not added twice",
            json!([{"key": "node.kubernetes.io/not-ready", "value": "x", "effect": "NoSchedule"}]),
            json!([condition("Ready", "False")]),
            json!([{"key": "node.kubernetes.io/not-ready", "operator": "Equal", "value": "x"}]),
            None,
        ),
    ];
    for (name, taints, conditions, tolerations, want) in cases {
        let node = node("n1", taints, conditions);
        assert_eq!(filter(tolerations, &node), want, "{name}");
    }
}

#[test]
fn effective_taints_lists_own_then_condition_taints() {
    let node = node(
        "n1",
        json!([taint("a", "1", "NoSchedule")]),
        json!([
            condition("Ready", "False"),
            condition("PIDPressure", "True")
        ]),
    );
    let keys: Vec<String> = effective_taints(&node.node)
        .into_iter()
        .map(|t| t.key)
        .collect();
    assert_eq!(
        keys,
        [
            "a",
            "node.kubernetes.io/not-ready",
            "node.kubernetes.io/pid-pressure"
        ]
    );
}

fn scores(tolerations: Value, nodes: &[Arc<NodeInfo>]) -> Vec<i64> {
    let plugin = new(&Value::Null).unwrap();
    let pod = pod(tolerations);
    let mut state = CycleState::default();
    assert!(plugin.pre_score(&mut state, &pod, nodes).is_success());
    let mut scores: Vec<NodeScore> = nodes
        .iter()
        .map(|n| NodeScore {
            name: n.name().into(),
            score: plugin.score(&state, &pod, n).unwrap(),
        })
        .collect();
    assert_eq!(
        plugin.normalize_scores(&state, &pod, &mut scores),
        Some(Status::success())
    );
    scores.into_iter().map(|s| s.score).collect()
}

#[test]
fn score_prefers_fewer_intolerable_prefer_no_schedule_taints() {
    let nodes = vec![
        node("n0", json!([]), json!([])),
        node(
            "n1",
            json!([
                taint("a", "1", "PreferNoSchedule"),
                taint("x", "1", "NoSchedule")
            ]),
            json!([]),
        ),
        node(
            "n2",
            json!([
                taint("a", "1", "PreferNoSchedule"),
                taint("b", "2", "PreferNoSchedule")
            ]),
            json!([]),
        ),
        node(
            "n3",
            json!([taint("b", "2", "PreferNoSchedule")]),
            json!([]),
        ),
    ];
    assert_eq!(scores(json!([]), &nodes), vec![100, 50, 0, 50]);
    // Tolerating `a` (with an empty effect) leaves only `b` to count.
    assert_eq!(
        scores(json!([{"key": "a", "operator": "Exists"}]), &nodes),
        vec![100, 100, 0, 0]
    );
    // A NoSchedule toleration does not tolerate PreferNoSchedule taints.
    assert_eq!(
        scores(
            json!([{"key": "a", "operator": "Exists", "effect": "NoSchedule"}]),
            &nodes
        ),
        vec![100, 50, 0, 50]
    );
    // Nothing intolerable anywhere: every node gets the top score.
    assert_eq!(
        scores(json!([{"operator": "Exists"}]), &nodes),
        vec![100, 100, 100, 100]
    );
}

#[test]
fn args_are_refused() {
    assert!(new(&json!({})).is_ok());
    assert!(new(&json!({"kind": "TaintTolerationArgs"})).is_ok());
    assert!(new(&json!({"weight": 3})).is_err());
    assert!(new(&json!([1])).is_err());
}
