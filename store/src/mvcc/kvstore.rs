//! The MVCC key-value state on sled: the key index, the committed and
//! compacted revisions, the applied log index, and the read path. Writes
//! go through [`super::apply::Applier`], which only the log's writer runs.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use parking_lot::RwLock;
use tokio::sync::watch;

use super::index::TreeIndex;
use super::key_range::KeyRange;
use super::record::RecordView;
use super::revision::{Revision, RECORD_PREFIX};
use crate::api::{KeyValue, RangeRequest, RangeResponse, ResponseHeader, SortOrder, SortTarget};
use crate::error::{Result, StoreError};

mod read_view;
pub use read_view::ReadView;

pub(crate) const META_APPLIED_INDEX: &[u8] = b"m/applied_index";
pub(crate) const META_REVISION: &[u8] = b"m/revision";
pub(crate) const META_COMPACT_SCHEDULED: &[u8] = b"m/compact_scheduled";
pub(crate) const META_COMPACT_FINISHED: &[u8] = b"m/compact_finished";
/// What the compacted revision is before the first compaction.
const NEVER_COMPACTED: i64 = -1;
pub(crate) const LEASE_PREFIX: u8 = b'l';
/// The Raft membership as of the applied index (protobuf `ConfState`).
pub(crate) const META_CONF_STATE: &[u8] = b"m/conf_state";
/// Members' attributes (bincode `Member`), under this prefix + BE ID.
pub(crate) const META_MEMBER_PREFIX: &[u8] = b"m/member/";

pub(crate) fn member_key(id: u64) -> Vec<u8> {
    let mut key = META_MEMBER_PREFIX.to_vec();
    key.extend_from_slice(&id.to_be_bytes());
    key
}

/// Records written by the batch being applied, not yet in sled.
pub(crate) type Pending = HashMap<Revision, KeyValue>;

/// A write to the state tree: a value, or a removal.
pub(crate) type Op = (sled::IVec, Option<sled::IVec>);

/// Applied batches are written to sled together, at most this long after
/// the first of them: every `apply_batch` seals sled's log buffer twice,
/// and each seal costs its I/O threads a write and a `sync_file_range`.
/// Nothing is lost by the wait: what was applied is in the Raft log, which
/// is only released up to what sled has made durable.
pub(crate) const WRITE_BEHIND: std::time::Duration = std::time::Duration::from_millis(5);
/// ... or once this many bytes wait.
const WRITE_BEHIND_BYTES: usize = 4 << 20;

/// Records written to sled that readers still find in memory: at most
/// twice this many, the newest (see [`Recent`]).
const RECENT_RECORDS: usize = 1024;

/// The records written to sled most lately, two generations of at most
/// [`RECENT_RECORDS`] each. A reader that finds its record here does not
/// read sled, whose `apply_batch` holds a lock that every sled read in the
/// process waits on; most reads of a record come soon after its write (a
/// pod's binding, an object's next update).
#[derive(Default)]
struct Recent {
    newer: Pending,
    older: Pending,
}

impl Recent {
    fn get(&self, rev: &Revision) -> Option<KeyValue> {
        self.newer.get(rev).or_else(|| self.older.get(rev)).cloned()
    }

    fn add(&mut self, written: Pending) {
        if self.newer.len() + written.len() > RECENT_RECORDS {
            self.older = std::mem::take(&mut self.newer);
        }
        self.newer.extend(written);
    }
}

/// A revision, and the keys alive at it, each with the main revision it
/// was last modified at (see [`KvStore::mod_revisions`]).
pub type ModRevisions = (i64, Vec<(Vec<u8>, i64)>);

/// Applied writes not yet in sled, oldest first.
#[derive(Default)]
pub(crate) struct Behind {
    ops: Vec<Op>,
    bytes: usize,
    since: Option<std::time::Instant>,
}

pub struct KvStore {
    /// The state database; a defrag replaces it (see [`KvStore::tree`]).
    pub(crate) backend: RwLock<super::backend::Backend>,
    /// Where the state database lives (`None`: a tree given by a test).
    pub(crate) location: Option<super::backend::Location>,
    /// Bytes of the records in the tree (keys and values).
    pub(crate) record_bytes: AtomicU64,
    /// The database's size on disk as last measured, and when (ms after
    /// `opened_at`).
    pub(crate) db_size_seen: AtomicU64,
    pub(crate) db_size_measured_at: AtomicU64,
    pub(crate) opened_at: std::time::Instant,
    /// The alarms raised, as applied (see [`super::alarm`]).
    pub(crate) alarms: RwLock<std::collections::BTreeSet<super::alarm::AlarmMember>>,
    pub(crate) index: RwLock<TreeIndex>,
    /// The newest revision readers may see.
    current_rev: AtomicI64,
    /// Reads and watches below this revision answer "compacted".
    compact_rev: AtomicI64,
    applied_index: AtomicU64,
    /// The newest revision whose physical compaction has finished.
    pub(crate) compact_finished: watch::Sender<i64>,
    /// Applied writes waiting to go to sled together (see [`WRITE_BEHIND`]).
    pub(crate) behind: parking_lot::Mutex<Behind>,
    /// The records among them, for readers.
    unwritten: RwLock<Pending>,
    /// The records written out last, for readers.
    recent: RwLock<Recent>,
    /// [`WRITE_BEHIND`], longer in tests that look at what waits.
    write_behind_for: std::time::Duration,
    /// Held shared by every open [`ReadView`], exclusively by what removes
    /// records (a compaction on disk, an installed snapshot), so that a
    /// view never loses a record it should hold.
    pub(crate) removals: RwLock<()>,
}

/// One change read back from disk for watch history.
#[derive(Debug)]
pub(crate) struct HistoryRecord {
    pub revision: Revision,
    pub kv: KeyValue,
    pub tombstone: bool,
}

/// What open found on disk besides the key index.
#[derive(Debug, Default)]
pub(crate) struct Recovered {
    /// (id, granted ttl, checkpointed remaining ttl or 0)
    pub leases: Vec<(i64, i64, i64)>,
    /// Live keys that carry a lease.
    pub lease_keys: Vec<(i64, Vec<u8>)>,
    /// The Raft membership applied so far, if any (protobuf `ConfState`).
    pub conf_state: Option<Vec<u8>>,
    /// A compaction scheduled before a stop and not finished.
    pub unfinished_compaction: Option<(i64, HashSet<Revision>)>,
}

pub(crate) fn meta_i64(tree: &sled::Tree, key: &[u8]) -> Result<i64> {
    Ok(match tree.get(key)? {
        Some(v) => i64::from_le_bytes(v.as_ref().try_into().map_err(|_| {
            StoreError::storage("reading metadata", format!("bad value under {key:?}"))
        })?),
        None => 0,
    })
}

pub(crate) fn lease_key(id: i64) -> [u8; 9] {
    let mut key = [0u8; 9];
    key[0] = LEASE_PREFIX;
    key[1..].copy_from_slice(&id.to_be_bytes());
    key
}

pub(crate) fn lease_value(ttl: i64, remaining: i64) -> [u8; 16] {
    let mut value = [0u8; 16];
    value[..8].copy_from_slice(&ttl.to_le_bytes());
    value[8..].copy_from_slice(&remaining.to_le_bytes());
    value
}

impl KvStore {
    /// Loads the state from `tree`, rebuilding the key index from the
    /// records. The engine cannot be defragmented: it has no database of
    /// its own. For tests and the fuzz targets (`grpc::fuzzing`).
    pub(crate) fn open(tree: sled::Tree) -> Result<(KvStore, Recovered)> {
        Self::open_backend(super::backend::Backend::of_tree(tree), None)
    }

    /// Opens the state database of a data directory and loads the state.
    pub(crate) fn open_in(location: super::backend::Location) -> Result<(KvStore, Recovered)> {
        let backend = super::backend::open(&location)?;
        Self::open_backend(backend, Some(location))
    }

    fn open_backend(
        backend: super::backend::Backend,
        location: Option<super::backend::Location>,
    ) -> Result<(KvStore, Recovered)> {
        let (loaded, recovered) = load(&backend.tree)?;
        let store = KvStore {
            backend: RwLock::new(backend),
            location,
            record_bytes: AtomicU64::new(loaded.record_bytes),
            db_size_seen: AtomicU64::new(0),
            db_size_measured_at: AtomicU64::new(0),
            opened_at: std::time::Instant::now(),
            alarms: RwLock::new(loaded.alarms),
            index: RwLock::new(loaded.index),
            current_rev: AtomicI64::new(loaded.revision),
            compact_rev: AtomicI64::new(loaded.compact_scheduled),
            applied_index: AtomicU64::new(loaded.applied),
            compact_finished: watch::channel(loaded.compact_finished).0,
            behind: Default::default(),
            unwritten: Default::default(),
            recent: Default::default(),
            write_behind_for: WRITE_BEHIND,
            removals: RwLock::new(()),
        };
        Ok((store, recovered))
    }

    /// Takes an applied batch's writes (and its records, for readers);
    /// writes everything waiting to sled once the oldest has waited
    /// [`WRITE_BEHIND`] or enough bytes wait.
    pub(crate) fn write_behind(&self, ops: Vec<Op>, records: Pending) -> Result<()> {
        // Under `behind`'s lock, so that `unwritten` holds exactly the
        // records of the writes waiting.
        let mut behind = self.behind.lock();
        if !records.is_empty() {
            self.unwritten.write().extend(records);
        }
        behind.bytes += ops
            .iter()
            .map(|(k, v)| k.len() + v.as_ref().map_or(0, |v| v.len()))
            .sum::<usize>();
        behind.ops.extend(ops);
        let since = *behind.since.get_or_insert_with(std::time::Instant::now);
        if behind.bytes >= WRITE_BEHIND_BYTES || since.elapsed() >= self.write_behind_for {
            self.write_out(&mut behind)?;
        }
        Ok(())
    }

    /// Applied writes wait for `flush_behind` alone (tests).
    #[cfg(test)]
    pub(crate) fn hold_writes(&mut self) {
        self.write_behind_for = std::time::Duration::MAX;
    }

    /// Writes every applied write still waiting to sled: before anything
    /// reads sled other than by record (history, snapshots, membership),
    /// compacts it, or makes it durable.
    pub(crate) fn flush_behind(&self) -> Result<()> {
        let mut behind = self.behind.lock();
        self.write_out(&mut behind)
    }

    /// Calls `read` with the state tree as of one applied batch: applied
    /// writes are written out first, and none reaches the tree until
    /// `read` returns (the applier waits meanwhile). A compaction already
    /// running may still remove records below its revision, as it would
    /// have anyway.
    pub(crate) fn with_consistent_tree<T>(
        &self,
        read: impl FnOnce(&sled::Tree) -> Result<T>,
    ) -> Result<T> {
        let mut behind = self.behind.lock();
        self.write_out(&mut behind)?;
        read(&self.tree())
    }

    /// Every entry of the state tree as of one applied batch (see
    /// [`KvStore::read_view`]), in key order; writes go on meanwhile.
    pub fn consistent_entries(&self) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        self.read_view()?.entries().collect()
    }

    pub(crate) fn write_out(&self, behind: &mut Behind) -> Result<()> {
        if behind.ops.is_empty() {
            return Ok(());
        }
        let mut batch = sled::Batch::default();
        let mut record_bytes = 0;
        for (key, value) in &behind.ops {
            match value {
                Some(value) => {
                    // A record is written once, under its own revision.
                    if key.first() == Some(&RECORD_PREFIX) {
                        record_bytes += (key.len() + value.len()) as u64;
                    }
                    batch.insert(key.clone(), value.clone())
                }
                None => batch.remove(key.clone()),
            }
        }
        // On failure everything stays waiting, to be tried again: a later
        // batch must never reach sled (with its applied index) without it.
        self.tree().apply_batch(batch)?;
        self.record_bytes.fetch_add(record_bytes, Ordering::Relaxed);
        *behind = Behind::default();
        let written = std::mem::take(&mut *self.unwritten.write());
        self.recent.write().add(written);
        Ok(())
    }

    /// Replaces the whole state with `entries` (a snapshot from the leader)
    /// and reloads the index; readers wait on the index lock meanwhile.
    pub(crate) fn replace_state(
        &self,
        entries: impl Iterator<Item = (Vec<u8>, Vec<u8>)>,
    ) -> Result<Recovered> {
        let _no_view_open = self.removals.write();
        let mut index = self.index.write();
        // What was applied before is replaced whole.
        *self.behind.lock() = Behind::default();
        self.unwritten.write().clear();
        *self.recent.write() = Recent::default();
        let tree = self.tree();
        tree.clear()?;
        // The old state is gone, the new one not in yet: the next start
        // installs the snapshot kept in `snap/` again.
        crate::crash_point!("snapshot::install");
        let mut batch = sled::Batch::default();
        for (key, value) in entries {
            batch.insert(key, value);
        }
        tree.apply_batch(batch)?;
        let (loaded, recovered) = load(&tree)?;
        drop(tree);
        *index = loaded.index;
        self.record_bytes
            .store(loaded.record_bytes, Ordering::Relaxed);
        *self.alarms.write() = loaded.alarms;
        self.current_rev.store(loaded.revision, Ordering::Release);
        self.compact_rev
            .store(loaded.compact_scheduled, Ordering::Release);
        self.applied_index.store(loaded.applied, Ordering::Release);
        self.compact_finished.send_replace(loaded.compact_finished);
        Ok(recovered)
    }
}

/// The state `load` read from a tree.
struct Loaded {
    index: TreeIndex,
    revision: i64,
    applied: u64,
    compact_scheduled: i64,
    compact_finished: i64,
    record_bytes: u64,
    alarms: std::collections::BTreeSet<super::alarm::AlarmMember>,
}

/// Reads the metadata, leases and membership of `tree` and rebuilds the
/// key index from its records.
fn load(tree: &sled::Tree) -> Result<(Loaded, Recovered)> {
    let applied = meta_i64(tree, META_APPLIED_INDEX)? as u64;
    let rev = meta_i64(tree, META_REVISION)?;
    // Never compacted: etcd's compactMainRev -1, so that even revision 0
    // can be compacted once.
    let scheduled = match tree.get(META_COMPACT_SCHEDULED)? {
        Some(_) => meta_i64(tree, META_COMPACT_SCHEDULED)?,
        None => NEVER_COMPACTED,
    };
    let finished = meta_i64(tree, META_COMPACT_FINISHED)?;

    let mut index = TreeIndex::default();
    let mut key_lease: HashMap<Vec<u8>, i64> = HashMap::new();
    let mut record_bytes = 0u64;
    for item in tree.scan_prefix([RECORD_PREFIX]) {
        let (k, v) = item?;
        record_bytes += (k.len() + v.len()) as u64;
        let (Some(at), Some(record)) = (Revision::from_key(&k), RecordView::parse(&v)) else {
            return Err(StoreError::storage(
                "rebuilding the key index",
                format!("unreadable record under {k:?}"),
            ));
        };
        if record.tombstone {
            // A tombstone whose put was already compacted away is only
            // watch history; the key is not alive in the index.
            index.tombstone(record.key, at);
            key_lease.remove(record.key);
        } else {
            index.put(record.key, at, 0);
            if record.lease != 0 {
                key_lease.insert(record.key.to_vec(), record.lease);
            } else if !key_lease.is_empty() {
                key_lease.remove(record.key);
            }
        }
    }

    let mut recovered = Recovered::default();
    if scheduled > 0 {
        let keep = index.compact(scheduled);
        if finished < scheduled {
            recovered.unfinished_compaction = Some((scheduled, keep));
        }
    }
    for item in tree.scan_prefix([LEASE_PREFIX]) {
        let (k, v) = item?;
        if k.len() != 9 || v.len() != 16 {
            return Err(StoreError::storage(
                "loading leases",
                format!("bad lease record under {k:?}"),
            ));
        }
        let id = i64::from_be_bytes(k[1..9].try_into().unwrap_or_default());
        let ttl = i64::from_le_bytes(v[..8].try_into().unwrap_or_default());
        let remaining = i64::from_le_bytes(v[8..].try_into().unwrap_or_default());
        recovered.leases.push((id, ttl, remaining));
    }
    recovered.lease_keys = key_lease.into_iter().map(|(k, l)| (l, k)).collect();
    recovered.conf_state = tree.get(META_CONF_STATE)?.map(|v| v.to_vec());
    let loaded = Loaded {
        index,
        revision: rev,
        applied,
        compact_scheduled: scheduled,
        compact_finished: finished,
        record_bytes,
        alarms: super::alarm::load(tree)?,
    };
    Ok((loaded, recovered))
}

impl KvStore {
    pub fn current_revision(&self) -> i64 {
        self.current_rev.load(Ordering::Acquire)
    }

    /// The revision of the last compaction (0 if none).
    pub fn compact_revision(&self) -> i64 {
        self.compact_rev.load(Ordering::Acquire).max(0)
    }

    /// The revision of the last compaction; `None` if the store was never
    /// compacted (then a compaction at revision 0 is still accepted).
    pub fn last_compaction(&self) -> Option<i64> {
        let rev = self.compact_rev.load(Ordering::Acquire);
        (rev != NEVER_COMPACTED).then_some(rev)
    }

    /// The alarms raised of type `alarm` ([`super::alarm::NONE`]: all), as
    /// applied here.
    pub fn alarms(&self, alarm: i32) -> Vec<super::alarm::AlarmMember> {
        self.alarms
            .read()
            .iter()
            .filter(|a| alarm == super::alarm::NONE || a.alarm == alarm)
            .copied()
            .collect()
    }

    /// Keys that exist at the current revision.
    pub fn live_keys(&self) -> usize {
        self.index.read().live_keys()
    }

    /// The last log index whose command is applied.
    pub fn applied_index(&self) -> u64 {
        self.applied_index.load(Ordering::Acquire)
    }

    pub(crate) fn set_applied_index(&self, index: u64) {
        let before = self.applied_index.swap(index, Ordering::AcqRel);
        assert!(
            index >= before,
            "applied index moved back: {before} -> {index}"
        );
    }

    /// Makes `rev` visible to readers.
    pub(crate) fn publish_revision(&self, rev: i64) {
        let before = self.current_rev.swap(rev, Ordering::AcqRel);
        assert!(rev >= before, "revision moved back: {before} -> {rev}");
    }

    pub(crate) fn set_compact_revision(&self, rev: i64) {
        self.compact_rev.store(rev, Ordering::Release);
    }

    /// Members' attributes as applied (who is a member is the membership's
    /// say; this holds names and URLs).
    pub fn member_registry(&self) -> Result<Vec<crate::api::Member>> {
        self.flush_behind()?;
        let mut members = Vec::new();
        for item in self.tree().scan_prefix(META_MEMBER_PREFIX) {
            let (_, value) = item?;
            let member: crate::api::Member = bincode::deserialize(&value)
                .map_err(|e| StoreError::storage("reading the member list", e))?;
            members.push(member);
        }
        Ok(members)
    }

    /// The membership as applied (protobuf `ConfState`), if any.
    pub fn conf_state_bytes(&self) -> Result<Option<Vec<u8>>> {
        self.flush_behind()?;
        Ok(self.tree().get(META_CONF_STATE)?.map(|v| v.to_vec()))
    }

    /// The key count of the index (live and recently deleted keys).
    pub fn index_len(&self) -> usize {
        self.index.read().len()
    }

    /// Resolves the revision a read asks for, or says why it cannot be served.
    pub fn check_read_revision(&self, requested: i64) -> Result<i64> {
        let current = self.current_revision();
        let at = if requested <= 0 { current } else { requested };
        if at > current {
            return Err(StoreError::FutureRevision {
                current_revision: current,
            });
        }
        self.check_not_compacted(at)?;
        Ok(at)
    }

    fn check_not_compacted(&self, at: i64) -> Result<()> {
        let compacted = self.compact_revision();
        if at < compacted {
            return Err(StoreError::Compacted {
                compact_revision: compacted,
            });
        }
        Ok(())
    }

    /// A range read at the request's revision (etcd's Range).
    pub fn range(&self, req: &RangeRequest) -> Result<RangeResponse> {
        if req.key.is_empty() {
            return Err(StoreError::EmptyKey);
        }
        let at = self.check_read_revision(req.revision)?;
        let mut resp = self.range_at(req, at, None)?;
        resp.header.revision = self.current_revision();
        Ok(resp)
    }

    /// The keys in `[key, range_end)` (etcd's rules) alive at the current
    /// revision, each with the main revision it was last modified at, from
    /// the index alone: no record is read. Also that revision.
    pub fn mod_revisions(&self, key: &[u8], range_end: &[u8]) -> Result<ModRevisions> {
        if key.is_empty() {
            return Err(StoreError::EmptyKey);
        }
        let at = self.current_revision();
        let mut found = Vec::new();
        self.index
            .read()
            .visit_range(&KeyRange::new(key, range_end), at, |key, key_at| {
                found.push((key.to_vec(), key_at.modified.main));
                true
            });
        Ok((at, found))
    }

    /// A range read at revision `at`, seeing `pending` records of the batch
    /// being applied (the writer's own reads).
    pub(crate) fn range_at(
        &self,
        req: &RangeRequest,
        at: i64,
        pending: Option<&Pending>,
    ) -> Result<RangeResponse> {
        let range = KeyRange::new(&req.key, &req.range_end);
        let filtered = req.min_mod_revision != 0
            || req.max_mod_revision != 0
            || req.min_create_revision != 0
            || req.max_create_revision != 0;
        // One more than the limit tells whether there are more; sorting and
        // filtering need every key first.
        let fetch = if req.limit > 0 && req.sort_order == SortOrder::None && !filtered {
            req.limit as usize + 1
        } else {
            usize::MAX
        };
        let mut count = 0i64;
        let mut found = Vec::new();
        self.index.read().visit_range(&range, at, |_, key_at| {
            count += 1;
            if !req.count_only && found.len() < fetch {
                found.push(key_at.modified);
            }
            true
        });
        let mut resp = RangeResponse {
            count,
            ..Default::default()
        };
        if req.count_only {
            self.check_not_compacted(at)?;
            return Ok(resp);
        }
        let mut kvs = Vec::with_capacity(found.len());
        for rev in found {
            match self.load(rev, pending, !req.keys_only)? {
                Some(kv) => kvs.push(kv),
                // Removed under us by a compaction that started after our check.
                None => {
                    return Err(StoreError::Compacted {
                        compact_revision: self.compact_revision(),
                    })
                }
            }
        }
        self.check_not_compacted(at)?;
        if filtered {
            kvs.retain(|kv| passes_revision_filters(req, kv));
        }
        sort_key_values(&mut kvs, req.sort_order, req.sort_target);
        if req.limit > 0 && kvs.len() > req.limit as usize {
            kvs.truncate(req.limit as usize);
            resp.more = true;
        }
        resp.kvs = kvs;
        Ok(resp)
    }

    /// The key-value written at `rev`, from the pending batch or disk.
    pub(crate) fn load(
        &self,
        rev: Revision,
        pending: Option<&Pending>,
        with_value: bool,
    ) -> Result<Option<KeyValue>> {
        // The batch being applied, then applied writes not yet in sled.
        let waiting = pending
            .and_then(|p| p.get(&rev).cloned())
            .or_else(|| self.unwritten.read().get(&rev).cloned())
            .or_else(|| self.recent.read().get(&rev));
        if let Some(mut kv) = waiting {
            if !with_value {
                kv.value.clear();
            }
            return Ok(Some(kv));
        }
        let Some(bytes) = self.tree().get(rev.to_key())? else {
            return Ok(None);
        };
        let record = RecordView::parse(&bytes).ok_or_else(|| {
            StoreError::storage("reading a record", format!("unreadable record at {rev:?}"))
        })?;
        Ok(Some(record.into_key_value(rev.main, with_value)))
    }

    /// The key as it was at revision `at` (prev_kv for watch events).
    pub fn get_at(&self, key: &[u8], at: i64) -> Result<Option<KeyValue>> {
        // Not between a snapshot install's clear and fill (see `history`).
        let _no_install = self.removals.read();
        self.check_not_compacted(at)?;
        let Some(found) = self.index.read().get(key, at) else {
            return Ok(None);
        };
        self.load(found.modified, None, true)
    }

    /// Disk records from main revision `from` through `to`, in revision order
    /// (watch history), at most `max_records` of them but always whole
    /// revisions. Returns the records and the last revision fully read.
    ///
    /// Waits for a snapshot being installed: `replace_state` empties the
    /// tree before it fills it again, and a read in between would answer
    /// "nothing up to `to`", so that a watcher catching up skipped every
    /// revision it had not been sent (found by the fault suite).
    pub(crate) fn history(
        &self,
        from: i64,
        to: i64,
        max_records: usize,
    ) -> Result<(Vec<HistoryRecord>, i64)> {
        let _no_install = self.removals.read();
        self.flush_behind()?;
        let start = Revision::new(from, 0).to_key();
        let end = Revision::new(to + 1, 0).to_key();
        let mut out: Vec<HistoryRecord> = Vec::new();
        for item in self.tree().range(start..end) {
            let (k, v) = item?;
            let (Some(rev), Some(record)) = (Revision::from_key(&k), RecordView::parse(&v)) else {
                return Err(StoreError::storage(
                    "reading watch history",
                    format!("unreadable record under {k:?}"),
                ));
            };
            if let Some(prev) = out.last() {
                if prev.revision.main != rev.main && out.len() >= max_records {
                    let last_full = prev.revision.main;
                    return Ok((out, last_full));
                }
            }
            let kv = if record.tombstone {
                KeyValue {
                    key: record.key.to_vec(),
                    mod_revision: rev.main,
                    ..Default::default()
                }
            } else {
                record.into_key_value(rev.main, true)
            };
            out.push(HistoryRecord {
                revision: rev,
                kv,
                tombstone: record.tombstone,
            });
        }
        Ok((out, to))
    }

    pub(crate) fn header(&self) -> ResponseHeader {
        ResponseHeader {
            revision: self.current_revision(),
        }
    }
}

fn passes_revision_filters(req: &RangeRequest, kv: &KeyValue) -> bool {
    !((req.max_mod_revision != 0 && kv.mod_revision > req.max_mod_revision)
        || (req.min_mod_revision != 0 && kv.mod_revision < req.min_mod_revision)
        || (req.max_create_revision != 0 && kv.create_revision > req.max_create_revision)
        || (req.min_create_revision != 0 && kv.create_revision < req.min_create_revision))
}

/// etcd's ordering: results come in key order; a non-key target with no
/// order sorts ascending; ascending by key needs no sort.
fn sort_key_values(kvs: &mut [KeyValue], order: SortOrder, target: SortTarget) {
    let order = match (order, target) {
        (SortOrder::None, SortTarget::Key) | (SortOrder::Ascend, SortTarget::Key) => return,
        (SortOrder::None, _) => SortOrder::Ascend,
        (order, _) => order,
    };
    let cmp = |a: &KeyValue, b: &KeyValue| match target {
        SortTarget::Key => a.key.cmp(&b.key),
        SortTarget::Version => a.version.cmp(&b.version),
        SortTarget::Create => a.create_revision.cmp(&b.create_revision),
        SortTarget::Mod => a.mod_revision.cmp(&b.mod_revision),
        SortTarget::Value => a.value.cmp(&b.value),
    };
    if order == SortOrder::Descend {
        kvs.sort_by(|a, b| cmp(b, a));
    } else {
        kvs.sort_by(cmp);
    }
}

/// Revisions of one key seen from outside the index (used by tests).
#[cfg(test)]
pub(crate) fn all_record_revisions(tree: &sled::Tree) -> HashSet<Revision> {
    tree.scan_prefix([RECORD_PREFIX])
        .filter_map(|item| item.ok().and_then(|(k, _)| Revision::from_key(&k)))
        .collect()
}
