//! ImageLocality: scores from image sizes and spread, computed by hand.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod};
use serde_json::{json, Value};

use super::*;

fn pod(init: &[&str], containers: &[&str]) -> PodInfo {
    let list = |images: &[&str]| -> Vec<Value> {
        images
            .iter()
            .enumerate()
            .map(|(i, image)| json!({"name": format!("c{i}"), "image": image}))
            .collect()
    };
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "p", "namespace": "default"},
        "spec": {"initContainers": list(init), "containers": list(containers)},
    }))
    .unwrap();
    PodInfo::new(Arc::new(pod))
}

/// A node holding images given as (names, size in MiB).
fn node(name: &str, images: &[(&[&str], i64)]) -> Arc<NodeInfo> {
    let images: Vec<Value> = images
        .iter()
        .map(|(names, mib)| json!({"names": names, "sizeBytes": mib * MB}))
        .collect();
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": name},
        "status": {"images": images},
    }))
    .unwrap();
    Arc::new(NodeInfo::new(Arc::new(node)))
}

/// a: 40 MiB and 300 MiB images; b: 300 MiB and 2000 MiB; c: none.
fn cluster() -> Snapshot {
    Snapshot::new(
        vec![
            node(
                "a",
                &[(&["gcr.io/40:latest"], 40), (&["gcr.io/300:v1"], 300)],
            ),
            node(
                "b",
                &[(&["gcr.io/300:v1"], 300), (&["gcr.io/2000:latest"], 2000)],
            ),
            node("c", &[]),
        ],
        Arc::default(),
    )
}

fn scores(snapshot: &Snapshot, pod: &PodInfo) -> Vec<i64> {
    let mut state = CycleState::default();
    let (_, status) = ImageLocality.pre_filter(&mut state, pod, snapshot);
    assert!(status.is_success());
    assert!(ImageLocality
        .pre_score(&mut state, pod, &snapshot.nodes)
        .is_success());
    snapshot
        .nodes
        .iter()
        .map(|n| ImageLocality.score(&state, pod, n).unwrap())
        .collect()
}

#[test]
fn images_score_by_size_and_spread() {
    let snapshot = cluster();
    // Two containers: the range is 23 MiB..2000 MiB.
    // a: 40 MiB × 1/3 + 300 MiB × 2/3 = 223696213 bytes → 9.
    // b: 300 MiB × 2/3 = 209715200 bytes → 8.
    let two = pod(&[], &["gcr.io/40", "gcr.io/300:v1"]);
    assert_eq!(scores(&snapshot, &two), vec![9, 8, 0]);
    // One container, 2000 MiB on one node of three: 699050666 bytes of
    // the 23..1000 MiB range → 65.
    let big = pod(&[], &["gcr.io/2000"]);
    assert_eq!(scores(&snapshot, &big), vec![0, 65, 0]);
    // Init containers count as containers.
    let init = pod(&["gcr.io/2000"], &["busybox"]);
    // 699050666 bytes of the 23..2000 MiB range → 32.
    assert_eq!(scores(&snapshot, &init), vec![0, 32, 0]);
}

#[test]
fn the_total_is_capped_per_container() {
    let alone = Snapshot::new(
        vec![node("b", &[(&["gcr.io/2000:latest"], 2000)])],
        Arc::default(),
    );
    assert_eq!(scores(&alone, &pod(&[], &["gcr.io/2000"])), vec![100]);
    let small = Snapshot::new(
        vec![node("a", &[(&["gcr.io/20:latest"], 20)])],
        Arc::default(),
    );
    assert_eq!(scores(&small, &pod(&[], &["gcr.io/20"])), vec![0]);
}

#[test]
fn image_names_are_normalized() {
    let snapshot = Snapshot::new(
        vec![
            node(
                "a",
                &[(
                    &[
                        "docker.io/library/nginx:latest",
                        "docker.io/library/nginx@sha256:00",
                    ],
                    600,
                )],
            ),
            node("b", &[]),
        ],
        Arc::default(),
    );
    // 600 MiB × 1/2 = 300 MiB of 23..1000 MiB → 28.
    assert_eq!(scores(&snapshot, &pod(&[], &["nginx"])), vec![28, 0]);
    assert_eq!(scores(&snapshot, &pod(&[], &["nginx:latest"])), vec![28, 0]);
    assert_eq!(scores(&snapshot, &pod(&[], &["nginx:1.25"])), vec![0, 0]);
}

#[test]
fn spread_counts_every_node_not_only_the_feasible_ones() {
    let snapshot = cluster();
    let pod = pod(&[], &["gcr.io/2000"]);
    let mut state = CycleState::default();
    let _ = ImageLocality.pre_filter(&mut state, &pod, &snapshot);
    // Only b is feasible; the spread still counts three nodes.
    let feasible = [snapshot.nodes[1].clone()];
    assert!(ImageLocality
        .pre_score(&mut state, &pod, &feasible)
        .is_success());
    assert_eq!(ImageLocality.score(&state, &pod, &feasible[0]), Ok(65));
    // Without PreFilter the scored nodes are all there is: 2000 MiB on
    // every node caps at 100.
    let mut state = CycleState::default();
    assert!(ImageLocality
        .pre_score(&mut state, &pod, &feasible)
        .is_success());
    assert_eq!(ImageLocality.score(&state, &pod, &feasible[0]), Ok(100));
}

#[test]
fn takes_no_args() {
    assert!(new(&Value::Null).is_ok());
    assert!(new(&json!({"x": 1})).is_err());
}

#[test]
fn the_snapshot_counts_images_as_nodes_change() {
    let mut snapshot = cluster();
    assert_eq!(snapshot.nodes_with_image("gcr.io/300:v1"), 2);
    assert_eq!(snapshot.nodes_with_image("gcr.io/40:latest"), 1);
    assert_eq!(snapshot.nodes_with_image("gcr.io/none:latest"), 0);
    // b drops its 300 MiB image and pulls the 40 MiB one.
    snapshot.replace(node(
        "b",
        &[(&["gcr.io/40:latest"], 40), (&["gcr.io/2000:latest"], 2000)],
    ));
    assert_eq!(snapshot.nodes_with_image("gcr.io/300:v1"), 1);
    assert_eq!(snapshot.nodes_with_image("gcr.io/40:latest"), 2);
    // A new node d with the 2000 MiB image.
    snapshot.replace(node("d", &[(&["gcr.io/2000:latest"], 2000)]));
    assert_eq!(snapshot.nodes_with_image("gcr.io/2000:latest"), 2);
    // The spread a pod sees is the same as counting over every node.
    let pod = pod(&[], &["gcr.io/2000", "gcr.io/40"]);
    let counted = image_spread_over(&pod, snapshot.nodes.iter().map(|n| n.as_ref()));
    assert_eq!(image_spread(&pod, &snapshot), counted);
}
