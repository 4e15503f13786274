//! batch/v1 defaults: Job and CronJob, and a Job's generated selector.

use serde_json::{json, Value};

use super::{child, existing, pod, set};

pub fn job(object: &mut Value) {
    let Some(spec) = child(object, "spec") else {
        return;
    };
    if spec["completions"].is_null() && spec["parallelism"].is_null() {
        spec["completions"] = json!(1);
    }
    set(spec, "parallelism", json!(1));
    set(spec, "backoffLimit", json!(6));
    set(spec, "completionMode", json!("NonIndexed"));
    set(spec, "suspend", json!(false));
    let replacement = match spec.get("podFailurePolicy").is_some_and(|p| !p.is_null()) {
        true => "Failed",
        false => "TerminatingOrFailed",
    };
    set(spec, "podReplacementPolicy", json!(replacement));
    if let Some(template) = existing(spec, "template") {
        pod::template(template);
    }
}

pub fn cron_job(object: &mut Value) {
    let Some(spec) = child(object, "spec") else {
        return;
    };
    set(spec, "concurrencyPolicy", json!("Allow"));
    set(spec, "suspend", json!(false));
    set(spec, "successfulJobsHistoryLimit", json!(3));
    set(spec, "failedJobsHistoryLimit", json!(1));
    if let Some(template) = spec.pointer_mut("/jobTemplate/spec/template") {
        pod::template(template);
    }
}

/// Unless `manualSelector` is true, a new Job selects its pods by its uid:
/// the labels go on the pod template and the selector matches them.
pub fn generate_selector(object: &mut Value) {
    if object["spec"]["manualSelector"] == json!(true) {
        return;
    }
    let uid = object["metadata"]["uid"].as_str().unwrap_or("").to_string();
    let name = object["metadata"]["name"]
        .as_str()
        .unwrap_or("")
        .to_string();
    if uid.is_empty() {
        return;
    }
    let Some(spec) = existing(object, "spec") else {
        return;
    };
    if let Some(labels) = existing(spec, "template")
        .and_then(|t| child(t, "metadata"))
        .and_then(|m| child(m, "labels"))
    {
        for (key, value) in [
            ("batch.kubernetes.io/controller-uid", &uid),
            ("batch.kubernetes.io/job-name", &name),
            ("controller-uid", &uid),
            ("job-name", &name),
        ] {
            set(labels, key, json!(value));
        }
    }
    if let Some(labels) = child(spec, "selector").and_then(|s| child(s, "matchLabels")) {
        set(labels, "batch.kubernetes.io/controller-uid", json!(uid));
    }
}
