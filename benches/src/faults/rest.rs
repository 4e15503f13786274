//! The Kubernetes traffic of a run of `skiff server` members, through
//! each member's API over TLS as the administrator (each member's own
//! kubeconfig), from this machine: writers
//! that create, update with a resourceVersion, and delete ConfigMaps;
//! a lister that reads them in pages; and watchers that list, watch with
//! bookmarks, resume from the last resourceVersion they saw on the next
//! member when a stream ends, and relist after 410 Gone. What they saw is
//! checked against the store's own history of the ConfigMaps' keys.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::client::conn::http1::{self, SendRequest};
use hyper::header::{ACCEPT, CONTENT_TYPE};
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::TokioIo;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};
use tokio::sync::watch;

use super::check::{RestAck, RestList, WatchEvent, WatchRecord, WatchResponse, WatchSegment};
use super::traffic::{Clock, Records};
use crate::api::http::Lines;
use crate::exec::tls_api::TlsApi;

/// A member's API as its kubeconfig describes it.
pub type Api = Arc<TlsApi>;

/// An answer read to its end.
struct Answer {
    status: StatusCode,
    body: Bytes,
}

/// A new HTTP/1.1 connection over TLS to `api`.
async fn connect(api: &TlsApi) -> Result<SendRequest<Full<Bytes>>> {
    let tls = api.connect().await?;
    let (sender, conn) = http1::handshake(TokioIo::new(tls)).await?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(sender)
}

fn request(api: &TlsApi, method: Method, path: &str, body: Bytes) -> Result<Request<Full<Bytes>>> {
    let mut builder = Request::builder()
        .method(method)
        .uri(path)
        .header(hyper::header::HOST, api.address.to_string())
        .header(ACCEPT, "application/json");
    if !body.is_empty() {
        builder = builder.header(CONTENT_TYPE, "application/json");
    }
    Ok(builder.body(Full::new(body))?)
}

/// A watch's body, read line by line.
struct WatchStream {
    body: Incoming,
    lines: Lines,
    /// The connection, kept open while the watch is read.
    _sender: SendRequest<Full<Bytes>>,
}

impl WatchStream {
    /// `Err` with the answer's status and body when it is not 200.
    async fn open(api: &TlsApi, path: &str) -> Result<WatchStream> {
        let mut sender = connect(api).await?;
        let response = sender
            .send_request(request(api, Method::GET, path, Bytes::new())?)
            .await?;
        if response.status() != StatusCode::OK {
            let status = response.status();
            let body = response.into_body().collect().await?.to_bytes();
            bail!("{status}: {}", String::from_utf8_lossy(&body));
        }
        Ok(WatchStream {
            body: response.into_body(),
            lines: Lines::default(),
            _sender: sender,
        })
    }

    /// The lines of the next chunk; `Ok(false)` at the end of the stream.
    async fn next_lines(&mut self, mut on_line: impl FnMut(&[u8])) -> Result<bool> {
        loop {
            let Some(frame) = self.body.frame().await else {
                return Ok(false);
            };
            let Ok(data) = frame?.into_data() else {
                continue;
            };
            self.lines.split(&data, &mut on_line);
            return Ok(true);
        }
    }
}

/// The ConfigMaps of the run: `fault-0` … in `default`.
pub const NAMESPACE: &str = "default";
const NAMES: usize = 5;
const COLLECTION: &str = "/api/v1/namespaces/default/configmaps";
/// Where the store keeps them.
pub const KEY_PREFIX: &[u8] = b"/registry/core/configmaps/default/fault-";
/// A request unanswered this long counts as unanswered.
const CALL_TIMEOUT: Duration = Duration::from_secs(4);
/// Only the run's ConfigMaps.
const SELECTOR: &str = "labelSelector=skiff-faults%3Dyes";

fn key(name: &str) -> Vec<u8> {
    format!("/registry/core/configmaps/{NAMESPACE}/{name}").into_bytes()
}

/// A client's current member's API; the next one after an error.
struct Rotating {
    apis: Vec<Api>,
    at: usize,
    connection: Option<SendRequest<Full<Bytes>>>,
}

impl Rotating {
    fn new(apis: Vec<Api>, first: usize) -> Rotating {
        let at = first % apis.len();
        Rotating {
            apis,
            at,
            connection: None,
        }
    }

    fn member(&self) -> usize {
        self.at
    }

    fn next(&mut self) {
        self.at = (self.at + 1) % self.apis.len();
        self.connection = None;
    }

    /// One request on the current member, within the timeout; on any
    /// failure to answer the client moves on to the next member.
    async fn call(&mut self, method: &str, path: &str, body: Option<Value>) -> Option<Answer> {
        let api = self.apis[self.at].clone();
        let exchange = async {
            if self.connection.as_ref().is_none_or(|c| c.is_closed()) {
                self.connection = Some(connect(&api).await?);
            }
            let connection = self.connection.as_mut().context("no connection")?;
            let body = body.map(|b| Bytes::from(b.to_string())).unwrap_or_default();
            let method = Method::from_bytes(method.as_bytes())?;
            connection.ready().await?;
            let response = connection
                .send_request(request(&api, method, path, body)?)
                .await?;
            let status = response.status();
            let body = response.into_body().collect().await?.to_bytes();
            anyhow::Ok(Answer { status, body })
        };
        match tokio::time::timeout(CALL_TIMEOUT, exchange).await {
            Ok(Ok(answer)) if answer.status.is_server_error() => {
                // Unavailable, no leader, a timeout: the next member.
                self.next();
                Some(answer)
            }
            Ok(Ok(answer)) => Some(answer),
            _ => {
                self.next();
                None
            }
        }
    }
}

fn resource_version(object: &Value) -> Option<i64> {
    object["metadata"]["resourceVersion"].as_str()?.parse().ok()
}

fn parse(answer: &Answer) -> Option<Value> {
    serde_json::from_slice(&answer.body).ok()
}

/// Creates, updates (read, then write with its resourceVersion) and
/// deletes the run's ConfigMaps until stopped; every write the API
/// acknowledged is recorded with the resourceVersion it answered.
pub async fn writer(
    id: u64,
    seed: u64,
    apis: Vec<Api>,
    records: Arc<Records>,
    mut stop: watch::Receiver<bool>,
) {
    let mut rng = StdRng::seed_from_u64(seed ^ (0x5e57 + id));
    let mut api = Rotating::new(apis, id as usize);
    let mut n = 0u64;
    while !*stop.borrow() {
        n += 1;
        let name = format!("fault-{}", rng.gen_range(0..NAMES));
        let value = format!("w{id}-{n}");
        let path = format!("{COLLECTION}/{name}");
        let member = api.member();
        let roll = rng.gen_range(0..10);
        let answer = if roll < 3 {
            let body = json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": name, "labels": {"skiff-faults": "yes"}},
                "data": {"v": value}});
            api.call("POST", COLLECTION, Some(body)).await
        } else if roll < 8 {
            match api.call("GET", &path, None).await {
                Some(read) if read.status == StatusCode::OK => match parse(&read) {
                    Some(mut object) => {
                        object["data"] = json!({"v": value});
                        api.call("PUT", &path, Some(object)).await
                    }
                    None => Some(read),
                },
                other => other,
            }
        } else {
            api.call("DELETE", &path, None).await
        };
        count(&records, answer.is_some());
        if let Some(answer) = answer.filter(|a| a.status.is_success()) {
            if let Some(object) = parse(&answer) {
                let deleted = roll >= 8;
                let written = object["data"]["v"].as_str() == Some(value.as_str());
                if let Some(revision) = resource_version(&object).filter(|_| written || deleted) {
                    records.rest_acks.lock().unwrap().push(RestAck {
                        key: key(&name),
                        revision,
                        deleted,
                        member,
                        client: id,
                    });
                }
            }
        }
        let pause = Duration::from_millis(rng.gen_range(5..40));
        tokio::select! {
            _ = tokio::time::sleep(pause) => {}
            _ = stop.changed() => {}
        }
    }
}

fn count(records: &Records, answered: bool) {
    use std::sync::atomic::Ordering::Relaxed;
    if answered {
        records.answered.fetch_add(1, Relaxed);
    } else {
        records.unanswered.fetch_add(1, Relaxed);
    }
}

/// A list of the run's ConfigMaps, two a page, every page at the first
/// page's resourceVersion. `Err` with the status of a refusal (410 for an
/// expired continue token), `Ok(None)` when unanswered.
async fn list_pages(api: &mut Rotating) -> Result<Option<RestList>, StatusCode> {
    let member = api.member();
    let mut items = Vec::new();
    let mut list_revision = None;
    let mut cont = String::new();
    loop {
        let path = match cont.as_str() {
            "" => format!("{COLLECTION}?{SELECTOR}&limit=2"),
            token => format!(
                "{COLLECTION}?{SELECTOR}&limit=2&continue={}",
                crate::api::http::query_value(token)
            ),
        };
        let Some(answer) = api.call("GET", &path, None).await else {
            return Ok(None);
        };
        if answer.status != StatusCode::OK {
            return Err(answer.status);
        }
        let Some(list) = parse(&answer) else {
            return Ok(None);
        };
        let Some(revision) = resource_version(&list) else {
            return Ok(None);
        };
        if *list_revision.get_or_insert(revision) != revision {
            // Pages of one list at different revisions: recorded as is,
            // the check reports it.
            list_revision = Some(-revision);
        }
        for item in list["items"].as_array().into_iter().flatten() {
            let name = item["metadata"]["name"].as_str().unwrap_or_default();
            if let Some(rv) = resource_version(item) {
                items.push((key(name), rv));
            }
        }
        cont = list["metadata"]["continue"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        if cont.is_empty() {
            return Ok(Some(RestList {
                revision: list_revision.unwrap_or_default(),
                items,
                member,
            }));
        }
    }
}

/// Lists the run's ConfigMaps in pages every few hundred milliseconds.
pub async fn lister(apis: Vec<Api>, records: Arc<Records>, mut stop: watch::Receiver<bool>) {
    let mut api = Rotating::new(apis, 2);
    while !*stop.borrow() {
        match list_pages(&mut api).await {
            Ok(Some(list)) => {
                count(&records, true);
                records.rest_lists.lock().unwrap().push(list);
            }
            Ok(None) => count(&records, false),
            Err(_) => count(&records, true),
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(300)) => {}
            _ = stop.changed() => {}
        }
    }
}

/// What one watch stream ended with.
enum Ended {
    /// The server closed it, or it failed: resume from the last
    /// resourceVersion seen.
    Closed,
    /// 410 Gone: relist.
    Gone,
    Stopped,
}

/// Lists, then watches with bookmarks from the list's resourceVersion;
/// resumes on the next member from the last resourceVersion it saw
/// (event or bookmark) when a stream ends, relists after 410 Gone.
/// Every stream is a segment of the record; every relist is a list.
pub async fn watcher(
    id: usize,
    apis: Vec<Api>,
    records: Arc<Records>,
    clock: Clock,
    mut stop: watch::Receiver<bool>,
) {
    let mut api = Rotating::new(apis.clone(), id + 1);
    let mut record = WatchRecord {
        id: 100 + id,
        segments: Vec::new(),
    };
    // Where to resume from: None to (re)list first.
    let mut from: Option<i64> = None;
    while !*stop.borrow() {
        let start = match from {
            Some(revision) => revision,
            None => match list_pages(&mut api).await {
                Ok(Some(list)) => {
                    let revision = list.revision;
                    records.rest_lists.lock().unwrap().push(list);
                    revision
                }
                _ => {
                    api.next();
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let member = api.member();
        let target = apis[member].clone();
        let path = format!(
            "{COLLECTION}?{SELECTOR}&watch=true&allowWatchBookmarks=true&resourceVersion={start}&timeoutSeconds=30"
        );
        let mut segment = WatchSegment {
            member,
            start: start + 1,
            responses: Vec::new(),
        };
        let opened = tokio::time::timeout(CALL_TIMEOUT, WatchStream::open(&target, &path)).await;
        let ended = match opened {
            Ok(Ok(mut stream)) => read_watch(&mut stream, &mut segment, clock, &mut stop).await,
            Ok(Err(err)) if format!("{err:#}").starts_with("410") => Ended::Gone,
            _ => Ended::Closed,
        };
        let last = segment
            .responses
            .iter()
            .filter_map(|r| match r {
                WatchResponse::Events { events, .. } => events.last().map(|e| e.revision),
                WatchResponse::Progress(revision) => Some(*revision),
                WatchResponse::Canceled(_) => None,
            })
            .max();
        record.segments.push(segment);
        match ended {
            Ended::Stopped => break,
            Ended::Gone => from = None,
            Ended::Closed => {
                from = Some(last.unwrap_or(start));
                api.next();
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    records.rest_watches.lock().unwrap().push(record);
}

/// Reads one watch stream into `segment` until it ends.
async fn read_watch(
    stream: &mut WatchStream,
    segment: &mut WatchSegment,
    clock: Clock,
    stop: &mut watch::Receiver<bool>,
) -> Ended {
    // A member cut off answers nothing: a stream silent longer than the
    // bookmarks' period is given up.
    let silence = Duration::from_secs(8);
    loop {
        let mut lines = Vec::new();
        let read = tokio::select! {
            read = tokio::time::timeout(silence, stream.next_lines(|line| lines.push(line.to_vec()))) => read,
            _ = stop.changed() => return Ended::Stopped,
        };
        let at = clock.now();
        for line in lines {
            let Ok(event) = serde_json::from_slice::<Value>(&line) else {
                segment
                    .responses
                    .push(WatchResponse::Canceled("a line that is not JSON".into()));
                return Ended::Closed;
            };
            let object = &event["object"];
            let revision = resource_version(object);
            match (event["type"].as_str(), revision) {
                (Some("BOOKMARK"), Some(revision)) => {
                    segment.responses.push(WatchResponse::Progress(revision))
                }
                (Some(kind @ ("ADDED" | "MODIFIED" | "DELETED")), Some(revision)) => {
                    let name = object["metadata"]["name"].as_str().unwrap_or_default();
                    segment.responses.push(WatchResponse::Events {
                        at,
                        events: vec![WatchEvent {
                            revision,
                            key: key(name),
                            value: (kind != "DELETED").then(Vec::new),
                        }],
                    });
                }
                (Some("ERROR"), _) if object["code"].as_i64() == Some(410) => return Ended::Gone,
                _ => {
                    segment.responses.push(WatchResponse::Canceled(format!(
                        "unexpected watch event {}",
                        String::from_utf8_lossy(&line)
                    )));
                    return Ended::Closed;
                }
            }
        }
        match read {
            Ok(Ok(true)) => {}
            _ => return Ended::Closed,
        }
    }
}

/// The reference as the REST watches report it: every change of the
/// ConfigMaps' keys, values left out (the API shows objects, the store
/// keeps their encoding).
pub fn reference(events: &[WatchEvent]) -> Vec<WatchEvent> {
    events
        .iter()
        .filter(|e| e.key.starts_with(KEY_PREFIX))
        .map(|e| WatchEvent {
            revision: e.revision,
            key: e.key.clone(),
            value: e.value.as_ref().map(|_| Vec::new()),
        })
        .collect()
}
