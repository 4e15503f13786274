//! Scheduling throughput from binding instants, as scheduler_perf reports
//! it: pods bound over the whole run (first create → last binding), and
//! the average and percentiles of the pods bound in each 1-second window.

use std::time::Duration;

/// A window shorter than this at the end of a run is merged into the one
/// before it, so that a few last pods do not read as a rate of their own.
const SHORTEST_TAIL: f64 = 0.5;

#[derive(Debug, Clone, Default)]
pub struct Throughput {
    pub pods: usize,
    /// First create → last binding.
    pub elapsed: Duration,
    /// Pods bound per second of each 1-second window after the first
    /// create, in time order.
    pub windows: Vec<f64>,
}

impl Throughput {
    /// From each pod's binding, as time since the first create.
    pub fn from_bindings(bound_after: &[Duration]) -> Throughput {
        let Some(&last) = bound_after.iter().max() else {
            return Throughput::default();
        };
        Throughput {
            pods: bound_after.len(),
            elapsed: last,
            windows: windows(bound_after, last.as_secs_f64()),
        }
    }

    /// Pods over the whole run.
    pub fn per_second(&self) -> f64 {
        self.pods as f64 / self.elapsed.as_secs_f64().max(f64::EPSILON)
    }

    /// The mean of the windows' rates (scheduler_perf's "Average").
    pub fn window_average(&self) -> f64 {
        if self.windows.is_empty() {
            return 0.0;
        }
        self.windows.iter().sum::<f64>() / self.windows.len() as f64
    }

    /// Nearest-rank percentile of the windows' rates, `p` in 0..=100.
    pub fn window_percentile(&self, p: f64) -> f64 {
        let mut sorted = self.windows.clone();
        sorted.sort_by(f64::total_cmp);
        let n = sorted.len();
        if n == 0 {
            return 0.0;
        }
        let rank = ((p / 100.0) * n as f64).ceil() as usize;
        sorted[rank.clamp(1, n) - 1]
    }
}

/// The rate in each whole second up to `end` (seconds), the last partial
/// window scaled to its length, or merged into the one before if shorter
/// than `SHORTEST_TAIL`.
fn windows(bound_after: &[Duration], end: f64) -> Vec<f64> {
    let whole = end.floor() as usize;
    let mut counts = vec![0usize; whole + 1];
    for at in bound_after {
        let slot = (at.as_secs_f64().floor() as usize).min(whole);
        counts[slot] += 1;
    }
    let tail = end - whole as f64;
    let mut rates: Vec<f64> = counts[..whole].iter().map(|&c| c as f64).collect();
    let tail_count = counts[whole] as f64;
    match rates.last_mut() {
        Some(previous) if tail < SHORTEST_TAIL => {
            *previous = (*previous + tail_count) / (1.0 + tail);
        }
        _ if tail > 0.0 => rates.push(tail_count / tail),
        // Every pod bound at exactly 0 s: one instant, no rate to speak of.
        _ => rates.push(tail_count),
    }
    rates
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(values: &[u64]) -> Vec<Duration> {
        values.iter().map(|&v| Duration::from_millis(v)).collect()
    }

    #[test]
    fn windows_count_pods_per_second() {
        // 3 pods in the first second, 1 in the second, 2 in a 0.6 s tail.
        let t = Throughput::from_bindings(&ms(&[100, 200, 900, 1500, 2100, 2600]));
        assert_eq!(t.pods, 6);
        assert_eq!(t.windows.len(), 3);
        assert_eq!(t.windows[0], 3.0);
        assert_eq!(t.windows[1], 1.0);
        assert!((t.windows[2] - 2.0 / 0.6).abs() < 1e-9);
        assert!((t.per_second() - 6.0 / 2.6).abs() < 1e-9);
        assert_eq!(t.window_percentile(50.0), 3.0);
        assert_eq!(t.window_percentile(0.0), 1.0);
    }

    #[test]
    fn a_short_tail_joins_the_window_before() {
        let t = Throughput::from_bindings(&ms(&[500, 900, 1100]));
        assert_eq!(t.windows.len(), 1);
        assert!((t.windows[0] - 3.0 / 1.1).abs() < 1e-9);
    }

    #[test]
    fn a_run_under_a_second_is_one_window() {
        let t = Throughput::from_bindings(&ms(&[100, 200, 400]));
        assert_eq!(t.windows, vec![3.0 / 0.4]);
        assert_eq!(t.window_average(), 3.0 / 0.4);
        assert_eq!(Throughput::from_bindings(&[]).window_average(), 0.0);
    }
}
