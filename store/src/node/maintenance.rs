//! What an operator does to one member when its database grows: the space
//! quota that raises NOSPACE, alarms (etcd's Alarm: list, raise, disarm),
//! and defragmentation. The corruption check is in `corruption`.

use std::time::Duration;

use super::Store;
use crate::command::Command;
use crate::error::{Result, StoreError};
use crate::mvcc::alarm::{self, AlarmMember};
use crate::mvcc::backend::Defragmented;
use crate::mvcc::CommandResult;

/// A write is checked against the database's size as measured at most
/// this long ago: measuring costs file system calls.
const QUOTA_SIZE_MAX_AGE: Duration = Duration::from_millis(100);

/// etcd's `AlarmRequest` actions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AlarmAction {
    Get,
    Activate,
    Deactivate,
}

impl AlarmAction {
    /// The action of etcd's `AlarmAction` value; `None` for another.
    pub fn from_i32(action: i32) -> Option<AlarmAction> {
        match action {
            0 => Some(AlarmAction::Get),
            1 => Some(AlarmAction::Activate),
            2 => Some(AlarmAction::Deactivate),
            _ => None,
        }
    }
}

impl Store {
    /// The space quota in bytes (etcd's --quota-backend-bytes; 0 is the
    /// default, 2 GiB).
    pub fn quota_backend_bytes(&self) -> u64 {
        match self.inner.config.quota_backend_bytes {
            0 => super::DEFAULT_QUOTA_BACKEND_BYTES,
            quota => quota,
        }
    }

    /// Refuses a write that would take the database past its quota, as
    /// etcd's API does, and raises NOSPACE for this member through the log
    /// (every member then refuses such writes until it is disarmed).
    ///
    /// A member whose data directory's file system is short of space
    /// refuses such writes too, with the same error (see `disk_space`).
    pub(super) async fn check_quota(&self, command: &Command) -> Result<()> {
        let cost = alarm::quota_cost(command) as u64;
        if cost == 0 {
            return Ok(());
        }
        if self.inner.space.check() {
            self.raise_nospace_if_alone().await;
            return Err(StoreError::NoSpace);
        }
        let kv = &self.inner.kv;
        let size = kv.recent_db_size(QUOTA_SIZE_MAX_AGE);
        let quota = self.quota_backend_bytes();
        if size.saturating_add(cost) < quota {
            return Ok(());
        }
        if !self.nospace_raised() {
            tracing::warn!(
                db_size = size,
                quota,
                "the database is past its space quota; raising NOSPACE"
            );
            self.propose_nospace().await;
        }
        Err(StoreError::NoSpace)
    }

    /// Whether NOSPACE is up for this member.
    pub(super) fn nospace_raised(&self) -> bool {
        let me = self.member_id();
        let alarms = self.inner.kv.alarms(alarm::NOSPACE);
        alarms.iter().any(|a| a.member_id == me)
    }

    /// Raises NOSPACE for this member through the log, within the request
    /// timeout; a failure is logged, the write is refused either way.
    pub(super) async fn propose_nospace(&self) {
        let raise = Command::Alarm {
            activate: true,
            member_id: self.member_id(),
            alarm: alarm::NOSPACE,
        };
        let raising = super::send_proposal(&self.inner.requests, raise.encode(), None);
        match tokio::time::timeout(self.inner.config.request_timeout, raising).await {
            Ok(Ok(_)) => {}
            Ok(Err(err)) => tracing::warn!(error = %err, "could not raise NOSPACE"),
            Err(_) => tracing::warn!("raising NOSPACE timed out"),
        }
    }

    /// etcd's Alarm: `Get` lists the alarms of type `alarm` (NONE: all)
    /// once this member has applied every change committed before the
    /// request; `Activate` raises one for `member_id`, `Deactivate`
    /// disarms it, through the log. Any type and member ID is taken as
    /// given, as etcd takes it.
    pub async fn alarm(
        &self,
        action: AlarmAction,
        member_id: u64,
        alarm: i32,
    ) -> Result<Vec<AlarmMember>> {
        let activate = match action {
            AlarmAction::Get => {
                self.linearize().await?;
                return Ok(self.inner.kv.alarms(alarm));
            }
            AlarmAction::Activate => true,
            AlarmAction::Deactivate => false,
        };
        let command = Command::Alarm {
            activate,
            member_id,
            alarm,
        };
        match self.propose(command).await? {
            CommandResult::Alarm(alarms) => Ok(alarms),
            other => Err(super::unexpected(other)),
        }
    }

    /// Every alarm raised, as this member has applied them.
    pub fn alarms(&self) -> Vec<AlarmMember> {
        self.inner.kv.alarms(alarm::NONE)
    }

    /// Gives back the space compacted history takes in this member's
    /// database (etcd's Defragment), once a compaction already under way
    /// has finished on disk. Other members go on serving; this one keeps
    /// serving reads, and holds writes only while it switches databases.
    pub async fn defragment(&self) -> Result<Defragmented> {
        let kv = std::sync::Arc::clone(&self.inner.kv);
        let compacted = kv.compact_revision();
        let mut finished = kv.compact_finished.subscribe();
        let wait = finished.wait_for(|&done| done >= compacted);
        if tokio::time::timeout(self.inner.config.request_timeout, wait)
            .await
            .is_err()
        {
            tracing::info!(
                revision = compacted,
                "defragmenting while a compaction is still removing history"
            );
        }
        tracing::info!("defragmenting the state database");
        let started = std::time::Instant::now();
        let done = tokio::task::spawn_blocking(move || kv.defragment())
            .await
            .map_err(|e| StoreError::storage("defragmenting", e))??;
        tracing::info!(
            size_before = done.size_before,
            size_after = done.size_after,
            took_ms = started.elapsed().as_millis() as u64,
            "defragmented the state database"
        );
        Ok(done)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{DeleteRangeRequest, PutRequest, RangeRequest, RequestOp, TxnRequest};
    use crate::node::testing::{get, put, test_config};
    use crate::node::Store;

    /// Every key with its value and revisions, read linearizably.
    async fn everything(store: &Store) -> Vec<(Vec<u8>, Vec<u8>, i64, i64, i64)> {
        let all = RangeRequest {
            key: vec![0],
            range_end: vec![0],
            ..Default::default()
        };
        let read = store.range(all).await.unwrap();
        read.kvs
            .into_iter()
            .map(|kv| {
                (
                    kv.key,
                    kv.value,
                    kv.create_revision,
                    kv.mod_revision,
                    kv.version,
                )
            })
            .collect()
    }

    fn dir_names(dir: &std::path::Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|name| name.starts_with("db"))
            .collect();
        names.sort();
        names
    }

    /// Overwrites `keys` keys `rounds` times with values of `size` bytes.
    async fn churn(store: &Store, keys: usize, rounds: usize, size: usize) {
        for round in 0..rounds {
            for key in 0..keys {
                let value = vec![b'a' + (round % 26) as u8; size];
                let put = PutRequest::new(format!("churn/{key}"), value);
                store.put(put).await.unwrap();
            }
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn defrag_gives_back_compacted_history_and_keeps_the_state() {
        let dir = tempfile::tempdir().unwrap();
        let config = test_config(dir.path());
        let store = Store::open(config.clone()).await.unwrap();
        churn(&store, 10, 40, 16 * 1024).await;
        let lease = store.lease_grant(600, 0).await.unwrap().id;
        let mut leased = PutRequest::new("leased", "v");
        leased.lease = lease;
        store.put(leased).await.unwrap();
        let revision = store.kv().current_revision();
        store.compact(revision, true).await.unwrap();
        store.kv().sync_to_disk().unwrap();
        let before = everything(&store).await;
        let in_use = store.status().db_size_in_use;

        let done = store.defragment().await.unwrap();
        assert!(
            done.size_after * 2 < done.size_before,
            "{} bytes before, {} after",
            done.size_before,
            done.size_after
        );
        assert_eq!(store.status().db_size, done.size_after);
        assert_eq!(store.status().db_size_in_use, in_use, "the same live data");
        assert!(in_use <= done.size_after);
        assert_eq!(everything(&store).await, before);
        assert_eq!(dir_names(dir.path()), ["db.1", "db.current"]);
        // History at the compacted revision is still there, and writes go on.
        assert_eq!(store.kv().compact_revision(), revision);
        let old = RangeRequest {
            revision,
            ..RangeRequest::key("churn/3")
        };
        assert_eq!(store.range(old).await.unwrap().kvs.len(), 1);
        assert_eq!(put(&store, "after", "1").await, revision + 1);
        // A second defrag moves on to a new copy.
        store.defragment().await.unwrap();
        assert_eq!(dir_names(dir.path()), ["db.2", "db.current"]);
        store.close().await.unwrap();

        let store = Store::open(config).await.unwrap();
        assert_eq!(
            dir_names(dir.path()),
            ["db"],
            "the copy is moved into place"
        );
        let mut expected = before;
        expected.insert(
            0,
            (
                b"after".to_vec(),
                b"1".to_vec(),
                revision + 1,
                revision + 1,
                1,
            ),
        );
        assert_eq!(everything(&store).await, expected);
        assert!(store.lease_leases().await.unwrap().leases.contains(&lease));
        assert_eq!(store.kv().compact_revision(), revision);
        store.close().await.unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn writes_made_during_a_defrag_are_kept() {
        let dir = tempfile::tempdir().unwrap();
        let config = test_config(dir.path());
        let store = Store::open(config.clone()).await.unwrap();
        churn(&store, 20, 20, 8 * 1024).await;
        let writer = {
            let store = store.clone();
            tokio::spawn(async move {
                let mut revisions = Vec::new();
                for i in 0..300 {
                    revisions.push(put(&store, &format!("during/{i:03}"), "v").await);
                }
                revisions
            })
        };
        for _ in 0..3 {
            store.defragment().await.unwrap();
        }
        let revisions = writer.await.unwrap();
        let last = *revisions.last().unwrap();
        let read = store.range(RangeRequest::prefix("during/")).await.unwrap();
        assert_eq!(read.count, 300);
        store.close().await.unwrap();
        let store = Store::open(config).await.unwrap();
        let read = store.range(RangeRequest::prefix("during/")).await.unwrap();
        assert_eq!(
            read.count, 300,
            "every acknowledged write survives a restart"
        );
        assert_eq!(read.kvs[299].mod_revision, last);
        store.close().await.unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn past_its_quota_a_member_raises_nospace_until_disarmed() {
        let dir = tempfile::tempdir().unwrap();
        let mut config = test_config(dir.path());
        let probe = Store::open(config.clone()).await.unwrap();
        let empty = probe.kv().db_size();
        probe.close().await.unwrap();
        config.quota_backend_bytes = empty + 1024 * 1024;
        let store = Store::open(config).await.unwrap();
        let value = vec![b'x'; 64 * 1024];
        let mut refused = None;
        for i in 0..200 {
            match store.put(PutRequest::new("big", value.clone())).await {
                Ok(_) => {}
                Err(err) => {
                    refused = Some((i, err));
                    break;
                }
            }
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        }
        let (at, err) = refused.expect("writes are refused past the quota");
        assert!(matches!(err, StoreError::NoSpace), "{err:?}");
        assert!(at > 0, "writes went through below the quota");
        let me = store.member_id();
        assert_eq!(store.alarms(), [AlarmMember::new(me, alarm::NOSPACE)]);
        let listed = store.alarm(AlarmAction::Get, 0, alarm::NONE).await.unwrap();
        assert_eq!(listed, [AlarmMember::new(me, alarm::NOSPACE)]);

        // What adds to the database is refused; reads, deletes, compaction are not.
        let small = store.put(PutRequest::new("small", "1")).await;
        assert!(matches!(small, Err(StoreError::NoSpace)), "{small:?}");
        let txn = |ops: Vec<RequestOp>| TxnRequest {
            compare: vec![],
            success: ops,
            failure: vec![],
        };
        let with_put = txn(vec![RequestOp::Put(PutRequest::new("t", "1"))]);
        assert!(matches!(
            store.txn(with_put).await,
            Err(StoreError::NoSpace)
        ));
        assert!(matches!(
            store.lease_grant(60, 0).await,
            Err(StoreError::NoSpace)
        ));
        let reads = txn(vec![RequestOp::Range(RangeRequest::key("big"))]);
        assert!(store.txn(reads).await.unwrap().succeeded);
        assert_eq!(get(&store, "big").await.unwrap().value, value);
        store
            .delete_range(DeleteRangeRequest {
                key: b"big".to_vec(),
                ..Default::default()
            })
            .await
            .unwrap();
        let revision = store.kv().current_revision();
        store.compact(revision, true).await.unwrap();
        let done = store.defragment().await.unwrap();
        assert!(done.size_after < done.size_before);
        // Below the quota again, but still refused until disarmed.
        let early = store.put(PutRequest::new("small", "1")).await;
        assert!(matches!(early, Err(StoreError::NoSpace)), "{early:?}");
        let disarmed = store
            .alarm(AlarmAction::Deactivate, me, alarm::NOSPACE)
            .await
            .unwrap();
        assert_eq!(disarmed, [AlarmMember::new(me, alarm::NOSPACE)]);
        assert!(store.alarms().is_empty());
        store.put(PutRequest::new("small", "1")).await.unwrap();
        store.lease_grant(60, 0).await.unwrap();
        store.close().await.unwrap();
    }

    #[tokio::test]
    async fn alarms_are_kept_as_raised_and_corrupt_refuses_changes() {
        let dir = tempfile::tempdir().unwrap();
        let config = test_config(dir.path());
        let store = Store::open(config.clone()).await.unwrap();
        put(&store, "k", "v").await;
        let lease = store.lease_grant(60, 0).await.unwrap().id;
        // Any type and member, as etcd keeps them; an unknown type refuses nothing.
        let odd = store.alarm(AlarmAction::Activate, 5, 7).await.unwrap();
        assert_eq!(odd, [AlarmMember::new(5, 7)]);
        let again = store.alarm(AlarmAction::Activate, 5, 7).await.unwrap();
        assert_eq!(again, [AlarmMember::new(5, 7)]);
        put(&store, "k", "v2").await;
        let none = store
            .alarm(AlarmAction::Deactivate, 9, alarm::NOSPACE)
            .await
            .unwrap();
        assert!(
            none.is_empty(),
            "disarming what is not raised answers nothing"
        );

        store
            .alarm(AlarmAction::Activate, 0, alarm::CORRUPT)
            .await
            .unwrap();
        let refused =
            |result: Result<()>| assert!(matches!(result, Err(StoreError::Corrupt)), "{result:?}");
        refused(store.put(PutRequest::new("k", "x")).await.map(drop));
        refused(
            store
                .delete_range(DeleteRangeRequest {
                    key: b"k".to_vec(),
                    ..Default::default()
                })
                .await
                .map(drop),
        );
        refused(store.compact(1, false).await.map(drop));
        refused(store.lease_grant(60, 0).await.map(drop));
        refused(store.lease_revoke(lease).await.map(drop));
        assert_eq!(get(&store, "k").await.unwrap().value, b"v2");
        let corrupt = store
            .alarm(AlarmAction::Get, 0, alarm::CORRUPT)
            .await
            .unwrap();
        assert_eq!(corrupt, [AlarmMember::new(0, alarm::CORRUPT)]);
        store.close().await.unwrap();

        // Alarms are state: a restart keeps them.
        let store = Store::open(config).await.unwrap();
        assert_eq!(
            store.alarms(),
            [AlarmMember::new(0, alarm::CORRUPT), AlarmMember::new(5, 7)]
        );
        refused(store.put(PutRequest::new("k", "x")).await.map(drop));
        store
            .alarm(AlarmAction::Deactivate, 0, alarm::CORRUPT)
            .await
            .unwrap();
        put(&store, "k", "v3").await;
        store.close().await.unwrap();
    }
}
