//! One watch as its client sees it: a stream of responses, each holding
//! the events of one revision that match the watch's range and filters.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio::sync::mpsc;

use super::hub::{WatchHub, WatchMessage};
use crate::api::{Event, EventType, ResponseHeader, WatchRequest, WatchResponse};
use crate::mvcc::{KeyRange, RevisionEvents};

pub struct Watcher {
    id: i64,
    hub: Arc<WatchHub>,
    rx: mpsc::Receiver<WatchMessage>,
    /// Set by the hub while this watch is unsynced (catching up from disk).
    behind: Arc<AtomicBool>,
    /// Revisions of a catch-up round not handed out yet.
    pending: VecDeque<Arc<RevisionEvents>>,
    range: KeyRange,
    /// Events below this revision were asked not to be sent.
    min_rev: i64,
    /// The revision of the last events sent (0: none yet). A watch sends
    /// each revision once, in order; a revision at or below this one again
    /// would be the hub handing a batch over twice.
    sent: i64,
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
        behind: Arc<AtomicBool>,
        range: KeyRange,
        min_rev: i64,
        req: &WatchRequest,
    ) -> Self {
        Watcher {
            id,
            hub,
            rx,
            behind,
            pending: VecDeque::new(),
            range,
            min_rev,
            sent: 0,
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
            if let Some(resp) = self.next_pending() {
                return Some(resp);
            }
            let message = self.rx.recv().await?;
            self.received();
            if let Some(resp) = self.respond(message) {
                return Some(resp);
            }
        }
    }

    /// Like [`Watcher::next`] without waiting: `None` when nothing is ready.
    pub fn try_next(&mut self) -> Option<WatchResponse> {
        while !self.ended {
            if let Some(resp) = self.next_pending() {
                return Some(resp);
            }
            let message = self.rx.try_recv().ok()?;
            self.received();
            if let Some(resp) = self.respond(message) {
                return Some(resp);
            }
        }
        None
    }

    /// After a message was taken: a watch catching up that has read all it
    /// was sent wakes the syncer for the next round at once, rather than at
    /// the syncer's next look (a tenth of a second), which would bound its
    /// catch-up to a round per look.
    fn received(&self) {
        if self.behind.load(Ordering::Acquire) && self.rx.is_empty() {
            self.hub.wake_syncer();
        }
    }

    /// The next revision of a catch-up round that this watch shows.
    fn next_pending(&mut self) -> Option<WatchResponse> {
        while let Some(batch) = self.pending.pop_front() {
            if let Some(resp) = self.events_response(&batch) {
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
            WatchMessage::Events(batch) => return self.events_response(&batch),
            WatchMessage::History(batches) => {
                self.pending.extend(batches);
                return self.next_pending();
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

    /// The response for one revision's events: those this watch wants,
    /// `None` when there are none.
    fn events_response(&mut self, batch: &RevisionEvents) -> Option<WatchResponse> {
        if batch.revision < self.min_rev {
            return None;
        }
        if batch.revision <= self.sent {
            debug_assert!(
                false,
                "watch {} was handed revision {} after sending {}",
                self.id, batch.revision, self.sent
            );
            tracing::error!(
                watch = self.id,
                revision = batch.revision,
                sent = self.sent,
                "a watch was handed a revision it has sent; not sending it again"
            );
            return None;
        }
        let mut events: Vec<Event> = batch
            .events
            .iter()
            .filter(|e| self.wanted(e))
            .cloned()
            .collect();
        if events.is_empty() {
            return None;
        }
        if self.prev_kv {
            self.fill_prev_kv(&mut events);
        }
        self.sent = batch.revision;
        Some(WatchResponse {
            watch_id: self.id,
            header: ResponseHeader {
                revision: batch.revision,
            },
            events,
            ..Default::default()
        })
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::KeyValue;
    use crate::node::testing::open_temp;

    fn put_at(revision: i64) -> WatchMessage {
        WatchMessage::Events(Arc::new(RevisionEvents {
            revision,
            events: vec![Event {
                kind: EventType::Put,
                kv: KeyValue {
                    key: b"/a/1".to_vec(),
                    mod_revision: revision,
                    ..Default::default()
                },
                prev_kv: None,
            }],
        }))
    }

    /// A revision handed over twice (or out of order) is never sent twice:
    /// debug builds stop on it, release builds drop it.
    #[tokio::test]
    async fn a_revision_is_sent_once_and_in_order() {
        let (store, _dir) = open_temp().await;
        let mut watch = store
            .watch(WatchRequest {
                key: b"/a/".to_vec(),
                range_end: b"/a0".to_vec(),
                ..Default::default()
            })
            .unwrap();
        let sent = watch.respond(put_at(5)).map(|r| r.header.revision);
        assert_eq!(sent, Some(5));
        for stale in [5, 4] {
            let again = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                watch.respond(put_at(stale))
            }));
            let debug = cfg!(debug_assertions);
            match again {
                Err(_) => assert!(debug, "only debug builds stop"),
                Ok(resp) => {
                    assert!(!debug, "a debug build stops");
                    assert!(resp.is_none(), "revision {stale} sent again");
                }
            }
        }
        assert_eq!(watch.respond(put_at(6)).map(|r| r.header.revision), Some(6));
    }
}
