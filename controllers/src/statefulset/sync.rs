//! The thin part of a StatefulSet sync: the current and update
//! ControllerRevisions, the plan's steps done through the API (claims
//! before pods), history pruned, status written.

use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::{ControllerRevision, StatefulSet, StatefulSetStatus};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, PodTemplateSpec};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::controller::Action;
use kube::Api;
use serde_json::json;

use super::events::{self, Verb};
use super::identity::{self, new_claims, new_pod, retention};
use super::plan::{self, Revision, Revisions, Step};
use super::status::{compute_status, is_current, status_patch};
use super::{key_of, Context, Error};
use crate::common::api::status_code;
use crate::common::owners::controller_reference;
use crate::daemonset::controlled_pods;
use crate::history::{self, HistoryError, Owner};

/// Syncs one StatefulSet.
pub async fn reconcile(set: Arc<StatefulSet>, ctx: Arc<Context>) -> Result<Action, Error> {
    let key = key_of(&set);
    let result = sync(&set, &ctx, &key).await;
    if result.is_ok() {
        ctx.failures.forget(&key);
    }
    result
}

/// The revisions of a sync: current (what pods below the partition run)
/// and update (the set's template now).
struct History {
    current: ControllerRevision,
    update: ControllerRevision,
    all: Vec<ControllerRevision>,
}

async fn sync(set: &StatefulSet, ctx: &Context, key: &str) -> Result<Action, Error> {
    if set.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let selector = match super::selector(set) {
        Ok(selector) => selector,
        Err(message) => {
            tracing::error!(statefulset = key, %message, "invalid spec.selector; fix the StatefulSet");
            return Ok(Action::await_change());
        }
    };
    let namespace = set.metadata.namespace.clone().unwrap_or_default();
    let revisions_api: Api<ControllerRevision> = Api::namespaced(ctx.client.clone(), &namespace);
    let history = revisions(ctx, set, &revisions_api, key).await?;
    let names = Revisions {
        current: history.current.metadata.name.as_deref().unwrap_or_default(),
        update: history.update.metadata.name.as_deref().unwrap_or_default(),
    };
    let pods = controlled_pods(
        &ctx.pods,
        set.metadata.uid.as_deref(),
        &namespace,
        &selector,
    );
    let now = Timestamp::now();
    for step in plan::plan(set, &pods, &names, now) {
        perform(ctx, set, key, &history, step).await?;
    }
    prune_history(set, &revisions_api, &history, &pods).await?;
    let collision_count = set.status.as_ref().and_then(|s| s.collision_count);
    let (status, recheck) = compute_status(set, &pods, &names, collision_count, now);
    write_status(ctx, set, &status).await?;
    Ok(match recheck {
        Some(after) => Action::requeue(after),
        None => Action::await_change(),
    })
}

/// The update revision made (or renumbered) from the set's template, and
/// the current one named by `status.currentRevision` (the update revision
/// for a new set) (`getStatefulSetRevisions`).
async fn revisions(
    ctx: &Context,
    set: &StatefulSet,
    api: &Api<ControllerRevision>,
    key: &str,
) -> Result<History, Error> {
    let listed = api
        .list(&ListParams::default())
        .await
        .map_err(|source| Error::Api {
            key: key.to_string(),
            action: "listing the ControllerRevisions of",
            source,
        })?;
    let uid = set.metadata.uid.as_deref().unwrap_or_default();
    let existing = history::owned(listed.items, uid);
    let spec = set
        .spec
        .as_ref()
        .ok_or_else(|| Error::NoSpec(key.to_string()))?;
    let collision_count = set.status.as_ref().and_then(|s| s.collision_count);
    let owner = Owner {
        name: set.metadata.name.as_deref().unwrap_or_default(),
        namespace: set.metadata.namespace.as_deref().unwrap_or_default(),
        reference: controller_reference(set),
        labels: spec
            .template
            .metadata
            .as_ref()
            .and_then(|m| m.labels.clone())
            .unwrap_or_default(),
    };
    let wanted = history::new_revision(
        &owner,
        &spec.template,
        history::next_number(&existing),
        collision_count,
    );
    let update = match history::apply(api, history::decide(&existing, wanted)).await {
        Ok(update) => update,
        Err(HistoryError::Collision { name }) => {
            raise_collision_count(ctx, set, key, collision_count).await?;
            return Err(Error::History {
                key: key.to_string(),
                source: HistoryError::Collision { name },
            });
        }
        Err(source) => {
            return Err(Error::History {
                key: key.to_string(),
                source,
            })
        }
    };
    let mut all: Vec<ControllerRevision> = existing
        .into_iter()
        .filter(|r| r.metadata.name != update.metadata.name)
        .collect();
    all.push(update.clone());
    let named = set
        .status
        .as_ref()
        .and_then(|s| s.current_revision.as_deref());
    let current = all
        .iter()
        .find(|r| named.is_some() && r.metadata.name.as_deref() == named)
        .cloned()
        .unwrap_or_else(|| update.clone());
    Ok(History {
        current,
        update,
        all,
    })
}

async fn raise_collision_count(
    ctx: &Context,
    set: &StatefulSet,
    key: &str,
    collision_count: Option<i32>,
) -> Result<(), Error> {
    let next = collision_count.unwrap_or(0).saturating_add(1);
    let patch = json!({"status": {"collisionCount": next}});
    let namespace = set.metadata.namespace.as_deref().unwrap_or_default();
    let api: Api<StatefulSet> = Api::namespaced(ctx.client.clone(), namespace);
    let name = set.metadata.name.as_deref().unwrap_or_default();
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(|source| Error::Api {
            key: key.to_string(),
            action: "raising the collisionCount of",
            source,
        })?;
    Ok(())
}

async fn perform(
    ctx: &Context,
    set: &StatefulSet,
    key: &str,
    history: &History,
    step: Step,
) -> Result<(), Error> {
    match step {
        Step::Create { ordinal, revision } => {
            let (revision, template) = match revision {
                Revision::Current => (&history.current, history::template_of(&history.current)),
                Revision::Update => (&history.update, None),
            };
            let template = template.or_else(|| set.spec.as_ref().map(|s| s.template.clone()));
            let name = revision.metadata.name.as_deref().unwrap_or_default();
            create_pod(ctx, set, key, &template.unwrap_or_default(), name, ordinal).await
        }
        Step::Delete { pod, condemned } => {
            if condemned && retention(set).1 == "Delete" {
                hand_claims_to_pod(ctx, set, key, &pod).await?;
            }
            delete_pod(ctx, set, key, &pod).await
        }
    }
}

/// Creates the pod's claims (keeping those that exist), then the pod.
async fn create_pod(
    ctx: &Context,
    set: &StatefulSet,
    key: &str,
    template: &PodTemplateSpec,
    revision: &str,
    ordinal: usize,
) -> Result<(), Error> {
    let namespace = set.metadata.namespace.as_deref().unwrap_or_default();
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(ctx.client.clone(), namespace);
    let pod = new_pod(set, template, revision, ordinal);
    let pod_name = pod.metadata.name.clone().unwrap_or_default();
    for claim in new_claims(set, ordinal) {
        let claim_name = claim.metadata.name.clone().unwrap_or_default();
        match claims.create(&PostParams::default(), &claim).await {
            Ok(_) => ctx.recorder.record(events::claim_event(
                set,
                Verb::Create,
                &claim_name,
                &pod_name,
                None,
            )),
            Err(err) if status_code(&err) == Some(409) => {}
            Err(source) => {
                let failed = Some(&source);
                let claim_failed =
                    events::claim_event(set, Verb::Create, &claim_name, &pod_name, failed);
                ctx.recorder.record(claim_failed);
                ctx.recorder
                    .record(events::pod_event(set, Verb::Create, &pod_name, failed));
                return Err(Error::Api {
                    key: key.to_string(),
                    action: "creating a PersistentVolumeClaim of",
                    source,
                });
            }
        }
    }
    tracing::debug!(statefulset = key, pod = %pod_name, revision, "creating pod");
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), namespace);
    match pods.create(&PostParams::default(), &pod).await {
        Ok(_) => {
            let created = events::pod_event(set, Verb::Create, &pod_name, None);
            ctx.recorder.record(created);
            Ok(())
        }
        // Seen by an earlier sync whose pod the cache does not show yet.
        Err(err) if status_code(&err) == Some(409) => Ok(()),
        Err(source) => {
            let failed = events::pod_event(set, Verb::Create, &pod_name, Some(&source));
            ctx.recorder.record(failed);
            Err(Error::Api {
                key: key.to_string(),
                action: "creating a pod of",
                source,
            })
        }
    }
}

async fn delete_pod(ctx: &Context, set: &StatefulSet, key: &str, pod: &Pod) -> Result<(), Error> {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), namespace);
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: pod.metadata.uid.clone(),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    tracing::debug!(statefulset = key, pod = name, "deleting pod");
    match api.delete(name, &params).await {
        Ok(_) => {
            ctx.recorder
                .record(events::pod_event(set, Verb::Delete, name, None));
            Ok(())
        }
        // Gone, or replaced by a pod with another UID since it was cached.
        Err(err) if matches!(status_code(&err), Some(404 | 409)) => Ok(()),
        Err(source) => {
            let failed = events::pod_event(set, Verb::Delete, name, Some(&source));
            ctx.recorder.record(failed);
            Err(Error::Api {
                key: key.to_string(),
                action: "deleting a pod of",
                source,
            })
        }
    }
}

/// `whenScaled: Delete`: a condemned pod becomes an owner of its claims,
/// so that the garbage collector deletes them once the pod is gone.
async fn hand_claims_to_pod(
    ctx: &Context,
    set: &StatefulSet,
    key: &str,
    pod: &Pod,
) -> Result<(), Error> {
    let Some(ordinal) = identity::ordinal_of(set, pod) else {
        return Ok(());
    };
    let namespace = set.metadata.namespace.as_deref().unwrap_or_default();
    let api: Api<PersistentVolumeClaim> = Api::namespaced(ctx.client.clone(), namespace);
    let owner = json!({
        "apiVersion": "v1", "kind": "Pod",
        "name": pod.metadata.name, "uid": pod.metadata.uid,
    });
    for name in identity::claim_names(set, ordinal) {
        let claim = match api.get_opt(&name).await {
            Ok(Some(claim)) => claim,
            Ok(None) => continue,
            Err(source) => {
                return Err(Error::Api {
                    key: key.to_string(),
                    action: "reading a PersistentVolumeClaim of",
                    source,
                })
            }
        };
        let mut owners = serde_json::to_value(claim.metadata.owner_references.unwrap_or_default())
            .unwrap_or_else(|_| json!([]));
        let already = owners
            .as_array()
            .is_some_and(|o| o.iter().any(|o| o["uid"] == owner["uid"]));
        if already {
            continue;
        }
        if let Some(list) = owners.as_array_mut() {
            list.push(owner.clone());
        }
        let patch = json!({"metadata": {"ownerReferences": owners,
                                        "resourceVersion": claim.metadata.resource_version}});
        if let Err(source) = api
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            return Err(Error::Api {
                key: key.to_string(),
                action: "handing a PersistentVolumeClaim to its pod for",
                source,
            });
        }
    }
    Ok(())
}

/// Deletes revisions beyond revisionHistoryLimit that neither the current
/// nor the update revision nor any pod uses (`truncateHistory`).
async fn prune_history(
    set: &StatefulSet,
    api: &Api<ControllerRevision>,
    history: &History,
    pods: &[Arc<Pod>],
) -> Result<(), Error> {
    let limit = set
        .spec
        .as_ref()
        .and_then(|s| s.revision_history_limit)
        .unwrap_or(10);
    let mut live: Vec<&str> = pods.iter().map(|p| identity::revision_of(p)).collect();
    live.extend(history.current.metadata.name.as_deref());
    live.extend(history.update.metadata.name.as_deref());
    let prunable = history::to_prune(&history.all, &live, limit);
    history::prune(api, &prunable)
        .await
        .map_err(|source| Error::History {
            key: key_of(set),
            source,
        })
}

async fn write_status(
    ctx: &Context,
    set: &StatefulSet,
    status: &StatefulSetStatus,
) -> Result<(), Error> {
    if is_current(set.status.as_ref(), status) {
        return Ok(());
    }
    let namespace = set.metadata.namespace.as_deref().unwrap_or_default();
    let api: Api<StatefulSet> = Api::namespaced(ctx.client.clone(), namespace);
    let name = set.metadata.name.as_deref().unwrap_or_default();
    match api
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(&status_patch(status)),
        )
        .await
    {
        Ok(_) => Ok(()),
        Err(err) if status_code(&err) == Some(404) => Ok(()),
        Err(source) => Err(Error::Api {
            key: key_of(set),
            action: "updating the status of",
            source,
        }),
    }
}
