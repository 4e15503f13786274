//! The watch cache: per resource, one store watch feeds an in-memory copy
//! of the current objects and a bounded ring of recent events, and every
//! watch, every list or get with a resourceVersion, and consistent lists
//! (once the store's revision is confirmed) are served from it. Thousands of
//! watchers of a resource cost the store one watch. Writes do not go
//! through it: the cache learns every change from its store watch.
//!
//! Bounds: the ring holds at most `max_events` events and `max_event_bytes`
//! of the objects they keep alive; a watch from before its oldest event
//! answers 410 Gone. Each watcher has a queue of `watcher_queue` events; a
//! watcher whose queue is full is dropped (its stream ends, its client
//! starts again) rather than holding memory or stalling the others.

mod filter;
pub mod metrics;
mod object;
mod queue;
mod reflector;
mod resource;
mod ring;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;

pub use filter::Filter;
pub use object::{encode_event, CachedObject, EventType, WatchEvent};
pub use resource::{Delivery, ResourceCache, Start, Subscription};
pub use ring::TooOld;

use crate::registry::{storage_error, ListOptions, Target};
use crate::resources::ResourceType;
use crate::status::{ApiError, ApiResult};
use crate::storage::{prefix_end, Storage};

/// How long a list or get waits for a new cache's first list before it
/// reads the store instead.
pub(crate) const READY_WAIT: Duration = Duration::from_secs(10);
/// How long a watch waits for a new cache's first list.
const WATCH_READY_WAIT: Duration = Duration::from_secs(60);
/// How long a read waits for the cache to reach the revision it needs
/// (Kubernetes waits 3 s too).
const FRESH_WAIT: Duration = Duration::from_secs(3);

/// The bounds and intervals of the cache. `from_env` reads overrides.
#[derive(Debug, Clone, Copy)]
pub struct CacheConfig {
    /// Events in each resource's ring (`SKIFF_WATCH_CACHE_EVENTS`).
    pub max_events: usize,
    /// Bytes of objects the ring may keep alive
    /// (`SKIFF_WATCH_CACHE_EVENT_BYTES`).
    pub max_event_bytes: usize,
    /// Events queued per watcher before it is dropped
    /// (`SKIFF_WATCH_CACHE_WATCHER_QUEUE`).
    pub watcher_queue: usize,
    /// How often watchers that allow bookmarks get one
    /// (`SKIFF_WATCH_CACHE_BOOKMARK_SECONDS`).
    pub bookmark_interval: Duration,
    /// How often the cache asks the store for its revision, so that
    /// bookmarks move on while the resource is quiet.
    pub progress_interval: Duration,
}

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig {
            max_events: 4096,
            max_event_bytes: 64 << 20,
            watcher_queue: 1024,
            bookmark_interval: Duration::from_secs(60),
            progress_interval: Duration::from_secs(5),
        }
    }
}

impl CacheConfig {
    /// The defaults, with the `SKIFF_WATCH_CACHE_*` variables that are set.
    pub fn from_env() -> CacheConfig {
        fn var(name: &str) -> Option<u64> {
            let value = std::env::var(name).ok()?;
            match value.parse() {
                Ok(n) => Some(n),
                Err(_) => {
                    tracing::warn!(variable = name, value, "not a number; using the default");
                    None
                }
            }
        }
        let mut config = CacheConfig::default();
        if let Some(n) = var("SKIFF_WATCH_CACHE_EVENTS") {
            config.max_events = n.max(1) as usize;
        }
        if let Some(n) = var("SKIFF_WATCH_CACHE_EVENT_BYTES") {
            config.max_event_bytes = n as usize;
        }
        if let Some(n) = var("SKIFF_WATCH_CACHE_WATCHER_QUEUE") {
            config.watcher_queue = n.max(1) as usize;
        }
        if let Some(n) = var("SKIFF_WATCH_CACHE_BOOKMARK_SECONDS") {
            config.bookmark_interval = Duration::from_secs(n.max(1));
        }
        config
    }
}

/// Every resource's cache, each started on first use. Cheap to clone.
#[derive(Clone)]
pub struct WatchCache {
    inner: Arc<Inner>,
}

struct Inner {
    storage: Storage,
    config: CacheConfig,
    /// By storage prefix: the cache and its reflector task.
    caches: Mutex<HashMap<String, (Arc<ResourceCache>, tokio::task::AbortHandle)>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        let caches = self.caches.get_mut().unwrap_or_else(|e| e.into_inner());
        for (_, task) in caches.values() {
            task.abort();
        }
    }
}

/// A list page served by the cache.
pub struct CachedList {
    /// The cache's revision: the list's `metadata.resourceVersion`.
    pub revision: i64,
    /// The objects, each at its own revision.
    pub objects: Vec<Arc<CachedObject>>,
    /// Where the next page starts (in the store, at `revision`).
    pub next_start: Option<String>,
}

/// How fresh a read from the cache must be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Freshness {
    /// Whatever the cache holds (`resourceVersion=0`).
    Any,
    /// At least this revision (`resourceVersion=N`, NotOlderThan).
    AtLeast(i64),
    /// The store's current revision, confirmed first (no resourceVersion).
    Consistent,
}

impl Freshness {
    /// The freshness a `resourceVersion` asks for; `None` for an Exact
    /// match on a revision, which the store serves.
    pub fn of(resource_version: &str, version_match: &str) -> ApiResult<Option<Freshness>> {
        Ok(Some(match (resource_version, version_match) {
            ("", _) => Freshness::Consistent,
            ("0", _) => Freshness::Any,
            (_, "Exact") => return Ok(None),
            (rv, _) => Freshness::AtLeast(parse_revision(rv)?),
        }))
    }
}

pub fn parse_revision(rv: &str) -> ApiResult<i64> {
    rv.parse::<i64>()
        .ok()
        .filter(|r| *r >= 0)
        .ok_or_else(|| ApiError::bad_request(format!("invalid resourceVersion {rv:?}")))
}

/// The filter of a list or watch of `target`.
pub fn filter_of(target: &Target<'_>, options: &ListOptions) -> Filter {
    Filter {
        key_prefix: namespace_prefix(target),
        labels: options.labels.clone(),
        fields: options.fields.clone(),
    }
}

fn namespace_prefix(target: &Target<'_>) -> Option<String> {
    match (target.resource.namespaced, target.namespace) {
        (true, Some(namespace)) => Some(target.resource.namespace_prefix(namespace)),
        _ => None,
    }
}

impl WatchCache {
    pub fn new(storage: Storage, config: CacheConfig) -> WatchCache {
        WatchCache {
            inner: Arc::new(Inner {
                storage,
                config,
                caches: Mutex::new(HashMap::new()),
            }),
        }
    }

    pub fn config(&self) -> CacheConfig {
        self.inner.config
    }

    /// The cache of `resource`, created (and its reflector started) if it
    /// is the first use; a new cache starts from `start_at` (0: now).
    pub fn resource(&self, resource: &'static ResourceType, start_at: i64) -> Arc<ResourceCache> {
        let prefix = resource.storage_prefix();
        let mut caches = self.inner.caches.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((cache, _)) = caches.get(&prefix) {
            return cache.clone();
        }
        let cache = Arc::new(ResourceCache::new(resource, self.inner.config));
        let task = tokio::spawn(reflector::run(
            cache.clone(),
            self.inner.storage.clone(),
            start_at,
        ));
        tracing::debug!(resource = resource.plural, start_at, "watch cache started");
        caches.insert(prefix, (cache.clone(), task.abort_handle()));
        cache
    }

    /// Every cache started so far.
    pub fn caches(&self) -> Vec<Arc<ResourceCache>> {
        let caches = self.inner.caches.lock().unwrap_or_else(|e| e.into_inner());
        let mut all: Vec<_> = caches.values().map(|(c, _)| c.clone()).collect();
        all.sort_by(|a, b| a.prefix.cmp(&b.prefix));
        all
    }

    /// Ends every open watch of every cache (the server is stopping).
    pub fn end_watches(&self) {
        for cache in self.caches() {
            cache.end_watches();
        }
    }

    /// The resource's cache once it is at least as fresh as asked; `None`
    /// when it cannot be within the waits (the store should serve).
    pub async fn fresh(
        &self,
        resource: &'static ResourceType,
        freshness: Freshness,
        ready_wait: Duration,
    ) -> ApiResult<Option<Arc<ResourceCache>>> {
        let wanted = match freshness {
            Freshness::Any => 0,
            Freshness::AtLeast(revision) => revision,
            // Without progress notifications to trust, the cache cannot know
            // it has caught up with the store: the store answers.
            Freshness::Consistent if !self.inner.storage.progress_is_reliable() => return Ok(None),
            Freshness::Consistent => match self.inner.storage.revision().await {
                Ok(revision) => revision,
                Err(_) => return Ok(None),
            },
        };
        let cache = self.resource(resource, 0);
        let fresh = cache.wait_ready(ready_wait).await
            && (wanted == 0 || cache.wait_for_revision(wanted, FRESH_WAIT).await);
        if !fresh {
            tracing::info!(
                resource = resource.plural,
                wanted,
                revision = cache.revision(),
                "the watch cache is not fresh enough in time; reading the store"
            );
            cache.count_store_fallback();
            return Ok(None);
        }
        Ok(Some(cache))
    }

    /// A list from the cache; `None` when the store must serve it (a
    /// continued list, an Exact resourceVersion, or a cache that cannot be
    /// fresh enough in time).
    pub async fn list(
        &self,
        target: &Target<'_>,
        options: &ListOptions,
    ) -> ApiResult<Option<CachedList>> {
        if options.continue_token.is_some() {
            return Ok(None);
        }
        let Some(freshness) =
            Freshness::of(&options.resource_version, &options.resource_version_match)?
        else {
            return Ok(None);
        };
        let Some(cache) = self.fresh(target.resource, freshness, READY_WAIT).await? else {
            return Ok(None);
        };
        let start = namespace_prefix(target).unwrap_or_else(|| cache.prefix.clone());
        let end = prefix_end(&start);
        let filter = filter_of(target, options);
        let limit = usize::try_from(options.limit.max(0)).unwrap_or(usize::MAX);
        let snapshot = cache.snapshot(&start, &end, &filter, limit);
        Ok(Some(CachedList {
            revision: snapshot.revision,
            objects: snapshot.items,
            next_start: snapshot.next_start,
        }))
    }

    /// A get with a resourceVersion from the cache: `Ok(None)` when the
    /// store must serve it (no resourceVersion, or the cache is not fresh
    /// enough in time), a 404 when the cache has no such object.
    pub async fn get(
        &self,
        target: &Target<'_>,
        name: &str,
        resource_version: &str,
    ) -> ApiResult<Option<Value>> {
        let freshness = match resource_version {
            "" => return Ok(None),
            "0" => Freshness::Any,
            rv => Freshness::AtLeast(parse_revision(rv)?),
        };
        let Some(cache) = self.fresh(target.resource, freshness, READY_WAIT).await? else {
            return Ok(None);
        };
        let key = target.resource.key(target.namespace, name);
        match cache.get(&key) {
            (Some(object), _) => Ok(Some(object.served(target.resource, object.mod_revision)?)),
            (None, _) => Err(ApiError::not_found(
                target.resource.group,
                target.resource.plural,
                name,
            )),
        }
    }

    /// A new watcher of `target`'s resource. `Err(TooOld)` inside when it
    /// asks to start from before the ring's oldest event.
    pub async fn watch(
        &self,
        target: &Target<'_>,
        filter: Filter,
        start: WatchStart,
        bookmarks: bool,
    ) -> ApiResult<Result<Subscription, TooOld>> {
        let resource = target.resource;
        let unavailable = || {
            ApiError::unavailable(format!(
                "the watch cache of {} is not ready yet; retry the watch",
                resource.plural
            ))
        };
        let (cache, start) = match start {
            WatchStart::After(revision) => {
                // The first watcher of a resource may start the cache at its
                // own revision, so that it misses nothing still in the store.
                let cache = self.resource(resource, revision);
                if !cache.wait_ready(WATCH_READY_WAIT).await {
                    return Err(unavailable());
                }
                (cache, Start::After(revision))
            }
            WatchStart::Initial(freshness) => {
                let cache = self.resource(resource, 0);
                if !cache.wait_ready(WATCH_READY_WAIT).await {
                    return Err(unavailable());
                }
                let wanted = match freshness {
                    Freshness::Any => 0,
                    Freshness::AtLeast(revision) => revision,
                    // A watch from "now" starts at the cache's newest
                    // revision, as Kubernetes' watch cache starts one.
                    Freshness::Consistent if !self.inner.storage.progress_is_reliable() => 0,
                    Freshness::Consistent => self
                        .inner
                        .storage
                        .revision()
                        .await
                        .map_err(|err| storage_error(target, "", err))?,
                };
                if wanted > 0 && !cache.wait_for_revision(wanted, FRESH_WAIT).await {
                    return Err(ApiError::timeout(format!(
                        "Too large resource version: {wanted}, current: {}",
                        cache.revision()
                    )));
                }
                (cache, Start::Now)
            }
        };
        Ok(cache.subscribe(start, filter, bookmarks))
    }
}

/// Where a watch starts.
#[derive(Debug, Clone, Copy)]
pub enum WatchStart {
    /// With the current objects as ADDED events, as fresh as asked.
    Initial(Freshness),
    /// With the events after this revision.
    After(i64),
}
