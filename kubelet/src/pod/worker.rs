//! One pod's worker: runs its init containers in order, then its containers,
//! keeps its status written, and on deletion stops them within the grace
//! period and deletes the pod object, as the kubelet confirms a deletion.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Pod};
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use kube::{Api, Client};
use tokio::sync::watch;
use tokio::task::JoinSet;

use super::backoff::CrashLoopBackoff;
use super::container::{ContainerRunner, Ended, Start, StopRequest, StopSignal};
use super::shared::Slot;
use super::status::{pod_status, restart_policy, RestartPolicyKind};
use super::PodContext;
use crate::runtime::{RecoveredContainer, RecoveredState};

/// The grace period when a pod vanished from the API without one (a
/// forced deletion): the kubelet's minimum.
const FORCED_GRACE: Duration = Duration::from_secs(2);
/// Status writes coalesce changes made within this long.
const STATUS_COALESCE: Duration = Duration::from_millis(20);
/// A failed status write is retried after this long.
const STATUS_RETRY: Duration = Duration::from_secs(1);

/// What the worker is told about its pod: its latest version, or `None`
/// once it is gone from the API.
pub type PodUpdates = watch::Receiver<Option<Arc<Pod>>>;

/// Why the worker's containers stop.
enum Stopping {
    /// The pod is being deleted: stop, then delete the object.
    Deleted(Duration),
    /// The pod is gone from the API already.
    Gone,
    /// The kubelet itself stops: stop containers, leave the API alone.
    KubeletExit,
}

/// Runs the pod until it is deleted (or the kubelet stops).
pub async fn run_pod(
    context: Arc<PodContext>,
    client: Client,
    mut updates: PodUpdates,
    recovered: Vec<RecoveredContainer>,
    mut kubelet_stopping: watch::Receiver<bool>,
) {
    let Some(pod) = updates.borrow_and_update().clone() else {
        return;
    };
    // A pod deleted before it ran here starts stopped.
    let already = deletion_grace(Some(&pod)).map(|grace| StopRequest { grace });
    let (stop_tx, stop_rx) = watch::channel(already);
    let writer = tokio::spawn(write_status(
        context.clone(),
        client.clone(),
        updates.clone(),
    ));
    let mut lifecycle = tokio::spawn(run_containers(
        context.clone(),
        pod.clone(),
        stop_rx,
        recovered,
    ));
    let refresher = tokio::spawn(refresh_volumes(context.clone(), updates.clone()));
    let mut lifecycle_done = false;
    let mut evictions = context.shared.evictions();
    let mut evicted = false;
    let stopping = loop {
        if let Some(grace) = deletion_grace(updates.borrow().as_deref()) {
            break Stopping::Deleted(grace);
        }
        tokio::select! {
            changed = updates.changed() => {
                if changed.is_err() || updates.borrow().is_none() {
                    break Stopping::Gone;
                }
            }
            _ = kubelet_stopping.wait_for(|s| *s) => break Stopping::KubeletExit,
            _ = &mut lifecycle, if !lifecycle_done => lifecycle_done = true,
            _ = evictions.wait_for(|e| *e), if !evicted => {
                // Evicted: killed at once; the pod stays, Failed, until deleted.
                evicted = true;
                let _ = stop_tx.send(Some(StopRequest { grace: Duration::ZERO }));
            }
        }
    };
    let grace = match stopping {
        Stopping::Deleted(grace) => grace,
        Stopping::Gone => FORCED_GRACE,
        Stopping::KubeletExit => pod_grace(&pod),
    };
    let _ = stop_tx.send(Some(StopRequest { grace }));
    if !lifecycle_done {
        let _ = lifecycle.await;
    }
    refresher.abort();
    // The last status, with every container terminated, goes out first.
    tokio::time::sleep(STATUS_COALESCE * 3).await;
    writer.abort();
    if matches!(stopping, Stopping::KubeletExit) {
        return;
    }
    // The sandbox goes before the object, as the kubelet stops a pod's
    // sandbox before it confirms the deletion: a pod gone from the API has
    // its address free again.
    if let Some(network) = context.network.as_ref() {
        let torn_down = match crate::network::host_network(&pod) {
            false => network.tear_down(&pod).await,
            true => network.remove_host_network_files(&pod),
        };
        if let Err(err) = torn_down {
            tracing::warn!(pod = %context.shared.pod_label(), error = %err, "tearing down the pod's network");
        }
    }
    if matches!(stopping, Stopping::Deleted(_)) {
        let latest = updates.borrow().clone();
        final_status(&context, &client, latest).await;
        delete_object(&client, &context, &pod).await;
    }
    if let Err(err) = context.runtime.remove_pod(&context.shared.uid).await {
        tracing::warn!(pod = %context.shared.pod_label(), error = %err, "removing the pod's containers");
    }
    if let Err(err) = crate::volumes::cleanup(&context.launcher.pods_dir, &context.shared.uid).await
    {
        tracing::warn!(pod = %context.shared.pod_label(), error = %err, "removing the pod's volumes");
    }
    context.launcher.tokens.forget_pod(&context.shared.uid);
}

/// Every `volume_resync` (`--sync-frequency`), while a container of the
/// pod runs, writes its volumes again (ConfigMaps, Secrets, downward API,
/// tokens due for refresh) from the pod as the API has it now, as the
/// kubelet's periodic pod sync does; a failure is logged (once until it
/// changes) and the volumes keep what they had.
async fn refresh_volumes(context: Arc<PodContext>, updates: PodUpdates) {
    let mut said = String::new();
    let period = context.volume_resync.max(Duration::from_millis(100));
    let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let (init, containers, _) = context.shared.snapshot();
        let running = init.iter().chain(&containers).any(|s| {
            s.state
                .as_ref()
                .is_some_and(|state| state.running.is_some())
        });
        let Some(pod) = updates.borrow().clone() else {
            return;
        };
        if !running {
            continue;
        }
        let refreshed = context
            .launcher
            .refresh_volumes(&pod, &context.shared.volumes)
            .await;
        match refreshed {
            Ok(()) => said.clear(),
            Err(why) if why != said => {
                tracing::warn!(pod = %context.shared.pod_label(), error = %why, "refreshing the pod's volumes; they keep what they had");
                said = why;
            }
            Err(_) => {}
        }
    }
}

/// How soon a pod whose network could not be set up is tried again.
const NETWORK_RETRY: Duration = Duration::from_secs(1);
/// A network that still fails the same way is said again as an event
/// this often, so that its count grows without spending the pod's share
/// of events in a minute.
const SANDBOX_EVENT_EVERY: Duration = Duration::from_secs(10);

/// Sets up the pod's network, trying again until it is or the pod stops
/// (`None`). Without a network configuration yet, the runtime writes the
/// default one for the Node's pod CIDRs once the Node has them.
async fn set_up_network(
    context: &PodContext,
    network: &crate::network::PodNetwork,
    pod: &Pod,
    stop: &StopSignal,
) -> Option<crate::network::Sandbox> {
    let mut said = String::new();
    let mut recorded: Option<tokio::time::Instant> = None;
    loop {
        if stop.borrow().is_some() {
            return None;
        }
        let attempt = async {
            if network.network().is_err() {
                write_default_network(context, network).await?;
            }
            network.set_up(pod).await.map_err(|e| e.to_string())
        };
        match attempt.await {
            Ok(sandbox) => return Some(sandbox),
            Err(why) => {
                let changed = why != said;
                if changed || recorded.is_none_or(|at| at.elapsed() >= SANDBOX_EVENT_EVERY) {
                    let event = super::events::failed_create_pod_sandbox(pod, &why);
                    context.recorder.record(event);
                    recorded = Some(tokio::time::Instant::now());
                }
                if changed {
                    tracing::warn!(pod = %context.shared.pod_label(), error = %why, "setting up the pod's network (FailedCreatePodSandBox); retrying");
                    said = why;
                }
            }
        }
        let mut stop = stop.clone();
        tokio::select! {
            _ = tokio::time::sleep(NETWORK_RETRY) => {}
            _ = stop.wait_for(Option::is_some) => return None,
        }
    }
}

/// Writes the default network from the Node's `spec.podCIDRs`, or says
/// why it cannot yet.
async fn write_default_network(
    context: &PodContext,
    network: &crate::network::PodNetwork,
) -> Result<(), String> {
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(context.launcher.client.clone());
    let name = &context.launcher.node.node_name;
    let node = nodes
        .get(name)
        .await
        .map_err(|e| format!("reading node {name} for its pod CIDR: {e}"))?;
    let spec = node.spec.unwrap_or_default();
    let cidrs = match spec.pod_cidrs.filter(|c| !c.is_empty()) {
        Some(cidrs) => cidrs,
        None => spec
            .pod_cidr
            .into_iter()
            .filter(|c| !c.is_empty())
            .collect(),
    };
    if cidrs.is_empty() {
        return Err(format!(
            "network is not ready: node {name} has no pod CIDR yet (spec.podCIDR; the node IPAM controller gives one)"
        ));
    }
    match network.write_default_config(&cidrs) {
        Ok(Some(path)) => {
            tracing::info!(path = %path.display(), ?cidrs, "wrote the default pod network");
            Ok(())
        }
        Ok(None) => Ok(()),
        Err(err) => Err(err.to_string()),
    }
}

/// The grace period of a pod being deleted.
fn deletion_grace(pod: Option<&Pod>) -> Option<Duration> {
    let pod = pod?;
    pod.metadata.deletion_timestamp.as_ref()?;
    let seconds = pod
        .metadata
        .deletion_grace_period_seconds
        .unwrap_or_else(|| pod_grace(pod).as_secs() as i64);
    Some(Duration::from_secs(seconds.max(0) as u64))
}

fn pod_grace(pod: &Pod) -> Duration {
    let seconds = pod
        .spec
        .as_ref()
        .and_then(|s| s.termination_grace_period_seconds)
        .unwrap_or(30);
    Duration::from_secs(seconds.max(0) as u64)
}

/// Init containers in order, each to completion, then every container at
/// once; returns when all are done or stopped.
async fn run_containers(
    context: Arc<PodContext>,
    pod: Arc<Pod>,
    stop: StopSignal,
    recovered: Vec<RecoveredContainer>,
) {
    let spec = pod.spec.clone().unwrap_or_default();
    let policy = restart_policy(&pod);
    let mut recovered = latest_runs(recovered);
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    if matches!(phase, Some("Succeeded" | "Failed")) && recovered.is_empty() {
        // Finished before this kubelet started: nothing runs again.
        context.shared.update_facts(|f| f.initialized = true);
        return;
    }
    if let Some(network) = context.network.as_ref() {
        if !crate::network::host_network(&pod) {
            let Some(sandbox) = set_up_network(&context, network, &pod, &stop).await else {
                return;
            };
            context.shared.update_facts(|f| {
                f.pod_ip = sandbox.ips[0].clone();
                f.files = Some(crate::network::files::dir_for(&sandbox.netns));
                f.netns = Some(sandbox.netns.clone());
            });
        } else {
            // In the host's network, the pod still gets its own files
            // and a mount namespace for its volumes.
            match network.host_network_files(&pod) {
                Ok(dir) => context.shared.update_facts(|f| f.files = Some(dir)),
                Err(err) => {
                    tracing::warn!(pod = %context.shared.pod_label(), error = %err, "writing the pod's hosts and resolv.conf; its processes see the host's")
                }
            }
        }
    }
    context.shared.update_facts(|f| f.sandbox_ready = true);
    if recovered.is_empty() {
        context.metrics.pod_started();
    }
    let regular_recovered = spec
        .containers
        .iter()
        .any(|c| recovered.contains_key(&c.name));
    let mut sidecars = JoinSet::new();
    if !regular_recovered {
        for (i, container) in spec.init_containers.iter().flatten().enumerate() {
            let sidecar = container.restart_policy.as_deref() == Some("Always");
            let start = start_of(recovered.remove(&container.name));
            let runner = runner(
                &context,
                &pod,
                container,
                Slot::Init(i),
                &stop,
                policy,
                !sidecar,
            );
            if sidecar {
                sidecars.spawn(runner.run(start));
                if !started(&context, Slot::Init(i), &stop).await {
                    return;
                }
                continue;
            }
            match runner.run(start).await {
                Ended::Exited(0) => {}
                Ended::Exited(_) | Ended::Stopped => return,
            }
        }
    }
    context.shared.update_facts(|f| f.initialized = true);
    let mut running = JoinSet::new();
    for (i, container) in spec.containers.iter().enumerate() {
        let start = start_of(recovered.remove(&container.name));
        let runner = runner(
            &context,
            &pod,
            container,
            Slot::Regular(i),
            &stop,
            policy,
            false,
        );
        running.spawn(runner.run(start));
    }
    while running.join_next().await.is_some() {}
    // Sidecars stop once the regular containers are done.
    sidecars.abort_all();
}

fn runner(
    context: &Arc<PodContext>,
    pod: &Arc<Pod>,
    container: &Container,
    slot: Slot,
    stop: &StopSignal,
    policy: RestartPolicyKind,
    run_to_completion: bool,
) -> ContainerRunner {
    let policy = match (slot, container.restart_policy.as_deref()) {
        (Slot::Init(_), Some("Always")) => RestartPolicyKind::Always,
        _ => policy,
    };
    ContainerRunner {
        context: context.clone(),
        pod: pod.clone(),
        container: container.clone(),
        slot,
        policy,
        run_to_completion,
        stop: stop.clone(),
        backoff: CrashLoopBackoff::new(context.backoff),
    }
}

/// Waits until the sidecar in `slot` has started; false if the pod
/// stopped first.
async fn started(context: &PodContext, slot: Slot, stop: &StopSignal) -> bool {
    let mut changes = context.shared.subscribe();
    let mut stop = stop.clone();
    loop {
        let status = context.shared.status_of(&slot);
        if status.is_some_and(|s| s.started == Some(true)) {
            return true;
        }
        tokio::select! {
            changed = changes.changed() => if changed.is_err() { return false },
            _ = stop.wait_for(Option::is_some) => return false,
        }
    }
}

/// Each container's latest run from a previous kubelet.
fn latest_runs(recovered: Vec<RecoveredContainer>) -> HashMap<String, RecoveredContainer> {
    let mut latest: HashMap<String, RecoveredContainer> = HashMap::new();
    for run in recovered {
        let newer = latest
            .get(&run.id.container)
            .is_none_or(|seen| seen.id.attempt < run.id.attempt);
        if newer {
            latest.insert(run.id.container.clone(), run);
        }
    }
    latest
}

fn start_of(recovered: Option<RecoveredContainer>) -> Start {
    match recovered {
        None => Start::Fresh { attempt: 0 },
        Some(run) => match run.state {
            RecoveredState::Running(handle) => Start::Adopted(handle),
            RecoveredState::Exited(status) => Start::AfterExit {
                attempt: run.id.attempt,
                status,
            },
        },
    }
}

/// Writes the pod's status whenever it changes.
async fn write_status(context: Arc<PodContext>, client: Client, updates: PodUpdates) {
    let api: Api<Pod> = Api::namespaced(client, &context.shared.namespace);
    let mut changes = context.shared.subscribe();
    let mut written: Option<serde_json::Value> = None;
    let mut ran = false;
    loop {
        tokio::time::sleep(STATUS_COALESCE).await;
        let Some(pod) = updates.borrow().clone() else {
            return;
        };
        let (init, containers, facts) = context.shared.snapshot();
        let now = jiff::Timestamp::now();
        let status = pod_status(&pod, &init, &containers, &facts, now);
        if !ran && status.phase.as_deref() == Some("Running") {
            ran = true;
            observe_start(&context, &pod, &facts, now);
        }
        let status = serde_json::to_value(&status).unwrap_or_default();
        if written.as_ref() != Some(&status) {
            let patch = serde_json::json!({ "status": status });
            match api
                .patch_status(
                    &context.shared.name,
                    &PatchParams::default(),
                    &Patch::Merge(&patch),
                )
                .await
            {
                Ok(_) => written = Some(status),
                Err(err) => {
                    tracing::debug!(pod = %context.shared.pod_label(), error = %err, "writing the pod status; retrying");
                    tokio::time::sleep(STATUS_RETRY).await;
                    continue;
                }
            }
        }
        if changes.changed().await.is_err() {
            return;
        }
    }
}

/// The pod runs for the first time since the kubelet saw it: how long
/// that took, unless it was running already before this kubelet started.
fn observe_start(
    context: &PodContext,
    pod: &Pod,
    facts: &super::status::PodFacts,
    now: jiff::Timestamp,
) {
    let was_running = pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
    let Some(seen) = facts.start_time.filter(|_| !was_running) else {
        return;
    };
    let took = now.duration_since(seen).as_secs_f64();
    context.metrics.pod_started_running(took);
}

/// The status with every container stopped, before the object goes.
async fn final_status(context: &PodContext, client: &Client, pod: Option<Arc<Pod>>) {
    let Some(pod) = pod else { return };
    let (init, containers, facts) = context.shared.snapshot();
    let status = pod_status(&pod, &init, &containers, &facts, jiff::Timestamp::now());
    let api: Api<Pod> = Api::namespaced(client.clone(), &context.shared.namespace);
    let patch = serde_json::json!({ "status": status });
    let _ = api
        .patch_status(
            &context.shared.name,
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await;
}

/// Deletes the pod object with grace 0: its containers are stopped.
async fn delete_object(client: &Client, context: &PodContext, pod: &Pod) {
    let api: Api<Pod> = Api::namespaced(client.clone(), &context.shared.namespace);
    let params = DeleteParams {
        grace_period_seconds: Some(0),
        preconditions: Some(Preconditions {
            uid: pod.metadata.uid.clone(),
            resource_version: None,
        }),
        ..Default::default()
    };
    let mut delay = Duration::from_millis(200);
    for _ in 0..10 {
        match api.delete(&context.shared.name, &params).await {
            Ok(_) => return,
            Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => return,
            Err(err) => {
                tracing::warn!(pod = %context.shared.pod_label(), error = %err, "deleting the stopped pod; retrying");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(5));
            }
        }
    }
}
