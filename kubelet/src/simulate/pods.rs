//! The pods bound to simulated nodes: one watch of every bound pod; each
//! of ours is moved to Running (after the start delay) with addresses from
//! its node's pod CIDRs, to Succeeded when its run-for annotation says,
//! and deleted once it is being deleted. A pod whose node has no pod CIDR
//! yet waits, as on a real node whose pod network is not ready, until a
//! watch of the simulated Nodes shows the node its CIDRs.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use futures::stream::BoxStream;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::watcher::{self, watcher, Event};
use kube::runtime::WatchStreamExt;
use kube::{Api, Client};
use serde_json::Value;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use super::nodes::{node_pod_cidrs, SimNode, SIMULATED_LABEL};
use super::pod_ips::PodIpError;
use super::pod_status::{run_for, running_status, succeeded_status};
use super::stats::SimulationStats;
use super::usage::SimulatedUsage;

/// Every pod bound to some node; ours are picked out by node name.
pub const BOUND_PODS: &str = "spec.nodeName!=";
/// Attempts of one status write or delete before it is given up.
const ATTEMPTS: u32 = 3;
const RETRY: Duration = Duration::from_secs(1);

type NodeEvents = BoxStream<'static, Result<Event<Node>, watcher::Error>>;

/// What has been set in motion for one pod, so that each step is taken
/// once however many events the pod gets.
#[derive(Debug, Default, Clone, Copy)]
struct Track {
    starting: bool,
    completing: bool,
    deleting: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    Start,
    Complete(Duration),
    Delete,
}

#[derive(Debug, thiserror::Error)]
enum StepError {
    #[error(transparent)]
    Api(#[from] kube::Error),
    #[error(transparent)]
    PodIps(#[from] PodIpError),
}

/// The steps taken for each pod of ours, and the pods waiting for their
/// node's pod CIDRs; kept by the watch loop alone.
#[derive(Debug, Default)]
struct Steps {
    tracked: HashMap<String, Track>,
    /// Node name → pod uid → the pod as last seen.
    waiting: HashMap<String, HashMap<String, Pod>>,
}

impl Steps {
    /// The step due for `pod` on `node`, if one is and it was not taken
    /// yet. A pod to start on a node without pod CIDRs is kept instead,
    /// until `cidrs_learned`.
    fn observe(&mut self, pod: &Pod, node: &SimNode) -> Option<Step> {
        account_addresses(pod, node);
        let uid = uid(pod);
        if waits_for_pod_cidr(pod, node) {
            self.waiting
                .entry(node.name.clone())
                .or_default()
                .insert(uid, pod.clone());
            return None;
        }
        self.stop_waiting(&node.name, &uid);
        self.next_step(pod, uid)
    }

    /// `node` has its pod CIDRs now: the steps of the pods that waited.
    fn cidrs_learned(&mut self, node: &SimNode) -> Vec<(Step, Pod)> {
        let waited = self.waiting.remove(&node.name).unwrap_or_default();
        waited
            .into_values()
            .filter_map(|pod| Some((self.observe(&pod, node)?, pod)))
            .collect()
    }

    /// `pod` is gone from the API.
    fn deleted(&mut self, pod: &Pod, node: Option<&SimNode>) {
        let uid = uid(pod);
        self.tracked.remove(&uid);
        if let Some(node) = node {
            self.stop_waiting(&node.name, &uid);
            node.release_pod_ips(&uid);
        }
    }

    /// After a re-list: the pods not listed were deleted while the watch
    /// was down.
    fn relisted<'a>(
        &mut self,
        listed: &HashSet<String>,
        nodes: impl Iterator<Item = &'a Arc<SimNode>>,
    ) {
        self.tracked.retain(|uid, _| listed.contains(uid));
        for pods in self.waiting.values_mut() {
            pods.retain(|uid, _| listed.contains(uid));
        }
        self.waiting.retain(|_, pods| !pods.is_empty());
        for node in nodes {
            node.retain_pod_ips(|uid| listed.contains(uid));
        }
    }

    fn stop_waiting(&mut self, node: &str, uid: &str) {
        if let Some(pods) = self.waiting.get_mut(node) {
            pods.remove(uid);
            if pods.is_empty() {
                self.waiting.remove(node);
            }
        }
    }

    fn next_step(&mut self, pod: &Pod, uid: String) -> Option<Step> {
        let track = self.tracked.entry(uid).or_default();
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
}

fn host_network(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.host_network)
        .unwrap_or(false)
}

fn pending(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        None | Some("Pending")
    )
}

/// A pod on the pod network, still to start, on a node that cannot give
/// it an address yet. Pods on the host's network need none.
fn waits_for_pod_cidr(pod: &Pod, node: &SimNode) -> bool {
    pod.metadata.deletion_timestamp.is_none()
        && pending(pod)
        && !host_network(pod)
        && !node.has_pod_cidrs()
}

/// Keeps the node's address book as the pod shows it: a finished pod's
/// addresses are free (a kubelet tears its sandbox down), and a running
/// pod's addresses, given before this simulator started, stay its own.
fn account_addresses(pod: &Pod, node: &SimNode) {
    if host_network(pod) {
        return;
    }
    let status = pod.status.as_ref();
    match status.and_then(|s| s.phase.as_deref()) {
        Some("Succeeded" | "Failed") => node.release_pod_ips(&uid(pod)),
        _ => {
            let ips: Vec<String> = status
                .and_then(|s| s.pod_ips.as_ref())
                .into_iter()
                .flatten()
                .map(|ip| ip.ip.clone())
                .collect();
            if !ips.is_empty() {
                node.occupy_pod_ips(&uid(pod), &ips);
            }
        }
    }
}

/// The status patch moving `pod` to Running on `node`: with the node's
/// address when it is on the host's network, else with addresses from the
/// node's pod CIDRs.
fn start_status(pod: &Pod, node: &SimNode, now: Timestamp) -> Result<Value, PodIpError> {
    let pod_ips = match host_network(pod) {
        true => vec![node.host_ip.clone()],
        false => node.allocate_pod_ips(&uid(pod))?,
    };
    Ok(running_status(pod, &pod_ips, &node.host_ip, now))
}

/// The next event of the node watch, or never once it has ended.
async fn next_node_event(
    events: &mut Option<NodeEvents>,
) -> Option<Result<Event<Node>, watcher::Error>> {
    match events {
        Some(events) => events.next().await,
        None => std::future::pending().await,
    }
}

/// Shared by the watch loop and the tasks it starts.
pub struct PodSimulator {
    client: Client,
    nodes: HashMap<String, Arc<SimNode>>,
    writes: Semaphore,
    start_delay: Duration,
    stats: Arc<SimulationStats>,
    /// What the running pods use, for the nodes' Summaries.
    usage: Arc<SimulatedUsage>,
}

impl PodSimulator {
    pub fn new(
        client: Client,
        nodes: &[Arc<SimNode>],
        start_delay: Duration,
        concurrency: usize,
        stats: Arc<SimulationStats>,
        usage: Arc<SimulatedUsage>,
    ) -> PodSimulator {
        PodSimulator {
            client,
            nodes: nodes
                .iter()
                .map(|n| (n.name.clone(), Arc::clone(n)))
                .collect(),
            writes: Semaphore::new(concurrency.max(1)),
            start_delay,
            stats,
            usage,
        }
    }

    /// Watches bound pods forever (re-listing after errors, with
    /// back-off), and the simulated Nodes until every one of ours has its
    /// pod CIDRs (the apiserver lets them be set once, so nothing is left
    /// to learn then).
    pub async fn run(self: Arc<Self>) {
        let api: Api<Pod> = Api::all(self.client.clone());
        let config = watcher::Config::default().fields(BOUND_PODS);
        let mut pod_events = watcher(api, config).default_backoff().boxed();
        // Nothing to learn for no nodes.
        let mut node_events = (!self.nodes.is_empty()).then(|| self.watch_nodes());
        let mut steps = Steps::default();
        let mut tasks = JoinSet::new();
        let mut listed: HashSet<String> = HashSet::new();
        let mut with_cidrs = 0;
        loop {
            tokio::select! {
                event = pod_events.next() => {
                    let Some(event) = event else { return };
                    while tasks.try_join_next().is_some() {}
                    self.pod_event(event, &mut steps, &mut listed, &mut tasks);
                }
                event = next_node_event(&mut node_events) => {
                    let Some(event) = event else {
                        node_events = None;
                        continue;
                    };
                    if self.node_event(event, &mut steps, &mut tasks) {
                        with_cidrs += 1;
                    }
                    if with_cidrs == self.nodes.len() {
                        tracing::info!(nodes = with_cidrs, "every simulated node has its pod CIDRs");
                        node_events = None;
                    }
                }
            }
        }
    }

    /// The simulated Nodes (of every simulator: ours are picked out by
    /// name), for their pod CIDRs.
    fn watch_nodes(&self) -> NodeEvents {
        let api: Api<Node> = Api::all(self.client.clone());
        let config = watcher::Config::default().labels(&format!("{SIMULATED_LABEL}=true"));
        watcher(api, config).default_backoff().boxed()
    }

    fn pod_event(
        self: &Arc<Self>,
        event: Result<Event<Pod>, watcher::Error>,
        steps: &mut Steps,
        listed: &mut HashSet<String>,
        tasks: &mut JoinSet<()>,
    ) {
        match event {
            Ok(Event::Apply(pod)) => self.observe(pod, steps, tasks),
            Ok(Event::InitApply(pod)) => {
                listed.insert(uid(&pod));
                self.observe(pod, steps, tasks);
            }
            Ok(Event::Delete(pod)) => {
                let node = self.node_of(&pod).map(Arc::as_ref);
                if let Some(node) = node {
                    self.usage
                        .pod_gone(&node.name, &uid(&pod), Timestamp::now());
                }
                steps.deleted(&pod, node);
            }
            Ok(Event::Init) => listed.clear(),
            // Pods deleted while the watch was down.
            Ok(Event::InitDone) => {
                self.usage
                    .retain(|uid| listed.contains(uid), Timestamp::now());
                steps.relisted(listed, self.nodes.values());
            }
            Err(err) => {
                tracing::debug!(error = %err, "the simulated nodes' pod watch failed; re-listing")
            }
        }
    }

    /// Learns a node's pod CIDRs from its Node and starts the pods that
    /// waited for them. Whether the node had none before.
    fn node_event(
        self: &Arc<Self>,
        event: Result<Event<Node>, watcher::Error>,
        steps: &mut Steps,
        tasks: &mut JoinSet<()>,
    ) -> bool {
        let node = match event {
            Ok(Event::Apply(node) | Event::InitApply(node)) => node,
            Ok(_) => return false,
            Err(err) => {
                tracing::debug!(error = %err, "the simulated nodes' node watch failed; re-listing");
                return false;
            }
        };
        let Some(sim) = node.metadata.name.as_ref().and_then(|n| self.nodes.get(n)) else {
            return false;
        };
        let cidrs = node_pod_cidrs(&node);
        match sim.set_pod_cidrs(&cidrs) {
            Ok(false) => false,
            Ok(true) => {
                let waited = steps.cidrs_learned(sim);
                tracing::debug!(node = %sim.name, ?cidrs, waiting_pods = waited.len(), "a simulated node has its pod CIDRs");
                for (step, pod) in waited {
                    self.spawn(step, pod, sim, tasks);
                }
                true
            }
            Err(err) => {
                tracing::warn!(node = %sim.name, ?cidrs, error = %err, "a simulated node's pod CIDRs are unusable; its pods wait");
                false
            }
        }
    }

    fn node_of(&self, pod: &Pod) -> Option<&Arc<SimNode>> {
        pod.spec
            .as_ref()
            .and_then(|s| s.node_name.as_ref())
            .and_then(|n| self.nodes.get(n))
    }

    fn observe(self: &Arc<Self>, pod: Pod, steps: &mut Steps, tasks: &mut JoinSet<()>) {
        let Some(node) = self.node_of(&pod) else {
            return;
        };
        self.usage.observe(&node.name, &pod, Timestamp::now());
        if let Some(step) = steps.observe(&pod, node) {
            self.spawn(step, pod, node, tasks);
        }
    }

    fn spawn(self: &Arc<Self>, step: Step, pod: Pod, node: &Arc<SimNode>, tasks: &mut JoinSet<()>) {
        let this = Arc::clone(self);
        let node = Arc::clone(node);
        tasks.spawn(async move { this.take(step, pod, node).await });
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
                Err(StepError::Api(kube::Error::Api(status)))
                    if matches!(status.code, 404 | 409) =>
                {
                    return not_started(step, &pod, &node)
                }
                Err(err) => {
                    tracing::debug!(pod = ?pod.metadata.name, ?step, error = %err, "a simulated pod step failed")
                }
            }
        }
        not_started(step, &pod, &node);
        self.stats.pod_failed();
    }

    async fn write(&self, step: Step, pod: &Pod, node: &SimNode) -> Result<(), StepError> {
        let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
        let name = pod.metadata.name.as_deref().unwrap_or_default();
        let api: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        let patch = match step {
            Step::Start => start_status(pod, node, Timestamp::now())?,
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
                api.delete(name, &params).await?;
                return Ok(());
            }
        };
        api.patch_status(name, &PatchParams::default(), &Patch::Strategic(&patch))
            .await?;
        Ok(())
    }

    fn count(&self, step: Step) {
        match step {
            Step::Start => self.stats.pod_running(),
            Step::Complete(_) => self.stats.pod_succeeded(),
            Step::Delete => self.stats.pod_deleted(),
        }
    }
}

/// A start that was given up: the pod reports no address, so it holds none.
fn not_started(step: Step, pod: &Pod, node: &SimNode) {
    if step == Step::Start && !host_network(pod) {
        node.release_pod_ips(&uid(pod));
    }
}

fn uid(pod: &Pod) -> String {
    pod.metadata.uid.clone().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(uid: &str, spec: Value, status: Value) -> Pod {
        let mut spec = spec;
        spec["nodeName"] = json!("sim-0");
        spec["containers"] = json!([{"name": "app", "image": "nginx"}]);
        serde_json::from_value(json!({
            "metadata": {"name": uid, "namespace": "default", "uid": uid},
            "spec": spec,
            "status": status,
        }))
        .unwrap()
    }

    fn pending(uid: &str) -> Pod {
        pod(uid, json!({}), json!({"phase": "Pending"}))
    }

    fn with_phase(uid: &str, phase: &str, ips: &[&str]) -> Pod {
        let ips: Vec<Value> = ips.iter().map(|ip| json!({ "ip": ip })).collect();
        let status =
            json!({"phase": phase, "podIP": ips.first().map(|i| i["ip"].clone()), "podIPs": ips});
        pod(uid, json!({}), status)
    }

    fn now() -> Timestamp {
        Timestamp::from_second(1_700_000_000).unwrap()
    }

    fn cidrs(cidrs: &[&str]) -> Vec<String> {
        cidrs.iter().map(|c| c.to_string()).collect()
    }

    #[test]
    fn a_pod_waits_for_its_nodes_pod_cidr_then_runs_with_an_address_from_it() {
        let node = SimNode::new("sim", 0);
        let mut steps = Steps::default();
        assert_eq!(steps.observe(&pending("a"), &node), None);
        // Seen again while it waits: still waiting, as last seen.
        let mut later = pending("a");
        later.metadata.labels = Some([("seen".to_string(), "twice".to_string())].into());
        assert_eq!(steps.observe(&later, &node), None);
        assert!(start_status(&later, &node, now()).is_err());
        // Another node's CIDRs start nothing here.
        assert!(steps.cidrs_learned(&SimNode::new("sim", 1)).is_empty());

        assert_eq!(node.set_pod_cidrs(&cidrs(&["10.244.5.0/24"])), Ok(true));
        let started = steps.cidrs_learned(&node);
        assert_eq!(started.len(), 1);
        let (step, pod) = &started[0];
        assert_eq!(*step, Step::Start);
        assert_eq!(pod.metadata.labels, later.metadata.labels);
        let patch = start_status(pod, &node, now()).unwrap();
        assert_eq!(patch["status"]["phase"], "Running");
        assert_eq!(patch["status"]["podIP"], "10.244.5.2");
        assert_eq!(patch["status"]["podIPs"], json!([{"ip": "10.244.5.2"}]));
        assert_eq!(patch["status"]["hostIP"], node.host_ip);
        // Started once, however often it is seen Pending; nothing waits.
        assert_eq!(steps.observe(&pending("a"), &node), None);
        assert!(steps.cidrs_learned(&node).is_empty());
        // A pod arriving now starts at once, with the next address.
        assert_eq!(steps.observe(&pending("b"), &node), Some(Step::Start));
        let patch = start_status(&pending("b"), &node, now()).unwrap();
        assert_eq!(patch["status"]["podIP"], "10.244.5.3");
    }

    #[test]
    fn a_dual_stack_node_gives_each_pod_an_address_of_each_family() {
        let node = SimNode::new("sim", 0);
        let dual = cidrs(&["10.244.5.0/24", "fd00:10:244:5::/64"]);
        assert_eq!(node.set_pod_cidrs(&dual), Ok(true));
        let patch = start_status(&pending("a"), &node, now()).unwrap();
        assert_eq!(patch["status"]["podIP"], "10.244.5.2");
        assert_eq!(
            patch["status"]["podIPs"],
            json!([{"ip": "10.244.5.2"}, {"ip": "fd00:10:244:5::2"}])
        );
    }

    #[test]
    fn a_host_network_pod_starts_at_once_with_its_nodes_address() {
        let node = SimNode::new("sim", 4);
        let mut steps = Steps::default();
        let host = pod(
            "h",
            json!({"hostNetwork": true}),
            json!({"phase": "Pending"}),
        );
        assert_eq!(steps.observe(&host, &node), Some(Step::Start));
        let patch = start_status(&host, &node, now()).unwrap();
        assert_eq!(patch["status"]["podIP"], "100.64.0.4");
        assert_eq!(patch["status"]["hostIP"], "100.64.0.4");
        // It took nothing from the pod CIDR.
        assert_eq!(node.set_pod_cidrs(&cidrs(&["10.244.0.0/30"])), Ok(true));
        assert_eq!(node.allocate_pod_ips("other").unwrap(), ["10.244.0.2"]);
    }

    #[test]
    fn a_waiting_pod_that_goes_is_not_started_later() {
        let node = SimNode::new("sim", 0);
        let mut steps = Steps::default();
        assert_eq!(steps.observe(&pending("gone"), &node), None);
        assert_eq!(steps.observe(&pending("deleting"), &node), None);
        assert_eq!(steps.observe(&pending("unlisted"), &node), None);
        steps.deleted(&pending("gone"), Some(&node));
        let mut deleting = pending("deleting");
        deleting.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now()));
        assert_eq!(steps.observe(&deleting, &node), Some(Step::Delete));
        steps.relisted(&HashSet::from(["deleting".to_string()]), std::iter::empty());
        assert_eq!(node.set_pod_cidrs(&cidrs(&["10.244.0.0/24"])), Ok(true));
        assert!(steps.cidrs_learned(&node).is_empty());
    }

    #[test]
    fn addresses_of_finished_deleted_or_unstarted_pods_are_freed() {
        // A /30 has one address to give: .2.
        let node = Arc::new(SimNode::new("sim", 0));
        assert_eq!(node.set_pod_cidrs(&cidrs(&["10.244.0.0/30"])), Ok(true));
        let mut steps = Steps::default();
        // Running from before this simulator started: its address is taken.
        assert_eq!(
            steps.observe(&with_phase("old", "Running", &["10.244.0.2"]), &node),
            None
        );
        assert!(matches!(
            start_status(&pending("a"), &node, now()),
            Err(PodIpError::Exhausted(_))
        ));
        // It finished: the address is free again.
        assert_eq!(
            steps.observe(&with_phase("old", "Succeeded", &["10.244.0.2"]), &node),
            None
        );
        start_status(&pending("a"), &node, now()).unwrap();
        steps.deleted(&pending("a"), Some(&node));
        start_status(&pending("b"), &node, now()).unwrap();
        // Gone while the watch was down.
        steps.relisted(&HashSet::new(), [&node].into_iter());
        start_status(&pending("c"), &node, now()).unwrap();
        // A start given up frees it too.
        not_started(Step::Start, &pending("c"), &node);
        let patch = start_status(&pending("d"), &node, now()).unwrap();
        assert_eq!(patch["status"]["podIP"], "10.244.0.2");
    }
}
