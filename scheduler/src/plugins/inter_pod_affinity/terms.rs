//! Pod (anti-)affinity terms parsed once, as kube-scheduler's
//! `AffinityTerm`: the label selector (with `matchLabelKeys` and
//! `mismatchLabelKeys` merged in), the namespaces and namespace selector,
//! the topology key; and a cache of the parsed terms of placed pods, so
//! that a scheduling cycle does not parse every other pod's selectors.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Weak};

use k8s_openapi::api::core::v1::{Pod, PodAffinityTerm, WeightedPodAffinityTerm};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector as LabelSelectorSpec, LabelSelectorRequirement,
};
use skiff_machinery::selectors::LabelSelector;

/// Which namespaces a term's `namespaceSelector` selects.
#[derive(Debug, Clone)]
pub enum NamespaceSelector {
    /// No selector (or one already merged into `namespaces`).
    Nothing,
    /// `{}`: every namespace.
    Everything,
    Labels(LabelSelector),
}

#[derive(Debug, Clone)]
pub struct AffinityTerm {
    pub namespaces: Vec<String>,
    pub namespace_selector: NamespaceSelector,
    /// `None`: no `labelSelector`, which selects no pod.
    pub selector: Option<LabelSelector>,
    pub topology_key: String,
    /// The selector's equality requirements (`matchLabels`, `In`): a pod
    /// the term selects has one of the values for each key, so the pods
    /// with those labels are the only candidates.
    pub anchors: Vec<Anchor>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Anchor {
    pub key: String,
    pub values: Vec<String>,
}

#[derive(Debug, Clone)]
pub struct WeightedTerm {
    pub term: AffinityTerm,
    pub weight: i64,
}

/// The four kinds of terms of one pod.
#[derive(Debug, Clone, Default)]
pub struct PodTerms {
    pub required_affinity: Vec<AffinityTerm>,
    pub required_anti_affinity: Vec<AffinityTerm>,
    pub preferred_affinity: Vec<WeightedTerm>,
    pub preferred_anti_affinity: Vec<WeightedTerm>,
}

/// A placed pod's terms, with what the cluster index files them by.
#[derive(Debug, Clone, Default)]
pub struct PlacedTerms {
    pub terms: PodTerms,
    /// `canonical()` of each required anti-affinity term.
    pub anti_affinity_keys: Vec<String>,
}

impl PlacedTerms {
    fn of(pod: &Pod) -> PlacedTerms {
        let terms = PodTerms::parse_lenient(pod);
        PlacedTerms {
            anti_affinity_keys: terms
                .required_anti_affinity
                .iter()
                .map(AffinityTerm::canonical)
                .collect(),
            terms,
        }
    }

    /// Whether the pod's terms add to other pods' scores: required
    /// affinity (at hardPodAffinityWeight) and preferred terms.
    pub fn scores_others(&self) -> bool {
        !self.terms.required_affinity.is_empty()
            || !self.terms.preferred_affinity.is_empty()
            || !self.terms.preferred_anti_affinity.is_empty()
    }
}

/// The namespace a pod lives in, as PodInfo reads it.
pub fn namespace_of(pod: &Pod) -> &str {
    pod.metadata.namespace.as_deref().unwrap_or("default")
}

pub fn labels_of(pod: &Pod) -> &BTreeMap<String, String> {
    static EMPTY: BTreeMap<String, String> = BTreeMap::new();
    pod.metadata.labels.as_ref().unwrap_or(&EMPTY)
}

fn parse_selector(spec: &LabelSelectorSpec) -> Result<LabelSelector, String> {
    let json = serde_json::to_value(spec).map_err(|e| e.to_string())?;
    LabelSelector::from_json(&json).map_err(|e| e.message)
}

impl AffinityTerm {
    /// The term of `pod` (whose labels feed `matchLabelKeys`).
    pub fn parse(pod: &Pod, term: &PodAffinityTerm) -> Result<AffinityTerm, String> {
        let (selector, anchors) = match &term.label_selector {
            None => (None, Vec::new()),
            Some(spec) => {
                let spec = with_label_keys(pod, term, spec);
                (Some(parse_selector(&spec)?), anchors_of(&spec))
            }
        };
        let namespace_selector = match &term.namespace_selector {
            None => NamespaceSelector::Nothing,
            Some(spec) => match parse_selector(spec)? {
                s if s.is_empty() => NamespaceSelector::Everything,
                s => NamespaceSelector::Labels(s),
            },
        };
        let listed = term.namespaces.as_deref().unwrap_or_default();
        let namespaces = match (listed.is_empty(), &term.namespace_selector) {
            (true, None) => vec![namespace_of(pod).to_string()],
            _ => listed.to_vec(),
        };
        Ok(AffinityTerm {
            namespaces,
            namespace_selector,
            selector,
            topology_key: term.topology_key.clone(),
            anchors,
        })
    }

    /// A text equal for terms that select the same pods in the same
    /// namespaces by the same topology key, to count such terms together.
    pub fn canonical(&self) -> String {
        let mut namespaces: Vec<&str> = self.namespaces.iter().map(String::as_str).collect();
        namespaces.sort_unstable();
        let namespace_selector = match &self.namespace_selector {
            NamespaceSelector::Nothing => "-".to_string(),
            NamespaceSelector::Everything => "*".to_string(),
            NamespaceSelector::Labels(s) => format!("={s}"),
        };
        let selector = match &self.selector {
            None => "-".to_string(),
            Some(s) => format!("={s}"),
        };
        format!(
            "{}|{namespace_selector}|{selector}|{}",
            namespaces.join(","),
            self.topology_key
        )
    }

    /// Whether `pod` is one this term selects; `namespace_labels` are the
    /// labels of the pod's namespace, for the namespace selector.
    pub fn matches(&self, pod: &Pod, namespace_labels: &BTreeMap<String, String>) -> bool {
        let namespace = namespace_of(pod);
        let in_namespace = self.namespaces.iter().any(|n| n == namespace)
            || match &self.namespace_selector {
                NamespaceSelector::Nothing => false,
                NamespaceSelector::Everything => true,
                NamespaceSelector::Labels(s) => {
                    s.matches_by(|key| namespace_labels.get(key).map(String::as_str))
                }
            };
        if !in_namespace {
            return false;
        }
        let labels = labels_of(pod);
        self.selector
            .as_ref()
            .is_some_and(|s| s.matches_by(|key| labels.get(key).map(String::as_str)))
    }

    /// The incoming pod's namespace selector, turned into the namespaces
    /// it selects now, so matching needs no namespace labels.
    pub fn merge_namespaces(&mut self, namespaces: &HashMap<String, BTreeMap<String, String>>) {
        let NamespaceSelector::Labels(selector) = &self.namespace_selector else {
            return;
        };
        for (name, labels) in namespaces {
            if selector.matches_by(|key| labels.get(key).map(String::as_str))
                && !self.namespaces.contains(name)
            {
                self.namespaces.push(name.clone());
            }
        }
        self.namespace_selector = NamespaceSelector::Nothing;
    }
}

/// `matchLabelKeys` and `mismatchLabelKeys` as requirements on the values
/// the pod has for those keys, added to the selector (`In` and `NotIn`).
fn with_label_keys(
    pod: &Pod,
    term: &PodAffinityTerm,
    spec: &LabelSelectorSpec,
) -> LabelSelectorSpec {
    let keys = |keys: &Option<Vec<String>>, operator: &str| -> Vec<LabelSelectorRequirement> {
        let labels = labels_of(pod);
        keys.iter()
            .flatten()
            .filter_map(|key| {
                labels.get(key).map(|value| LabelSelectorRequirement {
                    key: key.clone(),
                    operator: operator.to_string(),
                    values: Some(vec![value.clone()]),
                })
            })
            .collect()
    };
    let mut added = keys(&term.match_label_keys, "In");
    added.extend(keys(&term.mismatch_label_keys, "NotIn"));
    let mut spec = spec.clone();
    if !added.is_empty() {
        spec.match_expressions
            .get_or_insert_with(Vec::new)
            .extend(added);
    }
    spec
}

fn anchors_of(spec: &LabelSelectorSpec) -> Vec<Anchor> {
    let labels = spec
        .match_labels
        .iter()
        .flatten()
        .map(|(key, value)| Anchor {
            key: key.clone(),
            values: vec![value.clone()],
        });
    let expressions = spec
        .match_expressions
        .iter()
        .flatten()
        .filter(|e| e.operator == "In")
        .map(|e| Anchor {
            key: e.key.clone(),
            values: e.values.clone().unwrap_or_default(),
        });
    labels.chain(expressions).collect()
}

fn parse_all(pod: &Pod, terms: Option<&Vec<PodAffinityTerm>>) -> Result<Vec<AffinityTerm>, String> {
    terms
        .into_iter()
        .flatten()
        .map(|t| AffinityTerm::parse(pod, t))
        .collect()
}

fn parse_weighted(
    pod: &Pod,
    terms: Option<&Vec<WeightedPodAffinityTerm>>,
) -> Result<Vec<WeightedTerm>, String> {
    terms
        .into_iter()
        .flatten()
        .map(|t| {
            Ok(WeightedTerm {
                term: AffinityTerm::parse(pod, &t.pod_affinity_term)?,
                weight: i64::from(t.weight),
            })
        })
        .collect()
}

type Parsed = (
    Result<Vec<AffinityTerm>, String>,
    Result<Vec<AffinityTerm>, String>,
    Result<Vec<WeightedTerm>, String>,
    Result<Vec<WeightedTerm>, String>,
);

fn parse_kinds(pod: &Pod) -> Parsed {
    let affinity = pod.spec.as_ref().and_then(|s| s.affinity.as_ref());
    let pod_affinity = affinity.and_then(|a| a.pod_affinity.as_ref());
    let anti = affinity.and_then(|a| a.pod_anti_affinity.as_ref());
    (
        parse_all(
            pod,
            pod_affinity.and_then(|a| {
                a.required_during_scheduling_ignored_during_execution
                    .as_ref()
            }),
        ),
        parse_all(
            pod,
            anti.and_then(|a| {
                a.required_during_scheduling_ignored_during_execution
                    .as_ref()
            }),
        ),
        parse_weighted(
            pod,
            pod_affinity.and_then(|a| {
                a.preferred_during_scheduling_ignored_during_execution
                    .as_ref()
            }),
        ),
        parse_weighted(
            pod,
            anti.and_then(|a| {
                a.preferred_during_scheduling_ignored_during_execution
                    .as_ref()
            }),
        ),
    )
}

impl PodTerms {
    /// The incoming pod's terms; a bad selector is an error, worded as
    /// kube-scheduler words it.
    pub fn parse(pod: &Pod) -> Result<PodTerms, String> {
        let (required_affinity, required_anti, preferred_affinity, preferred_anti) =
            parse_kinds(pod);
        let mut errors = Vec::new();
        let mut take = |name: &str, result: Result<Vec<AffinityTerm>, String>| {
            result.unwrap_or_else(|e| {
                errors.push(format!("{name}: {e}"));
                Vec::new()
            })
        };
        let required_affinity = take("requiredAffinityTerms", required_affinity);
        let required_anti_affinity = take("requiredAntiAffinityTerms", required_anti);
        let mut weighted_errors = Vec::new();
        let mut take_weighted = |name: &str, result: Result<Vec<WeightedTerm>, String>| {
            result.unwrap_or_else(|e| {
                weighted_errors.push(format!("{name}: {e}"));
                Vec::new()
            })
        };
        let preferred_affinity = take_weighted("preferredAffinityTerms", preferred_affinity);
        let preferred_anti_affinity = take_weighted("preferredAntiAffinityTerms", preferred_anti);
        errors.extend(weighted_errors);
        match errors.len() {
            0 => Ok(PodTerms {
                required_affinity,
                required_anti_affinity,
                preferred_affinity,
                preferred_anti_affinity,
            }),
            1 => Err(errors.remove(0)),
            _ => Err(format!("[{}]", errors.join(", "))),
        }
    }

    /// A placed pod's terms: a kind whose selectors do not parse is
    /// dropped, as kube-scheduler's cache drops it.
    pub fn parse_lenient(pod: &Pod) -> PodTerms {
        let (required_affinity, required_anti, preferred_affinity, preferred_anti) =
            parse_kinds(pod);
        PodTerms {
            required_affinity: required_affinity.unwrap_or_default(),
            required_anti_affinity: required_anti.unwrap_or_default(),
            preferred_affinity: preferred_affinity.unwrap_or_default(),
            preferred_anti_affinity: preferred_anti.unwrap_or_default(),
        }
    }

    /// The incoming pod's namespace selectors resolved to namespaces.
    pub fn merge_namespaces(&mut self, namespaces: &HashMap<String, BTreeMap<String, String>>) {
        let required = self
            .required_affinity
            .iter_mut()
            .chain(self.required_anti_affinity.iter_mut());
        let preferred = self
            .preferred_affinity
            .iter_mut()
            .chain(self.preferred_anti_affinity.iter_mut())
            .map(|w| &mut w.term);
        for term in required.chain(preferred) {
            term.merge_namespaces(namespaces);
        }
    }
}

/// Whether `pod` matches every term (and there is at least one): the
/// incoming pod's affinity terms count a pod only when it matches them
/// all. The terms' namespace selectors are merged already.
pub fn matches_all(terms: &[AffinityTerm], pod: &Pod) -> bool {
    static NO_LABELS: BTreeMap<String, String> = BTreeMap::new();
    !terms.is_empty() && terms.iter().all(|t| t.matches(pod, &NO_LABELS))
}

/// Parsed terms of placed pods, by the address of their `Arc<Pod>`. The
/// entry holds a `Weak` to that allocation, so the address cannot be
/// reused by another pod while the entry lives; entries of dropped pods
/// are swept when the cache has doubled since the last sweep.
#[derive(Default)]
pub struct TermCache {
    entries: HashMap<usize, (Weak<Pod>, PlacedTerms)>,
    sweep_at: usize,
}

const MIN_SWEEP: usize = 1024;

impl TermCache {
    pub fn terms(&mut self, pod: &Arc<Pod>) -> &PlacedTerms {
        let key = Arc::as_ptr(pod) as usize;
        if !self.entries.contains_key(&key) && self.entries.len() >= self.sweep_at.max(MIN_SWEEP) {
            self.entries.retain(|_, (weak, _)| weak.strong_count() > 0);
            self.sweep_at = self.entries.len() * 2;
        }
        &self
            .entries
            .entry(key)
            .or_insert_with(|| (Arc::downgrade(pod), PlacedTerms::of(pod)))
            .1
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.entries.len()
    }
}
