//! The taints the node lifecycle controller owns: `not-ready` for a node
//! whose Ready condition is False, `unreachable` for Unknown, each as
//! NoSchedule (kept off by the scheduler) and NoExecute (its pods evicted
//! by the taint eviction controller), lifted when the node is Ready.

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Taint;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

pub const NOT_READY: &str = "node.kubernetes.io/not-ready";
pub const UNREACHABLE: &str = "node.kubernetes.io/unreachable";
pub const NO_SCHEDULE: &str = "NoSchedule";
pub const NO_EXECUTE: &str = "NoExecute";

/// The taint key a Ready condition status stands for; none when ready.
pub fn key_for(ready: &str) -> Option<&'static str> {
    match ready {
        "True" => None,
        "False" => Some(NOT_READY),
        _ => Some(UNREACHABLE),
    }
}

fn is_ours(taint: &Taint) -> bool {
    (taint.key == NOT_READY || taint.key == UNREACHABLE)
        && (taint.effect == NO_SCHEDULE || taint.effect == NO_EXECUTE)
}

/// How a NoExecute taint would come to the node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoExecute {
    /// It has the right one, or needs none.
    Steady,
    /// It has the other one (not-ready ↔ unreachable): swapped at once.
    Swap,
    /// It has none: added when the eviction rate limiter allows.
    Add,
}

/// What the node's NoExecute taints need for this Ready status.
pub fn no_execute_need(current: &[Taint], ready: &str) -> NoExecute {
    let Some(key) = key_for(ready) else {
        return NoExecute::Steady;
    };
    let ours: Vec<&Taint> = current
        .iter()
        .filter(|t| is_ours(t) && t.effect == NO_EXECUTE)
        .collect();
    if ours.iter().any(|t| t.key == key) {
        NoExecute::Steady
    } else if ours.is_empty() {
        NoExecute::Add
    } else {
        NoExecute::Swap
    }
}

/// The node's taints for this Ready status: ours that no longer apply
/// removed, the NoSchedule one added, and the NoExecute one added (with
/// the time it was added) when `add_no_execute`; others untouched.
pub fn reconcile(
    current: &[Taint],
    ready: &str,
    add_no_execute: bool,
    now: Timestamp,
) -> Vec<Taint> {
    let wanted = key_for(ready);
    let mut taints: Vec<Taint> = current
        .iter()
        .filter(|t| !is_ours(t) || Some(t.key.as_str()) == wanted)
        .cloned()
        .collect();
    let Some(key) = wanted else {
        return taints;
    };
    let has =
        |taints: &[Taint], effect: &str| taints.iter().any(|t| t.key == key && t.effect == effect);
    if !has(&taints, NO_SCHEDULE) {
        taints.push(Taint {
            key: key.into(),
            effect: NO_SCHEDULE.into(),
            time_added: None,
            value: None,
        });
    }
    if add_no_execute && !has(&taints, NO_EXECUTE) {
        taints.push(Taint {
            key: key.into(),
            effect: NO_EXECUTE.into(),
            time_added: Some(Time(now)),
            value: None,
        });
    }
    taints
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nodelifecycle::fixtures::{at, taint};

    fn keys(taints: &[Taint]) -> Vec<String> {
        taints
            .iter()
            .map(|t| format!("{}:{}", t.key, t.effect))
            .collect()
    }

    #[test]
    fn an_unreachable_node_is_tainted_and_the_taints_go_when_it_is_ready() {
        let own = taint("dedicated", NO_SCHEDULE, None);
        assert_eq!(
            no_execute_need(std::slice::from_ref(&own), "Unknown"),
            NoExecute::Add
        );
        let tainted = reconcile(std::slice::from_ref(&own), "Unknown", true, at(10));
        assert_eq!(
            keys(&tainted),
            [
                "dedicated:NoSchedule",
                "node.kubernetes.io/unreachable:NoSchedule",
                "node.kubernetes.io/unreachable:NoExecute"
            ]
        );
        assert_eq!(tainted[2].time_added, Some(Time(at(10))));
        assert_eq!(no_execute_need(&tainted, "Unknown"), NoExecute::Steady);
        assert_eq!(reconcile(&tainted, "Unknown", true, at(20)), tainted);

        let lifted = reconcile(&tainted, "True", false, at(30));
        assert_eq!(keys(&lifted), ["dedicated:NoSchedule"]);
    }

    #[test]
    fn no_execute_waits_for_the_rate_limiter_but_no_schedule_does_not() {
        let held = reconcile(&[], "False", false, at(10));
        assert_eq!(keys(&held), ["node.kubernetes.io/not-ready:NoSchedule"]);
        assert_eq!(no_execute_need(&held, "False"), NoExecute::Add);
    }

    #[test]
    fn not_ready_and_unreachable_swap() {
        let not_ready = reconcile(&[], "False", true, at(10));
        assert_eq!(no_execute_need(&not_ready, "Unknown"), NoExecute::Swap);
        let unreachable = reconcile(&not_ready, "Unknown", true, at(20));
        assert_eq!(
            keys(&unreachable),
            [
                "node.kubernetes.io/unreachable:NoSchedule",
                "node.kubernetes.io/unreachable:NoExecute"
            ]
        );
        assert_eq!(no_execute_need(&[], "True"), NoExecute::Steady);
    }
}
