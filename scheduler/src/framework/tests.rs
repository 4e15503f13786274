//! The framework's extension points with toy plugins.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use k8s_openapi::api::core::v1::{Node, Pod};
use rand::SeedableRng;
use serde_json::json;

use super::*;

fn node(name: &str) -> Arc<NodeInfo> {
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"zone": if name.ends_with('1') { "a" } else { "b" }}},
        "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"}},
    }))
    .unwrap();
    Arc::new(NodeInfo::new(Arc::new(node)))
}

fn pod() -> PodInfo {
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "p", "namespace": "default"},
        "spec": {"containers": [{"name": "c", "image": "i"}]},
    }))
    .unwrap();
    PodInfo::new(Arc::new(pod))
}

fn snapshot(names: &[&str]) -> Snapshot {
    Snapshot::new(names.iter().map(|n| node(n)).collect(), Arc::default())
}

/// Rejects nodes by name; scores a node by the digit its name ends in.
struct Toy {
    name: &'static str,
    reject: Vec<&'static str>,
    unresolvable: bool,
    only: Option<Vec<&'static str>>,
    filtered: AtomicUsize,
    calls: Mutex<Vec<String>>,
}

impl Toy {
    fn new(name: &'static str) -> Toy {
        Toy {
            name,
            reject: Vec::new(),
            unresolvable: false,
            only: None,
            filtered: AtomicUsize::new(0),
            calls: Mutex::new(Vec::new()),
        }
    }
}

impl Plugin for Toy {
    fn name(&self) -> &'static str {
        self.name
    }

    fn points(&self) -> &'static [Point] {
        &[
            Point::PreFilter,
            Point::Filter,
            Point::Score,
            Point::Reserve,
        ]
    }

    fn pre_filter(
        &self,
        _: &mut CycleState,
        _: &PodInfo,
        _: &Snapshot,
    ) -> (PreFilterResult, Status) {
        let node_names = self
            .only
            .as_ref()
            .map(|names| names.iter().map(|n| n.to_string()).collect());
        (
            PreFilterResult {
                node_names,
                ..Default::default()
            },
            Status::success(),
        )
    }

    fn filter(&self, _: &CycleState, _: &PodInfo, node: &NodeInfo) -> Status {
        self.filtered.fetch_add(1, Ordering::Relaxed);
        match self.reject.contains(&node.name()) {
            true if self.unresolvable => Status::unresolvable("node(s) were toys"),
            true => Status::unschedulable("Insufficient toys"),
            false => Status::success(),
        }
    }

    fn score(&self, _: &CycleState, _: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        Ok(node
            .name()
            .trim_start_matches('n')
            .parse::<i64>()
            .unwrap_or(0))
    }

    fn normalize_scores(
        &self,
        _: &CycleState,
        _: &PodInfo,
        scores: &mut [NodeScore],
    ) -> Option<Status> {
        let max = scores.iter().map(|s| s.score).max().unwrap_or(0).max(1);
        for s in scores.iter_mut() {
            s.score = s.score * MAX_NODE_SCORE / max;
        }
        Some(Status::success())
    }

    fn reserve(&self, _: &mut CycleState, _: &PodInfo, node: &str) -> Status {
        self.calls.lock().unwrap().push(format!("reserve {node}"));
        match self.reject.contains(&node) {
            true => Status::error("cannot reserve"),
            false => Status::success(),
        }
    }

    fn unreserve(&self, _: &mut CycleState, _: &PodInfo, node: &str) {
        self.calls.lock().unwrap().push(format!("unreserve {node}"));
    }
}

fn profile(plugins: Vec<Arc<Toy>>, weights: &[(&'static str, i64)]) -> Profile {
    let mut map: HashMap<Point, Vec<Arc<dyn Plugin>>> = HashMap::new();
    for plugin in plugins {
        for point in plugin.points() {
            map.entry(*point).or_default().push(plugin.clone());
        }
    }
    Profile {
        scheduler_name: "default-scheduler".into(),
        plugins: map,
        weights: weights.iter().copied().collect(),
        percentage_of_nodes_to_score: 0,
    }
}

fn rng() -> rand::rngs::StdRng {
    rand::rngs::StdRng::seed_from_u64(7)
}

#[test]
fn the_highest_weighted_total_wins_and_rejected_nodes_say_why() {
    let mut a = Toy::new("A");
    a.reject = vec!["n9"];
    let profile = profile(vec![Arc::new(a)], &[("A", 2)]);
    let snap = snapshot(&["n1", "n5", "n9"]);
    let result = profile
        .schedule(
            &mut CycleState::default(),
            &pod(),
            &snap,
            &mut 0,
            &mut rng(),
        )
        .unwrap();
    assert_eq!(result.node, "n5");
    assert_eq!((result.evaluated, result.feasible), (3, 2));

    let mut b = Toy::new("B");
    b.reject = vec!["n1", "n5", "n9"];
    let profile = self::profile(vec![Arc::new(b)], &[]);
    let Err(ScheduleFailure::Unfit(fit)) = profile.schedule(
        &mut CycleState::default(),
        &pod(),
        &snap,
        &mut 0,
        &mut rng(),
    ) else {
        panic!("no node fits");
    };
    assert_eq!(
        fit.message(),
        "0/3 nodes are available: 3 Insufficient toys."
    );
    assert!(fit.resolvable_on("n1"));
}

#[test]
fn reasons_are_counted_per_reason_and_unresolvable_nodes_are_not_preemption_candidates() {
    let mut a = Toy::new("A");
    a.reject = vec!["n1"];
    let mut b = Toy::new("B");
    b.reject = vec!["n2", "n3"];
    b.unresolvable = true;
    let profile = profile(vec![Arc::new(a), Arc::new(b)], &[]);
    let Err(ScheduleFailure::Unfit(fit)) = profile.schedule(
        &mut CycleState::default(),
        &pod(),
        &snapshot(&["n1", "n2", "n3"]),
        &mut 0,
        &mut rng(),
    ) else {
        panic!("no node fits");
    };
    assert_eq!(
        fit.message(),
        "0/3 nodes are available: 1 Insufficient toys, 2 node(s) were toys."
    );
    assert!(fit.resolvable_on("n1"));
    assert!(!fit.resolvable_on("n2"));
    assert_eq!(fit.statuses["n2"].plugin, "B");
}

#[test]
fn pre_filter_narrows_the_nodes_filtered() {
    let mut a = Toy::new("A");
    a.only = Some(vec!["n2"]);
    let a = Arc::new(a);
    let profile = profile(vec![a.clone()], &[]);
    let result = profile
        .schedule(
            &mut CycleState::default(),
            &pod(),
            &snapshot(&["n1", "n2", "n3"]),
            &mut 0,
            &mut rng(),
        )
        .unwrap();
    assert_eq!(result.node, "n2");
    assert_eq!(a.filtered.load(Ordering::Relaxed), 1);

    let mut b = Toy::new("B");
    b.only = Some(vec!["n2"]);
    b.reject = vec!["n2"];
    let profile = self::profile(vec![Arc::new(b)], &[]);
    let Err(ScheduleFailure::Unfit(fit)) = profile.schedule(
        &mut CycleState::default(),
        &pod(),
        &snapshot(&["n1", "n2", "n3"]),
        &mut 0,
        &mut rng(),
    ) else {
        panic!("no node fits");
    };
    assert_eq!(
        fit.message(),
        "0/3 nodes are available: 1 Insufficient toys, 2 node(s) didn't satisfy plugin(s) [B]."
    );
}

#[test]
fn a_share_of_big_clusters_is_evaluated_and_the_start_rotates() {
    let profile = profile(vec![Arc::new(Toy::new("A"))], &[]);
    assert_eq!(profile.feasible_nodes_to_find(50), 50);
    assert_eq!(profile.feasible_nodes_to_find(1000), 420);
    assert_eq!(profile.feasible_nodes_to_find(5000), 500);
    assert_eq!(profile.feasible_nodes_to_find(200), 100);
    let names: Vec<String> = (0..1000).map(|i| format!("n{i}")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let snap = snapshot(&refs);
    let mut start = 0;
    let result = profile
        .schedule(
            &mut CycleState::default(),
            &pod(),
            &snap,
            &mut start,
            &mut rng(),
        )
        .unwrap();
    assert_eq!(result.evaluated, 420);
    assert_eq!(start, 420);
    profile
        .schedule(
            &mut CycleState::default(),
            &pod(),
            &snap,
            &mut start,
            &mut rng(),
        )
        .unwrap();
    assert_eq!(start, 840);
}

#[test]
fn a_failed_reserve_unreserves_the_plugins_before_it() {
    let a = Arc::new(Toy::new("A"));
    let mut b = Toy::new("B");
    b.reject = vec!["n1"];
    let b = Arc::new(b);
    let profile = profile(vec![a.clone(), b.clone()], &[]);
    let status = profile.run_reserve(&mut CycleState::default(), &pod(), "n1");
    assert_eq!(status.code, Code::Error);
    assert_eq!(status.plugin, "B");
    assert_eq!(*a.calls.lock().unwrap(), ["reserve n1", "unreserve n1"]);
    assert_eq!(*b.calls.lock().unwrap(), ["reserve n1"]);
}

#[test]
fn ties_are_broken_among_the_best_nodes_only() {
    let scores = [
        NodeScore {
            name: "a".into(),
            score: 5,
        },
        NodeScore {
            name: "b".into(),
            score: 9,
        },
        NodeScore {
            name: "c".into(),
            score: 9,
        },
    ];
    let mut seen = std::collections::BTreeSet::new();
    let mut rng = rng();
    for _ in 0..50 {
        seen.insert(select_host(&scores, &mut rng));
    }
    assert_eq!(seen.into_iter().collect::<Vec<_>>(), ["b", "c"]);
}
