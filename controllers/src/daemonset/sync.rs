//! The thin part of a DaemonSet sync: make sure the template's
//! ControllerRevision exists, read the cached nodes and pods, ask the plan
//! what to do, do it through the API, prune history and write status.

use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use jiff::Timestamp;
use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet, DaemonSetStatus};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::Api;
use serde_json::json;

use super::plan::{self, Inputs, Plan};
use super::pod_control::new_pod;
use super::status::{compute_status, is_current, status_patch};
use super::{controlled_pods, events, key_of, Context, Error};
use crate::common::api::{api_message, status_code};
use crate::common::events as common_events;
use crate::common::owners::controller_reference;
use crate::common::pod_control::{self, slow_start_batches};
use crate::history::{self, HistoryError, Owner};

/// Syncs one DaemonSet.
pub async fn reconcile(ds: Arc<DaemonSet>, ctx: Arc<Context>) -> Result<Action, Error> {
    let key = key_of(&ds);
    let result = sync(&ds, &ctx, &key).await;
    if result.is_ok() {
        ctx.failures.forget(&key);
    }
    result
}

async fn sync(ds: &DaemonSet, ctx: &Context, key: &str) -> Result<Action, Error> {
    if ds.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let Some(spec) = ds.spec.as_ref() else {
        return Ok(Action::await_change());
    };
    let selector = match super::selector(ds) {
        Ok(selector) => selector,
        Err(message) => {
            tracing::error!(daemonset = key, %message, "invalid spec.selector; fix the DaemonSet");
            return Ok(Action::await_change());
        }
    };
    let namespace = ds.metadata.namespace.clone().unwrap_or_default();
    let revisions_api: Api<ControllerRevision> = Api::namespaced(ctx.client.clone(), &namespace);
    let (revision, history) = current_revision(ctx, ds, &revisions_api, key).await?;
    let hash = history::hash_of(&revision).to_string();

    let nodes = ctx.nodes.state();
    let pods = controlled_pods(&ctx.pods, ds.metadata.uid.as_deref(), &namespace, &selector);
    let now = Timestamp::now();
    let satisfied = ctx.expectations.lock().satisfied(key, &pods, now);
    let backoff = |node: &str| ctx.backoff_remaining(key, node, now);
    let inputs = Inputs {
        ds,
        nodes: &nodes,
        pods: &pods,
        hash: &hash,
        now,
        backoff: &backoff,
    };
    let plan = satisfied.then(|| {
        let plan = plan::manage(&inputs);
        match plan.is_empty() && plan::is_rolling_update(ds) {
            true => Plan {
                requeue_after: plan.requeue_after,
                ..plan::rolling_update(&inputs)
            },
            false => plan,
        }
    });
    let requeue = plan.as_ref().and_then(|p| p.requeue_after);
    if let Some(plan) = plan {
        perform(ctx, ds, key, &spec.template, &hash, plan).await?;
    }
    prune_history(ds, &revisions_api, &history, &revision, &pods).await?;
    let (status, recheck) = compute_status(ds, &nodes, &pods, &hash, now);
    write_status(ctx, ds, &status).await?;
    let deadline = ctx
        .expectations
        .lock()
        .deadline(key)
        .map(|d| Duration::try_from(d.duration_since(now)).unwrap_or_default());
    Ok(
        match [requeue, recheck, deadline].into_iter().flatten().min() {
            Some(after) => Action::requeue(after),
            None => Action::await_change(),
        },
    )
}

/// The revision of the current template, created or renumbered if need
/// be, and every revision the DaemonSet owns (oldest first). A name taken
/// by another template raises `status.collisionCount`.
async fn current_revision(
    ctx: &Context,
    ds: &DaemonSet,
    api: &Api<ControllerRevision>,
    key: &str,
) -> Result<(ControllerRevision, Vec<ControllerRevision>), Error> {
    let api_error = |source| Error::Api {
        key: key.to_string(),
        action: "listing the ControllerRevisions of",
        source,
    };
    let listed = api.list(&ListParams::default()).await.map_err(api_error)?;
    let uid = ds.metadata.uid.as_deref().unwrap_or_default();
    let existing = history::owned(listed.items, uid);
    let spec = ds
        .spec
        .as_ref()
        .ok_or_else(|| Error::NoSpec(key.to_string()))?;
    let template = &spec.template;
    let collision_count = ds.status.as_ref().and_then(|s| s.collision_count);
    let owner = Owner {
        name: ds.metadata.name.as_deref().unwrap_or_default(),
        namespace: ds.metadata.namespace.as_deref().unwrap_or_default(),
        reference: controller_reference(ds),
        labels: template
            .metadata
            .as_ref()
            .and_then(|m| m.labels.clone())
            .unwrap_or_default(),
    };
    let wanted = history::new_revision(
        &owner,
        template,
        history::next_number(&existing),
        collision_count,
    );
    match history::apply(api, history::decide(&existing, wanted)).await {
        Ok(revision) => {
            let mut all: Vec<ControllerRevision> = existing
                .into_iter()
                .filter(|r| r.metadata.name != revision.metadata.name)
                .collect();
            all.push(revision.clone());
            Ok((revision, all))
        }
        Err(HistoryError::Collision { name }) => {
            let next = collision_count.unwrap_or(0).saturating_add(1);
            let patch = json!({"status": {"collisionCount": next}});
            let daemon_sets: Api<DaemonSet> = Api::namespaced(ctx.client.clone(), owner.namespace);
            daemon_sets
                .patch_status(owner.name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map_err(|source| Error::Api {
                    key: key.to_string(),
                    action: "raising the collisionCount of",
                    source,
                })?;
            Err(Error::History {
                key: key.to_string(),
                source: HistoryError::Collision { name },
            })
        }
        Err(source) => Err(Error::History {
            key: key.to_string(),
            source,
        }),
    }
}

/// Creates and deletes what `plan` says; the first failure is returned
/// after the rest is done.
async fn perform(
    ctx: &Context,
    ds: &DaemonSet,
    key: &str,
    template: &k8s_openapi::api::core::v1::PodTemplateSpec,
    hash: &str,
    plan: Plan,
) -> Result<(), Error> {
    let now = Timestamp::now();
    for node in &plan.failed_on {
        ctx.record_failed_pod(key, node, now);
        let failed = plan.delete.iter().find(|pod| {
            let on = pod.spec.as_ref().and_then(|s| s.node_name.as_deref());
            let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
            on == Some(node.as_str()) && phase == Some("Failed")
        });
        if let Some(pod) = failed {
            ctx.recorder
                .record(events::failed_daemon_pod(ds, pod, node));
        }
    }
    if !plan.create_on.is_empty() || !plan.delete.is_empty() || !plan.force_delete.is_empty() {
        tracing::debug!(
            daemonset = key,
            create = plan.create_on.len(),
            delete = plan.delete.len() + plan.force_delete.len(),
            "syncing daemon pods"
        );
    }
    let mut failure = delete_pods(ctx, ds, key, &plan.delete, false).await;
    if let Some(forced) = delete_pods(ctx, ds, key, &plan.force_delete, true).await {
        failure.get_or_insert(forced);
    }
    if let Some(created) = create_pods(ctx, ds, key, template, hash, &plan.create_on).await {
        failure.get_or_insert(created);
    }
    match failure {
        Some(message) => Err(Error::Manage {
            key: key.to_string(),
            message,
        }),
        None => Ok(()),
    }
}

/// Creates the pods for `nodes` in slow-start batches, stopping after a
/// batch with a failure; the created ones become expectations.
async fn create_pods(
    ctx: &Context,
    ds: &DaemonSet,
    key: &str,
    template: &k8s_openapi::api::core::v1::PodTemplateSpec,
    hash: &str,
    nodes: &[String],
) -> Option<String> {
    let namespace = ds.metadata.namespace.as_deref().unwrap_or_default();
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), namespace);
    let params = PostParams::default();
    let mut remaining = nodes.iter();
    let mut failure = None;
    for batch in slow_start_batches(nodes.len()) {
        let pods: Vec<Pod> = remaining
            .by_ref()
            .take(batch)
            .map(|node| new_pod(ds, template, node, hash))
            .collect();
        let results = join_all(pods.iter().map(|pod| api.create(&params, pod))).await;
        let mut created = Vec::new();
        for result in results {
            match result {
                Ok(pod) => {
                    let name = pod.metadata.name.unwrap_or_default();
                    ctx.recorder.record(common_events::pod_created(ds, &name));
                    created.push(name);
                }
                Err(err) => {
                    if let Some(event) = common_events::pod_create_failed(ds, &err) {
                        ctx.recorder.record(event);
                    }
                    failure.get_or_insert_with(|| {
                        format!("creating a daemon pod: {}", api_message(&err))
                    });
                }
            }
        }
        ctx.expectations
            .lock()
            .expect_creations(key, created, Timestamp::now());
        if failure.is_some() {
            break;
        }
    }
    failure
}

/// Deletes `victims` on the condition of their UIDs; `force` deletes them
/// without a grace period.
async fn delete_pods(
    ctx: &Context,
    ds: &DaemonSet,
    key: &str,
    victims: &[Arc<Pod>],
    force: bool,
) -> Option<String> {
    if victims.is_empty() {
        return None;
    }
    let grace = force.then_some(0);
    let failed = pod_control::delete_pods(
        &ctx.client,
        &ctx.recorder,
        ds,
        &ctx.expectations,
        key,
        victims,
        grace,
    )
    .await;
    failed
        .first()
        .map(|(_, err)| format!("deleting a daemon pod: {}", api_message(err)))
}

/// Deletes revisions beyond revisionHistoryLimit that neither the current
/// template nor any pod uses (`cleanupHistory`).
async fn prune_history(
    ds: &DaemonSet,
    api: &Api<ControllerRevision>,
    revisions: &[ControllerRevision],
    current: &ControllerRevision,
    pods: &[Arc<Pod>],
) -> Result<(), Error> {
    let limit = ds
        .spec
        .as_ref()
        .and_then(|s| s.revision_history_limit)
        .unwrap_or(10);
    let hashes: Vec<&str> = pods
        .iter()
        .filter_map(|p| {
            p.metadata
                .labels
                .as_ref()?
                .get(history::CONTROLLER_REVISION_HASH)
        })
        .map(String::as_str)
        .collect();
    let mut live: Vec<&str> = revisions
        .iter()
        .filter(|r| hashes.contains(&history::hash_of(r)))
        .filter_map(|r| r.metadata.name.as_deref())
        .collect();
    live.extend(current.metadata.name.as_deref());
    let prunable = history::to_prune(revisions, &live, limit);
    history::prune(api, &prunable)
        .await
        .map_err(|source| Error::History {
            key: key_of(ds),
            source,
        })
}

/// Writes `status` through the status subresource unless it is current.
async fn write_status(
    ctx: &Context,
    ds: &DaemonSet,
    status: &DaemonSetStatus,
) -> Result<(), Error> {
    if is_current(ds.status.as_ref(), status) {
        return Ok(());
    }
    let namespace = ds.metadata.namespace.as_deref().unwrap_or_default();
    let api: Api<DaemonSet> = Api::namespaced(ctx.client.clone(), namespace);
    let name = ds.metadata.name.as_deref().unwrap_or_default();
    let patch = status_patch(status);
    match api
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => Ok(()),
        Err(err) if status_code(&err) == Some(404) => Ok(()),
        Err(source) => Err(Error::Api {
            key: key_of(ds),
            action: "updating the status of",
            source,
        }),
    }
}
