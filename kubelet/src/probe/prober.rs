//! A probe repeated every periodSeconds after initialDelaySeconds, turned
//! into a state by successThreshold and failureThreshold, published on a
//! `watch` channel for the pod worker.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Probe;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::MissedTickBehavior;

use super::{positive, run_once, ProbeResult, ProbeTarget};

/// Which of a container's probes this is; it decides the starting state
/// and when probing stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ProbeKind {
    Liveness,
    Readiness,
    Startup,
}

/// What the pod worker acts on: a liveness Failure restarts the container,
/// readiness Success makes it Ready, startup Success lets the others start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeState {
    Unknown,
    Success,
    Failure,
}

/// The published state and the message of the result that set it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeStatus {
    pub state: ProbeState,
    pub message: String,
}

/// Probes one container with one probe until dropped, until `shutdown`
/// fires, or until its verdict is final: liveness or startup Failure (the
/// container must restart; start a new Prober for the new one) and startup
/// Success.
#[derive(Debug)]
pub struct Prober {
    status: watch::Receiver<ProbeStatus>,
    task: JoinHandle<()>,
}

/// The probe's timing and thresholds, with Kubernetes' defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Schedule {
    initial_delay: Duration,
    period: Duration,
    success_threshold: u32,
    failure_threshold: u32,
}

impl ProbeKind {
    /// Kubernetes' state before the first verdict: not ready, alive, and
    /// not yet started.
    fn initial_state(self) -> ProbeState {
        match self {
            ProbeKind::Readiness => ProbeState::Failure,
            ProbeKind::Liveness => ProbeState::Success,
            ProbeKind::Startup => ProbeState::Unknown,
        }
    }

    fn is_final(self, state: ProbeState) -> bool {
        matches!(
            (self, state),
            (
                ProbeKind::Liveness | ProbeKind::Startup,
                ProbeState::Failure
            ) | (ProbeKind::Startup, ProbeState::Success)
        )
    }
}

impl Schedule {
    fn of(kind: ProbeKind, probe: &Probe) -> Schedule {
        let delay = u64::try_from(probe.initial_delay_seconds.unwrap_or(0)).unwrap_or(0);
        let success = match kind {
            ProbeKind::Readiness => positive(probe.success_threshold, 1),
            ProbeKind::Liveness | ProbeKind::Startup => 1,
        };
        Schedule {
            initial_delay: Duration::from_secs(delay),
            period: Duration::from_secs(positive(probe.period_seconds, 10)),
            success_threshold: u32::try_from(success).unwrap_or(1),
            failure_threshold: u32::try_from(positive(probe.failure_threshold, 3)).unwrap_or(3),
        }
    }
}

impl Prober {
    /// Starts probing `target` with `probe` on the current tokio runtime.
    pub fn start(
        kind: ProbeKind,
        probe: Probe,
        target: ProbeTarget,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Prober {
        Prober::start_observed(kind, probe, target, shutdown, |_| {})
    }

    /// As [`Prober::start`], handing every single result to `observe` as
    /// it comes, before the thresholds weigh it (the kubelet records an
    /// event for each failed one).
    pub fn start_observed(
        kind: ProbeKind,
        probe: Probe,
        target: ProbeTarget,
        shutdown: impl Future<Output = ()> + Send + 'static,
        observe: impl Fn(&ProbeResult) + Send + Sync + 'static,
    ) -> Prober {
        let schedule = Schedule::of(kind, &probe);
        let probe = Arc::new(probe);
        let target = Arc::new(target);
        let observe = Arc::new(observe);
        let check = move || {
            let (probe, target) = (Arc::clone(&probe), Arc::clone(&target));
            let observe = Arc::clone(&observe);
            async move {
                let result = run_once(&probe, &target).await;
                observe(&result);
                result
            }
        };
        Prober::start_with(kind, schedule, check, shutdown)
    }

    fn start_with<C, F>(
        kind: ProbeKind,
        schedule: Schedule,
        check: C,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Prober
    where
        C: FnMut() -> F + Send + 'static,
        F: Future<Output = ProbeResult> + Send,
    {
        let (sender, status) = watch::channel(ProbeStatus {
            state: kind.initial_state(),
            message: String::new(),
        });
        let task = tokio::spawn(async move {
            tokio::select! {
                () = shutdown => {}
                () = probe_loop(kind, schedule, check, sender) => {}
            }
        });
        Prober { status, task }
    }

    /// A receiver that sees every change of state.
    pub fn subscribe(&self) -> watch::Receiver<ProbeStatus> {
        self.status.clone()
    }

    /// The state now.
    pub fn status(&self) -> ProbeStatus {
        self.status.borrow().clone()
    }

    /// Whether probing has stopped (final verdict or shutdown).
    pub fn is_finished(&self) -> bool {
        self.task.is_finished()
    }
}

impl Drop for Prober {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn probe_loop<C, F>(
    kind: ProbeKind,
    schedule: Schedule,
    mut check: C,
    sender: watch::Sender<ProbeStatus>,
) where
    C: FnMut() -> F,
    F: Future<Output = ProbeResult>,
{
    tokio::time::sleep(schedule.initial_delay).await;
    let mut ticks = tokio::time::interval(schedule.period);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut tally = Tally::default();
    loop {
        ticks.tick().await;
        let Some(status) = tally.record(check().await, &schedule) else {
            continue;
        };
        let state = status.state;
        sender.send_if_modified(|current| {
            let changed = *current != status;
            *current = status;
            changed
        });
        if kind.is_final(state) {
            return;
        }
    }
}

/// Consecutive results of one kind, as Kubernetes' probe worker counts them.
#[derive(Debug, Default)]
struct Tally {
    last: Option<ProbeState>,
    run: u32,
}

impl Tally {
    /// The status to publish after `result`, or None while a run of
    /// results is still below its threshold. Unknown results publish
    /// Unknown at once and break any run, so an unsupported probe never
    /// restarts a container.
    fn record(&mut self, result: ProbeResult, schedule: &Schedule) -> Option<ProbeStatus> {
        let (state, message) = match result {
            ProbeResult::Success => (ProbeState::Success, String::new()),
            ProbeResult::Failure(message) => (ProbeState::Failure, message),
            ProbeResult::Unknown(message) => {
                *self = Tally::default();
                return Some(ProbeStatus {
                    state: ProbeState::Unknown,
                    message,
                });
            }
        };
        if self.last == Some(state) {
            self.run = self.run.saturating_add(1);
        } else {
            self.last = Some(state);
            self.run = 1;
        }
        let threshold = match state {
            ProbeState::Success => schedule.success_threshold,
            _ => schedule.failure_threshold,
        };
        (self.run >= threshold).then_some(ProbeStatus { state, message })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;

    fn schedule(success: u32, failure: u32) -> Schedule {
        Schedule {
            initial_delay: Duration::from_secs(5),
            period: Duration::from_secs(10),
            success_threshold: success,
            failure_threshold: failure,
        }
    }

    fn failure(message: &str) -> ProbeResult {
        ProbeResult::Failure(message.to_string())
    }

    /// A check that answers from `script`, then keeps answering its last entry.
    fn scripted(script: Vec<ProbeResult>) -> impl FnMut() -> std::future::Ready<ProbeResult> {
        let mut script = VecDeque::from(script);
        move || {
            let next = if script.len() > 1 {
                script.pop_front()
            } else {
                script.front().cloned()
            };
            std::future::ready(next.unwrap_or(ProbeResult::Success))
        }
    }

    #[test]
    fn runs_below_thresholds_change_nothing() {
        let schedule = schedule(2, 3);
        let mut tally = Tally::default();
        assert_eq!(tally.record(failure("a"), &schedule), None);
        assert_eq!(tally.record(failure("b"), &schedule), None);
        let third = tally
            .record(failure("c"), &schedule)
            .expect("third failure counts");
        assert_eq!(
            (third.state, third.message.as_str()),
            (ProbeState::Failure, "c")
        );
        assert_eq!(tally.record(ProbeResult::Success, &schedule), None);
        assert_eq!(
            tally.record(failure("d"), &schedule),
            None,
            "a success broke the run"
        );
        assert_eq!(tally.record(ProbeResult::Success, &schedule), None);
        let ok = tally
            .record(ProbeResult::Success, &schedule)
            .expect("two successes");
        assert_eq!(ok.state, ProbeState::Success);
        let unknown = tally
            .record(ProbeResult::Unknown("?".into()), &schedule)
            .expect("unknown");
        assert_eq!(unknown.state, ProbeState::Unknown);
    }

    #[test]
    fn schedules_take_kubernetes_defaults_and_rules() {
        let probe = Probe {
            success_threshold: Some(4),
            ..Probe::default()
        };
        let readiness = Schedule::of(ProbeKind::Readiness, &probe);
        assert_eq!(readiness.success_threshold, 4);
        assert_eq!(readiness.failure_threshold, 3);
        assert_eq!(readiness.period, Duration::from_secs(10));
        assert_eq!(readiness.initial_delay, Duration::ZERO);
        assert_eq!(
            Schedule::of(ProbeKind::Liveness, &probe).success_threshold,
            1
        );
        assert_eq!(
            Schedule::of(ProbeKind::Startup, &probe).success_threshold,
            1
        );
    }

    #[tokio::test(start_paused = true)]
    async fn liveness_fails_after_the_threshold_and_stops() {
        let script = vec![
            failure("1"),
            failure("2"),
            ProbeResult::Success,
            failure("3"),
            failure("4"),
            failure("5"),
        ];
        let prober = Prober::start_with(
            ProbeKind::Liveness,
            schedule(1, 3),
            scripted(script),
            std::future::pending(),
        );
        let mut status = prober.subscribe();
        assert_eq!(
            status.borrow().state,
            ProbeState::Success,
            "alive until proven otherwise"
        );
        let start = tokio::time::Instant::now();
        status.changed().await.expect("a verdict");
        assert_eq!(
            *status.borrow(),
            ProbeStatus {
                state: ProbeState::Failure,
                message: "5".into()
            }
        );
        assert_eq!(
            start.elapsed(),
            Duration::from_secs(5 + 5 * 10),
            "delay, then six probes a period apart"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(
            prober.is_finished(),
            "liveness stops at Failure; the container restarts"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn readiness_needs_its_success_threshold_and_keeps_probing() {
        let script = vec![failure("no"), ProbeResult::Success, ProbeResult::Success];
        let prober = Prober::start_with(
            ProbeKind::Readiness,
            schedule(2, 1),
            scripted(script),
            std::future::pending(),
        );
        let mut status = prober.subscribe();
        assert_eq!(
            status.borrow().state,
            ProbeState::Failure,
            "not ready before the first verdict"
        );
        let ready = status
            .wait_for(|s| s.state == ProbeState::Success)
            .await
            .expect("ready")
            .clone();
        assert_eq!(ready.message, "");
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert!(!prober.is_finished(), "readiness keeps probing");
    }

    #[tokio::test(start_paused = true)]
    async fn startup_stops_at_success_and_shutdown_stops_everything() {
        let prober = Prober::start_with(
            ProbeKind::Startup,
            schedule(1, 3),
            scripted(vec![ProbeResult::Success]),
            std::future::pending(),
        );
        let mut status = prober.subscribe();
        assert_eq!(status.borrow().state, ProbeState::Unknown);
        status.changed().await.expect("started");
        assert_eq!(status.borrow().state, ProbeState::Success);
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(prober.is_finished());

        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let shutdown = async move {
            let _ = stopped.await;
        };
        let readiness = Prober::start_with(
            ProbeKind::Readiness,
            schedule(1, 3),
            scripted(vec![ProbeResult::Success]),
            shutdown,
        );
        let _ = stop.send(());
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(
            readiness.is_finished(),
            "shutdown before the initial delay ended"
        );
        assert_eq!(
            readiness.status().state,
            ProbeState::Failure,
            "no probe ran"
        );
    }
}
