//! Which writes a webhook is called for: its `rules` (operations, groups,
//! versions, resources with subresources, scope). Selectors are matched by
//! the caller, which reads namespaces.

use serde_json::Value;

use crate::admission::Attributes;

/// Whether any of `webhook.rules` matches the write.
pub fn matches(webhook: &Value, attrs: &Attributes) -> bool {
    webhook["rules"]
        .as_array()
        .is_some_and(|rules| rules.iter().any(|rule| rule_matches(rule, attrs)))
}

fn listed(rule: &Value, field: &str, value: &str) -> bool {
    rule[field]
        .as_array()
        .is_some_and(|items| items.iter().any(|i| i == "*" || i == value))
}

fn rule_matches(rule: &Value, attrs: &Attributes) -> bool {
    let resource = attrs.resource;
    listed(rule, "operations", attrs.operation.as_str())
        && listed(rule, "apiGroups", resource.group)
        && listed(rule, "apiVersions", resource.version)
        && rule["resources"].as_array().is_some_and(|items| {
            items
                .iter()
                .filter_map(Value::as_str)
                .any(|r| resource_matches(r, resource.plural, attrs.subresource.as_deref()))
        })
        && match rule["scope"].as_str().unwrap_or("*") {
            "Cluster" => !resource.namespaced,
            "Namespaced" => resource.namespaced,
            _ => true,
        }
}

/// `pods`, `pods/status`, `pods/*`, `*`, `*/status`, `*/*`.
fn resource_matches(rule: &str, plural: &str, subresource: Option<&str>) -> bool {
    let (want_resource, want_sub) = match rule.split_once('/') {
        Some((r, s)) => (r, Some(s)),
        None => (rule, None),
    };
    let resource_ok = want_resource == "*" || want_resource == plural;
    let sub_ok = match (want_sub, subresource) {
        (None, None) => true,
        (Some("*"), Some(_)) => true,
        (Some(want), Some(got)) => want == got,
        _ => false,
    };
    resource_ok && sub_ok
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::admission::tests::attrs;
    use crate::admission::Operation;

    #[test]
    fn resources_match_with_wildcards_and_subresources() {
        assert!(resource_matches("pods", "pods", None));
        assert!(!resource_matches("pods", "pods", Some("status")));
        assert!(resource_matches("pods/status", "pods", Some("status")));
        assert!(resource_matches("pods/*", "pods", Some("binding")));
        assert!(!resource_matches("pods/*", "pods", None));
        assert!(resource_matches("*", "services", None));
        assert!(!resource_matches("*", "services", Some("status")));
        assert!(resource_matches("*/*", "services", Some("status")));
        assert!(resource_matches("*/status", "pods", Some("status")));
    }

    #[test]
    fn rules_match_operation_group_version_and_scope() {
        let webhook = json!({"rules": [{"operations": ["CREATE"], "apiGroups": [""],
            "apiVersions": ["v1"], "resources": ["pods"], "scope": "Namespaced"}]});
        assert!(matches(
            &webhook,
            &attrs(Operation::Create, "pods", json!({}))
        ));
        assert!(!matches(
            &webhook,
            &attrs(Operation::Update, "pods", json!({}))
        ));
        assert!(!matches(
            &webhook,
            &attrs(Operation::Create, "configmaps", json!({}))
        ));
        let cluster = json!({"rules": [{"operations": ["*"], "apiGroups": ["*"],
            "apiVersions": ["*"], "resources": ["*"], "scope": "Cluster"}]});
        assert!(!matches(
            &cluster,
            &attrs(Operation::Create, "pods", json!({}))
        ));
        assert!(matches(
            &cluster,
            &attrs(Operation::Delete, "nodes", json!({}))
        ));
    }
}
