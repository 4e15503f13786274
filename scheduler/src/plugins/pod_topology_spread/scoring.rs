//! The ScheduleAnyway constraints: PreScore counts the matching pods of the
//! domains the feasible nodes are in (over every node of the cluster);
//! Score weighs a node's domain counts by the log of the number of
//! domains; NormalizeScore turns fewer pods into more points.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;

use super::constraints::{count_matching, has_all_keys, Constraint, LABEL_HOSTNAME};
use super::memo::Domains;
use crate::framework::{NodeInfo, NodeScore, MAX_NODE_SCORE};

#[derive(Debug, Clone)]
pub struct PreScoreState {
    pub constraints: Vec<Constraint>,
    /// Feasible nodes without every topology key: scored 0.
    pub ignored_nodes: HashSet<String>,
    /// Per constraint: topology value → matching pods (empty for hostname
    /// constraints, counted on the node itself in Score).
    pub counts: Vec<HashMap<String, i64>>,
    /// Per constraint: ln(number of domains + 2), so that counts in small
    /// topologies are not watered down by big ones.
    pub weights: Vec<f64>,
    pub namespace: String,
}

impl PreScoreState {
    /// `feasible`: the nodes to score; `all_domains`: the matching pods of
    /// every domain of each constraint over every node of the cluster.
    /// `require_all_topologies`: ignore feasible nodes without every key
    /// (not for system defaults, so that nodes without a zone still
    /// spread by hostname).
    pub fn compute(
        constraints: Vec<Constraint>,
        pod: &Pod,
        feasible: &[Arc<NodeInfo>],
        all_domains: &Domains,
        require_all_topologies: bool,
    ) -> PreScoreState {
        let mut ignored_nodes = HashSet::new();
        let mut counts: Vec<HashMap<String, i64>> =
            constraints.iter().map(|_| HashMap::new()).collect();
        for node in feasible {
            let labels = node.labels();
            if require_all_topologies && !has_all_keys(labels, &constraints) {
                ignored_nodes.insert(node.name().to_string());
                continue;
            }
            for (i, c) in constraints.iter().enumerate() {
                // Per-node counts are made in Score.
                if c.topology_key == LABEL_HOSTNAME {
                    continue;
                }
                let value = labels.get(&c.topology_key).map_or("", String::as_str);
                if !counts[i].contains_key(value) {
                    let pods = all_domains
                        .get(i)
                        .and_then(|values| values.get(value))
                        .map_or(0, |d| d.pods);
                    counts[i].insert(value.to_string(), pods);
                }
            }
        }
        let scored = feasible.len() - ignored_nodes.len();
        let weights = constraints
            .iter()
            .zip(&counts)
            .map(|(c, domains)| {
                let size = match c.topology_key == LABEL_HOSTNAME {
                    true => scored,
                    false => domains.len(),
                };
                ((size + 2) as f64).ln()
            })
            .collect();
        PreScoreState {
            constraints,
            ignored_nodes,
            counts,
            weights,
            namespace: pod
                .metadata
                .namespace
                .clone()
                .unwrap_or_else(|| "default".into()),
        }
    }

    pub fn score(&self, node: &NodeInfo) -> i64 {
        if self.ignored_nodes.contains(node.name()) {
            return 0;
        }
        let mut score = 0.0;
        for (i, c) in self.constraints.iter().enumerate() {
            let Some(value) = node.label(&c.topology_key) else {
                continue;
            };
            let count = match c.topology_key == LABEL_HOSTNAME {
                true => count_matching(&node.pods, &c.selector, &self.namespace),
                false => self.counts[i].get(value).copied().unwrap_or(0),
            };
            // maxSkew-1 waters down the differences: a bigger skew is
            // tolerated more.
            score += count as f64 * self.weights[i] + (c.max_skew - 1) as f64;
        }
        score.round() as i64
    }

    /// Fewest pods → MAX_NODE_SCORE; ignored nodes → 0.
    pub fn normalize(&self, scores: &mut [NodeScore]) {
        let counted = || {
            scores
                .iter()
                .filter(|s| !self.ignored_nodes.contains(s.name.as_ref()))
        };
        let min = counted().map(|s| s.score).min().unwrap_or(i64::MAX) as i128;
        let max = counted().map(|s| s.score).max().unwrap_or(0).max(0) as i128;
        for s in scores.iter_mut() {
            s.score = match () {
                _ if self.ignored_nodes.contains(s.name.as_ref()) => 0,
                _ if max == 0 => MAX_NODE_SCORE,
                _ => (MAX_NODE_SCORE as i128 * (max + min - s.score as i128) / max) as i64,
            };
        }
    }
}
