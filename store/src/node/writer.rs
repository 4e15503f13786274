//! The single writer: takes every proposal waiting, appends them to the
//! WAL with one fdatasync (group commit), applies them in one sled batch,
//! publishes the new revision to readers and watchers, then answers.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};

use crate::command::Command;
use crate::error::{Result, StoreError};
use crate::lease::Lessor;
use crate::mvcc::compaction::Compactor;
use crate::mvcc::{Applier, CommandResult, KvStore};
use crate::wal::{Wal, WalRecord};
use crate::watch::Notifier;

/// Raft terms arrive with replication; a single member writes term 1.
pub(crate) const SINGLE_MEMBER_TERM: u64 = 1;

pub(crate) struct Proposal {
    pub command: Command,
    pub data: Vec<u8>,
    pub reply: oneshot::Sender<Result<CommandResult>>,
    /// The proposal's share of the in-flight byte budget, returned when it
    /// has been answered.
    pub budget: Option<tokio::sync::OwnedSemaphorePermit>,
}

/// A proposal in the batch being written, keeping its byte budget until
/// it is answered.
struct Pending {
    index: u64,
    command: Command,
    reply: oneshot::Sender<Result<CommandResult>>,
    _budget: Option<tokio::sync::OwnedSemaphorePermit>,
}

pub(crate) enum WriterRequest {
    Propose(Proposal),
    /// The state up to this log index is durable in sled: drop older WAL.
    Release(u64),
    /// Finish what is queued before this, then stop.
    Stop,
}

/// Counters a benchmark reads to show how writes shared syncs.
#[derive(Debug, Default)]
pub struct WriterStats {
    pub syncs: AtomicU64,
    pub entries: AtomicU64,
}

pub(crate) struct Writer {
    pub wal: Wal,
    pub kv: Arc<KvStore>,
    pub lessor: Arc<Lessor>,
    pub notifier: Notifier,
    pub compactor: Compactor,
    pub next_index: u64,
    pub max_batch: usize,
    pub stats: Arc<WriterStats>,
}

impl Writer {
    pub fn run(mut self, mut requests: mpsc::Receiver<WriterRequest>) {
        let mut batch = Vec::with_capacity(self.max_batch);
        while let Some(first) = requests.blocking_recv() {
            batch.push(first);
            while batch.len() < self.max_batch {
                match requests.try_recv() {
                    Ok(request) => batch.push(request),
                    Err(_) => break,
                }
            }
            match self.write_batch(&mut batch) {
                Ok(true) => {}
                Ok(false) => break,
                Err(err) => {
                    tracing::error!(error = %err, "the store cannot write any more; stopping its writer");
                    break;
                }
            }
        }
        self.compactor.stop();
        self.notifier.stop();
    }

    /// Writes one batch; returns whether to go on.
    fn write_batch(&mut self, batch: &mut Vec<WriterRequest>) -> Result<bool> {
        let mut proposals = Vec::with_capacity(batch.len());
        let mut release = None;
        let mut stop = false;
        for request in batch.drain(..) {
            match request {
                WriterRequest::Propose(p) => {
                    self.wal.append(&WalRecord::Entry {
                        index: self.next_index,
                        term: SINGLE_MEMBER_TERM,
                        data: p.data,
                    });
                    proposals.push(Pending {
                        index: self.next_index,
                        command: p.command,
                        reply: p.reply,
                        _budget: p.budget,
                    });
                    self.next_index += 1;
                }
                WriterRequest::Release(index) => release = release.max(Some(index)),
                WriterRequest::Stop => stop = true,
            }
        }
        if !proposals.is_empty() {
            if let Err(err) = self.wal.sync() {
                let err = StoreError::from(err);
                for p in proposals {
                    let _ = p
                        .reply
                        .send(Err(StoreError::storage("syncing the log", &err)));
                }
                return Err(err);
            }
            self.stats.syncs.fetch_add(1, Ordering::Relaxed);
            self.stats
                .entries
                .fetch_add(proposals.len() as u64, Ordering::Relaxed);
            self.apply(proposals)?;
        }
        if let Some(index) = release {
            if let Err(err) = self.wal.release_to(index) {
                tracing::warn!(error = %err, index, "could not release old log segments");
            }
        }
        Ok(!stop)
    }

    fn apply(&mut self, proposals: Vec<Pending>) -> Result<()> {
        let mut applier = Applier::new(&self.kv, &self.lessor);
        let mut answers = Vec::with_capacity(proposals.len());
        for p in proposals {
            let result = applier
                .apply(p.index, &p.command)
                .unwrap_or_else(|| Err(StoreError::storage("applying", "index applied twice")));
            answers.push((p, result));
        }
        let committed = match applier.commit() {
            Ok(committed) => committed,
            Err(err) => {
                for (p, _) in answers {
                    let _ = p
                        .reply
                        .send(Err(StoreError::storage("applying a batch", &err)));
                }
                return Err(err);
            }
        };
        // Readers see the batch before anyone is answered: an acknowledged
        // write is always readable. Watchers get it from the notifier.
        self.kv.publish_revision(committed.revision);
        self.notifier.notify(committed.revision, committed.events);
        for job in committed.compactions {
            self.compactor.submit(job);
        }
        for (p, result) in answers {
            let _ = p.reply.send(result);
        }
        Ok(())
    }
}
