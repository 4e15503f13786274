//! DefaultStorageClass: a new PersistentVolumeClaim that names no class
//! (`storageClassName` absent, not `""`) gets the cluster's default
//! StorageClass, the one annotated
//! `storageclass.kubernetes.io/is-default-class: "true"` (the newest if
//! several are). With no default class the claim is left as it is.

use std::borrow::Borrow;

use serde_json::{json, Value};

use super::{list, Attributes, Operation};
use crate::registry::Registry;
use crate::status::ApiResult;

const STORAGE_CLASSES: (&str, &str, &str) = ("storage.k8s.io", "v1", "storageclasses");

const DEFAULT_ANNOTATIONS: [&str; 2] = [
    "storageclass.kubernetes.io/is-default-class",
    "storageclass.beta.kubernetes.io/is-default-class",
];

pub async fn admit(registry: &Registry, attrs: &mut Attributes) -> ApiResult<()> {
    if attrs.operation != Operation::Create
        || !attrs.is_core("PersistentVolumeClaim")
        || !attrs.on_object()
    {
        return Ok(());
    }
    let names_none = attrs.object.as_ref().is_some_and(|claim| {
        claim["spec"].is_object()
            && claim["spec"]
                .get("storageClassName")
                .is_none_or(Value::is_null)
    });
    if !names_none {
        return Ok(());
    }
    let classes = list(registry, STORAGE_CLASSES, None).await?;
    if let (Some(name), Some(claim)) = (default_class(&classes), attrs.object.as_mut()) {
        claim["spec"]["storageClassName"] = json!(name);
    }
    Ok(())
}

fn is_default(class: &Value) -> bool {
    let annotations = &class["metadata"]["annotations"];
    DEFAULT_ANNOTATIONS
        .iter()
        .any(|key| annotations[*key] == json!("true"))
}

/// The default class among `classes`: the newest of those annotated as
/// default, then by name.
pub fn default_class<C: Borrow<Value>>(classes: &[C]) -> Option<String> {
    classes
        .iter()
        .map(Borrow::borrow)
        .filter(|c| is_default(c))
        .max_by(|a, b| {
            let created = |c: &Value| {
                c["metadata"]["creationTimestamp"]
                    .as_str()
                    .map(str::to_string)
            };
            let name = |c: &Value| c["metadata"]["name"].as_str().map(str::to_string);
            created(a)
                .cmp(&created(b))
                .then_with(|| name(b).cmp(&name(a)))
        })
        .and_then(|c| c["metadata"]["name"].as_str())
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class(name: &str, created: &str, default: Option<&str>) -> Value {
        let mut c = json!({"metadata": {"name": name, "creationTimestamp": created}});
        if let Some(value) = default {
            c["metadata"]["annotations"] =
                json!({"storageclass.kubernetes.io/is-default-class": value});
        }
        c
    }

    #[test]
    fn the_newest_class_marked_default_is_chosen() {
        let classes = [
            class("standard", "2026-01-01T00:00:00Z", Some("true")),
            class("fast", "2026-02-01T00:00:00Z", Some("true")),
            class("slow", "2026-03-01T00:00:00Z", Some("false")),
            class("manual", "2026-04-01T00:00:00Z", None),
        ];
        assert_eq!(default_class(&classes).as_deref(), Some("fast"));
        assert_eq!(default_class(&classes[2..]), None);
        let beta = json!({"metadata": {"name": "old", "annotations":
            {"storageclass.beta.kubernetes.io/is-default-class": "true"}}});
        assert_eq!(default_class(&[beta]).as_deref(), Some("old"));
    }
}
