//! The watch hub. Synced watchers get each revision's events from the
//! writer as one shared `Arc`, found by key and by range rather than by
//! scanning. A watcher whose bounded buffer is full moves to the unsynced
//! group; the syncer thread catches unsynced watchers up from disk and moves
//! them back once they reach the current revision.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc as std_mpsc, Arc};
use std::thread;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::sync::mpsc;

use super::watcher::Watcher;
use crate::api::{Event, EventType, WatchRequest};
use crate::error::{Result, StoreError};
use crate::mvcc::{KeyRange, KvStore, RevisionEvents};

#[derive(Debug, Clone)]
pub struct WatchConfig {
    /// Revisions buffered per watcher before it falls behind (etcd: 128).
    pub buffer: usize,
    /// How often watchers that asked for progress notifications get one.
    pub progress_interval: Duration,
    /// Records read from disk per catch-up round.
    pub sync_batch_records: usize,
    /// How often the syncer looks at unsynced watchers without being woken.
    pub sync_interval: Duration,
}

impl Default for WatchConfig {
    fn default() -> Self {
        WatchConfig {
            buffer: 128,
            progress_interval: Duration::from_secs(600),
            sync_batch_records: 10_000,
            sync_interval: Duration::from_millis(100),
        }
    }
}

#[derive(Debug)]
pub(crate) enum WatchMessage {
    Events(Arc<RevisionEvents>),
    /// A catch-up round's revisions for one watcher, in order: one message
    /// for many revisions, so that a round is not cut short by the
    /// watcher's buffer of messages.
    History(Vec<Arc<RevisionEvents>>),
    Progress(i64),
    Compacted(i64),
}

struct WatcherEntry {
    range: KeyRange,
    tx: mpsc::Sender<WatchMessage>,
    /// For an unsynced watcher: the first revision it has not been sent.
    next_rev: i64,
    synced: bool,
    /// Shared with the watcher: set while it is unsynced, so that it wakes
    /// the syncer when it has read all it was sent.
    behind: Arc<AtomicBool>,
    progress_notify: bool,
    progress_requested: bool,
}

fn remove_from_group<K: std::hash::Hash + Eq>(
    groups: &mut HashMap<K, Vec<i64>>,
    group: &K,
    id: i64,
) {
    if let Some(ids) = groups.get_mut(group) {
        ids.retain(|&w| w != id);
        if ids.is_empty() {
            groups.remove(group);
        }
    }
}

/// Synced watchers, indexed by what they watch.
#[derive(Default)]
struct SyncedGroups {
    by_key: HashMap<Vec<u8>, Vec<i64>>,
    by_range: HashMap<KeyRange, Vec<i64>>,
}

impl SyncedGroups {
    fn insert(&mut self, id: i64, range: &KeyRange) {
        match range {
            KeyRange::Single(key) => self.by_key.entry(key.clone()).or_default().push(id),
            span => self.by_range.entry(span.clone()).or_default().push(id),
        }
    }

    fn remove(&mut self, id: i64, range: &KeyRange) {
        match range {
            KeyRange::Single(key) => remove_from_group(&mut self.by_key, key, id),
            span => remove_from_group(&mut self.by_range, span, id),
        }
    }

    /// Watchers concerned by any event of a revision.
    fn concerned(&self, events: &[Event], out: &mut Vec<i64>) {
        out.clear();
        if !self.by_key.is_empty() {
            for event in events {
                if let Some(ids) = self.by_key.get(&event.kv.key) {
                    out.extend_from_slice(ids);
                }
            }
        }
        for (range, ids) in &self.by_range {
            if events.iter().any(|e| range.contains(&e.kv.key)) {
                out.extend_from_slice(ids);
            }
        }
    }
}

struct HubState {
    current_rev: i64,
    next_id: i64,
    watchers: HashMap<i64, WatcherEntry>,
    synced: SyncedGroups,
    unsynced_count: usize,
    /// Reused by the fan-out to avoid an allocation per revision.
    scratch: Vec<i64>,
}

pub struct WatchHub {
    kv: Arc<KvStore>,
    config: WatchConfig,
    state: Mutex<HubState>,
    wake: Mutex<Option<std_mpsc::Sender<()>>>,
    /// The notifier's queue, for progress requests to wait their turn.
    notices: Mutex<Option<Arc<super::notifier::NoticeQueue>>>,
}

impl WatchHub {
    pub fn new(kv: Arc<KvStore>, config: WatchConfig) -> Arc<WatchHub> {
        let current_rev = kv.current_revision();
        Arc::new(WatchHub {
            kv,
            config,
            state: Mutex::new(HubState {
                current_rev,
                next_id: 1,
                watchers: HashMap::new(),
                synced: SyncedGroups::default(),
                unsynced_count: 0,
                scratch: Vec::new(),
            }),
            wake: Mutex::new(None),
            notices: Mutex::new(None),
        })
    }

    pub fn kv(&self) -> &Arc<KvStore> {
        &self.kv
    }

    /// Starts a watch. A start revision at or below the current one is
    /// served from disk first; 0 means "from the next revision".
    pub fn watch(self: &Arc<Self>, req: WatchRequest) -> Result<Watcher> {
        if req.key.is_empty() {
            return Err(StoreError::EmptyKey);
        }
        let range = KeyRange::new(&req.key, &req.range_end);
        let (tx, rx) = mpsc::channel(self.config.buffer);
        let mut state = self.state.lock();
        let id = state.next_id;
        state.next_id += 1;
        // Readers may already see revisions the fan-out has not reached:
        // "from now" means after what readers see, and a start above what
        // the fan-out has sent is served live.
        let from_history = req.start_revision > 0 && req.start_revision <= state.current_rev;
        let min_rev = if req.start_revision > 0 {
            req.start_revision
        } else {
            self.kv.current_revision() + 1
        };
        let behind = Arc::new(AtomicBool::new(from_history));
        let entry = WatcherEntry {
            range: range.clone(),
            tx,
            next_rev: req.start_revision,
            synced: !from_history,
            behind: Arc::clone(&behind),
            progress_notify: req.progress_notify,
            progress_requested: false,
        };
        if from_history {
            state.unsynced_count += 1;
        } else {
            state.synced.insert(id, &range);
        }
        state.watchers.insert(id, entry);
        drop(state);
        if from_history {
            self.wake_syncer();
        }
        Ok(Watcher::new(
            id,
            Arc::clone(self),
            rx,
            behind,
            range,
            min_rev,
            &req,
        ))
    }

    /// Sends a committed batch's events, in revision order, to the synced
    /// watchers they concern. Readers already see `revision`.
    pub(crate) fn publish(&self, revision: i64, events: &[Arc<RevisionEvents>]) {
        let mut state = self.state.lock();
        let mut fell_behind = false;
        for events in events {
            fell_behind |= fan_out(&mut state, events);
        }
        state.current_rev = revision;
        drop(state);
        if fell_behind {
            self.wake_syncer();
        }
    }

    /// The state jumped to `revision` (a snapshot was installed): every
    /// synced watcher becomes unsynced from the first revision it was not
    /// sent, and the syncer catches it up from disk.
    pub(crate) fn resync(&self, revision: i64) {
        let mut state = self.state.lock();
        let next = state.current_rev + 1;
        let synced: Vec<i64> = state
            .watchers
            .iter()
            .filter(|(_, w)| w.synced)
            .map(|(&id, _)| id)
            .collect();
        for id in synced {
            if let Some(entry) = state.watchers.get_mut(&id) {
                entry.synced = false;
                entry.next_rev = next;
                let range = entry.range.clone();
                state.synced.remove(id, &range);
                state.unsynced_count += 1;
            }
        }
        state.current_rev = state.current_rev.max(revision);
        drop(state);
        self.wake_syncer();
    }

    pub(crate) fn cancel(&self, id: i64) {
        let mut state = self.state.lock();
        if let Some(entry) = state.watchers.remove(&id) {
            if entry.synced {
                state.synced.remove(id, &entry.range);
            } else {
                state.unsynced_count -= 1;
            }
        }
    }

    pub(crate) fn set_notice_queue(&self, queue: Option<Arc<super::notifier::NoticeQueue>>) {
        *self.notices.lock() = queue;
    }

    /// Queues a progress request behind the batches already published.
    pub(crate) fn request_progress(&self, id: i64) {
        let queued = self
            .notices
            .lock()
            .as_ref()
            .is_some_and(|q| q.try_send(super::notifier::Notice::Progress(id)));
        if !queued {
            self.send_progress(id);
        }
    }

    /// Sends the watcher the current revision once it is synced.
    pub(crate) fn send_progress(&self, id: i64) {
        let mut state = self.state.lock();
        let current = state.current_rev;
        if let Some(entry) = state.watchers.get_mut(&id) {
            if !entry.synced || entry.tx.try_send(WatchMessage::Progress(current)).is_err() {
                entry.progress_requested = true;
            }
        }
    }

    /// Watchers, synced or not.
    pub fn watchers(&self) -> usize {
        self.state.lock().watchers.len()
    }

    /// (synced, unsynced) watcher counts.
    pub fn watcher_counts(&self) -> (usize, usize) {
        let state = self.state.lock();
        (
            state.watchers.len() - state.unsynced_count,
            state.unsynced_count,
        )
    }

    pub(crate) fn wake_syncer(&self) {
        if let Some(wake) = self.wake.lock().as_ref() {
            let _ = wake.send(());
        }
    }

    /// Starts the thread that catches unsynced watchers up and sends
    /// periodic progress notifications. It stops when the handle drops.
    pub fn start_syncer(self: &Arc<Self>) -> std::io::Result<SyncerHandle> {
        let (wake_tx, wake_rx) = std_mpsc::channel();
        *self.wake.lock() = Some(wake_tx);
        let hub = Arc::clone(self);
        let thread = thread::Builder::new()
            .name("skiff-watch-sync".into())
            .spawn(move || hub.run_syncer(wake_rx))?;
        Ok(SyncerHandle {
            hub: Arc::clone(self),
            thread: Some(thread),
        })
    }

    fn run_syncer(&self, wake: std_mpsc::Receiver<()>) {
        let mut next_progress = Instant::now() + self.config.progress_interval;
        loop {
            match wake.recv_timeout(self.config.sync_interval) {
                Ok(()) | Err(std_mpsc::RecvTimeoutError::Timeout) => {}
                Err(std_mpsc::RecvTimeoutError::Disconnected) => return,
            }
            while wake.try_recv().is_ok() {}
            loop {
                match self.sync_round() {
                    Ok(true) => continue,
                    Ok(false) => break,
                    Err(err) => {
                        tracing::warn!(error = %err, "watch catch-up failed; retrying");
                        break;
                    }
                }
            }
            if Instant::now() >= next_progress {
                self.send_progress_notifications();
                next_progress = Instant::now() + self.config.progress_interval;
            }
        }
    }

    fn send_progress_notifications(&self) {
        let state = self.state.lock();
        let current = state.current_rev;
        for entry in state.watchers.values() {
            if entry.synced && entry.progress_notify {
                let _ = entry.tx.try_send(WatchMessage::Progress(current));
            }
        }
    }

    /// One catch-up round: reads a bounded slice of history once and hands
    /// it to every unsynced watcher that needs it. Returns whether more
    /// work is left.
    pub(crate) fn sync_round(&self) -> Result<bool> {
        let (candidates, current) = {
            let state = self.state.lock();
            if state.unsynced_count == 0 {
                return Ok(false);
            }
            let candidates: Vec<(i64, i64)> = state
                .watchers
                .iter()
                .filter(|(_, w)| !w.synced)
                .map(|(&id, w)| (id, w.next_rev))
                .collect();
            (candidates, state.current_rev)
        };
        let compacted = self.kv.compact_revision();
        let Some(from) = candidates
            .iter()
            .map(|&(_, next)| next)
            .filter(|&next| next >= compacted)
            .min()
        else {
            self.finish_round(&candidates, compacted, &BTreeMap::new(), current);
            return Ok(false);
        };
        let (records, read_to) = if from <= current {
            self.kv
                .history(from, current, self.config.sync_batch_records)?
        } else {
            (Vec::new(), current)
        };
        // A compaction during the read may have removed records under it:
        // only watchers starting at or above it can trust this read.
        let compacted = self.kv.compact_revision();
        let mut by_revision: BTreeMap<i64, Vec<Event>> = BTreeMap::new();
        for record in records {
            let kind = if record.tombstone {
                EventType::Delete
            } else {
                EventType::Put
            };
            by_revision
                .entry(record.revision.main)
                .or_default()
                .push(Event {
                    kind,
                    kv: record.kv,
                    prev_kv: None,
                });
        }
        let history: BTreeMap<i64, Arc<RevisionEvents>> = by_revision
            .into_iter()
            .map(|(revision, events)| (revision, Arc::new(RevisionEvents { revision, events })))
            .collect();
        Ok(self.finish_round(&candidates, compacted, &history, read_to))
    }

    /// Delivers history read up to `read_to` under the hub lock, moving
    /// watchers that reach the current revision back to the synced group.
    fn finish_round(
        &self,
        candidates: &[(i64, i64)],
        compacted: i64,
        history: &BTreeMap<i64, Arc<RevisionEvents>>,
        read_to: i64,
    ) -> bool {
        let mut state = self.state.lock();
        let current = state.current_rev;
        let mut more = false;
        for &(id, next_seen) in candidates {
            let Some(entry) = state.watchers.get_mut(&id) else {
                continue;
            };
            if entry.synced || entry.next_rev != next_seen {
                continue;
            }
            if entry.next_rev < compacted {
                match entry.tx.try_send(WatchMessage::Compacted(compacted)) {
                    Ok(()) | Err(mpsc::error::TrySendError::Closed(_)) => {
                        state.watchers.remove(&id);
                        state.unsynced_count -= 1;
                    }
                    Err(mpsc::error::TrySendError::Full(_)) => more = true,
                }
                continue;
            }
            // The round's revisions this watcher wants, as one message.
            let mut wanted: Vec<Arc<RevisionEvents>> = if entry.next_rev <= read_to {
                history
                    .range(entry.next_rev..=read_to)
                    .filter(|(_, events)| {
                        events
                            .events
                            .iter()
                            .any(|e| entry.range.contains(&e.kv.key))
                    })
                    .map(|(_, events)| Arc::clone(events))
                    .collect()
            } else {
                Vec::new()
            };
            let message = match wanted.len() {
                0 => None,
                1 => wanted.pop().map(WatchMessage::Events),
                _ => Some(WatchMessage::History(wanted)),
            };
            // A round's worth goes only to a watcher that has read all it
            // was sent: one that does not read holds one round at most.
            let unread = entry.tx.capacity() < entry.tx.max_capacity();
            if unread && matches!(message, Some(WatchMessage::History(_))) {
                continue;
            }
            let blocked = match message.map(|m| entry.tx.try_send(m)) {
                None | Some(Ok(())) => false,
                Some(Err(mpsc::error::TrySendError::Full(_))) => true,
                // Gone: dropping the watcher cancels it.
                Some(Err(mpsc::error::TrySendError::Closed(_))) => continue,
            };
            if !blocked && entry.next_rev <= read_to {
                entry.next_rev = read_to + 1;
            }
            if entry.next_rev > current {
                entry.synced = true;
                entry.behind.store(false, Ordering::Release);
                if entry.progress_requested
                    && entry.tx.try_send(WatchMessage::Progress(current)).is_ok()
                {
                    entry.progress_requested = false;
                }
                let range = entry.range.clone();
                state.synced.insert(id, &range);
                state.unsynced_count -= 1;
            } else {
                more |= !blocked;
            }
        }
        more
    }
}

/// Sends one revision to the synced watchers it concerns; returns whether
/// any of them fell behind.
fn fan_out(state: &mut HubState, revision: &Arc<RevisionEvents>) -> bool {
    let mut concerned = std::mem::take(&mut state.scratch);
    state.synced.concerned(&revision.events, &mut concerned);
    let mut fell_behind = false;
    for &id in &concerned {
        let Some(entry) = state.watchers.get_mut(&id) else {
            continue;
        };
        match entry
            .tx
            .try_send(WatchMessage::Events(Arc::clone(revision)))
        {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(_)) => {
                // Too slow: it catches up from disk, starting with this revision.
                entry.synced = false;
                entry.behind.store(true, Ordering::Release);
                entry.next_rev = revision.revision;
                let range = entry.range.clone();
                state.synced.remove(id, &range);
                state.unsynced_count += 1;
                fell_behind = true;
            }
            Err(mpsc::error::TrySendError::Closed(_)) => {
                let range = entry.range.clone();
                state.watchers.remove(&id);
                state.synced.remove(id, &range);
            }
        }
    }
    state.scratch = concerned;
    fell_behind
}

pub struct SyncerHandle {
    hub: Arc<WatchHub>,
    thread: Option<thread::JoinHandle<()>>,
}

impl Drop for SyncerHandle {
    fn drop(&mut self) {
        self.hub.wake.lock().take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
