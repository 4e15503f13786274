//! kube-runtime's `applier` as a work queue that reports client-go's
//! workqueue metrics under its controller's queue name: triggers are
//! adds (depth counts the distinct keys triggered and not yet started),
//! a reconcile is a worker's processing of a key, and a requeue (after an
//! error, or asked for by the reconcile) a retry. The applier itself, with
//! its deduplication and scheduling, is unchanged.

use std::fmt::Debug;
use std::future::Future;
use std::hash::Hash;
use std::sync::Arc;

use futures::{Stream, StreamExt, TryStreamExt};
use kube::runtime::controller::{Action, Config, Error, ReconcileRequest};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Resource, ResourceExt};
use skiff_machinery::metrics::QueueMetrics;

/// The key of an object in its queue, as client-go's
/// `MetaNamespaceKeyFunc` writes it: `namespace/name`, or `name`.
pub fn key(namespace: Option<&str>, name: &str) -> String {
    match namespace {
        Some(namespace) if !namespace.is_empty() => format!("{namespace}/{name}"),
        _ => name.to_string(),
    }
}

/// A key being processed, done when dropped (also when the reconcile is
/// cancelled with its controller).
struct Processing {
    metrics: QueueMetrics,
    key: String,
}

impl Drop for Processing {
    fn drop(&mut self) {
        self.metrics.done(&self.key);
    }
}

/// `kube::runtime::applier`, measured as the work queue `metrics`.
pub fn applier<K, QueueStream, ReconcilerFut, Ctx, E>(
    metrics: QueueMetrics,
    mut reconciler: impl FnMut(Arc<K>, Arc<Ctx>) -> ReconcilerFut,
    error_policy: impl Fn(Arc<K>, &E, Arc<Ctx>) -> Action,
    context: Arc<Ctx>,
    store: Store<K>,
    queue: QueueStream,
    config: Config,
) -> impl Stream<Item = Result<(ObjectRef<K>, Action), Error<E, QueueStream::Error>>>
where
    K: Clone + Resource + 'static,
    K::DynamicType: Debug + Eq + Hash + Clone + Unpin,
    ReconcilerFut: Future<Output = Result<Action, E>> + Send + 'static,
    E: std::error::Error + Send + 'static,
    QueueStream: futures::TryStream,
    QueueStream::Ok: Into<ReconcileRequest<K>>,
    QueueStream::Error: std::error::Error + 'static,
{
    let adds = metrics.clone();
    let queue = queue.map_ok(move |request| {
        let request: ReconcileRequest<K> = request.into();
        let obj_ref = &request.obj_ref;
        adds.add(&key(obj_ref.namespace.as_deref(), &obj_ref.name));
        request
    });
    let workers = metrics.clone();
    let reconcile = move |object: Arc<K>, ctx: Arc<Ctx>| {
        let key = key(object.namespace().as_deref(), &object.name_any());
        if !workers.start(&key) {
            // Queued again by the applier itself when its requeue came due.
            workers.add_when_due();
        }
        let processing = Processing {
            metrics: workers.clone(),
            key,
        };
        let sync = reconciler(object, ctx);
        Box::pin(async move {
            let result = sync.await;
            let requeued = matches!(&result, Ok(action) if *action != Action::await_change());
            if requeued {
                // Asked to come back later: client-go's AddAfter.
                processing.metrics.retry();
            }
            drop(processing);
            result
        })
    };
    let retries = metrics.clone();
    let error_policy = move |object: Arc<K>, err: &E, ctx: Arc<Ctx>| {
        let action = error_policy(object, err, ctx);
        if action != Action::await_change() {
            retries.retry();
        }
        action
    };
    kube::runtime::applier(reconcile, error_policy, context, store, queue, config).inspect(
        move |result| {
            // A key whose object is gone is taken and done at once, as a
            // client-go worker finds it missing from its cache.
            if let Err(Error::ObjectNotFound(obj_ref)) = result {
                let key = key(obj_ref.namespace.as_deref(), &obj_ref.name);
                metrics.start(&key);
                metrics.done(&key);
            }
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::runtime::reflector;
    use kube::runtime::watcher::Event;
    use std::convert::Infallible;
    use std::time::Duration;

    #[derive(Debug, thiserror::Error)]
    #[error("first sync of {0} fails")]
    struct Failed(String);

    struct Ctx {
        /// One permit per sync allowed to run.
        permits: tokio::sync::Semaphore,
        failed_once: parking_lot::Mutex<bool>,
    }

    fn config_map(name: &str) -> ConfigMap {
        let mut cm = ConfigMap::default();
        cm.metadata.name = Some(name.into());
        cm.metadata.namespace = Some("default".into());
        cm
    }

    async fn until(what: &str, mut done: impl FnMut() -> bool) {
        for _ in 0..1000 {
            if done() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        panic!("timed out waiting for {what}");
    }

    #[tokio::test]
    async fn triggers_syncs_and_requeues_are_counted_as_the_queue_of_the_controller() {
        let (store, mut writer) = reflector::store::<ConfigMap>();
        writer.apply_watcher_event(&Event::Init);
        for name in ["a", "b"] {
            writer.apply_watcher_event(&Event::InitApply(config_map(name)));
        }
        writer.apply_watcher_event(&Event::InitDone);
        let metrics = QueueMetrics::unregistered("test");
        let (triggers, queue) =
            futures::channel::mpsc::unbounded::<Result<ObjectRef<ConfigMap>, Infallible>>();
        let ctx = Arc::new(Ctx {
            permits: tokio::sync::Semaphore::new(0),
            failed_once: parking_lot::Mutex::new(false),
        });
        let syncs = applier(
            metrics.clone(),
            |cm: Arc<ConfigMap>, ctx: Arc<Ctx>| async move {
                ctx.permits.acquire().await.unwrap().forget();
                let name = cm.name_any();
                let mut failed = ctx.failed_once.lock();
                if name == "b" && !*failed {
                    *failed = true;
                    return Err(Failed(name));
                }
                Ok(Action::await_change())
            },
            |_, _: &Failed, _| Action::requeue(Duration::from_millis(10)),
            ctx.clone(),
            store,
            queue,
            Config::default().concurrency(1),
        );
        let (results, mut outcomes) = tokio::sync::mpsc::unbounded_channel();
        let task = tokio::spawn(syncs.for_each(move |result| {
            let outcome = match result {
                Ok((obj_ref, _)) => format!("ok {}", obj_ref.name),
                Err(Error::ReconcilerFailed(_, obj_ref)) => format!("failed {}", obj_ref.name),
                Err(Error::ObjectNotFound(obj_ref)) => format!("missing {}", obj_ref.name),
                Err(err) => format!("{err}"),
            };
            let _ = results.send(outcome);
            async {}
        }));
        let trigger = |name: &str| {
            triggers
                .unbounded_send(Ok(ObjectRef::new(name).within("default")))
                .unwrap()
        };

        trigger("a");
        until("a in progress", || metrics.processing() == 1).await;
        assert_eq!((metrics.depth(), metrics.adds()), (0, 1));
        // b twice is one key waiting; a again waits behind its own sync.
        trigger("b");
        trigger("b");
        trigger("a");
        until("b and a waiting", || metrics.depth() == 2).await;
        assert_eq!(metrics.adds(), 3);

        ctx.permits.add_permits(10);
        let mut seen = Vec::new();
        while !seen.contains(&"ok b".to_string()) {
            seen.push(outcomes.recv().await.unwrap());
        }
        assert!(seen.contains(&"failed b".to_string()), "{seen:?}");
        until("nothing in progress", || metrics.processing() == 0).await;
        // b came back once when its back-off ran out: an add and a retry.
        assert_eq!(
            (metrics.depth(), metrics.adds(), metrics.retries()),
            (0, 4, 1)
        );

        trigger("gone");
        assert_eq!(outcomes.recv().await.unwrap(), "missing gone");
        assert_eq!((metrics.depth(), metrics.adds()), (0, 5));
        assert_eq!(metrics.processing(), 0);
        task.abort();
    }

    #[test]
    fn keys_are_written_as_client_go_writes_them() {
        assert_eq!(key(Some("default"), "web"), "default/web");
        assert_eq!(key(None, "node-1"), "node-1");
        assert_eq!(key(Some(""), "node-1"), "node-1");
    }
}
