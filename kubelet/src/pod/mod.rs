//! The pods bound to this node: one watch (`spec.nodeName=<node>`) feeds one
//! worker per pod uid, which runs its containers and reports its status.
//! At the first list, what a previous kubelet left is adopted for pods
//! still there and removed for pods deleted meanwhile.

pub mod backoff;
pub mod container;
pub mod events;
pub mod launch;
pub mod shared;
pub mod status;
pub mod worker;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::watcher;
use kube::{Api, Client};
use parking_lot::Mutex;
use skiff_machinery::events::Recorder;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use self::backoff::BackoffConfig;
use self::launch::PodLauncher;
use self::shared::PodShared;
use self::status::PodFacts;
use crate::metrics::KubeletMetrics;
use crate::network::PodNetwork;
use crate::runtime::{ProcessRuntime, RecoveredContainer};

/// What every container start of a pod needs.
pub struct PodContext {
    pub shared: PodShared,
    pub launcher: PodLauncher,
    pub runtime: Arc<ProcessRuntime>,
    pub backoff: BackoffConfig,
    /// How soon a container that could not be configured (a missing
    /// ConfigMap, say) is tried again.
    pub config_retry: Duration,
    /// The pods' own network; `None`: pods share the host's.
    pub network: Option<Arc<PodNetwork>>,
    /// How often a running pod's volumes are written again.
    pub volume_resync: Duration,
    /// The kubelet's one event recorder.
    pub recorder: Recorder,
    /// The kubelet's own metrics.
    pub metrics: Arc<KubeletMetrics>,
}

struct Worker {
    updates: watch::Sender<Option<Arc<Pod>>>,
    context: Arc<PodContext>,
    task: JoinHandle<()>,
}

/// Settings of the pod manager.
#[derive(Clone)]
pub struct PodManagerConfig {
    pub node_name: String,
    pub launcher: PodLauncher,
    pub backoff: BackoffConfig,
    pub config_retry: Duration,
    /// The pods' own network; `None`: pods share the host's.
    pub network: Option<Arc<PodNetwork>>,
    /// How often a running pod's volumes are written again
    /// (`--sync-frequency`).
    pub volume_resync: Duration,
    /// The kubelet's one event recorder.
    pub recorder: Recorder,
    /// The kubelet's own metrics.
    pub metrics: Arc<KubeletMetrics>,
}

pub struct PodManager {
    client: Client,
    config: PodManagerConfig,
    runtime: Arc<ProcessRuntime>,
    workers: Mutex<HashMap<String, Worker>>,
    /// Runs of a previous kubelet, by pod uid, until their pod's worker
    /// takes them.
    recovered: Mutex<HashMap<String, Vec<RecoveredContainer>>>,
    stopping: watch::Sender<bool>,
}

impl PodManager {
    pub fn new(
        client: Client,
        config: PodManagerConfig,
        runtime: Arc<ProcessRuntime>,
        recovered: Vec<RecoveredContainer>,
    ) -> PodManager {
        let mut by_pod: HashMap<String, Vec<RecoveredContainer>> = HashMap::new();
        for run in recovered {
            by_pod.entry(run.id.pod_uid.clone()).or_default().push(run);
        }
        PodManager {
            client,
            config,
            runtime,
            workers: Mutex::new(HashMap::new()),
            recovered: Mutex::new(by_pod),
            stopping: watch::channel(false).0,
        }
    }

    /// Follows the node's pods until the watch ends.
    pub async fn run(self: Arc<Self>) {
        let api: Api<Pod> = Api::all(self.client.clone());
        let selector = format!("spec.nodeName={}", self.config.node_name);
        let stream = watcher(api, watcher::Config::default().fields(&selector));
        let mut stream = std::pin::pin!(stream);
        let mut listing: Option<HashSet<String>> = None;
        let mut first_list = true;
        while let Some(event) = stream.next().await {
            match event {
                Ok(watcher::Event::Apply(pod)) => self.pod_changed(pod),
                Ok(watcher::Event::Delete(pod)) => self.pod_gone(&uid(&pod)),
                Ok(watcher::Event::Init) => listing = Some(HashSet::new()),
                Ok(watcher::Event::InitApply(pod)) => {
                    if let Some(listing) = listing.as_mut() {
                        listing.insert(uid(&pod));
                    }
                    self.pod_changed(pod);
                }
                Ok(watcher::Event::InitDone) => {
                    let present = listing.take().unwrap_or_default();
                    self.relisted(&present, first_list).await;
                    first_list = false;
                }
                Err(err) => {
                    tracing::debug!(error = %err, "kubelet pod watch failed; the watcher retries");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
        }
    }

    fn pod_changed(&self, pod: Pod) {
        let uid = uid(&pod);
        if uid.is_empty() {
            return;
        }
        let pod = Arc::new(pod);
        let mut workers = self.workers.lock();
        if let Some(worker) = workers.get(&uid) {
            let _ = worker.updates.send(Some(pod));
            return;
        }
        let worker = self.start_worker(pod);
        workers.insert(uid, worker);
    }

    fn start_worker(&self, pod: Arc<Pod>) -> Worker {
        let uid = uid(&pod);
        let facts = PodFacts {
            host_ip: self.config.launcher.node.host_ip.clone(),
            pod_ip: self.config.launcher.node.pod_ip.clone(),
            start_time: Some(jiff::Timestamp::now()),
            ..Default::default()
        };
        let context = Arc::new(PodContext {
            shared: PodShared::new(&pod, facts),
            launcher: self.config.launcher.clone(),
            runtime: self.runtime.clone(),
            backoff: self.config.backoff,
            config_retry: self.config.config_retry,
            network: self.config.network.clone(),
            volume_resync: self.config.volume_resync,
            recorder: self.config.recorder.clone(),
            metrics: self.config.metrics.clone(),
        });
        let (updates, receiver) = watch::channel(Some(pod));
        let recovered = self.recovered.lock().remove(&uid).unwrap_or_default();
        let task = tokio::spawn(worker::run_pod(
            context.clone(),
            self.client.clone(),
            receiver,
            recovered,
            self.stopping.subscribe(),
        ));
        Worker {
            updates,
            context,
            task,
        }
    }

    fn pod_gone(&self, uid: &str) {
        if let Some(worker) = self.workers.lock().remove(uid) {
            let _ = worker.updates.send(None);
            // The worker stops its containers and cleans up on its own.
            drop(worker.task);
        }
    }

    /// After a (re)list: pods no longer there are gone; on the first list,
    /// what a previous kubelet left of pods deleted meanwhile is removed.
    async fn relisted(&self, present: &HashSet<String>, first: bool) {
        let missing: Vec<String> = self
            .workers
            .lock()
            .keys()
            .filter(|uid| !present.contains(*uid))
            .cloned()
            .collect();
        for uid in missing {
            self.pod_gone(&uid);
        }
        if !first {
            return;
        }
        self.recovered.lock().retain(|uid, _| present.contains(uid));
        match self.runtime.remove_pods_except(present).await {
            Ok(removed) if !removed.is_empty() => {
                tracing::info!(pods = ?removed, "stopped the containers of pods deleted while the kubelet was away");
            }
            Ok(_) => {}
            Err(err) => tracing::warn!(error = %err, "cleaning up pods of a previous run"),
        }
        for uid in &removed_volume_dirs(&self.config.launcher.pods_dir, present) {
            let _ = crate::volumes::cleanup(&self.config.launcher.pods_dir, uid).await;
        }
        if let Some(network) = &self.config.network {
            let keep: Vec<String> = present.iter().cloned().collect();
            for uid in network.orphaned(&keep) {
                let mut gone = Pod::default();
                gone.metadata.uid = Some(uid.clone());
                match network.tear_down(&gone).await {
                    Ok(()) => {
                        tracing::info!(pod = %uid, "removed the network of a pod deleted while the kubelet was away")
                    }
                    Err(err) => {
                        tracing::warn!(pod = %uid, error = %err, "removing the network of a pod deleted while the kubelet was away")
                    }
                }
            }
        }
    }

    /// The shared state of the pod `namespace/name`, for its logs.
    pub fn pod(&self, namespace: &str, name: &str) -> Option<Arc<PodContext>> {
        self.workers
            .lock()
            .values()
            .find(|w| w.context.shared.namespace == namespace && w.context.shared.name == name)
            .map(|w| w.context.clone())
    }

    /// Every pod's context, for eviction.
    pub fn pods(&self) -> Vec<(Arc<Pod>, Arc<PodContext>)> {
        self.workers
            .lock()
            .values()
            .filter_map(|w| {
                let pod = w.updates.borrow().clone()?;
                Some((pod, w.context.clone()))
            })
            .collect()
    }

    /// Stops every pod's containers (leaving the API as it is) and waits
    /// for them, within `limit`.
    pub async fn stop_all(&self, limit: Duration) {
        let _ = self.stopping.send(true);
        let tasks: Vec<JoinHandle<()>> = self.workers.lock().drain().map(|(_, w)| w.task).collect();
        let all = futures::future::join_all(tasks);
        if tokio::time::timeout(limit, all).await.is_err() {
            tracing::warn!("pods still stopping after {limit:?}; leaving them");
        }
    }
}

/// Pod directories under `pods_dir` whose uid is not present.
fn removed_volume_dirs(pods_dir: &std::path::Path, present: &HashSet<String>) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(pods_dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|uid| !present.contains(uid))
        .collect()
}

fn uid(pod: &Pod) -> String {
    pod.metadata.uid.clone().unwrap_or_default()
}
