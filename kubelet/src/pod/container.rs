//! One container of a pod, run to the end of its life: start, postStart,
//! probes, exit or kill, and restarts by the restart policy with the crash
//! loop back-off. Its status is kept in the pod's shared state, which the
//! worker writes to the API; what happens to it is recorded as events.

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStateRunning, ContainerStateTerminated,
    ContainerStateWaiting, ContainerStatus, LifecycleHandler, ObjectReference, Pod, Probe,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use skiff_machinery::events::Event;
use tokio::sync::watch;

use super::backoff::CrashLoopBackoff;
use super::events::{self, KillReason};
use super::launch::{Launch, NotStarted};
use super::shared::{PodShared, Slot};
use super::status::RestartPolicyKind;
use super::PodContext;
use crate::metrics::ContainerType;
use crate::probe::{self, ProbeKind, ProbeResult, ProbeState, ProbeStatus, Prober};
use crate::runtime::{ContainerHandle, ContainerId, ContainerSpec, ExitStatus};

/// Asked of every container of a pod when it must stop: the grace period
/// left for preStop and SIGTERM.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StopRequest {
    pub grace: Duration,
}

pub type StopSignal = watch::Receiver<Option<StopRequest>>;

/// How a container's life ended, for the worker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ended {
    /// Exited and will not run again (init containers: exited 0).
    Exited(i32),
    /// Stopped because the pod is stopping.
    Stopped,
}

/// Where a container starts: its first attempt, or one adopted from a
/// previous kubelet.
pub enum Start {
    Fresh {
        attempt: u32,
    },
    Adopted(ContainerHandle),
    /// Its last run ended while the kubelet was away.
    AfterExit {
        attempt: u32,
        status: ExitStatus,
    },
}

pub struct ContainerRunner {
    pub context: Arc<PodContext>,
    pub pod: Arc<Pod>,
    pub container: Container,
    pub slot: Slot,
    pub policy: RestartPolicyKind,
    /// An init container runs to completion (exit 0) and is then done.
    pub run_to_completion: bool,
    pub stop: StopSignal,
    pub backoff: CrashLoopBackoff,
}

/// Why a running container ended.
enum RunEnd {
    Exited(ExitStatus),
    Killed(ExitStatus, String),
    Stopped(ExitStatus),
}

impl ContainerRunner {
    fn shared(&self) -> &PodShared {
        &self.context.shared
    }

    fn stopping(&self) -> Option<StopRequest> {
        *self.stop.borrow()
    }

    /// This container, as its events refer to it.
    fn reference(&self) -> ObjectReference {
        events::container_reference(&self.pod, &self.container.name, self.slot)
    }

    fn record(&self, event: Event) {
        self.context.recorder.record(event);
    }

    /// Runs the container until it is done or the pod stops.
    pub async fn run(mut self, start: Start) -> Ended {
        let (mut attempt, mut adopted) = match start {
            Start::Fresh { attempt } => (attempt, None),
            Start::Adopted(handle) => (handle.id().attempt, Some(handle)),
            Start::AfterExit { attempt, status } => {
                self.record_exit(&status, None, attempt);
                match self.after_exit(&status, Duration::ZERO).await {
                    Some(ended) => return ended,
                    None => (attempt + 1, None),
                }
            }
        };
        loop {
            if self.stopping().is_some() {
                return Ended::Stopped;
            }
            let (handle, target) = match adopted.take() {
                Some(handle) => {
                    self.shared()
                        .set_handle(&self.container.name, Some(handle.clone()));
                    self.mark_running(&handle, attempt);
                    let network = self.shared().network();
                    let launch = self
                        .context
                        .launcher
                        .launch(
                            &self.pod,
                            &self.container,
                            network.as_ref(),
                            &self.context.shared.volumes,
                        )
                        .await;
                    (handle, launch.map(|l| l.probe_target).unwrap_or_default())
                }
                None => match self.start(attempt).await {
                    Ok(started) => started,
                    Err(Some(ended)) => return ended,
                    Err(None) => {
                        attempt += 1;
                        continue;
                    }
                },
            };
            let started = Instant::now();
            let end = self.supervise(&handle, &target).await;
            let (status, message) = match &end {
                RunEnd::Exited(s) | RunEnd::Stopped(s) => (s.clone(), None),
                RunEnd::Killed(s, why) => (s.clone(), Some(why.clone())),
            };
            self.record_exit(&status, message, attempt);
            if matches!(end, RunEnd::Stopped(_)) {
                return Ended::Stopped;
            }
            match self.after_exit(&status, started.elapsed()).await {
                Some(ended) => return ended,
                None => attempt += 1,
            }
        }
    }

    /// After a run ended: `Some` when the container is done, else `None`
    /// once its back-off has passed and it should start again.
    async fn after_exit(&mut self, status: &ExitStatus, ran: Duration) -> Option<Ended> {
        let restarts = if self.run_to_completion {
            status.exit_code != 0 && self.policy != RestartPolicyKind::Never
        } else {
            self.policy.restarts(status.exit_code)
        };
        if !restarts {
            return Some(Ended::Exited(status.exit_code));
        }
        let delay = self.backoff.delay_after(ran);
        if delay.is_zero() {
            return None;
        }
        let label = self.shared().pod_label();
        self.record(events::back_off(
            self.reference(),
            &self.container.name,
            &label,
        ));
        self.shared().update(&self.slot, |c| {
            c.state = Some(waiting(
                "CrashLoopBackOff",
                format!(
                    "back-off {} restarting failed container={} pod={}",
                    go_duration(delay),
                    self.container.name,
                    self.shared().pod_label()
                ),
            ));
        });
        match self.sleep_unless_stopped(delay).await {
            true => Some(Ended::Stopped),
            false => None,
        }
    }

    /// Sleeps for `delay`; true if the pod began stopping meanwhile.
    async fn sleep_unless_stopped(&self, delay: Duration) -> bool {
        let mut stop = self.stop.clone();
        tokio::select! {
            _ = tokio::time::sleep(delay) => self.stopping().is_some(),
            _ = stop.wait_for(Option::is_some) => true,
        }
    }

    /// Starts attempt `attempt`. `Err(None)`: this attempt failed and was
    /// recorded; try again. `Err(Some)`: the container will not run.
    async fn start(
        &mut self,
        attempt: u32,
    ) -> Result<(ContainerHandle, probe::ProbeTarget), Option<Ended>> {
        // Until the container can be launched (its claims bound, its
        // ConfigMaps there…) it waits; such tries are not restarts.
        let network = self.shared().network();
        let image = self.container.image.clone().unwrap_or_default();
        let launch = loop {
            self.record(events::pulled(self.reference(), &image));
            match self
                .context
                .launcher
                .launch(
                    &self.pod,
                    &self.container,
                    network.as_ref(),
                    &self.context.shared.volumes,
                )
                .await
            {
                Ok(launch) => break launch,
                Err(not_started) => {
                    if let Some(ended) = self.wait_not_started(not_started).await {
                        return Err(Some(ended));
                    }
                }
            }
        };
        let spec = ContainerSpec {
            id: ContainerId {
                pod_uid: self.shared().uid.clone(),
                pod_namespace: self.shared().namespace.clone(),
                pod_name: self.shared().name.clone(),
                container: self.container.name.clone(),
                attempt,
            },
            argv: launch.argv.clone(),
            env: launch.env.clone(),
            working_dir: launch.working_dir.clone(),
            limits: launch.limits,
            stdin: self.container.stdin.unwrap_or(false),
            stdin_once: self.container.stdin_once.unwrap_or(false),
            tty: self.container.tty.unwrap_or(false),
            mounts: launch.mounts.clone(),
            netns: network.as_ref().and_then(|p| p.netns.clone()),
            files: network.map(|p| p.files),
        };
        match self.context.runtime.start(spec).await {
            Ok(handle) => {
                self.context.metrics.container_started(match self.slot {
                    Slot::Init(_) => ContainerType::InitContainer,
                    Slot::Regular(_) => ContainerType::Container,
                });
                let name = &self.container.name;
                self.record(events::created(self.reference(), name));
                self.record(events::started(self.reference(), name));
                self.shared()
                    .set_handle(&self.container.name, Some(handle.clone()));
                self.mark_running(&handle, attempt);
                if let Err(why) = self.post_start(&launch).await {
                    tracing::warn!(pod = %self.shared().pod_label(), container = %self.container.name, %why, "postStart hook failed; killing the container");
                    self.record(events::failed_post_start_hook(self.reference()));
                    let why = KillReason::FailedPostStartHook;
                    self.record(events::killing(self.reference(), name, self.slot, why));
                    let grace = self.grace();
                    handle.stop(grace).await;
                }
                Ok((handle, launch.probe_target))
            }
            Err(err) => {
                self.record(events::failed(self.reference(), &err.to_string()));
                // As a container that exited at once: StartError, 128.
                let now = jiff::Timestamp::now();
                let status = ExitStatus {
                    exit_code: 128,
                    signal: None,
                    finished_at: now,
                    reason: "StartError".into(),
                };
                self.record_exit(&status, Some(err.to_string()), attempt);
                match self.after_exit(&status, Duration::ZERO).await {
                    Some(ended) => Err(Some(ended)),
                    None => Err(None),
                }
            }
        }
    }

    /// Shows why the container cannot start and waits to try again (or
    /// for the pod to stop).
    async fn wait_not_started(&mut self, not_started: NotStarted) -> Option<Ended> {
        self.record(match &not_started.failed_mount {
            Some(message) => events::failed_mount(&self.pod, message),
            None => events::failed(self.reference(), &not_started.message),
        });
        let permanent = not_started.reason == "ContainerCommandRequired";
        self.shared().update(&self.slot, |c| {
            c.state = Some(waiting(not_started.reason, not_started.message.clone()));
            c.ready = false;
            c.started = Some(false);
        });
        if permanent {
            let _ = self.stop.clone().wait_for(Option::is_some).await;
            return Some(Ended::Stopped);
        }
        self.sleep_unless_stopped(self.context.config_retry)
            .await
            .then_some(Ended::Stopped)
    }

    fn mark_running(&self, handle: &ContainerHandle, attempt: u32) {
        let started_at = handle.started_at();
        self.shared().update(&self.slot, |c| {
            c.state = Some(ContainerState {
                running: Some(ContainerStateRunning {
                    started_at: Some(Time(started_at)),
                }),
                ..Default::default()
            });
            c.container_id = Some(container_id(handle));
            c.restart_count = attempt as i32;
            c.started = Some(self.container.startup_probe.is_none());
            c.ready =
                self.container.readiness_probe.is_none() && self.container.startup_probe.is_none();
        });
    }

    /// Watches the running container: its exit, its probes, the pod
    /// stopping.
    async fn supervise(&mut self, handle: &ContainerHandle, target: &probe::ProbeTarget) -> RunEnd {
        let (probes_off, probes_off_rx) = watch::channel(false);
        let start_probe = |kind, probe: &Option<Probe>| {
            probe.clone().map(|probe| {
                let mut off = probes_off_rx.clone();
                let shutdown = async move {
                    let _ = off.wait_for(|off| *off).await;
                };
                let (recorder, container) = (self.context.recorder.clone(), self.reference());
                let metrics = self.context.metrics.clone();
                let shared = &self.context.shared;
                let labels = [
                    self.container.name.clone(),
                    shared.name.clone(),
                    shared.namespace.clone(),
                    shared.uid.clone(),
                ];
                let unhealthy = move |result: &ProbeResult| {
                    let [name, pod, namespace, uid] = &labels;
                    metrics.probe_result(kind, result, name, pod, namespace, uid);
                    if let Some(event) = events::unhealthy(container.clone(), kind, result) {
                        recorder.record(event);
                    }
                };
                Prober::start_observed(kind, probe, target.clone(), shutdown, unhealthy)
            })
        };
        let startup = start_probe(ProbeKind::Startup, &self.container.startup_probe);
        let mut startup_rx = startup.as_ref().map(Prober::subscribe);
        let mut liveness: Option<Prober> = None;
        let mut readiness: Option<Prober> = None;
        let mut liveness_rx: Option<watch::Receiver<ProbeStatus>> = None;
        let mut readiness_rx: Option<watch::Receiver<ProbeStatus>> = None;
        if startup.is_none() {
            liveness = start_probe(ProbeKind::Liveness, &self.container.liveness_probe);
            readiness = start_probe(ProbeKind::Readiness, &self.container.readiness_probe);
            liveness_rx = liveness.as_ref().map(Prober::subscribe);
            readiness_rx = readiness.as_ref().map(Prober::subscribe);
        }
        let mut stop = self.stop.clone();
        let end = loop {
            tokio::select! {
                status = handle.wait() => break RunEnd::Exited(status),
                grace = stop_requested(&mut stop) => {
                    self.record_killing(KillReason::Stopping);
                    break RunEnd::Stopped(self.kill(handle, target, grace).await);
                }
                Some(status) = changed(&mut startup_rx) => match status.state {
                    ProbeState::Success => {
                        startup_rx = None;
                        self.shared().update(&self.slot, |c| {
                            c.started = Some(true);
                            c.ready = self.container.readiness_probe.is_none();
                        });
                        liveness = start_probe(ProbeKind::Liveness, &self.container.liveness_probe);
                        readiness = start_probe(ProbeKind::Readiness, &self.container.readiness_probe);
                        liveness_rx = liveness.as_ref().map(Prober::subscribe);
                        readiness_rx = readiness.as_ref().map(Prober::subscribe);
                    }
                    ProbeState::Failure => {
                        let why = format!("Startup probe failed: {}", status.message);
                        self.record_killing(self.probe_kill(ProbeKind::Startup));
                        break RunEnd::Killed(self.kill(handle, target, self.grace()).await, why);
                    }
                    ProbeState::Unknown => {}
                },
                Some(status) = changed(&mut liveness_rx) => {
                    if status.state == ProbeState::Failure {
                        let why = format!("Liveness probe failed: {}", status.message);
                        tracing::info!(pod = %self.shared().pod_label(), container = %self.container.name, %why, "restarting the container");
                        self.record_killing(self.probe_kill(ProbeKind::Liveness));
                        break RunEnd::Killed(self.kill(handle, target, self.grace()).await, why);
                    }
                }
                Some(status) = changed(&mut readiness_rx) => {
                    let ready = status.state == ProbeState::Success;
                    self.shared().update(&self.slot, |c| c.ready = ready);
                }
            }
        };
        let _ = probes_off.send(true);
        drop((startup, liveness, readiness));
        end
    }

    fn record_killing(&self, why: KillReason) {
        let name = &self.container.name;
        self.record(events::killing(self.reference(), name, self.slot, why));
    }

    /// A kill for a failed probe of `kind`, and whether the container
    /// comes back (the kubelet restarts unless the policy is Never).
    fn probe_kill(&self, kind: ProbeKind) -> KillReason {
        KillReason::Probe {
            kind,
            restarts: self.policy != RestartPolicyKind::Never,
        }
    }

    /// preStop, then SIGTERM and SIGKILL after what is left of `grace`.
    async fn kill(
        &self,
        handle: &ContainerHandle,
        target: &probe::ProbeTarget,
        grace: Duration,
    ) -> ExitStatus {
        let began = Instant::now();
        if let Some(hook) = self
            .container
            .lifecycle
            .as_ref()
            .and_then(|l| l.pre_stop.as_ref())
        {
            if handle.exited().is_none() {
                let ran = tokio::time::timeout(grace, run_hook(hook, target, grace)).await;
                if let Ok(Err(why)) = ran {
                    tracing::info!(pod = %self.shared().pod_label(), container = %self.container.name, %why, "preStop hook failed");
                    self.record(events::failed_pre_stop_hook(self.reference()));
                }
            }
        }
        // At least 2 s after preStop, as the kubelet allows.
        let left = grace
            .saturating_sub(began.elapsed())
            .max(Duration::from_secs(2).min(grace));
        handle.stop(left).await
    }

    async fn post_start(&self, launch: &Launch) -> Result<(), String> {
        let Some(hook) = self
            .container
            .lifecycle
            .as_ref()
            .and_then(|l| l.post_start.as_ref())
        else {
            return Ok(());
        };
        run_hook(hook, &launch.probe_target, self.grace()).await
    }

    fn grace(&self) -> Duration {
        let seconds = self
            .pod
            .spec
            .as_ref()
            .and_then(|s| s.termination_grace_period_seconds)
            .unwrap_or(30);
        Duration::from_secs(seconds.max(0) as u64)
    }

    /// Records a finished run: terminated now, and the last state when the
    /// container starts again.
    fn record_exit(&self, status: &ExitStatus, message: Option<String>, attempt: u32) {
        self.shared().set_handle(&self.container.name, None);
        self.shared().update(&self.slot, |c| {
            let started_at = c
                .state
                .as_ref()
                .and_then(|s| s.running.as_ref())
                .and_then(|r| r.started_at.clone());
            let terminated = ContainerState {
                terminated: Some(ContainerStateTerminated {
                    exit_code: status.exit_code,
                    signal: status.signal,
                    reason: Some(status.reason.clone()),
                    message: message.clone(),
                    started_at,
                    finished_at: Some(Time(status.finished_at)),
                    container_id: c.container_id.clone(),
                }),
                ..Default::default()
            };
            c.last_state = Some(terminated.clone());
            c.state = Some(terminated);
            c.ready = false;
            c.started = Some(false);
            c.restart_count = attempt as i32;
        });
    }
}

/// The grace period once the pod is asked to stop.
async fn stop_requested(stop: &mut StopSignal) -> Duration {
    match stop.wait_for(Option::is_some).await {
        Ok(request) => request.map_or(Duration::ZERO, |r| r.grace),
        Err(_) => Duration::ZERO,
    }
}

/// The next value of a probe's channel, or never if there is none.
async fn changed(rx: &mut Option<watch::Receiver<ProbeStatus>>) -> Option<ProbeStatus> {
    match rx {
        Some(rx) => match rx.changed().await {
            Ok(()) => Some(rx.borrow_and_update().clone()),
            Err(_) => std::future::pending().await,
        },
        None => std::future::pending().await,
    }
}

/// Runs a postStart or preStop handler: exec, httpGet, tcpSocket or sleep.
async fn run_hook(
    hook: &LifecycleHandler,
    target: &probe::ProbeTarget,
    timeout: Duration,
) -> Result<(), String> {
    if let Some(sleep) = &hook.sleep {
        tokio::time::sleep(Duration::from_secs(sleep.seconds.max(0) as u64)).await;
        return Ok(());
    }
    let probe = Probe {
        exec: hook.exec.clone(),
        http_get: hook.http_get.clone(),
        tcp_socket: hook.tcp_socket.clone(),
        timeout_seconds: Some(timeout.as_secs().clamp(1, i32::MAX as u64) as i32),
        ..Default::default()
    };
    match probe::run_once(&probe, target).await {
        probe::ProbeResult::Success => Ok(()),
        probe::ProbeResult::Failure(why) | probe::ProbeResult::Unknown(why) => Err(why),
    }
}

pub fn waiting(reason: &str, message: String) -> ContainerState {
    ContainerState {
        waiting: Some(ContainerStateWaiting {
            reason: Some(reason.to_string()),
            message: (!message.is_empty()).then_some(message),
        }),
        ..Default::default()
    }
}

/// The initial status of a container not started yet.
pub fn initial_status(container: &Container, reason: &str) -> ContainerStatus {
    ContainerStatus {
        name: container.name.clone(),
        image: container.image.clone().unwrap_or_default(),
        image_id: String::new(),
        state: Some(waiting(reason, String::new())),
        ready: false,
        restart_count: 0,
        started: Some(false),
        ..Default::default()
    }
}

fn container_id(handle: &ContainerHandle) -> String {
    let id = handle.id();
    format!("skiff://{}/{}/{}", id.pod_uid, id.container, id.attempt)
}

/// A duration as Go prints it in back-off messages: `10s`, `1m20s`, `5m0s`.
pub fn go_duration(d: Duration) -> String {
    let secs = d.as_secs();
    if secs < 60 {
        format!("{secs}s")
    } else {
        format!("{}m{}s", secs / 60, secs % 60)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn back_off_messages_print_durations_as_go_does() {
        assert_eq!(go_duration(Duration::from_secs(10)), "10s");
        assert_eq!(go_duration(Duration::from_secs(80)), "1m20s");
        assert_eq!(go_duration(Duration::from_secs(300)), "5m0s");
    }
}
