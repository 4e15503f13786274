//! InterPodAffinity against tables of nodes and pods, with the decisions
//! kube-scheduler makes for them.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod};
use serde_json::{json, Value};

use super::*;
use crate::framework::{ClusterObjects, Code, NodeScore};

fn pod_in(namespace: &str, name: &str, labels: Value, affinity: Value) -> PodInfo {
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {"containers": [{"name": "c", "image": "i"}], "affinity": affinity},
    }))
    .unwrap();
    PodInfo::new(Arc::new(pod))
}

fn pod(name: &str, labels: Value, affinity: Value) -> PodInfo {
    pod_in("default", name, labels, affinity)
}

fn node(name: &str, labels: Value) -> NodeInfo {
    let mut labels = labels;
    labels["kubernetes.io/hostname"] = json!(name);
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels},
        "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"}},
    }))
    .unwrap();
    NodeInfo::new(Arc::new(node))
}

/// Nodes with their pods, and namespace labels.
fn snapshot(nodes: Vec<(NodeInfo, Vec<PodInfo>)>, namespaces: &[(&str, Value)]) -> Snapshot {
    let nodes = nodes
        .into_iter()
        .map(|(mut info, pods)| {
            for p in pods {
                info.add_pod(Arc::new(p));
            }
            Arc::new(info)
        })
        .collect();
    let mut cluster = ClusterObjects::default();
    for (name, labels) in namespaces {
        let labels: BTreeMap<String, String> = serde_json::from_value(labels.clone()).unwrap();
        cluster.namespaces.insert(name.to_string(), labels);
    }
    Snapshot::new(nodes, Arc::new(cluster))
}

fn plugin(args: Value) -> InterPodAffinity {
    InterPodAffinity::from_args(&args).unwrap()
}

/// Each node's Filter answer: "" for a fit, else the reason and whether
/// preemption could help (`Unschedulable`).
fn filter_all(plugin: &InterPodAffinity, pod: &PodInfo, snap: &Snapshot) -> Vec<(String, String)> {
    let mut state = CycleState::default();
    let (_, status) = plugin.pre_filter(&mut state, pod, snap);
    snap.nodes
        .iter()
        .map(|n| {
            let status = match status.code {
                Code::Skip => Status::success(),
                Code::Success => plugin.filter(&state, pod, n),
                _ => status.clone(),
            };
            (n.name().to_string(), describe(&status))
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

fn expect(rows: &[(&str, &str)]) -> Vec<(String, String)> {
    rows.iter()
        .map(|(n, r)| (n.to_string(), r.to_string()))
        .collect()
}

const AFFINITY_UNRESOLVABLE: &str = "node(s) didn't match pod affinity rules (unresolvable)";

fn required_affinity(selector: Value, topology_key: &str) -> Value {
    json!({"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": selector, "topologyKey": topology_key}]}})
}

fn required_anti_affinity(selector: Value, topology_key: &str) -> Value {
    json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": selector, "topologyKey": topology_key}]}})
}

fn zones() -> Vec<NodeInfo> {
    vec![
        node("n1", json!({"zone": "z1"})),
        node("n2", json!({"zone": "z1"})),
        node("n3", json!({"zone": "z2"})),
        node("n4", json!({})),
    ]
}

fn with_pods(
    nodes: Vec<NodeInfo>,
    mut pods: Vec<(usize, PodInfo)>,
) -> Vec<(NodeInfo, Vec<PodInfo>)> {
    nodes
        .into_iter()
        .enumerate()
        .map(|(i, n)| {
            let mine = pods.iter().filter(|(at, _)| *at == i).count();
            let mut taken = Vec::with_capacity(mine);
            let mut j = 0;
            while j < pods.len() {
                if pods[j].0 == i {
                    taken.push(pods.remove(j).1);
                } else {
                    j += 1;
                }
            }
            (n, taken)
        })
        .collect()
}

#[test]
fn required_affinity_needs_a_matching_pod_in_the_nodes_domain() {
    let plugin = plugin(Value::Null);
    let snap = snapshot(
        with_pods(
            zones(),
            vec![(1, pod("db", json!({"app": "db"}), Value::Null))],
        ),
        &[],
    );
    let incoming = pod(
        "web",
        json!({"app": "web"}),
        required_affinity(json!({"matchLabels": {"app": "db"}}), "zone"),
    );
    assert_eq!(
        filter_all(&plugin, &incoming, &snap),
        expect(&[
            ("n1", ""),
            ("n2", ""),
            ("n3", AFFINITY_UNRESOLVABLE),
            ("n4", AFFINITY_UNRESOLVABLE),
        ])
    );
}

#[test]
fn a_pod_matching_all_its_own_affinity_terms_may_go_first() {
    let plugin = plugin(Value::Null);
    let snap = snapshot(with_pods(zones(), vec![]), &[]);
    let selector = json!({"matchLabels": {"app": "web"}});
    let first = pod(
        "web",
        json!({"app": "web"}),
        required_affinity(selector.clone(), "zone"),
    );
    assert_eq!(
        filter_all(&plugin, &first, &snap),
        expect(&[
            ("n1", ""),
            ("n2", ""),
            ("n3", ""),
            ("n4", AFFINITY_UNRESOLVABLE)
        ]),
        "a node without the topology label never fits"
    );
    let other = pod(
        "x",
        json!({"app": "other"}),
        required_affinity(selector, "zone"),
    );
    assert_eq!(
        filter_all(&plugin, &other, &snap),
        expect(&[
            ("n1", AFFINITY_UNRESOLVABLE),
            ("n2", AFFINITY_UNRESOLVABLE),
            ("n3", AFFINITY_UNRESOLVABLE),
            ("n4", AFFINITY_UNRESOLVABLE),
        ])
    );
}

#[test]
fn affinity_counts_only_pods_matching_every_term() {
    let plugin = plugin(Value::Null);
    let snap = snapshot(
        with_pods(
            zones(),
            vec![
                (0, pod("a", json!({"app": "db"}), Value::Null)),
                (2, pod("b", json!({"app": "db", "tier": "1"}), Value::Null)),
            ],
        ),
        &[],
    );
    let incoming = pod(
        "web",
        json!({}),
        json!({"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": "zone"},
            {"labelSelector": {"matchLabels": {"tier": "1"}}, "topologyKey": "kubernetes.io/hostname"},
        ]}}),
    );
    assert_eq!(
        filter_all(&plugin, &incoming, &snap),
        expect(&[
            ("n1", AFFINITY_UNRESOLVABLE),
            ("n2", AFFINITY_UNRESOLVABLE),
            ("n3", ""),
            ("n4", AFFINITY_UNRESOLVABLE),
        ])
    );
}

#[test]
fn required_anti_affinity_keeps_the_pod_out_of_domains_with_matching_pods() {
    let plugin = plugin(Value::Null);
    let snap = snapshot(
        with_pods(
            zones(),
            vec![(0, pod("a", json!({"app": "web"}), Value::Null))],
        ),
        &[],
    );
    let by_zone = pod(
        "web",
        json!({"app": "web"}),
        required_anti_affinity(json!({"matchLabels": {"app": "web"}}), "zone"),
    );
    let anti = "node(s) didn't match pod anti-affinity rules";
    assert_eq!(
        filter_all(&plugin, &by_zone, &snap),
        expect(&[("n1", anti), ("n2", anti), ("n3", ""), ("n4", "")])
    );
    let by_host = pod(
        "web",
        json!({"app": "web"}),
        required_anti_affinity(
            json!({"matchLabels": {"app": "web"}}),
            "kubernetes.io/hostname",
        ),
    );
    assert_eq!(
        filter_all(&plugin, &by_host, &snap),
        expect(&[("n1", anti), ("n2", ""), ("n3", ""), ("n4", "")])
    );
}

#[test]
fn placed_pods_anti_affinity_keeps_matching_pods_out_of_their_domain() {
    let plugin = plugin(Value::Null);
    let guard = pod(
        "guard",
        json!({"app": "guard"}),
        required_anti_affinity(json!({"matchLabels": {"app": "web"}}), "zone"),
    );
    let snap = snapshot(with_pods(zones(), vec![(2, guard)]), &[]);
    let existing = "node(s) didn't satisfy existing pods anti-affinity rules";
    let web = pod("web", json!({"app": "web"}), Value::Null);
    assert_eq!(
        filter_all(&plugin, &web, &snap),
        expect(&[("n1", ""), ("n2", ""), ("n3", existing), ("n4", "")])
    );
    let mut state = CycleState::default();
    let (_, status) = plugin.pre_filter(&mut state, &web, &snap);
    assert_eq!(status.code, Code::Success);
    let other = pod("db", json!({"app": "db"}), Value::Null);
    let (_, status) = plugin.pre_filter(&mut CycleState::default(), &other, &snap);
    assert_eq!(
        status.code,
        Code::Skip,
        "nothing constrains a pod no term selects"
    );
}

#[test]
fn namespaces_of_terms_follow_the_list_the_selector_or_the_pods_own() {
    let plugin = plugin(Value::Null);
    let nodes = vec![
        node("n1", json!({})),
        node("n2", json!({})),
        node("n3", json!({})),
    ];
    let snap = snapshot(
        with_pods(
            nodes,
            vec![
                (0, pod_in("default", "a", json!({"app": "x"}), Value::Null)),
                (1, pod_in("prod", "b", json!({"app": "x"}), Value::Null)),
                (2, pod_in("dev", "c", json!({"app": "x"}), Value::Null)),
            ],
        ),
        &[
            ("default", json!({})),
            ("prod", json!({"env": "prod"})),
            ("dev", json!({"env": "dev"})),
        ],
    );
    let anti = "node(s) didn't match pod anti-affinity rules";
    let term = |extra: Value| {
        let mut term = json!({"labelSelector": {"matchLabels": {"app": "x"}}, "topologyKey": "kubernetes.io/hostname"});
        for (k, v) in extra.as_object().unwrap() {
            term[k] = v.clone();
        }
        json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}})
    };
    let cases = [
        (json!({}), ["x", "", ""]),
        (json!({"namespaces": ["prod", "dev"]}), ["", "x", "x"]),
        (
            json!({"namespaceSelector": {"matchLabels": {"env": "prod"}}}),
            ["", "x", ""],
        ),
        (json!({"namespaceSelector": {}}), ["x", "x", "x"]),
        (
            json!({"namespaces": ["default"], "namespaceSelector": {"matchLabels": {"env": "dev"}}}),
            ["x", "", "x"],
        ),
    ];
    for (extra, want) in cases {
        let incoming = pod("p", json!({}), term(extra.clone()));
        let want: Vec<(String, String)> = ["n1", "n2", "n3"]
            .iter()
            .zip(want)
            .map(|(n, w)| {
                (
                    n.to_string(),
                    if w.is_empty() { "" } else { anti }.to_string(),
                )
            })
            .collect();
        assert_eq!(
            filter_all(&plugin, &incoming, &snap),
            want,
            "term with {extra}"
        );
    }
}

#[test]
fn placed_pods_namespace_selectors_read_the_incoming_pods_namespace_labels() {
    let plugin = plugin(Value::Null);
    let guard = pod_in(
        "ops",
        "guard",
        json!({}),
        json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
            "labelSelector": {"matchLabels": {"app": "web"}},
            "namespaceSelector": {"matchLabels": {"team": "a"}},
            "topologyKey": "kubernetes.io/hostname"}]}}),
    );
    let snap = snapshot(
        with_pods(
            vec![node("n1", json!({})), node("n2", json!({}))],
            vec![(0, guard)],
        ),
        &[
            ("a-ns", json!({"team": "a"})),
            ("b-ns", json!({"team": "b"})),
        ],
    );
    let existing = "node(s) didn't satisfy existing pods anti-affinity rules";
    let in_a = pod_in("a-ns", "web", json!({"app": "web"}), Value::Null);
    assert_eq!(
        filter_all(&plugin, &in_a, &snap),
        expect(&[("n1", existing), ("n2", "")])
    );
    let in_b = pod_in("b-ns", "web", json!({"app": "web"}), Value::Null);
    assert_eq!(
        filter_all(&plugin, &in_b, &snap),
        expect(&[("n1", ""), ("n2", "")])
    );
}

#[test]
fn match_and_mismatch_label_keys_take_the_pods_own_values() {
    let plugin = plugin(Value::Null);
    let nodes = vec![
        node("n1", json!({})),
        node("n2", json!({})),
        node("n3", json!({})),
    ];
    let snap = snapshot(
        with_pods(
            nodes,
            vec![
                (
                    0,
                    pod(
                        "a",
                        json!({"app": "web", "rev": "1", "tenant": "t1"}),
                        Value::Null,
                    ),
                ),
                (
                    1,
                    pod(
                        "b",
                        json!({"app": "web", "rev": "2", "tenant": "t1"}),
                        Value::Null,
                    ),
                ),
                (
                    2,
                    pod(
                        "c",
                        json!({"app": "web", "rev": "2", "tenant": "t2"}),
                        Value::Null,
                    ),
                ),
            ],
        ),
        &[],
    );
    let anti = "node(s) didn't match pod anti-affinity rules";
    let incoming = pod(
        "p",
        json!({"app": "web", "rev": "2", "tenant": "t1"}),
        json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
            "labelSelector": {"matchLabels": {"app": "web"}},
            "matchLabelKeys": ["rev", "absent"],
            "mismatchLabelKeys": ["tenant"],
            "topologyKey": "kubernetes.io/hostname"}]}}),
    );
    assert_eq!(
        filter_all(&plugin, &incoming, &snap),
        expect(&[("n1", ""), ("n2", ""), ("n3", anti)]),
        "only rev=2 pods of another tenant repel"
    );
}

#[test]
fn a_term_without_label_selector_selects_no_pod() {
    let plugin = plugin(Value::Null);
    let snap = snapshot(
        with_pods(
            zones(),
            vec![(0, pod("a", json!({"app": "web"}), Value::Null))],
        ),
        &[],
    );
    let incoming = pod(
        "p",
        json!({}),
        json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"topologyKey": "zone"}]}}),
    );
    assert_eq!(
        filter_all(&plugin, &incoming, &snap),
        expect(&[("n1", ""), ("n2", ""), ("n3", ""), ("n4", "")])
    );
}

#[test]
fn a_bad_selector_of_the_incoming_pod_is_unresolvable() {
    let plugin = plugin(Value::Null);
    let snap = snapshot(with_pods(zones(), vec![]), &[]);
    let incoming = pod(
        "p",
        json!({}),
        required_anti_affinity(
            json!({"matchExpressions": [{"key": "app", "operator": "Bogus"}]}),
            "zone",
        ),
    );
    let (_, status) = plugin.pre_filter(&mut CycleState::default(), &incoming, &snap);
    assert_eq!(status.code, Code::UnschedulableAndUnresolvable);
    assert!(
        status
            .message()
            .starts_with("parsing pod: requiredAntiAffinityTerms: "),
        "{status}"
    );
}

#[test]
fn add_and_remove_pod_update_the_counts_for_preemption() {
    let plugin = plugin(Value::Null);
    let victim = pod("victim", json!({"app": "web"}), Value::Null);
    let snap = snapshot(with_pods(zones(), vec![(2, victim.clone())]), &[]);
    let incoming = pod(
        "web",
        json!({"app": "web"}),
        required_anti_affinity(json!({"matchLabels": {"app": "web"}}), "zone"),
    );
    let mut state = CycleState::default();
    let (_, status) = plugin.pre_filter(&mut state, &incoming, &snap);
    assert_eq!(status.code, Code::Success);
    let n3 = snap.get("n3").unwrap().clone();
    let anti = "node(s) didn't match pod anti-affinity rules";
    assert_eq!(describe(&plugin.filter(&state, &incoming, &n3)), anti);
    assert!(plugin
        .remove_pod(&mut state, &incoming, &victim, &n3)
        .is_success());
    assert_eq!(describe(&plugin.filter(&state, &incoming, &n3)), "");

    let n1 = snap.get("n1").unwrap().clone();
    let guard = pod(
        "guard",
        json!({}),
        required_anti_affinity(
            json!({"matchLabels": {"app": "web"}}),
            "kubernetes.io/hostname",
        ),
    );
    assert!(plugin
        .add_pod(&mut state, &incoming, &guard, &n1)
        .is_success());
    let existing = "node(s) didn't satisfy existing pods anti-affinity rules";
    assert_eq!(describe(&plugin.filter(&state, &incoming, &n1)), existing);
    let n2 = snap.get("n2").unwrap().clone();
    assert_eq!(describe(&plugin.filter(&state, &incoming, &n2)), "");
    assert!(plugin
        .remove_pod(&mut state, &incoming, &guard, &n1)
        .is_success());
    assert_eq!(describe(&plugin.filter(&state, &incoming, &n1)), "");
}

/// PreScore over every node as feasible, Score, NormalizeScore.
fn scores(plugin: &InterPodAffinity, pod: &PodInfo, snap: &Snapshot) -> Vec<(String, i64)> {
    let mut state = CycleState::default();
    plugin.pre_filter(&mut state, pod, snap);
    let status = plugin.pre_score(&mut state, pod, &snap.nodes);
    let mut list: Vec<NodeScore> = snap
        .nodes
        .iter()
        .map(|n| NodeScore {
            name: n.name().into(),
            score: match status.code {
                Code::Skip => 0,
                _ => plugin.score(&state, pod, n).unwrap(),
            },
        })
        .collect();
    if status.code != Code::Skip {
        plugin.normalize_scores(&state, pod, &mut list);
    }
    list.into_iter()
        .map(|s| (s.name.to_string(), s.score))
        .collect()
}

fn regions() -> Vec<NodeInfo> {
    vec![
        node("n1", json!({"region": "r1", "zone": "z11"})),
        node("n2", json!({"region": "r1", "zone": "z12"})),
        node("n3", json!({"region": "r2", "zone": "z21"})),
    ]
}

fn named(rows: &[(&str, i64)]) -> Vec<(String, i64)> {
    rows.iter().map(|(n, s)| (n.to_string(), *s)).collect()
}

#[test]
fn preferred_terms_both_ways_score_between_min_and_max() {
    let plugin = plugin(Value::Null);
    let incoming = pod(
        "p",
        json!({"app": "web"}),
        json!({
            "podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 5,
                "podAffinityTerm": {"labelSelector": {"matchLabels": {"security": "S1"}}, "topologyKey": "region"}}]},
            "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 3,
                "podAffinityTerm": {"labelSelector": {"matchLabels": {"security": "S2"}}, "topologyKey": "zone"}}]},
        }),
    );
    let base = vec![
        (0, pod("s1", json!({"security": "S1"}), Value::Null)),
        (2, pod("s2", json!({"security": "S2"}), Value::Null)),
    ];
    let snap = snapshot(with_pods(regions(), base.clone()), &[]);
    // r1: +5 (n1, n2); z21: -3 (n3).
    assert_eq!(
        scores(&plugin, &incoming, &snap),
        named(&[("n1", 100), ("n2", 100), ("n3", 0)])
    );

    let mut more = base;
    more.push((
        1,
        pod(
            "fan",
            json!({}),
            json!({"podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 2,
                "podAffinityTerm": {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "kubernetes.io/hostname"}}]}}),
        ),
    ));
    let snap = snapshot(with_pods(regions(), more), &[]);
    // n1 5, n2 5+2, n3 -3: (x+3)*100/10.
    assert_eq!(
        scores(&plugin, &incoming, &snap),
        named(&[("n1", 80), ("n2", 100), ("n3", 0)])
    );
}

#[test]
fn placed_pods_required_affinity_scores_at_the_hard_weight_and_anti_affinity_subtracts() {
    let lover = pod(
        "lover",
        json!({}),
        required_affinity(json!({"matchLabels": {"app": "web"}}), "region"),
    );
    let hater = pod(
        "hater",
        json!({}),
        json!({"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 4,
            "podAffinityTerm": {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "zone"}}]}}),
    );
    let snap = snapshot(with_pods(regions(), vec![(0, lover), (1, hater)]), &[]);
    let incoming = pod("web", json!({"app": "web"}), Value::Null);
    // Weight 1: n1 1, n2 1-4, n3 0 → min -3, max 1.
    assert_eq!(
        scores(&plugin(Value::Null), &incoming, &snap),
        named(&[("n1", 100), ("n2", 0), ("n3", 75)])
    );
    // Weight 8: n1 8, n2 4, n3 0.
    assert_eq!(
        scores(
            &plugin(json!({"hardPodAffinityWeight": 8})),
            &incoming,
            &snap
        ),
        named(&[("n1", 100), ("n2", 50), ("n3", 0)])
    );
    // Weight 0: only the anti-affinity: n2 -4.
    assert_eq!(
        scores(
            &plugin(json!({"hardPodAffinityWeight": 0})),
            &incoming,
            &snap
        ),
        named(&[("n1", 100), ("n2", 0), ("n3", 100)])
    );
    assert_eq!(
        scores(
            &plugin(json!({"ignorePreferredTermsOfExistingPods": true})),
            &incoming,
            &snap
        ),
        named(&[("n1", 0), ("n2", 0), ("n3", 0)])
    );
}

#[test]
fn placed_pods_anywhere_count_not_only_on_feasible_nodes() {
    let plugin = plugin(Value::Null);
    let incoming = pod(
        "p",
        json!({}),
        json!({"podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 10,
            "podAffinityTerm": {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": "region"}}]}}),
    );
    let snap = snapshot(
        with_pods(
            regions(),
            vec![(0, pod("db", json!({"app": "db"}), Value::Null))],
        ),
        &[],
    );
    let mut state = CycleState::default();
    plugin.pre_filter(&mut state, &incoming, &snap);
    // n1 (where the db pod runs) is not feasible; n2 shares its region.
    let feasible = vec![
        snap.get("n2").unwrap().clone(),
        snap.get("n3").unwrap().clone(),
    ];
    assert!(plugin
        .pre_score(&mut state, &incoming, &feasible)
        .is_success());
    let mut list: Vec<NodeScore> = feasible
        .iter()
        .map(|n| NodeScore {
            name: n.name().into(),
            score: plugin.score(&state, &incoming, n).unwrap(),
        })
        .collect();
    assert_eq!((list[0].score, list[1].score), (10, 0));
    plugin.normalize_scores(&state, &incoming, &mut list);
    assert_eq!((list[0].score, list[1].score), (100, 0));
}

#[test]
fn nothing_to_score_is_a_skip() {
    let plugin = plugin(Value::Null);
    let snap = snapshot(
        with_pods(
            regions(),
            vec![(0, pod("db", json!({"app": "db"}), Value::Null))],
        ),
        &[],
    );
    let incoming = pod("p", json!({}), Value::Null);
    let mut state = CycleState::default();
    plugin.pre_filter(&mut state, &incoming, &snap);
    assert_eq!(
        plugin.pre_score(&mut state, &incoming, &snap.nodes).code,
        Code::Skip
    );
    assert_eq!(
        plugin.pre_score(&mut state, &incoming, &[]).code,
        Code::Skip
    );
}

#[test]
fn args_are_checked() {
    assert_eq!(plugin(Value::Null).hard_pod_affinity_weight, 1);
    assert_eq!(
        InterPodAffinity::from_args(&json!({"hardPodAffinityWeight": 101})).err(),
        Some("hardPodAffinityWeight: Invalid value: 101: not in valid range [0-100]".into())
    );
    assert!(InterPodAffinity::from_args(&json!({"bogus": 1})).is_err());
    assert!(InterPodAffinity::from_args(&json!({
        "apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "InterPodAffinityArgs",
        "hardPodAffinityWeight": 0}))
    .is_ok());
}

#[test]
fn placed_pods_terms_are_parsed_once_and_dropped_with_the_pod() {
    let mut cache = terms::TermCache::default();
    let p = Arc::new(
        pod(
            "a",
            json!({}),
            required_anti_affinity(json!({"matchLabels": {"app": "x"}}), "zone"),
        )
        .pod
        .as_ref()
        .clone(),
    );
    assert_eq!(cache.terms(&p).terms.required_anti_affinity.len(), 1);
    assert_eq!(cache.terms(&p).terms.required_anti_affinity.len(), 1);
    assert_eq!(cache.len(), 1);
    drop(p);
    for i in 0..2000 {
        let other = Arc::new(
            pod(&format!("p{i}"), json!({}), Value::Null)
                .pod
                .as_ref()
                .clone(),
        );
        cache.terms(&other);
    }
    assert!(
        cache.len() < 2000,
        "dropped pods are swept: {}",
        cache.len()
    );
}

/// A small deterministic generator for the randomized comparisons.
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

/// A random term over a few labels, topology keys and namespaces.
fn random_term(rng: &mut Lcg) -> Value {
    let selector = match rng.below(5) {
        0 => json!({"matchLabels": {"app": rng.pick(&["a", "b", "c"])}}),
        1 => {
            json!({"matchExpressions": [{"key": "app", "operator": "In", "values": ["a", rng.pick(&["b", "c"])]}]})
        }
        2 => json!({"matchExpressions": [{"key": "tier", "operator": "Exists"}]}),
        3 => json!({"matchLabels": {"app": rng.pick(&["a", "b"])}, "matchExpressions": [
            {"key": "tier", "operator": "NotIn", "values": ["1"]}]}),
        _ => json!({"matchLabels": {"tier": rng.pick(&["1", "2"])}}),
    };
    let mut term = json!({"labelSelector": selector,
        "topologyKey": rng.pick(&["zone", "kubernetes.io/hostname", "rack"])});
    match rng.below(4) {
        0 => term["namespaces"] = json!([rng.pick(&["ns1", "ns2"])]),
        1 => term["namespaceSelector"] = json!({"matchLabels": {"team": rng.pick(&["x", "y"])}}),
        2 => term["namespaceSelector"] = json!({}),
        _ => {}
    }
    term
}

fn random_pod(rng: &mut Lcg, name: &str) -> PodInfo {
    let mut labels = json!({"app": rng.pick(&["a", "b", "c"])});
    if rng.below(2) == 0 {
        labels["tier"] = json!(rng.pick(&["1", "2"]));
    }
    let mut affinity = json!({});
    let terms = |rng: &mut Lcg, n: usize| (0..n).map(|_| random_term(rng)).collect::<Vec<_>>();
    let weighted = |rng: &mut Lcg, n: usize| {
        (0..n)
            .map(|_| json!({"weight": 1 + rng.below(50), "podAffinityTerm": random_term(rng)}))
            .collect::<Vec<_>>()
    };
    match rng.below(6) {
        0 => {
            let n = 1 + rng.below(2);
            affinity["podAntiAffinity"] =
                json!({"requiredDuringSchedulingIgnoredDuringExecution": terms(rng, n)});
        }
        1 => {
            let n = 1 + rng.below(2);
            affinity["podAffinity"] =
                json!({"requiredDuringSchedulingIgnoredDuringExecution": terms(rng, n)});
        }
        2 => {
            affinity["podAffinity"] =
                json!({"preferredDuringSchedulingIgnoredDuringExecution": weighted(rng, 1)});
            affinity["podAntiAffinity"] =
                json!({"preferredDuringSchedulingIgnoredDuringExecution": weighted(rng, 1)});
        }
        _ => {}
    }
    let affinity = if affinity.as_object().is_some_and(|a| a.is_empty()) {
        Value::Null
    } else {
        affinity
    };
    pod_in(rng.pick(&["ns1", "ns2", "ns3"]), name, labels, affinity)
}

fn random_node(rng: &mut Lcg, name: &str) -> NodeInfo {
    let mut labels = json!({"zone": rng.pick(&["z1", "z2", "z3"])});
    if rng.below(3) > 0 {
        labels["rack"] = json!(rng.pick(&["r1", "r2"]));
    }
    node(name, labels)
}

/// The index (kept across snapshots that change a few nodes at a time)
/// counts and scores exactly as a pod-by-pod scan does.
#[test]
fn the_cluster_index_agrees_with_a_scan_of_every_pod() {
    let mut rng = Lcg(42);
    let namespaces = [
        ("ns1", json!({"team": "x"})),
        ("ns2", json!({"team": "y"})),
        ("ns3", json!({})),
    ];
    // Pods keep their Arc while they stay on a node, as in the
    // scheduler's cache, so the index sees pods come and go one by one.
    let mut nodes: Vec<(NodeInfo, Vec<Arc<PodInfo>>)> = (0..12)
        .map(|i| {
            let pods = (0..rng.below(4))
                .map(|j| Arc::new(random_pod(&mut rng, &format!("p{i}-{j}"))))
                .collect();
            (random_node(&mut rng, &format!("n{i}")), pods)
        })
        .collect();
    let build = |nodes: &[(NodeInfo, Vec<Arc<PodInfo>>)]| {
        let nodes = nodes
            .iter()
            .map(|(info, pods)| {
                let mut info = info.clone();
                for pod in pods {
                    info.add_pod(pod.clone());
                }
                Arc::new(info)
            })
            .collect();
        let plain = snapshot(Vec::new(), &namespaces);
        Snapshot::new(nodes, plain.cluster.clone())
    };
    let mut snap = build(&nodes);
    let mut index = index::ClusterIndex::default();
    let mut cache = terms::TermCache::default();
    for round in 0..60 {
        // Change a node or two: a pod more, a pod less, or another node.
        for _ in 0..1 + rng.below(2) {
            let at = rng.below(nodes.len() + 1);
            match rng.below(4) {
                _ if at == nodes.len() => {
                    nodes.push((random_node(&mut rng, &format!("m{round}")), Vec::new()))
                }
                0 if !nodes[at].1.is_empty() => {
                    let which = rng.below(nodes[at].1.len());
                    nodes[at].1.swap_remove(which);
                }
                1 if nodes.len() > 3 => {
                    nodes.remove(at);
                }
                2 if rng.below(3) == 0 => {
                    // Relabelled: its pods now count in other domains.
                    let name = nodes[at].0.name().to_string();
                    nodes[at].0 = random_node(&mut rng, &name);
                }
                _ => {
                    let pod = random_pod(&mut rng, &format!("q{round}"));
                    nodes[at].1.push(Arc::new(pod));
                }
            }
        }
        let next = build(&nodes);
        // Keep the Arcs of unchanged nodes, as the scheduler's cache does.
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
        index.sync(&snap.nodes);
        for probe in 0..4 {
            let incoming = random_pod(&mut rng, &format!("in{round}-{probe}"));
            let mut terms = PodTerms::parse(&incoming.pod).unwrap();
            terms.merge_namespaces(&snap.cluster.namespaces);
            let ns_labels = snap
                .cluster
                .namespaces
                .get(incoming.namespace())
                .cloned()
                .unwrap_or_default();
            let by_index =
                PreFilterState::compute(&incoming.pod, terms.clone(), ns_labels.clone(), &index);
            let by_scan = PreFilterState::compute_by_scan(
                &incoming.pod,
                terms.clone(),
                ns_labels.clone(),
                &snap,
                &mut cache,
            );
            let what = format!("round {round}, pod {:?}", incoming.pod.spec);
            assert_eq!(
                by_index.existing_anti_affinity.sorted(),
                by_scan.existing_anti_affinity.sorted(),
                "{what}"
            );
            assert_eq!(
                by_index.affinity.sorted(),
                by_scan.affinity.sorted(),
                "{what}"
            );
            assert_eq!(
                by_index.anti_affinity.sorted(),
                by_scan.anti_affinity.sorted(),
                "{what}"
            );
            for weight in [0, 1, 7] {
                let scored = index.scores(&incoming.pod, &terms, &ns_labels, weight);
                let scanned = scoring::Scorer {
                    incoming: &incoming.pod,
                    terms: &terms,
                    namespace_labels: &ns_labels,
                    hard_pod_affinity_weight: weight,
                    has_constraints: has_preferred_terms(&incoming),
                }
                .pre_score(&snap.nodes, &mut cache);
                assert_eq!(
                    scored.map(|s| s.scores.sorted()),
                    scanned.map(|s| s.scores.sorted()),
                    "{what}, weight {weight}"
                );
            }
        }
    }
}
