//! The metrics of work queues, as client-go's workqueue exports them
//! (labelled by the queue's `name`): depth, adds, retries, how long items
//! wait and how long their processing takes, and the work still running.
//! The queues themselves are their controllers'; they call the hooks.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{
    GaugeVec, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts,
};

/// client-go's buckets for the queue and work durations: 10 ns to 10 s,
/// each ten times the last.
pub const DURATION_BUCKETS: [f64; 10] = [1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0];

/// The work queues of one process: a collector to register once, and the
/// hooks of each queue by name.
#[derive(Clone)]
pub struct Workqueues {
    inner: Arc<Inner>,
}

struct Inner {
    depth: IntGaugeVec,
    adds: IntCounterVec,
    retries: IntCounterVec,
    queue_duration: HistogramVec,
    work_duration: HistogramVec,
    unfinished: GaugeVec,
    longest: GaugeVec,
    /// Each queue's items, by name: the latest queue of that name.
    queues: Mutex<HashMap<String, Arc<Mutex<Items>>>>,
}

/// The keys a queue holds and works on, with when each came.
#[derive(Default)]
struct Items {
    /// Added and not yet taken.
    waiting: HashMap<String, Instant>,
    /// Taken and not yet done.
    processing: HashMap<String, Instant>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

impl Default for Workqueues {
    fn default() -> Self {
        Workqueues::new()
    }
}

impl Workqueues {
    pub fn new() -> Workqueues {
        let name = &["name"];
        let opts = |metric: &str, help: &str| Opts::new(metric, help).subsystem("workqueue");
        let histogram = |metric: &str, help: &str| {
            HistogramVec::new(
                HistogramOpts::new(metric, help)
                    .subsystem("workqueue")
                    .buckets(DURATION_BUCKETS.to_vec()),
                name,
            )
            .expect("a valid histogram")
        };
        Workqueues {
            inner: Arc::new(Inner {
                depth: IntGaugeVec::new(opts("depth", "Current depth of workqueue"), name)
                    .expect("a valid gauge"),
                adds: IntCounterVec::new(
                    opts("adds_total", "Total number of adds handled by workqueue"),
                    name,
                )
                .expect("a valid counter"),
                retries: IntCounterVec::new(
                    opts("retries_total", "Total number of retries handled by workqueue"),
                    name,
                )
                .expect("a valid counter"),
                queue_duration: histogram(
                    "queue_duration_seconds",
                    "How long in seconds an item stays in workqueue before being requested.",
                ),
                work_duration: histogram(
                    "work_duration_seconds",
                    "How long in seconds processing an item from workqueue takes.",
                ),
                unfinished: GaugeVec::new(
                    opts(
                        "unfinished_work_seconds",
                        "How many seconds of work has done that is in progress and hasn't been observed by work_duration. Large values indicate stuck threads. One can deduce the number of stuck threads by observing the rate at which this increases.",
                    ),
                    name,
                )
                .expect("a valid gauge"),
                longest: GaugeVec::new(
                    opts(
                        "longest_running_processor_seconds",
                        "How many seconds has the longest running processor for workqueue been running.",
                    ),
                    name,
                )
                .expect("a valid gauge"),
                queues: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// The hooks of the queue `name`, starting empty: a controller makes
    /// its queue afresh each time it starts (a new leader term), and what
    /// an earlier one left waiting is no longer counted. Counters and
    /// histograms go on from where they were.
    pub fn queue(&self, name: &str) -> QueueMetrics {
        let inner = &self.inner;
        let items = Arc::new(Mutex::new(Items::default()));
        lock(&inner.queues).insert(name.to_string(), items.clone());
        let depth = inner.depth.with_label_values(&[name]);
        depth.set(0);
        inner.unfinished.with_label_values(&[name]).set(0.0);
        inner.longest.with_label_values(&[name]).set(0.0);
        QueueMetrics {
            depth,
            adds: inner.adds.with_label_values(&[name]),
            retries: inner.retries.with_label_values(&[name]),
            queue_duration: inner.queue_duration.with_label_values(&[name]),
            work_duration: inner.work_duration.with_label_values(&[name]),
            items,
        }
    }

    fn collectors(&self) -> [&dyn Collector; 7] {
        let inner = &self.inner;
        [
            &inner.depth,
            &inner.adds,
            &inner.retries,
            &inner.queue_duration,
            &inner.work_duration,
            &inner.unfinished,
            &inner.longest,
        ]
    }

    /// The work in progress of each queue, now.
    fn refresh_unfinished(&self) {
        let now = Instant::now();
        let queues = lock(&self.inner.queues);
        for (name, items) in queues.iter() {
            let items = lock(items);
            let running = items
                .processing
                .values()
                .map(|started| now.duration_since(*started).as_secs_f64());
            let (total, longest) = running.fold((0.0, 0.0_f64), |(total, longest), s| {
                (total + s, longest.max(s))
            });
            self.inner.unfinished.with_label_values(&[name]).set(total);
            self.inner.longest.with_label_values(&[name]).set(longest);
        }
    }
}

impl Collector for Workqueues {
    fn desc(&self) -> Vec<&Desc> {
        self.collectors()
            .into_iter()
            .flat_map(|c| c.desc())
            .collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        self.refresh_unfinished();
        self.collectors()
            .into_iter()
            .flat_map(|c| c.collect())
            .collect()
    }
}

/// One queue's hooks, called as client-go's queue calls its metrics:
/// [`add`](Self::add) when a key is queued, [`start`](Self::start) when a
/// worker takes it, [`done`](Self::done) when it is processed,
/// [`retry`](Self::retry) when it is queued again after a delay.
#[derive(Clone)]
pub struct QueueMetrics {
    depth: IntGauge,
    adds: IntCounter,
    retries: IntCounter,
    queue_duration: Histogram,
    work_duration: Histogram,
    items: Arc<Mutex<Items>>,
}

impl QueueMetrics {
    /// The hooks of a queue of no process's registry (tests, queues made
    /// outside a controller-manager).
    pub fn unregistered(name: &str) -> QueueMetrics {
        Workqueues::new().queue(name)
    }

    /// `key` is queued. Adding a key already waiting changes nothing, as
    /// the queue holds it once; `false` then.
    pub fn add(&self, key: &str) -> bool {
        let mut items = lock(&self.items);
        if items.waiting.contains_key(key) {
            return false;
        }
        items.waiting.insert(key.to_string(), Instant::now());
        self.depth.set(items.waiting.len() as i64);
        self.adds.inc();
        true
    }

    /// An add the queue made itself when a delay ran out, with no time
    /// of its own to measure the wait from: counted, not timed.
    pub fn add_when_due(&self) {
        self.adds.inc();
    }

    /// A worker takes `key`: its wait is measured from its first add.
    /// `false` when it was not waiting.
    pub fn start(&self, key: &str) -> bool {
        let now = Instant::now();
        let mut items = lock(&self.items);
        let added = items.waiting.remove(key);
        if let Some(added) = added {
            self.queue_duration
                .observe(now.duration_since(added).as_secs_f64());
            self.depth.set(items.waiting.len() as i64);
        }
        items.processing.insert(key.to_string(), now);
        added.is_some()
    }

    /// The worker is done with `key`.
    pub fn done(&self, key: &str) {
        let mut items = lock(&self.items);
        if let Some(started) = items.processing.remove(key) {
            self.work_duration.observe(started.elapsed().as_secs_f64());
        }
    }

    /// A key is queued again after a delay (client-go's `AddAfter`).
    pub fn retry(&self) {
        self.retries.inc();
    }

    /// Keys waiting.
    pub fn depth(&self) -> i64 {
        self.depth.get()
    }

    /// Keys added so far, over every queue of this name.
    pub fn adds(&self) -> u64 {
        self.adds.get()
    }

    /// Retries so far, over every queue of this name.
    pub fn retries(&self) -> u64 {
        self.retries.get()
    }

    /// Keys being processed.
    pub fn processing(&self) -> usize {
        lock(&self.items).processing.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(text: &str, line_start: &str) -> Option<f64> {
        text.lines()
            .find_map(|l| l.strip_prefix(line_start))
            .and_then(|v| v.trim().parse().ok())
    }

    #[test]
    fn a_queue_counts_distinct_waiting_keys_adds_and_retries() {
        let queues = Workqueues::new();
        let queue = queues.queue("replicaset");
        assert!(queue.add("default/a"));
        assert!(!queue.add("default/a"), "already waiting");
        assert!(queue.add("default/b"));
        assert_eq!((queue.depth(), queue.adds()), (2, 2));
        assert!(queue.start("default/a"));
        assert_eq!(queue.depth(), 1);
        // Added again while processed: it waits again.
        assert!(queue.add("default/a"));
        assert_eq!(queue.depth(), 2);
        queue.done("default/a");
        queue.retry();
        assert!(!queue.start("default/c"), "never added");
        queue.add_when_due();
        assert_eq!(queue.processing(), 1);
        assert_eq!((queue.adds(), queue.retries()), (4, 1));

        let registry = prometheus::Registry::new();
        registry.register(Box::new(queues.clone())).unwrap();
        let text = crate::metrics::encode(&registry);
        let name = "{name=\"replicaset\"}";
        assert_eq!(sample(&text, &format!("workqueue_depth{name}")), Some(2.0));
        assert_eq!(
            sample(&text, &format!("workqueue_adds_total{name}")),
            Some(4.0)
        );
        assert_eq!(
            sample(&text, &format!("workqueue_retries_total{name}")),
            Some(1.0)
        );
        assert_eq!(
            sample(
                &text,
                &format!("workqueue_queue_duration_seconds_count{name}")
            ),
            Some(1.0)
        );
        assert_eq!(
            sample(
                &text,
                &format!("workqueue_work_duration_seconds_count{name}")
            ),
            Some(1.0)
        );
        assert!(text.contains(
            "workqueue_work_duration_seconds_bucket{name=\"replicaset\",le=\"0.00000001\"}"
        ));
        assert!(
            text.contains("workqueue_work_duration_seconds_bucket{name=\"replicaset\",le=\"10\"}")
        );
        // default/c is still being processed.
        assert!(sample(&text, &format!("workqueue_unfinished_work_seconds{name}")).unwrap() >= 0.0);
        assert!(
            sample(
                &text,
                &format!("workqueue_longest_running_processor_seconds{name}")
            )
            .unwrap()
                >= 0.0
        );
        if let Some(verdict) = crate::metrics::promtool_check(&text) {
            verdict.unwrap();
        }
    }

    #[test]
    fn work_in_progress_is_measured_when_gathered() {
        let queues = Workqueues::new();
        let queue = queues.queue("job");
        queue.add("a");
        queue.start("a");
        std::thread::sleep(std::time::Duration::from_millis(20));
        let registry = prometheus::Registry::new();
        registry.register(Box::new(queues.clone())).unwrap();
        let text = crate::metrics::encode(&registry);
        let longest = sample(
            &text,
            "workqueue_longest_running_processor_seconds{name=\"job\"}",
        );
        assert!(longest.unwrap() >= 0.02, "{text}");
        queue.done("a");
        let text = crate::metrics::encode(&registry);
        assert_eq!(
            sample(&text, "workqueue_unfinished_work_seconds{name=\"job\"}"),
            Some(0.0)
        );
    }

    #[test]
    fn a_queue_made_again_starts_empty_and_keeps_its_counts() {
        let queues = Workqueues::new();
        let first = queues.queue("deployment");
        first.add("a");
        first.retry();
        let second = queues.queue("deployment");
        assert_eq!(second.depth(), 0);
        assert_eq!((second.adds(), second.retries()), (1, 1));
    }
}
