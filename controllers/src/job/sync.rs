//! The thin, effectful part of a Job sync: reads the caches, plans, and
//! does the plan through the API (status, finalizers, pods).

use std::collections::HashSet;
use std::sync::Arc;

use futures::future::join_all;
use jiff::Timestamp;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::Api;

use super::conditions::is_finished;
use super::events;
use super::plan::{plan, Input};
use super::pod_template::new_pod;
use super::tracking::{has_finalizer, remove_finalizer_patch};
use super::{api_message, status_code, Context, Error};
use crate::common::events as common_events;
use crate::common::pod_control::{self, slow_start_batches};
use crate::common::pods::controller_ref;

pub async fn sync(job: &Job, ctx: &Context, key: &str) -> Result<Action, Error> {
    let pods = pods_of(ctx, job);
    if job.metadata.deletion_timestamp.is_some() || is_finished(job) {
        // Nothing more to count: let every pod go.
        let tracked: Vec<_> = pods.into_iter().filter(|p| has_finalizer(p)).collect();
        remove_finalizers(ctx, key, &tracked).await?;
        return Ok(Action::await_change());
    }
    if job
        .spec
        .as_ref()
        .and_then(|s| s.selector.as_ref())
        .is_none()
    {
        // Retrying will not fix the spec; its next change will.
        tracing::error!(
            job = key,
            "spec.selector is missing; set it or leave manualSelector unset"
        );
        return Ok(Action::await_change());
    }
    let now = Timestamp::now();
    let satisfied = ctx.expectations.lock().satisfied(key, &pods, now);
    let removing = ctx
        .removing_finalizers
        .lock()
        .get(key)
        .cloned()
        .unwrap_or_default();
    let backoff = ctx.backoff.lock().get(key).copied().unwrap_or_default();
    let plan = plan(&Input {
        job,
        pods: &pods,
        removing_finalizers: &removing,
        expectations_satisfied: satisfied,
        backoff,
        now,
    });
    let mut job = job.clone();
    if plan.uncounted_grew {
        let mut status = job.status.clone().unwrap_or_default();
        status.uncounted_terminated_pods = Some(plan.uncounted.clone());
        job.status = Some(status);
        job = write_status(ctx, &job, key).await?;
    }
    ctx.backoff.lock().insert(key.to_string(), plan.backoff);
    remove_finalizers(ctx, key, &plan.remove_finalizers).await?;
    let deleted = delete_pods(ctx, &job, key, &plan.delete).await;
    let created = create_pods(ctx, &job, key, &plan.create).await;
    if job.status.as_ref() != Some(&plan.status) {
        let changed = events::status_changed(&job, &plan.status);
        job.status = Some(plan.status.clone());
        write_status(ctx, &job, key).await?;
        changed.into_iter().for_each(|e| ctx.recorder.record(e));
    }
    if let Some(message) = deleted.or(created) {
        return Err(Error::Manage {
            key: key.to_string(),
            message,
        });
    }
    let expectations = ctx
        .expectations
        .lock()
        .deadline(key)
        .map(|d| std::time::Duration::try_from(d.duration_since(now)).unwrap_or_default());
    Ok(
        match plan.requeue_after.into_iter().chain(expectations).min() {
            Some(after) => Action::requeue(after),
            None => Action::await_change(),
        },
    )
}

/// The cached pods the Job controls and selects.
fn pods_of(ctx: &Context, job: &Job) -> Vec<Arc<Pod>> {
    let namespace = job.metadata.namespace.as_deref();
    let uid = job.metadata.uid.as_deref();
    let selector = job
        .spec
        .as_ref()
        .and_then(|s| s.selector.as_ref())
        .and_then(|s| serde_json::to_value(s).ok())
        .and_then(|v| skiff_machinery::selectors::LabelSelector::from_json(&v).ok());
    ctx.pods.state_filter(|pod| {
        let labels = pod.metadata.labels.as_ref();
        pod.metadata.namespace.as_deref() == namespace
            && controller_ref(pod).is_some_and(|o| Some(o.uid.as_str()) == uid)
            && selector.as_ref().is_some_and(|s| {
                s.matches_by(|k| labels.and_then(|l| l.get(k)).map(String::as_str))
            })
    })
}

/// Replaces the status with the Job's resourceVersion: a stale Job is a
/// conflict, so counts are never computed from an old status.
async fn write_status(ctx: &Context, job: &Job, key: &str) -> Result<Job, Error> {
    let api: Api<Job> = Api::namespaced(
        ctx.client.clone(),
        job.metadata.namespace.as_deref().unwrap_or_default(),
    );
    let name = job.metadata.name.as_deref().unwrap_or_default();
    api.replace_status(name, &PostParams::default(), job)
        .await
        .map_err(|source| Error::Api {
            key: key.to_string(),
            action: "updating the status of",
            source,
        })
}

/// Removes the tracking finalizer from `pods`, remembering each until
/// the pod cache shows it gone.
pub async fn remove_finalizers(ctx: &Context, key: &str, pods: &[Arc<Pod>]) -> Result<(), Error> {
    if pods.is_empty() {
        return Ok(());
    }
    let uids: HashSet<String> = pods.iter().filter_map(|p| p.metadata.uid.clone()).collect();
    ctx.removing_finalizers
        .lock()
        .entry(key.to_string())
        .or_default()
        .extend(uids);
    let patches = pods.iter().filter_map(|pod| {
        let patch = remove_finalizer_patch(pod)?;
        let api: Api<Pod> = Api::namespaced(
            ctx.client.clone(),
            pod.metadata.namespace.as_deref().unwrap_or_default(),
        );
        let name = pod.metadata.name.clone().unwrap_or_default();
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        Some(async move {
            let result = api
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map(drop);
            (uid, result)
        })
    });
    let mut failure = None;
    for (uid, result) in join_all(patches).await {
        match result {
            Ok(()) => {}
            // Gone already: nothing to let go.
            Err(err) if matches!(status_code(&err), Some(404)) => {}
            Err(source) => {
                if let Some(uids) = ctx.removing_finalizers.lock().get_mut(key) {
                    uids.remove(&uid);
                }
                failure.get_or_insert(Error::Api {
                    key: key.to_string(),
                    action: "removing the tracking finalizer of a pod of",
                    source,
                });
            }
        }
    }
    failure.map_or(Ok(()), Err)
}

/// Deletes `pods` (each on the condition of its UID); the first failure.
async fn delete_pods(ctx: &Context, job: &Job, key: &str, pods: &[Arc<Pod>]) -> Option<String> {
    let failed = pod_control::delete_pods(
        &ctx.client,
        &ctx.recorder,
        job,
        &ctx.expectations,
        key,
        pods,
        None,
    )
    .await;
    failed.first().map(|(_, err)| api_message(err))
}

/// Creates one pod per entry of `create`, in slow-start batches.
async fn create_pods(
    ctx: &Context,
    job: &Job,
    key: &str,
    create: &[Option<i32>],
) -> Option<String> {
    if create.is_empty() {
        return None;
    }
    let api: Api<Pod> = Api::namespaced(
        ctx.client.clone(),
        job.metadata.namespace.as_deref().unwrap_or_default(),
    );
    let params = PostParams::default();
    let mut created = Vec::new();
    let mut failure = None;
    let mut remaining = create;
    for batch in slow_start_batches(create.len()) {
        let (now, later) = remaining.split_at(batch);
        remaining = later;
        let pods = now.iter().map(|index| new_pod(job, *index));
        let results = join_all(pods.map(|pod| {
            let api = api.clone();
            let params = params.clone();
            async move {
                match pod {
                    Some(pod) => api.create(&params, &pod).await.map_err(|e| {
                        let event = common_events::pod_create_failed(job, &e);
                        (api_message(&e), event)
                    }),
                    None => Err((
                        "spec.template.spec is missing; set the pod template".into(),
                        None,
                    )),
                }
            }
        }))
        .await;
        for result in results {
            match result {
                Ok(pod) => {
                    let name = pod.metadata.name.unwrap_or_default();
                    ctx.recorder.record(common_events::pod_created(job, &name));
                    created.push(name);
                }
                Err((message, event)) => {
                    event.into_iter().for_each(|e| ctx.recorder.record(e));
                    failure.get_or_insert(message);
                }
            }
        }
        if failure.is_some() {
            break;
        }
    }
    tracing::debug!(
        job = key,
        created = created.len(),
        wanted = create.len(),
        "created pods"
    );
    ctx.expectations
        .lock()
        .expect_creations(key, created, Timestamp::now());
    failure
}
