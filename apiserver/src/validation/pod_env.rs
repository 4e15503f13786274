//! A container's environment: where each variable's value comes from
//! (`valueFrom`) and the sources `envFrom` imports, as `ValidateEnv` and
//! `ValidateEnvFrom` check them. Names themselves are pod.rs's.

use serde_json::Value;

use super::{go_quote, invalid, invalid_each, is_config_map_key, items, required, text};
use crate::status::Cause;

/// The pod fields a variable may read through `fieldRef`, sorted as
/// Kubernetes lists them.
const FIELD_PATHS: &[&str] = &[
    "metadata.name",
    "metadata.namespace",
    "metadata.uid",
    "spec.nodeName",
    "spec.serviceAccountName",
    "status.hostIP",
    "status.hostIPs",
    "status.podIP",
    "status.podIPs",
];

/// The container resources a variable may read through `resourceFieldRef`.
const RESOURCE_FIELDS: &[&str] = &[
    "limits.cpu",
    "limits.ephemeral-storage",
    "limits.memory",
    "requests.cpu",
    "requests.ephemeral-storage",
    "requests.memory",
];

fn present(parent: &Value, name: &str) -> bool {
    parent.get(name).is_some_and(|v| !v.is_null())
}

/// `env[*].valueFrom` and `envFrom` of the container at `path`.
pub(super) fn validate_env_sources(causes: &mut Vec<Cause>, container: &Value, path: &str) {
    for (i, env) in items(container, "env").iter().enumerate() {
        let Some(from) = env.get("valueFrom").filter(|v| !v.is_null()) else {
            continue;
        };
        let at = format!("{path}.env[{i}].valueFrom");
        let sources = [
            "fieldRef",
            "resourceFieldRef",
            "configMapKeyRef",
            "secretKeyRef",
        ];
        let count = sources.iter().filter(|s| present(from, s)).count();
        if let Some(selector) = from.get("fieldRef").filter(|v| !v.is_null()) {
            check_field_ref(causes, selector, &format!("{at}.fieldRef"));
        }
        if let Some(selector) = from.get("resourceFieldRef").filter(|v| !v.is_null()) {
            check_resource_field_ref(causes, selector, &format!("{at}.resourceFieldRef"));
        }
        for name in ["configMapKeyRef", "secretKeyRef"] {
            if let Some(selector) = from.get(name).filter(|v| !v.is_null()) {
                check_key_selector(causes, selector, &format!("{at}.{name}"));
            }
        }
        let quoted_empty = go_quote("");
        if count == 0 {
            let detail = "must specify one of: `fieldRef`, `resourceFieldRef`, `configMapKeyRef` or `secretKeyRef`";
            causes.push(invalid(&at, &quoted_empty, detail));
        } else if !text(env, "value").is_empty() {
            let detail = "may not be specified when `value` is not empty";
            causes.push(invalid(&at, &quoted_empty, detail));
        } else if count > 1 {
            let detail = "may not have more than one field specified at a time";
            causes.push(invalid(&at, &quoted_empty, detail));
        }
    }
    let env_from_path = format!("{path}.envFrom");
    for (i, source) in items(container, "envFrom").iter().enumerate() {
        let at = format!("{env_from_path}[{i}]");
        let count = ["configMapRef", "secretRef"]
            .iter()
            .filter(|s| present(source, s))
            .count();
        for name in ["configMapRef", "secretRef"] {
            if let Some(reference) = source.get(name).filter(|v| !v.is_null()) {
                let name_path = format!("{at}.{name}.name");
                let referenced = text(reference, "name");
                if referenced.is_empty() {
                    causes.push(required(name_path, ""));
                }
            }
        }
        // Kubernetes reports these two at `envFrom`, not at the item.
        let quoted_empty = go_quote("");
        if count == 0 {
            let detail = "must specify one of: `configMapRef` or `secretRef`";
            causes.push(invalid(&env_from_path, &quoted_empty, detail));
        } else if count > 1 {
            let detail = "may not have more than one field specified at a time";
            causes.push(invalid(&env_from_path, &quoted_empty, detail));
        }
    }
}

fn check_field_ref(causes: &mut Vec<Cause>, selector: &Value, at: &str) {
    let path = text(selector, "fieldPath");
    if path.is_empty() {
        causes.push(required(format!("{at}.fieldPath"), ""));
        return;
    }
    // `metadata.labels['key']` and `metadata.annotations['key']` name one entry.
    if let Some((base, rest)) = path.split_once("['") {
        let key = rest.strip_suffix("']").unwrap_or(rest);
        match base {
            "metadata.labels" => invalid_each(causes, at, key, super::is_qualified_name(key)),
            "metadata.annotations" => {
                let lower = key.to_ascii_lowercase();
                invalid_each(causes, at, &lower, super::is_qualified_name(&lower))
            }
            other => causes.push(invalid(at, &go_quote(other), "does not support subscript")),
        }
        return;
    }
    if !FIELD_PATHS.contains(&path) {
        let at = format!("{at}.fieldPath");
        causes.push(super::not_supported(at, path, FIELD_PATHS));
    }
}

fn check_resource_field_ref(causes: &mut Vec<Cause>, selector: &Value, at: &str) {
    let resource = text(selector, "resource");
    if resource.is_empty() {
        causes.push(required(format!("{at}.resource"), ""));
    } else if !RESOURCE_FIELDS.contains(&resource)
        && !resource.starts_with("requests.hugepages-")
        && !resource.starts_with("limits.hugepages-")
    {
        let at = format!("{at}.resource");
        causes.push(super::not_supported(at, resource, RESOURCE_FIELDS));
    }
}

fn check_key_selector(causes: &mut Vec<Cause>, selector: &Value, at: &str) {
    let name = text(selector, "name");
    invalid_each(
        causes,
        &format!("{at}.name"),
        name,
        super::is_dns1123_subdomain(name),
    );
    let key = text(selector, "key");
    if key.is_empty() {
        causes.push(required(format!("{at}.key"), ""));
    } else {
        invalid_each(causes, &format!("{at}.key"), key, is_config_map_key(key));
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{invalid_lines, kind, pod_with_container};
    use super::super::validate_object;
    use serde_json::{json, Value};

    #[test]
    fn env_sources() {
        let pod = kind("v1", "Pod");
        let with = |extra: Value| {
            let mut container = json!({"name": "c", "image": "nginx"});
            for (k, v) in extra.as_object().unwrap() {
                container[k] = v.clone();
            }
            pod_with_container(container)
        };
        let good = with(json!({"env": [
            {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
            {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
            {"name": "CPU", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu"}}},
            {"name": "PASS", "valueFrom": {"secretKeyRef": {"name": "db", "key": "password"}}}],
            "envFrom": [{"configMapRef": {"name": "settings"}, "prefix": "CFG_"}]}));
        assert_eq!(validate_object(pod, &good), Ok(()));
        let table: &[(Value, &[&str])] = &[
            (json!({"env": [{"name": "A", "valueFrom": {}}]}), &[
                "spec.containers[0].env[0].valueFrom: Invalid value: \"\": must specify one of: `fieldRef`, `resourceFieldRef`, `configMapKeyRef` or `secretKeyRef`",
            ]),
            (json!({"env": [{"name": "A", "value": "x", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}}]}), &[
                "spec.containers[0].env[0].valueFrom: Invalid value: \"\": may not be specified when `value` is not empty",
            ]),
            (json!({"env": [{"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "spec.hostname"}}}]}), &[
                "spec.containers[0].env[0].valueFrom.fieldRef.fieldPath: Unsupported value: \"spec.hostname\": supported values: \"metadata.name\", \"metadata.namespace\", \"metadata.uid\", \"spec.nodeName\", \"spec.serviceAccountName\", \"status.hostIP\", \"status.hostIPs\", \"status.podIP\", \"status.podIPs\"",
            ]),
            (json!({"env": [{"name": "A", "valueFrom": {"secretKeyRef": {"name": "db"}, "resourceFieldRef": {"resource": "limits.gpu"}}}]}), &[
                "spec.containers[0].env[0].valueFrom.resourceFieldRef.resource: Unsupported value: \"limits.gpu\": supported values: \"limits.cpu\", \"limits.ephemeral-storage\", \"limits.memory\", \"requests.cpu\", \"requests.ephemeral-storage\", \"requests.memory\"",
                "spec.containers[0].env[0].valueFrom.secretKeyRef.key: Required value",
                "spec.containers[0].env[0].valueFrom: Invalid value: \"\": may not have more than one field specified at a time",
            ]),
            (json!({"envFrom": [{"prefix": "X_"}, {"configMapRef": {"name": "a"}, "secretRef": {"name": "b"}}]}), &[
                "spec.containers[0].envFrom: Invalid value: \"\": must specify one of: `configMapRef` or `secretRef`",
                "spec.containers[0].envFrom: Invalid value: \"\": may not have more than one field specified at a time",
            ]),
        ];
        for (extra, expected) in table {
            assert_eq!(
                invalid_lines(pod, with(extra.clone())),
                *expected,
                "{extra}"
            );
        }
    }
}
