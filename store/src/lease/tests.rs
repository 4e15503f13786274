//! Leases through the store: grant, attach, keep-alive, expiry by the
//! lessor's revokes, and restart.

use std::time::Duration;

use crate::api::*;
use crate::error::StoreError;
use crate::node::testing::{get, open_temp, put, test_config};
use crate::Store;

async fn put_with_lease(store: &Store, key: &str, lease: i64) -> i64 {
    let mut req = PutRequest::new(key, "v");
    req.lease = lease;
    store.put(req).await.unwrap().header.revision
}

#[tokio::test]
async fn grant_with_chosen_id_and_minimum_ttl() {
    let (store, _dir) = open_temp().await;
    let granted = store.lease_grant(0, 42).await.unwrap();
    assert_eq!(
        (granted.id, granted.ttl),
        (42, 1),
        "raised to the minimum TTL"
    );
    assert!(matches!(
        store.lease_grant(10, 42).await,
        Err(StoreError::LeaseExists)
    ));
    assert!(matches!(
        store.lease_grant(crate::lease::MAX_LEASE_TTL + 1, 0).await,
        Err(StoreError::LeaseTtlTooLarge { .. })
    ));
    let chosen = store.lease_grant(30, 0).await.unwrap();
    assert!(chosen.id > 0 && chosen.id != 42);
    let mut ids = store.lease_leases().await.unwrap().leases;
    ids.sort();
    let mut expected = vec![42, chosen.id];
    expected.sort();
    assert_eq!(ids, expected);
    assert_eq!(store.kv().current_revision(), 0, "grants make no revision");
}

#[tokio::test]
async fn revoke_deletes_attached_keys_in_one_revision() {
    let (store, _dir) = open_temp().await;
    let id = store.lease_grant(60, 0).await.unwrap().id;
    put_with_lease(&store, "a", id).await;
    put_with_lease(&store, "b", id).await;
    put(&store, "c", "no lease").await;
    // Re-putting without the lease detaches it.
    put_with_lease(&store, "d", id).await;
    put(&store, "d", "detached").await;

    let ttl = store.lease_time_to_live(id, true).await.unwrap();
    assert_eq!(ttl.granted_ttl, 60);
    assert!(ttl.ttl > 55 && ttl.ttl <= 60, "{}", ttl.ttl);
    assert_eq!(ttl.keys, vec![b"a".to_vec(), b"b".to_vec()]);

    let before = store.kv().current_revision();
    let resp = store.lease_revoke(id).await.unwrap();
    assert_eq!(resp.header.revision, before + 1);
    assert!(get(&store, "a").await.is_none());
    assert!(get(&store, "b").await.is_none());
    assert!(get(&store, "c").await.is_some());
    assert!(get(&store, "d").await.is_some());
    assert_eq!(store.lease_time_to_live(id, false).await.unwrap().ttl, -1);
    assert!(matches!(
        store.lease_revoke(id).await,
        Err(StoreError::LeaseNotFound)
    ));
    assert!(matches!(
        store.lease_keep_alive(id).await,
        Err(StoreError::LeaseNotFound)
    ));
}

#[tokio::test]
async fn expired_lease_is_revoked_and_keep_alive_prevents_it() {
    let (store, _dir) = open_temp().await;
    let short = store.lease_grant(1, 0).await.unwrap().id;
    let kept = store.lease_grant(1, 0).await.unwrap().id;
    put_with_lease(&store, "short", short).await;
    put_with_lease(&store, "kept", kept).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while get(&store, "short").await.is_some() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "lease never expired"
        );
        store.lease_keep_alive(kept).await.unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        get(&store, "kept").await.is_some(),
        "keep-alive keeps the lease"
    );
    assert!(!store.lease_leases().await.unwrap().leases.contains(&short));
    assert_eq!(
        store.lease_time_to_live(short, false).await.unwrap().ttl,
        -1
    );
}

#[tokio::test]
async fn leases_and_attachments_survive_restart() {
    let dir = tempfile::tempdir().unwrap();
    let config = test_config(dir.path());
    let store = Store::open(config.clone()).await.unwrap();
    let id = store.lease_grant(60, 0).await.unwrap().id;
    put_with_lease(&store, "x", id).await;
    put_with_lease(&store, "y", id).await;
    store.close().await.unwrap();

    let store = Store::open(config).await.unwrap();
    let ttl = store.lease_time_to_live(id, true).await.unwrap();
    assert_eq!(ttl.granted_ttl, 60);
    assert_eq!(ttl.keys, vec![b"x".to_vec(), b"y".to_vec()]);
    store.lease_revoke(id).await.unwrap();
    assert!(get(&store, "x").await.is_none());
    assert!(get(&store, "y").await.is_none());
}

#[tokio::test]
async fn checkpointed_remaining_ttl_is_resumed_after_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config(dir.path());
    config.lessor.checkpoint_interval = Duration::from_secs(1);
    let store = Store::open(config.clone()).await.unwrap();
    let id = store.lease_grant(3600, 0).await.unwrap().id;
    // Simulate time passing: a checkpoint of 100 s remaining is logged.
    store
        .propose(crate::command::Command::LeaseCheckpoint {
            checkpoints: vec![(id, 100)],
        })
        .await
        .unwrap();
    store.close().await.unwrap();
    let store = Store::open(config).await.unwrap();
    let ttl = store.lease_time_to_live(id, false).await.unwrap();
    assert_eq!(ttl.granted_ttl, 3600);
    assert!(
        ttl.ttl <= 100 && ttl.ttl > 95,
        "resumed from checkpoint: {}",
        ttl.ttl
    );
    // A keep-alive renews to the full TTL and clears the checkpoint.
    let renewed = store.lease_keep_alive(id).await;
    assert_eq!(renewed.unwrap().ttl, 3600);
}
