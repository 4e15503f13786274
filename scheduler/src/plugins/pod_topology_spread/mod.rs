//! PodTopologySpread: a pod's topologySpreadConstraints (or the default
//! constraints, for pods without any) keep matching pods spread over
//! topology domains: DoNotSchedule constraints filter nodes by the skew
//! the pod would make, ScheduleAnyway constraints score nodes by how few
//! matching pods their domains hold.

mod constraints;
mod filtering;
mod memo;
mod scoring;

#[cfg(test)]
mod tests;

use std::collections::HashSet;
use std::sync::{Arc, Mutex, MutexGuard};

use k8s_openapi::api::core::v1::TopologySpreadConstraint;
use serde::de::IgnoredAny;
use serde::Deserialize;
use serde_json::Value;

use crate::framework::{
    ClusterObjects, CycleState, NodeInfo, NodeScore, Plugin, PodInfo, Point, PreFilterResult,
    Snapshot, Status,
};
use constraints::{
    constraints_for, default_constraints_for, pod_labels, system_default_constraints, Constraint,
    DO_NOT_SCHEDULE, SCHEDULE_ANYWAY,
};
use filtering::PreFilterState;
use memo::{Domains, MemoKey, Memos};
use scoring::PreScoreState;

pub use filtering::{REASON_CONSTRAINTS_NOT_MATCH, REASON_NODE_LABEL_NOT_MATCH};

pub const NAME: &str = "PodTopologySpread";

const PRE_FILTER_KEY: &str = "PreFilterPodTopologySpread";
const PRE_SCORE_KEY: &str = "PreScorePodTopologySpread";
/// What PreScore reads, kept by PreFilter: PreScore is only handed the
/// feasible nodes, but pods on every node count.
const SCORING_INPUT_KEY: &str = "ScoringInputPodTopologySpread";

pub struct PodTopologySpread {
    /// The constraints of pods that have none.
    default_constraints: Vec<TopologySpreadConstraint>,
    /// defaultingType System: the default constraints are kube-scheduler's
    /// and nodes without a zone still count for hostname spreading.
    system_defaulted: bool,
    /// Matching pods per domain of recent constraint sets.
    memos: Mutex<Memos>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Args {
    #[serde(rename = "apiVersion", default)]
    _api_version: Option<IgnoredAny>,
    #[serde(rename = "kind", default)]
    _kind: Option<IgnoredAny>,
    #[serde(default)]
    default_constraints: Option<Vec<TopologySpreadConstraint>>,
    #[serde(default)]
    defaulting_type: Option<String>,
}

pub fn new(args: &Value) -> Result<Arc<dyn Plugin>, String> {
    Ok(Arc::new(PodTopologySpread::from_args(args)?))
}

/// What PreFilter prepares for PreScore: the ScheduleAnyway constraints
/// and the matching pods of their domains over every node.
enum ScoringInput {
    Nothing,
    Spread {
        constraints: Vec<Constraint>,
        domains: Arc<Domains>,
    },
    Failed(String),
}

impl PodTopologySpread {
    pub fn from_args(args: &Value) -> Result<PodTopologySpread, String> {
        let args: Args = match args {
            Value::Null => serde_json::from_value(Value::Object(Default::default())),
            args => serde_json::from_value(args.clone()),
        }
        .map_err(|e| format!("PodTopologySpreadArgs: {e}"))?;
        let defaults = args.default_constraints.unwrap_or_default();
        validate_defaults(&defaults)?;
        match args.defaulting_type.as_deref().unwrap_or("System") {
            "System" if !defaults.is_empty() => {
                Err("defaultingType: Invalid value: \"System\": when .defaultConstraints are not empty".into())
            }
            "System" => Ok(PodTopologySpread {
                default_constraints: system_default_constraints(),
                system_defaulted: true,
                memos: Mutex::default(),
            }),
            "List" => Ok(PodTopologySpread {
                default_constraints: defaults,
                system_defaulted: false,
                memos: Mutex::default(),
            }),
            other => Err(format!(
                "defaultingType: Unsupported value: {other:?}: supported values: \"List\", \"System\""
            )),
        }
    }

    fn memos(&self) -> MutexGuard<'_, Memos> {
        self.memos
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Only non-system-default constraints need every topology key on a
    /// node for scoring: nodes without a zone still spread by hostname.
    fn require_all_topologies(&self, pod: &PodInfo) -> bool {
        Self::has_own_constraints(pod) || !self.system_defaulted
    }

    fn has_own_constraints(pod: &PodInfo) -> bool {
        pod.pod
            .spec
            .as_ref()
            .and_then(|s| s.topology_spread_constraints.as_ref())
            .is_some_and(|c| !c.is_empty())
    }

    /// The pod's constraints with `action`, or the default ones if it has
    /// none.
    fn constraints(
        &self,
        pod: &PodInfo,
        cluster: &ClusterObjects,
        action: &str,
    ) -> Result<Vec<Constraint>, String> {
        let hardness = match action {
            DO_NOT_SCHEDULE => "hard",
            _ => "soft",
        };
        let own = pod
            .pod
            .spec
            .as_ref()
            .and_then(|s| s.topology_spread_constraints.as_deref())
            .unwrap_or_default();
        match own.is_empty() {
            false => constraints_for(own, pod_labels(&pod.pod), action).map_err(|e| {
                format!("obtaining pod's {hardness} topology spread constraints: {e}")
            }),
            true => default_constraints_for(&self.default_constraints, &pod.pod, cluster, action)
                .map_err(|e| {
                    format!("setting default {hardness} topology spread constraints: {e}")
                }),
        }
    }
}

/// PodTopologySpreadArgs' checks of the default constraints.
fn validate_defaults(defaults: &[TopologySpreadConstraint]) -> Result<(), String> {
    let mut errors = Vec::new();
    let mut seen = HashSet::new();
    for (i, c) in defaults.iter().enumerate() {
        let path = format!("defaultConstraints[{i}]");
        if c.max_skew <= 0 {
            errors.push(format!(
                "{path}.maxSkew: Invalid value: {}: must be greater than zero",
                c.max_skew
            ));
        }
        if c.topology_key.is_empty() {
            errors.push(format!(
                "{path}.topologyKey: Required value: can not be empty"
            ));
        }
        if c.when_unsatisfiable != DO_NOT_SCHEDULE && c.when_unsatisfiable != SCHEDULE_ANYWAY {
            errors.push(format!(
                "{path}.whenUnsatisfiable: Unsupported value: {:?}: supported values: \"DoNotSchedule\", \"ScheduleAnyway\"",
                c.when_unsatisfiable
            ));
        }
        if !seen.insert((c.topology_key.clone(), c.when_unsatisfiable.clone())) {
            errors.push(format!(
                "{path}: Duplicate value: {{{}, {}}}",
                c.topology_key, c.when_unsatisfiable
            ));
        }
        if c.label_selector.is_some() {
            errors.push(format!(
                "{path}.labelSelector: Forbidden: constraint must not define a selector, as they deduced for each pod"
            ));
        }
    }
    match errors.len() {
        0 => Ok(()),
        1 => Err(errors.remove(0)),
        _ => Err(format!("[{}]", errors.join(", "))),
    }
}

impl Plugin for PodTopologySpread {
    fn name(&self) -> &'static str {
        NAME
    }

    fn points(&self) -> &'static [Point] {
        &[
            Point::PreFilter,
            Point::Filter,
            Point::PreScore,
            Point::Score,
        ]
    }

    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
    ) -> (PreFilterResult, Status) {
        let mut memos = self.memos();
        let input = match self.constraints(pod, &snapshot.cluster, SCHEDULE_ANYWAY) {
            Ok(constraints) if constraints.is_empty() => ScoringInput::Nothing,
            Ok(constraints) => {
                let key = MemoKey::new(
                    constraints.clone(),
                    &pod.pod,
                    self.require_all_topologies(pod),
                );
                ScoringInput::Spread {
                    domains: memos.domains(key, &pod.pod, &snapshot.nodes),
                    constraints,
                }
            }
            Err(e) => ScoringInput::Failed(e),
        };
        state.write(SCORING_INPUT_KEY, input);
        let constraints = match self.constraints(pod, &snapshot.cluster, DO_NOT_SCHEDULE) {
            Ok(constraints) => constraints,
            Err(e) => {
                return (
                    PreFilterResult::default(),
                    Status::error(format!("get constraints from pod: {e}")),
                )
            }
        };
        if constraints.is_empty() {
            return (PreFilterResult::default(), Status::skip());
        }
        // Nodes without every topology key are no domain.
        let key = MemoKey::new(constraints.clone(), &pod.pod, true);
        let domains = memos.domains(key, &pod.pod, &snapshot.nodes);
        state.write(
            PRE_FILTER_KEY,
            PreFilterState::new(constraints, domains, &pod.pod),
        );
        (PreFilterResult::default(), Status::success())
    }

    fn add_pod(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        added: &PodInfo,
        node: &NodeInfo,
    ) -> Status {
        if let Some(computed) = state.read_mut::<PreFilterState>(PRE_FILTER_KEY) {
            computed.update_with_pod(&pod.pod, &added.pod, &node.node, 1);
        }
        Status::success()
    }

    fn remove_pod(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        removed: &PodInfo,
        node: &NodeInfo,
    ) -> Status {
        if let Some(computed) = state.read_mut::<PreFilterState>(PRE_FILTER_KEY) {
            computed.update_with_pod(&pod.pod, &removed.pod, &node.node, -1);
        }
        Status::success()
    }

    fn filter(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Status {
        match state.read::<PreFilterState>(PRE_FILTER_KEY) {
            Some(computed) => computed.filter(node),
            None => Status::error(format!(
                "reading {PRE_FILTER_KEY:?} from cycleState: not found"
            )),
        }
    }

    fn pre_score(&self, state: &mut CycleState, pod: &PodInfo, nodes: &[Arc<NodeInfo>]) -> Status {
        if nodes.is_empty() {
            return Status::skip();
        }
        let require_all = self.require_all_topologies(pod);
        let computed = match state.read::<ScoringInput>(SCORING_INPUT_KEY) {
            Some(ScoringInput::Nothing) => return Status::skip(),
            Some(ScoringInput::Failed(e)) => {
                return Status::error(format!("calculating preScoreState: {e}"))
            }
            Some(ScoringInput::Spread {
                constraints,
                domains,
            }) => {
                PreScoreState::compute(constraints.clone(), &pod.pod, nodes, domains, require_all)
            }
            // Without PreFilter (not enabled): the feasible nodes are all
            // there is, and no Service or controller is known.
            None => match self.constraints(pod, &ClusterObjects::default(), SCHEDULE_ANYWAY) {
                Ok(constraints) if constraints.is_empty() => return Status::skip(),
                Ok(constraints) => {
                    let key = MemoKey::new(constraints.clone(), &pod.pod, require_all);
                    let domains = Memos::default().domains(key, &pod.pod, nodes);
                    PreScoreState::compute(constraints, &pod.pod, nodes, &domains, require_all)
                }
                Err(e) => return Status::error(format!("calculating preScoreState: {e}")),
            },
        };
        state.write(PRE_SCORE_KEY, computed);
        Status::success()
    }

    fn score(&self, state: &CycleState, _: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        match state.read::<PreScoreState>(PRE_SCORE_KEY) {
            Some(computed) => Ok(computed.score(node)),
            None => Err(Status::error(format!(
                "reading {PRE_SCORE_KEY:?} from cycleState: not found"
            ))),
        }
    }

    fn normalize_scores(
        &self,
        state: &CycleState,
        _: &PodInfo,
        scores: &mut [NodeScore],
    ) -> Option<Status> {
        match state.read::<PreScoreState>(PRE_SCORE_KEY) {
            Some(computed) => {
                computed.normalize(scores);
                Some(Status::success())
            }
            None => Some(Status::error(format!(
                "reading {PRE_SCORE_KEY:?} from cycleState: not found"
            ))),
        }
    }
}
