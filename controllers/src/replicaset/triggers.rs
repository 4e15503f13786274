//! Which ReplicaSets a pod event concerns: its controller if it has one,
//! else (an orphan) every ReplicaSet of its namespace whose selector
//! matches it, which may adopt it.

use std::sync::Arc;

use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::reflector::ObjectRef;

use super::plan::selector;
use crate::common::pods::controller_ref;

/// The ReplicaSets to sync when `pod` changes, among `replica_sets`.
pub fn replica_sets_for_pod(
    pod: &Pod,
    replica_sets: &[Arc<ReplicaSet>],
) -> Vec<ObjectRef<ReplicaSet>> {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
    if let Some(owner) = controller_ref(pod) {
        let is_replica_set = owner.kind == "ReplicaSet" && owner.api_version == "apps/v1";
        return match is_replica_set {
            true => vec![ObjectRef::new(&owner.name).within(namespace)],
            false => Vec::new(),
        };
    }
    let labels = pod.metadata.labels.as_ref();
    replica_sets
        .iter()
        .filter(|rs| rs.metadata.namespace.as_deref() == Some(namespace))
        .filter(|rs| {
            selector(rs).is_ok_and(|s| {
                !s.is_empty()
                    && s.matches_by(|key| labels.and_then(|l| l.get(key)).map(String::as_str))
            })
        })
        .map(|rs| ObjectRef::from_obj(rs.as_ref()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::common::fixtures::{pod, replica_set};

    #[test]
    fn pods_map_to_their_controller_or_to_matching_replica_sets() {
        let web = replica_set("web", 1);
        let mut db = replica_set("db", 1);
        db.spec.as_mut().unwrap().selector.match_labels =
            Some([("app".into(), "db".into())].into());
        let all = vec![Arc::new(web.clone()), Arc::new(db)];

        let owned = pod("owned").labels(&[("app", "db")]).owned_by(&web).build();
        assert_eq!(
            replica_sets_for_pod(&owned, &all),
            [ObjectRef::new("web").within("default")]
        );

        let orphan = pod("orphan").labels(&[("app", "db")]).build();
        assert_eq!(
            replica_sets_for_pod(&orphan, &all),
            [ObjectRef::new("db").within("default")]
        );

        let elsewhere = serde_json::from_value::<Pod>(serde_json::json!({
            "metadata": {"name": "x", "namespace": "other", "labels": {"app": "web"}}
        }))
        .unwrap();
        assert!(replica_sets_for_pod(&elsewhere, &all).is_empty());
    }
}
