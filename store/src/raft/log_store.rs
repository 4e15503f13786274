//! The Raft log as raft-rs reads it: entries after the last compaction
//! point, the hard state and the membership, held in memory. The core
//! makes every change durable in the write-ahead log before raft-rs relies
//! on it; this type only answers raft-rs's questions.

use std::cell::RefCell;
use std::sync::Arc;

use raft::eraftpb::{ConfState, Entry, HardState, Snapshot, SnapshotMetadata};
use raft::{GetEntriesContext, RaftState, Storage, StorageError};

use crate::mvcc::KvStore;

#[derive(Default)]
pub struct LogStore {
    hard_state: HardState,
    conf_state: ConfState,
    /// Index and term of the last entry dropped from the front of the log.
    compacted: SnapshotMetadata,
    /// Entries after `compacted.index`, contiguous.
    entries: Vec<Entry>,
    /// The engine whose state a snapshot holds (none: no snapshots).
    engine: Option<Arc<KvStore>>,
    /// The last snapshot made, sent again while the log still follows it.
    made: RefCell<Option<Snapshot>>,
}

impl LogStore {
    pub fn new(hard_state: HardState, conf_state: ConfState, compacted: (u64, u64)) -> Self {
        let mut meta = SnapshotMetadata {
            index: compacted.0,
            term: compacted.1,
            ..Default::default()
        };
        meta.set_conf_state(conf_state.clone());
        LogStore {
            hard_state,
            conf_state,
            compacted: meta,
            entries: Vec::new(),
            engine: None,
            made: RefCell::new(None),
        }
    }

    /// Lets raft-rs ask for snapshots of `engine` for lagging followers.
    /// Its applied index must only move on the thread that drives raft.
    pub fn with_engine(mut self, engine: Arc<KvStore>) -> Self {
        self.engine = Some(engine);
        self
    }

    /// Lets the last snapshot made go (no member is waiting for one).
    pub fn forget_snapshot(&mut self) {
        self.made.get_mut().take();
    }

    /// After a snapshot is installed: the log restarts after it.
    pub fn apply_snapshot(&mut self, meta: &SnapshotMetadata) {
        let index = meta.index;
        if index <= self.compacted.index {
            return;
        }
        // Entries after the snapshot are kept only if they agree with it.
        if index <= self.last() && self.term_of(index) == Some(meta.term) {
            let drop = (index - self.compacted.index) as usize;
            self.entries.drain(..drop);
        } else {
            self.entries.clear();
        }
        self.compacted = meta.clone();
        self.conf_state = meta.get_conf_state().clone();
        self.hard_state.commit = self.hard_state.commit.max(index);
        self.hard_state.term = self.hard_state.term.max(meta.term);
    }

    pub fn hard_state(&self) -> &HardState {
        &self.hard_state
    }

    pub fn set_hard_state(&mut self, hs: HardState) {
        self.hard_state = hs;
    }

    pub fn set_commit(&mut self, commit: u64) {
        self.hard_state.commit = commit;
    }

    pub fn set_conf_state(&mut self, cs: ConfState) {
        self.conf_state = cs;
    }

    pub fn compacted_index(&self) -> u64 {
        self.compacted.index
    }

    /// Appends entries, replacing any conflicting suffix (a new leader may
    /// overwrite entries that were never committed).
    pub fn append(&mut self, entries: &[Entry]) {
        let Some(first) = entries.first() else { return };
        let first_index = self.compacted.index + 1;
        if first.index < first_index {
            // Older than what we dropped: raft-rs never sends these after a
            // snapshot; skip the part already compacted.
            let skip = (first_index - first.index) as usize;
            if skip >= entries.len() {
                return;
            }
            return self.append(&entries[skip..]);
        }
        let keep = (first.index - first_index) as usize;
        assert!(
            keep <= self.entries.len(),
            "log gap: appending {} after {}",
            first.index,
            self.last()
        );
        self.entries.truncate(keep);
        self.entries.extend_from_slice(entries);
    }

    /// Drops entries up to and including `index` (they are in the state).
    pub fn compact(&mut self, index: u64) {
        if index <= self.compacted.index || index > self.last() {
            return;
        }
        let term = self.term_of(index).unwrap_or(self.compacted.term);
        let drop = (index - self.compacted.index) as usize;
        self.entries.drain(..drop);
        self.compacted.index = index;
        self.compacted.term = term;
    }

    fn last(&self) -> u64 {
        self.compacted.index + self.entries.len() as u64
    }

    fn term_of(&self, index: u64) -> Option<u64> {
        if index == self.compacted.index {
            return Some(self.compacted.term);
        }
        let offset = index.checked_sub(self.compacted.index + 1)? as usize;
        self.entries.get(offset).map(|e| e.term)
    }
}

impl Storage for LogStore {
    fn initial_state(&self) -> raft::Result<RaftState> {
        Ok(RaftState {
            hard_state: self.hard_state.clone(),
            conf_state: self.conf_state.clone(),
        })
    }

    fn entries(
        &self,
        low: u64,
        high: u64,
        max_size: impl Into<Option<u64>>,
        _context: GetEntriesContext,
    ) -> raft::Result<Vec<Entry>> {
        if low <= self.compacted.index {
            return Err(raft::Error::Store(StorageError::Compacted));
        }
        if high > self.last() + 1 {
            return Err(raft::Error::Store(StorageError::Unavailable));
        }
        let start = (low - self.compacted.index - 1) as usize;
        let end = (high - self.compacted.index - 1) as usize;
        let mut out: Vec<Entry> = self.entries[start..end].to_vec();
        raft::util::limit_size(&mut out, max_size.into());
        Ok(out)
    }

    fn term(&self, idx: u64) -> raft::Result<u64> {
        if idx < self.compacted.index {
            return Err(raft::Error::Store(StorageError::Compacted));
        }
        self.term_of(idx)
            .ok_or(raft::Error::Store(StorageError::Unavailable))
    }

    fn first_index(&self) -> raft::Result<u64> {
        Ok(self.compacted.index + 1)
    }

    fn last_index(&self) -> raft::Result<u64> {
        Ok(self.last())
    }

    fn snapshot(&self, request_index: u64, to: u64) -> raft::Result<Snapshot> {
        let unavailable = || raft::Error::Store(StorageError::SnapshotTemporarilyUnavailable);
        let engine = self.engine.as_ref().ok_or_else(unavailable)?;
        if let Some(made) = self.made.borrow().as_ref() {
            // Still good if the log goes on from it and it is new enough.
            let index = made.get_metadata().index;
            if index >= self.compacted.index && index >= request_index {
                return Ok(made.clone());
            }
        }
        let applied = engine.applied_index();
        if applied < request_index || applied < self.compacted.index {
            return Err(unavailable());
        }
        let term = self.term_of(applied).ok_or_else(unavailable)?;
        let data = engine.dump().map_err(|err| {
            tracing::warn!(error = %err, "could not make a snapshot");
            unavailable()
        })?;
        let mut snapshot = Snapshot {
            data: data.into(),
            ..Default::default()
        };
        let meta = snapshot.mut_metadata();
        meta.index = applied;
        meta.term = term;
        meta.set_conf_state(self.conf_state.clone());
        tracing::info!(
            index = applied,
            term,
            bytes = snapshot.data.len(),
            to = format_args!("{to:x}"),
            "made a snapshot for a lagging member"
        );
        *self.made.borrow_mut() = Some(snapshot.clone());
        Ok(snapshot)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(index: u64, term: u64) -> Entry {
        Entry {
            index,
            term,
            ..Default::default()
        }
    }

    fn store() -> LogStore {
        LogStore::new(HardState::default(), ConfState::default(), (0, 0))
    }

    fn indexes_terms(s: &LogStore) -> Vec<(u64, u64)> {
        let last = s.last_index().unwrap();
        s.entries(
            s.first_index().unwrap(),
            last + 1,
            None,
            GetEntriesContext::empty(false),
        )
        .unwrap()
        .iter()
        .map(|e| (e.index, e.term))
        .collect()
    }

    #[test]
    fn append_replaces_a_conflicting_suffix() {
        let mut s = store();
        s.append(&[entry(1, 1), entry(2, 1), entry(3, 1)]);
        s.append(&[entry(2, 2), entry(3, 2), entry(4, 2)]);
        assert_eq!(indexes_terms(&s), [(1, 1), (2, 2), (3, 2), (4, 2)]);
        assert_eq!(s.term(2).unwrap(), 2);
        assert_eq!(s.term(0).unwrap(), 0);
    }

    #[test]
    fn compaction_keeps_the_term_of_the_compaction_point() {
        let mut s = store();
        s.append(&[entry(1, 1), entry(2, 1), entry(3, 2), entry(4, 2)]);
        s.compact(3);
        assert_eq!(s.first_index().unwrap(), 4);
        assert_eq!(s.term(3).unwrap(), 2);
        assert!(matches!(
            s.term(2),
            Err(raft::Error::Store(StorageError::Compacted))
        ));
        assert!(matches!(
            s.entries(3, 5, None, GetEntriesContext::empty(false)),
            Err(raft::Error::Store(StorageError::Compacted))
        ));
        assert_eq!(indexes_terms(&s), [(4, 2)]);
        // Appending across the compaction point keeps only the new part.
        s.append(&[entry(3, 2), entry(4, 3), entry(5, 3)]);
        assert_eq!(indexes_terms(&s), [(4, 3), (5, 3)]);
    }

    #[test]
    fn size_limit_returns_at_least_one_entry() {
        let mut s = store();
        let mut big = entry(1, 1);
        big.data = vec![0u8; 1000].into();
        s.append(&[big, entry(2, 1)]);
        let got = s
            .entries(1, 3, Some(10), GetEntriesContext::empty(false))
            .unwrap();
        assert_eq!(got.len(), 1);
    }
}
