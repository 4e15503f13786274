//! The watch cache as clients see it, through a running `skiff`: a thousand
//! watchers of one resource while writes go on (every watcher sees every
//! change once, in order, and the store serves one watch); a watcher that
//! reads nothing is dropped while the others go on; a watch from before the
//! cache's ring gets a 410 ERROR event in a 200 stream and kubectl's
//! reflector recovers; a list at resourceVersion=0 reads nothing from the
//! store. Store reads and cache gauges come from `/metrics`, as an operator
//! would scrape them.

use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use serde_json::{json, Value};
use skiff_tests::api_server::{ApiServer, Backend};
use skiff_tests::kube_http::KubeHttp;
use skiff_tests::kubectl::{kubectl_or_skip, Kubectl};
use tokio::io::AsyncReadExt;

const PODS: &str = "/api/v1/namespaces/default/pods";
const EVENT_TIMEOUT: Duration = Duration::from_secs(30);

/// (type, name, resourceVersion) of a watch event or of the write behind it.
type Seen = (String, String, i64);

fn pod(name: &str, annotation: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "cache"}, "annotations": {"note": annotation}},
        "spec": {"containers": [{"name": "main", "image": "busybox:1.36"}]},
    })
}

fn revision(object: &Value) -> Result<i64> {
    object["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|r| r.parse().ok())
        .with_context(|| format!("no resourceVersion in {object}"))
}

async fn create(http: &KubeHttp, name: &str, annotation: &str) -> Result<Seen> {
    let reply = http.post(PODS, &pod(name, annotation)).await?;
    ensure!(reply.status == 201, "create {name}: {}", reply.text());
    Ok(("ADDED".into(), name.into(), revision(&reply.json()?)?))
}

async fn modify(http: &KubeHttp, name: &str) -> Result<Seen> {
    let mut current = http.get_json(&format!("{PODS}/{name}")).await?;
    current["metadata"]["labels"]["step"] = json!("two");
    let reply = http.put(&format!("{PODS}/{name}"), &current).await?;
    ensure!(reply.status == 200, "update {name}: {}", reply.text());
    Ok(("MODIFIED".into(), name.into(), revision(&reply.json()?)?))
}

async fn delete(http: &KubeHttp, name: &str) -> Result<Seen> {
    let reply = http.delete(&format!("{PODS}/{name}")).await?;
    ensure!(reply.status == 200, "delete {name}: {}", reply.text());
    Ok(("DELETED".into(), name.into(), revision(&reply.json()?)?))
}

fn seen(event: &Value) -> Result<Seen> {
    let object = &event["object"];
    Ok((
        event["type"].as_str().context("an event type")?.into(),
        object["metadata"]["name"]
            .as_str()
            .with_context(|| format!("a name in {event}"))?
            .into(),
        revision(object)?,
    ))
}

/// The value of one sample of `/metrics` (0 when absent).
async fn metric(http: &KubeHttp, sample: &str) -> Result<u64> {
    let reply = http.get("/metrics").await?;
    ensure!(reply.status == 200, "/metrics: {}", reply.status);
    let text = reply.text();
    Ok(text
        .lines()
        .find_map(|line| line.strip_prefix(sample)?.trim().parse().ok())
        .unwrap_or(0))
}

/// The store watches opened on the pods' key range (other resources, such
/// as the CRDs every apiserver follows, have watches of their own).
const STORE_WATCHES: &str = "skiff_storage_watches_total{prefix=\"/registry/core/pods/\"} ";
const POD_WATCHERS: &str = "skiff_watch_cache_watchers{resource=\"pods\"} ";

/// `watchers` watches of pods from one resourceVersion while 100 pods are
/// created, changed and deleted: every watcher sees the 300 changes, in
/// the order and with the revisions their writes returned, and the member
/// they watch through opened at most one store watch for all of them.
async fn many_watchers_see_every_change_in_order(backend: Backend, watchers: usize) -> Result<()> {
    let test = "watch_cache::many_watchers_see_every_change_in_order";
    let Some(server) = ApiServer::start_on(backend, test).await? else {
        return Ok(());
    };
    let http = server.http()?;
    let watch_http = KubeHttp::from_kubeconfig(&server.watch_kubeconfig())?;
    let (_, _, from) = create(&http, "seed", "").await?;
    let store_watches = metric(&watch_http, STORE_WATCHES).await?;

    // Writes start while the watches are being opened.
    let writer = {
        let http = http.clone();
        tokio::spawn(async move {
            let mut expected = Vec::new();
            for i in 0..100 {
                let name = format!("p{i:03}");
                expected.push(create(&http, &name, "").await?);
                expected.push(modify(&http, &name).await?);
                expected.push(delete(&http, &name).await?);
            }
            anyhow::Ok(expected)
        })
    };
    let path = format!("{PODS}?watch=true&resourceVersion={from}");
    let mut streams = Vec::new();
    for chunk in (0..watchers).collect::<Vec<_>>().chunks(100) {
        let opening: Vec<_> = chunk
            .iter()
            .map(|_| {
                let (http, path) = (watch_http.clone(), path.clone());
                tokio::spawn(async move { http.watch(&path).await })
            })
            .collect();
        for stream in opening {
            streams.push(stream.await??);
        }
    }
    ensure!(
        metric(&watch_http, POD_WATCHERS).await? >= watchers as u64,
        "the cache counts every open watch"
    );
    let readers: Vec<_> = streams
        .into_iter()
        .map(|mut stream| {
            tokio::spawn(async move {
                let mut seen = Vec::new();
                while seen.len() < 300 {
                    match stream.next_event(EVENT_TIMEOUT).await? {
                        Some(event) => seen.push(self::seen(&event)?),
                        None => bail!("the watch ended after {} events", seen.len()),
                    }
                }
                anyhow::Ok(seen)
            })
        })
        .collect();
    let expected = writer.await??;
    for (i, reader) in readers.into_iter().enumerate() {
        let seen = reader.await?.with_context(|| format!("watcher {i}"))?;
        ensure!(
            seen == expected,
            "watcher {i} saw {seen:?}\nexpected {expected:?}"
        );
    }
    let opened = metric(&watch_http, STORE_WATCHES).await? - store_watches;
    ensure!(
        opened <= 1,
        "{watchers} watchers of pods cost the store {opened} watches"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_watchers_see_every_change_in_order() -> Result<()> {
    many_watchers_see_every_change_in_order(Backend::Embedded, 1000).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watchers_on_another_member_see_every_change_in_order() -> Result<()> {
    many_watchers_see_every_change_in_order(Backend::Cluster, 200).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watchers_over_real_etcd_see_every_change_in_order() -> Result<()> {
    many_watchers_see_every_change_in_order(Backend::Etcd, 200).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watcher_that_reads_nothing_is_dropped_without_stalling_the_others() -> Result<()> {
    // A short queue, so that the kernel's socket buffers are what fills
    // first; the objects are big, so that they fill soon.
    std::env::set_var("SKIFF_WATCH_CACHE_WATCHER_QUEUE", "16");
    let server = ApiServer::start().await?;
    let http = server.http()?;
    let (_, _, from) = create(&http, "seed", "").await?;
    let path = format!("{PODS}?watch=true&resourceVersion={from}");
    // Opened on its own connection and never read.
    let mut stalled = http.open("GET", &path).await?;
    let mut reading = http.watch(&path).await?;
    let deadline = Instant::now() + Duration::from_secs(20);
    while metric(&http, POD_WATCHERS).await? < 2 {
        ensure!(Instant::now() < deadline, "the two watches never opened");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let big = "x".repeat(200 * 1024);
    let mut dropped_at = None;
    for i in 0..200 {
        let written = create(&http, &format!("big{i:03}"), &big).await?;
        // The reading watcher keeps pace: each change arrives promptly.
        let event = reading
            .next_event(Duration::from_secs(10))
            .await?
            .context("the reading watch ended")?;
        ensure!(
            seen(&event)? == written,
            "{:?} != {written:?}",
            seen(&event)?
        );
        if metric(
            &http,
            "skiff_watch_cache_dropped_watchers_total{resource=\"pods\"} ",
        )
        .await?
            == 1
        {
            dropped_at = Some(i);
            break;
        }
    }
    let dropped_at = dropped_at.context("the stalled watcher was never dropped")?;
    ensure!(
        metric(&http, POD_WATCHERS).await? == 1,
        "only the reading watch is left"
    );
    // The reading watch goes on after the drop.
    let written = create(&http, "after", "").await?;
    let event = reading
        .next_event(Duration::from_secs(10))
        .await?
        .context("ended")?;
    ensure!(seen(&event)? == written);
    // What the stalled client finally reads ends: its stream was closed.
    let mut received = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), stalled.read_to_end(&mut received))
        .await
        .context("the dropped watch's connection never ended")??;
    ensure!(
        received.ends_with(b"0\r\n\r\n"),
        "the dropped watch ends as a finished chunked body (after {dropped_at} big writes)"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_from_before_the_ring_gets_410_and_kubectl_recovers() -> Result<()> {
    let test = "watch_cache::a_watch_from_before_the_ring_gets_410_and_kubectl_recovers";
    let Some(binary) = kubectl_or_skip(test) else {
        return Ok(());
    };
    std::env::set_var("SKIFF_WATCH_CACHE_EVENTS", "16");
    let server = ApiServer::start().await?;
    let http = server.http()?;
    let (_, _, old) = create(&http, "target", "").await?;
    // Start the cache now, so that it does not start at the old revision.
    http.get_json(&format!("{PODS}?resourceVersion=0")).await?;
    for i in 0..20 {
        create(&http, &format!("filler{i:02}"), "").await?;
    }

    // Kubernetes style: a 200 stream whose one event is ERROR with a 410.
    let reply = http
        .get(&format!("{PODS}?watch=true&resourceVersion={old}"))
        .await?;
    ensure!(reply.status == 200, "{} {}", reply.status, reply.text());
    let lines: Vec<Value> = reply
        .text()
        .lines()
        .map(serde_json::from_str)
        .collect::<Result<_, _>>()?;
    ensure!(lines.len() == 1, "{lines:?}");
    let status = &lines[0]["object"];
    ensure!(lines[0]["type"] == "ERROR", "{lines:?}");
    ensure!(
        (
            status["kind"].as_str(),
            status["code"].as_i64(),
            status["reason"].as_str()
        ) == (Some("Status"), Some(410), Some("Expired")),
        "{status}"
    );
    ensure!(
        status["message"]
            .as_str()
            .is_some_and(|m| m.starts_with(&format!("too old resource version: {old} ("))),
        "{status}"
    );

    // kubectl's reflector: its watch is cut every 2 s (--request-timeout)
    // and resumed from the last resourceVersion it saw; once that has left
    // the ring, the 410 makes it list again, and it still sees the delete.
    let kubectl = Kubectl::new(binary, &server.kubeconfig())?;
    let too_old = "skiff_watch_cache_too_old_watches_total{resource=\"pods\"} ";
    let refused_before = metric(&http, too_old).await?;
    let mut wait = kubectl.spawn(&[
        "wait",
        "--for=delete",
        "pod/target",
        "--timeout=90s",
        "--request-timeout=2s",
    ])?;
    let deadline = Instant::now() + Duration::from_secs(30);
    while metric(&http, POD_WATCHERS).await? < 1 {
        ensure!(
            Instant::now() < deadline,
            "kubectl never watched: {}",
            wait.stderr()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for i in 0..20 {
        create(&http, &format!("more{i:02}"), "").await?;
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while metric(&http, too_old).await? == refused_before {
        ensure!(
            Instant::now() < deadline,
            "kubectl never came back from an old resourceVersion: {}",
            wait.stderr()
        );
        ensure!(
            wait.running()?,
            "kubectl wait ended early: {}",
            wait.stderr()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    delete(&http, "target").await?;
    let lines = wait.wait_for_lines(1, Duration::from_secs(30)).await?;
    ensure!(
        lines[0].contains("pod/target"),
        "{lines:?}; {}",
        wait.stderr()
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_list_at_resource_version_0_reads_nothing_from_the_store() -> Result<()> {
    let server = ApiServer::start().await?;
    let http = server.http()?;
    for i in 0..10 {
        create(&http, &format!("p{i}"), "").await?;
    }
    // The first such list starts the cache (one store list and watch).
    let first = http.get_json(&format!("{PODS}?resourceVersion=0")).await?;
    ensure!(
        first["items"].as_array().map(Vec::len) == Some(10),
        "{first}"
    );
    let reads = |op: &'static str| {
        let http = http.clone();
        async move {
            metric(
                &http,
                &format!("skiff_storage_requests_total{{operation=\"{op}\"}} "),
            )
            .await
        }
    };
    let before = (
        reads("get").await?,
        reads("list").await?,
        reads("watch").await?,
    );
    for _ in 0..50 {
        let list = http.get_json(&format!("{PODS}?resourceVersion=0")).await?;
        ensure!(list["items"].as_array().map(Vec::len) == Some(10));
        ensure!(revision(&list)? >= revision(&first)?);
        // kubectl's reflector list: a page of 500 at any revision.
        let paged = http
            .get_json("/api/v1/pods?limit=500&resourceVersion=0&fieldSelector=metadata.name%3Dp3")
            .await?;
        ensure!(
            paged["items"].as_array().map(Vec::len) == Some(1),
            "{paged}"
        );
    }
    let object = http
        .get_json(&format!("{PODS}/p3?resourceVersion=0"))
        .await?;
    ensure!(object["metadata"]["name"] == "p3");
    let after = (
        reads("get").await?,
        reads("list").await?,
        reads("watch").await?,
    );
    ensure!(
        before.1 == after.1 && before.2 == after.2,
        "store (get, list, watch) requests went from {before:?} to {after:?}"
    );
    Ok(())
}

/// Consistent lists (no resourceVersion) read the store's revision, then
/// the cache once it has reached it: each sees the write just acknowledged,
/// through the member written to and through another one, and none has to
/// fall back to reading the store (etcd answers the progress requests this
/// relies on, too).
async fn consistent_lists_see_every_acknowledged_write(backend: Backend) -> Result<()> {
    let test = "watch_cache::consistent_lists_see_every_acknowledged_write";
    let Some(server) = ApiServer::start_on(backend, test).await? else {
        return Ok(());
    };
    let http = server.http()?;
    let other = KubeHttp::from_kubeconfig(&server.watch_kubeconfig())?;
    for i in 0..20 {
        let name = format!("p{i:02}");
        let (_, _, written) = create(&http, &name, "").await?;
        for api in [&http, &other] {
            let list = api.get_json(PODS).await?;
            ensure!(revision(&list)? >= written, "{list}");
            let names: Vec<&str> = list["items"]
                .as_array()
                .context("items")?
                .iter()
                .filter_map(|i| i["metadata"]["name"].as_str())
                .collect();
            ensure!(
                names.contains(&name.as_str()),
                "{name} missing from {names:?}"
            );
        }
    }
    let fallbacks = "skiff_watch_cache_store_fallbacks_total{resource=\"pods\"} ";
    for api in [&http, &other] {
        ensure!(
            metric(api, fallbacks).await? == 0,
            "a list fell back to the store"
        );
    }
    Ok(())
}

skiff_tests::on_every_backend!(consistent_lists_see_every_acknowledged_write);

/// `skiff up --event-ttl 2s`: an Event is listed (by kubectl too), then
/// expires — its watchers see it DELETED, a GET answers 404 and kubectl
/// lists no events — while a ConfigMap written beside it stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_expire_after_the_event_ttl_and_watchers_see_them_go() -> Result<()> {
    let Some(binary) = kubectl_or_skip("events_expire_after_the_event_ttl") else {
        return Ok(());
    };
    let args: Vec<String> = [
        "--scheduler=false",
        "--controller-manager=false",
        "--kubelet=false",
        "--event-ttl=2s",
    ]
    .map(str::to_string)
    .to_vec();
    let (server, http) = ApiServer::start_with_plain_port(&args).await?;
    let kubectl = Kubectl::new(binary, &server.kubeconfig())?;
    const EVENTS: &str = "/api/v1/namespaces/default/events";
    let listed = http.get_json(EVENTS).await?;
    let from = listed["metadata"]["resourceVersion"]
        .as_str()
        .context("a list without resourceVersion")?;
    let mut watch = http
        .watch(&format!("{EVENTS}?watch=true&resourceVersion={from}"))
        .await?;
    let event = json!({
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": "short-lived", "namespace": "default"},
        "involvedObject": {"kind": "Pod", "name": "web", "namespace": "default"},
        "reason": "Started",
        "message": "Started container web",
        "type": "Normal",
    });
    let created_at = Instant::now();
    let reply = http.post(EVENTS, &event).await?;
    ensure!(reply.status == 201, "{} {}", reply.status, reply.text());
    let config_map = json!({"apiVersion": "v1", "kind": "ConfigMap",
                            "metadata": {"name": "kept", "namespace": "default"}});
    let reply = http
        .post("/api/v1/namespaces/default/configmaps", &config_map)
        .await?;
    ensure!(reply.status == 201, "{} {}", reply.status, reply.text());
    let names = kubectl.ok(&["get", "events", "-n", "default", "-o", "name"])?;
    ensure!(names.contains("short-lived"), "kubectl listed {names:?}");

    let mut seen = Vec::new();
    while !seen
        .iter()
        .any(|(kind, _): &(String, Duration)| kind == "DELETED")
    {
        let Some(next) = watch.next_event(EVENT_TIMEOUT).await? else {
            bail!("the watch ended after {seen:?}");
        };
        ensure!(
            next["object"]["metadata"]["name"] == "short-lived",
            "{next}"
        );
        let kind = next["type"].as_str().unwrap_or_default().to_string();
        seen.push((kind, created_at.elapsed()));
    }
    let kinds: Vec<&str> = seen.iter().map(|(kind, _)| kind.as_str()).collect();
    ensure!(kinds == ["ADDED", "DELETED"], "{seen:?}");
    let lived = seen[1].1;
    ensure!(
        lived >= Duration::from_secs(2),
        "deleted {lived:?} after its creation"
    );
    let reply = http.get(&format!("{EVENTS}/short-lived")).await?;
    ensure!(reply.status == 404, "{} {}", reply.status, reply.text());
    let left = kubectl.run(&["get", "events", "-n", "default"])?;
    ensure!(
        left.stdout.trim().is_empty() && left.stderr.contains("No resources found"),
        "kubectl still lists: {left:?}"
    );
    let kept = http
        .get("/api/v1/namespaces/default/configmaps/kept")
        .await?;
    ensure!(
        kept.status == 200,
        "the ConfigMap went too: {}",
        kept.status
    );
    Ok(())
}
