use k8s_openapi::api::core::v1::Node;
use serde_json::{json, Value};

use super::*;
use crate::framework::{ClusterObjects, Code};

/// `None` when the node passes, else the code and reason.
type Outcome = Option<(Code, String)>;

fn pod(namespace: &str, name: &str, volumes: Value) -> Arc<PodInfo> {
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"containers": [{"name": "c", "image": "i"}], "volumes": volumes},
    }))
    .unwrap();
    Arc::new(PodInfo::new(Arc::new(pod)))
}

fn node(name: &str, pods: &[Arc<PodInfo>]) -> Arc<NodeInfo> {
    let node: Node = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    let mut info = NodeInfo::new(Arc::new(node));
    for pod in pods {
        info.add_pod(pod.clone());
    }
    Arc::new(info)
}

fn claim(namespace: &str, name: &str, modes: &[&str]) -> (String, Arc<PersistentVolumeClaim>) {
    let claim: PersistentVolumeClaim = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"accessModes": modes},
    }))
    .unwrap();
    (format!("{namespace}/{name}"), Arc::new(claim))
}

fn snapshot(
    nodes: Vec<Arc<NodeInfo>>,
    claims: Vec<(String, Arc<PersistentVolumeClaim>)>,
) -> Snapshot {
    let cluster = ClusterObjects {
        claims: claims.into_iter().collect(),
        ..ClusterObjects::default()
    };
    Snapshot::new(nodes, Arc::new(cluster))
}

fn pvc(volume: &str, claim: &str) -> Value {
    json!({"name": volume, "persistentVolumeClaim": {"claimName": claim}})
}

/// PreFilter, then Filter on every node: per node, `None` or the code and
/// reason; `Err` when PreFilter rejects.
fn run(pod: &PodInfo, snapshot: &Snapshot) -> Result<Vec<Outcome>, Status> {
    let plugin = new(&Value::Null).unwrap();
    let mut state = CycleState::default();
    let (_, status) = plugin.pre_filter(&mut state, pod, snapshot);
    match status.code {
        Code::Skip => return Ok(vec![None; snapshot.nodes.len()]),
        Code::Success => {}
        _ => return Err(status),
    }
    Ok(snapshot
        .nodes
        .iter()
        .map(|n| {
            let status = plugin.filter(&state, pod, n);
            (!status.is_success()).then(|| (status.code, status.message()))
        })
        .collect())
}

fn disk_conflict() -> Outcome {
    Some((Code::Unschedulable, ERR_REASON_DISK_CONFLICT.to_string()))
}

#[test]
fn inline_disks_conflict_on_the_same_node() {
    let gce = |pd: &str, ro: bool| json!({"name": "v", "gcePersistentDisk": {"pdName": pd, "readOnly": ro}});
    let ebs = |id: &str, ro: bool| json!({"name": "v", "awsElasticBlockStore": {"volumeID": id, "readOnly": ro}});
    let iscsi = |iqn: &str, ro: bool| json!({"name": "v", "iscsi": {"targetPortal": "127.0.0.1:3260", "iqn": iqn, "lun": 0, "readOnly": ro}});
    let rbd = |mons: &[&str], pool: Option<&str>, image: &str, ro: bool| {
        let mut source = json!({"monitors": mons, "image": image, "readOnly": ro});
        if let Some(pool) = pool {
            source["pool"] = json!(pool);
        }
        json!({"name": "v", "rbd": source})
    };
    let cases: Vec<(&str, Value, Value, Outcome)> = vec![
        (
            "same GCE disk",
            gce("d1", false),
            gce("d1", false),
            disk_conflict(),
        ),
        (
            "same GCE disk, one read-only",
            gce("d1", true),
            gce("d1", false),
            disk_conflict(),
        ),
        (
            "same GCE disk, both read-only",
            gce("d1", true),
            gce("d1", true),
            None,
        ),
        ("other GCE disk", gce("d1", false), gce("d2", false), None),
        (
            "same EBS volume",
            ebs("vol-1", false),
            ebs("vol-1", false),
            disk_conflict(),
        ),
        (
            "same EBS volume, both read-only",
            ebs("vol-1", true),
            ebs("vol-1", true),
            disk_conflict(),
        ),
        (
            "other EBS volume",
            ebs("vol-1", false),
            ebs("vol-2", false),
            None,
        ),
        (
            "same iSCSI iqn",
            iscsi("iqn.a", false),
            iscsi("iqn.a", false),
            disk_conflict(),
        ),
        (
            "same iSCSI iqn, both read-only",
            iscsi("iqn.a", true),
            iscsi("iqn.a", true),
            None,
        ),
        (
            "other iSCSI iqn",
            iscsi("iqn.a", false),
            iscsi("iqn.b", false),
            None,
        ),
        (
            "same RBD image, a shared monitor",
            rbd(&["m1", "m2"], Some("p"), "img", false),
            rbd(&["m2", "m3"], Some("p"), "img", false),
            disk_conflict(),
        ),
        (
            "same RBD image, the default pool",
            rbd(&["m1"], None, "img", false),
            rbd(&["m1"], Some("rbd"), "img", false),
            disk_conflict(),
        ),
        (
            "RBD in another pool",
            rbd(&["m1"], Some("a"), "img", false),
            rbd(&["m1"], Some("b"), "img", false),
            None,
        ),
        (
            "RBD without a shared monitor",
            rbd(&["m1"], None, "img", false),
            rbd(&["m2"], None, "img", false),
            None,
        ),
        (
            "RBD both read-only",
            rbd(&["m1"], None, "img", true),
            rbd(&["m1"], None, "img", true),
            None,
        ),
        (
            "different volume types",
            gce("d1", false),
            ebs("d1", false),
            None,
        ),
    ];
    for (name, new_volume, existing_volume, want) in cases {
        let existing = pod("default", "old", json!([existing_volume]));
        let snapshot = snapshot(vec![node("n1", &[existing]), node("n2", &[])], vec![]);
        let got = run(&pod("default", "new", json!([new_volume])), &snapshot).unwrap();
        assert_eq!(got, vec![want, None], "{name}");
    }
}

#[test]
fn pods_without_restricted_volumes_skip_the_filter() {
    let plugin = new(&Value::Null).unwrap();
    let snapshot = snapshot(
        vec![node("n1", &[])],
        vec![claim("default", "data", &["ReadWriteOncePod"])],
    );
    let mut state = CycleState::default();
    let empty_dir = json!([{"name": "v", "emptyDir": {}}]);
    let (_, status) = plugin.pre_filter(&mut state, &pod("default", "p", empty_dir), &snapshot);
    assert_eq!(status.code, Code::Skip);
    // An unused ReadWriteOncePod claim leaves nothing to check either.
    let (_, status) = plugin.pre_filter(
        &mut state,
        &pod("default", "p", json!([pvc("v", "data")])),
        &snapshot,
    );
    assert_eq!(status.code, Code::Skip);
}

#[test]
fn a_missing_claim_is_unresolvable() {
    let snapshot = snapshot(
        vec![node("n1", &[])],
        vec![claim("other", "data", &["ReadWriteOnce"])],
    );
    let err = run(&pod("default", "p", json!([pvc("v", "data")])), &snapshot).unwrap_err();
    assert_eq!(err.code, Code::UnschedulableAndUnresolvable);
    assert_eq!(err.message(), "persistentvolumeclaim \"data\" not found");
}

#[test]
fn a_read_write_once_pod_claim_in_use_anywhere_rejects_every_node() {
    let rwop = Some((
        Code::Unschedulable,
        ERR_REASON_READ_WRITE_ONCE_POD_CONFLICT.to_string(),
    ));
    let claims = || {
        vec![
            claim("default", "data", &["ReadWriteOncePod"]),
            claim("other", "data", &["ReadWriteOncePod"]),
        ]
    };
    let user = pod("default", "user", json!([pvc("v", "data")]));
    let snapshot_in_use = snapshot(vec![node("n1", &[]), node("n2", &[user])], claims());
    let new_pod = pod("default", "p", json!([pvc("v", "data")]));
    assert_eq!(
        run(&new_pod, &snapshot_in_use).unwrap(),
        vec![rwop.clone(), rwop]
    );

    // The same claim name in another namespace is another claim.
    let stranger = pod("other", "user", json!([pvc("v", "data")]));
    let snapshot_elsewhere = snapshot(vec![node("n1", &[]), node("n2", &[stranger])], claims());
    assert_eq!(
        run(&new_pod, &snapshot_elsewhere).unwrap(),
        vec![None, None]
    );
}

#[test]
fn a_read_write_once_claim_in_use_keeps_the_pod_on_its_node() {
    let rwo = Some((
        Code::UnschedulableAndUnresolvable,
        ERR_REASON_READ_WRITE_ONCE_CONFLICT.to_string(),
    ));
    let user = pod("default", "user", json!([pvc("v", "data")]));
    let nodes = || {
        vec![
            node("n1", &[]),
            node("n2", std::slice::from_ref(&user)),
            node("n3", &[]),
        ]
    };
    let new_pod = pod("default", "p", json!([pvc("v", "data")]));

    let only_rwo = snapshot(nodes(), vec![claim("default", "data", &["ReadWriteOnce"])]);
    assert_eq!(
        run(&new_pod, &only_rwo).unwrap(),
        vec![rwo.clone(), None, rwo]
    );

    // A claim that several nodes may attach is not restricted.
    let shared = snapshot(
        nodes(),
        vec![claim(
            "default",
            "data",
            &["ReadWriteOnce", "ReadWriteMany"],
        )],
    );
    assert_eq!(run(&new_pod, &shared).unwrap(), vec![None, None, None]);
}

#[test]
fn add_and_remove_pod_update_the_claim_users() {
    let plugin = new(&Value::Null).unwrap();
    let claims = vec![
        claim("default", "once", &["ReadWriteOnce"]),
        claim("default", "solo", &["ReadWriteOncePod"]),
    ];
    let rwo_user = pod("default", "a", json!([pvc("v", "once")]));
    let rwop_user = pod("default", "b", json!([pvc("v", "solo")]));
    let nodes = vec![
        node("n1", std::slice::from_ref(&rwo_user)),
        node("n2", std::slice::from_ref(&rwop_user)),
    ];
    let snapshot = snapshot(nodes, claims);
    let new_pod = pod("default", "p", json!([pvc("x", "once"), pvc("y", "solo")]));

    let mut state = CycleState::default();
    let (_, status) = plugin.pre_filter(&mut state, &new_pod, &snapshot);
    assert!(status.is_success());
    let n1 = &snapshot.nodes[0];
    let n2 = &snapshot.nodes[1];
    assert_eq!(
        plugin.filter(&state, &new_pod, n1).message(),
        ERR_REASON_READ_WRITE_ONCE_POD_CONFLICT
    );

    // Preemption evicts the ReadWriteOncePod user: n1 fits, n2 does not
    // (the ReadWriteOnce claim is on n1).
    assert!(plugin
        .remove_pod(&mut state, &new_pod, &rwop_user, n2)
        .is_success());
    assert!(plugin.filter(&state, &new_pod, n1).is_success());
    assert_eq!(
        plugin.filter(&state, &new_pod, n2).message(),
        ERR_REASON_READ_WRITE_ONCE_CONFLICT
    );

    // Evicting the ReadWriteOnce user frees every node; adding it back on n2
    // pins the pod there.
    assert!(plugin
        .remove_pod(&mut state, &new_pod, &rwo_user, n1)
        .is_success());
    assert!(plugin.filter(&state, &new_pod, n2).is_success());
    assert!(plugin
        .add_pod(&mut state, &new_pod, &rwo_user, n2)
        .is_success());
    assert_eq!(
        plugin.filter(&state, &new_pod, n1).message(),
        ERR_REASON_READ_WRITE_ONCE_CONFLICT
    );
    assert!(plugin.filter(&state, &new_pod, n2).is_success());
}

#[test]
fn args_are_refused() {
    assert!(new(&json!({})).is_ok());
    assert!(new(&json!({"enabled": true})).is_err());
}
