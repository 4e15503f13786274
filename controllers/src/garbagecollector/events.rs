//! The event the garbage collector records about a dependent whose owner
//! reference cannot be honoured (`reportInvalidNamespaceOwnerRef` of the
//! v1.33 graph builder): a namespaced owner in another namespace, or a
//! namespaced owner kind named by a cluster-scoped object.

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use skiff_machinery::events::{Event, EventType};

use super::graph::ObjectIdentity;

/// The source of its events, as kube-controller-manager names it.
pub const COMPONENT: &str = "garbage-collector-controller";

/// `dependent` names `owner`, which is not in its namespace.
pub fn owner_ref_invalid_namespace(dependent: &ObjectIdentity, owner: &OwnerReference) -> Event {
    let namespace = dependent.namespace.clone().unwrap_or_default();
    Event {
        regarding: ObjectReference {
            api_version: Some(dependent.api_version.clone()),
            kind: Some(dependent.kind.clone()),
            namespace: dependent.namespace.clone(),
            name: Some(dependent.name.clone()),
            uid: Some(dependent.uid.clone()),
            ..ObjectReference::default()
        },
        type_: EventType::Warning,
        reason: "OwnerRefInvalidNamespace".into(),
        // objectReference.String() of the owner, in the dependent's namespace.
        message: format!(
            "ownerRef [{}/{}, namespace: {namespace}, name: {}, uid: {}] does not exist in namespace {namespace:?}",
            owner.api_version, owner.kind, owner.name, owner.uid
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_owner_in_another_namespace_is_warned_about_on_the_dependent() {
        let dependent = ObjectIdentity {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            namespace: Some("team-b".into()),
            name: "settings".into(),
            uid: "uid-cm".into(),
        };
        let owner = OwnerReference {
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            name: "web".into(),
            uid: "uid-web".into(),
            ..OwnerReference::default()
        };
        let event = owner_ref_invalid_namespace(&dependent, &owner);
        assert_eq!(event.regarding.kind.as_deref(), Some("ConfigMap"));
        assert_eq!(event.regarding.namespace.as_deref(), Some("team-b"));
        assert_eq!(event.type_, EventType::Warning);
        assert_eq!(event.reason, "OwnerRefInvalidNamespace");
        assert_eq!(
            event.message,
            "ownerRef [apps/v1/Deployment, namespace: team-b, name: web, uid: uid-web] does not exist in namespace \"team-b\""
        );
    }
}
