//! The events a Deployment's ReplicaSet writes are recorded with, as the
//! v1.33 Deployment controller records them (`scaleReplicaSet` and
//! `getNewReplicaSet` in pkg/controller/deployment/sync.go).

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use kube::ResourceExt;
use skiff_machinery::events::{Event, EventType};

use super::plan::{spec_replicas, ReplicaSetWrite};
use crate::common::api::api_message;
use crate::common::events::{event, namespace_terminating};

/// `ScalingReplicaSet`.
pub const SCALING_REPLICA_SET: &str = "ScalingReplicaSet";
/// `FailedRSCreateReason`.
pub const FAILED_RS_CREATE: &str = "ReplicaSetCreateError";

/// The event of `write` once done, if it changes a ReplicaSet's size:
/// a new one created with replicas, or `before` resized.
pub fn replica_set_written(
    d: &Deployment,
    write: &ReplicaSetWrite,
    before: Option<&ReplicaSet>,
) -> Option<Event> {
    match write {
        ReplicaSetWrite::Create(rs) if spec_replicas(rs) > 0 => {
            Some(scaled(d, &rs.name_any(), 0, spec_replicas(rs)))
        }
        ReplicaSetWrite::Update(rs) => {
            let from = spec_replicas(before?);
            let to = spec_replicas(rs);
            (from != to).then(|| scaled(d, &rs.name_any(), from, to))
        }
        _ => None,
    }
}

/// "Scaled up|down replica set NAME from FROM to TO".
fn scaled(d: &Deployment, name: &str, from: i32, to: i32) -> Event {
    let direction = if from < to { "up" } else { "down" };
    event(
        d,
        EventType::Normal,
        SCALING_REPLICA_SET,
        format!("Scaled {direction} replica set {name} from {from} to {to}"),
    )
}

/// The new ReplicaSet `name` could not be created; none while the
/// namespace is being deleted.
pub fn replica_set_create_failed(d: &Deployment, name: &str, err: &kube::Error) -> Option<Event> {
    (!namespace_terminating(err)).then(|| {
        event(
            d,
            EventType::Warning,
            FAILED_RS_CREATE,
            format!(
                "Failed to create new replica set {name:?}: {}",
                api_message(err)
            ),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::common::fixtures::replica_set;

    fn deployment() -> Deployment {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web", "namespace": "default", "uid": "uid-d"},
        }))
        .unwrap()
    }

    fn message(event: Option<Event>) -> (EventType, String, String) {
        let event = event.expect("an event");
        assert_eq!(event.regarding.kind.as_deref(), Some("Deployment"));
        (event.type_, event.reason, event.message)
    }

    #[test]
    fn scaling_a_replica_set_is_recorded_on_the_deployment() {
        let d = deployment();
        let created = ReplicaSetWrite::Create(replica_set("web-5d8f", 3));
        assert_eq!(
            message(replica_set_written(&d, &created, None)),
            (
                EventType::Normal,
                "ScalingReplicaSet".into(),
                "Scaled up replica set web-5d8f from 0 to 3".into()
            )
        );
        let old = replica_set("web-5d8f", 3);
        let down = ReplicaSetWrite::Update(replica_set("web-5d8f", 1));
        assert_eq!(
            message(replica_set_written(&d, &down, Some(&old))),
            (
                EventType::Normal,
                "ScalingReplicaSet".into(),
                "Scaled down replica set web-5d8f from 3 to 1".into()
            )
        );
        let up = ReplicaSetWrite::Update(replica_set("web-5d8f", 5));
        assert_eq!(
            message(replica_set_written(&d, &up, Some(&old))).2,
            "Scaled up replica set web-5d8f from 3 to 5"
        );
    }

    #[test]
    fn writes_that_do_not_resize_are_not_recorded() {
        let d = deployment();
        let old = replica_set("web-5d8f", 3);
        let annotated = ReplicaSetWrite::Update(replica_set("web-5d8f", 3));
        assert!(replica_set_written(&d, &annotated, Some(&old)).is_none());
        let empty = ReplicaSetWrite::Create(replica_set("web-5d8f", 0));
        assert!(replica_set_written(&d, &empty, None).is_none());
    }

    #[test]
    fn a_failed_create_is_a_warning_with_the_apiservers_message() {
        let status = serde_json::json!({"status": "Failure", "code": 403, "reason": "Forbidden",
            "message": "replicasets.apps \"web-5d8f\" is forbidden: exceeded quota: q"});
        let err = kube::Error::Api(serde_json::from_value(status).unwrap());
        assert_eq!(
            message(replica_set_create_failed(&deployment(), "web-5d8f", &err)),
            (
                EventType::Warning,
                "ReplicaSetCreateError".into(),
                "Failed to create new replica set \"web-5d8f\": replicasets.apps \"web-5d8f\" is forbidden: exceeded quota: q".into()
            )
        );
    }
}
