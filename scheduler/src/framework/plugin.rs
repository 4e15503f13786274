//! The plugin interface: one trait with a method per extension point. A
//! plugin names the points it implements in [`Plugin::points`]; the
//! framework calls only those, in the order the profile lists plugins.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;

use super::cycle_state::CycleState;
use super::node_info::{NodeInfo, PodInfo, Snapshot};
use super::status::Status;

/// The highest score a Score plugin gives a node (after normalizing).
pub const MAX_NODE_SCORE: i64 = 100;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Point {
    PreEnqueue,
    QueueSort,
    PreFilter,
    Filter,
    PostFilter,
    PreScore,
    Score,
    Reserve,
    Permit,
    PreBind,
    Bind,
}

impl Point {
    pub const ALL: [Point; 11] = [
        Point::PreEnqueue,
        Point::QueueSort,
        Point::PreFilter,
        Point::Filter,
        Point::PostFilter,
        Point::PreScore,
        Point::Score,
        Point::Reserve,
        Point::Permit,
        Point::PreBind,
        Point::Bind,
    ];

    /// The field of KubeSchedulerConfiguration's `plugins`.
    pub fn config_name(self) -> &'static str {
        match self {
            Point::PreEnqueue => "preEnqueue",
            Point::QueueSort => "queueSort",
            Point::PreFilter => "preFilter",
            Point::Filter => "filter",
            Point::PostFilter => "postFilter",
            Point::PreScore => "preScore",
            Point::Score => "score",
            Point::Reserve => "reserve",
            Point::Permit => "permit",
            Point::PreBind => "preBind",
            Point::Bind => "bind",
        }
    }
}

/// What PreFilter may narrow the nodes to (e.g. NodeName: just one).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PreFilterResult {
    /// `None`: every node.
    pub node_names: Option<std::collections::BTreeSet<String>>,
    /// The plugins that narrowed the nodes (filled by the framework).
    pub narrowed_by: Vec<&'static str>,
}

/// A node's score from one plugin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeScore {
    pub name: Arc<str>,
    pub score: i64,
}

/// What PostFilter decided: a node to nominate, and the pods to evict
/// there (preemption). The scheduler carries it out through the API.
#[derive(Debug, Clone, Default)]
pub struct PostFilterResult {
    pub nominated_node: Option<String>,
    pub victims: Vec<Arc<PodInfo>>,
}

/// Filter answers per node, for PostFilter and the FailedScheduling
/// message.
pub type NodeStatuses = std::collections::BTreeMap<String, Status>;

/// What PreBind and Bind plugins reach the cluster with.
pub trait Binder: Send + Sync {
    /// POSTs pods/binding for `pod` to `node`.
    fn bind<'a>(&'a self, pod: &'a PodInfo, node: &'a str) -> BoxFuture<'a, Result<(), String>>;
}

#[allow(unused_variables)]
pub trait Plugin: Send + Sync {
    fn name(&self) -> &'static str;

    /// The extension points this plugin implements.
    fn points(&self) -> &'static [Point];

    /// PreEnqueue: `Code::Pending` keeps the pod out of the active queue.
    fn pre_enqueue(&self, pod: &PodInfo) -> Status {
        Status::success()
    }

    /// QueueSort: whether `a` goes before `b`.
    fn less(
        &self,
        a: &PodInfo,
        a_since: std::time::Instant,
        b: &PodInfo,
        b_since: std::time::Instant,
    ) -> bool {
        a_since < b_since
    }

    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
    ) -> (PreFilterResult, Status) {
        (PreFilterResult::default(), Status::success())
    }

    /// PreFilterExtensions: `added` is now on `node` (preemption's what-if).
    fn add_pod(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        added: &PodInfo,
        node: &NodeInfo,
    ) -> Status {
        Status::success()
    }

    /// PreFilterExtensions: `removed` is gone from `node`.
    fn remove_pod(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        removed: &PodInfo,
        node: &NodeInfo,
    ) -> Status {
        Status::success()
    }

    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        Status::success()
    }

    fn post_filter(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
        statuses: &NodeStatuses,
    ) -> (PostFilterResult, Status) {
        (
            PostFilterResult::default(),
            Status::unschedulable("no postfilter"),
        )
    }

    fn pre_score(&self, state: &mut CycleState, pod: &PodInfo, nodes: &[Arc<NodeInfo>]) -> Status {
        Status::success()
    }

    fn score(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        Ok(0)
    }

    /// Score of each of `nodes` into `scores` (the same length, in the
    /// same order): one [`Plugin::score`] per node unless the plugin does
    /// better, as one whose score starts from the cycle state can read it
    /// once for all the nodes.
    fn score_nodes(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        nodes: &[Arc<NodeInfo>],
        scores: &mut [NodeScore],
    ) -> Result<(), Status> {
        for (slot, node) in scores.iter_mut().zip(nodes) {
            slot.score = self.score(state, pod, node)?;
        }
        Ok(())
    }

    /// NormalizeScore: scales this plugin's scores to 0..=MAX_NODE_SCORE.
    /// `None`: the plugin does not normalize.
    fn normalize_scores(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        scores: &mut [NodeScore],
    ) -> Option<Status> {
        None
    }

    fn reserve(&self, state: &mut CycleState, pod: &PodInfo, node: &str) -> Status {
        Status::success()
    }

    fn unreserve(&self, state: &mut CycleState, pod: &PodInfo, node: &str) {}

    /// Permit: Success, a rejection, or Wait for up to the duration.
    fn permit(&self, state: &CycleState, pod: &PodInfo, node: &str) -> (Status, Duration) {
        (Status::success(), Duration::ZERO)
    }

    fn pre_bind<'a>(
        &'a self,
        binder: &'a dyn Binder,
        pod: &'a PodInfo,
        node: &'a str,
    ) -> BoxFuture<'a, Status> {
        Box::pin(async { Status::success() })
    }

    /// Bind: `Code::Skip` passes to the next Bind plugin.
    fn bind<'a>(
        &'a self,
        binder: &'a dyn Binder,
        pod: &'a PodInfo,
        node: &'a str,
    ) -> BoxFuture<'a, Status> {
        Box::pin(async { Status::skip() })
    }
}

/// Builds a plugin from its `pluginConfig` args (`null` when none).
pub type Factory = fn(&serde_json::Value) -> Result<Arc<dyn Plugin>, String>;
