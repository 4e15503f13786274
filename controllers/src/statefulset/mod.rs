//! The StatefulSet controller: pods with stable names `<set>-<ordinal>`,
//! hostnames and PersistentVolumeClaims, created and removed in order
//! (OrderedReady) or all at once (Parallel), updated from the highest
//! ordinal down to the partition (RollingUpdate) or when deleted
//! (OnDelete), with ControllerRevision history and the status `kubectl
//! rollout status` reads. Binding the claims is the volume binder's.

pub mod events;
#[cfg(test)]
mod fixtures;
pub mod identity;
pub mod plan;
pub mod status;
mod sync;

use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::controller::{trigger_self, trigger_with, Action, Config};
use kube::runtime::reflector::Store;
use kube::runtime::WatchStreamExt;
use kube::Client;
use skiff_machinery::events::Recorder;
use skiff_machinery::selectors::LabelSelector;

use crate::backoff::Failures;
use crate::common::informers::Informers;
use crate::common::owners::controller_of;
use crate::common::workqueue;
use crate::history::HistoryError;
use crate::manager::Controller;

/// The `statefulset` controller of the controller-manager.
pub const CONTROLLER: Controller = Controller {
    name: "statefulset",
    run: |informers, _settings| Box::pin(run(informers)),
};

/// StatefulSets synced at once (`--concurrent-statefulset-syncs`).
pub const CONCURRENT_SYNCS: u16 = 5;

/// The source of its events, as kube-controller-manager names it.
pub const COMPONENT: &str = "statefulset-controller";

/// What every sync shares.
pub struct Context {
    client: Client,
    /// Events as `statefulset-controller`.
    recorder: Recorder,
    pods: Store<Pod>,
    failures: Failures,
}

/// Why a sync failed; each is retried with back-off.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "{action} StatefulSet {key}: {}",
        crate::common::api::api_message(source)
    )]
    Api {
        key: String,
        action: &'static str,
        #[source]
        source: kube::Error,
    },
    #[error("StatefulSet {key}: {source}")]
    History {
        key: String,
        #[source]
        source: HistoryError,
    },
    #[error("StatefulSet {0} has no spec")]
    NoSpec(String),
}

/// `namespace/name`.
pub fn key_of(set: &StatefulSet) -> String {
    format!(
        "{}/{}",
        set.metadata.namespace.as_deref().unwrap_or_default(),
        set.metadata.name.as_deref().unwrap_or_default()
    )
}

/// `spec.selector` as a matcher.
pub fn selector(set: &StatefulSet) -> Result<LabelSelector, String> {
    let value =
        serde_json::to_value(set.spec.as_ref().map(|s| &s.selector)).map_err(|e| e.to_string())?;
    if value.is_null() {
        return Err("spec.selector is missing".into());
    }
    LabelSelector::from_json(&value).map_err(|e| e.message)
}

/// Watches StatefulSets and pods and syncs StatefulSets until aborted.
pub async fn run(informers: Arc<Informers>) {
    let client = informers.client();
    let (sets, set_events) = informers.all::<StatefulSet>().await.into_parts();
    let (pods, pod_events) = informers.all::<Pod>().await.into_parts();
    let ctx = Arc::new(Context {
        client: client.clone(),
        recorder: Recorder::new(client.clone(), COMPONENT, None),
        pods,
        failures: Failures::default(),
    });
    let set_events = set_events.touched_objects();
    let pod_events = pod_events.touched_objects();
    let queue = futures::stream::select(
        trigger_self(set_events, ()),
        trigger_with(pod_events, |pod: Pod| controller_of::<StatefulSet>(&pod)),
    );
    let config = Config::default().concurrency(CONCURRENT_SYNCS);
    workqueue::applier(
        informers.workqueue("statefulset"),
        |set, ctx| Box::pin(sync::reconcile(set, ctx)),
        error_policy,
        ctx,
        sets,
        queue,
        config,
    )
    .for_each(|result| async move {
        if let Err(err) = result {
            tracing::debug!(error = %err, "statefulset controller");
        }
    })
    .await;
}

fn error_policy(set: Arc<StatefulSet>, err: &Error, ctx: Arc<Context>) -> Action {
    let key = key_of(&set);
    let delay = ctx.failures.delay(&key);
    tracing::warn!(statefulset = %key, error = %err, retry_in = ?delay, "StatefulSet sync failed");
    Action::requeue(delay)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::statefulset::fixtures::member;

    #[test]
    fn pods_trigger_the_stateful_set_controlling_them() {
        let pod = member("web", 0, "web-1").build();
        assert_eq!(
            controller_of::<StatefulSet>(&pod),
            Some(kube::runtime::reflector::ObjectRef::new("web").within("default"))
        );
        let other = crate::common::fixtures::pod("x")
            .controlled_by("ReplicaSet", "web")
            .build();
        assert_eq!(controller_of::<StatefulSet>(&other), None);
    }
}
