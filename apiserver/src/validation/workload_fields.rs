//! The values of workload specs beyond selectors and templates: update
//! strategies, pod management, counts and deadlines of Deployments,
//! ReplicaSets, StatefulSets, DaemonSets, Jobs and CronJobs, worded as
//! pkg/apis/apps and pkg/apis/batch validation word them.

use serde_json::Value;

use super::{
    cause, field, forbidden, go_quote, invalid, non_negative, not_supported, required, text,
};
use crate::status::Cause;

/// Go's `%#v` of an `intstr.IntOrString`.
fn go_int_or_string(value: &Value) -> String {
    match value {
        Value::String(s) => format!(
            "intstr.IntOrString{{Type:1, IntVal:0, StrVal:{}}}",
            go_quote(s)
        ),
        other => format!(
            "intstr.IntOrString{{Type:0, IntVal:{}, StrVal:\"\"}}",
            other.as_i64().unwrap_or(0)
        ),
    }
}

/// Go's `%#v` of a strategy struct whose `RollingUpdate` is a pointer:
/// nil when absent; an address Go would print is not ours to know.
fn go_strategy(type_name: &str, rolling_type: &str, strategy: &Value) -> String {
    let rolling = if strategy.get("rollingUpdate").is_some_and(|r| !r.is_null()) {
        format!("(*{rolling_type})(...)")
    } else {
        format!("(*{rolling_type})(nil)")
    };
    format!(
        "{type_name}{{Type:{}, RollingUpdate:{rolling}}}",
        go_quote(text(strategy, "type"))
    )
}

/// A percent (`25%`), its number; `None` for anything else.
fn percent(text: &str) -> Option<i64> {
    let digits = text.strip_suffix('%')?;
    (!digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()))
        .then(|| digits.parse().unwrap_or(i64::MAX))
}

/// `ValidatePositiveIntOrPercent` and `IsNotMoreThan100Percent` of one
/// field; its value as a number (a percent's number) for the zero checks.
fn check_int_or_percent(causes: &mut Vec<Cause>, parent: &Value, name: &str, path: &str) -> i64 {
    let at = format!("{path}.{name}");
    match parent.get(name) {
        Some(Value::String(s)) => match percent(s) {
            Some(n) => {
                if n > 100 && name == "maxUnavailable" {
                    let shown = go_int_or_string(&parent[name]);
                    causes.push(invalid(&at, &shown, "must not be greater than 100%"));
                }
                n
            }
            None => {
                let detail = "a valid percent string must be a numeric string followed by an ending '%' (e.g. '1%',  or '93%', regex used for validation is '[0-9]+%')";
                causes.push(invalid(&at, &go_int_or_string(&parent[name]), detail));
                0
            }
        },
        Some(Value::Number(n)) => {
            let n = n.as_i64().unwrap_or(0);
            non_negative(causes, parent, name, path);
            n
        }
        _ => 0,
    }
}

/// Deployment, ReplicaSet, StatefulSet and DaemonSet spec values.
pub(super) fn validate_workload_fields(causes: &mut Vec<Cause>, kind: &str, spec: &Value) {
    non_negative(causes, spec, "minReadySeconds", "spec");
    non_negative(causes, spec, "revisionHistoryLimit", "spec");
    let template_spec = field(field(spec, "template"), "spec");
    if let Some(deadline) = template_spec
        .get("activeDeadlineSeconds")
        .and_then(Value::as_i64)
    {
        let at = "spec.template.spec.activeDeadlineSeconds";
        match kind {
            "Deployment" | "ReplicaSet" => causes.push(forbidden(
                at,
                "activeDeadlineSeconds in ReplicaSet is not Supported",
            )),
            _ => causes.push(invalid(at, &deadline.to_string(), "must not be specified")),
        }
    }
    match kind {
        "Deployment" => validate_deployment(causes, spec),
        "StatefulSet" => validate_stateful_set(causes, spec),
        "DaemonSet" => validate_daemon_set(causes, spec),
        _ => {}
    }
}

fn validate_deployment(causes: &mut Vec<Cause>, spec: &Value) {
    let strategy = field(spec, "strategy");
    let rolling = strategy.get("rollingUpdate").filter(|r| !r.is_null());
    match text(strategy, "type") {
        // Defaulted to RollingUpdate when unset.
        "" => {}
        "Recreate" => {
            if rolling.is_some() {
                causes.push(forbidden(
                    "spec.strategy.rollingUpdate",
                    "may not be specified when strategy `type` is 'Recreate'",
                ));
            }
        }
        "RollingUpdate" => {
            if let Some(rolling) = rolling {
                check_rolling_update(causes, rolling, "spec.strategy.rollingUpdate");
            }
        }
        _ => {
            let shown = go_strategy(
                "apps.DeploymentStrategy",
                "apps.RollingUpdateDeployment",
                strategy,
            );
            let message = format!(
                "Unsupported value: {shown}: supported values: \"Recreate\", \"RollingUpdate\""
            );
            causes.push(cause("FieldValueNotSupported", "spec.strategy", message));
        }
    }
    if let Some(deadline) = spec.get("progressDeadlineSeconds").and_then(Value::as_i64) {
        non_negative(causes, spec, "progressDeadlineSeconds", "spec");
        let min_ready = spec
            .get("minReadySeconds")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        if deadline <= min_ready {
            causes.push(invalid(
                "spec.progressDeadlineSeconds",
                &deadline.to_string(),
                "must be greater than minReadySeconds",
            ));
        }
    }
}

fn validate_stateful_set(causes: &mut Vec<Cause>, spec: &Value) {
    let policy = text(spec, "podManagementPolicy");
    if !policy.is_empty() && !matches!(policy, "OrderedReady" | "Parallel") {
        causes.push(invalid(
            "spec.podManagementPolicy",
            &go_quote(policy),
            "must be 'OrderedReady' or 'Parallel'",
        ));
    }
    let strategy = field(spec, "updateStrategy");
    let rolling = strategy.get("rollingUpdate").filter(|r| !r.is_null());
    match text(strategy, "type") {
        "" => {}
        "OnDelete" => {
            if rolling.is_some() {
                causes.push(invalid(
                    "spec.updateStrategy.rollingUpdate",
                    "apps.RollingUpdateStatefulSetStrategy{...}",
                    "only allowed for updateStrategy 'RollingUpdate'",
                ));
            }
        }
        "RollingUpdate" => {
            if let Some(rolling) = rolling {
                non_negative(
                    causes,
                    rolling,
                    "partition",
                    "spec.updateStrategy.rollingUpdate",
                );
            }
        }
        _ => {
            let shown = go_strategy(
                "apps.StatefulSetUpdateStrategy",
                "apps.RollingUpdateStatefulSetStrategy",
                strategy,
            );
            causes.push(invalid(
                "spec.updateStrategy",
                &shown,
                "must be 'RollingUpdate' or 'OnDelete'",
            ));
        }
    }
    let retention = field(spec, "persistentVolumeClaimRetentionPolicy");
    for name in ["whenDeleted", "whenScaled"] {
        let value = text(retention, name);
        if !value.is_empty() && !matches!(value, "Retain" | "Delete") {
            let at = format!("spec.persistentVolumeClaimRetentionPolicy.{name}");
            causes.push(not_supported(at, value, &["Retain", "Delete"]));
        }
    }
    non_negative(causes, field(spec, "ordinals"), "start", "spec.ordinals");
    for (i, claim) in super::items(spec, "volumeClaimTemplates")
        .iter()
        .enumerate()
    {
        let at = format!("spec.volumeClaimTemplates[{i}].spec");
        super::quantities::validate_claim_spec(causes, field(claim, "spec"), &at);
    }
}

fn validate_daemon_set(causes: &mut Vec<Cause>, spec: &Value) {
    let strategy = field(spec, "updateStrategy");
    match text(strategy, "type") {
        "" | "OnDelete" => {}
        "RollingUpdate" => {
            if let Some(rolling) = strategy.get("rollingUpdate").filter(|r| !r.is_null()) {
                check_rolling_update(causes, rolling, "spec.updateStrategy.rollingUpdate");
            }
        }
        _ => {
            let shown = go_strategy(
                "apps.DaemonSetUpdateStrategy",
                "apps.RollingUpdateDaemonSet",
                strategy,
            );
            let message = format!(
                "Unsupported value: {shown}: supported values: \"RollingUpdate\", \"OnDelete\""
            );
            causes.push(cause(
                "FieldValueNotSupported",
                "spec.updateStrategy",
                message,
            ));
        }
    }
}

/// A Job spec's values at `path` beyond its template.
pub(super) fn validate_job_fields(causes: &mut Vec<Cause>, spec: &Value, path: &str) {
    for name in [
        "activeDeadlineSeconds",
        "ttlSecondsAfterFinished",
        "backoffLimitPerIndex",
        "maxFailedIndexes",
    ] {
        non_negative(causes, spec, name, path);
    }
    match text(spec, "completionMode") {
        "" | "NonIndexed" => {}
        "Indexed" => {
            if spec.get("completions").is_none_or(Value::is_null) {
                causes.push(required(
                    format!("{path}.completions"),
                    "when completion mode is Indexed",
                ));
            }
        }
        other => causes.push(not_supported(
            format!("{path}.completionMode"),
            other,
            &["NonIndexed", "Indexed"],
        )),
    }
}

/// maxUnavailable and maxSurge of a Deployment's or DaemonSet's rolling
/// update: each an int or a percent, and not both 0.
fn check_rolling_update(causes: &mut Vec<Cause>, rolling: &Value, path: &str) {
    let unavailable = check_int_or_percent(causes, rolling, "maxUnavailable", path);
    let surge = check_int_or_percent(causes, rolling, "maxSurge", path);
    if rolling.get("maxUnavailable").is_some() && unavailable == 0 && surge == 0 {
        causes.push(invalid(
            format!("{path}.maxUnavailable"),
            &go_int_or_string(&rolling["maxUnavailable"]),
            "may not be 0 when `maxSurge` is 0",
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{invalid_lines, kind};
    use super::super::validate_object;
    use serde_json::{json, Value};

    fn template() -> Value {
        json!({"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "web", "image": "nginx"}]}})
    }

    fn workload(spec: Value) -> Value {
        let mut full = json!({"selector": {"matchLabels": {"app": "web"}}, "template": template()});
        for (k, v) in spec.as_object().unwrap() {
            full[k] = v.clone();
        }
        json!({"metadata": {"name": "w"}, "spec": full})
    }

    fn check(api_version: &str, kind_name: &str, table: &[(Value, &[&str])]) {
        let resource = kind(api_version, kind_name);
        for (spec, expected) in table {
            let object = workload(spec.clone());
            if expected.is_empty() {
                assert_eq!(validate_object(resource, &object), Ok(()), "{spec}");
            } else {
                assert_eq!(invalid_lines(resource, object), *expected, "{spec}");
            }
        }
    }

    #[test]
    fn deployment_values() {
        check("apps/v1", "Deployment", &[
            (json!({"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 0}},
                "minReadySeconds": 5, "progressDeadlineSeconds": 600, "revisionHistoryLimit": 0}), &[]),
            (json!({"strategy": {"type": "Sideways"}}), &[
                "spec.strategy: Unsupported value: apps.DeploymentStrategy{Type:\"Sideways\", RollingUpdate:(*apps.RollingUpdateDeployment)(nil)}: supported values: \"Recreate\", \"RollingUpdate\"",
            ]),
            (json!({"strategy": {"type": "Recreate", "rollingUpdate": {}}}), &[
                "spec.strategy.rollingUpdate: Forbidden: may not be specified when strategy `type` is 'Recreate'",
            ]),
            (json!({"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "120%", "maxSurge": "lots"}}}), &[
                "spec.strategy.rollingUpdate.maxUnavailable: Invalid value: intstr.IntOrString{Type:1, IntVal:0, StrVal:\"120%\"}: must not be greater than 100%",
                "spec.strategy.rollingUpdate.maxSurge: Invalid value: intstr.IntOrString{Type:1, IntVal:0, StrVal:\"lots\"}: a valid percent string must be a numeric string followed by an ending '%' (e.g. '1%',  or '93%', regex used for validation is '[0-9]+%')",
            ]),
            (json!({"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": "0%"}}}), &[
                "spec.strategy.rollingUpdate.maxUnavailable: Invalid value: intstr.IntOrString{Type:0, IntVal:0, StrVal:\"\"}: may not be 0 when `maxSurge` is 0",
            ]),
            (json!({"minReadySeconds": -1, "revisionHistoryLimit": -2, "progressDeadlineSeconds": -3}), &[
                "spec.minReadySeconds: Invalid value: -1: must be greater than or equal to 0",
                "spec.revisionHistoryLimit: Invalid value: -2: must be greater than or equal to 0",
                "spec.progressDeadlineSeconds: Invalid value: -3: must be greater than or equal to 0",
                "spec.progressDeadlineSeconds: Invalid value: -3: must be greater than minReadySeconds",
            ]),
            (json!({"minReadySeconds": 10, "progressDeadlineSeconds": 10}), &[
                "spec.progressDeadlineSeconds: Invalid value: 10: must be greater than minReadySeconds",
            ]),
        ]);
        let mut deadline = template();
        deadline["spec"]["activeDeadlineSeconds"] = json!(30);
        check("apps/v1", "ReplicaSet", &[
            (json!({"minReadySeconds": -1}), &["spec.minReadySeconds: Invalid value: -1: must be greater than or equal to 0"]),
            (json!({"template": deadline}), &["spec.template.spec.activeDeadlineSeconds: Forbidden: activeDeadlineSeconds in ReplicaSet is not Supported"]),
        ]);
    }

    #[test]
    fn stateful_and_daemon_set_values() {
        check("apps/v1", "StatefulSet", &[
            (json!({"podManagementPolicy": "Parallel", "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 1}}}), &[]),
            (json!({"podManagementPolicy": "AllAtOnce"}), &[
                "spec.podManagementPolicy: Invalid value: \"AllAtOnce\": must be 'OrderedReady' or 'Parallel'",
            ]),
            (json!({"updateStrategy": {"type": "Sometimes"}}), &[
                "spec.updateStrategy: Invalid value: apps.StatefulSetUpdateStrategy{Type:\"Sometimes\", RollingUpdate:(*apps.RollingUpdateStatefulSetStrategy)(nil)}: must be 'RollingUpdate' or 'OnDelete'",
            ]),
            (json!({"updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": -1}},
                "persistentVolumeClaimRetentionPolicy": {"whenDeleted": "Shred"}}), &[
                "spec.updateStrategy.rollingUpdate.partition: Invalid value: -1: must be greater than or equal to 0",
                "spec.persistentVolumeClaimRetentionPolicy.whenDeleted: Unsupported value: \"Shred\": supported values: \"Retain\", \"Delete\"",
            ]),
            (json!({"volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteOnce"]}}]}), &[
                "spec.volumeClaimTemplates[0].spec.resources[storage]: Required value",
            ]),
        ]);
        check("apps/v1", "DaemonSet", &[
            (json!({"updateStrategy": {"type": "OnDelete"}}), &[]),
            (json!({"updateStrategy": {"type": "Everywhere"}}), &[
                "spec.updateStrategy: Unsupported value: apps.DaemonSetUpdateStrategy{Type:\"Everywhere\", RollingUpdate:(*apps.RollingUpdateDaemonSet)(nil)}: supported values: \"RollingUpdate\", \"OnDelete\"",
            ]),
            (json!({"updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": -1}}}), &[
                "spec.updateStrategy.rollingUpdate.maxUnavailable: Invalid value: -1: must be greater than or equal to 0",
            ]),
        ]);
    }

    #[test]
    fn job_and_cron_job_values() {
        let mut never = template();
        never["spec"]["restartPolicy"] = json!("Never");
        let job = kind("batch/v1", "Job");
        let object = |extra: Value| {
            let mut spec = json!({"template": never.clone()});
            for (k, v) in extra.as_object().unwrap() {
                spec[k] = v.clone();
            }
            json!({"metadata": {"name": "j"}, "spec": spec})
        };
        assert_eq!(
            validate_object(
                job,
                &object(json!({"completionMode": "Indexed", "completions": 3}))
            ),
            Ok(())
        );
        assert_eq!(invalid_lines(job, object(json!({"completionMode": "Random", "activeDeadlineSeconds": -1,
            "completions": -1, "backoffLimit": -1}))), vec![
            "spec.completions: Invalid value: -1: must be greater than or equal to 0",
            "spec.backoffLimit: Invalid value: -1: must be greater than or equal to 0",
            "spec.activeDeadlineSeconds: Invalid value: -1: must be greater than or equal to 0",
            "spec.completionMode: Unsupported value: \"Random\": supported values: \"NonIndexed\", \"Indexed\"",
        ]);
        assert_eq!(
            invalid_lines(job, object(json!({"completionMode": "Indexed"}))),
            vec!["spec.completions: Required value: when completion mode is Indexed"]
        );
        let cron = kind("batch/v1", "CronJob");
        let cron_job = |extra: Value| {
            let mut spec = json!({"schedule": "* * * * *", "jobTemplate": {"spec": {"template": never.clone()}}});
            for (k, v) in extra.as_object().unwrap() {
                spec[k] = v.clone();
            }
            json!({"metadata": {"name": "c"}, "spec": spec})
        };
        assert_eq!(
            validate_object(cron, &cron_job(json!({"concurrencyPolicy": "Forbid"}))),
            Ok(())
        );
        assert_eq!(invalid_lines(cron, cron_job(json!({"concurrencyPolicy": "Sometimes", "successfulJobsHistoryLimit": -1}))), vec![
            "spec.concurrencyPolicy: Unsupported value: \"Sometimes\": supported values: \"Allow\", \"Forbid\", \"Replace\"",
            "spec.successfulJobsHistoryLimit: Invalid value: -1: must be greater than or equal to 0",
        ]);
    }
}
