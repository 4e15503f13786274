//! Mutating and validating webhook configurations, as
//! pkg/apis/admissionregistration/validation checks v1 objects: names,
//! side effects, review versions, policies, timeouts, client configs and
//! rules.

use std::collections::HashSet;

use serde_json::Value;

use super::{
    duplicate, field, go_quote, go_string_slice, invalid, invalid_each, is_dns1035_label,
    is_dns1123_subdomain, items, not_supported, required, text, validate_label_selector,
};
use crate::status::Cause;

fn strings(value: &Value, name: &str) -> Vec<String> {
    items(value, name)
        .iter()
        .map(|v| v.as_str().unwrap_or_default().to_string())
        .collect()
}

fn check_enum(causes: &mut Vec<Cause>, hook: &Value, name: &str, at: &str, allowed: &[&str]) {
    if let Some(value) = hook.get(name).and_then(Value::as_str) {
        if !allowed.contains(&value) {
            causes.push(not_supported(format!("{at}.{name}"), value, allowed));
        }
    }
}

/// `webhooks` of a configuration; `mutating` for a
/// MutatingWebhookConfiguration.
pub(super) fn validate_webhook_configuration(
    causes: &mut Vec<Cause>,
    object: &Value,
    mutating: bool,
) {
    let mut names = HashSet::new();
    for (i, hook) in items(object, "webhooks").iter().enumerate() {
        let at = format!("webhooks[{i}]");
        validate_webhook(causes, hook, &at, mutating);
        check_review_versions(causes, hook, &format!("{at}.admissionReviewVersions"));
        let name = text(hook, "name");
        if !name.is_empty() && !names.insert(name) {
            causes.push(duplicate(format!("{at}.name"), name));
        }
    }
}

fn validate_webhook(causes: &mut Vec<Cause>, hook: &Value, at: &str, mutating: bool) {
    check_fully_qualified(causes, text(hook, "name"), &format!("{at}.name"));
    for (i, rule) in items(hook, "rules").iter().enumerate() {
        validate_rule(causes, rule, &format!("{at}.rules[{i}]"));
    }
    check_enum(causes, hook, "failurePolicy", at, &["Fail", "Ignore"]);
    check_enum(causes, hook, "matchPolicy", at, &["Equivalent", "Exact"]);
    if mutating {
        check_enum(
            causes,
            hook,
            "reinvocationPolicy",
            at,
            &["IfNeeded", "Never"],
        );
    }
    match hook.get("sideEffects").and_then(Value::as_str) {
        None => causes.push(required(
            format!("{at}.sideEffects"),
            "must specify one of None, NoneOnDryRun",
        )),
        Some("None" | "NoneOnDryRun") => {}
        Some(other) => causes.push(not_supported(
            format!("{at}.sideEffects"),
            other,
            &["None", "NoneOnDryRun"],
        )),
    }
    if let Some(timeout) = hook.get("timeoutSeconds").and_then(Value::as_i64) {
        if !(1..=30).contains(&timeout) {
            causes.push(invalid(
                format!("{at}.timeoutSeconds"),
                &timeout.to_string(),
                "the timeout value must be between 1 and 30 seconds",
            ));
        }
    }
    for name in ["namespaceSelector", "objectSelector"] {
        if let Some(selector) = hook.get(name).filter(|s| !s.is_null()) {
            validate_label_selector(causes, selector, &format!("{at}.{name}"));
        }
    }
    check_client_config(
        causes,
        field(hook, "clientConfig"),
        &format!("{at}.clientConfig"),
    );
}

/// `IsFullyQualifiedName`: a DNS subdomain of three or more labels.
fn check_fully_qualified(causes: &mut Vec<Cause>, name: &str, at: &str) {
    if name.is_empty() {
        causes.push(required(at, ""));
        return;
    }
    let messages = is_dns1123_subdomain(name);
    if !messages.is_empty() {
        causes.push(invalid(at, &go_quote(name), &messages.join(",")));
    } else if name.split('.').count() < 3 {
        let detail = "should be a domain with at least three segments separated by dots";
        causes.push(invalid(at, &go_quote(name), detail));
    }
}

fn check_review_versions(causes: &mut Vec<Cause>, hook: &Value, at: &str) {
    let versions = strings(hook, "admissionReviewVersions");
    if versions.is_empty() {
        causes.push(required(at, "must specify one of v1, v1beta1"));
        return;
    }
    let mut seen = HashSet::new();
    let mut accepted = false;
    for (i, version) in versions.iter().enumerate() {
        let path = format!("{at}[{i}]");
        if !seen.insert(version.as_str()) {
            causes.push(invalid(&path, &go_quote(version), "duplicate version"));
            continue;
        }
        invalid_each(causes, &path, version, is_dns1035_label(version));
        accepted |= matches!(version.as_str(), "v1" | "v1beta1");
    }
    if !accepted {
        let detail = "must include at least one of v1, v1beta1";
        causes.push(invalid(at, &go_string_slice(&versions), detail));
    }
}

fn check_client_config(causes: &mut Vec<Cause>, config: &Value, at: &str) {
    let url = config.get("url").and_then(Value::as_str);
    let service = config.get("service").filter(|s| !s.is_null());
    match (url, service) {
        (Some(_), Some(_)) | (None, None) => {
            causes.push(required(at, "exactly one of url or service is required"))
        }
        (Some(url), None) => check_url(causes, url, &format!("{at}.url")),
        (None, Some(service)) => {
            let path = format!("{at}.service");
            if text(service, "name").is_empty() {
                causes.push(required(format!("{path}.name"), "service name is required"));
            }
            if text(service, "namespace").is_empty() {
                let detail = "service namespace is required";
                causes.push(required(format!("{path}.namespace"), detail));
            }
            if let Some(port) = service.get("port").and_then(Value::as_i64) {
                if !(1..=65535).contains(&port) {
                    let detail = "port is not valid: must be between 1 and 65535, inclusive";
                    causes.push(invalid(format!("{path}.port"), &port.to_string(), detail));
                }
            }
            let service_path = text(service, "path");
            if !service_path.is_empty() && !service_path.starts_with('/') {
                let detail = "must start with a '/'";
                causes.push(invalid(
                    format!("{path}.path"),
                    &go_quote(service_path),
                    detail,
                ));
            }
        }
    }
}

/// `ValidateWebhookURL`'s host check. Kubernetes also requires the
/// `https` scheme; skiff calls plain `http` webhooks too (its process tests
/// serve them so), so the scheme is not judged here.
fn check_url(causes: &mut Vec<Cause>, url: &str, at: &str) {
    const FORM: &str = "; desired format: https://host[/path]";
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let host = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host = host.rsplit_once('@').map_or(host, |(_, host)| host);
    if host.is_empty() {
        let detail = format!("host must be specified{FORM}");
        causes.push(invalid(at, &go_quote(""), &detail));
    }
}

/// A rule's operations, groups, versions, resources and scope.
fn validate_rule(causes: &mut Vec<Cause>, rule: &Value, at: &str) {
    const OPERATIONS: &[&str] = &["*", "CONNECT", "CREATE", "DELETE", "UPDATE"];
    let operations = strings(rule, "operations");
    if operations.is_empty() {
        causes.push(required(format!("{at}.operations"), ""));
    }
    if operations.len() > 1 && operations.iter().any(|o| o == "*") {
        let detail = "if '*' is present, must not specify other operations";
        let quoted: Vec<String> = operations.iter().map(|o| go_quote(o)).collect();
        let shown = format!(
            "[]admissionregistration.OperationType{{{}}}",
            quoted.join(", ")
        );
        causes.push(invalid(format!("{at}.operations"), &shown, detail));
    }
    for (i, operation) in operations.iter().enumerate() {
        if !OPERATIONS.contains(&operation.as_str()) {
            causes.push(not_supported(
                format!("{at}.operations[{i}]"),
                operation,
                OPERATIONS,
            ));
        }
    }
    for name in ["apiGroups", "apiVersions", "resources"] {
        if items(rule, name).is_empty() {
            causes.push(required(format!("{at}.{name}"), ""));
        }
    }
    check_enum(causes, rule, "scope", at, &["*", "Cluster", "Namespaced"]);
}

#[cfg(test)]
mod tests {
    use super::super::tests::{invalid_lines, kind};
    use super::super::validate_object;
    use serde_json::{json, Value};

    fn configuration(hook: Value) -> Value {
        let mut full = json!({"name": "check.example.com", "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
            "clientConfig": {"service": {"name": "hook", "namespace": "default", "path": "/validate"}},
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}]});
        for (k, v) in hook.as_object().unwrap() {
            if v.is_null() {
                full.as_object_mut().unwrap().remove(k);
            } else {
                full[k] = v.clone();
            }
        }
        json!({"metadata": {"name": "hooks"}, "webhooks": [full]})
    }

    #[test]
    fn webhook_configurations() {
        let validating = kind(
            "admissionregistration.k8s.io/v1",
            "ValidatingWebhookConfiguration",
        );
        assert_eq!(
            validate_object(validating, &configuration(json!({}))),
            Ok(())
        );
        let table: &[(Value, &[&str])] = &[
            (json!({"name": "check", "sideEffects": null, "admissionReviewVersions": ["v2"]}), &[
                "webhooks[0].name: Invalid value: \"check\": should be a domain with at least three segments separated by dots",
                "webhooks[0].sideEffects: Required value: must specify one of None, NoneOnDryRun",
                "webhooks[0].admissionReviewVersions: Invalid value: []string{\"v2\"}: must include at least one of v1, v1beta1",
            ]),
            (json!({"failurePolicy": "Retry", "sideEffects": "Some", "timeoutSeconds": 60,
                "clientConfig": {"url": "https:///validate"}}), &[
                "webhooks[0].failurePolicy: Unsupported value: \"Retry\": supported values: \"Fail\", \"Ignore\"",
                "webhooks[0].sideEffects: Unsupported value: \"Some\": supported values: \"None\", \"NoneOnDryRun\"",
                "webhooks[0].timeoutSeconds: Invalid value: 60: the timeout value must be between 1 and 30 seconds",
                "webhooks[0].clientConfig.url: Invalid value: \"\": host must be specified; desired format: https://host[/path]",
            ]),
            (json!({"clientConfig": {}, "rules": [{"operations": ["*", "PATCH"], "scope": "Everywhere"}]}), &[
                "webhooks[0].rules[0].operations: Invalid value: []admissionregistration.OperationType{\"*\", \"PATCH\"}: if '*' is present, must not specify other operations",
                "webhooks[0].rules[0].operations[1]: Unsupported value: \"PATCH\": supported values: \"*\", \"CONNECT\", \"CREATE\", \"DELETE\", \"UPDATE\"",
                "webhooks[0].rules[0].apiGroups: Required value",
                "webhooks[0].rules[0].apiVersions: Required value",
                "webhooks[0].rules[0].resources: Required value",
                "webhooks[0].rules[0].scope: Unsupported value: \"Everywhere\": supported values: \"*\", \"Cluster\", \"Namespaced\"",
                "webhooks[0].clientConfig: Required value: exactly one of url or service is required",
            ]),
        ];
        for (hook, expected) in table {
            assert_eq!(
                invalid_lines(validating, configuration(hook.clone())),
                *expected,
                "{hook}"
            );
        }
        let mutating = kind(
            "admissionregistration.k8s.io/v1",
            "MutatingWebhookConfiguration",
        );
        assert_eq!(
            invalid_lines(mutating, configuration(json!({"reinvocationPolicy": "Always"}))),
            vec!["webhooks[0].reinvocationPolicy: Unsupported value: \"Always\": supported values: \"IfNeeded\", \"Never\""]
        );
    }
}
