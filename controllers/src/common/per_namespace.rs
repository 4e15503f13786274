//! The loop of the controllers that keep an object of their own in every
//! namespace (the service account controller, the root CA publisher): a
//! namespace is synced when it changes or when one of those objects in it
//! does, and retried with back-off. What a sync does is each controller's.

use std::future::Future;
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::ResourceExt;
use kube::runtime::controller::{trigger_self, trigger_with, Action, Config};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::WatchStreamExt;

use crate::backoff::Failures;
use crate::common::informers::{Informers, Object};
use crate::common::workqueue;

/// A controller's context, and the failures of each namespace so far.
struct Synced<C> {
    ctx: Arc<C>,
    failures: Failures,
}

/// Runs `reconcile` for every namespace until aborted, at most
/// `concurrency` at once: again when the namespace changes, and when an
/// object of `K` in it that `concerns` picks changes. `context` is made
/// from the cache of `K`; a failed sync is retried with back-off by
/// namespace, forgotten after a success. `controller` names the logs,
/// `queue` the work queue in the metrics.
#[allow(clippy::too_many_arguments)]
pub async fn sync_every_namespace<K, C, E, Fut>(
    controller: &'static str,
    queue_name: &'static str,
    informers: &Informers,
    concerns: fn(&K) -> bool,
    context: impl FnOnce(Store<K>) -> C,
    reconcile: fn(Arc<Namespace>, Arc<C>) -> Fut,
    concurrency: u16,
) where
    K: Object,
    C: Send + Sync + 'static,
    E: std::error::Error + Send + 'static,
    Fut: Future<Output = Result<Action, E>> + Send + 'static,
{
    let (namespaces, namespace_events) = informers.all::<Namespace>().await.into_parts();
    let (objects, object_events) = informers.all::<K>().await.into_parts();
    let queue = futures::stream::select(
        trigger_self(namespace_events.touched_objects(), ()),
        trigger_with(object_events.touched_objects(), move |object: K| {
            object
                .namespace()
                .filter(|_| concerns(&object))
                .map(|namespace| ObjectRef::<Namespace>::new(&namespace))
        }),
    );
    let synced = Arc::new(Synced {
        ctx: Arc::new(context(objects)),
        failures: Failures::default(),
    });
    workqueue::applier(
        informers.workqueue(queue_name),
        move |namespace, synced: Arc<Synced<C>>| {
            Box::pin(async move {
                let name = namespace.name_any();
                let action = reconcile(namespace, synced.ctx.clone()).await?;
                synced.failures.forget(&name);
                Ok::<_, E>(action)
            })
        },
        move |namespace, err: &E, synced| {
            let delay = synced.failures.delay(&namespace.name_any());
            tracing::warn!(error = %err, retry_in = ?delay, "{controller}: retrying");
            Action::requeue(delay)
        },
        synced,
        namespaces,
        queue,
        Config::default().concurrency(concurrency),
    )
    .for_each(|result| async move {
        if let Err(err) = result {
            tracing::debug!(error = %err, "{controller}");
        }
    })
    .await;
}
