//! The scheduler's Prometheus metrics, with kube-scheduler's names:
//! scheduling attempts by result, their duration, pods bound end to end,
//! preemption victims, and the queue's sizes.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use crate::queue::Lengths;

/// Histogram buckets in seconds (kube-scheduler's: 1 ms doubling).
const BUCKETS: [f64; 15] = [
    0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064, 0.128, 0.256, 0.512, 1.024, 2.048, 4.096,
    8.192, 16.384,
];

#[derive(Default)]
struct Histogram {
    counts: [u64; BUCKETS.len()],
    count: u64,
    sum: f64,
}

impl Histogram {
    fn observe(&mut self, seconds: f64) {
        for (i, bound) in BUCKETS.iter().enumerate() {
            if seconds <= *bound {
                self.counts[i] += 1;
            }
        }
        self.count += 1;
        self.sum += seconds;
    }

    fn render(&self, out: &mut String, name: &str, labels: &str) {
        let sep = if labels.is_empty() { "" } else { "," };
        for (bound, count) in BUCKETS.iter().zip(self.counts) {
            let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"{bound}\"}} {count}");
        }
        let _ = writeln!(
            out,
            "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {}",
            self.count
        );
        let braces = if labels.is_empty() {
            String::new()
        } else {
            format!("{{{labels}}}")
        };
        let _ = writeln!(out, "{name}_sum{braces} {}", self.sum);
        let _ = writeln!(out, "{name}_count{braces} {}", self.count);
    }
}

#[derive(Default)]
pub struct Metrics {
    /// (result, profile) → attempts and their durations.
    attempts: Mutex<Vec<((&'static str, String), Histogram)>>,
    e2e: Mutex<Histogram>,
    preemption_victims: AtomicU64,
    queue: Mutex<Lengths>,
}

impl Metrics {
    pub fn attempt(&self, result: &'static str, profile: &str, took: Duration) {
        let mut attempts = self.attempts.lock().unwrap_or_else(|e| e.into_inner());
        let at = match attempts
            .iter()
            .position(|((r, p), _)| *r == result && p == profile)
        {
            Some(at) => at,
            None => {
                attempts.push(((result, profile.to_string()), Histogram::default()));
                attempts.len() - 1
            }
        };
        attempts[at].1.observe(took.as_secs_f64());
    }

    /// A pod bound, `took` after it entered the queue.
    pub fn bound(&self, took: Duration) {
        self.e2e
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .observe(took.as_secs_f64());
    }

    pub fn preempted(&self) {
        self.preemption_victims.fetch_add(1, Ordering::Relaxed);
    }

    pub fn set_queue(&self, lengths: Lengths) {
        *self.queue.lock().unwrap_or_else(|e| e.into_inner()) = lengths;
    }

    /// Attempts so far with `result`, over every profile.
    pub fn attempts(&self, result: &str) -> u64 {
        self.attempts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter(|((r, _), _)| *r == result)
            .map(|(_, h)| h.count)
            .sum()
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let attempts = self.attempts.lock().unwrap_or_else(|e| e.into_inner());
        out.push_str("# HELP scheduler_schedule_attempts_total Number of attempts to schedule pods, by the result.\n# TYPE scheduler_schedule_attempts_total counter\n");
        for ((result, profile), h) in attempts.iter() {
            let _ = writeln!(
                out,
                "scheduler_schedule_attempts_total{{profile=\"{profile}\",result=\"{result}\"}} {}",
                h.count
            );
        }
        out.push_str("# HELP scheduler_scheduling_attempt_duration_seconds Scheduling attempt latency in seconds (scheduling algorithm + binding).\n# TYPE scheduler_scheduling_attempt_duration_seconds histogram\n");
        for ((result, profile), h) in attempts.iter() {
            h.render(
                &mut out,
                "scheduler_scheduling_attempt_duration_seconds",
                &format!("profile=\"{profile}\",result=\"{result}\""),
            );
        }
        drop(attempts);
        out.push_str("# HELP scheduler_pod_scheduling_sli_duration_seconds E2e latency for a pod being scheduled, from the time the pod enters the scheduling queue.\n# TYPE scheduler_pod_scheduling_sli_duration_seconds histogram\n");
        self.e2e.lock().unwrap_or_else(|e| e.into_inner()).render(
            &mut out,
            "scheduler_pod_scheduling_sli_duration_seconds",
            "",
        );
        let _ = writeln!(
            out,
            "# HELP scheduler_preemption_victims_total Pods evicted by preemption.\n# TYPE scheduler_preemption_victims_total counter\nscheduler_preemption_victims_total {}",
            self.preemption_victims.load(Ordering::Relaxed)
        );
        let q = *self.queue.lock().unwrap_or_else(|e| e.into_inner());
        out.push_str("# HELP scheduler_pending_pods Number of pending pods, by the queue type.\n# TYPE scheduler_pending_pods gauge\n");
        for (queue, n) in [
            ("active", q.active),
            ("backoff", q.backoff),
            ("unschedulable", q.unschedulable),
            ("gated", q.gated),
        ] {
            let _ = writeln!(out, "scheduler_pending_pods{{queue=\"{queue}\"}} {n}");
        }
        out
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
        let text = metrics.render();
        assert!(text.contains(
            "scheduler_schedule_attempts_total{profile=\"default-scheduler\",result=\"scheduled\"} 2"
        ));
        assert!(text.contains("scheduler_scheduling_attempt_duration_seconds_bucket{profile=\"default-scheduler\",result=\"scheduled\",le=\"0.004\"} 1"));
        assert!(text.contains("scheduler_pending_pods{queue=\"unschedulable\"} 1"));
        assert_eq!(metrics.attempts("scheduled"), 2);
    }
}
