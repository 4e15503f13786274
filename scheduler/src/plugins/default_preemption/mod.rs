//! DefaultPreemption: the PostFilter plugin that, when no node fits a pod,
//! finds a node where evicting lower-priority pods lets it in, as
//! kube-scheduler's preemption does. It only chooses the node and the
//! victims; deleting them and nominating the node is the scheduler's job.
//!
//! A plugin cannot see its profile, so the what-if runs of PreFilter and
//! Filter come through the [`CycleState`]; see [`FilterRunner`].

mod args;
mod pdb;
mod select;
mod victims;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::sync::Arc;

use rand::Rng;
use serde_json::Value;

use crate::framework::{
    Code, CycleState, NodeInfo, NodeStatuses, Plugin, PodInfo, Point, PostFilterResult, Profile,
    Snapshot, Status,
};

pub use args::DefaultPreemptionArgs;
use select::Candidate;
use victims::WhatIf;

pub const NAME: &str = "DefaultPreemption";

/// Where the scheduler puts the [`FilterRunner`] in the CycleState it hands
/// to PostFilter.
pub const FILTERS_KEY: &str = "DefaultPreemption/FilterRunner";

/// Where the scheduler puts the [`PreFilterRunner`].
pub const PRE_FILTERS_KEY: &str = "DefaultPreemption/PreFilterRunner";

/// Runs the profile's Filter plugins for `pod` on one node of a what-if
/// snapshot (the cluster with some pods removed from, or put back on,
/// `node`).
///
/// The plugin calls it with the state the [`PreFilterRunner`] built for
/// that same snapshot, `node` being `snapshot`'s entry for the node. It
/// answers as `Profile::run_filters` does: Success, or the first rejection.
/// It may re-run PreFilter into `state` first (correct, at twice the cost).
/// Nominated pods of equal or higher priority on the node, if the scheduler
/// tracks them, belong here (kube-scheduler's
/// RunFilterPluginsWithNominatedPods).
#[derive(Clone)]
pub struct FilterRunner(pub Arc<FilterFn>);

/// The function a [`FilterRunner`] wraps.
pub type FilterFn = dyn Fn(&mut CycleState, &PodInfo, &NodeInfo, &Snapshot) -> Status + Send + Sync;

/// Builds a fresh CycleState by running the profile's PreFilter plugins for
/// `pod` against `snapshot`, as `Profile::run_pre_filter` does. `Err` is a
/// PreFilter rejection (the pod fits nowhere in that what-if) or an error
/// (`Code::Error`, which stops preemption on that node).
///
/// This is how preemption gets kube-scheduler's AddPod/RemovePod
/// (PreFilterExtensions) semantics with a CycleState that cannot be cloned:
/// each what-if is a snapshot with the node changed, and PreFilter is run
/// on it from scratch.
#[derive(Clone)]
pub struct PreFilterRunner(pub Arc<PreFilterFn>);

/// The function a [`PreFilterRunner`] wraps.
pub type PreFilterFn = dyn Fn(&PodInfo, &Snapshot) -> Result<CycleState, Status> + Send + Sync;

/// Both runners for `profile`, without nominated pods.
pub fn profile_runners(profile: Arc<Profile>) -> (PreFilterRunner, FilterRunner) {
    let for_pre_filter = profile.clone();
    let pre_filter = PreFilterRunner(Arc::new(move |pod: &PodInfo, snapshot: &Snapshot| {
        let mut state = CycleState::default();
        for_pre_filter
            .run_pre_filter(&mut state, pod, snapshot)
            .map(|_| state)
    }));
    let filter = FilterRunner(Arc::new(
        move |state: &mut CycleState, pod: &PodInfo, node: &NodeInfo, _: &Snapshot| {
            profile.run_filters(state, pod, node)
        },
    ));
    (pre_filter, filter)
}

/// Writes both runners into `state` under [`PRE_FILTERS_KEY`] and
/// [`FILTERS_KEY`], as PostFilter expects them.
pub fn write_runners(state: &mut CycleState, pre_filter: PreFilterRunner, filter: FilterRunner) {
    state.write(PRE_FILTERS_KEY, pre_filter);
    state.write(FILTERS_KEY, filter);
}

pub fn new(args: &Value) -> Result<Arc<dyn Plugin>, String> {
    Ok(Arc::new(DefaultPreemption {
        args: DefaultPreemptionArgs::from_json(args)?,
    }))
}

pub struct DefaultPreemption {
    args: DefaultPreemptionArgs,
}

impl Plugin for DefaultPreemption {
    fn name(&self) -> &'static str {
        NAME
    }

    fn points(&self) -> &'static [Point] {
        &[Point::PostFilter]
    }

    /// `statuses`: each node's Filter answer. A node that is absent counts
    /// as UnschedulableAndUnresolvable, as kube-scheduler's default; when
    /// PreFilter itself rejected the pod as Unschedulable, the scheduler
    /// should pass that status for every node.
    fn post_filter(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
        statuses: &NodeStatuses,
    ) -> (PostFilterResult, Status) {
        let (result, status) = self.preempt(state, pod, snapshot, statuses, |n| {
            rand::thread_rng().gen_range(0..n)
        });
        match status.reasons.is_empty() {
            true => (result, status),
            false => {
                let message = format!("preemption: {}", status.message());
                (result, Status::new(status.code, vec![message]))
            }
        }
    }
}

impl DefaultPreemption {
    /// kube-scheduler's Evaluator.Preempt, with the dry run starting at
    /// `offset(number of potential nodes)`.
    fn preempt(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
        statuses: &NodeStatuses,
        offset: impl FnOnce(usize) -> usize,
    ) -> (PostFilterResult, Status) {
        // A node missing from `statuses` has kube-scheduler's default status.
        let absent = Status::new(Code::UnschedulableAndUnresolvable, Vec::new());
        let nominated_status =
            nominated_node(pod).map(|node| statuses.get(node).unwrap_or(&absent));
        if let Err(reason) = eligibility(pod, snapshot, nominated_status) {
            return (PostFilterResult::default(), Status::unschedulable(reason));
        }
        let (pre_filter, filter) = match runners(state) {
            Ok(runners) => runners,
            Err(status) => return (PostFilterResult::default(), status),
        };
        if snapshot.nodes.is_empty() {
            return (
                PostFilterResult::default(),
                Status::error("no nodes available"),
            );
        }
        let potential: Vec<usize> = (0..snapshot.nodes.len())
            .filter(|&i| {
                statuses
                    .get(snapshot.nodes[i].name())
                    .is_some_and(|s| s.code == Code::Unschedulable)
            })
            .collect();
        let now = victims::now_nanos();
        let mut dry_run = DryRun::default();
        if !potential.is_empty() {
            let what_if = WhatIf {
                pod,
                snapshot,
                pre_filter,
                filter,
                budgets: pdb::budgets(&snapshot.cluster),
                now,
            };
            let start = offset(potential.len()) % potential.len();
            let wanted = self.args.num_candidates(potential.len());
            dry_run = what_if.dry_run(&potential, start, wanted);
        }
        if dry_run.candidates.is_empty() {
            if !dry_run.errors.is_empty() {
                return (PostFilterResult::default(), aggregate(&dry_run.errors));
            }
            let message = no_candidate_message(snapshot.nodes.len(), &dry_run.statuses);
            return (PostFilterResult::default(), Status::unschedulable(message));
        }
        let best = select::pick_one(&dry_run.candidates, now);
        let chosen = dry_run.candidates.swap_remove(best);
        let result = PostFilterResult {
            nominated_node: Some(chosen.node),
            victims: chosen.victims.pods,
        };
        (result, Status::success())
    }
}

/// What the dry run over the potential nodes found.
#[derive(Default)]
struct DryRun {
    /// Those without PDB violations first, each group in the order found.
    candidates: Vec<Candidate>,
    /// Why each node that is not a candidate is not.
    statuses: NodeStatuses,
    errors: Vec<Status>,
}

impl WhatIf<'_> {
    /// Looks for candidates from `potential[start]` on, round the list,
    /// until `wanted` are found with at least one that violates no PDB.
    fn dry_run(&self, potential: &[usize], start: usize, wanted: usize) -> DryRun {
        let mut non_violating = Vec::new();
        let mut violating = Vec::new();
        let mut out = DryRun::default();
        for i in 0..potential.len() {
            let at = potential[(start + i) % potential.len()];
            let name = self.snapshot.nodes[at].name().to_string();
            let status = match self.select_victims_on(at) {
                Ok(victims) if !victims.pods.is_empty() => {
                    let list = match victims.pdb_violations {
                        0 => &mut non_violating,
                        _ => &mut violating,
                    };
                    if list.len() < wanted {
                        list.push(Candidate {
                            node: name,
                            victims,
                        });
                    }
                    if !non_violating.is_empty() && non_violating.len() + violating.len() >= wanted
                    {
                        break;
                    }
                    continue;
                }
                Ok(_) => {
                    Status::error(format!("expected at least one victim pod on node {name:?}"))
                }
                Err(status) => status,
            };
            if status.code == Code::Error {
                out.errors.push(status.clone());
            }
            out.statuses.insert(name, status);
        }
        non_violating.append(&mut violating);
        out.candidates = non_violating;
        out
    }
}

/// The runners the scheduler wrote into the state.
fn runners(state: &CycleState) -> Result<(&PreFilterRunner, &FilterRunner), Status> {
    let missing = |what: &str, key: &str| {
        Status::error(format!(
            "the scheduler did not provide the {what} under {key:?} in the CycleState; \
             write both runners with default_preemption::write_runners before PostFilter"
        ))
    };
    let pre_filter = state
        .read::<PreFilterRunner>(PRE_FILTERS_KEY)
        .ok_or_else(|| missing("PreFilterRunner", PRE_FILTERS_KEY))?;
    let filter = state
        .read::<FilterRunner>(FILTERS_KEY)
        .ok_or_else(|| missing("FilterRunner", FILTERS_KEY))?;
    Ok((pre_filter, filter))
}

fn nominated_node(pod: &PodInfo) -> Option<&str> {
    pod.pod
        .status
        .as_ref()
        .and_then(|s| s.nominated_node_name.as_deref())
        .filter(|n| !n.is_empty())
}

/// Whether `pod` may preempt others (kube-scheduler's
/// PodEligibleToPreemptOthers): not with `preemptionPolicy: Never`, and not
/// while pods it already preempted on its nominated node are terminating
/// (unless that node is now unresolvable for it). `nominated_status` is the
/// nominated node's Filter answer in this cycle, `None` if unknown.
pub fn eligibility(
    pod: &PodInfo,
    snapshot: &Snapshot,
    nominated_status: Option<&Status>,
) -> Result<(), &'static str> {
    let policy = pod
        .pod
        .spec
        .as_ref()
        .and_then(|s| s.preemption_policy.as_deref());
    if policy == Some("Never") {
        return Err("not eligible due to preemptionPolicy=Never.");
    }
    let Some(nominated) = nominated_node(pod) else {
        return Ok(());
    };
    if nominated_status.is_some_and(|s| s.code == Code::UnschedulableAndUnresolvable) {
        return Ok(());
    }
    let Some(node) = snapshot.get(nominated) else {
        return Ok(());
    };
    let priority = pod.priority();
    let waiting = node
        .pods
        .iter()
        .any(|p| p.priority() < priority && terminating_by_preemption(p));
    match waiting {
        true => Err("not eligible due to a terminating pod on the nominated node."),
        false => Ok(()),
    }
}

/// [`eligibility`] without this cycle's Filter answers.
pub fn pod_eligible_to_preempt_others(pod: &PodInfo, snapshot: &Snapshot) -> bool {
    eligibility(pod, snapshot, None).is_ok()
}

/// Being deleted, with the DisruptionTarget condition the scheduler sets on
/// the pods it preempts (reason PreemptionByScheduler).
fn terminating_by_preemption(pod: &PodInfo) -> bool {
    if pod.pod.metadata.deletion_timestamp.is_none() {
        return false;
    }
    let conditions = pod.pod.status.as_ref().and_then(|s| s.conditions.as_ref());
    conditions
        .into_iter()
        .flatten()
        .find(|c| c.type_ == "DisruptionTarget")
        .is_some_and(|c| c.status == "True" && c.reason.as_deref() == Some("PreemptionByScheduler"))
}

/// kube-scheduler's FitError for a preemption that found no candidate:
/// nodes not tried count as "Preemption is not helpful for scheduling".
fn no_candidate_message(all_nodes: usize, statuses: &NodeStatuses) -> String {
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for status in statuses.values() {
        for reason in &status.reasons {
            *counts.entry(reason.to_string()).or_default() += 1;
        }
    }
    let absent = all_nodes.saturating_sub(statuses.len());
    if absent > 0 {
        *counts
            .entry("Preemption is not helpful for scheduling".to_string())
            .or_default() += absent;
    }
    let mut reasons: Vec<String> = counts
        .into_iter()
        .map(|(reason, count)| format!("{count} {reason}"))
        .collect();
    reasons.sort();
    match reasons.is_empty() {
        true => format!("0/{all_nodes} nodes are available."),
        false => format!("0/{all_nodes} nodes are available: {}.", reasons.join(", ")),
    }
}

/// Several errors as one, worded as Kubernetes' error aggregates.
fn aggregate(errors: &[Status]) -> Status {
    let messages: Vec<String> = errors.iter().map(Status::message).collect();
    match messages.as_slice() {
        [one] => Status::error(one.clone()),
        _ => Status::error(format!("[{}]", messages.join(", "))),
    }
}
