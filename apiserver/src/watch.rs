//! `?watch=true`: a stream of newline-delimited JSON events over a chunked
//! response, served by the watch cache. From a resourceVersion, every change
//! after it, with no gap; with none (or "0"), the current objects as ADDED
//! first. Selectors apply to each event, so an object that stops matching is
//! seen as DELETED and one that starts matching as ADDED. A resourceVersion
//! older than the cache's ring gets a 200 stream holding one ERROR event
//! with a 410 Status, as Kubernetes answers.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use serde_json::{json, Value};

use crate::cache::{
    encode_event, filter_of, parse_revision, CachedObject, Delivery, EventType, Freshness,
    Subscription, TooOld, WatchEvent, WatchStart,
};
use crate::registry::{ListOptions, Registry, Target};
use crate::resources::ResourceType;
use crate::status::{ApiError, ApiResult};

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
    resource: &'static ResourceType,
    table: Option<(crate::table::TableVersion, crate::table::IncludeObject)>,
    convert: Option<Converter>,
}

impl Render {
    /// Plain JSON of the storage version: the event's shared line serves.
    fn is_plain(&self) -> bool {
        self.table.is_none() && self.convert.is_none()
    }

    /// The line of a cached event as this watcher sees it.
    fn event(&self, event: &WatchEvent, kind: EventType) -> Option<Bytes> {
        if self.is_plain() {
            return event.line(self.resource, kind);
        }
        let object = event.served(self.resource).ok()?;
        Some(render(kind.as_str(), self.resource, &object, self))
    }

    /// The ADDED line of an initial object.
    fn initial(&self, object: &CachedObject) -> Option<Bytes> {
        let served = object.served(self.resource, object.mod_revision).ok()?;
        Some(render("ADDED", self.resource, &served, self))
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
            encode_event(kind, &row)
        }
        None => encode_event(kind, object),
    }
}

fn bookmark(resource: &ResourceType, revision: i64, initial_end: bool) -> Bytes {
    let mut metadata = json!({"resourceVersion": revision.to_string()});
    if initial_end {
        metadata["annotations"] = json!({"k8s.io/initial-events-end": "true"});
    }
    encode_event(
        "BOOKMARK",
        &json!({"kind": resource.kind, "apiVersion": resource.api_version(), "metadata": metadata}),
    )
}

fn error_event(err: &ApiError) -> Bytes {
    encode_event("ERROR", &err.to_status())
}

/// Starts a watch: checks the request, registers it with the watch cache,
/// and returns the body stream of events.
pub async fn start(
    registry: &Registry,
    target: &Target<'_>,
    options: WatchOptions,
) -> ApiResult<EventStream> {
    let rv = options.list.resource_version.as_str();
    let start = if options.send_initial_events || rv.is_empty() || rv == "0" {
        let freshness = match rv {
            "" => Freshness::Consistent,
            "0" => Freshness::Any,
            rv => Freshness::AtLeast(parse_revision(rv)?),
        };
        WatchStart::Initial(freshness)
    } else {
        WatchStart::After(parse_revision(rv)?)
    };
    let filter = filter_of(target, &options.list);
    let subscription = match registry
        .cache
        .watch(target, filter, start, options.allow_bookmarks)
        .await?
    {
        Ok(subscription) => subscription,
        Err(TooOld { oldest }) => {
            // As Kubernetes: the watch starts, then says it is too old.
            let err = ApiError::gone(format!("too old resource version: {rv} ({oldest})"));
            return Ok(futures::stream::iter([Ok(error_event(&err))]).boxed());
        }
    };
    let watching = Watching::new(registry, target.resource, options, subscription);
    Ok(watching.boxed())
}

/// One open watch: its initial objects, its replay from the ring, then its
/// live queue, rendered as it asked.
struct Watching {
    render: Render,
    /// Flips when the server stops: a watch still replaying its initial
    /// objects or backlog then ends cleanly.
    stopping: tokio::sync::watch::Receiver<bool>,
    deadline: Option<tokio::time::Instant>,
    /// Fires at the deadline (`timeoutSeconds`): one timer for the watch's
    /// whole life. The server's stop needs no wake-up of its own: it
    /// closes every watcher's queue (`WatchCache::end_watches`), so a
    /// delivered event costs one queue read, not a poll of a signal that
    /// every watch shares.
    timer: Option<Pin<Box<tokio::time::Sleep>>>,
    initial: std::vec::IntoIter<Arc<CachedObject>>,
    /// The initial-events-end bookmark, sent after the initial objects.
    initial_end: Option<Bytes>,
    backlog: VecDeque<Arc<WatchEvent>>,
    /// The initial objects and backlog are sent: lines come from the queue.
    live: bool,
    subscription: Subscription,
}

impl Watching {
    fn new(
        registry: &Registry,
        resource: &'static ResourceType,
        options: WatchOptions,
        mut subscription: Subscription,
    ) -> Watching {
        let initial_end = (options.send_initial_events && options.allow_bookmarks)
            .then(|| bookmark(resource, subscription.revision, true));
        let deadline = options.timeout.map(|t| tokio::time::Instant::now() + t);
        let timer = deadline.map(|d| Box::pin(tokio::time::sleep_until(d)));
        let initial = std::mem::take(&mut subscription.initial).into_iter();
        let backlog = std::mem::take(&mut subscription.backlog).into();
        Watching {
            render: Render {
                resource,
                table: options.table,
                convert: options.convert,
            },
            stopping: registry.stopping(),
            deadline,
            timer,
            initial,
            initial_end,
            backlog,
            live: false,
            subscription,
        }
    }

    fn timed_out(&self) -> bool {
        self.deadline
            .is_some_and(|d| tokio::time::Instant::now() >= d)
    }

    /// The next line of the initial objects or the backlog, if any is left.
    fn replayed(&mut self) -> Option<Bytes> {
        for object in self.initial.by_ref() {
            if let Some(line) = self.render.initial(&object) {
                return Some(line);
            }
        }
        if let Some(line) = self.initial_end.take() {
            return Some(line);
        }
        while let Some(event) = self.backlog.pop_front() {
            let Some(kind) = self.subscription.filter.event_type(&event) else {
                continue;
            };
            if let Some(line) = self.render.event(&event, kind) {
                return Some(line);
            }
        }
        None
    }

    /// The next line to send; `None` when the watch ends. Polled directly
    /// as the response body (no future built per line): a write's event
    /// is one such poll per watcher.
    fn poll_line(&mut self, cx: &mut Context<'_>) -> Poll<Option<Bytes>> {
        if self.timed_out() {
            return Poll::Ready(None);
        }
        if !self.live {
            // A watch that starts while the server stops ends before its
            // first line; once live, the stop closes its queue instead.
            if *self.stopping.borrow() {
                return Poll::Ready(None);
            }
            if let Some(line) = self.replayed() {
                return Poll::Ready(Some(line));
            }
            self.live = true;
        }
        loop {
            match self.subscription.queue.poll_recv(cx) {
                // Dropped for not keeping up, or the cache relisted: the
                // client starts again from its last resourceVersion.
                Poll::Ready(None) => return Poll::Ready(None),
                Poll::Ready(Some(Delivery::Event(event, kind))) => {
                    if let Some(line) = self.render.event(&event, kind) {
                        return Poll::Ready(Some(line));
                    }
                }
                Poll::Ready(Some(Delivery::Bookmark(revision))) => {
                    return Poll::Ready(Some(bookmark(self.render.resource, revision, false)));
                }
                Poll::Pending => break,
            }
        }
        match self.timer.as_mut().map(|timer| timer.as_mut().poll(cx)) {
            Some(Poll::Ready(())) => Poll::Ready(None),
            _ => Poll::Pending,
        }
    }
}

impl futures::Stream for Watching {
    type Item = Result<Bytes, std::convert::Infallible>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.get_mut().poll_line(cx).map(|line| line.map(Ok))
    }
}
