//! Test objects: Jobs as the apiserver stores them (selector generated)
//! and their pods.

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::json;

use super::indexes::COMPLETION_INDEX;
use super::tracking::TRACKING_FINALIZER;
use crate::common::owners::controller_reference;

pub const NOW: Timestamp = Timestamp::constant(1_750_000_000, 0);

pub fn ago(seconds: i64) -> Timestamp {
    NOW.checked_sub(SignedDuration::from_secs(seconds)).unwrap()
}

/// A Job `name` in `default`, as defaulted and given a selector by the
/// apiserver, started a minute ago.
pub fn job(name: &str, completions: i32, parallelism: i32) -> Job {
    let uid = format!("uid-{name}");
    serde_json::from_value(json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": "default", "uid": uid, "resourceVersion": "10"},
        "spec": {
            "completions": completions, "parallelism": parallelism, "backoffLimit": 6,
            "completionMode": "NonIndexed", "suspend": false,
            "podReplacementPolicy": "TerminatingOrFailed",
            "selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}},
            "template": {
                "metadata": {"labels": {
                    "batch.kubernetes.io/controller-uid": uid, "controller-uid": uid,
                    "batch.kubernetes.io/job-name": name, "job-name": name,
                }},
                "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox"}]},
            },
        },
        "status": {"startTime": ago(60).to_string()},
    }))
    .unwrap()
}

pub struct PodBuilder(Pod);

/// A pending pod of `job` carrying the tracking finalizer.
pub fn pod(name: &str, job: &Job) -> PodBuilder {
    let mut pod: Pod = serde_json::from_value(json!({
        "metadata": {
            "name": name, "namespace": "default", "uid": format!("uid-{name}"),
            "resourceVersion": "5",
            "labels": job.spec.as_ref().unwrap().template.metadata.as_ref().unwrap().labels,
            "finalizers": [TRACKING_FINALIZER],
            "creationTimestamp": ago(30).to_string(),
        },
        "spec": {"containers": [{"name": "main", "image": "busybox"}]},
        "status": {"phase": "Pending"},
    }))
    .unwrap();
    pod.metadata.owner_references = Some(vec![controller_reference(job)]);
    PodBuilder(pod)
}

impl PodBuilder {
    pub fn build(self) -> Pod {
        self.0
    }

    pub fn phase(mut self, phase: &str) -> Self {
        self.0.status.get_or_insert_with(Default::default).phase = Some(phase.into());
        self
    }

    /// Running with Ready True.
    pub fn ready(mut self) -> Self {
        let status = self.0.status.get_or_insert_with(Default::default);
        status.phase = Some("Running".into());
        status.conditions = Some(vec![serde_json::from_value(
            json!({"type": "Ready", "status": "True"}),
        )
        .unwrap()]);
        self
    }

    /// Finished with `exit_code` (Succeeded when 0) `seconds` ago.
    pub fn exited(mut self, exit_code: i32, seconds_ago: i64) -> Self {
        let status = self.0.status.get_or_insert_with(Default::default);
        status.phase = Some(
            if exit_code == 0 {
                "Succeeded"
            } else {
                "Failed"
            }
            .into(),
        );
        status.container_statuses = Some(vec![serde_json::from_value(json!({
            "name": "main", "image": "busybox", "imageID": "", "ready": false, "restartCount": 0,
            "state": {"terminated": {"exitCode": exit_code, "finishedAt": ago(seconds_ago).to_string()}},
        }))
        .unwrap()]);
        self
    }

    pub fn condition(mut self, type_: &str) -> Self {
        let status = self.0.status.get_or_insert_with(Default::default);
        status
            .conditions
            .get_or_insert_with(Vec::new)
            .push(serde_json::from_value(json!({"type": type_, "status": "True"})).unwrap());
        self
    }

    pub fn restarts(mut self, count: i32) -> Self {
        let status = self.0.status.get_or_insert_with(Default::default);
        status.container_statuses = Some(vec![serde_json::from_value(json!({
            "name": "main", "image": "busybox", "imageID": "", "ready": true, "restartCount": count,
        }))
        .unwrap()]);
        self
    }

    pub fn index(mut self, index: i32) -> Self {
        self.0
            .metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(COMPLETION_INDEX.into(), index.to_string());
        self
    }

    pub fn terminating(mut self) -> Self {
        self.0.metadata.deletion_timestamp = Some(Time(NOW));
        self
    }

    pub fn untracked(mut self) -> Self {
        self.0.metadata.finalizers = None;
        self
    }
}
