//! The namespace controller: empties a namespace being deleted (every
//! namespaced resource discovery reports), reports its progress in the
//! namespace's conditions, and removes the `kubernetes` finalizer through
//! `/finalize` once nothing is left, so that the apiserver removes it.
//! Refusing new content in a terminating namespace is the apiserver's
//! (NamespaceLifecycle admission).

pub mod conditions;
pub mod content;
mod deleter;

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::controller::{trigger_self, Action, Config};
use kube::runtime::WatchStreamExt;
use kube::{Api, Client, ResourceExt};

use crate::common::informers::Informers;
use crate::common::workqueue;
use crate::manager::Controller;
use content::Pass;

/// The `namespace` controller of the controller-manager.
pub const CONTROLLER: Controller = Controller {
    name: "namespace",
    run: |informers, _settings| Box::pin(run(informers)),
};

/// The finalizer this controller owns on every namespace.
pub const FINALIZER_KUBERNETES: &str = "kubernetes";

/// Namespaces synced at once (`--concurrent-namespace-syncs`).
const CONCURRENT_SYNCS: u16 = 10;
/// Longest wait before looking again at a namespace whose content is not
/// gone yet (pods may finish terminating sooner than their grace period).
const RECHECK_MAX: Duration = Duration::from_secs(5);

/// Why a sync failed; retried after a pause.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{action} namespace {name}: {source}")]
    Api {
        name: String,
        action: &'static str,
        #[source]
        source: kube::Error,
    },
}

/// Watches namespaces and empties those being deleted, until aborted.
pub async fn run(informers: Arc<Informers>) {
    let client = informers.client();
    let (store, events) = informers.all::<Namespace>().await.into_parts();
    workqueue::applier(
        informers.workqueue("namespace"),
        |namespace, client| Box::pin(reconcile(namespace, client)),
        error_policy,
        Arc::new(client),
        store,
        trigger_self(events.touched_objects(), ()),
        Config::default().concurrency(CONCURRENT_SYNCS),
    )
    .for_each(|result| async move {
        if let Err(err) = result {
            tracing::debug!(error = %err, "namespace controller");
        }
    })
    .await;
}

fn error_policy(namespace: Arc<Namespace>, err: &Error, _client: Arc<Client>) -> Action {
    tracing::warn!(namespace = %namespace.name_any(), error = %err, "namespace sync failed");
    Action::requeue(Duration::from_secs(2))
}

/// Whether this controller still has work on `namespace`: it is being
/// deleted and still carries the `kubernetes` finalizer.
pub fn awaits_deletion(namespace: &Namespace) -> bool {
    namespace.metadata.deletion_timestamp.is_some()
        && spec_finalizers(namespace)
            .iter()
            .any(|f| f == FINALIZER_KUBERNETES)
}

fn spec_finalizers(namespace: &Namespace) -> Vec<String> {
    namespace
        .spec
        .as_ref()
        .and_then(|s| s.finalizers.clone())
        .unwrap_or_default()
}

/// When to look again after a pass that left content behind: once the
/// slowest pod's grace period has run, but at least every [`RECHECK_MAX`].
pub fn recheck_after(pass: &Pass) -> Duration {
    let grace = Duration::from_secs(pass.pod_grace_seconds.max(1).unsigned_abs());
    grace.min(RECHECK_MAX)
}

async fn reconcile(namespace: Arc<Namespace>, client: Arc<Client>) -> Result<Action, Error> {
    if !awaits_deletion(&namespace) {
        return Ok(Action::await_change());
    }
    let name = namespace.name_any();
    let pass = deleter::delete_content(&client, &name).await;
    let api = Api::<Namespace>::all((*client).clone());
    // The finalize below must carry the resourceVersion the conditions left.
    let namespace = write_conditions(&api, &namespace, &pass)
        .await?
        .unwrap_or_else(|| (*namespace).clone());
    if !pass.is_empty() {
        tracing::debug!(namespace = %name, remaining = ?pass.remaining, errors = ?pass.content_errors, "namespace content remains");
        return Ok(Action::requeue(recheck_after(&pass)));
    }
    let mut finalized = namespace.clone();
    let mut finalizers = spec_finalizers(&namespace);
    finalizers.retain(|f| f != FINALIZER_KUBERNETES);
    finalized
        .spec
        .get_or_insert_with(Default::default)
        .finalizers = Some(finalizers);
    finalized.metadata.managed_fields = None;
    api.replace_subresource("finalize", &name, &PostParams::default(), &finalized)
        .await
        .map_err(|source| Error::Api {
            name: name.clone(),
            action: "finalize",
            source,
        })?;
    tracing::info!(namespace = %name, "namespace emptied and finalized");
    Ok(Action::await_change())
}

/// Writes the deletion conditions when they changed; the namespace as
/// written, if it was.
async fn write_conditions(
    api: &Api<Namespace>,
    namespace: &Namespace,
    pass: &Pass,
) -> Result<Option<Namespace>, Error> {
    let current = namespace
        .status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default();
    let next = conditions::merge(&current, conditions::of_pass(pass), Timestamp::now());
    if next == current {
        return Ok(None);
    }
    let patch = serde_json::json!({"status": {"conditions": next}});
    api.patch_status(
        &namespace.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await
    .map(Some)
    .map_err(|source| Error::Api {
        name: namespace.name_any(),
        action: "update the conditions of",
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn namespace(deleting: bool, finalizers: &[&str]) -> Namespace {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "x", "deletionTimestamp": deleting.then_some("2026-01-01T00:00:00Z")},
            "spec": {"finalizers": finalizers},
        }))
        .unwrap()
    }

    #[test]
    fn only_deleting_namespaces_with_the_kubernetes_finalizer_are_emptied() {
        assert!(awaits_deletion(&namespace(true, &["kubernetes"])));
        assert!(!awaits_deletion(&namespace(false, &["kubernetes"])));
        assert!(!awaits_deletion(&namespace(true, &[])));
        assert!(!awaits_deletion(&namespace(true, &["example.com/other"])));
    }

    #[test]
    fn content_left_is_looked_at_again_within_the_pods_grace() {
        let mut pass = Pass::default();
        assert_eq!(recheck_after(&pass), Duration::from_secs(1));
        pass.pod_grace_seconds = 3;
        assert_eq!(recheck_after(&pass), Duration::from_secs(3));
        pass.pod_grace_seconds = 30;
        assert_eq!(recheck_after(&pass), RECHECK_MAX);
    }
}
