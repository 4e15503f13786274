use k8s_openapi::api::apps::v1::{ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{Node, ReplicationController, Service};
use serde_json::{json, Value};

use super::*;
use crate::framework::Code;

fn pod(namespace: &str, name: &str, labels: Value, owner: Option<(&str, &str, &str)>) -> PodInfo {
    let mut value = json!({
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {"containers": [{"name": "c", "image": "i"}]},
    });
    if let Some((api_version, kind, owner_name)) = owner {
        value["metadata"]["ownerReferences"] = json!([{
            "apiVersion": api_version, "kind": kind, "name": owner_name, "uid": "u", "controller": true,
        }]);
    }
    PodInfo::new(Arc::new(serde_json::from_value(value).unwrap()))
}

fn web(name: &str) -> Arc<PodInfo> {
    Arc::new(pod("default", name, json!({"app": "web"}), None))
}

fn node(name: &str, zone: Option<&str>, pods: Vec<Arc<PodInfo>>) -> Arc<NodeInfo> {
    let labels = match zone {
        Some(zone) => json!({"topology.kubernetes.io/zone": zone}),
        None => json!({}),
    };
    let node: Node =
        serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}})).unwrap();
    let mut info = NodeInfo::new(Arc::new(node));
    for pod in pods {
        info.add_pod(pod);
    }
    Arc::new(info)
}

fn cluster() -> ClusterObjects {
    let rs: ReplicaSet = serde_json::from_value(json!({
        "metadata": {"name": "web-rs", "namespace": "default"},
        "spec": {"selector": {"matchLabels": {"app": "web"}}, "template": {}},
    }))
    .unwrap();
    let ss: StatefulSet = serde_json::from_value(json!({
        "metadata": {"name": "db", "namespace": "default"},
        "spec": {"selector": {"matchExpressions": [{"key": "app", "operator": "In", "values": ["db"]}]},
                 "serviceName": "db", "template": {}},
    }))
    .unwrap();
    let rc: ReplicationController = serde_json::from_value(json!({
        "metadata": {"name": "web-rc", "namespace": "default"},
        "spec": {"selector": {"app": "web"}},
    }))
    .unwrap();
    let services: Vec<Service> = vec![
        serde_json::from_value(json!({"metadata": {"name": "web", "namespace": "default"}, "spec": {"selector": {"app": "web"}}})).unwrap(),
        serde_json::from_value(json!({"metadata": {"name": "headless", "namespace": "default"}, "spec": {}})).unwrap(),
        serde_json::from_value(json!({"metadata": {"name": "api", "namespace": "other"}, "spec": {"selector": {"app": "api"}}})).unwrap(),
    ];
    ClusterObjects {
        replica_sets: vec![Arc::new(rs)],
        stateful_sets: vec![Arc::new(ss)],
        replication_controllers: vec![Arc::new(rc)],
        services: services.into_iter().map(Arc::new).collect(),
        ..ClusterObjects::default()
    }
}

/// PreFilter, PreScore, Score and NormalizeScore: the final scores, or
/// `None` when the plugin skipped scoring.
fn scores(pod: &PodInfo, nodes: Vec<Arc<NodeInfo>>) -> Option<Vec<i64>> {
    let plugin = new(&Value::Null).unwrap();
    let snapshot = Snapshot::new(nodes.clone(), Arc::new(cluster()));
    let mut state = CycleState::default();
    let (result, status) = plugin.pre_filter(&mut state, pod, &snapshot);
    assert_eq!((result.node_names, status.code), (None, Code::Skip));
    let status = plugin.pre_score(&mut state, pod, &nodes);
    if status.code == Code::Skip {
        return None;
    }
    assert!(status.is_success());
    let mut scores: Vec<NodeScore> = nodes
        .iter()
        .map(|n| NodeScore {
            name: n.name().into(),
            score: plugin.score(&state, pod, n).unwrap(),
        })
        .collect();
    assert_eq!(
        plugin.normalize_scores(&state, pod, &mut scores),
        Some(Status::success())
    );
    Some(scores.into_iter().map(|s| s.score).collect())
}

/// Two web pods on n1, one on n2, none on n3 (but pods that do not count).
fn web_nodes(zones: [Option<&str>; 3]) -> Vec<Arc<NodeInfo>> {
    let deleting: PodInfo = {
        let mut p = pod("default", "leaving", json!({"app": "web"}), None);
        let mut raw = (*p.pod).clone();
        raw.metadata.deletion_timestamp =
            serde_json::from_value(json!("2024-01-01T00:00:00Z")).unwrap();
        p.pod = Arc::new(raw);
        p
    };
    vec![
        node("n1", zones[0], vec![web("w1"), web("w2")]),
        node(
            "n2",
            zones[1],
            vec![
                web("w3"),
                Arc::new(pod("default", "db-0", json!({"app": "db"}), None)),
            ],
        ),
        node(
            "n3",
            zones[2],
            vec![
                Arc::new(pod("other", "w4", json!({"app": "web"}), None)),
                Arc::new(deleting),
            ],
        ),
    ]
}

#[test]
fn replica_set_pods_spread_across_nodes_and_zones() {
    let new_pod = pod(
        "default",
        "p",
        json!({"app": "web"}),
        Some(("apps/v1", "ReplicaSet", "web-rs")),
    );
    assert_eq!(
        scores(&new_pod, web_nodes([Some("a"), Some("a"), Some("b")])),
        Some(vec![0, 16, 100])
    );
    assert_eq!(
        scores(&new_pod, web_nodes([None, None, None])),
        Some(vec![0, 50, 100])
    );
    assert_eq!(
        scores(&new_pod, web_nodes([Some("a"), None, Some("b")])),
        Some(vec![0, 50, 100])
    );
}

#[test]
fn services_and_other_controllers_select_the_pods_to_spread_from() {
    let cases: Vec<(&str, PodInfo, Vec<i64>)> = vec![
        (
            "a Service",
            pod("default", "p", json!({"app": "web", "v": "2"}), None),
            vec![0, 50, 100],
        ),
        (
            "a ReplicationController",
            pod(
                "default",
                "p",
                json!({}),
                Some(("v1", "ReplicationController", "web-rc")),
            ),
            vec![0, 50, 100],
        ),
        (
            "a StatefulSet",
            pod(
                "default",
                "p",
                json!({"app": "db"}),
                Some(("apps/v1", "StatefulSet", "db")),
            ),
            vec![100, 0, 100],
        ),
        (
            "an unknown owner kind adds nothing",
            pod(
                "default",
                "p",
                json!({"app": "db"}),
                Some(("batch/v1", "Job", "db")),
            ),
            vec![100, 100, 100],
        ),
        (
            "a missing ReplicaSet adds nothing",
            pod(
                "default",
                "p",
                json!({"app": "db"}),
                Some(("apps/v1", "ReplicaSet", "gone")),
            ),
            vec![100, 100, 100],
        ),
        (
            "no selector at all",
            pod("default", "p", json!({"app": "db"}), None),
            vec![100, 100, 100],
        ),
        (
            "a Service of another namespace",
            pod("other", "p", json!({"app": "api"}), None),
            vec![100, 100, 100],
        ),
    ];
    for (name, new_pod, want) in cases {
        assert_eq!(
            scores(&new_pod, web_nodes([None, None, None])),
            Some(want),
            "{name}"
        );
    }
}

#[test]
fn a_zone_with_pods_lowers_its_empty_nodes() {
    let new_pod = pod(
        "default",
        "p",
        json!({"app": "web"}),
        Some(("apps/v1", "ReplicaSet", "web-rs")),
    );
    let nodes = vec![
        node("n1", Some("a"), vec![web("w1")]),
        node("n2", Some("a"), vec![]),
        node("n3", Some("b"), vec![]),
    ];
    assert_eq!(scores(&new_pod, nodes), Some(vec![0, 33, 100]));
}

#[test]
fn pods_with_spread_constraints_are_left_to_pod_topology_spread() {
    let mut new_pod = pod("default", "p", json!({"app": "web"}), None);
    let mut raw = (*new_pod.pod).clone();
    if let Some(spec) = raw.spec.as_mut() {
        spec.topology_spread_constraints = serde_json::from_value(json!([{
            "maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule",
        }]))
        .unwrap();
    }
    new_pod.pod = Arc::new(raw);
    assert_eq!(scores(&new_pod, web_nodes([None, None, None])), None);
}

#[test]
fn zone_keys_join_region_and_zone() {
    let labelled = |labels: Value| {
        let node: Node =
            serde_json::from_value(json!({"metadata": {"name": "n", "labels": labels}})).unwrap();
        NodeInfo::new(Arc::new(node))
    };
    assert_eq!(zone_key(&labelled(json!({}))), "");
    assert_eq!(
        zone_key(&labelled(
            json!({"topology.kubernetes.io/zone": "z", "topology.kubernetes.io/region": "r"})
        )),
        "r:\u{0}:z"
    );
    assert_eq!(
        zone_key(&labelled(json!({
            "topology.kubernetes.io/zone": "new",
            "failure-domain.beta.kubernetes.io/zone": "old",
        }))),
        ":\u{0}:old"
    );
}

#[test]
fn args_are_refused() {
    assert!(new(&json!({})).is_ok());
    assert!(new(&json!({"zoneWeight": 2})).is_err());
}
