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

struct Batch {
    revision: i64,
    events: Vec<Arc<RevisionEvents>>,
}

pub struct Notifier {
    queue: Option<SyncSender<Batch>>,
    thread: Option<thread::JoinHandle<()>>,
}

impl Notifier {
    pub fn start(hub: Arc<WatchHub>) -> std::io::Result<Notifier> {
        let (queue, batches) = sync_channel::<Batch>(NOTIFY_QUEUE);
        let thread = thread::Builder::new()
            .name("skiff-watch-notify".into())
            .spawn(move || {
                for batch in batches {
                    hub.publish(batch.revision, &batch.events);
                }
            })?;
        Ok(Notifier {
            queue: Some(queue),
            thread: Some(thread),
        })
    }

    /// Queues a committed batch (already visible to readers). Blocks only
    /// when fan-out is a whole queue behind: back-pressure on writers
    /// rather than unbounded memory.
    pub fn notify(&self, revision: i64, events: Vec<Arc<RevisionEvents>>) {
        if let Some(queue) = &self.queue {
            let _ = queue.send(Batch { revision, events });
        }
    }

    /// Delivers what is queued and stops the thread.
    pub fn stop(&mut self) {
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
