//! NodeResourcesBalancedAllocation: scores from the spread of requested
//! fractions, computed by hand, and its args.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod};
use serde_json::{json, Value};

use super::*;
use crate::framework::Code;

fn pod_named(name: &str, requests: Value) -> PodInfo {
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"containers": [{"name": "c", "image": "i", "resources": {"requests": requests}}]},
    }))
    .unwrap();
    PodInfo::new(Arc::new(pod))
}

fn node(allocatable: Value, existing: &[Value]) -> NodeInfo {
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": "n"},
        "status": {"allocatable": allocatable},
    }))
    .unwrap();
    let mut info = NodeInfo::new(Arc::new(node));
    for (i, requests) in existing.iter().enumerate() {
        info.add_pod(Arc::new(pod_named(&format!("e{i}"), requests.clone())));
    }
    info
}

fn plugin(args: Value) -> NodeResourcesBalancedAllocation {
    NodeResourcesBalancedAllocation::from_args(&args).unwrap()
}

/// PreScore then Score, checking the fallback without PreScore agrees.
fn score(plugin: &NodeResourcesBalancedAllocation, pod: &PodInfo, node: &NodeInfo) -> i64 {
    let mut state = CycleState::default();
    let status = plugin.pre_score(&mut state, pod, &[Arc::new(node.clone())]);
    assert!(status.is_success(), "{status}");
    let score = plugin.score(&state, pod, node).unwrap();
    assert_eq!(plugin.score(&CycleState::default(), pod, node), Ok(score));
    let nodes = [Arc::new(node.clone())];
    for state in [&state, &CycleState::default()] {
        let mut scores = [NodeScore {
            name: node.shared_name(),
            score: -1,
        }];
        plugin.score_nodes(state, pod, &nodes, &mut scores).unwrap();
        assert_eq!(
            scores[0].score, score,
            "all nodes at once score as one by one"
        );
    }
    score
}

#[test]
fn balanced_nodes_score_highest() {
    let plugin = plugin(json!(null));
    let pod = pod_named("p", json!({"cpu": "1", "memory": "2Gi"}));
    let cases = [
        // 1/4 cpu, 2/8 memory: no spread.
        ("even", node(json!({"cpu": "4", "memory": "8Gi"}), &[]), 100),
        // (1 + 1)/4 cpu, 2/4 memory.
        (
            "even with a pod",
            node(json!({"cpu": "4", "memory": "4Gi"}), &[json!({"cpu": "1"})]),
            100,
        ),
        // 0.25 and 0.125: std 0.0625 → 93.75.
        (
            "memory rich",
            node(json!({"cpu": "4", "memory": "16Gi"}), &[]),
            93,
        ),
        // 1.0 and 0.125: std 0.4375 → 56.25.
        (
            "cpu full",
            node(
                json!({"cpu": "2", "memory": "16Gi"}),
                &[json!({"cpu": "1"})],
            ),
            56,
        ),
        // 1 cpu of 500m is capped at 1, memory 0.5: std 0.25.
        (
            "over capacity",
            node(json!({"cpu": "500m", "memory": "4Gi"}), &[]),
            75,
        ),
        // No memory on the node: memory is left out, one fraction has no spread.
        ("no memory", node(json!({"cpu": "8"}), &[]), 100),
    ];
    for (name, node, want) in cases {
        assert_eq!(score(&plugin, &pod, &node), want, "{name}");
    }
}

#[test]
fn requests_count_without_the_non_zero_defaults() {
    let plugin = plugin(json!(null));
    // The best-effort pod already there adds nothing: 500m/1 cpu and 4Gi/8Gi.
    let node = node(json!({"cpu": "1", "memory": "8Gi"}), &[json!({})]);
    let pod = pod_named("p", json!({"cpu": "500m", "memory": "4Gi"}));
    assert_eq!(score(&plugin, &pod, &node), 100);
}

#[test]
fn three_resources_use_the_standard_deviation() {
    let plugin = plugin(json!({"resources": [
        {"name": "cpu", "weight": 1}, {"name": "memory"}, {"name": "ephemeral-storage", "weight": 1}]}));
    let node = node(
        json!({"cpu": "4", "memory": "4Gi", "ephemeral-storage": "4Gi"}),
        &[],
    );
    let pod = pod_named(
        "p",
        json!({"cpu": "1", "memory": "2Gi", "ephemeral-storage": "3Gi"}),
    );
    // 0.25, 0.5, 0.75: mean 0.5, std sqrt(0.125 / 3) = 0.2041 → 79.58.
    assert_eq!(score(&plugin, &pod, &node), 79);
}

#[test]
fn extended_resources_count_only_when_requested() {
    let plugin = plugin(json!({"resources": [
        {"name": "cpu"}, {"name": "memory"}, {"name": "example.com/gpu"}]}));
    let node = node(
        json!({"cpu": "4", "memory": "8Gi", "example.com/gpu": "4"}),
        &[],
    );
    let no_gpu = pod_named("p", json!({"cpu": "1", "memory": "2Gi"}));
    assert_eq!(score(&plugin, &no_gpu, &node), 100);
    // 0.25, 0.25, 1.0: mean 0.5, std sqrt(0.375 / 3) = 0.3536 → 64.6.
    let gpu = pod_named(
        "p",
        json!({"cpu": "1", "memory": "2Gi", "example.com/gpu": "4"}),
    );
    assert_eq!(score(&plugin, &gpu, &node), 64);
}

#[test]
fn best_effort_pods_are_skipped() {
    let plugin = plugin(json!(null));
    let node = node(json!({"cpu": "4", "memory": "8Gi"}), &[json!({"cpu": "3"})]);
    let pod = pod_named("p", json!({}));
    let mut state = CycleState::default();
    let status = plugin.pre_score(&mut state, &pod, &[Arc::new(node.clone())]);
    assert_eq!(status.code, Code::Skip);
    assert_eq!(plugin.score(&CycleState::default(), &pod, &node), Ok(0));
    // A pod asking for memory only is scored: cpu 3/4, memory 4/8.
    let memory_only = pod_named("p", json!({"memory": "4Gi"}));
    assert_eq!(score(&plugin, &memory_only, &node), 87);
}

#[test]
fn args_are_defaulted_and_validated() {
    assert_eq!(
        plugin(json!(null)).resources,
        allocation::default_resources()
    );
    assert_eq!(
        plugin(json!({"kind": "NodeResourcesBalancedAllocationArgs"}))
            .resources
            .len(),
        2
    );
    let rejected = [
        (
            json!({"resources": [{"name": "cpu", "weight": 2}]}),
            "resources[0].weight: Invalid value: 2: must be 1",
        ),
        (
            json!({"resources": [{"name": "cpu"}, {"name": "cpu"}]}),
            "resources[1].name: Duplicate value",
        ),
        (json!({"resource": []}), "unknown field `resource`"),
        (json!("x"), "NodeResourcesBalancedAllocation args"),
    ];
    for (args, message) in rejected {
        match NodeResourcesBalancedAllocation::from_args(&args) {
            Ok(_) => panic!("{args} was accepted"),
            Err(e) => assert!(e.contains(message), "{args}: {e}"),
        }
    }
}
