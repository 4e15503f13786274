//! TaintToleration: a pod goes only to nodes whose NoSchedule and
//! NoExecute taints it tolerates, and prefers nodes with fewer
//! PreferNoSchedule taints it does not tolerate.
//!
//! Node conditions count as the taints Kubernetes' node lifecycle
//! controller would put on the node, when the node does not carry them
//! yet (skiff may run without that controller, or it may lag behind the
//! kubelet's status): `MemoryPressure`, `DiskPressure` and `PIDPressure`
//! True, `NetworkUnavailable` True, `Ready` False and `Ready` Unknown are
//! `node.kubernetes.io/memory-pressure`, `disk-pressure`, `pid-pressure`,
//! `network-unavailable`, `not-ready` and `unreachable`, each with effect
//! NoSchedule and an empty value. A node with no `Ready` condition at all
//! (not yet reported) gets no such taint. Eviction (NoExecute) is not this
//! plugin's job.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Taint, Toleration};

use crate::framework::{
    CycleState, NodeInfo, NodeScore, Plugin, PodInfo, Point, Status, MAX_NODE_SCORE,
};

pub const NAME: &str = "TaintToleration";

const PRE_SCORE_KEY: &str = "PreScoreTaintToleration";

pub use skiff_machinery::scheduling::taints::{
    tolerated, tolerates, NO_EXECUTE, NO_SCHEDULE, PREFER_NO_SCHEDULE,
};

/// Condition type, the status that taints, and the taint key.
const CONDITION_TAINTS: &[(&str, &str, &str)] = &[
    ("Ready", "False", "node.kubernetes.io/not-ready"),
    ("Ready", "Unknown", "node.kubernetes.io/unreachable"),
    (
        "MemoryPressure",
        "True",
        "node.kubernetes.io/memory-pressure",
    ),
    ("DiskPressure", "True", "node.kubernetes.io/disk-pressure"),
    ("PIDPressure", "True", "node.kubernetes.io/pid-pressure"),
    (
        "NetworkUnavailable",
        "True",
        "node.kubernetes.io/network-unavailable",
    ),
];

pub struct TaintToleration;

pub fn new(args: &serde_json::Value) -> Result<Arc<dyn Plugin>, String> {
    super::no_args(NAME, args)?;
    Ok(Arc::new(TaintToleration))
}

/// The node's taints, then those its conditions stand for (see the module
/// docs) that it does not carry yet.
pub fn effective_taints(node: &Node) -> Vec<Taint> {
    let own = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_deref())
        .unwrap_or_default();
    own.iter()
        .cloned()
        .chain(condition_taints(node, own))
        .collect()
}

/// The NoSchedule taints `node`'s conditions stand for, less those in
/// `own` (the taints it carries).
pub(crate) fn condition_taints(node: &Node, own: &[Taint]) -> Vec<Taint> {
    let conditions = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or_default();
    CONDITION_TAINTS
        .iter()
        .filter(|(kind, status, key)| {
            conditions
                .iter()
                .any(|c| c.type_ == *kind && c.status == *status)
                && !own.iter().any(|t| t.key == *key && t.effect == NO_SCHEDULE)
        })
        .map(|(_, _, key)| Taint {
            key: key.to_string(),
            effect: NO_SCHEDULE.to_string(),
            value: None,
            time_added: None,
        })
        .collect()
}

fn pod_tolerations(pod: &PodInfo) -> &[Toleration] {
    pod.pod
        .spec
        .as_ref()
        .and_then(|s| s.tolerations.as_deref())
        .unwrap_or_default()
}

/// The reason kube-scheduler gives for an untolerated taint.
pub fn untolerated_reason(taint: &Taint) -> String {
    format!(
        "node(s) had untolerated taint {{{}: {}}}",
        taint.key,
        taint.value.as_deref().unwrap_or_default()
    )
}

impl Plugin for TaintToleration {
    fn name(&self) -> &'static str {
        NAME
    }

    fn points(&self) -> &'static [Point] {
        &[Point::Filter, Point::PreScore, Point::Score]
    }

    fn filter(&self, _: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let tolerations = pod_tolerations(pod);
        let blocks = |taint: &Taint| {
            (taint.effect == NO_SCHEDULE || taint.effect == NO_EXECUTE)
                && !tolerated(tolerations, taint)
        };
        if let Some(taint) = node.taints().iter().find(|t| blocks(t)) {
            return Status::unresolvable(untolerated_reason(taint));
        }
        match node.condition_taints.iter().find(|t| blocks(t)) {
            Some(taint) => Status::unresolvable(untolerated_reason(taint)),
            None => Status::success(),
        }
    }

    fn pre_score(&self, state: &mut CycleState, pod: &PodInfo, _: &[Arc<NodeInfo>]) -> Status {
        state.write(PRE_SCORE_KEY, prefer_no_schedule_tolerations(pod));
        Status::success()
    }

    fn score(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        let computed;
        let tolerations = match state.read::<Vec<Toleration>>(PRE_SCORE_KEY) {
            Some(tolerations) => tolerations,
            // PreScore disabled in the profile: compute it here.
            None => {
                computed = prefer_no_schedule_tolerations(pod);
                &computed
            }
        };
        let intolerable = node
            .taints()
            .iter()
            .filter(|t| t.effect == PREFER_NO_SCHEDULE && !tolerated(tolerations, t))
            .count();
        Ok(intolerable as i64)
    }

    fn normalize_scores(
        &self,
        _: &CycleState,
        _: &PodInfo,
        scores: &mut [NodeScore],
    ) -> Option<Status> {
        crate::framework::default_normalize_score(MAX_NODE_SCORE, true, scores);
        Some(Status::success())
    }
}

/// The tolerations that can tolerate PreferNoSchedule taints.
fn prefer_no_schedule_tolerations(pod: &PodInfo) -> Vec<Toleration> {
    pod_tolerations(pod)
        .iter()
        .filter(|t| {
            let effect = t.effect.as_deref().unwrap_or_default();
            effect.is_empty() || effect == PREFER_NO_SCHEDULE
        })
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests;
