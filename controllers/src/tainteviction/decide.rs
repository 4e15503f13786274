//! When a pod on a node with NoExecute taints goes, as kube's taint
//! eviction controller decides it: at once if it does not tolerate every
//! such taint, after the shortest tolerationSeconds of the tolerations it
//! uses, or never if those tolerate forever.

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::{Pod, Taint, Toleration};
use skiff_machinery::scheduling::taints::tolerates;

/// The NoExecute effect.
pub const NO_EXECUTE: &str = "NoExecute";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Eviction {
    /// The pod stays: no NoExecute taint, or tolerated without limit.
    Never,
    /// The pod is deleted at this time (now or past: at once).
    At(Timestamp),
}

/// The node's NoExecute taints.
pub fn no_execute(taints: &[Taint]) -> Vec<&Taint> {
    taints.iter().filter(|t| t.effect == NO_EXECUTE).collect()
}

/// When the taints began to apply: the earliest time one was added;
/// `first_seen` for taints written without one.
pub fn tainted_since(taints: &[&Taint], first_seen: Timestamp) -> Timestamp {
    taints
        .iter()
        .map(|t| t.time_added.as_ref().map_or(first_seen, |at| at.0))
        .min()
        .unwrap_or(first_seen)
}

/// When `pod` is evicted for `taints` (NoExecute ones) present since
/// `since`.
pub fn decide(pod: &Pod, taints: &[&Taint], since: Timestamp) -> Eviction {
    if taints.is_empty() {
        return Eviction::Never;
    }
    let tolerations: &[Toleration] = pod
        .spec
        .as_ref()
        .and_then(|s| s.tolerations.as_deref())
        .unwrap_or_default();
    let mut used = Vec::new();
    for taint in taints {
        match tolerations.iter().find(|t| tolerates(t, taint)) {
            Some(toleration) => used.push(toleration),
            None => return Eviction::At(since),
        }
    }
    // The shortest limit of the tolerations used; any without a limit
    // does not stop the others' from applying.
    let limit = used.iter().filter_map(|t| t.toleration_seconds).min();
    match limit {
        None => Eviction::Never,
        Some(seconds) => Eviction::At(
            since
                .checked_add(SignedDuration::from_secs(seconds.max(0)))
                .unwrap_or(Timestamp::MAX),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nodelifecycle::fixtures::{at, pod, taint, toleration};

    const UNREACHABLE: &str = "node.kubernetes.io/unreachable";

    #[test]
    fn pods_go_at_once_unless_they_tolerate_every_no_execute_taint() {
        let unreachable = taint(UNREACHABLE, NO_EXECUTE, Some(at(100)));
        let other = taint("example.com/drain", NO_EXECUTE, Some(at(100)));
        let plain = pod("plain", "n", vec![]);
        assert_eq!(
            decide(&plain, &[&unreachable], at(100)),
            Eviction::At(at(100))
        );
        let partly = pod("partly", "n", vec![toleration(UNREACHABLE, None)]);
        assert_eq!(
            decide(&partly, &[&unreachable, &other], at(100)),
            Eviction::At(at(100))
        );
        assert_eq!(decide(&partly, &[&unreachable], at(100)), Eviction::Never);
        assert_eq!(decide(&plain, &[], at(100)), Eviction::Never);
    }

    #[test]
    fn toleration_seconds_delay_the_eviction_by_the_shortest_limit() {
        let unreachable = taint(UNREACHABLE, NO_EXECUTE, Some(at(100)));
        let other = taint("example.com/drain", NO_EXECUTE, Some(at(100)));
        let defaulted = pod("d", "n", vec![toleration(UNREACHABLE, Some(300))]);
        assert_eq!(
            decide(&defaulted, &[&unreachable], at(100)),
            Eviction::At(at(400))
        );
        let both = pod(
            "b",
            "n",
            vec![
                toleration(UNREACHABLE, Some(300)),
                toleration("example.com/drain", Some(5)),
            ],
        );
        assert_eq!(
            decide(&both, &[&unreachable, &other], at(100)),
            Eviction::At(at(105))
        );
        let mixed = pod(
            "m",
            "n",
            vec![
                toleration(UNREACHABLE, None),
                toleration("example.com/drain", Some(5)),
            ],
        );
        assert_eq!(
            decide(&mixed, &[&unreachable, &other], at(100)),
            Eviction::At(at(105))
        );
        let zero = pod("z", "n", vec![toleration(UNREACHABLE, Some(0))]);
        assert_eq!(
            decide(&zero, &[&unreachable], at(100)),
            Eviction::At(at(100))
        );
    }

    #[test]
    fn the_clock_starts_when_the_first_taint_was_added() {
        let early = taint(UNREACHABLE, NO_EXECUTE, Some(at(100)));
        let late = taint("example.com/drain", NO_EXECUTE, Some(at(200)));
        let unstamped = taint("example.com/manual", NO_EXECUTE, None);
        assert_eq!(tainted_since(&[&late, &early], at(500)), at(100));
        assert_eq!(tainted_since(&[&unstamped], at(500)), at(500));
        assert_eq!(tainted_since(&[&unstamped, &late], at(500)), at(200));
    }
}
