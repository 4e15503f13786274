//! etcd's backend schema, both ways: skiff's state (records, leases,
//! compaction marks) as the buckets of an etcd database, and an etcd
//! database's buckets as a state to start skiff from.
//!
//! ```text
//! key     main BE u64 '_' sub BE u64 ['t' for a deletion] → mvccpb.KeyValue
//! lease   ID BE u64 → leasepb.Lease {ID, TTL, RemainingTTL}
//! meta    consistent_index, term → BE u64;
//!         scheduledCompactRev, finishedCompactRev → a revision key (no 't')
//! members hex ID → JSON {"id","peerURLs","name","clientURLs"}
//! cluster clusterVersion → "3.4.0"
//! ```

use prost::Message;

use super::bolt::{Bucket, Buckets};
use super::SnapshotError;
use crate::api::Member;
use crate::grpc::pb::mvccpb::KeyValue;
use crate::mvcc::kvstore::{
    lease_key, lease_value, LEASE_PREFIX, META_COMPACT_FINISHED, META_COMPACT_SCHEDULED,
    META_REVISION,
};
use crate::mvcc::record::{Record, RecordView};
use crate::mvcc::revision::{Revision, RECORD_PREFIX};

pub const KEY_BUCKET: &[u8] = b"key";
pub const META_BUCKET: &[u8] = b"meta";
pub const LEASE_BUCKET: &[u8] = b"lease";
const MEMBERS_BUCKET: &[u8] = b"members";
const CLUSTER_BUCKET: &[u8] = b"cluster";
/// Buckets etcd 3.4 creates at its first start; present, and empty, in a
/// snapshot of skiff (skiff has no auth and raises no alarms).
const EMPTY_BUCKETS: [&[u8]; 5] = [
    b"alarm",
    b"auth",
    b"authRoles",
    b"authUsers",
    b"members_removed",
];
const CONSISTENT_INDEX: &[u8] = b"consistent_index";
const TERM: &[u8] = b"term";
const SCHEDULED_COMPACT: &[u8] = b"scheduledCompactRev";
const FINISHED_COMPACT: &[u8] = b"finishedCompactRev";
/// The cluster version a snapshot of skiff claims (the etcd API it speaks).
const CLUSTER_VERSION: &[u8] = b"3.4.0";

/// etcd's `leasepb.Lease`.
#[derive(Clone, PartialEq, Message)]
struct LeaseRecord {
    #[prost(int64, tag = "1")]
    id: i64,
    #[prost(int64, tag = "2")]
    ttl: i64,
    #[prost(int64, tag = "3")]
    remaining_ttl: i64,
}

/// A revision as etcd keys its `key` bucket (and its compaction marks).
pub fn revision_key(rev: Revision, tombstone: bool) -> Vec<u8> {
    let mut key = Vec::with_capacity(18);
    key.extend_from_slice(&(rev.main as u64).to_be_bytes());
    key.push(b'_');
    key.extend_from_slice(&(rev.sub as u64).to_be_bytes());
    if tombstone {
        key.push(b't');
    }
    key
}

/// The revision of an etcd `key` bucket key, and whether it marks a deletion.
pub fn parse_revision_key(key: &[u8]) -> Option<(Revision, bool)> {
    let tombstone = match key.len() {
        17 => false,
        18 if key[17] == b't' => true,
        _ => return None,
    };
    if key[8] != b'_' {
        return None;
    }
    let main = i64::try_from(u64::from_be_bytes(key[..8].try_into().ok()?)).ok()?;
    let sub = i64::try_from(u64::from_be_bytes(key[9..17].try_into().ok()?)).ok()?;
    Some((Revision::new(main, sub), tombstone))
}

/// A record as etcd stores it: the whole key-value for a put, the key
/// alone for a deletion.
pub fn etcd_value(rev: Revision, record: &RecordView) -> Vec<u8> {
    let kv = if record.tombstone {
        KeyValue {
            key: record.key.to_vec(),
            ..Default::default()
        }
    } else {
        KeyValue {
            key: record.key.to_vec(),
            create_revision: record.create_revision,
            mod_revision: rev.main,
            version: record.version,
            value: record.value.to_vec(),
            lease: record.lease,
        }
    };
    kv.encode_to_vec()
}

/// What a snapshot of skiff records beside the state itself.
#[derive(Debug, Clone, Default)]
pub struct SnapshotMeta {
    /// The applied log index (etcd's consistent index).
    pub applied_index: u64,
    pub term: u64,
    pub members: Vec<Member>,
}

fn i64_le(value: &[u8]) -> Option<i64> {
    Some(i64::from_le_bytes(value.try_into().ok()?))
}

/// skiff's state (every entry of its state tree, in order) as etcd's buckets.
pub fn to_etcd(
    entries: &[(Vec<u8>, Vec<u8>)],
    meta: &SnapshotMeta,
) -> Result<Buckets, SnapshotError> {
    let mut keys = Bucket::default();
    let mut leases = Bucket::default();
    let mut compaction = (0i64, 0i64);
    for (key, value) in entries {
        if key.first() == Some(&RECORD_PREFIX) {
            let (Some(rev), Some(record)) = (Revision::from_key(key), RecordView::parse(value))
            else {
                return Err(SnapshotError::Invalid(format!(
                    "unreadable record under {key:?} in the store"
                )));
            };
            keys.entries.push((
                revision_key(rev, record.tombstone),
                etcd_value(rev, &record),
            ));
        } else if key.first() == Some(&LEASE_PREFIX) && key.len() == 9 && value.len() == 16 {
            let id = i64::from_be_bytes(key[1..9].try_into().unwrap_or_default());
            let lease = LeaseRecord {
                id,
                ttl: i64_le(&value[..8]).unwrap_or_default(),
                remaining_ttl: i64_le(&value[8..]).unwrap_or_default(),
            };
            leases
                .entries
                .push((id.to_be_bytes().to_vec(), lease.encode_to_vec()));
        } else if key.as_slice() == META_COMPACT_SCHEDULED {
            compaction.0 = i64_le(value).unwrap_or_default();
        } else if key.as_slice() == META_COMPACT_FINISHED {
            compaction.1 = i64_le(value).unwrap_or_default();
        }
    }
    // Lease IDs are positive, so big-endian order is numeric order.
    leases.entries.sort();

    let mut meta_bucket = Bucket::default();
    meta_bucket.entries.push((
        CONSISTENT_INDEX.to_vec(),
        meta.applied_index.to_be_bytes().to_vec(),
    ));
    let (scheduled, finished) = compaction;
    if finished > 0 {
        meta_bucket.entries.push((
            FINISHED_COMPACT.to_vec(),
            revision_key(Revision::new(finished, 0), false),
        ));
    }
    if scheduled > 0 {
        meta_bucket.entries.push((
            SCHEDULED_COMPACT.to_vec(),
            revision_key(Revision::new(scheduled, 0), false),
        ));
    }
    meta_bucket
        .entries
        .push((TERM.to_vec(), meta.term.to_be_bytes().to_vec()));
    meta_bucket.entries.sort();

    let mut members = Bucket::default();
    for member in &meta.members {
        let json = serde_json::json!({
            "id": member.id,
            "peerURLs": member.peer_urls,
            "name": member.name,
            "clientURLs": member.client_urls,
        });
        members.entries.push((
            format!("{:x}", member.id).into_bytes(),
            json.to_string().into_bytes(),
        ));
    }
    members.entries.sort();

    let mut buckets = Buckets::new();
    buckets.insert(KEY_BUCKET.to_vec(), keys);
    buckets.insert(LEASE_BUCKET.to_vec(), leases);
    buckets.insert(META_BUCKET.to_vec(), meta_bucket);
    buckets.insert(MEMBERS_BUCKET.to_vec(), members);
    buckets.insert(
        CLUSTER_BUCKET.to_vec(),
        Bucket {
            sequence: 0,
            entries: vec![(b"clusterVersion".to_vec(), CLUSTER_VERSION.to_vec())],
        },
    );
    for name in EMPTY_BUCKETS {
        buckets.insert(name.to_vec(), Bucket::default());
    }
    Ok(buckets)
}

/// A state read from etcd's buckets, ready for skiff's state tree.
#[derive(Debug, Default)]
pub struct Restored {
    /// Entries of skiff's state tree: records, leases, revision and
    /// compaction marks (no applied index: the log starts anew).
    pub entries: Vec<(Vec<u8>, Vec<u8>)>,
    pub revision: i64,
    pub compact_revision: i64,
    /// Records (puts and deletions) of the history kept.
    pub records: usize,
    pub leases: usize,
}

fn compaction_mark(meta: Option<&Bucket>, name: &[u8]) -> Result<i64, SnapshotError> {
    let Some(value) = meta.and_then(|m| m.entries.iter().find(|(k, _)| k == name)) else {
        return Ok(0);
    };
    parse_revision_key(&value.1)
        .map(|(rev, _)| rev.main)
        .ok_or_else(|| {
            SnapshotError::Invalid(format!(
                "meta bucket: {} is not a revision",
                String::from_utf8_lossy(name)
            ))
        })
}

/// Reads etcd's `key`, `lease` and `meta` buckets into skiff's state.
pub fn from_etcd(buckets: &Buckets) -> Result<Restored, SnapshotError> {
    let keys = buckets.get(KEY_BUCKET).ok_or_else(|| {
        SnapshotError::Invalid("the database has no \"key\" bucket: not an etcd snapshot".into())
    })?;
    let meta = buckets.get(META_BUCKET);
    let finished = compaction_mark(meta, FINISHED_COMPACT)?;
    let scheduled = compaction_mark(meta, SCHEDULED_COMPACT)?.max(finished);
    let mut restored = Restored::default();
    for (key, value) in &keys.entries {
        let (rev, tombstone) = parse_revision_key(key).ok_or_else(|| {
            SnapshotError::Invalid(format!("key bucket: {key:?} is not a revision"))
        })?;
        let kv = KeyValue::decode(value.as_slice()).map_err(|e| {
            SnapshotError::Invalid(format!(
                "key bucket: the value at revision {} is not a KeyValue: {e}",
                rev.main
            ))
        })?;
        if kv.key.is_empty() || rev.main <= 0 {
            return Err(SnapshotError::Invalid(format!(
                "key bucket: an empty key or a revision below 1 at {key:?}"
            )));
        }
        let record = Record {
            tombstone,
            key: kv.key,
            create_revision: if tombstone { 0 } else { kv.create_revision },
            version: if tombstone { 0 } else { kv.version },
            lease: if tombstone { 0 } else { kv.lease },
            value: if tombstone { Vec::new() } else { kv.value },
        };
        restored
            .entries
            .push((rev.to_key().to_vec(), record.encode()));
        restored.revision = restored.revision.max(rev.main);
        restored.records += 1;
    }
    if let Some(leases) = buckets.get(LEASE_BUCKET) {
        for (key, value) in &leases.entries {
            let lease = LeaseRecord::decode(value.as_slice()).map_err(|e| {
                SnapshotError::Invalid(format!("lease bucket: {key:?} is not a Lease: {e}"))
            })?;
            if lease.id <= 0 {
                return Err(SnapshotError::Invalid(format!(
                    "lease bucket: lease ID {} is not positive",
                    lease.id
                )));
            }
            restored.entries.push((
                lease_key(lease.id).to_vec(),
                lease_value(lease.ttl, lease.remaining_ttl).to_vec(),
            ));
            restored.leases += 1;
        }
    }
    // As etcd: every record may be compacted away up to the mark.
    restored.revision = restored.revision.max(scheduled);
    restored.compact_revision = scheduled;
    restored.entries.push((
        META_REVISION.to_vec(),
        restored.revision.to_le_bytes().to_vec(),
    ));
    if scheduled > 0 {
        restored.entries.push((
            META_COMPACT_SCHEDULED.to_vec(),
            scheduled.to_le_bytes().to_vec(),
        ));
        restored.entries.push((
            META_COMPACT_FINISHED.to_vec(),
            finished.to_le_bytes().to_vec(),
        ));
    }
    Ok(restored)
}
