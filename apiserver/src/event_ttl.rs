//! Events expire, as kube-apiserver's do (`--event-ttl`, one hour by
//! default): every write of an Event attaches it to a store lease, and the
//! store deletes it when the lease runs out, so a cluster's events do not
//! grow without bound. The watch cache sees the deletion like any other,
//! and watchers get a DELETED event.
//!
//! A lease per event would be a lease grant per event write. As
//! kube-apiserver does, one lease serves every event written within a short
//! window after its grant (a twentieth of the TTL, at most a minute), and
//! is granted for the TTL plus that window, so that every event lives at
//! least the TTL and at most the TTL plus the window.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::resources::ResourceType;
use crate::storage::{Storage, StorageResult};

/// The longest a lease is reused for new writes.
const MAX_REUSE: Duration = Duration::from_secs(60);
/// The share of the TTL a lease is reused for, below `MAX_REUSE`.
const REUSE_SHARE: f64 = 0.05;

/// The leases events are written with.
pub struct EventTtl {
    ttl: Duration,
    reuse: Duration,
    current: Mutex<Option<Lease>>,
}

#[derive(Clone, Copy)]
struct Lease {
    id: i64,
    granted: Instant,
}

impl EventTtl {
    pub fn new(ttl: Duration) -> EventTtl {
        EventTtl {
            ttl,
            reuse: ttl.mul_f64(REUSE_SHARE).min(MAX_REUSE),
            current: Mutex::new(None),
        }
    }

    /// Whether objects of `resource` expire: Events.
    pub fn applies_to(resource: &ResourceType) -> bool {
        resource.group.is_empty() && resource.plural == "events"
    }

    /// The seconds a new lease is granted for: the TTL and the reuse
    /// window, rounded up.
    fn lease_seconds(&self) -> i64 {
        (self.ttl + self.reuse).as_secs_f64().ceil().max(1.0) as i64
    }

    /// The lease to write an event with: the current one while it is
    /// within its reuse window, else a new one.
    pub async fn lease(&self, storage: &Storage) -> StorageResult<i64> {
        if let Some(lease) = *self.lock() {
            if lease.granted.elapsed() < self.reuse {
                return Ok(lease.id);
            }
        }
        let granted = Instant::now();
        let id = storage.grant_lease(self.lease_seconds()).await?;
        *self.lock() = Some(Lease { id, granted });
        Ok(id)
    }

    /// Lease `id` is gone from the store (a write named it and failed):
    /// the next write gets a new one.
    pub fn forget(&self, id: i64) {
        let mut current = self.lock();
        if current.is_some_and(|lease| lease.id == id) {
            *current = None;
        }
    }

    // A poisoned lock still holds a whole `Option<Lease>`.
    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Lease>> {
        self.current.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reuse_window_is_a_twentieth_of_the_ttl_and_at_most_a_minute() {
        let hour = EventTtl::new(Duration::from_secs(3600));
        assert_eq!(hour.reuse, Duration::from_secs(60));
        assert_eq!(hour.lease_seconds(), 3660);
        let short = EventTtl::new(Duration::from_secs(100));
        assert_eq!(short.reuse, Duration::from_secs(5));
        assert_eq!(short.lease_seconds(), 105);
        let tiny = EventTtl::new(Duration::from_millis(100));
        assert_eq!(tiny.lease_seconds(), 1);
    }

    #[test]
    fn only_events_expire() {
        let find = |plural: &str| {
            crate::resources::find("", "v1", plural)
                .unwrap_or_else(|| panic!("{plural} are served"))
        };
        assert!(EventTtl::applies_to(find("events")));
        assert!(!EventTtl::applies_to(find("pods")));
        assert!(!EventTtl::applies_to(find("configmaps")));
    }

    #[tokio::test]
    async fn writes_share_a_lease_within_its_window_and_a_forgotten_one_is_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let store = skiff_store::Store::open(skiff_store::StoreConfig::new(dir.path()))
            .await
            .unwrap();
        let storage = Storage::local(store);
        let ttl = EventTtl::new(Duration::from_secs(3600));
        let first = ttl.lease(&storage).await.unwrap();
        assert_ne!(first, 0);
        assert_eq!(ttl.lease(&storage).await.unwrap(), first);
        assert_eq!(storage.requests().total("lease"), 1, "one grant for both");
        ttl.forget(first + 1);
        assert_eq!(
            ttl.lease(&storage).await.unwrap(),
            first,
            "another ID changes nothing"
        );
        ttl.forget(first);
        let second = ttl.lease(&storage).await.unwrap();
        assert_ne!(second, first);
        assert_eq!(storage.requests().total("lease"), 2);
    }
}
