//! Counters of a simulation, shared with whoever watches it (the
//! benchmark): registrations, heartbeats on time or late, pod transitions
//! and errors, and the renewal lags for percentiles.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;

/// Renewal lags kept for percentiles; beyond this, later ones are counted
/// but not kept (bounded memory on long runs).
const MAX_LAG_SAMPLES: usize = 1 << 20;

#[derive(Debug, Default)]
pub struct SimulationStats {
    nodes_registered: AtomicU64,
    registration_errors: AtomicU64,
    registration_micros: AtomicU64,
    renewals: AtomicU64,
    renewals_late: AtomicU64,
    renewal_errors: AtomicU64,
    status_updates: AtomicU64,
    status_errors: AtomicU64,
    pods_running: AtomicU64,
    pods_succeeded: AtomicU64,
    pods_deleted: AtomicU64,
    pod_errors: AtomicU64,
    /// Renewal lags in microseconds.
    lags: Mutex<Vec<u64>>,
}

/// A copy of the counters at one moment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StatsSnapshot {
    pub nodes_registered: u64,
    pub registration_errors: u64,
    /// Start → every node registered; `None` while registering.
    pub registration_time: Option<Duration>,
    /// Lease renewals that succeeded.
    pub renewals: u64,
    /// Of those, acknowledged more than the late limit past their due time.
    pub renewals_late: u64,
    /// Lease renewals that failed (each retried).
    pub renewal_errors: u64,
    pub status_updates: u64,
    pub status_errors: u64,
    pub pods_running: u64,
    pub pods_succeeded: u64,
    pub pods_deleted: u64,
    pub pod_errors: u64,
    /// Due time → renewal acknowledged.
    pub lag_p50: Duration,
    pub lag_p99: Duration,
    pub lag_max: Duration,
}

fn add(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

fn get(counter: &AtomicU64) -> u64 {
    counter.load(Ordering::Relaxed)
}

impl SimulationStats {
    pub fn node_registered(&self) {
        add(&self.nodes_registered);
    }

    pub fn registration_failed(&self) {
        add(&self.registration_errors);
    }

    pub fn registration_done(&self, took: Duration) {
        let micros = u64::try_from(took.as_micros()).unwrap_or(u64::MAX).max(1);
        self.registration_micros.store(micros, Ordering::Relaxed);
    }

    /// A renewal acknowledged `lag` after it was due.
    pub fn renewed(&self, lag: Duration, late_after: Duration) {
        add(&self.renewals);
        if lag > late_after {
            add(&self.renewals_late);
        }
        let mut lags = self.lags.lock();
        if lags.len() < MAX_LAG_SAMPLES {
            lags.push(u64::try_from(lag.as_micros()).unwrap_or(u64::MAX));
        }
    }

    pub fn renewal_failed(&self) {
        add(&self.renewal_errors);
    }

    pub fn status_updated(&self) {
        add(&self.status_updates);
    }

    pub fn status_failed(&self) {
        add(&self.status_errors);
    }

    pub fn pod_running(&self) {
        add(&self.pods_running);
    }

    pub fn pod_succeeded(&self) {
        add(&self.pods_succeeded);
    }

    pub fn pod_deleted(&self) {
        add(&self.pods_deleted);
    }

    pub fn pod_failed(&self) {
        add(&self.pod_errors);
    }

    pub fn snapshot(&self) -> StatsSnapshot {
        let mut lags = self.lags.lock().clone();
        lags.sort_unstable();
        let at = |p: f64| {
            let index = ((lags.len() as f64 * p).ceil() as usize).clamp(1, lags.len().max(1)) - 1;
            Duration::from_micros(lags.get(index).copied().unwrap_or(0))
        };
        let registration = get(&self.registration_micros);
        StatsSnapshot {
            nodes_registered: get(&self.nodes_registered),
            registration_errors: get(&self.registration_errors),
            registration_time: (registration > 0).then(|| Duration::from_micros(registration)),
            renewals: get(&self.renewals),
            renewals_late: get(&self.renewals_late),
            renewal_errors: get(&self.renewal_errors),
            status_updates: get(&self.status_updates),
            status_errors: get(&self.status_errors),
            pods_running: get(&self.pods_running),
            pods_succeeded: get(&self.pods_succeeded),
            pods_deleted: get(&self.pods_deleted),
            pod_errors: get(&self.pod_errors),
            lag_p50: at(0.50),
            lag_p99: at(0.99),
            lag_max: lags
                .last()
                .map_or(Duration::ZERO, |&m| Duration::from_micros(m)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn late_renewals_are_counted_and_lags_give_percentiles() {
        let stats = SimulationStats::default();
        let late_after = Duration::from_secs(2);
        for ms in 1..=100 {
            stats.renewed(Duration::from_millis(ms), late_after);
        }
        stats.renewed(Duration::from_secs(3), late_after);
        stats.renewal_failed();
        let snap = stats.snapshot();
        assert_eq!(snap.renewals, 101);
        assert_eq!(snap.renewals_late, 1);
        assert_eq!(snap.renewal_errors, 1);
        assert_eq!(snap.lag_p50, Duration::from_millis(51));
        assert_eq!(snap.lag_p99, Duration::from_millis(100));
        assert_eq!(snap.lag_max, Duration::from_secs(3));
        assert_eq!(snap.registration_time, None);
        stats.registration_done(Duration::from_millis(1500));
        assert_eq!(
            stats.snapshot().registration_time,
            Some(Duration::from_millis(1500))
        );
    }

    #[test]
    fn no_lags_read_as_zero() {
        let snap = SimulationStats::default().snapshot();
        assert_eq!(snap.lag_p50, Duration::ZERO);
        assert_eq!(snap.lag_max, Duration::ZERO);
    }
}
