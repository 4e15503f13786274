//! Counting finished pods exactly once. A Job's pods carry the
//! `batch.kubernetes.io/job-tracking` finalizer, so a finished pod cannot
//! vanish before it is counted. A sync first records the UIDs of newly
//! finished pods in `status.uncountedTerminatedPods` (written with the
//! Job's resourceVersion), then removes their finalizers, then moves the
//! UIDs into `succeeded`/`failed`: a crash between steps repeats a step
//! and never counts a pod twice or not at all.

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;

use crate::common::pods::phase;

/// The finalizer that keeps a Job's pod until the Job has counted it.
pub const TRACKING_FINALIZER: &str = "batch.kubernetes.io/job-tracking";

/// The pod still carries the job-tracking finalizer.
pub fn has_finalizer(pod: &Pod) -> bool {
    pod.metadata
        .finalizers
        .as_ref()
        .is_some_and(|f| f.iter().any(|f| f == TRACKING_FINALIZER))
}

/// Counts as failed: phase Failed, or (unless the Job only replaces
/// Failed pods) being deleted without having succeeded, so that pods
/// removed before they could finish count as failures (kube's
/// `isPodFailed`).
pub fn is_failed(pod: &Pod, job: &Job) -> bool {
    if phase(pod) == "Failed" {
        return true;
    }
    let spec = job.spec.as_ref();
    let only_failed = spec.and_then(|s| s.pod_failure_policy.as_ref()).is_some()
        || spec.and_then(|s| s.pod_replacement_policy.as_deref()) == Some("Failed");
    !only_failed && pod.metadata.deletion_timestamp.is_some() && phase(pod) != "Succeeded"
}

/// Being deleted and not yet stopped (kube's terminating pods).
pub fn is_terminating(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_some() && !matches!(phase(pod), "Succeeded" | "Failed")
}

/// A merge patch removing the finalizer from `pod`, on the condition
/// that the pod is still as the cache saw it (else a 409 Conflict).
pub fn remove_finalizer_patch(pod: &Pod) -> Option<serde_json::Value> {
    let finalizers = pod.metadata.finalizers.as_ref()?;
    if !finalizers.iter().any(|f| f == TRACKING_FINALIZER) {
        return None;
    }
    let rest: Vec<&String> = finalizers
        .iter()
        .filter(|f| *f != TRACKING_FINALIZER)
        .collect();
    Some(serde_json::json!({
        "metadata": {"finalizers": rest, "resourceVersion": pod.metadata.resource_version},
    }))
}

/// When a finished pod finished: the latest container termination, if
/// any is known.
pub fn finish_time(pod: &Pod) -> Option<jiff::Timestamp> {
    let status = pod.status.as_ref()?;
    status
        .container_statuses
        .iter()
        .flatten()
        .filter_map(|c| c.state.as_ref()?.terminated.as_ref()?.finished_at.as_ref())
        .map(|t| t.0)
        .max()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::fixtures::{job, pod};

    #[test]
    fn deleted_pods_count_as_failed_unless_only_failed_pods_are_replaced() {
        let j = job("pi", 1, 1);
        assert!(is_failed(&pod("a", &j).phase("Failed").build(), &j));
        assert!(!is_failed(&pod("a", &j).phase("Running").build(), &j));
        assert!(is_failed(
            &pod("a", &j).phase("Running").terminating().build(),
            &j
        ));
        assert!(!is_failed(
            &pod("a", &j).phase("Succeeded").terminating().build(),
            &j
        ));
        let mut only_failed = j.clone();
        only_failed.spec.as_mut().unwrap().pod_replacement_policy = Some("Failed".into());
        assert!(!is_failed(
            &pod("a", &j).phase("Running").terminating().build(),
            &only_failed
        ));
    }

    #[test]
    fn the_finalizer_is_removed_from_the_pod_as_cached() {
        let j = job("pi", 1, 1);
        let mut p = pod("a", &j).build();
        p.metadata.finalizers = Some(vec!["other".into(), TRACKING_FINALIZER.into()]);
        let patch = remove_finalizer_patch(&p).unwrap();
        assert_eq!(
            patch,
            serde_json::json!({"metadata": {"finalizers": ["other"], "resourceVersion": "5"}})
        );
        p.metadata.finalizers = None;
        assert!(remove_finalizer_patch(&p).is_none());
        assert!(!has_finalizer(&p));
    }
}
