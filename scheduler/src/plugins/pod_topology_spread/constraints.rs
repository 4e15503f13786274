//! A pod's spread constraints as the plugin works with them: the selector
//! parsed (with `matchLabelKeys` merged, or for default constraints, built
//! from the Services and controllers that select the pod), the node
//! inclusion policies, and the counting of matching pods on a node.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, Pod, Toleration, TopologySpreadConstraint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector as LabelSelectorSpec, LabelSelectorRequirement,
};
use skiff_machinery::selectors::LabelSelector;

use crate::framework::{ClusterObjects, PodInfo};
use crate::plugins::node_affinity::RequiredNodeAffinity;
use crate::plugins::taint_toleration::tolerated;

pub const DO_NOT_SCHEDULE: &str = "DoNotSchedule";
pub const SCHEDULE_ANYWAY: &str = "ScheduleAnyway";
pub const LABEL_HOSTNAME: &str = "kubernetes.io/hostname";
pub const LABEL_ZONE: &str = "topology.kubernetes.io/zone";

/// Which pods a constraint counts.
#[derive(Debug, Clone, PartialEq)]
pub enum Selector {
    /// No `labelSelector`: no pod.
    Nothing,
    Labels(LabelSelector),
}

impl Selector {
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        match self {
            Selector::Nothing => false,
            Selector::Labels(s) => s.matches_by(|key| labels.get(key).map(String::as_str)),
        }
    }

    /// A selector without requirements: it counts no pod in a domain
    /// (though it matches every pod), as kube-scheduler has it.
    pub fn is_empty(&self) -> bool {
        matches!(self, Selector::Labels(s) if s.is_empty())
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Constraint {
    pub max_skew: i64,
    pub topology_key: String,
    pub selector: Selector,
    pub min_domains: i64,
    /// nodeAffinityPolicy Honor (the default): only nodes matching the
    /// pod's nodeSelector and required node affinity are domains.
    pub honor_node_affinity: bool,
    /// nodeTaintsPolicy Honor (Ignore is the default): only nodes whose
    /// taints the pod tolerates are domains.
    pub honor_node_taints: bool,
}

fn parse_selector(spec: &LabelSelectorSpec) -> Result<LabelSelector, String> {
    let json = serde_json::to_value(spec).map_err(|e| e.to_string())?;
    LabelSelector::from_json(&json).map_err(|e| e.message)
}

pub fn pod_labels(pod: &Pod) -> &BTreeMap<String, String> {
    static EMPTY: BTreeMap<String, String> = BTreeMap::new();
    pod.metadata.labels.as_ref().unwrap_or(&EMPTY)
}

/// The constraints with `whenUnsatisfiable == action`, parsed.
pub fn constraints_for(
    constraints: &[TopologySpreadConstraint],
    pod_labels: &BTreeMap<String, String>,
    action: &str,
) -> Result<Vec<Constraint>, String> {
    constraints
        .iter()
        .filter(|c| c.when_unsatisfiable == action)
        .map(|c| {
            let selector = match &c.label_selector {
                // matchLabelKeys cannot make "no selector" select pods.
                None => Selector::Nothing,
                Some(spec) => Selector::Labels(parse_selector(&with_match_label_keys(
                    spec,
                    c.match_label_keys.as_deref().unwrap_or_default(),
                    pod_labels,
                ))?),
            };
            Ok(Constraint {
                max_skew: i64::from(c.max_skew),
                topology_key: c.topology_key.clone(),
                selector,
                min_domains: i64::from(c.min_domains.unwrap_or(1)),
                honor_node_affinity: c.node_affinity_policy.as_deref() != Some("Ignore"),
                honor_node_taints: c.node_taints_policy.as_deref() == Some("Honor"),
            })
        })
        .collect()
}

/// The pod's values for `keys` required of the pods counted.
fn with_match_label_keys(
    spec: &LabelSelectorSpec,
    keys: &[String],
    pod_labels: &BTreeMap<String, String>,
) -> LabelSelectorSpec {
    let mut spec = spec.clone();
    let added: Vec<LabelSelectorRequirement> = keys
        .iter()
        .filter_map(|key| {
            pod_labels.get(key).map(|value| LabelSelectorRequirement {
                key: key.clone(),
                operator: "In".into(),
                values: Some(vec![value.clone()]),
            })
        })
        .collect();
    if !added.is_empty() {
        spec.match_expressions
            .get_or_insert_with(Vec::new)
            .extend(added);
    }
    spec
}

/// How many pods on the node count for `selector`: pods of the incoming
/// pod's namespace, not being deleted, matching a non-empty selector.
pub fn count_matching(
    pods: &[std::sync::Arc<PodInfo>],
    selector: &Selector,
    namespace: &str,
) -> i64 {
    if selector.is_empty() || *selector == Selector::Nothing {
        return 0;
    }
    pods.iter()
        .filter(|p| {
            p.pod.metadata.deletion_timestamp.is_none()
                && p.namespace() == namespace
                && selector.matches(p.labels())
        })
        .count() as i64
}

/// Whether every constraint's topology key is a label of the node.
pub fn has_all_keys(labels: &BTreeMap<String, String>, constraints: &[Constraint]) -> bool {
    constraints
        .iter()
        .all(|c| labels.contains_key(&c.topology_key))
}

/// The incoming pod's side of the node inclusion policies, evaluated at
/// most once per node.
pub struct Inclusion<'a> {
    affinity: RequiredNodeAffinity,
    tolerations: &'a [Toleration],
}

/// One node's answers to the inclusion policies, computed when first asked.
#[derive(Default)]
pub struct NodeInclusion {
    affinity: Option<bool>,
    taints: Option<bool>,
}

impl<'a> Inclusion<'a> {
    pub fn of_pod(pod: &'a Pod) -> Inclusion<'a> {
        Inclusion {
            affinity: RequiredNodeAffinity::of_pod(pod),
            tolerations: pod
                .spec
                .as_ref()
                .and_then(|s| s.tolerations.as_deref())
                .unwrap_or_default(),
        }
    }

    /// Whether the node is a domain of `constraint` for the pod.
    pub fn includes(&self, constraint: &Constraint, node: &Node, seen: &mut NodeInclusion) -> bool {
        if constraint.honor_node_affinity
            && !*seen
                .affinity
                .get_or_insert_with(|| self.affinity.matches(node))
        {
            return false;
        }
        if constraint.honor_node_taints && !*seen.taints.get_or_insert_with(|| self.tolerates(node))
        {
            return false;
        }
        true
    }

    /// Whether every NoSchedule and NoExecute taint is tolerated.
    fn tolerates(&self, node: &Node) -> bool {
        node.spec
            .as_ref()
            .and_then(|s| s.taints.as_deref())
            .unwrap_or_default()
            .iter()
            .filter(|t| t.effect == "NoSchedule" || t.effect == "NoExecute")
            .all(|t| tolerated(self.tolerations, t))
    }
}

/// kube-scheduler's system default constraints (defaultingType System).
pub fn system_default_constraints() -> Vec<TopologySpreadConstraint> {
    [(LABEL_HOSTNAME, 3), (LABEL_ZONE, 5)]
        .into_iter()
        .map(|(key, skew)| TopologySpreadConstraint {
            max_skew: skew,
            topology_key: key.into(),
            when_unsatisfiable: SCHEDULE_ANYWAY.into(),
            ..Default::default()
        })
        .collect()
}

/// The default constraints with `action`, selecting the pods the
/// Services, ReplicationController, ReplicaSet or StatefulSet selecting
/// this pod select; none if nothing selects it.
pub fn default_constraints_for(
    defaults: &[TopologySpreadConstraint],
    pod: &Pod,
    cluster: &ClusterObjects,
    action: &str,
) -> Result<Vec<Constraint>, String> {
    let mut constraints = constraints_for(defaults, pod_labels(pod), action)?;
    if constraints.is_empty() {
        return Ok(constraints);
    }
    let Some(selector) = default_selector(pod, cluster) else {
        return Ok(Vec::new());
    };
    for c in &mut constraints {
        c.selector = Selector::Labels(selector.clone());
    }
    Ok(constraints)
}

fn namespace_of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> &str {
    meta.namespace.as_deref().unwrap_or("default")
}

/// The selector of the pod's Services and controller, merged; `None` when
/// it would be empty.
pub fn default_selector(pod: &Pod, cluster: &ClusterObjects) -> Option<LabelSelector> {
    let namespace = namespace_of(&pod.metadata);
    let labels = pod_labels(pod);
    let mut match_labels: BTreeMap<String, String> = BTreeMap::new();
    for service in &cluster.services {
        if namespace_of(&service.metadata) != namespace {
            continue;
        }
        // A Service without a selector selects nothing, not everything.
        let Some(selector) = service.spec.as_ref().and_then(|s| s.selector.as_ref()) else {
            continue;
        };
        if selector.iter().all(|(k, v)| labels.get(k) == Some(v)) {
            match_labels.extend(selector.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
    }
    let mut expressions: Vec<LabelSelectorRequirement> = Vec::new();
    let owner = pod
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true));
    if let Some(owner) = owner {
        let same = |meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| {
            namespace_of(meta) == namespace && meta.name.as_deref() == Some(owner.name.as_str())
        };
        match (owner.api_version.as_str(), owner.kind.as_str()) {
            ("v1", "ReplicationController") => {
                let rc = cluster
                    .replication_controllers
                    .iter()
                    .find(|rc| same(&rc.metadata));
                if let Some(selector) = rc.and_then(|rc| rc.spec.as_ref()?.selector.as_ref()) {
                    match_labels.extend(selector.iter().map(|(k, v)| (k.clone(), v.clone())));
                }
            }
            ("apps/v1", "ReplicaSet") => {
                let rs = cluster.replica_sets.iter().find(|rs| same(&rs.metadata));
                if let Some(spec) = rs.and_then(|rs| rs.spec.as_ref()) {
                    expressions.extend(requirements_of(&spec.selector));
                }
            }
            ("apps/v1", "StatefulSet") => {
                let ss = cluster.stateful_sets.iter().find(|ss| same(&ss.metadata));
                if let Some(spec) = ss.and_then(|ss| ss.spec.as_ref()) {
                    expressions.extend(requirements_of(&spec.selector));
                }
            }
            _ => {}
        }
    }
    if match_labels.is_empty() && expressions.is_empty() {
        return None;
    }
    let spec = LabelSelectorSpec {
        match_labels: Some(match_labels),
        match_expressions: Some(expressions),
    };
    parse_selector(&spec).ok().filter(|s| !s.is_empty())
}

/// A workload selector's requirements, each `matchLabels` entry as `In`
/// (so that it adds to, rather than replaces, a Service's value); none if
/// it does not parse.
fn requirements_of(spec: &LabelSelectorSpec) -> Vec<LabelSelectorRequirement> {
    if parse_selector(spec).is_err() {
        return Vec::new();
    }
    let labels = spec
        .match_labels
        .iter()
        .flatten()
        .map(|(k, v)| LabelSelectorRequirement {
            key: k.clone(),
            operator: "In".into(),
            values: Some(vec![v.clone()]),
        });
    labels
        .chain(spec.match_expressions.iter().flatten().cloned())
        .collect()
}
