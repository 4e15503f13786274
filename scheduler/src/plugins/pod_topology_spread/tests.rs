//! PodTopologySpread against tables of nodes and pods, with the decisions
//! kube-scheduler makes for them.

use std::sync::Arc;

use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{Node, Pod, Service};
use serde_json::{json, Value};

use super::*;
use crate::framework::{Code, NodeScore};

/// A pod from the JSON of its metadata and spec (containers added).
fn pod(metadata: Value, spec: Value) -> PodInfo {
    let mut spec = spec;
    spec["containers"] = json!([{"name": "c", "image": "i"}]);
    let mut metadata = metadata;
    if metadata.get("namespace").is_none() {
        metadata["namespace"] = json!("default");
    }
    let pod: Pod = serde_json::from_value(json!({"metadata": metadata, "spec": spec})).unwrap();
    PodInfo::new(Arc::new(pod))
}

fn labeled(name: &str, labels: Value) -> PodInfo {
    pod(json!({"name": name, "labels": labels}), json!({}))
}

fn node(name: &str, labels: Value, taints: Value) -> NodeInfo {
    let mut labels = labels;
    labels["kubernetes.io/hostname"] = json!(name);
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels},
        "spec": {"taints": taints},
        "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"}},
    }))
    .unwrap();
    NodeInfo::new(Arc::new(node))
}

/// n1, n2 in zone z1; n3, n4 in zone z2; n5 without a zone.
fn nodes() -> Vec<NodeInfo> {
    vec![
        node("n1", json!({"zone": "z1"}), Value::Null),
        node("n2", json!({"zone": "z1"}), Value::Null),
        node("n3", json!({"zone": "z2"}), Value::Null),
        node("n4", json!({"zone": "z2"}), Value::Null),
        node("n5", json!({}), Value::Null),
    ]
}

/// `pods[i]` go on node `i`.
fn snapshot_with(
    nodes: Vec<NodeInfo>,
    pods: Vec<Vec<PodInfo>>,
    cluster: ClusterObjects,
) -> Snapshot {
    let mut pods = pods.into_iter();
    let nodes = nodes
        .into_iter()
        .map(|mut info| {
            for p in pods.next().unwrap_or_default() {
                info.add_pod(Arc::new(p));
            }
            Arc::new(info)
        })
        .collect();
    Snapshot::new(nodes, Arc::new(cluster))
}

fn snapshot(pods: Vec<Vec<PodInfo>>) -> Snapshot {
    snapshot_with(nodes(), pods, ClusterObjects::default())
}

fn web(n: usize) -> Vec<PodInfo> {
    (0..n)
        .map(|i| labeled(&format!("w{i}"), json!({"app": "web"})))
        .collect()
}

fn plugin(args: Value) -> PodTopologySpread {
    PodTopologySpread::from_args(&args).unwrap()
}

fn spread(constraints: Value) -> PodInfo {
    pod(
        json!({"name": "incoming", "labels": {"app": "web", "rev": "2"}}),
        json!({"topologySpreadConstraints": constraints}),
    )
}

fn constraint(key: &str, skew: i32, when: &str) -> Value {
    json!({"maxSkew": skew, "topologyKey": key, "whenUnsatisfiable": when,
        "labelSelector": {"matchLabels": {"app": "web"}}})
}

const SKEW: &str = "node(s) didn't match pod topology spread constraints";
const MISSING: &str =
    "node(s) didn't match pod topology spread constraints (missing required label) (unresolvable)";

/// Each node's Filter answer: "" for a fit, else the reason (marked when
/// unresolvable).
fn filter_all(plugin: &PodTopologySpread, pod: &PodInfo, snap: &Snapshot) -> Vec<String> {
    let mut state = CycleState::default();
    let (_, status) = plugin.pre_filter(&mut state, pod, snap);
    snap.nodes
        .iter()
        .map(|n| match status.code {
            Code::Skip => String::new(),
            Code::Success => describe(&plugin.filter(&state, pod, n)),
            _ => describe(&status),
        })
        .collect()
}

fn describe(status: &Status) -> String {
    match status.code {
        Code::Success => String::new(),
        Code::Unschedulable => status.message(),
        Code::UnschedulableAndUnresolvable => format!("{} (unresolvable)", status.message()),
        other => format!("{other:?}: {}", status.message()),
    }
}

#[test]
fn the_skew_a_node_would_make_decides() {
    let plugin = plugin(Value::Null);
    // z1: 2 matching pods, z2: 1.
    let snap = snapshot(vec![web(1), web(1), web(1), vec![], web(3)]);
    let incoming = spread(json!([constraint("zone", 1, "DoNotSchedule")]));
    assert_eq!(
        filter_all(&plugin, &incoming, &snap),
        [SKEW, SKEW, "", "", MISSING],
        "pods on nodes without the key count for no domain"
    );
    let relaxed = spread(json!([constraint("zone", 2, "DoNotSchedule")]));
    assert_eq!(
        filter_all(&plugin, &relaxed, &snap),
        ["", "", "", "", MISSING]
    );
    let by_host = spread(json!([constraint(
        "kubernetes.io/hostname",
        1,
        "DoNotSchedule"
    )]));
    // Per node: 1, 1, 1, 0, 3; the minimum is 0.
    assert_eq!(
        filter_all(&plugin, &by_host, &snap),
        [SKEW, SKEW, SKEW, "", SKEW]
    );
}

#[test]
fn a_pod_its_own_selector_does_not_match_adds_no_skew() {
    let plugin = plugin(Value::Null);
    let snap = snapshot(vec![web(1), web(1), web(1), vec![], vec![]]);
    let mut other = constraint("zone", 1, "DoNotSchedule");
    other["labelSelector"] = json!({"matchLabels": {"app": "web"}});
    let incoming = pod(
        json!({"name": "db", "labels": {"app": "db"}}),
        json!({"topologySpreadConstraints": [other]}),
    );
    // z1 2, z2 1: 2+0-1 = 1 fits.
    assert_eq!(
        filter_all(&plugin, &incoming, &snap),
        ["", "", "", "", MISSING]
    );
}

#[test]
fn fewer_domains_than_min_domains_make_the_minimum_zero() {
    let plugin = plugin(Value::Null);
    let snap = snapshot(vec![web(1), vec![], web(1), vec![], vec![]]);
    let mut c = constraint("zone", 1, "DoNotSchedule");
    assert_eq!(
        filter_all(&plugin, &spread(json!([c.clone()])), &snap),
        ["", "", "", "", MISSING]
    );
    c["minDomains"] = json!(3);
    assert_eq!(
        filter_all(&plugin, &spread(json!([c])), &snap),
        [SKEW, SKEW, SKEW, SKEW, MISSING]
    );
}

#[test]
fn node_affinity_policy_decides_which_nodes_are_domains() {
    let plugin = plugin(Value::Null);
    // z1: 0, z2: 2.
    let snap = snapshot(vec![vec![], vec![], web(1), web(1), vec![]]);
    let with_selector = |policy: Option<&str>| {
        let mut c = constraint("zone", 1, "DoNotSchedule");
        if let Some(policy) = policy {
            c["nodeAffinityPolicy"] = json!(policy);
        }
        pod(
            json!({"name": "incoming", "labels": {"app": "web"}}),
            json!({"topologySpreadConstraints": [c],
                "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [
                        {"key": "zone", "operator": "In", "values": ["z2"]}]}]}}}}),
        )
    };
    // Honor: z2 is the only domain, its count is the minimum.
    assert_eq!(
        filter_all(&plugin, &with_selector(None), &snap),
        ["", "", "", "", MISSING]
    );
    // Ignore: z1 (0) counts: z2 would be at skew 3.
    assert_eq!(
        filter_all(&plugin, &with_selector(Some("Ignore")), &snap),
        ["", "", SKEW, SKEW, MISSING]
    );
}

#[test]
fn node_taints_policy_honor_leaves_out_untolerated_nodes() {
    let plugin = plugin(Value::Null);
    let taint = json!([{"key": "dedicated", "value": "x", "effect": "NoSchedule"}]);
    let nodes = vec![
        node("n1", json!({"zone": "z1"}), taint.clone()),
        node("n2", json!({"zone": "z2"}), Value::Null),
        node("n3", json!({"zone": "z3"}), Value::Null),
    ];
    let snap = snapshot_with(
        nodes,
        vec![vec![], web(1), web(1)],
        ClusterObjects::default(),
    );
    let mut c = constraint("zone", 1, "DoNotSchedule");
    assert_eq!(
        filter_all(&plugin, &spread(json!([c.clone()])), &snap),
        ["", SKEW, SKEW]
    );
    c["nodeTaintsPolicy"] = json!("Honor");
    assert_eq!(
        filter_all(&plugin, &spread(json!([c.clone()])), &snap),
        ["", "", ""]
    );
    let tolerant = pod(
        json!({"name": "incoming", "labels": {"app": "web"}}),
        json!({"topologySpreadConstraints": [c],
            "tolerations": [{"key": "dedicated", "operator": "Exists"}]}),
    );
    assert_eq!(filter_all(&plugin, &tolerant, &snap), ["", SKEW, SKEW]);
}

#[test]
fn match_label_keys_narrow_the_selector_to_the_pods_values() {
    let plugin = plugin(Value::Null);
    let rev = |name: &str, rev: &str| labeled(name, json!({"app": "web", "rev": rev}));
    // rev 1: two pods in z1; rev 2: one in z2.
    let snap = snapshot(vec![
        vec![rev("a", "1")],
        vec![rev("b", "1")],
        vec![rev("c", "2")],
        vec![],
        vec![],
    ]);
    let mut c = constraint("zone", 1, "DoNotSchedule");
    assert_eq!(
        filter_all(&plugin, &spread(json!([c.clone()])), &snap),
        [SKEW, SKEW, "", "", MISSING]
    );
    c["matchLabelKeys"] = json!(["rev"]);
    // Only rev=2 pods count: z1 0, z2 1.
    assert_eq!(
        filter_all(&plugin, &spread(json!([c])), &snap),
        ["", "", SKEW, SKEW, MISSING]
    );
}

#[test]
fn only_live_pods_of_the_namespace_with_a_non_empty_selector_count() {
    let plugin = plugin(Value::Null);
    let elsewhere = pod(
        json!({"name": "x", "namespace": "other", "labels": {"app": "web"}}),
        json!({}),
    );
    let leaving = pod(
        json!({"name": "y", "labels": {"app": "web"}, "deletionTimestamp": "2024-01-01T00:00:00Z"}),
        json!({}),
    );
    let snap = snapshot(vec![
        vec![elsewhere, leaving],
        web(1),
        web(1),
        vec![],
        vec![],
    ]);
    // z1 1, z2 1.
    assert_eq!(
        filter_all(
            &plugin,
            &spread(json!([constraint("zone", 1, "DoNotSchedule")])),
            &snap
        ),
        ["", "", "", "", MISSING]
    );
    let mut everything = constraint("kubernetes.io/hostname", 1, "DoNotSchedule");
    everything["labelSelector"] = json!({});
    // Counts nothing, but the pod itself matches: 0+1-0 fits.
    assert_eq!(
        filter_all(&plugin, &spread(json!([everything])), &snap),
        ["", "", "", "", ""]
    );
}

#[test]
fn pods_without_constraints_or_default_selector_skip() {
    let plugin = plugin(Value::Null);
    let snap = snapshot(vec![web(1)]);
    let incoming = labeled("p", json!({"app": "web"}));
    let mut state = CycleState::default();
    assert_eq!(
        plugin.pre_filter(&mut state, &incoming, &snap).1.code,
        Code::Skip
    );
    assert_eq!(
        plugin.pre_score(&mut state, &incoming, &snap.nodes).code,
        Code::Skip
    );
    let soft_only = spread(json!([constraint("zone", 1, "ScheduleAnyway")]));
    assert_eq!(
        plugin.pre_filter(&mut state, &soft_only, &snap).1.code,
        Code::Skip
    );
}

#[test]
fn add_and_remove_pod_update_counts_and_minimum() {
    let plugin = plugin(Value::Null);
    let snap = snapshot(vec![web(1), vec![], vec![], vec![], vec![]]);
    let incoming = spread(json!([constraint("zone", 1, "DoNotSchedule")]));
    let mut state = CycleState::default();
    assert!(plugin
        .pre_filter(&mut state, &incoming, &snap)
        .1
        .is_success());
    let at = |name: &str| snap.get(name).unwrap().clone();
    let check = |state: &CycleState| {
        ["n1", "n3"]
            .iter()
            .map(|n| describe(&plugin.filter(state, &incoming, &at(n))))
            .collect::<Vec<_>>()
    };
    assert_eq!(check(&state), [SKEW, ""]);
    let extra = labeled("extra", json!({"app": "web"}));
    assert!(plugin
        .add_pod(&mut state, &incoming, &extra, &at("n3"))
        .is_success());
    // z1 1, z2 1.
    assert_eq!(check(&state), ["", ""]);
    let other_ns = pod(
        json!({"name": "o", "namespace": "ns2", "labels": {"app": "web"}}),
        json!({}),
    );
    assert!(plugin
        .add_pod(&mut state, &incoming, &other_ns, &at("n3"))
        .is_success());
    assert_eq!(check(&state), ["", ""]);
    assert!(plugin
        .add_pod(&mut state, &incoming, &extra, &at("n4"))
        .is_success());
    // z1 1, z2 2.
    assert_eq!(check(&state), ["", SKEW]);
    assert!(plugin
        .remove_pod(&mut state, &incoming, &extra, &at("n3"))
        .is_success());
    assert!(plugin
        .remove_pod(&mut state, &incoming, &extra, &at("n4"))
        .is_success());
    assert_eq!(check(&state), [SKEW, ""]);
}

/// PreFilter, PreScore with every node feasible, Score, NormalizeScore.
fn scores(
    plugin: &PodTopologySpread,
    pod: &PodInfo,
    snap: &Snapshot,
    feasible: &[&str],
) -> Vec<i64> {
    let mut state = CycleState::default();
    plugin.pre_filter(&mut state, pod, snap);
    let feasible: Vec<Arc<NodeInfo>> = feasible
        .iter()
        .map(|n| snap.get(n).unwrap().clone())
        .collect();
    let status = plugin.pre_score(&mut state, pod, &feasible);
    if status.code == Code::Skip {
        return vec![0; feasible.len()];
    }
    assert!(status.is_success(), "{status}");
    let mut list: Vec<NodeScore> = feasible
        .iter()
        .map(|n| NodeScore {
            name: n.name().into(),
            score: plugin.score(&state, pod, n).unwrap(),
        })
        .collect();
    plugin.normalize_scores(&state, pod, &mut list);
    list.into_iter().map(|s| s.score).collect()
}

#[test]
fn soft_constraints_score_fewer_matching_pods_higher() {
    let plugin = plugin(Value::Null);
    // n1 2, n2 1, n3 0, n4 1 matching pods.
    let snap = snapshot(vec![web(2), web(1), vec![], web(1), vec![]]);
    let all = ["n1", "n2", "n3", "n4"];
    // Zones: z1 3, z2 1; weight ln(2+2): 4.16 → 4 and 1.39 → 1.
    let by_zone = spread(json!([constraint("zone", 1, "ScheduleAnyway")]));
    assert_eq!(scores(&plugin, &by_zone, &snap, &all), [25, 25, 100, 100]);
    // Hosts: weight ln(4+2): 2*1.79 → 4, 2, 0, 2.
    let by_host = spread(json!([constraint(
        "kubernetes.io/hostname",
        1,
        "ScheduleAnyway"
    )]));
    assert_eq!(scores(&plugin, &by_host, &snap, &all), [0, 50, 100, 50]);
    // A node without the key is ignored: 0.
    assert_eq!(
        scores(&plugin, &by_zone, &snap, &["n1", "n3", "n5"]),
        [25, 100, 0]
    );
}

#[test]
fn domains_of_infeasible_nodes_do_not_count_but_their_pods_do() {
    let plugin = plugin(Value::Null);
    let snap = snapshot(vec![web(2), web(1), vec![], web(1), vec![]]);
    let by_zone = spread(json!([constraint("zone", 1, "ScheduleAnyway")]));
    // Only z2 feasible: one domain, weight ln(3); n3 and n4 see z2's 1 pod.
    assert_eq!(scores(&plugin, &by_zone, &snap, &["n3", "n4"]), [100, 100]);
    // z1's count (3) includes n1's pods though only n2 is feasible.
    // n2: 3*ln(4)=4.16 → 4, n3: 1.39 → 1: 100*(4+1-4)/4 = 25.
    assert_eq!(scores(&plugin, &by_zone, &snap, &["n2", "n3"]), [25, 100]);
}

fn service(namespace: &str, selector: Value) -> Arc<Service> {
    Arc::new(
        serde_json::from_value(json!({
            "metadata": {"name": "svc", "namespace": namespace},
            "spec": {"selector": selector},
        }))
        .unwrap(),
    )
}

#[test]
fn system_defaults_spread_pods_a_service_selects() {
    let plugin = plugin(Value::Null);
    let mut cluster = ClusterObjects::default();
    cluster
        .services
        .push(service("default", json!({"app": "web"})));
    cluster
        .services
        .push(service("default", json!({"app": "other"})));
    cluster
        .services
        .push(service("elsewhere", json!({"tier": "x"})));
    let zoned = |name: &str, zone: Option<&str>| {
        let labels = zone.map_or(json!({}), |z| json!({"topology.kubernetes.io/zone": z}));
        node(name, labels, Value::Null)
    };
    let nodes = vec![
        zoned("n1", Some("z1")),
        zoned("n2", Some("z1")),
        zoned("n3", Some("z2")),
        zoned("n4", Some("z2")),
        zoned("n5", None),
    ];
    let snap = snapshot_with(nodes, vec![web(2), vec![], web(1), vec![], vec![]], cluster);
    let incoming = labeled("p", json!({"app": "web", "tier": "x"}));
    // Hostname (skew 3, weight ln 7) and zone (skew 5, weight ln 5 with
    // the domains z1, z2 and "" of n5, not ignored under system defaults).
    // n1: 2*1.95+2 + 2*1.61+4 = 13.1 → 13; n2: 2 + 7.22 → 9;
    // n3: 1.95+2 + 1.61+4 → 10; n4: 2 + 5.61 → 8; n5, without a zone
    // label, only by hostname: 2. Normalized: 100*(13+2-score)/13.
    assert_eq!(
        scores(&plugin, &incoming, &snap, &["n1", "n2", "n3", "n4", "n5"]),
        [15, 46, 38, 53, 100]
    );
    // Defaults are ScheduleAnyway only: nothing to filter.
    let (_, status) = plugin.pre_filter(&mut CycleState::default(), &incoming, &snap);
    assert_eq!(status.code, Code::Skip);
    // A pod no Service selects is not spread.
    let lonely = labeled("q", json!({"app": "db"}));
    assert_eq!(scores(&plugin, &lonely, &snap, &["n1", "n2"]), [0, 0]);
}

#[test]
fn list_defaults_use_the_owning_replica_sets_selector() {
    let plugin = plugin(json!({
        "defaultingType": "List",
        "defaultConstraints": [{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}],
    }));
    let rs: ReplicaSet = serde_json::from_value(json!({
        "metadata": {"name": "rs1", "namespace": "default"},
        "spec": {"selector": {"matchLabels": {"app": "web"}}},
    }))
    .unwrap();
    let mut cluster = ClusterObjects::default();
    cluster.replica_sets.push(Arc::new(rs));
    let snap = snapshot_with(
        nodes(),
        vec![web(1), web(1), web(1), vec![], vec![]],
        cluster,
    );
    let owned = pod(
        json!({"name": "p", "labels": {"app": "web"}, "ownerReferences": [{
            "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs1", "uid": "u", "controller": true}]}),
        json!({}),
    );
    assert_eq!(
        filter_all(&plugin, &owned, &snap),
        [SKEW, SKEW, "", "", MISSING]
    );
    let not_controller = pod(
        json!({"name": "p", "labels": {"app": "web"}, "ownerReferences": [{
            "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs1", "uid": "u"}]}),
        json!({}),
    );
    assert_eq!(
        filter_all(&plugin, &not_controller, &snap),
        ["", "", "", "", ""]
    );
    // The pod's own constraints replace the defaults.
    let own = pod(
        json!({"name": "p", "labels": {"app": "web"}, "ownerReferences": [{
            "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs1", "uid": "u", "controller": true}]}),
        json!({"topologySpreadConstraints": [constraint("zone", 5, "DoNotSchedule")]}),
    );
    assert_eq!(filter_all(&plugin, &own, &snap), ["", "", "", "", MISSING]);
}

#[test]
fn args_are_checked() {
    let p = plugin(Value::Null);
    assert!(p.system_defaulted);
    assert_eq!(p.default_constraints.len(), 2);
    let list = plugin(json!({"defaultingType": "List"}));
    assert!(!list.system_defaulted && list.default_constraints.is_empty());
    let one = json!([{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "ScheduleAnyway"}]);
    assert_eq!(
        PodTopologySpread::from_args(&json!({"defaultConstraints": one})).err(),
        Some(
            "defaultingType: Invalid value: \"System\": when .defaultConstraints are not empty"
                .into()
        )
    );
    let bad = json!({"defaultingType": "List", "defaultConstraints": [
        {"maxSkew": 0, "topologyKey": "zone", "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": {"a": "b"}}}]});
    let err = PodTopologySpread::from_args(&bad).err().unwrap();
    assert!(
        err.contains("defaultConstraints[0].maxSkew: Invalid value: 0"),
        "{err}"
    );
    assert!(
        err.contains("defaultConstraints[0].labelSelector: Forbidden"),
        "{err}"
    );
    assert!(PodTopologySpread::from_args(&json!({"defaultingType": "Sometimes"})).is_err());
    assert!(PodTopologySpread::from_args(&json!({"bogus": true})).is_err());
}

#[test]
fn critical_paths_keep_the_minimum() {
    let mut paths = filtering::CriticalPaths::default();
    for (value, count) in [("a", 3), ("b", 1), ("c", 2), ("d", 5)] {
        paths.update(value, count);
    }
    assert_eq!(paths.min(), 1);
    paths.update("b", 4);
    assert_eq!(paths.min(), 2);
    paths.update("e", 0);
    assert_eq!(paths.min(), 0);
}

/// A small deterministic generator for the randomized comparison.
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: usize) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 33) as usize) % n
    }

    fn pick<'a>(&mut self, from: &[&'a str]) -> &'a str {
        from[self.below(from.len())]
    }
}

fn random_node(rng: &mut Lcg, name: &str) -> NodeInfo {
    let mut labels = json!({});
    if rng.below(5) > 0 {
        labels["zone"] = json!(rng.pick(&["z1", "z2", "z3"]));
    }
    if rng.below(3) > 0 {
        labels["rack"] = json!(rng.pick(&["r1", "r2"]));
    }
    let taints = match rng.below(4) {
        0 => {
            json!([{"key": "dedicated", "value": "x", "effect": rng.pick(&["NoSchedule", "PreferNoSchedule"])}])
        }
        _ => Value::Null,
    };
    node(name, labels, taints)
}

fn random_pod(rng: &mut Lcg, name: &str) -> PodInfo {
    let mut metadata = json!({"name": name, "namespace": rng.pick(&["default", "default", "other"]),
        "labels": {"app": rng.pick(&["web", "db"])}});
    if rng.below(6) == 0 {
        metadata["deletionTimestamp"] = json!("2024-01-01T00:00:00Z");
    }
    pod(metadata, json!({}))
}

/// The domains of `constraints` counted node by node, as kube-scheduler
/// counts them.
fn domains_by_scan(
    constraints: &[constraints::Constraint],
    incoming: &PodInfo,
    nodes: &[Arc<NodeInfo>],
    require_all: bool,
) -> Vec<Vec<(String, i64)>> {
    let affinity = crate::plugins::node_affinity::RequiredNodeAffinity::of_pod(&incoming.pod);
    let tolerations = incoming
        .pod
        .spec
        .as_ref()
        .and_then(|s| s.tolerations.clone())
        .unwrap_or_default();
    let mut out: Vec<std::collections::BTreeMap<String, i64>> =
        constraints.iter().map(|_| Default::default()).collect();
    for node in nodes {
        let labels = node.labels();
        if require_all
            && !constraints
                .iter()
                .all(|c| labels.contains_key(&c.topology_key))
        {
            continue;
        }
        for (i, c) in constraints.iter().enumerate() {
            if c.honor_node_affinity && !affinity.matches(&node.node) {
                continue;
            }
            let untolerated = node.taints().iter().any(|t| {
                (t.effect == "NoSchedule" || t.effect == "NoExecute")
                    && !crate::plugins::taint_toleration::tolerated(&tolerations, t)
            });
            if c.honor_node_taints && untolerated {
                continue;
            }
            let value = labels.get(&c.topology_key).cloned().unwrap_or_default();
            let count = match c.selector.is_empty() {
                true => 0,
                false => node
                    .pods
                    .iter()
                    .filter(|p| {
                        p.pod.metadata.deletion_timestamp.is_none()
                            && p.namespace() == incoming.namespace()
                            && c.selector.matches(p.labels())
                    })
                    .count() as i64,
            };
            *out[i].entry(value).or_insert(0) += count;
        }
    }
    out.into_iter().map(|m| m.into_iter().collect()).collect()
}

fn sorted(domains: &memo::Domains) -> Vec<Vec<(String, i64)>> {
    domains
        .iter()
        .map(|values| {
            let mut v: Vec<(String, i64)> =
                values.iter().map(|(k, d)| (k.clone(), d.pods)).collect();
            v.sort();
            v
        })
        .collect()
}

/// The memo, kept across snapshots that change a node or two at a time,
/// counts exactly as a scan of every node does.
#[test]
fn the_domain_memo_agrees_with_a_scan_of_every_node() {
    let mut rng = Lcg(7);
    let mut nodes: Vec<(NodeInfo, Vec<PodInfo>)> = (0..10)
        .map(|i| {
            let pods = (0..rng.below(4))
                .map(|j| random_pod(&mut rng, &format!("p{i}-{j}")))
                .collect();
            (random_node(&mut rng, &format!("n{i}")), pods)
        })
        .collect();
    let build = |nodes: &[(NodeInfo, Vec<PodInfo>)]| {
        let (infos, pods): (Vec<NodeInfo>, Vec<Vec<PodInfo>>) = nodes.iter().cloned().unzip();
        snapshot_with(infos, pods, ClusterObjects::default())
    };
    let mut snap = build(&nodes);
    let mut memos = memo::Memos::default();
    for round in 0..80 {
        for _ in 0..1 + rng.below(2) {
            let at = rng.below(nodes.len() + 1);
            match rng.below(4) {
                _ if at == nodes.len() => {
                    nodes.push((random_node(&mut rng, &format!("m{round}")), Vec::new()))
                }
                0 if !nodes[at].1.is_empty() => {
                    nodes[at].1.pop();
                }
                1 if nodes.len() > 3 => {
                    nodes.remove(at);
                }
                _ => {
                    let pod = random_pod(&mut rng, &format!("q{round}"));
                    nodes[at].1.push(pod);
                }
            }
        }
        let next = build(&nodes);
        let kept: Vec<Arc<NodeInfo>> = next
            .nodes
            .iter()
            .map(|n| match snap.get(n.name()) {
                Some(old)
                    if old
                        .pods
                        .iter()
                        .map(|p| &p.key)
                        .eq(n.pods.iter().map(|p| &p.key)) =>
                {
                    old.clone()
                }
                _ => n.clone(),
            })
            .collect();
        snap = Snapshot::new(kept, next.cluster.clone());
        for _ in 0..3 {
            // Few shapes, so that memos are kept from round to round.
            let shape = rng.below(3);
            let mut c = constraint(
                ["zone", "rack", "kubernetes.io/hostname"][shape],
                1,
                "DoNotSchedule",
            );
            let mut spec = json!({});
            match shape {
                0 => {
                    c["nodeTaintsPolicy"] = json!("Honor");
                    spec["tolerations"] = json!([{"key": "other", "operator": "Exists"}]);
                }
                1 => {
                    c["labelSelector"] = json!({});
                    spec["nodeSelector"] = json!({"rack": "r1"});
                }
                _ => {
                    c["nodeAffinityPolicy"] = json!("Ignore");
                    spec["nodeSelector"] = json!({"rack": "r1"});
                }
            }
            let second = constraint(["rack", "zone", "zone"][shape], 2, "DoNotSchedule");
            spec["topologySpreadConstraints"] = json!([c, second]);
            let namespace = ["default", "other", "default"][shape];
            let incoming = pod(
                json!({"name": "in", "namespace": namespace, "labels": {"app": "web"}}),
                spec,
            );
            let own = incoming
                .pod
                .spec
                .as_ref()
                .and_then(|s| s.topology_spread_constraints.clone())
                .unwrap();
            let parsed =
                constraints::constraints_for(&own, incoming.labels(), "DoNotSchedule").unwrap();
            let require_all = shape != 2;
            let key = memo::MemoKey::new(parsed.clone(), &incoming.pod, require_all);
            let kept = memos.domains(key, &incoming.pod, &snap.nodes);
            assert_eq!(
                sorted(&kept),
                domains_by_scan(&parsed, &incoming, &snap.nodes, require_all),
                "round {round}"
            );
        }
    }
}
