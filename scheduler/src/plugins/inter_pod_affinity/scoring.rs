//! The preferred terms: PreScore sums, per topology pair, the weights of
//! the incoming pod's preferred terms matched by placed pods and of placed
//! pods' terms (preferred, and required affinity at hardPodAffinityWeight)
//! matched by the incoming pod; Score adds up the node's pairs;
//! NormalizeScore maps min..max onto 0..=100.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;

use super::filtering::TopologyCounts;
use super::terms::{AffinityTerm, PodTerms, TermCache, WeightedTerm};
use crate::framework::{NodeInfo, NodeScore, MAX_NODE_SCORE};

/// What Score reads: topology key → value → summed weight.
#[derive(Debug, Clone, Default)]
pub struct PreScoreState {
    pub scores: TopologyCounts,
}

/// One cycle's scoring inputs.
pub struct Scorer<'a> {
    pub incoming: &'a Pod,
    /// The incoming pod's terms, namespace selectors merged.
    pub terms: &'a PodTerms,
    pub namespace_labels: &'a BTreeMap<String, String>,
    pub hard_pod_affinity_weight: i64,
    /// Whether the incoming pod has preferred terms: then every placed pod
    /// counts, else only those with terms of their own.
    pub has_constraints: bool,
}

static NO_LABELS: BTreeMap<String, String> = BTreeMap::new();

/// The summed weights, and whether any term matched at all.
#[derive(Default)]
pub struct Tally {
    scores: TopologyCounts,
    touched: bool,
}

impl Tally {
    /// `weight` for the node's pair of the term's topology key, if `pod`
    /// matches the term and the node has that key.
    pub fn add(
        &mut self,
        labels: &BTreeMap<String, String>,
        term: &AffinityTerm,
        pod: &Pod,
        namespace_labels: &BTreeMap<String, String>,
        weight: i64,
    ) {
        if labels.contains_key(&term.topology_key) && term.matches(pod, namespace_labels) {
            self.scores.update(labels, &term.topology_key, weight);
            self.touched = true;
        }
    }

    fn add_weighted(
        &mut self,
        labels: &BTreeMap<String, String>,
        terms: &[WeightedTerm],
        pod: &Pod,
        namespace_labels: &BTreeMap<String, String>,
        sign: i64,
    ) {
        for w in terms {
            self.add(labels, &w.term, pod, namespace_labels, sign * w.weight);
        }
    }

    /// A placed pod's terms (`theirs`, on a node with `labels`) that
    /// select the incoming pod: required affinity at the hard weight,
    /// preferred affinity added, preferred anti-affinity subtracted.
    pub fn add_placed(
        &mut self,
        labels: &BTreeMap<String, String>,
        theirs: &PodTerms,
        incoming: &Pod,
        namespace_labels: &BTreeMap<String, String>,
        hard_pod_affinity_weight: i64,
    ) {
        if hard_pod_affinity_weight > 0 {
            for term in &theirs.required_affinity {
                self.add(
                    labels,
                    term,
                    incoming,
                    namespace_labels,
                    hard_pod_affinity_weight,
                );
            }
        }
        self.add_weighted(
            labels,
            &theirs.preferred_affinity,
            incoming,
            namespace_labels,
            1,
        );
        self.add_weighted(
            labels,
            &theirs.preferred_anti_affinity,
            incoming,
            namespace_labels,
            -1,
        );
    }

    pub fn finish(self) -> Option<PreScoreState> {
        self.touched.then_some(PreScoreState {
            scores: self.scores,
        })
    }
}

impl Scorer<'_> {
    /// The summed weights over the pods of `nodes`, pod by pod (without
    /// the cluster index: when PreFilter did not run); `None` when no term
    /// matched anything.
    pub fn pre_score(
        &self,
        nodes: &[Arc<NodeInfo>],
        cache: &mut TermCache,
    ) -> Option<PreScoreState> {
        let mut tally = Tally::default();
        for node in nodes {
            if !self.has_constraints && node.pods_with_affinity == 0 {
                continue;
            }
            let labels = node.labels();
            if labels.is_empty() {
                continue;
            }
            for existing in &node.pods {
                let with_affinity = existing.has_pod_affinity();
                if !self.has_constraints && !with_affinity {
                    continue;
                }
                let pod = &existing.pod;
                tally.add_weighted(labels, &self.terms.preferred_affinity, pod, &NO_LABELS, 1);
                tally.add_weighted(
                    labels,
                    &self.terms.preferred_anti_affinity,
                    pod,
                    &NO_LABELS,
                    -1,
                );
                if with_affinity {
                    let theirs = &cache.terms(pod).terms;
                    tally.add_placed(
                        labels,
                        theirs,
                        self.incoming,
                        self.namespace_labels,
                        self.hard_pod_affinity_weight,
                    );
                }
            }
        }
        tally.finish()
    }
}

impl PreScoreState {
    pub fn score(&self, node: &NodeInfo) -> i64 {
        self.scores.sum_on(node.labels())
    }

    /// min..max onto 0..=MAX_NODE_SCORE; all equal is all 0.
    pub fn normalize(scores: &mut [NodeScore]) {
        let min = scores.iter().map(|s| s.score).min().unwrap_or(0);
        let max = scores.iter().map(|s| s.score).max().unwrap_or(0);
        let spread = max as i128 - min as i128;
        for s in scores.iter_mut() {
            s.score = match spread > 0 {
                true => {
                    let share = (s.score as i128 - min as i128) as f64 / spread as f64;
                    (MAX_NODE_SCORE as f64 * share) as i64
                }
                false => 0,
            };
        }
    }
}
