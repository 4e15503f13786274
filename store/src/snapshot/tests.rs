use super::*;
use crate::api::{DeleteRangeRequest, KeyValue, PutRequest, RangeRequest};
use crate::node::testing::{open_temp, put, test_config};
use crate::Store;

/// Every key at revision `at`, with its revisions and version.
async fn everything_at(store: &Store, at: i64) -> Vec<KeyValue> {
    store
        .range(RangeRequest {
            key: vec![0],
            range_end: vec![0],
            revision: at,
            ..Default::default()
        })
        .await
        .expect("range")
        .kvs
}

/// A history with overwrites, deletions, a lease and a compaction.
async fn history(store: &Store) -> i64 {
    for i in 0..30 {
        put(store, &format!("/k/{:02}", i % 10), &format!("v{i}")).await;
    }
    store
        .delete_range(DeleteRangeRequest {
            key: b"/k/03".to_vec(),
            ..Default::default()
        })
        .await
        .unwrap();
    let lease = store.lease_grant(300, 0).await.unwrap().id;
    let mut with_lease = PutRequest::new("/leased", "x");
    with_lease.lease = lease;
    store.put(with_lease).await.unwrap();
    let compact_at = put(store, "/k/04", "again").await;
    store.compact(compact_at - 3, true).await.unwrap();
    put(store, "/k/05", "after").await;
    store
        .delete_range(DeleteRangeRequest {
            key: b"/k/06".to_vec(),
            ..Default::default()
        })
        .await
        .unwrap();
    put(store, "/k/06", "recreated").await
}

#[tokio::test]
async fn a_snapshot_restores_every_revision_and_hashes_alike() {
    let (store, _dir) = open_temp().await;
    let last = history(&store).await;
    let db = database(&store).await.unwrap();
    let mut file = db.clone();
    file.extend_from_slice(&checksum(&db));

    let target = tempfile::tempdir().unwrap();
    let data_dir = target.path().join("restored");
    let restored = restore::restore_data_dir(&file, &data_dir, None).unwrap();
    assert_eq!(restored.revision, last);
    assert_eq!(restored.compact_revision, store.kv().compact_revision());
    assert_eq!(restored.leases, 1);

    let copy = Store::open(test_config(&data_dir)).await.unwrap();
    assert_eq!(copy.kv().current_revision(), last);
    assert_eq!(copy.kv().compact_revision(), store.kv().compact_revision());
    for at in store.kv().compact_revision()..=last {
        assert_eq!(
            everything_at(&copy, at).await,
            everything_at(&store, at).await,
            "at {at}"
        );
    }
    assert_eq!(
        copy.kv().hash_kv(0).unwrap(),
        store.kv().hash_kv(0).unwrap()
    );
    assert_eq!(
        copy.kv().hash_kv(last - 2).unwrap(),
        store.kv().hash_kv(last - 2).unwrap()
    );
    assert_eq!(
        backend_hash(copy.kv()).unwrap(),
        backend_hash(store.kv()).unwrap()
    );
    let leased = everything_at(&copy, 0).await;
    let leased = leased.iter().find(|kv| kv.key == b"/leased").unwrap();
    assert_eq!(
        copy.lease_time_to_live(leased.lease, true)
            .await
            .unwrap()
            .keys,
        [b"/leased".to_vec()]
    );

    // Revisions continue from the snapshot's.
    assert_eq!(put(&copy, "/new", "1").await, last + 1);
    copy.close().await.unwrap();
    store.close().await.unwrap();
}

#[tokio::test]
async fn hashes_follow_the_history() {
    let (store, _dir) = open_temp().await;
    let first = put(&store, "a", "1").await;
    let before = store.kv().hash_kv(0).unwrap();
    assert_eq!(before.hash_revision, first);
    put(&store, "a", "2").await;
    let after = store.kv().hash_kv(0).unwrap();
    assert_ne!(before.hash, after.hash);
    // An old revision hashes as it did then.
    assert_eq!(store.kv().hash_kv(first).unwrap().hash, before.hash);
    assert!(matches!(
        store.kv().hash_kv(first + 5),
        Err(StoreError::FutureRevision { .. })
    ));
    store.compact(first + 1, true).await.unwrap();
    assert!(matches!(
        store.kv().hash_kv(first),
        Err(StoreError::Compacted { .. })
    ));
    store.close().await.unwrap();
}

#[tokio::test]
async fn bad_snapshot_files_are_refused_and_create_nothing() {
    let (store, _dir) = open_temp().await;
    put(&store, "a", "1").await;
    let db = database(&store).await.unwrap();
    let mut file = db.clone();
    file.extend_from_slice(&checksum(&db));
    store.close().await.unwrap();

    let target = tempfile::tempdir().unwrap();
    let data_dir = target.path().join("member");
    let mut damaged = file.clone();
    damaged[5000] ^= 1;
    for (bad, why) in [
        (damaged, "checksum"),
        (file[..file.len() - 1].to_vec(), "neither a database"),
        (vec![0; 4096 * 4], "bbolt"),
    ] {
        let err = restore::restore_data_dir(&bad, &data_dir, None).unwrap_err();
        assert!(err.to_string().contains(why), "{err}");
        assert!(!data_dir.exists());
    }
    // A bbolt file that is not etcd's.
    let mut other = bolt::Buckets::new();
    other.insert(b"widgets".to_vec(), bolt::Bucket::default());
    let err = read_file(&bolt::write(&other).unwrap()).unwrap_err();
    assert!(err.to_string().contains("no \"key\" bucket"), "{err}");

    restore::restore_data_dir(&file, &data_dir, None).unwrap();
    let err = restore::restore_data_dir(&file, &data_dir, None).unwrap_err();
    assert!(err.to_string().contains("already exists"), "{err}");
}
