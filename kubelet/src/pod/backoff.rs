//! The crash-loop back-off of one container: the first restart at once,
//! then 10 s doubling to 5 minutes, forgotten after a run of 10 minutes,
//! as the kubelet does.

use std::time::Duration;

/// Back-off settings; tests shorten them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BackoffConfig {
    pub initial: Duration,
    pub max: Duration,
    /// A run at least this long resets the back-off.
    pub reset_after: Duration,
}

impl Default for BackoffConfig {
    fn default() -> Self {
        BackoffConfig {
            initial: Duration::from_secs(10),
            max: Duration::from_secs(300),
            reset_after: Duration::from_secs(600),
        }
    }
}

#[derive(Debug, Clone)]
pub struct CrashLoopBackoff {
    config: BackoffConfig,
    /// The delay before the next restart; `None` until the first restart.
    next: Option<Duration>,
}

impl CrashLoopBackoff {
    pub fn new(config: BackoffConfig) -> Self {
        CrashLoopBackoff { config, next: None }
    }

    /// How long to wait before restarting a container that ran for `ran`.
    pub fn delay_after(&mut self, ran: Duration) -> Duration {
        if ran >= self.config.reset_after {
            self.next = None;
        }
        match self.next {
            None => {
                self.next = Some(self.config.initial);
                Duration::ZERO
            }
            Some(delay) => {
                self.next = Some((delay * 2).min(self.config.max));
                delay
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restarts_back_off_from_nothing_doubling_to_the_maximum() {
        let mut backoff = CrashLoopBackoff::new(BackoffConfig::default());
        let short = Duration::from_secs(1);
        let delays: Vec<u64> = (0..8)
            .map(|_| backoff.delay_after(short).as_secs())
            .collect();
        assert_eq!(delays, [0, 10, 20, 40, 80, 160, 300, 300]);
    }

    #[test]
    fn a_long_run_forgets_the_back_off() {
        let mut backoff = CrashLoopBackoff::new(BackoffConfig::default());
        backoff.delay_after(Duration::ZERO);
        backoff.delay_after(Duration::ZERO);
        assert_eq!(
            backoff.delay_after(Duration::from_secs(600)),
            Duration::ZERO
        );
        assert_eq!(backoff.delay_after(Duration::ZERO), Duration::from_secs(10));
    }
}
