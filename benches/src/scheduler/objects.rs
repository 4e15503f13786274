//! The objects a scheduler run writes, as the JSON it POSTs: plain Node
//! objects (no kubelet behind them), the measured pods of each workload,
//! the warm-up pod and the two PriorityClasses. Shapes only; nothing here
//! talks to the API.

use bytes::Bytes;
use serde_json::{json, Value};

use super::workload::Workload;

pub const NAMESPACE: &str = "sched-bench";
/// Nodes are spread over this many zones, `zone-0`…`zone-9`.
pub const ZONES: usize = 10;
pub const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";
pub const ZONE_LABEL: &str = "topology.kubernetes.io/zone";
/// Carried by every other node (even indices): the node-affinity workload
/// requires it.
pub const POOL_LABEL: &str = "skiff-bench/pool";
pub const POOL_VALUE: &str = "affinity";
/// Anti-affinity pods carry their group here, and repel their group.
pub const GROUP_LABEL: &str = "skiff-bench/group";
/// What one node offers (and has as capacity).
pub const NODE_CPU_CORES: u64 = 32;
pub const NODE_MEMORY: &str = "256Gi";
pub const NODE_PODS: usize = 110;
/// The preemption workload's pods each ask for this much CPU, so that
/// `NODE_CPU_CORES / PREEMPTION_POD_CPU` low-priority pods fill a node and
/// every high-priority pod must evict exactly one of them.
pub const PREEMPTION_POD_CPU: u64 = 8;
pub const FILLERS_PER_NODE: usize = (NODE_CPU_CORES / PREEMPTION_POD_CPU) as usize;
pub const LOW_PRIORITY_CLASS: &str = "bench-low";
pub const HIGH_PRIORITY_CLASS: &str = "bench-high";
/// The pod that shows the scheduler has seen every node (see `warmup_pod`).
pub const WARMUP_POD: &str = "warmup";

pub fn pods_path() -> String {
    format!("/api/v1/namespaces/{NAMESPACE}/pods")
}

pub fn namespace() -> Bytes {
    to_bytes(json!({
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": NAMESPACE},
    }))
}

pub fn node_name(index: usize) -> String {
    format!("node-{index:05}")
}

/// The index in `node-NNNNN`.
pub fn node_index(name: &str) -> Option<usize> {
    name.strip_prefix("node-")?.parse().ok()
}

pub fn zone_of(node: usize) -> usize {
    node % ZONES
}

pub fn in_pool(node: usize) -> bool {
    node.is_multiple_of(2)
}

/// Node `index`: Ready, 32 cores, 256Gi, 110 pods; its hostname, its zone
/// (index mod 10) and, on even indices, the pool label.
pub fn node(index: usize) -> (String, Bytes) {
    let name = node_name(index);
    let mut labels = json!({
        HOSTNAME_LABEL: name,
        ZONE_LABEL: format!("zone-{}", zone_of(index)),
        "kubernetes.io/os": "linux",
    });
    if in_pool(index) {
        labels[POOL_LABEL] = json!(POOL_VALUE);
    }
    let resources = json!({
        "cpu": NODE_CPU_CORES.to_string(),
        "memory": NODE_MEMORY,
        "pods": NODE_PODS.to_string(),
    });
    let body = to_bytes(json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": {},
        "status": {
            "capacity": resources,
            "allocatable": resources,
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
        },
    }));
    (name, body)
}

/// What kind of pod to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PodKind {
    /// The measured pods of a workload.
    Measured(Workload),
    /// The preemption workload's low-priority pods that fill the nodes.
    Filler,
}

/// Measured pods are `<prefix>-NNNNN`; see `pod_index`.
pub fn pod_prefix(kind: PodKind) -> &'static str {
    match kind {
        PodKind::Measured(Workload::Preemption) => "high",
        PodKind::Measured(_) => "pod",
        PodKind::Filler => "low",
    }
}

pub fn pod_name(kind: PodKind, index: usize) -> String {
    format!("{}-{index:05}", pod_prefix(kind))
}

/// The index in `<prefix>-NNNNN`, for pods of `prefix` only.
pub fn pod_index(prefix: &str, name: &str) -> Option<usize> {
    name.strip_prefix(prefix)?.strip_prefix('-')?.parse().ok()
}

/// Pod `index` of `kind`: one pause container asking for 100m and 500Mi
/// (the preemption workload's pods: 8 cores), terminationGracePeriodSeconds
/// 0 so a victim goes at once with no kubelet, and the workload's
/// constraint. `group_size`: anti-affinity pods per group.
pub fn pod(kind: PodKind, index: usize, group_size: usize) -> (String, Bytes) {
    let name = pod_name(kind, index);
    let cpu = match kind {
        PodKind::Measured(Workload::Preemption) | PodKind::Filler => PREEMPTION_POD_CPU.to_string(),
        PodKind::Measured(_) => "100m".to_string(),
    };
    let mut labels = json!({"app": "skiff-bench", "workload": kind_label(kind)});
    let mut spec = json!({
        "terminationGracePeriodSeconds": 0,
        "containers": [{
            "name": "pause",
            "image": "registry.k8s.io/pause:3.10",
            "resources": {"requests": {"cpu": cpu, "memory": "500Mi"}},
        }],
    });
    match kind {
        PodKind::Filler => spec["priorityClassName"] = json!(LOW_PRIORITY_CLASS),
        PodKind::Measured(workload) => {
            constrain(workload, index, group_size, &mut labels, &mut spec)
        }
    }
    let body = to_bytes(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": labels},
        "spec": spec,
    }));
    (name, body)
}

fn kind_label(kind: PodKind) -> &'static str {
    match kind {
        PodKind::Filler => "preemption-filler",
        PodKind::Measured(workload) => workload.id(),
    }
}

/// The anti-affinity group of measured pod `index`.
pub fn group_of(index: usize, group_size: usize) -> usize {
    index / group_size.max(1)
}

/// Adds the workload's scheduling constraint to a measured pod.
fn constrain(
    workload: Workload,
    index: usize,
    group_size: usize,
    labels: &mut Value,
    spec: &mut Value,
) {
    match workload {
        Workload::Basic => {}
        Workload::AntiAffinity => {
            let group = format!("g{}", group_of(index, group_size));
            labels[GROUP_LABEL] = json!(group);
            spec["affinity"] = json!({"podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [{
                    "labelSelector": {"matchLabels": {GROUP_LABEL: group}},
                    "topologyKey": HOSTNAME_LABEL,
                }],
            }});
        }
        Workload::TopologySpread => {
            spec["topologySpreadConstraints"] = json!([{
                "maxSkew": 1,
                "topologyKey": ZONE_LABEL,
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": {"workload": workload.id()}},
            }]);
        }
        Workload::NodeAffinity => {
            spec["affinity"] = json!({"nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [{
                        "key": POOL_LABEL, "operator": "In", "values": [POOL_VALUE],
                    }]}],
                },
            }});
        }
        Workload::Preemption => spec["priorityClassName"] = json!(HIGH_PRIORITY_CLASS),
    }
}

/// A pod that fits only on `last_node`: once it is bound the scheduler is
/// leading and its cache holds every node (nodes are created in order and
/// one watch delivers them in order), so no measured pod meets a
/// half-known cluster. It asks for nothing and matches no workload.
pub fn warmup_pod(last_node: &str) -> Bytes {
    to_bytes(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": WARMUP_POD, "namespace": NAMESPACE, "labels": {"app": "skiff-bench-warmup"}},
        "spec": {
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.10"}],
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchFields": [{
                    "key": "metadata.name", "operator": "In", "values": [last_node],
                }]}],
            }}},
        },
    }))
}

/// The preemption workload's PriorityClasses, low then high.
pub fn priority_classes() -> [(&'static str, Bytes); 2] {
    let class = |name: &str, value: i32| {
        to_bytes(json!({
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": name},
            "value": value,
        }))
    };
    [
        (LOW_PRIORITY_CLASS, class(LOW_PRIORITY_CLASS, 10)),
        (HIGH_PRIORITY_CLASS, class(HIGH_PRIORITY_CLASS, 1000)),
    ]
}

fn to_bytes(value: Value) -> Bytes {
    // A `Value` always serializes.
    Bytes::from(value.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(bytes: &Bytes) -> Value {
        serde_json::from_slice(bytes).unwrap()
    }

    #[test]
    fn nodes_have_zones_and_half_carry_the_pool_label() {
        let (name, body) = node(13);
        let odd = parse(&body);
        assert_eq!(name, "node-00013");
        assert_eq!(odd["metadata"]["labels"][ZONE_LABEL], "zone-3");
        assert_eq!(odd["metadata"]["labels"][HOSTNAME_LABEL], "node-00013");
        assert!(odd["metadata"]["labels"].get(POOL_LABEL).is_none());
        assert_eq!(odd["status"]["allocatable"]["pods"], "110");
        let even = parse(&node(12).1);
        assert_eq!(even["metadata"]["labels"][POOL_LABEL], POOL_VALUE);
        assert_eq!(node_index("node-00013"), Some(13));
    }

    #[test]
    fn anti_affinity_pods_repel_their_group() {
        let (name, body) = pod(PodKind::Measured(Workload::AntiAffinity), 250, 100);
        let pod = parse(&body);
        assert_eq!(pod_index("pod", &name), Some(250));
        assert_eq!(pod["metadata"]["labels"][GROUP_LABEL], "g2");
        let term = &pod["spec"]["affinity"]["podAntiAffinity"]
            ["requiredDuringSchedulingIgnoredDuringExecution"][0];
        assert_eq!(term["labelSelector"]["matchLabels"][GROUP_LABEL], "g2");
        assert_eq!(term["topologyKey"], HOSTNAME_LABEL);
    }

    #[test]
    fn preemption_pods_have_priorities_and_fill_a_node_by_four() {
        let low = parse(&pod(PodKind::Filler, 0, 1).1);
        let high = parse(&pod(PodKind::Measured(Workload::Preemption), 0, 1).1);
        assert_eq!(low["spec"]["priorityClassName"], LOW_PRIORITY_CLASS);
        assert_eq!(high["spec"]["priorityClassName"], HIGH_PRIORITY_CLASS);
        assert_eq!(high["spec"]["terminationGracePeriodSeconds"], 0);
        assert_eq!(FILLERS_PER_NODE, 4);
        assert_eq!(pod_index("high", "low-00001"), None);
    }
}
