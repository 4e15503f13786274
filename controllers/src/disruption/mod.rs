//! The disruption controller: keeps every PodDisruptionBudget's status —
//! expectedPods, currentHealthy, desiredHealthy, disruptionsAllowed,
//! observedGeneration, the DisruptionAllowed condition — and clears
//! `disruptedPods` entries of pods that went or were not deleted in time.
//! The eviction subresource reads and spends `disruptionsAllowed`.

pub mod plan;

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::PostParams;
use kube::runtime::controller::{trigger_self, trigger_with, Action, Config};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, Client, Resource};

use crate::backoff::{key, Failures};
use crate::common::api::{api_message, status_code};
use crate::common::informers::Informers;
use crate::common::workqueue;
use crate::manager::Controller;

/// The `disruption` controller of the controller-manager.
pub const CONTROLLER: Controller = Controller {
    name: "disruption",
    run: |informers, _settings| Box::pin(run(informers)),
};

pub struct Context {
    client: Client,
    pods: Store<Pod>,
    replica_sets: Store<ReplicaSet>,
    deployments: Store<Deployment>,
    stateful_sets: Store<StatefulSet>,
    failures: Failures,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "updating the status of PodDisruptionBudget {key}: {}",
        api_message(source)
    )]
    Api {
        key: String,
        #[source]
        source: kube::Error,
    },
}

/// A reflector store of `K` and the stream that keeps it.
async fn cache<K>(
    informers: &Informers,
) -> (
    Store<K>,
    futures::stream::BoxStream<'static, Result<K, watcher::Error>>,
)
where
    K: Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    let (store, events) = informers.all::<K>().await.into_parts();
    (store, events.touched_objects().boxed())
}

/// Watches budgets, pods and their controllers and syncs budgets until aborted.
pub async fn run(informers: Arc<Informers>) {
    let client = informers.client();
    let (budgets, budget_events) = cache::<PodDisruptionBudget>(&informers).await;
    let (pods, pod_events) = cache::<Pod>(&informers).await;
    let (replica_sets, rs_events) = cache::<ReplicaSet>(&informers).await;
    let (deployments, deployment_events) = cache::<Deployment>(&informers).await;
    let (stateful_sets, set_events) = cache::<StatefulSet>(&informers).await;
    let ctx = Arc::new(Context {
        client,
        pods,
        replica_sets,
        deployments,
        stateful_sets,
        failures: Failures::default(),
    });
    // A controller's scale change concerns the budgets of its namespace.
    let namespaces = futures::stream::select_all([
        pod_events
            .map(|e| e.map(|o| o.metadata.namespace.unwrap_or_default()))
            .boxed(),
        rs_events
            .map(|e| e.map(|o| o.metadata.namespace.unwrap_or_default()))
            .boxed(),
        deployment_events
            .map(|e| e.map(|o| o.metadata.namespace.unwrap_or_default()))
            .boxed(),
        set_events
            .map(|e| e.map(|o| o.metadata.namespace.unwrap_or_default()))
            .boxed(),
    ]);
    let cached = budgets.clone();
    let queue = futures::stream::select(
        trigger_self(budget_events, ()),
        trigger_with(namespaces, move |namespace: String| {
            cached
                .state()
                .iter()
                .filter(|b| b.metadata.namespace.as_deref() == Some(namespace.as_str()))
                .map(|b| ObjectRef::from_obj(b.as_ref()))
                .collect::<Vec<_>>()
        }),
    );
    workqueue::applier(
        informers.workqueue("disruption"),
        |pdb, ctx| Box::pin(reconcile(pdb, ctx)),
        |pdb, err, ctx| {
            let delay = ctx.failures.delay(&key(&pdb.metadata));
            tracing::warn!(pdb = %key(&pdb.metadata), error = %err, retry_in = ?delay, "PodDisruptionBudget sync failed");
            Action::requeue(delay)
        },
        ctx,
        budgets,
        queue,
        Config::default().concurrency(1),
    )
    .for_each(|result| async move {
        if let Err(err) = result {
            tracing::debug!(error = %err, "disruption controller");
        }
    })
    .await;
}

async fn reconcile(pdb: Arc<PodDisruptionBudget>, ctx: Arc<Context>) -> Result<Action, Error> {
    let key = key(&pdb.metadata);
    let namespace = pdb.metadata.namespace.clone().unwrap_or_default();
    let in_namespace = |ns: &Option<String>| ns.as_deref() == Some(namespace.as_str());
    let pods = ctx
        .pods
        .state_filter(|p| in_namespace(&p.metadata.namespace));
    let controllers = plan::Controllers {
        replica_sets: ctx
            .replica_sets
            .state_filter(|r| in_namespace(&r.metadata.namespace)),
        deployments: ctx
            .deployments
            .state_filter(|d| in_namespace(&d.metadata.namespace)),
        stateful_sets: ctx
            .stateful_sets
            .state_filter(|s| in_namespace(&s.metadata.namespace)),
        // skiff serves no ReplicationControllers.
        replication_controllers: Vec::new(),
    };
    let now = jiff::Timestamp::now();
    let (status, recheck) = plan::status(&pdb, &pods, &controllers, now);
    if plan::changed(pdb.status.as_ref(), &status) {
        let mut updated = pdb.as_ref().clone();
        updated.status = Some(status);
        let api: Api<PodDisruptionBudget> = Api::namespaced(ctx.client.clone(), &namespace);
        let name = pdb.metadata.name.as_deref().unwrap_or_default();
        match api
            .replace_status(name, &PostParams::default(), &updated)
            .await
        {
            Ok(_) => {}
            Err(err) if status_code(&err) == Some(404) => {}
            Err(source) => return Err(Error::Api { key, source }),
        }
    }
    ctx.failures.forget(&key);
    Ok(match recheck {
        Some(at) => Action::requeue(Duration::try_from(at.duration_since(now)).unwrap_or_default()),
        None => Action::await_change(),
    })
}
