//! Per-key retry back-off shared by the controllers that sync one object
//! at a time: kube-controller-manager's default item rate limiter (5ms
//! doubled on each failure, up to 1000s), forgotten after a success.

use std::collections::HashMap;
use std::time::Duration;

use parking_lot::Mutex;

/// The first retry after a failed sync, doubled on each further failure.
const RETRY_BASE: Duration = Duration::from_millis(5);
/// The longest wait between retries.
const RETRY_MAX: Duration = Duration::from_secs(1000);

/// Failures so far, by object key.
#[derive(Debug, Default)]
pub struct Failures(Mutex<HashMap<String, u32>>);

impl Failures {
    /// Records a failure of `key`; the delay before its next try.
    pub fn delay(&self, key: &str) -> Duration {
        let mut failures = self.0.lock();
        let count = failures.entry(key.to_string()).or_insert(0);
        *count = count.saturating_add(1);
        retry_delay(*count)
    }

    /// `key` synced: its next failure starts the back-off over.
    pub fn forget(&self, key: &str) {
        self.0.lock().remove(key);
    }
}

/// The back-off before retry number `failures` (5ms doubled up to 1000s),
/// kube-controller-manager's default per-item rate limiter.
pub fn retry_delay(failures: u32) -> Duration {
    let exponent = failures.saturating_sub(1).min(31);
    RETRY_BASE.saturating_mul(1 << exponent).min(RETRY_MAX)
}

/// `namespace/name` of any object.
pub fn key(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> String {
    format!(
        "{}/{}",
        meta.namespace.as_deref().unwrap_or_default(),
        meta.name.as_deref().unwrap_or_default()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_back_off_exponentially_up_to_a_limit() {
        assert_eq!(retry_delay(1), Duration::from_millis(5));
        assert_eq!(retry_delay(2), Duration::from_millis(10));
        assert_eq!(retry_delay(5), Duration::from_millis(80));
        assert_eq!(retry_delay(40), RETRY_MAX);
    }

    #[test]
    fn failures_back_off_until_forgotten() {
        let failures = Failures::default();
        assert_eq!(failures.delay("a"), Duration::from_millis(5));
        assert_eq!(failures.delay("a"), Duration::from_millis(10));
        assert_eq!(failures.delay("b"), Duration::from_millis(5));
        failures.forget("a");
        assert_eq!(failures.delay("a"), Duration::from_millis(5));
    }
}
