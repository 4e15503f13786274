//! The skiff store member in this process, through its Rust API.

use bytes::Bytes;
use skiff_store::{
    Compare, CompareResult, CompareTarget, DeleteRangeRequest, EventType, PutRequest, RangeRequest,
    RequestOp, ResponseOp, Store, StoreError, TxnRequest, WatchRequest, Watcher,
};

use super::{Change, ChangeKind, Kv, Page, StorageError, StorageResult, WatchItem};

fn convert(err: StoreError) -> StorageError {
    match err {
        StoreError::Compacted { compact_revision } => StorageError::Compacted {
            requested: 0,
            compacted: compact_revision,
        },
        StoreError::FutureRevision { .. } => StorageError::FutureRevision,
        StoreError::LeaseNotFound => StorageError::LeaseNotFound,
        StoreError::NoLeader | StoreError::Timeout | StoreError::Stopped => {
            StorageError::Unavailable(err.to_string())
        }
        other => StorageError::Internal(other.to_string()),
    }
}

fn kv(kv: skiff_store::KeyValue) -> Kv {
    Kv {
        key: String::from_utf8_lossy(&kv.key).into_owned(),
        value: Bytes::from(kv.value),
        create_revision: kv.create_revision,
        mod_revision: kv.mod_revision,
    }
}

pub(super) async fn get(store: &Store, key: &str) -> StorageResult<Option<Kv>> {
    let resp = store.range(RangeRequest::key(key)).await.map_err(convert)?;
    Ok(resp.kvs.into_iter().next().map(kv))
}

/// The keys in `[start, end)` (`end` empty: `start` alone) with the
/// revision each was last modified at, from the store's index.
pub(super) async fn mod_revisions(
    store: &Store,
    start: &str,
    end: &str,
) -> StorageResult<Vec<(String, i64)>> {
    let (_, found) = store
        .mod_revisions(start.as_bytes(), end.as_bytes())
        .await
        .map_err(convert)?;
    Ok(found
        .into_iter()
        .map(|(key, revision)| (String::from_utf8_lossy(&key).into_owned(), revision))
        .collect())
}

pub(super) async fn list(
    store: &Store,
    start: &str,
    end: &str,
    revision: i64,
    limit: i64,
) -> StorageResult<Page> {
    let req = RangeRequest {
        key: start.as_bytes().to_vec(),
        range_end: end.as_bytes().to_vec(),
        revision,
        limit,
        ..Default::default()
    };
    let resp = store.range(req).await.map_err(|err| match convert(err) {
        StorageError::Compacted { compacted, .. } => StorageError::Compacted {
            requested: revision,
            compacted,
        },
        other => other,
    })?;
    Ok(Page {
        revision: resp.header.revision,
        more: resp.more,
        kvs: resp.kvs.into_iter().map(kv).collect(),
    })
}

fn compare_mod(key: &str, expected: i64) -> Compare {
    Compare {
        key: key.as_bytes().to_vec(),
        range_end: Vec::new(),
        target: CompareTarget::ModRevision(expected),
        result: CompareResult::Equal,
    }
}

/// A put of `value` at `key`, attached to `lease` (0: none).
fn put(key: &str, value: Vec<u8>, lease: i64) -> RequestOp {
    let mut put = PutRequest::new(key, value);
    put.lease = lease;
    RequestOp::Put(put)
}

pub(super) async fn grant_lease(store: &Store, ttl: i64) -> StorageResult<i64> {
    let granted = store.lease_grant(ttl, 0).await.map_err(convert)?;
    Ok(granted.id)
}

pub(super) async fn create(
    store: &Store,
    key: &str,
    value: Vec<u8>,
    lease: i64,
) -> StorageResult<i64> {
    let txn = TxnRequest {
        compare: vec![Compare {
            key: key.as_bytes().to_vec(),
            range_end: Vec::new(),
            target: CompareTarget::CreateRevision(0),
            result: CompareResult::Equal,
        }],
        success: vec![put(key, value, lease)],
        failure: Vec::new(),
    };
    let resp = store.txn(txn).await.map_err(convert)?;
    if !resp.succeeded {
        return Err(StorageError::AlreadyExists);
    }
    Ok(resp.header.revision)
}

pub(super) async fn update(
    store: &Store,
    key: &str,
    value: Vec<u8>,
    expected: i64,
    lease: i64,
) -> StorageResult<i64> {
    let txn = TxnRequest {
        compare: vec![compare_mod(key, expected)],
        success: vec![put(key, value, lease)],
        failure: Vec::new(),
    };
    let resp = store.txn(txn).await.map_err(convert)?;
    if !resp.succeeded {
        return Err(StorageError::Conflict);
    }
    Ok(resp.header.revision)
}

pub(super) async fn delete(store: &Store, key: &str, expected: i64) -> StorageResult<i64> {
    let txn = TxnRequest {
        compare: vec![compare_mod(key, expected)],
        success: vec![RequestOp::DeleteRange(DeleteRangeRequest {
            key: key.as_bytes().to_vec(),
            ..Default::default()
        })],
        failure: Vec::new(),
    };
    let resp = store.txn(txn).await.map_err(convert)?;
    if !resp.succeeded {
        return Err(StorageError::Conflict);
    }
    let deleted = resp
        .responses
        .iter()
        .any(|r| matches!(r, ResponseOp::DeleteRange(d) if d.deleted > 0));
    if !deleted {
        return Err(StorageError::NotFound);
    }
    Ok(resp.header.revision)
}

pub struct LocalWatch {
    watcher: Watcher,
    from: i64,
}

pub(super) fn watch(
    store: &Store,
    start: &str,
    end: &str,
    from: i64,
    with_previous: bool,
) -> StorageResult<LocalWatch> {
    let watcher = store
        .watch(WatchRequest {
            key: start.as_bytes().to_vec(),
            range_end: end.as_bytes().to_vec(),
            start_revision: from,
            prev_kv: with_previous,
            ..Default::default()
        })
        .map_err(convert)?;
    Ok(LocalWatch { watcher, from })
}

impl LocalWatch {
    pub fn request_progress(&self) {
        self.watcher.request_progress();
    }

    pub async fn next(&mut self) -> Option<StorageResult<WatchItem>> {
        loop {
            let resp = self.watcher.next().await?;
            if resp.canceled || resp.compact_revision > 0 {
                return Some(Err(StorageError::Compacted {
                    requested: self.from,
                    compacted: resp.compact_revision,
                }));
            }
            if resp.is_progress_notify() {
                return Some(Ok(WatchItem::Progress(resp.header.revision)));
            }
            if resp.events.is_empty() {
                continue;
            }
            let changes = resp
                .events
                .into_iter()
                .map(|e| Change {
                    kind: match e.kind {
                        EventType::Put => ChangeKind::Put,
                        EventType::Delete => ChangeKind::Delete,
                    },
                    key: String::from_utf8_lossy(&e.kv.key).into_owned(),
                    revision: e.kv.mod_revision,
                    value: Bytes::from(e.kv.value),
                    prev: e.prev_kv.map(|p| Bytes::from(p.value)),
                })
                .collect();
            return Some(Ok(WatchItem::Changes(changes)));
        }
    }
}
