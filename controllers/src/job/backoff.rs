//! The back-off between failed pods and their replacements: 10 s after
//! the first failure since the last success, doubling with each further
//! one, at most 6 minutes (kube's `DefaultJobPodFailureBackOff` and
//! `MaxJobPodFailureBackOff`), counted from the last failure.

use std::time::Duration;

use jiff::Timestamp;

/// The wait after the first failure.
pub const DEFAULT_BACKOFF: Duration = Duration::from_secs(10);
/// The longest wait.
pub const MAX_BACKOFF: Duration = Duration::from_secs(360);

/// Failures of a Job since its last success (kept in memory, as kube's
/// `backoffRecord`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BackoffRecord {
    pub failures_after_last_success: u32,
    pub last_failure: Option<Timestamp>,
}

impl BackoffRecord {
    /// The record after newly counted pods: `failed` holds the finish
    /// times of the new failures; a new success resets the count to the
    /// failures that finished after the latest success.
    pub fn update(self, succeeded: &[Timestamp], failed: &[Timestamp]) -> BackoffRecord {
        let last_failure = failed.iter().max().copied();
        let Some(last_success) = succeeded.iter().max() else {
            if failed.is_empty() {
                return self;
            }
            return BackoffRecord {
                failures_after_last_success: self.failures_after_last_success + failed.len() as u32,
                last_failure: last_failure.max(self.last_failure),
            };
        };
        let after: Vec<_> = failed.iter().filter(|t| *t > last_success).collect();
        BackoffRecord {
            failures_after_last_success: after.len() as u32,
            last_failure: after.into_iter().max().copied(),
        }
    }

    /// How long to wait at `now` before creating a replacement pod.
    pub fn remaining(&self, now: Timestamp) -> Duration {
        let (count, Some(last)) = (self.failures_after_last_success, self.last_failure) else {
            return Duration::ZERO;
        };
        if count == 0 {
            return Duration::ZERO;
        }
        let backoff = DEFAULT_BACKOFF
            .saturating_mul(1u32 << (count - 1).min(20))
            .min(MAX_BACKOFF);
        let elapsed = Duration::try_from(now.duration_since(last)).unwrap_or_default();
        backoff.saturating_sub(elapsed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jiff::SignedDuration;

    const T0: Timestamp = Timestamp::constant(1_750_000_000, 0);

    fn at(seconds: i64) -> Timestamp {
        T0.checked_add(SignedDuration::from_secs(seconds)).unwrap()
    }

    #[test]
    fn backoff_doubles_from_ten_seconds_up_to_six_minutes() {
        let record = |n| BackoffRecord {
            failures_after_last_success: n,
            last_failure: Some(T0),
        };
        assert_eq!(record(0).remaining(T0), Duration::ZERO);
        assert_eq!(record(1).remaining(T0), Duration::from_secs(10));
        assert_eq!(record(2).remaining(T0), Duration::from_secs(20));
        assert_eq!(record(3).remaining(at(5)), Duration::from_secs(35));
        assert_eq!(record(6).remaining(T0), Duration::from_secs(320));
        assert_eq!(record(7).remaining(T0), MAX_BACKOFF);
        assert_eq!(record(40).remaining(T0), MAX_BACKOFF);
        assert_eq!(record(1).remaining(at(10)), Duration::ZERO);
        assert_eq!(record(1).remaining(at(60)), Duration::ZERO);
    }

    #[test]
    fn failures_accumulate_until_a_success() {
        let record = BackoffRecord::default().update(&[], &[at(1), at(3)]);
        assert_eq!(
            record,
            BackoffRecord {
                failures_after_last_success: 2,
                last_failure: Some(at(3))
            }
        );
        let record = record.update(&[], &[at(5)]);
        assert_eq!(record.failures_after_last_success, 3);
        assert_eq!(record.update(&[], &[]), record);
        let after_success = record.update(&[at(6)], &[at(4), at(8)]);
        assert_eq!(
            after_success,
            BackoffRecord {
                failures_after_last_success: 1,
                last_failure: Some(at(8))
            }
        );
        assert_eq!(record.update(&[at(9)], &[]), BackoffRecord::default());
    }
}
