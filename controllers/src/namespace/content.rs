//! What is in a namespace to delete (every namespaced resource discovery
//! reports that can be listed and deleted, CRDs' included) and what a
//! pass over it left behind.

use std::collections::BTreeMap;

use jiff::Timestamp;
use kube::core::ObjectMeta;
use kube::discovery::{verbs, ApiCapabilities, ApiResource, Scope};

/// A namespaced resource whose objects the namespace controller deletes.
#[derive(Debug, Clone)]
pub struct ContentResource {
    pub resource: ApiResource,
    /// Served with `deletecollection`; otherwise listed and deleted one by
    /// one.
    pub delete_collection: bool,
}

impl ContentResource {
    /// As kube names a group-version-resource in its conditions:
    /// `pods.` for core, `deployments.apps` otherwise.
    pub fn label(&self) -> String {
        format!("{}.{}", self.resource.plural, self.resource.group)
    }
}

/// The resources a namespace's content is made of, in a stable order
/// (group, then resource) so that passes and logs read the same each time.
pub fn content_resources(found: Vec<(ApiResource, ApiCapabilities)>) -> Vec<ContentResource> {
    let mut content: Vec<ContentResource> = found
        .into_iter()
        .filter(|(_, caps)| caps.scope == Scope::Namespaced)
        .filter(|(_, caps)| {
            caps.supports_operation(verbs::LIST) && caps.supports_operation(verbs::DELETE)
        })
        .map(|(resource, caps)| ContentResource {
            delete_collection: caps.supports_operation(verbs::DELETE_COLLECTION),
            resource,
        })
        .collect();
    content.sort_by(|a, b| {
        (&a.resource.group, &a.resource.plural).cmp(&(&b.resource.group, &b.resource.plural))
    });
    content.dedup_by(|a, b| {
        a.resource.group == b.resource.group && a.resource.plural == b.resource.plural
    });
    content
}

/// What one pass of deletion found: failures and what is left.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Pass {
    /// Discovery failed (for some groups, or all).
    pub discovery_errors: Vec<String>,
    /// Deleting or listing a resource failed.
    pub content_errors: Vec<String>,
    /// Objects left per resource label (`pods.`), e.g. pods terminating.
    pub remaining: BTreeMap<String, usize>,
    /// Objects left per finalizer they carry.
    pub finalizers: BTreeMap<String, usize>,
    /// Seconds until the slowest remaining pod's graceful termination ends.
    pub pod_grace_seconds: i64,
}

impl Pass {
    /// Nothing failed and nothing is left: the namespace may be finalized.
    pub fn is_empty(&self) -> bool {
        self.discovery_errors.is_empty()
            && self.content_errors.is_empty()
            && self.remaining.is_empty()
    }

    /// Records the objects of `resource` still there after its deletion.
    pub fn observe_remaining(
        &mut self,
        resource: &ContentResource,
        left: &[ObjectMeta],
        now: Timestamp,
    ) {
        if left.is_empty() {
            return;
        }
        self.remaining.insert(resource.label(), left.len());
        for finalizer in left.iter().flat_map(|m| m.finalizers.iter().flatten()) {
            *self.finalizers.entry(finalizer.clone()).or_insert(0) += 1;
        }
        if resource.resource.group.is_empty() && resource.resource.plural == "pods" {
            let estimate = left
                .iter()
                .map(|m| pod_grace_left(m, now))
                .max()
                .unwrap_or(0);
            self.pod_grace_seconds = self.pod_grace_seconds.max(estimate);
        }
    }
}

/// kube's default terminationGracePeriodSeconds, for a pod not yet deleted.
const DEFAULT_POD_GRACE_SECONDS: i64 = 30;

/// Seconds until a pod's graceful termination ends: its deletion timestamp
/// is when the grace period runs out.
fn pod_grace_left(meta: &ObjectMeta, now: Timestamp) -> i64 {
    match &meta.deletion_timestamp {
        Some(at) => at.0.duration_since(now).as_secs().max(0),
        None => DEFAULT_POD_GRACE_SECONDS,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn found(
        group: &str,
        plural: &str,
        scope: Scope,
        ops: &[&str],
    ) -> (ApiResource, ApiCapabilities) {
        let api_version = match group {
            "" => "v1".to_string(),
            g => format!("{g}/v1"),
        };
        (
            ApiResource {
                group: group.into(),
                version: "v1".into(),
                api_version,
                kind: plural.into(),
                plural: plural.into(),
            },
            ApiCapabilities {
                scope,
                subresources: Vec::new(),
                operations: ops.iter().map(|o| o.to_string()).collect(),
            },
        )
    }

    const ALL: &[&str] = &["list", "delete", "deletecollection"];

    #[test]
    fn namespaced_deletable_resources_in_a_stable_order() {
        let content = content_resources(vec![
            found("", "pods", Scope::Namespaced, ALL),
            found("apps", "deployments", Scope::Namespaced, ALL),
            found("", "nodes", Scope::Cluster, ALL),
            found(
                "example.com",
                "widgets",
                Scope::Namespaced,
                &["list", "delete"],
            ),
            found("", "bindings", Scope::Namespaced, &["create"]),
            found("", "configmaps", Scope::Namespaced, ALL),
        ]);
        let labels: Vec<String> = content.iter().map(ContentResource::label).collect();
        assert_eq!(
            labels,
            [
                "configmaps.",
                "pods.",
                "deployments.apps",
                "widgets.example.com"
            ]
        );
        assert!(content[0].delete_collection);
        assert!(
            !content[3].delete_collection,
            "no deletecollection: one by one"
        );
    }

    #[test]
    fn a_pass_counts_what_is_left_and_how_long_pods_need() {
        let now = Timestamp::from_second(1_000).unwrap();
        let pods = content_resources(vec![found("", "pods", Scope::Namespaced, ALL)]).remove(0);
        let maps =
            content_resources(vec![found("", "configmaps", Scope::Namespaced, ALL)]).remove(0);
        let terminating = ObjectMeta {
            deletion_timestamp: Some(Time(Timestamp::from_second(1_012).unwrap())),
            ..ObjectMeta::default()
        };
        let held = ObjectMeta {
            finalizers: Some(vec!["example.com/hold".into()]),
            ..ObjectMeta::default()
        };
        let mut pass = Pass::default();
        assert!(pass.is_empty());
        pass.observe_remaining(&pods, &[terminating], now);
        pass.observe_remaining(&maps, &[held.clone(), held], now);
        pass.observe_remaining(&maps, &[], now);
        assert_eq!(pass.pod_grace_seconds, 12);
        assert_eq!(pass.remaining["pods."], 1);
        assert_eq!(pass.remaining["configmaps."], 2);
        assert_eq!(pass.finalizers["example.com/hold"], 2);
        assert!(!pass.is_empty());
    }
}
