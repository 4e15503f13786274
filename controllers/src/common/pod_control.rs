//! The pod writes the workload controllers share (kube-controller-manager's
//! `controller_utils`): creates in slow-start batches, and deletes on the
//! condition of the pod's UID, kept in the controller's expectations, each
//! recorded as an event on the pods' owner.

use std::sync::Arc;

use futures::future::join_all;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, Preconditions};
use kube::{Api, Resource};
use parking_lot::Mutex;
use skiff_machinery::events::Recorder;

use super::api::status_code;
use super::events::{pod_delete_failed, pod_deleted};
use crate::common::expectations::Expectations;

/// The first batch of a slow-start create (`SlowStartInitialBatchSize`).
pub const SLOW_START_INITIAL_BATCH_SIZE: usize = 1;

/// Batch sizes of a slow-start create of `count` pods: 1, 2, 4, … until
/// `count` is reached, so that a create that keeps failing fails once
/// rather than `count` times.
pub fn slow_start_batches(count: usize) -> Vec<usize> {
    let mut batches = Vec::new();
    let mut remaining = count;
    let mut size = SLOW_START_INITIAL_BATCH_SIZE.min(remaining);
    while size > 0 {
        batches.push(size);
        remaining -= size;
        size = (2 * size).min(remaining);
    }
    batches
}

/// Deletes `pods` for the controller's object `key`, each on the condition
/// of its UID (a pod replaced under the same name is left alone), with
/// `grace_period_seconds` when given. The deletions are expected first and
/// each failed one forgotten again; what failed, other than a pod already
/// gone, is returned with its error. Each deletion, or its failure, is
/// recorded on `owner` through `recorder`.
pub async fn delete_pods<K>(
    client: &kube::Client,
    recorder: &Recorder,
    owner: &K,
    expectations: &Mutex<Expectations>,
    key: &str,
    pods: &[Arc<Pod>],
    grace_period_seconds: Option<u32>,
) -> Vec<(Arc<Pod>, kube::Error)>
where
    K: Resource<DynamicType = ()>,
{
    let uids = pods.iter().filter_map(|p| p.metadata.uid.clone());
    expectations
        .lock()
        .expect_deletions(key, uids, Timestamp::now());
    let deletes = pods.iter().map(|pod| {
        let api: Api<Pod> = Api::namespaced(
            client.clone(),
            pod.metadata.namespace.as_deref().unwrap_or_default(),
        );
        let params = DeleteParams {
            grace_period_seconds,
            preconditions: Some(Preconditions {
                uid: pod.metadata.uid.clone(),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        let name = pod.metadata.name.clone().unwrap_or_default();
        async move { api.delete(&name, &params).await }
    });
    let mut failed = Vec::new();
    for (pod, result) in pods.iter().zip(join_all(deletes).await) {
        let Err(err) = result else {
            let name = pod.metadata.name.as_deref().unwrap_or_default();
            recorder.record(pod_deleted(owner, name));
            continue;
        };
        expectations
            .lock()
            .deletion_failed(key, pod.metadata.uid.as_deref().unwrap_or_default());
        if status_code(&err) != Some(404) {
            recorder.record(pod_delete_failed(owner, &err));
            failed.push((pod.clone(), err));
        }
    }
    failed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slow_start_doubles_up_to_what_is_missing() {
        assert_eq!(slow_start_batches(0), Vec::<usize>::new());
        assert_eq!(slow_start_batches(1), [1]);
        assert_eq!(slow_start_batches(3), [1, 2]);
        assert_eq!(slow_start_batches(10), [1, 2, 4, 3]);
        assert_eq!(slow_start_batches(500), [1, 2, 4, 8, 16, 32, 64, 128, 245]);
    }
}
