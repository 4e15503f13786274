//! The root CA publisher (`root-ca-cert-publisher`): keeps a
//! `kube-root-ca.crt` ConfigMap holding the cluster CA (`ca.crt`) in every
//! namespace, making it again when it is deleted and putting the CA back
//! when it is changed, so that pods can verify the API server through the
//! token volume the ServiceAccount admission plugin gives them.

pub mod plan;

use std::sync::Arc;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{PostParams, ResourceExt};
use kube::runtime::controller::Action;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, Client};

use crate::common::api::{api_message, status_code};
use crate::common::informers::Informers;
use crate::common::per_namespace::sync_every_namespace;
use crate::manager::{Controller, Settings};
use plan::{Plan, CONFIG_MAP_NAME};

/// The `root-ca-cert-publisher` controller of the controller-manager.
pub const CONTROLLER: Controller = Controller {
    name: "root-ca-cert-publisher",
    run: |informers, settings| Box::pin(run(informers, settings)),
};

/// Namespaces synced at once (kube-controller-manager runs one worker).
const CONCURRENT_SYNCS: u16 = 1;

/// Why a namespace's ConfigMap could not be published; retried.
#[derive(Debug, thiserror::Error)]
#[error(
    "{action} ConfigMap {namespace}/kube-root-ca.crt: {}",
    api_message(source)
)]
pub struct Error {
    namespace: String,
    action: &'static str,
    #[source]
    source: kube::Error,
}

struct Context {
    client: Client,
    config_maps: Store<ConfigMap>,
    root_ca: String,
}

/// Publishes the CA in every namespace until aborted; without a CA
/// (neither `--root-ca-file` nor a CA of the API it runs against) it says
/// so and does nothing.
pub async fn run(informers: Arc<Informers>, settings: Arc<Settings>) {
    let Some(root_ca) = settings.root_ca.clone().filter(|ca| !ca.trim().is_empty()) else {
        tracing::warn!(
            "root-ca-cert-publisher: no cluster CA to publish (give --root-ca-file); pods' kube-root-ca.crt ConfigMaps are not made"
        );
        return;
    };
    let client = informers.client();
    sync_every_namespace(
        CONTROLLER.name,
        "root_ca_cert_publisher",
        &informers,
        |map: &ConfigMap| map.metadata.name.as_deref() == Some(CONFIG_MAP_NAME),
        |config_maps| Context {
            client,
            config_maps,
            root_ca,
        },
        reconcile,
        CONCURRENT_SYNCS,
    )
    .await;
}

async fn reconcile(namespace: Arc<Namespace>, ctx: Arc<Context>) -> Result<Action, Error> {
    let name = namespace.name_any();
    let key = ObjectRef::<ConfigMap>::new(CONFIG_MAP_NAME).within(&name);
    let existing = ctx.config_maps.get(&key);
    let api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &name);
    let failed = |action| {
        let namespace = name.clone();
        move |source| Error {
            namespace,
            action,
            source,
        }
    };
    match plan::plan(&namespace, existing.as_deref(), &ctx.root_ca) {
        Plan::Nothing => {}
        Plan::Create(map) => match api.create(&PostParams::default(), &map).await {
            Ok(_) => {
                tracing::info!(namespace = %name, "published the cluster CA in kube-root-ca.crt")
            }
            // The namespace is gone or going: nothing is made there.
            Err(err) if matches!(status_code(&err), Some(403 | 404)) => {}
            Err(err) => return Err(failed("creating")(err)),
        },
        Plan::Update(map) => match api
            .replace(CONFIG_MAP_NAME, &PostParams::default(), &map)
            .await
        {
            Ok(_) => {
                tracing::info!(namespace = %name, "put the cluster CA back in kube-root-ca.crt")
            }
            Err(err) if status_code(&err) == Some(404) => {
                // Deleted meanwhile: its deletion brings it back here.
            }
            Err(err) => return Err(failed("updating")(err)),
        },
    }
    Ok(Action::await_change())
}
