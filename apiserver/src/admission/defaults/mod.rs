//! Defaulting of built-in types: the fields Kubernetes fills in when a
//! client leaves them out (`restartPolicy: Always`, a Deployment's rolling
//! update strategy…), per type, as its `SetDefaults_*` functions do. Runs
//! first in the mutating phase, on every create and update, and again
//! after mutating webhooks. Not the plugins that read other objects.

mod apps;
mod batch;
mod core;
mod discovery;
mod pod;
mod registration;
mod storage;

use serde_json::{json, Value};

use crate::resources::ResourceType;

pub use pod::{image_pull_policy, qos_class};

/// Fills in `object`'s defaults by its type.
pub fn apply(resource: &ResourceType, object: &mut Value) {
    match (resource.group, resource.kind) {
        ("", "Pod") => pod::pod(object),
        ("", "PodTemplate") => pod::template(&mut object["template"]),
        ("", "ReplicationController") => {
            set(&mut object["spec"], "replicas", json!(1));
            pod::template(&mut object["spec"]["template"]);
        }
        ("", "Service") => core::service(object),
        ("", "Namespace") => core::namespace(object),
        ("", "Secret") => core::secret(object),
        ("", "Endpoints") => core::endpoints(object),
        ("", "PersistentVolumeClaim") => core::persistent_volume_claim(object),
        ("", "PersistentVolume") => core::persistent_volume(object),
        ("", "LimitRange") => core::limit_range(object),
        ("apps", "Deployment") => apps::deployment(object),
        ("apps", "ReplicaSet") => apps::replica_set(object),
        ("apps", "StatefulSet") => apps::stateful_set(object),
        ("apps", "DaemonSet") => apps::daemon_set(object),
        ("batch", "Job") => batch::job(object),
        ("batch", "CronJob") => batch::cron_job(object),
        ("scheduling.k8s.io", "PriorityClass") => {
            set(object, "preemptionPolicy", json!("PreemptLowerPriority"))
        }
        ("admissionregistration.k8s.io", kind) => registration::webhook_configuration(kind, object),
        ("storage.k8s.io", "StorageClass") => storage::storage_class(object),
        ("discovery.k8s.io", "EndpointSlice") => discovery::endpoint_slice(object),
        _ => {}
    }
}

/// What the server sets on a new object after admission, as Kubernetes'
/// `PrepareForCreate` does: a pod's QoS class, a Job's generated selector.
pub fn prepare_for_create(resource: &ResourceType, object: &mut Value) {
    match (resource.group, resource.kind) {
        ("", "Pod") => {
            let class = qos_class(&object["spec"]);
            // A status that is not an object is left for decoding to
            // refuse (400).
            if object["status"].is_null() {
                object["status"] = json!({});
            }
            if let Some(status) = object["status"].as_object_mut() {
                status.insert("qosClass".into(), json!(class));
            }
        }
        ("batch", "Job") => batch::generate_selector(object),
        _ => {}
    }
}

/// Sets `object[field]` when it is missing or null; `object` becomes a
/// JSON object if it is null.
pub(crate) fn set(object: &mut Value, field: &str, value: Value) {
    if object.is_null() {
        *object = json!({});
    }
    if let Some(map) = object.as_object_mut() {
        match map.get(field) {
            Some(v) if !v.is_null() => {}
            _ => {
                map.insert(field.to_string(), value);
            }
        }
    }
}

/// `object[field]`, made `{}` when missing; None when `object` or the field
/// is not a JSON object (validation reports that, not defaulting).
pub(crate) fn child<'a>(object: &'a mut Value, field: &str) -> Option<&'a mut Value> {
    if !object.is_object() {
        return None;
    }
    set(object, field, json!({}));
    object.get_mut(field).filter(|v| v.is_object())
}

/// `object[field]` when it is a JSON object; never created.
pub(crate) fn existing<'a>(object: &'a mut Value, field: &str) -> Option<&'a mut Value> {
    object.get_mut(field).filter(|v| v.is_object())
}

/// Calls `f` on every element of the array at `object[field]`, if any.
pub(crate) fn each(object: &mut Value, field: &str, mut f: impl FnMut(&mut Value)) {
    if let Some(items) = object.get_mut(field).and_then(Value::as_array_mut) {
        items.iter_mut().for_each(&mut f);
    }
}

#[cfg(test)]
mod tests;
