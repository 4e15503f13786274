//! Whether the bindings honour what the pods asked for: a scheduler that
//! ignored a constraint would be fast for the wrong reason, so a run's
//! figures come with the violations found, if any.

use std::collections::{HashMap, HashSet};

use super::objects::{self, NODE_PODS, ZONES};
use super::workload::Workload;

/// The violations in the measured pods' placement: `nodes_of[i]` is the
/// node index of measured pod `i` (`None`: a node not named `node-NNNNN`).
pub fn violations(
    workload: Workload,
    nodes: usize,
    group_size: usize,
    nodes_of: &[Option<usize>],
) -> Vec<String> {
    let mut problems = Vec::new();
    let unknown = nodes_of
        .iter()
        .filter(|n| n.is_none_or(|n| n >= nodes))
        .count();
    if unknown > 0 {
        problems.push(format!(
            "{unknown} pods bound to nodes the run did not create"
        ));
    }
    let placed: Vec<(usize, usize)> = nodes_of
        .iter()
        .enumerate()
        .filter_map(|(pod, node)| node.filter(|&n| n < nodes).map(|n| (pod, n)))
        .collect();
    let mut per_node: HashMap<usize, usize> = HashMap::new();
    for &(_, node) in &placed {
        *per_node.entry(node).or_default() += 1;
    }
    // Fewer: the warm-up pod (and, in preemption, the low-priority ones
    // still there) count against the same limit.
    let crowded = per_node.values().filter(|&&n| n > NODE_PODS).count();
    if crowded > 0 {
        problems.push(format!(
            "{crowded} nodes hold more than {NODE_PODS} measured pods"
        ));
    }
    match workload {
        Workload::Basic | Workload::Preemption => {}
        Workload::AntiAffinity => {
            let mut seen = HashSet::new();
            let shared = placed
                .iter()
                .filter(|&&(pod, node)| !seen.insert((objects::group_of(pod, group_size), node)))
                .count();
            if shared > 0 {
                problems.push(format!(
                    "{shared} pods share a node with a pod of their anti-affinity group"
                ));
            }
        }
        Workload::TopologySpread => {
            let mut per_zone = vec![0usize; ZONES.min(nodes)];
            for &(_, node) in &placed {
                per_zone[objects::zone_of(node)] += 1;
            }
            let (min, max) = (per_zone.iter().min(), per_zone.iter().max());
            if let (Some(&min), Some(&max)) = (min, max) {
                if max - min > 1 {
                    problems.push(format!(
                        "zones hold {min} to {max} pods: skew {} over maxSkew 1",
                        max - min
                    ));
                }
            }
        }
        Workload::NodeAffinity => {
            let outside = placed
                .iter()
                .filter(|&&(_, n)| !objects::in_pool(n))
                .count();
            if outside > 0 {
                problems.push(format!(
                    "{outside} pods on nodes without {}={}",
                    objects::POOL_LABEL,
                    objects::POOL_VALUE
                ));
            }
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn anti_affinity_groups_must_not_share_a_node() {
        let ok = violations(
            Workload::AntiAffinity,
            4,
            2,
            &[Some(0), Some(1), Some(0), Some(1)],
        );
        assert!(ok.is_empty(), "{ok:?}");
        let bad = violations(
            Workload::AntiAffinity,
            4,
            2,
            &[Some(0), Some(0), Some(1), Some(2)],
        );
        assert_eq!(bad.len(), 1, "{bad:?}");
    }

    #[test]
    fn spread_over_zones_is_judged_by_skew() {
        let even: Vec<Option<usize>> = (0..20).map(Some).collect();
        assert!(violations(Workload::TopologySpread, 20, 1, &even).is_empty());
        let skewed = vec![Some(0), Some(10), Some(1)];
        assert_eq!(
            violations(Workload::TopologySpread, 20, 1, &skewed).len(),
            1
        );
    }

    #[test]
    fn node_affinity_keeps_pods_in_the_pool_and_nodes_must_be_ours() {
        assert!(violations(Workload::NodeAffinity, 4, 1, &[Some(0), Some(2)]).is_empty());
        let bad = violations(Workload::NodeAffinity, 4, 1, &[Some(1), None]);
        assert_eq!(bad.len(), 2, "{bad:?}");
    }
}
