//! Priority: a new pod's `priorityClassName` becomes its `spec.priority`
//! and `preemptionPolicy` (the global default class when none is named);
//! an unknown class is refused. Only one PriorityClass may be the global
//! default, and the built-in system classes may not be deleted. Not
//! preemption (the scheduler).

use std::sync::Arc;

use serde_json::{json, Value};

use super::{list, read, Attributes, Operation};
use crate::registry::Registry;
use crate::status::ApiResult;

pub const PRIORITY_CLASSES: (&str, &str, &str) = ("scheduling.k8s.io", "v1", "priorityclasses");

/// The classes every cluster has: (name, value, description).
pub const SYSTEM_CLASSES: &[(&str, i64, &str)] = &[
    (
        "system-node-critical",
        2_000_001_000,
        "Used for system critical pods that must not be moved from their current node.",
    ),
    (
        "system-cluster-critical",
        2_000_000_000,
        "Used for system critical pods that must run in the cluster, but can be moved to another node if necessary.",
    ),
];

const DEFAULT_PREEMPTION: &str = "PreemptLowerPriority";

/// The built-in classes as objects, created at startup.
pub fn system_class_objects() -> Vec<Value> {
    SYSTEM_CLASSES
        .iter()
        .map(|(name, value, description)| {
            json!({
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": name},
                "value": value,
                "description": description,
                "preemptionPolicy": DEFAULT_PREEMPTION,
            })
        })
        .collect()
}

fn system_class(name: &str) -> Option<Value> {
    system_class_objects()
        .into_iter()
        .find(|c| c["metadata"]["name"] == name)
}

pub async fn admit(registry: &Registry, attrs: &mut Attributes) -> ApiResult<()> {
    if attrs.operation != Operation::Create || !attrs.is_core("Pod") || !attrs.on_object() {
        return Ok(());
    }
    let named = attrs
        .object
        .as_ref()
        .and_then(|pod| pod["spec"]["priorityClassName"].as_str())
        .filter(|n| !n.is_empty())
        .map(str::to_string);
    let class = match &named {
        Some(name) => match read(registry, PRIORITY_CLASSES, None, name).await? {
            Some(class) => Some(class),
            None => Some(system_class(name).map(Arc::new).ok_or_else(|| {
                attrs.forbidden(format!("no PriorityClass with name {name} was found"))
            })?),
        },
        None => global_default(registry).await?,
    };
    let priority = class
        .as_ref()
        .and_then(|c| c["value"].as_i64())
        .unwrap_or(0);
    let preemption = class
        .as_ref()
        .and_then(|c| c["preemptionPolicy"].as_str())
        .unwrap_or(DEFAULT_PREEMPTION)
        .to_string();
    let Some(spec) = attrs.object.as_ref().map(|pod| pod["spec"].clone()) else {
        return Ok(());
    };
    if let Some(given) = spec["priority"].as_i64().filter(|p| *p != priority) {
        return Err(attrs.forbidden(format!(
            "the integer value of priority ({given}) must not be provided in pod spec; priority admission controller computed {priority} from the given PriorityClass name"
        )));
    }
    if let Some(given) = spec["preemptionPolicy"]
        .as_str()
        .filter(|p| *p != preemption)
    {
        return Err(attrs.forbidden(format!(
            "the string value of PreemptionPolicy ({given}) must not be provided in pod spec; priority admission controller computed {preemption} from the given PriorityClass name"
        )));
    }
    if let Some(spec) = attrs
        .object
        .as_mut()
        .and_then(|pod| pod.get_mut("spec"))
        .filter(|s| s.is_object())
    {
        spec["priority"] = json!(priority);
        spec["preemptionPolicy"] = json!(preemption);
        if let (None, Some(class)) = (&named, &class) {
            spec["priorityClassName"] = class["metadata"]["name"].clone();
        }
    }
    Ok(())
}

/// The class marked `globalDefault` (the lowest one if several are).
async fn global_default(registry: &Registry) -> ApiResult<Option<Arc<Value>>> {
    let classes = list(registry, PRIORITY_CLASSES, None).await?;
    Ok(classes
        .into_iter()
        .filter(|c| c["globalDefault"] == json!(true))
        .min_by_key(|c| c["value"].as_i64().unwrap_or(0)))
}

pub async fn validate(registry: &Registry, attrs: &Attributes) -> ApiResult<()> {
    if attrs.resource.group != PRIORITY_CLASSES.0 || attrs.resource.kind != "PriorityClass" {
        return Ok(());
    }
    match attrs.operation {
        Operation::Delete if system_class(&attrs.name).is_some() => {
            Err(attrs.forbidden("this is a system priority class and cannot be deleted"))
        }
        Operation::Create | Operation::Update => {
            let Some(class) = &attrs.object else {
                return Ok(());
            };
            if class["globalDefault"] != json!(true) {
                return Ok(());
            }
            let classes = list(registry, PRIORITY_CLASSES, None).await?;
            match classes.iter().find(|c| {
                c["globalDefault"] == json!(true)
                    && c["metadata"]["name"] != class["metadata"]["name"]
            }) {
                Some(other) => Err(attrs.forbidden(format!(
                    "PriorityClass {} is already marked as default. Only one default can exist",
                    other["metadata"]["name"].as_str().unwrap_or("")
                ))),
                None => Ok(()),
            }
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_system_classes_are_kubernetes_values() {
        let node = system_class("system-node-critical").unwrap();
        assert_eq!(node["value"], 2_000_001_000);
        assert_eq!(
            system_class("system-cluster-critical").unwrap()["value"],
            2_000_000_000
        );
        assert!(system_class("high").is_none());
    }
}
