//! The thin, effectful part of a CronJob sync: reads the Job cache,
//! plans, and does the plan through the API.

use std::sync::Arc;

use jiff::tz::TimeZone;
use jiff::Timestamp;
use k8s_openapi::api::batch::v1::{CronJob, Job};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams, PropagationPolicy};
use kube::runtime::controller::Action;
use kube::Api;
use serde_json::json;

use super::events;
use super::plan::plan;
use super::{Context, Error};
use crate::common::events::namespace_terminating;

pub async fn sync(cj: &CronJob, ctx: &Context, key: &str) -> Result<Action, Error> {
    let namespace = cj.metadata.namespace.as_deref().unwrap_or_default();
    let jobs = jobs_of(ctx, cj).await;
    let mut plan = plan(cj, &jobs, &TimeZone::system(), Timestamp::now());
    for event in &plan.events {
        tracing::info!(cronjob = key, reason = event.reason, message = %event.message, "CronJob event");
        ctx.recorder.record(events::planned(cj, event));
    }
    let api: Api<Job> = Api::namespaced(ctx.client.clone(), namespace);
    for job in plan.delete_active.iter().chain(&plan.prune) {
        delete_job(ctx, cj, &api, job, key).await?;
    }
    if let Some(job) = &plan.create {
        let name = job.metadata.name.as_deref().unwrap_or_default();
        match api.create(&PostParams::default(), job).await {
            Ok(created) => {
                // The active entry gets the new Job's uid.
                let entry = plan
                    .status
                    .active
                    .iter_mut()
                    .flatten()
                    .find(|r| r.name.as_deref() == Some(name));
                if let Some(entry) = entry {
                    entry.uid = created.metadata.uid.clone();
                    entry.resource_version = created.metadata.resource_version.clone();
                }
                ctx.recorder.record(events::created_job(cj, name));
            }
            // Created by an earlier sync whose status write was lost.
            Err(kube::Error::Api(status)) if status.code == 409 => {}
            Err(source) => {
                if !namespace_terminating(&source) {
                    ctx.recorder.record(events::create_job_failed(cj, &source));
                }
                return Err(Error::Api {
                    key: key.into(),
                    action: "creating a Job of",
                    source,
                });
            }
        }
    }
    if cj.status.as_ref() != Some(&plan.status) {
        let cron_jobs: Api<CronJob> = Api::namespaced(ctx.client.clone(), namespace);
        let patch = json!({"status": {
            "active": plan.status.active,
            "lastScheduleTime": plan.status.last_schedule_time,
            "lastSuccessfulTime": plan.status.last_successful_time,
        }});
        let name = cj.metadata.name.as_deref().unwrap_or_default();
        match cron_jobs
            .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => events::active_jobs_left(cj, &jobs, &plan.status)
                .into_iter()
                .for_each(|e| ctx.recorder.record(e)),
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(source) => {
                return Err(Error::Api {
                    key: key.into(),
                    action: "updating the status of",
                    source,
                })
            }
        }
    }
    Ok(match plan.requeue_after {
        Some(after) => Action::requeue(after),
        None => Action::await_change(),
    })
}

/// The Jobs the CronJob controls: the cache's, plus those in its active
/// list the cache does not show yet (read from the API).
async fn jobs_of(ctx: &Context, cj: &CronJob) -> Vec<Arc<Job>> {
    let uid = cj.metadata.uid.as_deref();
    let namespace = cj.metadata.namespace.as_deref();
    let mut jobs = ctx.jobs.state_filter(|job| {
        job.metadata.namespace.as_deref() == namespace
            && job
                .metadata
                .owner_references
                .iter()
                .flatten()
                .any(|o| o.controller == Some(true) && Some(o.uid.as_str()) == uid)
    });
    let active = cj.status.as_ref().and_then(|s| s.active.as_ref());
    let api: Api<Job> = Api::namespaced(ctx.client.clone(), namespace.unwrap_or_default());
    for reference in active.into_iter().flatten() {
        let Some(name) = reference.name.as_deref() else {
            continue;
        };
        if jobs
            .iter()
            .any(|j| j.metadata.name.as_deref() == Some(name))
        {
            continue;
        }
        if let Ok(Some(job)) = api.get_opt(name).await {
            if reference.uid.is_none() || job.metadata.uid == reference.uid {
                jobs.push(Arc::new(job));
            }
        }
    }
    jobs
}

/// Deletes a Job with background propagation (its pods follow).
async fn delete_job(
    ctx: &Context,
    cj: &CronJob,
    api: &Api<Job>,
    job: &Job,
    key: &str,
) -> Result<(), Error> {
    let params = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Background),
        ..DeleteParams::default()
    };
    let name = job.metadata.name.as_deref().unwrap_or_default();
    match api.delete(name, &params).await {
        Ok(_) => {
            ctx.recorder.record(events::deleted_job(cj, name));
            Ok(())
        }
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(source) => {
            ctx.recorder.record(events::delete_job_failed(cj, &source));
            Err(Error::Api {
                key: key.into(),
                action: "deleting a Job of",
                source,
            })
        }
    }
}
