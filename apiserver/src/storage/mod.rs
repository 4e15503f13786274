//! What the registry needs from a store, with etcd's semantics only:
//! get, a range at a revision, create-if-absent, compare-and-swap on the
//! mod revision, delete, and a watch from a revision. Two backends answer
//! it: the skiff store in this process, and any etcd v3 endpoint (real etcd
//! included) over gRPC.

mod encryption;
mod etcd;
mod local;

use bytes::Bytes;

pub use encryption::Encryption;
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
    /// A write named a lease the store does not hold (it expired).
    #[error("the lease was not found")]
    LeaseNotFound,
    #[error("the store is unavailable: {0}")]
    Unavailable(String),
    #[error("the store failed: {0}")]
    Internal(String),
}

pub type StorageResult<T> = Result<T, StorageError>;

/// The store behind the registry, with the count of requests sent to it.
/// Cheap to clone (clones share the counts).
#[derive(Clone)]
pub struct Storage {
    backend: Backend,
    requests: std::sync::Arc<requests::Requests>,
    /// Encryption at rest of the resources it names.
    encryption: Option<std::sync::Arc<Encryption>>,
}

#[derive(Clone)]
enum Backend {
    /// The skiff store member in this process.
    Local(skiff_store::Store),
    /// An etcd v3 endpoint (skiff or etcd) over gRPC.
    Etcd(EtcdStorage),
}

/// A watch's changes, a response (one or more revisions) at a time.
pub struct ChangeStream {
    source: WatchSource,
    encryption: Option<std::sync::Arc<Encryption>>,
}

enum WatchSource {
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

    /// The next changes or progress notification; `None` when the watch
    /// ended. An etcd's progress notifications are not passed on (see
    /// [`Storage::progress_is_reliable`]).
    pub async fn next_item(&mut self) -> Option<StorageResult<WatchItem>> {
        let item = match &mut self.source {
            WatchSource::Local(w) => w.next().await,
            WatchSource::Etcd(w) => loop {
                match w.next().await {
                    Some(Ok(WatchItem::Progress(_))) => continue,
                    other => break other,
                }
            },
        };
        match (item, &self.encryption) {
            (Some(Ok(WatchItem::Changes(mut changes))), Some(encryption)) => {
                for change in &mut changes {
                    if change.kind == ChangeKind::Put {
                        let value = std::mem::take(&mut change.value);
                        change.value = match encryption.decrypt(&change.key, value) {
                            Ok(value) => value,
                            Err(err) => return Some(Err(err)),
                        };
                    }
                    if let Some(prev) = change.prev.take() {
                        change.prev = match encryption.decrypt(&change.key, prev) {
                            Ok(prev) => Some(prev),
                            Err(err) => return Some(Err(err)),
                        };
                    }
                }
                Some(Ok(WatchItem::Changes(changes)))
            }
            (item, _) => item,
        }
    }

    /// Asks the store for a progress notification: it comes once the watch
    /// has sent every change up to the store's current revision. A store
    /// may ignore a request made while the watch is catching up (etcd 3.4
    /// does), so ask again if none comes.
    pub fn request_progress(&self) {
        match &self.source {
            WatchSource::Local(w) => w.request_progress(),
            // Not trusted (see [`Storage::progress_is_reliable`]): not asked.
            WatchSource::Etcd(_) => {}
        }
    }
}

/// Requests sent to a store, by operation, for `/metrics`
/// (`skiff_storage_requests_total`, `skiff_storage_watches_total`).
pub mod requests {
    use std::collections::BTreeMap;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Mutex;

    /// The operations counted, as the metric's `operation` label.
    pub const OPERATIONS: [&str; 7] = [
        "get", "list", "watch", "create", "update", "delete", "lease",
    ];

    #[derive(Default)]
    pub struct Requests {
        counts: [AtomicU64; OPERATIONS.len()],
        /// Watches opened, by the start of their key range (a resource's
        /// prefix): what a resource's watchers cost the store.
        watches: Mutex<BTreeMap<String, u64>>,
    }

    impl Requests {
        pub(super) fn count(&self, operation: &str) {
            if let Some(i) = OPERATIONS.iter().position(|o| *o == operation) {
                self.counts[i].fetch_add(1, Ordering::Relaxed);
            }
        }

        pub(super) fn count_watch(&self, start: &str) {
            self.count("watch");
            let mut watches = self.watches.lock().unwrap_or_else(|e| e.into_inner());
            *watches.entry(start.to_string()).or_default() += 1;
        }

        /// How many requests of `operation` were sent so far.
        pub fn total(&self, operation: &str) -> u64 {
            OPERATIONS
                .iter()
                .position(|o| *o == operation)
                .map_or(0, |i| self.counts[i].load(Ordering::Relaxed))
        }

        /// Every key range watched so far, with its number of watches.
        pub fn watches(&self) -> Vec<(String, u64)> {
            let watches = self.watches.lock().unwrap_or_else(|e| e.into_inner());
            watches.iter().map(|(k, v)| (k.clone(), *v)).collect()
        }
    }
}

impl Storage {
    /// The skiff store member in this process.
    pub fn local(store: skiff_store::Store) -> Storage {
        Storage::new(Backend::Local(store))
    }

    /// An etcd v3 endpoint (skiff or etcd) over gRPC.
    pub fn etcd(etcd: EtcdStorage) -> Storage {
        Storage::new(Backend::Etcd(etcd))
    }

    fn new(backend: Backend) -> Storage {
        Storage {
            backend,
            requests: Default::default(),
            encryption: None,
        }
    }

    /// The same store, with the values of the resources `encryption`
    /// names encrypted on their way in and decrypted on their way out.
    pub fn with_encryption(mut self, encryption: std::sync::Arc<Encryption>) -> Storage {
        self.encryption = Some(encryption);
        self
    }

    fn decrypt_kv(&self, mut kv: Kv) -> StorageResult<Kv> {
        if let Some(encryption) = &self.encryption {
            kv.value = encryption.decrypt(&kv.key, std::mem::take(&mut kv.value))?;
        }
        Ok(kv)
    }

    fn encrypt(&self, key: &str, value: Vec<u8>) -> StorageResult<Vec<u8>> {
        match &self.encryption {
            Some(encryption) => encryption.encrypt(key, value),
            None => Ok(value),
        }
    }

    /// The store member in this process, if it is one.
    pub fn local_store(&self) -> Option<&skiff_store::Store> {
        match &self.backend {
            Backend::Local(store) => Some(store),
            Backend::Etcd(_) => None,
        }
    }

    /// The requests sent to the store so far.
    pub fn requests(&self) -> &requests::Requests {
        &self.requests
    }
}

impl Storage {
    pub async fn get(&self, key: &str) -> StorageResult<Option<Kv>> {
        self.requests.count("get");
        let kv = match &self.backend {
            Backend::Local(s) => local::get(s, key).await,
            Backend::Etcd(e) => e.get(key).await,
        }?;
        kv.map(|kv| self.decrypt_kv(kv)).transpose()
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
        self.requests.count("list");
        let mut page = match &self.backend {
            Backend::Local(s) => local::list(s, start, end, revision, limit).await,
            Backend::Etcd(e) => e.list(start, end, revision, limit).await,
        }?;
        if self.encryption.is_some() {
            page.kvs = std::mem::take(&mut page.kvs)
                .into_iter()
                .map(|kv| self.decrypt_kv(kv))
                .collect::<StorageResult<_>>()?;
        }
        Ok(page)
    }

    /// The keys in `[start, end)` (`end` empty: `start` alone) with the
    /// revision each was last modified at, as of the newest revision, when
    /// the store can tell without reading their values (the store in this
    /// process); `None` otherwise. For callers that keep decoded copies:
    /// theirs are current if the revisions match.
    pub async fn mod_revisions(
        &self,
        start: &str,
        end: &str,
    ) -> StorageResult<Option<Vec<(String, i64)>>> {
        let Backend::Local(store) = &self.backend else {
            return Ok(None);
        };
        self.requests
            .count(if end.is_empty() { "get" } else { "list" });
        local::mod_revisions(store, start, end).await.map(Some)
    }

    /// Puts `value` at `key` if it does not exist; its revision. With a
    /// `lease` (not 0), the key goes when the lease expires.
    pub async fn create(&self, key: &str, value: Vec<u8>, lease: i64) -> StorageResult<i64> {
        self.requests.count("create");
        let value = self.encrypt(key, value)?;
        match &self.backend {
            Backend::Local(s) => local::create(s, key, value, lease).await,
            Backend::Etcd(e) => e.create(key, value, lease).await,
        }
    }

    /// Puts `value` at `key` if its mod revision is `expected`; the new
    /// revision, or `Conflict`. The key is attached to `lease` (0: none),
    /// whatever it was attached to before.
    pub async fn update(
        &self,
        key: &str,
        value: Vec<u8>,
        expected: i64,
        lease: i64,
    ) -> StorageResult<i64> {
        self.requests.count("update");
        let value = self.encrypt(key, value)?;
        match &self.backend {
            Backend::Local(s) => local::update(s, key, value, expected, lease).await,
            Backend::Etcd(e) => e.update(key, value, expected, lease).await,
        }
    }

    /// A new lease of `ttl` seconds (the store may raise a short one to its
    /// minimum): its ID.
    pub async fn grant_lease(&self, ttl: i64) -> StorageResult<i64> {
        self.requests.count("lease");
        match &self.backend {
            Backend::Local(s) => local::grant_lease(s, ttl).await,
            Backend::Etcd(e) => e.grant_lease(ttl).await,
        }
    }

    /// Deletes `key` if its mod revision is `expected`; the deletion's
    /// revision, or `Conflict`.
    pub async fn delete(&self, key: &str, expected: i64) -> StorageResult<i64> {
        self.requests.count("delete");
        match &self.backend {
            Backend::Local(s) => local::delete(s, key, expected).await,
            Backend::Etcd(e) => e.delete(key, expected).await,
        }
    }

    /// Changes to keys in `[start, end)` from revision `from` on, with
    /// the previous value of each when `with_previous` (a follower that
    /// keeps its own copy of every object, as the watch cache does, has
    /// no use for it, and the store would read and send it for nothing).
    pub async fn watch(
        &self,
        start: &str,
        end: &str,
        from: i64,
        with_previous: bool,
    ) -> StorageResult<ChangeStream> {
        self.requests.count_watch(start);
        let source = match &self.backend {
            Backend::Local(s) => {
                local::watch(s, start, end, from, with_previous).map(WatchSource::Local)
            }
            Backend::Etcd(e) => e
                .watch(start, end, from, with_previous)
                .await
                .map(WatchSource::Etcd),
        }?;
        Ok(ChangeStream {
            source,
            encryption: self.encryption.clone(),
        })
    }

    /// Whether a watch's progress notification means what it says: every
    /// change up to its revision sent. The in-process store's does. etcd's
    /// is not trusted: etcd 3.4 (Debian's is 3.4.23) can answer a progress
    /// request with its current revision while changes before it are still
    /// to be sent to an unsynced watcher, and a cache that believed it
    /// served a list missing an object written just before (the real-etcd
    /// runs of tests/tests/rest_errors.rs caught it). Over etcd, consistent
    /// reads go to etcd, and a watch's revision moves only with its changes.
    pub fn progress_is_reliable(&self) -> bool {
        matches!(self.backend, Backend::Local(_))
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A watch carries the values before each change only when asked.
    #[tokio::test]
    async fn previous_values_come_only_when_asked_for() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let store = skiff_store::Store::open(skiff_store::StoreConfig::new(dir.path()))
            .await
            .expect("the store opens");
        let storage = Storage::local(store);
        let created = storage.create("/k/a", b"one".to_vec(), 0).await.unwrap();
        let updated = storage
            .update("/k/a", b"two".to_vec(), created, 0)
            .await
            .unwrap();
        storage.delete("/k/a", updated).await.unwrap();
        let end = prefix_end("/k/");
        for (with_previous, expected) in [
            (true, vec![None, Some("one"), Some("two")]),
            (false, vec![None, None, None]),
        ] {
            let mut changes = storage
                .watch("/k/", &end, created, with_previous)
                .await
                .unwrap();
            let mut seen = Vec::new();
            while seen.len() < 3 {
                seen.extend(changes.next().await.expect("changes").unwrap());
            }
            let previous: Vec<Option<&str>> = seen
                .iter()
                .map(|c| c.prev.as_deref().map(|p| std::str::from_utf8(p).unwrap()))
                .collect();
            assert_eq!(previous, expected, "with_previous: {with_previous}");
        }
    }
}
