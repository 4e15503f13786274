//! What this controller last wrote to each Service's slices, so that a sync
//! against a cache that has not seen those writes yet waits instead of
//! creating the same slices twice (kube's `EndpointSliceTracker`).

use std::collections::HashMap;
use std::sync::Arc;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::discovery::v1::EndpointSlice;

/// After this long a write the cache never showed (someone else changed
/// or deleted the slice) no longer holds syncs back.
const PATIENCE: SignedDuration = SignedDuration::from_secs(30);

#[derive(Debug, Default)]
pub struct Tracker {
    /// Service key → slice name → (resourceVersion written or `None` for a
    /// delete, when).
    services: HashMap<String, HashMap<String, (Option<u64>, Timestamp)>>,
}

fn version(slice: &EndpointSlice) -> u64 {
    let rv = slice.metadata.resource_version.as_deref();
    rv.and_then(|v| v.parse().ok()).unwrap_or(0)
}

impl Tracker {
    pub fn wrote(&mut self, service: &str, slice: &EndpointSlice, now: Timestamp) {
        let name = slice.metadata.name.clone().unwrap_or_default();
        let entry = self.services.entry(service.to_string()).or_default();
        entry.insert(name, (Some(version(slice)), now));
    }

    pub fn deleted(&mut self, service: &str, slice: &EndpointSlice, now: Timestamp) {
        let name = slice.metadata.name.clone().unwrap_or_default();
        let entry = self.services.entry(service.to_string()).or_default();
        entry.insert(name, (None, now));
    }

    pub fn forget(&mut self, service: &str) {
        self.services.remove(service);
    }

    /// Whether `cached` (the Service's slices in the cache) shows every
    /// write of ours; writes it shows are forgotten.
    pub fn caught_up(
        &mut self,
        service: &str,
        cached: &[Arc<EndpointSlice>],
        now: Timestamp,
    ) -> bool {
        let Some(writes) = self.services.get_mut(service) else {
            return true;
        };
        writes.retain(|name, (written, at)| {
            let seen = cached
                .iter()
                .find(|s| s.metadata.name.as_deref() == Some(name));
            let shown = match (written, seen) {
                (Some(rv), Some(slice)) => version(slice) >= *rv,
                (Some(_), None) => false,
                (None, seen) => seen.is_none(),
            };
            !shown && now.duration_since(*at) < PATIENCE
        });
        let done = writes.is_empty();
        if done {
            self.services.remove(service);
        }
        done
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::endpoint::fixtures::NOW;

    fn slice(name: &str, rv: &str) -> Arc<EndpointSlice> {
        let mut slice = EndpointSlice::default();
        slice.metadata.name = Some(name.into());
        slice.metadata.resource_version = Some(rv.into());
        Arc::new(slice)
    }

    #[test]
    fn syncs_wait_until_the_cache_shows_our_writes() {
        let mut tracker = Tracker::default();
        assert!(tracker.caught_up("default/web", &[], NOW));
        tracker.wrote("default/web", &slice("web-a", "10"), NOW);
        assert!(!tracker.caught_up("default/web", &[], NOW));
        assert!(!tracker.caught_up("default/web", &[slice("web-a", "9")], NOW));
        assert!(tracker.caught_up("default/web", &[slice("web-a", "10")], NOW));

        tracker.deleted("default/web", &slice("web-a", "10"), NOW);
        assert!(!tracker.caught_up("default/web", &[slice("web-a", "10")], NOW));
        let later = NOW.checked_add(PATIENCE).unwrap();
        assert!(tracker.caught_up("default/web", &[slice("web-a", "10")], later));
    }
}
