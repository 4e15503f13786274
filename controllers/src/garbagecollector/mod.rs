//! The garbage collector: deletes objects whose owners (ownerReferences)
//! are gone, and finishes Foreground and Orphan deletions of owners, over
//! metadata-only watches of every resource API discovery reports.

pub mod decide;
pub mod events;
pub mod graph;
pub mod monitors;
pub mod queue;
pub mod worker;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use kube::discovery::ApiResource;
use kube::Client;
use parking_lot::{Mutex, RwLock};
use skiff_machinery::events::Recorder;
use tokio::task::{AbortHandle, JoinSet};

use crate::common::informers::Informers;
use crate::manager::Controller;
use graph::Graph;
use monitors::Catalog;
use queue::WorkQueue;

pub const CONTROLLER: Controller = Controller {
    name: "garbagecollector",
    run: |informers, _settings| Box::pin(run(informers)),
};

/// How often discovery runs again, so that new resources (CRDs) are watched.
const DISCOVERY_PERIOD: Duration = Duration::from_secs(30);
/// How long workers wait for the first lists before starting anyway.
const SYNC_TIMEOUT: Duration = Duration::from_secs(60);
/// Objects processed at once.
const WORKERS: usize = 4;

/// What the monitors and workers share.
pub struct GarbageCollector {
    client: Client,
    /// Events as `garbage-collector-controller`.
    recorder: Recorder,
    /// The controllers' informers, whose watches of pods, nodes, … the
    /// collector shares.
    informers: Arc<Informers>,
    graph: Mutex<Graph>,
    queue: WorkQueue,
    catalog: RwLock<Catalog>,
    /// Resources whose first list has been seen.
    synced: Mutex<HashSet<ApiResource>>,
}

/// Runs the garbage collector until its task is aborted (its monitors and
/// workers are aborted with it).
pub async fn run(informers: Arc<Informers>) {
    let client = informers.client();
    let queue = WorkQueue::new(informers.workqueue(queue::NAME));
    let collector = Arc::new(GarbageCollector {
        recorder: Recorder::new(client.clone(), events::COMPONENT, None),
        client,
        informers,
        graph: Mutex::default(),
        queue,
        catalog: RwLock::default(),
        synced: Mutex::default(),
    });
    let mut monitors = Monitors::default();
    while let Err(err) = monitors.resync(&collector).await {
        tracing::warn!(error = %err, "garbage collector: discovery failed; retrying");
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
    monitors.wait_for_sync(&collector).await;
    let mut workers = JoinSet::new();
    for _ in 0..WORKERS {
        workers.spawn(worker::run(collector.clone()));
    }
    tracing::info!(
        objects = collector.graph.lock().len(),
        "garbage collector: started"
    );
    loop {
        tokio::time::sleep(DISCOVERY_PERIOD).await;
        if let Err(err) = monitors.resync(&collector).await {
            tracing::warn!(error = %err, "garbage collector: discovery failed; watching what was found before");
        }
    }
}

/// The running watch of each resource.
#[derive(Default)]
struct Monitors {
    tasks: JoinSet<()>,
    running: HashMap<ApiResource, AbortHandle>,
}

impl Monitors {
    /// Discovers resources again: watches new ones, stops removed ones
    /// (their objects are gone), restarts any whose watch ended.
    async fn resync(&mut self, collector: &Arc<GarbageCollector>) -> Result<(), kube::Error> {
        let catalog = monitors::discover(&collector.client).await?;
        self.reap();
        let served: HashSet<&ApiResource> = catalog.watched.iter().map(|s| &*s.resource).collect();
        let removed: Vec<ApiResource> = self
            .running
            .keys()
            .filter(|r| !served.contains(r))
            .cloned()
            .collect();
        for resource in removed {
            self.stop(collector, &resource);
        }
        for served in &catalog.watched {
            if !self.running.contains_key(&served.resource) {
                tracing::debug!(resource = %served.resource.plural, api_version = %served.resource.api_version, "garbage collector: watching");
                let handle = self
                    .tasks
                    .spawn(monitors::monitor(collector.clone(), served.clone()));
                self.running.insert((*served.resource).clone(), handle);
            }
        }
        *collector.catalog.write() = catalog;
        Ok(())
    }

    fn stop(&mut self, collector: &GarbageCollector, resource: &ApiResource) {
        if let Some(handle) = self.running.remove(resource) {
            handle.abort();
        }
        collector.synced.lock().remove(resource);
        let work = collector.graph.lock().resource_removed(resource);
        for uid in work {
            collector.queue.add(uid);
        }
    }

    /// Forgets watches that ended, so that the next resync restarts them.
    fn reap(&mut self) {
        while let Some(ended) = self.tasks.try_join_next_with_id() {
            let id = match ended {
                Ok((id, ())) => id,
                Err(err) => {
                    tracing::error!(error = %err, "garbage collector: a watch ended");
                    err.id()
                }
            };
            self.running.retain(|_, handle| handle.id() != id);
        }
    }

    /// Waits until every watched resource was listed once, or the timeout.
    async fn wait_for_sync(&self, collector: &GarbageCollector) {
        let deadline = tokio::time::Instant::now() + SYNC_TIMEOUT;
        loop {
            let pending: Vec<String> = {
                let synced = collector.synced.lock();
                self.running
                    .keys()
                    .filter(|r| !synced.contains(*r))
                    .map(|r| format!("{}.{}", r.plural, r.group))
                    .collect()
            };
            if pending.is_empty() {
                return;
            }
            if tokio::time::Instant::now() >= deadline {
                tracing::warn!(
                    ?pending,
                    "garbage collector: starting before every resource was listed"
                );
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}
