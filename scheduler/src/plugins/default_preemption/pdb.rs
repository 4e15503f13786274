//! PodDisruptionBudgets as preemption weighs them: which victims would
//! take a budget below zero.

use std::collections::BTreeSet;
use std::sync::Arc;

use skiff_machinery::selectors::LabelSelector;

use crate::framework::{ClusterObjects, PodInfo};

/// A PDB that can match pods: its namespace, selector, how many more pods
/// it lets go, and the pods the apiserver already counted as disrupted.
pub(super) struct Budget {
    namespace: String,
    selector: LabelSelector,
    allowed: i32,
    disrupted: BTreeSet<String>,
}

/// The cluster's PDBs. Those with a missing, empty or invalid selector
/// match nothing, so they are left out.
pub(super) fn budgets(cluster: &ClusterObjects) -> Vec<Budget> {
    cluster
        .pdbs
        .iter()
        .filter_map(|pdb| {
            let selector = pdb.spec.as_ref()?.selector.as_ref()?;
            let selector = LabelSelector::from_json(&serde_json::to_value(selector).ok()?).ok()?;
            if selector.is_empty() {
                return None;
            }
            let status = pdb.status.as_ref();
            Some(Budget {
                namespace: pdb
                    .metadata
                    .namespace
                    .clone()
                    .unwrap_or_else(|| "default".into()),
                selector,
                allowed: status.map_or(0, |s| s.disruptions_allowed),
                disrupted: status
                    .and_then(|s| s.disrupted_pods.as_ref())
                    .map(|pods| pods.keys().cloned().collect())
                    .unwrap_or_default(),
            })
        })
        .collect()
}

/// Splits `pods` (in order) into those whose eviction, counted one after
/// the other, would take some budget below zero, and the others.
pub(super) fn split_by_violation(
    pods: Vec<Arc<PodInfo>>,
    budgets: &[Budget],
) -> (Vec<Arc<PodInfo>>, Vec<Arc<PodInfo>>) {
    let mut allowed: Vec<i32> = budgets.iter().map(|b| b.allowed).collect();
    let mut violating = Vec::new();
    let mut non_violating = Vec::new();
    for pod in pods {
        let labels = pod.labels();
        let mut violates = false;
        if !labels.is_empty() {
            for (budget, allowed) in budgets.iter().zip(allowed.iter_mut()) {
                if budget.namespace != pod.namespace()
                    || !budget
                        .selector
                        .matches_by(|key| labels.get(key).map(String::as_str))
                    || budget.disrupted.contains(pod.name())
                {
                    continue;
                }
                *allowed -= 1;
                if *allowed < 0 {
                    violates = true;
                }
            }
        }
        match violates {
            true => violating.push(pod),
            false => non_violating.push(pod),
        }
    }
    (violating, non_violating)
}
