//! The DaemonSet controller: one daemon pod on every node the pod template
//! allows (nodeSelector, required node affinity, taints against
//! tolerations), placed through the scheduler by node affinity; rolling
//! updates within maxUnavailable/maxSurge or OnDelete, ControllerRevision
//! history, and the status `kubectl rollout status` reads.

pub mod eligibility;
pub mod events;
#[cfg(test)]
mod fixtures;
pub mod plan;
pub mod pod_control;
pub mod status;
mod sync;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use jiff::Timestamp;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::runtime::controller::{trigger_self, trigger_with, Action, Config};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::Client;
use parking_lot::Mutex;
use skiff_machinery::events::Recorder;
use skiff_machinery::selectors::LabelSelector;

use crate::backoff::Failures;
use crate::common::expectations::Expectations;
use crate::common::informers::Informers;
use crate::common::owners::controller_of;
use crate::common::pods::controller_ref;
use crate::common::workqueue;
use crate::history::HistoryError;
use crate::manager::Controller;

/// The `daemonset` controller of the controller-manager.
pub const CONTROLLER: Controller = Controller {
    name: "daemonset",
    run: |informers, _settings| Box::pin(run(informers)),
};

/// DaemonSets synced at once (`--concurrent-daemonset-syncs`).
pub const CONCURRENT_SYNCS: u16 = 2;

/// The source of its events, as kube-controller-manager names it.
pub const COMPONENT: &str = "daemonset-controller";

/// The first wait before a failed daemon pod is replaced again, doubled
/// each time it fails, up to [`FAILED_POD_BACKOFF_MAX`].
pub const FAILED_POD_BACKOFF: Duration = Duration::from_secs(1);
pub const FAILED_POD_BACKOFF_MAX: Duration = Duration::from_secs(15 * 60);

/// What every sync shares.
pub struct Context {
    client: Client,
    /// Events as `daemonset-controller`.
    recorder: Recorder,
    pods: Store<Pod>,
    nodes: Store<Node>,
    expectations: Mutex<Expectations>,
    failures: Failures,
    /// Per DaemonSet and node: the current back-off and when it was set.
    failed_pods: Mutex<HashMap<(String, String), (Duration, Timestamp)>>,
}

impl Context {
    /// A failed daemon pod on `node` is being replaced: the next one waits longer.
    fn record_failed_pod(&self, key: &str, node: &str, now: Timestamp) {
        let mut failed = self.failed_pods.lock();
        let entry = failed
            .entry((key.to_string(), node.to_string()))
            .or_insert((Duration::ZERO, now));
        let next = match entry.0.is_zero() {
            true => FAILED_POD_BACKOFF,
            false => (entry.0 * 2).min(FAILED_POD_BACKOFF_MAX),
        };
        *entry = (next, now);
    }

    /// How long a failed pod on `node` must still wait to be replaced.
    fn backoff_remaining(&self, key: &str, node: &str, now: Timestamp) -> Option<Duration> {
        let failed = self.failed_pods.lock();
        let (delay, since) = failed.get(&(key.to_string(), node.to_string()))?;
        let waited = Duration::try_from(now.duration_since(*since)).unwrap_or_default();
        delay.checked_sub(waited).filter(|d| !d.is_zero())
    }

    fn forget(&self, key: &str) {
        self.expectations.lock().forget(key);
        self.failed_pods.lock().retain(|(ds, _), _| ds != key);
    }
}

/// Why a sync failed; each is retried with back-off.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "{action} DaemonSet {key}: {}",
        crate::common::api::api_message(source)
    )]
    Api {
        key: String,
        action: &'static str,
        #[source]
        source: kube::Error,
    },
    #[error("DaemonSet {key}: {source}")]
    History {
        key: String,
        #[source]
        source: HistoryError,
    },
    #[error("DaemonSet {0} has no spec")]
    NoSpec(String),
    #[error("DaemonSet {key}: {message}")]
    Manage { key: String, message: String },
}

/// `namespace/name`.
pub fn key_of(ds: &DaemonSet) -> String {
    format!(
        "{}/{}",
        ds.metadata.namespace.as_deref().unwrap_or_default(),
        ds.metadata.name.as_deref().unwrap_or_default()
    )
}

/// `spec.selector` as a matcher.
pub fn selector(ds: &DaemonSet) -> Result<LabelSelector, String> {
    let value =
        serde_json::to_value(ds.spec.as_ref().map(|s| &s.selector)).map_err(|e| e.to_string())?;
    if value.is_null() {
        return Err("spec.selector is missing".into());
    }
    LabelSelector::from_json(&value).map_err(|e| e.message)
}

/// The cached pods of `namespace` controlled by the owner `uid` that its
/// selector matches (any state). Orphans are not adopted.
pub fn controlled_pods(
    pods: &Store<Pod>,
    uid: Option<&str>,
    namespace: &str,
    selector: &LabelSelector,
) -> Vec<Arc<Pod>> {
    pods.state_filter(|pod| {
        let labels = pod.metadata.labels.as_ref();
        pod.metadata.namespace.as_deref() == Some(namespace)
            && controller_ref(pod).is_some_and(|o| Some(o.uid.as_str()) == uid)
            && selector.matches_by(|key| labels.and_then(|l| l.get(key)).map(String::as_str))
    })
}

/// What about a node matters to DaemonSets: its labels, taints and
/// whether it is cordoned. Heartbeats change none of them.
fn node_fingerprint(node: &Node) -> String {
    let spec = node.spec.as_ref();
    serde_json::json!([
        node.metadata.labels,
        spec.and_then(|s| s.taints.as_ref()),
        spec.and_then(|s| s.unschedulable),
    ])
    .to_string()
}

/// Watches DaemonSets, pods and nodes and syncs DaemonSets until aborted.
pub async fn run(informers: Arc<Informers>) {
    let client = informers.client();
    let daemon_sets = informers.all::<DaemonSet>().await;
    let pods = informers.all::<Pod>().await;
    let nodes = informers.all::<Node>().await;
    let ctx = Arc::new(Context {
        client: client.clone(),
        recorder: Recorder::new(client.clone(), COMPONENT, None),
        pods: pods.store,
        nodes: nodes.store,
        expectations: Mutex::new(Expectations::default()),
        failures: Failures::default(),
        failed_pods: Mutex::new(HashMap::new()),
    });
    let ds_ctx = ctx.clone();
    let ds_events = daemon_sets
        .events
        .inspect(move |event| {
            if let Ok(watcher::Event::Delete(ds)) = event {
                ds_ctx.forget(&key_of(ds));
            }
        })
        .touched_objects();
    let pod_ctx = ctx.clone();
    let pod_events = pods
        .events
        .inspect(move |event| pod_ctx.expectations.lock().observe_event(event))
        .touched_objects();
    let seen: Mutex<HashMap<String, String>> = Mutex::new(HashMap::new());
    let node_events = nodes.events.filter_map(move |event| {
        let changed = match event {
            Ok(watcher::Event::Apply(node) | watcher::Event::InitApply(node)) => {
                let name = node.metadata.name.clone().unwrap_or_default();
                let print = node_fingerprint(&node);
                let before = seen.lock().insert(name, print.clone());
                (before.as_ref() != Some(&print)).then_some(Ok(node))
            }
            Ok(watcher::Event::Delete(node)) => {
                seen.lock()
                    .remove(node.metadata.name.as_deref().unwrap_or_default());
                Some(Ok(node))
            }
            Ok(_) => None,
            Err(err) => Some(Err(err)),
        };
        std::future::ready(changed)
    });
    let daemon_sets = daemon_sets.store;
    let by_node = daemon_sets.clone();
    let queue = futures::stream::select(
        trigger_self(ds_events, ()),
        futures::stream::select(
            trigger_with(pod_events, |pod: Pod| controller_of::<DaemonSet>(&pod)),
            trigger_with(node_events, move |_node: Node| {
                by_node
                    .state()
                    .iter()
                    .map(|ds| ObjectRef::from_obj(ds.as_ref()))
                    .collect::<Vec<_>>()
            }),
        ),
    );
    let config = Config::default().concurrency(CONCURRENT_SYNCS);
    workqueue::applier(
        informers.workqueue("daemonset"),
        |ds, ctx| Box::pin(sync::reconcile(ds, ctx)),
        error_policy,
        ctx,
        daemon_sets,
        queue,
        config,
    )
    .for_each(|result| async move {
        if let Err(err) = result {
            tracing::debug!(error = %err, "daemonset controller");
        }
    })
    .await;
}

fn error_policy(ds: Arc<DaemonSet>, err: &Error, ctx: Arc<Context>) -> Action {
    let key = key_of(&ds);
    let delay = ctx.failures.delay(&key);
    tracing::warn!(daemonset = %key, error = %err, retry_in = ?delay, "DaemonSet sync failed");
    Action::requeue(delay)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::daemonset::fixtures::{node, NOW};

    #[test]
    fn node_heartbeats_do_not_change_the_fingerprint() {
        let plain = node("n1").build();
        let mut beat = plain.clone();
        beat.status = None;
        assert_eq!(node_fingerprint(&plain), node_fingerprint(&beat));
        let tainted = node("n1").taint("gpu", "", "NoSchedule").build();
        assert_ne!(node_fingerprint(&plain), node_fingerprint(&tainted));
        let labelled = node("n1").labels(&[("disk", "ssd")]).build();
        assert_ne!(node_fingerprint(&plain), node_fingerprint(&labelled));
    }

    #[tokio::test]
    async fn failed_pod_back_off_doubles_per_node() {
        let client =
            Client::try_from(kube::Config::new("http://127.0.0.1:1".parse().unwrap())).unwrap();
        let (pods, _) = kube::runtime::reflector::store::<Pod>();
        let (nodes, _) = kube::runtime::reflector::store::<Node>();
        let ctx = Context {
            recorder: Recorder::new(client.clone(), COMPONENT, None),
            client,
            pods,
            nodes,
            expectations: Mutex::new(Expectations::default()),
            failures: Failures::default(),
            failed_pods: Mutex::new(HashMap::new()),
        };
        assert_eq!(ctx.backoff_remaining("default/a", "n1", NOW), None);
        ctx.record_failed_pod("default/a", "n1", NOW);
        assert_eq!(
            ctx.backoff_remaining("default/a", "n1", NOW),
            Some(Duration::from_secs(1))
        );
        ctx.record_failed_pod("default/a", "n1", NOW);
        let later = NOW.checked_add(Duration::from_millis(500)).unwrap();
        assert_eq!(
            ctx.backoff_remaining("default/a", "n1", later),
            Some(Duration::from_millis(1500))
        );
        assert_eq!(ctx.backoff_remaining("default/a", "n2", NOW), None);
        ctx.forget("default/a");
        assert_eq!(ctx.backoff_remaining("default/a", "n1", NOW), None);
    }
}
