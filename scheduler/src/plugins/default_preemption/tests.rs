//! Preemption on small clusters: which node, which victims, and why not.

use std::collections::BTreeSet;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use serde_json::{json, Value};

use super::*;
use crate::framework::ClusterObjects;

const CONFLICTS: &str = "test/conflicts";

/// A pod in the default namespace asking for `cpu` milli-CPU.
fn pod(name: &str, priority: i32, cpu: i64) -> Value {
    json!({
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "priority": priority,
            "containers": [{"name": "c", "image": "i",
                "resources": {"requests": {"cpu": format!("{cpu}m")}}}],
        },
    })
}

/// `pod` with `patch` merged in, one level deep per top-level key.
fn with(mut pod: Value, patch: Value) -> Value {
    if let (Some(pod), Some(patch)) = (pod.as_object_mut(), patch.as_object()) {
        for (key, value) in patch {
            match (
                pod.get_mut(key).and_then(Value::as_object_mut),
                value.as_object(),
            ) {
                (Some(into), Some(fields)) => {
                    for (k, v) in fields {
                        into.insert(k.clone(), v.clone());
                    }
                }
                _ => {
                    pod.insert(key.clone(), value.clone());
                }
            }
        }
    }
    pod
}

fn labelled(pod: Value, key: &str, value: &str) -> Value {
    with(pod, json!({"metadata": {"labels": {key: value}}}))
}

fn started(pod: Value, at: &str) -> Value {
    with(pod, json!({"status": {"startTime": at}}))
}

fn info(pod: Value) -> PodInfo {
    let pod: Pod = serde_json::from_value(pod).expect("test pod");
    PodInfo::new(Arc::new(pod))
}

/// Nodes of `cpu` milli-CPU (and 110 pods) with their pods; PDBs.
fn cluster(nodes: Vec<(&str, i64, Vec<Value>)>, pdbs: Vec<Value>) -> Snapshot {
    let infos = nodes
        .into_iter()
        .map(|(name, cpu, pods)| {
            let node: Node = serde_json::from_value(json!({
                "metadata": {"name": name},
                "status": {"allocatable": {"cpu": format!("{cpu}m"), "memory": "8Gi", "pods": "110"}},
            }))
            .expect("test node");
            let mut info = NodeInfo::new(Arc::new(node));
            for pod in pods {
                let pod = with(pod, json!({"spec": {"nodeName": name}}));
                info.add_pod(Arc::new(self::info(pod)));
            }
            Arc::new(info)
        })
        .collect();
    let pdbs = pdbs
        .into_iter()
        .map(|pdb| Arc::new(serde_json::from_value::<PodDisruptionBudget>(pdb).expect("test pdb")))
        .collect();
    let cluster = ClusterObjects {
        pdbs,
        ..ClusterObjects::default()
    };
    Snapshot::new(infos, Arc::new(cluster))
}

fn pdb(app: &str, disruptions_allowed: i32, disrupted: &[&str]) -> Value {
    let disrupted: serde_json::Map<String, Value> = disrupted
        .iter()
        .map(|p| (p.to_string(), json!("2024-01-01T00:00:00Z")))
        .collect();
    json!({
        "metadata": {"name": format!("{app}-pdb"), "namespace": "default"},
        "spec": {"selector": {"matchLabels": {"app": app}}},
        "status": {"disruptionsAllowed": disruptions_allowed, "currentHealthy": 1,
            "desiredHealthy": 1, "expectedPods": 1, "disruptedPods": disrupted},
    })
}

/// The test profile: PreFilter notes the nodes running a pod labelled
/// `conflict` (as InterPodAffinity notes existing anti-affinity), Filter
/// rejects those and checks pods and cpu against allocatable.
fn runners() -> (PreFilterRunner, FilterRunner) {
    let pre_filter = PreFilterRunner(Arc::new(|_: &PodInfo, snapshot: &Snapshot| {
        let conflicts: BTreeSet<String> = snapshot
            .nodes
            .iter()
            .filter(|n| n.pods.iter().any(|p| p.labels().contains_key("conflict")))
            .map(|n| n.name().to_string())
            .collect();
        let mut state = CycleState::default();
        state.write(CONFLICTS, conflicts);
        Ok(state)
    }));
    let filter = FilterRunner(Arc::new(
        |state: &mut CycleState, pod: &PodInfo, node: &NodeInfo, _: &Snapshot| {
            let Some(conflicts) = state.read::<BTreeSet<String>>(CONFLICTS) else {
                return Status::error("PreFilter did not run");
            };
            if conflicts.contains(node.name()) {
                return Status::unschedulable(
                    "node(s) didn't satisfy existing pods anti-affinity rules",
                );
            }
            if node.pods.len() as i64 + 1 > node.allocatable.allowed_pods {
                return Status::unschedulable("Too many pods");
            }
            if node.requested.milli_cpu + pod.requests.milli_cpu > node.allocatable.milli_cpu {
                return Status::unschedulable("Insufficient cpu");
            }
            Status::success()
        },
    ));
    (pre_filter, filter)
}

fn state() -> CycleState {
    let (pre_filter, filter) = runners();
    let mut state = CycleState::default();
    write_runners(&mut state, pre_filter, filter);
    state
}

/// What the scheduling cycle's Filter said about each node, with the
/// nodes in `unresolvable` marked as a filter that preemption cannot help.
fn statuses(preemptor: &PodInfo, snapshot: &Snapshot, unresolvable: &[&str]) -> NodeStatuses {
    let (pre_filter, filter) = runners();
    let mut out = NodeStatuses::new();
    for node in &snapshot.nodes {
        let status = match unresolvable.contains(&node.name()) {
            true => Status::unresolvable("node(s) didn't match Pod's node affinity/selector"),
            false => {
                let mut state = (pre_filter.0)(preemptor, snapshot).expect("test PreFilter");
                (filter.0)(&mut state, preemptor, node, snapshot)
            }
        };
        assert!(
            !status.is_success(),
            "{} fits the preemptor already",
            node.name()
        );
        out.insert(node.name().to_string(), status);
    }
    out
}

fn plugin(args: Value) -> DefaultPreemption {
    DefaultPreemption {
        args: DefaultPreemptionArgs::from_json(&args).expect("test args"),
    }
}

/// Preempts for `preemptor` with the dry run starting at `offset`.
fn preempt_at(
    preemptor: &PodInfo,
    snapshot: &Snapshot,
    unresolvable: &[&str],
    args: Value,
    offset: usize,
) -> (PostFilterResult, Status) {
    let statuses = statuses(preemptor, snapshot, unresolvable);
    plugin(args).preempt(&state(), preemptor, snapshot, &statuses, |n| offset % n)
}

fn names(result: &PostFilterResult) -> (Option<&str>, Vec<&str>) {
    (
        result.nominated_node.as_deref(),
        result.victims.iter().map(|p| p.name()).collect(),
    )
}

#[test]
fn the_node_whose_victims_matter_least_is_chosen() {
    struct Case {
        name: &'static str,
        nodes: Vec<(&'static str, i64, Vec<Value>)>,
        node: &'static str,
        victims: Vec<&'static str>,
    }
    let cases = vec![
        Case {
            name: "lowest highest-priority victim",
            nodes: vec![
                ("n1", 2000, vec![pod("a", 5, 2000)]),
                ("n2", 2000, vec![pod("b", 1, 2000)]),
                ("n3", 2000, vec![pod("c", 3, 1000), pod("d", 2, 1000)]),
            ],
            node: "n2",
            victims: vec!["b"],
        },
        Case {
            name: "smallest sum of victim priorities",
            nodes: vec![
                ("n1", 2000, vec![pod("a", 3, 1000), pod("b", 3, 1000)]),
                ("n2", 2000, vec![pod("c", 3, 1000), pod("d", 1, 1000)]),
            ],
            node: "n2",
            victims: vec!["c", "d"],
        },
        Case {
            name: "negative priorities still count per victim",
            nodes: vec![
                ("n1", 2000, vec![pod("a", -5, 1000), pod("b", -5, 1000)]),
                ("n2", 2000, vec![pod("c", -5, 2000)]),
            ],
            node: "n2",
            victims: vec!["c"],
        },
        Case {
            name: "latest start of the highest-priority victims",
            nodes: vec![
                (
                    "n1",
                    2000,
                    vec![started(pod("a", 1, 2000), "2024-01-01T00:00:00Z")],
                ),
                (
                    "n2",
                    2000,
                    vec![started(pod("b", 1, 2000), "2024-06-01T00:00:00Z")],
                ),
                (
                    "n3",
                    2000,
                    vec![started(pod("c", 1, 2000), "2023-06-01T00:00:00Z")],
                ),
            ],
            node: "n2",
            victims: vec!["b"],
        },
        Case {
            name: "pods of equal or higher priority are never victims",
            nodes: vec![
                ("n1", 2000, vec![pod("a", 10, 1000), pod("b", 20, 1000)]),
                (
                    "n2",
                    3000,
                    vec![pod("c", 10, 1000), pod("d", 9, 1000), pod("e", 1, 1000)],
                ),
            ],
            node: "n2",
            victims: vec!["d", "e"],
        },
    ];
    let preemptor = info(pod("p", 10, 2000));
    for case in cases {
        for offset in 0..case.nodes.len() {
            let snapshot = cluster(case.nodes.clone(), vec![]);
            let (result, status) = preempt_at(&preemptor, &snapshot, &[], Value::Null, offset);
            assert!(status.is_success(), "{}: {status}", case.name);
            assert_eq!(
                names(&result),
                (Some(case.node), case.victims.clone()),
                "{} (offset {offset})",
                case.name
            );
        }
    }
}

#[test]
fn victims_are_the_minimal_set_most_important_reprieved_first() {
    let snapshot = cluster(
        vec![(
            "n1",
            4000,
            vec![
                pod("p1", 1, 1000),
                pod("p4", 4, 1000),
                pod("p2", 2, 1000),
                pod("p3", 3, 1000),
            ],
        )],
        vec![],
    );
    let preemptor = info(pod("p", 10, 2000));
    let (result, status) = preempt_at(&preemptor, &snapshot, &[], Value::Null, 0);
    assert!(status.is_success(), "{status}");
    assert_eq!(names(&result), (Some("n1"), vec!["p2", "p1"]));

    // Among equal priorities the one running longer is kept.
    let snapshot = cluster(
        vec![(
            "n1",
            2000,
            vec![
                started(pod("young", 1, 1000), "2024-06-01T00:00:00Z"),
                started(pod("old", 1, 1000), "2024-01-01T00:00:00Z"),
            ],
        )],
        vec![],
    );
    let preemptor = info(pod("p", 10, 1000));
    let (result, _) = preempt_at(&preemptor, &snapshot, &[], Value::Null, 0);
    assert_eq!(names(&result), (Some("n1"), vec!["young"]));
}

#[test]
fn pdb_protected_victims_are_spared_when_another_node_works() {
    let nodes = || {
        vec![
            ("n1", 2000, vec![labelled(pod("db", 1, 2000), "app", "db")]),
            (
                "n2",
                2000,
                vec![labelled(pod("web", 5, 2000), "app", "web")],
            ),
        ]
    };
    let preemptor = info(pod("p", 10, 2000));
    let cases: Vec<(&str, Vec<Value>, &str, &str)> = vec![
        ("no budget", vec![], "n1", "db"),
        ("budget exhausted", vec![pdb("db", 0, &[])], "n2", "web"),
        ("budget allows one", vec![pdb("db", 1, &[])], "n1", "db"),
        ("already disrupted", vec![pdb("db", 0, &["db"])], "n1", "db"),
        (
            "budget in another namespace",
            vec![with(
                pdb("db", 0, &[]),
                json!({"metadata": {"namespace": "other"}}),
            )],
            "n1",
            "db",
        ),
        (
            "empty selector matches nothing",
            vec![with(pdb("db", 0, &[]), json!({"spec": {"selector": {}}}))],
            "n1",
            "db",
        ),
    ];
    for (name, pdbs, node, victim) in cases {
        let snapshot = cluster(nodes(), pdbs);
        let (result, status) = preempt_at(&preemptor, &snapshot, &[], Value::Null, 0);
        assert!(status.is_success(), "{name}: {status}");
        assert_eq!(names(&result), (Some(node), vec![victim]), "{name}");
    }

    // With no other way, the protected pod is a victim after all.
    let snapshot = cluster(
        vec![("n1", 2000, vec![labelled(pod("db", 1, 2000), "app", "db")])],
        vec![pdb("db", 0, &[])],
    );
    let (result, status) = preempt_at(&preemptor, &snapshot, &[], Value::Null, 0);
    assert!(status.is_success(), "{status}");
    assert_eq!(names(&result), (Some("n1"), vec!["db"]));
}

#[test]
fn pdb_violating_victims_are_reprieved_before_others() {
    let nodes = vec![(
        "n1",
        2000,
        vec![
            labelled(pod("db", 1, 1000), "app", "db"),
            pod("batch", 2, 1000),
        ],
    )];
    let preemptor = info(pod("p", 10, 1000));
    let snapshot = cluster(nodes.clone(), vec![]);
    let (result, _) = preempt_at(&preemptor, &snapshot, &[], Value::Null, 0);
    assert_eq!(names(&result), (Some("n1"), vec!["db"]));

    let snapshot = cluster(nodes, vec![pdb("db", 0, &[])]);
    let (result, status) = preempt_at(&preemptor, &snapshot, &[], Value::Null, 0);
    assert!(status.is_success(), "{status}");
    assert_eq!(names(&result), (Some("n1"), vec!["batch"]));
}

#[test]
fn pre_filter_is_run_again_on_the_what_if_cluster() {
    // The preemptor fits n1 by cpu, but an existing pod's anti-affinity
    // (noted by PreFilter) keeps it out: only that pod must go.
    let snapshot = cluster(
        vec![(
            "n1",
            4000,
            vec![
                labelled(pod("guard", 1, 500), "conflict", "true"),
                pod("other", 1, 500),
            ],
        )],
        vec![],
    );
    let preemptor = info(pod("p", 10, 1000));
    let (result, status) = preempt_at(&preemptor, &snapshot, &[], Value::Null, 0);
    assert!(status.is_success(), "{status}");
    assert_eq!(names(&result), (Some("n1"), vec!["guard"]));
}

#[test]
fn unresolvable_nodes_are_not_candidates_and_the_message_says_why() {
    let snapshot = cluster(
        vec![
            ("n1", 2000, vec![pod("a", 1, 2000)]),
            ("n2", 2000, vec![pod("b", 20, 2000)]),
            ("n3", 1000, vec![pod("c", 1, 1000)]),
        ],
        vec![],
    );
    let preemptor = info(pod("p", 10, 2000));
    let statuses = statuses(&preemptor, &snapshot, &["n1"]);
    let (result, status) =
        plugin(Value::Null).post_filter(&state(), &preemptor, &snapshot, &statuses);
    assert_eq!(status.code, Code::Unschedulable);
    assert_eq!(
        status.reasons[..],
        ["preemption: 0/3 nodes are available: 1 Insufficient cpu, \
          1 No preemption victims found for incoming pod, \
          1 Preemption is not helpful for scheduling."]
    );
    assert_eq!(result.nominated_node, None);

    // Nothing to try at all.
    let (_, status) =
        plugin(Value::Null).post_filter(&state(), &preemptor, &snapshot, &NodeStatuses::new());
    assert_eq!(
        status.reasons[..],
        ["preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."]
    );
}

#[test]
fn preemption_policy_never_does_not_preempt() {
    let snapshot = cluster(vec![("n1", 2000, vec![pod("a", 1, 2000)])], vec![]);
    let preemptor = info(with(
        pod("p", 10, 2000),
        json!({"spec": {"preemptionPolicy": "Never"}}),
    ));
    let statuses = statuses(&preemptor, &snapshot, &[]);
    let (result, status) =
        plugin(Value::Null).post_filter(&state(), &preemptor, &snapshot, &statuses);
    assert_eq!(status.code, Code::Unschedulable);
    assert_eq!(
        status.reasons[..],
        ["preemption: not eligible due to preemptionPolicy=Never."]
    );
    assert_eq!(names(&result), (None, vec![]));
    assert!(!pod_eligible_to_preempt_others(&preemptor, &snapshot));
}

#[test]
fn a_pod_waits_while_its_victims_terminate() {
    let terminating = |p: Value, reason: &str| {
        with(
            p,
            json!({
                "metadata": {"deletionTimestamp": "2024-01-01T00:00:00Z"},
                "status": {"conditions": [{"type": "DisruptionTarget", "status": "True", "reason": reason}]},
            }),
        )
    };
    let preemptor = info(with(
        pod("p", 10, 2000),
        json!({"status": {"nominatedNodeName": "n1"}}),
    ));
    let cases = vec![
        (
            "victim terminating",
            terminating(pod("a", 1, 1000), "PreemptionByScheduler"),
            false,
        ),
        (
            "terminating for another reason",
            terminating(pod("a", 1, 1000), "EvictionByEvictionAPI"),
            true,
        ),
        (
            "terminating pod of higher priority",
            terminating(pod("a", 10, 1000), "PreemptionByScheduler"),
            true,
        ),
        ("nothing terminating", pod("a", 1, 1000), true),
    ];
    for (name, resident, eligible) in cases {
        let snapshot = cluster(
            vec![
                ("n1", 2000, vec![resident, pod("b", 1, 1000)]),
                ("n2", 2000, vec![pod("c", 1, 2000)]),
            ],
            vec![],
        );
        assert_eq!(
            pod_eligible_to_preempt_others(&preemptor, &snapshot),
            eligible,
            "{name}"
        );
        let filtered = statuses(&preemptor, &snapshot, &[]);
        let (result, status) =
            plugin(Value::Null).post_filter(&state(), &preemptor, &snapshot, &filtered);
        match eligible {
            true => assert!(
                status.is_success() && result.nominated_node.is_some(),
                "{name}: {status}"
            ),
            false => {
                assert_eq!(status.code, Code::Unschedulable, "{name}");
                assert_eq!(
                    status.reasons[..],
                    ["preemption: not eligible due to a terminating pod on the nominated node."]
                );
                assert_eq!(result.nominated_node, None);
            }
        }
        // A nominated node that became unresolvable lets the pod try again.
        let filtered = statuses(&preemptor, &snapshot, &["n1"]);
        let (_, status) =
            plugin(Value::Null).post_filter(&state(), &preemptor, &snapshot, &filtered);
        assert!(status.is_success(), "{name}: {status}");
        // So does one the cycle has no answer for (kube-scheduler's default).
        let mut filtered = statuses(&preemptor, &snapshot, &[]);
        filtered.remove("n1");
        let (result, status) =
            plugin(Value::Null).post_filter(&state(), &preemptor, &snapshot, &filtered);
        assert!(status.is_success(), "{name}: {status}");
        assert_eq!(names(&result), (Some("n2"), vec!["c"]), "{name}");
    }
}

#[test]
fn the_dry_run_starts_at_the_offset_and_stops_with_enough_candidates() {
    let nodes = || {
        vec![
            ("n1", 1000, vec![labelled(pod("a", 1, 1000), "app", "db")]),
            ("n2", 1000, vec![pod("b", 1, 1000)]),
            ("n3", 1000, vec![pod("c", 1, 1000)]),
            ("n4", 1000, vec![pod("d", 1, 1000)]),
        ]
    };
    let preemptor = info(pod("p", 10, 1000));
    let one = json!({"minCandidateNodesPercentage": 0, "minCandidateNodesAbsolute": 1});
    let snapshot = cluster(nodes(), vec![]);
    for (offset, node) in [(0, "n1"), (1, "n2"), (2, "n3"), (3, "n4"), (5, "n2")] {
        let (result, _) = preempt_at(&preemptor, &snapshot, &[], one.clone(), offset);
        assert_eq!(
            result.nominated_node.as_deref(),
            Some(node),
            "offset {offset}"
        );
    }
    // A candidate that breaks a PDB does not end the search.
    let snapshot = cluster(nodes(), vec![pdb("db", 0, &[])]);
    let (result, _) = preempt_at(&preemptor, &snapshot, &[], one, 0);
    assert_eq!(result.nominated_node.as_deref(), Some("n2"));
}

#[test]
fn without_runners_preemption_is_an_error() {
    let snapshot = cluster(vec![("n1", 2000, vec![pod("a", 1, 2000)])], vec![]);
    let preemptor = info(pod("p", 10, 2000));
    let statuses = statuses(&preemptor, &snapshot, &[]);
    let (pre_filter, _) = runners();
    let mut only_pre_filter = CycleState::default();
    only_pre_filter.write(PRE_FILTERS_KEY, pre_filter);
    for state in [CycleState::default(), only_pre_filter] {
        let (result, status) =
            plugin(Value::Null).post_filter(&state, &preemptor, &snapshot, &statuses);
        assert_eq!(status.code, Code::Error);
        assert!(status.reasons[0].starts_with("preemption: the scheduler did not provide"));
        assert_eq!(result.nominated_node, None);
    }
}

#[test]
fn a_failing_pre_filter_is_an_error() {
    let snapshot = cluster(vec![("n1", 2000, vec![pod("a", 1, 2000)])], vec![]);
    let preemptor = info(pod("p", 10, 2000));
    let statuses = statuses(&preemptor, &snapshot, &[]);
    let (_, filter) = runners();
    let failing = PreFilterRunner(Arc::new(|_: &PodInfo, _: &Snapshot| {
        Err(Status::error("boom"))
    }));
    let mut state = CycleState::default();
    write_runners(&mut state, failing, filter);
    let (_, status) = plugin(Value::Null).post_filter(&state, &preemptor, &snapshot, &statuses);
    assert_eq!(status.code, Code::Error);
    assert_eq!(status.reasons[..], ["preemption: boom"]);
}

#[test]
fn args_default_validate_and_size_the_search() {
    let defaults = DefaultPreemptionArgs::from_json(&Value::Null).unwrap();
    assert_eq!(defaults, DefaultPreemptionArgs::default());
    assert_eq!(
        (
            defaults.min_candidate_nodes_percentage,
            defaults.min_candidate_nodes_absolute
        ),
        (10, 100)
    );
    for (nodes, wanted) in [(0, 0), (50, 50), (100, 100), (999, 100), (5000, 500)] {
        assert_eq!(defaults.num_candidates(nodes), wanted, "{nodes} nodes");
    }
    let parsed = DefaultPreemptionArgs::from_json(&json!({
        "apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "DefaultPreemptionArgs",
        "minCandidateNodesPercentage": 50, "minCandidateNodesAbsolute": 3,
    }))
    .unwrap();
    assert_eq!(parsed.num_candidates(4), 3);
    assert_eq!(parsed.num_candidates(10), 5);

    let errors = [
        (json!({"minCandidateNodesPercentage": 101}), "minCandidateNodesPercentage: Invalid value: 101: not in valid range [0, 100]"),
        (json!({"minCandidateNodesAbsolute": -1}), "minCandidateNodesAbsolute: Invalid value: -1: not in valid range [0, inf)"),
        (
            json!({"minCandidateNodesPercentage": 0, "minCandidateNodesAbsolute": 0}),
            "[minCandidateNodesPercentage: Invalid value: 0: cannot be zero at the same time as minCandidateNodesAbsolute, \
             minCandidateNodesAbsolute: Invalid value: 0: cannot be zero at the same time as minCandidateNodesPercentage]",
        ),
    ];
    for (args, message) in errors {
        assert_eq!(
            DefaultPreemptionArgs::from_json(&args),
            Err(message.to_string())
        );
    }
    assert!(new(&json!({"minCandidateNodes": 1})).is_err());
    assert!(new(&json!({"minCandidateNodesAbsolute": "1"})).is_err());
    assert!(new(&json!([1])).is_err());
    let plugin = new(&Value::Null).unwrap();
    assert_eq!(
        (plugin.name(), plugin.points()),
        (NAME, &[Point::PostFilter][..])
    );
}

#[test]
fn the_dry_run_tries_no_more_nodes_than_it_needs() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let nodes: Vec<_> = ["n1", "n2", "n3", "n4"]
        .into_iter()
        .map(|n| (n, 1000, vec![pod(&format!("{n}-pod"), 1, 1000)]))
        .collect();
    let snapshot = cluster(nodes, vec![]);
    let preemptor = info(pod("p", 10, 1000));
    let filtered = statuses(&preemptor, &snapshot, &[]);
    for (args, tried) in [
        (
            json!({"minCandidateNodesPercentage": 0, "minCandidateNodesAbsolute": 1}),
            1,
        ),
        (
            json!({"minCandidateNodesPercentage": 50, "minCandidateNodesAbsolute": 0}),
            2,
        ),
        (Value::Null, 4),
    ] {
        let (pre_filter, filter) = runners();
        let calls = Arc::new(AtomicUsize::new(0));
        let counted = calls.clone();
        let counting = PreFilterRunner(Arc::new(move |pod: &PodInfo, snapshot: &Snapshot| {
            counted.fetch_add(1, Ordering::Relaxed);
            (pre_filter.0)(pod, snapshot)
        }));
        let mut state = CycleState::default();
        write_runners(&mut state, counting, filter);
        let (result, status) =
            plugin(args).preempt(&state, &preemptor, &snapshot, &filtered, |_| 0);
        assert!(status.is_success(), "{status}");
        assert_eq!(result.nominated_node.as_deref(), Some("n1"));
        // Per node tried: the check with every victim gone, one reprieve.
        assert_eq!(calls.load(Ordering::Relaxed), 2 * tried, "{tried} node(s)");
    }
}
