//! A StatefulSet pod's stable identity and storage, as values: the name
//! `<set>-<ordinal>`, its labels, hostname and subdomain, and one
//! PersistentVolumeClaim per volumeClaimTemplate named
//! `<template>-<set>-<ordinal>`, referenced from the pod's volumes.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{
    PersistentVolumeClaim, PersistentVolumeClaimVolumeSource, Pod, PodTemplateSpec, Volume,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use crate::common::owners::controller_reference;
use crate::history::CONTROLLER_REVISION_HASH;

/// The label with the pod's name, which a per-pod Service can select.
pub const POD_NAME_LABEL: &str = "statefulset.kubernetes.io/pod-name";
/// The label with the pod's ordinal.
pub const POD_INDEX_LABEL: &str = "apps.kubernetes.io/pod-index";

fn set_name(set: &StatefulSet) -> &str {
    set.metadata.name.as_deref().unwrap_or_default()
}

/// `<set>-<ordinal>`.
pub fn pod_name(set: &StatefulSet, ordinal: usize) -> String {
    format!("{}-{ordinal}", set_name(set))
}

/// The ordinal of a pod named `<set>-<ordinal>`, `None` for any other
/// name (`getParentNameAndOrdinal`).
pub fn ordinal_of(set: &StatefulSet, pod: &Pod) -> Option<usize> {
    let name = pod.metadata.name.as_deref()?;
    let (parent, ordinal) = name.rsplit_once('-')?;
    if parent != set_name(set) || ordinal.is_empty() || !ordinal.bytes().all(|b| b.is_ascii_digit())
    {
        return None;
    }
    ordinal.parse().ok()
}

/// `<template>-<set>-<ordinal>`.
pub fn claim_name(claim_template: &str, set: &StatefulSet, ordinal: usize) -> String {
    format!("{claim_template}-{}-{ordinal}", set_name(set))
}

fn claim_templates(set: &StatefulSet) -> &[PersistentVolumeClaim] {
    set.spec
        .as_ref()
        .and_then(|s| s.volume_claim_templates.as_deref())
        .unwrap_or_default()
}

/// The revision a pod was made from (its `controller-revision-hash`).
pub fn revision_of(pod: &Pod) -> &str {
    pod.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(CONTROLLER_REVISION_HASH))
        .map(String::as_str)
        .unwrap_or_default()
}

/// The pod at `ordinal` from `template` of revision `revision`
/// (`newVersionedStatefulSetPod`).
pub fn new_pod(
    set: &StatefulSet,
    template: &PodTemplateSpec,
    revision: &str,
    ordinal: usize,
) -> Pod {
    let name = pod_name(set, ordinal);
    let meta = template.metadata.clone().unwrap_or_default();
    let mut labels = meta.labels.unwrap_or_default();
    labels.insert(POD_NAME_LABEL.into(), name.clone());
    labels.insert(POD_INDEX_LABEL.into(), ordinal.to_string());
    labels.insert(CONTROLLER_REVISION_HASH.into(), revision.to_string());
    let mut spec = template.spec.clone().unwrap_or_default();
    spec.hostname = Some(name.clone());
    let service = set.spec.as_ref().and_then(|s| s.service_name.clone());
    spec.subdomain = service.filter(|s| !s.is_empty());
    let claims = claim_templates(set);
    let claim_names: Vec<&str> = claims
        .iter()
        .filter_map(|c| c.metadata.name.as_deref())
        .collect();
    let mut volumes: Vec<Volume> = claim_names
        .iter()
        .map(|claim| Volume {
            name: claim.to_string(),
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: claim_name(claim, set, ordinal),
                read_only: None,
            }),
            ..Default::default()
        })
        .collect();
    volumes.extend(
        spec.volumes
            .take()
            .into_iter()
            .flatten()
            .filter(|v| !claim_names.contains(&v.name.as_str())),
    );
    spec.volumes = (!volumes.is_empty()).then_some(volumes);
    Pod {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: set.metadata.namespace.clone(),
            labels: Some(labels),
            annotations: meta.annotations,
            finalizers: meta.finalizers,
            owner_references: Some(vec![controller_reference(set)]),
            ..Default::default()
        },
        spec: Some(spec),
        status: None,
    }
}

/// `spec.persistentVolumeClaimRetentionPolicy`: (whenDeleted, whenScaled),
/// `Retain` when unset.
pub fn retention(set: &StatefulSet) -> (&str, &str) {
    let policy = set
        .spec
        .as_ref()
        .and_then(|s| s.persistent_volume_claim_retention_policy.as_ref());
    (
        policy
            .and_then(|p| p.when_deleted.as_deref())
            .unwrap_or("Retain"),
        policy
            .and_then(|p| p.when_scaled.as_deref())
            .unwrap_or("Retain"),
    )
}

/// The claims of the pod at `ordinal` (`getPersistentVolumeClaims`): each
/// template's spec, labels and annotations, plus the set's matchLabels;
/// owned by the set when `whenDeleted` is `Delete`.
pub fn new_claims(set: &StatefulSet, ordinal: usize) -> Vec<PersistentVolumeClaim> {
    let match_labels: BTreeMap<String, String> = set
        .spec
        .as_ref()
        .and_then(|s| s.selector.match_labels.clone())
        .unwrap_or_default();
    let owner = (retention(set).0 == "Delete").then(|| OwnerReference {
        controller: Some(false),
        ..controller_reference(set)
    });
    claim_templates(set)
        .iter()
        .filter_map(|template| {
            let claim = template.metadata.name.as_deref()?;
            let mut labels = template.metadata.labels.clone().unwrap_or_default();
            labels.extend(match_labels.clone());
            Some(PersistentVolumeClaim {
                metadata: ObjectMeta {
                    name: Some(claim_name(claim, set, ordinal)),
                    namespace: set.metadata.namespace.clone(),
                    labels: Some(labels),
                    annotations: template.metadata.annotations.clone(),
                    owner_references: owner.clone().map(|o| vec![o]),
                    ..Default::default()
                },
                spec: template.spec.clone(),
                status: None,
            })
        })
        .collect()
}

/// The names of the claims of the pod at `ordinal`.
pub fn claim_names(set: &StatefulSet, ordinal: usize) -> Vec<String> {
    claim_templates(set)
        .iter()
        .filter_map(|t| t.metadata.name.as_deref())
        .map(|claim| claim_name(claim, set, ordinal))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::statefulset::fixtures::stateful_set;
    use serde_json::json;

    #[test]
    fn pods_have_stable_names_labels_and_hostnames() {
        let set = stateful_set("web", 3);
        let template = &set.spec.as_ref().unwrap().template;
        let pod = new_pod(&set, template, "web-abc", 2);
        assert_eq!(pod.metadata.name.as_deref(), Some("web-2"));
        let labels = pod.metadata.labels.as_ref().unwrap();
        assert_eq!(labels[POD_NAME_LABEL], "web-2");
        assert_eq!(labels[POD_INDEX_LABEL], "2");
        assert_eq!(labels[CONTROLLER_REVISION_HASH], "web-abc");
        assert_eq!(labels["app"], "web");
        let spec = pod.spec.as_ref().unwrap();
        assert_eq!(spec.hostname.as_deref(), Some("web-2"));
        assert_eq!(spec.subdomain.as_deref(), Some("nginx"));
        assert_eq!(ordinal_of(&set, &pod), Some(2));
        assert_eq!(revision_of(&pod), "web-abc");
    }

    #[test]
    fn only_names_of_the_set_have_ordinals() {
        let set = stateful_set("web", 3);
        let named = |name: &str| Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            ..Default::default()
        };
        assert_eq!(ordinal_of(&set, &named("web-10")), Some(10));
        assert_eq!(ordinal_of(&set, &named("web-x")), None);
        assert_eq!(ordinal_of(&set, &named("web-")), None);
        assert_eq!(ordinal_of(&set, &named("webby-1")), None);
        assert_eq!(ordinal_of(&set, &named("my-web-1")), None);
    }

    #[test]
    fn each_claim_template_gives_a_claim_per_pod_referenced_from_its_volumes() {
        let mut set = stateful_set("web", 3);
        set.spec
            .as_mut()
            .unwrap()
            .template
            .spec
            .as_mut()
            .unwrap()
            .volumes = serde_json::from_value(json!([{"name": "data", "emptyDir": {}},
                                          {"name": "config", "configMap": {"name": "cfg"}}]))
        .unwrap();
        let template = &set.spec.as_ref().unwrap().template;
        let pod = new_pod(&set, template, "web-abc", 1);
        let volumes = serde_json::to_value(pod.spec.unwrap().volumes).unwrap();
        assert_eq!(
            volumes,
            json!([{"name": "data", "persistentVolumeClaim": {"claimName": "data-web-1"}},
                   {"name": "config", "configMap": {"name": "cfg"}}])
        );
        let claims = new_claims(&set, 1);
        assert_eq!(claims.len(), 1);
        let claim = &claims[0];
        assert_eq!(claim.metadata.name.as_deref(), Some("data-web-1"));
        assert_eq!(claim.metadata.labels.as_ref().unwrap()["app"], "web");
        assert_eq!(claim.metadata.owner_references, None);
        assert_eq!(
            claim.spec.as_ref().unwrap().access_modes,
            Some(vec!["ReadWriteOnce".to_string()])
        );
        assert_eq!(claim_names(&set, 0), ["data-web-0"]);
        assert_eq!(retention(&set), ("Retain", "Retain"));

        set.spec
            .as_mut()
            .unwrap()
            .persistent_volume_claim_retention_policy =
            serde_json::from_value(json!({"whenDeleted": "Delete", "whenScaled": "Retain"}))
                .unwrap();
        let owners = new_claims(&set, 1)[0]
            .metadata
            .owner_references
            .clone()
            .unwrap();
        assert_eq!(owners[0].kind, "StatefulSet");
        assert_eq!(owners[0].controller, Some(false));
    }
}
