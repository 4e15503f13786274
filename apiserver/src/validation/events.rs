//! Core v1 Events, as Kubernetes' legacy event validation judges them
//! (the stricter events.k8s.io rules apply only to that API, which is not
//! served): namespaces that agree, and for events with an `eventTime` the
//! reporting controller, instance, action and reason, bounded in length.

use serde_json::Value;

use super::{field, go_quote, invalid, invalid_each, is_qualified_name, required, text};
use crate::status::Cause;

const REPORTING_INSTANCE_MAX: usize = 128;
const ACTION_MAX: usize = 128;
const REASON_MAX: usize = 128;
const NOTE_MAX: usize = 1024;

/// Whether a MicroTime is Go's zero time: unset, null, or written as
/// `0001-01-01T00:00:00Z` with any number of zero fractional digits.
fn is_zero_time(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::String(s) => {
            let rest = s.strip_prefix("0001-01-01T00:00:00").unwrap_or("-");
            let rest = rest.strip_suffix('Z').unwrap_or("-");
            rest.is_empty()
                || rest
                    .strip_prefix('.')
                    .is_some_and(|d| d.bytes().all(|b| b == b'0'))
        }
        _ => false,
    }
}

fn at_most(causes: &mut Vec<Cause>, value: &str, max: usize, path: &str) {
    if value.len() > max {
        let detail = format!("can have at most {max} characters");
        causes.push(invalid(path, &go_quote(""), &detail));
    }
}

/// A core v1 Event.
pub(super) fn validate_event(causes: &mut Vec<Cause>, event: &Value) {
    let namespace = text(field(event, "metadata"), "namespace");
    let involved = text(field(event, "involvedObject"), "namespace");
    let mismatch = |causes: &mut Vec<Cause>| {
        let at = "involvedObject.namespace";
        causes.push(invalid(
            at,
            &go_quote(involved),
            "does not match event.namespace",
        ));
    };
    if is_zero_time(field(event, "eventTime")) {
        // An event of the old kind: the namespaces agree, or the object
        // is cluster-scoped and the event in `default`.
        let agrees = match involved {
            "" => namespace.is_empty() || namespace == "default",
            _ => namespace == involved,
        };
        if !agrees {
            mismatch(causes);
        }
        return;
    }
    if involved.is_empty() && namespace != "default" && namespace != "kube-system" {
        mismatch(causes);
    }
    // Named reportingController in Kubernetes' paths, whatever the JSON
    // name.
    let controller = text(event, "reportingComponent");
    if controller.is_empty() {
        causes.push(required("reportingController", ""));
    }
    invalid_each(
        causes,
        "reportingController",
        controller,
        is_qualified_name(controller),
    );
    let instance = text(event, "reportingInstance");
    if instance.is_empty() {
        causes.push(required("reportingInstance", ""));
    }
    at_most(
        causes,
        instance,
        REPORTING_INSTANCE_MAX,
        "reportingInstance",
    );
    let action = text(event, "action");
    if action.is_empty() {
        causes.push(required("action", ""));
    }
    at_most(causes, action, ACTION_MAX, "action");
    let reason = text(event, "reason");
    if reason.is_empty() {
        causes.push(required("reason", ""));
    }
    at_most(causes, reason, REASON_MAX, "reason");
    at_most(causes, text(event, "message"), NOTE_MAX, "message");
}

#[cfg(test)]
mod tests {
    use super::super::tests::{invalid_lines, kind};
    use super::super::validate_object;
    use serde_json::{json, Value};

    fn event(extra: Value) -> Value {
        let mut event = json!({"apiVersion": "v1", "kind": "Event",
            "metadata": {"name": "web.1", "namespace": "default"},
            "involvedObject": {"kind": "Pod", "name": "web", "namespace": "default"},
            "reason": "Started", "message": "Started container", "type": "Normal"});
        for (k, v) in extra.as_object().unwrap() {
            event[k] = v.clone();
        }
        event
    }

    const MICRO: &str = "2024-01-01T00:00:00.000000Z";

    #[test]
    fn old_style_events_need_agreeing_namespaces_only() {
        let resource = kind("v1", "Event");
        assert_eq!(validate_object(resource, &event(json!({}))), Ok(()));
        // A cluster-scoped object's event lives in default.
        let node = event(json!({"involvedObject": {"kind": "Node", "name": "n1"}}));
        assert_eq!(validate_object(resource, &node), Ok(()));
        // Unknown types and empty reasons are accepted by the legacy rules.
        let loose = event(json!({"type": "Sideways", "reason": "", "eventTime": null}));
        assert_eq!(validate_object(resource, &loose), Ok(()));
        let elsewhere =
            event(json!({"involvedObject": {"kind": "Pod", "name": "web", "namespace": "other"}}));
        assert_eq!(
            invalid_lines(resource, elsewhere),
            ["involvedObject.namespace: Invalid value: \"other\": does not match event.namespace"]
        );
        let zero = event(json!({"eventTime": "0001-01-01T00:00:00.000000Z",
            "involvedObject": {"kind": "Pod", "name": "web", "namespace": "other"}}));
        assert_eq!(invalid_lines(resource, zero).len(), 1);
    }

    #[test]
    fn new_style_events_need_their_reporter_action_and_reason() {
        let resource = kind("v1", "Event");
        let good = event(
            json!({"eventTime": MICRO, "reportingComponent": "example.com/ctrl",
            "reportingInstance": "ctrl-1", "action": "Binding"}),
        );
        assert_eq!(validate_object(resource, &good), Ok(()));
        let bare = event(json!({"eventTime": MICRO, "reason": "",
            "involvedObject": {"kind": "Node", "name": "n1"}}));
        let mut bare_other = bare.clone();
        bare_other["metadata"]["namespace"] = json!("other");
        assert_eq!(invalid_lines(resource, bare_other), [
            "involvedObject.namespace: Invalid value: \"\": does not match event.namespace",
            "reportingController: Required value",
            "reportingController: Invalid value: \"\": name part must be non-empty",
            "reportingController: Invalid value: \"\": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')",
            "reportingInstance: Required value",
            "action: Required value",
            "reason: Required value",
        ]);
        let long = event(json!({"eventTime": MICRO, "reportingComponent": "ctrl",
            "reportingInstance": "i".repeat(129), "action": "a".repeat(129),
            "reason": "r".repeat(129), "message": "m".repeat(1025)}));
        assert_eq!(
            invalid_lines(resource, long),
            [
                "reportingInstance: Invalid value: \"\": can have at most 128 characters",
                "action: Invalid value: \"\": can have at most 128 characters",
                "reason: Invalid value: \"\": can have at most 128 characters",
                "message: Invalid value: \"\": can have at most 1024 characters",
            ]
        );
    }
}
