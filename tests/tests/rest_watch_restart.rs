//! A watch resumed across a restart of `skiff up`: watch pods from a
//! resourceVersion over HTTP, stop the server with SIGTERM (the watch
//! ends), start it again on the same data directory, change pods before
//! and after resuming the watch from the last resourceVersion seen. Every
//! change is seen once, in order, with the resourceVersion its write
//! returned: none missed, none repeated.

use std::time::Duration;

use anyhow::{bail, ensure, Context, Result};
use serde_json::{json, Value};
use skiff_tests::api_server::ApiServer;
use skiff_tests::kube_http::{KubeHttp, WatchStream};

const PODS: &str = "/api/v1/namespaces/default/pods";
const EVENT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a watch that has shown everything is given to show more.
const QUIET: Duration = Duration::from_millis(500);

/// (type, name, resourceVersion) of a watch event or of the write behind it.
type Seen = (String, String, i64);

fn pod(name: &str, step: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "resume", "step": step}},
        "spec": {"containers": [{"name": "main", "image": "busybox:1.36"}]},
    })
}

fn revision(object: &Value) -> Result<i64> {
    object["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|r| r.parse().ok())
        .with_context(|| format!("no resourceVersion in {object}"))
}

/// Makes changes and remembers the event each should give.
struct Writer {
    http: KubeHttp,
    expected: Vec<Seen>,
}

impl Writer {
    async fn create(&mut self, name: &str) -> Result<()> {
        let reply = self.http.post(PODS, &pod(name, "one")).await?;
        ensure!(reply.status == 201, "create {name}: {}", reply.text());
        self.expect("ADDED", name, &reply.json()?)
    }

    async fn modify(&mut self, name: &str, step: &str) -> Result<()> {
        let mut current = self.http.get_json(&format!("{PODS}/{name}")).await?;
        current["metadata"]["labels"]["step"] = json!(step);
        let reply = self.http.put(&format!("{PODS}/{name}"), &current).await?;
        ensure!(reply.status == 200, "update {name}: {}", reply.text());
        self.expect("MODIFIED", name, &reply.json()?)
    }

    async fn delete(&mut self, name: &str) -> Result<()> {
        let reply = self.http.delete(&format!("{PODS}/{name}")).await?;
        ensure!(reply.status == 200, "delete {name}: {}", reply.text());
        self.expect("DELETED", name, &reply.json()?)
    }

    fn expect(&mut self, kind: &str, name: &str, object: &Value) -> Result<()> {
        self.expected
            .push((kind.into(), name.into(), revision(object)?));
        Ok(())
    }
}

fn seen(event: &Value) -> Result<Seen> {
    let kind = event["type"].as_str().context("an event type")?;
    if !matches!(kind, "ADDED" | "MODIFIED" | "DELETED") {
        bail!("an unexpected event: {event}");
    }
    let object = &event["object"];
    Ok((
        kind.into(),
        object["metadata"]["name"]
            .as_str()
            .context("a name")?
            .into(),
        revision(object)?,
    ))
}

/// Reads events until `seen` holds `count`.
async fn read_until(watch: &mut WatchStream, seen: &mut Vec<Seen>, count: usize) -> Result<()> {
    while seen.len() < count {
        match watch.next_event(EVENT_TIMEOUT).await {
            Ok(Some(event)) => seen.push(self::seen(&event)?),
            Ok(None) => bail!("the watch ended after {seen:?}"),
            Err(err) => return Err(err.context(format!("after {seen:?}"))),
        }
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_resumes_after_a_restart_with_nothing_missed_or_repeated() -> Result<()> {
    let mut server = ApiServer::start().await?;
    let mut writer = Writer {
        http: server.http()?,
        expected: Vec::new(),
    };
    writer.create("a").await?;
    let list = writer.http.get_json(PODS).await?;
    let listed_at = list["metadata"]["resourceVersion"]
        .as_str()
        .context("the list's resourceVersion")?
        .to_string();
    // Only what comes after the list is an event.
    writer.expected.clear();

    let mut watch = writer
        .http
        .watch(&format!("{PODS}?watch=true&resourceVersion={listed_at}"))
        .await?;
    writer.create("b").await?;
    writer.modify("a", "two").await?;
    writer.delete("b").await?;
    writer.create("c").await?;
    let mut seen = Vec::new();
    read_until(&mut watch, &mut seen, writer.expected.len()).await?;
    assert_eq!(seen, writer.expected, "the live watch");

    server.stop().await?;
    // The stop ends the watch cleanly (the chunked body is finished, not
    // cut); nothing more may arrive on it.
    match watch.next_event(EVENT_TIMEOUT).await {
        Ok(Some(event)) => bail!("an event after the last change: {event}"),
        Ok(None) => {}
        Err(err) => {
            return Err(err.context("the watch did not end cleanly when the server stopped"))
        }
    }
    let last = seen.last().map(|s| s.2).context("events were seen")?;

    server.restart().await?;
    writer.http = server.http()?;
    // Changes while no watch is open.
    writer.modify("c", "two").await?;
    writer.create("d").await?;
    let mut resumed = writer
        .http
        .watch(&format!("{PODS}?watch=true&resourceVersion={last}"))
        .await?;
    // And changes after it is open again.
    writer.delete("a").await?;
    writer.modify("d", "two").await?;
    writer.create("e").await?;
    read_until(&mut resumed, &mut seen, writer.expected.len()).await?;
    if let Some(extra) = resumed.next_event_within(QUIET).await? {
        bail!("an event beyond the changes made: {extra}; seen {seen:?}");
    }
    assert_eq!(seen, writer.expected, "every change once, in order");
    let revisions: Vec<i64> = seen.iter().map(|s| s.2).collect();
    ensure!(
        revisions.windows(2).all(|w| w[0] < w[1]),
        "resourceVersions only rise, across the restart too: {revisions:?}"
    );
    let before_restart = seen.iter().filter(|s| s.2 <= last).count();
    assert_eq!(before_restart, 4, "{seen:?}");
    Ok(())
}
