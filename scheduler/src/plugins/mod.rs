//! The in-tree plugins, one folder each, by their Kubernetes names, and
//! the default profile's plugin set.
//!
//! Every plugin module has `pub const NAME: &str` and
//! `pub fn new(args: &serde_json::Value) -> Result<Arc<dyn Plugin>, String>`
//! (`args`: its `pluginConfig` entry's args, `null` when none).

use crate::framework::Factory;

// Plugin modules (keep sorted).
pub mod default_binder;
pub mod default_preemption;
pub mod image_locality;
pub mod inter_pod_affinity;
pub mod node_affinity;
pub mod node_label;
pub mod node_name;
pub mod node_ports;
pub mod node_resources_balanced_allocation;
pub mod node_resources_fit;
pub mod node_unschedulable;
pub mod node_volume_limits;
pub mod pod_topology_spread;
pub mod priority_sort;
pub mod scheduling_gates;
pub mod selector_spread;
pub mod taint_toleration;
pub mod volume_restrictions;
// end of plugin modules

/// Every plugin a profile may name.
pub fn registry() -> Vec<(&'static str, Factory)> {
    vec![
        // Registry entries (keep sorted): (module::NAME, module::new as Factory),
        (default_binder::NAME, default_binder::new as Factory),
        (default_preemption::NAME, default_preemption::new as Factory),
        (image_locality::NAME, image_locality::new as Factory),
        (inter_pod_affinity::NAME, inter_pod_affinity::new as Factory),
        (node_affinity::NAME, node_affinity::new as Factory),
        (node_label::NAME, node_label::new as Factory),
        (node_name::NAME, node_name::new as Factory),
        (node_ports::NAME, node_ports::new as Factory),
        (
            node_resources_balanced_allocation::NAME,
            node_resources_balanced_allocation::new as Factory,
        ),
        (node_resources_fit::NAME, node_resources_fit::new as Factory),
        (node_unschedulable::NAME, node_unschedulable::new as Factory),
        (node_volume_limits::NAME, node_volume_limits::new as Factory),
        (
            pod_topology_spread::NAME,
            pod_topology_spread::new as Factory,
        ),
        (priority_sort::NAME, priority_sort::new as Factory),
        (scheduling_gates::NAME, scheduling_gates::new as Factory),
        (selector_spread::NAME, selector_spread::new as Factory),
        (taint_toleration::NAME, taint_toleration::new as Factory),
        (
            volume_restrictions::NAME,
            volume_restrictions::new as Factory,
        ),
        // end of registry entries
    ]
}

/// The plugins of the default profile, in kube-scheduler's order, with
/// their score weights (for plugins that score).
pub const DEFAULT_PLUGINS: &[(&str, i64)] = &[
    ("SchedulingGates", 0),
    ("PrioritySort", 0),
    ("NodeUnschedulable", 0),
    ("NodeName", 0),
    ("TaintToleration", 3),
    ("NodeAffinity", 2),
    ("NodePorts", 0),
    ("NodeResourcesFit", 1),
    ("VolumeRestrictions", 0),
    ("NodeVolumeLimits", 0),
    ("PodTopologySpread", 2),
    ("InterPodAffinity", 2),
    ("DefaultPreemption", 0),
    ("NodeResourcesBalancedAllocation", 1),
    ("ImageLocality", 1),
    ("DefaultBinder", 0),
];

/// The factory of the plugin named `name`.
pub fn factory(name: &str) -> Option<Factory> {
    registry()
        .into_iter()
        .find(|(n, _)| *n == name)
        .map(|(_, f)| f)
}

/// Checks that a plugin without args got none: `null`, or an object with
/// at most `apiVersion` and `kind`, as kube-scheduler's decoding allows.
pub fn no_args(plugin: &str, args: &serde_json::Value) -> Result<(), String> {
    match args {
        serde_json::Value::Null => Ok(()),
        serde_json::Value::Object(map) => match map
            .keys()
            .find(|k| !matches!(k.as_str(), "apiVersion" | "kind"))
        {
            Some(key) => Err(format!("plugin {plugin} takes no args, got field {key:?}")),
            None => Ok(()),
        },
        other => Err(format!("plugin {plugin} takes no args, got {other}")),
    }
}
