//! The writes a ReplicaSet makes to pods, as values: the pod it creates
//! from its template, and the patches that adopt and release a pod.

use crate::common::owners::controller_reference;
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use serde_json::{json, Value};

/// A new pod from `spec.template`: its labels, annotations, finalizers
/// and spec, `generateName: <rs-name>-`, controlled by the ReplicaSet.
/// `None` when the ReplicaSet has no template.
pub fn new_pod(rs: &ReplicaSet) -> Option<Pod> {
    let template = rs.spec.as_ref()?.template.as_ref()?;
    let meta = template.metadata.clone().unwrap_or_default();
    Some(Pod {
        metadata: ObjectMeta {
            generate_name: Some(format!(
                "{}-",
                rs.metadata.name.as_deref().unwrap_or_default()
            )),
            namespace: rs.metadata.namespace.clone(),
            labels: meta.labels,
            annotations: meta.annotations,
            finalizers: meta.finalizers,
            owner_references: Some(vec![controller_reference(rs)]),
            ..Default::default()
        },
        spec: template.spec.clone(),
        status: None,
    })
}

/// A merge patch giving an orphan `pod` the controller reference, on the
/// condition that the pod is still as the cache shows it.
pub fn adopt_patch(rs: &ReplicaSet, pod: &Pod) -> Value {
    let mut owners = pod.metadata.owner_references.clone().unwrap_or_default();
    owners.push(controller_reference(rs));
    owners_patch(pod, owners)
}

/// A merge patch taking the ReplicaSet's reference off `pod`.
pub fn release_patch(rs: &ReplicaSet, pod: &Pod) -> Value {
    let mut owners = pod.metadata.owner_references.clone().unwrap_or_default();
    owners.retain(|o| Some(&o.uid) != rs.metadata.uid.as_ref());
    owners_patch(pod, owners)
}

fn owners_patch(pod: &Pod, owners: Vec<OwnerReference>) -> Value {
    let owners = match owners.is_empty() {
        true => Value::Null,
        false => serde_json::to_value(owners).unwrap_or(Value::Null),
    };
    json!({
        "metadata": {
            "ownerReferences": owners,
            "resourceVersion": pod.metadata.resource_version,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::common::fixtures::{pod, replica_set};

    #[test]
    fn pods_are_made_from_the_template() {
        let rs = replica_set("web", 1);
        let pod = new_pod(&rs).unwrap();
        assert_eq!(pod.metadata.generate_name.as_deref(), Some("web-"));
        assert_eq!(pod.metadata.name, None);
        assert_eq!(pod.metadata.namespace.as_deref(), Some("default"));
        assert_eq!(pod.metadata.labels.as_ref().unwrap()["tier"], "front");
        assert_eq!(pod.metadata.annotations.as_ref().unwrap()["note"], "x");
        let owner = &pod.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            serde_json::to_value(owner).unwrap(),
            json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": "uid-web",
                   "controller": true, "blockOwnerDeletion": true})
        );
        assert_eq!(
            pod.spec.unwrap().containers[0].image.as_deref(),
            Some("nginx")
        );
    }

    #[test]
    fn adoption_and_release_patch_the_owner_references() {
        let rs = replica_set("web", 1);
        let orphan = pod("orphan").build();
        let adopt = adopt_patch(&rs, &orphan);
        assert_eq!(adopt["metadata"]["ownerReferences"][0]["uid"], "uid-web");
        assert_eq!(adopt["metadata"]["ownerReferences"][0]["controller"], true);
        assert_eq!(adopt["metadata"]["resourceVersion"], "5");

        let owned = pod("owned").owned_by(&rs).build();
        let release = release_patch(&rs, &owned);
        assert_eq!(release["metadata"]["ownerReferences"], Value::Null);
        assert_eq!(release["metadata"]["resourceVersion"], "5");
    }
}
