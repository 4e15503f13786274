//! The scheduler's Prometheus metrics, with kube-scheduler's names:
//! scheduling attempts by result, their duration, pods bound end to end,
//! preemption victims, and the queue's sizes; beside them the process's
//! and `leader_election_master_status`, all in one registry that the
//! scheduler's secure port serves.

use std::time::Duration;

use prometheus::{
    HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
};
use skiff_machinery::metrics::ProcessCollector;

use crate::queue::Lengths;

/// Histogram buckets in seconds (kube-scheduler's: 1 ms doubling).
const BUCKETS: [f64; 15] = [
    0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064, 0.128, 0.256, 0.512, 1.024, 2.048, 4.096,
    8.192, 16.384,
];

/// The name kube-scheduler's lease gives `leader_election_master_status`.
const LEASE_NAME: &str = "kube-scheduler";

pub struct Metrics {
    registry: Registry,
    attempts: IntCounterVec,
    attempt_duration: HistogramVec,
    e2e: prometheus::Histogram,
    preemption_victims: IntCounter,
    pending: IntGaugeVec,
    leading: IntGauge,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let attempts = IntCounterVec::new(
            Opts::new(
                "scheduler_schedule_attempts_total",
                "Number of attempts to schedule pods, by the result.",
            ),
            &["result", "profile"],
        )
        .expect("a valid counter");
        let attempt_duration = HistogramVec::new(
            HistogramOpts::new(
                "scheduler_scheduling_attempt_duration_seconds",
                "Scheduling attempt latency in seconds (scheduling algorithm + binding).",
            )
            .buckets(BUCKETS.to_vec()),
            &["result", "profile"],
        )
        .expect("a valid histogram");
        let e2e = prometheus::Histogram::with_opts(
            HistogramOpts::new(
                "scheduler_pod_scheduling_sli_duration_seconds",
                "E2e latency for a pod being scheduled, from the time the pod enters the scheduling queue.",
            )
            .buckets(BUCKETS.to_vec()),
        )
        .expect("a valid histogram");
        let preemption_victims = IntCounter::new(
            "scheduler_preemption_victims_total",
            "Pods evicted by preemption.",
        )
        .expect("a valid counter");
        let pending = IntGaugeVec::new(
            Opts::new(
                "scheduler_pending_pods",
                "Number of pending pods, by the queue type.",
            ),
            &["queue"],
        )
        .expect("a valid gauge");
        for queue in ["active", "backoff", "unschedulable", "gated"] {
            pending.with_label_values(&[queue]).set(0);
        }
        let leading = IntGaugeVec::new(
            Opts::new(
                "leader_election_master_status",
                "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates master. 'name' is the string used to identify the lease. Please make sure to group by name.",
            ),
            &["name"],
        )
        .expect("a valid gauge");
        let registry = Registry::new();
        for collector in [
            Box::new(attempts.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(attempt_duration.clone()),
            Box::new(e2e.clone()),
            Box::new(preemption_victims.clone()),
            Box::new(pending.clone()),
            Box::new(leading.clone()),
            Box::new(ProcessCollector::new()),
        ] {
            registry
                .register(collector)
                .expect("the scheduler's metrics have distinct names");
        }
        Metrics {
            registry,
            attempts,
            attempt_duration,
            e2e,
            preemption_victims,
            pending,
            leading: leading.with_label_values(&[LEASE_NAME]),
        }
    }

    pub fn attempt(&self, result: &'static str, profile: &str, took: Duration) {
        self.attempts.with_label_values(&[result, profile]).inc();
        self.attempt_duration
            .with_label_values(&[result, profile])
            .observe(took.as_secs_f64());
    }

    /// A pod bound, `took` after it entered the queue.
    pub fn bound(&self, took: Duration) {
        self.e2e.observe(took.as_secs_f64());
    }

    pub fn preempted(&self) {
        self.preemption_victims.inc();
    }

    pub fn set_queue(&self, lengths: Lengths) {
        for (queue, n) in [
            ("active", lengths.active),
            ("backoff", lengths.backoff),
            ("unschedulable", lengths.unschedulable),
            ("gated", lengths.gated),
        ] {
            self.pending
                .with_label_values(&[queue])
                .set(i64::try_from(n).unwrap_or(i64::MAX));
        }
    }

    /// Whether this process holds the scheduler's lease.
    pub fn set_leading(&self, leading: bool) {
        self.leading.set(i64::from(leading));
    }

    /// Attempts so far with `result`, over every profile.
    pub fn attempts(&self, result: &str) -> u64 {
        use prometheus::core::Collector;
        self.attempts
            .collect()
            .iter()
            .flat_map(|family| family.get_metric())
            .filter(|m| {
                m.get_label()
                    .iter()
                    .any(|l| l.name() == "result" && l.value() == result)
            })
            .map(|m| m.get_counter().get_value() as u64)
            .sum()
    }

    /// The registry every metric of the scheduler process is in.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        skiff_machinery::metrics::encode(&self.registry)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attempts_and_queue_sizes_render_in_the_text_format() {
        let metrics = Metrics::default();
        metrics.attempt("scheduled", "default-scheduler", Duration::from_millis(3));
        metrics.attempt("scheduled", "default-scheduler", Duration::from_millis(30));
        metrics.attempt(
            "unschedulable",
            "default-scheduler",
            Duration::from_millis(1),
        );
        metrics.set_queue(Lengths {
            active: 2,
            backoff: 0,
            unschedulable: 1,
            gated: 0,
        });
        metrics.bound(Duration::from_millis(5));
        metrics.preempted();
        metrics.set_leading(true);
        let text = metrics.render();
        assert!(text.contains(
            "scheduler_schedule_attempts_total{profile=\"default-scheduler\",result=\"scheduled\"} 2"
        ));
        assert!(text.contains("scheduler_scheduling_attempt_duration_seconds_bucket{profile=\"default-scheduler\",result=\"scheduled\",le=\"0.004\"} 1"));
        assert!(text.contains("scheduler_scheduling_attempt_duration_seconds_bucket{profile=\"default-scheduler\",result=\"scheduled\",le=\"16.384\"} 2"));
        assert!(text.contains("scheduler_pending_pods{queue=\"unschedulable\"} 1"));
        assert!(text.contains("scheduler_pending_pods{queue=\"gated\"} 0"));
        assert!(
            text.contains("scheduler_pod_scheduling_sli_duration_seconds_bucket{le=\"0.008\"} 1")
        );
        assert!(text.contains("scheduler_pod_scheduling_sli_duration_seconds_count 1"));
        assert!(text.contains("scheduler_preemption_victims_total 1"));
        assert!(text.contains("# TYPE scheduler_preemption_victims_total counter"));
        assert!(text.contains("leader_election_master_status{name=\"kube-scheduler\"} 1"));
        assert!(text.contains("\nprocess_resident_memory_bytes "));
        assert_eq!(metrics.attempts("scheduled"), 2);
        assert_eq!(metrics.attempts("unschedulable"), 1);
        if let Some(verdict) = skiff_machinery::metrics::promtool_check(&text) {
            verdict.unwrap();
        }
    }
}
