//! The cached state of one resource: its objects by store key, the ring of
//! recent events, its revision, and its watchers with their bounded queues.
//! Only the reflector writes it; lists, gets and watches read it. Fan-out
//! happens under the write lock, so that a watcher's start (a snapshot or a
//! ring replay) and the live events it then gets never overlap or leave a gap.

use std::collections::{BTreeMap, HashMap};
use std::ops::Bound;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard, Weak};
use std::task::Waker;
use std::time::Duration;

use super::filter::Filter;
use super::object::{CachedObject, ChangeType, EventType, WatchEvent};
use super::queue::{self, PushError};
use super::ring::{EventRing, TooOld};
use super::CacheConfig;
use crate::resources::ResourceType;
use crate::storage::{Change, ChangeKind};

/// What a watcher's queue carries.
#[derive(Debug)]
pub enum Delivery {
    Event(Arc<WatchEvent>, EventType),
    /// Every event up to this revision has been delivered.
    Bookmark(i64),
}

struct Watcher {
    queue: queue::Sender<Delivery>,
    filter: Arc<Filter>,
    bookmarks: bool,
    /// Events at or below this revision are not this watcher's.
    after: i64,
}

struct State {
    /// The initial list is done.
    ready: bool,
    /// Every change up to this revision has been applied.
    revision: i64,
    objects: BTreeMap<Arc<str>, Arc<CachedObject>>,
    /// Sum of the objects' sizes.
    object_bytes: usize,
    ring: EventRing,
    watchers: HashMap<u64, Watcher>,
    /// One shared filter per distinct filter of the watchers: an event is
    /// matched once for all the watchers that share one (many clients
    /// watch a resource alike), not once each. Dead entries are swept as
    /// watchers come.
    filters: HashMap<Filter, Weak<Filter>>,
}

impl State {
    /// The watchers' shared copy of `filter`, made if none is alive.
    fn shared_filter(&mut self, filter: Filter) -> Arc<Filter> {
        if let Some(shared) = self.filters.get(&filter).and_then(Weak::upgrade) {
            return shared;
        }
        // Sweep filters no watcher holds any more, whenever they could
        // outnumber the watchers.
        if self.filters.len() > 2 * self.watchers.len() + 16 {
            self.filters.retain(|_, shared| shared.strong_count() > 0);
        }
        let shared = Arc::new(filter.clone());
        self.filters.insert(filter, Arc::downgrade(&shared));
        shared
    }
}

pub struct ResourceCache {
    pub resource: &'static ResourceType,
    /// The store prefix of every object of the resource.
    pub prefix: String,
    pub config: CacheConfig,
    state: RwLock<State>,
    /// The cache's revision (0 until the first list), for readers that
    /// wait until it reaches theirs.
    revision: tokio::sync::watch::Sender<i64>,
    /// Wakes the reflector to ask the store for a progress notification.
    pub(super) progress_wanted: tokio::sync::Notify,
    next_watcher: AtomicU64,
    dropped_watchers: AtomicU64,
    too_old_watches: AtomicU64,
    store_fallbacks: AtomicU64,
    relists: AtomicU64,
    /// Bumped whenever the objects change: readers that derive something
    /// from them (RBAC's rules) know when to derive it again.
    generation: AtomicU64,
}

/// Where a new watcher starts.
pub enum Start {
    /// With the current objects (its initial events), then what follows.
    Now,
    /// With the events after this revision.
    After(i64),
}

/// A watcher's start: what it replays, then its live queue. Dropping it
/// removes the watcher.
pub struct Subscription {
    /// `Start::Now`: the objects the filter selects, at `revision`.
    pub initial: Vec<Arc<CachedObject>>,
    /// `Start::After`: the events after its revision, from the ring (not
    /// yet filtered).
    pub backlog: Vec<Arc<WatchEvent>>,
    /// The revision the initial objects or the start are at.
    pub revision: i64,
    pub filter: Arc<Filter>,
    pub queue: queue::Receiver<Delivery>,
    cache: Arc<ResourceCache>,
    id: u64,
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.cache.write().watchers.remove(&self.id);
    }
}

/// A page of a list, as the cache holds it.
pub struct Snapshot {
    pub revision: i64,
    pub items: Vec<Arc<CachedObject>>,
    /// The first key of the next page, when the limit stopped the list.
    pub next_start: Option<String>,
}

/// Gauges and counters of one resource's cache, for `/metrics`.
pub struct Stats {
    pub revision: i64,
    pub objects: usize,
    pub object_bytes: usize,
    pub ring_events: usize,
    pub ring_bytes: usize,
    pub watchers: usize,
    pub dropped_watchers: u64,
    pub too_old_watches: u64,
    pub store_fallbacks: u64,
    pub relists: u64,
}

impl ResourceCache {
    pub fn new(resource: &'static ResourceType, config: CacheConfig) -> ResourceCache {
        ResourceCache {
            resource,
            prefix: resource.storage_prefix(),
            config,
            state: RwLock::new(State {
                ready: false,
                revision: 0,
                objects: BTreeMap::new(),
                object_bytes: 0,
                ring: EventRing::new(config.max_events, config.max_event_bytes, 0),
                watchers: HashMap::new(),
                filters: HashMap::new(),
            }),
            revision: tokio::sync::watch::channel(0).0,
            progress_wanted: tokio::sync::Notify::new(),
            next_watcher: AtomicU64::new(1),
            dropped_watchers: AtomicU64::new(0),
            too_old_watches: AtomicU64::new(0),
            store_fallbacks: AtomicU64::new(0),
            relists: AtomicU64::new(0),
            generation: AtomicU64::new(0),
        }
    }

    // A panic while holding the lock leaves no half-applied batch behind
    // that a reader could trip on (each change is applied whole), so a
    // poisoned lock is still usable.
    fn read(&self) -> RwLockReadGuard<'_, State> {
        self.state.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, State> {
        self.state.write().unwrap_or_else(|e| e.into_inner())
    }

    /// The revision the cache has reached (0 before its first list).
    pub fn revision(&self) -> i64 {
        *self.revision.borrow()
    }

    /// How many times the objects have changed.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    pub fn is_ready(&self) -> bool {
        self.read().ready
    }

    /// Replaces the whole state with a list read at `revision`. Open
    /// watchers end: changes between the old state and this one are not
    /// known, so they must start again (and get 410 if they ask for a
    /// revision before this one).
    pub fn replace(&self, objects: Vec<CachedObject>, revision: i64) {
        let mut state = self.write();
        if state.ready {
            self.relists.fetch_add(1, Ordering::Relaxed);
            if !state.watchers.is_empty() {
                tracing::info!(
                    resource = self.resource.plural,
                    watchers = state.watchers.len(),
                    revision,
                    "watch cache relisted; its watchers must start again"
                );
            }
            state.watchers.clear();
        }
        state.object_bytes = objects.iter().map(CachedObject::size).sum();
        state.objects = objects
            .into_iter()
            .map(|o| (o.key.clone(), Arc::new(o)))
            .collect();
        state.ring.reset(revision);
        state.revision = revision;
        state.ready = true;
        drop(state);
        self.generation.fetch_add(1, Ordering::Release);
        self.revision.send_replace(revision);
    }

    /// Applies changes read from the store, in revision order, and hands
    /// each to the watchers it concerns. Returns the wakers of the
    /// watchers that were waiting, for the caller to wake (the events are
    /// queued already, and a watcher that subscribes from now on starts
    /// after them).
    #[must_use = "the watchers given events must be woken"]
    pub fn apply(&self, changes: Vec<Change>) -> Vec<Waker> {
        let mut wakes = Vec::new();
        let mut state = self.write();
        let mut newest = state.revision;
        for change in changes {
            if change.revision < state.revision {
                tracing::warn!(
                    resource = self.resource.plural,
                    revision = change.revision,
                    cache_revision = state.revision,
                    "the store watch repeated an old change; ignored"
                );
                continue;
            }
            let Some(event) = self.apply_one(&mut state, change) else {
                continue;
            };
            self.generation.fetch_add(1, Ordering::Release);
            newest = newest.max(event.revision);
            state.ring.push(event.clone());
            self.dispatch(&mut state, &event, &mut wakes);
        }
        assert!(
            newest >= state.revision,
            "the cache revision never goes back"
        );
        state.revision = newest;
        drop(state);
        self.revision.send_if_modified(|r| {
            let moved = *r < newest;
            *r = newest.max(*r);
            moved
        });
        wakes
    }

    fn apply_one(&self, state: &mut State, change: Change) -> Option<Arc<WatchEvent>> {
        let key: Arc<str> = change.key.into();
        let event = match change.kind {
            ChangeKind::Put => {
                let object = Arc::new(CachedObject::new(
                    self.resource,
                    key.clone(),
                    change.revision,
                    change.value,
                ));
                state.object_bytes += object.size();
                let prev = state.objects.insert(key, object.clone());
                if let Some(prev) = &prev {
                    state.object_bytes -= prev.size();
                }
                WatchEvent::new(change.revision, ChangeType::Put, object, prev)
            }
            ChangeKind::Delete => {
                let last = state.objects.remove(&key)?;
                state.object_bytes -= last.size();
                WatchEvent::new(change.revision, ChangeType::Delete, last, None)
            }
        };
        Some(Arc::new(event))
    }

    /// Queues `event` for each watcher that sees it, adding the waiting
    /// ones' wakers to `wakes`; a watcher whose queue is full is dropped
    /// (its stream ends and its client starts again).
    fn dispatch(&self, state: &mut State, event: &Arc<WatchEvent>, wakes: &mut Vec<Waker>) {
        let mut gone = Vec::new();
        // The last filter matched and what it saw: watchers sharing a
        // filter share its answer.
        let mut matched: Option<(*const Filter, Option<EventType>)> = None;
        for (id, watcher) in &state.watchers {
            if event.revision <= watcher.after {
                continue;
            }
            let shared = Arc::as_ptr(&watcher.filter);
            let kind = match matched {
                Some((last, kind)) if last == shared => kind,
                _ => {
                    let kind = watcher.filter.event_type(event);
                    matched = Some((shared, kind));
                    kind
                }
            };
            let Some(kind) = kind else {
                continue;
            };
            match watcher
                .queue
                .push_quietly(Delivery::Event(event.clone(), kind))
            {
                Ok(waker) => wakes.extend(waker),
                Err(PushError::Full) => {
                    self.dropped_watchers.fetch_add(1, Ordering::Relaxed);
                    tracing::info!(
                        resource = self.resource.plural,
                        watcher = id,
                        queue = self.config.watcher_queue,
                        revision = event.revision,
                        "dropping a watcher that does not keep up"
                    );
                    gone.push(*id);
                }
                Err(PushError::Closed) => gone.push(*id),
            }
        }
        for id in gone {
            state.watchers.remove(&id);
        }
    }

    /// The store says every change up to `revision` has been sent.
    pub fn progress(&self, revision: i64) {
        let mut state = self.write();
        if revision > state.revision {
            state.revision = revision;
            drop(state);
            self.revision.send_if_modified(|r| {
                let moved = *r < revision;
                *r = revision.max(*r);
                moved
            });
        }
    }

    /// Ends every watch of the resource (the server is stopping): each
    /// watcher's queue closes, so its stream ends once it has read what
    /// was queued.
    pub fn end_watches(&self) {
        self.write().watchers.clear();
    }

    /// Queues a bookmark at the cache's revision for every watcher that
    /// allows bookmarks (and has reached the revision it started from).
    pub fn send_bookmarks(&self) {
        let mut state = self.write();
        let revision = state.revision;
        let mut gone = Vec::new();
        for (id, watcher) in &state.watchers {
            if !watcher.bookmarks || revision < watcher.after {
                continue;
            }
            if watcher
                .queue
                .try_send(Delivery::Bookmark(revision))
                .is_err()
            {
                gone.push(*id);
            }
        }
        for id in gone {
            state.watchers.remove(&id);
        }
    }

    /// Registers a watcher. A start before the ring's oldest revision is
    /// `TooOld`.
    pub fn subscribe(
        self: &Arc<Self>,
        start: Start,
        filter: Filter,
        bookmarks: bool,
    ) -> Result<Subscription, TooOld> {
        let (queue, receiver) = queue::queue(self.config.watcher_queue);
        let id = self.next_watcher.fetch_add(1, Ordering::Relaxed);
        let mut state = self.write();
        let filter = state.shared_filter(filter);
        let (initial, backlog, revision) = match start {
            Start::Now => {
                let initial = state
                    .objects
                    .values()
                    .filter(|o| filter.selects(o))
                    .cloned()
                    .collect();
                (initial, Vec::new(), state.revision)
            }
            Start::After(revision) => match state.ring.since(revision) {
                Ok(backlog) => (Vec::new(), backlog, revision),
                Err(too_old) => {
                    self.too_old_watches.fetch_add(1, Ordering::Relaxed);
                    return Err(too_old);
                }
            },
        };
        let after = revision.max(state.revision);
        state.watchers.insert(
            id,
            Watcher {
                queue,
                filter: filter.clone(),
                bookmarks,
                after,
            },
        );
        drop(state);
        Ok(Subscription {
            initial,
            backlog,
            revision,
            filter,
            queue: receiver,
            cache: self.clone(),
            id,
        })
    }

    /// The objects in `[start, end)` the filter selects, at most `limit`
    /// (0: all).
    pub fn snapshot(&self, start: &str, end: &str, filter: &Filter, limit: usize) -> Snapshot {
        let state = self.read();
        let range = (Bound::Included(start), Bound::Excluded(end));
        let mut items = Vec::new();
        let mut next_start = None;
        let mut last: Option<&str> = None;
        // Every key of the range starts with `start`: when that is within
        // the filter's namespace, no key needs reading (a cache miss per
        // object on a list of thousands).
        let in_namespace = filter
            .key_prefix
            .as_deref()
            .is_none_or(|prefix| start.starts_with(prefix));
        let selects_all = filter.selects_all();
        for (key, object) in state.objects.range::<str, _>(range) {
            if limit > 0 && items.len() >= limit {
                next_start = last.map(|k| format!("{k}\0"));
                break;
            }
            let selected = match (in_namespace, selects_all) {
                (true, true) => true,
                (true, false) => filter.selected(object),
                (false, _) => filter.selects(object),
            };
            if selected {
                items.push(object.clone());
                last = Some(key);
            }
        }
        Snapshot {
            revision: state.revision,
            items,
            next_start,
        }
    }

    /// One object by key, and the cache's revision.
    pub fn get(&self, key: &str) -> (Option<Arc<CachedObject>>, i64) {
        let state = self.read();
        (state.objects.get(key).cloned(), state.revision)
    }

    /// Waits until the first list is done; false after `timeout`.
    pub async fn wait_ready(&self, timeout: Duration) -> bool {
        let mut revision = self.revision.subscribe();
        let ready = tokio::time::timeout(timeout, revision.wait_for(|_| self.is_ready())).await;
        matches!(ready, Ok(Ok(_)))
    }

    /// Waits until the cache has reached `wanted`, asking the store for
    /// progress meanwhile; false after `timeout`.
    pub async fn wait_for_revision(&self, wanted: i64, timeout: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut revision = self.revision.subscribe();
        loop {
            if self.is_ready() && *revision.borrow_and_update() >= wanted {
                return true;
            }
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            self.progress_wanted.notify_one();
            // A store may drop a progress request made while its watch
            // catches up (etcd 3.4): ask again after a while.
            let again = (tokio::time::Instant::now() + Duration::from_millis(250)).min(deadline);
            let _ = tokio::time::timeout_at(again, revision.changed()).await;
        }
    }

    /// A read the cache could not serve in time went to the store.
    pub fn count_store_fallback(&self) {
        self.store_fallbacks.fetch_add(1, Ordering::Relaxed);
    }

    pub fn stats(&self) -> Stats {
        let state = self.read();
        Stats {
            revision: state.revision,
            objects: state.objects.len(),
            object_bytes: state.object_bytes,
            ring_events: state.ring.len(),
            ring_bytes: state.ring.bytes(),
            watchers: state.watchers.len(),
            dropped_watchers: self.dropped_watchers.load(Ordering::Relaxed),
            too_old_watches: self.too_old_watches.load(Ordering::Relaxed),
            store_fallbacks: self.store_fallbacks.load(Ordering::Relaxed),
            relists: self.relists.load(Ordering::Relaxed),
        }
    }
}
