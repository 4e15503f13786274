use std::path::Path;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;
use serde_json::{json, Value};

use super::*;
use crate::persistentvolume::provisioner::{self, default_storage_class, new_volume, owned_dir};

fn volume(name: &str, size: &str, extra: Value) -> Arc<PersistentVolume> {
    let mut value = json!({
        "metadata": {"name": name, "uid": format!("uid-{name}"), "labels": {"disk": "ssd"}},
        "spec": {"capacity": {"storage": size}, "accessModes": ["ReadWriteOnce", "ReadOnlyMany"],
                 "hostPath": {"path": format!("/srv/{name}")}, "persistentVolumeReclaimPolicy": "Retain"},
        "status": {"phase": "Available"},
    });
    merge(&mut value, extra);
    Arc::new(serde_json::from_value(value).unwrap())
}

fn claim(name: &str, size: &str, extra: Value) -> Arc<PersistentVolumeClaim> {
    let mut value = json!({
        "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}"), "resourceVersion": "4"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": size}}},
        "status": {"phase": "Pending"},
    });
    merge(&mut value, extra);
    Arc::new(serde_json::from_value(value).unwrap())
}

fn merge(into: &mut Value, from: Value) {
    match (into, from) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                merge(a.entry(k).or_insert(Value::Null), v);
            }
        }
        (slot, from) => *slot = from,
    }
}

fn class(name: &str, extra: Value) -> Arc<StorageClass> {
    let mut value = json!({"metadata": {"name": name}, "provisioner": "skiff.dev/host-path"});
    merge(&mut value, extra);
    Arc::new(serde_json::from_value(value).unwrap())
}

fn no_class(name: &str) -> Value {
    let _ = name;
    json!({"spec": {"storageClassName": ""}})
}

#[test]
fn the_smallest_volume_that_satisfies_the_claim_wins() {
    let volumes = vec![
        volume("big", "10Gi", json!({})),
        volume("small", "1Gi", json!({})),
        volume("tiny", "100Mi", json!({})),
        volume(
            "rwx-only",
            "2Gi",
            json!({"spec": {"accessModes": ["ReadWriteMany"]}}),
        ),
        volume("block", "2Gi", json!({"spec": {"volumeMode": "Block"}})),
        volume(
            "classy",
            "2Gi",
            json!({"spec": {"storageClassName": "fast"}}),
        ),
        volume(
            "taken",
            "1Gi",
            json!({"spec": {"claimRef": {"namespace": "default", "name": "other", "uid": "u"}}, "status": {"phase": "Bound"}}),
        ),
    ];
    let c = claim("data", "500Mi", no_class("data"));
    assert_eq!(
        claim_action(&c, &volumes, &[], &[]),
        ClaimAction::Bind("small".into())
    );
    let c = claim(
        "data",
        "500Mi",
        json!({"spec": {"storageClassName": "fast"}}),
    );
    assert_eq!(
        claim_action(&c, &volumes, &[], &[]),
        ClaimAction::Bind("classy".into())
    );
    let c = claim("data", "20Gi", no_class("data"));
    assert_eq!(
        claim_action(&c, &volumes, &[], &[]),
        ClaimAction::Nothing,
        "stays Pending"
    );
    let picky = claim(
        "data",
        "1Mi",
        json!({"spec": {"storageClassName": "", "selector": {"matchLabels": {"disk": "hdd"}}}}),
    );
    assert_eq!(
        claim_action(&picky, &volumes, &[], &[]),
        ClaimAction::Nothing
    );
}

#[test]
fn a_claim_without_class_takes_the_default_class() {
    let classes = vec![
        class("slow", json!({})),
        class(
            "standard",
            json!({"metadata": {"annotations": {IS_DEFAULT_CLASS: "true"}}}),
        ),
    ];
    let c = claim("data", "1Gi", json!({}));
    assert_eq!(claim_class(&c, &classes), "standard");
    assert_eq!(claim_class(&c, &[]), "");
    let explicit_none = claim("data", "1Gi", no_class("data"));
    assert_eq!(claim_class(&explicit_none, &classes), "");
    let classed = volume(
        "v",
        "1Gi",
        json!({"spec": {"storageClassName": "standard"}}),
    );
    assert_eq!(
        claim_action(&c, &[classed], &classes, &[]),
        ClaimAction::Bind("v".into())
    );
}

#[test]
fn a_claim_of_the_host_path_class_is_provisioned_when_nothing_fits() {
    let classes = vec![default_class_arc()];
    let c = claim("data", "1Gi", json!({}));
    let ClaimAction::Provision(provisioning) = claim_action(&c, &[], &classes, &[]) else {
        panic!("expected provisioning");
    };
    assert_eq!(provisioning.reclaim_policy, "Delete");
    let made = new_volume(&c, &provisioning, Path::new("/data/volumes"));
    assert_eq!(made.metadata.name.as_deref(), Some("pvc-uid-data"));
    let spec = made.spec.as_ref().unwrap();
    assert_eq!(
        spec.host_path.as_ref().unwrap().path,
        "/data/volumes/pvc-uid-data"
    );
    assert_eq!(spec.capacity.as_ref().unwrap()["storage"].0, "1Gi");
    assert_eq!(
        spec.claim_ref.as_ref().unwrap().uid.as_deref(),
        Some("uid-data")
    );
    assert_eq!(spec.storage_class_name.as_deref(), Some("standard"));
    assert_eq!(
        owned_dir(&made, Path::new("/data/volumes")),
        Some("/data/volumes/pvc-uid-data".into())
    );
    assert_eq!(owned_dir(&made, Path::new("/elsewhere")), None);
    // The provisioned volume, reserved for the claim, is then bound.
    let made = Arc::new(made);
    assert_eq!(
        claim_action(&c, &[made], &classes, &[]),
        ClaimAction::Bind("pvc-uid-data".into())
    );
    // Another provisioner's class: left Pending.
    let other = vec![class(
        "standard",
        json!({"provisioner": "ebs.csi.aws.com", "metadata": {"annotations": {IS_DEFAULT_CLASS: "true"}}}),
    )];
    assert_eq!(claim_action(&c, &[], &other, &[]), ClaimAction::Nothing);
}

fn default_class_arc() -> Arc<StorageClass> {
    let class = default_storage_class();
    assert!(provisioner::is_host_path(&class.provisioner));
    Arc::new(class)
}

#[test]
fn wait_for_first_consumer_provisions_once_a_pod_is_scheduled() {
    let classes = vec![class(
        "local",
        json!({"volumeBindingMode": "WaitForFirstConsumer"}),
    )];
    let c = claim(
        "data",
        "1Gi",
        json!({"spec": {"storageClassName": "local"}}),
    );
    assert_eq!(claim_action(&c, &[], &classes, &[]), ClaimAction::Nothing);
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "p", "namespace": "default"},
        "spec": {"nodeName": "node-1", "containers": [],
                 "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}]},
    }))
    .unwrap();
    let pods = vec![Arc::new(pod)];
    assert_eq!(
        claim_action(&c, &[], &classes, &pods),
        ClaimAction::SelectNode("node-1".into())
    );
    let selected = claim(
        "data",
        "1Gi",
        json!({"spec": {"storageClassName": "local"}, "metadata": {"annotations": {SELECTED_NODE: "node-1"}}}),
    );
    assert!(matches!(
        claim_action(&selected, &[], &classes, &pods),
        ClaimAction::Provision(_)
    ));
}

#[test]
fn a_claim_naming_a_volume_binds_to_it_and_a_bound_claim_can_be_lost() {
    let volumes = vec![volume("mine", "1Gi", json!({}))];
    let c = claim("data", "1Gi", json!({"spec": {"volumeName": "mine"}}));
    assert_eq!(
        claim_action(&c, &volumes, &[], &[]),
        ClaimAction::Bind("mine".into())
    );
    let missing = claim("data", "1Gi", json!({"spec": {"volumeName": "nope"}}));
    assert_eq!(
        claim_action(&missing, &volumes, &[], &[]),
        ClaimAction::Nothing
    );

    let bound_volume = volume(
        "mine",
        "1Gi",
        json!({"spec": {"claimRef": {"namespace": "default", "name": "data", "uid": "uid-data"}}}),
    );
    let bound = claim(
        "data",
        "1Gi",
        json!({
            "metadata": {"annotations": {BIND_COMPLETED: "yes"}},
            "spec": {"volumeName": "mine"}, "status": {"phase": "Bound"},
        }),
    );
    assert_eq!(
        claim_action(&bound, std::slice::from_ref(&bound_volume), &[], &[]),
        ClaimAction::Nothing
    );
    assert_eq!(
        claim_action(&bound, &[], &[], &[]),
        ClaimAction::Phase("Lost")
    );
    let taken_by_other = claim("other", "1Gi", json!({"spec": {"volumeName": "mine"}}));
    assert_eq!(
        claim_action(&taken_by_other, &[bound_volume], &[], &[]),
        ClaimAction::Nothing
    );
}

#[test]
fn volumes_follow_their_claims_and_reclaim_policy() {
    let free = volume("v", "1Gi", json!({"status": {"phase": "Pending"}}));
    assert_eq!(
        volume_action(&free, &[]),
        VolumeAction::Phase("Available", None)
    );
    let reference = json!({"spec": {"claimRef": {"namespace": "default", "name": "data", "uid": "uid-data"}}, "status": {"phase": "Available"}});
    let bound = volume("v", "1Gi", reference.clone());
    let c = claim("data", "1Gi", json!({"spec": {"volumeName": "v"}}));
    assert_eq!(
        volume_action(&bound, std::slice::from_ref(&c)),
        VolumeAction::Phase("Bound", None)
    );
    assert_eq!(
        volume_action(&bound, &[]),
        VolumeAction::Release,
        "claim deleted"
    );
    let mut released = reference.clone();
    merge(&mut released, json!({"status": {"phase": "Released"}}));
    assert_eq!(
        volume_action(&volume("v", "1Gi", released.clone()), &[]),
        VolumeAction::Nothing,
        "Retain"
    );
    merge(
        &mut released,
        json!({"spec": {"persistentVolumeReclaimPolicy": "Delete"}}),
    );
    assert_eq!(
        volume_action(&volume("v", "1Gi", released), &[]),
        VolumeAction::Delete
    );
    // A claim recreated under the same name is another claim.
    let newer = claim("data", "1Gi", json!({"metadata": {"uid": "uid-new"}}));
    assert_eq!(volume_action(&bound, &[newer]), VolumeAction::Release);
    // Bound by the controller to a claim that took another volume: freed.
    let mut by_controller = reference;
    merge(
        &mut by_controller,
        json!({"metadata": {"annotations": {BOUND_BY_CONTROLLER: "yes"}}}),
    );
    let elsewhere = claim("data", "1Gi", json!({"spec": {"volumeName": "w"}}));
    assert_eq!(
        volume_action(&volume("v", "1Gi", by_controller), &[elsewhere]),
        VolumeAction::Unbind
    );
}
