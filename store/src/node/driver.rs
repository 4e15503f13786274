//! The Raft driver: one thread owns the member's [`RaftCore`]. It takes
//! every proposal waiting, hands them to raft, and lets one ready persist
//! them with one fdatasync (group commit); it ticks raft's clock, applies
//! what commits, answers callers, and passes events to the watch notifier.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use crate::error::{Result, StoreError};
use crate::mvcc::compaction::Compactor;
use crate::mvcc::CommandResult;
use crate::raft::transport::{PeerMember, SnapshotReport, Transport};
use crate::raft::{PeerChange, RaftCore};
use crate::watch::Notifier;
use raft::eraftpb::Message;

/// raft-rs counts time in ticks; etcd's heartbeat interval is 100 ms.
pub(crate) const TICK: Duration = Duration::from_millis(100);

pub(crate) struct Proposal {
    pub data: Vec<u8>,
    pub reply: oneshot::Sender<Result<CommandResult>>,
    /// The proposal's share of the queued-bytes budget, held until answered.
    pub budget: Option<tokio::sync::OwnedSemaphorePermit>,
}

pub(crate) enum DriverRequest {
    Propose(Proposal),
    /// The engine is durable up to this log index: the log before it can go.
    Release(u64),
    /// A linearizable read waits for this answer before reading locally.
    ReadIndex(oneshot::Sender<Result<()>>),
    /// Hand leadership to this member (only a leader can).
    TransferLeader(u64, oneshot::Sender<Result<()>>),
    /// How far member `id`'s log matches the leader's (only the leader
    /// answers; `None` if raft tracks no such member).
    LearnerReadiness(u64, oneshot::Sender<Result<Option<crate::raft::Readiness>>>),
    /// Add or remove a member; answered with the voters once the change is
    /// applied.
    ChangeMembership(
        raft::eraftpb::ConfChangeV2,
        oneshot::Sender<Result<Vec<u64>>>,
    ),
    /// Finish what is queued before this, then stop.
    Stop,
}

/// Counters a benchmark reads to show how writes shared syncs.
#[derive(Debug, Default)]
pub struct WriterStats {
    pub syncs: AtomicU64,
    pub entries: AtomicU64,
    /// Linearizable reads confirmed through raft's read index.
    pub read_index_reads: AtomicU64,
    /// Proposals handed to raft and not yet applied.
    pub proposals_pending: std::sync::atomic::AtomicI64,
    /// Proposals that were never applied (timed out, no leader, stopped).
    pub proposals_failed: AtomicU64,
}

/// What the rest of the store may know of raft's view, kept current by
/// the driver.
#[derive(Debug, Default)]
pub struct Leadership {
    pub is_leader: AtomicBool,
    pub leader_id: AtomicU64,
    pub term: AtomicU64,
    pub commit_index: AtomicU64,
    /// This member was removed from the cluster.
    pub removed: AtomicBool,
    /// This member is a learner: it does not vote, and refuses clients
    /// all but serializable reads (as etcd's learners do).
    pub is_learner: AtomicBool,
    /// Times a new leader became known to this member.
    pub leader_changes: AtomicU64,
    /// This member is the only voter: nothing commits without it.
    pub sole_voter: AtomicBool,
    /// This member leads and is the only voter, has committed in its term
    /// and applied all that is committed: its applied state holds every
    /// acknowledged write, so a linearizable read needs no read index.
    pub reads_local: AtomicBool,
}

/// A proposal raft has taken, waiting to be applied.
struct Waiting {
    reply: oneshot::Sender<Result<CommandResult>>,
    _budget: Option<tokio::sync::OwnedSemaphorePermit>,
}

pub(crate) struct Driver {
    pub core: RaftCore,
    pub compactor: Compactor,
    pub notifier: Notifier,
    pub max_batch: usize,
    pub stats: Arc<WriterStats>,
    waiting: HashMap<u64, Waiting>,
    leadership: Arc<Leadership>,
    transport: Option<Transport>,
    inbound: Option<mpsc::Receiver<Message>>,
    /// Whether snapshots sent reached their member.
    snapshot_reports: Option<mpsc::UnboundedReceiver<SnapshotReport>>,
    /// Readers waiting for the quorum to confirm a read index, by read id.
    reads_asked: HashMap<u64, Vec<oneshot::Sender<Result<()>>>>,
    /// Readers whose read index is known, waiting for it to be applied.
    reads_confirmed: Vec<(u64, Vec<oneshot::Sender<Result<()>>>)>,
    /// Membership changes proposed here, by proposal id.
    membership_waiting: HashMap<u64, oneshot::Sender<Result<Vec<u64>>>>,
    /// Looked at before each ready is persisted and applied, so that the
    /// reserve is given back before the log or sled finds the disk full.
    space: Option<Arc<super::disk_space::SpaceGuard>>,
    /// See [`super::StoreConfig::exit_on_storage_failure`].
    exit_on_storage_failure: bool,
}

impl Driver {
    pub fn new(
        core: RaftCore,
        compactor: Compactor,
        notifier: Notifier,
        max_batch: usize,
        stats: Arc<WriterStats>,
        leadership: Arc<Leadership>,
    ) -> Self {
        // Known before the first ready, so a learner never serves as a voter.
        leadership
            .is_learner
            .store(core.is_learner(), Ordering::Release);
        Driver {
            core,
            compactor,
            notifier,
            max_batch,
            stats,
            waiting: HashMap::new(),
            leadership,
            transport: None,
            inbound: None,
            snapshot_reports: None,
            reads_asked: HashMap::new(),
            reads_confirmed: Vec::new(),
            membership_waiting: HashMap::new(),
            space: None,
            exit_on_storage_failure: false,
        }
    }

    /// Looks at `space` before each write, and on a failed write ends the
    /// process if `exit` (see [`super::durability::stop_member`]).
    pub fn on_storage_failure(
        mut self,
        space: Arc<super::disk_space::SpaceGuard>,
        exit: bool,
    ) -> Self {
        self.space = Some(space);
        self.exit_on_storage_failure = exit;
        self
    }

    /// Connects the member to its peers: messages out through `transport`,
    /// messages in from `inbound`.
    pub fn with_peers(
        mut self,
        transport: Transport,
        inbound: mpsc::Receiver<Message>,
        snapshot_reports: mpsc::UnboundedReceiver<SnapshotReport>,
    ) -> Self {
        self.transport = Some(transport);
        self.inbound = Some(inbound);
        self.snapshot_reports = Some(snapshot_reports);
        self
    }

    /// Runs until stopped or until every request sender is gone. The
    /// thread is the driver's own, so blocking on fsync here is fine.
    pub fn run(mut self, requests: mpsc::Receiver<DriverRequest>) {
        let runtime = match tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
        {
            Ok(runtime) => runtime,
            Err(err) => {
                tracing::error!(error = %err, "cannot start the raft driver");
                return;
            }
        };
        if let Err(err) = runtime.block_on(self.serve(requests)) {
            super::durability::stop_member(
                self.exit_on_storage_failure,
                "writing the raft log or applying it",
                &err,
            );
        }
        // Stopped: reads wait for a driver that no longer answers.
        self.leadership.reads_local.store(false, Ordering::Release);
        self.fail_waiting(|| StoreError::Stopped);
        self.compactor.stop();
        self.notifier.stop();
    }

    async fn serve(&mut self, mut requests: mpsc::Receiver<DriverRequest>) -> Result<()> {
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut batch = Vec::with_capacity(self.max_batch);
        let mut inbound = self.inbound.take();
        let mut reports = self.snapshot_reports.take();
        loop {
            tokio::select! {
                report = next_report(&mut reports) => match report {
                    Some((to, delivered)) => self.core.report_snapshot(to, delivered),
                    None => reports = None,
                },
                request = requests.recv() => match request {
                    Some(request) => batch.push(request),
                    None => return Ok(()),
                },
                message = next_message(&mut inbound) => {
                    match message {
                        Some(message) => self.core.step(message),
                        None => inbound = None,
                    }
                    if let Some(inbound) = inbound.as_mut() {
                        while let Ok(message) = inbound.try_recv() {
                            self.core.step(message);
                        }
                    }
                }
                _ = tick.tick() => {
                    self.core.tick();
                    self.waiting.retain(|_, w| !w.reply.is_closed());
                    self.reads_asked.retain(|_, readers| {
                        readers.retain(|r| !r.is_closed());
                        !readers.is_empty()
                    });
                }
            }
            while batch.len() < self.max_batch {
                match requests.try_recv() {
                    Ok(request) => batch.push(request),
                    Err(_) => break,
                }
            }
            let stop = self.take(&mut batch)?;
            self.advance()?;
            self.stats
                .proposals_pending
                .store(self.waiting.len() as i64, Ordering::Relaxed);
            if stop {
                return Ok(());
            }
        }
    }

    /// Hands a batch of requests to raft; returns whether to stop.
    fn take(&mut self, batch: &mut Vec<DriverRequest>) -> Result<bool> {
        let mut stop = false;
        let mut release = None;
        let mut readers = Vec::new();
        for request in batch.drain(..) {
            match request {
                DriverRequest::Propose(p) => match self.core.propose(p.data) {
                    Ok(id) => {
                        self.waiting.insert(
                            id,
                            Waiting {
                                reply: p.reply,
                                _budget: p.budget,
                            },
                        );
                    }
                    Err(err) => {
                        let _ = p.reply.send(Err(err));
                    }
                },
                DriverRequest::Release(index) => release = release.max(Some(index)),
                DriverRequest::ReadIndex(reader) => readers.push(reader),
                DriverRequest::TransferLeader(to, reply) => {
                    let result = if !self.core.is_leader() {
                        Err(StoreError::InvalidConfig(
                            "only the leader can hand over leadership; ask the leader".into(),
                        ))
                    } else if !self.core.voters().contains(&to) {
                        Err(StoreError::InvalidConfig(format!(
                            "member {to:x} is not a voter"
                        )))
                    } else {
                        self.core.transfer_leader(to);
                        Ok(())
                    };
                    let _ = reply.send(result);
                }
                DriverRequest::LearnerReadiness(id, reply) => {
                    let _ = reply.send(self.core.learner_readiness(id));
                }
                DriverRequest::ChangeMembership(change, reply) => {
                    match self.core.propose_conf_change(change) {
                        Ok(proposal) => {
                            self.membership_waiting.insert(proposal, reply);
                        }
                        Err(err) => {
                            let _ = reply.send(Err(err));
                        }
                    }
                }
                DriverRequest::Stop => stop = true,
            }
        }
        if !readers.is_empty() {
            if self.core.leader_id() == 0 {
                for reader in readers {
                    let _ = reader.send(Err(StoreError::NoLeader));
                }
            } else {
                // Every read that arrived together shares one read index.
                let id = self.core.read_index();
                self.reads_asked.insert(id, readers);
            }
        }
        if let Some(index) = release {
            if let Err(err) = self.core.compact_log(index) {
                tracing::warn!(error = %err, index, "could not compact the raft log");
            }
        }
        Ok(stop)
    }

    /// For a member that is the only voter: takes the lead at once and
    /// applies everything its log holds before the store answers anyone,
    /// so an acknowledged write is readable right after a restart.
    pub fn lead_alone(&mut self) -> Result<()> {
        for _ in 0..1000 {
            if !self.core.is_leader() {
                self.core.campaign()?;
            }
            self.advance()?;
            let applied = self.core.kv().applied_index();
            if self.core.is_leader() && applied >= self.core.last_index() {
                return Ok(());
            }
        }
        Err(StoreError::storage(
            "replaying the log",
            "the single member did not catch up with its own log",
        ))
    }

    /// Persists, applies and answers what raft has ready.
    pub fn advance(&mut self) -> Result<()> {
        if let Some(space) = &self.space {
            space.check();
        }
        let transport = self.transport.as_ref();
        let sent = self.core.advance_sending(|messages| {
            if let Some(transport) = transport {
                for message in messages {
                    transport.send(message);
                }
            }
        });
        let advanced = match sent {
            Ok(advanced) => advanced,
            Err(err) => {
                self.fail_waiting(|| StoreError::storage("writing the log", &err));
                return Err(err);
            }
        };
        if advanced.synced {
            self.stats.syncs.fetch_add(1, Ordering::Relaxed);
            self.stats
                .entries
                .fetch_add(advanced.persisted_entries as u64, Ordering::Relaxed);
        }
        if let Some(revision) = advanced.installed_snapshot {
            self.notifier.resync(revision);
        }
        if let Some(committed) = advanced.committed {
            // The core has published the revision to readers already: an
            // acknowledged write is always readable.
            self.notifier.notify(committed.revision, committed.events);
            for job in committed.compactions {
                self.compactor.submit(job);
            }
        }
        for (id, result) in advanced.answers {
            if let Some(waiting) = self.waiting.remove(&id) {
                let _ = waiting.reply.send(result);
            }
        }
        for change in advanced.peer_changes {
            self.change_peer(change);
        }
        for (id, conf_state) in advanced.conf_changes {
            if let Some(reply) = self.membership_waiting.remove(&id) {
                let _ = reply.send(Ok(conf_state.voters.clone()));
            }
        }
        for (id, index) in advanced.reads {
            if let Some(readers) = self.reads_asked.remove(&id) {
                self.reads_confirmed.push((index, readers));
            }
        }
        let applied = self.core.kv().applied_index();
        self.reads_confirmed.retain_mut(|(index, readers)| {
            if *index > applied {
                return true;
            }
            for reader in readers.drain(..) {
                let _ = reader.send(Ok(()));
            }
            false
        });
        self.note_leadership();
        Ok(())
    }

    /// Starts or stops sending to a member added or removed.
    fn change_peer(&mut self, change: PeerChange) {
        let me = self.core.id();
        match change {
            PeerChange::Added(member) => {
                tracing::info!(member = format_args!("{:x}", member.id), peer_urls = ?member.peer_urls, "member added");
                self.reach(&member);
            }
            PeerChange::Updated(member) => {
                tracing::info!(member = format_args!("{:x}", member.id), peer_urls = ?member.peer_urls, "member's peer URLs updated");
                self.reach(&member);
            }
            PeerChange::Removed(id) if id == me => {
                tracing::error!(
                    member = format_args!("{id:x}"),
                    "this member was removed from the cluster; it takes no part any more (stop it, and add it again to bring it back)"
                );
                self.leadership.removed.store(true, Ordering::Release);
            }
            PeerChange::Removed(id) => {
                tracing::info!(member = format_args!("{id:x}"), "member removed");
                if let Some(transport) = self.transport.as_mut() {
                    transport.remove_peer(id);
                }
            }
        }
    }

    /// Sends to `member` from now on, at its (new) peer address.
    fn reach(&mut self, member: &crate::api::Member) {
        let addr = member
            .peer_urls
            .iter()
            .find_map(|url| super::members::parse_peer_url(url).ok());
        if let (Some(transport), Some(addr)) = (self.transport.as_mut(), addr) {
            transport.add_peer(PeerMember {
                id: member.id,
                name: member.name.clone(),
                addr,
            });
        }
    }

    fn note_leadership(&mut self) {
        self.leadership
            .sole_voter
            .store(self.core.is_sole_voter(), Ordering::Release);
        self.leadership
            .reads_local
            .store(self.core.reads_are_local(), Ordering::Release);
        self.leadership
            .is_learner
            .store(self.core.is_learner(), Ordering::Release);
        let is_leader = self.core.is_leader();
        let was_leader = self.leadership.is_leader.swap(is_leader, Ordering::AcqRel);
        let leader = self.core.leader_id();
        let before = self.leadership.leader_id.swap(leader, Ordering::AcqRel);
        if leader != 0 && leader != before {
            self.leadership
                .leader_changes
                .fetch_add(1, Ordering::Relaxed);
        }
        self.leadership
            .term
            .store(self.core.term(), Ordering::Release);
        self.leadership
            .commit_index
            .store(self.core.commit_index(), Ordering::Release);
        if is_leader && !was_leader {
            // The core has extended every lease as it took the lead.
            tracing::info!(
                member = format_args!("{:x}", self.core.id()),
                term = self.core.term(),
                "became leader"
            );
        }
    }

    fn fail_waiting(&mut self, error: impl Fn() -> StoreError) {
        for (_, waiting) in self.waiting.drain() {
            let _ = waiting.reply.send(Err(error()));
        }
    }
}

async fn next_report(
    reports: &mut Option<mpsc::UnboundedReceiver<SnapshotReport>>,
) -> Option<SnapshotReport> {
    match reports {
        Some(reports) => reports.recv().await,
        None => std::future::pending().await,
    }
}

async fn next_message(inbound: &mut Option<mpsc::Receiver<Message>>) -> Option<Message> {
    match inbound {
        Some(inbound) => inbound.recv().await,
        None => std::future::pending().await,
    }
}
