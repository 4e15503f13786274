//! The pure part of a quota recount: what the listed objects use (by the
//! usage evaluator admission charges with, `skiff_machinery::quota`, so
//! the two agree), and the status patch (none when the status is current).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ResourceQuota;
use serde_json::{json, Map, Value};
use skiff_machinery::quantity::Quantity;
use skiff_machinery::quota::{self, GroupResource, Usage};

/// `spec.hard`: name → limit.
pub fn hard(quota: &ResourceQuota) -> BTreeMap<String, String> {
    let hard = quota.spec.as_ref().and_then(|s| s.hard.as_ref());
    hard.into_iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.0.clone()))
        .collect()
}

/// What the listed objects (by the resource they were listed from) use,
/// for every name of `hard`, written as the admission plugin writes it
/// (binary units when the limit has them).
pub fn used(
    hard: &BTreeMap<String, String>,
    objects: &[(GroupResource<'_>, Vec<Value>)],
) -> BTreeMap<String, String> {
    let mut total = Usage::new();
    for (resource, items) in objects {
        for item in items {
            quota::add(&mut total, quota::usage(*resource, item));
        }
    }
    hard.iter()
        .map(|(name, limit)| (name.clone(), quota::shown_used(&total, name, limit)))
        .collect()
}

/// The merge patch that makes `status` `{hard, used}`, or `None` when it is
/// so already. Names no longer limited are removed; the quota's
/// resourceVersion guards against a charge by admission meanwhile.
pub fn status_patch(
    quota: &ResourceQuota,
    hard: &BTreeMap<String, String>,
    used: &BTreeMap<String, String>,
) -> Option<Value> {
    let status = quota.status.as_ref();
    let as_map = |m: Option<
        &BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
    >|
     -> BTreeMap<String, String> {
        m.into_iter()
            .flatten()
            .map(|(k, v)| (k.clone(), v.0.clone()))
            .collect()
    };
    let old_hard = as_map(status.and_then(|s| s.hard.as_ref()));
    let old_used = as_map(status.and_then(|s| s.used.as_ref()));
    let same = |old: &BTreeMap<String, String>, new: &BTreeMap<String, String>| {
        old.len() == new.len()
            && new.iter().all(|(k, v)| {
                old.get(k).is_some_and(|o| {
                    o == v
                        || Quantity::parse(o)
                            .zip(Quantity::parse(v))
                            .is_some_and(|(a, b)| a == b)
                })
            })
    };
    if same(&old_hard, hard) && same(&old_used, used) {
        return None;
    }
    let with_removals = |old: &BTreeMap<String, String>, new: &BTreeMap<String, String>| {
        let mut map: Map<String, Value> = new.iter().map(|(k, v)| (k.clone(), json!(v))).collect();
        for gone in old.keys().filter(|k| !new.contains_key(*k)) {
            map.insert(gone.clone(), Value::Null);
        }
        Value::Object(map)
    };
    Some(json!({
        "metadata": {"resourceVersion": quota.metadata.resource_version},
        "status": {"hard": with_removals(&old_hard, hard), "used": with_removals(&old_used, used)},
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quota(hard: Value, status: Value) -> ResourceQuota {
        serde_json::from_value(json!({
            "metadata": {"name": "q", "namespace": "default", "resourceVersion": "7"},
            "spec": {"hard": hard}, "status": status,
        }))
        .unwrap()
    }

    fn listed(plural: &str, items: Vec<Value>) -> (GroupResource<'_>, Vec<Value>) {
        (GroupResource::new("", plural), items)
    }

    #[test]
    fn usage_is_counted_as_admission_counts_it() {
        let q = quota(
            json!({"pods": "10", "requests.cpu": "2", "limits.memory": "1Gi", "configmaps": "5", "requests.storage": "10Gi", "count/deployments.apps": "3"}),
            json!({}),
        );
        let hard = hard(&q);
        let plurals: Vec<&str> = quota::counted_resources(hard.keys().map(String::as_str))
            .iter()
            .map(|r| r.resource)
            .collect();
        assert_eq!(
            plurals,
            [
                "configmaps",
                "deployments",
                "pods",
                "persistentvolumeclaims"
            ]
        );
        let pod = |cpu: &str, phase: &str| {
            json!({
                "metadata": {"name": "p"},
                "spec": {"containers": [{"name": "a", "resources": {"requests": {"cpu": cpu}, "limits": {"memory": "256Mi"}}}]},
                "status": {"phase": phase},
            })
        };
        let objects = vec![
            listed(
                "pods",
                vec![
                    pod("500m", "Running"),
                    pod("250m", "Pending"),
                    pod("1", "Succeeded"),
                ],
            ),
            listed(
                "configmaps",
                vec![
                    json!({"metadata": {"name": "a"}}),
                    json!({"metadata": {"name": "b"}}),
                ],
            ),
            listed(
                "persistentvolumeclaims",
                vec![json!({"spec": {"resources": {"requests": {"storage": "1Gi"}}}})],
            ),
        ];
        let used = used(&hard, &objects);
        assert_eq!(used["pods"], "2", "terminal pods are not counted");
        assert_eq!(used["requests.cpu"], "750m");
        assert_eq!(used["limits.memory"], "512Mi");
        assert_eq!(used["configmaps"], "2");
        assert_eq!(used["requests.storage"], "1Gi");
        assert_eq!(used["count/deployments.apps"], "0");
    }

    #[test]
    fn the_status_is_written_only_when_it_changes() {
        let hard_limits = json!({"pods": "10", "configmaps": "5"});
        let current = quota(
            hard_limits.clone(),
            json!({"hard": hard_limits, "used": {"pods": "2", "configmaps": "0"}}),
        );
        let h = hard(&current);
        let used: BTreeMap<String, String> = [
            ("pods".into(), "2".into()),
            ("configmaps".into(), "0".into()),
        ]
        .into();
        assert!(status_patch(&current, &h, &used).is_none());

        let fewer: BTreeMap<String, String> = [
            ("pods".into(), "1".into()),
            ("configmaps".into(), "0".into()),
        ]
        .into();
        let patch = status_patch(&current, &h, &fewer).expect("changed");
        assert_eq!(patch["status"]["used"]["pods"], "1");
        assert_eq!(patch["metadata"]["resourceVersion"], "7");

        let narrowed = quota(
            json!({"pods": "10"}),
            json!({"hard": {"pods": "10", "secrets": "1"}, "used": {"pods": "1", "secrets": "0"}}),
        );
        let h = hard(&narrowed);
        let used: BTreeMap<String, String> = [("pods".into(), "1".into())].into();
        let patch = status_patch(&narrowed, &h, &used).expect("a name went");
        assert_eq!(patch["status"]["hard"]["secrets"], Value::Null);
        assert_eq!(patch["status"]["used"]["secrets"], Value::Null);
    }
}
