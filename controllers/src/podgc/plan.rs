//! Which pods the pod garbage collector deletes in one pass, and why, as
//! kube's PodGC picks them: terminated pods beyond the threshold (evicted
//! first, then oldest), terminating pods on out-of-service nodes, pods of
//! nodes gone for the quarantine, and terminating pods never scheduled.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::ResourceExt;

use crate::common::pods::phase;

/// How long a node must be missing before its pods are collected (kube's
/// `quarantineTime`): a node may be recreated meanwhile.
pub const QUARANTINE: Duration = Duration::from_secs(40);

/// The taint that says a node is shut down for good and its pods may go.
pub const OUT_OF_SERVICE: &str = "node.kubernetes.io/out-of-service";

/// Why a pod is collected; each decides whether it is marked Failed (and
/// with which DisruptionTarget message) before it is force-deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// Finished, beyond `--terminated-pod-gc-threshold`: deleted as is.
    Terminated,
    /// Terminating on a node not ready and tainted out-of-service.
    OutOfService,
    /// Bound to a node that no longer exists.
    Orphaned,
    /// Terminating without ever being scheduled.
    UnscheduledTerminating,
}

impl Reason {
    /// The DisruptionTarget message (reason DeletionByPodGC) set with the
    /// Failed phase, for the reasons that mark the pod first.
    pub fn disruption_message(self) -> Option<&'static str> {
        match self {
            Reason::Orphaned => Some("PodGC: node no longer exists"),
            Reason::OutOfService => Some("PodGC: node is out-of-service"),
            Reason::Terminated | Reason::UnscheduledTerminating => None,
        }
    }

    /// Whether the pod is marked Failed before it is deleted.
    pub fn marks_failed(self) -> bool {
        self != Reason::Terminated
    }
}

fn is_terminated(pod: &Pod) -> bool {
    matches!(phase(pod), "Succeeded" | "Failed")
}

fn is_evicted(pod: &Pod) -> bool {
    phase(pod) == "Failed"
        && pod.status.as_ref().and_then(|s| s.reason.as_deref()) == Some("Evicted")
}

fn node_name(pod: &Pod) -> &str {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .unwrap_or_default()
}

/// The terminated pods to delete so that `threshold` remain: evicted ones
/// first, then the oldest, then by name. A threshold of 0 keeps all.
pub fn terminated(pods: &[Arc<Pod>], threshold: usize) -> Vec<Arc<Pod>> {
    if threshold == 0 {
        return Vec::new();
    }
    let mut done: Vec<&Arc<Pod>> = pods.iter().filter(|p| is_terminated(p)).collect();
    if done.len() <= threshold {
        return Vec::new();
    }
    done.sort_by(|a, b| {
        is_evicted(b)
            .cmp(&is_evicted(a))
            .then_with(|| {
                a.metadata
                    .creation_timestamp
                    .cmp(&b.metadata.creation_timestamp)
            })
            .then_with(|| a.name_any().cmp(&b.name_any()))
    });
    let excess = done.len() - threshold;
    done.into_iter().take(excess).cloned().collect()
}

/// Terminating pods on nodes that are not ready and tainted out-of-service.
pub fn out_of_service(pods: &[Arc<Pod>], nodes: &[Arc<Node>]) -> Vec<Arc<Pod>> {
    let shut: HashSet<String> = nodes
        .iter()
        .filter(|n| crate::nodelifecycle::health::ready_status(n) != Some("True"))
        .filter(|n| {
            n.spec
                .as_ref()
                .and_then(|s| s.taints.as_ref())
                .is_some_and(|t| t.iter().any(|t| t.key == OUT_OF_SERVICE))
        })
        .map(|n| n.name_any())
        .collect();
    pods.iter()
        .filter(|p| p.metadata.deletion_timestamp.is_some() && shut.contains(node_name(p)))
        .cloned()
        .collect()
}

/// Terminating pods never bound to a node.
pub fn unscheduled_terminating(pods: &[Arc<Pod>]) -> Vec<Arc<Pod>> {
    pods.iter()
        .filter(|p| p.metadata.deletion_timestamp.is_some() && node_name(p).is_empty())
        .cloned()
        .collect()
}

/// Nodes pods are bound to that the cache does not have, tracked since
/// they were first missed; those missing for the quarantine are returned
/// (to be confirmed gone with the API before their pods are collected).
pub fn missing_nodes(
    pods: &[Arc<Pod>],
    nodes: &[Arc<Node>],
    missing_since: &mut HashMap<String, Timestamp>,
    now: Timestamp,
) -> Vec<String> {
    let known: HashSet<String> = nodes.iter().map(|n| n.name_any()).collect();
    let bound_to: HashSet<&str> = pods
        .iter()
        .map(|p| node_name(p))
        .filter(|n| !n.is_empty())
        .collect();
    missing_since.retain(|name, _| bound_to.contains(name.as_str()) && !known.contains(name));
    let mut due = Vec::new();
    for name in bound_to.into_iter().filter(|n| !known.contains(*n)) {
        let since = *missing_since.entry(name.to_string()).or_insert(now);
        if now.duration_since(since).unsigned_abs() >= QUARANTINE {
            due.push(name.to_string());
        }
    }
    due.sort();
    due
}

/// The pods bound to one of `gone` nodes.
pub fn orphaned(pods: &[Arc<Pod>], gone: &[String]) -> Vec<Arc<Pod>> {
    pods.iter()
        .filter(|p| gone.iter().any(|n| n == node_name(p)))
        .cloned()
        .collect()
}

/// One pass's collection: each pod once, with the first reason found in
/// kube's order (terminated, out-of-service, orphaned, unscheduled).
pub fn collect(
    pods: &[Arc<Pod>],
    nodes: &[Arc<Node>],
    gone: &[String],
    threshold: usize,
) -> Vec<(Arc<Pod>, Reason)> {
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    let passes = [
        (terminated(pods, threshold), Reason::Terminated),
        (out_of_service(pods, nodes), Reason::OutOfService),
        (orphaned(pods, gone), Reason::Orphaned),
        (
            unscheduled_terminating(pods),
            Reason::UnscheduledTerminating,
        ),
    ];
    for (found, reason) in passes {
        for pod in found {
            let key = (pod.namespace().unwrap_or_default(), pod.name_any());
            if seen.insert(key) {
                out.push((pod, reason));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nodelifecycle::fixtures::{at, node, taint};
    use serde_json::json;

    fn pod(name: &str, node: &str, phase: &str, created: i64) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "default",
                         "creationTimestamp": at(created).to_string()},
            "spec": {"nodeName": node, "containers": [{"name": "c"}]},
            "status": {"phase": phase},
        }))
        .unwrap()
    }

    fn terminating(mut pod: Pod) -> Pod {
        pod.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(at(1)));
        pod
    }

    fn arcs(pods: Vec<Pod>) -> Vec<Arc<Pod>> {
        pods.into_iter().map(Arc::new).collect()
    }

    fn names(pods: &[Arc<Pod>]) -> Vec<String> {
        pods.iter().map(|p| p.name_any()).collect()
    }

    #[test]
    fn terminated_pods_beyond_the_threshold_go_evicted_then_oldest_first() {
        let mut evicted = pod("evicted", "n", "Failed", 50);
        evicted.status.as_mut().unwrap().reason = Some("Evicted".into());
        let pods = arcs(vec![
            pod("new", "n", "Succeeded", 30),
            pod("old", "n", "Failed", 10),
            pod("running", "n", "Running", 1),
            pod("middle", "n", "Succeeded", 20),
            evicted,
        ]);
        assert_eq!(names(&terminated(&pods, 2)), ["evicted", "old"]);
        assert_eq!(names(&terminated(&pods, 1)), ["evicted", "old", "middle"]);
        assert!(terminated(&pods, 4).is_empty());
        assert!(terminated(&pods, 0).is_empty(), "0 keeps all");
    }

    #[test]
    fn pods_of_a_missing_node_go_after_the_quarantine() {
        let nodes = vec![Arc::new(node("here").build())];
        let pods = arcs(vec![
            pod("a", "gone", "Running", 1),
            pod("b", "here", "Running", 1),
        ]);
        let mut since = HashMap::new();
        assert!(missing_nodes(&pods, &nodes, &mut since, at(100)).is_empty());
        assert!(missing_nodes(&pods, &nodes, &mut since, at(139)).is_empty());
        let gone = missing_nodes(&pods, &nodes, &mut since, at(140));
        assert_eq!(gone, ["gone"]);
        assert_eq!(names(&orphaned(&pods, &gone)), ["a"]);
        // The node came back: the clock is forgotten.
        let back = vec![
            Arc::new(node("here").build()),
            Arc::new(node("gone").build()),
        ];
        assert!(missing_nodes(&pods, &back, &mut since, at(141)).is_empty());
        assert!(since.is_empty());
    }

    #[test]
    fn terminating_pods_on_out_of_service_nodes_and_unscheduled_ones_go() {
        let shut = node("shut")
            .ready("False", at(1))
            .taint(taint(OUT_OF_SERVICE, "NoExecute", None))
            .build();
        let ready_but_tainted = node("odd")
            .ready("True", at(1))
            .taint(taint(OUT_OF_SERVICE, "NoExecute", None))
            .build();
        let nodes = vec![Arc::new(shut), Arc::new(ready_but_tainted)];
        let pods = arcs(vec![
            terminating(pod("stuck", "shut", "Running", 1)),
            pod("alive", "shut", "Running", 1),
            terminating(pod("odd", "odd", "Running", 1)),
            terminating(pod("never", "", "Pending", 1)),
        ]);
        let collected = collect(&pods, &nodes, &[], 0);
        let found: Vec<(String, Reason)> =
            collected.iter().map(|(p, r)| (p.name_any(), *r)).collect();
        assert_eq!(
            found,
            [
                ("stuck".to_string(), Reason::OutOfService),
                ("never".to_string(), Reason::UnscheduledTerminating)
            ]
        );
        assert_eq!(
            Reason::OutOfService.disruption_message(),
            Some("PodGC: node is out-of-service")
        );
        assert!(Reason::UnscheduledTerminating.marks_failed());
        assert!(!Reason::Terminated.marks_failed());
    }

    #[test]
    fn a_pod_is_collected_once_for_its_first_reason() {
        let pods = arcs(vec![
            pod("done", "gone", "Succeeded", 1),
            pod("other", "gone", "Succeeded", 2),
        ]);
        let collected = collect(&pods, &[], &["gone".to_string()], 1);
        let found: Vec<(String, Reason)> =
            collected.iter().map(|(p, r)| (p.name_any(), *r)).collect();
        assert_eq!(
            found,
            [
                ("done".to_string(), Reason::Terminated),
                ("other".to_string(), Reason::Orphaned)
            ]
        );
    }
}
