//! The thin part of the Deployment controller: watches Deployments and the
//! ReplicaSets they own, reads the namespace's ReplicaSets fresh from the
//! API right before planning (so a stale cache never creates twice), and
//! performs the plan's writes.

use std::sync::Arc;

use futures::StreamExt;
use jiff::Timestamp;
use k8s_openapi::api::apps::v1::{Deployment, DeploymentStatus, ReplicaSet};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::controller::{trigger_owners, trigger_self, Action, Config};
use kube::runtime::WatchStreamExt;
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use skiff_machinery::events::Recorder;

use super::events;
use super::plan::{plan, Plan, ReplicaSetWrite};
use super::{revision, PlanError};
use crate::backoff::Failures;
use crate::common::informers::Informers;
use crate::common::workqueue;

/// The source of its events, as kube-controller-manager names it.
pub const COMPONENT: &str = "deployment-controller";

#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    #[error(transparent)]
    Plan(#[from] PlanError),
    #[error("deployment API request failed: {0}")]
    Api(#[from] kube::Error),
    #[error("creating new ReplicaSet {0:?}: {1}")]
    Create(String, #[source] kube::Error),
    #[error("Deployment {0:?} has no namespace")]
    NoNamespace(String),
    #[error("ReplicaSet {0:?} already exists with another template; collisionCount raised, retrying with a new name")]
    HashCollision(String),
}

struct Context {
    client: Client,
    /// Events as `deployment-controller`.
    recorder: Recorder,
    /// Consecutive failed syncs per Deployment (namespace/name), for back-off.
    failures: Failures,
}

/// Runs the Deployment controller until its task is aborted.
pub async fn run(informers: Arc<Informers>) {
    let client = informers.client();
    let deployments = informers.all::<Deployment>().await;
    let replica_sets = informers.all::<ReplicaSet>().await;
    let context = Arc::new(Context {
        recorder: Recorder::new(client.clone(), COMPONENT, None),
        client,
        failures: Failures::default(),
    });
    let queue = futures::stream::select(
        trigger_self(deployments.events.touched_objects(), ()),
        trigger_owners::<Deployment, _>(replica_sets.events.touched_objects(), (), ()),
    );
    workqueue::applier(
        informers.workqueue("deployment"),
        |d, ctx| Box::pin(reconcile(d, ctx)),
        error_policy,
        context,
        deployments.store,
        queue,
        Config::default(),
    )
    .for_each(|result| async move {
        if let Err(err) = result {
            tracing::debug!(error = %err, "deployment sync failed; retrying with back-off");
        }
    })
    .await;
}

fn key(d: &Deployment) -> String {
    format!("{}/{}", d.namespace().unwrap_or_default(), d.name_any())
}

async fn reconcile(d: Arc<Deployment>, ctx: Arc<Context>) -> Result<Action, SyncError> {
    let namespace = d
        .namespace()
        .ok_or_else(|| SyncError::NoNamespace(d.name_any()))?;
    let replica_sets: Api<ReplicaSet> = Api::namespaced(ctx.client.clone(), &namespace);
    let listed = replica_sets.list(&ListParams::default()).await?.items;
    // Conditions carry whole seconds, as the API serializes them.
    let now =
        Timestamp::from_second(Timestamp::now().as_second()).unwrap_or_else(|_| Timestamp::now());
    let plan = plan(&d, &listed, now)?;
    let requeue_after = plan.requeue_after;
    perform(&ctx, &d, &namespace, &listed, plan).await?;
    ctx.failures.forget(&key(&d));
    Ok(match requeue_after {
        Some(after) => Action::requeue(after),
        None => Action::await_change(),
    })
}

fn error_policy(d: Arc<Deployment>, err: &SyncError, ctx: Arc<Context>) -> Action {
    let delay = ctx.failures.delay(&key(&d));
    tracing::debug!(deployment = %key(&d), error = %err, ?delay, "requeueing deployment");
    Action::requeue(delay)
}

/// ReplicaSets first, then the status (conditional on the Deployment's
/// resourceVersion), then the revision annotation.
async fn perform(
    ctx: &Context,
    d: &Deployment,
    namespace: &str,
    listed: &[ReplicaSet],
    plan: Plan,
) -> Result<(), SyncError> {
    let client = &ctx.client;
    let replica_sets: Api<ReplicaSet> = Api::namespaced(client.clone(), namespace);
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    for write in plan.replica_sets {
        let before = match &write {
            ReplicaSetWrite::Update(rs) => listed.iter().find(|l| l.name_any() == rs.name_any()),
            _ => None,
        };
        let scaled = events::replica_set_written(d, &write, before);
        let result = write_replica_set(&replica_sets, &deployments, d, write).await;
        match &result {
            Ok(()) => scaled.into_iter().for_each(|e| ctx.recorder.record(e)),
            Err(SyncError::Create(name, err)) => {
                let failed = events::replica_set_create_failed(d, name, err);
                failed.into_iter().for_each(|e| ctx.recorder.record(e));
            }
            Err(_) => {}
        }
        result?;
    }
    if let Some(status) = plan.status {
        write_status(&deployments, d, status).await?;
    }
    if let Some(revision) = plan.revision {
        let patch = json!({"metadata": {"annotations": {revision::REVISION: revision}}});
        deployments
            .patch(
                &d.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await?;
    }
    Ok(())
}

async fn write_replica_set(
    replica_sets: &Api<ReplicaSet>,
    deployments: &Api<Deployment>,
    d: &Deployment,
    write: ReplicaSetWrite,
) -> Result<(), SyncError> {
    match write {
        ReplicaSetWrite::Create(rs) => match replica_sets.create(&PostParams::default(), &rs).await
        {
            Ok(created) => {
                tracing::info!(deployment = %key(d), replica_set = %created.name_any(), "created new ReplicaSet");
                Ok(())
            }
            Err(kube::Error::Api(status)) if status.is_already_exists() => {
                raise_collision_count(deployments, d).await?;
                Err(SyncError::HashCollision(rs.name_any()))
            }
            Err(err) => Err(SyncError::Create(rs.name_any(), err)),
        },
        ReplicaSetWrite::Update(rs) => {
            replica_sets
                .replace(&rs.name_any(), &PostParams::default(), &rs)
                .await?;
            Ok(())
        }
        ReplicaSetWrite::Delete {
            name,
            resource_version,
        } => {
            let params = DeleteParams {
                preconditions: Some(Preconditions {
                    resource_version,
                    uid: None,
                }),
                ..DeleteParams::default()
            };
            match replica_sets.delete(&name, &params).await {
                Err(kube::Error::Api(status)) if status.is_not_found() => Ok(()),
                Err(err) => Err(err.into()),
                Ok(_) => {
                    tracing::info!(deployment = %key(d), replica_set = %name, "deleted old ReplicaSet beyond revisionHistoryLimit");
                    Ok(())
                }
            }
        }
    }
}

async fn write_status(
    deployments: &Api<Deployment>,
    d: &Deployment,
    status: DeploymentStatus,
) -> Result<(), SyncError> {
    let mut updated = d.clone();
    updated.status = Some(status);
    deployments
        .replace_status(&d.name_any(), &PostParams::default(), &updated)
        .await?;
    Ok(())
}

/// The new ReplicaSet's name is taken by another template: the next name
/// comes from a higher `status.collisionCount`.
async fn raise_collision_count(
    deployments: &Api<Deployment>,
    d: &Deployment,
) -> Result<(), SyncError> {
    let count = d
        .status
        .as_ref()
        .and_then(|s| s.collision_count)
        .unwrap_or(0);
    let patch = json!({
        "metadata": {"resourceVersion": d.resource_version()},
        "status": {"collisionCount": count.saturating_add(1)},
    });
    deployments
        .patch_status(
            &d.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await?;
    Ok(())
}
