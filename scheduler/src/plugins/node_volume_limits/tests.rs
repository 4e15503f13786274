use k8s_openapi::api::core::v1::Node;
use serde_json::{json, Value};

use super::*;
use crate::framework::Code;

/// `None` when the node passes, else the code and reason.
type Outcome = Option<(Code, String)>;

const EBS: &str = "ebs.csi.aws.com";

fn pod(name: &str, uid: &str, volumes: Value) -> Arc<PodInfo> {
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "default", "uid": uid},
        "spec": {"containers": [{"name": "c", "image": "i"}], "volumes": volumes},
    }))
    .unwrap();
    Arc::new(PodInfo::new(Arc::new(pod)))
}

fn pvc(claims: &[&str]) -> Value {
    claims
        .iter()
        .enumerate()
        .map(|(i, c)| json!({"name": format!("v{i}"), "persistentVolumeClaim": {"claimName": c}}))
        .collect()
}

fn node(allocatable: Value, pods: &[Arc<PodInfo>]) -> Arc<NodeInfo> {
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": "n1"},
        "status": {"allocatable": allocatable},
    }))
    .unwrap();
    let mut info = NodeInfo::new(Arc::new(node));
    for pod in pods {
        info.add_pod(pod.clone());
    }
    Arc::new(info)
}

fn ebs_limit(n: i64) -> Value {
    let mut allocatable = json!({"cpu": "4", "pods": "110"});
    allocatable[csi_attach_limit_key(EBS)] = json!(n.to_string());
    allocatable
}

/// A claim provisioned by `provisioner` (none when empty), bound to `pv`
/// when not empty, controlled by the pod with `owner_uid` when given.
fn claim(
    name: &str,
    provisioner: &str,
    pv: &str,
    owner_uid: Option<&str>,
) -> (String, Arc<PersistentVolumeClaim>) {
    let mut value = json!({
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"accessModes": ["ReadWriteOnce"]},
    });
    if !provisioner.is_empty() {
        value["metadata"]["annotations"] =
            json!({"volume.kubernetes.io/storage-provisioner": provisioner});
    }
    if !pv.is_empty() {
        value["spec"]["volumeName"] = json!(pv);
    }
    if let Some(uid) = owner_uid {
        value["metadata"]["ownerReferences"] = json!([{"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": uid, "controller": true}]);
    }
    (
        format!("default/{name}"),
        Arc::new(serde_json::from_value(value).unwrap()),
    )
}

fn cluster() -> ClusterObjects {
    let claims = vec![
        claim("a", EBS, "pv-a", None),
        claim("b", EBS, "pv-b", None),
        claim("c", EBS, "", None),
        claim("a-again", EBS, "pv-a", None),
        claim("legacy", "kubernetes.io/aws-ebs", "pv-legacy", None),
        claim("gce", "pd.csi.storage.gke.io", "pv-gce", None),
        claim("static", "", "pv-static", None),
        claim("p-scratch", EBS, "", Some("uid-p")),
    ];
    ClusterObjects {
        claims: claims.into_iter().collect(),
        ..ClusterObjects::default()
    }
}

fn run(new_pod: &PodInfo, node: &NodeInfo) -> Outcome {
    let plugin = new(&Value::Null).unwrap();
    let snapshot = Snapshot::new(vec![Arc::new(node.clone())], Arc::new(cluster()));
    let mut state = CycleState::default();
    let (_, status) = plugin.pre_filter(&mut state, new_pod, &snapshot);
    match status.code {
        Code::Skip => return None,
        Code::Success => {}
        _ => return Some((status.code, status.message())),
    }
    let status = plugin.filter(&state, new_pod, node);
    (!status.is_success()).then(|| (status.code, status.message()))
}

#[test]
fn filter_counts_distinct_volumes_against_the_driver_limit() {
    let exceeded = Some((
        Code::Unschedulable,
        ERR_REASON_MAX_VOLUME_COUNT_EXCEEDED.to_string(),
    ));
    let existing = pod("old", "uid-old", pvc(&["a"]));
    let scratch = json!([{"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}}]);
    let cases: Vec<(&str, Value, Value, Outcome)> = vec![
        ("within the limit", ebs_limit(2), pvc(&["b"]), None),
        (
            "over the limit",
            ebs_limit(2),
            pvc(&["b", "c"]),
            exceeded.clone(),
        ),
        (
            "at a limit of one",
            ebs_limit(1),
            pvc(&["b"]),
            exceeded.clone(),
        ),
        (
            "a volume already attached is not counted again",
            ebs_limit(1),
            pvc(&["a"]),
            None,
        ),
        (
            "another claim bound to an attached volume",
            ebs_limit(1),
            pvc(&["a-again"]),
            None,
        ),
        (
            "the same claim twice in the pod",
            ebs_limit(2),
            pvc(&["b", "b"]),
            None,
        ),
        (
            "an in-tree provisioner counts as its CSI driver",
            ebs_limit(1),
            pvc(&["legacy"]),
            exceeded.clone(),
        ),
        (
            "another driver has no limit",
            ebs_limit(1),
            pvc(&["gce"]),
            None,
        ),
        (
            "a claim without a provisioner is not counted",
            ebs_limit(1),
            pvc(&["static"]),
            None,
        ),
        (
            "a node without limits",
            json!({"cpu": "4"}),
            pvc(&["b", "c"]),
            None,
        ),
        (
            "a generic ephemeral volume counts",
            ebs_limit(1),
            scratch,
            exceeded.clone(),
        ),
        (
            "a missing claim",
            ebs_limit(5),
            pvc(&["nope"]),
            Some((
                Code::UnschedulableAndUnresolvable,
                "looking up PVC default/nope: persistentvolumeclaim \"nope\" not found".to_string(),
            )),
        ),
    ];
    for (name, allocatable, volumes, want) in cases {
        let node = node(allocatable, std::slice::from_ref(&existing));
        assert_eq!(run(&pod("p", "uid-p", volumes), &node), want, "{name}");
    }
}

#[test]
fn volumes_of_pods_on_the_node_fill_the_limit() {
    let on_node = [
        pod("x", "1", pvc(&["a", "nope"])),
        pod("y", "2", pvc(&["b"])),
    ];
    // `nope` (missing) is not counted for pods already on the node.
    let roomy = node(ebs_limit(3), &on_node);
    assert_eq!(run(&pod("p", "uid-p", pvc(&["c"])), &roomy), None);
    let full = node(ebs_limit(2), &on_node);
    assert_eq!(
        run(&pod("p", "uid-p", pvc(&["c"])), &full),
        Some((
            Code::Unschedulable,
            ERR_REASON_MAX_VOLUME_COUNT_EXCEEDED.to_string()
        ))
    );
}

#[test]
fn an_ephemeral_claim_of_another_pod_is_an_error() {
    let scratch = json!([{"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}}]);
    let node = node(ebs_limit(5), &[]);
    let got = run(&pod("p", "uid-someone-else", scratch), &node).unwrap();
    assert_eq!(got.0, Code::Error);
    assert_eq!(
        got.1,
        "PVC default/p-scratch was not created for pod default/p (pod is not owner)"
    );
}

#[test]
fn pods_without_claims_skip() {
    let plugin = new(&Value::Null).unwrap();
    let snapshot = Snapshot::new(vec![], Arc::new(cluster()));
    let mut state = CycleState::default();
    let volumes = json!([{"name": "v", "emptyDir": {}}, {"name": "w", "csi": {"driver": EBS}}]);
    let (_, status) = plugin.pre_filter(&mut state, &pod("p", "u", volumes), &snapshot);
    assert_eq!(status.code, Code::Skip);
}

#[test]
fn attach_limit_keys_are_shortened_as_kube_does() {
    assert_eq!(
        csi_attach_limit_key(EBS),
        "attachable-volumes-csi-ebs.csi.aws.com"
    );
    assert_eq!(
        csi_attach_limit_key("very-long-csi-driver-name.storage.example.com"),
        "attachable-volumes-csi-very-long-csi-driver-na07a2878efedcb14e"
    );
}

#[test]
fn args_are_refused() {
    assert!(new(&json!({"kind": "NodeVolumeLimitsArgs"})).is_ok());
    assert!(new(&json!({"maxVolumes": 3})).is_err());
}
