//! One watch as its client sees it: a stream of responses, each holding
//! the events of one revision that match the watch's range and filters.

use std::sync::Arc;

use tokio::sync::mpsc;

use super::hub::{WatchHub, WatchMessage};
use crate::api::{Event, EventType, ResponseHeader, WatchRequest, WatchResponse};
use crate::mvcc::KeyRange;

pub struct Watcher {
    id: i64,
    hub: Arc<WatchHub>,
    rx: mpsc::Receiver<WatchMessage>,
    range: KeyRange,
    /// Events below this revision were asked not to be sent.
    min_rev: i64,
    no_put: bool,
    no_delete: bool,
    prev_kv: bool,
    ended: bool,
}

impl Watcher {
    pub(crate) fn new(
        id: i64,
        hub: Arc<WatchHub>,
        rx: mpsc::Receiver<WatchMessage>,
        range: KeyRange,
        min_rev: i64,
        req: &WatchRequest,
    ) -> Self {
        Watcher {
            id,
            hub,
            rx,
            range,
            min_rev,
            no_put: req.no_put,
            no_delete: req.no_delete,
            prev_kv: req.prev_kv,
            ended: false,
        }
    }

    pub fn id(&self) -> i64 {
        self.id
    }

    /// The next response: events of one revision, a progress notification,
    /// or a final "compacted" cancellation. `None` once the watch has ended.
    pub async fn next(&mut self) -> Option<WatchResponse> {
        if self.ended {
            return None;
        }
        loop {
            let message = self.rx.recv().await?;
            if let Some(resp) = self.respond(message) {
                return Some(resp);
            }
        }
    }

    /// Like [`Watcher::next`] without waiting: `None` when nothing is ready.
    pub fn try_next(&mut self) -> Option<WatchResponse> {
        while !self.ended {
            let message = self.rx.try_recv().ok()?;
            if let Some(resp) = self.respond(message) {
                return Some(resp);
            }
        }
        None
    }

    /// Asks for a progress notification (sent once the watch is caught up).
    pub fn request_progress(&self) {
        self.hub.request_progress(self.id);
    }

    fn respond(&mut self, message: WatchMessage) -> Option<WatchResponse> {
        let mut resp = WatchResponse {
            watch_id: self.id,
            ..Default::default()
        };
        match message {
            WatchMessage::Events(batch) => {
                if batch.revision < self.min_rev {
                    return None;
                }
                resp.events = batch
                    .events
                    .iter()
                    .filter(|e| self.wanted(e))
                    .cloned()
                    .collect();
                if resp.events.is_empty() {
                    return None;
                }
                if self.prev_kv {
                    self.fill_prev_kv(&mut resp.events);
                }
                resp.header = ResponseHeader {
                    revision: batch.revision,
                };
            }
            WatchMessage::Progress(revision) => resp.header = ResponseHeader { revision },
            WatchMessage::Compacted(revision) => {
                self.ended = true;
                resp.header = ResponseHeader {
                    revision: self.hub.kv().current_revision(),
                };
                resp.compact_revision = revision;
                resp.canceled = true;
                resp.cancel_reason = "mvcc: required revision has been compacted".into();
            }
        }
        Some(resp)
    }

    fn wanted(&self, event: &Event) -> bool {
        let filtered = match event.kind {
            EventType::Put => self.no_put,
            EventType::Delete => self.no_delete,
        };
        !filtered && self.range.contains(&event.kv.key)
    }

    /// The previous value of each key, read at the revision before the
    /// event. Absent when it was compacted away meanwhile, as in etcd.
    fn fill_prev_kv(&self, events: &mut [Event]) {
        for event in events {
            let before = event.kv.mod_revision - 1;
            event.prev_kv = self.hub.kv().get_at(&event.kv.key, before).ok().flatten();
        }
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.hub.cancel(self.id);
    }
}
