//! Expectations: the pods a ReplicaSet's last sync created or deleted that
//! the pod cache has not shown yet, so that a stale cache cannot cause a
//! second create or delete. Not a record of what exists: the cache is.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::watcher;

use crate::common::pods::controller_ref;

/// How long an expectation is trusted before the sync goes ahead anyway
/// (kube-controller-manager's `ExpectationsTimeout`), for observations
/// that were missed.
pub const EXPECTATIONS_TIMEOUT: Duration = Duration::from_secs(5 * 60);

/// Pending creations and deletions, per ReplicaSet key (`namespace/name`).
#[derive(Debug, Default)]
pub struct Expectations {
    pending: HashMap<String, Pending>,
}

#[derive(Debug)]
struct Pending {
    /// Names of created pods not yet seen.
    creations: HashSet<String>,
    /// UIDs of deleted pods still seen without a deletionTimestamp.
    deletions: HashSet<String>,
    /// When the last expectation was set.
    since: Timestamp,
}

impl Pending {
    fn is_empty(&self) -> bool {
        self.creations.is_empty() && self.deletions.is_empty()
    }
}

impl Expectations {
    /// Remembers that the sync of `key` created the pods `names`.
    pub fn expect_creations(
        &mut self,
        key: &str,
        names: impl IntoIterator<Item = String>,
        now: Timestamp,
    ) {
        let pending = self.entry(key, now);
        pending.creations.extend(names);
        self.drop_if_empty(key);
    }

    /// Remembers that the sync of `key` deletes the pods with `uids`.
    pub fn expect_deletions(
        &mut self,
        key: &str,
        uids: impl IntoIterator<Item = String>,
        now: Timestamp,
    ) {
        let pending = self.entry(key, now);
        pending.deletions.extend(uids);
        self.drop_if_empty(key);
    }

    /// A deletion that failed will not be observed: stop waiting for it.
    pub fn deletion_failed(&mut self, key: &str, uid: &str) {
        if let Some(pending) = self.pending.get_mut(key) {
            pending.deletions.remove(uid);
        }
        self.drop_if_empty(key);
    }

    /// A pod watch event: a pod applied (deleted if it has a
    /// deletionTimestamp) or gone.
    pub fn observe_event(&mut self, event: &Result<watcher::Event<Pod>, watcher::Error>) {
        match event {
            Ok(watcher::Event::Apply(pod) | watcher::Event::InitApply(pod)) => {
                self.observe(pod, pod.metadata.deletion_timestamp.is_some());
            }
            Ok(watcher::Event::Delete(pod)) => self.observe(pod, true),
            _ => {}
        }
    }

    /// A pod event from the watch: `deleted` when the pod is gone or
    /// being deleted. Catches pods created and deleted between two syncs.
    pub fn observe(&mut self, pod: &Pod, deleted: bool) {
        let Some(owner) = controller_ref(pod) else {
            return;
        };
        let key = format!(
            "{}/{}",
            pod.metadata.namespace.as_deref().unwrap_or_default(),
            owner.name
        );
        if let Some(pending) = self.pending.get_mut(&key) {
            if let Some(name) = &pod.metadata.name {
                pending.creations.remove(name);
            }
            if let (true, Some(uid)) = (deleted, &pod.metadata.uid) {
                pending.deletions.remove(uid);
            }
        }
        self.drop_if_empty(&key);
    }

    /// Whether `key` may sync: every expectation is observed in `pods`
    /// (the cached pods of its namespace), or they have timed out.
    pub fn satisfied(&mut self, key: &str, pods: &[Arc<Pod>], now: Timestamp) -> bool {
        let Some(pending) = self.pending.get_mut(key) else {
            return true;
        };
        pending.creations.retain(|name| {
            !pods
                .iter()
                .any(|pod| pod.metadata.name.as_deref() == Some(name.as_str()))
        });
        pending.deletions.retain(|uid| {
            pods.iter().any(|pod| {
                pod.metadata.uid.as_deref() == Some(uid.as_str())
                    && pod.metadata.deletion_timestamp.is_none()
            })
        });
        let waited = Duration::try_from(now.duration_since(pending.since)).unwrap_or_default();
        let expired = waited >= EXPECTATIONS_TIMEOUT;
        if expired && !pending.is_empty() {
            tracing::info!(replicaset = key, "expectations timed out; syncing anyway");
        }
        if expired || pending.is_empty() {
            self.pending.remove(key);
            return true;
        }
        false
    }

    /// When the expectations of `key` time out, if any are pending.
    pub fn deadline(&self, key: &str) -> Option<Timestamp> {
        let pending = self.pending.get(key)?;
        pending.since.checked_add(EXPECTATIONS_TIMEOUT).ok()
    }

    /// The ReplicaSet is gone: nothing more to wait for.
    pub fn forget(&mut self, key: &str) {
        self.pending.remove(key);
    }

    fn entry(&mut self, key: &str, now: Timestamp) -> &mut Pending {
        let pending = self
            .pending
            .entry(key.to_string())
            .or_insert_with(|| Pending {
                creations: HashSet::new(),
                deletions: HashSet::new(),
                since: now,
            });
        pending.since = now;
        pending
    }

    fn drop_if_empty(&mut self, key: &str) {
        if self.pending.get(key).is_some_and(Pending::is_empty) {
            self.pending.remove(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::common::fixtures::{pod, replica_set, NOW};

    fn owned(name: &str) -> Arc<Pod> {
        Arc::new(pod(name).owned_by(&replica_set("web", 3)).build())
    }

    #[test]
    fn creations_wait_until_the_cache_shows_the_pods() {
        let mut expectations = Expectations::default();
        expectations.expect_creations("default/web", ["web-a".into(), "web-b".into()], NOW);
        assert!(!expectations.satisfied("default/web", &[], NOW));
        assert!(!expectations.satisfied("default/web", &[owned("web-a")], NOW));
        assert!(expectations.satisfied("default/web", &[owned("web-a"), owned("web-b")], NOW));
        assert!(expectations.deadline("default/web").is_none());
    }

    #[test]
    fn a_watch_event_observes_a_pod_the_cache_no_longer_has() {
        let mut expectations = Expectations::default();
        expectations.expect_creations("default/web", ["web-a".into()], NOW);
        expectations.observe(&owned("web-a"), true);
        assert!(expectations.satisfied("default/web", &[], NOW));
    }

    #[test]
    fn deletions_wait_until_the_pod_is_gone_or_terminating() {
        let mut expectations = Expectations::default();
        let pod = owned("web-a");
        let uid = pod.metadata.uid.clone().unwrap();
        expectations.expect_deletions("default/web", [uid.clone()], NOW);
        assert!(!expectations.satisfied("default/web", std::slice::from_ref(&pod), NOW));
        let mut terminating = (*pod).clone();
        terminating.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(NOW));
        assert!(expectations.satisfied("default/web", &[Arc::new(terminating)], NOW));

        expectations.expect_deletions("default/web", [uid.clone()], NOW);
        expectations.deletion_failed("default/web", &uid);
        assert!(expectations.satisfied("default/web", &[pod], NOW));
    }

    #[test]
    fn expectations_time_out() {
        let mut expectations = Expectations::default();
        expectations.expect_creations("default/web", ["web-a".into()], NOW);
        let deadline = expectations.deadline("default/web").unwrap();
        assert!(!expectations.satisfied("default/web", &[], deadline - Duration::from_secs(1)));
        assert!(expectations.satisfied("default/web", &[], deadline));
    }
}
