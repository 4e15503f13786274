//! Every simulated node's heartbeats from one task: Lease renewals spread
//! evenly over the renew interval and Ready status updates over theirs,
//! kept on a timing wheel and sent with bounded concurrency.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures::stream::FuturesUnordered;
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, NodeCondition};
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use tokio::time::Instant;

use super::nodes::{ready_conditions, SimNode};
use super::stats::SimulationStats;
use super::wheel::{spread, TimingWheel};
use super::SimulateConfig;
use crate::node::lease::NodeLease;
use crate::node::status::patch_conditions;

/// The wheel's resolution.
const TICK: Duration = Duration::from_millis(10);
/// A failed heartbeat is tried again after this long.
const RETRY: Duration = Duration::from_secs(1);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Beat {
    Lease,
    Status,
}

/// One heartbeat of one node, and when it was due (from the start).
#[derive(Debug, Clone, Copy)]
struct Job {
    node: usize,
    beat: Beat,
    due: Duration,
}

type Outcome = (Job, Option<NodeLease>, bool);
type InFlight = Pin<Box<dyn Future<Output = Outcome> + Send>>;

/// The heartbeat driver's state: the wheel, the jobs due but not yet
/// sent, and each node's Lease while it is not being renewed.
pub struct Heartbeats {
    nodes: Vec<Arc<SimNode>>,
    leases: Vec<Option<NodeLease>>,
    leases_api: Api<Lease>,
    nodes_api: Api<Node>,
    /// Ready since the simulation started.
    conditions: Arc<Vec<NodeCondition>>,
    config: SimulateConfig,
    stats: Arc<SimulationStats>,
    wheel: TimingWheel<Job>,
    backlog: VecDeque<Job>,
    start: Instant,
}

impl Heartbeats {
    /// Schedules the first heartbeats of the registered nodes: node i's
    /// at i/N of each interval.
    pub fn new(
        nodes: Vec<Arc<SimNode>>,
        leases: Vec<Option<NodeLease>>,
        leases_api: Api<Lease>,
        nodes_api: Api<Node>,
        config: SimulateConfig,
        stats: Arc<SimulationStats>,
    ) -> Heartbeats {
        let horizon = config.lease_interval.max(config.status_interval) + RETRY;
        let mut wheel = TimingWheel::covering(TICK, horizon);
        let count = nodes.len();
        for (node, lease) in leases.iter().enumerate() {
            if lease.is_none() {
                continue;
            }
            for (beat, interval) in [
                (Beat::Lease, config.lease_interval),
                (Beat::Status, config.status_interval),
            ] {
                let due = spread(node, count, interval);
                wheel.schedule(due, Job { node, beat, due });
            }
        }
        Heartbeats {
            nodes,
            leases,
            leases_api,
            nodes_api,
            conditions: Arc::new(ready_conditions(&[], Timestamp::now())),
            config,
            stats,
            wheel,
            backlog: VecDeque::new(),
            start: Instant::now(),
        }
    }

    /// Sends heartbeats as they fall due, forever (until dropped).
    pub async fn run(mut self) {
        let mut in_flight: FuturesUnordered<InFlight> = FuturesUnordered::new();
        loop {
            while in_flight.len() < self.config.concurrency.max(1) {
                let Some(job) = self.backlog.pop_front() else {
                    break;
                };
                if let Some(send) = self.send(job) {
                    in_flight.push(send);
                }
            }
            let next_tick = self.start + self.wheel.next_deadline();
            tokio::select! {
                Some(outcome) = in_flight.next(), if !in_flight.is_empty() => self.done(outcome),
                () = tokio::time::sleep_until(next_tick) => {
                    let due = self.wheel.expire(self.start.elapsed());
                    self.backlog.extend(due);
                }
            }
        }
    }

    fn send(&mut self, job: Job) -> Option<InFlight> {
        match job.beat {
            Beat::Lease => {
                let mut lease = self.leases[job.node].take()?;
                let api = self.leases_api.clone();
                Some(Box::pin(async move {
                    let ok = match lease.renew(&api, Timestamp::now()).await {
                        Ok(()) => true,
                        Err(err) => {
                            tracing::debug!(node = %lease.node_name, error = %err, "simulated lease renewal failed");
                            false
                        }
                    };
                    (job, Some(lease), ok)
                }))
            }
            Beat::Status => {
                let api = self.nodes_api.clone();
                let name = self.nodes[job.node].name.clone();
                let conditions = Arc::clone(&self.conditions);
                Some(Box::pin(async move {
                    let ready = ready_conditions(&conditions, Timestamp::now());
                    let ok = match patch_conditions(&api, &name, &ready).await {
                        Ok(()) => true,
                        Err(err) => {
                            tracing::debug!(node = %name, error = %err, "simulated node status update failed");
                            false
                        }
                    };
                    (job, None, ok)
                }))
            }
        }
    }

    /// Records a finished heartbeat and schedules the node's next one:
    /// one interval after the last due time, or a retry of this one.
    fn done(&mut self, (job, lease, ok): Outcome) {
        if let Some(lease) = lease {
            self.leases[job.node] = Some(lease);
        }
        let now = self.start.elapsed();
        let interval = match job.beat {
            Beat::Lease => self.config.lease_interval,
            Beat::Status => self.config.status_interval,
        };
        match (job.beat, ok) {
            (Beat::Lease, true) => self
                .stats
                .renewed(now.saturating_sub(job.due), self.config.late_after),
            (Beat::Lease, false) => self.stats.renewal_failed(),
            (Beat::Status, true) => self.stats.status_updated(),
            (Beat::Status, false) => self.stats.status_failed(),
        }
        if ok {
            let due = job.due + interval;
            self.wheel.schedule(due, Job { due, ..job });
        } else {
            self.wheel.schedule(now + RETRY, job);
        }
    }
}
