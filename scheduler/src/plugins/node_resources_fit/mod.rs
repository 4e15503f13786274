//! NodeResourcesFit: a node must have room for the pod's requests (cpu,
//! memory, ephemeral storage, extended resources, a pod slot); nodes are
//! scored by how much would be left (LeastAllocated), taken
//! (MostAllocated) or by a utilization curve (RequestedToCapacityRatio).

pub mod allocation;

use std::collections::HashSet;
use std::sync::Arc;

use serde::de::IgnoredAny;
use serde::Deserialize;
use serde_json::Value;

use crate::framework::resources::Resources;
use crate::framework::{
    Code, CycleState, NodeInfo, NodeScore, Plugin, PodInfo, Point, PreFilterResult, Snapshot,
    Status, MAX_NODE_SCORE,
};
use allocation::{ResourceSpec, ShapePoint, Strategy};

pub const NAME: &str = "NodeResourcesFit";

const PRE_FILTER_KEY: &str = "PreFilterNodeResourcesFit";
const PRE_SCORE_KEY: &str = "PreScoreNodeResourcesFit";

/// RequestedToCapacityRatio shapes score 0..=10; scaled to MAX_NODE_SCORE.
const MAX_CUSTOM_PRIORITY_SCORE: i64 = 10;

pub struct NodeResourcesFit {
    ignored_resources: HashSet<String>,
    ignored_resource_groups: HashSet<String>,
    strategy: Strategy,
    resources: Vec<ResourceSpec>,
}

/// A resource the node lacks for the pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InsufficientResource {
    pub name: String,
    pub reason: String,
    pub requested: i64,
    pub used: i64,
    pub capacity: i64,
}

pub fn new(args: &Value) -> Result<Arc<dyn Plugin>, String> {
    Ok(Arc::new(NodeResourcesFit::from_args(args)?))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct FitArgs {
    #[serde(rename = "apiVersion", default)]
    _api_version: Option<IgnoredAny>,
    #[serde(rename = "kind", default)]
    _kind: Option<IgnoredAny>,
    #[serde(default)]
    ignored_resources: Option<Vec<String>>,
    #[serde(default)]
    ignored_resource_groups: Option<Vec<String>>,
    #[serde(default)]
    scoring_strategy: Option<ScoringStrategyArgs>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ScoringStrategyArgs {
    #[serde(rename = "type", default)]
    kind: Option<String>,
    #[serde(default)]
    resources: Option<Vec<ResourceSpec>>,
    #[serde(default)]
    requested_to_capacity_ratio: Option<RequestedToCapacityRatioArgs>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RequestedToCapacityRatioArgs {
    #[serde(default)]
    shape: Option<Vec<ShapeArgs>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ShapeArgs {
    #[serde(default)]
    utilization: i32,
    #[serde(default)]
    score: i32,
}

impl NodeResourcesFit {
    /// The pod's requests as PreScore left them, or computed into
    /// `computed` without it.
    fn score_requests<'a>(
        &self,
        state: &'a CycleState,
        pod: &PodInfo,
        computed: &'a mut Option<Vec<i64>>,
    ) -> &'a [i64] {
        match state.read::<Vec<i64>>(PRE_SCORE_KEY) {
            Some(requests) => requests,
            None => computed.insert(allocation::pod_request_list(pod, &self.resources, false)),
        }
    }

    fn score_with(&self, node: &NodeInfo, requests: &[i64]) -> i64 {
        let (requested, allocatable) =
            allocation::node_amounts(node, &self.resources, requests, false);
        self.strategy
            .score(&self.resources, &requested, &allocatable)
    }

    /// Decodes, defaults and validates NodeResourcesFitArgs as
    /// kube-scheduler does.
    pub fn from_args(args: &Value) -> Result<NodeResourcesFit, String> {
        let args: FitArgs = match args {
            Value::Null => serde_json::from_value(Value::Object(Default::default())),
            Value::Object(_) => serde_json::from_value(args.clone()),
            other => return Err(format!("{NAME} args: expected an object, got {other}")),
        }
        .map_err(|e| format!("{NAME} args: {e}"))?;
        let mut errors = Vec::new();
        let ignored_resources = args.ignored_resources.unwrap_or_default();
        for (i, name) in ignored_resources.iter().enumerate() {
            for message in skiff_machinery::validation::is_qualified_name(name) {
                errors.push(format!(
                    "ignoredResources[{i}]: Invalid value: {name:?}: {message}"
                ));
            }
        }
        let ignored_resource_groups = args.ignored_resource_groups.unwrap_or_default();
        for (i, group) in ignored_resource_groups.iter().enumerate() {
            if group.contains('/') {
                errors.push(format!(
                    "ignoredResourceGroups[{i}]: Invalid value: {group:?}: resource group name can't contain '/'"
                ));
            }
            for message in skiff_machinery::validation::is_qualified_name(group) {
                errors.push(format!(
                    "ignoredResourceGroups[{i}]: Invalid value: {group:?}: {message}"
                ));
            }
        }
        let (strategy, resources) = match args.scoring_strategy {
            None => (Strategy::LeastAllocated, allocation::default_resources()),
            Some(strategy) => parse_strategy(strategy, &mut errors),
        };
        if !errors.is_empty() {
            return Err(format!("{NAME} args: {}", errors.join("; ")));
        }
        Ok(NodeResourcesFit {
            ignored_resources: ignored_resources.into_iter().collect(),
            ignored_resource_groups: ignored_resource_groups.into_iter().collect(),
            strategy,
            resources,
        })
    }

    /// What `node` lacks for a pod requesting `requests`, in
    /// kube-scheduler's order: pods, cpu, memory, ephemeral storage, then
    /// scalar resources by name.
    pub fn insufficient_resources(
        &self,
        requests: &Resources,
        node: &NodeInfo,
    ) -> Vec<InsufficientResource> {
        let mut out = Vec::new();
        let pods = node.pods.len() as i64;
        if pods + 1 > node.allocatable.allowed_pods {
            out.push(InsufficientResource {
                name: "pods".into(),
                reason: "Too many pods".into(),
                requested: 1,
                used: pods,
                capacity: node.allocatable.allowed_pods,
            });
        }
        let alloc = &node.allocatable;
        let used = &node.requested;
        for (name, want, used, capacity) in [
            ("cpu", requests.milli_cpu, used.milli_cpu, alloc.milli_cpu),
            ("memory", requests.memory, used.memory, alloc.memory),
            (
                "ephemeral-storage",
                requests.ephemeral_storage,
                used.ephemeral_storage,
                alloc.ephemeral_storage,
            ),
        ] {
            if want > 0 && exceeds(want, capacity, used) {
                out.push(insufficient(name, want, used, capacity));
            }
        }
        for (name, &want) in &requests.scalar {
            if want == 0 || !allocation::is_scalar_resource_name(name) || self.ignores(name) {
                continue;
            }
            let capacity = alloc.scalar.get(name).copied().unwrap_or(0);
            let used = used.scalar.get(name).copied().unwrap_or(0);
            if exceeds(want, capacity, used) {
                out.push(insufficient(name, want, used, capacity));
            }
        }
        out
    }

    /// ignoredResources and ignoredResourceGroups apply to extended
    /// resources only.
    fn ignores(&self, name: &str) -> bool {
        if !allocation::is_extended_resource_name(name) {
            return false;
        }
        let group = name.split('/').next().unwrap_or_default();
        self.ignored_resources.contains(name) || self.ignored_resource_groups.contains(group)
    }
}

fn parse_strategy(
    args: ScoringStrategyArgs,
    errors: &mut Vec<String>,
) -> (Strategy, Vec<ResourceSpec>) {
    let resources = allocation::defaulted(args.resources);
    for (i, resource) in resources.iter().enumerate() {
        if resource.weight <= 0 || resource.weight > 100 {
            errors.push(format!(
                "scoringStrategy.resources[{i}].weight: Invalid value: {}: resource weight of {} not in valid range (0, 100]",
                resource.weight, resource.name
            ));
        }
    }
    let kind = args.kind.unwrap_or_default();
    let strategy = match kind.as_str() {
        "LeastAllocated" => Strategy::LeastAllocated,
        "MostAllocated" => Strategy::MostAllocated,
        "RequestedToCapacityRatio" => match args.requested_to_capacity_ratio {
            None => {
                errors.push(
                    "scoringStrategy.requestedToCapacityRatio: Required value: must be specified when type is RequestedToCapacityRatio"
                        .into(),
                );
                Strategy::RequestedToCapacityRatio(Vec::new())
            }
            Some(ratio) => Strategy::RequestedToCapacityRatio(parse_shape(
                ratio.shape.unwrap_or_default(),
                errors,
            )),
        },
        other => {
            errors.push(format!(
                "scoringStrategy.type: Unsupported value: {other:?}: supported values: \"LeastAllocated\", \"MostAllocated\", \"RequestedToCapacityRatio\""
            ));
            Strategy::LeastAllocated
        }
    };
    (strategy, resources)
}

fn parse_shape(shape: Vec<ShapeArgs>, errors: &mut Vec<String>) -> Vec<ShapePoint> {
    const PATH: &str = "scoringStrategy.requestedToCapacityRatio.shape";
    if shape.is_empty() {
        errors.push(format!(
            "{PATH}: Required value: at least one point must be specified"
        ));
        return Vec::new();
    }
    if let Some(i) = (1..shape.len()).find(|&i| shape[i - 1].utilization >= shape[i].utilization) {
        errors.push(format!(
            "{PATH}[{i}].utilization: Invalid value: {}: values must be sorted in increasing order",
            shape[i].utilization
        ));
    }
    for (i, point) in shape.iter().enumerate() {
        if !(0..=100).contains(&point.utilization) {
            errors.push(format!(
                "{PATH}[{i}].utilization: Invalid value: {}: not in valid range [0, 100]",
                point.utilization
            ));
        }
        if !(0..=MAX_CUSTOM_PRIORITY_SCORE).contains(&i64::from(point.score)) {
            errors.push(format!(
                "{PATH}[{i}].score: Invalid value: {}: not in valid range [0, {MAX_CUSTOM_PRIORITY_SCORE}]",
                point.score
            ));
        }
    }
    shape
        .iter()
        .map(|p| ShapePoint {
            utilization: i64::from(p.utilization),
            score: i64::from(p.score) * (MAX_NODE_SCORE / MAX_CUSTOM_PRIORITY_SCORE),
        })
        .collect()
}

/// `want` does not fit in what is left of `capacity` after `used`.
fn exceeds(want: i64, capacity: i64, used: i64) -> bool {
    i128::from(want) > i128::from(capacity) - i128::from(used)
}

fn insufficient(name: &str, requested: i64, used: i64, capacity: i64) -> InsufficientResource {
    InsufficientResource {
        name: name.to_string(),
        reason: format!("Insufficient {name}"),
        requested,
        used,
        capacity,
    }
}

impl Plugin for NodeResourcesFit {
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
        state.write(PRE_FILTER_KEY, pod.requests.clone());
        (PreFilterResult::default(), Status::success())
    }

    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let requests = state
            .read::<Resources>(PRE_FILTER_KEY)
            .unwrap_or(&pod.requests);
        let insufficient = self.insufficient_resources(requests, node);
        if insufficient.is_empty() {
            return Status::success();
        }
        Status::new(
            Code::Unschedulable,
            insufficient.into_iter().map(|r| r.reason).collect(),
        )
    }

    fn pre_score(&self, state: &mut CycleState, pod: &PodInfo, _: &[Arc<NodeInfo>]) -> Status {
        let requests = allocation::pod_request_list(pod, &self.resources, false);
        state.write(PRE_SCORE_KEY, requests);
        Status::success()
    }

    fn score(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        let mut computed = None;
        let requests = self.score_requests(state, pod, &mut computed);
        Ok(self.score_with(node, requests))
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
            slot.score = self.score_with(node, requests);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
