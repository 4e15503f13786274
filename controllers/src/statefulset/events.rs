//! The events a StatefulSet records about its pods and their claims, in
//! the v1.33 StatefulSet controller's own words (`recordPodEvent` and
//! `recordClaimEvent` in stateful_pod_control.go): `Successful<Verb>` or
//! `Failed<Verb>` on the StatefulSet.

use k8s_openapi::api::apps::v1::StatefulSet;
use kube::ResourceExt;
use skiff_machinery::events::{Event, EventType};

use crate::common::api::api_message;
use crate::common::events::event;

/// What was done to a pod or claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    Create,
    Delete,
}

impl Verb {
    fn title(self) -> &'static str {
        match self {
            Verb::Create => "Create",
            Verb::Delete => "Delete",
        }
    }

    fn lower(self) -> &'static str {
        match self {
            Verb::Create => "create",
            Verb::Delete => "delete",
        }
    }
}

/// `verb` applied to the pod `pod` of `set`, done or failed with `err`.
pub fn pod_event(set: &StatefulSet, verb: Verb, pod: &str, err: Option<&kube::Error>) -> Event {
    let (set_name, v) = (set.name_any(), verb.lower());
    match err {
        None => event(
            set,
            EventType::Normal,
            &format!("Successful{}", verb.title()),
            format!("{v} Pod {pod} in StatefulSet {set_name} successful"),
        ),
        Some(err) => event(
            set,
            EventType::Warning,
            &format!("Failed{}", verb.title()),
            format!(
                "{v} Pod {pod} in StatefulSet {set_name} failed error: {}",
                api_message(err)
            ),
        ),
    }
}

/// `verb` applied to the claim `claim` of the pod `pod` of `set`.
pub fn claim_event(
    set: &StatefulSet,
    verb: Verb,
    claim: &str,
    pod: &str,
    err: Option<&kube::Error>,
) -> Event {
    let (set_name, v) = (set.name_any(), verb.lower());
    match err {
        None => event(
            set,
            EventType::Normal,
            &format!("Successful{}", verb.title()),
            format!("{v} Claim {claim} Pod {pod} in StatefulSet {set_name} success"),
        ),
        Some(err) => event(
            set,
            EventType::Warning,
            &format!("Failed{}", verb.title()),
            format!(
                "{v} Claim {claim} for Pod {pod} in StatefulSet {set_name} failed error: {}",
                api_message(err)
            ),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::statefulset::fixtures::stateful_set;

    fn refused() -> kube::Error {
        let status = serde_json::json!({"status": "Failure", "code": 403, "reason": "Forbidden",
            "message": "pods \"web-0\" is forbidden: exceeded quota: q"});
        kube::Error::Api(serde_json::from_value(status).unwrap())
    }

    fn described(e: Event) -> (EventType, String, String) {
        assert_eq!(e.regarding.kind.as_deref(), Some("StatefulSet"));
        (e.type_, e.reason, e.message)
    }

    #[test]
    fn pods_are_recorded_in_the_statefulset_controllers_words() {
        let set = stateful_set("web", 3);
        assert_eq!(
            described(pod_event(&set, Verb::Create, "web-0", None)),
            (
                EventType::Normal,
                "SuccessfulCreate".into(),
                "create Pod web-0 in StatefulSet web successful".into()
            )
        );
        assert_eq!(
            described(pod_event(&set, Verb::Delete, "web-2", None)),
            (
                EventType::Normal,
                "SuccessfulDelete".into(),
                "delete Pod web-2 in StatefulSet web successful".into()
            )
        );
        assert_eq!(
            described(pod_event(&set, Verb::Create, "web-0", Some(&refused()))),
            (
                EventType::Warning,
                "FailedCreate".into(),
                "create Pod web-0 in StatefulSet web failed error: pods \"web-0\" is forbidden: exceeded quota: q".into()
            )
        );
    }

    #[test]
    fn claims_are_recorded_in_the_statefulset_controllers_words() {
        let set = stateful_set("web", 3);
        assert_eq!(
            described(claim_event(&set, Verb::Create, "data-web-0", "web-0", None)),
            (
                EventType::Normal,
                "SuccessfulCreate".into(),
                "create Claim data-web-0 Pod web-0 in StatefulSet web success".into()
            )
        );
        assert_eq!(
            described(claim_event(&set, Verb::Create, "data-web-0", "web-0", Some(&refused()))).2,
            "create Claim data-web-0 for Pod web-0 in StatefulSet web failed error: pods \"web-0\" is forbidden: exceeded quota: q"
        );
    }
}
