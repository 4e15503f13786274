//! The required terms: PreFilter counts (from the cluster index), per
//! topology pair, the pods that match the incoming pod's affinity and
//! anti-affinity terms and the placed pods whose anti-affinity terms match
//! the incoming pod; Filter reads those counts for the node's topology
//! values; AddPod/RemovePod keep them up to date for preemption's what-ifs.

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::core::v1::Pod;

use super::index::ClusterIndex;
#[cfg(test)]
use super::terms::TermCache;
use super::terms::{matches_all, AffinityTerm, PodTerms};
#[cfg(test)]
use crate::framework::Snapshot;
use crate::framework::{NodeInfo, Status};

pub const REASON_AFFINITY: &str = "node(s) didn't match pod affinity rules";
pub const REASON_ANTI_AFFINITY: &str = "node(s) didn't match pod anti-affinity rules";
pub const REASON_EXISTING_ANTI_AFFINITY: &str =
    "node(s) didn't satisfy existing pods anti-affinity rules";

/// Counts per topology pair: topology key → value → count. The keys are
/// few (one per distinct topologyKey of the terms), so they are a list;
/// pairs whose count drops to zero are removed, as kube-scheduler does.
#[derive(Debug, Clone, Default)]
pub struct TopologyCounts {
    keys: Vec<(String, HashMap<String, i64>)>,
}

impl TopologyCounts {
    /// Adds `delta` to the pair (`key`, the node's value for `key`), if the
    /// node has that label.
    pub fn update(&mut self, node_labels: &BTreeMap<String, String>, key: &str, delta: i64) {
        if let Some(value) = node_labels.get(key) {
            self.add(key, value, delta);
        }
    }

    /// Adds `delta` to the pair (`key`, `value`).
    pub fn add(&mut self, key: &str, value: &str, delta: i64) {
        let slot = match self.keys.iter().position(|(k, _)| k == key) {
            Some(i) => i,
            None => {
                self.keys.push((key.to_string(), HashMap::new()));
                self.keys.len() - 1
            }
        };
        let values = &mut self.keys[slot].1;
        match values.get_mut(value) {
            Some(count) => {
                *count += delta;
                if *count == 0 {
                    values.remove(value);
                }
            }
            None if delta != 0 => {
                values.insert(value.to_string(), delta);
            }
            None => {}
        }
    }

    /// The pairs with their counts, sorted (for comparing in tests).
    #[cfg(test)]
    pub fn sorted(&self) -> Vec<(String, String, i64)> {
        let mut out: Vec<(String, String, i64)> = self
            .keys
            .iter()
            .flat_map(|(k, values)| values.iter().map(move |(v, c)| (k.clone(), v.clone(), *c)))
            .collect();
        out.sort();
        out
    }

    pub fn get(&self, key: &str, value: &str) -> i64 {
        self.keys
            .iter()
            .find(|(k, _)| k == key)
            .and_then(|(_, values)| values.get(value))
            .copied()
            .unwrap_or(0)
    }

    /// The count of the node's pair for `key` (0 without the label).
    pub fn for_node(&self, node_labels: &BTreeMap<String, String>, key: &str) -> i64 {
        node_labels.get(key).map_or(0, |value| self.get(key, value))
    }

    /// The sum of the counts of the pairs the node is in.
    pub fn sum_on(&self, node_labels: &BTreeMap<String, String>) -> i64 {
        self.keys
            .iter()
            .filter_map(|(key, values)| values.get(node_labels.get(key)?.as_str()))
            .sum()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.iter().all(|(_, values)| values.is_empty())
    }

    /// Whether any pair the node is in has a positive count.
    pub fn any_positive_on(&self, node_labels: &BTreeMap<String, String>) -> bool {
        self.keys.iter().any(|(key, values)| {
            !values.is_empty()
                && node_labels
                    .get(key)
                    .and_then(|value| values.get(value.as_str()))
                    .is_some_and(|&count| count > 0)
        })
    }

    /// The existing pod's anti-affinity terms that select `pod` count.
    fn add_anti_affinity(
        &mut self,
        terms: &[AffinityTerm],
        pod: &Pod,
        namespace_labels: &BTreeMap<String, String>,
        node_labels: &BTreeMap<String, String>,
        delta: i64,
    ) {
        for term in terms {
            if term.matches(pod, namespace_labels) {
                self.update(node_labels, &term.topology_key, delta);
            }
        }
    }

    /// `pod` counts for every affinity term when it matches them all.
    fn add_affinity(
        &mut self,
        terms: &[AffinityTerm],
        pod: &Pod,
        node_labels: &BTreeMap<String, String>,
        delta: i64,
    ) {
        if matches_all(terms, pod) {
            for term in terms {
                self.update(node_labels, &term.topology_key, delta);
            }
        }
    }
}

/// What Filter needs, computed once per cycle.
#[derive(Debug, Clone)]
pub struct PreFilterState {
    /// The incoming pod's terms, namespace selectors merged.
    pub terms: PodTerms,
    /// The labels of the incoming pod's namespace.
    pub namespace_labels: BTreeMap<String, String>,
    /// Placed pods' required anti-affinity terms matching the incoming pod.
    pub existing_anti_affinity: TopologyCounts,
    /// Pods matching all of the incoming pod's required affinity terms.
    pub affinity: TopologyCounts,
    /// Pods matching the incoming pod's required anti-affinity terms.
    pub anti_affinity: TopologyCounts,
}

static NO_LABELS: BTreeMap<String, String> = BTreeMap::new();

impl PreFilterState {
    /// The counts, from the cluster index (synced to the snapshot).
    pub fn compute(
        incoming: &Pod,
        terms: PodTerms,
        namespace_labels: BTreeMap<String, String>,
        index: &ClusterIndex,
    ) -> PreFilterState {
        PreFilterState {
            existing_anti_affinity: index.existing_anti_affinity(incoming, &namespace_labels),
            affinity: index.affinity(&terms.required_affinity),
            anti_affinity: index.anti_affinity(&terms.required_anti_affinity),
            terms,
            namespace_labels,
        }
    }

    /// The counts pod by pod over the snapshot, as kube-scheduler makes
    /// them: what the index must agree with.
    #[cfg(test)]
    pub fn compute_by_scan(
        incoming: &Pod,
        terms: PodTerms,
        namespace_labels: BTreeMap<String, String>,
        snapshot: &Snapshot,
        cache: &mut TermCache,
    ) -> PreFilterState {
        let mut state = PreFilterState {
            terms,
            namespace_labels,
            existing_anti_affinity: TopologyCounts::default(),
            affinity: TopologyCounts::default(),
            anti_affinity: TopologyCounts::default(),
        };
        for node in &snapshot.nodes {
            let node_labels = node.labels();
            for existing in node.pods.iter().filter(|p| p.has_required_anti_affinity()) {
                let theirs = &cache.terms(&existing.pod).terms;
                state.existing_anti_affinity.add_anti_affinity(
                    &theirs.required_anti_affinity,
                    incoming,
                    &state.namespace_labels,
                    node_labels,
                    1,
                );
            }
            for existing in &node.pods {
                let (affinity, anti) = (
                    &state.terms.required_affinity,
                    &state.terms.required_anti_affinity,
                );
                state
                    .affinity
                    .add_affinity(affinity, &existing.pod, node_labels, 1);
                state.anti_affinity.add_anti_affinity(
                    anti,
                    &existing.pod,
                    &NO_LABELS,
                    node_labels,
                    1,
                );
            }
        }
        state
    }

    /// Nothing to check: no term of the pod, and no placed pod's
    /// anti-affinity selects it.
    pub fn is_trivial(&self) -> bool {
        self.existing_anti_affinity.is_empty()
            && self.terms.required_affinity.is_empty()
            && self.terms.required_anti_affinity.is_empty()
    }

    /// `other` (with its parsed terms) appears on (`delta` 1) or leaves
    /// (`delta` -1) a node with these labels.
    pub fn update_with_pod(
        &mut self,
        incoming: &Pod,
        other: &Pod,
        other_terms: &PodTerms,
        node_labels: &BTreeMap<String, String>,
        delta: i64,
    ) {
        self.existing_anti_affinity.add_anti_affinity(
            &other_terms.required_anti_affinity,
            incoming,
            &self.namespace_labels,
            node_labels,
            delta,
        );
        self.affinity
            .add_affinity(&self.terms.required_affinity, other, node_labels, delta);
        self.anti_affinity.add_anti_affinity(
            &self.terms.required_anti_affinity,
            other,
            &NO_LABELS,
            node_labels,
            delta,
        );
    }

    pub fn filter(&self, pod: &Pod, node: &NodeInfo) -> Status {
        let labels = node.labels();
        if !self.satisfies_affinity(pod, labels) {
            return Status::unresolvable(REASON_AFFINITY);
        }
        if !self.satisfies_anti_affinity(labels) {
            return Status::unschedulable(REASON_ANTI_AFFINITY);
        }
        if self.existing_anti_affinity.any_positive_on(labels) {
            return Status::unschedulable(REASON_EXISTING_ANTI_AFFINITY);
        }
        Status::success()
    }

    fn satisfies_affinity(&self, pod: &Pod, labels: &BTreeMap<String, String>) -> bool {
        let mut pods_exist = true;
        for term in &self.terms.required_affinity {
            let Some(value) = labels.get(&term.topology_key) else {
                // Every topology label must be on the node.
                return false;
            };
            if self.affinity.get(&term.topology_key, value) <= 0 {
                pods_exist = false;
            }
        }
        // The first of a group of pods with affinity to each other may go
        // anywhere with the topology labels, if no pod matches yet.
        pods_exist || (self.affinity.is_empty() && matches_all(&self.terms.required_affinity, pod))
    }

    fn satisfies_anti_affinity(&self, labels: &BTreeMap<String, String>) -> bool {
        self.anti_affinity.is_empty()
            || self
                .terms
                .required_anti_affinity
                .iter()
                .all(|term| self.anti_affinity.for_node(labels, &term.topology_key) <= 0)
    }
}
