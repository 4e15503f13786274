//! InterPodAffinity: a pod's required pod affinity and anti-affinity
//! terms, and placed pods' required anti-affinity terms, filter nodes by
//! topology domain; preferred terms (both ways) and placed pods' required
//! affinity terms (at hardPodAffinityWeight) score them.

mod filtering;
mod index;
mod scoring;
mod terms;

#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

use serde::de::IgnoredAny;
use serde::Deserialize;
use serde_json::Value;

use crate::framework::{
    CycleState, NodeInfo, NodeScore, Plugin, PodInfo, Point, PreFilterResult, Snapshot, Status,
};
use filtering::PreFilterState;
use index::ClusterIndex;
use scoring::{PreScoreState, Scorer};
use terms::PodTerms;

pub use filtering::{REASON_AFFINITY, REASON_ANTI_AFFINITY, REASON_EXISTING_ANTI_AFFINITY};

pub const NAME: &str = "InterPodAffinity";

const PRE_FILTER_KEY: &str = "PreFilterInterPodAffinity";
/// The scores, computed by PreFilter from the cluster index (PreScore is
/// only handed the feasible nodes, but placed pods anywhere count), or by
/// PreScore from the feasible nodes when PreFilter did not run.
const PRE_SCORE_KEY: &str = "PreScoreInterPodAffinity";

const DEFAULT_HARD_POD_AFFINITY_WEIGHT: i64 = 1;
const MAX_HARD_POD_AFFINITY_WEIGHT: i64 = 100;

pub struct InterPodAffinity {
    hard_pod_affinity_weight: i64,
    ignore_preferred_terms_of_existing_pods: bool,
    index: Mutex<ClusterIndex>,
}

/// What PreScore found to score.
enum Prepared {
    /// No term matched anything.
    Nothing,
    Scores(PreScoreState),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Args {
    #[serde(rename = "apiVersion", default)]
    _api_version: Option<IgnoredAny>,
    #[serde(rename = "kind", default)]
    _kind: Option<IgnoredAny>,
    #[serde(default)]
    hard_pod_affinity_weight: Option<i64>,
    #[serde(default)]
    ignore_preferred_terms_of_existing_pods: Option<bool>,
}

pub fn new(args: &Value) -> Result<Arc<dyn Plugin>, String> {
    Ok(Arc::new(InterPodAffinity::from_args(args)?))
}

impl InterPodAffinity {
    pub fn from_args(args: &Value) -> Result<InterPodAffinity, String> {
        let args: Args = match args {
            Value::Null => serde_json::from_value(Value::Object(Default::default())),
            args => serde_json::from_value(args.clone()),
        }
        .map_err(|e| format!("InterPodAffinityArgs: {e}"))?;
        let weight = args
            .hard_pod_affinity_weight
            .unwrap_or(DEFAULT_HARD_POD_AFFINITY_WEIGHT);
        if !(0..=MAX_HARD_POD_AFFINITY_WEIGHT).contains(&weight) {
            return Err(format!(
                "hardPodAffinityWeight: Invalid value: {weight}: not in valid range [0-{MAX_HARD_POD_AFFINITY_WEIGHT}]"
            ));
        }
        Ok(InterPodAffinity {
            hard_pod_affinity_weight: weight,
            ignore_preferred_terms_of_existing_pods: args
                .ignore_preferred_terms_of_existing_pods
                .unwrap_or(false),
            index: Mutex::new(ClusterIndex::default()),
        })
    }

    fn index(&self) -> MutexGuard<'_, ClusterIndex> {
        self.index
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Whether PreScore has anything to do for the pod.
    fn scores(&self, pod: &PodInfo) -> bool {
        has_preferred_terms(pod) || !self.ignore_preferred_terms_of_existing_pods
    }
}

/// Whether the pod has preferred pod (anti-)affinity terms.
fn has_preferred_terms(pod: &PodInfo) -> bool {
    let affinity = pod.pod.spec.as_ref().and_then(|s| s.affinity.as_ref());
    let affinity_terms = affinity
        .and_then(|a| a.pod_affinity.as_ref())
        .and_then(|a| {
            a.preferred_during_scheduling_ignored_during_execution
                .as_ref()
        });
    let anti_terms = affinity
        .and_then(|a| a.pod_anti_affinity.as_ref())
        .and_then(|a| {
            a.preferred_during_scheduling_ignored_during_execution
                .as_ref()
        });
    affinity_terms.is_some_and(|t| !t.is_empty()) || anti_terms.is_some_and(|t| !t.is_empty())
}

impl Plugin for InterPodAffinity {
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
        let mut terms = match PodTerms::parse(&pod.pod) {
            Ok(terms) => terms,
            Err(e) => {
                return (
                    PreFilterResult::default(),
                    Status::unresolvable(format!("parsing pod: {e}")),
                )
            }
        };
        let namespaces = &snapshot.cluster.namespaces;
        terms.merge_namespaces(namespaces);
        let namespace_labels = namespaces.get(pod.namespace()).cloned().unwrap_or_default();
        let mut index = self.index();
        index.sync(&snapshot.nodes);
        if self.scores(pod) {
            let weight = self.hard_pod_affinity_weight;
            let prepared = match index.scores(&pod.pod, &terms, &namespace_labels, weight) {
                Some(scores) => Prepared::Scores(scores),
                None => Prepared::Nothing,
            };
            state.write(PRE_SCORE_KEY, prepared);
        }
        let computed = PreFilterState::compute(&pod.pod, terms, namespace_labels, &index);
        drop(index);
        if computed.is_trivial() {
            return (PreFilterResult::default(), Status::skip());
        }
        state.write(PRE_FILTER_KEY, computed);
        (PreFilterResult::default(), Status::success())
    }

    fn add_pod(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        added: &PodInfo,
        node: &NodeInfo,
    ) -> Status {
        self.update_with_pod(state, pod, added, node, 1)
    }

    fn remove_pod(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        removed: &PodInfo,
        node: &NodeInfo,
    ) -> Status {
        self.update_with_pod(state, pod, removed, node, -1)
    }

    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        match state.read::<PreFilterState>(PRE_FILTER_KEY) {
            Some(computed) => computed.filter(&pod.pod, node),
            None => Status::error(format!(
                "reading {PRE_FILTER_KEY:?} from cycleState: not found"
            )),
        }
    }

    fn pre_score(&self, state: &mut CycleState, pod: &PodInfo, nodes: &[Arc<NodeInfo>]) -> Status {
        if nodes.is_empty() || !self.scores(pod) {
            return Status::skip();
        }
        if state.read::<Prepared>(PRE_SCORE_KEY).is_none() {
            match self.score_feasible(pod, nodes) {
                Ok(prepared) => state.write(PRE_SCORE_KEY, prepared),
                Err(status) => return status,
            }
        }
        match state.read::<Prepared>(PRE_SCORE_KEY) {
            Some(Prepared::Scores(_)) => Status::success(),
            _ => Status::skip(),
        }
    }

    fn score(&self, state: &CycleState, _: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        match state.read::<Prepared>(PRE_SCORE_KEY) {
            Some(Prepared::Scores(computed)) => Ok(computed.score(node)),
            _ => Err(Status::error(format!(
                "reading {PRE_SCORE_KEY:?} from cycleState: not found"
            ))),
        }
    }

    fn normalize_scores(
        &self,
        _: &CycleState,
        _: &PodInfo,
        scores: &mut [NodeScore],
    ) -> Option<Status> {
        PreScoreState::normalize(scores);
        Some(Status::success())
    }
}

impl InterPodAffinity {
    fn update_with_pod(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        other: &PodInfo,
        node: &NodeInfo,
        delta: i64,
    ) -> Status {
        let Some(computed) = state.read_mut::<PreFilterState>(PRE_FILTER_KEY) else {
            // PreFilter skipped: nothing constrains the pod.
            return Status::success();
        };
        let mut index = self.index();
        let other_terms = &index.terms.terms(&other.pod).terms;
        computed.update_with_pod(&pod.pod, &other.pod, other_terms, node.labels(), delta);
        Status::success()
    }

    /// PreScore without PreFilter's work: the pods of the feasible nodes
    /// only, and namespace selectors without the namespaces' labels.
    fn score_feasible(&self, pod: &PodInfo, nodes: &[Arc<NodeInfo>]) -> Result<Prepared, Status> {
        let mut terms = PodTerms::parse(&pod.pod)
            .map_err(|e| Status::error(format!("failed to parse pod: {e}")))?;
        terms.merge_namespaces(&HashMap::new());
        let scorer = Scorer {
            incoming: &pod.pod,
            terms: &terms,
            namespace_labels: &BTreeMap::new(),
            hard_pod_affinity_weight: self.hard_pod_affinity_weight,
            has_constraints: has_preferred_terms(pod),
        };
        Ok(match scorer.pre_score(nodes, &mut self.index().terms) {
            Some(scores) => Prepared::Scores(scores),
            None => Prepared::Nothing,
        })
    }
}
