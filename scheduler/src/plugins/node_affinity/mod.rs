//! NodeAffinity: a pod goes only to nodes matching its `nodeSelector` and
//! required node affinity (and the profile's `addedAffinity`), and prefers
//! nodes matching its weighted preferred terms. Pod-to-pod affinity is
//! InterPodAffinity's job, not this plugin's.

use std::collections::BTreeSet;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{NodeAffinity as ApiNodeAffinity, Pod};
use serde::Deserialize;

use crate::framework::{
    CycleState, NodeInfo, NodeScore, Plugin, PodInfo, Point, PreFilterResult, Snapshot, Status,
    MAX_NODE_SCORE,
};

pub use skiff_machinery::scheduling::node_affinity::{
    NodeSelector, PreferredTerms, RequiredNodeAffinity, OBJECT_NAME_FIELD,
};

pub const NAME: &str = "NodeAffinity";

/// The node does not match the pod's nodeSelector or required affinity.
pub const ERR_REASON_POD: &str = "node(s) didn't match Pod's node affinity/selector";
/// The node does not match the profile's `addedAffinity`.
pub const ERR_REASON_ENFORCED: &str = "node(s) didn't match scheduler-enforced node affinity";
/// Every term pins `metadata.name` and no name satisfies all of them.
pub const ERR_REASON_CONFLICT: &str = "pod affinity terms conflict";

const PRE_FILTER_KEY: &str = "PreFilterNodeAffinity";
const PRE_SCORE_KEY: &str = "PreScoreNodeAffinity";

/// `NodeAffinityArgs`.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Args {
    added_affinity: Option<ApiNodeAffinity>,
    #[serde(rename = "apiVersion")]
    _api_version: Option<String>,
    #[serde(rename = "kind")]
    _kind: Option<String>,
}

pub struct NodeAffinity {
    added_required: Option<NodeSelector>,
    added_preferred: Option<PreferredTerms>,
}

pub fn new(args: &serde_json::Value) -> Result<Arc<dyn Plugin>, String> {
    let args: Args = match args {
        serde_json::Value::Null => Args::default(),
        value => serde_json::from_value(value.clone())
            .map_err(|e| format!("invalid NodeAffinityArgs: {e}"))?,
    };
    let mut plugin = NodeAffinity {
        added_required: None,
        added_preferred: None,
    };
    if let Some(added) = &args.added_affinity {
        if let Some(required) = &added.required_during_scheduling_ignored_during_execution {
            let selector = NodeSelector::strict(required).map_err(|e| {
                format!("parsing addedAffinity.requiredDuringSchedulingIgnoredDuringExecution: {e}")
            })?;
            plugin.added_required = Some(selector);
        }
        let preferred = added
            .preferred_during_scheduling_ignored_during_execution
            .as_deref()
            .unwrap_or_default();
        if !preferred.is_empty() {
            let terms = PreferredTerms::parse(preferred).map_err(|e| {
                format!(
                    "parsing addedAffinity.preferredDuringSchedulingIgnoredDuringExecution: {e}"
                )
            })?;
            plugin.added_preferred = Some(terms);
        }
    }
    Ok(Arc::new(plugin))
}

/// The pod's preferred terms; `Ok(None)` when it has none.
fn pod_preferred(pod: &Pod) -> Result<Option<PreferredTerms>, String> {
    let terms = pod
        .spec
        .as_ref()
        .and_then(|s| s.affinity.as_ref())
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|a| {
            a.preferred_during_scheduling_ignored_during_execution
                .as_deref()
        });
    terms.map(PreferredTerms::parse).transpose()
}

/// The node names the required terms pin through `metadata.name In`:
/// `None` when some term does not pin a name (any node may match it).
fn pinned_node_names(pod: &Pod) -> Option<BTreeSet<String>> {
    let terms = &pod
        .spec
        .as_ref()?
        .affinity
        .as_ref()?
        .node_affinity
        .as_ref()?
        .required_during_scheduling_ignored_during_execution
        .as_ref()?
        .node_selector_terms;
    if terms.is_empty() {
        return None;
    }
    let mut names = BTreeSet::new();
    for term in terms {
        let mut term_names: Option<BTreeSet<String>> = None;
        for r in term.match_fields.iter().flatten() {
            if r.key != OBJECT_NAME_FIELD || r.operator != "In" {
                continue;
            }
            let values: BTreeSet<String> = r.values.iter().flatten().cloned().collect();
            term_names = Some(match term_names {
                Some(before) => before.intersection(&values).cloned().collect(),
                None => values,
            });
        }
        names.extend(term_names?);
    }
    Some(names)
}

impl Plugin for NodeAffinity {
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
        _: &Snapshot,
    ) -> (PreFilterResult, Status) {
        let spec = pod.pod.spec.as_ref();
        let has_required = spec
            .and_then(|s| s.affinity.as_ref())
            .and_then(|a| a.node_affinity.as_ref())
            .is_some_and(|a| {
                a.required_during_scheduling_ignored_during_execution
                    .is_some()
            });
        let has_selector = spec.is_some_and(|s| s.node_selector.is_some());
        if !has_required && !has_selector && self.added_required.is_none() {
            return (PreFilterResult::default(), Status::skip());
        }
        state.write(PRE_FILTER_KEY, RequiredNodeAffinity::of_pod(&pod.pod));
        match pinned_node_names(&pod.pod) {
            Some(names) if names.is_empty() => (
                PreFilterResult::default(),
                Status::unresolvable(ERR_REASON_CONFLICT),
            ),
            Some(names) => (
                PreFilterResult {
                    node_names: Some(names),
                    ..Default::default()
                },
                Status::success(),
            ),
            None => (PreFilterResult::default(), Status::success()),
        }
    }

    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        if let Some(added) = &self.added_required {
            if !added.matches(&node.node) {
                return Status::unresolvable(ERR_REASON_ENFORCED);
            }
        }
        let matches = match state.read::<RequiredNodeAffinity>(PRE_FILTER_KEY) {
            Some(required) => required.matches(&node.node),
            // PreFilter disabled in the profile: compute it here.
            None => RequiredNodeAffinity::of_pod(&pod.pod).matches(&node.node),
        };
        match matches {
            true => Status::success(),
            false => Status::unresolvable(ERR_REASON_POD),
        }
    }

    fn pre_score(&self, state: &mut CycleState, pod: &PodInfo, _: &[Arc<NodeInfo>]) -> Status {
        let preferred = match pod_preferred(&pod.pod) {
            Ok(preferred) => preferred,
            Err(e) => return Status::error(e),
        };
        if preferred.is_none() && self.added_preferred.is_none() {
            return Status::skip();
        }
        state.write(PRE_SCORE_KEY, preferred);
        Status::success()
    }

    fn score(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        let mut score = self
            .added_preferred
            .as_ref()
            .map_or(0, |terms| terms.score(&node.node));
        let computed;
        let preferred = match state.read::<Option<PreferredTerms>>(PRE_SCORE_KEY) {
            Some(preferred) => preferred,
            // PreScore disabled in the profile: compute it here.
            None => {
                computed = pod_preferred(&pod.pod).map_err(Status::error)?;
                &computed
            }
        };
        if let Some(terms) = preferred {
            score += terms.score(&node.node);
        }
        Ok(score)
    }

    fn normalize_scores(
        &self,
        _: &CycleState,
        _: &PodInfo,
        scores: &mut [NodeScore],
    ) -> Option<Status> {
        crate::framework::default_normalize_score(MAX_NODE_SCORE, false, scores);
        Some(Status::success())
    }
}

#[cfg(test)]
mod tests;
