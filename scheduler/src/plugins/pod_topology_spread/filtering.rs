//! The DoNotSchedule constraints: PreFilter counts the matching pods of
//! every domain (a topology value among the nodes the inclusion policies
//! admit) and keeps the two smallest counts; Filter checks the skew the
//! pod would make on the node; AddPod/RemovePod keep the counts for
//! preemption's what-ifs.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod};

use super::constraints::{has_all_keys, pod_labels, Constraint, Inclusion, NodeInclusion};
use super::memo::Domains;
use crate::framework::{NodeInfo, Status};

pub const REASON_CONSTRAINTS_NOT_MATCH: &str =
    "node(s) didn't match pod topology spread constraints";
pub const REASON_NODE_LABEL_NOT_MATCH: &str =
    "node(s) didn't match pod topology spread constraints (missing required label)";

/// The two domains with the fewest matching pods, as kube-scheduler keeps
/// them: `[0]` always holds the minimum; `[1]` is not always the second.
#[derive(Debug, Clone, PartialEq)]
pub struct CriticalPaths([(String, i64); 2]);

impl Default for CriticalPaths {
    fn default() -> Self {
        CriticalPaths([
            (String::new(), i64::from(i32::MAX)),
            (String::new(), i64::from(i32::MAX)),
        ])
    }
}

impl CriticalPaths {
    pub fn update(&mut self, value: &str, count: i64) {
        let paths = &mut self.0;
        let at = paths.iter().position(|(v, _)| v == value);
        match at {
            Some(i) => {
                paths[i].1 = count;
                if paths[0].1 > paths[1].1 {
                    paths.swap(0, 1);
                }
            }
            None if count < paths[0].1 => {
                paths[1] = std::mem::replace(&mut paths[0], (value.to_string(), count));
            }
            None if count < paths[1].1 => paths[1] = (value.to_string(), count),
            None => {}
        }
    }

    pub fn min(&self) -> i64 {
        self.0[0].1
    }
}

/// What Filter reads, per constraint (same index).
#[derive(Debug, Clone)]
pub struct PreFilterState {
    pub constraints: Vec<Constraint>,
    /// Topology value → matching pods and nodes, for every domain, as
    /// the snapshot has them (shared with the plugin's memo).
    pub base: Arc<Domains>,
    /// AddPod/RemovePod's changes to the matching pods of a domain.
    pub overlay: Vec<HashMap<String, i64>>,
    /// Domains AddPod/RemovePod made that `base` does not have.
    pub extra_domains: Vec<i64>,
    pub critical_paths: Vec<CriticalPaths>,
    /// Per constraint: 1 when the incoming pod matches its selector
    /// (it counts itself in the domain it would join), found once.
    incoming_matches: Vec<i64>,
}

impl PreFilterState {
    pub fn new(constraints: Vec<Constraint>, base: Arc<Domains>, pod: &Pod) -> PreFilterState {
        let own_labels = pod_labels(pod);
        let incoming_matches = constraints
            .iter()
            .map(|c| i64::from(c.selector.matches(own_labels)))
            .collect();
        let critical_paths = base
            .iter()
            .map(|values| {
                let mut paths = CriticalPaths::default();
                for (value, domain) in values {
                    paths.update(value, domain.pods);
                }
                paths
            })
            .collect();
        PreFilterState {
            overlay: constraints.iter().map(|_| HashMap::new()).collect(),
            extra_domains: vec![0; constraints.len()],
            constraints,
            base,
            critical_paths,
            incoming_matches,
        }
    }

    /// The matching pods of a domain, with AddPod/RemovePod's changes.
    fn matching(&self, i: usize, value: &str) -> i64 {
        let base = self.base[i].get(value).map_or(0, |d| d.pods);
        match self.overlay[i].is_empty() {
            true => base,
            false => base + self.overlay[i].get(value).copied().unwrap_or(0),
        }
    }

    /// `other` appears on (`delta` 1) or leaves (`delta` -1) `node`.
    pub fn update_with_pod(&mut self, incoming: &Pod, other: &Pod, node: &Node, delta: i64) {
        let namespace = |p: &Pod| {
            p.metadata
                .namespace
                .clone()
                .unwrap_or_else(|| "default".into())
        };
        if namespace(incoming) != namespace(other) {
            return;
        }
        static NO_LABELS: BTreeMap<String, String> = BTreeMap::new();
        let labels = node.metadata.labels.as_ref().unwrap_or(&NO_LABELS);
        if !has_all_keys(labels, &self.constraints) {
            return;
        }
        let inclusion = Inclusion::of_pod(incoming);
        let mut seen = NodeInclusion::default();
        let other_labels = pod_labels(other);
        for i in 0..self.constraints.len() {
            let c = &self.constraints[i];
            if !c.selector.matches(other_labels) || !inclusion.includes(c, node, &mut seen) {
                continue;
            }
            let Some(value) = labels.get(&c.topology_key) else {
                continue;
            };
            if !self.base[i].contains_key(value) && !self.overlay[i].contains_key(value) {
                self.extra_domains[i] += 1;
            }
            *self.overlay[i].entry(value.clone()).or_insert(0) += delta;
            let total = self.matching(i, value);
            self.critical_paths[i].update(value, total);
        }
    }

    /// Whether `node` keeps every constraint's skew for the pod this state
    /// was made for.
    pub fn filter(&self, node: &NodeInfo) -> Status {
        for (i, c) in self.constraints.iter().enumerate() {
            let Some(value) = node.label(&c.topology_key) else {
                return Status::unresolvable(REASON_NODE_LABEL_NOT_MATCH);
            };
            // Fewer domains than minDomains: the global minimum is 0.
            let domains = self.base[i].len() as i64 + self.extra_domains[i];
            let min = match domains < c.min_domains {
                true => 0,
                false => self.critical_paths[i].min(),
            };
            if self.matching(i, value) + self.incoming_matches[i] - min > c.max_skew {
                return Status::unschedulable(REASON_CONSTRAINTS_NOT_MATCH);
            }
        }
        Status::success()
    }
}
