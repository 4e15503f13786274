//! What InterPodAffinity keeps between scheduling cycles about the placed
//! pods: the pods by label, the placed pods' required anti-affinity terms
//! (one entry per distinct term, with the topology values of the nodes
//! their pods are on) and the pods whose terms score others. Each cycle
//! brings it up to date with the snapshot by the nodes that changed
//! (another `Arc<NodeInfo>` at that position), so a cycle looks at the
//! pods its terms can select instead of at every pod of the cluster.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;

use super::filtering::TopologyCounts;
use super::scoring::{PreScoreState, Tally};
use super::terms::{labels_of, matches_all, AffinityTerm, Anchor, PodTerms, TermCache};
use crate::framework::{NodeInfo, PodInfo};

#[derive(Default)]
pub struct ClusterIndex {
    /// The snapshot's nodes as of the last sync, by position.
    nodes: Vec<Arc<NodeInfo>>,
    /// Label key → value → the pods with that label, by node position.
    by_label: HashMap<String, HashMap<String, LabelPods>>,
    /// Placed pods' required anti-affinity terms, by `canonical()`.
    anti_terms: HashMap<String, AntiTerm>,
    /// Those terms filed by their first anchor (label key → value → term
    /// keys): a term only selects pods with one of its values, so only
    /// the incoming pod's labels lead to terms to check.
    anti_by_anchor: HashMap<String, HashMap<String, HashSet<String>>>,
    /// Terms without an anchor: checked for every incoming pod.
    anti_unanchored: HashSet<String>,
    /// Pods whose own terms score the incoming pod, by node position.
    scoring_pods: HashMap<usize, Vec<Arc<PodInfo>>>,
    pub terms: TermCache,
}

#[derive(Default)]
struct LabelPods {
    total: usize,
    by_node: HashMap<usize, Vec<Arc<PodInfo>>>,
}

struct AntiTerm {
    term: AffinityTerm,
    /// The topology value of the node → how many pods there have the term.
    pairs: HashMap<String, i64>,
}

static NO_LABELS: BTreeMap<String, String> = BTreeMap::new();

impl ClusterIndex {
    /// Brings the index to `nodes`: only positions holding another
    /// `Arc<NodeInfo>` than last time are re-read, and of a node whose
    /// labels did not change only the pods that came or went (by `Arc`)
    /// — a cycle's binding changes one pod of one node.
    pub fn sync(&mut self, nodes: &[Arc<NodeInfo>]) {
        for at in 0..self.nodes.len().max(nodes.len()) {
            let new = nodes.get(at);
            // Most nodes are unchanged: compared by pointer, without
            // touching (or counting a reference to) the NodeInfo itself.
            if let (Some(old), Some(new)) = (self.nodes.get(at), new) {
                if Arc::ptr_eq(old, new) {
                    continue;
                }
            }
            let old = self.nodes.get(at).cloned();
            match (&old, new) {
                (Some(old), Some(new)) if old.labels() == new.labels() => {
                    self.update_pods(at, old, new);
                }
                _ => {
                    if let Some(old) = &old {
                        for pod in &old.pods {
                            self.remove_pod(at, old.labels(), pod);
                        }
                    }
                    if let Some(new) = new {
                        for pod in &new.pods {
                            self.add_pod(at, new.labels(), pod);
                        }
                    }
                }
            }
            if let Some(new) = new {
                match self.nodes.get_mut(at) {
                    Some(slot) => *slot = new.clone(),
                    None => self.nodes.push(new.clone()),
                }
            }
        }
        self.nodes.truncate(nodes.len());
    }

    /// Removes the pods of `old` that `new` does not share and adds those
    /// it brings: past the common head and tail (by `Arc`), as adding
    /// pushes a pod and removing swaps the last one into its place.
    fn update_pods(&mut self, at: usize, old: &NodeInfo, new: &NodeInfo) {
        let same = |(a, b): &(&Arc<PodInfo>, &Arc<PodInfo>)| Arc::ptr_eq(a, b);
        let head = old.pods.iter().zip(&new.pods).take_while(same).count();
        let (old_rest, new_rest) = (&old.pods[head..], &new.pods[head..]);
        let tail = old_rest
            .iter()
            .rev()
            .zip(new_rest.iter().rev())
            .take_while(same)
            .count();
        for pod in &old_rest[..old_rest.len() - tail] {
            self.remove_pod(at, old.labels(), pod);
        }
        for pod in &new_rest[..new_rest.len() - tail] {
            self.add_pod(at, new.labels(), pod);
        }
    }

    fn add_pod(&mut self, at: usize, node_labels: &BTreeMap<String, String>, pod: &Arc<PodInfo>) {
        for (key, value) in pod.labels() {
            let values = match self.by_label.get_mut(key) {
                Some(values) => values,
                None => self.by_label.entry(key.clone()).or_default(),
            };
            let pods = match values.get_mut(value) {
                Some(pods) => pods,
                None => values.entry(value.clone()).or_default(),
            };
            pods.total += 1;
            pods.by_node.entry(at).or_default().push(pod.clone());
        }
        if !pod.has_pod_affinity() {
            return;
        }
        let placed = self.terms.terms(&pod.pod);
        let anti = placed.terms.required_anti_affinity.iter();
        for (term, key) in anti.zip(&placed.anti_affinity_keys) {
            let Some(value) = node_labels.get(&term.topology_key) else {
                continue;
            };
            let entry = match self.anti_terms.get_mut(key) {
                Some(entry) => entry,
                None => {
                    file(
                        &mut self.anti_by_anchor,
                        &mut self.anti_unanchored,
                        term,
                        key,
                        true,
                    );
                    self.anti_terms
                        .entry(key.clone())
                        .or_insert_with(|| AntiTerm {
                            term: term.clone(),
                            pairs: HashMap::new(),
                        })
                }
            };
            *entry.pairs.entry(value.clone()).or_insert(0) += 1;
        }
        if placed.scores_others() {
            self.scoring_pods.entry(at).or_default().push(pod.clone());
        }
    }

    fn remove_pod(
        &mut self,
        at: usize,
        node_labels: &BTreeMap<String, String>,
        pod: &Arc<PodInfo>,
    ) {
        for (key, value) in pod.labels() {
            let Some(values) = self.by_label.get_mut(key) else {
                continue;
            };
            if let Some(pods) = values.get_mut(value) {
                if let Some(here) = pods.by_node.get_mut(&at) {
                    if let Some(i) = here.iter().position(|p| Arc::ptr_eq(p, pod)) {
                        here.swap_remove(i);
                        pods.total -= 1;
                    }
                    if here.is_empty() {
                        pods.by_node.remove(&at);
                    }
                }
                if pods.total == 0 {
                    values.remove(value);
                }
            }
            if values.is_empty() {
                self.by_label.remove(key);
            }
        }
        if !pod.has_pod_affinity() {
            return;
        }
        let placed = self.terms.terms(&pod.pod);
        let anti = placed.terms.required_anti_affinity.iter();
        for (term, key) in anti.zip(&placed.anti_affinity_keys) {
            let Some(value) = node_labels.get(&term.topology_key) else {
                continue;
            };
            let Some(entry) = self.anti_terms.get_mut(key) else {
                continue;
            };
            if let Some(count) = entry.pairs.get_mut(value) {
                *count -= 1;
                if *count <= 0 {
                    entry.pairs.remove(value);
                }
            }
            if entry.pairs.is_empty() {
                self.anti_terms.remove(key);
                file(
                    &mut self.anti_by_anchor,
                    &mut self.anti_unanchored,
                    term,
                    key,
                    false,
                );
            }
        }
        if placed.scores_others() {
            if let Some(here) = self.scoring_pods.get_mut(&at) {
                if let Some(i) = here.iter().position(|p| Arc::ptr_eq(p, pod)) {
                    here.swap_remove(i);
                }
                if here.is_empty() {
                    self.scoring_pods.remove(&at);
                }
            }
        }
    }

    /// How many pods have one of the anchor's values.
    fn anchor_size(&self, anchor: &Anchor) -> usize {
        let Some(values) = self.by_label.get(&anchor.key) else {
            return 0;
        };
        anchor
            .values
            .iter()
            .filter_map(|v| values.get(v))
            .map(|pods| pods.total)
            .sum()
    }

    /// Calls `f` with (node, pod) for every pod a term with these
    /// anchors may select: the pods of the most selective anchor, or
    /// every pod when there is no anchor.
    fn for_each_candidate<'a>(
        &self,
        anchors: impl Iterator<Item = &'a Anchor>,
        mut f: impl FnMut(&NodeInfo, &PodInfo),
    ) {
        let best = anchors.min_by_key(|a| self.anchor_size(a));
        let Some(anchor) = best else {
            for node in &self.nodes {
                for pod in &node.pods {
                    f(node, pod);
                }
            }
            return;
        };
        let Some(values) = self.by_label.get(&anchor.key) else {
            return;
        };
        for value in &anchor.values {
            let Some(pods) = values.get(value) else {
                continue;
            };
            for (&at, here) in &pods.by_node {
                let Some(node) = self.nodes.get(at) else {
                    continue;
                };
                for pod in here {
                    f(node, pod);
                }
            }
        }
    }

    /// Placed pods' required anti-affinity terms that select `incoming`.
    pub fn existing_anti_affinity(
        &self,
        incoming: &Pod,
        namespace_labels: &BTreeMap<String, String>,
    ) -> TopologyCounts {
        let mut counts = TopologyCounts::default();
        let mut check = |key: &String| {
            let Some(entry) = self.anti_terms.get(key) else {
                return;
            };
            if entry.term.matches(incoming, namespace_labels) {
                for (value, &count) in &entry.pairs {
                    counts.add(&entry.term.topology_key, value, count);
                }
            }
        };
        self.anti_unanchored.iter().for_each(&mut check);
        for (label, value) in labels_of(incoming) {
            let filed = self
                .anti_by_anchor
                .get(label)
                .and_then(|values| values.get(value));
            filed.into_iter().flatten().for_each(&mut check);
        }
        counts
    }

    /// Pods matching every one of the incoming pod's affinity terms.
    pub fn affinity(&self, terms: &[AffinityTerm]) -> TopologyCounts {
        let mut counts = TopologyCounts::default();
        if terms.is_empty() {
            return counts;
        }
        let anchors = terms.iter().flat_map(|t| &t.anchors);
        self.for_each_candidate(anchors, |node, pod| {
            if matches_all(terms, &pod.pod) {
                for term in terms {
                    counts.update(node.labels(), &term.topology_key, 1);
                }
            }
        });
        counts
    }

    /// Pods matching each of the incoming pod's anti-affinity terms.
    pub fn anti_affinity(&self, terms: &[AffinityTerm]) -> TopologyCounts {
        let mut counts = TopologyCounts::default();
        for term in terms {
            self.for_each_candidate(term.anchors.iter(), |node, pod| {
                if term.matches(&pod.pod, &NO_LABELS) {
                    counts.update(node.labels(), &term.topology_key, 1);
                }
            });
        }
        counts
    }

    /// The preferred-term weights (see `scoring`); `None` when no term
    /// matched anything.
    pub fn scores(
        &mut self,
        incoming: &Pod,
        terms: &PodTerms,
        namespace_labels: &BTreeMap<String, String>,
        hard_pod_affinity_weight: i64,
    ) -> Option<PreScoreState> {
        let mut tally = Tally::default();
        for (weighted, sign) in [
            (&terms.preferred_affinity, 1),
            (&terms.preferred_anti_affinity, -1),
        ] {
            for w in weighted {
                self.for_each_candidate(w.term.anchors.iter(), |node, pod| {
                    tally.add(
                        node.labels(),
                        &w.term,
                        &pod.pod,
                        &NO_LABELS,
                        sign * w.weight,
                    );
                });
            }
        }
        for (&at, pods) in &self.scoring_pods {
            let Some(node) = self.nodes.get(at) else {
                continue;
            };
            for pod in pods {
                let theirs = &self.terms.terms(&pod.pod).terms;
                tally.add_placed(
                    node.labels(),
                    theirs,
                    incoming,
                    namespace_labels,
                    hard_pod_affinity_weight,
                );
            }
        }
        tally.finish()
    }
}

/// Files (`add`) or unfiles a term under its first anchor's values, or
/// among the unanchored terms.
fn file(
    by_anchor: &mut HashMap<String, HashMap<String, HashSet<String>>>,
    unanchored: &mut HashSet<String>,
    term: &AffinityTerm,
    key: &str,
    add: bool,
) {
    let Some(anchor) = term.anchors.first() else {
        match add {
            true => unanchored.insert(key.to_string()),
            false => unanchored.remove(key),
        };
        return;
    };
    let values = by_anchor.entry(anchor.key.clone()).or_default();
    for value in &anchor.values {
        let keys = values.entry(value.clone()).or_default();
        match add {
            true => keys.insert(key.to_string()),
            false => keys.remove(key),
        };
        if keys.is_empty() {
            values.remove(value);
        }
    }
    if values.is_empty() {
        by_anchor.remove(&anchor.key);
    }
}
