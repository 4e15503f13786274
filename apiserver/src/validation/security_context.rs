//! Pod and container security contexts: user and group IDs, the
//! fsGroup change policy, procMount and seccomp profiles, as
//! `validatePodSpecSecurityContext` and `ValidateSecurityContext` check
//! them.

use serde_json::Value;

use super::{field, invalid, items, not_supported, required, text};
use crate::status::Cause;

const ID_RANGE_ERR: &str = "must be between 0 and 2147483647, inclusive";

fn check_id(causes: &mut Vec<Cause>, context: &Value, name: &str, path: &str) {
    if let Some(id) = context.get(name).and_then(Value::as_i64) {
        if !(0..=i64::from(i32::MAX)).contains(&id) {
            causes.push(invalid(
                format!("{path}.{name}"),
                &id.to_string(),
                ID_RANGE_ERR,
            ));
        }
    }
}

fn check_seccomp(causes: &mut Vec<Cause>, context: &Value, path: &str) {
    let Some(profile) = context.get("seccompProfile").filter(|p| !p.is_null()) else {
        return;
    };
    let at = format!("{path}.seccompProfile");
    let kind = text(profile, "type");
    let localhost = profile.get("localhostProfile").filter(|p| !p.is_null());
    match kind {
        "" => causes.push(required(format!("{at}.type"), "")),
        "Localhost" if localhost.is_none() => causes.push(required(
            format!("{at}.localhostProfile"),
            "must be set when seccomp type is Localhost",
        )),
        "Localhost" | "RuntimeDefault" | "Unconfined" => {}
        other => causes.push(not_supported(
            format!("{at}.type"),
            other,
            &["Localhost", "RuntimeDefault", "Unconfined"],
        )),
    }
    if kind != "Localhost" && localhost.is_some() && !kind.is_empty() {
        // Kubernetes shows the profile struct; its pointer is not ours to print.
        causes.push(invalid(
            format!("{at}.localhostProfile"),
            "&core.SeccompProfile{...}",
            "can only be set when seccomp type is Localhost",
        ));
    }
}

/// The pod's `securityContext` at `path` (`spec.securityContext`).
pub(super) fn validate_pod_security_context(causes: &mut Vec<Cause>, spec: &Value, path: &str) {
    let context = field(spec, "securityContext");
    let at = format!("{path}.securityContext");
    for name in ["runAsUser", "runAsGroup", "fsGroup"] {
        check_id(causes, context, name, &at);
    }
    for (i, group) in items(context, "supplementalGroups").iter().enumerate() {
        if let Some(id) = group
            .as_i64()
            .filter(|id| !(0..=i64::from(i32::MAX)).contains(id))
        {
            let at = format!("{at}.supplementalGroups[{i}]");
            causes.push(invalid(at, &id.to_string(), ID_RANGE_ERR));
        }
    }
    let policy = text(context, "fsGroupChangePolicy");
    if !policy.is_empty() && !matches!(policy, "Always" | "OnRootMismatch") {
        let at = format!("{at}.fsGroupChangePolicy");
        causes.push(not_supported(at, policy, &["Always", "OnRootMismatch"]));
    }
    check_seccomp(causes, context, &at);
}

/// A container's `securityContext`, the container at `path`.
pub(super) fn validate_container_security_context(
    causes: &mut Vec<Cause>,
    container: &Value,
    path: &str,
) {
    let context = field(container, "securityContext");
    let at = format!("{path}.securityContext");
    for name in ["runAsUser", "runAsGroup"] {
        check_id(causes, context, name, &at);
    }
    let proc_mount = text(context, "procMount");
    if !proc_mount.is_empty() && !matches!(proc_mount, "Default" | "Unmasked") {
        let detail = &["Default", "Unmasked"];
        causes.push(not_supported(format!("{at}.procMount"), proc_mount, detail));
    }
    check_seccomp(causes, context, &at);
}

#[cfg(test)]
mod tests {
    use super::super::tests::{invalid_lines, kind, pod_with_container};
    use super::super::validate_object;
    use serde_json::json;

    #[test]
    fn security_contexts() {
        let pod = kind("v1", "Pod");
        let mut good = pod_with_container(json!({"name": "c", "image": "nginx",
            "securityContext": {"runAsUser": 1000, "procMount": "Default", "seccompProfile": {"type": "RuntimeDefault"}}}));
        good["spec"]["securityContext"] = json!({"runAsUser": 0, "fsGroup": 2000, "supplementalGroups": [3000],
            "fsGroupChangePolicy": "OnRootMismatch", "seccompProfile": {"type": "Localhost", "localhostProfile": "p.json"}});
        assert_eq!(validate_object(pod, &good), Ok(()));
        let mut bad = pod_with_container(json!({"name": "c", "image": "nginx",
            "securityContext": {"runAsGroup": -1, "procMount": "Raw", "seccompProfile": {"type": "Strict"}}}));
        bad["spec"]["securityContext"] = json!({"runAsUser": -5, "supplementalGroups": [-1],
            "fsGroupChangePolicy": "Sometimes", "seccompProfile": {"type": "Localhost"}});
        assert_eq!(invalid_lines(pod, bad), vec![
            "spec.containers[0].securityContext.runAsGroup: Invalid value: -1: must be between 0 and 2147483647, inclusive",
            "spec.containers[0].securityContext.procMount: Unsupported value: \"Raw\": supported values: \"Default\", \"Unmasked\"",
            "spec.containers[0].securityContext.seccompProfile.type: Unsupported value: \"Strict\": supported values: \"Localhost\", \"RuntimeDefault\", \"Unconfined\"",
            "spec.securityContext.runAsUser: Invalid value: -5: must be between 0 and 2147483647, inclusive",
            "spec.securityContext.supplementalGroups[0]: Invalid value: -1: must be between 0 and 2147483647, inclusive",
            "spec.securityContext.fsGroupChangePolicy: Unsupported value: \"Sometimes\": supported values: \"Always\", \"OnRootMismatch\"",
            "spec.securityContext.seccompProfile.localhostProfile: Required value: must be set when seccomp type is Localhost",
        ]);
    }
}
