//! The write path: applies commands at log indexes into one sled batch.
//! Only the log's single writer runs it. Index changes become visible to
//! readers when the batch commits and its revision is published; re-applying
//! an index at or below the applied index is a no-op.

use std::sync::Arc;

use super::key_range::KeyRange;
use super::kvstore::{
    lease_key, lease_value, KvStore, Op, Pending, META_APPLIED_INDEX, META_COMPACT_SCHEDULED,
    META_REVISION,
};
use super::record::Record;
use super::revision::Revision;
use crate::api::*;
use crate::command::Command;
use crate::error::{Result, StoreError};
use crate::lease::Lessor;

/// Every event of one revision, shared by all the watchers it concerns.
#[derive(Debug)]
pub struct RevisionEvents {
    pub revision: i64,
    pub events: Vec<Event>,
}

/// What a command returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CommandResult {
    Put(PutResponse),
    DeleteRange(DeleteRangeResponse),
    Txn(TxnResponse),
    Compact(CompactionResponse),
    LeaseGrant(LeaseGrantResponse),
    LeaseRevoke(LeaseRevokeResponse),
    LeaseCheckpoint,
    LeaseRenew(LeaseKeepAliveResponse),
    PublishMember,
    /// The member as updated; `None` if it is no member (any more).
    UpdateMember(Option<crate::api::Member>),
    /// The alarm raised, or disarmed (none if it was not raised).
    Alarm(Vec<super::alarm::AlarmMember>),
}

/// A compaction to carry out on disk once its batch has committed.
#[derive(Debug)]
pub struct CompactionJob {
    pub revision: i64,
    pub keep: std::collections::HashSet<Revision>,
}

/// The outcome of a committed batch.
#[derive(Debug, Default)]
pub struct Committed {
    pub revision: i64,
    pub applied_index: u64,
    pub events: Vec<Arc<RevisionEvents>>,
    pub compactions: Vec<CompactionJob>,
}

/// The writes of the batch being applied, in order, for sled.
#[derive(Default)]
struct Writes(Vec<Op>);

impl Writes {
    fn insert(&mut self, key: impl Into<sled::IVec>, value: impl Into<sled::IVec>) {
        self.0.push((key.into(), Some(value.into())));
    }

    fn remove(&mut self, key: impl Into<sled::IVec>) {
        self.0.push((key.into(), None));
    }
}

pub struct Applier<'a> {
    kv: &'a KvStore,
    lessor: &'a Lessor,
    batch: Writes,
    pending: Pending,
    /// The newest main revision written, committed or pending.
    rev: i64,
    applied_index: u64,
    /// The applied index when the batch began: a batch that applies no
    /// index and changes no membership writes nothing.
    started_at: u64,
    committed: Committed,
    /// Member attributes written by this batch (None: removed).
    pending_members: std::collections::HashMap<u64, Option<crate::api::Member>>,
    /// The membership written by this batch, if it changed.
    pending_conf_state: Option<Vec<u8>>,
}

/// One command's write transaction: its main revision and changes so far.
struct WriteTxn {
    main: i64,
    changes: i64,
    events: Vec<Event>,
}

impl WriteTxn {
    /// The revision reads inside the transaction see: its own changes once
    /// it has made some.
    fn read_rev(&self) -> i64 {
        if self.changes > 0 {
            self.main
        } else {
            self.main - 1
        }
    }

    fn next_revision(&mut self) -> Revision {
        let rev = Revision::new(self.main, self.changes);
        self.changes += 1;
        rev
    }
}

impl<'a> Applier<'a> {
    pub fn new(kv: &'a KvStore, lessor: &'a Lessor) -> Self {
        Applier {
            kv,
            lessor,
            batch: Writes::default(),
            pending: Pending::new(),
            rev: kv.current_revision(),
            applied_index: kv.applied_index(),
            started_at: kv.applied_index(),
            committed: Committed::default(),
            pending_members: Default::default(),
            pending_conf_state: None,
        }
    }

    /// Applies `cmd` at log `index`; `None` when that index is already applied.
    pub fn apply(&mut self, index: u64, cmd: &Command) -> Option<Result<CommandResult>> {
        if index <= self.applied_index {
            return None;
        }
        self.applied_index = index;
        let mut tx = WriteTxn {
            main: self.rev + 1,
            changes: 0,
            events: Vec::new(),
        };
        let result = self.apply_command(&mut tx, cmd);
        if tx.changes > 0 {
            debug_assert!(
                !matches!(&result, Err(e) if !matches!(e, StoreError::Storage { .. })),
                "a command that fails on its input must change nothing"
            );
            self.rev = tx.main;
            self.committed.events.push(Arc::new(RevisionEvents {
                revision: tx.main,
                events: tx.events,
            }));
        }
        let header = ResponseHeader { revision: self.rev };
        Some(result.map(|r| with_header(r, header)))
    }

    fn apply_command(&mut self, tx: &mut WriteTxn, cmd: &Command) -> Result<CommandResult> {
        if let Some(refused) = super::alarm::refusal(&self.kv.alarms.read(), cmd) {
            return Err(refused);
        }
        Ok(match cmd {
            Command::Put(req) => {
                self.check_put(req, tx.read_rev())?;
                CommandResult::Put(self.put(tx, req)?)
            }
            Command::DeleteRange(req) => CommandResult::DeleteRange(self.delete_range(tx, req)?),
            Command::Txn(req) => CommandResult::Txn(self.txn(tx, req)?),
            Command::Compact { revision } => CommandResult::Compact(self.compact(*revision)?),
            Command::LeaseGrant { id, ttl } => {
                CommandResult::LeaseGrant(self.lease_grant(*id, *ttl)?)
            }
            Command::LeaseRevoke { id } => CommandResult::LeaseRevoke(self.lease_revoke(tx, *id)?),
            Command::LeaseCheckpoint { checkpoints } => {
                for &(id, remaining) in checkpoints {
                    if let Some((ttl, _, _)) = self.lessor.time_to_live(id) {
                        self.lessor.checkpoint(id, remaining);
                        self.batch
                            .insert(&lease_key(id), &lease_value(ttl, remaining));
                    }
                }
                CommandResult::LeaseCheckpoint
            }
            Command::PublishMember {
                id,
                name,
                client_urls,
            } => {
                // A member removed meanwhile stays removed; a founding
                // member has no entry yet and gets one.
                let known = self.member(*id)?;
                let founding = known.is_none() && self.is_voter_or_learner(*id)?;
                if let Some(mut member) = known.or(founding.then(|| crate::api::Member {
                    id: *id,
                    ..Default::default()
                })) {
                    member.name = name.clone();
                    member.client_urls = client_urls.clone();
                    self.set_member(&member);
                }
                CommandResult::PublishMember
            }
            Command::UpdateMember { id, peer_urls } => {
                let known = self.member(*id)?;
                let member = match known {
                    Some(member) => Some(member),
                    None if self.is_voter_or_learner(*id)? => Some(crate::api::Member {
                        id: *id,
                        ..Default::default()
                    }),
                    None => None,
                };
                let updated = member.map(|mut member| {
                    member.peer_urls = peer_urls.clone();
                    self.set_member(&member);
                    member
                });
                CommandResult::UpdateMember(updated)
            }
            Command::Alarm {
                activate,
                member_id,
                alarm,
            } => CommandResult::Alarm(self.alarm(*activate, *member_id, *alarm)),
            Command::LeaseRenew { id } => {
                // Renewal is time on this member's clock, not stored state.
                let (ttl, _) = self.lessor.renew(*id)?;
                CommandResult::LeaseRenew(LeaseKeepAliveResponse {
                    header: ResponseHeader::default(),
                    id: *id,
                    ttl,
                })
            }
        })
    }

    /// Marks a log index applied that carries no command (a leader's empty
    /// entry, a membership change).
    pub fn skip(&mut self, index: u64) {
        self.applied_index = self.applied_index.max(index);
    }

    /// Stores the membership with the batch, so it is as of the applied index.
    pub fn set_conf_state(&mut self, conf_state: &[u8]) {
        self.batch
            .insert(super::kvstore::META_CONF_STATE, conf_state);
        self.pending_conf_state = Some(conf_state.to_vec());
    }

    /// Records a member's attributes with the batch (a member added).
    pub fn set_member(&mut self, member: &crate::api::Member) {
        if let Ok(bytes) = bincode::serialize(member) {
            self.batch
                .insert(super::kvstore::member_key(member.id), bytes);
        }
        self.pending_members.insert(member.id, Some(member.clone()));
    }

    /// Forgets a removed member's attributes.
    pub fn remove_member(&mut self, id: u64) {
        self.batch.remove(super::kvstore::member_key(id));
        self.pending_members.insert(id, None);
    }

    fn member(&self, id: u64) -> Result<Option<crate::api::Member>> {
        if let Some(pending) = self.pending_members.get(&id) {
            return Ok(pending.clone());
        }
        self.kv.flush_behind()?;
        match self.kv.tree().get(super::kvstore::member_key(id))? {
            Some(bytes) => bincode::deserialize(&bytes)
                .map(Some)
                .map_err(|e| StoreError::storage("reading a member", e)),
            None => Ok(None),
        }
    }

    /// Hands the batch with its applied index to sled (which writes
    /// batches together, see `WRITE_BEHIND`; readers find the records
    /// meanwhile); the caller then publishes the revision to readers and
    /// watchers.
    pub fn commit(mut self) -> Result<Committed> {
        self.committed.revision = self.rev;
        self.committed.applied_index = self.applied_index;
        if self.applied_index == self.started_at
            && self.pending_conf_state.is_none()
            && self.pending_members.is_empty()
        {
            // Nothing was applied (a ready of reads, messages or a hard
            // state alone): every sled batch costs two log-buffer writes on
            // sled's I/O threads, so an empty one is not written.
            return Ok(self.committed);
        }
        self.batch.insert(
            META_APPLIED_INDEX,
            &(self.applied_index as i64).to_le_bytes(),
        );
        self.batch.insert(META_REVISION, &self.rev.to_le_bytes());
        self.kv.write_behind(self.batch.0, self.pending)?;
        self.kv.set_applied_index(self.applied_index);
        Ok(self.committed)
    }

    /// Whether `id` is in the membership as of this batch.
    fn is_voter_or_learner(&self, id: u64) -> Result<bool> {
        let bytes = match &self.pending_conf_state {
            Some(bytes) => Some(bytes.clone()),
            None => self.kv.conf_state_bytes()?,
        };
        let Some(bytes) = bytes else { return Ok(false) };
        let conf_state = crate::raft::decode_conf_state(&bytes)?;
        Ok(conf_state.voters.contains(&id) || conf_state.learners.contains(&id))
    }

    fn key_at(&self, key: &[u8], at: i64) -> Option<super::key_index::KeyAt> {
        self.kv.index.read().get(key, at)
    }

    fn load(&self, rev: Revision) -> Result<KeyValue> {
        self.kv
            .load(rev, Some(&self.pending), true)?
            .ok_or_else(|| {
                StoreError::storage("applying a write", format!("record {rev:?} is missing"))
            })
    }

    fn check_put(&self, req: &PutRequest, at: i64) -> Result<()> {
        if req.lease != 0 && !self.lessor.contains(req.lease) {
            return Err(StoreError::LeaseNotFound);
        }
        if (req.ignore_value || req.ignore_lease) && self.key_at(&req.key, at).is_none() {
            return Err(StoreError::KeyNotFound);
        }
        Ok(())
    }

    fn put(&mut self, tx: &mut WriteTxn, req: &PutRequest) -> Result<PutResponse> {
        let at = tx.read_rev();
        let rev = tx.next_revision();
        let existing = self.kv.index.write().put(&req.key, rev, at);
        let prev = existing.map(|at| self.load(at.modified)).transpose()?;
        let value = match (&prev, req.ignore_value) {
            (Some(prev), true) => prev.value.clone(),
            _ => req.value.clone(),
        };
        let lease = match (&prev, req.ignore_lease) {
            (Some(prev), true) => prev.lease,
            _ => req.lease,
        };
        let kv = KeyValue {
            key: req.key.clone(),
            create_revision: existing.map_or(rev.main, |at| at.created.main),
            mod_revision: rev.main,
            version: existing.map_or(1, |at| at.version + 1),
            value,
            lease,
        };
        let record = Record {
            tombstone: false,
            key: kv.key.clone(),
            create_revision: kv.create_revision,
            version: kv.version,
            lease: kv.lease,
            value: kv.value.clone(),
        };
        self.batch.insert(&rev.to_key(), record.encode());
        if let Some(old) = prev
            .as_ref()
            .map(|p| p.lease)
            .filter(|&l| l != 0 && l != lease)
        {
            self.lessor.detach(old, &req.key);
        }
        if lease != 0 {
            self.lessor.attach(lease, &req.key);
        }
        self.pending.insert(rev, kv.clone());
        tx.events.push(Event {
            kind: EventType::Put,
            kv,
            prev_kv: None,
        });
        Ok(PutResponse {
            header: ResponseHeader::default(),
            prev_kv: if req.prev_kv { prev } else { None },
        })
    }

    fn delete_range(
        &mut self,
        tx: &mut WriteTxn,
        req: &DeleteRangeRequest,
    ) -> Result<DeleteRangeResponse> {
        let range = KeyRange::new(&req.key, &req.range_end);
        let doomed = self.kv.index.read().range(&range, tx.read_rev());
        let need_prev = req.prev_kv || !self.lessor.is_empty();
        let mut resp = DeleteRangeResponse {
            deleted: doomed.len() as i64,
            ..Default::default()
        };
        for (key, at) in doomed {
            let prev = if need_prev {
                Some(self.load(at.modified)?)
            } else {
                None
            };
            self.tombstone(tx, &key);
            if let Some(prev) = prev {
                if prev.lease != 0 {
                    self.lessor.detach(prev.lease, &key);
                }
                if req.prev_kv {
                    resp.prev_kvs.push(prev);
                }
            }
        }
        Ok(resp)
    }

    fn tombstone(&mut self, tx: &mut WriteTxn, key: &[u8]) {
        let rev = tx.next_revision();
        let record = Record {
            tombstone: true,
            key: key.to_vec(),
            create_revision: 0,
            version: 0,
            lease: 0,
            value: Vec::new(),
        };
        self.batch.insert(&rev.to_key(), record.encode());
        let was_alive = self.kv.index.write().tombstone(key, rev);
        assert!(was_alive, "tombstone of a key that is not alive");
        tx.events.push(Event {
            kind: EventType::Delete,
            kv: KeyValue {
                key: key.to_vec(),
                mod_revision: rev.main,
                ..Default::default()
            },
            prev_kv: None,
        });
    }

    fn txn(&mut self, tx: &mut WriteTxn, req: &TxnRequest) -> Result<TxnResponse> {
        let at = tx.read_rev();
        let succeeded = self.compare_all(&req.compare, at)?;
        let ops = if succeeded {
            &req.success
        } else {
            &req.failure
        };
        // Everything that can fail is checked before the first change.
        self.check_ops(ops, at)?;
        let mut responses = Vec::with_capacity(ops.len());
        for op in ops {
            responses.push(match op {
                RequestOp::Range(r) => {
                    let read_at = if r.revision > 0 {
                        r.revision
                    } else {
                        tx.read_rev()
                    };
                    ResponseOp::Range(self.kv.range_at(r, read_at, Some(&self.pending))?)
                }
                RequestOp::Put(p) => ResponseOp::Put(self.put(tx, p)?),
                RequestOp::DeleteRange(d) => ResponseOp::DeleteRange(self.delete_range(tx, d)?),
                RequestOp::Txn(t) => ResponseOp::Txn(self.txn(tx, t)?),
            });
        }
        Ok(TxnResponse {
            header: ResponseHeader::default(),
            succeeded,
            responses,
        })
    }

    fn check_ops(&self, ops: &[RequestOp], at: i64) -> Result<()> {
        for op in ops {
            match op {
                RequestOp::Range(r) if r.revision > at => {
                    return Err(StoreError::FutureRevision {
                        current_revision: at,
                    })
                }
                RequestOp::Range(r)
                    if r.revision > 0 && r.revision < self.kv.compact_revision() =>
                {
                    return Err(StoreError::Compacted {
                        compact_revision: self.kv.compact_revision(),
                    })
                }
                RequestOp::Range(_) | RequestOp::DeleteRange(_) => {}
                RequestOp::Put(p) => self.check_put(p, at)?,
                // Either branch of a nested txn may run, depending on what
                // the ops before it change: both must be able to.
                RequestOp::Txn(t) => {
                    self.check_ops(&t.success, at)?;
                    self.check_ops(&t.failure, at)?;
                }
            }
        }
        Ok(())
    }

    fn compare_all(&self, compares: &[Compare], at: i64) -> Result<bool> {
        for c in compares {
            if !self.compare(c, at)? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// etcd's rule: every key in the range must satisfy the compare; a
    /// missing key compares as zero, except that a value compare fails.
    fn compare(&self, c: &Compare, at: i64) -> Result<bool> {
        let range = KeyRange::new(&c.key, &c.range_end);
        let keys = self.kv.index.read().range(&range, at);
        if keys.is_empty() {
            return Ok(match &c.target {
                CompareTarget::Value(_) => false,
                _ => compare_int(0, target_operand(&c.target), c.result),
            });
        }
        for (_, key_at) in keys {
            let ok = match &c.target {
                CompareTarget::Version(v) => compare_int(key_at.version, *v, c.result),
                CompareTarget::CreateRevision(v) => compare_int(key_at.created.main, *v, c.result),
                CompareTarget::ModRevision(v) => compare_int(key_at.modified.main, *v, c.result),
                CompareTarget::Value(v) => {
                    let kv = self.load(key_at.modified)?;
                    ordering_matches(kv.value.as_slice().cmp(v.as_slice()), c.result)
                }
                CompareTarget::Lease(v) => {
                    compare_int(self.load(key_at.modified)?.lease, *v, c.result)
                }
            };
            if !ok {
                return Ok(false);
            }
        }
        Ok(true)
    }

    fn compact(&mut self, revision: i64) -> Result<CompactionResponse> {
        // As etcd: once something was compacted, a revision at or below
        // it is refused; before that, any revision up to the current one.
        if let Some(compacted) = self.kv.last_compaction() {
            if revision <= compacted {
                return Err(StoreError::Compacted {
                    compact_revision: compacted,
                });
            }
        }
        if revision > self.rev {
            return Err(StoreError::FutureRevision {
                current_revision: self.rev,
            });
        }
        // Readers learn of the compaction before the index loses history,
        // so a read that raced it reports "compacted" rather than a gap.
        self.kv.set_compact_revision(revision);
        let keep = self.kv.index.write().compact(revision);
        self.batch
            .insert(META_COMPACT_SCHEDULED, &revision.to_le_bytes());
        self.committed
            .compactions
            .push(CompactionJob { revision, keep });
        Ok(CompactionResponse::default())
    }

    /// etcd's alarm store: raising an alarm answers it (raised before or
    /// not); disarming answers it if it was raised, else nothing.
    fn alarm(
        &mut self,
        activate: bool,
        member_id: u64,
        alarm: i32,
    ) -> Vec<super::alarm::AlarmMember> {
        let raised = super::alarm::AlarmMember::new(member_id, alarm);
        let mut alarms = self.kv.alarms.write();
        if activate {
            if alarms.insert(raised) {
                self.batch.insert(raised.key(), &[]);
                tracing::warn!(alarm = %super::alarm::alarm_name(alarm), member = format_args!("{member_id:x}"), "alarm raised");
            }
            vec![raised]
        } else if alarms.remove(&raised) {
            self.batch.remove(raised.key());
            tracing::warn!(alarm = %super::alarm::alarm_name(alarm), member = format_args!("{member_id:x}"), "alarm disarmed");
            vec![raised]
        } else {
            Vec::new()
        }
    }

    fn lease_grant(&mut self, id: i64, ttl: i64) -> Result<LeaseGrantResponse> {
        // Only 0 is no lease: etcd grants a negative ID asked for (etcdctl
        // reads IDs as unsigned hex, so half of them are negative here).
        if id == 0 {
            return Err(StoreError::LeaseNotFound);
        }
        if self.lessor.contains(id) {
            return Err(StoreError::LeaseExists);
        }
        let ttl = self.lessor.effective_ttl(ttl)?;
        self.lessor.grant(id, ttl, 0);
        self.batch.insert(&lease_key(id), &lease_value(ttl, 0));
        Ok(LeaseGrantResponse {
            header: ResponseHeader::default(),
            id,
            ttl,
        })
    }

    fn lease_revoke(&mut self, tx: &mut WriteTxn, id: i64) -> Result<LeaseRevokeResponse> {
        let keys = self.lessor.revoke(id).ok_or(StoreError::LeaseNotFound)?;
        for key in keys {
            if self.key_at(&key, tx.read_rev()).is_some() {
                self.tombstone(tx, &key);
            }
        }
        self.batch.remove(&lease_key(id));
        Ok(LeaseRevokeResponse::default())
    }
}

fn target_operand(target: &CompareTarget) -> i64 {
    match target {
        CompareTarget::Version(v)
        | CompareTarget::CreateRevision(v)
        | CompareTarget::ModRevision(v)
        | CompareTarget::Lease(v) => *v,
        CompareTarget::Value(_) => 0,
    }
}

fn compare_int(actual: i64, operand: i64, result: CompareResult) -> bool {
    ordering_matches(actual.cmp(&operand), result)
}

fn ordering_matches(ord: std::cmp::Ordering, result: CompareResult) -> bool {
    use std::cmp::Ordering::*;
    match result {
        CompareResult::Equal => ord == Equal,
        CompareResult::NotEqual => ord != Equal,
        CompareResult::Greater => ord == Greater,
        CompareResult::Less => ord == Less,
    }
}

/// Sets the response headers of a command, nested txn responses included.
fn with_header(result: CommandResult, header: ResponseHeader) -> CommandResult {
    match result {
        CommandResult::Put(r) => CommandResult::Put(PutResponse { header, ..r }),
        CommandResult::DeleteRange(r) => {
            CommandResult::DeleteRange(DeleteRangeResponse { header, ..r })
        }
        CommandResult::Txn(r) => CommandResult::Txn(txn_with_header(r, header)),
        CommandResult::Compact(_) => CommandResult::Compact(CompactionResponse { header }),
        CommandResult::LeaseGrant(r) => {
            CommandResult::LeaseGrant(LeaseGrantResponse { header, ..r })
        }
        CommandResult::LeaseRevoke(_) => CommandResult::LeaseRevoke(LeaseRevokeResponse { header }),
        CommandResult::LeaseCheckpoint => CommandResult::LeaseCheckpoint,
        CommandResult::PublishMember => CommandResult::PublishMember,
        CommandResult::UpdateMember(m) => CommandResult::UpdateMember(m),
        CommandResult::Alarm(alarms) => CommandResult::Alarm(alarms),
        CommandResult::LeaseRenew(r) => {
            CommandResult::LeaseRenew(LeaseKeepAliveResponse { header, ..r })
        }
    }
}

fn txn_with_header(mut txn: TxnResponse, header: ResponseHeader) -> TxnResponse {
    txn.header = header;
    for resp in &mut txn.responses {
        match resp {
            ResponseOp::Range(r) => r.header = header,
            ResponseOp::Put(r) => r.header = header,
            ResponseOp::DeleteRange(r) => r.header = header,
            ResponseOp::Txn(t) => *t = txn_with_header(std::mem::take(t), header),
        }
    }
    txn
}
