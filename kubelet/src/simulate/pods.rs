//! The pods bound to simulated nodes: one watch of every bound pod; each
//! of ours is moved to Running (after the start delay), to Succeeded when
//! its run-for annotation says, and deleted once it is being deleted.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::watcher::{self, watcher, Event};
use kube::runtime::WatchStreamExt;
use kube::{Api, Client};
use parking_lot::Mutex;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use super::nodes::SimNode;
use super::pod_status::{run_for, running_status, succeeded_status};
use super::stats::SimulationStats;

/// Every pod bound to some node; ours are picked out by node name.
pub const BOUND_PODS: &str = "spec.nodeName!=";
/// Attempts of one status write or delete before it is given up.
const ATTEMPTS: u32 = 3;
const RETRY: Duration = Duration::from_secs(1);

/// What has been set in motion for one pod, so that each step is taken
/// once however many events the pod gets.
#[derive(Debug, Default, Clone, Copy)]
struct Track {
    starting: bool,
    completing: bool,
    deleting: bool,
}

/// Shared by the watch loop and the tasks it starts.
pub struct PodSimulator {
    client: Client,
    nodes: HashMap<String, Arc<SimNode>>,
    tracked: Mutex<HashMap<String, Track>>,
    writes: Semaphore,
    start_delay: Duration,
    stats: Arc<SimulationStats>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    Start,
    Complete(Duration),
    Delete,
}

impl PodSimulator {
    pub fn new(
        client: Client,
        nodes: &[Arc<SimNode>],
        start_delay: Duration,
        concurrency: usize,
        stats: Arc<SimulationStats>,
    ) -> PodSimulator {
        PodSimulator {
            client,
            nodes: nodes
                .iter()
                .map(|n| (n.name.clone(), Arc::clone(n)))
                .collect(),
            tracked: Mutex::new(HashMap::new()),
            writes: Semaphore::new(concurrency.max(1)),
            start_delay,
            stats,
        }
    }

    /// Watches bound pods forever (re-listing after errors, with back-off).
    pub async fn run(self: Arc<Self>) {
        let api: Api<Pod> = Api::all(self.client.clone());
        let config = watcher::Config::default().fields(BOUND_PODS);
        let mut events = watcher(api, config).default_backoff().boxed();
        let mut tasks = JoinSet::new();
        let mut listed: HashSet<String> = HashSet::new();
        while let Some(event) = events.next().await {
            while tasks.try_join_next().is_some() {}
            match event {
                Ok(Event::Apply(pod)) => self.observe(&pod, &mut tasks),
                Ok(Event::InitApply(pod)) => {
                    listed.insert(uid(&pod));
                    self.observe(&pod, &mut tasks);
                }
                Ok(Event::Delete(pod)) => {
                    self.tracked.lock().remove(&uid(&pod));
                }
                Ok(Event::Init) => listed.clear(),
                Ok(Event::InitDone) => {
                    // Pods deleted while the watch was down.
                    self.tracked.lock().retain(|uid, _| listed.contains(uid));
                }
                Err(err) => {
                    tracing::debug!(error = %err, "the simulated nodes' pod watch failed; re-listing")
                }
            }
        }
    }

    fn observe(self: &Arc<Self>, pod: &Pod, tasks: &mut JoinSet<()>) {
        let Some(node) = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_ref())
            .and_then(|n| self.nodes.get(n))
        else {
            return;
        };
        let Some(step) = self.next_step(pod) else {
            return;
        };
        let this = Arc::clone(self);
        let node = Arc::clone(node);
        let pod = pod.clone();
        tasks.spawn(async move { this.take(step, pod, node).await });
    }

    /// The step due for `pod`, if one is and it was not taken yet.
    fn next_step(&self, pod: &Pod) -> Option<Step> {
        let mut tracked = self.tracked.lock();
        let track = tracked.entry(uid(pod)).or_default();
        if pod.metadata.deletion_timestamp.is_some() {
            return (!std::mem::replace(&mut track.deleting, true)).then_some(Step::Delete);
        }
        let status = pod.status.as_ref();
        match status.and_then(|s| s.phase.as_deref()) {
            None | Some("Pending") => {
                (!std::mem::replace(&mut track.starting, true)).then_some(Step::Start)
            }
            Some("Running") => {
                let run_for = run_for(pod)?;
                let started = status.and_then(|s| s.start_time.as_ref()).map(|t| t.0);
                let ran = started
                    .and_then(|t| Timestamp::now().duration_since(t).try_into().ok())
                    .unwrap_or(Duration::ZERO);
                (!std::mem::replace(&mut track.completing, true))
                    .then_some(Step::Complete(run_for.saturating_sub(ran)))
            }
            Some(_) => None,
        }
    }

    async fn take(&self, step: Step, pod: Pod, node: Arc<SimNode>) {
        let wait = match step {
            Step::Start => self.start_delay,
            Step::Complete(after) => after,
            Step::Delete => Duration::ZERO,
        };
        tokio::time::sleep(wait).await;
        for attempt in 0..ATTEMPTS {
            if attempt > 0 {
                tokio::time::sleep(RETRY).await;
            }
            let result = {
                let Ok(_permit) = self.writes.acquire().await else {
                    return;
                };
                self.write(step, &pod, &node).await
            };
            match result {
                Ok(()) => return self.count(step),
                // Gone, or replaced by a pod of the same name: nothing to do.
                Err(kube::Error::Api(status)) if matches!(status.code, 404 | 409) => return,
                Err(err) => {
                    tracing::debug!(pod = ?pod.metadata.name, ?step, error = %err, "a simulated pod step failed")
                }
            }
        }
        self.stats.pod_failed();
    }

    async fn write(&self, step: Step, pod: &Pod, node: &SimNode) -> Result<(), kube::Error> {
        let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
        let name = pod.metadata.name.as_deref().unwrap_or_default();
        let api: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        let patch = match step {
            Step::Start => running_status(
                pod,
                &node.allocate_pod_ip(),
                &node.host_ip,
                Timestamp::now(),
            ),
            // The pod as seen Running: its status is the one we wrote.
            Step::Complete(_) => succeeded_status(pod, Timestamp::now()),
            Step::Delete => {
                let params = DeleteParams {
                    grace_period_seconds: Some(0),
                    preconditions: Some(Preconditions {
                        uid: pod.metadata.uid.clone(),
                        resource_version: None,
                    }),
                    ..DeleteParams::default()
                };
                return api.delete(name, &params).await.map(drop);
            }
        };
        api.patch_status(name, &PatchParams::default(), &Patch::Strategic(&patch))
            .await
            .map(drop)
    }

    fn count(&self, step: Step) {
        match step {
            Step::Start => self.stats.pod_running(),
            Step::Complete(_) => self.stats.pod_succeeded(),
            Step::Delete => self.stats.pod_deleted(),
        }
    }
}

fn uid(pod: &Pod) -> String {
    pod.metadata.uid.clone().unwrap_or_default()
}
