//! NodeResourcesBalancedAllocation: prefers nodes where, with the pod,
//! the requested shares of the resources (cpu and memory by default) are
//! closest to one another. Best-effort pods are not scored.

use std::sync::Arc;

use serde::de::IgnoredAny;
use serde::Deserialize;
use serde_json::Value;

use crate::framework::{
    CycleState, NodeInfo, NodeScore, Plugin, PodInfo, Point, Status, MAX_NODE_SCORE,
};
use crate::plugins::node_resources_fit::allocation::{self, ResourceSpec};

pub const NAME: &str = "NodeResourcesBalancedAllocation";

const PRE_SCORE_KEY: &str = "PreScoreNodeResourcesBalancedAllocation";

pub struct NodeResourcesBalancedAllocation {
    resources: Vec<ResourceSpec>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BalancedAllocationArgs {
    #[serde(rename = "apiVersion", default)]
    _api_version: Option<IgnoredAny>,
    #[serde(rename = "kind", default)]
    _kind: Option<IgnoredAny>,
    #[serde(default)]
    resources: Option<Vec<ResourceSpec>>,
}

pub fn new(args: &Value) -> Result<Arc<dyn Plugin>, String> {
    Ok(Arc::new(NodeResourcesBalancedAllocation::from_args(args)?))
}

impl NodeResourcesBalancedAllocation {
    /// Decodes, defaults and validates NodeResourcesBalancedAllocationArgs:
    /// each resource once, weight 1.
    pub fn from_args(args: &Value) -> Result<NodeResourcesBalancedAllocation, String> {
        let args: BalancedAllocationArgs = match args {
            Value::Null => serde_json::from_value(Value::Object(Default::default())),
            Value::Object(_) => serde_json::from_value(args.clone()),
            other => return Err(format!("{NAME} args: expected an object, got {other}")),
        }
        .map_err(|e| format!("{NAME} args: {e}"))?;
        let resources = allocation::defaulted(args.resources);
        let mut errors = Vec::new();
        for (i, resource) in resources.iter().enumerate() {
            if resources[..i].iter().any(|r| r.name == resource.name) {
                errors.push(format!(
                    "resources[{i}].name: Duplicate value: {:?}",
                    resource.name
                ));
            }
            if resource.weight != 1 {
                errors.push(format!(
                    "resources[{i}].weight: Invalid value: {}: must be 1",
                    resource.weight
                ));
            }
        }
        if !errors.is_empty() {
            return Err(format!("{NAME} args: {}", errors.join("; ")));
        }
        Ok(NodeResourcesBalancedAllocation { resources })
    }

    /// The pod's requests as PreScore left them, or computed into
    /// `computed` without it; None for a best-effort pod (scored 0).
    fn score_requests<'a>(
        &self,
        state: &'a CycleState,
        pod: &PodInfo,
        computed: &'a mut Option<Vec<i64>>,
    ) -> Option<&'a [i64]> {
        if let Some(requests) = state.read::<Vec<i64>>(PRE_SCORE_KEY) {
            return Some(requests);
        }
        let requests = computed.insert(allocation::pod_request_list(pod, &self.resources, true));
        (!allocation::is_best_effort(requests)).then_some(requests.as_slice())
    }

    fn score_with(&self, node: &NodeInfo, pod_requests: &[i64]) -> i64 {
        let (requested, allocatable) =
            allocation::node_amounts(node, &self.resources, pod_requests, true);
        balanced_score(&requested, &allocatable)
    }
}

/// 100 × (1 − the standard deviation of the requested fractions), each
/// fraction capped at 1; resources with no allocatable are left out.
fn balanced_score(requested: &[i64], allocatable: &[i64]) -> i64 {
    let fractions: smallvec::SmallVec<[f64; 4]> = requested
        .iter()
        .zip(allocatable)
        .filter(|(_, &alloc)| alloc != 0)
        .map(|(&req, &alloc)| (req as f64 / alloc as f64).min(1.0))
        .collect();
    let std = match fractions.as_slice() {
        [] | [_] => 0.0,
        [a, b] => ((a - b) / 2.0).abs(),
        many => {
            let mean = many.iter().sum::<f64>() / many.len() as f64;
            let variance =
                many.iter().map(|f| (f - mean) * (f - mean)).sum::<f64>() / many.len() as f64;
            variance.sqrt()
        }
    };
    (((1.0 - std) * MAX_NODE_SCORE as f64) as i64).clamp(0, MAX_NODE_SCORE)
}

impl Plugin for NodeResourcesBalancedAllocation {
    fn name(&self) -> &'static str {
        NAME
    }

    fn points(&self) -> &'static [Point] {
        &[Point::PreScore, Point::Score]
    }

    fn pre_score(&self, state: &mut CycleState, pod: &PodInfo, _: &[Arc<NodeInfo>]) -> Status {
        let requests = allocation::pod_request_list(pod, &self.resources, true);
        // Best-effort pods would all pile onto one node otherwise.
        if allocation::is_best_effort(&requests) {
            return Status::skip();
        }
        state.write(PRE_SCORE_KEY, requests);
        Status::success()
    }

    fn score(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        let mut computed = None;
        Ok(match self.score_requests(state, pod, &mut computed) {
            Some(requests) => self.score_with(node, requests),
            None => 0,
        })
    }

    fn score_nodes(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        nodes: &[Arc<NodeInfo>],
        scores: &mut [NodeScore],
    ) -> Result<(), Status> {
        let mut computed = None;
        let requests = self.score_requests(state, pod, &mut computed);
        for (slot, node) in scores.iter_mut().zip(nodes) {
            slot.score = requests.map_or(0, |requests| self.score_with(node, requests));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
