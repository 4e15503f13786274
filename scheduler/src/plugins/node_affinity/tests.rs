use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::Node;
use serde_json::{json, Value};

use super::*;
use crate::framework::Code;

/// `None` when the node passes, else the code and reason.
type Outcome = Option<(Code, String)>;

fn node(name: &str, labels: Value) -> Arc<NodeInfo> {
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels},
        "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"}},
    }))
    .unwrap();
    Arc::new(NodeInfo::new(Arc::new(node)))
}

fn pod(spec: Value) -> PodInfo {
    let mut spec = spec;
    spec["containers"] = json!([{"name": "c", "image": "i"}]);
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "p", "namespace": "default"},
        "spec": spec,
    }))
    .unwrap();
    PodInfo::new(Arc::new(pod))
}

fn required(terms: Value) -> Value {
    json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}})
}

fn preferred(terms: Value) -> Value {
    json!({"affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": terms}}})
}

fn expr(key: &str, op: &str, values: &[&str]) -> Value {
    json!({"key": key, "operator": op, "values": values})
}

fn plugin(args: Value) -> Arc<dyn Plugin> {
    new(&args).unwrap()
}

/// Runs PreFilter then Filter; `None` when the node passes.
fn run_filter(plugin: &dyn Plugin, pod: &PodInfo, node: &NodeInfo) -> Outcome {
    let mut state = CycleState::default();
    let (_, status) = plugin.pre_filter(&mut state, pod, &Snapshot::default());
    match status.code {
        Code::Skip => return None,
        Code::Success => {}
        _ => return Some((status.code, status.message())),
    }
    let status = plugin.filter(&state, pod, node);
    match status.is_success() {
        true => None,
        false => Some((status.code, status.message())),
    }
}

#[test]
fn filter_matches_node_selector_and_required_terms() {
    let labels = json!({"zone": "a", "disk": "ssd", "cores": "8", "gpu": "yes"});
    let reject = Some((
        Code::UnschedulableAndUnresolvable,
        ERR_REASON_POD.to_string(),
    ));
    let cases: Vec<(&str, Value, Outcome)> = vec![
        ("no constraints", json!({}), None),
        (
            "nodeSelector matches",
            json!({"nodeSelector": {"zone": "a"}}),
            None,
        ),
        (
            "nodeSelector differs",
            json!({"nodeSelector": {"zone": "b"}}),
            reject.clone(),
        ),
        (
            "nodeSelector key missing",
            json!({"nodeSelector": {"rack": "1"}}),
            reject.clone(),
        ),
        (
            "In",
            required(json!([{"matchExpressions": [expr("zone", "In", &["a", "b"])]}])),
            None,
        ),
        (
            "In misses",
            required(json!([{"matchExpressions": [expr("zone", "In", &["b"])]}])),
            reject.clone(),
        ),
        (
            "NotIn",
            required(json!([{"matchExpressions": [expr("zone", "NotIn", &["b"])]}])),
            None,
        ),
        (
            "NotIn hits",
            required(json!([{"matchExpressions": [expr("zone", "NotIn", &["a"])]}])),
            reject.clone(),
        ),
        (
            "NotIn on a missing label",
            required(json!([{"matchExpressions": [expr("rack", "NotIn", &["1"])]}])),
            None,
        ),
        (
            "Exists",
            required(json!([{"matchExpressions": [{"key": "gpu", "operator": "Exists"}]}])),
            None,
        ),
        (
            "Exists misses",
            required(json!([{"matchExpressions": [{"key": "rack", "operator": "Exists"}]}])),
            reject.clone(),
        ),
        (
            "DoesNotExist",
            required(json!([{"matchExpressions": [{"key": "rack", "operator": "DoesNotExist"}]}])),
            None,
        ),
        (
            "DoesNotExist hits",
            required(json!([{"matchExpressions": [{"key": "gpu", "operator": "DoesNotExist"}]}])),
            reject.clone(),
        ),
        (
            "Gt",
            required(json!([{"matchExpressions": [expr("cores", "Gt", &["4"])]}])),
            None,
        ),
        (
            "Gt equal",
            required(json!([{"matchExpressions": [expr("cores", "Gt", &["8"])]}])),
            reject.clone(),
        ),
        (
            "Lt",
            required(json!([{"matchExpressions": [expr("cores", "Lt", &["16"])]}])),
            None,
        ),
        (
            "Lt misses",
            required(json!([{"matchExpressions": [expr("cores", "Lt", &["2"])]}])),
            reject.clone(),
        ),
        (
            "Gt on a non-integer label",
            required(json!([{"matchExpressions": [expr("zone", "Gt", &["1"])]}])),
            reject.clone(),
        ),
        (
            "Gt on a missing label",
            required(json!([{"matchExpressions": [expr("rack", "Gt", &["1"])]}])),
            reject.clone(),
        ),
        (
            "expressions of a term are ANDed",
            required(
                json!([{"matchExpressions": [expr("zone", "In", &["a"]), expr("disk", "In", &["hdd"])]}]),
            ),
            reject.clone(),
        ),
        (
            "terms are ORed",
            required(json!([
                {"matchExpressions": [expr("zone", "In", &["b"])]},
                {"matchExpressions": [expr("disk", "In", &["ssd"])]},
            ])),
            None,
        ),
        (
            "an empty term list matches nothing",
            required(json!([])),
            reject.clone(),
        ),
        (
            "an empty term matches nothing",
            required(json!([{}])),
            reject.clone(),
        ),
        (
            "a term that does not parse matches nothing, the others still count",
            required(json!([
                {"matchExpressions": [expr("zone", "Near", &["a"])]},
                {"matchExpressions": [expr("disk", "In", &["ssd"])]},
            ])),
            None,
        ),
        (
            "a bad Gt value spoils its term",
            required(json!([{"matchExpressions": [expr("cores", "Gt", &["x"])]}])),
            reject.clone(),
        ),
        (
            "nodeSelector and affinity must both hold",
            {
                let mut spec =
                    required(json!([{"matchExpressions": [expr("zone", "In", &["a"])]}]));
                spec["nodeSelector"] = json!({"disk": "hdd"});
                spec
            },
            reject.clone(),
        ),
        (
            "matchFields metadata.name In",
            required(json!([{"matchFields": [expr("metadata.name", "In", &["n1"])]}])),
            None,
        ),
        (
            "matchFields metadata.name NotIn",
            required(json!([{"matchFields": [expr("metadata.name", "NotIn", &["n1"])]}])),
            reject.clone(),
        ),
        (
            "matchFields with two values does not parse",
            required(json!([{"matchFields": [expr("metadata.name", "NotIn", &["n2", "n3"])]}])),
            reject.clone(),
        ),
        (
            "matchFields and matchExpressions of a term are ANDed",
            required(json!([{
                "matchExpressions": [expr("zone", "In", &["b"])],
                "matchFields": [expr("metadata.name", "In", &["n1"])],
            }])),
            reject.clone(),
        ),
    ];
    let plugin = plugin(Value::Null);
    let node = node("n1", labels);
    for (name, spec, want) in cases {
        let got = run_filter(plugin.as_ref(), &pod(spec), &node);
        assert_eq!(got, want, "{name}");
    }
}

#[test]
fn pre_filter_skips_pods_without_constraints() {
    let plugin = plugin(Value::Null);
    let mut state = CycleState::default();
    let (_, status) = plugin.pre_filter(&mut state, &pod(json!({})), &Snapshot::default());
    assert_eq!(status.code, Code::Skip);
    let (_, status) = plugin.pre_filter(
        &mut state,
        &pod(json!({"nodeSelector": {}})),
        &Snapshot::default(),
    );
    assert_eq!(status.code, Code::Success);
}

#[test]
fn pre_filter_narrows_to_the_pinned_node_names() {
    let names = |list: &[&str]| Some(list.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>());
    let cases: Vec<(&str, Value, Option<BTreeSet<String>>, Code)> = vec![
        (
            "one term",
            required(json!([{"matchFields": [expr("metadata.name", "In", &["n1", "n2"])]}])),
            names(&["n1", "n2"]),
            Code::Success,
        ),
        (
            "requirements of a term intersect",
            required(json!([{"matchFields": [
                expr("metadata.name", "In", &["n1", "n2"]),
                expr("metadata.name", "In", &["n2", "n3"]),
            ]}])),
            names(&["n2"]),
            Code::Success,
        ),
        (
            "terms unite",
            required(json!([
                {"matchFields": [expr("metadata.name", "In", &["n1"])]},
                {"matchFields": [expr("metadata.name", "In", &["n3"])]},
            ])),
            names(&["n1", "n3"]),
            Code::Success,
        ),
        (
            "a term without a name pins nothing",
            required(json!([
                {"matchFields": [expr("metadata.name", "In", &["n1"])]},
                {"matchExpressions": [expr("zone", "In", &["a"])]},
            ])),
            None,
            Code::Success,
        ),
        (
            "NotIn pins nothing",
            required(json!([{"matchFields": [expr("metadata.name", "NotIn", &["n1"])]}])),
            None,
            Code::Success,
        ),
        (
            "conflicting names",
            required(json!([{"matchFields": [
                expr("metadata.name", "In", &["n1"]),
                expr("metadata.name", "In", &["n2"]),
            ]}])),
            None,
            Code::UnschedulableAndUnresolvable,
        ),
    ];
    let plugin = plugin(Value::Null);
    for (name, spec, want, code) in cases {
        let mut state = CycleState::default();
        let (result, status) = plugin.pre_filter(&mut state, &pod(spec), &Snapshot::default());
        assert_eq!(status.code, code, "{name}");
        assert_eq!(result.node_names, want, "{name}");
        if code != Code::Success {
            assert_eq!(status.message(), ERR_REASON_CONFLICT, "{name}");
        }
    }
}

/// PreScore, Score on every node, NormalizeScore: the final scores.
fn run_score(
    plugin: &dyn Plugin,
    pod: &PodInfo,
    nodes: &[Arc<NodeInfo>],
) -> Result<Vec<i64>, Status> {
    let mut state = CycleState::default();
    let status = plugin.pre_score(&mut state, pod, nodes);
    match status.code {
        Code::Success => {}
        Code::Skip => return Ok(vec![0; nodes.len()]),
        _ => return Err(status),
    }
    let mut scores = Vec::new();
    for node in nodes {
        scores.push(NodeScore {
            name: node.name().into(),
            score: plugin.score(&state, pod, node)?,
        });
    }
    if let Some(status) = plugin.normalize_scores(&state, pod, &mut scores) {
        assert!(status.is_success());
    }
    Ok(scores.into_iter().map(|s| s.score).collect())
}

fn scoring_nodes() -> Vec<Arc<NodeInfo>> {
    vec![
        node("n1", json!({"zone": "a", "disk": "ssd"})),
        node("n2", json!({"zone": "a"})),
        node("n3", json!({"zone": "b"})),
    ]
}

#[test]
fn score_sums_matching_preferred_weights_normalized_to_100() {
    let spec = preferred(json!([
        {"weight": 2, "preference": {"matchExpressions": [expr("zone", "In", &["a"])]}},
        {"weight": 8, "preference": {"matchExpressions": [expr("disk", "In", &["ssd"])]}},
        {"weight": 0, "preference": {"matchExpressions": [expr("zone", "In", &["b"])]}},
        {"weight": 50, "preference": {}},
    ]));
    let plugin = plugin(Value::Null);
    let scores = run_score(plugin.as_ref(), &pod(spec), &scoring_nodes()).unwrap();
    assert_eq!(scores, vec![100, 20, 0]);
}

#[test]
fn score_skips_pods_without_preferences_and_errs_on_bad_terms() {
    let plugin = plugin(Value::Null);
    let mut state = CycleState::default();
    let status = plugin.pre_score(&mut state, &pod(json!({})), &scoring_nodes());
    assert_eq!(status.code, Code::Skip);

    let bad = preferred(
        json!([{"weight": 1, "preference": {"matchExpressions": [expr("zone", "Near", &["a"])]}}]),
    );
    let err = run_score(plugin.as_ref(), &pod(bad), &scoring_nodes()).unwrap_err();
    assert_eq!(err.code, Code::Error);
    assert!(
        err.message().contains("Unsupported value: \"Near\""),
        "{}",
        err.message()
    );

    let none_match = preferred(
        json!([{"weight": 5, "preference": {"matchExpressions": [expr("zone", "In", &["c"])]}}]),
    );
    let scores = run_score(plugin.as_ref(), &pod(none_match), &scoring_nodes()).unwrap();
    assert_eq!(scores, vec![0, 0, 0]);
}

#[test]
fn added_affinity_applies_to_every_pod() {
    let plugin = plugin(json!({
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "NodeAffinityArgs",
        "addedAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [expr("zone", "In", &["a"])]},
            ]},
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 3, "preference": {"matchExpressions": [expr("disk", "Exists", &[])]}},
            ],
        },
    }));
    let nodes = scoring_nodes();
    let plain = pod(json!({}));
    assert_eq!(run_filter(plugin.as_ref(), &plain, &nodes[0]), None);
    assert_eq!(
        run_filter(plugin.as_ref(), &plain, &nodes[2]),
        Some((
            Code::UnschedulableAndUnresolvable,
            ERR_REASON_ENFORCED.to_string()
        ))
    );
    // The pod's own selector still applies on top.
    let picky = pod(json!({"nodeSelector": {"disk": "ssd"}}));
    assert_eq!(
        run_filter(plugin.as_ref(), &picky, &nodes[1]),
        Some((
            Code::UnschedulableAndUnresolvable,
            ERR_REASON_POD.to_string()
        ))
    );
    // Added preferences score pods that have none of their own.
    assert_eq!(
        run_score(plugin.as_ref(), &plain, &nodes).unwrap(),
        vec![100, 0, 0]
    );
    let own = pod(preferred(json!([
        {"weight": 1, "preference": {"matchExpressions": [expr("zone", "In", &["b"])]}},
    ])));
    assert_eq!(
        run_score(plugin.as_ref(), &own, &nodes).unwrap(),
        vec![100, 0, 33]
    );
}

#[test]
fn invalid_args_are_refused() {
    let unknown = new(&json!({"addedAfinity": {}})).err().unwrap();
    assert!(unknown.contains("addedAfinity"), "{unknown}");
    let bad = new(
        &json!({"addedAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [expr("zone", "In", &[])]}],
        }}}),
    )
    .err()
    .unwrap();
    assert!(
        bad.starts_with("parsing addedAffinity.requiredDuringSchedulingIgnoredDuringExecution"),
        "{bad}"
    );
    let bad = new(
        &json!({"addedAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 1, "preference": {"matchFields": [expr("metadata.name", "Exists", &[])]}},
        ]}}),
    )
    .err()
    .unwrap();
    assert!(
        bad.starts_with("parsing addedAffinity.preferredDuringSchedulingIgnoredDuringExecution"),
        "{bad}"
    );
    assert!(new(&json!({})).is_ok());
}

#[test]
fn required_affinity_helper_matches_as_the_filter() {
    let spec = required(json!([{"matchExpressions": [expr("zone", "In", &["a"])]}]));
    let affinity = RequiredNodeAffinity::of_pod(&pod(spec).pod);
    let nodes = scoring_nodes();
    assert!(affinity.matches(&nodes[0].node));
    assert!(!affinity.matches(&nodes[2].node));
}
