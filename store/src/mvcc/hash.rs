//! etcd's consistency hashes of the key history: `HashKV` (CRC-32C of the
//! `key` bucket as etcd stores it, through a revision, leaving out
//! history compaction drops) and `Hash` (of every bucket). Members that
//! applied the same revisions answer the same, and so does etcd for the
//! same writes.

use std::collections::HashSet;

use super::key_range::KeyRange;
use super::kvstore::KvStore;
use super::record::RecordView;
use super::revision::{Revision, RECORD_PREFIX};
use crate::error::{Result, StoreError};
use crate::snapshot::etcd::{etcd_value, revision_key};

/// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), as Go's
/// `crc32.MakeTable(crc32.Castagnoli)`.
#[derive(Debug, Clone)]
pub struct Crc32c {
    state: u32,
}

const fn castagnoli_table() -> [u32; 256] {
    let mut table = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut crc = i as u32;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0x82F6_3B78
            } else {
                crc >> 1
            };
            bit += 1;
        }
        table[i] = crc;
        i += 1;
    }
    table
}

static CASTAGNOLI: [u32; 256] = castagnoli_table();

impl Default for Crc32c {
    fn default() -> Self {
        Crc32c { state: !0 }
    }
}

impl Crc32c {
    pub fn update(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.state =
                CASTAGNOLI[((self.state ^ u32::from(b)) & 0xff) as usize] ^ (self.state >> 8);
        }
    }

    pub fn sum(&self) -> u32 {
        !self.state
    }
}

/// What `HashKV` answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvHash {
    pub hash: u32,
    /// The store's compaction revision.
    pub compact_revision: i64,
    /// The revision hashed through.
    pub hash_revision: i64,
    /// The store's revision when hashed.
    pub current_revision: i64,
}

impl KvStore {
    /// etcd's HashKV at `revision` (0: the current one): CRC-32C of "key",
    /// then of each record through `revision` as etcd keys and encodes it,
    /// leaving out records at or below the compaction revision that a
    /// compaction at `revision` would drop.
    pub fn hash_kv(&self, revision: i64) -> Result<KvHash> {
        loop {
            let current = self.current_revision();
            let compacted = self.compact_revision();
            if revision > 0 && revision <= compacted {
                return Err(StoreError::Compacted {
                    compact_revision: compacted,
                });
            }
            if revision > current {
                return Err(StoreError::FutureRevision {
                    current_revision: current,
                });
            }
            let at = if revision <= 0 { current } else { revision };
            // The index is read before the tree is held, in the order
            // `replace_state` takes them: a revision at or below the
            // current one reads the same from either, whatever is
            // applied meanwhile. A snapshot install, which empties the
            // tree before it fills it, waits until both are read.
            let no_install = self.removals.read();
            let keep = self.kept_at(at);
            let hash =
                self.with_consistent_tree(|tree| hash_records(tree, at, compacted, &keep))?;
            drop(no_install);
            // A compaction that started meanwhile may have removed records
            // under the scan: hash again against the new compaction.
            if self.compact_revision() == compacted {
                return Ok(KvHash {
                    hash,
                    compact_revision: compacted,
                    hash_revision: at,
                    current_revision: current,
                });
            }
        }
    }

    /// The revisions a compaction at `at` keeps (etcd's `index.Keep`): the
    /// one each key alive at `at` was last written at.
    fn kept_at(&self, at: i64) -> HashSet<Revision> {
        let mut keep = HashSet::new();
        self.index
            .read()
            .visit_range(&KeyRange::new(&[0], &[0]), at, |_, found| {
                keep.insert(found.modified);
                true
            });
        keep
    }
}

/// CRC-32C of "key" and of each record through `at`, leaving out those
/// at or below `compacted` that are not in `keep` (unless `keep` is empty,
/// as etcd does).
fn hash_records(
    tree: &sled::Tree,
    at: i64,
    compacted: i64,
    keep: &HashSet<Revision>,
) -> Result<u32> {
    let mut crc = Crc32c::default();
    crc.update(b"key");
    let end = Revision::new(at + 1, 0).to_key();
    for item in tree.range([RECORD_PREFIX].as_slice()..end.as_slice()) {
        let (key, value) = item?;
        let (Some(rev), Some(record)) = (Revision::from_key(&key), RecordView::parse(&value))
        else {
            return Err(StoreError::storage(
                "hashing the key history",
                format!("unreadable record under {key:?}"),
            ));
        };
        if rev.main <= compacted && !keep.is_empty() && !keep.contains(&rev) {
            continue;
        }
        crc.update(&revision_key(rev, record.tombstone));
        crc.update(&etcd_value(rev, &record));
    }
    Ok(crc.sum())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32c_matches_the_published_check_values() {
        // RFC 3720 (iSCSI) test vectors and the standard check value.
        let check = |bytes: &[u8]| {
            let mut crc = Crc32c::default();
            crc.update(bytes);
            crc.sum()
        };
        assert_eq!(check(b"123456789"), 0xE306_9283);
        assert_eq!(check(&[0u8; 32]), 0x8A91_36AA);
        assert_eq!(check(&[0xffu8; 32]), 0x62A8_AB43);
        let mut split = Crc32c::default();
        split.update(b"1234");
        split.update(b"56789");
        assert_eq!(split.sum(), 0xE306_9283);
    }
}
