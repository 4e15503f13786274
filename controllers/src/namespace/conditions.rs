//! The conditions a terminating namespace reports, with kube's types,
//! reasons and messages, so that `kubectl describe namespace` shows why a
//! deletion is taking long.

use jiff::Timestamp;
use k8s_openapi::api::core::v1::NamespaceCondition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::content::Pass;

/// The condition types, in the order kube writes them.
pub const DISCOVERY_FAILURE: &str = "NamespaceDeletionDiscoveryFailure";
pub const GROUP_VERSION_PARSING_FAILURE: &str = "NamespaceDeletionGroupVersionParsingFailure";
pub const CONTENT_FAILURE: &str = "NamespaceDeletionContentFailure";
pub const CONTENT_REMAINING: &str = "NamespaceContentRemaining";
pub const FINALIZERS_REMAINING: &str = "NamespaceFinalizersRemaining";

fn condition(type_: &str, failed: bool, reason: &str, message: String) -> NamespaceCondition {
    NamespaceCondition {
        type_: type_.to_string(),
        status: if failed { "True" } else { "False" }.to_string(),
        reason: Some(reason.to_string()),
        message: Some(message),
        last_transition_time: None,
    }
}

/// The five conditions a deletion pass leads to (without times).
pub fn of_pass(pass: &Pass) -> Vec<NamespaceCondition> {
    let discovery = match pass.discovery_errors.is_empty() {
        true => condition(
            DISCOVERY_FAILURE,
            false,
            "ResourcesDiscovered",
            "All resources successfully discovered".into(),
        ),
        false => condition(
            DISCOVERY_FAILURE,
            true,
            "DiscoveryFailed",
            format!(
                "Discovery failed for some groups, {} failing: {}",
                pass.discovery_errors.len(),
                pass.discovery_errors.join(", ")
            ),
        ),
    };
    let parsing = condition(
        GROUP_VERSION_PARSING_FAILURE,
        false,
        "ParsedGroupVersions",
        "All legacy kube types successfully parsed".into(),
    );
    let content = match pass.content_errors.is_empty() {
        true => condition(
            CONTENT_FAILURE,
            false,
            "ContentDeleted",
            "All content successfully deleted, may be waiting on finalization".into(),
        ),
        false => condition(
            CONTENT_FAILURE,
            true,
            "ContentDeletionFailed",
            format!(
                "Failed to delete all resource types, {} remaining: {}",
                pass.content_errors.len(),
                pass.content_errors.join(", ")
            ),
        ),
    };
    let remaining = match pass.remaining.is_empty() {
        true => condition(
            CONTENT_REMAINING,
            false,
            "ContentRemoved",
            "All content successfully removed".into(),
        ),
        false => {
            let what: Vec<String> = pass
                .remaining
                .iter()
                .map(|(resource, count)| format!("{resource} has {count} resource instances"))
                .collect();
            condition(
                CONTENT_REMAINING,
                true,
                "SomeResourcesRemain",
                format!("Some resources are remaining: {}", what.join(", ")),
            )
        }
    };
    let finalizers = match pass.finalizers.is_empty() {
        true => condition(
            FINALIZERS_REMAINING,
            false,
            "ContentHasNoFinalizers",
            "All content-preserving finalizers finished".into(),
        ),
        false => {
            let what: Vec<String> = pass
                .finalizers
                .iter()
                .map(|(finalizer, count)| format!("{finalizer} in {count} resource instances"))
                .collect();
            condition(
                FINALIZERS_REMAINING,
                true,
                "SomeFinalizersRemain",
                format!(
                    "Some content in the namespace has finalizers remaining: {}",
                    what.join(", ")
                ),
            )
        }
    };
    vec![discovery, parsing, content, remaining, finalizers]
}

/// `current` with `wanted` merged in: a condition that did not change
/// keeps its transition time, a changed or new one gets `now`; conditions
/// of other types stay.
pub fn merge(
    current: &[NamespaceCondition],
    wanted: Vec<NamespaceCondition>,
    now: Timestamp,
) -> Vec<NamespaceCondition> {
    let mut merged: Vec<NamespaceCondition> = current
        .iter()
        .filter(|c| !wanted.iter().any(|w| w.type_ == c.type_))
        .cloned()
        .collect();
    for mut condition in wanted {
        let same = current.iter().find(|c| {
            c.type_ == condition.type_
                && c.status == condition.status
                && c.reason == condition.reason
                && c.message == condition.message
        });
        condition.last_transition_time = match same {
            Some(old) => old.last_transition_time.clone(),
            None => Some(Time(now)),
        };
        merged.push(condition);
    }
    merged
}

#[cfg(test)]
mod tests {
    use super::*;

    fn find<'a>(conditions: &'a [NamespaceCondition], type_: &str) -> &'a NamespaceCondition {
        conditions.iter().find(|c| c.type_ == type_).unwrap()
    }

    #[test]
    fn remaining_content_and_finalizers_are_reported_as_kube_words_them() {
        let mut pass = Pass::default();
        pass.remaining.insert("pods.".into(), 2);
        pass.remaining.insert("widgets.example.com".into(), 1);
        pass.finalizers.insert("example.com/hold".into(), 1);
        let conditions = of_pass(&pass);
        assert_eq!(conditions.len(), 5);
        let remaining = find(&conditions, CONTENT_REMAINING);
        assert_eq!(remaining.status, "True");
        assert_eq!(remaining.reason.as_deref(), Some("SomeResourcesRemain"));
        assert_eq!(
            remaining.message.as_deref(),
            Some("Some resources are remaining: pods. has 2 resource instances, widgets.example.com has 1 resource instances")
        );
        let finalizers = find(&conditions, FINALIZERS_REMAINING);
        assert_eq!(
            finalizers.message.as_deref(),
            Some("Some content in the namespace has finalizers remaining: example.com/hold in 1 resource instances")
        );
        assert_eq!(find(&conditions, CONTENT_FAILURE).status, "False");
        assert_eq!(find(&conditions, DISCOVERY_FAILURE).status, "False");
    }

    #[test]
    fn failures_are_reported_true() {
        let pass = Pass {
            discovery_errors: vec!["metrics.k8s.io/v1beta1: 503".into()],
            content_errors: vec!["widgets.example.com: forbidden".into()],
            ..Pass::default()
        };
        let conditions = of_pass(&pass);
        let discovery = find(&conditions, DISCOVERY_FAILURE);
        assert_eq!(discovery.status, "True");
        assert_eq!(
            discovery.message.as_deref(),
            Some("Discovery failed for some groups, 1 failing: metrics.k8s.io/v1beta1: 503")
        );
        let content = find(&conditions, CONTENT_FAILURE);
        assert_eq!(content.reason.as_deref(), Some("ContentDeletionFailed"));
        assert_eq!(
            content.message.as_deref(),
            Some(
                "Failed to delete all resource types, 1 remaining: widgets.example.com: forbidden"
            )
        );
    }

    #[test]
    fn unchanged_conditions_keep_their_transition_time() {
        let then = Timestamp::from_second(100).unwrap();
        let now = Timestamp::from_second(200).unwrap();
        let mut busy = Pass::default();
        busy.remaining.insert("pods.".into(), 1);
        let first = merge(&[], of_pass(&busy), then);
        assert!(first
            .iter()
            .all(|c| c.last_transition_time == Some(Time(then))));
        let again = merge(&first, of_pass(&busy), now);
        assert_eq!(again, first);
        let done = merge(&again, of_pass(&Pass::default()), now);
        assert_eq!(
            find(&done, CONTENT_REMAINING).last_transition_time,
            Some(Time(now))
        );
        assert_eq!(
            find(&done, DISCOVERY_FAILURE).last_transition_time,
            Some(Time(then))
        );
    }
}
