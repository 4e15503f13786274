//! The Endpoints controller: for every Service with a selector, an
//! Endpoints object of the same name listing the selected pods' IPs and
//! ports; deleted with its Service. Endpoints of a Service without a
//! selector belong to whoever wrote them. EndpointSlices are `endpointslice`'s.

#[cfg(test)]
pub(crate) mod fixtures;
pub mod plan;
pub mod pods;

use std::collections::HashSet;
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Endpoints, Pod, Service};
use kube::api::{DeleteParams, PostParams, Preconditions};
use kube::runtime::controller::{trigger_self, trigger_with, Action, Config};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, Client};
use parking_lot::Mutex;
use tokio::sync::Notify;

use crate::backoff::{key, Failures};
use crate::common::api::{api_message, status_code};
use crate::common::informers::Informers;
use crate::common::workqueue;
use crate::manager::Controller;

/// The `endpoint` controller of the controller-manager.
pub const CONTROLLER: Controller = Controller {
    name: "endpoint",
    run: |informers, _settings| Box::pin(run(informers)),
};

/// Services synced at once (`--concurrent-endpoint-syncs` default).
pub const CONCURRENT_SYNCS: u16 = 5;

/// Endpoints that hold a leader-election record are not a Service's.
const LEADER_ANNOTATION: &str = "control-plane.alpha.kubernetes.io/leader";

pub struct Context {
    client: Client,
    services: Store<Service>,
    pods: Store<Pod>,
    endpoints: Store<Endpoints>,
    failures: Failures,
    /// Services deleted since the last sweep: their Endpoints go.
    deleted: Mutex<HashSet<ObjectRef<Service>>>,
    sweep: Notify,
}

/// Why a sync failed; each is retried with back-off.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{action} Endpoints {key}: {}", api_message(source))]
    Api {
        key: String,
        action: &'static str,
        #[source]
        source: kube::Error,
    },
}

/// Watches Services, pods and Endpoints and syncs Services until aborted.
pub async fn run(informers: Arc<Informers>) {
    let client = informers.client();
    let (services, service_events) = informers.all::<Service>().await.into_parts();
    let (pods, pod_events) = informers.all::<Pod>().await.into_parts();
    let (endpoints, endpoint_events) = informers.all::<Endpoints>().await.into_parts();
    let ctx = Arc::new(Context {
        client: client.clone(),
        services: services.clone(),
        pods,
        endpoints: endpoints.clone(),
        failures: Failures::default(),
        deleted: Mutex::new(HashSet::new()),
        sweep: Notify::new(),
    });
    let deletions = ctx.clone();
    let service_events = service_events
        .inspect(move |event| {
            if let Ok(watcher::Event::Delete(service)) = event {
                deletions
                    .deleted
                    .lock()
                    .insert(ObjectRef::from_obj(service));
                deletions.sweep.notify_one();
            }
        })
        .touched_objects();
    let pod_events = pod_events.touched_objects();
    let endpoint_events = endpoint_events.touched_objects();
    let (cached_services, cached_endpoints) = (services.clone(), endpoints.clone());
    let queue = futures::stream::select(
        trigger_self(service_events, ()),
        futures::stream::select(
            trigger_with(pod_events, move |pod: Pod| {
                services_for_pod(&pod, &cached_services.state(), &cached_endpoints.state())
            }),
            trigger_with(endpoint_events, |ep: Endpoints| {
                let name = ep.metadata.name.unwrap_or_default();
                let namespace = ep.metadata.namespace.unwrap_or_default();
                [ObjectRef::<Service>::new(&name).within(&namespace)]
            }),
        ),
    );
    let syncs = workqueue::applier(
        informers.workqueue("endpoint"),
        |service, ctx| Box::pin(reconcile(service, ctx)),
        |service, err, ctx| {
            let delay = ctx.failures.delay(&key(&service.metadata));
            tracing::warn!(service = %key(&service.metadata), error = %err, retry_in = ?delay, "Endpoints sync failed");
            Action::requeue(delay)
        },
        ctx.clone(),
        services,
        queue,
        Config::default().concurrency(CONCURRENT_SYNCS),
    )
    .for_each(|result| async move {
        if let Err(err) = result {
            tracing::debug!(error = %err, "endpoint controller");
        }
    });
    tokio::join!(syncs, sweep_leftovers(ctx));
}

/// The Services whose Endpoints a pod change may alter: those selecting
/// it now, and those whose Endpoints list it (it may have left them).
pub fn services_for_pod(
    pod: &Pod,
    services: &[Arc<Service>],
    endpoints: &[Arc<Endpoints>],
) -> Vec<ObjectRef<Service>> {
    let namespace = pod.metadata.namespace.as_deref();
    let name = pod.metadata.name.as_deref();
    let selecting = services
        .iter()
        .filter(|s| pods::selects(s, pod))
        .map(|s| ObjectRef::from_obj(s.as_ref()));
    let listing = endpoints
        .iter()
        .filter(|ep| ep.metadata.namespace.as_deref() == namespace && lists(ep, name))
        .map(|ep| {
            ObjectRef::new(ep.metadata.name.as_deref().unwrap_or_default())
                .within(namespace.unwrap_or_default())
        });
    let mut refs: Vec<ObjectRef<Service>> = selecting.chain(listing).collect();
    refs.dedup();
    refs
}

fn lists(endpoints: &Endpoints, pod: Option<&str>) -> bool {
    let subsets = endpoints.subsets.iter().flatten();
    subsets
        .flat_map(|s| s.addresses.iter().chain(&s.not_ready_addresses).flatten())
        .any(|a| a.target_ref.as_ref().and_then(|r| r.name.as_deref()) == pod)
}

async fn reconcile(service: Arc<Service>, ctx: Arc<Context>) -> Result<Action, Error> {
    let key = key(&service.metadata);
    let result = sync(&service, &ctx, &key).await;
    if result.is_ok() {
        ctx.failures.forget(&key);
    }
    result
}

async fn sync(service: &Service, ctx: &Context, key: &str) -> Result<Action, Error> {
    if pods::selector(service).is_none() || service.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let namespace = service.metadata.namespace.as_deref().unwrap_or_default();
    let name = service.metadata.name.as_deref().unwrap_or_default();
    let pods = ctx
        .pods
        .state_filter(|p| p.metadata.namespace.as_deref() == Some(namespace));
    let existing = ctx.endpoints.get(&ObjectRef::new(name).within(namespace));
    let Some(wanted) = plan::endpoints(service, existing.as_deref(), &pods, jiff::Timestamp::now())
    else {
        return Ok(Action::await_change());
    };
    let api: Api<Endpoints> = Api::namespaced(ctx.client.clone(), namespace);
    let written = match existing {
        None => api.create(&PostParams::default(), &wanted).await,
        Some(_) => api.replace(name, &PostParams::default(), &wanted).await,
    };
    written.map_err(|source| Error::Api {
        key: key.to_string(),
        action: "writing",
        source,
    })?;
    tracing::debug!(service = key, "Endpoints written");
    Ok(Action::await_change())
}

/// Deletes the Endpoints of deleted Services: all left over once the
/// caches fill (Services deleted while no controller ran), then those of
/// each Service deleted since.
async fn sweep_leftovers(ctx: Arc<Context>) {
    let mut retry = Vec::new();
    let leftovers: Vec<ObjectRef<Service>> = ctx
        .endpoints
        .state()
        .iter()
        .filter(|ep| {
            let leader = ep.metadata.annotations.as_ref();
            !leader.is_some_and(|a| a.contains_key(LEADER_ANNOTATION))
        })
        .map(|ep| {
            ObjectRef::new(ep.metadata.name.as_deref().unwrap_or_default())
                .within(ep.metadata.namespace.as_deref().unwrap_or_default())
        })
        .filter(|service| ctx.services.get(service).is_none())
        .collect();
    ctx.deleted.lock().extend(leftovers);
    loop {
        let due: Vec<ObjectRef<Service>> =
            ctx.deleted.lock().drain().chain(retry.drain(..)).collect();
        for service in due {
            if ctx.services.get(&service).is_some() {
                continue; // recreated meanwhile
            }
            if let Err(err) = delete_endpoints(&ctx, &service).await {
                tracing::warn!(service = %service, error = %err, "deleting the Endpoints of a deleted Service failed");
                retry.push(service);
            }
        }
        let wait = match retry.is_empty() {
            true => std::time::Duration::from_secs(3600),
            false => std::time::Duration::from_secs(5),
        };
        let _ = tokio::time::timeout(wait, ctx.sweep.notified()).await;
    }
}

async fn delete_endpoints(ctx: &Context, service: &ObjectRef<Service>) -> Result<(), kube::Error> {
    let namespace = service.namespace.as_deref().unwrap_or_default();
    let Some(cached) = ctx
        .endpoints
        .get(&ObjectRef::new(&service.name).within(namespace))
    else {
        return Ok(());
    };
    let api: Api<Endpoints> = Api::namespaced(ctx.client.clone(), namespace);
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: cached.metadata.uid.clone(),
            resource_version: None,
        }),
        ..Default::default()
    };
    match api.delete(&service.name, &params).await {
        Ok(_) => Ok(()),
        Err(err) if matches!(status_code(&err), Some(404 | 409)) => Ok(()),
        Err(err) => Err(err),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fixtures::{pod, service};
    use serde_json::json;

    #[test]
    fn a_pod_concerns_services_selecting_it_or_listing_it() {
        let web = service("web", json!([{"port": 80}]));
        let mut db = service("db", json!([{"port": 5432}]));
        db.spec.as_mut().unwrap().selector = Some([("app".into(), "db".into())].into());
        let services = vec![Arc::new(web.clone()), Arc::new(db.clone())];
        let old = plan::endpoints(
            &db,
            None,
            &[Arc::new(pod("moved").labels(&[("app", "db")]).build())],
            fixtures::NOW,
        )
        .unwrap();
        let endpoints = vec![Arc::new(old)];

        let moved = pod("moved").build();
        let refs = services_for_pod(&moved, &services, &endpoints);
        assert_eq!(
            refs,
            [
                ObjectRef::new("web").within("default"),
                ObjectRef::new("db").within("default")
            ]
        );
        let unrelated = pod("x").labels(&[("app", "cache")]).build();
        assert!(services_for_pod(&unrelated, &services, &endpoints).is_empty());
    }
}
