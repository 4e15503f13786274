//! The pure part of a DaemonSet sync: which nodes need a daemon pod,
//! which pods go (misscheduled, duplicated, failed, on vanished nodes),
//! and which old pods a rolling update replaces within its budget.
//! Nothing here talks to the API.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use skiff_machinery::scheduling::node_affinity::RequiredNodeAffinity;

use super::eligibility::{eligibility, target_node, template_pod, Eligibility};
use crate::common::pods::{is_available, phase};
use crate::history::CONTROLLER_REVISION_HASH;

/// At most this many pods are created or deleted by one sync
/// (the DaemonSet controller's `BurstReplicas`).
pub const BURST_REPLICAS: usize = 250;

/// The label carrying the template generation a pod was made from.
pub const POD_TEMPLATE_GENERATION: &str = "pod-template-generation";

/// The annotation the apiserver keeps the template generation in.
pub const TEMPLATE_GENERATION_ANNOTATION: &str = "deprecated.daemonset.template.generation";

/// What the sync must know besides the objects.
pub struct Inputs<'a> {
    pub ds: &'a DaemonSet,
    pub nodes: &'a [Arc<Node>],
    /// The pods the DaemonSet controls (any state).
    pub pods: &'a [Arc<Pod>],
    /// The hash of the current template's revision.
    pub hash: &'a str,
    pub now: Timestamp,
    /// How long the failed daemon pod on a node must still wait before it
    /// is replaced again; `None` when it may go now.
    pub backoff: &'a (dyn Fn(&str) -> Option<Duration> + Sync),
}

/// What one sync does to pods.
#[derive(Debug, Default, PartialEq)]
pub struct Plan {
    /// Nodes to create a daemon pod for.
    pub create_on: Vec<String>,
    /// Pods to delete gracefully.
    pub delete: Vec<Arc<Pod>>,
    /// Pods bound to nodes that no longer exist: no kubelet will finish
    /// them, so they are deleted at once.
    pub force_delete: Vec<Arc<Pod>>,
    /// Nodes whose failed pod is deleted now (their back-off grows).
    pub failed_on: Vec<String>,
    /// Sync again after this long (a back-off ends).
    pub requeue_after: Option<Duration>,
}

impl Plan {
    pub fn is_empty(&self) -> bool {
        self.create_on.is_empty() && self.delete.is_empty() && self.force_delete.is_empty()
    }
}

/// The template generation: the apiserver's annotation, else the
/// DaemonSet's generation.
pub fn template_generation(ds: &DaemonSet) -> Option<i64> {
    let annotated = ds
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(TEMPLATE_GENERATION_ANNOTATION))
        .and_then(|g| g.parse().ok());
    annotated.or(ds.metadata.generation)
}

/// Made from the current template (`IsPodUpdated`): its revision hash, or
/// the template generation the apiserver annotated, matches.
pub fn is_updated(ds: &DaemonSet, pod: &Pod, hash: &str) -> bool {
    let labels = pod.metadata.labels.as_ref();
    let label = |key: &str| labels.and_then(|l| l.get(key)).map(String::as_str);
    let hash_matches = !hash.is_empty() && label(CONTROLLER_REVISION_HASH) == Some(hash);
    let annotated = ds
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(TEMPLATE_GENERATION_ANNOTATION));
    let generation_matches = annotated.is_some_and(|g| label(POD_TEMPLATE_GENERATION) == Some(g));
    hash_matches || generation_matches
}

fn is_terminal(pod: &Pod) -> bool {
    matches!(phase(pod), "Succeeded" | "Failed")
}

/// The DaemonSet's pods by the node they are on or pinned to; pods that
/// are both terminal and being deleted are left out, as are pods with no
/// node at all (under the `None` key).
pub fn pods_by_node(pods: &[Arc<Pod>]) -> BTreeMap<Option<String>, Vec<Arc<Pod>>> {
    let mut by_node: BTreeMap<Option<String>, Vec<Arc<Pod>>> = BTreeMap::new();
    for pod in pods {
        if is_terminal(pod) && pod.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let node = target_node(pod).map(str::to_string);
        by_node.entry(node).or_default().push(pod.clone());
    }
    for pods in by_node.values_mut() {
        pods.sort_by(|a, b| oldest_first(a, b));
    }
    by_node
}

/// Bound before unbound, running before not, then oldest
/// (`podByCreationTimestampAndPhase`).
fn oldest_first(a: &Pod, b: &Pod) -> std::cmp::Ordering {
    let bound = |p: &Pod| {
        p.spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .is_none_or(str::is_empty)
    };
    let running = |p: &Pod| phase(p) != "Running";
    let created = |p: &Pod| p.metadata.creation_timestamp.as_ref().map(|t| t.0);
    (bound(a), running(a), created(a), &a.metadata.name).cmp(&(
        bound(b),
        running(b),
        created(b),
        &b.metadata.name,
    ))
}

/// Each node's eligibility for the DaemonSet, by name; empty when it has
/// no pod template.
pub fn eligibilities(ds: &DaemonSet, nodes: &[Arc<Node>]) -> BTreeMap<String, Eligibility> {
    let Some(pod) = template_pod(ds) else {
        return BTreeMap::new();
    };
    let affinity = RequiredNodeAffinity::of_pod(&pod);
    nodes
        .iter()
        .map(|node| {
            let name = node.metadata.name.clone().unwrap_or_default();
            (name, eligibility(&pod, &affinity, node))
        })
        .collect()
}

/// `manage`: a pod on every node that should run one, none elsewhere.
pub fn manage(inputs: &Inputs<'_>) -> Plan {
    let mut plan = Plan::default();
    let by_node = pods_by_node(inputs.pods);
    let eligible = eligibilities(inputs.ds, inputs.nodes);
    for (node, pods) in &by_node {
        let known = node.as_ref().is_some_and(|n| eligible.contains_key(n));
        if !known {
            plan.force_delete.extend(
                pods.iter()
                    .filter(|p| p.metadata.deletion_timestamp.is_none())
                    .cloned(),
            );
        }
    }
    let surge = max_surge_allowed(inputs.ds);
    for (node, eligibility) in &eligible {
        let pods = by_node
            .get(&Some(node.clone()))
            .map(Vec::as_slice)
            .unwrap_or_default();
        pods_on_node(inputs, &mut plan, node, *eligibility, pods, surge);
    }
    plan.create_on.truncate(BURST_REPLICAS);
    plan.delete.truncate(BURST_REPLICAS);
    plan
}

/// `podsShouldBeOnNode`.
fn pods_on_node(
    inputs: &Inputs<'_>,
    plan: &mut Plan,
    node: &str,
    eligibility: Eligibility,
    pods: &[Arc<Pod>],
    surge: bool,
) {
    if eligibility.should_run && pods.is_empty() {
        plan.create_on.push(node.to_string());
        return;
    }
    if !eligibility.should_continue_running {
        plan.delete.extend(
            pods.iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .cloned(),
        );
        return;
    }
    let mut running = Vec::new();
    for pod in pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
    {
        if !is_terminal(pod) {
            running.push(pod.clone());
            continue;
        }
        // A failed daemon pod is replaced, slower each time it fails again.
        match (inputs.backoff)(node) {
            Some(wait) => {
                plan.requeue_after = Some(plan.requeue_after.map_or(wait, |r| r.min(wait)));
            }
            None => {
                plan.delete.push(pod.clone());
                plan.failed_on.push(node.to_string());
            }
        }
    }
    if surge {
        // Keep the oldest updated pod and the oldest old one.
        let (mut new_kept, mut old_kept) = (false, false);
        for pod in running {
            let kept = match is_updated(inputs.ds, &pod, inputs.hash) {
                true => &mut new_kept,
                false => &mut old_kept,
            };
            match *kept {
                false => *kept = true,
                true => plan.delete.push(pod),
            }
        }
    } else {
        plan.delete.extend(running.into_iter().skip(1));
    }
}

/// `spec.updateStrategy.type`, RollingUpdate when unset.
pub fn is_rolling_update(ds: &DaemonSet) -> bool {
    let strategy = ds.spec.as_ref().and_then(|s| s.update_strategy.as_ref());
    strategy
        .and_then(|s| s.type_.as_deref())
        .unwrap_or("RollingUpdate")
        == "RollingUpdate"
}

fn rolling_field(ds: &DaemonSet, surge: bool) -> Option<&IntOrString> {
    let rolling = ds
        .spec
        .as_ref()?
        .update_strategy
        .as_ref()?
        .rolling_update
        .as_ref()?;
    match surge {
        true => rolling.max_surge.as_ref(),
        false => rolling.max_unavailable.as_ref(),
    }
}

fn max_surge_allowed(ds: &DaemonSet) -> bool {
    is_rolling_update(ds) && rolling_field(ds, true).is_some_and(|v| scaled(v, 100) > 0)
}

/// An int, or a percentage of `total` rounded up.
pub fn scaled(value: &IntOrString, total: usize) -> usize {
    match value {
        IntOrString::Int(n) => usize::try_from(*n).unwrap_or(0),
        IntOrString::String(text) => {
            let percent = text
                .strip_suffix('%')
                .and_then(|p| p.trim().parse::<usize>().ok())
                .unwrap_or(0);
            (percent * total).div_ceil(100)
        }
    }
}

/// maxSurge and maxUnavailable over the number of nodes that should run
/// the pod, defaults 0 and 1; both 0 means 1 unavailable
/// (`updatedDesiredNodeCounts`).
pub fn budgets(ds: &DaemonSet, desired: usize) -> (usize, usize) {
    let surge = rolling_field(ds, true).map_or(0, |v| scaled(v, desired));
    let unavailable = rolling_field(ds, false).map_or(1, |v| scaled(v, desired));
    match (surge, unavailable) {
        (0, 0) => (0, 1),
        budgets => budgets,
    }
}

/// On one node: the one updated and the one old live pod, or `None` when
/// there are more than one of either (`findUpdatedPodsOnNode`).
type NodePods = (Option<Arc<Pod>>, Option<Arc<Pod>>);

fn updated_and_old(ds: &DaemonSet, pods: &[Arc<Pod>], hash: &str) -> Option<NodePods> {
    let (mut new, mut old) = (None, None);
    for pod in pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
    {
        let slot = match is_updated(ds, pod, hash) {
            true => &mut new,
            false => &mut old,
        };
        if slot.is_some() {
            return None;
        }
        *slot = Some(pod.clone());
    }
    Some((new, old))
}

/// `rollingUpdate`: which old pods to delete (without surge) or which
/// nodes get their new pod beside the old one (with surge), within the
/// budgets.
pub fn rolling_update(inputs: &Inputs<'_>) -> Plan {
    let ds = inputs.ds;
    let eligible = eligibilities(ds, inputs.nodes);
    let desired = eligible.values().filter(|e| e.should_run).count();
    let (max_surge, max_unavailable) = budgets(ds, desired);
    let min_ready = ds
        .spec
        .as_ref()
        .and_then(|s| s.min_ready_seconds)
        .unwrap_or(0);
    let available = |pod: &Pod| is_available(pod, min_ready, inputs.now);
    let by_node = pods_by_node(inputs.pods);
    let nodes = by_node
        .iter()
        .filter_map(|(node, pods)| Some((node.as_ref()?, pods)))
        .filter(|(node, _)| eligible.contains_key(*node));
    let mut plan = Plan::default();
    if max_surge == 0 {
        let mut unavailable = 0;
        let mut replace_now = Vec::new();
        let mut candidates = Vec::new();
        for (_, pods) in nodes {
            match updated_and_old(ds, pods, inputs.hash) {
                None | Some((None, None)) => unavailable += 1,
                Some((Some(new), _)) => {
                    if !available(&new) {
                        unavailable += 1;
                    }
                }
                Some((None, Some(old))) if !available(&old) => replace_now.push(old),
                Some((None, Some(_))) if unavailable >= max_unavailable => {}
                Some((None, Some(old))) => candidates.push(old),
            }
        }
        let room = max_unavailable
            .saturating_sub(unavailable)
            .min(candidates.len());
        plan.delete = replace_now;
        plan.delete.extend(candidates.into_iter().take(room));
        return plan;
    }
    let mut surging = 0;
    let mut create_now = Vec::new();
    let mut candidates = Vec::new();
    for (node, pods) in nodes {
        match updated_and_old(ds, pods, inputs.hash) {
            None => surging += 1,
            Some((_, None)) => {}
            Some((None, Some(old))) if !available(&old) => create_now.push(node.clone()),
            Some((None, Some(_))) => candidates.push(node.clone()),
            Some((Some(new), Some(_))) if !available(&new) => surging += 1,
            Some((Some(_), Some(old))) => plan.delete.push(old),
        }
    }
    let room = max_surge.saturating_sub(surging).min(candidates.len());
    plan.create_on = create_now;
    plan.create_on.extend(candidates.into_iter().take(room));
    plan
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::daemonset::fixtures::{ago, daemon_pod, daemon_set, node, pending_daemon_pod};
    use serde_json::json;

    fn nodes(names: &[&str]) -> Vec<Arc<Node>> {
        names.iter().map(|n| Arc::new(node(n).build())).collect()
    }

    fn names(pods: &[Arc<Pod>]) -> Vec<&str> {
        pods.iter()
            .map(|p| p.metadata.name.as_deref().unwrap())
            .collect()
    }

    fn no_backoff(_: &str) -> Option<Duration> {
        None
    }

    fn inputs<'a>(ds: &'a DaemonSet, nodes: &'a [Arc<Node>], pods: &'a [Arc<Pod>]) -> Inputs<'a> {
        Inputs {
            ds,
            nodes,
            pods,
            hash: "new",
            now: crate::daemonset::fixtures::NOW,
            backoff: &no_backoff,
        }
    }

    fn ready(name: &str, node: &str, hash: &str) -> Arc<Pod> {
        Arc::new(
            daemon_pod(name, "agent", node, hash)
                .ready_since(ago(60))
                .build(),
        )
    }

    #[test]
    fn every_eligible_node_without_a_pod_gets_one() {
        let ds = daemon_set("agent");
        let nodes = vec![
            Arc::new(node("n1").build()),
            Arc::new(node("n2").build()),
            Arc::new(node("tainted").taint("gpu", "", "NoSchedule").build()),
        ];
        let pods = vec![ready("a", "n1", "new")];
        let plan = manage(&inputs(&ds, &nodes, &pods));
        assert_eq!(plan.create_on, ["n2"]);
        assert!(plan.delete.is_empty() && plan.force_delete.is_empty());
    }

    #[test]
    fn pods_leave_nodes_that_are_gone_or_no_longer_eligible() {
        let ds = daemon_set("agent");
        let nodes = vec![
            Arc::new(node("n1").build()),
            Arc::new(node("evicting").taint("gpu", "", "NoExecute").build()),
            Arc::new(node("tainted-later").taint("gpu", "", "NoSchedule").build()),
        ];
        let pods = vec![
            ready("on-n1", "n1", "new"),
            ready("on-evicting", "evicting", "new"),
            ready("stays", "tainted-later", "new"),
            ready("on-gone", "gone", "new"),
            Arc::new(pending_daemon_pod(
                "pinned-to-gone",
                "agent",
                "gone-too",
                "new",
            )),
        ];
        let plan = manage(&inputs(&ds, &nodes, &pods));
        assert!(plan.create_on.is_empty());
        assert_eq!(names(&plan.delete), ["on-evicting"]);
        assert_eq!(names(&plan.force_delete), ["on-gone", "pinned-to-gone"]);
    }

    #[test]
    fn duplicates_on_a_node_are_deleted_keeping_the_oldest() {
        let ds = daemon_set("agent");
        let nodes = nodes(&["n1"]);
        let pods = vec![
            Arc::new(
                daemon_pod("young", "agent", "n1", "new")
                    .created(ago(10))
                    .build(),
            ),
            Arc::new(
                daemon_pod("old", "agent", "n1", "new")
                    .created(ago(100))
                    .build(),
            ),
        ];
        let plan = manage(&inputs(&ds, &nodes, &pods));
        assert_eq!(names(&plan.delete), ["young"]);
    }

    #[test]
    fn failed_pods_are_deleted_unless_backing_off() {
        let ds = daemon_set("agent");
        let nodes = nodes(&["n1", "n2"]);
        let pods = vec![
            Arc::new(
                daemon_pod("failed-1", "agent", "n1", "new")
                    .phase("Failed")
                    .build(),
            ),
            Arc::new(
                daemon_pod("failed-2", "agent", "n2", "new")
                    .phase("Failed")
                    .build(),
            ),
        ];
        let backoff = |node: &str| (node == "n2").then_some(Duration::from_secs(4));
        let mut with_backoff = inputs(&ds, &nodes, &pods);
        with_backoff.backoff = &backoff;
        let plan = manage(&with_backoff);
        assert_eq!(names(&plan.delete), ["failed-1"]);
        assert_eq!(plan.failed_on, ["n1"]);
        assert_eq!(plan.requeue_after, Some(Duration::from_secs(4)));
        // Recreated on the next sync, once the failed pod is gone.
        assert!(plan.create_on.is_empty());
        let plan = manage(&inputs(&ds, &nodes, &pods[1..]));
        assert_eq!(plan.create_on, ["n1"]);
    }

    #[test]
    fn budgets_scale_percentages_up_over_the_desired_nodes() {
        let mut ds = daemon_set("agent");
        assert_eq!(budgets(&ds, 10), (0, 1));
        let rolling = |ds: &mut DaemonSet, value: serde_json::Value| {
            ds.spec.as_mut().unwrap().update_strategy = serde_json::from_value(json!({
                "type": "RollingUpdate", "rollingUpdate": value}))
            .unwrap();
        };
        rolling(&mut ds, json!({"maxUnavailable": "25%", "maxSurge": 0}));
        assert_eq!(budgets(&ds, 10), (0, 3));
        rolling(&mut ds, json!({"maxUnavailable": 0, "maxSurge": "10%"}));
        assert_eq!(budgets(&ds, 10), (1, 0));
        rolling(&mut ds, json!({"maxUnavailable": 0, "maxSurge": 0}));
        assert_eq!(budgets(&ds, 10), (0, 1));
        rolling(&mut ds, json!({}));
        assert_eq!(budgets(&ds, 10), (0, 1));
    }

    #[test]
    fn rolling_update_replaces_at_most_max_unavailable_available_pods() {
        let mut ds = daemon_set("agent");
        ds.spec.as_mut().unwrap().update_strategy = serde_json::from_value(json!({
            "type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 2}}))
        .unwrap();
        let nodes = nodes(&["n1", "n2", "n3", "n4", "n5"]);
        let mut pods = vec![
            ready("old-1", "n1", "old"),
            ready("old-2", "n2", "old"),
            ready("old-3", "n3", "old"),
            ready("new-4", "n4", "new"),
            Arc::new(
                daemon_pod("broken-5", "agent", "n5", "old")
                    .not_ready()
                    .build(),
            ),
        ];
        let plan = rolling_update(&inputs(&ds, &nodes, &pods));
        // The unavailable old pod goes at once, and two available ones.
        assert_eq!(names(&plan.delete), ["broken-5", "old-1", "old-2"]);
        assert!(plan.create_on.is_empty());

        // A new pod not yet ready takes one unit of the budget.
        pods[3] = Arc::new(
            daemon_pod("new-4", "agent", "n4", "new")
                .not_ready()
                .build(),
        );
        pods.pop();
        let plan = rolling_update(&inputs(&ds, &nodes, &pods));
        assert_eq!(names(&plan.delete), ["old-1"]);
    }

    #[test]
    fn rolling_update_with_surge_starts_new_pods_beside_old_ones() {
        let mut ds = daemon_set("agent");
        ds.spec.as_mut().unwrap().update_strategy = serde_json::from_value(json!({
            "type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}}))
        .unwrap();
        let nodes = nodes(&["n1", "n2", "n3"]);
        let pods = vec![
            ready("old-1", "n1", "old"),
            ready("old-2", "n2", "old"),
            ready("old-3", "n3", "old"),
        ];
        let plan = rolling_update(&inputs(&ds, &nodes, &pods));
        assert_eq!(plan.create_on, ["n1"]);
        assert!(plan.delete.is_empty());

        // n1's new pod is ready: its old pod goes, and n2 surges.
        let mut pods = pods;
        pods.push(ready("new-1", "n1", "new"));
        let plan = rolling_update(&inputs(&ds, &nodes, &pods));
        assert_eq!(names(&plan.delete), ["old-1"]);
        assert_eq!(plan.create_on, ["n2"]);

        // Manage keeps one old and one new pod per node while surging.
        assert!(manage(&inputs(&ds, &nodes, &pods)).is_empty());
    }

    #[test]
    fn pods_match_the_template_by_hash_or_annotated_generation() {
        let mut ds = daemon_set("agent");
        let by_hash = daemon_pod("a", "agent", "n1", "new").build();
        let by_generation = daemon_pod("b", "agent", "n1", "stale")
            .label(POD_TEMPLATE_GENERATION, "3")
            .build();
        assert!(is_updated(&ds, &by_hash, "new"));
        assert!(!is_updated(&ds, &by_generation, "new"));
        ds.metadata.annotations =
            Some([(TEMPLATE_GENERATION_ANNOTATION.into(), "3".into())].into());
        assert!(is_updated(&ds, &by_generation, "new"));
        assert_eq!(template_generation(&ds), Some(3));
    }
}
