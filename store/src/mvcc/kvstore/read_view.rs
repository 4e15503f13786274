//! A point-in-time view of the whole state tree for copies that take long
//! (a snapshot streamed to `etcdctl snapshot save`): taken in one short
//! step, then read while writes go on. Not for the reads the key index
//! serves.
//!
//! Records are keyed by revision and never change once written, so the
//! view is the records up to the revision it was taken at, plus the few
//! other entries (metadata, leases, members) copied when it was taken.
//! Only a compaction on disk or a snapshot installed from the leader
//! removes records: they wait until no view is open.

use parking_lot::RwLockReadGuard;

use super::{meta_i64, KvStore, META_REVISION};
use crate::error::Result;
use crate::mvcc::revision::{Revision, RECORD_PREFIX};

/// An entry of the state tree: key and value.
pub type Entry = (Vec<u8>, Vec<u8>);

/// The state tree as of one applied batch.
pub struct ReadView<'a> {
    kv: &'a KvStore,
    /// Holds off what would remove records under the view.
    _removals_wait: RwLockReadGuard<'a, ()>,
    revision: i64,
    /// Entries that sort before the records, as of the view.
    before_records: Vec<Entry>,
    /// Entries that sort after the records, as of the view.
    after_records: Vec<Entry>,
}

impl KvStore {
    /// A view of the state as of the last applied batch. Taking it writes
    /// out what waits to be written and copies the entries that are not
    /// records, under the lock the applier takes; reading it holds no lock
    /// a writer waits on.
    pub fn read_view(&self) -> Result<ReadView<'_>> {
        let removals_wait = self.removals.read();
        let mut behind = self.behind.lock();
        self.write_out(&mut behind)?;
        let tree = self.tree();
        let revision = meta_i64(&tree, META_REVISION)?;
        let copy = |range: sled::Iter| -> Result<Vec<Entry>> {
            range
                .map(|item| {
                    let (key, value) = item?;
                    Ok((key.to_vec(), value.to_vec()))
                })
                .collect()
        };
        let before_records = copy(tree.range(..[RECORD_PREFIX]))?;
        let after_records = copy(tree.range([RECORD_PREFIX + 1]..))?;
        drop(tree);
        drop(behind);
        Ok(ReadView {
            kv: self,
            _removals_wait: removals_wait,
            revision,
            before_records,
            after_records,
        })
    }
}

impl ReadView<'_> {
    /// The store's revision the view was taken at.
    pub fn revision(&self) -> i64 {
        self.revision
    }

    /// Every entry of the view, in key order. Records come from the tree
    /// as they are read: later writes (newer revisions) are left out.
    pub fn entries(&self) -> impl Iterator<Item = Result<Entry>> + '_ {
        let first = Revision::new(0, 0).to_key();
        let past = Revision::new(self.revision.saturating_add(1), 0).to_key();
        // The tree the view was taken on: a defrag, which would switch
        // trees, waits for open views as compactions do.
        let tree = self.kv.tree().clone();
        let records = tree.range(first..past).map(|item| {
            let (key, value) = item?;
            Ok((key.to_vec(), value.to_vec()))
        });
        self.before_records
            .iter()
            .cloned()
            .map(Ok)
            .chain(records)
            .chain(self.after_records.iter().cloned().map(Ok))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{mpsc, Arc};
    use std::time::Duration;

    use crate::node::testing::{open_temp, put};

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn writes_and_compactions_go_on_while_a_view_is_read() {
        let (store, _dir) = open_temp().await;
        for i in 0..200 {
            put(&store, &format!("before/{i:03}"), "v").await;
        }
        store.lease_grant(60, 7).await.unwrap();
        let kv = Arc::clone(store.kv());
        let expected = kv.consistent_entries().unwrap();
        let (opened, opened_at) = mpsc::channel();
        let (release, released) = mpsc::channel::<()>();
        // Half read, then held open while the store takes writes.
        let reader = std::thread::spawn(move || {
            let view = kv.read_view().unwrap();
            let mut entries = view.entries();
            let mut read: Vec<_> = entries.by_ref().take(100).collect();
            opened.send(view.revision()).unwrap();
            released.recv().unwrap();
            read.extend(entries);
            read.into_iter().collect::<crate::error::Result<Vec<_>>>()
        });
        let at = opened_at.recv().unwrap();
        assert_eq!(at, 200);
        for i in 0..50 {
            let key = format!("during/{i:03}");
            tokio::time::timeout(Duration::from_secs(2), put(&store, &key, "v"))
                .await
                .expect("a write waited for the view");
        }
        store.lease_revoke(7).await.unwrap();
        // Logically at once; on disk once the view is closed.
        store.compact(240, false).await.unwrap();
        release.send(()).unwrap();
        let read = reader.join().unwrap().unwrap();
        assert_eq!(read.len(), expected.len());
        assert!(
            read == expected,
            "the view holds the state it was taken at, no later write and no record compacted away"
        );
        let mut finished = store.kv().compact_finished.subscribe();
        let compacted = finished.wait_for(|&r| r >= 240);
        tokio::time::timeout(Duration::from_secs(10), compacted)
            .await
            .expect("the compaction finished once the view closed")
            .unwrap();
        let revision = store.kv().read_view().unwrap().revision();
        assert_eq!(revision, 250, "the 50 writes made while the view was open");
    }
}
