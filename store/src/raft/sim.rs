//! A deterministic simulation of real Raft members (our core, WAL and
//! engine, each in a temporary directory) over a simulated network and
//! clock. Delays, losses, reordering, partitions and each member's ticks
//! are all drawn from one seeded RNG, so a seed replays a run exactly.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use raft::eraftpb::Message;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::core::{decode_conf_state, CoreConfig, RaftCore};
use crate::api::{PutRequest, RangeRequest};
use crate::command::Command;
use crate::error::{Result, StoreError};
use crate::lease::{Lessor, LessorConfig};
use crate::mvcc::{CommandResult, KvStore};
use crate::wal::WalOptions;

struct Member {
    core: Option<RaftCore>,
    dir: tempfile::TempDir,
    restarts: u64,
}

pub struct Sim {
    rng: StdRng,
    now: u64,
    members: BTreeMap<u64, Member>,
    voters: Vec<u64>,
    /// (deliver at, send order) -> message
    in_flight: BTreeMap<(u64, u64), Message>,
    sent: u64,
    /// Directed links that lose everything.
    cut: HashSet<(u64, u64)>,
    pub loss_per_mille: u32,
    pub max_delay: u64,
    answers: HashMap<(u64, u64), Result<CommandResult>>,
    /// Confirmed read indexes: (member, read id) -> index.
    reads: HashMap<(u64, u64), u64>,
    /// One line per step: who leads, and each member's commit and revision.
    pub trace: Vec<String>,
    /// The simulated clock every member's lessor reads: `base` plus this.
    clock_ms: Arc<std::sync::atomic::AtomicU64>,
    base: std::time::Instant,
}

const ELECTION_TICK: usize = 10;
const HEARTBEAT_TICK: usize = 2;
/// Small, so a test needs few writes to leave a follower to a snapshot.
pub const CATCH_UP_ENTRIES: u64 = 5;
/// Simulated milliseconds per step (a tick, when a member ticks).
pub const STEP_MS: u64 = 10;

impl Sim {
    /// A new member with an empty directory, started knowing the founding
    /// members (as etcd's `--initial-cluster-state existing`); it becomes a
    /// voter when the log's change adding it reaches it.
    pub fn join(&mut self, id: u64) {
        let dir = tempfile::tempdir().expect("temp dir");
        self.members.insert(
            id,
            Member {
                core: None,
                dir,
                restarts: 0,
            },
        );
        self.start(id);
    }

    pub fn core_mut(&mut self, id: u64) -> &mut RaftCore {
        self.members
            .get_mut(&id)
            .and_then(|m| m.core.as_mut())
            .expect("member is up")
    }

    pub fn new(seed: u64, size: u64) -> Sim {
        let voters: Vec<u64> = (1..=size).collect();
        let mut sim = Sim {
            rng: StdRng::seed_from_u64(seed),
            now: 0,
            members: BTreeMap::new(),
            voters: voters.clone(),
            in_flight: BTreeMap::new(),
            sent: 0,
            cut: HashSet::new(),
            loss_per_mille: 0,
            max_delay: 3,
            answers: HashMap::new(),
            reads: HashMap::new(),
            trace: Vec::new(),
            clock_ms: Arc::new(std::sync::atomic::AtomicU64::new(0)),
            base: std::time::Instant::now(),
        };
        for id in voters {
            let dir = tempfile::tempdir().expect("temp dir");
            sim.members.insert(
                id,
                Member {
                    core: None,
                    dir,
                    restarts: 0,
                },
            );
            sim.start(id);
        }
        sim
    }

    fn start(&mut self, id: u64) {
        let member = self.members.get_mut(&id).expect("member");
        let db = open_db(&member.dir.path().join("db"));
        let (kv, recovered) = KvStore::open(db.open_tree("mvcc").expect("tree")).expect("kv");
        let conf_state = recovered
            .conf_state
            .map(|bytes| decode_conf_state(&bytes).expect("conf state"));
        let config = CoreConfig {
            id,
            initial_voters: self.voters.clone(),
            initial_learners: Vec::new(),
            election_tick: ELECTION_TICK,
            heartbeat_tick: HEARTBEAT_TICK,
            tick: std::time::Duration::from_millis(STEP_MS),
            fixed_election_timeout: true,
            wal_dir: member.dir.path().join("wal"),
            data_dir: member.dir.path().to_path_buf(),
            wal: WalOptions::default(),
            proposal_epoch: member.restarts,
            catch_up_entries: CATCH_UP_ENTRIES,
        };
        let clock = Arc::clone(&self.clock_ms);
        let base = self.base;
        let lessor = Arc::new(Lessor::with_clock(
            LessorConfig::default(),
            Arc::new(move || {
                base + std::time::Duration::from_millis(
                    clock.load(std::sync::atomic::Ordering::Relaxed),
                )
            }),
        ));
        lessor.replace_all(&recovered.leases, &recovered.lease_keys);
        let core = RaftCore::open(config, Arc::new(kv), lessor, conf_state).expect("open core");
        member.core = Some(core);
    }

    /// The member's core, if it is running.
    pub fn running(&self, id: u64) -> Option<&RaftCore> {
        self.members.get(&id).and_then(|m| m.core.as_ref())
    }

    pub fn core(&self, id: u64) -> &RaftCore {
        self.members[&id].core.as_ref().expect("member is up")
    }

    /// Stops a member; its directory stays for a restart.
    pub fn crash(&mut self, id: u64) {
        let member = self.members.get_mut(&id).expect("member");
        member.core = None;
        member.restarts += 1;
        // Ids start over in the next run: nothing of this one may match.
        self.answers.retain(|(at, _), _| *at != id);
        self.reads.retain(|(at, _), _| *at != id);
    }

    pub fn restart(&mut self, id: u64) {
        self.start(id);
    }

    /// Cuts every link between the two groups, both ways.
    pub fn partition(&mut self, a: &[u64], b: &[u64]) {
        for &x in a {
            for &y in b {
                self.cut.insert((x, y));
                self.cut.insert((y, x));
            }
        }
    }

    pub fn heal(&mut self) {
        self.cut.clear();
    }

    /// One unit of simulated time.
    pub fn step(&mut self) {
        self.now += 1;
        self.clock_ms
            .store(self.now * STEP_MS, std::sync::atomic::Ordering::Relaxed);
        self.expire_leases();
        let due: Vec<(u64, u64)> = self
            .in_flight
            .range(..(self.now + 1, 0))
            .map(|(k, _)| *k)
            .collect();
        for key in due {
            let message = self.in_flight.remove(&key).expect("due message");
            let (from, to) = (message.from, message.to);
            let snapshot = message.get_msg_type() == raft::eraftpb::MessageType::MsgSnapshot;
            let mut delivered = false;
            if !self.cut.contains(&(from, to)) {
                if let Some(core) = self.members.get_mut(&to).and_then(|m| m.core.as_mut()) {
                    core.step(message);
                    delivered = true;
                }
            }
            if snapshot {
                // As the transport does: the sender learns how it went.
                if let Some(core) = self.members.get_mut(&from).and_then(|m| m.core.as_mut()) {
                    core.report_snapshot(to, delivered);
                }
            }
        }
        let ids: Vec<u64> = self.members.keys().copied().collect();
        for &id in &ids {
            // Each member's clock runs a little unevenly: the seed, not
            // raft-rs, decides who times out first.
            if self.rng.gen_ratio(4, 5) {
                if let Some(core) = self.members.get_mut(&id).and_then(|m| m.core.as_mut()) {
                    core.tick();
                }
            }
        }
        for &id in &ids {
            let Some(core) = self.members.get_mut(&id).and_then(|m| m.core.as_mut()) else {
                continue;
            };
            let advanced = core.advance().expect("advance");
            for (proposal, result) in advanced.answers {
                self.answers.insert((id, proposal), result);
            }
            for (read, index) in advanced.reads {
                self.reads.insert((id, read), index);
            }
            for message in advanced.messages {
                self.send(message);
            }
        }
        let line = self
            .members
            .iter()
            .map(|(id, m)| match &m.core {
                Some(c) => format!(
                    "{id}:{}{}/{}/{}",
                    if c.is_leader() { "L" } else { "" },
                    c.term(),
                    c.commit_index(),
                    c.kv().current_revision()
                ),
                None => format!("{id}:down"),
            })
            .collect::<Vec<_>>()
            .join(" ");
        self.trace.push(format!("{} {line}", self.now));
    }

    /// As the lease loop does on a real leader: expired leases are
    /// proposed for revocation (only by a leader).
    fn expire_leases(&mut self) {
        for member in self.members.values_mut() {
            let Some(core) = member.core.as_mut().filter(|c| c.is_leader()) else {
                continue;
            };
            let now = core.lessor().now();
            for id in core.lessor().take_expired(now, 100) {
                let _ = core.propose(Command::LeaseRevoke { id }.encode());
            }
        }
    }

    fn send(&mut self, message: Message) {
        if self.rng.gen_range(0..1000) < self.loss_per_mille {
            if message.get_msg_type() == raft::eraftpb::MessageType::MsgSnapshot {
                if let Some(core) = self
                    .members
                    .get_mut(&message.from)
                    .and_then(|m| m.core.as_mut())
                {
                    core.report_snapshot(message.to, false);
                }
            }
            return;
        }
        let delay = self.rng.gen_range(1..=self.max_delay);
        self.sent += 1;
        self.in_flight
            .insert((self.now + delay, self.sent), message);
    }

    /// Steps until `done` holds; false if it did not within `max_steps`.
    pub fn run_until(&mut self, max_steps: u64, mut done: impl FnMut(&Sim) -> bool) -> bool {
        for _ in 0..max_steps {
            if done(self) {
                return true;
            }
            self.step();
        }
        done(self)
    }

    /// The leader of the highest term among running members.
    pub fn leader(&self) -> Option<u64> {
        self.members
            .iter()
            .filter_map(|(id, m)| m.core.as_ref().map(|c| (id, c)))
            .filter(|(_, c)| c.is_leader())
            .max_by_key(|(_, c)| c.term())
            .map(|(id, _)| *id)
    }

    pub fn wait_for_leader(&mut self) -> u64 {
        assert!(
            self.run_until(2000, |s| s.leader().is_some()),
            "no leader elected"
        );
        self.leader().expect("leader")
    }

    /// Proposes a command at member `at` without waiting.
    pub fn propose(&mut self, at: u64, command: &Command) -> Result<u64> {
        let core = self
            .members
            .get_mut(&at)
            .and_then(|m| m.core.as_mut())
            .ok_or(StoreError::Stopped)?;
        core.propose(command.encode())
    }

    /// The answer to a proposal, if it has come.
    pub fn take_answer(&mut self, at: u64, proposal: u64) -> Option<Result<CommandResult>> {
        self.answers.remove(&(at, proposal))
    }

    /// Starts a linearizable read at member `at`.
    pub fn read_index(&mut self, at: u64) -> Option<u64> {
        let core = self.members.get_mut(&at).and_then(|m| m.core.as_mut())?;
        (core.leader_id() != 0).then(|| core.read_index())
    }

    /// The read's confirmed index once the member has applied up to it.
    pub fn take_read(&mut self, at: u64, read: u64) -> Option<u64> {
        let index = *self.reads.get(&(at, read))?;
        let applied = self.running(at)?.kv().applied_index();
        (applied >= index).then(|| {
            self.reads.remove(&(at, read));
            index
        })
    }

    /// A key's value in member `at`'s own state.
    pub fn local_get(&self, at: u64, key: &[u8]) -> Option<Vec<u8>> {
        let resp = self.running(at)?.kv().range(&RangeRequest::key(key)).ok()?;
        resp.kvs.into_iter().next().map(|kv| kv.value)
    }

    pub fn is_running(&self, id: u64) -> bool {
        self.running(id).is_some()
    }

    pub fn now(&self) -> u64 {
        self.now
    }

    pub fn rng(&mut self) -> &mut StdRng {
        &mut self.rng
    }

    pub fn propose_put(&mut self, at: u64, key: &str, value: &str) -> Result<u64> {
        let data = Command::Put(PutRequest::new(key, value)).encode();
        let core = self
            .members
            .get_mut(&at)
            .and_then(|m| m.core.as_mut())
            .ok_or(StoreError::Stopped)?;
        core.propose(data)
    }

    /// Waits for the answer to a proposal made at `at`.
    pub fn answer(
        &mut self,
        at: u64,
        proposal: u64,
        max_steps: u64,
    ) -> Option<Result<CommandResult>> {
        self.run_until(max_steps, |s| s.answers.contains_key(&(at, proposal)));
        self.answers.remove(&(at, proposal))
    }

    /// A put at the current leader, waited for; returns its revision.
    pub fn put(&mut self, key: &str, value: &str) -> i64 {
        for _ in 0..20 {
            let leader = self.wait_for_leader();
            let Ok(proposal) = self.propose_put(leader, key, value) else {
                continue;
            };
            if let Some(Ok(CommandResult::Put(resp))) = self.answer(leader, proposal, 500) {
                return resp.header.revision;
            }
        }
        panic!("put {key} never succeeded");
    }

    /// (value, mod_revision) of every key, as member `id` has applied them.
    pub fn contents(&self, id: u64) -> BTreeMap<Vec<u8>, (Vec<u8>, i64)> {
        let resp = self
            .core(id)
            .kv()
            .range(&RangeRequest {
                key: vec![0],
                range_end: vec![0],
                ..Default::default()
            })
            .expect("range");
        resp.kvs
            .into_iter()
            .map(|kv| (kv.key, (kv.value, kv.mod_revision)))
            .collect()
    }

    /// Steps until every running member has applied the same revision.
    pub fn converge(&mut self, max_steps: u64) -> bool {
        self.run_until(max_steps, |s| {
            let revs: HashSet<i64> = s
                .members
                .values()
                .filter_map(|m| m.core.as_ref())
                .map(|c| c.kv().current_revision())
                .collect();
            revs.len() == 1
        })
    }

    /// Compacts member `id`'s log up to what it has applied (its engine
    /// state stands in for the dropped entries).
    pub fn compact_log(&mut self, id: u64) {
        let core = self.core_mut(id);
        let applied = core.kv().applied_index();
        // As the store's flush loop: what is applied goes to sled first.
        core.kv().flush_behind().expect("write applied batches");
        core.compact_log(applied).expect("compact log");
    }

    pub fn ids(&self) -> Vec<u64> {
        self.members.keys().copied().collect()
    }
}

/// Opens a member's state database. After a crash, sled's I/O threads may
/// still hold the old instance's file lock for a moment (a log buffer they
/// are writing keeps it open): a restart waits for them, as a restarted
/// process would find the lock released.
fn open_db(path: &std::path::Path) -> sled::Db {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        match sled::Config::new().path(path).flush_every_ms(None).open() {
            Ok(db) => return db,
            Err(sled::Error::Io(err))
                if err.to_string().contains("could not acquire lock")
                    && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            Err(err) => panic!("sled: {err:?}"),
        }
    }
}
