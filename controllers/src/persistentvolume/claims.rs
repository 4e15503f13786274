//! Claim syncs: bind, provision, select a node, or set the phase, as
//! [`plan::claim_action`] decides.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{ObjectReference, PersistentVolume, PersistentVolumeClaim};
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::Api;
use serde_json::json;

use super::plan::{self, ClaimAction, Provisioning, BOUND_BY_CONTROLLER};
use super::{ignore_not_found, provisioner, Context, Error, SYNC_PERIOD};
use crate::backoff::key;
use crate::common::api::status_code;

pub async fn reconcile(
    claim: Arc<PersistentVolumeClaim>,
    ctx: Arc<Context>,
) -> Result<Action, Error> {
    let key = key(&claim.metadata);
    let action = plan::claim_action(
        &claim,
        &ctx.volumes.state(),
        &ctx.classes.state(),
        &ctx.pods.state(),
    );
    match action {
        ClaimAction::Nothing => {}
        ClaimAction::Phase(phase) => claim_status(&ctx, &claim, json!({"phase": phase})).await?,
        ClaimAction::Bind(volume) => bind(&ctx, &claim, &volume).await?,
        ClaimAction::Provision(provisioning) => provision(&ctx, &claim, &provisioning).await?,
        ClaimAction::SelectNode(node) => {
            let patch = json!({"metadata": {"annotations": {plan::SELECTED_NODE: node}}});
            patch_claim(&ctx, &claim, &patch).await?;
        }
    }
    ctx.failures.forget(&key);
    Ok(Action::requeue(SYNC_PERIOD))
}

fn api(ctx: &Context, claim: &PersistentVolumeClaim) -> Api<PersistentVolumeClaim> {
    Api::namespaced(
        ctx.client.clone(),
        claim.metadata.namespace.as_deref().unwrap_or_default(),
    )
}

fn name(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> &str {
    meta.name.as_deref().unwrap_or_default()
}

async fn claim_status(
    ctx: &Context,
    claim: &PersistentVolumeClaim,
    status: serde_json::Value,
) -> Result<(), Error> {
    let patch = json!({"status": status});
    let written = api(ctx, claim)
        .patch_status(
            name(&claim.metadata),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await;
    ignore_not_found(written).map_err(Error::api(
        format!("claim {}", key(&claim.metadata)),
        "updating the status of",
    ))
}

async fn patch_claim(
    ctx: &Context,
    claim: &PersistentVolumeClaim,
    patch: &serde_json::Value,
) -> Result<(), Error> {
    let written = api(ctx, claim)
        .patch(
            name(&claim.metadata),
            &PatchParams::default(),
            &Patch::Merge(patch),
        )
        .await;
    ignore_not_found(written).map_err(Error::api(
        format!("claim {}", key(&claim.metadata)),
        "annotating",
    ))
}

/// kube's `bind`: the volume's claimRef, the volume's phase, the claim's
/// volumeName and annotations, the claim's phase, each written only when
/// it is not so already (the cache may be behind; a conflict retries).
async fn bind(
    ctx: &Context,
    claim: &PersistentVolumeClaim,
    volume_name: &str,
) -> Result<(), Error> {
    let Some(volume) = ctx.volumes.get(&ObjectRef::new(volume_name)) else {
        return Ok(());
    };
    let volumes: Api<PersistentVolume> = Api::all(ctx.client.clone());
    let object = format!("volume {volume_name}");
    let reference_uid = volume
        .spec
        .as_ref()
        .and_then(|s| s.claim_ref.as_ref())
        .and_then(|r| r.uid.clone());
    if reference_uid != claim.metadata.uid {
        let mut bound = volume.as_ref().clone();
        let by_controller = bound
            .spec
            .as_ref()
            .and_then(|s| s.claim_ref.as_ref())
            .is_none();
        let spec = bound.spec.get_or_insert_with(Default::default);
        spec.claim_ref = Some(ObjectReference {
            kind: Some("PersistentVolumeClaim".into()),
            api_version: Some("v1".into()),
            namespace: claim.metadata.namespace.clone(),
            name: claim.metadata.name.clone(),
            uid: claim.metadata.uid.clone(),
            resource_version: claim.metadata.resource_version.clone(),
            ..Default::default()
        });
        if by_controller {
            bound
                .metadata
                .annotations
                .get_or_insert_with(Default::default)
                .insert(BOUND_BY_CONTROLLER.into(), "yes".into());
        }
        volumes
            .replace(volume_name, &PostParams::default(), &bound)
            .await
            .map_err(Error::api(object.clone(), "binding"))?;
    }
    if plan::volume_phase(&volume) != "Bound" {
        let patch = json!({"status": {"phase": "Bound"}});
        let written = volumes
            .patch_status(volume_name, &PatchParams::default(), &Patch::Merge(&patch))
            .await;
        ignore_not_found(written).map_err(Error::api(object, "updating the status of"))?;
    }
    let claimed = claim
        .spec
        .as_ref()
        .and_then(|s| s.volume_name.as_deref())
        .unwrap_or_default();
    let annotated = claim
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(plan::BIND_COMPLETED));
    if claimed != volume_name || !annotated {
        let annotations = plan::bound_claim_annotations(claim, claimed.is_empty());
        let patch = json!({
            "metadata": {"annotations": annotations, "resourceVersion": claim.metadata.resource_version},
            "spec": {"volumeName": volume_name},
        });
        patch_claim(ctx, claim, &patch).await?;
    }
    let spec = volume.spec.as_ref();
    let status = json!({
        "phase": "Bound",
        "accessModes": spec.and_then(|s| s.access_modes.clone()),
        "capacity": spec.and_then(|s| s.capacity.clone()),
    });
    let current = claim.status.as_ref();
    let done = plan::claim_phase(claim) == "Bound"
        && current.and_then(|s| s.capacity.as_ref()) == spec.and_then(|s| s.capacity.as_ref());
    if !done {
        claim_status(ctx, claim, status).await?;
    }
    tracing::info!(claim = %key(&claim.metadata), volume = volume_name, "claim bound");
    Ok(())
}

/// Makes the claim's volume: its directory, then the volume reserved for
/// the claim (binding follows when the volume is seen).
async fn provision(
    ctx: &Context,
    claim: &PersistentVolumeClaim,
    provisioning: &Provisioning,
) -> Result<(), Error> {
    let volume = provisioner::new_volume(claim, provisioning, &ctx.base_dir);
    let path = std::path::PathBuf::from(
        &volume
            .spec
            .as_ref()
            .and_then(|s| s.host_path.as_ref())
            .map(|h| h.path.clone())
            .unwrap_or_default(),
    );
    provisioner::create_dir(&path)
        .await
        .map_err(|source| Error::Io {
            action: "creating the provisioned volume directory",
            path: path.clone(),
            source,
        })?;
    let annotations = json!({"metadata": {"annotations": {
        plan::STORAGE_PROVISIONER: provisioning.provisioner,
        plan::BETA_STORAGE_PROVISIONER: provisioning.provisioner,
    }}});
    patch_claim(ctx, claim, &annotations).await?;
    let volumes: Api<PersistentVolume> = Api::all(ctx.client.clone());
    let name = provisioner::volume_name(claim);
    match volumes.create(&PostParams::default(), &volume).await {
        Ok(_) => {
            tracing::info!(claim = %key(&claim.metadata), volume = %name, path = %path.display(), "provisioned a hostPath volume");
            Ok(())
        }
        Err(err) if status_code(&err) == Some(409) => Ok(()),
        Err(source) => Err(Error::Api {
            object: format!("volume {name}"),
            action: "provisioning",
            source,
        }),
    }
}
