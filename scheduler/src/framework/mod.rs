//! The scheduling framework: a profile runs its plugins at each extension
//! point, as kube-scheduler's framework does. One scheduling cycle is
//! [`Profile::schedule`] (PreFilter → Filter → PreScore → Score →
//! NormalizeScore → select), then Reserve and Permit; the binding cycle
//! (PreBind → Bind) runs apart, so the next pod need not wait for it.

pub mod cycle_state;
pub mod node_info;
pub mod plugin;
pub mod resources;
pub mod status;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

pub use cycle_state::CycleState;
pub use node_info::{ClusterObjects, HostPort, NodeInfo, PodInfo, Snapshot};
pub use plugin::{
    Binder, Factory, NodeScore, NodeStatuses, Plugin, Point, PostFilterResult, PreFilterResult,
    MAX_NODE_SCORE,
};
pub use status::{Code, Status};

/// Below this many nodes every node is evaluated.
const MIN_FEASIBLE_NODES_TO_FIND: usize = 100;
const MIN_FEASIBLE_NODES_PERCENTAGE: usize = 5;
const BASE_PERCENTAGE_OF_NODES_TO_SCORE: usize = 50;

/// A profile: the plugins at each extension point, in order, their score
/// weights, and how many feasible nodes to look for.
pub struct Profile {
    pub scheduler_name: String,
    pub plugins: HashMap<Point, Vec<Arc<dyn Plugin>>>,
    pub weights: HashMap<&'static str, i64>,
    /// 0: adaptive, as kube-scheduler.
    pub percentage_of_nodes_to_score: usize,
}

/// Where a scheduling cycle put the pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduleResult {
    pub node: String,
    pub evaluated: usize,
    pub feasible: usize,
}

/// Why no node fits: per node, what rejected it.
#[derive(Debug, Clone)]
pub struct FitError {
    pub all_nodes: usize,
    pub statuses: NodeStatuses,
    /// A PreFilter rejection, which applies to every node.
    pub pre_filter: Option<Status>,
}

impl FitError {
    /// "0/5 nodes are available: 3 Insufficient cpu, 2 node(s) had
    /// untolerated taint {…}." as kube-scheduler words it.
    pub fn message(&self) -> String {
        if self.all_nodes == 0 {
            return "no nodes available to schedule pods".to_string();
        }
        let mut counts: BTreeMap<String, usize> = BTreeMap::new();
        match &self.pre_filter {
            Some(status) => {
                for reason in &status.reasons {
                    *counts.entry(reason.to_string()).or_default() += self.all_nodes.max(1);
                }
            }
            None => {
                for status in self.statuses.values() {
                    for reason in &status.reasons {
                        *counts.entry(reason.to_string()).or_default() += 1;
                    }
                }
            }
        }
        let mut reasons: Vec<String> = counts
            .into_iter()
            .map(|(reason, count)| format!("{count} {reason}"))
            .collect();
        reasons.sort();
        match reasons.is_empty() {
            true => format!("0/{} nodes are available.", self.all_nodes),
            false => format!(
                "0/{} nodes are available: {}.",
                self.all_nodes,
                reasons.join(", ")
            ),
        }
    }

    /// Whether preemption could help on `node`: not if a filter said the
    /// node can never take the pod.
    pub fn resolvable_on(&self, node: &str) -> bool {
        self.pre_filter.is_none()
            && self
                .statuses
                .get(node)
                .is_some_and(|s| s.code == Code::Unschedulable)
    }
}

/// How a scheduling cycle ended without a node.
#[derive(Debug, Clone)]
pub enum ScheduleFailure {
    Unfit(FitError),
    Error(Status),
}

/// Nodes a Filter plugin rejected, with the status that rejected each.
type Rejected = Vec<(Arc<NodeInfo>, Status)>;

/// What Filter left: the nodes that fit and why the others do not.
#[derive(Debug, Clone)]
pub struct Feasible {
    pub nodes: Vec<Arc<NodeInfo>>,
    /// The nodes a Filter plugin rejected, with why, in the order tried:
    /// named only for a FitError, when no node is left (with hard
    /// constraints most nodes fail, and a map insert by name per node per
    /// pod cost more than the filter itself).
    failed: Rejected,
    /// Rejections by name of PreFilter's narrowing and of extenders.
    pub statuses: NodeStatuses,
    pub evaluated: usize,
}

impl Feasible {
    /// The nodes, or the FitError when none is left of `all`.
    pub fn check(&self, all: usize) -> Result<&[Arc<NodeInfo>], ScheduleFailure> {
        match self.nodes.is_empty() {
            true => {
                let mut statuses = self.statuses.clone();
                for (node, status) in &self.failed {
                    statuses.insert(node.name().to_string(), status.clone());
                }
                Err(ScheduleFailure::Unfit(FitError {
                    all_nodes: all,
                    statuses,
                    pre_filter: None,
                }))
            }
            false => Ok(&self.nodes),
        }
    }

    pub fn result(&self, node: String) -> ScheduleResult {
        ScheduleResult {
            node,
            evaluated: self.evaluated,
            feasible: self.nodes.len(),
        }
    }
}

impl Profile {
    pub fn at(&self, point: Point) -> &[Arc<dyn Plugin>] {
        self.plugins
            .get(&point)
            .map(Vec::as_slice)
            .unwrap_or_default()
    }

    pub fn has(&self, point: Point) -> bool {
        !self.at(point).is_empty()
    }

    /// PreEnqueue: the first plugin that does not let the pod in.
    pub fn pre_enqueue(&self, pod: &PodInfo) -> Status {
        for plugin in self.at(Point::PreEnqueue) {
            let status = plugin.pre_enqueue(pod);
            if !status.is_success() {
                return status.with_plugin(plugin.name());
            }
        }
        Status::success()
    }

    /// How many feasible nodes to find before scoring, of `all`.
    pub fn feasible_nodes_to_find(&self, all: usize) -> usize {
        if all < MIN_FEASIBLE_NODES_TO_FIND {
            return all;
        }
        let percentage = match self.percentage_of_nodes_to_score {
            0 => BASE_PERCENTAGE_OF_NODES_TO_SCORE
                .saturating_sub(all / 125)
                .max(MIN_FEASIBLE_NODES_PERCENTAGE),
            p => p.min(100),
        };
        (all * percentage / 100).max(MIN_FEASIBLE_NODES_TO_FIND)
    }

    /// Runs PreFilter; `Err` is a rejection of every node.
    pub fn run_pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
    ) -> Result<PreFilterResult, Status> {
        let mut result = PreFilterResult::default();
        for plugin in self.at(Point::PreFilter) {
            let (narrowed, status) = plugin.pre_filter(state, pod, snapshot);
            match status.code {
                Code::Success => {}
                Code::Skip => {
                    state.skip_filter.insert(plugin.name());
                    continue;
                }
                _ => return Err(status.with_plugin(plugin.name())),
            }
            if let Some(names) = narrowed.node_names {
                result.narrowed_by.push(plugin.name());
                result.node_names = Some(match result.node_names.take() {
                    Some(before) => before.intersection(&names).cloned().collect(),
                    None => names,
                });
            }
        }
        Ok(result)
    }

    /// Runs every Filter on `node`; the first that does not pass answers.
    pub fn run_filters(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        Self::run_these_filters(&self.filters_to_run(state), state, pod, node)
    }

    /// The Filter plugins whose PreFilter did not say Skip, found once per
    /// cycle rather than once per node.
    fn filters_to_run(&self, state: &CycleState) -> Vec<&Arc<dyn Plugin>> {
        self.at(Point::Filter)
            .iter()
            .filter(|p| !state.skip_filter.contains(p.name()))
            .collect()
    }

    fn run_these_filters(
        filters: &[&Arc<dyn Plugin>],
        state: &CycleState,
        pod: &PodInfo,
        node: &NodeInfo,
    ) -> Status {
        for plugin in filters {
            let status = plugin.filter(state, pod, node);
            if !status.is_success() {
                return status.with_plugin(plugin.name());
            }
        }
        Status::success()
    }

    /// One scheduling cycle: the node for `pod`, or why there is none.
    /// `next_start` rotates where the search for feasible nodes begins, so
    /// that with a share of nodes scored every node gets its turn.
    pub fn schedule(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
        next_start: &mut usize,
        rng: &mut impl rand::Rng,
    ) -> Result<ScheduleResult, ScheduleFailure> {
        let feasible = self.filter_nodes(state, pod, snapshot, next_start)?;
        let nodes = feasible.check(snapshot.nodes.len())?;
        if nodes.len() == 1 {
            return Ok(feasible.result(nodes[0].name().to_string()));
        }
        let totals = self
            .score(state, pod, nodes)
            .map_err(ScheduleFailure::Error)?;
        Ok(feasible.result(select_host(&totals, rng)))
    }

    /// PreFilter and Filter: the feasible nodes (a share of them on big
    /// clusters) and why the others were rejected.
    pub fn filter_nodes(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
        next_start: &mut usize,
    ) -> Result<Feasible, ScheduleFailure> {
        let all = snapshot.nodes.len();
        if all == 0 {
            return Err(ScheduleFailure::Unfit(FitError {
                all_nodes: 0,
                statuses: NodeStatuses::new(),
                pre_filter: Some(Status::unresolvable("no nodes available to schedule pods")),
            }));
        }
        let narrowed = match self.run_pre_filter(state, pod, snapshot) {
            Ok(result) => result,
            Err(status) if status.code == Code::Error => {
                return Err(ScheduleFailure::Error(status))
            }
            Err(status) => {
                return Err(ScheduleFailure::Unfit(FitError {
                    all_nodes: all,
                    statuses: NodeStatuses::new(),
                    pre_filter: Some(status),
                }))
            }
        };
        let (nodes, failed, evaluated) = self.find_feasible(
            state,
            pod,
            snapshot,
            narrowed.node_names.as_ref(),
            next_start,
        )?;
        let mut statuses = NodeStatuses::new();
        if let Some(names) = &narrowed.node_names {
            let reason = format!(
                "node(s) didn't satisfy plugin(s) [{}]",
                narrowed.narrowed_by.join(",")
            );
            for node in &snapshot.nodes {
                if !names.contains(node.name()) {
                    statuses
                        .entry(node.name().to_string())
                        .or_insert_with(|| Status::unresolvable(reason.clone()));
                }
            }
        }
        Ok(Feasible {
            nodes,
            failed,
            statuses,
            evaluated,
        })
    }

    /// How many nodes ahead of the one being filtered `find_feasible`
    /// asks for what a NodeInfo points to (its labels) to be loaded; the
    /// NodeInfo itself, twice as many.
    const PREFETCH_AHEAD: usize = 4;

    fn find_feasible(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
        only: Option<&BTreeSet<String>>,
        next_start: &mut usize,
    ) -> Result<(Vec<Arc<NodeInfo>>, Rejected, usize), ScheduleFailure> {
        // PreFilter's narrowed set, or every node (not copied).
        let narrowed: Option<Vec<&Arc<NodeInfo>>> =
            only.map(|names| names.iter().filter_map(|n| snapshot.get(n)).collect());
        let count = narrowed.as_ref().map_or(snapshot.nodes.len(), Vec::len);
        let candidate = |i: usize| match &narrowed {
            Some(nodes) => nodes[i],
            None => &snapshot.nodes[i],
        };
        let filters = self.filters_to_run(state);
        let wanted = self.feasible_nodes_to_find(count);
        let mut feasible = Vec::with_capacity(wanted.min(count));
        let mut failed = Vec::new();
        let start = if count == 0 { 0 } else { *next_start % count };
        let mut evaluated = 0;
        for i in 0..count {
            if feasible.len() >= wanted {
                break;
            }
            candidate((start + i + 2 * Self::PREFETCH_AHEAD) % count).prefetch();
            candidate((start + i + Self::PREFETCH_AHEAD) % count).prefetch_labels();
            let node = candidate((start + i) % count);
            evaluated += 1;
            let status = Self::run_these_filters(&filters, state, pod, node);
            match status.code {
                Code::Success => feasible.push(node.clone()),
                Code::Error => return Err(ScheduleFailure::Error(status)),
                _ => {
                    // Room for the rest at once: where nodes fail, most do
                    // (a topology spread rejects all but a domain's).
                    if failed.capacity() == 0 {
                        failed.reserve(count - i);
                    }
                    failed.push((node.clone(), status))
                }
            }
        }
        if count > 0 {
            *next_start = (start + evaluated) % count;
        }
        Ok((feasible, failed, evaluated))
    }

    /// PreScore, Score, NormalizeScore and weights: each node's total.
    pub fn score(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        nodes: &[Arc<NodeInfo>],
    ) -> Result<Vec<NodeScore>, Status> {
        for plugin in self.at(Point::PreScore) {
            let status = plugin.pre_score(state, pod, nodes);
            match status.code {
                Code::Success => {}
                Code::Skip => {
                    state.skip_score.insert(plugin.name());
                }
                _ => return Err(status.with_plugin(plugin.name())),
            }
        }
        // One buffer of each node's score, its names made once per cycle;
        // the totals take the names at the end. Each name is an allocation
        // of its own, seldom in cache: all are asked for first, so that
        // their loads overlap.
        for node in nodes {
            node.prefetch_name();
        }
        let mut scores: Vec<NodeScore> = nodes
            .iter()
            .map(|n| NodeScore {
                name: n.shared_name(),
                score: 0,
            })
            .collect();
        let mut totals = vec![0_i64; nodes.len()];
        for plugin in self.at(Point::Score) {
            if state.skip_score.contains(plugin.name()) {
                continue;
            }
            plugin
                .score_nodes(state, pod, nodes, &mut scores)
                .map_err(|s| s.with_plugin(plugin.name()))?;
            if let Some(status) = plugin.normalize_scores(state, pod, &mut scores) {
                if !status.is_success() {
                    return Err(status.with_plugin(plugin.name()));
                }
            }
            let weight = self.weights.get(plugin.name()).copied().unwrap_or(1);
            for (total, score) in totals.iter_mut().zip(&scores) {
                if !(0..=MAX_NODE_SCORE).contains(&score.score) {
                    return Err(Status::error(format!(
                        "plugin {} returns an invalid score {} for node {:?}, it should be in [0, {MAX_NODE_SCORE}]",
                        plugin.name(),
                        score.score,
                        score.name
                    )));
                }
                *total += score.score * weight;
            }
        }
        for (slot, total) in scores.iter_mut().zip(totals) {
            slot.score = total;
        }
        Ok(scores)
    }

    pub fn run_post_filter(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
        statuses: &NodeStatuses,
    ) -> (PostFilterResult, Status) {
        let mut last = Status::unschedulable("no PostFilter plugin");
        for plugin in self.at(Point::PostFilter) {
            let (result, status) = plugin.post_filter(state, pod, snapshot, statuses);
            if status.is_success() {
                return (result, status.with_plugin(plugin.name()));
            }
            last = status.with_plugin(plugin.name());
        }
        (PostFilterResult::default(), last)
    }

    /// Reserve in order; on a failure the ones before are unreserved.
    pub fn run_reserve(&self, state: &mut CycleState, pod: &PodInfo, node: &str) -> Status {
        let plugins = self.at(Point::Reserve);
        for (i, plugin) in plugins.iter().enumerate() {
            let status = plugin.reserve(state, pod, node);
            if !status.is_success() {
                for earlier in plugins[..i].iter().rev() {
                    earlier.unreserve(state, pod, node);
                }
                return status.with_plugin(plugin.name());
            }
        }
        Status::success()
    }

    pub fn run_unreserve(&self, state: &mut CycleState, pod: &PodInfo, node: &str) {
        for plugin in self.at(Point::Reserve).iter().rev() {
            plugin.unreserve(state, pod, node);
        }
    }

    /// Permit: a rejection, Success, or Wait with the longest timeout asked.
    pub fn run_permit(&self, state: &CycleState, pod: &PodInfo, node: &str) -> (Status, Duration) {
        let mut wait: Option<Duration> = None;
        for plugin in self.at(Point::Permit) {
            let (status, timeout) = plugin.permit(state, pod, node);
            match status.code {
                Code::Success => {}
                Code::Wait => wait = Some(wait.unwrap_or_default().max(timeout)),
                _ => return (status.with_plugin(plugin.name()), Duration::ZERO),
            }
        }
        match wait {
            Some(timeout) => (Status::new(Code::Wait, Vec::new()), timeout),
            None => (Status::success(), Duration::ZERO),
        }
    }

    /// The binding cycle: PreBind, then the first Bind plugin that does
    /// not skip.
    pub async fn run_bind(&self, binder: &dyn Binder, pod: &PodInfo, node: &str) -> Status {
        let status = self.run_pre_bind(binder, pod, node).await;
        if !status.is_success() {
            return status;
        }
        self.run_bind_plugins(binder, pod, node).await
    }

    pub async fn run_pre_bind(&self, binder: &dyn Binder, pod: &PodInfo, node: &str) -> Status {
        for plugin in self.at(Point::PreBind) {
            let status = plugin.pre_bind(binder, pod, node).await;
            if !status.is_success() {
                return status.with_plugin(plugin.name());
            }
        }
        Status::success()
    }

    /// The first Bind plugin that does not skip.
    pub async fn run_bind_plugins(&self, binder: &dyn Binder, pod: &PodInfo, node: &str) -> Status {
        for plugin in self.at(Point::Bind) {
            let status = plugin.bind(binder, pod, node).await;
            if status.code != Code::Skip {
                return status.with_plugin(plugin.name());
            }
        }
        Status::error("no bind plugin bound the pod")
    }
}

/// Scales scores so the highest becomes `max` (kube-scheduler's
/// DefaultNormalizeScore); `reverse` turns the highest into 0.
pub fn default_normalize_score(max: i64, reverse: bool, scores: &mut [NodeScore]) {
    let highest = scores.iter().map(|s| s.score).max().unwrap_or(0).max(0);
    if highest == 0 {
        if reverse {
            scores.iter_mut().for_each(|s| s.score = max);
        }
        return;
    }
    for s in scores.iter_mut() {
        let scaled = max * s.score / highest;
        s.score = match reverse {
            true => max - scaled,
            false => scaled,
        };
    }
}

/// The node with the highest total; ties are broken at random, so equal
/// nodes share the load.
pub fn select_host(scores: &[NodeScore], rng: &mut impl rand::Rng) -> String {
    let mut best: Option<&NodeScore> = None;
    let mut ties = 0u32;
    for score in scores {
        match best {
            Some(b) if score.score < b.score => {}
            Some(b) if score.score == b.score => {
                ties += 1;
                if rng.gen_range(0..ties) == 0 {
                    best = Some(score);
                }
            }
            _ => {
                best = Some(score);
                ties = 1;
            }
        }
    }
    best.map(|b| b.name.to_string()).unwrap_or_default()
}

#[cfg(test)]
mod tests;
