//! What the registry needs from a store, with etcd's semantics only:
//! get, a range at a revision, create-if-absent, compare-and-swap on the
//! mod revision, delete, and a watch from a revision. Two backends answer
//! it: the skiff store in this process, and any etcd v3 endpoint (real etcd
//! included) over gRPC.

mod etcd;
mod local;

use bytes::Bytes;

pub use etcd::EtcdStorage;

/// One key as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kv {
    pub key: String,
    pub value: Bytes,
    pub create_revision: i64,
    pub mod_revision: i64,
}

/// A page of a range read.
#[derive(Debug, Clone, Default)]
pub struct Page {
    pub kvs: Vec<Kv>,
    /// The revision the page was read at.
    pub revision: i64,
    /// More keys follow the last one returned.
    pub more: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeKind {
    Put,
    Delete,
}

/// One change seen by a watch.
#[derive(Debug, Clone)]
pub struct Change {
    pub kind: ChangeKind,
    pub key: String,
    /// The new value (empty for a delete).
    pub value: Bytes,
    /// The revision of the change.
    pub revision: i64,
    /// The value before the change, if there was one.
    pub prev: Option<Bytes>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StorageError {
    #[error("the key already exists")]
    AlreadyExists,
    #[error("the key does not exist")]
    NotFound,
    /// A compare-and-swap found another revision (or no key).
    #[error("the object has been modified")]
    Conflict,
    #[error("required revision {requested} has been compacted (compacted revision {compacted})")]
    Compacted { requested: i64, compacted: i64 },
    #[error("required revision is a future revision")]
    FutureRevision,
    #[error("the store is unavailable: {0}")]
    Unavailable(String),
    #[error("the store failed: {0}")]
    Internal(String),
}

pub type StorageResult<T> = Result<T, StorageError>;

/// The store behind the registry. Cheap to clone.
#[derive(Clone)]
pub enum Storage {
    /// The skiff store member in this process.
    Local(skiff_store::Store),
    /// An etcd v3 endpoint (skiff or etcd) over gRPC.
    Etcd(EtcdStorage),
}

/// A watch's changes, a response (one or more revisions) at a time.
pub enum ChangeStream {
    Local(local::LocalWatch),
    Etcd(etcd::EtcdWatch),
}

/// What a watch says next.
#[derive(Debug, Clone)]
pub enum WatchItem {
    /// Changes of one or more revisions, in revision order.
    Changes(Vec<Change>),
    /// Every change up to this revision has been sent (a progress
    /// notification, the answer to [`ChangeStream::request_progress`]).
    Progress(i64),
}

impl ChangeStream {
    /// The next changes, in revision order; `None` when the watch ended.
    pub async fn next(&mut self) -> Option<StorageResult<Vec<Change>>> {
        loop {
            match self.next_item().await? {
                Ok(WatchItem::Changes(changes)) => return Some(Ok(changes)),
                Ok(WatchItem::Progress(_)) => continue,
                Err(err) => return Some(Err(err)),
            }
        }
    }

    /// The next changes or progress notification; `None` when the watch ended.
    pub async fn next_item(&mut self) -> Option<StorageResult<WatchItem>> {
        match self {
            ChangeStream::Local(w) => w.next().await,
            ChangeStream::Etcd(w) => w.next().await,
        }
    }

    /// Asks the store for a progress notification: it comes once the watch
    /// has sent every change up to the store's current revision. A store
    /// may ignore a request made while the watch is catching up (etcd 3.4
    /// does), so ask again if none comes.
    pub fn request_progress(&self) {
        match self {
            ChangeStream::Local(w) => w.request_progress(),
            ChangeStream::Etcd(w) => w.request_progress(),
        }
    }
}

/// Requests the store has answered, by operation, for `/metrics`
/// (`skiff_storage_requests_total`). Process-wide: one apiserver serves
/// one store per process.
pub mod requests {
    use std::sync::atomic::{AtomicU64, Ordering};

    /// The operations counted, as the metric's `operation` label.
    pub const OPERATIONS: [&str; 6] = ["get", "list", "watch", "create", "update", "delete"];

    static COUNTS: [AtomicU64; 6] = [const { AtomicU64::new(0) }; 6];

    pub(super) fn count(operation: &str) {
        if let Some(i) = OPERATIONS.iter().position(|o| *o == operation) {
            COUNTS[i].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Watches opened so far, by the start of their key range (a
    /// resource's prefix): what a resource's watchers cost the store.
    static WATCHES: std::sync::Mutex<std::collections::BTreeMap<String, u64>> =
        std::sync::Mutex::new(std::collections::BTreeMap::new());

    pub(super) fn count_watch(start: &str) {
        count("watch");
        let mut watches = WATCHES.lock().unwrap_or_else(|e| e.into_inner());
        *watches.entry(start.to_string()).or_default() += 1;
    }

    /// Every key range watched so far, with its number of watches.
    pub fn watches() -> Vec<(String, u64)> {
        let watches = WATCHES.lock().unwrap_or_else(|e| e.into_inner());
        watches.iter().map(|(k, v)| (k.clone(), *v)).collect()
    }

    /// How many requests of `operation` the store was sent so far.
    pub fn total(operation: &str) -> u64 {
        OPERATIONS
            .iter()
            .position(|o| *o == operation)
            .map_or(0, |i| COUNTS[i].load(Ordering::Relaxed))
    }
}

impl Storage {
    pub async fn get(&self, key: &str) -> StorageResult<Option<Kv>> {
        requests::count("get");
        match self {
            Storage::Local(s) => local::get(s, key).await,
            Storage::Etcd(e) => e.get(key).await,
        }
    }

    /// Keys in `[start, end)` at `revision` (0: the newest), at most
    /// `limit` of them (0: all).
    pub async fn list(
        &self,
        start: &str,
        end: &str,
        revision: i64,
        limit: i64,
    ) -> StorageResult<Page> {
        requests::count("list");
        match self {
            Storage::Local(s) => local::list(s, start, end, revision, limit).await,
            Storage::Etcd(e) => e.list(start, end, revision, limit).await,
        }
    }

    /// Puts `value` at `key` if it does not exist; its revision.
    pub async fn create(&self, key: &str, value: Vec<u8>) -> StorageResult<i64> {
        requests::count("create");
        match self {
            Storage::Local(s) => local::create(s, key, value).await,
            Storage::Etcd(e) => e.create(key, value).await,
        }
    }

    /// Puts `value` at `key` if its mod revision is `expected`; the new
    /// revision, or `Conflict`.
    pub async fn update(&self, key: &str, value: Vec<u8>, expected: i64) -> StorageResult<i64> {
        requests::count("update");
        match self {
            Storage::Local(s) => local::update(s, key, value, expected).await,
            Storage::Etcd(e) => e.update(key, value, expected).await,
        }
    }

    /// Deletes `key` if its mod revision is `expected`; the deletion's
    /// revision, or `Conflict`.
    pub async fn delete(&self, key: &str, expected: i64) -> StorageResult<i64> {
        requests::count("delete");
        match self {
            Storage::Local(s) => local::delete(s, key, expected).await,
            Storage::Etcd(e) => e.delete(key, expected).await,
        }
    }

    /// Changes to keys in `[start, end)` from revision `from` on (with the
    /// previous value of each).
    pub async fn watch(&self, start: &str, end: &str, from: i64) -> StorageResult<ChangeStream> {
        requests::count_watch(start);
        match self {
            Storage::Local(s) => local::watch(s, start, end, from).map(ChangeStream::Local),
            Storage::Etcd(e) => e.watch(start, end, from).await.map(ChangeStream::Etcd),
        }
    }

    /// The store's newest revision.
    pub async fn revision(&self) -> StorageResult<i64> {
        Ok(self.list("\0", "\0", 0, 1).await?.revision)
    }
}

/// The end of the range of every key starting with `prefix`.
pub fn prefix_end(prefix: &str) -> String {
    String::from_utf8(skiff_store::mvcc::prefix_end(prefix.as_bytes()))
        .unwrap_or_else(|_| "\0".to_string())
}
