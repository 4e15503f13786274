//! Physical compaction: removes records below a compacted revision from
//! disk on its own thread, in small batches, so writers never wait for it.

use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::sync::Arc;
use std::thread;

use super::apply::CompactionJob;
use super::kvstore::{KvStore, META_COMPACT_FINISHED};
use super::revision::Revision;
use crate::error::Result;

/// Records removed per sled batch.
const CHUNK: usize = 1000;

pub struct Compactor {
    jobs: Option<mpsc::Sender<CompactionJob>>,
    thread: Option<thread::JoinHandle<()>>,
}

impl Compactor {
    pub fn start(kv: Arc<KvStore>) -> std::io::Result<Compactor> {
        let (tx, rx) = mpsc::channel::<CompactionJob>();
        let thread = thread::Builder::new()
            .name("skiff-compactor".into())
            .spawn(move || {
                for job in rx {
                    if let Err(err) = compact_on_disk(&kv, &job) {
                        tracing::error!(revision = job.revision, error = %err, "compaction failed; it resumes at the next start");
                    }
                }
            })?;
        Ok(Compactor {
            jobs: Some(tx),
            thread: Some(thread),
        })
    }

    pub fn submit(&self, job: CompactionJob) {
        if let Some(jobs) = &self.jobs {
            let _ = jobs.send(job);
        }
    }

    /// Finishes queued jobs and stops the thread.
    pub fn stop(&mut self) {
        self.jobs.take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for Compactor {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Removes every record below `job.revision` that `job.keep` does not name.
/// Records at the compacted revision itself all stay: they are its state
/// (and its tombstones, which a watch from that revision must still see).
pub(crate) fn compact_on_disk(kv: &KvStore, job: &CompactionJob) -> Result<usize> {
    // Every record below the revision is applied: in sled once this returns.
    kv.flush_behind()?;
    let end = Revision::new(job.revision, 0).to_key();
    let mut start = Revision::new(0, 0).to_key().to_vec();
    let mut removed = 0;
    loop {
        let mut batch = sled::Batch::default();
        let mut in_batch = 0;
        let mut bytes = 0u64;
        let mut last = None;
        for item in kv.tree().range(start.clone()..end.to_vec()) {
            let (k, v) = item?;
            last = Some(k.clone());
            let Some(rev) = Revision::from_key(&k) else {
                continue;
            };
            if !job.keep.contains(&rev) {
                bytes += (k.len() + v.len()) as u64;
                batch.remove(k);
                in_batch += 1;
            }
            if in_batch >= CHUNK {
                break;
            }
        }
        let Some(last) = last else { break };
        // An open read view still holds these records.
        let no_view_open = kv.removals.write();
        kv.tree().apply_batch(batch)?;
        drop(no_view_open);
        let _ = kv
            .record_bytes
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |held| {
                Some(held.saturating_sub(bytes))
            });
        removed += in_batch;
        // Some records of the compaction are gone, not all, and it is not
        // marked finished: the next start resumes it.
        crate::crash_point!("compaction::mid");
        start = last.to_vec();
        start.push(0);
        if in_batch < CHUNK {
            break;
        }
    }
    let no_view_open = kv.removals.write();
    kv.tree()
        .insert(META_COMPACT_FINISHED, &job.revision.to_le_bytes())?;
    drop(no_view_open);
    kv.compact_finished.send_replace(job.revision);
    tracing::info!(revision = job.revision, removed, "compaction finished");
    Ok(removed)
}
