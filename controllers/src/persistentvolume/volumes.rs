//! Volume syncs: phases, release of a volume whose claim went, and its
//! reclaim (Retain keeps it, Delete deletes it and, for the hostPath
//! provisioner's volumes, its directory), as [`plan::volume_action`] decides.

use std::sync::Arc;

use k8s_openapi::api::core::v1::PersistentVolume;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::controller::Action;
use kube::Api;
use serde_json::json;

use super::plan::{self, VolumeAction, BOUND_BY_CONTROLLER};
use super::{ignore_not_found, provisioner, Context, Error, SYNC_PERIOD};

pub async fn reconcile(volume: Arc<PersistentVolume>, ctx: Arc<Context>) -> Result<Action, Error> {
    let name = volume.metadata.name.clone().unwrap_or_default();
    let api: Api<PersistentVolume> = Api::all(ctx.client.clone());
    let object = format!("volume {name}");
    let phase = |phase: &str, message: Option<String>| json!({"status": {"phase": phase, "message": message}});
    match plan::volume_action(&volume, &ctx.claims.state()) {
        VolumeAction::Nothing => {}
        VolumeAction::Phase(to, message) => {
            let patch = phase(to, message);
            let written = api
                .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await;
            ignore_not_found(written).map_err(Error::api(object, "updating the status of"))?;
        }
        VolumeAction::Release => {
            let patch = phase("Released", None);
            let written = api
                .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await;
            ignore_not_found(written).map_err(Error::api(object, "releasing"))?;
            tracing::info!(volume = %name, "claim deleted; volume released");
        }
        VolumeAction::Delete => delete(&ctx, &volume, &api).await?,
        VolumeAction::Unbind => {
            let mut free = volume.as_ref().clone();
            free.spec.get_or_insert_with(Default::default).claim_ref = None;
            if let Some(annotations) = free.metadata.annotations.as_mut() {
                annotations.remove(BOUND_BY_CONTROLLER);
            }
            api.replace(&name, &PostParams::default(), &free)
                .await
                .map_err(Error::api(object, "unbinding"))?;
        }
    }
    ctx.failures.forget(&crate::backoff::key(&volume.metadata));
    Ok(Action::requeue(SYNC_PERIOD))
}

/// The Delete reclaim policy: the provisioner's directory, then the
/// volume. A volume no deleter here can remove fails, as in kube.
async fn delete(
    ctx: &Context,
    volume: &PersistentVolume,
    api: &Api<PersistentVolume>,
) -> Result<(), Error> {
    let name = volume.metadata.name.clone().unwrap_or_default();
    let Some(dir) = provisioner::owned_dir(volume, &ctx.base_dir) else {
        let message = format!("error getting deleter volume plugin for volume \"{name}\": no deletable volume plugin matched");
        let patch = json!({"status": {"phase": "Failed", "message": message}});
        let written = api
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await;
        return ignore_not_found(written).map_err(Error::api(format!("volume {name}"), "failing"));
    };
    provisioner::remove_dir(&dir)
        .await
        .map_err(|source| Error::Io {
            action: "removing the provisioned volume directory",
            path: dir.clone(),
            source,
        })?;
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: volume.metadata.uid.clone(),
            resource_version: None,
        }),
        ..Default::default()
    };
    let deleted = api.delete(&name, &params).await;
    ignore_not_found(deleted).map_err(Error::api(format!("volume {name}"), "deleting"))?;
    tracing::info!(volume = %name, dir = %dir.display(), "reclaimed: volume and its directory deleted");
    Ok(())
}
