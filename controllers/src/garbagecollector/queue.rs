//! The work queue of object uids: each uid at most once in the queue and
//! never processed by two workers at once, with per-uid exponential
//! back-off for retries. Its size is bounded by the number of objects.
//! It reports client-go's workqueue metrics as
//! `garbage_collector_attempt_to_delete`.

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::time::Duration;

use parking_lot::Mutex;
use skiff_machinery::metrics::QueueMetrics;
use tokio::sync::Notify;
use tokio::time::Instant;

/// kube-controller-manager's name for the queue.
pub const NAME: &str = "garbage_collector_attempt_to_delete";

/// First retry delay; doubled on each failure of the same uid.
const BASE_DELAY: Duration = Duration::from_millis(50);
/// Longest retry delay.
const MAX_DELAY: Duration = Duration::from_secs(300);

#[derive(Default)]
struct State {
    queue: VecDeque<String>,
    /// Queued (or to be queued again once processed).
    dirty: HashSet<String>,
    processing: HashSet<String>,
    /// Retries waiting for their time, and the time of each uid.
    delayed: BTreeSet<(Instant, String)>,
    delayed_at: HashMap<String, Instant>,
    failures: HashMap<String, u32>,
}

impl State {
    /// Whether a worker may take `uid` now (it was not queued and is
    /// not being processed).
    fn add(&mut self, uid: String, metrics: &QueueMetrics) -> bool {
        if !self.dirty.insert(uid.clone()) {
            return false;
        }
        // Counted as client-go counts it: an add to a queue not holding
        // the uid, even while a worker processes it.
        metrics.add(&uid);
        if self.processing.contains(&uid) {
            return false;
        }
        self.queue.push_back(uid);
        true
    }

    fn promote_due(&mut self, now: Instant, metrics: &QueueMetrics) -> bool {
        let mut added = false;
        while let Some(first) = self.delayed.first().filter(|(at, _)| *at <= now).cloned() {
            self.delayed.remove(&first);
            self.delayed_at.remove(&first.1);
            added |= self.add(first.1, metrics);
        }
        added
    }
}

/// Uids to process, deduplicated, with rate-limited retries.
pub struct WorkQueue {
    state: Mutex<State>,
    ready: Notify,
    metrics: QueueMetrics,
}

impl Default for WorkQueue {
    fn default() -> Self {
        WorkQueue::new(QueueMetrics::unregistered(NAME))
    }
}

impl WorkQueue {
    /// An empty queue reporting to `metrics`.
    pub fn new(metrics: QueueMetrics) -> WorkQueue {
        WorkQueue {
            state: Mutex::default(),
            ready: Notify::new(),
            metrics,
        }
    }

    /// Queues `uid` unless it is already queued.
    pub fn add(&self, uid: String) {
        if self.state.lock().add(uid, &self.metrics) {
            self.ready.notify_one();
        }
    }

    /// Queues `uid` after `delay` (the earlier time wins if already waiting).
    pub fn add_after(&self, uid: String, delay: Duration) {
        self.metrics.retry();
        let at = Instant::now() + delay;
        let mut state = self.state.lock();
        match state.delayed_at.get(&uid) {
            Some(current) if *current <= at => return,
            Some(current) => {
                let current = *current;
                state.delayed.remove(&(current, uid.clone()));
            }
            None => {}
        }
        state.delayed_at.insert(uid.clone(), at);
        state.delayed.insert((at, uid));
        drop(state);
        // A waiting worker recomputes when to wake.
        self.ready.notify_one();
    }

    /// Queues `uid` again after its back-off, which doubles each time.
    pub fn add_rate_limited(&self, uid: String) {
        let failures = {
            let mut state = self.state.lock();
            let failures = state.failures.entry(uid.clone()).or_default();
            *failures += 1;
            *failures
        };
        self.add_after(uid, backoff(failures));
    }

    /// `uid` succeeded: its next failure starts from the first delay.
    pub fn forget(&self, uid: &str) {
        self.state.lock().failures.remove(uid);
    }

    /// The next uid to process; call [`Self::done`] with it afterwards.
    pub async fn next(&self) -> String {
        loop {
            let ready = self.ready.notified();
            let wake_at = {
                let mut state = self.state.lock();
                state.promote_due(Instant::now(), &self.metrics);
                if let Some(uid) = state.queue.pop_front() {
                    state.dirty.remove(&uid);
                    state.processing.insert(uid.clone());
                    self.metrics.start(&uid);
                    return uid;
                }
                state.delayed.first().map(|(at, _)| *at)
            };
            match wake_at {
                Some(at) => {
                    tokio::select! {
                        _ = ready => {}
                        _ = tokio::time::sleep_until(at) => {}
                    }
                }
                None => ready.await,
            }
        }
    }

    /// `uid` is processed; if it was added meanwhile, it is queued again.
    pub fn done(&self, uid: &str) {
        let mut state = self.state.lock();
        state.processing.remove(uid);
        self.metrics.done(uid);
        if state.dirty.contains(uid) {
            state.queue.push_back(uid.to_string());
            drop(state);
            self.ready.notify_one();
        }
    }

    /// Uids queued or waiting for a retry.
    pub fn len(&self) -> usize {
        let state = self.state.lock();
        state.queue.len() + state.delayed.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The delay before retry number `failures` (1-based).
fn backoff(failures: u32) -> Duration {
    let factor = 2u32.saturating_pow(failures.saturating_sub(1).min(31));
    BASE_DELAY.saturating_mul(factor).min(MAX_DELAY)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_uid_is_queued_once_and_requeued_if_added_while_processing() {
        let metrics = QueueMetrics::unregistered(NAME);
        let queue = WorkQueue::new(metrics.clone());
        queue.add("a".into());
        queue.add("a".into());
        queue.add("b".into());
        assert_eq!(queue.len(), 2);
        assert_eq!((metrics.depth(), metrics.adds()), (2, 2));
        assert_eq!(queue.next().await, "a");
        queue.add("a".into());
        assert_eq!(metrics.depth(), 2, "a waits again behind its processing");
        assert_eq!(queue.next().await, "b", "a is being processed");
        queue.done("a");
        assert_eq!(queue.next().await, "a");
        queue.done("a");
        queue.done("b");
        assert!(queue.is_empty());
        assert_eq!((metrics.depth(), metrics.adds()), (0, 3));
        assert_eq!(metrics.processing(), 0);
        queue.add_rate_limited("c".into());
        assert_eq!((metrics.retries(), metrics.depth()), (1, 0));
    }

    #[tokio::test(start_paused = true)]
    async fn failures_back_off_exponentially_until_forgotten() {
        let queue = WorkQueue::default();
        let start = Instant::now();
        for expected_ms in [50, 100, 200] {
            queue.add_rate_limited("a".into());
            let uid = queue.next().await;
            assert_eq!(uid, "a");
            queue.done(&uid);
            let waited = Instant::now() - start;
            assert!(waited >= Duration::from_millis(expected_ms), "{waited:?}");
        }
        queue.forget("a");
        let before = Instant::now();
        queue.add_rate_limited("a".into());
        queue.next().await;
        assert_eq!(Instant::now() - before, BASE_DELAY);
    }

    #[tokio::test(start_paused = true)]
    async fn a_direct_add_does_not_wait_for_a_pending_retry() {
        let queue = WorkQueue::default();
        queue.add_after("a".into(), Duration::from_secs(60));
        queue.add("b".into());
        assert_eq!(queue.next().await, "b");
        let before = Instant::now();
        assert_eq!(queue.next().await, "a");
        assert!(Instant::now() - before >= Duration::from_secs(59));
    }

    #[test]
    fn backoff_is_capped() {
        assert_eq!(backoff(1), BASE_DELAY);
        assert_eq!(backoff(2), BASE_DELAY * 2);
        assert_eq!(backoff(40), MAX_DELAY);
    }
}
