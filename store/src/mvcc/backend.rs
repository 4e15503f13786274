//! The sled database under the MVCC state: where it lives in the data
//! directory, how big it is, and defragmentation. sled never shrinks its
//! files, so the space of history removed by compaction only comes back
//! by copying the live state into a fresh database beside the old one and
//! switching to it, as etcd's defrag copies bbolt. Not for what the state
//! means: [`KvStore`] reads and writes through this.
//!
//! On disk the state is `DATA_DIR/db`. A defragmented copy is built in
//! `DATA_DIR/db.N`; once complete and synced, `DATA_DIR/db.current` names
//! it (the switch), and the next start moves it back to `db`. A copy that
//! was never switched to is removed at the next start.

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

use parking_lot::{MappedRwLockReadGuard, RwLockReadGuard};

use super::kvstore::{meta_i64, KvStore, META_REVISION};
use super::revision::{Revision, RECORD_PREFIX};
use crate::error::{Result, StoreError};
use crate::node::durability::fsync_tree;

/// The state database's directory in the data directory, and the tree in
/// it holding the MVCC state.
pub const STATE_DB: &str = "db";
pub const STATE_TREE: &str = "mvcc";
/// Names the state database in use after a defrag, until the next start.
const CURRENT: &str = "db.current";
/// Entries copied per sled batch by a defrag, at most.
const COPY_BATCH_BYTES: usize = 4 << 20;

/// The open state database: the tree holding the MVCC state, and the
/// database it is in (tests may give a tree alone).
pub(crate) struct Backend {
    pub(crate) tree: sled::Tree,
    db: Option<sled::Db>,
    /// Where `db` is.
    dir: Option<PathBuf>,
}

impl Backend {
    /// A tree alone, for tests and the fuzz targets (`grpc::fuzzing`).
    pub(crate) fn of_tree(tree: sled::Tree) -> Backend {
        Backend {
            tree,
            db: None,
            dir: None,
        }
    }
}

/// Where a member's state database lives, so that a copy can be opened
/// beside it.
#[derive(Debug, Clone)]
pub struct Location {
    pub data_dir: PathBuf,
    /// sled's page cache, in bytes.
    pub cache_capacity: u64,
}

/// What a defrag did: the database's size on disk before and after.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Defragmented {
    pub size_before: u64,
    pub size_after: u64,
}

/// Opens (or creates) the state database of `location`, finishing or
/// undoing a defrag a stop interrupted.
pub(crate) fn open(location: &Location) -> Result<Backend> {
    settle(&location.data_dir).map_err(|e| StoreError::storage("opening the state database", e))?;
    let dir = location.data_dir.join(STATE_DB);
    let db = open_db(&dir, location.cache_capacity)?;
    Ok(Backend {
        tree: db.open_tree(STATE_TREE)?,
        db: Some(db),
        dir: Some(dir),
    })
}

fn open_db(dir: &Path, cache_capacity: u64) -> Result<sled::Db> {
    Ok(sled::Config::new()
        .path(dir)
        .cache_capacity(cache_capacity)
        .flush_every_ms(None)
        .open()?)
}

/// Leaves exactly one state database, at `db`: a switched-to copy is
/// moved there (the old database removed first), a copy never switched
/// to is removed.
fn settle(data_dir: &Path) -> std::io::Result<()> {
    let pointer = data_dir.join(CURRENT);
    let named = match std::fs::read_to_string(&pointer) {
        Ok(name) => Some(name.trim().to_string()),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => None,
        Err(err) => return Err(err),
    };
    if let Some(name) = named.filter(|name| generation(name).is_some_and(|g| g > 0)) {
        let copy = data_dir.join(&name);
        if copy.is_dir() {
            let db = data_dir.join(STATE_DB);
            if db.exists() {
                std::fs::remove_dir_all(&db)?;
            }
            std::fs::rename(&copy, &db)?;
            std::fs::File::open(data_dir)?.sync_all()?;
            tracing::info!(from = %copy.display(), "the defragmented state database is in place");
        }
    }
    if pointer.exists() {
        std::fs::remove_file(&pointer)?;
        std::fs::File::open(data_dir)?.sync_all()?;
    }
    for entry in std::fs::read_dir(data_dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let stale = name.to_str().and_then(generation).is_some_and(|g| g > 0);
        if stale && entry.file_type()?.is_dir() {
            tracing::info!(dir = %entry.path().display(), "removing an unfinished defrag's copy");
            std::fs::remove_dir_all(entry.path())?;
        }
    }
    Ok(())
}

/// `db` is generation 0, `db.N` generation N.
fn generation(name: &str) -> Option<u64> {
    if name == STATE_DB {
        return Some(0);
    }
    let n = name.strip_prefix("db.")?;
    if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    n.parse().ok()
}

/// Makes `name` the state database a restart opens, durably.
fn switch_to(data_dir: &Path, name: &str) -> std::io::Result<()> {
    use std::io::Write;
    let partial = data_dir.join(format!("{CURRENT}.partial"));
    let mut file = std::fs::File::create(&partial)?;
    writeln!(file, "{name}")?;
    file.sync_all()?;
    std::fs::rename(&partial, data_dir.join(CURRENT))?;
    std::fs::File::open(data_dir)?.sync_all()
}

/// Copies `entries` into `to`, in batches.
fn copy_into(
    entries: impl Iterator<Item = sled::Result<(sled::IVec, sled::IVec)>>,
    to: &sled::Tree,
) -> Result<()> {
    let mut batch = sled::Batch::default();
    let mut bytes = 0;
    for item in entries {
        let (key, value) = item?;
        bytes += key.len() + value.len();
        batch.insert(key, value);
        if bytes >= COPY_BATCH_BYTES {
            to.apply_batch(std::mem::take(&mut batch))?;
            bytes = 0;
        }
    }
    to.apply_batch(batch)?;
    Ok(())
}

/// Makes the entries of `to` that are not records (metadata, leases,
/// members, alarms) those of `from`.
fn copy_other_entries(from: &sled::Tree, to: &sled::Tree) -> Result<()> {
    let mut batch = sled::Batch::default();
    let records_end = [RECORD_PREFIX + 1];
    let ranges = |tree: &sled::Tree| {
        tree.range(..[RECORD_PREFIX].as_slice())
            .chain(tree.range(records_end.as_slice()..))
    };
    for item in ranges(to) {
        let (key, _) = item?;
        if !from.contains_key(&key)? {
            batch.remove(key);
        }
    }
    for item in ranges(from) {
        let (key, value) = item?;
        batch.insert(key, value);
    }
    to.apply_batch(batch)?;
    Ok(())
}

impl KvStore {
    /// The tree holding the state. Held only for one read or write: a
    /// defrag switches trees under it.
    pub(crate) fn tree(&self) -> MappedRwLockReadGuard<'_, sled::Tree> {
        RwLockReadGuard::map(self.backend.read(), |backend| &backend.tree)
    }

    /// Writes what is applied to sled and makes it durable: flushes sled
    /// and fsyncs its files (sled's own flush does not).
    pub(crate) fn sync_to_disk(&self) -> Result<()> {
        self.flush_behind()?;
        let committing = std::time::Instant::now();
        let backend = self.backend.read();
        match (&backend.db, &backend.dir) {
            (Some(db), Some(dir)) => {
                db.flush()?;
                fsync_tree(dir)
                    .map_err(|e| StoreError::storage("syncing the state database", e))?;
            }
            _ => {
                backend.tree.flush()?;
            }
        }
        drop(backend);
        crate::metrics::observe_backend_commit(committing.elapsed());
        #[cfg(feature = "failpoints")]
        crate::failpoints::keep_synced_state(self);
        Ok(())
    }

    /// The directory of the state database in use.
    #[cfg(feature = "failpoints")]
    pub(crate) fn state_dir(&self) -> Option<PathBuf> {
        self.backend.read().dir.clone()
    }

    /// Bytes the state database takes on disk (etcd's dbSize), measured
    /// now.
    pub fn db_size(&self) -> u64 {
        let size = match &self.backend.read().db {
            Some(db) => db.size_on_disk().unwrap_or(0),
            None => 0,
        };
        self.db_size_seen.store(size, Ordering::Relaxed);
        size
    }

    /// [`KvStore::db_size`] as measured at most `max_age` ago: writes
    /// check it against the quota without a file system call each.
    pub fn recent_db_size(&self, max_age: std::time::Duration) -> u64 {
        let now = self.opened_at.elapsed().as_millis() as u64;
        let measured = self.db_size_measured_at.load(Ordering::Relaxed);
        if now.saturating_sub(measured) > max_age.as_millis() as u64 || measured == 0 {
            self.db_size_measured_at
                .store(now.max(1), Ordering::Relaxed);
            return self.db_size();
        }
        self.db_size_seen.load(Ordering::Relaxed)
    }

    /// Bytes of the keys and values the state holds (etcd's dbSizeInUse):
    /// the records, counted as they are written and compacted away, and
    /// the few other entries (metadata, leases, members), counted now.
    /// What the database takes beyond it a defrag gives back.
    pub fn db_size_in_use(&self) -> u64 {
        let records = self.record_bytes.load(Ordering::Relaxed);
        let tree = self.tree();
        let records_end = [RECORD_PREFIX + 1];
        let others: u64 = tree
            .range(..[RECORD_PREFIX].as_slice())
            .chain(tree.range(records_end.as_slice()..))
            .filter_map(|item| item.ok())
            .map(|(k, v)| (k.len() + v.len()) as u64)
            .sum();
        records + others
    }

    /// Copies the live state into a fresh database beside the current one
    /// and switches to it, giving back the space compacted history took.
    /// Reads go on throughout; writes wait only for the last part of the
    /// copy (what was written meanwhile) and the switch. Compactions on
    /// disk, snapshot views and snapshot installs wait for the whole.
    pub fn defragment(&self) -> Result<Defragmented> {
        let Some(location) = &self.location else {
            return Err(StoreError::storage(
                "defragmenting",
                "this engine has no database of its own",
            ));
        };
        let _nothing_removed = self.removals.write();
        let size_before = self.db_size();
        let current = self.backend.read().dir.clone();
        let current_generation = current
            .as_deref()
            .and_then(Path::file_name)
            .and_then(|name| name.to_str())
            .and_then(generation)
            .unwrap_or(0);
        let name = format!("db.{}", current_generation + 1);
        let dir = location.data_dir.join(&name);
        let io = |e: std::io::Error| StoreError::storage("defragmenting", e);
        if dir.exists() {
            std::fs::remove_dir_all(&dir).map_err(io)?;
        }
        let copied = self.copy_state(location, &dir, &name);
        let (db, tree, held) = match copied {
            Ok(copy) => copy,
            Err(err) => {
                let _ = std::fs::remove_dir_all(&dir);
                return Err(err);
            }
        };
        let old = std::mem::replace(
            &mut *self.backend.write(),
            Backend {
                tree,
                db: Some(db),
                dir: Some(dir),
            },
        );
        drop(held);
        #[cfg(feature = "failpoints")]
        crate::failpoints::keep_synced_state(self);
        let size_after = self.db_size();
        let old_dir = old.dir.clone();
        drop(old);
        if let Some(old_dir) = old_dir {
            if let Err(err) = std::fs::remove_dir_all(&old_dir) {
                tracing::warn!(dir = %old_dir.display(), error = %err, "could not remove the state database a defrag replaced; the next start does");
            }
        }
        Ok(Defragmented {
            size_before,
            size_after,
        })
    }

    /// Builds the copy in `dir` and makes it the one a restart opens.
    /// Returns it with the applier's lock still held: nothing may be
    /// written to the old tree before the switch.
    fn copy_state(
        &self,
        location: &Location,
        dir: &Path,
        name: &str,
    ) -> Result<(
        sled::Db,
        sled::Tree,
        parking_lot::MutexGuard<'_, super::kvstore::Behind>,
    )> {
        let db = open_db(dir, location.cache_capacity)?;
        let tree = db.open_tree(STATE_TREE)?;
        // Everything applied so far, while writes go on: records never
        // change once written, and none is removed meanwhile.
        let copied_through = {
            let mut behind = self.behind.lock();
            self.write_out(&mut behind)?;
            meta_i64(&self.tree(), META_REVISION)?
        };
        copy_into(self.tree().iter(), &tree)?;
        db.flush()?;
        // A copy half made and never switched to: the next start removes it.
        crate::crash_point!("defrag::mid");
        // Then what was written meanwhile, with writes held.
        let mut behind = self.behind.lock();
        self.write_out(&mut behind)?;
        {
            let old = self.tree();
            let from = Revision::new(copied_through.saturating_add(1), 0).to_key();
            let records_end = [RECORD_PREFIX + 1];
            copy_into(old.range(from.as_slice()..records_end.as_slice()), &tree)?;
            copy_other_entries(&old, &tree)?;
        }
        db.flush()?;
        let io = |e: std::io::Error| StoreError::storage("defragmenting", e);
        fsync_tree(dir).map_err(io)?;
        switch_to(&location.data_dir, name).map_err(io)?;
        // Switched to on disk, the old database still in use and in place:
        // the next start moves the copy to `db`.
        crate::crash_point!("defrag::switched");
        Ok((db, tree, behind))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_db_and_numbered_copies_are_state_databases() {
        assert_eq!(generation("db"), Some(0));
        assert_eq!(generation("db.1"), Some(1));
        assert_eq!(generation("db.12"), Some(12));
        for other in [
            "db.",
            "db.x",
            "db.current",
            "db.1x",
            "wal",
            "db.current.partial",
        ] {
            assert_eq!(generation(other), None, "{other}");
        }
    }

    #[test]
    fn a_start_keeps_the_switched_copy_and_drops_an_unfinished_one() {
        let data = tempfile::tempdir().unwrap();
        let dir = data.path();
        for name in ["db", "db.1", "db.2", "wal"] {
            std::fs::create_dir_all(dir.join(name)).unwrap();
            std::fs::write(dir.join(name).join("mark"), name).unwrap();
        }
        switch_to(dir, "db.1").unwrap();
        settle(dir).unwrap();
        let mut left: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        assert_eq!(left, ["db", "wal"]);
        let mark = std::fs::read_to_string(dir.join("db").join("mark")).unwrap();
        assert_eq!(mark, "db.1", "the copy switched to is the state now");
        // Interrupted after the move, before the pointer went: nothing to do.
        switch_to(dir, "db.1").unwrap();
        settle(dir).unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.join("db").join("mark")).unwrap(),
            "db.1"
        );
        assert!(!dir.join(CURRENT).exists());
    }
}
