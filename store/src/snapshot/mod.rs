//! etcd's snapshot file, both ways: the bbolt database etcd backs itself
//! up as, written from skiff's state and read into it, with the sha256
//! trailer `etcdctl snapshot save` appends. Not the snapshots Raft sends
//! between members (see [`crate::mvcc::snapshot`]).

pub mod bolt;
pub mod etcd;
pub mod restore;

pub use etcd::{Restored, SnapshotMeta};

use crate::error::StoreError;

/// The sha256 digest etcd sends after the database and appends to the file.
pub const CHECKSUM_LEN: usize = 32;

#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error(transparent)]
    Bolt(#[from] bolt::BoltError),
    #[error("the snapshot's sha256 checksum does not match its contents: the file is damaged or was cut short")]
    Checksum,
    #[error("not an etcd snapshot: {0}")]
    Invalid(String),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("{0}: {1}")]
    Io(String, std::io::Error),
}

/// The sha256 of `db`, as etcd sends it after a snapshot.
pub fn checksum(db: &[u8]) -> [u8; CHECKSUM_LEN] {
    let digest = ring::digest::digest(&ring::digest::SHA256, db);
    let mut out = [0u8; CHECKSUM_LEN];
    out.copy_from_slice(digest.as_ref());
    out
}

/// The database inside a snapshot file, its trailer checked as etcd
/// checks it: a file of whole 512-byte blocks plus 32 bytes carries a
/// sha256 of the rest; one of whole blocks is a database file copied as is.
pub fn database_of(file: &[u8]) -> Result<&[u8], SnapshotError> {
    match file.len() % 512 {
        0 => Ok(file),
        CHECKSUM_LEN => {
            let (db, trailer) = file.split_at(file.len() - CHECKSUM_LEN);
            if checksum(db) != trailer {
                return Err(SnapshotError::Checksum);
            }
            Ok(db)
        }
        _ => Err(SnapshotError::Invalid(format!(
            "{} bytes is neither a database (whole 512-byte blocks) nor one with a sha256 trailer",
            file.len()
        ))),
    }
}

/// The snapshot file (database and trailer) of skiff's state.
pub fn write_file(
    entries: &[(Vec<u8>, Vec<u8>)],
    meta: &SnapshotMeta,
) -> Result<Vec<u8>, SnapshotError> {
    let mut file = bolt::write(&etcd::to_etcd(entries, meta)?)?;
    let sum = checksum(&file);
    file.extend_from_slice(&sum);
    Ok(file)
}

/// The state held by a snapshot file of skiff or of etcd.
pub fn read_file(file: &[u8]) -> Result<Restored, SnapshotError> {
    etcd::from_etcd(&bolt::read(database_of(file)?)?)
}

#[cfg(test)]
mod tests;

/// What `etcdctl snapshot status` prints of a snapshot file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SnapshotStatus {
    /// CRC-32C of every bucket's name, keys and values.
    pub hash: u32,
    /// The main revision of the last record.
    pub revision: i64,
    /// Entries of all buckets.
    pub total_keys: usize,
    /// Bytes of the database.
    pub total_size: usize,
}

/// The status of a snapshot file, computed as etcd computes it.
pub fn status(file: &[u8]) -> Result<SnapshotStatus, SnapshotError> {
    let db = database_of(file)?;
    let buckets = bolt::read(db)?;
    let mut crc = crate::mvcc::hash::Crc32c::default();
    let (mut revision, mut total_keys) = (0, 0);
    for (name, bucket) in &buckets {
        crc.update(name);
        for (key, value) in &bucket.entries {
            crc.update(key);
            crc.update(value);
            if name.as_slice() == etcd::KEY_BUCKET {
                revision = etcd::parse_revision_key(key).map_or(revision, |(rev, _)| rev.main);
            }
            total_keys += 1;
        }
    }
    Ok(SnapshotStatus {
        hash: crc.sum(),
        revision,
        total_keys,
        total_size: db.len(),
    })
}

/// The database (without its trailer) of `store`'s state as of one
/// applied batch, while writes go on.
pub async fn database(store: &crate::Store) -> Result<Vec<u8>, SnapshotError> {
    let kv = std::sync::Arc::clone(store.kv());
    let mut meta = SnapshotMeta {
        applied_index: 0,
        term: store.raft_term(),
        members: store.members()?,
    };
    tokio::task::spawn_blocking(move || {
        let entries = kv.consistent_entries()?;
        meta.applied_index = applied_index_of(&entries);
        Ok(bolt::write(&etcd::to_etcd(&entries, &meta)?)?)
    })
    .await
    .map_err(|e| SnapshotError::Invalid(format!("the snapshot task failed: {e}")))?
}

fn applied_index_of(entries: &[(Vec<u8>, Vec<u8>)]) -> u64 {
    entries
        .binary_search_by(|(key, _)| key.as_slice().cmp(crate::mvcc::kvstore::META_APPLIED_INDEX))
        .ok()
        .and_then(|at| <[u8; 8]>::try_from(entries[at].1.as_slice()).ok())
        .map_or(0, u64::from_le_bytes)
}

/// etcd's `Hash`: CRC-32C of every bucket of the state in etcd's form
/// (bucket name, then each key and value), leaving out what differs
/// between members that applied the same writes (the applied index and
/// term), and the store's revision it was taken at.
pub fn backend_hash(kv: &crate::mvcc::KvStore) -> Result<(u32, i64), SnapshotError> {
    let entries = kv.consistent_entries()?;
    let revision = entries
        .binary_search_by(|(key, _)| key.as_slice().cmp(crate::mvcc::kvstore::META_REVISION))
        .ok()
        .and_then(|at| <[u8; 8]>::try_from(entries[at].1.as_slice()).ok())
        .map_or(0, i64::from_le_bytes);
    let buckets = etcd::to_etcd(&entries, &SnapshotMeta::default())?;
    let mut crc = crate::mvcc::hash::Crc32c::default();
    for (name, bucket) in &buckets {
        crc.update(name);
        for (key, value) in &bucket.entries {
            let per_member = name.as_slice() == etcd::META_BUCKET
                && matches!(key.as_slice(), b"consistent_index" | b"term");
            if !per_member {
                crc.update(key);
                crc.update(value);
            }
        }
    }
    Ok((crc.sum(), revision))
}
