//! The scheduling loop: pop a pod, run its profile's scheduling cycle on a
//! snapshot of the cache, assume it on the chosen node, and bind it in the
//! background; on failure, preempt (PostFilter), record why (an event and
//! the PodScheduled condition) and requeue.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use rand::SeedableRng;
use serde_json::{json, Value};

use crate::cache::Cache;
use crate::config::SchedulerConfig;
use crate::extender::{self, Extender};
use crate::framework::{Binder, Code, CycleState, PodInfo, Profile, ScheduleFailure, Snapshot};
use crate::metrics::Metrics;
use crate::plugins::default_preemption;
use crate::queue::{Popped, SchedulingQueue};
use crate::watch::pod_info;
use skiff_machinery::events::{EventType, Recorder};

/// Binding cycles going on at once;
/// the scheduling loop waits for one to end before it binds another pod.
/// Unbounded, a stall of the API (a slow disk sync) piles up a binding per
/// pod scheduled meanwhile, past the API's writes in flight (200 by
/// default), and the API refuses them.
const BINDING_CYCLES: usize = 100;
/// Times a write refused with 429 TooManyRequests is sent again, each after
/// [`RETRY_AFTER`], as client-go retries (it waits for the response's
/// Retry-After, which skiff and kube-apiserver set to one second), plus up
/// to as long again at random: bindings refused together would otherwise
/// all come back in the same instant and be refused together again.
const RETRIES_ON_TOO_MANY: u32 = 10;
const RETRY_AFTER: Duration = Duration::from_secs(1);

/// The field manager and event source of this scheduler.
pub const COMPONENT: &str = "default-scheduler";

pub struct Scheduler {
    pub client: Client,
    pub queue: SchedulingQueue,
    cache: Mutex<Cache>,
    profiles: HashMap<String, Arc<Profile>>,
    extenders: Vec<Arc<Extender>>,
    pub metrics: Arc<Metrics>,
    /// Pods nominated to a node by preemption: key → (node, pod).
    nominated: Mutex<HashMap<String, (String, Arc<PodInfo>)>>,
    /// The pods' events.
    recorder: Recorder,
    /// One permit per binding cycle under way.
    binding_cycles: Arc<tokio::sync::Semaphore>,
}

impl Scheduler {
    pub fn new(client: Client, config: &SchedulerConfig, metrics: Arc<Metrics>) -> Scheduler {
        Scheduler {
            recorder: Recorder::new(client.clone(), COMPONENT, None),
            client,
            queue: SchedulingQueue::new(config.queue),
            cache: Mutex::new(Cache::new()),
            profiles: config
                .profiles
                .iter()
                .map(|p| (p.scheduler_name.clone(), p.clone()))
                .collect(),
            extenders: config.extenders.clone(),
            metrics,
            nominated: Mutex::new(HashMap::new()),
            binding_cycles: Arc::new(tokio::sync::Semaphore::new(BINDING_CYCLES)),
        }
    }

    pub fn with_cache<T>(&self, f: impl FnOnce(&mut Cache) -> T) -> T {
        f(&mut self.cache.lock().unwrap_or_else(|e| e.into_inner()))
    }

    fn profile_of(&self, pod: &Pod) -> Option<&Arc<Profile>> {
        let name = pod
            .spec
            .as_ref()
            .and_then(|s| s.scheduler_name.as_deref())
            .unwrap_or(crate::config::DEFAULT_SCHEDULER_NAME);
        self.profiles.get(name)
    }

    /// A pod was added or changed.
    pub fn pod_changed(&self, pod: Pod) {
        let key = crate::framework::node_info::pod_key(&pod);
        let assigned = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .is_some_and(|n| !n.is_empty());
        if assigned {
            self.queue.delete(&key);
            self.forget_nomination(&key);
            self.with_cache(|cache| cache.set_pod(pod));
            return;
        }
        let finished = matches!(
            pod.status.as_ref().and_then(|s| s.phase.as_deref()),
            Some("Succeeded" | "Failed")
        );
        let Some(profile) = self.profile_of(&pod).cloned() else {
            return; // another scheduler's pod
        };
        if finished || pod.metadata.deletion_timestamp.is_some() {
            self.queue.delete(&key);
            return;
        }
        if self.with_cache(|cache| cache.is_assumed(&key)) {
            return; // being bound by us
        }
        let info = pod_info(pod);
        let admitted = profile.pre_enqueue(&info).is_success();
        self.queue.update(info, admitted);
    }

    pub fn pod_deleted(&self, key: &str) {
        self.queue.delete(key);
        self.forget_nomination(key);
        self.with_cache(|cache| cache.remove_pod(key));
        self.queue.move_all_unschedulable();
    }

    pub fn pods_relisted(&self, seen: &HashSet<String>) {
        self.with_cache(|cache| cache.retain_pods(seen));
        self.queue.move_all_unschedulable();
    }

    fn forget_nomination(&self, key: &str) {
        self.nominated
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(key);
    }

    /// Schedules pods until the queue is closed.
    pub async fn run(self: Arc<Self>) {
        let mut snapshot = Snapshot::default();
        let mut next_start = 0usize;
        let mut rng = rand::rngs::StdRng::from_entropy();
        while let Some(popped) = self.queue.pop().await {
            self.schedule_one(popped, &mut snapshot, &mut next_start, &mut rng)
                .await;
        }
    }

    /// Pushes pods out of back-off and stale unschedulable ones back,
    /// once a second, and keeps the queue gauges current.
    pub async fn flush_loop(self: Arc<Self>) {
        let mut tick = tokio::time::interval(Duration::from_millis(200));
        loop {
            tick.tick().await;
            self.queue.flush();
            self.metrics.set_queue(self.queue.lengths());
        }
    }

    async fn schedule_one(
        self: &Arc<Self>,
        popped: Popped,
        snapshot: &mut Snapshot,
        next_start: &mut usize,
        rng: &mut rand::rngs::StdRng,
    ) {
        let started = std::time::Instant::now();
        let pod = popped.pod.info.clone();
        let Some(profile) = self.profile_of(&pod.pod).cloned() else {
            self.queue.done(&pod.key);
            return;
        };
        self.with_cache(|cache| cache.update_snapshot(snapshot));
        let cycle_snapshot = self.with_nominated(snapshot, &pod);
        let snap = cycle_snapshot.as_ref().unwrap_or(snapshot);
        let mut state = CycleState::default();
        let result = match self.nominated_node_fits(&profile, &pod, snap).await {
            Some(node) => Ok(crate::framework::ScheduleResult {
                node,
                evaluated: 1,
                feasible: 1,
            }),
            None if self.extenders.is_empty() => {
                profile.schedule(&mut state, &pod, snap, next_start, rng)
            }
            None => {
                self.schedule_with_extenders(&profile, &mut state, &pod, snap, next_start, rng)
                    .await
            }
        };
        match result {
            Ok(result) => {
                self.metrics
                    .attempt("scheduled", &profile.scheduler_name, started.elapsed());
                self.assume_and_bind(profile, popped, state, result.node)
                    .await;
            }
            Err(ScheduleFailure::Unfit(fit)) => {
                let mut message = fit.message();
                let mut preemption = None;
                if profile.has(crate::framework::Point::PostFilter) {
                    // What preemption's what-ifs run: this profile's
                    // PreFilter and Filter plugins.
                    let (pre_filter, filter) = default_preemption::profile_runners(profile.clone());
                    state.write(default_preemption::PRE_FILTERS_KEY, pre_filter);
                    state.write(default_preemption::FILTERS_KEY, filter);
                    // A PreFilter rejection holds for every node.
                    let statuses = match &fit.pre_filter {
                        Some(status) => snap
                            .nodes
                            .iter()
                            .map(|n| (n.name().to_string(), status.clone()))
                            .collect(),
                        None => fit.statuses.clone(),
                    };
                    let (outcome, status) = profile.run_post_filter(&state, &pod, snap, &statuses);
                    match outcome.nominated_node {
                        Some(node) if status.is_success() => {
                            // The next cycles see the nomination at once.
                            self.nominate(&pod, &node);
                            preemption = Some((node, outcome.victims));
                        }
                        _ => {
                            if !status.reasons.is_empty()
                                && status.plugin == default_preemption::NAME
                            {
                                message = format!("{message} {}", status.message());
                            }
                        }
                    }
                }
                self.metrics
                    .attempt("unschedulable", &profile.scheduler_name, started.elapsed());
                // The failure's writes (the victims' deletions, the
                // nomination, the event and the condition) go on beside the
                // next cycles instead of holding them up: one after the
                // other they took tens of milliseconds per pod. The pod
                // stays in flight until they are done, so its next attempt
                // sees them, and a change meanwhile sends it to back-off.
                let this = self.clone();
                tokio::spawn(async move {
                    if let Some((node, victims)) = preemption {
                        this.preempt(&pod, &node, &victims).await;
                    }
                    this.record_failure(&pod, "Unschedulable", &message).await;
                    this.queue.unschedulable(&popped);
                });
            }
            Err(ScheduleFailure::Error(status)) => {
                self.metrics
                    .attempt("error", &profile.scheduler_name, started.elapsed());
                self.record_failure(&pod, "SchedulerError", &status.to_string())
                    .await;
                self.queue.retry(&popped);
            }
        }
    }

    /// A scheduling cycle with the HTTP extenders: they filter what the
    /// Filter plugins left and add their priorities to the scores, as
    /// kube-scheduler's findNodesThatPassExtenders and prioritizeNodes.
    async fn schedule_with_extenders(
        &self,
        profile: &Profile,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
        next_start: &mut usize,
        rng: &mut rand::rngs::StdRng,
    ) -> Result<crate::framework::ScheduleResult, ScheduleFailure> {
        let mut feasible = profile.filter_nodes(state, pod, snapshot, next_start)?;
        let nodes = std::mem::take(&mut feasible.nodes);
        feasible.nodes = extender::run_extenders_filter(
            &self.extenders,
            &pod.pod,
            nodes,
            &mut feasible.statuses,
        )
        .await
        .map_err(ScheduleFailure::Error)?;
        let nodes = feasible.check(snapshot.nodes.len())?;
        if nodes.len() == 1 {
            return Ok(feasible.result(nodes[0].name().to_string()));
        }
        let mut totals = profile
            .score(state, pod, nodes)
            .map_err(ScheduleFailure::Error)?;
        extender::run_extenders_prioritize(&self.extenders, &pod.pod, nodes, &mut totals).await;
        Ok(feasible.result(crate::framework::select_host(&totals, rng)))
    }

    /// A pod nominated to a node by an earlier preemption tries that node
    /// first, as kube-scheduler does.
    async fn nominated_node_fits(
        &self,
        profile: &Profile,
        pod: &PodInfo,
        snapshot: &Snapshot,
    ) -> Option<String> {
        let node = pod
            .pod
            .status
            .as_ref()
            .and_then(|s| s.nominated_node_name.as_deref())
            .filter(|n| !n.is_empty())?;
        let info = snapshot.get(node)?;
        let mut state = CycleState::default();
        let narrowed = profile.run_pre_filter(&mut state, pod, snapshot).ok()?;
        if narrowed
            .node_names
            .is_some_and(|names| !names.contains(node))
        {
            return None;
        }
        if !profile.run_filters(&state, pod, info).is_success() {
            return None;
        }
        let mut statuses = crate::framework::NodeStatuses::new();
        let passed = extender::run_extenders_filter(
            &self.extenders,
            &pod.pod,
            vec![info.clone()],
            &mut statuses,
        )
        .await
        .ok()?;
        (!passed.is_empty()).then(|| node.to_string())
    }

    /// The snapshot with the pods nominated elsewhere, of at least this
    /// pod's priority, placed on their nodes, so that room made by a
    /// preemption is not taken by a lower-priority pod. `None`: no such
    /// nomination.
    fn with_nominated(&self, snapshot: &Snapshot, pod: &PodInfo) -> Option<Snapshot> {
        let nominated = self.nominated.lock().unwrap_or_else(|e| e.into_inner());
        let mut relevant: Vec<(String, Arc<PodInfo>)> = nominated
            .iter()
            .filter(|(key, (_, other))| **key != pod.key && other.priority() >= pod.priority())
            .map(|(_, (node, other))| (node.clone(), other.clone()))
            .collect();
        drop(nominated);
        // A nominated pod the cache already places is counted there.
        self.with_cache(|cache| relevant.retain(|(_, other)| cache.node_of(&other.key).is_none()));
        if relevant.is_empty() {
            return None;
        }
        let mut copy = snapshot.clone();
        for (node, other) in relevant {
            if let Some(info) = copy.get(&node) {
                let mut info = (**info).clone();
                info.add_pod(other);
                copy.replace(Arc::new(info));
            }
        }
        Some(copy)
    }

    async fn assume_and_bind(
        self: &Arc<Self>,
        profile: Arc<Profile>,
        popped: Popped,
        mut state: CycleState,
        node: String,
    ) {
        let pod = popped.pod.info.clone();
        self.with_cache(|cache| cache.assume(pod.clone(), &node));
        // Assumed, it counts on its node already: a nomination too would
        // count it twice for the pods scheduled meanwhile.
        self.forget_nomination(&pod.key);
        let reserved = profile.run_reserve(&mut state, &pod, &node);
        if !reserved.is_success() {
            self.with_cache(|cache| cache.forget(&pod.key));
            self.record_failure(&pod, "SchedulerError", &reserved.to_string())
                .await;
            self.queue.retry(&popped);
            return;
        }
        let (permit, wait) = profile.run_permit(&state, &pod, &node);
        if permit.is_rejection() || permit.code == Code::Error {
            profile.run_unreserve(&mut state, &pod, &node);
            self.with_cache(|cache| cache.forget(&pod.key));
            self.record_failure(&pod, "Unschedulable", &permit.to_string())
                .await;
            self.queue.unschedulable(&popped);
            return;
        }
        // The semaphore is never closed: acquiring fails only if it were.
        let cycle = Arc::clone(&self.binding_cycles).acquire_owned().await.ok();
        let scheduler = self.clone();
        tokio::spawn(async move {
            let _cycle = cycle;
            if permit.code == Code::Wait {
                // No in-tree plugin allows a waiting pod early: it is
                // released when its wait ends, as an allowed one would be.
                tokio::time::sleep(wait).await;
            }
            let binder = ApiBinder(scheduler.client.clone());
            let mut bound = profile.run_pre_bind(&binder, &pod, &node).await;
            if bound.is_success() {
                // An extender that binds does it in place of the plugins.
                bound = match extender::run_extenders_bind(&scheduler.extenders, &pod.pod, &node)
                    .await
                {
                    Some(status) => status,
                    None => profile.run_bind_plugins(&binder, &pod, &node).await,
                };
            }
            if bound.is_success() {
                scheduler.queue.done(&pod.key);
                scheduler.forget_nomination(&pod.key);
                scheduler.metrics.bound(popped.pod.first_seen.elapsed());
                let message = format!("Successfully assigned {} to {node}", pod.key);
                scheduler.event(&pod, EventType::Normal, "Scheduled", &message);
            } else {
                profile.run_unreserve(&mut state, &pod, &node);
                scheduler.with_cache(|cache| cache.forget(&pod.key));
                let message = format!("Binding rejected: {bound}");
                scheduler
                    .record_failure(&pod, "SchedulerError", &message)
                    .await;
                scheduler.queue.retry(&popped);
            }
        });
    }

    /// Records that `pod` waits for room on `node`: the cycles after this
    /// one count it there (for pods of lower or equal priority).
    fn nominate(&self, pod: &PodInfo, node: &str) {
        self.nominated
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(pod.key.clone(), (node.to_string(), Arc::new(pod.clone())));
    }

    /// Carries out a preemption [`Self::nominate`]d: the pod's status
    /// says its nominatedNodeName, and the victims are deleted gracefully,
    /// all at once.
    async fn preempt(&self, pod: &PodInfo, node: &str, victims: &[Arc<PodInfo>]) {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), pod.namespace());
        let patch = json!({"status": {"nominatedNodeName": node}});
        if let Err(err) = api
            .patch_status(pod.name(), &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            tracing::warn!(pod = %pod.key, error = %err, "could not set nominatedNodeName");
        }
        futures::future::join_all(victims.iter().map(|v| self.evict(pod, node, v))).await;
    }

    /// Deletes one preemption victim, saying why.
    async fn evict(&self, pod: &PodInfo, node: &str, victim: &PodInfo) {
        let message = format!("Preempted by pod {} on node {node}", pod.key);
        self.event(victim, EventType::Normal, "Preempted", &message);
        let api: Api<Pod> = Api::namespaced(self.client.clone(), victim.namespace());
        if victim.pod.metadata.deletion_timestamp.is_some() {
            return; // already going
        }
        // As kube-scheduler: the victim says why it goes, and a
        // preemptor waits while a victim so marked terminates.
        let condition = json!({"status": {"conditions": [{
            "type": "DisruptionTarget",
            "status": "True",
            "reason": "PreemptionByScheduler",
            "message": format!("{COMPONENT}: preempting to accommodate a higher priority pod"),
            "lastTransitionTime": now(),
        }]}});
        if let Err(err) = api
            .patch_status(
                victim.name(),
                &PatchParams::default(),
                &Patch::Strategic(&condition),
            )
            .await
        {
            tracing::debug!(victim = %victim.key, error = %err, "could not mark a preemption victim");
        }
        match api.delete(victim.name(), &DeleteParams::default()).await {
            Ok(_) => self.metrics.preempted(),
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(err) => {
                tracing::warn!(victim = %victim.key, error = %err, "could not delete a preemption victim")
            }
        }
    }

    /// The FailedScheduling event and the PodScheduled=False condition.
    async fn record_failure(&self, pod: &PodInfo, reason: &str, message: &str) {
        self.event(pod, EventType::Warning, "FailedScheduling", message);
        let api: Api<Pod> = Api::namespaced(self.client.clone(), pod.namespace());
        let condition = json!({
            "type": "PodScheduled",
            "status": "False",
            "reason": reason,
            "message": message,
            "lastProbeTime": null,
            "lastTransitionTime": now(),
        });
        let current = pod
            .pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == "PodScheduled"));
        if current.is_some_and(|c| {
            c.status == "False"
                && c.reason.as_deref() == Some(reason)
                && c.message.as_deref() == Some(message)
        }) {
            return;
        }
        let patch = json!({"status": {"conditions": [condition]}});
        if let Err(err) = api
            .patch_status(
                pod.name(),
                &PatchParams::default(),
                &Patch::Strategic(&patch),
            )
            .await
        {
            tracing::debug!(pod = %pod.key, error = %err, "could not set the PodScheduled condition");
        }
    }

    /// Records an event on the pod, without waiting for it to be
    /// written: the shared recorder counts repeats on the first one, as
    /// client-go's event correlator does.
    fn event(&self, pod: &PodInfo, type_: EventType, reason: &str, message: &str) {
        self.recorder.event(&*pod.pod, type_, reason, message);
    }
}

/// Binds through `POST pods/{name}/binding`.
struct ApiBinder(Client);

impl Binder for ApiBinder {
    fn bind<'a>(&'a self, pod: &'a PodInfo, node: &'a str) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            let binding = json!({
                "apiVersion": "v1", "kind": "Binding",
                "metadata": {"name": pod.name(), "namespace": pod.namespace(), "uid": pod.pod.metadata.uid},
                "target": {"apiVersion": "v1", "kind": "Node", "name": node},
            });
            let path = format!(
                "/api/v1/namespaces/{}/pods/{}/binding",
                pod.namespace(),
                pod.name()
            );
            post_undecoded(&self.0, path, &binding)
                .await
                .map_err(|e| e.to_string())
        })
    }
}

/// POSTs `body` to `path`, the answer checked for an error but not
/// decoded: the scheduler makes a binding per pod, and needs nothing
/// back. A write the API refused as too many is sent
/// again, as client-go does.
async fn post_undecoded(client: &Client, path: String, body: &Value) -> Result<(), kube::Error> {
    let body = body.to_string().into_bytes();
    let mut refused = 0;
    loop {
        let request = kube::core::Request::new(path.as_str())
            .create(&PostParams::default(), body.clone())
            .map_err(kube::Error::BuildRequest)?;
        match client.request_text(request).await {
            Err(err) if is_too_many(&err) && refused < RETRIES_ON_TOO_MANY => {
                refused += 1;
                let wait = retry_wait(&mut rand::thread_rng());
                tokio::time::sleep(wait).await;
            }
            answer => return answer.map(drop),
        }
    }
}

/// How long a refused write waits before it is sent again: the
/// Retry-After, and a random part of as long again.
fn retry_wait(rng: &mut impl rand::Rng) -> Duration {
    RETRY_AFTER + RETRY_AFTER.mul_f64(rng.gen::<f64>())
}

/// A 429 TooManyRequests: the API did not take the request, which may be
/// sent again.
fn is_too_many(err: &kube::Error) -> bool {
    matches!(err, kube::Error::Api(status) if status.code == 429)
}

fn now() -> String {
    k8s_openapi::jiff::Timestamp::now()
        .round(k8s_openapi::jiff::Unit::Second)
        .map(|t| t.to_string())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api_error(code: u16) -> kube::Error {
        kube::Error::Api(
            kube::core::Status::failure("refused", "TooManyRequests")
                .with_code(code)
                .boxed(),
        )
    }

    #[test]
    fn only_too_many_requests_is_sent_again() {
        assert!(is_too_many(&api_error(429)));
        assert!(!is_too_many(&api_error(409)));
        assert!(!is_too_many(&api_error(500)));
    }

    #[test]
    fn refused_writes_come_back_spread_over_a_second_past_the_retry_after() {
        use rand::SeedableRng;
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        let waits: Vec<Duration> = (0..64).map(|_| retry_wait(&mut rng)).collect();
        assert!(waits
            .iter()
            .all(|w| *w >= RETRY_AFTER && *w < 2 * RETRY_AFTER));
        assert!(waits.iter().any(|w| *w > RETRY_AFTER.mul_f64(1.5)));
        assert!(waits.iter().any(|w| *w < RETRY_AFTER.mul_f64(1.5)));
    }
}
