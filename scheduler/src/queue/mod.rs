//! The scheduling queue, as kube-scheduler's: an active queue ordered by
//! priority then arrival, a back-off queue for pods that just failed, and
//! an unschedulable set for pods that cannot fit until the cluster
//! changes. Cluster events move unschedulable pods back; so does a flush
//! every 5 minutes at the latest. Pods held by a PreEnqueue plugin (e.g.
//! scheduling gates) wait apart until an update lets them in.

use std::cmp::Reverse;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::framework::PodInfo;

#[derive(Debug, Clone, Copy)]
pub struct QueueConfig {
    /// Back-off after the first failure; doubles per attempt.
    pub initial_backoff: Duration,
    pub max_backoff: Duration,
    /// The longest a pod stays unschedulable without a cluster event.
    pub max_unschedulable: Duration,
}

impl Default for QueueConfig {
    fn default() -> QueueConfig {
        QueueConfig {
            initial_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(10),
            max_unschedulable: Duration::from_secs(300),
        }
    }
}

/// A pod in the queue, with its scheduling history.
#[derive(Debug, Clone)]
pub struct QueuedPod {
    pub info: Arc<PodInfo>,
    /// Scheduling attempts so far.
    pub attempts: u32,
    /// When it entered the queue first (for the e2e latency metric).
    pub first_seen: Instant,
    /// When it last entered the active queue (the QueueSort tiebreak).
    pub since: Instant,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Where {
    Active,
    Backoff,
    Unschedulable,
    Gated,
    /// Popped: a scheduling cycle holds it.
    InFlight,
}

/// Queue sizes, for metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Lengths {
    pub active: usize,
    pub backoff: usize,
    pub unschedulable: usize,
    pub gated: usize,
}

type ActiveKey = (Reverse<i32>, Instant, u64);
type BackoffKey = (Instant, u64);
/// A queued pod, where it is, and its key in the active or back-off queue.
type Entry = (QueuedPod, Where, Option<ActiveKey>, Option<BackoffKey>);

#[derive(Default)]
struct State {
    seq: u64,
    active: BTreeMap<ActiveKey, String>,
    backoff: BTreeMap<BackoffKey, String>,
    /// Key → the pod and where it is.
    pods: HashMap<String, Entry>,
    /// Unschedulable since.
    unschedulable: HashMap<String, Instant>,
    /// Counts cluster events that moved pods; a pod popped before the last
    /// move goes to back-off, not unschedulable, when it fails.
    move_cycle: u64,
    closed: bool,
}

pub struct SchedulingQueue {
    state: Mutex<State>,
    ready: Notify,
    config: QueueConfig,
}

/// What [`SchedulingQueue::pop`] hands out: the pod and the move cycle at
/// that moment.
#[derive(Debug, Clone)]
pub struct Popped {
    pub pod: QueuedPod,
    pub move_cycle: u64,
}

impl SchedulingQueue {
    pub fn new(config: QueueConfig) -> SchedulingQueue {
        SchedulingQueue {
            state: Mutex::new(State::default()),
            ready: Notify::new(),
            config,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A new unscheduled pod: active, or gated when `admitted` is false.
    pub fn add(&self, info: Arc<PodInfo>, admitted: bool) {
        let now = Instant::now();
        let mut state = self.lock();
        if state.pods.contains_key(&info.key) {
            drop(state);
            self.update(info, admitted);
            return;
        }
        let pod = QueuedPod {
            info,
            attempts: 0,
            first_seen: now,
            since: now,
        };
        match admitted {
            true => self.push_active(&mut state, pod),
            false => {
                state
                    .pods
                    .insert(pod.info.key.clone(), (pod, Where::Gated, None, None));
            }
        }
    }

    /// The pod changed: its new state replaces the old, where it is. A
    /// gated pod that is now admitted goes to the active queue; so does an
    /// unschedulable one whose spec, labels or annotations changed (that
    /// may be what it needed) — not one whose status alone changed, as
    /// when the scheduler itself records why it failed.
    pub fn update(&self, info: Arc<PodInfo>, admitted: bool) {
        let mut state = self.lock();
        let Some((old, at, active, backoff)) = state.pods.get(&info.key).cloned() else {
            drop(state);
            if admitted {
                self.add(info, true);
            }
            return;
        };
        let mut pod = old.clone();
        pod.info = info;
        let key = pod.info.key.clone();
        match at {
            Where::InFlight | Where::Active | Where::Backoff => {
                // Same place in its queue, the new state.
                state.pods.insert(key, (pod, at, active, backoff));
            }
            Where::Unschedulable if admitted && !changed_for_scheduling(&old, &pod) => {
                state.pods.insert(key, (pod, at, active, backoff));
            }
            _ => {
                self.take(&mut state, &key);
                if !admitted {
                    state.pods.insert(key, (pod, Where::Gated, None, None));
                    return;
                }
                pod.since = Instant::now();
                self.push_active(&mut state, pod);
            }
        }
    }

    /// The pod is gone or bound elsewhere.
    pub fn delete(&self, key: &str) {
        let mut state = self.lock();
        self.take(&mut state, key);
    }

    /// Waits for the next pod of the active queue; `None` once closed.
    pub async fn pop(&self) -> Option<Popped> {
        loop {
            let notified = self.ready.notified();
            {
                let mut state = self.lock();
                if state.closed {
                    return None;
                }
                if let Some((_, key)) = state.active.pop_first() {
                    let move_cycle = state.move_cycle;
                    if let Some(entry) = state.pods.get_mut(&key) {
                        entry.1 = Where::InFlight;
                        entry.2 = None;
                        entry.0.attempts += 1;
                        return Some(Popped {
                            pod: entry.0.clone(),
                            move_cycle,
                        });
                    }
                    continue;
                }
            }
            notified.await;
        }
    }

    /// The popped pod was bound (or given up on): it leaves the queue.
    pub fn done(&self, key: &str) {
        let mut state = self.lock();
        if matches!(state.pods.get(key), Some((_, Where::InFlight, _, _))) {
            state.pods.remove(key);
        }
    }

    /// The popped pod did not fit. If the cluster changed while it was
    /// being scheduled it is retried after back-off, else it waits for a
    /// change (or the periodic flush).
    pub fn unschedulable(&self, popped: &Popped) {
        let mut state = self.lock();
        let Some((pod, Where::InFlight, _, _)) = state.pods.get(&popped.pod.info.key).cloned()
        else {
            return;
        };
        state.pods.remove(&pod.info.key);
        if state.move_cycle > popped.move_cycle {
            self.push_backoff(&mut state, pod);
        } else {
            let key = pod.info.key.clone();
            state.unschedulable.insert(key.clone(), Instant::now());
            state
                .pods
                .insert(key, (pod, Where::Unschedulable, None, None));
        }
    }

    /// The popped pod met an error (or its binding failed): retried after
    /// back-off.
    pub fn retry(&self, popped: &Popped) {
        let mut state = self.lock();
        let Some((pod, Where::InFlight, _, _)) = state.pods.get(&popped.pod.info.key).cloned()
        else {
            return;
        };
        state.pods.remove(&pod.info.key);
        self.push_backoff(&mut state, pod);
    }

    /// A cluster event that may make unschedulable pods fit (a node added
    /// or changed, a pod deleted): they go back to the active queue, or to
    /// back-off if theirs has not run out.
    pub fn move_all_unschedulable(&self) {
        let mut state = self.lock();
        state.move_cycle += 1;
        let keys: Vec<String> = state.unschedulable.keys().cloned().collect();
        for key in keys {
            self.requeue_unschedulable(&mut state, &key);
        }
    }

    /// Moves pods whose back-off ran out to the active queue, and pods
    /// unschedulable for longer than the maximum back. Call about once a
    /// second.
    pub fn flush(&self) {
        let now = Instant::now();
        let mut state = self.lock();
        while let Some((&(at, seq), _)) = state.backoff.first_key_value() {
            if at > now {
                break;
            }
            let Some(key) = state.backoff.remove(&(at, seq)) else {
                break;
            };
            if let Some((mut pod, Where::Backoff, _, _)) = state.pods.remove(&key) {
                pod.since = now;
                self.push_active(&mut state, pod);
            }
        }
        let stale: Vec<String> = state
            .unschedulable
            .iter()
            .filter(|(_, since)| now.duration_since(**since) >= self.config.max_unschedulable)
            .map(|(k, _)| k.clone())
            .collect();
        for key in stale {
            self.requeue_unschedulable(&mut state, &key);
        }
    }

    pub fn close(&self) {
        self.lock().closed = true;
        self.ready.notify_waiters();
    }

    pub fn lengths(&self) -> Lengths {
        let state = self.lock();
        let mut lengths = Lengths::default();
        for (_, at, _, _) in state.pods.values() {
            match at {
                Where::Active => lengths.active += 1,
                Where::Backoff => lengths.backoff += 1,
                Where::Unschedulable => lengths.unschedulable += 1,
                Where::Gated => lengths.gated += 1,
                Where::InFlight => {}
            }
        }
        lengths
    }

    /// Where the pod is, if queued.
    pub fn position(&self, key: &str) -> Option<Where> {
        self.lock().pods.get(key).map(|(_, at, _, _)| *at)
    }

    /// The back-off a pod gets after `attempts` attempts.
    pub fn backoff_for(&self, attempts: u32) -> Duration {
        let doublings = attempts.saturating_sub(1).min(30);
        self.config
            .initial_backoff
            .saturating_mul(1u32 << doublings)
            .min(self.config.max_backoff)
    }

    fn requeue_unschedulable(&self, state: &mut State, key: &str) {
        state.unschedulable.remove(key);
        let Some((mut pod, Where::Unschedulable, _, _)) = state.pods.remove(key) else {
            return;
        };
        let backoff_end = pod.since + self.backoff_for(pod.attempts);
        if backoff_end > Instant::now() {
            self.push_backoff(state, pod);
        } else {
            pod.since = Instant::now();
            self.push_active(state, pod);
        }
    }

    fn take(&self, state: &mut State, key: &str) -> Option<Entry> {
        let entry = state.pods.remove(key)?;
        if let Some(active) = entry.2 {
            state.active.remove(&active);
        }
        if let Some(backoff) = entry.3 {
            state.backoff.remove(&backoff);
        }
        state.unschedulable.remove(key);
        Some(entry)
    }

    fn push_active(&self, state: &mut State, pod: QueuedPod) {
        state.seq += 1;
        let key: ActiveKey = (Reverse(pod.info.priority()), pod.since, state.seq);
        state.active.insert(key, pod.info.key.clone());
        state
            .pods
            .insert(pod.info.key.clone(), (pod, Where::Active, Some(key), None));
        self.ready.notify_one();
    }

    fn push_backoff(&self, state: &mut State, pod: QueuedPod) {
        state.seq += 1;
        let at = Instant::now() + self.backoff_for(pod.attempts);
        let key = (at, state.seq);
        state.backoff.insert(key, pod.info.key.clone());
        state
            .pods
            .insert(pod.info.key.clone(), (pod, Where::Backoff, None, Some(key)));
    }
}

/// Whether the change from `old` to `new` can change a scheduling
/// decision: its spec, labels or annotations (not its status).
fn changed_for_scheduling(old: &QueuedPod, new: &QueuedPod) -> bool {
    let (a, b) = (&old.info.pod, &new.info.pod);
    a.spec != b.spec
        || a.metadata.labels != b.metadata.labels
        || a.metadata.annotations != b.metadata.annotations
}

#[cfg(test)]
mod tests;
