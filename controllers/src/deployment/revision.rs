//! The annotations that record a Deployment's rollout history on its
//! ReplicaSets: revision, revision-history, desired/max replicas, and the
//! Deployment annotations (such as change-cause) copied to the new one.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};

pub const REVISION: &str = "deployment.kubernetes.io/revision";
pub const REVISION_HISTORY: &str = "deployment.kubernetes.io/revision-history";
pub const DESIRED_REPLICAS: &str = "deployment.kubernetes.io/desired-replicas";
pub const MAX_REPLICAS: &str = "deployment.kubernetes.io/max-replicas";
pub const CHANGE_CAUSE: &str = "kubernetes.io/change-cause";
const LAST_APPLIED_CONFIGURATION: &str = "kubectl.kubernetes.io/last-applied-configuration";
const DEPRECATED_ROLLBACK_TO: &str = "deprecated.deployment.rollback.to";

/// Longest revision-history annotation kept (kube-controller-manager's
/// default); the oldest entries go first.
const MAX_REVISION_HISTORY_CHARS: usize = 2000;

/// Deployment annotations that are the controller's, not the user's.
fn skipped(key: &str) -> bool {
    [
        LAST_APPLIED_CONFIGURATION,
        REVISION,
        REVISION_HISTORY,
        DESIRED_REPLICAS,
        MAX_REPLICAS,
        DEPRECATED_ROLLBACK_TO,
    ]
    .contains(&key)
}

fn annotation<'a>(rs: &'a ReplicaSet, key: &str) -> Option<&'a str> {
    rs.metadata
        .annotations
        .as_ref()?
        .get(key)
        .map(String::as_str)
}

/// The revision of a ReplicaSet (0 when unset or not a number).
pub fn revision(rs: &ReplicaSet) -> i64 {
    annotation(rs, REVISION)
        .and_then(|r| r.parse().ok())
        .unwrap_or(0)
}

/// The highest revision among `replica_sets`.
pub fn max_revision<'a>(replica_sets: impl IntoIterator<Item = &'a ReplicaSet>) -> i64 {
    replica_sets.into_iter().map(revision).max().unwrap_or(0)
}

/// The `desired-replicas` annotation, when set and a number.
pub fn desired_replicas(rs: &ReplicaSet) -> Option<i32> {
    annotation(rs, DESIRED_REPLICAS)?.parse().ok()
}

/// The `max-replicas` annotation, when set and a number.
pub fn max_replicas(rs: &ReplicaSet) -> Option<i32> {
    annotation(rs, MAX_REPLICAS)?.parse().ok()
}

fn set(annotations: &mut BTreeMap<String, String>, key: &str, value: String) -> bool {
    if annotations.get(key) == Some(&value) {
        return false;
    }
    annotations.insert(key.to_string(), value);
    true
}

/// Sets desired-replicas and max-replicas; true when either changed.
pub fn set_replicas_annotations(rs: &mut ReplicaSet, desired: i32, max: i32) -> bool {
    let annotations = rs.metadata.annotations.get_or_insert_with(BTreeMap::new);
    let desired_changed = set(annotations, DESIRED_REPLICAS, desired.to_string());
    let max_changed = set(annotations, MAX_REPLICAS, max.to_string());
    desired_changed || max_changed
}

/// Gives the new ReplicaSet the Deployment's annotations and `new_revision`
/// (only when higher than its own; a rollback keeps the old number in
/// revision-history). A ReplicaSet about to be created also gets its replica
/// annotations. True when anything changed.
pub fn set_new_replica_set_annotations(
    d: &Deployment,
    rs: &mut ReplicaSet,
    new_revision: i64,
    exists: bool,
    max_surge: i32,
) -> bool {
    let mut changed = copy_deployment_annotations(d, rs);
    let annotations = rs.metadata.annotations.get_or_insert_with(BTreeMap::new);
    let old = annotations.get(REVISION).cloned();
    let old_revision = match old.as_deref().map(str::parse::<i64>) {
        None => 0,
        Some(Ok(r)) => r,
        Some(Err(_)) => return changed,
    };
    if old_revision < new_revision {
        annotations.insert(REVISION.to_string(), new_revision.to_string());
        changed = true;
        if let Some(old) = old {
            record_revision_history(annotations, &old);
        }
    }
    if !exists {
        let replicas = super::strategy::replicas(d);
        changed |= set_replicas_annotations(rs, replicas, replicas + max_surge);
    }
    changed
}

fn record_revision_history(annotations: &mut BTreeMap<String, String>, old_revision: &str) {
    let history = annotations
        .get(REVISION_HISTORY)
        .cloned()
        .unwrap_or_default();
    if history.is_empty() {
        annotations.insert(REVISION_HISTORY.to_string(), old_revision.to_string());
        return;
    }
    let mut revisions: Vec<&str> = history.split(',').collect();
    let mut total = history.len() + old_revision.len() + 1;
    let mut start = 0;
    while total > MAX_REVISION_HISTORY_CHARS && start < revisions.len() {
        total -= revisions[start].len() + 1;
        start += 1;
    }
    if total <= MAX_REVISION_HISTORY_CHARS {
        revisions.drain(..start);
        revisions.push(old_revision);
        annotations.insert(REVISION_HISTORY.to_string(), revisions.join(","));
    }
}

/// Copies the Deployment's own annotations (change-cause and the like) to
/// the ReplicaSet; true when any was missing or different.
fn copy_deployment_annotations(d: &Deployment, rs: &mut ReplicaSet) -> bool {
    let Some(source) = d.metadata.annotations.as_ref() else {
        return false;
    };
    let annotations = rs.metadata.annotations.get_or_insert_with(BTreeMap::new);
    let mut changed = false;
    for (key, value) in source.iter().filter(|(k, _)| !skipped(k)) {
        changed |= set(annotations, key, value.clone());
    }
    changed
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deployment() -> Deployment {
        serde_json::from_value(json!({
            "metadata": {"name": "web", "annotations": {
                CHANGE_CAUSE: "kubectl set image deployment/web web=nginx:1.26",
                REVISION: "4",
                LAST_APPLIED_CONFIGURATION: "{}"}},
            "spec": {"replicas": 3, "selector": {}, "template": {}}
        }))
        .unwrap()
    }

    fn replica_set(annotations: serde_json::Value) -> ReplicaSet {
        serde_json::from_value(json!({"metadata": {"name": "web-abc", "annotations": annotations}}))
            .unwrap()
    }

    #[test]
    fn a_new_replica_set_gets_revision_change_cause_and_replica_annotations() {
        let mut rs = replica_set(json!({}));
        assert!(set_new_replica_set_annotations(
            &deployment(),
            &mut rs,
            1,
            false,
            1
        ));
        let a = rs.metadata.annotations.unwrap();
        assert_eq!(a[REVISION], "1");
        assert_eq!(
            a[CHANGE_CAUSE],
            "kubectl set image deployment/web web=nginx:1.26"
        );
        assert_eq!(a[DESIRED_REPLICAS], "3");
        assert_eq!(a[MAX_REPLICAS], "4");
        assert!(!a.contains_key(LAST_APPLIED_CONFIGURATION));
        assert!(!a.contains_key(REVISION_HISTORY));
    }

    #[test]
    fn a_rollback_records_the_old_revision_in_the_history() {
        let mut rs = replica_set(json!({REVISION: "2", REVISION_HISTORY: "1"}));
        assert!(set_new_replica_set_annotations(
            &deployment(),
            &mut rs,
            5,
            true,
            1
        ));
        let a = rs.metadata.annotations.unwrap();
        assert_eq!(a[REVISION], "5");
        assert_eq!(a[REVISION_HISTORY], "1,2");
        assert!(!a.contains_key(DESIRED_REPLICAS), "only set on creation");
    }

    #[test]
    fn a_higher_revision_is_kept_and_nothing_changes_twice() {
        let mut rs = replica_set(json!({REVISION: "7"}));
        let d = deployment();
        set_new_replica_set_annotations(&d, &mut rs, 5, true, 1);
        assert_eq!(revision(&rs), 7);
        assert!(!set_new_replica_set_annotations(&d, &mut rs, 5, true, 1));
    }

    #[test]
    fn the_history_drops_its_oldest_entries_beyond_its_length() {
        let long: Vec<String> = (1..=600).map(|n| n.to_string()).collect();
        let mut annotations = BTreeMap::from([(REVISION_HISTORY.to_string(), long.join(","))]);
        record_revision_history(&mut annotations, "601");
        let history = &annotations[REVISION_HISTORY];
        assert!(history.len() <= MAX_REVISION_HISTORY_CHARS);
        assert!(history.ends_with(",600,601"));
        assert!(!history.starts_with("1,"));
    }
}
