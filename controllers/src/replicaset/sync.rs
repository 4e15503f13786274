//! The thin part of a ReplicaSet sync: read the cached pods, ask the plan
//! what to do, and do it through the API (adopt, release, create, delete,
//! write status).

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use jiff::Timestamp;
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::Api;

use super::plan::{self, Scale};
use super::pod_control::{adopt_patch, new_pod, release_patch};
use super::status::{compute_status, is_current, status_patch, ManageFailure};
use super::{Context, Error};
use crate::common::api::{api_message, status_code};
use crate::common::events;
use crate::common::pod_control::{self, slow_start_batches};

/// `namespace/name`, the key of expectations and back-off.
pub fn key_of(rs: &ReplicaSet) -> String {
    let namespace = rs.metadata.namespace.as_deref().unwrap_or_default();
    format!(
        "{namespace}/{}",
        rs.metadata.name.as_deref().unwrap_or_default()
    )
}

/// Syncs one ReplicaSet: claims its pods, scales them to `spec.replicas`,
/// and writes its status.
pub async fn reconcile(rs: Arc<ReplicaSet>, ctx: Arc<Context>) -> Result<Action, Error> {
    let key = key_of(&rs);
    let result = sync(&rs, &ctx, &key).await;
    if result.is_ok() {
        ctx.failures.forget(&key);
    }
    result
}

async fn sync(rs: &ReplicaSet, ctx: &Context, key: &str) -> Result<Action, Error> {
    if rs.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let selector = match plan::selector(rs) {
        Ok(selector) => selector,
        Err(message) => {
            // Retrying will not fix the spec; its next change will.
            tracing::error!(replicaset = key, %message, "invalid spec.selector; fix the ReplicaSet");
            return Ok(Action::await_change());
        }
    };
    let namespace = rs.metadata.namespace.clone().unwrap_or_default();
    let pods = ctx
        .pods
        .state_filter(|p| p.metadata.namespace.as_deref() == Some(namespace.as_str()));
    let now = Timestamp::now();
    let satisfied = ctx.expectations.lock().satisfied(key, &pods, now);
    let claim = plan::claim(rs, &selector, &pods);
    let mut claimed = claim.owned;
    claimed.extend(adopt(ctx, rs, claim.adopt).await?);
    release(ctx, rs, &claim.release).await?;
    let failure = match plan::scale(rs, &claimed, satisfied) {
        Scale::Create(count) => create_pods(ctx, rs, key, count).await,
        Scale::Delete(victims) => {
            let (deleted, failure) = delete_pods(ctx, rs, key, &victims).await;
            // Pods now terminating are no longer replicas: the status says
            // so at once rather than on the next sync.
            claimed.retain(|p| {
                p.metadata
                    .uid
                    .as_ref()
                    .is_none_or(|uid| !deleted.contains(uid))
            });
            failure
        }
        Scale::Steady | Scale::AwaitingExpectations => None,
    };
    let computed = compute_status(rs, &claimed, failure.as_ref(), now);
    write_status(ctx, rs, &computed.status).await?;
    if let Some(failure) = failure {
        return Err(Error::Manage {
            key: key.to_string(),
            failure,
        });
    }
    let expectations_deadline = ctx.expectations.lock().deadline(key);
    Ok(requeue(computed.recheck_after, expectations_deadline, now))
}

/// Look again when a pod becomes available or expectations time out.
fn requeue(recheck_after: Option<Duration>, deadline: Option<Timestamp>, now: Timestamp) -> Action {
    let until_deadline =
        deadline.map(|d| Duration::try_from(d.duration_since(now)).unwrap_or_default());
    match recheck_after.into_iter().chain(until_deadline).min() {
        Some(after) => Action::requeue(after),
        None => Action::await_change(),
    }
}

/// Adopts the orphans; returns those now owned (a pod gone meanwhile is
/// skipped). The ReplicaSet is read again first: a cached one may have
/// been deleted and recreated under the same name.
async fn adopt(
    ctx: &Context,
    rs: &ReplicaSet,
    orphans: Vec<Arc<Pod>>,
) -> Result<Vec<Arc<Pod>>, Error> {
    if orphans.is_empty() {
        return Ok(orphans);
    }
    let key = key_of(rs);
    let namespace = rs.metadata.namespace.as_deref().unwrap_or_default();
    let replica_sets: Api<ReplicaSet> = Api::namespaced(ctx.client.clone(), namespace);
    let name = rs.metadata.name.as_deref().unwrap_or_default();
    let fresh = replica_sets.get(name).await.map_err(|source| Error::Api {
        key: key.clone(),
        action: "reading",
        source,
    })?;
    if fresh.metadata.uid != rs.metadata.uid || fresh.metadata.deletion_timestamp.is_some() {
        return Err(Error::CannotAdopt { key });
    }
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), namespace);
    let patches = orphans.iter().map(|pod| {
        let patch = adopt_patch(rs, pod);
        let pods = pods.clone();
        async move {
            pods.patch(
                pod_name(pod),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
        }
    });
    let mut adopted = Vec::new();
    for (pod, result) in orphans.iter().zip(join_all(patches).await) {
        match result {
            Ok(_) => adopted.push(pod.clone()),
            Err(err) if status_code(&err) == Some(404) => {}
            Err(source) => {
                return Err(Error::Api {
                    key,
                    action: "adopting a pod of",
                    source,
                })
            }
        }
    }
    Ok(adopted)
}

/// Takes the ReplicaSet's reference off pods it no longer selects.
async fn release(ctx: &Context, rs: &ReplicaSet, pods: &[Arc<Pod>]) -> Result<(), Error> {
    let namespace = rs.metadata.namespace.as_deref().unwrap_or_default();
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), namespace);
    for pod in pods {
        let patch = release_patch(rs, pod);
        match api
            .patch(
                pod_name(pod),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
        {
            Ok(_) => {}
            // Gone, or being deleted and no longer patchable: nothing to release.
            Err(err) if matches!(status_code(&err), Some(404 | 422)) => {}
            Err(source) => {
                return Err(Error::Api {
                    key: key_of(rs),
                    action: "releasing a pod of",
                    source,
                });
            }
        }
    }
    Ok(())
}

/// Creates `count` pods in slow-start batches, stopping after the first
/// batch with a failure; remembers the created ones as expectations.
async fn create_pods(
    ctx: &Context,
    rs: &ReplicaSet,
    key: &str,
    count: usize,
) -> Option<ManageFailure> {
    let Some(pod) = new_pod(rs) else {
        return Some(ManageFailure::Create(
            "spec.template is missing; set the pod template".into(),
        ));
    };
    let namespace = rs.metadata.namespace.as_deref().unwrap_or_default();
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), namespace);
    let mut created = Vec::new();
    let mut failure = None;
    let params = PostParams::default();
    for batch in slow_start_batches(count) {
        let results = join_all((0..batch).map(|_| api.create(&params, &pod))).await;
        for result in results {
            match result {
                Ok(pod) => {
                    let name = pod.metadata.name.unwrap_or_default();
                    ctx.recorder.record(events::pod_created(rs, &name));
                    created.push(name);
                }
                Err(err) => {
                    if let Some(event) = events::pod_create_failed(rs, &err) {
                        ctx.recorder.record(event);
                    }
                    failure.get_or_insert_with(|| api_message(&err));
                }
            }
        }
        if failure.is_some() {
            break;
        }
    }
    tracing::debug!(
        replicaset = key,
        created = created.len(),
        wanted = count,
        "created pods"
    );
    ctx.expectations
        .lock()
        .expect_creations(key, created, Timestamp::now());
    failure.map(ManageFailure::Create)
}

/// Deletes `victims` (all at once, each on the condition of its UID): the
/// UIDs of those now deleted or already gone, and the first failure.
async fn delete_pods(
    ctx: &Context,
    rs: &ReplicaSet,
    key: &str,
    victims: &[Arc<Pod>],
) -> (HashSet<String>, Option<ManageFailure>) {
    let failed = pod_control::delete_pods(
        &ctx.client,
        &ctx.recorder,
        rs,
        &ctx.expectations,
        key,
        victims,
        None,
    )
    .await;
    let failure = failed
        .first()
        .map(|(_, err)| ManageFailure::Delete(api_message(err)));
    let deleted = victims
        .iter()
        .filter(|pod| !failed.iter().any(|(gone, _)| Arc::ptr_eq(gone, pod)))
        .filter_map(|pod| pod.metadata.uid.clone())
        .collect();
    (deleted, failure)
}

/// Writes `status` through the status subresource unless it is current.
async fn write_status(
    ctx: &Context,
    rs: &ReplicaSet,
    status: &k8s_openapi::api::apps::v1::ReplicaSetStatus,
) -> Result<(), Error> {
    if is_current(rs.status.as_ref(), status) {
        return Ok(());
    }
    let namespace = rs.metadata.namespace.as_deref().unwrap_or_default();
    let api: Api<ReplicaSet> = Api::namespaced(ctx.client.clone(), namespace);
    let patch = status_patch(status);
    let name = rs.metadata.name.as_deref().unwrap_or_default();
    match api
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => Ok(()),
        // Deleted meanwhile: there is no status to write.
        Err(err) if status_code(&err) == Some(404) => Ok(()),
        Err(source) => Err(Error::Api {
            key: key_of(rs),
            action: "updating the status of",
            source,
        }),
    }
}

fn pod_name(pod: &Pod) -> &str {
    pod.metadata.name.as_deref().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::common::fixtures::NOW;

    #[test]
    fn requeue_at_the_earliest_of_availability_and_expectations_timeout() {
        let later = NOW
            .checked_add(jiff::SignedDuration::from_secs(300))
            .unwrap();
        let action = requeue(Some(Duration::from_secs(6)), Some(later), NOW);
        assert_eq!(action, Action::requeue(Duration::from_secs(6)));
        assert_eq!(
            requeue(None, Some(later), NOW),
            Action::requeue(Duration::from_secs(300))
        );
        assert_eq!(requeue(None, None, NOW), Action::await_change());
    }
}
