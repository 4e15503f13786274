//! The garbage collector's workers: take a uid from the queue, read what
//! the decision needs (live, never only from the graph, before acting) and
//! make the writes `decide` chose. Failures are retried with back-off.

use std::sync::Arc;

use kube::api::{
    Api, DeleteParams, DynamicObject, Patch, PatchParams, Preconditions, PropagationPolicy,
};
use kube::core::PartialObjectMeta;
use kube::discovery::ApiResource;
use serde_json::{json, Value};

use super::decide::{self, DependentAction, ForegroundAction, OwnerState, Propagation};
use super::graph::{ObjectIdentity, ObjectNode, FOREGROUND_FINALIZER};
use super::{events, GarbageCollector};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

type MetaApi = Api<PartialObjectMeta<DynamicObject>>;

/// Why processing an object failed; it is retried after a back-off.
#[derive(Debug, thiserror::Error)]
pub enum GcError {
    #[error("{verb} {kind} {namespace}/{name}: {source}")]
    Api {
        verb: &'static str,
        kind: String,
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("ownerReference to kind {kind} of apiVersion {api_version}, which the API does not serve; retried until it does")]
    UnknownOwnerKind { api_version: String, kind: String },
}

/// Processes queued uids until aborted.
pub async fn run(collector: Arc<GarbageCollector>) {
    loop {
        let uid = collector.queue.next().await;
        match process(&collector, &uid).await {
            Ok(()) => collector.queue.forget(&uid),
            Err(err) => {
                tracing::warn!(uid = %uid, error = %err, "garbage collector: processing failed; retrying");
                collector.queue.add_rate_limited(uid.clone());
            }
        }
        collector.queue.done(&uid);
    }
}

/// One object: an owner being deleted with `orphan` or
/// `foregroundDeletion`, or a possible dependent of absent owners.
async fn process(collector: &GarbageCollector, uid: &str) -> Result<(), GcError> {
    let Some(node) = collector.graph.lock().node(uid).cloned() else {
        // Gone: its removal already queued its dependents.
        return Ok(());
    };
    if node.is_orphaning() {
        return orphan_dependents(collector, &node).await;
    }
    if node.is_deleting_dependents() {
        return delete_dependents(collector, &node).await;
    }
    if node.being_deleted {
        return Ok(());
    }
    attempt_to_delete(collector, &node).await
}

/// Orphan deletion: takes `owner`'s reference off each dependent, then
/// removes the `orphan` finalizer (the apiserver then deletes the owner).
async fn orphan_dependents(
    collector: &GarbageCollector,
    owner: &ObjectNode,
) -> Result<(), GcError> {
    let (dependents, finalizer) = {
        let graph = collector.graph.lock();
        let plan = decide::orphan(graph.dependents_of(owner));
        let dependents: Vec<ObjectNode> = plan
            .strip_from
            .iter()
            .filter_map(|uid| graph.node(uid).cloned())
            .collect();
        (dependents, plan.finalizer)
    };
    let owners = [owner.uid().to_string()];
    let mut failed = None;
    for dependent in &dependents {
        if let Err(err) = remove_owner_references(collector, dependent, &owners).await {
            failed.get_or_insert(err);
        }
    }
    if let Some(err) = failed {
        return Err(err);
    }
    tracing::info!(kind = %owner.identity.kind, name = %owner.identity.name, dependents = dependents.len(), "garbage collector: orphaned dependents");
    remove_finalizer(collector, owner, finalizer).await
}

/// Foreground deletion: dependents are processed (deleted unless another
/// owner keeps them); once none blocks, `foregroundDeletion` is removed.
async fn delete_dependents(
    collector: &GarbageCollector,
    owner: &ObjectNode,
) -> Result<(), GcError> {
    let action = decide::foreground(collector.graph.lock().dependents_of(owner));
    match action {
        ForegroundAction::RemoveFinalizer => {
            remove_finalizer(collector, owner, FOREGROUND_FINALIZER).await
        }
        ForegroundAction::WaitFor(dependents) => {
            // The owner is queued again when a blocking dependent goes.
            for uid in dependents {
                collector.queue.add(uid);
            }
            Ok(())
        }
    }
}

/// A possible dependent: deleted if every owner is gone, its dangling
/// references removed if another owner keeps it.
async fn attempt_to_delete(collector: &GarbageCollector, node: &ObjectNode) -> Result<(), GcError> {
    let (all_solid, dependents) = {
        let graph = collector.graph.lock();
        let solid = node
            .owner_references
            .iter()
            .all(|r| graph.is_solid_owner(node, r));
        (solid, graph.dependents_summary(node.uid()))
    };
    if all_solid {
        return Ok(());
    }
    let api = api_for(
        collector,
        &node.resource,
        node.identity.namespace.as_deref(),
    );
    let Some(latest) = live_node(&api, node).await? else {
        return Ok(());
    };
    let mut owners = Vec::with_capacity(latest.owner_references.len());
    for reference in &latest.owner_references {
        let state = owner_state(collector, &latest, reference).await?;
        owners.push((reference.clone(), state));
    }
    report_invalid_namespace_owners(collector, &latest, &owners);
    match decide::dependent(&latest, &owners, dependents) {
        DependentAction::Keep => Ok(()),
        DependentAction::Unresolvable => {
            tracing::warn!(kind = %latest.identity.kind, name = %latest.identity.name, "garbage collector: a cluster-scoped object names a namespaced owner kind; it is never collected");
            Ok(())
        }
        DependentAction::RemoveOwnerReferences(owners) => {
            let references = decide::without_owners(&latest.owner_references, &owners);
            patch_owner_references(&api, &latest, &references).await
        }
        DependentAction::Delete {
            propagation,
            unblock,
        } => {
            if !unblock.is_empty() {
                let references = decide::unblocked(&latest.owner_references, &unblock);
                patch_owner_references(&api, &latest, &references).await?;
            }
            delete(&api, &latest.identity, propagation).await
        }
    }
}

/// Records `OwnerRefInvalidNamespace` on `dependent` for each owner that
/// can never be found: a namespaced kind named by a cluster-scoped object,
/// or an owner the graph knows in another namespace than the dependent's.
fn report_invalid_namespace_owners(
    collector: &GarbageCollector,
    dependent: &ObjectNode,
    owners: &[(OwnerReference, OwnerState)],
) {
    let graph = collector.graph.lock();
    for (reference, state) in owners {
        let invalid = match state {
            OwnerState::Unresolvable => true,
            OwnerState::Absent => graph.node(&reference.uid).is_some_and(|owner| {
                owner.identity.namespace.is_some()
                    && owner.identity.namespace != dependent.identity.namespace
            }),
            _ => false,
        };
        if invalid {
            let event = events::owner_ref_invalid_namespace(&dependent.identity, reference);
            collector.recorder.record(event);
        }
    }
}

/// What the API says of `reference`'s owner, read by name in the
/// dependent's namespace (a namespaced owner) and compared by uid.
async fn owner_state(
    collector: &GarbageCollector,
    dependent: &ObjectNode,
    reference: &OwnerReference,
) -> Result<OwnerState, GcError> {
    let served = collector
        .catalog
        .read()
        .resolve(&reference.api_version, &reference.kind)
        .cloned();
    let Some(served) = served else {
        return Err(GcError::UnknownOwnerKind {
            api_version: reference.api_version.clone(),
            kind: reference.kind.clone(),
        });
    };
    let namespace = match (served.namespaced, dependent.identity.namespace.as_deref()) {
        (true, None) => return Ok(OwnerState::Unresolvable),
        (true, Some(namespace)) => Some(namespace),
        (false, _) => None,
    };
    let api = api_for(collector, &served.resource, namespace);
    let owner = api
        .get_opt(&reference.name)
        .await
        .map_err(|source| api_error("get", &reference.kind, namespace, &reference.name, source))?;
    let Some(owner) = owner.filter(|o| o.metadata.uid.as_deref() == Some(reference.uid.as_str()))
    else {
        return Ok(OwnerState::Absent);
    };
    Ok(
        match ObjectNode::from_meta(&owner.metadata, &served.resource) {
            Some(owner) if owner.is_deleting_dependents() => OwnerState::DeletingDependents,
            _ => OwnerState::Present,
        },
    )
}

/// Takes the references to `owners` off `dependent` (as it is now).
async fn remove_owner_references(
    collector: &GarbageCollector,
    dependent: &ObjectNode,
    owners: &[String],
) -> Result<(), GcError> {
    let api = api_for(
        collector,
        &dependent.resource,
        dependent.identity.namespace.as_deref(),
    );
    let Some(latest) = live_node(&api, dependent).await? else {
        return Ok(());
    };
    let references = decide::without_owners(&latest.owner_references, owners);
    if references.len() == latest.owner_references.len() {
        return Ok(());
    }
    patch_owner_references(&api, &latest, &references).await
}

/// Removes `finalizer` from `owner` (as it is now, still being deleted).
async fn remove_finalizer(
    collector: &GarbageCollector,
    owner: &ObjectNode,
    finalizer: &str,
) -> Result<(), GcError> {
    let api = api_for(
        collector,
        &owner.resource,
        owner.identity.namespace.as_deref(),
    );
    let Some(latest) = live_node(&api, owner).await? else {
        return Ok(());
    };
    if !latest.being_deleted || !latest.has_finalizer(finalizer) {
        return Ok(());
    }
    let finalizers = decide::without_finalizer(&latest.finalizers, finalizer);
    let finalizers = match finalizers.is_empty() {
        true => Value::Null,
        false => json!(finalizers),
    };
    patch_metadata(&api, &latest, json!({ "finalizers": finalizers })).await?;
    tracing::info!(kind = %owner.identity.kind, name = %owner.identity.name, finalizer, "garbage collector: released owner");
    Ok(())
}

/// The object as the API has it now; None when it is gone or replaced.
async fn live_node(api: &MetaApi, node: &ObjectNode) -> Result<Option<LiveNode>, GcError> {
    let id = &node.identity;
    let object = api
        .get_opt(&id.name)
        .await
        .map_err(|source| api_error("get", &id.kind, id.namespace.as_deref(), &id.name, source))?;
    Ok(object
        .filter(|o| o.metadata.uid.as_deref() == Some(id.uid.as_str()))
        .and_then(|o| {
            let resource_version = o.metadata.resource_version.clone()?;
            let node = ObjectNode::from_meta(&o.metadata, &node.resource)?;
            Some(LiveNode {
                node,
                resource_version,
            })
        }))
}

/// An object read live, with the resourceVersion its writes require.
struct LiveNode {
    node: ObjectNode,
    resource_version: String,
}

impl std::ops::Deref for LiveNode {
    type Target = ObjectNode;
    fn deref(&self) -> &ObjectNode {
        &self.node
    }
}

async fn patch_owner_references(
    api: &MetaApi,
    latest: &LiveNode,
    references: &[OwnerReference],
) -> Result<(), GcError> {
    let references = match references.is_empty() {
        true => Value::Null,
        false => json!(references),
    };
    patch_metadata(api, latest, json!({ "ownerReferences": references })).await
}

/// A merge patch of `metadata` fields, on the resourceVersion read (a
/// conflict is retried on the newer object).
async fn patch_metadata(
    api: &MetaApi,
    latest: &LiveNode,
    mut fields: Value,
) -> Result<(), GcError> {
    fields["resourceVersion"] = json!(latest.resource_version);
    let patch = json!({ "metadata": fields });
    let id = &latest.identity;
    match api
        .patch(&id.name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.is_not_found() => Ok(()),
        Err(source) => Err(api_error(
            "patch",
            &id.kind,
            id.namespace.as_deref(),
            &id.name,
            source,
        )),
    }
}

/// Deletes the object with this uid (a precondition: never a namesake).
async fn delete(
    api: &MetaApi,
    id: &ObjectIdentity,
    propagation: Propagation,
) -> Result<(), GcError> {
    let params = DeleteParams {
        propagation_policy: Some(match propagation {
            Propagation::Background => PropagationPolicy::Background,
            Propagation::Foreground => PropagationPolicy::Foreground,
            Propagation::Orphan => PropagationPolicy::Orphan,
        }),
        preconditions: Some(Preconditions {
            uid: Some(id.uid.clone()),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    match api.delete(&id.name, &params).await {
        Ok(_) => {
            tracing::info!(kind = %id.kind, namespace = ?id.namespace, name = %id.name, ?propagation, "garbage collector: deleted dependent");
            Ok(())
        }
        Err(kube::Error::Api(status)) if status.is_not_found() => Ok(()),
        Err(source) => Err(api_error(
            "delete",
            &id.kind,
            id.namespace.as_deref(),
            &id.name,
            source,
        )),
    }
}

fn api_for(
    collector: &GarbageCollector,
    resource: &ApiResource,
    namespace: Option<&str>,
) -> MetaApi {
    let client = collector.client.clone();
    match namespace {
        Some(namespace) => Api::namespaced_with(client, namespace, resource),
        None => Api::all_with(client, resource),
    }
}

fn api_error(
    verb: &'static str,
    kind: &str,
    namespace: Option<&str>,
    name: &str,
    source: kube::Error,
) -> GcError {
    GcError::Api {
        verb,
        kind: kind.to_string(),
        namespace: namespace.unwrap_or_default().to_string(),
        name: name.to_string(),
        source,
    }
}
