//! The eviction rate limiter: a token bucket per zone
//! (`topology.kubernetes.io/zone`), refilled at `--node-eviction-rate`
//! nodes per second with a burst of one, as kube's zone NoExecute tainter.
//! kube's lower rates for a zone in partial disruption are not applied.

use std::collections::HashMap;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Node;

pub const ZONE_LABEL: &str = "topology.kubernetes.io/zone";

/// The zone a node is in ("" when unlabelled).
pub fn zone_of(node: &Node) -> String {
    node.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(ZONE_LABEL))
        .cloned()
        .unwrap_or_default()
}

/// One token bucket per zone.
#[derive(Debug)]
pub struct ZoneLimiter {
    per_second: f64,
    buckets: HashMap<String, (f64, Timestamp)>,
}

const BURST: f64 = 1.0;

impl ZoneLimiter {
    pub fn new(per_second: f64) -> ZoneLimiter {
        ZoneLimiter {
            per_second,
            buckets: HashMap::new(),
        }
    }

    /// Takes a token of `zone` at `now`, if one is there; a rate of zero
    /// or less never gives one.
    pub fn try_take(&mut self, zone: &str, now: Timestamp) -> bool {
        if self.per_second <= 0.0 || !self.per_second.is_finite() {
            return false;
        }
        let (tokens, last) = self.buckets.entry(zone.to_string()).or_insert((BURST, now));
        let elapsed = now.duration_since(*last).as_secs_f64().max(0.0);
        *tokens = (*tokens + elapsed * self.per_second).min(BURST);
        *last = now;
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nodelifecycle::fixtures::at;

    #[test]
    fn one_node_per_interval_per_zone() {
        let mut limiter = ZoneLimiter::new(0.1);
        assert!(limiter.try_take("a", at(0)));
        assert!(!limiter.try_take("a", at(5)));
        assert!(limiter.try_take("b", at(5)), "zones are limited apart");
        assert!(limiter.try_take("a", at(10)));
        assert!(!limiter.try_take("a", at(11)));
        // The burst is one: a long wait gives one token, not many.
        assert!(limiter.try_take("a", at(1_000)));
        assert!(!limiter.try_take("a", at(1_001)));
    }

    #[test]
    fn a_zero_rate_never_evicts() {
        let mut limiter = ZoneLimiter::new(0.0);
        assert!(!limiter.try_take("a", at(0)));
        assert!(!limiter.try_take("a", at(1_000)));
    }
}
