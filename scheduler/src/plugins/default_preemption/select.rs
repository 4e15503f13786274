//! Choosing among the candidate nodes (kube-scheduler's
//! pickOneNodeForPreemption): each criterion in turn keeps the best nodes,
//! until one is left.

use super::victims::{start_time, Victims};

/// A node where preemption lets the pod in, and what it costs.
#[derive(Debug, Clone)]
pub(super) struct Candidate {
    pub node: String,
    /// Most important first.
    pub victims: Victims,
}

/// The index of the best candidate: fewest PDB violations, then the lowest
/// highest-victim priority, the smallest sum of victim priorities, the
/// fewest victims, the latest start among the highest-priority victims,
/// and then the first. Higher scores are better.
pub(super) fn pick_one(candidates: &[Candidate], now: i128) -> usize {
    let criteria: [&dyn Fn(&Candidate) -> i128; 5] = [
        &|c| -(c.victims.pdb_violations as i128),
        &|c| -highest_priority(c),
        &|c| {
            // Shifted to be non-negative, so that more victims never sum lower.
            let sum: i128 = c
                .victims
                .pods
                .iter()
                .map(|p| i128::from(p.priority()) + (1i128 << 31))
                .sum();
            -sum
        },
        &|c| -(c.victims.pods.len() as i128),
        &|c| earliest_start_of_highest(c, now),
    ];
    let mut remaining: Vec<usize> = (0..candidates.len()).collect();
    for score in criteria {
        let mut best = i128::MIN;
        let mut kept = Vec::new();
        for &i in &remaining {
            let s = score(&candidates[i]);
            if s > best {
                best = s;
                kept.clear();
            }
            if s == best {
                kept.push(i);
            }
        }
        if kept.len() == 1 {
            return kept[0];
        }
        remaining = kept;
    }
    remaining.first().copied().unwrap_or(0)
}

fn highest_priority(c: &Candidate) -> i128 {
    c.victims
        .pods
        .first()
        .map_or(i128::from(i32::MIN), |p| i128::from(p.priority()))
}

/// The earliest start time among the victims of the highest priority
/// (kube-scheduler's GetEarliestPodStartTime).
fn earliest_start_of_highest(c: &Candidate, now: i128) -> i128 {
    let Some(top) = c.victims.pods.iter().map(|p| p.priority()).max() else {
        return i128::MIN;
    };
    c.victims
        .pods
        .iter()
        .filter(|p| p.priority() == top)
        .map(|p| start_time(p, now))
        .min()
        .unwrap_or(i128::MIN)
}
