//! The watch cache over a real store in this process: what lists and
//! watches see, the bounds (ring, watcher queues), and that reads it serves
//! cost the store nothing. Store reads are counted process-wide, so these
//! tests rely on nextest's one process per test.

use std::time::Duration;

use futures::StreamExt;
use serde_json::{json, Value};

use super::*;
use crate::registry::{Registry, Write};

fn pods() -> &'static ResourceType {
    crate::resources::find("", "v1", "pods").expect("pods are served")
}

fn in_default() -> Target<'static> {
    Target {
        resource: pods(),
        namespace: Some("default"),
    }
}

async fn store() -> (Storage, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let store = skiff_store::Store::open(skiff_store::StoreConfig::new(dir.path()))
        .await
        .expect("the store opens");
    (Storage::local(store), dir)
}

async fn registry() -> (Registry, tempfile::TempDir) {
    let (storage, dir) = store().await;
    let registry = Registry::new(storage);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while let Err(err) = registry.ensure_default_namespaces().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no namespaces: {err:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    (registry, dir)
}

fn pod(name: &str, app: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": app}},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    })
}

async fn create(registry: &Registry, name: &str, app: &str) -> i64 {
    let created = registry
        .create(&in_default(), pod(name, app), &Write::new("test", false))
        .await
        .expect("created");
    revision_of(&created)
}

async fn relabel(registry: &Registry, name: &str, app: &str) -> i64 {
    let mut current = registry.get(&in_default(), name).await.expect("exists");
    current["metadata"]["labels"]["app"] = json!(app);
    let updated = registry
        .update(
            &in_default(),
            name,
            current,
            None,
            &Write::new("test", false),
        )
        .await
        .expect("updated");
    revision_of(&updated)
}

fn revision_of(object: &Value) -> i64 {
    object["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|r| r.parse().ok())
        .unwrap_or_else(|| panic!("no resourceVersion in {object}"))
}

fn list_options(rv: &str) -> ListOptions {
    ListOptions {
        resource_version: rv.into(),
        ..ListOptions::default()
    }
}

fn names(list: &Value) -> Vec<String> {
    list["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|i| {
            i["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect()
}

fn store_reads(registry: &Registry) -> [u64; 3] {
    let requests = registry.storage().requests();
    ["get", "list", "watch"].map(|operation| requests.total(operation))
}

/// Reads a subscription's live queue: (type, name, revision).
async fn next_delivery(sub: &mut Subscription) -> Option<(EventType, String, i64)> {
    let delivery = tokio::time::timeout(Duration::from_secs(10), sub.queue.recv())
        .await
        .expect("a delivery within 10s")?;
    match delivery {
        Delivery::Event(event, kind) => {
            let name = event
                .object
                .key
                .rsplit('/')
                .next()
                .unwrap_or("")
                .to_string();
            Some((kind, name, event.revision))
        }
        Delivery::Bookmark(revision) => Some((EventType::Modified, "BOOKMARK".into(), revision)),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_list_at_resource_version_0_reads_nothing_from_the_store() {
    let (registry, _dir) = registry().await;
    for i in 0..5 {
        create(&registry, &format!("p{i}"), "web").await;
    }
    // The first use starts the cache: one list and one watch of the store.
    let first = registry
        .list(&in_default(), &list_options("0"))
        .await
        .unwrap();
    assert_eq!(names(&first).len(), 5);
    // A cache opens its store watch just after its list (admission's
    // reads of the creates above started caches of other resources too):
    // wait for every cache's watch, so that a slow start is not counted as
    // a read of the lists below.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let all_watching = || {
        let caches = registry.cache.caches().len() as u64;
        caches > 0 && registry.storage().requests().total("watch") >= caches
    };
    while !all_watching() && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let before = store_reads(&registry);
    for _ in 0..20 {
        let list = registry
            .list(&in_default(), &list_options("0"))
            .await
            .unwrap();
        assert_eq!(names(&list), ["p0", "p1", "p2", "p3", "p4"]);
        assert_eq!(
            list["metadata"]["resourceVersion"],
            first["metadata"]["resourceVersion"]
        );
    }
    let everywhere = Target {
        resource: pods(),
        namespace: None,
    };
    let all = registry
        .list(&everywhere, &list_options("0"))
        .await
        .unwrap();
    assert_eq!(names(&all).len(), 5);
    let got = registry.get_at(&in_default(), "p3", "0").await.unwrap();
    assert_eq!(got["metadata"]["name"], "p3");
    let missing = registry
        .get_at(&in_default(), "nope", "0")
        .await
        .unwrap_err();
    assert_eq!(missing.code, 404);
    assert_eq!(
        store_reads(&registry),
        before,
        "get, list, watch requests to the store"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cached_list_body_is_written_in_chunks_that_join_into_the_list() {
    let (registry, _dir) = registry().await;
    // About 600 KiB of pods: the body takes three chunks.
    for i in 0..150 {
        let mut pod = pod(&format!("p{i:03}"), "web");
        pod["metadata"]["annotations"] = json!({"filler": "x".repeat(4000)});
        registry
            .create(&in_default(), pod, &Write::new("test", false))
            .await
            .expect("created");
    }
    let parsed = registry
        .list(&in_default(), &list_options("0"))
        .await
        .unwrap();
    let Some(crate::registry::ListJson::Chunks(chunks)) = registry
        .list_json(&in_default(), &list_options("0"))
        .await
        .unwrap()
    else {
        panic!("the registry's own objects are written without parsing");
    };
    let chunks: Vec<bytes::Bytes> = chunks.collect();
    assert!(chunks.len() >= 3, "{} chunks", chunks.len());
    assert!(chunks.iter().all(|c| !c.is_empty()));
    let joined: Vec<u8> = chunks.concat();
    let listed: Value = serde_json::from_slice(&joined).expect("the chunks join into JSON");
    assert_eq!(listed, parsed);
    assert_eq!(names(&listed).len(), 150);
    // An empty list is one chunk.
    let empty = Target {
        resource: pods(),
        namespace: Some("kube-public"),
    };
    let Some(crate::registry::ListJson::Chunks(chunks)) = registry
        .list_json(&empty, &list_options("0"))
        .await
        .unwrap()
    else {
        panic!("an empty list is written without parsing");
    };
    let chunks: Vec<bytes::Bytes> = chunks.collect();
    assert_eq!(chunks.len(), 1);
    let listed: Value = serde_json::from_slice(&chunks[0]).unwrap();
    assert_eq!(listed["items"], json!([]));
    assert_eq!(listed["kind"], "PodList");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_list_not_older_than_a_revision_still_to_come_is_a_504_to_retry() {
    let (registry, _dir) = registry().await;
    let now = create(&registry, "a", "web").await;
    let options = ListOptions {
        resource_version: (now + 1000).to_string(),
        resource_version_match: "NotOlderThan".into(),
        ..ListOptions::default()
    };
    // The cache waits for the revision, then the store cannot serve it.
    let err = registry.list(&in_default(), &options).await.unwrap_err();
    assert_eq!((err.code, err.reason), (504, "Timeout"), "{err}");
    assert!(err.message.contains("Too large resource version"), "{err}");
    let status = err.to_status();
    assert_eq!(
        status["details"]["causes"][0]["reason"],
        "ResourceVersionTooLarge"
    );
    assert_eq!(status["details"]["retryAfterSeconds"], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_carry_the_cache_revision_and_see_writes_just_made() {
    let (registry, _dir) = registry().await;
    create(&registry, "a", "web").await;
    registry
        .list(&in_default(), &list_options("0"))
        .await
        .unwrap();
    let written = create(&registry, "b", "web").await;
    // A consistent list (no resourceVersion) waits for the cache to reach
    // the store's revision: it sees the write just acknowledged.
    let list = registry
        .list(&in_default(), &list_options(""))
        .await
        .unwrap();
    assert_eq!(names(&list), ["a", "b"]);
    assert!(revision_of(&list) >= written);
    // Not older than N: at least N.
    let written = create(&registry, "c", "web").await;
    let list = registry
        .list(&in_default(), &list_options(&written.to_string()))
        .await
        .unwrap();
    assert_eq!(names(&list), ["a", "b", "c"]);
    assert_eq!(revision_of(&list), written);
    let got = registry
        .get_at(&in_default(), "c", &written.to_string())
        .await
        .unwrap();
    assert_eq!(revision_of(&got), written);
    // Exact: the store answers at that revision.
    let exact = ListOptions {
        resource_version: (written - 1).to_string(),
        resource_version_match: "Exact".into(),
        ..ListOptions::default()
    };
    let list = registry.list(&in_default(), &exact).await.unwrap();
    assert_eq!(names(&list), ["a", "b"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paged_lists_from_the_cache_continue_in_the_store() {
    let (registry, _dir) = registry().await;
    for i in 0..5 {
        create(
            &registry,
            &format!("p{i}"),
            if i % 2 == 0 { "web" } else { "db" },
        )
        .await;
    }
    let mut options = ListOptions {
        limit: 2,
        ..list_options("0")
    };
    let mut seen = Vec::new();
    let mut revisions = Vec::new();
    loop {
        let page = registry.list(&in_default(), &options).await.unwrap();
        seen.extend(names(&page));
        revisions.push(revision_of(&page));
        // A write between pages does not show in later pages.
        create(&registry, &format!("later{}", seen.len()), "web").await;
        match page["metadata"]["continue"].as_str() {
            Some(token) => options.continue_token = Some(token.to_string()),
            None => break,
        }
    }
    assert_eq!(seen, ["p0", "p1", "p2", "p3", "p4"]);
    assert!(revisions.windows(2).all(|w| w[0] == w[1]), "{revisions:?}");
    // With a selector, the limit counts matching objects.
    let web = ListOptions {
        limit: 2,
        labels: Some(skiff_machinery::selectors::LabelSelector::parse("app=web").unwrap()),
        ..list_options("0")
    };
    // Consistent (no resourceVersion): it sees the writes made meanwhile.
    let web = ListOptions {
        resource_version: String::new(),
        ..web
    };
    let page = registry.list(&in_default(), &web).await.unwrap();
    assert_eq!(names(&page), ["later2", "later4"]);
    assert!(page["metadata"]["continue"].is_string());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watchers_see_each_change_once_in_order_with_selectors_applied() {
    let (registry, _dir) = registry().await;
    let from = create(&registry, "a", "web").await;
    let cache = &registry.cache;
    let web = Filter {
        labels: Some(skiff_machinery::selectors::LabelSelector::parse("app=web").unwrap()),
        ..filter_of(&in_default(), &ListOptions::default())
    };
    let mut all = cache
        .watch(
            &in_default(),
            Filter::default(),
            WatchStart::After(from),
            true,
        )
        .await
        .unwrap()
        .unwrap();
    let mut selected = cache
        .watch(&in_default(), web, WatchStart::After(from), false)
        .await
        .unwrap()
        .unwrap();
    let r1 = relabel(&registry, "a", "db").await;
    let r2 = relabel(&registry, "a", "web").await;
    let r3 = create(&registry, "b", "db").await;
    let mut seen = Vec::new();
    for _ in 0..3 {
        seen.push(next_delivery(&mut all).await.unwrap());
    }
    use EventType::*;
    let expected = [(Modified, "a", r1), (Modified, "a", r2), (Added, "b", r3)];
    let expected: Vec<_> = expected
        .iter()
        .map(|(k, n, r)| (*k, n.to_string(), *r))
        .collect();
    assert_eq!(seen, expected);
    let mut seen = Vec::new();
    for _ in 0..2 {
        seen.push(next_delivery(&mut selected).await.unwrap());
    }
    assert_eq!(
        seen,
        [(Deleted, "a".to_string(), r1), (Added, "a".to_string(), r2)],
        "leaving the selector is DELETED, entering it ADDED"
    );
    // Bookmarks only to the watcher that allows them, after its events.
    let cache = cache.resource(pods(), 0);
    cache.send_bookmarks();
    let bookmark = next_delivery(&mut all).await.unwrap();
    assert_eq!(bookmark.1, "BOOKMARK");
    assert!(bookmark.2 >= r3);
    assert!(selected.queue.try_recv().is_none());
    assert_eq!(cache.stats().watchers, 2);
    drop(selected);
    assert_eq!(cache.stats().watchers, 1, "a closed watch leaves");
}

/// Watchers asking alike share one filter, matched once per event; mixed
/// in with watchers of other filters, each still sees exactly its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watchers_with_the_same_filter_share_it_and_each_sees_its_own_events() {
    let (registry, _dir) = registry().await;
    let from = create(&registry, "a", "web").await;
    let cache = &registry.cache;
    let by_app = |app: &str| Filter {
        labels: Some(
            skiff_machinery::selectors::LabelSelector::parse(&format!("app={app}")).unwrap(),
        ),
        ..filter_of(&in_default(), &ListOptions::default())
    };
    let mut watches = Vec::new();
    for app in ["web", "db", "web", "", "db", "web", ""] {
        let filter = if app.is_empty() {
            Filter::default()
        } else {
            by_app(app)
        };
        let sub = cache
            .watch(&in_default(), filter, WatchStart::After(from), false)
            .await
            .unwrap()
            .unwrap();
        watches.push((app, sub));
    }
    assert!(Arc::ptr_eq(&watches[0].1.filter, &watches[2].1.filter));
    assert!(Arc::ptr_eq(&watches[0].1.filter, &watches[5].1.filter));
    assert!(Arc::ptr_eq(&watches[1].1.filter, &watches[4].1.filter));
    assert!(!Arc::ptr_eq(&watches[0].1.filter, &watches[1].1.filter));
    let r1 = create(&registry, "b", "db").await;
    let r2 = relabel(&registry, "a", "db").await;
    let r3 = create(&registry, "c", "web").await;
    use EventType::*;
    let owned = |events: &[(EventType, &str, i64)]| -> Vec<(EventType, String, i64)> {
        events
            .iter()
            .map(|(k, n, r)| (*k, n.to_string(), *r))
            .collect()
    };
    for (app, sub) in &mut watches {
        let expected = match *app {
            "web" => owned(&[(Deleted, "a", r2), (Added, "c", r3)]),
            "db" => owned(&[(Added, "b", r1), (Added, "a", r2)]),
            _ => owned(&[(Added, "b", r1), (Modified, "a", r2), (Added, "c", r3)]),
        };
        let mut seen = Vec::new();
        for _ in 0..expected.len() {
            seen.push(next_delivery(sub).await.unwrap());
        }
        assert_eq!(seen, expected, "watcher of app={app:?}");
        assert!(sub.queue.try_recv().is_none(), "app={app:?} saw more");
    }
    // Once every watcher of a filter is gone, a new one starts a new
    // shared filter.
    let web = Arc::downgrade(&watches[0].1.filter);
    watches.retain(|(app, _)| *app != "web");
    assert!(web.upgrade().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watcher_that_reads_nothing_is_dropped_without_stalling_the_others() {
    let (storage, _dir) = store().await;
    let config = CacheConfig {
        watcher_queue: 8,
        ..CacheConfig::default()
    };
    let cache = WatchCache::new(storage.clone(), config);
    let everything = Target {
        resource: pods(),
        namespace: None,
    };
    let start = WatchStart::Initial(Freshness::Consistent);
    let mut slow = cache
        .watch(&everything, Filter::default(), start, false)
        .await
        .unwrap()
        .unwrap();
    let mut fast = cache
        .watch(&everything, Filter::default(), start, false)
        .await
        .unwrap()
        .unwrap();
    // The fast watcher reads each event before the next write, so only the
    // slow one can fall behind, however loaded the machine is.
    for i in 0..50 {
        let key = format!("/registry/core/pods/default/p{i}");
        storage.create(&key, b"{}".to_vec(), 0).await.unwrap();
        tokio::time::timeout(Duration::from_secs(20), next_delivery(&mut fast))
            .await
            .expect("the fast watcher is not stalled")
            .expect("the fast watcher stays");
    }
    // The slow one got what its queue held, then its stream ended.
    let mut queued = 0;
    while next_delivery(&mut slow).await.is_some() {
        queued += 1;
    }
    assert_eq!(queued, 8);
    let stats = cache.resource(pods(), 0).stats();
    assert_eq!((stats.dropped_watchers, stats.watchers), (1, 1));
    drop(fast);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_from_before_the_ring_is_too_old_and_a_relist_restarts_watchers() {
    let (storage, _dir) = store().await;
    let config = CacheConfig {
        max_events: 4,
        ..CacheConfig::default()
    };
    let cache = WatchCache::new(storage.clone(), config);
    let everything = Target {
        resource: pods(),
        namespace: None,
    };
    let first = storage
        .create("/registry/core/pods/default/a", b"{}".to_vec(), 0)
        .await
        .unwrap();
    let mut live = cache
        .watch(
            &everything,
            Filter::default(),
            WatchStart::After(first),
            false,
        )
        .await
        .unwrap()
        .unwrap();
    let mut last = first;
    for i in 0..6 {
        last = storage
            .create(
                &format!("/registry/core/pods/default/b{i}"),
                b"{}".to_vec(),
                0,
            )
            .await
            .unwrap();
    }
    for _ in 0..6 {
        next_delivery(&mut live).await.unwrap();
    }
    let resource = cache.resource(pods(), 0);
    let too_old = cache
        .watch(
            &everything,
            Filter::default(),
            WatchStart::After(first),
            false,
        )
        .await
        .unwrap();
    assert_eq!(too_old.err(), Some(TooOld { oldest: last - 4 }));
    let replay = cache
        .watch(
            &everything,
            Filter::default(),
            WatchStart::After(last - 4),
            false,
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(replay.backlog.len(), 4);
    // A relist (the store compacted the cache's revision) ends every watch.
    resource.replace(Vec::new(), last);
    assert!(next_delivery(&mut live).await.is_none());
    assert_eq!(resource.stats().relists, 1);
    let after_relist = cache
        .watch(
            &everything,
            Filter::default(),
            WatchStart::After(last - 1),
            false,
        )
        .await
        .unwrap();
    assert!(after_relist.is_err());
    drop(replay);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_watcher_from_a_compacted_revision_is_too_old() {
    let (storage, _dir) = store().await;
    let store = storage.local_store().expect("a local store");
    let first = storage
        .create("/registry/core/pods/default/a", b"{}".to_vec(), 0)
        .await
        .unwrap();
    let last = storage
        .update(
            "/registry/core/pods/default/a",
            b"{\"x\":1}".to_vec(),
            first,
            0,
        )
        .await
        .unwrap();
    store.compact(last, true).await.unwrap();
    let cache = WatchCache::new(storage.clone(), CacheConfig::default());
    let everything = Target {
        resource: pods(),
        namespace: None,
    };
    let watch = cache
        .watch(
            &everything,
            Filter::default(),
            WatchStart::After(first - 1),
            false,
        )
        .await
        .unwrap();
    assert!(watch.is_err(), "the cache started at the newest revision");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_watcher_from_the_past_misses_nothing_the_store_still_has() {
    let (storage, _dir) = store().await;
    let first = storage
        .create("/registry/core/pods/default/a", b"{}".to_vec(), 0)
        .await
        .unwrap();
    let second = storage
        .create("/registry/core/pods/default/b", b"{}".to_vec(), 0)
        .await
        .unwrap();
    let cache = WatchCache::new(storage.clone(), CacheConfig::default());
    let everything = Target {
        resource: pods(),
        namespace: None,
    };
    let mut watch = cache
        .watch(
            &everything,
            Filter::default(),
            WatchStart::After(first),
            false,
        )
        .await
        .unwrap()
        .unwrap();
    let replayed: Vec<i64> = watch.backlog.iter().map(|e| e.revision).collect();
    let live = if replayed.is_empty() {
        vec![next_delivery(&mut watch).await.unwrap().2]
    } else {
        replayed
    };
    assert_eq!(live, [second]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn initial_events_end_with_a_bookmark_when_asked() {
    let (registry, _dir) = registry().await;
    create(&registry, "a", "web").await;
    let at = create(&registry, "b", "db").await;
    let options = crate::watch::WatchOptions {
        list: ListOptions {
            resource_version: at.to_string(),
            resource_version_match: "NotOlderThan".into(),
            ..ListOptions::default()
        },
        allow_bookmarks: true,
        timeout: Some(Duration::from_secs(2)),
        send_initial_events: true,
        table: None,
        convert: None,
    };
    let stream = crate::watch::start(&registry, &in_default(), options)
        .await
        .unwrap();
    let lines: Vec<Value> = stream
        .map(|line| serde_json::from_slice(&line.unwrap()).unwrap())
        .collect()
        .await;
    let types: Vec<&str> = lines.iter().map(|l| l["type"].as_str().unwrap()).collect();
    assert_eq!(types, ["ADDED", "ADDED", "BOOKMARK"], "{lines:?}");
    let end = &lines[2]["object"]["metadata"];
    assert_eq!(end["annotations"]["k8s.io/initial-events-end"], "true");
    assert!(
        end["resourceVersion"]
            .as_str()
            .unwrap()
            .parse::<i64>()
            .unwrap()
            >= at
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_watches_end_at_their_timeout_or_when_the_server_stops() {
    let (registry, _dir) = registry().await;
    let from = create(&registry, "seed", "web").await;
    let open = |timeout: Option<Duration>| {
        let registry = registry.clone();
        async move {
            let options = crate::watch::WatchOptions {
                list: list_options(&from.to_string()),
                allow_bookmarks: false,
                timeout,
                send_initial_events: false,
                table: None,
                convert: None,
            };
            crate::watch::start(&registry, &in_default(), options)
                .await
                .unwrap()
        }
    };
    // A watch with a timeout ends at it, with nothing to send.
    let timed = open(Some(Duration::from_millis(300))).await;
    let lines = tokio::time::timeout(Duration::from_secs(10), timed.collect::<Vec<_>>())
        .await
        .expect("a watch ends at its timeout");
    assert!(lines.is_empty());
    // Watches without one, waiting for their next event, end when the
    // server stops (the client watches again from its last
    // resourceVersion, so an event queued but not sent is not lost).
    let mut endless = Vec::new();
    for _ in 0..3 {
        endless.push(open(None).await);
    }
    let mut readers = Vec::new();
    for stream in endless {
        readers.push(tokio::spawn(stream.collect::<Vec<_>>()));
    }
    let created = create(&registry, "late", "web").await;
    let cache = registry.cache.resource(pods(), 0);
    assert!(
        cache
            .wait_for_revision(created, Duration::from_secs(10))
            .await
    );
    tokio::time::sleep(Duration::from_millis(100)).await;
    registry.begin_shutdown();
    for reader in readers {
        let lines = tokio::time::timeout(Duration::from_secs(10), reader)
            .await
            .expect("an open watch ends when the server stops")
            .unwrap();
        assert_eq!(lines.len(), 1, "the event before the stop was sent");
        let event: Value = serde_json::from_slice(lines[0].as_ref().unwrap()).unwrap();
        assert_eq!(event["object"]["metadata"]["name"], "late");
    }
    // A watch started after the stop ends at once.
    let late = open(None).await;
    let lines = tokio::time::timeout(Duration::from_secs(10), late.collect::<Vec<_>>())
        .await
        .expect("a watch started while stopping ends");
    assert!(lines.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_watchers_see_every_event_in_order_from_one_store_watch() {
    let (registry, _dir) = registry().await;
    let from = create(&registry, "seed", "web").await;
    let watches_before = registry.storage().requests().total("watch");
    let mut readers = Vec::new();
    for _ in 0..1000 {
        let options = crate::watch::WatchOptions {
            list: list_options(&from.to_string()),
            allow_bookmarks: false,
            timeout: None,
            send_initial_events: false,
            table: None,
            convert: None,
        };
        let stream = crate::watch::start(&registry, &in_default(), options)
            .await
            .unwrap();
        readers.push(tokio::spawn(async move {
            stream
                .take(300)
                .map(|line| line.unwrap())
                .collect::<Vec<_>>()
                .await
        }));
    }
    let mut expected = Vec::new();
    for i in 0..100 {
        let name = format!("p{i}");
        expected.push((
            "ADDED".to_string(),
            name.clone(),
            create(&registry, &name, "web").await,
        ));
        expected.push((
            "MODIFIED".to_string(),
            name.clone(),
            relabel(&registry, &name, "db").await,
        ));
        let deleted = registry
            .delete(&in_default(), &name, &Default::default())
            .await
            .unwrap();
        expected.push(("DELETED".to_string(), name, revision_of(&deleted)));
    }
    let mut first = None;
    for reader in readers {
        let lines = tokio::time::timeout(Duration::from_secs(60), reader)
            .await
            .expect("every watcher gets its 300 events")
            .unwrap();
        // Every watcher gets the same bytes; the first one's are checked.
        let first = first.get_or_insert_with(|| {
            let seen: Vec<_> = lines
                .iter()
                .map(|line| {
                    let event: Value = serde_json::from_slice(line).unwrap();
                    let object = &event["object"];
                    let name = object["metadata"]["name"].as_str().unwrap().to_string();
                    (
                        event["type"].as_str().unwrap().to_string(),
                        name,
                        revision_of(object),
                    )
                })
                .collect();
            assert_eq!(seen, expected);
            lines.clone()
        });
        assert!(lines == *first);
    }
    assert!(
        registry.storage().requests().total("watch") <= watches_before + 1,
        "a thousand watchers, at most one store watch"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_name_store_requests_and_each_cache() {
    let (registry, _dir) = registry().await;
    registry
        .list(&in_default(), &list_options("0"))
        .await
        .unwrap();
    // The list is served once the cache has listed; its reflector opens
    // the store watch right after.
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    while !metrics::render(&registry)
        .contains("skiff_storage_watches_total{prefix=\"/registry/core/pods/\"} 1\n")
        && tokio::time::Instant::now() < deadline
    {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let text = metrics::render(&registry);
    for sample in [
        "skiff_storage_requests_total{operation=\"list\"} ",
        // One store watch for the pods' cache (admission's caches of
        // namespaces and the like have theirs).
        "skiff_storage_watches_total{prefix=\"/registry/core/pods/\"} 1\n",
        "skiff_watch_cache_watchers{resource=\"pods\"} 0\n",
        "skiff_watch_cache_objects{resource=\"pods\"} 0\n",
        "# TYPE skiff_watch_cache_dropped_watchers_total counter\n",
        "apiserver_storage_objects{resource=\"pods\"} 0\n",
        "process_resident_memory_bytes ",
    ] {
        assert!(text.contains(sample), "{sample:?} in\n{text}");
    }
}
