//! The events the workload controllers share, as kube-controller-manager's
//! `controller_utils` records them about a pod's owner (reason, type and
//! message as Kubernetes v1.33 writes them); each built as a value for the
//! shared recorder, so that its wording is tested beside it.

use kube::Resource;
use skiff_machinery::events::{reference, Event, EventType};

use super::api::api_message;

/// `SuccessfulCreatePodReason`.
pub const SUCCESSFUL_CREATE: &str = "SuccessfulCreate";
/// `FailedCreatePodReason`.
pub const FAILED_CREATE: &str = "FailedCreate";
/// `SuccessfulDeletePodReason`.
pub const SUCCESSFUL_DELETE: &str = "SuccessfulDelete";
/// `FailedDeletePodReason`.
pub const FAILED_DELETE: &str = "FailedDelete";

/// An event of `type_` about `object`.
pub fn event<K>(object: &K, type_: EventType, reason: &str, message: String) -> Event
where
    K: Resource<DynamicType = ()>,
{
    Event {
        regarding: reference(object),
        type_,
        reason: reason.to_string(),
        message,
    }
}

/// `owner` created the pod `pod` (`RealPodControl.createPods`).
pub fn pod_created<K>(owner: &K, pod: &str) -> Event
where
    K: Resource<DynamicType = ()>,
{
    event(
        owner,
        EventType::Normal,
        SUCCESSFUL_CREATE,
        format!("Created pod: {pod}"),
    )
}

/// `owner` could not create a pod; none while the namespace is being
/// deleted, as every create then fails (`RealPodControl.createPods`).
pub fn pod_create_failed<K>(owner: &K, err: &kube::Error) -> Option<Event>
where
    K: Resource<DynamicType = ()>,
{
    if namespace_terminating(err) {
        return None;
    }
    Some(event(
        owner,
        EventType::Warning,
        FAILED_CREATE,
        format!("Error creating: {}", api_message(err)),
    ))
}

/// `owner` deleted the pod `pod` (`RealPodControl.DeletePod`).
pub fn pod_deleted<K>(owner: &K, pod: &str) -> Event
where
    K: Resource<DynamicType = ()>,
{
    event(
        owner,
        EventType::Normal,
        SUCCESSFUL_DELETE,
        format!("Deleted pod: {pod}"),
    )
}

/// `owner` could not delete a pod (`RealPodControl.DeletePod`).
pub fn pod_delete_failed<K>(owner: &K, err: &kube::Error) -> Event
where
    K: Resource<DynamicType = ()>,
{
    event(
        owner,
        EventType::Warning,
        FAILED_DELETE,
        format!("Error deleting: {}", api_message(err)),
    )
}

/// The API refused a create because the namespace is being deleted (a
/// `NamespaceTerminating` cause).
pub fn namespace_terminating(err: &kube::Error) -> bool {
    let kube::Error::Api(status) = err else {
        return false;
    };
    status
        .details
        .as_ref()
        .is_some_and(|d| d.causes.iter().any(|c| c.reason == "NamespaceTerminating"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::common::fixtures::replica_set;

    fn refused(status: serde_json::Value) -> kube::Error {
        kube::Error::Api(serde_json::from_value(status).unwrap())
    }

    #[test]
    fn pod_writes_are_recorded_on_the_owner_as_controller_utils_words_them() {
        let rs = replica_set("web", 1);
        let created = pod_created(&rs, "web-x7k2p");
        assert_eq!(created.regarding.kind.as_deref(), Some("ReplicaSet"));
        assert_eq!(created.regarding.name.as_deref(), Some("web"));
        assert_eq!(
            (
                created.type_,
                created.reason.as_str(),
                created.message.as_str()
            ),
            (
                EventType::Normal,
                "SuccessfulCreate",
                "Created pod: web-x7k2p"
            )
        );
        let deleted = pod_deleted(&rs, "web-x7k2p");
        assert_eq!(
            (
                deleted.type_,
                deleted.reason.as_str(),
                deleted.message.as_str()
            ),
            (
                EventType::Normal,
                "SuccessfulDelete",
                "Deleted pod: web-x7k2p"
            )
        );
    }

    #[test]
    fn failed_pod_writes_carry_the_apiservers_message() {
        let rs = replica_set("web", 1);
        let quota = refused(serde_json::json!({
            "kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 403,
            "reason": "Forbidden",
            "message": "pods \"web-x\" is forbidden: exceeded quota: q, requested: pods=1, used: pods=1, limited: pods=1",
        }));
        let failed = pod_create_failed(&rs, &quota).unwrap();
        assert_eq!(failed.type_, EventType::Warning);
        assert_eq!(failed.reason, "FailedCreate");
        assert_eq!(
            failed.message,
            "Error creating: pods \"web-x\" is forbidden: exceeded quota: q, requested: pods=1, used: pods=1, limited: pods=1"
        );
        let not_deleted = pod_delete_failed(&rs, &quota);
        assert_eq!(not_deleted.type_, EventType::Warning);
        assert_eq!(not_deleted.reason, "FailedDelete");
        assert!(not_deleted
            .message
            .starts_with("Error deleting: pods \"web-x\" is forbidden"));
    }

    #[test]
    fn no_create_failure_is_recorded_while_the_namespace_terminates() {
        let rs = replica_set("web", 1);
        let terminating = refused(serde_json::json!({
            "kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 403,
            "reason": "Forbidden",
            "message": "pods \"web-x\" is forbidden: unable to create new content in namespace default because it is being terminated",
            "details": {"name": "web-x", "kind": "pods", "causes": [{
                "reason": "NamespaceTerminating",
                "message": "namespace default is being terminated",
                "field": "metadata.namespace"}]},
        }));
        assert!(pod_create_failed(&rs, &terminating).is_none());
    }
}
