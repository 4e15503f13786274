//! `?watch=true`: a stream of newline-delimited JSON events over a chunked
//! response. From a resourceVersion, every change after it, with no gap; with
//! none (or "0"), the current objects as ADDED first. Selectors apply to each
//! event, so an object that stops matching is seen as DELETED and one that
//! starts matching as ADDED. A compacted resourceVersion ends the stream with
//! an ERROR event holding a 410 Status.

use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use serde_json::{json, Value};

use crate::object;
use crate::registry::{storage_error, ListOptions, Registry, Target};
use crate::resources::ResourceType;
use crate::status::{ApiError, ApiResult};
use crate::storage::{prefix_end, Change, ChangeKind, ChangeStream, StorageError};

/// How often a watch that asked for bookmarks gets one.
const BOOKMARK_INTERVAL: Duration = Duration::from_secs(60);

/// The response body: one JSON event per line.
pub type EventStream = futures::stream::BoxStream<'static, Result<Bytes, std::convert::Infallible>>;

pub struct WatchOptions {
    pub list: ListOptions,
    pub allow_bookmarks: bool,
    pub timeout: Option<Duration>,
    /// `sendInitialEvents=true`: the current objects first, then a bookmark
    /// marking their end.
    pub send_initial_events: bool,
    /// Events carry a one-row Table instead of the object (kubectl `get -w`).
    pub table: Option<(crate::table::TableVersion, crate::table::IncludeObject)>,
    /// Turns each stored object into the version the watch asked for
    /// (None: the storage version is the one asked).
    pub convert: Option<Converter>,
}

/// Converts a stored object to the version a client asked for.
pub type Converter = std::sync::Arc<dyn Fn(&Value) -> Value + Send + Sync>;

#[derive(Clone)]
struct Render {
    table: Option<(crate::table::TableVersion, crate::table::IncludeObject)>,
    convert: Option<Converter>,
}

impl WatchOptions {
    fn render(&self) -> Render {
        Render {
            table: self.table,
            convert: self.convert.clone(),
        }
    }
}

/// The event of `object`, as a Table row when the watch asked for tables.
fn render(kind: &str, resource: &ResourceType, object: &Value, how: &Render) -> Bytes {
    let converted;
    let object = match &how.convert {
        Some(convert) => {
            converted = convert(object);
            &converted
        }
        None => object,
    };
    match how.table {
        Some((version, include)) => {
            let row = crate::table::table(
                resource,
                std::slice::from_ref(object),
                None,
                include,
                version,
                jiff::Timestamp::now(),
            );
            event(kind, &row)
        }
        None => event(kind, object),
    }
}

fn event(kind: &str, object: &Value) -> Bytes {
    // "type" first, as Kubernetes writes it (and people read it).
    let mut line = format!("{{\"type\":\"{kind}\",\"object\":").into_bytes();
    line.extend(serde_json::to_vec(object).unwrap_or_default());
    line.extend_from_slice(b"}\n");
    Bytes::from(line)
}

fn bookmark(resource: &ResourceType, revision: i64, initial_end: bool) -> Bytes {
    let mut metadata = json!({"resourceVersion": revision.to_string()});
    if initial_end {
        metadata["annotations"] = json!({"k8s.io/initial-events-end": "true"});
    }
    event(
        "BOOKMARK",
        &json!({"kind": resource.kind, "apiVersion": resource.api_version(), "metadata": metadata}),
    )
}

fn error_event(err: &ApiError) -> Bytes {
    event("ERROR", &err.to_status())
}

/// Everything the stream needs once it has started.
struct Watching {
    /// Flips when the server stops: the stream then ends cleanly.
    stopping: tokio::sync::watch::Receiver<bool>,
    resource: &'static ResourceType,
    options: WatchOptions,
    changes: ChangeStream,
    /// The newest revision sent (for bookmarks).
    revision: i64,
}

/// Starts a watch: checks the request, sends the initial objects if asked,
/// and returns the body stream of events.
pub async fn start(
    registry: &Registry,
    target: &Target<'_>,
    options: WatchOptions,
) -> ApiResult<EventStream> {
    let resource = target.resource;
    let prefix = match (resource.namespaced, target.namespace) {
        (true, Some(namespace)) => resource.namespace_prefix(namespace),
        _ => resource.storage_prefix(),
    };
    let end = prefix_end(&prefix);
    let mut initial = Vec::new();
    let rv = options.list.resource_version.as_str();
    let send_initial = options.send_initial_events || rv.is_empty() || rv == "0";
    let from = if send_initial && (rv.is_empty() || rv == "0" || options.send_initial_events) {
        let mut list_options = ListOptions {
            labels: options.list.labels.clone(),
            fields: options.list.fields.clone(),
            ..ListOptions::default()
        };
        if options.send_initial_events && !(rv.is_empty() || rv == "0") {
            list_options.resource_version = rv.to_string();
            list_options.resource_version_match = "NotOlderThan".into();
        }
        let listed = registry.list(target, &list_options).await?;
        for item in listed["items"].as_array().cloned().unwrap_or_default() {
            initial.push(render("ADDED", resource, &item, &options.render()));
        }
        let revision: i64 = listed["metadata"]["resourceVersion"]
            .as_str()
            .and_then(|r| r.parse().ok())
            .unwrap_or(0);
        if options.send_initial_events && options.allow_bookmarks {
            initial.push(bookmark(resource, revision, true));
        }
        revision
    } else {
        rv.parse::<i64>()
            .map_err(|_| ApiError::bad_request(format!("invalid resourceVersion {rv:?}")))?
    };
    let changes = match registry.storage().watch(&prefix, &end, from + 1).await {
        Ok(changes) => changes,
        Err(StorageError::Compacted { compacted, .. }) => {
            // As Kubernetes: the watch starts, then says it is too old.
            let err = ApiError::gone(format!("too old resource version: {from} ({compacted})"));
            return Ok(futures::stream::iter([Ok(error_event(&err))]).boxed());
        }
        Err(err) => return Err(storage_error(target, "", err)),
    };
    let watching = Watching {
        stopping: registry.stopping(),
        resource,
        options,
        changes,
        revision: from,
    };
    let initial = futures::stream::iter(initial.into_iter().map(Ok));
    Ok(initial.chain(live(watching)).boxed())
}

fn live(
    watching: Watching,
) -> impl futures::Stream<Item = Result<Bytes, std::convert::Infallible>> + Send {
    let deadline = watching
        .options
        .timeout
        .map(|t| tokio::time::Instant::now() + t);
    futures::stream::unfold(
        (watching, deadline, Vec::<Bytes>::new(), false),
        |(mut w, deadline, mut pending, mut ended)| async move {
            loop {
                if let Some(line) = pending.pop() {
                    return Some((Ok(line), (w, deadline, pending, ended)));
                }
                if ended || *w.stopping.borrow() {
                    return None;
                }
                let sleep_until = deadline.unwrap_or_else(|| {
                    tokio::time::Instant::now() + Duration::from_secs(3600 * 24 * 365)
                });
                let bookmark_at = tokio::time::Instant::now() + BOOKMARK_INTERVAL;
                tokio::select! {
                    changes = w.changes.next() => match changes {
                        None => return None,
                        Some(Err(StorageError::Compacted { requested, compacted })) => {
                            let err = ApiError::gone(format!("too old resource version: {requested} ({compacted})"));
                            pending.push(error_event(&err));
                            ended = true;
                        }
                        Some(Err(err)) => {
                            let err = ApiError::internal(format!("the watch ended: {err}"));
                            pending.push(error_event(&err));
                            ended = true;
                        }
                        Some(Ok(changes)) => {
                            let mut lines = Vec::new();
                            for change in changes {
                                w.revision = w.revision.max(change.revision);
                                if let Some(line) = translate(w.resource, &w.options.list, &change, &w.options.render()) {
                                    lines.push(line);
                                }
                            }
                            // `pending` is popped from the back.
                            lines.reverse();
                            pending = lines;
                        }
                    },
                    _ = tokio::time::sleep_until(sleep_until) => return None,
                    _ = w.stopping.changed() => return None,
                    _ = tokio::time::sleep_until(bookmark_at), if w.options.allow_bookmarks => {
                        pending.push(bookmark(w.resource, w.revision, false));
                    }
                }
            }
        },
    )
}

/// One store change as the watch event this watcher sees, if any.
fn translate(
    resource: &'static ResourceType,
    options: &ListOptions,
    change: &Change,
    table: &Render,
) -> Option<Bytes> {
    let previous = change
        .prev
        .as_ref()
        .and_then(|bytes| object::from_stored(resource, bytes, change.revision).ok());
    let was = previous.as_ref().is_some_and(|p| options.selects(p));
    match change.kind {
        ChangeKind::Put => {
            let current = object::from_stored(resource, &change.value, change.revision).ok()?;
            let is = options.selects(&current);
            match (previous.is_some(), was, is) {
                (_, true, true) => Some(render("MODIFIED", resource, &current, table)),
                (_, false, true) => Some(render("ADDED", resource, &current, table)),
                (true, true, false) => Some(render("DELETED", resource, &current, table)),
                _ => None,
            }
        }
        ChangeKind::Delete => match (was, previous.as_ref()) {
            (true, Some(previous)) => Some(render("DELETED", resource, previous, table)),
            _ => None,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::selectors::LabelSelector;

    fn pod(app: &str) -> Bytes {
        Bytes::from(
            serde_json::to_vec(&json!({"metadata": {"name": "p", "labels": {"app": app}}}))
                .unwrap(),
        )
    }

    fn kinds(options: &ListOptions, change: &Change) -> Option<(String, String)> {
        let line = translate(
            crate::resources::find("", "v1", "pods").unwrap(),
            options,
            change,
            &Render {
                table: None,
                convert: None,
            },
        )?;
        let event: Value = serde_json::from_slice(&line).unwrap();
        assert!(line.starts_with(b"{\"type\":"), "type first");
        assert!(line.ends_with(b"\n"), "one event per line");
        Some((
            event["type"].as_str().unwrap().to_string(),
            event["object"]["metadata"]["resourceVersion"]
                .as_str()
                .unwrap()
                .to_string(),
        ))
    }

    #[test]
    fn selectors_turn_changes_into_the_events_a_watcher_sees() {
        let options = ListOptions {
            labels: Some(LabelSelector::parse("app=web").unwrap()),
            ..ListOptions::default()
        };
        let put = |value: Bytes, prev: Option<Bytes>| Change {
            kind: ChangeKind::Put,
            key: "/registry/core/pods/default/p".into(),
            value,
            revision: 9,
            prev,
        };
        let ev = |t: &str| Some((t.to_string(), "9".to_string()));
        assert_eq!(kinds(&options, &put(pod("web"), None)), ev("ADDED"));
        assert_eq!(
            kinds(&options, &put(pod("web"), Some(pod("web")))),
            ev("MODIFIED")
        );
        assert_eq!(
            kinds(&options, &put(pod("web"), Some(pod("db")))),
            ev("ADDED"),
            "starts matching"
        );
        assert_eq!(
            kinds(&options, &put(pod("db"), Some(pod("web")))),
            ev("DELETED"),
            "stops matching"
        );
        assert_eq!(kinds(&options, &put(pod("db"), Some(pod("db")))), None);
        let delete = |prev: Bytes| Change {
            kind: ChangeKind::Delete,
            key: "/registry/core/pods/default/p".into(),
            value: Bytes::new(),
            revision: 9,
            prev: Some(prev),
        };
        assert_eq!(kinds(&options, &delete(pod("web"))), ev("DELETED"));
        assert_eq!(kinds(&options, &delete(pod("db"))), None);
    }
}
