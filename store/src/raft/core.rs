//! The Raft core of one member: its `RawNode`, its log (the WAL on disk,
//! the [`LogStore`] in memory) and its engine. It is driven by `tick`,
//! `step` and `propose`, and drained by `advance`, which persists with one
//! fdatasync per ready, returns the messages to send and applies committed
//! entries. It keeps no clock and starts no thread of its own work, so the
//! same inputs give the same outputs: under the writer thread in
//! production, under the simulator in tests.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use protobuf::Message as _;
use raft::eraftpb::{ConfChange, ConfChangeV2, ConfState, Entry, EntryType, HardState, Message};
use raft::{RawNode, StateRole};

use super::log_store::LogStore;
use super::logger::raft_logger;
use crate::command::Command;
use crate::error::{Result, StoreError};
use crate::lease::Lessor;
use crate::mvcc::{Applier, CommandResult, Committed, KvStore};
use crate::wal::{Wal, WalOptions, WalRecord};

#[derive(Debug, Clone)]
pub struct CoreConfig {
    /// This member's Raft ID (not 0).
    pub id: u64,
    /// The voters of a new cluster; ignored once the data directory has a
    /// membership of its own.
    pub initial_voters: Vec<u64>,
    /// The learners beside them (a learner joining a running cluster
    /// knows itself as one before the leader's first word).
    pub initial_learners: Vec<u64>,
    pub election_tick: usize,
    pub heartbeat_tick: usize,
    /// How long one tick is: a new leader extends every lease by an
    /// election timeout (`election_tick` ticks).
    pub tick: std::time::Duration,
    /// Pins the election timeout to exactly `election_tick` ticks instead of
    /// raft-rs's random pick, so a simulation is decided by its own seed.
    pub fixed_election_timeout: bool,
    pub wal_dir: PathBuf,
    /// The member's data directory: the state database is in `db/`, a
    /// snapshot being installed in `snap/`.
    pub data_dir: PathBuf,
    pub wal: WalOptions,
    /// Entries a leader keeps for a follower that is behind before it
    /// compacts past it (that follower then gets a snapshot).
    pub catch_up_entries: u64,
    /// Distinguishes this run's proposals from an earlier run's entries that
    /// are replayed after a restart.
    pub proposal_epoch: u64,
}

/// What one `advance` produced.
#[derive(Debug, Default)]
pub struct Advanced {
    /// Messages for other members.
    pub messages: Vec<Message>,
    /// Results of this member's proposals that were applied, by proposal id.
    pub answers: Vec<(u64, Result<CommandResult>)>,
    /// Read indexes confirmed by a quorum: (read id, index). A read is
    /// linearizable once this member has applied up to its index.
    pub reads: Vec<(u64, u64)>,
    /// Membership changes proposed here that were applied: (proposal id,
    /// the membership after the change).
    pub conf_changes: Vec<(u64, ConfState)>,
    /// Whether this ready's records were fdatasynced.
    pub synced: bool,
    /// Entries written to the WAL by this ready's one fdatasync.
    pub persisted_entries: usize,
    /// The applied batch: its revision and watch events.
    pub committed: Option<Committed>,
    /// Members added or removed by the changes applied.
    pub peer_changes: Vec<PeerChange>,
    /// A snapshot from the leader replaced the state; its revision.
    /// Watchers must catch up from the new state.
    pub installed_snapshot: Option<i64>,
}

/// A member added to or removed from the cluster, for the transport.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PeerChange {
    Added(crate::api::Member),
    /// A member's peer URLs changed (etcd's MemberUpdate).
    Updated(crate::api::Member),
    Removed(u64),
}

/// How far a member's log matches the leader's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Readiness {
    /// The last index the member's log is known to match.
    pub learner_match: u64,
    /// The leader's own last matched index.
    pub leader_match: u64,
}

impl Readiness {
    /// etcd's rule: a learner may be promoted once its match index is at
    /// least 90% of the leader's.
    pub fn is_ready(&self) -> bool {
        self.learner_match as f64 >= self.leader_match as f64 * 0.9
    }
}

pub struct RaftCore {
    /// Whether this member led as of the last `advance`.
    was_leader: bool,
    /// What a new leader adds to every lease's remaining TTL.
    lease_extension: std::time::Duration,
    /// Changes applied and not yet handed out by `advance`.
    peer_changes: Vec<PeerChange>,
    data_dir: PathBuf,
    catch_up_entries: u64,
    id: u64,
    epoch: u64,
    node: RawNode<LogStore>,
    wal: Wal,
    kv: Arc<KvStore>,
    lessor: Arc<Lessor>,
    next_proposal: u64,
    next_read: u64,
}

/// Entries a leader keeps for a follower that is behind before it lets
/// the log go and sends that follower a snapshot instead (etcd: 5 000).
pub const CATCH_UP_ENTRIES: u64 = 10_000;

/// Marks a read index request's context (proposals' contexts are 24 bytes).
const READ_CONTEXT: u8 = b'r';

impl RaftCore {
    /// Opens the member's log over an engine opened on the same data
    /// directory. Committed entries past the engine's applied index come
    /// back from the first `advance`, so replay is ordinary apply.
    pub fn open(
        config: CoreConfig,
        kv: Arc<KvStore>,
        lessor: Arc<Lessor>,
        conf_state: Option<ConfState>,
    ) -> Result<RaftCore> {
        let (wal, replayed) = replay_wal(&config)?;
        if kv.applied_index() < replayed.compacted.0 {
            // A snapshot was being installed when the member stopped.
            finish_install(&config, &kv, &lessor, replayed.compacted.0)?;
        }
        let conf_state = match kv.tree().get(crate::mvcc::kvstore::META_CONF_STATE)? {
            Some(bytes) => Some(decode_conf_state(&bytes)?),
            None => conf_state,
        };
        let bootstrap = conf_state.is_none() && replayed.entries.is_empty();
        let conf_state = conf_state.unwrap_or_else(|| ConfState {
            voters: config.initial_voters.clone(),
            learners: config.initial_learners.clone(),
            ..Default::default()
        });
        if bootstrap {
            persist_conf_state(&kv, &conf_state)?;
        }
        let applied = kv.applied_index();
        let mut hard_state = replayed.hard_state;
        // Everything applied was committed, even if the commit index on disk
        // is older (raft-rs does not persist every commit advance).
        hard_state.commit = hard_state.commit.max(applied);
        let mut store =
            LogStore::new(hard_state, conf_state, replayed.compacted).with_engine(Arc::clone(&kv));
        let entries: Vec<Entry> = replayed.entries.into_values().collect();
        store.append(&entries);
        check_log_covers_state(&config, &store, applied)?;

        let raft_config = raft::Config {
            id: config.id,
            election_tick: config.election_tick,
            heartbeat_tick: config.heartbeat_tick,
            applied,
            max_size_per_msg: 1024 * 1024,
            max_inflight_msgs: 256,
            check_quorum: true,
            pre_vote: true,
            min_election_tick: if config.fixed_election_timeout {
                config.election_tick
            } else {
                0
            },
            max_election_tick: if config.fixed_election_timeout {
                config.election_tick + 1
            } else {
                0
            },
            ..Default::default()
        };
        raft_config
            .validate()
            .map_err(|e| StoreError::storage("configuring raft", e))?;
        let node = RawNode::new(&raft_config, store, &raft_logger(config.id))
            .map_err(|e| StoreError::storage("starting raft", e))?;
        Ok(RaftCore {
            was_leader: false,
            lease_extension: config.tick * config.election_tick as u32,
            peer_changes: Vec::new(),
            data_dir: config.data_dir.clone(),
            catch_up_entries: config.catch_up_entries,
            id: config.id,
            epoch: config.proposal_epoch,
            node,
            wal,
            kv,
            lessor,
            next_proposal: 1,
            next_read: 1,
        })
    }

    pub fn id(&self) -> u64 {
        self.id
    }

    pub fn kv(&self) -> &Arc<KvStore> {
        &self.kv
    }

    pub fn lessor(&self) -> &Arc<Lessor> {
        &self.lessor
    }

    /// The leader this member knows of (0: none).
    pub fn leader_id(&self) -> u64 {
        self.node.raft.leader_id
    }

    pub fn is_leader(&self) -> bool {
        self.node.raft.state == StateRole::Leader
    }

    pub fn term(&self) -> u64 {
        self.node.raft.term
    }

    pub fn commit_index(&self) -> u64 {
        self.node.raft.raft_log.committed
    }

    pub fn tick(&mut self) {
        self.node.tick();
    }

    pub fn campaign(&mut self) -> Result<()> {
        self.node
            .campaign()
            .map_err(|e| StoreError::storage("campaigning", e))
    }

    /// Hands a message from another member to raft. Messages from an
    /// unknown or stale member are dropped by raft itself.
    pub fn step(&mut self, message: Message) {
        if let Err(err) = self.node.step(message) {
            tracing::debug!(member = self.id, error = %err, "dropped a raft message");
        }
    }

    /// Proposes an encoded command. A follower that knows the leader
    /// forwards it; the answer comes from `advance` once it is applied here.
    pub fn propose(&mut self, data: Vec<u8>) -> Result<u64> {
        let id = self.next_proposal;
        self.next_proposal += 1;
        match self.node.propose(self.context(id), data) {
            Ok(()) => Ok(id),
            Err(raft::Error::ProposalDropped) => Err(StoreError::NoLeader),
            Err(err) => Err(StoreError::storage("proposing", err)),
        }
    }

    /// Drops the log up to `index`, whose effects are durable in the engine,
    /// and releases the WAL segments that held it. A leader keeps the
    /// entries a follower a little behind still needs; one further behind
    /// gets a snapshot instead.
    pub fn compact_log(&mut self, index: u64) -> Result<()> {
        let mut upto = index.min(self.kv.applied_index());
        if self.is_leader() {
            let slowest = self
                .node
                .raft
                .prs()
                .iter()
                .map(|(_, progress)| progress.matched)
                .min()
                .unwrap_or(upto);
            upto = upto.min(slowest.max(upto.saturating_sub(self.catch_up_entries)));
        }
        let sending_snapshot = self
            .node
            .raft
            .prs()
            .iter()
            .any(|(_, progress)| progress.state == raft::ProgressState::Snapshot);
        if !sending_snapshot {
            // A snapshot is a copy of the whole state: keep it no longer
            // than someone needs it.
            self.node.mut_store().forget_snapshot();
        }
        let store = self.node.mut_store();
        if upto <= store.compacted_index() {
            return Ok(());
        }
        let term = raft::Storage::term(store, upto)
            .map_err(|e| StoreError::storage("compacting the raft log", e))?;
        store.compact(upto);
        self.wal.append(&WalRecord::Snapshot { index: upto, term });
        self.wal.sync()?;
        self.wal.release_to(upto)?;
        Ok(())
    }

    /// The first index still in the log (after the last compaction).
    pub fn first_index(&self) -> u64 {
        self.node.raft.raft_log.first_index()
    }

    /// The last index in the log.
    pub fn last_index(&self) -> u64 {
        self.node.raft.raft_log.last_index()
    }

    /// Proposes a membership change (add or remove voters or learners); the
    /// new membership comes back from `advance` once it is applied here.
    pub fn propose_conf_change(&mut self, change: ConfChangeV2) -> Result<u64> {
        let id = self.next_proposal;
        self.next_proposal += 1;
        match self.node.propose_conf_change(self.context(id), change) {
            Ok(()) => Ok(id),
            Err(raft::Error::ProposalDropped) => Err(StoreError::NoLeader),
            Err(err) => Err(StoreError::InvalidConfig(format!(
                "membership change refused: {err}"
            ))),
        }
    }

    /// Hands leadership to `to` (a voter that is up to date); raft-rs
    /// aborts the transfer if it does not complete within an election.
    pub fn transfer_leader(&mut self, to: u64) {
        self.node.transfer_leader(to);
    }

    /// Whether this member alone decides what is committed and has applied
    /// all of it: it leads, it is the only voter (of both halves of a
    /// joint configuration), its term has a committed entry (so its commit
    /// index is final), and nothing committed waits to be applied. Every
    /// acknowledged write is then in its applied state. A change of
    /// membership or leadership can only come in a later ready.
    pub fn reads_are_local(&self) -> bool {
        let raft = &self.node.raft;
        if raft.state != StateRole::Leader || !raft.commit_to_current_term() {
            return false;
        }
        self.is_sole_voter() && self.kv.applied_index() >= raft.raft_log.committed
    }

    /// Whether this member is the only voter (of both halves of a joint
    /// configuration): the cluster cannot commit anything without it.
    pub fn is_sole_voter(&self) -> bool {
        let voters = self.node.raft.prs().conf().voters().ids();
        let mut voters = voters.iter();
        voters.next() == Some(self.id) && voters.next().is_none()
    }

    /// Whether this member is a learner (it does not vote).
    pub fn is_learner(&self) -> bool {
        self.node.raft.prs().conf().learners().contains(&self.id)
    }

    /// Whether member `id` has caught up enough to vote, as the leader
    /// sees it (etcd's `isLearnerReady`): its log matches at least 90% of
    /// the leader's. `None` if raft tracks no such member; an error if
    /// this member does not lead (only the leader knows).
    pub fn learner_readiness(&self, id: u64) -> Result<Option<Readiness>> {
        if !self.is_leader() {
            return Err(StoreError::NotLeader);
        }
        let prs = self.node.raft.prs();
        let Some(progress) = prs.get(id) else {
            return Ok(None);
        };
        let leader_match = prs.get(self.id).map_or(0, |p| p.matched);
        Ok(Some(Readiness {
            learner_match: progress.matched,
            leader_match,
        }))
    }

    /// The current voters.
    pub fn voters(&self) -> Vec<u64> {
        let mut voters: Vec<u64> = self.node.raft.prs().conf().voters().ids().iter().collect();
        voters.sort_unstable();
        voters
    }

    fn context(&self, id: u64) -> Vec<u8> {
        let mut context = Vec::with_capacity(24);
        context.extend_from_slice(&self.id.to_le_bytes());
        context.extend_from_slice(&self.epoch.to_le_bytes());
        context.extend_from_slice(&id.to_le_bytes());
        context
    }

    /// Asks the quorum for the index a linearizable read must wait for;
    /// nothing is written to the log. The answer comes from `advance`.
    pub fn read_index(&mut self) -> u64 {
        let id = self.next_read;
        self.next_read += 1;
        let mut context = vec![READ_CONTEXT];
        context.extend_from_slice(&self.context(id));
        self.node.read_index(context);
        id
    }

    fn own_read(&self, context: &[u8]) -> Option<u64> {
        let (&kind, rest) = context.split_first()?;
        if kind != READ_CONTEXT {
            return None;
        }
        self.own_proposal(rest)
    }

    /// The id of one of this run's proposals, from an entry's context.
    fn own_proposal(&self, context: &[u8]) -> Option<u64> {
        if context.len() != 24 {
            return None;
        }
        let word =
            |i: usize| u64::from_le_bytes(context[i * 8..i * 8 + 8].try_into().unwrap_or_default());
        (word(0) == self.id && word(1) == self.epoch).then(|| word(2))
    }

    /// Handles what raft has ready and returns every message to send in
    /// `Advanced::messages` (the simulator's way). See [`Self::advance_sending`].
    pub fn advance(&mut self) -> Result<Advanced> {
        let mut messages = Vec::new();
        let mut out = self.advance_sending(|batch| messages.extend(batch))?;
        out.messages = messages;
        Ok(out)
    }

    /// Handles what raft has ready: hands messages that need nothing
    /// persisted to `send` at once (a leader's appends then travel while it
    /// syncs), persists new entries and hard state with at most one
    /// fdatasync (none when only the commit index moved, as etcd), sends
    /// what had to wait for that, and applies committed entries in one
    /// engine batch.
    pub fn advance_sending(&mut self, mut send: impl FnMut(Vec<Message>)) -> Result<Advanced> {
        let mut out = Advanced::default();
        if !self.node.has_ready() {
            return Ok(out);
        }
        let mut ready = self.node.ready();
        send(ready.take_messages());
        for state in ready.take_read_states() {
            if let Some(id) = self.own_read(&state.request_ctx) {
                out.reads.push((id, state.index));
            }
        }
        // The leader's appends are on their way; its own copy is not yet.
        crate::crash_point!("raft::before_persist" if !ready.entries().is_empty());
        if !ready.snapshot().is_empty() {
            let revision = self.install_snapshot(ready.snapshot().clone(), ready.hs())?;
            out.installed_snapshot = Some(revision);
        }

        for entry in ready.entries() {
            let data = entry
                .write_to_bytes()
                .map_err(|e| StoreError::storage("encoding a raft entry", e))?;
            self.wal.append(&WalRecord::Entry {
                index: entry.index,
                term: entry.term,
                data,
            });
        }
        if let Some(hs) = ready.hs() {
            // Written either way; synced only if raft needs it now (a
            // commit index alone rides along with the next sync).
            self.wal.append(&WalRecord::HardState {
                term: hs.term,
                vote: hs.vote,
                commit: hs.commit,
            });
        }
        if ready.must_sync() {
            self.wal.sync()?;
            out.synced = true;
            out.persisted_entries = ready.entries().len();
            // Durable here; the votes and acks that promise it are not sent.
            crate::crash_point!("raft::after_persist");
        }
        let store = self.node.mut_store();
        store.append(ready.entries());
        if let Some(hs) = ready.hs() {
            store.set_hard_state(hs.clone());
        }
        send(ready.take_persisted_messages());

        let kv = Arc::clone(&self.kv);
        let lessor = Arc::clone(&self.lessor);
        let mut applier = Applier::new(&kv, &lessor);
        let committed = ready.take_committed_entries();
        self.apply_entries(&mut applier, committed, &mut out)?;
        let mut light = self.node.advance(ready);
        if let Some(commit) = light.commit_index() {
            self.node.mut_store().set_commit(commit);
            // raft-rs counts this commit index as persisted and will not
            // hand it out again: write it now, to ride along with the next
            // sync (or the state flush), so that a restarted member applies
            // what it had acknowledged without waiting for a leader.
            self.wal.append(&WalRecord::HardState {
                term: self.node.raft.term,
                vote: self.node.raft.vote,
                commit,
            });
        }
        send(light.take_messages());
        self.apply_entries(&mut applier, light.take_committed_entries(), &mut out)?;
        self.node.advance_apply();

        let committed = applier.commit()?;
        self.kv.publish_revision(committed.revision);
        // Applied (and readable), committed and durable; nobody told yet.
        crate::crash_point!("apply::before_answer" if !out.answers.is_empty());
        out.committed = Some(committed);
        out.peer_changes = std::mem::take(&mut self.peer_changes);
        let is_leader = self.is_leader();
        if is_leader && !self.was_leader {
            // The old leader's clock is gone with it: every lease gets its
            // whole remaining TTL, plus an election's worth, from now.
            self.lessor.promote(self.lease_extension);
        }
        self.was_leader = is_leader;
        Ok(out)
    }

    /// Tells raft whether a snapshot reached member `to`; after a failure
    /// it is sent again.
    pub fn report_snapshot(&mut self, to: u64, delivered: bool) {
        let status = if delivered {
            raft::SnapshotStatus::Finish
        } else {
            raft::SnapshotStatus::Failure
        };
        self.node.report_snapshot(to, status);
    }

    /// Replaces the state with a snapshot from the leader: the blob is
    /// kept in `snap/` and the log marked before the state changes, so a
    /// crash in between finishes the install on the next start.
    fn install_snapshot(
        &mut self,
        snapshot: raft::eraftpb::Snapshot,
        hard_state: Option<&HardState>,
    ) -> Result<i64> {
        let meta = snapshot.get_metadata().clone();
        crate::mvcc::snapshot::decode(&snapshot.data)?;
        let path = snap_path(&self.data_dir, meta.index);
        write_durably(&path, &snapshot.data)
            .map_err(|e| StoreError::storage("keeping a received snapshot", e))?;
        if let Some(hs) = hard_state {
            self.wal.append(&WalRecord::HardState {
                term: hs.term,
                vote: hs.vote,
                commit: hs.commit.max(meta.index),
            });
        }
        self.wal.append(&WalRecord::Snapshot {
            index: meta.index,
            term: meta.term,
        });
        self.wal.sync()?;
        let revision = install_from(&self.kv, &self.lessor, &snapshot.data)?;
        let _ = std::fs::remove_file(&path);
        self.wal.release_to(meta.index)?;
        self.node.mut_store().apply_snapshot(&meta);
        tracing::info!(
            member = format_args!("{:x}", self.id),
            index = meta.index,
            term = meta.term,
            revision,
            bytes = snapshot.data.len(),
            "installed a snapshot from the leader"
        );
        Ok(revision)
    }

    fn apply_entries(
        &mut self,
        applier: &mut Applier,
        entries: Vec<Entry>,
        out: &mut Advanced,
    ) -> Result<()> {
        for entry in entries {
            match entry.get_entry_type() {
                EntryType::EntryNormal if entry.data.is_empty() => applier.skip(entry.index),
                EntryType::EntryNormal => {
                    let result = Command::decode(&entry.data).and_then(|command| {
                        let result = applier.apply(entry.index, &command).unwrap_or_else(|| {
                            Err(StoreError::storage("applying", "entry applied twice"))
                        });
                        if let (Ok(CommandResult::UpdateMember(Some(member))), true) =
                            (&result, matches!(command, Command::UpdateMember { .. }))
                        {
                            self.peer_changes.push(PeerChange::Updated(member.clone()));
                        }
                        result
                    });
                    if let Some(id) = self.own_proposal(&entry.context) {
                        out.answers.push((id, result));
                    }
                }
                EntryType::EntryConfChange | EntryType::EntryConfChangeV2 => {
                    let conf_state = self.apply_conf_change(applier, &entry)?;
                    if let Some(id) = self.own_proposal(&entry.context) {
                        out.conf_changes.push((id, conf_state));
                    }
                }
            }
        }
        Ok(())
    }

    fn apply_conf_change(&mut self, applier: &mut Applier, entry: &Entry) -> Result<ConfState> {
        let change: ConfChangeV2 = if entry.get_entry_type() == EntryType::EntryConfChange {
            let mut v1 = ConfChange::default();
            v1.merge_from_bytes(&entry.data)
                .map_err(|e| StoreError::storage("decoding a membership change", e))?;
            let mut single = raft::eraftpb::ConfChangeSingle::default();
            single.set_change_type(v1.get_change_type());
            single.node_id = v1.node_id;
            let mut v2 = ConfChangeV2::default();
            v2.mut_changes().push(single);
            v2.context = v1.context;
            v2
        } else {
            let mut v2 = ConfChangeV2::default();
            v2.merge_from_bytes(&entry.data)
                .map_err(|e| StoreError::storage("decoding a membership change", e))?;
            v2
        };
        let conf_state = self
            .node
            .apply_conf_change(&change)
            .map_err(|e| StoreError::storage("applying a membership change", e))?;
        let added: Option<crate::api::Member> = (!change.context.is_empty())
            .then(|| bincode::deserialize(&change.context).ok())
            .flatten();
        for single in change.get_changes() {
            use raft::eraftpb::ConfChangeType::*;
            match single.get_change_type() {
                AddNode | AddLearnerNode => {
                    if let Some(member) = added.as_ref().filter(|m| m.id == single.node_id) {
                        applier.set_member(member);
                        self.peer_changes.push(PeerChange::Added(member.clone()));
                    }
                }
                RemoveNode => {
                    applier.remove_member(single.node_id);
                    self.peer_changes.push(PeerChange::Removed(single.node_id));
                }
            }
        }
        let bytes = conf_state
            .write_to_bytes()
            .map_err(|e| StoreError::storage("encoding the membership", e))?;
        applier.set_conf_state(&bytes);
        applier.skip(entry.index);
        self.node.mut_store().set_conf_state(conf_state.clone());
        Ok(conf_state)
    }
}

/// The log must pick up where the state left off: from at most the applied
/// index (or the state is older than what the log dropped) to at least it
/// (or the log lost acknowledged entries). Either is damage to report, not
/// something raft can start from.
fn check_log_covers_state(config: &CoreConfig, store: &LogStore, applied: u64) -> Result<()> {
    let compacted = store.compacted_index();
    let last = raft::Storage::last_index(store).unwrap_or(compacted);
    let wal = config.wal_dir.display();
    if applied < compacted {
        return Err(StoreError::storage(
            "opening the raft log",
            format!(
                "the state database is applied to index {applied}, but the log in {wal} starts after {compacted}: \
                 the state is older than the log it belongs to; restore the whole data directory from one backup"
            ),
        ));
    }
    if applied > last {
        return Err(StoreError::storage(
            "opening the raft log",
            format!(
                "the state database is applied to index {applied}, but the log in {wal} ends at {last}: \
                 log entries are missing; restore the whole data directory from one backup"
            ),
        ));
    }
    Ok(())
}

/// Decodes the membership stored with the engine's state.
pub fn decode_conf_state(bytes: &[u8]) -> Result<ConfState> {
    let mut cs = ConfState::default();
    cs.merge_from_bytes(bytes)
        .map_err(|e| StoreError::storage("decoding the stored membership", e))?;
    Ok(cs)
}

fn persist_conf_state(kv: &KvStore, conf_state: &ConfState) -> Result<()> {
    let bytes = conf_state
        .write_to_bytes()
        .map_err(|e| StoreError::storage("encoding the membership", e))?;
    kv.flush_behind()?;
    let tree = kv.tree();
    tree.insert(crate::mvcc::kvstore::META_CONF_STATE, bytes)?;
    tree.flush()?;
    Ok(())
}

struct Replayed {
    /// The log as last written: a later append at index k replaced every
    /// entry from k on.
    entries: BTreeMap<u64, Entry>,
    hard_state: HardState,
    /// (index, term) the log was compacted to.
    compacted: (u64, u64),
}

fn replay_wal(config: &CoreConfig) -> Result<(Wal, Replayed)> {
    let mut replayed = Replayed {
        entries: BTreeMap::new(),
        hard_state: HardState::default(),
        compacted: (0, 0),
    };
    let mut failure = None;
    let wal = Wal::open(&config.wal_dir, config.wal, |record| {
        match record {
            WalRecord::Entry { index, data, .. } => {
                let mut entry = Entry::default();
                if let Err(err) = entry.merge_from_bytes(&data) {
                    failure.get_or_insert(StoreError::storage("decoding a raft entry", err));
                    return Ok(());
                }
                replayed.entries.split_off(&index);
                replayed.entries.insert(index, entry);
            }
            WalRecord::HardState { term, vote, commit } => {
                replayed.hard_state = HardState {
                    term,
                    vote,
                    commit,
                    ..Default::default()
                };
            }
            WalRecord::Snapshot { index, term } => replayed.compacted = (index, term),
        }
        Ok(())
    })?;
    if let Some(err) = failure {
        return Err(err);
    }
    let compacted = replayed.compacted.0;
    replayed.entries.retain(|&index, _| index > compacted);
    Ok((wal, replayed))
}

fn snap_path(data_dir: &std::path::Path, index: u64) -> PathBuf {
    data_dir.join("snap").join(format!("{index:016x}.snap"))
}

/// Writes `bytes` to `path` through a temporary file, fsyncing the file
/// and its directory.
fn write_durably(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let dir = path.parent().unwrap_or(std::path::Path::new("."));
    std::fs::create_dir_all(dir)?;
    let partial = path.with_extension("partial");
    let written = std::fs::File::create(&partial).and_then(|mut file| {
        file.write_all(bytes)?;
        file.sync_all()
    });
    if let Err(err) = written {
        // On a full disk, a partial copy would only hold space a restart needs.
        let _ = std::fs::remove_file(&partial);
        return Err(err);
    }
    std::fs::rename(&partial, path)?;
    std::fs::File::open(dir)?.sync_all()
}

/// Puts a snapshot's state in the engine and the lessor and makes it
/// durable. Returns the state's revision.
fn install_from(kv: &KvStore, lessor: &Lessor, snapshot: &[u8]) -> Result<i64> {
    let recovered = kv.install(snapshot)?;
    lessor.replace_all(&recovered.leases, &recovered.lease_keys);
    kv.sync_to_disk()?;
    Ok(kv.current_revision())
}

/// On open: the log says a snapshot at `index` replaced the state, but
/// the state is older; the snapshot kept in `snap/` finishes the job.
fn finish_install(config: &CoreConfig, kv: &KvStore, lessor: &Lessor, index: u64) -> Result<()> {
    let path = snap_path(&config.data_dir, index);
    let bytes = match std::fs::read(&path) {
        Ok(bytes) => bytes,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(err) => return Err(StoreError::storage("reading a kept snapshot", err)),
    };
    install_from(kv, lessor, &bytes)?;
    let _ = std::fs::remove_file(&path);
    tracing::info!(
        index,
        "finished installing a snapshot interrupted by a stop"
    );
    Ok(())
}

/// A single-member change (add as voter or learner, or remove) carrying the
/// member's attributes, so every member learns where to reach it.
pub fn membership_change(member: &crate::api::Member, add: bool) -> Result<ConfChangeV2> {
    use raft::eraftpb::{ConfChangeSingle, ConfChangeType};
    let mut single = ConfChangeSingle::default();
    single.set_change_type(match (add, member.is_learner) {
        (false, _) => ConfChangeType::RemoveNode,
        (true, false) => ConfChangeType::AddNode,
        (true, true) => ConfChangeType::AddLearnerNode,
    });
    single.node_id = member.id;
    let mut change = ConfChangeV2::default();
    change.mut_changes().push(single);
    if add {
        change.context = bincode::serialize(member)
            .map_err(|e| StoreError::storage("encoding a member", e))?
            .into();
    }
    Ok(change)
}

/// The change that makes learner `id` a voter (raft's AddNode of a member
/// it knows as a learner). No attributes ride along: the member keeps its
/// name and URLs.
pub fn promotion(id: u64) -> ConfChangeV2 {
    use raft::eraftpb::{ConfChangeSingle, ConfChangeType};
    let mut single = ConfChangeSingle::default();
    single.set_change_type(ConfChangeType::AddNode);
    single.node_id = id;
    let mut change = ConfChangeV2::default();
    change.mut_changes().push(single);
    change
}
