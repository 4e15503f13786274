//! The node status loop: reads the host every second, publishes the
//! pressure state for the eviction manager, and posts the Node's
//! conditions every heartbeat and at once when a pressure condition flips,
//! recording the status events a move causes.

use std::future::Future;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, NodeCondition};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use serde_json::json;
use skiff_machinery::events::Recorder;
use tokio::sync::watch;
use tokio::time::Instant;

use super::build::build_node;
use super::conditions::{node_conditions, Pressure};
use super::config::NodeConfig;
use super::events::{status_event, status_events};
use super::host::HostReader;
use super::register::register_node;
use super::NodeError;

/// How often the status loop reads the host and posts a heartbeat.
#[derive(Debug, Clone, Copy)]
pub struct StatusIntervals {
    /// Conditions are posted at least this often (nodeStatusUpdateFrequency).
    pub heartbeat: Duration,
    /// The host is read this often; a flipped condition is posted at once.
    pub observe: Duration,
    /// After a failed post, the next waits this long.
    pub retry: Duration,
}

impl Default for StatusIntervals {
    fn default() -> Self {
        StatusIntervals {
            heartbeat: Duration::from_secs(10),
            observe: Duration::from_secs(1),
            retry: Duration::from_secs(2),
        }
    }
}

/// The pressure state the eviction manager watches, before the first
/// reading: no pressure.
pub fn pressure_channel() -> (watch::Sender<Pressure>, watch::Receiver<Pressure>) {
    watch::channel(Pressure::default())
}

/// Decides when the conditions are due and remembers what was posted.
#[derive(Debug)]
pub struct StatusReporter {
    intervals: StatusIntervals,
    /// The conditions last posted (or read from the Node at start).
    conditions: Vec<NodeCondition>,
    posted: Option<(Instant, Pressure)>,
    failed_at: Option<Instant>,
    /// Whether a post has gone out since the kubelet started.
    announced: bool,
}

impl StatusReporter {
    pub fn new(intervals: StatusIntervals, previous: Vec<NodeCondition>) -> StatusReporter {
        StatusReporter {
            intervals,
            conditions: previous,
            posted: None,
            failed_at: None,
            announced: false,
        }
    }

    /// Whether to post now: first time, a flipped condition, or a
    /// heartbeat due; never sooner than the retry pause after a failure.
    pub fn due(&self, pressure: &Pressure, now: Instant) -> bool {
        if self
            .failed_at
            .is_some_and(|at| now.duration_since(at) < self.intervals.retry)
        {
            return false;
        }
        match &self.posted {
            None => true,
            Some((at, last)) => {
                last.conditions_differ(pressure)
                    || now.duration_since(*at) >= self.intervals.heartbeat
            }
        }
    }

    /// The conditions to post for `pressure` at `at`.
    pub fn next_conditions(&self, pressure: &Pressure, at: Timestamp) -> Vec<NodeCondition> {
        node_conditions(&self.conditions, pressure, at)
    }

    /// `conditions` were posted; the status events (reasons) they cause.
    pub fn posted(
        &mut self,
        conditions: Vec<NodeCondition>,
        pressure: Pressure,
        now: Instant,
    ) -> Vec<&'static str> {
        let events = status_events(&self.conditions, &conditions, !self.announced);
        self.announced = true;
        self.conditions = conditions;
        self.posted = Some((now, pressure));
        self.failed_at = None;
        events
    }

    pub fn failed(&mut self, now: Instant) {
        self.failed_at = Some(now);
    }
}

/// Runs until `shutdown`: observes the host, publishes [`Pressure`] on
/// `pressure`, posts the Node's conditions (re-registering the Node if it
/// was deleted) and records their moves through `recorder`.
pub async fn run_status(
    client: Client,
    config: NodeConfig,
    host: impl HostReader,
    pressure: watch::Sender<Pressure>,
    intervals: StatusIntervals,
    recorder: Recorder,
    shutdown: impl Future<Output = ()>,
) {
    let api: Api<Node> = Api::all(client);
    let previous = existing_conditions(&api, &config.name).await;
    let mut reporter = StatusReporter::new(intervals, previous);
    let mut ticker = tokio::time::interval(intervals.observe);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            () = &mut shutdown => return,
        }
        let stats = match host.stats() {
            Ok(stats) => stats,
            Err(err) => {
                tracing::warn!(node = %config.name, error = %err, "cannot read the host's pressure signals");
                continue;
            }
        };
        let observed = Pressure::observe(&stats, &config.eviction_hard);
        pressure.send_if_modified(|current| std::mem::replace(current, observed) != observed);
        if reporter.due(&observed, Instant::now()) {
            post(&api, &config, &host, &mut reporter, observed, &recorder).await;
        }
    }
}

async fn existing_conditions(api: &Api<Node>, name: &str) -> Vec<NodeCondition> {
    match api.get_opt(name).await {
        Ok(node) => node
            .and_then(|n| n.status)
            .and_then(|s| s.conditions)
            .unwrap_or_default(),
        Err(err) => {
            tracing::debug!(node = name, error = %err, "cannot read the Node's conditions; starting afresh");
            Vec::new()
        }
    }
}

async fn post(
    api: &Api<Node>,
    config: &NodeConfig,
    host: &impl HostReader,
    reporter: &mut StatusReporter,
    observed: Pressure,
    recorder: &Recorder,
) {
    let conditions = reporter.next_conditions(&observed, Timestamp::now());
    match patch_conditions(api, &config.name, &conditions).await {
        Ok(()) => {
            for reason in reporter.posted(conditions, observed, Instant::now()) {
                recorder.record(status_event(&config.name, reason));
            }
        }
        Err(NodeError::Status {
            source: kube::Error::Api(status),
            ..
        }) if status.code == 404 => {
            tracing::warn!(node = %config.name, "the Node is gone; registering it again");
            if let Err(err) = reregister(api, config, host).await {
                tracing::warn!(node = %config.name, error = %err, "re-registering the Node failed");
            }
            reporter.failed(Instant::now());
        }
        Err(err) => {
            tracing::warn!(node = %config.name, error = %err, "posting the node status failed");
            reporter.failed(Instant::now());
        }
    }
}

async fn reregister(
    api: &Api<Node>,
    config: &NodeConfig,
    host: &impl HostReader,
) -> Result<(), NodeError> {
    let info = host.info()?;
    register_node(api, build_node(config, &info))
        .await
        .map(drop)
}

/// Writes `conditions` through nodes/status; a strategic merge by type,
/// so conditions of other writers stay.
pub async fn patch_conditions(
    api: &Api<Node>,
    name: &str,
    conditions: &[NodeCondition],
) -> Result<(), NodeError> {
    let patch = json!({"status": {"conditions": conditions}});
    api.patch_status(name, &PatchParams::default(), &Patch::Strategic(&patch))
        .await
        .map(drop)
        .map_err(|source| NodeError::Status {
            node: name.to_string(),
            source,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pressure(memory: bool) -> Pressure {
        Pressure {
            memory,
            ..Pressure::default()
        }
    }

    #[test]
    fn a_post_is_due_first_on_heartbeat_and_on_a_flip() {
        let mut reporter = StatusReporter::new(StatusIntervals::default(), Vec::new());
        let start = Instant::now();
        assert!(reporter.due(&pressure(false), start));
        let conditions = reporter.next_conditions(&pressure(false), Timestamp::UNIX_EPOCH);
        let events = reporter.posted(conditions, pressure(false), start);
        assert_eq!(events.len(), 4, "the first post says every status");
        assert!(!reporter.due(&pressure(false), start + Duration::from_secs(5)));
        assert!(reporter.due(&pressure(true), start + Duration::from_secs(1)));
        assert!(reporter.due(&pressure(false), start + Duration::from_secs(10)));
    }

    #[test]
    fn posts_say_what_moved_since_the_last_post() {
        let mut reporter = StatusReporter::new(StatusIntervals::default(), Vec::new());
        let start = Instant::now();
        let calm = reporter.next_conditions(&pressure(false), Timestamp::UNIX_EPOCH);
        reporter.posted(calm, pressure(false), start);
        let beat = reporter.next_conditions(&pressure(false), Timestamp::UNIX_EPOCH);
        assert!(reporter.posted(beat, pressure(false), start).is_empty());
        let pressed = reporter.next_conditions(&pressure(true), Timestamp::UNIX_EPOCH);
        assert_eq!(
            reporter.posted(pressed, pressure(true), start),
            ["NodeHasInsufficientMemory"]
        );
    }

    #[test]
    fn after_a_failure_the_next_post_waits() {
        let mut reporter = StatusReporter::new(StatusIntervals::default(), Vec::new());
        let start = Instant::now();
        reporter.failed(start);
        assert!(!reporter.due(&pressure(true), start + Duration::from_secs(1)));
        assert!(reporter.due(&pressure(true), start + Duration::from_secs(2)));
    }

    #[test]
    fn transition_times_carry_over_from_what_was_posted() {
        let mut reporter = StatusReporter::new(StatusIntervals::default(), Vec::new());
        let t0 = Timestamp::from_second(1_700_000_000).unwrap();
        let t1 = Timestamp::from_second(1_700_000_010).unwrap();
        let first = reporter.next_conditions(&pressure(false), t0);
        reporter.posted(first, pressure(false), Instant::now());
        let second = reporter.next_conditions(&pressure(false), t1);
        let ready = second.iter().find(|c| c.type_ == "Ready").unwrap();
        assert_eq!(ready.last_transition_time.as_ref().map(|t| t.0), Some(t0));
        assert_eq!(ready.last_heartbeat_time.as_ref().map(|t| t.0), Some(t1));
    }
}
