//! The notifier: fans committed revisions out to watchers. With few
//! watchers (an API server's reflectors: one per resource) the writer does
//! it itself, which costs it a few microseconds and spares every write a
//! wake-up of another thread on its way to the watchers; with many (an etcd
//! client's thousands) the writer hands the batch to the notifier thread
//! through a bounded queue, so that they cost it nothing but a queue send.
//! Either way batches reach watchers in commit order: the writer fans out
//! itself only when the thread has nothing queued, and one at a time with
//! the thread.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
use std::sync::Arc;
use std::thread;

use parking_lot::Mutex;

use super::hub::WatchHub;
use crate::mvcc::RevisionEvents;

/// Committed batches waiting for fan-out before the writer must wait.
pub const NOTIFY_QUEUE: usize = 1024;

/// Watchers at most for the writer to fan a batch out itself.
pub const WRITER_FANS_OUT_TO: usize = 64;

pub(crate) enum Notice {
    /// A committed batch, visible to readers already.
    Batch {
        revision: i64,
        events: Vec<Arc<RevisionEvents>>,
    },
    /// A watcher asked for progress: answered after every batch queued
    /// before it, so it never reports less than a reader has seen.
    Progress(i64),
    /// A snapshot replaced the state at this revision: every watcher
    /// catches up from the new state (or learns it was compacted).
    Resync(i64),
}

/// The notifier thread's queue, shared with the hub (for progress
/// requests, which wait their turn behind queued batches).
pub(crate) struct NoticeQueue {
    sender: SyncSender<Notice>,
    turns: Arc<Turns>,
}

/// What the thread shares with those who queue for it (not the sender:
/// the thread ends when every sender is gone).
struct Turns {
    /// Notices sent and not handled yet.
    queued: AtomicUsize,
    /// Held while a notice is handled, by the thread or by the writer.
    turn: Mutex<()>,
}

impl NoticeQueue {
    /// Queues `notice`, waiting while the queue is full.
    fn send(&self, notice: Notice) {
        self.turns.queued.fetch_add(1, Ordering::AcqRel);
        if self.sender.send(notice).is_err() {
            self.turns.queued.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// Queues `notice` unless the queue is full; whether it was.
    pub(crate) fn try_send(&self, notice: Notice) -> bool {
        self.turns.queued.fetch_add(1, Ordering::AcqRel);
        match self.sender.try_send(notice) {
            Ok(()) => true,
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                self.turns.queued.fetch_sub(1, Ordering::AcqRel);
                false
            }
        }
    }
}

fn handle(hub: &WatchHub, notice: Notice) {
    match notice {
        Notice::Batch { revision, events } => hub.publish(revision, &events),
        Notice::Progress(watch_id) => hub.send_progress(watch_id),
        Notice::Resync(revision) => hub.resync(revision),
    }
}

pub struct Notifier {
    hub: Arc<WatchHub>,
    queue: Option<Arc<NoticeQueue>>,
    thread: Option<thread::JoinHandle<()>>,
    /// Batches the writer fanned out itself.
    by_writer: AtomicU64,
}

impl Notifier {
    pub fn start(hub: Arc<WatchHub>) -> std::io::Result<Notifier> {
        let (sender, notices) = sync_channel::<Notice>(NOTIFY_QUEUE);
        let turns = Arc::new(Turns {
            queued: AtomicUsize::new(0),
            turn: Mutex::new(()),
        });
        let queue = Arc::new(NoticeQueue {
            sender,
            turns: Arc::clone(&turns),
        });
        hub.set_notice_queue(Some(queue.clone()));
        let owner = Arc::clone(&hub);
        let thread = thread::Builder::new()
            .name("skiff-watch-notify".into())
            .spawn(move || {
                for notice in notices {
                    let _turn = turns.turn.lock();
                    handle(&hub, notice);
                    turns.queued.fetch_sub(1, Ordering::AcqRel);
                }
            })?;
        Ok(Notifier {
            hub: owner,
            queue: Some(queue),
            thread: Some(thread),
            by_writer: AtomicU64::new(0),
        })
    }

    /// After a snapshot replaced the state at `revision`: watchers catch
    /// up from it, in order after the batches queued before.
    pub fn resync(&self, revision: i64) {
        if let Some(queue) = &self.queue {
            queue.send(Notice::Resync(revision));
        }
    }

    /// Fans a committed batch (already visible to readers) out: here, when
    /// the thread has nothing queued and there are few watchers; otherwise
    /// through the thread's queue. Blocks only when fan-out is a whole
    /// queue behind: back-pressure on writers rather than unbounded memory.
    pub fn notify(&self, revision: i64, events: Vec<Arc<RevisionEvents>>) {
        let Some(queue) = &self.queue else {
            return;
        };
        {
            let _turn = queue.turns.turn.lock();
            if queue.turns.queued.load(Ordering::Acquire) == 0
                && self.hub.watchers() <= WRITER_FANS_OUT_TO
            {
                self.hub.publish(revision, &events);
                self.by_writer.fetch_add(1, Ordering::Relaxed);
                return;
            }
        }
        queue.send(Notice::Batch { revision, events });
    }

    /// Batches the writer fanned out itself, not the thread.
    pub fn fanned_out_by_writer(&self) -> u64 {
        self.by_writer.load(Ordering::Relaxed)
    }

    /// Delivers what is queued and stops the thread.
    pub fn stop(&mut self) {
        // The hub's handle on the queue goes first, or the thread would
        // wait for more forever.
        self.hub.set_notice_queue(None);
        self.queue.take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for Notifier {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::api::{Event, EventType, KeyValue, WatchRequest};
    use crate::mvcc::KvStore;
    use crate::watch::hub::WatchConfig;
    use crate::Watcher;

    fn hub(dir: &tempfile::TempDir) -> Arc<WatchHub> {
        let db = sled::Config::new().path(dir.path()).open().unwrap();
        let (kv, _) = KvStore::open(db.open_tree("mvcc").unwrap()).unwrap();
        WatchHub::new(Arc::new(kv), WatchConfig::default())
    }

    fn watch(hub: &Arc<WatchHub>, key: &str) -> Watcher {
        hub.watch(WatchRequest {
            key: key.into(),
            ..Default::default()
        })
        .unwrap()
    }

    /// A put of `key` committed at `revision`.
    fn put(key: &str, revision: i64) -> Vec<Arc<RevisionEvents>> {
        let kv = KeyValue {
            key: key.into(),
            create_revision: revision,
            mod_revision: revision,
            version: 1,
            value: b"v".to_vec(),
            lease: 0,
        };
        vec![Arc::new(RevisionEvents {
            revision,
            events: vec![Event {
                kind: EventType::Put,
                kv,
                prev_kv: None,
            }],
        })]
    }

    async fn revision_seen(watcher: &mut Watcher) -> i64 {
        let response = tokio::time::timeout(Duration::from_secs(5), watcher.next())
            .await
            .expect("an event in time")
            .expect("the watch is open");
        response.events[0].kv.mod_revision
    }

    #[tokio::test]
    async fn the_writer_fans_out_to_few_watchers_and_queues_for_many() {
        let dir = tempfile::tempdir().unwrap();
        let hub = hub(&dir);
        let notifier = Notifier::start(hub.clone()).unwrap();
        let mut first = watch(&hub, "/k");
        notifier.notify(1, put("/k", 1));
        assert_eq!(notifier.fanned_out_by_writer(), 1);
        assert_eq!(revision_seen(&mut first).await, 1);

        let mut more: Vec<Watcher> = (0..WRITER_FANS_OUT_TO).map(|_| watch(&hub, "/k")).collect();
        notifier.notify(2, put("/k", 2));
        assert_eq!(
            notifier.fanned_out_by_writer(),
            1,
            "the thread fanned out to 65"
        );
        assert_eq!(revision_seen(&mut first).await, 2);
        for watcher in &mut more {
            assert_eq!(revision_seen(watcher).await, 2);
        }
    }

    #[tokio::test]
    async fn batches_arrive_in_order_whoever_fans_them_out() {
        let dir = tempfile::tempdir().unwrap();
        let hub = hub(&dir);
        let notifier = Notifier::start(hub.clone()).unwrap();
        let mut watcher = watch(&hub, "/k");
        let mut crowd: Vec<Watcher> = (0..WRITER_FANS_OUT_TO).map(|_| watch(&hub, "/k")).collect();
        // Queued for the thread while the crowd watches; after it has left,
        // queued still while the thread has any left (in order behind
        // them), then fanned out by the writer.
        for revision in 1..=100 {
            if revision == 50 {
                crowd.clear();
            }
            notifier.notify(revision, put("/k", revision));
        }
        for revision in 1..=100 {
            assert_eq!(revision_seen(&mut watcher).await, revision);
        }
        // The thread counts a notice handled just after its fan-out.
        let turns = &notifier.queue.as_ref().unwrap().turns;
        for _ in 0..500 {
            if turns.queued.load(Ordering::Acquire) == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let before = notifier.fanned_out_by_writer();
        assert!(before <= 51, "the thread fanned out the first 49");
        for revision in 101..=110 {
            notifier.notify(revision, put("/k", revision));
        }
        for revision in 101..=110 {
            assert_eq!(revision_seen(&mut watcher).await, revision);
        }
        assert_eq!(
            notifier.fanned_out_by_writer(),
            before + 10,
            "the writer fans out once the queue is empty"
        );
    }
}
