//! Watch behaviour: history then live with no gap or duplicate, filters,
//! prev_kv, progress, compaction, and slow watchers.

use std::time::Duration;

use crate::api::*;
use crate::mvcc::prefix_end;
use crate::node::testing::{open_temp, put};
use crate::Watcher;

fn prefix_watch(prefix: &str, start_revision: i64) -> WatchRequest {
    WatchRequest {
        key: prefix.into(),
        range_end: prefix_end(prefix.as_bytes()),
        start_revision,
        ..Default::default()
    }
}

async fn next(w: &mut Watcher) -> WatchResponse {
    tokio::time::timeout(Duration::from_secs(5), w.next())
        .await
        .expect("watch response in time")
        .expect("watch still open")
}

/// Collects `count` events, checking each response holds one revision.
async fn events(w: &mut Watcher, count: usize) -> Vec<Event> {
    let mut out = Vec::new();
    while out.len() < count {
        let resp = next(w).await;
        assert!(!resp.canceled, "{resp:?}");
        for e in &resp.events {
            assert_eq!(
                e.kv.mod_revision, resp.header.revision,
                "one revision per response"
            );
        }
        out.extend(resp.events);
    }
    out
}

#[tokio::test]
async fn history_then_live_without_gap_or_duplicate() {
    let (store, _dir) = open_temp().await;
    for i in 1..=5 {
        put(&store, &format!("/p/{i}"), "v").await;
    }
    put(&store, "/other", "v").await; // 6
    let mut w = store.watch(prefix_watch("/p/", 2)).unwrap();
    // Writes racing the catch-up.
    let writer = {
        let store = store.clone();
        tokio::spawn(async move {
            for i in 6..=30 {
                put(&store, &format!("/p/{i}"), "v").await;
            }
        })
    };
    let got = events(&mut w, 29).await;
    writer.await.unwrap();
    let revisions: Vec<i64> = got.iter().map(|e| e.kv.mod_revision).collect();
    let expected: Vec<i64> = (2..=5).chain(7..=31).collect();
    assert_eq!(revisions, expected);
    assert!(w.try_next().is_none(), "nothing more");
}

#[tokio::test]
async fn watch_from_now_sees_only_new_events() {
    let (store, _dir) = open_temp().await;
    put(&store, "k", "old").await;
    let mut w = store
        .watch(WatchRequest {
            key: "k".into(),
            ..Default::default()
        })
        .unwrap();
    put(&store, "other", "v").await;
    put(&store, "k", "new").await;
    let got = events(&mut w, 1).await;
    assert_eq!(got[0].kv.value, b"new");
    assert_eq!(got[0].kind, EventType::Put);
}

#[tokio::test]
async fn filters_and_prev_kv() {
    let (store, _dir) = open_temp().await;
    let mut no_put = store
        .watch(WatchRequest {
            no_put: true,
            prev_kv: true,
            ..prefix_watch("/f/", 0)
        })
        .unwrap();
    let mut no_delete = store
        .watch(WatchRequest {
            no_delete: true,
            ..prefix_watch("/f/", 0)
        })
        .unwrap();
    put(&store, "/f/a", "1").await;
    put(&store, "/f/a", "2").await;
    store
        .delete_range(DeleteRangeRequest {
            key: "/f/a".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    let deletes = events(&mut no_put, 1).await;
    assert_eq!(deletes[0].kind, EventType::Delete);
    assert_eq!(deletes[0].kv.mod_revision, 3);
    assert_eq!(deletes[0].prev_kv.as_ref().unwrap().value, b"2");
    let puts = events(&mut no_delete, 2).await;
    assert!(puts.iter().all(|e| e.kind == EventType::Put));
    assert!(
        puts.iter().all(|e| e.prev_kv.is_none()),
        "prev_kv only when asked"
    );
}

#[tokio::test]
async fn a_txn_is_delivered_as_one_response() {
    let (store, _dir) = open_temp().await;
    let mut w = store.watch(prefix_watch("/t/", 0)).unwrap();
    store
        .txn(TxnRequest {
            success: vec![
                RequestOp::Put(PutRequest::new("/t/a", "1")),
                RequestOp::Put(PutRequest::new("/t/b", "1")),
                RequestOp::Put(PutRequest::new("/elsewhere", "1")),
            ],
            ..Default::default()
        })
        .await
        .unwrap();
    let resp = next(&mut w).await;
    assert_eq!(resp.events.len(), 2);
    assert_eq!(resp.header.revision, 1);
}

#[tokio::test]
async fn compacted_start_revision_is_refused() {
    let (store, _dir) = open_temp().await;
    for i in 0..5 {
        put(&store, "/c/k", &i.to_string()).await;
    }
    store.compact(4, true).await.unwrap();
    let mut w = store.watch(prefix_watch("/c/", 2)).unwrap();
    let resp = next(&mut w).await;
    assert!(resp.canceled);
    assert_eq!(resp.compact_revision, 4);
    assert!(w.next().await.is_none(), "the watch has ended");
    // From the compacted revision itself is still served.
    let mut at = store.watch(prefix_watch("/c/", 4)).unwrap();
    let got = events(&mut at, 2).await;
    assert_eq!(got[0].kv.mod_revision, 4);
    assert_eq!(got[1].kv.mod_revision, 5);
}

#[tokio::test]
async fn progress_notification_carries_the_current_revision() {
    let (store, _dir) = open_temp().await;
    put(&store, "x", "1").await;
    let w = store.watch(prefix_watch("/quiet/", 0)).unwrap();
    put(&store, "x", "2").await;
    w.request_progress();
    let mut w = w;
    let resp = next(&mut w).await;
    assert!(resp.is_progress_notify());
    assert_eq!(resp.header.revision, 2);
}

#[tokio::test]
async fn slow_watcher_falls_behind_without_blocking_and_catches_up() {
    let (store, _dir) = open_temp().await;
    let mut slow = store.watch(prefix_watch("/s/", 0)).unwrap();
    let mut fast = store.watch(prefix_watch("/s/", 0)).unwrap();
    let fast_reader = tokio::spawn(async move { events(&mut fast, 600).await.len() });
    // Far more revisions than the slow watcher's buffer; writers are not held up.
    let writes = (0..600).map(|i| {
        let store = store.clone();
        async move { put(&store, &format!("/s/{i:04}"), "v").await }
    });
    futures_join_all(writes).await;
    assert_eq!(fast_reader.await.unwrap(), 600);
    let (_, unsynced) = store.watcher_counts();
    assert_eq!(unsynced, 1, "the slow watcher fell behind");
    // Reading now, it gets everything in order, once.
    let got = events(&mut slow, 600).await;
    let revisions: Vec<i64> = got.iter().map(|e| e.kv.mod_revision).collect();
    assert_eq!(revisions, (1..=600).collect::<Vec<_>>());
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(store.watcher_counts(), (1, 0), "back in the synced group");
    put(&store, "/s/live", "v").await;
    assert_eq!(events(&mut slow, 1).await[0].kv.key, b"/s/live");
}

#[tokio::test]
async fn dropping_a_watcher_cancels_it() {
    let (store, _dir) = open_temp().await;
    let w = store.watch(prefix_watch("/d/", 0)).unwrap();
    assert_eq!(store.watcher_counts(), (1, 0));
    drop(w);
    assert_eq!(store.watcher_counts(), (0, 0));
    put(&store, "/d/x", "v").await;
}

async fn futures_join_all<F: std::future::Future<Output = i64> + Send + 'static>(
    futures: impl Iterator<Item = F>,
) {
    let handles: Vec<_> = futures.map(tokio::spawn).collect();
    for h in handles {
        h.await.unwrap();
    }
}

#[tokio::test]
async fn periodic_progress_only_for_watchers_that_asked() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = crate::node::testing::test_config(dir.path());
    config.watch.progress_interval = Duration::from_millis(100);
    let store = crate::Store::open(config).await.unwrap();
    put(&store, "x", "1").await;
    let mut asked = store
        .watch(WatchRequest {
            progress_notify: true,
            ..prefix_watch("/quiet/", 0)
        })
        .unwrap();
    let mut silent = store.watch(prefix_watch("/quiet/", 0)).unwrap();
    let resp = next(&mut asked).await;
    assert!(resp.is_progress_notify());
    assert_eq!(resp.header.revision, 1);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(silent.try_next().is_none());
}

#[tokio::test]
async fn a_watcher_far_behind_catches_up_as_fast_as_it_reads() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = crate::node::testing::test_config(dir.path());
    // The syncer never looks on its own during the test: the catch-up is
    // driven by the watcher reading what it was sent.
    config.watch.sync_interval = Duration::from_secs(600);
    let store = crate::Store::open(config).await.unwrap();
    let mut w = store.watch(prefix_watch("/b/", 0)).unwrap();
    // Many times its buffer of 128 while it reads nothing.
    for round in 0..20 {
        let writes = (0..100).map(|i| {
            let store = store.clone();
            async move { put(&store, &format!("/b/{round:02}-{i:03}"), "v").await }
        });
        futures_join_all(writes).await;
    }
    assert_eq!(store.watcher_counts().1, 1, "the watcher fell behind");
    let got = events(&mut w, 2000).await;
    let revisions: Vec<i64> = got.iter().map(|e| e.kv.mod_revision).collect();
    assert_eq!(revisions, (1..=2000).collect::<Vec<_>>());
    // Caught up, it is served live again.
    assert_eq!(store.watcher_counts(), (1, 0));
    put(&store, "/b/live", "v").await;
    assert_eq!(events(&mut w, 1).await[0].kv.key, b"/b/live");
}
