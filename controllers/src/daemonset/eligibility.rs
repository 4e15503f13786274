//! Which nodes a DaemonSet's pod belongs on (`NodeShouldRunDaemonPod`):
//! the template's nodeName, nodeSelector and required node affinity, and
//! the node's NoSchedule/NoExecute taints against the pod's tolerations,
//! with the tolerations every daemon pod gets. Resources are the
//! scheduler's to check, not this.

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{
    Affinity, Node, NodeAffinity, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, Pod,
    PodSpec, Toleration,
};
use skiff_machinery::scheduling::node_affinity::RequiredNodeAffinity;
use skiff_machinery::scheduling::taints::{tolerates, NO_EXECUTE, NO_SCHEDULE};

/// The taints every daemon pod tolerates, with their effects
/// (`AddOrUpdateDaemonPodTolerations`): a daemon runs on nodes that are
/// not ready, unreachable, under pressure or cordoned.
const DAEMON_TOLERATIONS: &[(&str, &str)] = &[
    ("node.kubernetes.io/not-ready", NO_EXECUTE),
    ("node.kubernetes.io/unreachable", NO_EXECUTE),
    ("node.kubernetes.io/disk-pressure", NO_SCHEDULE),
    ("node.kubernetes.io/memory-pressure", NO_SCHEDULE),
    ("node.kubernetes.io/pid-pressure", NO_SCHEDULE),
    ("node.kubernetes.io/unschedulable", NO_SCHEDULE),
];

/// Tolerated too by a pod on the host network, which needs no pod network.
const NETWORK_UNAVAILABLE: &str = "node.kubernetes.io/network-unavailable";

/// Adds the daemon tolerations to `spec`, replacing a toleration with the
/// same key, operator, value and effect (`AddOrUpdateTolerationInPodSpec`),
/// so that none carries tolerationSeconds.
pub fn add_daemon_tolerations(spec: &mut PodSpec) {
    let host_network = spec.host_network == Some(true);
    let extra = host_network.then_some((NETWORK_UNAVAILABLE, NO_SCHEDULE));
    let tolerations = spec.tolerations.get_or_insert_with(Vec::new);
    for (key, effect) in DAEMON_TOLERATIONS.iter().copied().chain(extra) {
        let toleration = Toleration {
            key: Some(key.to_string()),
            operator: Some("Exists".into()),
            effect: Some(effect.to_string()),
            ..Default::default()
        };
        let same = |t: &Toleration| {
            t.key == toleration.key
                && t.operator.as_deref().unwrap_or("Equal") == "Exists"
                && t.value.as_deref().unwrap_or_default().is_empty()
                && t.effect == toleration.effect
        };
        match tolerations.iter_mut().find(|t| same(t)) {
            Some(existing) => *existing = toleration,
            None => tolerations.push(toleration),
        }
    }
}

/// Whether a node should run the daemon pod, and whether a pod already
/// there may stay (a NoSchedule taint added later does not evict it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Eligibility {
    pub should_run: bool,
    pub should_continue_running: bool,
}

impl Eligibility {
    const NO: Eligibility = Eligibility {
        should_run: false,
        should_continue_running: false,
    };
}

/// The daemon pod as the DaemonSet would create it, without its node:
/// the template's spec with the daemon tolerations.
pub fn template_pod(ds: &DaemonSet) -> Option<Pod> {
    let template = &ds.spec.as_ref()?.template;
    let mut spec = template.spec.clone()?;
    add_daemon_tolerations(&mut spec);
    Some(Pod {
        metadata: template.metadata.clone().unwrap_or_default(),
        spec: Some(spec),
        status: None,
    })
}

/// `NodeShouldRunDaemonPod` for `pod` (from [`template_pod`]) on `node`.
pub fn eligibility(pod: &Pod, affinity: &RequiredNodeAffinity, node: &Node) -> Eligibility {
    let spec = pod.spec.as_ref();
    let node_name = node.metadata.name.as_deref().unwrap_or_default();
    if let Some(wanted) = spec.and_then(|s| s.node_name.as_deref()) {
        if !wanted.is_empty() && wanted != node_name {
            return Eligibility::NO;
        }
    }
    if !affinity.matches(node) {
        return Eligibility::NO;
    }
    let tolerations = spec
        .and_then(|s| s.tolerations.as_deref())
        .unwrap_or_default();
    let taints = node.spec.as_ref().and_then(|s| s.taints.as_deref());
    let untolerated = taints
        .into_iter()
        .flatten()
        .filter(|t| t.effect == NO_SCHEDULE || t.effect == NO_EXECUTE)
        .find(|taint| !tolerations.iter().any(|t| tolerates(t, taint)));
    match untolerated {
        None => Eligibility {
            should_run: true,
            should_continue_running: true,
        },
        Some(taint) if taint.effect == NO_SCHEDULE => Eligibility {
            should_run: false,
            should_continue_running: true,
        },
        Some(_) => Eligibility::NO,
    }
}

/// Pins the pod to `node` through required node affinity, replacing the
/// terms it had (`ReplaceDaemonSetPodNodeNameNodeAffinity`): the
/// controller has checked them already, and the scheduler binds it.
pub fn pin_to_node(spec: &mut PodSpec, node: &str) {
    let term = NodeSelectorTerm {
        match_fields: Some(vec![NodeSelectorRequirement {
            key: "metadata.name".into(),
            operator: "In".into(),
            values: Some(vec![node.to_string()]),
        }]),
        match_expressions: None,
    };
    let affinity = spec.affinity.get_or_insert_with(Affinity::default);
    let node_affinity = affinity
        .node_affinity
        .get_or_insert_with(NodeAffinity::default);
    node_affinity.required_during_scheduling_ignored_during_execution = Some(NodeSelector {
        node_selector_terms: vec![term],
    });
}

/// The node a daemon pod is on or pinned to (`GetTargetNodeName`).
pub fn target_node(pod: &Pod) -> Option<&str> {
    let spec = pod.spec.as_ref()?;
    if let Some(name) = spec.node_name.as_deref().filter(|n| !n.is_empty()) {
        return Some(name);
    }
    let terms = &spec
        .affinity
        .as_ref()?
        .node_affinity
        .as_ref()?
        .required_during_scheduling_ignored_during_execution
        .as_ref()?
        .node_selector_terms;
    terms
        .iter()
        .flat_map(|t| t.match_fields.iter().flatten())
        .find(|r| r.key == "metadata.name" && r.operator == "In")
        .and_then(|r| r.values.as_deref())
        .and_then(|v| match v {
            [one] => Some(one.as_str()),
            _ => None,
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::daemonset::fixtures::{daemon_set, node};
    use serde_json::json;

    fn check(ds: &DaemonSet, node: &Node) -> Eligibility {
        let pod = template_pod(ds).unwrap();
        eligibility(&pod, &RequiredNodeAffinity::of_pod(&pod), node)
    }

    const RUN: Eligibility = Eligibility {
        should_run: true,
        should_continue_running: true,
    };
    const STAY: Eligibility = Eligibility {
        should_run: false,
        should_continue_running: true,
    };

    #[test]
    fn node_selector_and_required_affinity_choose_nodes() {
        let mut ds = daemon_set("agent");
        let spec = ds.spec.as_mut().unwrap().template.spec.as_mut().unwrap();
        spec.node_selector = Some([("disk".to_string(), "ssd".to_string())].into());
        spec.affinity = serde_json::from_value(json!({"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]}]}
        ]}}}))
        .unwrap();
        let ssd_a = node("n1").labels(&[("disk", "ssd"), ("zone", "a")]).build();
        let ssd_c = node("n2").labels(&[("disk", "ssd"), ("zone", "c")]).build();
        let hdd_a = node("n3").labels(&[("disk", "hdd"), ("zone", "a")]).build();
        assert_eq!(check(&ds, &ssd_a), RUN);
        assert_eq!(check(&ds, &ssd_c), Eligibility::NO);
        assert_eq!(check(&ds, &hdd_a), Eligibility::NO);
    }

    #[test]
    fn taints_exclude_nodes_unless_tolerated() {
        let ds = daemon_set("agent");
        let plain = node("n1").build();
        let no_schedule = node("n2").taint("dedicated", "gpu", "NoSchedule").build();
        let no_execute = node("n3").taint("dedicated", "gpu", "NoExecute").build();
        let prefer = node("n4")
            .taint("dedicated", "gpu", "PreferNoSchedule")
            .build();
        let cordoned = node("n5")
            .taint("node.kubernetes.io/unschedulable", "", "NoSchedule")
            .unschedulable()
            .build();
        let not_ready = node("n6")
            .taint("node.kubernetes.io/not-ready", "", "NoExecute")
            .build();
        assert_eq!(check(&ds, &plain), RUN);
        assert_eq!(check(&ds, &no_schedule), STAY);
        assert_eq!(check(&ds, &no_execute), Eligibility::NO);
        assert_eq!(check(&ds, &prefer), RUN);
        assert_eq!(check(&ds, &cordoned), RUN);
        assert_eq!(check(&ds, &not_ready), RUN);

        let mut tolerant = daemon_set("agent");
        let spec = tolerant
            .spec
            .as_mut()
            .unwrap()
            .template
            .spec
            .as_mut()
            .unwrap();
        spec.tolerations = Some(vec![Toleration {
            key: Some("dedicated".into()),
            operator: Some("Equal".into()),
            value: Some("gpu".into()),
            effect: None,
            toleration_seconds: None,
        }]);
        assert_eq!(check(&tolerant, &no_schedule), RUN);
        assert_eq!(check(&tolerant, &no_execute), RUN);
    }

    #[test]
    fn a_template_node_name_allows_only_that_node() {
        let mut ds = daemon_set("agent");
        ds.spec
            .as_mut()
            .unwrap()
            .template
            .spec
            .as_mut()
            .unwrap()
            .node_name = Some("n2".into());
        assert_eq!(check(&ds, &node("n1").build()), Eligibility::NO);
        assert_eq!(check(&ds, &node("n2").build()), RUN);
    }

    #[test]
    fn daemon_pods_get_the_standard_tolerations_without_seconds() {
        let mut spec: PodSpec = serde_json::from_value(json!({
            "containers": [{"name": "a"}],
            "hostNetwork": true,
            "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists",
                             "effect": "NoExecute", "tolerationSeconds": 300}],
        }))
        .unwrap();
        add_daemon_tolerations(&mut spec);
        let tolerations = spec.tolerations.unwrap();
        assert_eq!(tolerations.len(), 7);
        let find = |key: &str| tolerations.iter().find(|t| t.key.as_deref() == Some(key));
        let not_ready = find("node.kubernetes.io/not-ready").unwrap();
        assert_eq!(not_ready.effect.as_deref(), Some("NoExecute"));
        assert_eq!(not_ready.toleration_seconds, None);
        assert_eq!(
            find("node.kubernetes.io/unschedulable")
                .unwrap()
                .effect
                .as_deref(),
            Some("NoSchedule")
        );
        assert!(find(NETWORK_UNAVAILABLE).is_some());
        let mut plain: PodSpec =
            serde_json::from_value(json!({"containers": [{"name": "a"}]})).unwrap();
        add_daemon_tolerations(&mut plain);
        assert_eq!(plain.tolerations.unwrap().len(), 6);
    }

    #[test]
    fn pods_are_pinned_by_node_affinity_replacing_other_terms() {
        let mut spec: PodSpec = serde_json::from_value(json!({
            "containers": [{"name": "a"}],
            "affinity": {"nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["old"]}]},
                    {"matchExpressions": [{"key": "zone", "operator": "Exists"}]}]},
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 1, "preference": {"matchExpressions": [{"key": "x", "operator": "Exists"}]}}]}},
        }))
        .unwrap();
        pin_to_node(&mut spec, "n7");
        let affinity = serde_json::to_value(spec.affinity.as_ref().unwrap()).unwrap();
        assert_eq!(
            affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"],
            json!({"nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": ["n7"]}]}]})
        );
        assert!(
            affinity["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"].is_array()
        );
        assert_eq!(spec.node_name, None);
        let pod = Pod {
            spec: Some(spec),
            ..Default::default()
        };
        assert_eq!(target_node(&pod), Some("n7"));
    }
}
