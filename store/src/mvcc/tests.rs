//! Behaviour of the MVCC engine through the store's API: what an etcd
//! client would see.

use crate::api::*;
use crate::command::Command;
use crate::error::StoreError;
use crate::lease::{Lessor, LessorConfig};
use crate::mvcc::{Applier, CommandResult, KvStore};
use crate::node::testing::{get, open_temp, put};

fn keys(resp: &RangeResponse) -> Vec<String> {
    resp.kvs
        .iter()
        .map(|kv| String::from_utf8_lossy(&kv.key).into_owned())
        .collect()
}

fn range(key: &str, end: &str) -> RangeRequest {
    RangeRequest {
        key: key.into(),
        range_end: end.into(),
        ..Default::default()
    }
}

#[tokio::test]
async fn revisions_versions_and_create_revision() {
    let (store, _dir) = open_temp().await;
    assert_eq!(put(&store, "a", "1").await, 1);
    assert_eq!(put(&store, "b", "1").await, 2);
    assert_eq!(put(&store, "a", "2").await, 3);
    let a = get(&store, "a").await.unwrap();
    assert_eq!((a.create_revision, a.mod_revision, a.version), (1, 3, 2));
    assert_eq!(a.value, b"2");
    // The past stays readable.
    let mut at2 = RangeRequest::key("a");
    at2.revision = 2;
    let old = store.range(at2).await.unwrap();
    assert_eq!(old.kvs[0].value, b"1");
    assert_eq!(
        old.header.revision, 3,
        "the header carries the current revision"
    );
    let mut future = RangeRequest::key("a");
    future.revision = 4;
    assert!(matches!(
        store.range(future).await,
        Err(StoreError::FutureRevision {
            current_revision: 3
        })
    ));
}

#[tokio::test]
async fn range_rules_for_range_end() {
    let (store, _dir) = open_temp().await;
    for k in ["a", "b", "b1", "c", "d"] {
        put(&store, k, "v").await;
    }
    let r = |key, end| {
        let store = store.clone();
        async move { keys(&store.range(range(key, end)).await.unwrap()) }
    };
    assert_eq!(r("b", "").await, ["b"]);
    assert_eq!(r("b", "c").await, ["b", "b1"]);
    assert_eq!(r("b", "\0").await, ["b", "b1", "c", "d"]);
    assert_eq!(r("\0", "\0").await, ["a", "b", "b1", "c", "d"]);
    assert!(r("c", "b").await.is_empty());
    assert_eq!(
        keys(&store.range(RangeRequest::prefix("b")).await.unwrap()),
        ["b", "b1"]
    );
    assert!(matches!(
        store.range(range("", "")).await,
        Err(StoreError::EmptyKey)
    ));
}

/// `mod_revisions`: the live keys of a range and the revision each was last
/// written at, as a range read reports them, from the index alone.
#[tokio::test]
async fn mod_revisions_lists_live_keys_as_a_range_read_would() {
    let (store, _dir) = open_temp().await;
    put(&store, "a", "1").await;
    put(&store, "b", "1").await;
    put(&store, "b1", "1").await;
    put(&store, "a", "2").await;
    store
        .delete_range(DeleteRangeRequest {
            key: b"b1".to_vec(),
            ..Default::default()
        })
        .await
        .unwrap();
    put(&store, "c", "1").await;
    let (revision, found) = store.mod_revisions(b"a", b"c").await.unwrap();
    assert_eq!(revision, 6);
    assert_eq!(found, vec![(b"a".to_vec(), 4), (b"b".to_vec(), 2)]);
    let ranged = store.range(range("a", "c")).await.unwrap();
    let from_range: Vec<(Vec<u8>, i64)> = ranged
        .kvs
        .iter()
        .map(|kv| (kv.key.clone(), kv.mod_revision))
        .collect();
    assert_eq!(found, from_range, "what a range read says");
    assert_eq!(
        store.mod_revisions(b"b1", b"").await.unwrap().1,
        vec![],
        "a deleted key is not there"
    );
    assert_eq!(
        store.mod_revisions(b"c", b"").await.unwrap().1,
        vec![(b"c".to_vec(), 6)]
    );
    assert!(matches!(
        store.mod_revisions(b"", b"").await,
        Err(StoreError::EmptyKey)
    ));
}

#[tokio::test]
async fn limit_count_sort_and_filters() {
    let (store, _dir) = open_temp().await;
    put(&store, "k3", "c").await; // rev 1
    put(&store, "k1", "b").await; // rev 2
    put(&store, "k2", "a").await; // rev 3
    put(&store, "k1", "d").await; // rev 4, k1 version 2

    let mut req = range("k", "l");
    req.limit = 2;
    let resp = store.range(req.clone()).await.unwrap();
    assert_eq!(keys(&resp), ["k1", "k2"]);
    assert!(resp.more);
    assert_eq!(resp.count, 3);

    req.limit = 3;
    assert!(!store.range(req.clone()).await.unwrap().more);

    let mut sorted = range("k", "l");
    sorted.sort_order = SortOrder::Descend;
    sorted.sort_target = SortTarget::Mod;
    sorted.limit = 2;
    let resp = store.range(sorted).await.unwrap();
    assert_eq!(keys(&resp), ["k1", "k2"]);
    assert!(resp.more);

    let mut by_value = range("k", "l");
    by_value.sort_target = SortTarget::Value; // no order given: ascending
    assert_eq!(
        keys(&store.range(by_value).await.unwrap()),
        ["k2", "k3", "k1"]
    );

    let mut by_create = range("k", "l");
    by_create.sort_order = SortOrder::Ascend;
    by_create.sort_target = SortTarget::Create;
    assert_eq!(
        keys(&store.range(by_create).await.unwrap()),
        ["k3", "k1", "k2"]
    );

    let mut by_version = range("k", "l");
    by_version.sort_order = SortOrder::Descend;
    by_version.sort_target = SortTarget::Version;
    assert_eq!(keys(&store.range(by_version).await.unwrap())[0], "k1");

    let mut filtered = range("k", "l");
    filtered.min_mod_revision = 3;
    assert_eq!(
        keys(&store.range(filtered.clone()).await.unwrap()),
        ["k1", "k2"]
    );
    filtered.max_create_revision = 2;
    assert_eq!(keys(&store.range(filtered).await.unwrap()), ["k1"]);

    let mut count_only = range("k", "l");
    count_only.count_only = true;
    let resp = store.range(count_only).await.unwrap();
    assert!(resp.kvs.is_empty());
    assert_eq!(resp.count, 3);

    let mut keys_only = range("k", "l");
    keys_only.keys_only = true;
    let resp = store.range(keys_only).await.unwrap();
    assert_eq!(resp.kvs.len(), 3);
    assert!(resp
        .kvs
        .iter()
        .all(|kv| kv.value.is_empty() && kv.mod_revision > 0));
}

#[tokio::test]
async fn put_options() {
    let (store, _dir) = open_temp().await;
    put(&store, "k", "v1").await;
    let mut req = PutRequest::new("k", "v2");
    req.prev_kv = true;
    let resp = store.put(req).await.unwrap();
    assert_eq!(resp.prev_kv.unwrap().value, b"v1");

    let lease = store.lease_grant(60, 0).await.unwrap().id;
    let mut with_lease = PutRequest::new("k", "v3");
    with_lease.lease = lease;
    store.put(with_lease).await.unwrap();

    let mut keep_value = PutRequest::new("k", "");
    keep_value.ignore_value = true;
    store.put(keep_value).await.unwrap();
    let kv = get(&store, "k").await.unwrap();
    assert_eq!((kv.value.as_slice(), kv.lease), (&b"v3"[..], 0));

    let mut keep_lease = PutRequest::new("k", "v4");
    keep_lease.ignore_lease = true;
    store.put(keep_lease).await.unwrap();
    assert_eq!(get(&store, "k").await.unwrap().lease, 0);

    let mut missing = PutRequest::new("nope", "");
    missing.ignore_value = true;
    let before = store.kv().current_revision();
    assert!(matches!(
        store.put(missing).await,
        Err(StoreError::KeyNotFound)
    ));
    let mut bad_lease = PutRequest::new("k", "v");
    bad_lease.lease = 12345;
    assert!(matches!(
        store.put(bad_lease).await,
        Err(StoreError::LeaseNotFound)
    ));
    assert_eq!(
        store.kv().current_revision(),
        before,
        "failed puts change nothing"
    );
    assert!(matches!(
        store.put(PutRequest::new("", "v")).await,
        Err(StoreError::EmptyKey)
    ));
}

#[tokio::test]
async fn delete_range_counts_and_returns_previous() {
    let (store, _dir) = open_temp().await;
    for k in ["a", "b", "c"] {
        put(&store, k, k).await;
    }
    let resp = store
        .delete_range(DeleteRangeRequest {
            key: "a".into(),
            range_end: "c".into(),
            prev_kv: true,
        })
        .await
        .unwrap();
    assert_eq!(resp.deleted, 2);
    assert_eq!(resp.prev_kvs.len(), 2);
    assert_eq!(resp.header.revision, 4, "one revision for the whole delete");
    assert_eq!(keys(&store.range(range("a", "\0")).await.unwrap()), ["c"]);

    let none = store
        .delete_range(DeleteRangeRequest {
            key: "zz".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(none.deleted, 0);
    assert_eq!(
        none.header.revision, 4,
        "deleting nothing makes no revision"
    );

    // A deleted then re-created key starts a new generation.
    put(&store, "a", "again").await;
    let a = get(&store, "a").await.unwrap();
    assert_eq!((a.create_revision, a.version), (5, 1));
}

fn compare(key: &str, target: CompareTarget, result: CompareResult) -> Compare {
    Compare {
        result,
        target,
        key: key.into(),
        range_end: Vec::new(),
    }
}

#[tokio::test]
async fn txn_compares() {
    let (store, _dir) = open_temp().await;
    put(&store, "k", "v").await; // rev 1
    put(&store, "k", "w").await; // rev 2, version 2
    let cases = [
        (CompareTarget::Version(2), CompareResult::Equal, true),
        (CompareTarget::Version(1), CompareResult::Greater, true),
        (CompareTarget::Version(3), CompareResult::Less, true),
        (CompareTarget::Version(2), CompareResult::NotEqual, false),
        (CompareTarget::CreateRevision(1), CompareResult::Equal, true),
        (CompareTarget::ModRevision(2), CompareResult::Equal, true),
        (CompareTarget::ModRevision(1), CompareResult::Less, false),
        (
            CompareTarget::Value(b"w".to_vec()),
            CompareResult::Equal,
            true,
        ),
        (
            CompareTarget::Value(b"a".to_vec()),
            CompareResult::Greater,
            true,
        ),
        (CompareTarget::Lease(0), CompareResult::Equal, true),
    ];
    for (target, result, expected) in cases {
        let txn = TxnRequest {
            compare: vec![compare("k", target.clone(), result)],
            ..Default::default()
        };
        let resp = store.txn(txn).await.unwrap();
        assert_eq!(resp.succeeded, expected, "{target:?} {result:?}");
    }
    // A missing key compares as zero, but never on value.
    let missing = |target| TxnRequest {
        compare: vec![compare("missing", target, CompareResult::Equal)],
        ..Default::default()
    };
    assert!(
        store
            .txn(missing(CompareTarget::Version(0)))
            .await
            .unwrap()
            .succeeded
    );
    assert!(
        store
            .txn(missing(CompareTarget::CreateRevision(0)))
            .await
            .unwrap()
            .succeeded
    );
    assert!(
        !store
            .txn(missing(CompareTarget::Value(vec![])))
            .await
            .unwrap()
            .succeeded
    );
    // Over a range, every key must match.
    put(&store, "k2", "w").await;
    let mut all = compare(
        "k",
        CompareTarget::Value(b"w".to_vec()),
        CompareResult::Equal,
    );
    all.range_end = b"l".to_vec();
    let txn = |c: Compare| TxnRequest {
        compare: vec![c],
        ..Default::default()
    };
    assert!(store.txn(txn(all.clone())).await.unwrap().succeeded);
    put(&store, "k3", "x").await;
    assert!(!store.txn(txn(all)).await.unwrap().succeeded);
}

#[tokio::test]
async fn txn_branches_run_at_one_revision_and_see_their_own_writes() {
    let (store, _dir) = open_temp().await;
    put(&store, "counter", "1").await;
    let txn = TxnRequest {
        compare: vec![compare(
            "counter",
            CompareTarget::Value(b"1".to_vec()),
            CompareResult::Equal,
        )],
        success: vec![
            RequestOp::Put(PutRequest::new("counter", "2")),
            RequestOp::Put(PutRequest::new("other", "x")),
            RequestOp::Range(RangeRequest::key("counter")),
            RequestOp::Txn(TxnRequest {
                compare: vec![compare(
                    "other",
                    CompareTarget::Version(1),
                    CompareResult::Equal,
                )],
                success: vec![RequestOp::DeleteRange(DeleteRangeRequest {
                    key: "gone".into(),
                    ..Default::default()
                })],
                failure: vec![],
            }),
        ],
        failure: vec![RequestOp::Put(PutRequest::new("failed", "x"))],
    };
    let resp = store.txn(txn).await.unwrap();
    assert!(resp.succeeded);
    assert_eq!(resp.header.revision, 2);
    let ResponseOp::Range(read) = &resp.responses[2] else {
        panic!("range response")
    };
    assert_eq!(
        read.kvs[0].value, b"2",
        "reads inside a txn see its earlier writes"
    );
    let counter = get(&store, "counter").await.unwrap();
    let other = get(&store, "other").await.unwrap();
    assert_eq!((counter.mod_revision, other.mod_revision), (2, 2));
    assert!(get(&store, "failed").await.is_none());

    let failing = TxnRequest {
        compare: vec![compare(
            "counter",
            CompareTarget::Value(b"1".to_vec()),
            CompareResult::Equal,
        )],
        success: vec![],
        failure: vec![RequestOp::Put(PutRequest::new("failed", "x"))],
    };
    let resp = store.txn(failing).await.unwrap();
    assert!(!resp.succeeded);
    assert_eq!(get(&store, "failed").await.unwrap().mod_revision, 3);
}

#[tokio::test]
async fn bad_txns_change_nothing() {
    let (store, _dir) = open_temp().await;
    put(&store, "a", "1").await;
    let dup = TxnRequest {
        success: vec![
            RequestOp::Put(PutRequest::new("x", "1")),
            RequestOp::Put(PutRequest::new("x", "2")),
        ],
        ..Default::default()
    };
    assert!(matches!(
        store.txn(dup).await,
        Err(StoreError::DuplicateKey)
    ));
    let too_many = TxnRequest {
        success: (0..129)
            .map(|i| RequestOp::Put(PutRequest::new(format!("k{i}"), "v")))
            .collect(),
        ..Default::default()
    };
    assert!(matches!(
        store.txn(too_many).await,
        Err(StoreError::TooManyOps { limit: 128 })
    ));
    let mut bad_lease = PutRequest::new("y", "v");
    bad_lease.lease = 77;
    let partial = TxnRequest {
        success: vec![
            RequestOp::Put(PutRequest::new("z", "v")),
            RequestOp::Put(bad_lease),
        ],
        ..Default::default()
    };
    assert!(matches!(
        store.txn(partial).await,
        Err(StoreError::LeaseNotFound)
    ));
    let mut future_read = RangeRequest::key("a");
    future_read.revision = 99;
    let future = TxnRequest {
        success: vec![
            RequestOp::Put(PutRequest::new("z", "v")),
            RequestOp::Range(future_read),
        ],
        ..Default::default()
    };
    assert!(matches!(
        store.txn(future).await,
        Err(StoreError::FutureRevision { .. })
    ));
    assert_eq!(store.kv().current_revision(), 1);
    assert!(get(&store, "z").await.is_none());
}

#[tokio::test]
async fn oversized_requests_are_refused() {
    let (store, _dir) = open_temp().await;
    let big = vec![b'x'; 1536 * 1024 + 1];
    let err = store.put(PutRequest::new("big", big)).await.unwrap_err();
    assert!(matches!(err, StoreError::RequestTooLarge { .. }), "{err}");
    assert!(err.to_string().contains("request is too large"));
    let fits = vec![b'x'; 1024 * 1024];
    store.put(PutRequest::new("fits", fits)).await.unwrap();
    assert_eq!(store.kv().current_revision(), 1);
}

#[tokio::test]
async fn compaction_drops_history_and_keeps_the_present() {
    let (store, _dir) = open_temp().await;
    put(&store, "a", "1").await; // 1
    put(&store, "a", "2").await; // 2
    put(&store, "b", "1").await; // 3
    store
        .delete_range(DeleteRangeRequest {
            key: "b".into(),
            ..Default::default()
        })
        .await
        .unwrap(); // 4
    put(&store, "a", "3").await; // 5

    assert!(matches!(
        store.compact(9, false).await,
        Err(StoreError::FutureRevision { .. })
    ));
    store.compact(4, true).await.unwrap();
    assert_eq!(store.kv().compact_revision(), 4);

    let mut old = RangeRequest::key("a");
    old.revision = 3;
    let err = store.range(old).await.unwrap_err();
    assert!(matches!(
        err,
        StoreError::Compacted {
            compact_revision: 4
        }
    ));
    assert!(err.to_string().contains("compacted"));
    let mut at4 = RangeRequest::key("a");
    at4.revision = 4;
    assert_eq!(store.range(at4).await.unwrap().kvs[0].value, b"2");
    assert_eq!(get(&store, "a").await.unwrap().value, b"3");
    assert!(matches!(
        store.compact(4, false).await,
        Err(StoreError::Compacted { .. })
    ));

    // On disk: revision 1 (superseded) and 3 (b, deleted at 4) are gone;
    // 2 (a at 4), the tombstone at 4 and 5 remain.
    let revisions = crate::mvcc::kvstore::all_record_revisions(&store.kv().tree());
    let mains: std::collections::BTreeSet<i64> = revisions.iter().map(|r| r.main).collect();
    assert_eq!(mains, [2, 4, 5].into_iter().collect());
}

#[tokio::test]
async fn a_never_compacted_store_compacts_revision_zero_once() {
    let dir = tempfile::tempdir().unwrap();
    let config = crate::node::testing::test_config(dir.path());
    let store = crate::Store::open(config.clone()).await.unwrap();
    assert_eq!(store.kv().last_compaction(), None);
    // etcd accepts a compaction at any revision up to the current one
    // until something has been compacted.
    store.compact(0, true).await.unwrap();
    assert_eq!(store.kv().last_compaction(), Some(0));
    assert_eq!(store.kv().compact_revision(), 0);
    assert!(matches!(
        store.compact(0, false).await,
        Err(StoreError::Compacted {
            compact_revision: 0
        })
    ));
    assert!(matches!(
        store.compact(1, false).await,
        Err(StoreError::FutureRevision {
            current_revision: 0
        })
    ));
    put(&store, "k", "v").await;
    store.close().await.unwrap();

    // The compaction at 0 is remembered.
    let store = crate::Store::open(config).await.unwrap();
    assert_eq!(store.kv().last_compaction(), Some(0));
    assert!(matches!(
        store.compact(0, false).await,
        Err(StoreError::Compacted { .. })
    ));
    store.compact(1, true).await.unwrap();
    assert_eq!(store.kv().last_compaction(), Some(1));
    store.close().await.unwrap();
}

#[tokio::test]
async fn compaction_survives_restart() {
    let dir = tempfile::tempdir().unwrap();
    let config = crate::node::testing::test_config(dir.path());
    let store = crate::Store::open(config.clone()).await.unwrap();
    for i in 0..10 {
        put(&store, "k", &i.to_string()).await;
    }
    store.compact(8, true).await.unwrap();
    store.close().await.unwrap();
    let store = crate::Store::open(config).await.unwrap();
    assert_eq!(store.kv().compact_revision(), 8);
    assert_eq!(store.kv().current_revision(), 10);
    let mut old = RangeRequest::key("k");
    old.revision = 7;
    assert!(matches!(
        store.range(old).await,
        Err(StoreError::Compacted { .. })
    ));
    assert_eq!(get(&store, "k").await.unwrap().version, 10);
    assert_eq!(put(&store, "k", "x").await, 11);
}

/// A sled database in `dir`, the MVCC store on its tree, and a lessor.
fn open_kv(dir: &tempfile::TempDir) -> (sled::Db, KvStore, Lessor) {
    let db = sled::Config::new().path(dir.path()).open().unwrap();
    let (kv, _) = KvStore::open(db.open_tree("mvcc").unwrap()).unwrap();
    (db, kv, Lessor::new(LessorConfig::default()))
}

/// Applies one put at Raft `index` and publishes its revision.
fn apply_put(kv: &KvStore, lessor: &Lessor, index: u64, key: &str, value: &str) {
    let mut applier = Applier::new(kv, lessor);
    applier.apply(index, &Command::Put(PutRequest::new(key, value)));
    kv.publish_revision(applier.commit().unwrap().revision);
}

/// The applier is a deterministic state machine: an index at or below the
/// applied one is skipped, which makes replay after a crash idempotent.
#[test]
fn reapplying_an_applied_index_is_a_no_op() {
    let dir = tempfile::tempdir().unwrap();
    let (db, kv, lessor) = open_kv(&dir);
    let put = Command::Put(PutRequest::new("k", "v"));

    let mut applier = Applier::new(&kv, &lessor);
    let first = applier.apply(1, &put).unwrap().unwrap();
    assert!(matches!(first, CommandResult::Put(ref r) if r.header.revision == 1));
    assert!(
        applier.apply(1, &put).is_none(),
        "same index twice in one batch"
    );
    let committed = applier.commit().unwrap();
    kv.publish_revision(committed.revision);
    assert_eq!((kv.applied_index(), kv.current_revision()), (1, 1));

    let mut again = Applier::new(&kv, &lessor);
    assert!(again.apply(1, &put).is_none());
    assert!(again.apply(2, &put).is_some());
    let committed = again.commit().unwrap();
    assert_eq!((committed.applied_index, committed.revision), (2, 2));
    kv.flush_behind().unwrap();
    drop(kv);

    // The applied index is stored with the data: a reopen agrees.
    let (kv, _) = KvStore::open(db.open_tree("mvcc").unwrap()).unwrap();
    assert_eq!((kv.applied_index(), kv.current_revision()), (2, 2));
}

/// Applied batches wait to go to sled together: readers find their
/// records meanwhile, history reads write them out first, and what never
/// reached sled is not there after a reopen (the Raft log, released only
/// up to what sled made durable, applies it again).
#[test]
fn applied_writes_are_read_before_they_reach_sled() {
    let dir = tempfile::tempdir().unwrap();
    let db = sled::Config::new().path(dir.path()).open().unwrap();
    let (mut kv, _) = KvStore::open(db.open_tree("mvcc").unwrap()).unwrap();
    kv.hold_writes();
    let lessor = Lessor::new(LessorConfig::default());
    let on_disk = |kv: &KvStore| crate::mvcc::kvstore::all_record_revisions(&kv.tree()).len();

    let mut applier = Applier::new(&kv, &lessor);
    applier.apply(1, &Command::Put(PutRequest::new("k", "v1")));
    applier.apply(2, &Command::Put(PutRequest::new("j", "w")));
    kv.publish_revision(applier.commit().unwrap().revision);
    let mut applier = Applier::new(&kv, &lessor);
    applier.apply(3, &Command::Put(PutRequest::new("k", "v2")));
    kv.publish_revision(applier.commit().unwrap().revision);
    assert_eq!(on_disk(&kv), 0, "nothing written to sled yet");
    assert_eq!(kv.applied_index(), 3);

    let read = kv.range(&range("a", "z")).unwrap();
    assert_eq!(keys(&read), ["j", "k"]);
    assert_eq!(read.kvs[1].value, b"v2");
    let mut old = RangeRequest::key("k");
    old.revision = 1;
    assert_eq!(kv.range(&old).unwrap().kvs[0].value, b"v1");
    assert_eq!(kv.get_at(b"k", 1).unwrap().unwrap().value, b"v1");

    let (history, last) = kv.history(1, 3, 100).unwrap();
    assert_eq!(last, 3);
    assert_eq!(history.len(), 3);
    assert_eq!(on_disk(&kv), 3, "history wrote them out");
    assert_eq!(kv.range(&range("a", "z")).unwrap().kvs[1].value, b"v2");

    let mut applier = Applier::new(&kv, &lessor);
    applier.apply(4, &Command::Put(PutRequest::new("k", "v3")));
    kv.publish_revision(applier.commit().unwrap().revision);
    assert_eq!(get_value(&kv, "k"), b"v3");
    drop(kv);
    let (kv, _) = KvStore::open(db.open_tree("mvcc").unwrap()).unwrap();
    assert_eq!((kv.applied_index(), kv.current_revision()), (3, 3));
    assert_eq!(get_value(&kv, "k"), b"v2");
}

fn get_value(kv: &KvStore, key: &str) -> Vec<u8> {
    kv.range(&RangeRequest::key(key)).unwrap().kvs[0]
        .value
        .clone()
}

/// Records just written out to sled are still read from memory: a read
/// of one needs no sled read (whose lock `apply_batch` holds), until
/// enough newer records have pushed it out.
#[test]
fn records_written_out_lately_are_read_from_memory() {
    let dir = tempfile::tempdir().unwrap();
    let (_db, kv, lessor) = open_kv(&dir);
    apply_put(&kv, &lessor, 1, "k", "v1");
    kv.flush_behind().unwrap();
    let first = crate::mvcc::Revision::new(1, 0);
    assert!(
        crate::mvcc::kvstore::all_record_revisions(&kv.tree()).contains(&first),
        "written to sled"
    );
    // Gone from sled behind the store's back: only memory can answer.
    kv.tree().remove(first.to_key()).unwrap();
    assert_eq!(get_value(&kv, "k"), b"v1", "read from memory");

    // Newer records push it out: twice the generation's size at most.
    for index in 2..=2100u64 {
        apply_put(&kv, &lessor, index, &format!("other-{index}"), "x");
        kv.flush_behind().unwrap();
    }
    assert!(
        kv.range(&RangeRequest::key("k")).is_err(),
        "pushed out of memory, the record removed from sled cannot be read"
    );
    assert_eq!(get_value(&kv, "other-2100"), b"x");
}
