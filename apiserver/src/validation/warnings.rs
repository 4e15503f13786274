//! What a write is warned of though it is accepted, as Kubernetes'
//! `pkg/api/pod` warnings word it: a negative pod grace period, which is
//! stored as sent and treated as 1 second when the pod is deleted. Pods
//! are warned on create only; workloads when their pod template is
//! created or changed.

use serde_json::Value;

use super::field;
use crate::resources::ResourceType;

/// The pod template of a workload, and the path Kubernetes names it by.
fn pod_template<'a>(
    resource: &ResourceType,
    object: &'a Value,
) -> Option<(&'a Value, &'static str)> {
    let spec = field(object, "spec");
    match (resource.group, resource.kind) {
        ("apps", "Deployment" | "ReplicaSet" | "StatefulSet" | "DaemonSet") | ("batch", "Job") => {
            Some((field(spec, "template"), "spec.template"))
        }
        ("batch", "CronJob") => Some((
            field(field(field(spec, "jobTemplate"), "spec"), "template"),
            "spec.jobTemplate.spec.template",
        )),
        _ => None,
    }
}

fn pod_spec_warnings(pod_spec: &Value, prefix: &str) -> Vec<String> {
    let grace = pod_spec
        .get("terminationGracePeriodSeconds")
        .and_then(Value::as_i64);
    match grace {
        Some(seconds) if seconds < 0 => vec![format!(
            "{prefix}spec.terminationGracePeriodSeconds: must be >= 0; negative values are invalid and will be treated as 1"
        )],
        _ => Vec::new(),
    }
}

/// The warnings of a new object.
pub fn on_create(resource: &ResourceType, object: &Value) -> Vec<String> {
    if resource.group.is_empty() && resource.kind == "Pod" {
        return pod_spec_warnings(field(object, "spec"), "");
    }
    match pod_template(resource, object) {
        Some((template, path)) => pod_spec_warnings(field(template, "spec"), &format!("{path}.")),
        None => Vec::new(),
    }
}

/// The warnings of an update: a workload's changed template only.
pub fn on_update(resource: &ResourceType, old: &Value, new: &Value) -> Vec<String> {
    match (pod_template(resource, old), pod_template(resource, new)) {
        (Some((old, _)), Some((new, path))) if old != new => {
            pod_spec_warnings(field(new, "spec"), &format!("{path}."))
        }
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::kind;
    use super::*;
    use serde_json::json;

    const TREATED: &str = "spec.terminationGracePeriodSeconds: must be >= 0; negative values are invalid and will be treated as 1";

    #[test]
    fn negative_grace_periods_are_warned_of_where_kubernetes_warns() {
        let pod = kind("v1", "Pod");
        let negative = json!({"spec": {"terminationGracePeriodSeconds": -5}});
        assert_eq!(on_create(pod, &negative), [TREATED]);
        assert!(on_create(pod, &json!({"spec": {"terminationGracePeriodSeconds": 0}})).is_empty());
        assert!(on_update(pod, &negative, &negative).is_empty());

        let deployment = kind("apps/v1", "Deployment");
        let template = |grace: i64| json!({"spec": {"template": {"spec": {"terminationGracePeriodSeconds": grace}}}});
        assert_eq!(
            on_create(deployment, &template(-1)),
            [format!("spec.template.{TREATED}")]
        );
        assert!(on_update(deployment, &template(-1), &template(-1)).is_empty());
        assert_eq!(on_update(deployment, &template(30), &template(-1)).len(), 1);
        let cron = kind("batch/v1", "CronJob");
        let cron_job = json!({"spec": {"jobTemplate": {"spec": {"template": {"spec": {"terminationGracePeriodSeconds": -1}}}}}});
        assert_eq!(
            on_create(cron, &cron_job),
            [format!("spec.jobTemplate.spec.template.{TREATED}")]
        );
        assert!(on_create(kind("v1", "ConfigMap"), &negative).is_empty());
    }
}
