//! A snapshot of the engine: every entry of the state tree (records,
//! leases, metadata with the applied index and the membership) in one
//! checksummed blob, made by the leader for a follower that is too far
//! behind for the log, and installed there in place of its state.
//!
//! ```text
//! magic   8 bytes  "SKIFFSN1"
//! count   u64 LE   entries
//! entry   u32 LE key length, key, u32 LE value length, value   (count times)
//! crc     u32 LE   CRC-32 of everything before it
//! ```

use super::KvStore;
use crate::error::{Result, StoreError};

const MAGIC: &[u8; 8] = b"SKIFFSN1";

impl KvStore {
    /// The whole state as of now. Call it where nothing is applied
    /// meanwhile (the Raft driver's thread), so the blob is exactly the
    /// state at [`KvStore::applied_index`].
    pub fn dump(&self) -> Result<Vec<u8>> {
        self.flush_behind()?;
        let mut out = Vec::with_capacity(64 * 1024);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&0u64.to_le_bytes());
        let mut count = 0u64;
        for item in self.tree().iter() {
            let (key, value) = item?;
            for part in [key.as_ref(), value.as_ref()] {
                out.extend_from_slice(&(part.len() as u32).to_le_bytes());
                out.extend_from_slice(part);
            }
            count += 1;
        }
        out[8..16].copy_from_slice(&count.to_le_bytes());
        let crc = crc32fast::hash(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        Ok(out)
    }

    /// Replaces the state with a snapshot made by [`KvStore::dump`],
    /// after checking all of it. Returns what the new state holds besides
    /// records (leases, membership).
    pub(crate) fn install(&self, snapshot: &[u8]) -> Result<super::kvstore::Recovered> {
        let entries = decode(snapshot)?;
        self.replace_state(entries.into_iter())
    }
}

/// Every (key, value) of a snapshot, or why it is damaged.
pub(crate) fn decode(snapshot: &[u8]) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
    let bad = |why: &str| StoreError::storage("reading a snapshot", why.to_string());
    if snapshot.len() < MAGIC.len() + 8 + 4 || &snapshot[..8] != MAGIC {
        return Err(bad("not a skiff snapshot"));
    }
    let (body, crc) = snapshot.split_at(snapshot.len() - 4);
    let crc = u32::from_le_bytes(crc.try_into().map_err(|_| bad("no checksum"))?);
    if crc32fast::hash(body) != crc {
        return Err(bad("checksum mismatch: the snapshot is damaged"));
    }
    let count = u64::from_le_bytes(body[8..16].try_into().map_err(|_| bad("no count"))?);
    let mut rest = &body[16..];
    let take = |rest: &mut &[u8]| -> Result<Vec<u8>> {
        if rest.len() < 4 {
            return Err(bad("truncated entry"));
        }
        let len = u32::from_le_bytes(rest[..4].try_into().map_err(|_| bad("truncated"))?) as usize;
        if rest.len() < 4 + len {
            return Err(bad("truncated entry"));
        }
        let part = rest[4..4 + len].to_vec();
        *rest = &rest[4 + len..];
        Ok(part)
    };
    let mut entries = Vec::with_capacity(count.min(1 << 20) as usize);
    for _ in 0..count {
        let key = take(&mut rest)?;
        let value = take(&mut rest)?;
        entries.push((key, value));
    }
    if !rest.is_empty() {
        return Err(bad("bytes after the last entry"));
    }
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use crate::api::{PutRequest, RangeRequest};
    use crate::command::Command;
    use crate::lease::{Lessor, LessorConfig};
    use crate::mvcc::{Applier, KvStore};

    fn engine(dir: &std::path::Path) -> KvStore {
        let db = sled::Config::new()
            .path(dir)
            .temporary(true)
            .open()
            .unwrap();
        KvStore::open(db.open_tree("mvcc").unwrap()).unwrap().0
    }

    fn apply(kv: &KvStore, lessor: &Lessor, from: u64, commands: &[Command]) {
        let mut applier = Applier::new(kv, lessor);
        for (i, command) in commands.iter().enumerate() {
            applier.apply(from + i as u64, command).unwrap().unwrap();
        }
        let committed = applier.commit().unwrap();
        kv.publish_revision(committed.revision);
    }

    fn everything(kv: &KvStore) -> Vec<(Vec<u8>, Vec<u8>, i64)> {
        kv.range(&RangeRequest {
            key: vec![0],
            range_end: vec![0],
            ..Default::default()
        })
        .unwrap()
        .kvs
        .into_iter()
        .map(|kv| (kv.key, kv.value, kv.mod_revision))
        .collect()
    }

    #[test]
    fn a_snapshot_installs_the_whole_state_and_replaces_the_old() {
        let dirs = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let (leader, follower) = (engine(dirs.0.path()), engine(dirs.1.path()));
        let lessor = Lessor::new(LessorConfig::default());
        let puts: Vec<Command> = (0..50)
            .map(|i| Command::Put(PutRequest::new(format!("k{i:02}"), format!("v{i}"))))
            .collect();
        apply(&leader, &lessor, 1, &puts);
        apply(
            &leader,
            &lessor,
            51,
            &[Command::LeaseGrant { id: 7, ttl: 30 }],
        );
        // The follower has a different, older state that must go.
        apply(
            &follower,
            &Lessor::new(LessorConfig::default()),
            1,
            &puts[..3],
        );
        apply(
            &follower,
            &Lessor::new(LessorConfig::default()),
            4,
            &[Command::Put(PutRequest::new("only-here", "x"))],
        );

        let blob = leader.dump().unwrap();
        let recovered = follower.install(&blob).unwrap();
        assert_eq!(everything(&follower), everything(&leader));
        assert_eq!(follower.applied_index(), 51);
        assert_eq!(follower.current_revision(), leader.current_revision());
        assert_eq!(
            recovered.leases.iter().map(|l| l.0).collect::<Vec<_>>(),
            [7]
        );
        // History came along: an old revision reads as on the leader.
        assert_eq!(
            follower.get_at(b"k00", 1).unwrap().map(|kv| kv.value),
            Some(b"v0".to_vec())
        );
    }

    /// The fault suite's "members disagree": a watch from revision 1 on a
    /// member that was installing a snapshot began at the revision the
    /// member had reached before it. The watch syncer read the history
    /// while the tree was empty, between the install's clear and its fill.
    #[test]
    fn a_history_read_during_a_snapshot_install_waits_for_the_new_state() {
        let dirs = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let (leader, follower) = (engine(dirs.0.path()), engine(dirs.1.path()));
        let lessor = Lessor::new(LessorConfig::default());
        let puts: Vec<Command> = (0..20)
            .map(|i| Command::Put(PutRequest::new(format!("k{i:02}"), format!("v{i}"))))
            .collect();
        apply(&leader, &lessor, 1, &puts);
        apply(&follower, &lessor, 1, &puts[..5]);
        let entries = super::decode(&leader.dump().unwrap()).unwrap();
        let to = leader.current_revision();
        let (expected, _) = leader.history(1, to, usize::MAX).unwrap();
        let expected: Vec<i64> = expected.iter().map(|r| r.revision.main).collect();

        let follower = std::sync::Arc::new(follower);
        let (cleared_tx, cleared_rx) = std::sync::mpsc::channel::<()>();
        let (read_tx, read_rx) = std::sync::mpsc::channel();
        let reader = {
            let follower = std::sync::Arc::clone(&follower);
            std::thread::spawn(move || {
                cleared_rx.recv().unwrap();
                let read = follower.history(1, to, usize::MAX).unwrap();
                read_tx.send(read).unwrap();
            })
        };
        // The install asks for its first entry once the old state is gone:
        // the reader reads then, and the install waits a while for it.
        let mut entries = entries.into_iter();
        let mut first = true;
        let hooked = std::iter::from_fn(|| {
            if std::mem::take(&mut first) {
                cleared_tx.send(()).unwrap();
                let early = read_rx.recv_timeout(std::time::Duration::from_millis(300));
                if let Ok((records, read_to)) = early {
                    panic!(
                        "history read during the install: {} records through {read_to}",
                        records.len()
                    );
                }
            }
            entries.next()
        });
        follower.replace_state(hooked).unwrap();
        reader.join().unwrap();
        let (records, read_to) = read_rx.recv().unwrap();
        assert_eq!(read_to, to);
        let revisions: Vec<i64> = records.iter().map(|r| r.revision.main).collect();
        assert_eq!(revisions, expected);
        assert_eq!(revisions.len(), 20);
    }

    #[test]
    fn a_damaged_snapshot_is_refused_and_changes_nothing() {
        let dirs = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let (leader, follower) = (engine(dirs.0.path()), engine(dirs.1.path()));
        let lessor = Lessor::new(LessorConfig::default());
        apply(
            &leader,
            &lessor,
            1,
            &[Command::Put(PutRequest::new("a", "1"))],
        );
        apply(
            &follower,
            &lessor,
            1,
            &[Command::Put(PutRequest::new("b", "2"))],
        );
        let before = everything(&follower);
        let mut blob = leader.dump().unwrap();
        let middle = blob.len() / 2;
        blob[middle] ^= 0xff;
        assert!(follower.install(&blob).is_err());
        assert!(follower.install(&blob[..blob.len() - 1]).is_err());
        assert!(follower.install(b"not a snapshot").is_err());
        assert_eq!(everything(&follower), before);
    }
}
