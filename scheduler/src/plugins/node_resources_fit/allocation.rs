//! How much of a node a pod would take, resource by resource, and the
//! scores built from it: shared by NodeResourcesFit's scoring strategies
//! and NodeResourcesBalancedAllocation, as kube-scheduler's
//! `resourceAllocationScorer`.

use serde::Deserialize;

use crate::framework::resources::Resources;
use crate::framework::{NodeInfo, PodInfo, MAX_NODE_SCORE};

/// A resource a scorer looks at, and how much it counts.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResourceSpec {
    pub name: String,
    /// 0 (or absent) is defaulted to 1, as the v1 config defaults it.
    #[serde(default)]
    pub weight: i64,
    /// What `name` is, found once by [`defaulted`] rather than per node
    /// scored.
    #[serde(skip)]
    pub kind: Kind,
}

/// How a scored resource is read off a node.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Kind {
    Cpu,
    Memory,
    EphemeralStorage,
    /// Extended, hugepages and the like: [`is_scalar_resource_name`].
    Scalar,
    /// Anything else (`pods`): not scored.
    #[default]
    Other,
}

impl Kind {
    pub fn of(name: &str) -> Kind {
        match name {
            "cpu" => Kind::Cpu,
            "memory" => Kind::Memory,
            "ephemeral-storage" => Kind::EphemeralStorage,
            name if is_scalar_resource_name(name) => Kind::Scalar,
            _ => Kind::Other,
        }
    }
}

/// cpu and memory, weight 1 each: the default of both plugins' args.
pub fn default_resources() -> Vec<ResourceSpec> {
    ["cpu", "memory"]
        .into_iter()
        .map(|name| ResourceSpec {
            name: name.to_string(),
            weight: 1,
            kind: Kind::of(name),
        })
        .collect()
}

/// The configured resources, or the defaults when none is given, with
/// zero weights defaulted to 1.
pub fn defaulted(resources: Option<Vec<ResourceSpec>>) -> Vec<ResourceSpec> {
    let mut resources = match resources {
        Some(list) if !list.is_empty() => list,
        _ => default_resources(),
    };
    for resource in &mut resources {
        if resource.weight == 0 {
            resource.weight = 1;
        }
        resource.kind = Kind::of(&resource.name);
    }
    resources
}

/// Not in the `kubernetes.io/` namespace and with a domain prefix:
/// `example.com/gpu`.
pub fn is_extended_resource_name(name: &str) -> bool {
    if is_native_resource(name) || name.starts_with("requests.") {
        return false;
    }
    skiff_machinery::validation::is_qualified_name(&format!("requests.{name}")).is_empty()
}

fn is_native_resource(name: &str) -> bool {
    !name.contains('/') || name.contains("kubernetes.io/")
}

/// What kube-scheduler keeps among a node's "scalar" resources: extended
/// resources, hugepages, `kubernetes.io/` prefixed and attachable volumes.
pub fn is_scalar_resource_name(name: &str) -> bool {
    is_extended_resource_name(name)
        || name.starts_with("hugepages-")
        || name.contains("kubernetes.io/")
        || name.starts_with("attachable-volumes-")
}

/// The pod's request of each resource in `resources`: with
/// `use_requested` its plain requests, otherwise with containers that ask
/// no cpu or memory counted as the non-zero defaults.
pub fn pod_request_list(
    pod: &PodInfo,
    resources: &[ResourceSpec],
    use_requested: bool,
) -> Vec<i64> {
    let requests: &Resources = match use_requested {
        true => &pod.requests,
        false => &pod.non_zero,
    };
    resources
        .iter()
        .map(|r| match r.name.as_str() {
            "pods" => 0,
            name => requests.get(name),
        })
        .collect()
}

/// A best-effort pod asks for none of the resources.
pub fn is_best_effort(requests: &[i64]) -> bool {
    requests.iter().all(|r| *r == 0)
}

/// The node's allocatable amount of `name` and what would be requested
/// there with the pod; (0, 0) when the resource is not scored on this
/// node (an extended resource the pod does not ask for, or one the node
/// does not have).
pub fn allocatable_and_requested(
    node: &NodeInfo,
    resource: &ResourceSpec,
    pod_request: i64,
    use_requested: bool,
) -> (i64, i64) {
    let requested = match use_requested {
        true => &node.requested,
        false => &node.non_zero_requested,
    };
    let allocatable = &node.allocatable;
    match resource.kind {
        Kind::Cpu => (
            allocatable.milli_cpu,
            requested.milli_cpu.saturating_add(pod_request),
        ),
        Kind::Memory => (
            allocatable.memory,
            requested.memory.saturating_add(pod_request),
        ),
        // Ephemeral storage has no non-zero default: always the requests.
        Kind::EphemeralStorage => (
            allocatable.ephemeral_storage,
            node.requested.ephemeral_storage.saturating_add(pod_request),
        ),
        Kind::Scalar if pod_request == 0 => (0, 0),
        Kind::Scalar => match allocatable.scalar.get(&resource.name) {
            Some(&amount) => {
                let used = node
                    .requested
                    .scalar
                    .get(&resource.name)
                    .copied()
                    .unwrap_or(0);
                (amount, used.saturating_add(pod_request))
            }
            None => (0, 0),
        },
        Kind::Other => (0, 0),
    }
}

/// Amounts per scored resource: inline for the usual few (scoring runs
/// per node for hundreds of nodes a pod, so no allocation per node).
pub type Amounts = smallvec::SmallVec<[i64; 4]>;

/// `n` zeros, made in place when they fit inline.
fn zeros(n: usize) -> Amounts {
    match n {
        0..=4 => Amounts::from_buf_and_len([0; 4], n),
        _ => smallvec::smallvec![0; n],
    }
}

/// Requested and allocatable amounts of each resource on `node`, in the
/// order of `resources`; an allocatable of 0 marks a resource to skip.
#[inline]
pub fn node_amounts(
    node: &NodeInfo,
    resources: &[ResourceSpec],
    pod_requests: &[i64],
    use_requested: bool,
) -> (Amounts, Amounts) {
    let mut requested = zeros(resources.len());
    let mut allocatable = zeros(resources.len());
    for (i, resource) in resources.iter().enumerate() {
        let pod_request = pod_requests.get(i).copied().unwrap_or(0);
        let (alloc, req) = allocatable_and_requested(node, resource, pod_request, use_requested);
        if alloc == 0 {
            continue;
        }
        allocatable[i] = alloc;
        requested[i] = req;
    }
    (requested, allocatable)
}

/// A point of RequestedToCapacityRatio's broken linear function:
/// utilization 0..=100 → score, already scaled to 0..=MAX_NODE_SCORE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShapePoint {
    pub utilization: i64,
    pub score: i64,
}

/// NodeResourcesFit's `scoringStrategy.type`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Strategy {
    LeastAllocated,
    MostAllocated,
    RequestedToCapacityRatio(Vec<ShapePoint>),
}

impl Strategy {
    /// The node's score from the amounts of `node_amounts`, weighted by
    /// `resources`.
    pub fn score(&self, resources: &[ResourceSpec], requested: &[i64], allocatable: &[i64]) -> i64 {
        let score = match self {
            Strategy::LeastAllocated => {
                weighted_mean(resources, requested, allocatable, least_requested_score)
            }
            Strategy::MostAllocated => {
                weighted_mean(resources, requested, allocatable, most_requested_score)
            }
            Strategy::RequestedToCapacityRatio(shape) => {
                requested_to_capacity_ratio(shape, resources, requested, allocatable)
            }
        };
        score.clamp(0, MAX_NODE_SCORE)
    }
}

fn weighted_mean(
    resources: &[ResourceSpec],
    requested: &[i64],
    allocatable: &[i64],
    score: fn(i64, i64) -> i64,
) -> i64 {
    let mut total: i128 = 0;
    let mut weights: i128 = 0;
    for ((resource, &req), &alloc) in resources.iter().zip(requested).zip(allocatable) {
        if alloc == 0 {
            continue;
        }
        total += i128::from(score(req, alloc)) * i128::from(resource.weight);
        weights += i128::from(resource.weight);
    }
    match weights {
        0 => 0,
        w => div(total, w),
    }
}

/// The share left free, 0..=100: LeastAllocated.
fn least_requested_score(requested: i64, capacity: i64) -> i64 {
    if capacity == 0 || requested > capacity {
        return 0;
    }
    let free = i128::from(capacity) - i128::from(requested);
    div(free * i128::from(MAX_NODE_SCORE), i128::from(capacity))
}

/// The share taken, 0..=100: MostAllocated. Requests above capacity (the
/// non-zero defaults can go past it) count as full.
fn most_requested_score(requested: i64, capacity: i64) -> i64 {
    if capacity == 0 {
        return 0;
    }
    let requested = requested.min(capacity);
    div(
        i128::from(requested) * i128::from(MAX_NODE_SCORE),
        i128::from(capacity),
    )
}

const MAX_UTILIZATION: i64 = 100;

fn requested_to_capacity_ratio(
    shape: &[ShapePoint],
    resources: &[ResourceSpec],
    requested: &[i64],
    allocatable: &[i64],
) -> i64 {
    let resource_score = |requested: i64, capacity: i64| -> i64 {
        if capacity == 0 || requested > capacity {
            return broken_linear(shape, MAX_UTILIZATION);
        }
        let utilization = div(
            i128::from(requested) * i128::from(MAX_UTILIZATION),
            i128::from(capacity),
        );
        broken_linear(shape, utilization)
    };
    let mut total: i128 = 0;
    let mut weights: i128 = 0;
    for ((resource, &req), &alloc) in resources.iter().zip(requested).zip(allocatable) {
        if alloc == 0 {
            continue;
        }
        let score = resource_score(req, alloc);
        if score > 0 {
            total += i128::from(score) * i128::from(resource.weight);
            weights += i128::from(resource.weight);
        }
    }
    match weights {
        0 => 0,
        w => (total as f64 / w as f64).round() as i64,
    }
}

/// The shape's value at utilization `p`: flat before the first point and
/// after the last, linear in between.
fn broken_linear(shape: &[ShapePoint], p: i64) -> i64 {
    for (i, point) in shape.iter().enumerate() {
        if p <= point.utilization {
            let Some(before) = i.checked_sub(1).and_then(|j| shape.get(j)) else {
                return point.score;
            };
            let span = point.utilization - before.utilization;
            if span == 0 {
                return point.score;
            }
            return before.score + (point.score - before.score) * (p - before.utilization) / span;
        }
    }
    shape.last().map(|p| p.score).unwrap_or(0)
}

fn clamp_i64(value: i128) -> i64 {
    value.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
}

/// `a / b` (towards zero) clamped to an i64, `b` > 0. In i64 when both
/// fit, as they do for any real node: a 128-bit division is a call that
/// takes several times as long, and scoring runs it per node per pod.
fn div(a: i128, b: i128) -> i64 {
    match (i64::try_from(a), i64::try_from(b)) {
        (Ok(a), Ok(b)) if b > 0 => a / b,
        _ => clamp_i64(a / b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn division_truncates_and_clamps_as_in_128_bits() {
        assert_eq!(div(7, 2), 3);
        assert_eq!(div(-7, 2), -3);
        assert_eq!(div(0, 5), 0);
        // Past i64 on the way, back within it.
        let big = i128::from(i64::MAX) * 100;
        assert_eq!(div(big, 100), i64::MAX);
        assert_eq!(div(big, 1), i64::MAX);
        assert_eq!(div(-big, 1), i64::MIN);
        // The scores of a node with a petabyte of memory.
        assert_eq!(least_requested_score(1 << 49, 1 << 50), 50);
        assert_eq!(most_requested_score(3 << 48, 1 << 50), 75);
    }

    #[test]
    fn amounts_start_at_zero_inline_or_not() {
        assert_eq!(zeros(2).as_slice(), [0, 0]);
        assert!(!zeros(4).spilled());
        assert_eq!(zeros(6).as_slice(), [0; 6]);
    }
}
