//! The ReplicaSet controller: keeps `spec.replicas` pods matching each
//! ReplicaSet's selector, adopting and releasing pods by ownerReference,
//! and reports them in its status. Rollouts are the Deployment controller's.

pub mod plan;
pub mod pod_control;
pub mod ranking;
pub mod status;
mod sync;
pub mod triggers;

use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::controller::{trigger_self, trigger_with, Action, Config};
use kube::runtime::reflector::Store;
use kube::runtime::{watcher, WatchStreamExt};
use kube::Client;
use parking_lot::Mutex;
use skiff_machinery::events::Recorder;

pub use sync::key_of;

use crate::backoff::Failures;
use crate::common::api::api_message;
use crate::common::expectations::Expectations;
use crate::common::informers::Informers;
use crate::common::workqueue;
use crate::manager::Controller;
use status::ManageFailure;

/// The `replicaset` controller of the controller-manager.
pub const CONTROLLER: Controller = Controller {
    name: "replicaset",
    run: |informers, _settings| Box::pin(run(informers)),
};

/// ReplicaSets synced at once (kube-controller-manager's
/// `--concurrent-replicaset-syncs` default).
pub const CONCURRENT_SYNCS: u16 = 5;

/// The source of its events, as kube-controller-manager names it.
pub const COMPONENT: &str = "replicaset-controller";

/// What every sync shares: the client, the pod cache, expectations, and
/// the failures behind each ReplicaSet's back-off.
pub struct Context {
    client: Client,
    /// Events as `replicaset-controller`.
    recorder: Recorder,
    pods: Store<Pod>,
    expectations: Mutex<Expectations>,
    failures: Failures,
}

/// Why a sync failed; each is retried with back-off.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{action} ReplicaSet {key}: {}", api_message(source))]
    Api {
        key: String,
        action: &'static str,
        #[source]
        source: kube::Error,
    },
    #[error("ReplicaSet {key} was deleted or replaced since it was cached; it adopts no pods")]
    CannotAdopt { key: String },
    #[error("ReplicaSet {key} could not reach spec.replicas: {failure}")]
    Manage { key: String, failure: ManageFailure },
}

/// Watches ReplicaSets and pods and syncs ReplicaSets until aborted.
pub async fn run(informers: Arc<Informers>) {
    let client = informers.client();
    let replica_sets = informers.all::<ReplicaSet>().await;
    let pods = informers.all::<Pod>().await;
    let ctx = Arc::new(Context {
        client: client.clone(),
        recorder: Recorder::new(client.clone(), COMPONENT, None),
        pods: pods.store,
        expectations: Mutex::new(Expectations::default()),
        failures: Failures::default(),
    });
    let rs_ctx = ctx.clone();
    let rs_events = replica_sets
        .events
        .inspect(move |event| {
            if let Ok(watcher::Event::Delete(rs)) = event {
                rs_ctx.expectations.lock().forget(&key_of(rs));
            }
        })
        .touched_objects();
    let pod_ctx = ctx.clone();
    let pod_events = pods
        .events
        .inspect(move |event| pod_ctx.expectations.lock().observe_event(event))
        .touched_objects();
    let replica_sets = replica_sets.store;
    let cached = replica_sets.clone();
    let queue = futures::stream::select(
        trigger_self(rs_events, ()),
        trigger_with(pod_events, move |pod: Pod| {
            triggers::replica_sets_for_pod(&pod, &cached.state())
        }),
    );
    let config = Config::default().concurrency(CONCURRENT_SYNCS);
    workqueue::applier(
        informers.workqueue("replicaset"),
        |rs, ctx| Box::pin(sync::reconcile(rs, ctx)),
        error_policy,
        ctx,
        replica_sets,
        queue,
        config,
    )
    .for_each(|result| async move {
        if let Err(err) = result {
            tracing::debug!(error = %err, "replicaset controller");
        }
    })
    .await;
}

/// Retries a failed sync after 5ms, 10ms, 20ms, … up to 1000s, per
/// ReplicaSet (kube-controller-manager's default rate limiter).
fn error_policy(rs: Arc<ReplicaSet>, err: &Error, ctx: Arc<Context>) -> Action {
    let key = key_of(&rs);
    let delay = ctx.failures.delay(&key);
    tracing::warn!(replicaset = %key, error = %err, retry_in = ?delay, "ReplicaSet sync failed");
    Action::requeue(delay)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::common::fixtures::{pod, replica_set, NOW};
    use crate::replicaset::plan::{claim, scale, selector, Scale};

    /// A sync that created pods the cache does not show yet: the next
    /// sync must wait for them, not create them again.
    #[test]
    fn expectations_prevent_creating_twice_from_a_stale_cache() {
        let rs = replica_set("web", 3);
        let key = key_of(&rs);
        let mut expectations = Expectations::default();
        let sync = |expectations: &mut Expectations, cache: &[Arc<Pod>]| {
            let satisfied = expectations.satisfied(&key, cache, NOW);
            let claim = claim(&rs, &selector(&rs).unwrap(), cache);
            scale(&rs, &claim.owned, satisfied)
        };
        let Scale::Create(count) = sync(&mut expectations, &[]) else {
            panic!("a first sync creates");
        };
        assert_eq!(count, 3);
        let names: Vec<String> = (0..count).map(|i| format!("web-{i}")).collect();
        expectations.expect_creations(&key, names.clone(), NOW);

        // Stale cache: nothing seen yet, then only some pods.
        assert!(matches!(
            sync(&mut expectations, &[]),
            Scale::AwaitingExpectations
        ));
        let seen: Vec<Arc<Pod>> = names
            .iter()
            .map(|n| Arc::new(pod(n).owned_by(&rs).build()))
            .collect();
        assert!(matches!(
            sync(&mut expectations, &seen[..1]),
            Scale::AwaitingExpectations
        ));
        // Everything seen: steady, nothing more to create.
        assert!(matches!(sync(&mut expectations, &seen), Scale::Steady));
    }
}
