//! The ResourceQuota controller: recounts every quota's `status.used` from
//! the objects of its namespace (every 5 minutes, and soon after an object
//! it counts changes or goes), with `status.hard` mirroring `spec.hard`.
//! Admission charges a write to the quotas as it happens and gives usage
//! back on delete; this controller counts the same way (the usage
//! evaluator they share, `skiff_machinery::quota`) and corrects any drift.
//! The resources a quota names are found through discovery, as
//! kube-controller-manager finds them. Not: scopes, scope selectors.

pub mod count;

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{
    ConfigMap, PersistentVolumeClaim, Pod, ResourceQuota, Secret, Service,
};
use kube::api::{DynamicObject, ListParams, Patch, PatchParams};
use kube::core::ApiResource;
use kube::runtime::controller::{trigger_self, trigger_with, Action, Config};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, Client, Resource};
use serde_json::Value;
use skiff_machinery::quota::{self, GroupResource};

use crate::backoff::{key, Failures};
use crate::common::api::{api_message, status_code};
use crate::common::informers::Informers;
use crate::common::workqueue;
use crate::manager::Controller;

/// The `resourcequota` controller of the controller-manager.
pub const CONTROLLER: Controller = Controller {
    name: "resourcequota",
    run: |informers, _settings| Box::pin(run(informers)),
};

/// How often every quota is recounted (`--resource-quota-sync-period`).
pub const SYNC_PERIOD: Duration = Duration::from_secs(5 * 60);
/// Quotas synced at once (`--concurrent-resource-quota-syncs`).
pub const CONCURRENT_SYNCS: u16 = 5;
/// Changes to counted objects within this long make one recount.
const DEBOUNCE: Duration = Duration::from_millis(500);

pub struct Context {
    client: Client,
    failures: Failures,
    /// The served resources discovery found, by group and plural.
    discovered: std::sync::Mutex<std::collections::HashMap<(String, String), ApiResource>>,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{action} for ResourceQuota {key}: {}", api_message(source))]
    Api {
        key: String,
        action: String,
        #[source]
        source: kube::Error,
    },
}

/// Watches quotas and the objects quotas usually count, and recounts.
pub async fn run(informers: Arc<Informers>) {
    let client = informers.client();
    let (quotas, quota_events) = informers.all::<ResourceQuota>().await.into_parts();
    let ctx = Arc::new(Context {
        client: client.clone(),
        failures: Failures::default(),
        discovered: Default::default(),
    });
    let quota_events = quota_events.touched_objects();
    let changes = futures::stream::select_all([
        namespaces_of::<Pod>(&informers).await,
        namespaces_of::<Service>(&informers).await,
        namespaces_of::<ConfigMap>(&informers).await,
        namespaces_of::<Secret>(&informers).await,
        namespaces_of::<PersistentVolumeClaim>(&informers).await,
    ]);
    let cached = quotas.clone();
    let queue = futures::stream::select(
        trigger_self(quota_events, ()),
        trigger_with(changes, move |namespace: String| {
            quotas_in(&cached, &namespace)
        }),
    );
    workqueue::applier(
        informers.workqueue("resourcequota_primary"),
        |quota, ctx| Box::pin(reconcile(quota, ctx)),
        |quota, err, ctx| {
            let delay = ctx.failures.delay(&key(&quota.metadata));
            tracing::warn!(quota = %key(&quota.metadata), error = %err, retry_in = ?delay, "ResourceQuota sync failed");
            Action::requeue(delay)
        },
        ctx,
        quotas,
        queue,
        Config::default().concurrency(CONCURRENT_SYNCS).debounce(DEBOUNCE),
    )
    .for_each(|result| async move {
        if let Err(err) = result {
            tracing::debug!(error = %err, "resourcequota controller");
        }
    })
    .await;
}

/// The namespace of every changed or deleted object of kind `K`.
async fn namespaces_of<K>(
    informers: &Informers,
) -> futures::stream::BoxStream<'static, Result<String, watcher::Error>>
where
    K: Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    informers
        .all::<K>()
        .await
        .events
        .touched_objects()
        .map(|object| object.map(|o| o.meta().namespace.clone().unwrap_or_default()))
        .boxed()
}

fn quotas_in(quotas: &Store<ResourceQuota>, namespace: &str) -> Vec<ObjectRef<ResourceQuota>> {
    quotas
        .state()
        .iter()
        .filter(|q| q.metadata.namespace.as_deref() == Some(namespace))
        .map(|q| ObjectRef::from_obj(q.as_ref()))
        .collect()
}

async fn reconcile(quota: Arc<ResourceQuota>, ctx: Arc<Context>) -> Result<Action, Error> {
    let key = key(&quota.metadata);
    let namespace = quota.metadata.namespace.clone().unwrap_or_default();
    let hard = count::hard(&quota);
    let mut objects: Vec<(GroupResource<'_>, Vec<Value>)> = Vec::new();
    for counted in quota::counted_resources(hard.keys().map(String::as_str)) {
        let api_error = |action: String| {
            let key = key.clone();
            move |source| Error::Api {
                key,
                action,
                source,
            }
        };
        let Some(resource) = ctx
            .served(counted)
            .await
            .map_err(api_error(format!("discovering {}", counted.resource)))?
        else {
            continue;
        };
        let listed = list(&ctx.client, &resource, &namespace)
            .await
            .map_err(api_error(format!("listing {}", counted.resource)))?;
        objects.push((counted, listed));
    }
    let used = count::used(&hard, &objects);
    if let Some(patch) = count::status_patch(&quota, &hard, &used) {
        let api: Api<ResourceQuota> = Api::namespaced(ctx.client.clone(), &namespace);
        let name = quota.metadata.name.as_deref().unwrap_or_default();
        match api
            .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => tracing::debug!(quota = %key, "quota usage recounted"),
            Err(err) if status_code(&err) == Some(404) => {}
            Err(source) => {
                return Err(Error::Api {
                    key,
                    action: "writing the status".into(),
                    source,
                })
            }
        }
    }
    ctx.failures.forget(&key);
    Ok(Action::requeue(SYNC_PERIOD))
}

impl Context {
    /// The resource as the API serves it (its preferred version), or
    /// `None` when it serves no such resource.
    async fn served(&self, counted: GroupResource<'_>) -> Result<Option<ApiResource>, kube::Error> {
        let key = (counted.group.to_string(), counted.resource.to_string());
        if let Some(found) = self.discovered.lock().expect("not poisoned").get(&key) {
            return Ok(Some(found.clone()));
        }
        let group = match kube::discovery::oneshot::group(&self.client, counted.group).await {
            Ok(group) => group,
            Err(kube::Error::Discovery(_)) => return Ok(None),
            Err(err) => return Err(err),
        };
        let found = group
            .recommended_resources()
            .into_iter()
            .map(|(resource, _)| resource)
            .find(|resource| resource.plural == counted.resource);
        if let Some(found) = &found {
            self.discovered
                .lock()
                .expect("not poisoned")
                .insert(key, found.clone());
        }
        Ok(found)
    }
}

/// Every object of `resource` in `namespace`, as JSON.
async fn list(
    client: &Client,
    api_resource: &ApiResource,
    namespace: &str,
) -> Result<Vec<Value>, kube::Error> {
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, api_resource);
    let listed = api.list(&ListParams::default()).await?;
    Ok(listed
        .items
        .into_iter()
        .filter_map(|o| serde_json::to_value(o).ok())
        .collect())
}
