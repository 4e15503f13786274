//! NodeResourcesFit: filter reasons per resource, args, and the three
//! scoring strategies with hand-computed scores.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod};
use serde_json::{json, Value};

use super::*;

fn pod_named(name: &str, spec: Value) -> PodInfo {
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "default"},
        "spec": spec,
    }))
    .unwrap();
    PodInfo::new(Arc::new(pod))
}

/// A pod of one container per request list (`{}` for none).
fn pod(requests: &[Value]) -> PodInfo {
    pod_named("p", containers(requests))
}

fn containers(requests: &[Value]) -> Value {
    let containers: Vec<Value> = requests
        .iter()
        .enumerate()
        .map(|(i, r)| json!({"name": format!("c{i}"), "image": "i", "resources": {"requests": r}}))
        .collect();
    json!({ "containers": containers })
}

/// A node with this allocatable and pods requesting `existing`.
fn node(allocatable: Value, existing: &[Value]) -> NodeInfo {
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": "n"},
        "status": {"allocatable": allocatable},
    }))
    .unwrap();
    let mut info = NodeInfo::new(Arc::new(node));
    for (i, requests) in existing.iter().enumerate() {
        let existing = pod_named(&format!("e{i}"), containers(std::slice::from_ref(requests)));
        info.add_pod(Arc::new(existing));
    }
    info
}

fn plugin(args: Value) -> NodeResourcesFit {
    NodeResourcesFit::from_args(&args).unwrap()
}

fn filter(plugin: &NodeResourcesFit, pod: &PodInfo, node: &NodeInfo) -> Status {
    let mut state = CycleState::default();
    let (_, status) = plugin.pre_filter(&mut state, pod, &Snapshot::default());
    assert!(status.is_success());
    plugin.filter(&state, pod, node)
}

#[test]
fn filter_names_every_resource_the_node_lacks() {
    let allocatable = json!({"cpu": "10", "memory": "20", "pods": "32",
        "ephemeral-storage": "20", "example.com/aaa": "5", "hugepages-2Mi": "4"});
    // Used on the node: 5 cpu, 19 memory, 10 ephemeral, 2 aaa, 2 hugepages.
    let used = [
        json!({"cpu": "5", "memory": "19", "ephemeral-storage": "10",
        "example.com/aaa": "2", "hugepages-2Mi": "2"}),
    ];
    let fits = Status::success();
    let cases: Vec<(&str, PodInfo, Value, Vec<&str>)> = vec![
        ("no requests", pod(&[json!({})]), json!(null), vec![]),
        (
            "fits",
            pod(&[json!({"cpu": "5", "memory": "1"})]),
            json!(null),
            vec![],
        ),
        (
            "too much cpu",
            pod(&[json!({"cpu": "6", "memory": "1"})]),
            json!(null),
            vec!["Insufficient cpu"],
        ),
        (
            "too much of both",
            pod(&[
                json!({"cpu": "3", "memory": "1"}),
                json!({"cpu": "3", "memory": "1"}),
            ]),
            json!(null),
            vec!["Insufficient cpu", "Insufficient memory"],
        ),
        (
            "ephemeral storage",
            pod(&[json!({"ephemeral-storage": "11"})]),
            json!(null),
            vec!["Insufficient ephemeral-storage"],
        ),
        (
            "extended resource",
            pod(&[json!({"example.com/aaa": "4"})]),
            json!(null),
            vec!["Insufficient example.com/aaa"],
        ),
        (
            "unknown extended resource",
            pod(&[json!({"example.com/bbb": "1"})]),
            json!(null),
            vec!["Insufficient example.com/bbb"],
        ),
        (
            "ignored extended resource",
            pod(&[json!({"example.com/aaa": "4"})]),
            json!({"ignoredResources": ["example.com/aaa"]}),
            vec![],
        ),
        (
            "ignored resource group",
            pod(&[json!({"example.com/aaa": "4", "example.com/bbb": "1"})]),
            json!({"ignoredResourceGroups": ["example.com"]}),
            vec![],
        ),
        (
            "hugepages are never ignored",
            pod(&[json!({"hugepages-2Mi": "3"})]),
            json!({"ignoredResources": ["hugepages-2Mi"]}),
            vec!["Insufficient hugepages-2Mi"],
        ),
        (
            "kubernetes.io resources are not extended",
            pod(&[json!({"kubernetes.io/thing": "1"})]),
            json!({"ignoredResourceGroups": ["kubernetes.io"]}),
            vec!["Insufficient kubernetes.io/thing"],
        ),
        (
            "zero requests of a scalar are no request",
            pod(&[json!({"example.com/ccc": "0"})]),
            json!(null),
            vec![],
        ),
    ];
    for (name, pod, args, reasons) in cases {
        let status = filter(&plugin(args), &pod, &node(allocatable.clone(), &used));
        match reasons.is_empty() {
            true => assert_eq!(status, fits, "{name}"),
            false => {
                assert_eq!(status.code, Code::Unschedulable, "{name}");
                assert_eq!(status.reasons[..], reasons, "{name}");
            }
        }
    }
}

#[test]
fn init_containers_and_overhead_count() {
    let plugin = plugin(json!(null));
    let node = node(json!({"cpu": "4", "memory": "4Gi", "pods": "10"}), &[]);
    let big_init = pod_named(
        "p",
        json!({
            "initContainers": [{"name": "init", "image": "i", "resources": {"requests": {"cpu": "5"}}}],
            "containers": [{"name": "c", "image": "i", "resources": {"requests": {"cpu": "1"}}}],
        }),
    );
    assert_eq!(
        filter(&plugin, &big_init, &node).reasons[..],
        vec!["Insufficient cpu"]
    );
    let overhead = pod_named(
        "p",
        json!({
            "containers": [{"name": "c", "image": "i", "resources": {"requests": {"memory": "4Gi"}}}],
            "overhead": {"memory": "1"},
        }),
    );
    assert_eq!(
        filter(&plugin, &overhead, &node).reasons[..],
        vec!["Insufficient memory"]
    );
}

#[test]
fn a_full_node_has_too_many_pods_even_for_a_pod_without_requests() {
    let plugin = plugin(json!(null));
    let full = node(json!({"cpu": "4", "pods": "2"}), &[json!({}), json!({})]);
    let status = filter(&plugin, &pod(&[json!({})]), &full);
    assert_eq!(status.code, Code::Unschedulable);
    assert_eq!(status.reasons[..], vec!["Too many pods"]);
    let status = filter(&plugin, &pod(&[json!({"cpu": "5"})]), &full);
    assert_eq!(
        status.reasons[..],
        vec!["Too many pods", "Insufficient cpu"]
    );
    // A node that reports no pod capacity takes no pod.
    let status = filter(&plugin, &pod(&[json!({})]), &node(json!({"cpu": "4"}), &[]));
    assert_eq!(status.reasons[..], vec!["Too many pods"]);
    let roomy = node(json!({"cpu": "4", "pods": "3"}), &[json!({}), json!({})]);
    assert!(filter(&plugin, &pod(&[json!({})]), &roomy).is_success());
}

#[test]
fn filter_without_pre_filter_uses_the_pod_requests() {
    let plugin = plugin(json!(null));
    let node = node(json!({"cpu": "1", "pods": "10"}), &[]);
    let status = plugin.filter(&CycleState::default(), &pod(&[json!({"cpu": "2"})]), &node);
    assert_eq!(status.reasons[..], vec!["Insufficient cpu"]);
}

/// Scores on two nodes: (4 cpu, 8Gi) empty and (8 cpu, 8Gi) with a pod
/// requesting 2 cpu and 4Gi; the pod requests 1 cpu and 2Gi.
fn two_node_scores(args: Value, pod: &PodInfo) -> (i64, i64) {
    let plugin = plugin(args);
    let small = node(json!({"cpu": "4", "memory": "8Gi", "pods": "10"}), &[]);
    let busy = node(
        json!({"cpu": "8", "memory": "8Gi", "pods": "10"}),
        &[json!({"cpu": "2", "memory": "4Gi"})],
    );
    let mut state = CycleState::default();
    let nodes = [Arc::new(small.clone()), Arc::new(busy.clone())];
    assert!(plugin.pre_score(&mut state, pod, &nodes).is_success());
    let with_state = (
        plugin.score(&state, pod, &small).unwrap(),
        plugin.score(&state, pod, &busy).unwrap(),
    );
    let without = (
        plugin.score(&CycleState::default(), pod, &small).unwrap(),
        plugin.score(&CycleState::default(), pod, &busy).unwrap(),
    );
    assert_eq!(with_state, without, "PreScore state and its fallback agree");
    for state in [&state, &CycleState::default()] {
        let mut scores: Vec<NodeScore> = nodes
            .iter()
            .map(|n| NodeScore {
                name: n.shared_name(),
                score: -1,
            })
            .collect();
        plugin.score_nodes(state, pod, &nodes, &mut scores).unwrap();
        assert_eq!(
            (scores[0].score, scores[1].score),
            with_state,
            "all nodes at once score as one by one"
        );
    }
    with_state
}

fn one_cpu_two_gi() -> PodInfo {
    pod(&[json!({"cpu": "1", "memory": "2Gi"})])
}

#[test]
fn least_allocated_prefers_the_most_free_room() {
    // small: cpu 3000/4000 free → 75, memory 6/8 → 75.
    // busy: cpu 5000/8000 → 62, memory 2/8 → 25; (62 + 25) / 2 = 43.
    assert_eq!(two_node_scores(json!(null), &one_cpu_two_gi()), (75, 43));
    let weighted = json!({"scoringStrategy": {"type": "LeastAllocated",
        "resources": [{"name": "cpu", "weight": 2}, {"name": "memory", "weight": 1}]}});
    // busy: (62 * 2 + 25) / 3 = 49.
    assert_eq!(two_node_scores(weighted, &one_cpu_two_gi()), (75, 49));
}

#[test]
fn scores_count_missing_requests_as_the_non_zero_defaults() {
    // 100m of 4 cpu: 3900 * 100 / 4000 = 97; 200Mi of 8Gi: 7992 * 100 / 8192 = 97.
    // busy: the existing pod asked for 2 cpu, 4Gi: cpu 5900/8000 → 73,
    // memory (8192 - 4096 - 200) / 8192 → 47; (73 + 47) / 2 = 60.
    assert_eq!(two_node_scores(json!(null), &pod(&[json!({})])), (97, 60));
}

#[test]
fn most_allocated_prefers_the_fullest_node() {
    let args = json!({"scoringStrategy": {"type": "MostAllocated"}});
    // small: 25, 25; busy: cpu 3000/8000 → 37, memory 6/8 → 75; 112 / 2 = 56.
    assert_eq!(two_node_scores(args, &one_cpu_two_gi()), (25, 56));
}

#[test]
fn requested_to_capacity_ratio_follows_the_shape() {
    let shape = |points: Value| {
        json!({"scoringStrategy": {"type": "RequestedToCapacityRatio",
            "requestedToCapacityRatio": {"shape": points}}})
    };
    // Utilization 0 → 10, 100 → 0 (scaled ×10): like LeastAllocated but rounded.
    // small: 100 - 25 = 75 both. busy: cpu 100 - 37 = 63, memory 25; round(88 / 2) = 44.
    let least = shape(json!([{"utilization": 0, "score": 10}, {"utilization": 100, "score": 0}]));
    assert_eq!(two_node_scores(least, &one_cpu_two_gi()), (75, 44));
    // A peak at 50%: 0 → 0, 50 → 100, 100 → 20.
    // small: 25% → 50 both. busy: cpu 37% → 74, memory 75% → 100 - 80 * 25 / 50 = 60;
    // round(134 / 2) = 67.
    let peak = shape(json!([
        {"utilization": 0, "score": 0},
        {"utilization": 50, "score": 10},
        {"utilization": 100, "score": 2},
    ]));
    assert_eq!(two_node_scores(peak, &one_cpu_two_gi()), (50, 67));
}

#[test]
fn requested_to_capacity_ratio_leaves_out_resources_scoring_zero() {
    let args = json!({"scoringStrategy": {"type": "RequestedToCapacityRatio",
        "requestedToCapacityRatio": {"shape": [{"utilization": 0, "score": 0}, {"utilization": 100, "score": 10}]}}});
    let plugin = plugin(args);
    let huge_cpu = node(json!({"cpu": "10000", "memory": "4Gi", "pods": "10"}), &[]);
    let pod = pod(&[json!({"cpu": "1", "memory": "2Gi"})]);
    // cpu at 0% scores 0 and does not count; memory at 50% → 50, alone.
    assert_eq!(
        plugin.score(&CycleState::default(), &pod, &huge_cpu),
        Ok(50)
    );
    // Over capacity counts as 100% utilization.
    let small = node(json!({"cpu": "1", "memory": "1Gi", "pods": "10"}), &[]);
    assert_eq!(plugin.score(&CycleState::default(), &pod, &small), Ok(100));
}

#[test]
fn extended_resources_score_only_when_requested() {
    let args = json!({"scoringStrategy": {"type": "LeastAllocated",
        "resources": [{"name": "cpu", "weight": 1}, {"name": "example.com/gpu", "weight": 3}]}});
    let plugin = plugin(args);
    let gpu_node = node(
        json!({"cpu": "4", "example.com/gpu": "4", "pods": "10"}),
        &[],
    );
    let no_gpu = pod(&[json!({"cpu": "1"})]);
    // Only cpu: 75.
    assert_eq!(
        plugin.score(&CycleState::default(), &no_gpu, &gpu_node),
        Ok(75)
    );
    let one_gpu = pod(&[json!({"cpu": "2", "example.com/gpu": "1"})]);
    // cpu 50, gpu 75: (50 + 75 * 3) / 4 = 68.
    assert_eq!(
        plugin.score(&CycleState::default(), &one_gpu, &gpu_node),
        Ok(68)
    );
    // A node without the resource scores on cpu alone.
    let plain = node(json!({"cpu": "4", "pods": "10"}), &[]);
    assert_eq!(
        plugin.score(&CycleState::default(), &one_gpu, &plain),
        Ok(50)
    );
}

#[test]
fn args_are_defaulted_and_validated() {
    let default = plugin(json!(null));
    assert_eq!(default.strategy, Strategy::LeastAllocated);
    assert_eq!(default.resources, allocation::default_resources());
    let typed = plugin(json!({"apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "NodeResourcesFitArgs", "scoringStrategy": {"type": "MostAllocated",
        "resources": [{"name": "cpu"}]}}));
    assert_eq!(typed.strategy, Strategy::MostAllocated);
    assert_eq!(
        typed.resources,
        vec![ResourceSpec {
            name: "cpu".into(),
            weight: 1,
            kind: allocation::Kind::Cpu,
        }]
    );
    let rejected = [
        (
            json!({"scoringStrategy": {}}),
            "scoringStrategy.type: Unsupported value: \"\"",
        ),
        (
            json!({"scoringStrategy": {"type": "Random"}}),
            "Unsupported value: \"Random\"",
        ),
        (
            json!({"scoringStrategy": {"type": "LeastAllocated", "resources": [{"name": "cpu", "weight": 101}]}}),
            "resource weight of cpu not in valid range (0, 100]",
        ),
        (
            json!({"scoringStrategy": {"type": "RequestedToCapacityRatio"}}),
            "must be specified when type is RequestedToCapacityRatio",
        ),
        (
            json!({"scoringStrategy": {"type": "RequestedToCapacityRatio", "requestedToCapacityRatio": {"shape": []}}}),
            "at least one point must be specified",
        ),
        (
            json!({"scoringStrategy": {"type": "RequestedToCapacityRatio", "requestedToCapacityRatio":
                {"shape": [{"utilization": 50, "score": 1}, {"utilization": 50, "score": 2}]}}}),
            "values must be sorted in increasing order",
        ),
        (
            json!({"scoringStrategy": {"type": "RequestedToCapacityRatio", "requestedToCapacityRatio":
                {"shape": [{"utilization": 0, "score": 11}]}}}),
            "score: Invalid value: 11: not in valid range [0, 10]",
        ),
        (
            json!({"scoringStrategy": {"type": "RequestedToCapacityRatio", "requestedToCapacityRatio":
                {"shape": [{"utilization": 101, "score": 1}]}}}),
            "utilization: Invalid value: 101: not in valid range [0, 100]",
        ),
        (
            json!({"ignoredResourceGroups": ["example.com/x"]}),
            "can't contain '/'",
        ),
        (
            json!({"ignoredResources": ["bad name!"]}),
            "ignoredResources[0]",
        ),
        (
            json!({"ignoredResource": ["x"]}),
            "unknown field `ignoredResource`",
        ),
        (json!([1]), "NodeResourcesFit args"),
    ];
    for (args, message) in rejected {
        match NodeResourcesFit::from_args(&args) {
            Ok(_) => panic!("{args} was accepted"),
            Err(e) => assert!(e.contains(message), "{args}: {e}"),
        }
    }
}

#[test]
fn resource_names_are_classified_as_kubernetes_does() {
    use allocation::{is_extended_resource_name, is_scalar_resource_name};
    assert!(is_extended_resource_name("example.com/gpu"));
    assert!(!is_extended_resource_name("cpu"));
    assert!(!is_extended_resource_name("kubernetes.io/x"));
    assert!(!is_extended_resource_name("requests.example.com/gpu"));
    assert!(!is_extended_resource_name("example.com/bad name"));
    assert!(is_scalar_resource_name("hugepages-1Gi"));
    assert!(is_scalar_resource_name("attachable-volumes-csi-x"));
    assert!(is_scalar_resource_name("kubernetes.io/x"));
    assert!(!is_scalar_resource_name("memory"));
    assert!(!is_scalar_resource_name("pods"));
}
