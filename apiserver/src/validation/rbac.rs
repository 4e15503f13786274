//! Roles, ClusterRoles and their bindings, as pkg/apis/rbac/validation
//! checks them. Kubernetes defaults an empty roleRef.apiGroup, and a User
//! or Group subject's empty apiGroup, to rbac.authorization.k8s.io before
//! validating; an empty one is read as that default here.

use serde_json::Value;

use super::{
    field, go_string_slice, invalid, invalid_each, is_dns1123_subdomain, items, not_supported,
    path_segment_messages, required, text, validate_label_selector,
};
use crate::status::Cause;

const GROUP: &str = "rbac.authorization.k8s.io";

fn strings(value: &Value, name: &str) -> Vec<String> {
    items(value, name)
        .iter()
        .map(|v| v.as_str().unwrap_or_default().to_string())
        .collect()
}

/// A Role's or ClusterRole's rules (and a ClusterRole's aggregation).
pub(super) fn validate_role(causes: &mut Vec<Cause>, object: &Value, namespaced: bool) {
    for (i, rule) in items(object, "rules").iter().enumerate() {
        validate_rule(causes, rule, namespaced, &format!("rules[{i}]"));
    }
    if let Some(aggregation) = object.get("aggregationRule").filter(|a| !a.is_null()) {
        let path = "aggregationRule.clusterRoleSelectors";
        let selectors = items(aggregation, "clusterRoleSelectors");
        if selectors.is_empty() {
            causes.push(required(
                path,
                "at least one clusterRoleSelector required if aggregationRule is non-nil",
            ));
        }
        for (i, selector) in selectors.iter().enumerate() {
            validate_label_selector(causes, selector, &format!("{path}[{i}]"));
        }
    }
}

fn validate_rule(causes: &mut Vec<Cause>, rule: &Value, namespaced: bool, path: &str) {
    if items(rule, "verbs").is_empty() {
        causes.push(required(
            format!("{path}.verbs"),
            "verbs must contain at least one value",
        ));
    }
    let urls = strings(rule, "nonResourceURLs");
    if !urls.is_empty() {
        let at = format!("{path}.nonResourceURLs");
        if namespaced {
            let detail = "namespaced rules cannot apply to non-resource URLs";
            causes.push(invalid(&at, &go_string_slice(&urls), detail));
        }
        let resourceful = ["apiGroups", "resources", "resourceNames"]
            .iter()
            .any(|name| !items(rule, name).is_empty());
        if resourceful {
            let detail = "rules cannot apply to both regular resources and non-resource URLs";
            causes.push(invalid(&at, &go_string_slice(&urls), detail));
        }
        return;
    }
    if items(rule, "apiGroups").is_empty() {
        causes.push(required(
            format!("{path}.apiGroups"),
            "resource rules must supply at least one api group",
        ));
    }
    if items(rule, "resources").is_empty() {
        causes.push(required(
            format!("{path}.resources"),
            "resource rules must supply at least one resource",
        ));
    }
}

/// A RoleBinding (`namespaced`) or ClusterRoleBinding: its roleRef and
/// subjects.
pub(super) fn validate_binding(causes: &mut Vec<Cause>, object: &Value, namespaced: bool) {
    let role_ref = field(object, "roleRef");
    let group = text(role_ref, "apiGroup");
    if !group.is_empty() && group != GROUP {
        causes.push(not_supported("roleRef.apiGroup", group, &[GROUP]));
    }
    let kind = text(role_ref, "kind");
    let kinds: &[&str] = if namespaced {
        &["Role", "ClusterRole"]
    } else {
        &["ClusterRole"]
    };
    if !kinds.contains(&kind) {
        causes.push(not_supported("roleRef.kind", kind, kinds));
    }
    let name = text(role_ref, "name");
    if name.is_empty() {
        causes.push(required("roleRef.name", ""));
    } else {
        invalid_each(causes, "roleRef.name", name, path_segment_messages(name));
    }
    for (i, subject) in items(object, "subjects").iter().enumerate() {
        validate_subject(causes, subject, namespaced, &format!("subjects[{i}]"));
    }
}

fn validate_subject(causes: &mut Vec<Cause>, subject: &Value, namespaced: bool, path: &str) {
    let name = text(subject, "name");
    if name.is_empty() {
        causes.push(required(format!("{path}.name"), ""));
    }
    let group = text(subject, "apiGroup");
    match text(subject, "kind") {
        "ServiceAccount" => {
            if !name.is_empty() {
                let at = format!("{path}.name");
                invalid_each(causes, &at, name, is_dns1123_subdomain(name));
            }
            if !group.is_empty() {
                causes.push(not_supported(format!("{path}.apiGroup"), group, &[""]));
            }
            if !namespaced && text(subject, "namespace").is_empty() {
                causes.push(required(format!("{path}.namespace"), ""));
            }
        }
        "User" | "Group" => {
            if !group.is_empty() && group != GROUP {
                causes.push(not_supported(format!("{path}.apiGroup"), group, &[GROUP]));
            }
        }
        other => causes.push(not_supported(
            format!("{path}.kind"),
            other,
            &["ServiceAccount", "User", "Group"],
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{invalid_lines, kind};
    use super::super::validate_object;
    use serde_json::{json, Value};

    fn check(kind_name: &str, table: &[(Value, &[&str])]) {
        let resource = kind("rbac.authorization.k8s.io/v1", kind_name);
        for (body, expected) in table {
            let mut object = body.clone();
            object["metadata"] = json!({"name": "r", "namespace": "default"});
            if expected.is_empty() {
                assert_eq!(validate_object(resource, &object), Ok(()), "{body}");
            } else {
                assert_eq!(invalid_lines(resource, object), *expected, "{body}");
            }
        }
    }

    #[test]
    fn role_rules() {
        check("Role", &[
            (json!({"rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]}), &[]),
            (json!({"rules": [{"apiGroups": [""], "resources": ["pods"]}]}), &[
                "rules[0].verbs: Required value: verbs must contain at least one value",
            ]),
            (json!({"rules": [{"resources": ["pods"], "verbs": ["get"]}, {"verbs": ["get"], "nonResourceURLs": ["/healthz"]}]}), &[
                "rules[0].apiGroups: Required value: resource rules must supply at least one api group",
                "rules[1].nonResourceURLs: Invalid value: []string{\"/healthz\"}: namespaced rules cannot apply to non-resource URLs",
            ]),
        ]);
        check("ClusterRole", &[
            (json!({"rules": [{"verbs": ["get"], "nonResourceURLs": ["/healthz"]}]}), &[]),
            (json!({"rules": [{"verbs": ["get"], "nonResourceURLs": ["/metrics"], "resources": ["pods"]}]}), &[
                "rules[0].nonResourceURLs: Invalid value: []string{\"/metrics\"}: rules cannot apply to both regular resources and non-resource URLs",
            ]),
            (json!({"aggregationRule": {"clusterRoleSelectors": []}}), &[
                "aggregationRule.clusterRoleSelectors: Required value: at least one clusterRoleSelector required if aggregationRule is non-nil",
            ]),
        ]);
    }

    /// The default roles and bindings the server creates at start pass.
    #[test]
    fn bootstrap_policy_is_valid() {
        for object in crate::authz::bootstrap::objects() {
            let api_version = object["apiVersion"].as_str().unwrap_or_default();
            let resource = kind(api_version, object["kind"].as_str().unwrap_or_default());
            assert_eq!(validate_object(resource, object), Ok(()), "{object}");
        }
        assert!(crate::authz::bootstrap::objects().len() > 10);
    }

    #[test]
    fn bindings() {
        let role_ref =
            json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "reader"});
        check("RoleBinding", &[
            (json!({"roleRef": role_ref, "subjects": [
                {"kind": "ServiceAccount", "name": "default"},
                {"kind": "User", "name": "jane"},
                {"kind": "Group", "name": "devs", "apiGroup": "rbac.authorization.k8s.io"}]}), &[]),
            (json!({}), &[
                "roleRef.kind: Unsupported value: \"\": supported values: \"Role\", \"ClusterRole\"",
                "roleRef.name: Required value",
            ]),
            (json!({"roleRef": {"apiGroup": "example.com", "kind": "Policy", "name": "a/b"}}), &[
                "roleRef.apiGroup: Unsupported value: \"example.com\": supported values: \"rbac.authorization.k8s.io\"",
                "roleRef.kind: Unsupported value: \"Policy\": supported values: \"Role\", \"ClusterRole\"",
                "roleRef.name: Invalid value: \"a/b\": may not contain '/'",
            ]),
            (json!({"roleRef": role_ref, "subjects": [
                {"kind": "Alien", "name": "zork"},
                {"kind": "ServiceAccount", "name": "Bad_Name", "apiGroup": "v1"},
                {"kind": "User", "name": "", "apiGroup": "example.com"}]}), &[
                "subjects[0].kind: Unsupported value: \"Alien\": supported values: \"ServiceAccount\", \"User\", \"Group\"",
                "subjects[1].name: Invalid value: \"Bad_Name\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
                "subjects[1].apiGroup: Unsupported value: \"v1\": supported values: \"\"",
                "subjects[2].name: Required value",
                "subjects[2].apiGroup: Unsupported value: \"example.com\": supported values: \"rbac.authorization.k8s.io\"",
            ]),
        ]);
        check("ClusterRoleBinding", &[
            (json!({"roleRef": {"kind": "ClusterRole", "name": "view"},
                "subjects": [{"kind": "ServiceAccount", "name": "builder", "namespace": "ci"}]}), &[]),
            (json!({"roleRef": role_ref, "subjects": [{"kind": "ServiceAccount", "name": "builder"}]}), &[
                "roleRef.kind: Unsupported value: \"Role\": supported values: \"ClusterRole\"",
                "subjects[0].namespace: Required value",
            ]),
        ]);
    }
}
