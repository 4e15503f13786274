//! The values of cluster-level and small kinds: Node taints, CIDRs and
//! capacities, Namespace finalizers, PriorityClass values,
//! PodDisruptionBudget bounds and Lease durations.

use std::collections::HashSet;
use std::net::IpAddr;

use serde_json::Value;

use super::{
    cause, field, forbidden, go_quote, invalid, invalid_each, is_qualified_name,
    is_valid_label_value, items, not_supported, text, validate_label_selector,
};
use crate::status::Cause;
use skiff_machinery::quantity::Quantity;

/// A Node's taints, pod CIDRs and status quantities.
pub(super) fn validate_node(causes: &mut Vec<Cause>, object: &Value) {
    let spec = field(object, "spec");
    let mut seen: HashSet<(&str, &str)> = HashSet::new();
    for (i, taint) in items(spec, "taints").iter().enumerate() {
        // Kubernetes reports taints under `metadata`, not `spec`.
        let at = format!("metadata.taints[{i}]");
        let key = text(taint, "key");
        invalid_each(causes, &format!("{at}.key"), key, is_qualified_name(key));
        let value = text(taint, "value");
        let messages = is_valid_label_value(value);
        if !messages.is_empty() {
            causes.push(invalid(
                format!("{at}.value"),
                &go_quote(value),
                &messages.join(";"),
            ));
        }
        let effect = text(taint, "effect");
        if effect.is_empty() {
            causes.push(super::required(format!("{at}.effect"), ""));
        } else {
            super::pod::check_taint_effect(causes, effect, &format!("{at}.effect"));
        }
        if !seen.insert((key, effect)) {
            let time_added = if taint.get("timeAdded").is_some_and(|t| !t.is_null()) {
                "(*v1.Time)(...)"
            } else {
                "(*v1.Time)(nil)"
            };
            let message = format!(
                "Duplicate value: core.Taint{{Key:{}, Value:{}, Effect:{}, TimeAdded:{time_added}}}: taints must be unique by key and effect pair",
                go_quote(key),
                go_quote(value),
                go_quote(effect)
            );
            causes.push(cause("FieldValueDuplicate", at, message));
        }
    }
    for (i, cidr) in items(spec, "podCIDRs").iter().enumerate() {
        let cidr = cidr.as_str().unwrap_or_default();
        if !is_cidr(cidr) {
            let detail = "must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)";
            causes.push(invalid(
                format!("spec.podCIDRs[{i}]"),
                &go_quote(cidr),
                detail,
            ));
        }
    }
    let status = field(object, "status");
    for list in ["capacity", "allocatable"] {
        let Some(map) = status.get(list).and_then(Value::as_object) else {
            continue;
        };
        let mut names: Vec<&String> = map.keys().collect();
        names.sort();
        for name in names {
            let Some(quantity) = quantity(&map[name]) else {
                continue;
            };
            // Kubernetes joins these paths with dots, not brackets.
            let at = format!("status.{list}.{name}");
            if quantity.milli < 0 {
                let shown = go_quote(&quantity.to_string());
                causes.push(invalid(&at, &shown, super::NEGATIVE_ERR));
            }
        }
    }
}

fn quantity(value: &Value) -> Option<Quantity> {
    match value {
        Value::String(s) => Quantity::parse_strict(s.trim()).ok(),
        Value::Number(n) => Quantity::parse_strict(&n.to_string()).ok(),
        _ => None,
    }
}

fn is_cidr(text: &str) -> bool {
    let Some((address, bits)) = text.split_once('/') else {
        return false;
    };
    let Ok(address) = address.parse::<IpAddr>() else {
        return false;
    };
    let max = if address.is_ipv4() { 32 } else { 128 };
    !bits.is_empty()
        && bits.bytes().all(|b| b.is_ascii_digit())
        && bits.parse::<u32>().is_ok_and(|n| n <= max)
}

/// A Namespace's spec.finalizers: qualified names, and either standard
/// ones or prefixed.
pub(super) fn validate_namespace(causes: &mut Vec<Cause>, spec: &Value) {
    for finalizer in items(spec, "finalizers") {
        let name = finalizer.as_str().unwrap_or_default();
        invalid_each(causes, "spec.finalizers", name, is_qualified_name(name));
        let standard = matches!(name, "kubernetes" | "orphan" | "foregroundDeletion");
        if !name.contains('/') && !standard {
            let detail = "name is neither a standard finalizer name nor is it fully qualified";
            causes.push(invalid("spec.finalizers", &go_quote(name), detail));
        }
    }
}

/// The highest value a PriorityClass not named `system-…` may have.
const HIGHEST_USER_PRIORITY: i64 = 1_000_000_000;

pub(super) fn validate_priority_class(causes: &mut Vec<Cause>, object: &Value) {
    let name = text(field(object, "metadata"), "name");
    let value = object.get("value").and_then(Value::as_i64).unwrap_or(0);
    if !name.starts_with("system-") && value > HIGHEST_USER_PRIORITY {
        causes.push(forbidden(
            "value",
            &format!("maximum allowed value of a user defined priority is {HIGHEST_USER_PRIORITY}"),
        ));
    }
    let policy = text(object, "preemptionPolicy");
    if !policy.is_empty() && !matches!(policy, "PreemptLowerPriority" | "Never") {
        let allowed = &["PreemptLowerPriority", "Never"];
        causes.push(not_supported("preemptionPolicy", policy, allowed));
    }
}

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

fn check_budget(causes: &mut Vec<Cause>, spec: &Value, name: &str) {
    let Some(value) = spec.get(name).filter(|v| !v.is_null()) else {
        return;
    };
    let at = format!("spec.{name}");
    match value {
        Value::String(s) => {
            let digits = s.strip_suffix('%').unwrap_or("");
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                let detail = "a valid percent string must be a numeric string followed by an ending '%' (e.g. '1%',  or '93%', regex used for validation is '[0-9]+%')";
                causes.push(invalid(&at, &go_int_or_string(value), detail));
            } else if digits.parse::<u64>().map_or(true, |n| n > 100) {
                let detail = "must not be greater than 100%";
                causes.push(invalid(&at, &go_int_or_string(value), detail));
            }
        }
        Value::Number(n) if n.as_i64().is_some_and(|n| n < 0) => {
            let shown = n.to_string();
            causes.push(invalid(&at, &shown, super::NEGATIVE_ERR));
        }
        _ => {}
    }
}

pub(super) fn validate_pod_disruption_budget(causes: &mut Vec<Cause>, spec: &Value) {
    let set = |name: &str| spec.get(name).is_some_and(|v| !v.is_null());
    if set("minAvailable") && set("maxUnavailable") {
        // Kubernetes shows the whole spec; its pointers' addresses are not ours.
        causes.push(invalid(
            "spec",
            "policy.PodDisruptionBudgetSpec{...}",
            "minAvailable and maxUnavailable cannot be both set",
        ));
    }
    check_budget(causes, spec, "minAvailable");
    check_budget(causes, spec, "maxUnavailable");
    if let Some(selector) = spec.get("selector").filter(|s| !s.is_null()) {
        validate_label_selector(causes, selector, "spec.selector");
    }
    let policy = text(spec, "unhealthyPodEvictionPolicy");
    if !policy.is_empty() && !matches!(policy, "AlwaysAllow" | "IfHealthyBudget") {
        let at = "spec.unhealthyPodEvictionPolicy";
        causes.push(not_supported(
            at,
            policy,
            &["AlwaysAllow", "IfHealthyBudget"],
        ));
    }
}

pub(super) fn validate_lease(causes: &mut Vec<Cause>, spec: &Value) {
    if let Some(duration) = spec.get("leaseDurationSeconds").and_then(Value::as_i64) {
        if duration <= 0 {
            let at = "spec.leaseDurationSeconds";
            causes.push(invalid(at, &duration.to_string(), "must be greater than 0"));
        }
    }
    super::non_negative(causes, spec, "leaseTransitions", "spec");
}

#[cfg(test)]
mod tests {
    use super::super::tests::{invalid_lines, kind};
    use super::super::validate_object;
    use serde_json::{json, Value};

    fn check(api_version: &str, kind_name: &str, table: &[(Value, &[&str])]) {
        let resource = kind(api_version, kind_name);
        for (body, expected) in table {
            let mut object = body.clone();
            if object.get("metadata").is_none() {
                object["metadata"] = json!({"name": "x", "namespace": "default"});
            }
            if expected.is_empty() {
                assert_eq!(validate_object(resource, &object), Ok(()), "{body}");
            } else {
                assert_eq!(invalid_lines(resource, object), *expected, "{body}");
            }
        }
    }

    #[test]
    fn nodes() {
        check("v1", "Node", &[
            (json!({"spec": {"taints": [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}],
                "podCIDRs": ["10.244.0.0/24"]}, "status": {"capacity": {"cpu": "4", "pods": "110"}}}), &[]),
            (json!({"spec": {"taints": [
                {"key": "dedicated", "effect": "Sometimes"},
                {"key": "a", "value": "b"},
                {"key": "dedicated", "effect": "Sometimes"}], "podCIDRs": ["10.244.0.0"]},
                "status": {"allocatable": {"memory": "-1Gi"}}}), &[
                "metadata.taints[0].effect: Unsupported value: \"Sometimes\": supported values: \"NoSchedule\", \"PreferNoSchedule\", \"NoExecute\"",
                "metadata.taints[1].effect: Required value",
                "metadata.taints[2].effect: Unsupported value: \"Sometimes\": supported values: \"NoSchedule\", \"PreferNoSchedule\", \"NoExecute\"",
                "metadata.taints[2]: Duplicate value: core.Taint{Key:\"dedicated\", Value:\"\", Effect:\"Sometimes\", TimeAdded:(*v1.Time)(nil)}: taints must be unique by key and effect pair",
                "spec.podCIDRs[0]: Invalid value: \"10.244.0.0\": must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)",
                "status.allocatable.memory: Invalid value: \"-1Gi\": must be greater than or equal to 0",
            ]),
        ]);
    }

    #[test]
    fn namespaces_priority_classes_budgets_leases() {
        check("v1", "Namespace", &[
            (json!({"spec": {"finalizers": ["kubernetes", "example.com/cleanup"]}}), &[]),
            (json!({"spec": {"finalizers": ["cleanup"]}}), &[
                "spec.finalizers: Invalid value: \"cleanup\": name is neither a standard finalizer name nor is it fully qualified",
            ]),
        ]);
        check("scheduling.k8s.io/v1", "PriorityClass", &[
            (json!({"value": 1000}), &[]),
            (json!({"value": 2_000_000_000, "preemptionPolicy": "Always"}), &[
                "value: Forbidden: maximum allowed value of a user defined priority is 1000000000",
                "preemptionPolicy: Unsupported value: \"Always\": supported values: \"PreemptLowerPriority\", \"Never\"",
            ]),
        ]);
        check("policy/v1", "PodDisruptionBudget", &[
            (json!({"spec": {"minAvailable": "50%", "selector": {"matchLabels": {"app": "web"}}}}), &[]),
            (json!({"spec": {"minAvailable": 1, "maxUnavailable": "150%", "unhealthyPodEvictionPolicy": "Never"}}), &[
                "spec: Invalid value: policy.PodDisruptionBudgetSpec{...}: minAvailable and maxUnavailable cannot be both set",
                "spec.maxUnavailable: Invalid value: intstr.IntOrString{Type:1, IntVal:0, StrVal:\"150%\"}: must not be greater than 100%",
                "spec.unhealthyPodEvictionPolicy: Unsupported value: \"Never\": supported values: \"AlwaysAllow\", \"IfHealthyBudget\"",
            ]),
            (json!({"spec": {"minAvailable": -1}}), &[
                "spec.minAvailable: Invalid value: -1: must be greater than or equal to 0",
            ]),
        ]);
        check("coordination.k8s.io/v1", "Lease", &[
            (json!({"spec": {"holderIdentity": "a", "leaseDurationSeconds": 15}}), &[]),
            (json!({"spec": {"leaseDurationSeconds": 0, "leaseTransitions": -1}}), &[
                "spec.leaseDurationSeconds: Invalid value: 0: must be greater than 0",
                "spec.leaseTransitions: Invalid value: -1: must be greater than or equal to 0",
            ]),
        ]);
    }
}
