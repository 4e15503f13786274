//! The notifier thread: takes committed revisions from the writer through a
//! bounded queue and fans them out to watchers, so that many watchers cost
//! the writer (and every put's latency) nothing but one queue send.

use std::sync::mpsc::{sync_channel, SyncSender};
use std::sync::Arc;
use std::thread;

use super::hub::WatchHub;
use crate::mvcc::RevisionEvents;

/// Committed batches waiting for fan-out before the writer must wait.
pub const NOTIFY_QUEUE: usize = 1024;

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

pub struct Notifier {
    hub: Arc<WatchHub>,
    queue: Option<SyncSender<Notice>>,
    thread: Option<thread::JoinHandle<()>>,
}

impl Notifier {
    pub fn start(hub: Arc<WatchHub>) -> std::io::Result<Notifier> {
        let (queue, notices) = sync_channel::<Notice>(NOTIFY_QUEUE);
        hub.set_notice_queue(Some(queue.clone()));
        let owner = Arc::clone(&hub);
        let thread = thread::Builder::new()
            .name("skiff-watch-notify".into())
            .spawn(move || {
                for notice in notices {
                    match notice {
                        Notice::Batch { revision, events } => hub.publish(revision, &events),
                        Notice::Progress(watch_id) => hub.send_progress(watch_id),
                        Notice::Resync(revision) => hub.resync(revision),
                    }
                }
            })?;
        Ok(Notifier {
            hub: owner,
            queue: Some(queue),
            thread: Some(thread),
        })
    }

    /// After a snapshot replaced the state at `revision`: watchers catch
    /// up from it, in order after the batches queued before.
    pub fn resync(&self, revision: i64) {
        if let Some(queue) = &self.queue {
            let _ = queue.send(Notice::Resync(revision));
        }
    }

    /// Queues a committed batch (already visible to readers). Blocks only
    /// when fan-out is a whole queue behind: back-pressure on writers
    /// rather than unbounded memory.
    pub fn notify(&self, revision: i64, events: Vec<Arc<RevisionEvents>>) {
        if let Some(queue) = &self.queue {
            let _ = queue.send(Notice::Batch { revision, events });
        }
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
