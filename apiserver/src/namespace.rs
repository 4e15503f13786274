//! The namespace strategy, as kube-apiserver's: a new namespace carries the
//! `kubernetes` finalizer, which only `/finalize` removes; a deleted one is
//! marked Terminating and goes once its spec and metadata finalizers are
//! both empty. Emptying it is the namespace controller's work, not this.

use serde_json::{json, Map, Value};

use crate::object;
use crate::resources::ResourceType;

/// The finalizer the namespace controller removes once the namespace's
/// content is gone.
pub const FINALIZER_KUBERNETES: &str = "kubernetes";

/// Whether `resource` is core/v1 Namespace.
pub fn is_namespace(resource: &ResourceType) -> bool {
    resource.group.is_empty() && resource.kind == "Namespace"
}

/// `spec.finalizers`, empty when unset.
pub fn spec_finalizers(namespace: &Value) -> Vec<String> {
    namespace["spec"]["finalizers"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|f| f.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// On create (`PrepareForCreate`): the phase is Active and
/// `spec.finalizers` holds `kubernetes`, added after any the client gave.
pub fn prepare_for_create(namespace: &mut Value) {
    let mut finalizers = spec_finalizers(namespace);
    if !finalizers.iter().any(|f| f == FINALIZER_KUBERNETES) {
        finalizers.push(FINALIZER_KUBERNETES.to_string());
    }
    if let Some(status) = field_mut(namespace, "status") {
        *status = Map::from_iter([("phase".to_string(), json!("Active"))]);
    }
    if let Some(spec) = field_mut(namespace, "spec") {
        spec.insert("finalizers".into(), json!(finalizers));
    }
}

/// `namespace[field]` as an object to write into, made one when absent or
/// null; `None` when it is of another JSON type, which decoding refuses
/// with a 400 (writing into it would panic).
fn field_mut<'a>(namespace: &'a mut Value, field: &str) -> Option<&'a mut Map<String, Value>> {
    let value = namespace
        .as_object_mut()?
        .entry(field)
        .or_insert(Value::Null);
    if value.is_null() {
        *value = json!({});
    }
    value.as_object_mut()
}

/// On update of the namespace itself (`PrepareForUpdate`): its
/// finalizers and status stay as they were.
pub fn prepare_for_update(next: &mut Value, current: &Value) {
    set_spec_finalizers(next, current["spec"].get("finalizers").cloned());
}

/// On `PUT namespaces/{name}/finalize`: only `spec.finalizers` changes.
pub fn finalize(current: &Value, asked: &Value) -> Value {
    let mut next = current.clone();
    set_spec_finalizers(&mut next, asked["spec"].get("finalizers").cloned());
    next
}

fn set_spec_finalizers(namespace: &mut Value, finalizers: Option<Value>) {
    match (finalizers, namespace.get_mut("spec")) {
        (Some(finalizers), _) => {
            if let Some(spec) = field_mut(namespace, "spec") {
                spec.insert("finalizers".into(), finalizers);
            }
        }
        (None, Some(Value::Object(spec))) => {
            spec.remove("finalizers");
        }
        (None, _) => {}
    }
}

/// The first DELETE: the deletion timestamp (if not already set) and the
/// Terminating phase. The namespace stays until [`may_be_removed`].
pub fn mark_terminating(namespace: &mut Value) {
    if !object::is_deleting(namespace) {
        let meta = namespace
            .as_object_mut()
            .map(|o| o.entry("metadata").or_insert_with(|| json!({})));
        if let Some(Value::Object(meta)) = meta {
            meta.insert("deletionTimestamp".into(), json!(object::now()));
            meta.insert("deletionGracePeriodSeconds".into(), json!(0));
        }
    }
    if let Some(status) = field_mut(namespace, "status") {
        status.insert("phase".into(), json!("Terminating"));
    }
}

/// A deleting namespace goes once no finalizer of either kind is left
/// (`ShouldDeleteNamespaceDuringUpdate`).
pub fn may_be_removed(namespace: &Value) -> bool {
    object::is_deleting(namespace)
        && spec_finalizers(namespace).is_empty()
        && object::finalizers(namespace).is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_namespace_gets_the_kubernetes_finalizer_once() {
        let mut plain = json!({"metadata": {"name": "a"}, "status": {"phase": "Terminating"}});
        prepare_for_create(&mut plain);
        assert_eq!(plain["spec"]["finalizers"], json!(["kubernetes"]));
        assert_eq!(plain["status"]["phase"], "Active");

        let mut own = json!({"metadata": {"name": "a"}, "spec": {"finalizers": ["example.com/x"]}});
        prepare_for_create(&mut own);
        assert_eq!(
            own["spec"]["finalizers"],
            json!(["example.com/x", "kubernetes"])
        );

        let mut already = json!({"spec": {"finalizers": ["kubernetes"]}});
        prepare_for_create(&mut already);
        assert_eq!(already["spec"]["finalizers"], json!(["kubernetes"]));
    }

    #[test]
    fn only_finalize_changes_spec_finalizers() {
        let current = json!({"metadata": {"name": "a", "labels": {"x": "1"}},
            "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}});
        let mut edited = json!({"metadata": {"name": "a", "labels": {"x": "2"}}, "spec": {}});
        prepare_for_update(&mut edited, &current);
        assert_eq!(edited["spec"]["finalizers"], json!(["kubernetes"]));
        assert_eq!(edited["metadata"]["labels"]["x"], "2");

        let asked =
            json!({"metadata": {"name": "a", "labels": {"x": "3"}}, "spec": {"finalizers": []}});
        let finalized = finalize(&current, &asked);
        assert_eq!(finalized["spec"]["finalizers"], json!([]));
        assert_eq!(finalized["metadata"]["labels"]["x"], "1");
        let cleared = finalize(&current, &json!({"spec": {}}));
        assert!(spec_finalizers(&cleared).is_empty());
    }

    #[test]
    fn a_deleting_namespace_goes_when_both_finalizer_lists_are_empty() {
        let mut namespace = json!({"metadata": {"name": "a", "finalizers": ["orphan"]},
            "spec": {"finalizers": ["kubernetes"]}});
        assert!(!may_be_removed(&namespace));
        mark_terminating(&mut namespace);
        assert_eq!(namespace["status"]["phase"], "Terminating");
        assert!(object::is_deleting(&namespace));
        assert!(!may_be_removed(&namespace));
        namespace["spec"]["finalizers"] = json!([]);
        assert!(!may_be_removed(&namespace));
        namespace["metadata"]["finalizers"] = json!([]);
        assert!(may_be_removed(&namespace));
    }
}

/// The registry's namespace deletion, against a store in this process.
#[cfg(test)]
mod registry_tests {
    use serde_json::json;

    use crate::registry::{DeleteOptions, Propagation, Target, Write};

    fn target(plural: &str, namespace: Option<&'static str>) -> Target<'static> {
        Target {
            resource: crate::resources::find("", "v1", plural).expect("a core resource"),
            namespace,
        }
    }

    use crate::registry::test_registry as registry;

    #[tokio::test]
    async fn a_deleted_namespace_terminates_until_finalized() {
        let (registry, _dir) = registry().await;
        let write = Write::new("test", false);
        let namespaces = target("namespaces", None);
        let created = registry
            .create(&namespaces, json!({"metadata": {"name": "x"}}), &write)
            .await
            .unwrap();
        assert_eq!(created["spec"]["finalizers"], json!(["kubernetes"]));
        let maps = target("configmaps", Some("x"));
        registry
            .create(&maps, json!({"metadata": {"name": "m"}}), &write)
            .await
            .unwrap();

        let marked = registry
            .delete(&namespaces, "x", &DeleteOptions::default())
            .await
            .unwrap();
        assert_eq!(marked["status"]["phase"], "Terminating");
        assert!(marked["metadata"]["deletionTimestamp"].is_string());
        // Still there, again after a second delete, and closed to new content.
        registry
            .delete(&namespaces, "x", &DeleteOptions::default())
            .await
            .unwrap();
        let held = registry.get(&namespaces, "x").await.unwrap();
        assert_eq!(held["status"]["phase"], "Terminating");
        let refused = registry
            .create(&maps, json!({"metadata": {"name": "n"}}), &write)
            .await
            .unwrap_err();
        assert_eq!(refused.code, 403);

        // A plain update cannot drop the finalizer; /finalize can, and then
        // the namespace goes.
        let mut edited = held.clone();
        edited["spec"]["finalizers"] = json!([]);
        let kept = registry
            .update(&namespaces, "x", edited.clone(), None, &write)
            .await
            .unwrap();
        assert_eq!(kept["spec"]["finalizers"], json!(["kubernetes"]));
        registry
            .update(&namespaces, "x", edited, Some("finalize"), &write)
            .await
            .unwrap();
        let gone = registry.get(&namespaces, "x").await.unwrap_err();
        assert_eq!(gone.code, 404);
    }

    #[tokio::test]
    async fn metadata_finalizers_hold_a_finalized_namespace() {
        let (registry, _dir) = registry().await;
        let write = Write::new("test", false);
        let namespaces = target("namespaces", None);
        let body = json!({"metadata": {"name": "y", "finalizers": ["example.com/hold"]}});
        registry.create(&namespaces, body, &write).await.unwrap();
        let orphan = DeleteOptions {
            propagation: Some(Propagation::Orphan),
            ..DeleteOptions::default()
        };
        let marked = registry.delete(&namespaces, "y", &orphan).await.unwrap();
        assert_eq!(
            marked["metadata"]["finalizers"],
            json!(["example.com/hold", "orphan"])
        );
        let finalized = json!({"metadata": {"name": "y"}, "spec": {"finalizers": []}});
        let held = registry
            .update(&namespaces, "y", finalized, Some("finalize"), &write)
            .await
            .unwrap();
        assert_eq!(held["status"]["phase"], "Terminating");
        let mut released = held.clone();
        released["metadata"]["finalizers"] = json!([]);
        registry
            .update(&namespaces, "y", released, None, &write)
            .await
            .unwrap();
        assert_eq!(registry.get(&namespaces, "y").await.unwrap_err().code, 404);
    }

    #[tokio::test]
    async fn system_namespaces_cannot_be_deleted() {
        let (registry, _dir) = registry().await;
        let namespaces = target("namespaces", None);
        for name in ["default", "kube-system", "kube-public", "kube-node-lease"] {
            let err = registry
                .delete(&namespaces, name, &DeleteOptions::default())
                .await
                .unwrap_err();
            assert_eq!(err.code, 403, "{name}");
            assert_eq!(
                err.message,
                format!("namespaces \"{name}\" is forbidden: this namespace may not be deleted")
            );
        }
    }
}
