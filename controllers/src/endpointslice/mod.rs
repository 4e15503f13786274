//! The EndpointSlice controller: for every Service with a selector, the
//! `discovery.k8s.io/v1` EndpointSlices (at most 100 endpoints each) that
//! list its pods with their ready, serving and terminating conditions.
//! Slices are owned by their Service, so the garbage collector deletes them
//! with it. Slices of Services without a selector are left to their writers.

pub mod plan;
mod tracker;

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{DeleteParams, PostParams, Preconditions};
use kube::runtime::controller::{trigger_self, trigger_with, Action, Config};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, Client};
use parking_lot::Mutex;

use crate::backoff::{key, Failures};
use crate::common::api::{api_message, status_code};
use crate::common::informers::Informers;
use crate::common::workqueue;
use crate::endpoint::pods;
use crate::manager::Controller;
use plan::{MANAGED_BY, MANAGED_BY_LABEL, MAX_ENDPOINTS_PER_SLICE, SERVICE_NAME_LABEL};
use tracker::Tracker;

/// The `endpointslice` controller of the controller-manager.
pub const CONTROLLER: Controller = Controller {
    name: "endpointslice",
    run: |informers, _settings| Box::pin(run(informers)),
};

/// Services synced at once (`--concurrent-service-endpoint-syncs` default).
pub const CONCURRENT_SYNCS: u16 = 5;

/// How soon to look again while the cache has not caught up with our writes.
const STALE_RECHECK: Duration = Duration::from_millis(500);

pub struct Context {
    client: Client,
    pods: Store<Pod>,
    slices: Store<EndpointSlice>,
    failures: Failures,
    tracker: Mutex<Tracker>,
}

/// Why a sync failed; each is retried with back-off.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{action} an EndpointSlice of Service {key}: {}", api_message(source))]
    Api {
        key: String,
        action: &'static str,
        #[source]
        source: kube::Error,
    },
}

/// Watches Services, pods and EndpointSlices and syncs Services until aborted.
pub async fn run(informers: Arc<Informers>) {
    let client = informers.client();
    let managed = watcher::Config::default().labels(&format!("{MANAGED_BY_LABEL}={MANAGED_BY}"));
    let (services, service_events) = informers.all::<Service>().await.into_parts();
    let (pods, pod_events) = informers.all::<Pod>().await.into_parts();
    let (slices, slice_events) = informers.watch::<EndpointSlice>(managed).await.into_parts();
    let ctx = Arc::new(Context {
        client: client.clone(),
        pods,
        slices: slices.clone(),
        failures: Failures::default(),
        tracker: Mutex::new(Tracker::default()),
    });
    let forget = ctx.clone();
    let service_events = service_events
        .inspect(move |event| {
            if let Ok(watcher::Event::Delete(service)) = event {
                forget.tracker.lock().forget(&key(&service.metadata));
            }
        })
        .touched_objects();
    let pod_events = pod_events.touched_objects();
    let slice_events = slice_events.touched_objects();
    let (cached_services, cached_slices) = (services.clone(), slices);
    let queue = futures::stream::select(
        trigger_self(service_events, ()),
        futures::stream::select(
            trigger_with(pod_events, move |pod: Pod| {
                services_for_pod(&pod, &cached_services.state(), &cached_slices.state())
            }),
            trigger_with(slice_events, |slice: EndpointSlice| service_of(&slice)),
        ),
    );
    workqueue::applier(
        informers.workqueue("endpoint_slice"),
        |service, ctx| Box::pin(reconcile(service, ctx)),
        |service, err, ctx| {
            let delay = ctx.failures.delay(&key(&service.metadata));
            tracing::warn!(service = %key(&service.metadata), error = %err, retry_in = ?delay, "EndpointSlice sync failed");
            Action::requeue(delay)
        },
        ctx,
        services,
        queue,
        Config::default().concurrency(CONCURRENT_SYNCS),
    )
    .for_each(|result| async move {
        if let Err(err) = result {
            tracing::debug!(error = %err, "endpointslice controller");
        }
    })
    .await;
}

/// The Service a slice's `kubernetes.io/service-name` label names.
fn service_of(slice: &EndpointSlice) -> Option<ObjectRef<Service>> {
    let name = slice.metadata.labels.as_ref()?.get(SERVICE_NAME_LABEL)?;
    Some(ObjectRef::new(name).within(slice.metadata.namespace.as_deref().unwrap_or_default()))
}

/// The Services a pod change may concern: those selecting it now, and
/// those whose slices list it.
pub fn services_for_pod(
    pod: &Pod,
    services: &[Arc<Service>],
    slices: &[Arc<EndpointSlice>],
) -> Vec<ObjectRef<Service>> {
    let name = pod.metadata.name.as_deref();
    let selecting = services
        .iter()
        .filter(|s| pods::selects(s, pod))
        .map(|s| ObjectRef::from_obj(s.as_ref()));
    let listing = slices
        .iter()
        .filter(|s| s.metadata.namespace == pod.metadata.namespace)
        .filter(|s| {
            s.endpoints
                .iter()
                .any(|e| e.target_ref.as_ref().and_then(|r| r.name.as_deref()) == name)
        })
        .filter_map(|s| service_of(s));
    let mut refs: Vec<ObjectRef<Service>> = selecting.chain(listing).collect();
    refs.sort_by(|a, b| a.name.cmp(&b.name));
    refs.dedup();
    refs
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
    let slices = ctx.slices.state_filter(|s| {
        s.metadata.namespace.as_deref() == Some(namespace)
            && s.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(SERVICE_NAME_LABEL))
                .map(String::as_str)
                == Some(name)
    });
    if !ctx
        .tracker
        .lock()
        .caught_up(key, &slices, jiff::Timestamp::now())
    {
        return Ok(Action::requeue(STALE_RECHECK));
    }
    let pods = ctx
        .pods
        .state_filter(|p| p.metadata.namespace.as_deref() == Some(namespace));
    let wanted = plan::endpoints(service, &pods);
    let changes = plan::reconcile(
        service,
        &slices,
        wanted,
        MAX_ENDPOINTS_PER_SLICE,
        jiff::Timestamp::now(),
    );
    if changes.is_empty() {
        return Ok(Action::await_change());
    }
    write(ctx, key, namespace, changes).await?;
    Ok(Action::await_change())
}

/// Creates, updates and deletes slices, telling the tracker what the cache
/// must show before the next sync.
async fn write(
    ctx: &Context,
    key: &str,
    namespace: &str,
    changes: plan::Changes,
) -> Result<(), Error> {
    let api: Api<EndpointSlice> = Api::namespaced(ctx.client.clone(), namespace);
    let failed = |action: &'static str| {
        move |source| Error::Api {
            key: key.to_string(),
            action,
            source,
        }
    };
    let now = jiff::Timestamp::now();
    for slice in &changes.create {
        let created = api
            .create(&PostParams::default(), slice)
            .await
            .map_err(failed("creating"))?;
        ctx.tracker.lock().wrote(key, &created, now);
    }
    for slice in &changes.update {
        let name = slice.metadata.name.as_deref().unwrap_or_default();
        let updated = api
            .replace(name, &PostParams::default(), slice)
            .await
            .map_err(failed("updating"))?;
        ctx.tracker.lock().wrote(key, &updated, now);
    }
    for slice in &changes.delete {
        let name = slice.metadata.name.as_deref().unwrap_or_default();
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: slice.metadata.uid.clone(),
                resource_version: None,
            }),
            ..Default::default()
        };
        match api.delete(name, &params).await {
            Ok(_) => ctx.tracker.lock().deleted(key, slice, now),
            Err(err) if status_code(&err) == Some(404) => {}
            Err(err) => return Err(failed("deleting")(err)),
        }
    }
    tracing::debug!(
        service = key,
        created = changes.create.len(),
        updated = changes.update.len(),
        deleted = changes.delete.len(),
        "EndpointSlices written"
    );
    Ok(())
}
