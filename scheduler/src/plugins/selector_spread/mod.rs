//! SelectorSpread (kube-scheduler's classic default spreading, removed
//! upstream in 1.26; off unless a profile names it): prefers nodes, and
//! zones, with fewer pods of the pod's Services, ReplicationController,
//! ReplicaSet or StatefulSet. Pods with topologySpreadConstraints are left
//! to PodTopologySpread.
//!
//! PreScore does not see the cluster's objects, so PreFilter builds the
//! selector (and filters nothing): enable both points, as `points()` says.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector as ApiLabelSelector;
use skiff_machinery::selectors::LabelSelector;

use crate::framework::{
    ClusterObjects, CycleState, NodeInfo, NodeScore, Plugin, PodInfo, Point, PreFilterResult,
    Snapshot, Status, MAX_NODE_SCORE,
};

pub const NAME: &str = "SelectorSpread";

const SELECTOR_KEY: &str = "PreFilterSelectorSpread";
const ZONES_KEY: &str = "PreScoreSelectorSpread";

/// With zones, 2/3 of the score comes from spreading across zones and 1/3
/// from spreading across nodes.
const ZONE_WEIGHTING: f64 = 2.0 / 3.0;

const ZONE_LABELS: [&str; 2] = [
    "failure-domain.beta.kubernetes.io/zone",
    "topology.kubernetes.io/zone",
];
const REGION_LABELS: [&str; 2] = [
    "failure-domain.beta.kubernetes.io/region",
    "topology.kubernetes.io/region",
];

pub struct SelectorSpread;

pub fn new(args: &serde_json::Value) -> Result<Arc<dyn Plugin>, String> {
    super::no_args(NAME, args)?;
    Ok(Arc::new(SelectorSpread))
}

/// The pods to spread away from: label equalities (from Services and a
/// ReplicationController) and a ReplicaSet's or StatefulSet's selector,
/// ANDed, as kube's `DefaultSelector` builds them.
#[derive(Debug, Clone, Default)]
pub struct SpreadSelector {
    equals: BTreeMap<String, String>,
    selector: Option<LabelSelector>,
}

impl SpreadSelector {
    /// An empty selector counts no pod.
    pub fn is_empty(&self) -> bool {
        self.equals.is_empty() && self.selector.as_ref().is_none_or(LabelSelector::is_empty)
    }

    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.equals.iter().all(|(k, v)| labels.get(k) == Some(v))
            && self
                .selector
                .as_ref()
                .is_none_or(|s| s.matches_by(|key| labels.get(key).map(String::as_str)))
    }

    pub fn of_pod(pod: &Pod, cluster: &ClusterObjects) -> SpreadSelector {
        let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
        let same_namespace = |ns: &Option<String>| ns.as_deref().unwrap_or("default") == namespace;
        let labels = pod.metadata.labels.clone().unwrap_or_default();
        let mut out = SpreadSelector::default();
        for service in &cluster.services {
            if !same_namespace(&service.metadata.namespace) {
                continue;
            }
            // A Service without a selector selects nothing, not everything.
            let Some(selector) = service.spec.as_ref().and_then(|s| s.selector.as_ref()) else {
                continue;
            };
            if selector.iter().all(|(k, v)| labels.get(k) == Some(v)) {
                out.equals
                    .extend(selector.iter().map(|(k, v)| (k.clone(), v.clone())));
            }
        }
        let Some(owner) = pod
            .metadata
            .owner_references
            .iter()
            .flatten()
            .find(|r| r.controller == Some(true))
        else {
            return out;
        };
        let named = |ns: &Option<String>, name: &Option<String>| {
            same_namespace(ns) && name.as_deref() == Some(owner.name.as_str())
        };
        match (owner.api_version.as_str(), owner.kind.as_str()) {
            ("v1", "ReplicationController") => {
                let rc = cluster
                    .replication_controllers
                    .iter()
                    .find(|rc| named(&rc.metadata.namespace, &rc.metadata.name));
                if let Some(selector) = rc
                    .and_then(|rc| rc.spec.as_ref())
                    .and_then(|s| s.selector.as_ref())
                {
                    out.equals
                        .extend(selector.iter().map(|(k, v)| (k.clone(), v.clone())));
                }
            }
            ("apps/v1", "ReplicaSet") => {
                let rs = cluster
                    .replica_sets
                    .iter()
                    .find(|rs| named(&rs.metadata.namespace, &rs.metadata.name));
                out.selector = rs
                    .and_then(|rs| rs.spec.as_ref())
                    .and_then(|s| parse(&s.selector));
            }
            ("apps/v1", "StatefulSet") => {
                let ss = cluster
                    .stateful_sets
                    .iter()
                    .find(|ss| named(&ss.metadata.namespace, &ss.metadata.name));
                out.selector = ss
                    .and_then(|ss| ss.spec.as_ref())
                    .and_then(|s| parse(&s.selector));
            }
            _ => {}
        }
        out
    }
}

/// A workload's selector; one that does not parse adds nothing.
fn parse(selector: &ApiLabelSelector) -> Option<LabelSelector> {
    let value = serde_json::to_value(selector).ok()?;
    LabelSelector::from_json(&value).ok()
}

/// Pods on `node` in `namespace`, not being deleted, that `selector` picks.
fn count_matching_pods(namespace: &str, selector: &SpreadSelector, node: &NodeInfo) -> i64 {
    if node.pods.is_empty() || selector.is_empty() {
        return 0;
    }
    node.pods
        .iter()
        .filter(|p| {
            p.namespace() == namespace
                && p.pod.metadata.deletion_timestamp.is_none()
                && selector.matches(p.labels())
        })
        .count() as i64
}

/// The node's zone as kube's `GetZoneKey` names it ("" when none).
pub fn zone_key(node: &NodeInfo) -> String {
    let labels = node.labels();
    let first = |keys: [&str; 2]| {
        labels
            .get(keys[0])
            .or_else(|| labels.get(keys[1]))
            .map(String::as_str)
            .unwrap_or_default()
    };
    let (zone, region) = (first(ZONE_LABELS), first(REGION_LABELS));
    match region.is_empty() && zone.is_empty() {
        true => String::new(),
        false => format!("{region}:\x00:{zone}"),
    }
}

fn has_spread_constraints(pod: &PodInfo) -> bool {
    pod.pod
        .spec
        .as_ref()
        .and_then(|s| s.topology_spread_constraints.as_ref())
        .is_some_and(|c| !c.is_empty())
}

impl Plugin for SelectorSpread {
    fn name(&self) -> &'static str {
        NAME
    }

    fn points(&self) -> &'static [Point] {
        &[Point::PreFilter, Point::PreScore, Point::Score]
    }

    /// Builds the selector while the cluster's objects are at hand.
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
    ) -> (PreFilterResult, Status) {
        if !has_spread_constraints(pod) {
            state.write(
                SELECTOR_KEY,
                SpreadSelector::of_pod(&pod.pod, &snapshot.cluster),
            );
        }
        (PreFilterResult::default(), Status::skip())
    }

    fn pre_score(&self, state: &mut CycleState, pod: &PodInfo, nodes: &[Arc<NodeInfo>]) -> Status {
        if has_spread_constraints(pod) || state.read::<SpreadSelector>(SELECTOR_KEY).is_none() {
            return Status::skip();
        }
        let zones: HashMap<String, String> = nodes
            .iter()
            .map(|n| (n.name().to_string(), zone_key(n)))
            .collect();
        state.write(ZONES_KEY, zones);
        Status::success()
    }

    fn score(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        Ok(state
            .read::<SpreadSelector>(SELECTOR_KEY)
            .map_or(0, |s| count_matching_pods(pod.namespace(), s, node)))
    }

    fn normalize_scores(
        &self,
        state: &CycleState,
        _: &PodInfo,
        scores: &mut [NodeScore],
    ) -> Option<Status> {
        let Some(zones) = state.read::<HashMap<String, String>>(ZONES_KEY) else {
            return Some(Status::error(format!(
                "reading {ZONES_KEY:?} from cycleState: not found"
            )));
        };
        let zone_of = |name: &str| zones.get(name).map(String::as_str).unwrap_or_default();
        let mut by_zone: HashMap<&str, i64> = HashMap::new();
        let mut max_by_node = 0;
        for s in scores.iter() {
            max_by_node = max_by_node.max(s.score);
            let zone = zone_of(&s.name);
            if !zone.is_empty() {
                *by_zone.entry(zone).or_default() += s.score;
            }
        }
        let max_by_zone = by_zone.values().copied().max().unwrap_or(0);
        let max = MAX_NODE_SCORE as f64;
        let mut out = Vec::with_capacity(scores.len());
        for s in scores.iter() {
            let mut f = max;
            if max_by_node > 0 {
                f = max * ((max_by_node - s.score) as f64 / max_by_node as f64);
            }
            let zone = zone_of(&s.name);
            if !by_zone.is_empty() && !zone.is_empty() {
                let mut zone_score = max;
                if max_by_zone > 0 {
                    let count = by_zone.get(zone).copied().unwrap_or(0);
                    zone_score = max * ((max_by_zone - count) as f64 / max_by_zone as f64);
                }
                f = f * (1.0 - ZONE_WEIGHTING) + ZONE_WEIGHTING * zone_score;
            }
            out.push(f as i64);
        }
        for (s, score) in scores.iter_mut().zip(out) {
            s.score = score;
        }
        Some(Status::success())
    }
}

#[cfg(test)]
mod tests;
