//! apps/v1 defaults: Deployment, ReplicaSet, StatefulSet, DaemonSet.

use serde_json::{json, Value};

use super::{child, existing, pod, set};

/// `type: RollingUpdate` unless another type is asked, and the rolling
/// update's own defaults.
fn rolling_update(spec: &mut Value, field: &str, defaults: &[(&str, Value)]) {
    let Some(strategy) = child(spec, field) else {
        return;
    };
    set(strategy, "type", json!("RollingUpdate"));
    if strategy["type"] == "RollingUpdate" {
        if let Some(rolling) = child(strategy, "rollingUpdate") {
            for (name, value) in defaults {
                set(rolling, name, value.clone());
            }
        }
    }
}

fn template(spec: &mut Value) {
    if let Some(template) = existing(spec, "template") {
        pod::template(template);
    }
}

pub fn deployment(object: &mut Value) {
    let Some(spec) = child(object, "spec") else {
        return;
    };
    set(spec, "replicas", json!(1));
    rolling_update(
        spec,
        "strategy",
        &[("maxUnavailable", json!("25%")), ("maxSurge", json!("25%"))],
    );
    set(spec, "revisionHistoryLimit", json!(10));
    set(spec, "progressDeadlineSeconds", json!(600));
    template(spec);
}

pub fn replica_set(object: &mut Value) {
    let Some(spec) = child(object, "spec") else {
        return;
    };
    set(spec, "replicas", json!(1));
    template(spec);
}

pub fn stateful_set(object: &mut Value) {
    let Some(spec) = child(object, "spec") else {
        return;
    };
    set(spec, "replicas", json!(1));
    set(spec, "podManagementPolicy", json!("OrderedReady"));
    rolling_update(spec, "updateStrategy", &[("partition", json!(0))]);
    set(spec, "revisionHistoryLimit", json!(10));
    if let Some(retention) = child(spec, "persistentVolumeClaimRetentionPolicy") {
        set(retention, "whenDeleted", json!("Retain"));
        set(retention, "whenScaled", json!("Retain"));
    }
    if let Some(claims) = spec
        .get_mut("volumeClaimTemplates")
        .and_then(Value::as_array_mut)
    {
        for claim in claims {
            if let Some(claim_spec) = existing(claim, "spec") {
                set(claim_spec, "volumeMode", json!("Filesystem"));
            }
        }
    }
    template(spec);
}

pub fn daemon_set(object: &mut Value) {
    let Some(spec) = child(object, "spec") else {
        return;
    };
    rolling_update(
        spec,
        "updateStrategy",
        &[("maxUnavailable", json!(1)), ("maxSurge", json!(0))],
    );
    set(spec, "revisionHistoryLimit", json!(10));
    template(spec);
}
