//! Store-level behaviour: replay of the log over older state, release of
//! the log once the state is durable, and the data directory lock.

use std::path::Path;
use std::time::Duration;

use super::testing::{get, put, test_config};
use super::Store;
use crate::error::StoreError;

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// The state database may lag the log (it is flushed in the background):
/// opening replays the log from the state's applied index.
#[tokio::test]
async fn log_is_replayed_over_older_state() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config(dir.path());
    // No background flush: the log keeps every entry, so the older state
    // below is still covered by it.
    config.flush_interval = Duration::from_secs(3600);
    let store = Store::open(config.clone()).await.unwrap();
    for i in 0..10 {
        put(&store, &format!("k{i}"), "first").await;
    }
    store.close().await.unwrap();
    let old_state = tempfile::tempdir().unwrap();
    copy_dir(&dir.path().join("db"), old_state.path());

    let store = Store::open(config.clone()).await.unwrap();
    for i in 0..10 {
        put(&store, &format!("k{i}"), "second").await;
    }
    let lease = store.lease_grant(600, 0).await.unwrap().id;
    store.close().await.unwrap();

    // Put the state back ten writes and a grant behind the log.
    std::fs::remove_dir_all(dir.path().join("db")).unwrap();
    copy_dir(old_state.path(), &dir.path().join("db"));
    let store = Store::open(config.clone()).await.unwrap();
    assert_eq!(store.kv().current_revision(), 20);
    for i in 0..10 {
        let kv = get(&store, &format!("k{i}")).await.unwrap();
        assert_eq!((kv.value.as_slice(), kv.version), (&b"second"[..], 2));
        assert_eq!(kv.mod_revision, 11 + i);
    }
    assert!(store.lease_leases().await.unwrap().leases.contains(&lease));
    assert_eq!(put(&store, "after", "v").await, 21);
    store.close().await.unwrap();

    // A log that lost entries the state has applied is damage, said plainly.
    std::fs::remove_dir_all(dir.path().join("wal")).unwrap();
    let Err(err) = Store::open(config).await else {
        panic!("opened with a lost log")
    };
    let message = err.to_string();
    assert!(message.contains("log entries are missing"), "{message}");
}

#[tokio::test]
async fn log_segments_are_released_once_state_is_durable() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config(dir.path());
    config.wal_segment_size = 16 * 1024;
    let store = Store::open(config.clone()).await.unwrap();
    for i in 0..300 {
        put(&store, &format!("k{i}"), &"v".repeat(200)).await;
    }
    let wal_dir = dir.path().join("wal");
    let segments = || {
        std::fs::read_dir(&wal_dir)
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .path()
                    .extension()
                    .is_some_and(|x| x == "wal")
            })
            .count()
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while segments() > 2 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "segments never released: {}",
            segments()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    store.close().await.unwrap();
    let store = Store::open(config).await.unwrap();
    assert_eq!(store.kv().current_revision(), 300);
    assert_eq!(get(&store, "k0").await.unwrap().mod_revision, 1);
    assert_eq!(put(&store, "next", "v").await, 301);
}

#[tokio::test]
async fn a_data_directory_has_one_owner() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(test_config(dir.path())).await.unwrap();
    let Err(err) = Store::open(test_config(dir.path())).await else {
        panic!("second open succeeded");
    };
    assert!(matches!(err, StoreError::DataDirLocked { .. }));
    let message = err.to_string();
    assert!(
        message.contains(&dir.path().display().to_string()),
        "{message}"
    );
    assert!(
        message.contains(&format!("pid {}", std::process::id())),
        "{message}"
    );
    store.close().await.unwrap();
    let again = Store::open(test_config(dir.path())).await.unwrap();
    again.close().await.unwrap();
}

#[tokio::test]
async fn writes_after_close_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(test_config(dir.path())).await.unwrap();
    let other = store.clone();
    store.close().await.unwrap();
    let err = other
        .put(crate::PutRequest::new("k", "v"))
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Stopped), "{err}");
}

#[tokio::test]
async fn a_small_byte_budget_throttles_but_never_deadlocks() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config(dir.path());
    config.proposal_queue_bytes = 1024;
    let store = Store::open(config).await.unwrap();
    let writers: Vec<_> = (0..32)
        .map(|i| {
            let store = store.clone();
            tokio::spawn(async move {
                // Larger than the whole budget: it still goes through, alone.
                let value = "v".repeat(if i % 8 == 0 { 4096 } else { 700 });
                put(&store, &format!("k{i}"), &value).await
            })
        })
        .collect();
    for writer in writers {
        tokio::time::timeout(Duration::from_secs(10), writer)
            .await
            .expect("no deadlock")
            .unwrap();
    }
    assert_eq!(store.kv().current_revision(), 32);
}

/// A lone member leads alone and acknowledges a write only once applied:
/// its linearizable reads read its state at once, without a read index,
/// and see every acknowledged write. Once closed it answers none.
#[tokio::test]
async fn a_lone_member_reads_its_own_state_linearizably() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(test_config(dir.path())).await.unwrap();
    for i in 0..50 {
        let key = format!("k{i}");
        let revision = put(&store, &key, "v").await;
        let kv = get(&store, &key)
            .await
            .expect("the write just acknowledged");
        assert_eq!(kv.mod_revision, revision);
    }
    let rounds = store
        .stats()
        .read_index_reads
        .load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(rounds, 0, "reads of a lone leader took the read index");
    let store2 = store.clone();
    store.close().await.unwrap();
    let err = store2
        .range(crate::api::RangeRequest::key("k0"))
        .await
        .expect_err("a closed store reads nothing");
    assert!(
        matches!(err, StoreError::Stopped | StoreError::Timeout),
        "{err:?}"
    );
}
