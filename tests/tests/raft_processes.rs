//! Replication across process death: three `store-member` processes form one Raft cluster
//! and put keys through every member. The leader is SIGKILLed and restarted, then every
//! member is SIGKILLed. All three are started again together (the joint round) and run
//! until each has applied a put of the joint round, which lies above every put acknowledged
//! before, and on through a few of the store's state flushes; then they are SIGKILLed again.
//! Last, each data directory is opened alone, in-process, and read back:
//! - each revision 1..=current holds exactly one key of the run, put once, with its value;
//! - no two acknowledged puts share a revision;
//! - every put acknowledged before the joint round, by any member, is on every member at
//!   its acknowledged revision;
//! - every put acknowledged in the joint round is at its revision on every member that
//!   reached that revision;
//! - the members hold the same key at every revision they all reached.
//!
//! Why the joint round comes before the reads alone: a member acknowledges a put once it
//! is committed (in a quorum's WAL) and applied here, but that it was committed is not made
//! durable here along with the acknowledgement. The applied state is flushed about once a
//! second, and a new commit index reaches the WAL only with a later sync (a leader's commit
//! advanced right after its own sync, not even then). Opened alone, with no quorum to
//! commit anything, a member killed just after acknowledging may show its last puts as not
//! yet committed. They are not lost: they are in a quorum's WAL and are committed again as
//! soon as the members run together (etcd is the same: its backend's consistent index is
//! not fsynced per request either). The joint round does that: each member applies a put
//! above all of them and runs on through a few state flushes, so read alone it must then
//! hold every earlier acknowledged put; only the last puts acknowledged in the joint round
//! may be missing there.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use skiff_store::{ClusterConfig, KeyValue, RangeRequest, Store, StoreConfig};
use skiff_tests::member_process::{MemberArgs, MemberOutput, MemberProcess};
use skiff_tests::skiff_process::free_addrs as free_loopback_addrs;
use skiff_tests::writer_protocol::{value_for_key, Ack, Role, DEFAULT_VALUE_SIZE};
use tempfile::TempDir;

const NAMES: [&str; 3] = ["n1", "n2", "n3"];
const WRITERS: usize = 2;
/// The generation of the joint round's processes (0: first start, 1: the restarted leader).
const JOINT: u32 = 2;
/// State flushes (`StoreConfig::flush_interval`) the joint round runs through after every
/// member has applied past every earlier acknowledged put.
const FLUSHES: u32 = 3;
/// Every run writes under its own prefix below this one.
const ROOT: &str = "/raft/";
/// An election takes 1-2 s (10-20 ticks of 100 ms); allow several on a busy machine.
const ELECTION_TIMEOUT: Duration = Duration::from_secs(20);
/// A survivor's put that was forwarded to the killed leader only fails after the store's
/// 5 s request timeout, so writes may stall that long after a kill.
const RESUME_TIMEOUT: Duration = Duration::from_secs(20);
/// How long the members write between the steps of the test.
const RUN: Duration = Duration::from_millis(1500);
/// How long a reopened member's revision must stay put before it is read.
const SETTLE: Duration = Duration::from_millis(500);
const POLL: Duration = Duration::from_millis(20);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_sigkill_and_restart_lose_no_acknowledged_put() -> Result<()> {
    let cluster = Cluster::new()?;
    let mut members = Members::default();
    for member in 0..NAMES.len() {
        members.start(&cluster, member, 0).await?;
    }
    let leader = elect_and_write(&members).await?;
    let mut finished = vec![kill_leader(&mut members, leader).await?];
    restart(&mut members, &cluster, leader).await?;
    finished.extend(members.kill_all().await?);
    let joint = run_together(&mut members, &cluster, &finished).await?;
    finished.extend(joint);
    for process in &finished {
        eprintln!(
            "{} generation {}: {} acks, torn last line: {}",
            NAMES[process.member],
            process.generation,
            process.output.acks.len(),
            process.output.torn_last_line
        );
    }
    check_data_dirs(&cluster, &finished).await
}

/// Waits for the first leader and lets every member write through it; returns the leader.
async fn elect_and_write(members: &Members) -> Result<usize> {
    let started = Instant::now();
    let leader = members.wait_for_sole_leader().await?;
    eprintln!(
        "{} leads, elected {:?} after all members were ready",
        NAMES[leader],
        members.role_changed_at(leader).duration_since(started)
    );
    tokio::time::sleep(RUN).await;
    let counts = members.ack_counts();
    eprintln!("acks before the kill: {}", show_counts(&counts));
    for (member, count) in counts.iter().enumerate() {
        ensure!(
            count.is_some_and(|count| count > 0),
            "{} acknowledged no put in {RUN:?}: writes do not go through every member",
            NAMES[member]
        );
    }
    Ok(leader)
}

/// SIGKILLs the leader; another member must take the lead and both survivors must go on
/// acknowledging puts.
async fn kill_leader(members: &mut Members, leader: usize) -> Result<FinishedProcess> {
    let killed_at = Instant::now();
    let killed = members.kill(leader).await?;
    let new_leader = members.wait_for_sole_leader().await?;
    eprintln!(
        "{} killed; {} leads {:?} later",
        NAMES[leader],
        NAMES[new_leader],
        members
            .role_changed_at(new_leader)
            .duration_since(killed_at)
    );
    members.wait_for_new_acks(&members.ack_counts()).await?;
    eprintln!(
        "both survivors acknowledge again {:?} after the kill",
        killed_at.elapsed()
    );
    members
        .check_all_ack_during(RUN, "after the leader was killed")
        .await?;
    Ok(killed)
}

/// Starts `member` again on its data directory; it must catch up and take writes again.
async fn restart(members: &mut Members, cluster: &Cluster, member: usize) -> Result<()> {
    members.start(cluster, member, 1).await?;
    let restarted_at = Instant::now();
    let mut before = members.ack_counts();
    before[member] = Some(0);
    members.wait_for_new_acks(&before).await?;
    eprintln!(
        "{} restarted; it acknowledges puts {:?} after `ready`",
        NAMES[member],
        restarted_at.elapsed()
    );
    members
        .check_all_ack_during(RUN, "after the old leader restarted")
        .await
}

/// The joint round: starts every member again on its data directory, waits for a leader
/// and until each member has acknowledged a put of its own, above every earlier ack, so it
/// has applied every earlier acknowledged put; lets them write through a few state flushes,
/// which makes that durable on each member, and SIGKILLs them all.
async fn run_together(
    members: &mut Members,
    cluster: &Cluster,
    earlier: &[FinishedProcess],
) -> Result<Vec<FinishedProcess>> {
    let started = Instant::now();
    for member in 0..NAMES.len() {
        members.start(cluster, member, JOINT).await?;
    }
    let ready: Vec<String> = members
        .live()
        .map(|(member, process)| format!("{}={}", NAMES[member], process.ready_revision()))
        .collect();
    eprintln!(
        "all members restarted together; ready at revisions {}",
        ready.join(" ")
    );
    let leader = members.wait_for_sole_leader().await?;
    eprintln!(
        "{} leads {:?} after the joint restart began",
        NAMES[leader],
        members.role_changed_at(leader).duration_since(started)
    );
    members.wait_for_new_acks(&[Some(0); NAMES.len()]).await?;
    eprintln!(
        "every member acknowledges puts {:?} after the joint restart began",
        started.elapsed()
    );
    let acked_before = earlier
        .iter()
        .flat_map(|process| &process.output.acks)
        .map(|ack| ack.mod_revision)
        .max()
        .unwrap_or(0);
    for (member, process) in members.live() {
        let output = process.output();
        let first = output.acks.iter().map(|ack| ack.mod_revision).min();
        ensure!(
            first.is_some_and(|first| first > acked_before),
            "{} acknowledged a put of the joint round at revision {first:?}, not above {acked_before}, the last revision acknowledged before it",
            NAMES[member]
        );
    }
    let flush_interval = cluster.store_config(0)?.flush_interval;
    members
        .check_all_ack_during(flush_interval * FLUSHES, "in the joint round")
        .await?;
    members.kill_all().await
}

/// Reads every member's data directory back on its own and checks it against every ack.
async fn check_data_dirs(cluster: &Cluster, finished: &[FinishedProcess]) -> Result<()> {
    let mut states = Vec::new();
    for member in 0..NAMES.len() {
        let state = read_member_alone(cluster, member).await?;
        eprintln!(
            "{} reopened alone at revision {}",
            state.name, state.current_revision
        );
        states.push(state);
    }
    let acked: usize = finished
        .iter()
        .map(|process| process.output.acks.len())
        .sum();
    let furthest = states.iter().map(|state| state.current_revision).max();
    eprintln!(
        "{acked} puts acknowledged; the furthest member holds {} revisions",
        furthest.unwrap_or(0)
    );
    check_acks_distinct(finished)?;
    for state in &states {
        check_member(state, finished).with_context(|| format!("member {}", state.name))?;
    }
    check_members_agree(&states)
}

/// What outlives a member's processes: its name, data directory and peer address.
struct Cluster {
    run_prefix: String,
    dirs: Vec<TempDir>,
    addrs: Vec<SocketAddr>,
    initial_cluster: String,
}

impl Cluster {
    fn new() -> Result<Cluster> {
        let addrs = free_loopback_addrs(NAMES.len())?;
        let initial_cluster = NAMES
            .iter()
            .zip(&addrs)
            .map(|(name, addr)| format!("{name}={addr}"))
            .collect::<Vec<_>>()
            .join(",");
        let dirs = NAMES
            .iter()
            .map(|_| tempfile::tempdir())
            .collect::<std::io::Result<_>>()?;
        Ok(Cluster {
            run_prefix: format!("{ROOT}{:08x}/", rand::random::<u32>()),
            dirs,
            addrs,
            initial_cluster,
        })
    }

    /// Each process of a member writes under its own generation, so that a restarted
    /// member never puts a key its earlier process put.
    fn args(&self, member: usize, generation: u32) -> MemberArgs {
        MemberArgs {
            name: NAMES[member].to_string(),
            data_dir: self.dirs[member].path().to_path_buf(),
            initial_cluster: self.initial_cluster.clone(),
            prefix: format!("{}g{generation}/", self.run_prefix),
            writers: WRITERS,
        }
    }

    fn store_config(&self, member: usize) -> Result<StoreConfig> {
        let mut config = StoreConfig::new(self.dirs[member].path());
        config.cluster = Some(ClusterConfig {
            name: NAMES[member].to_string(),
            peer_listen: self.addrs[member],
            initial_cluster: ClusterConfig::parse_initial_cluster(&self.initial_cluster)?,
            initial_cluster_state: Default::default(),
            initial_cluster_token: String::new(),
        });
        Ok(config)
    }
}

/// A member process that is gone, with everything it printed.
struct FinishedProcess {
    member: usize,
    generation: u32,
    output: MemberOutput,
}

/// The running process of each member, by member index.
#[derive(Default)]
struct Members {
    running: [Option<(u32, MemberProcess)>; NAMES.len()],
}

impl Members {
    async fn start(&mut self, cluster: &Cluster, member: usize, generation: u32) -> Result<()> {
        let process =
            MemberProcess::start(store_member(), &cluster.args(member, generation)).await?;
        self.running[member] = Some((generation, process));
        Ok(())
    }

    fn live(&self) -> impl Iterator<Item = (usize, &MemberProcess)> {
        self.running
            .iter()
            .enumerate()
            .filter_map(|(member, process)| Some((member, &process.as_ref()?.1)))
    }

    async fn kill(&mut self, member: usize) -> Result<FinishedProcess> {
        let (generation, process) = self.running[member]
            .take()
            .with_context(|| format!("{} is not running", NAMES[member]))?;
        Ok(FinishedProcess {
            member,
            generation,
            output: process.kill().await?,
        })
    }

    async fn kill_all(&mut self) -> Result<Vec<FinishedProcess>> {
        let mut finished = Vec::new();
        for member in 0..NAMES.len() {
            if self.running[member].is_some() {
                finished.push(self.kill(member).await?);
            }
        }
        Ok(finished)
    }

    /// Acks printed so far by each member's current process (`None`: not running).
    fn ack_counts(&self) -> Vec<Option<usize>> {
        let mut counts = vec![None; NAMES.len()];
        for (member, process) in self.live() {
            counts[member] = Some(process.output().acks.len());
        }
        counts
    }

    fn role_changed_at(&self, member: usize) -> Instant {
        self.live()
            .find(|&(live, _)| live == member)
            .and_then(|(_, process)| process.output().roles.last().map(|&(at, _)| at))
            .unwrap_or_else(Instant::now)
    }

    /// Fails if a member's process is gone without being killed.
    fn ensure_alive(&self) -> Result<()> {
        for (_, process) in self.live() {
            ensure!(
                !process.output().ended,
                "{} exited by itself; its stderr above says why",
                process.name()
            );
        }
        Ok(())
    }

    /// Waits until exactly one running member says it leads; returns it.
    async fn wait_for_sole_leader(&self) -> Result<usize> {
        wait_for("exactly one member to lead", ELECTION_TIMEOUT, || {
            self.ensure_alive()?;
            let leaders: Vec<usize> = self
                .live()
                .filter(|(_, process)| process.output().role() == Some(Role::Leader))
                .map(|(member, _)| member)
                .collect();
            Ok((leaders.len() == 1).then(|| leaders[0]))
        })
        .await
    }

    /// Waits until every running member has printed more acks than in `counts`
    /// (a member not running there counts as 0).
    async fn wait_for_new_acks(&self, counts: &[Option<usize>]) -> Result<()> {
        let waited = wait_for(
            "every running member to acknowledge a new put",
            RESUME_TIMEOUT,
            || {
                self.ensure_alive()?;
                let now = self.ack_counts();
                let resumed =
                    |(now, before): (&Option<usize>, &Option<usize>)| now.is_none() || now > before;
                Ok(now.iter().zip(counts).all(resumed).then_some(()))
            },
        )
        .await;
        waited.with_context(|| {
            format!(
                "acks went from {} to {}",
                show_counts(counts),
                show_counts(&self.ack_counts())
            )
        })
    }

    /// Lets the members write for `run`; every running member must acknowledge puts in it.
    async fn check_all_ack_during(&self, run: Duration, when: &str) -> Result<()> {
        let before = self.ack_counts();
        tokio::time::sleep(run).await;
        self.ensure_alive()?;
        let after = self.ack_counts();
        let during: Vec<Option<usize>> = after
            .iter()
            .zip(&before)
            .map(|(after, before)| Some(after.as_ref()? - before.as_ref()?))
            .collect();
        eprintln!("acks in {run:?} {when}: {}", show_counts(&during));
        for (member, count) in during.iter().enumerate() {
            ensure!(
                *count != Some(0),
                "{} acknowledged no put in {run:?} {when}: writes stopped",
                NAMES[member]
            );
        }
        Ok(())
    }
}

fn store_member() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_store-member"))
}

fn show_counts(counts: &[Option<usize>]) -> String {
    NAMES
        .iter()
        .zip(counts)
        .map(|(name, count)| match count {
            Some(count) => format!("{name}={count}"),
            None => format!("{name}=down"),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

async fn wait_for<T>(
    what: &str,
    timeout: Duration,
    mut check: impl FnMut() -> Result<Option<T>>,
) -> Result<T> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(found) = check()? {
            return Ok(found);
        }
        ensure!(Instant::now() < deadline, "waited {timeout:?} for {what}");
        tokio::time::sleep(POLL).await;
    }
}

/// One member's own applied state, read from its data directory with no peers up.
struct MemberState {
    name: &'static str,
    current_revision: i64,
    /// Every key of the run, by its mod_revision.
    by_revision: BTreeMap<i64, KeyValue>,
}

/// Opens a member's data directory in-process as the same member. Alone it has no quorum,
/// so nothing new commits; it applies what its log says was committed, and is read once
/// its revision stays put.
async fn read_member_alone(cluster: &Cluster, member: usize) -> Result<MemberState> {
    let name = NAMES[member];
    let store = Store::open(cluster.store_config(member)?)
        .await
        .with_context(|| format!("reopening {name}'s data directory"))?;
    let current_revision = settled_revision(&store).await;
    let resp = store
        .range(RangeRequest {
            serializable: true,
            ..RangeRequest::prefix(cluster.run_prefix.as_str())
        })
        .await?;
    store.close().await?;
    ensure!(
        resp.header.revision == current_revision,
        "{name}: read at revision {} after its revision settled at {current_revision}",
        resp.header.revision
    );
    ensure!(
        !resp.more && resp.count == resp.kvs.len() as i64,
        "{name}: a prefix read without a limit returned {} of {} keys",
        resp.kvs.len(),
        resp.count
    );
    let mut by_revision = BTreeMap::new();
    for kv in resp.kvs {
        if let Some(other) = by_revision.insert(kv.mod_revision, kv) {
            bail!(
                "{name}: revision {} holds both {} and another key: a revision was applied twice",
                other.mod_revision,
                String::from_utf8_lossy(&other.key)
            );
        }
    }
    Ok(MemberState {
        name,
        current_revision,
        by_revision,
    })
}

async fn settled_revision(store: &Store) -> i64 {
    let mut revision = store.kv().current_revision();
    let mut since = Instant::now();
    while since.elapsed() < SETTLE {
        tokio::time::sleep(POLL).await;
        let now = store.kv().current_revision();
        if now != revision {
            (revision, since) = (now, Instant::now());
        }
    }
    revision
}

/// Revisions are global: no two acknowledged puts, from any member, share one.
fn check_acks_distinct(finished: &[FinishedProcess]) -> Result<()> {
    let mut by_revision: BTreeMap<i64, &Ack> = BTreeMap::new();
    for process in finished {
        for ack in &process.output.acks {
            if let Some(other) = by_revision.insert(ack.mod_revision, ack) {
                bail!(
                    "{} and {} were both acknowledged at revision {}",
                    other.key,
                    ack.key,
                    ack.mod_revision
                );
            }
        }
    }
    Ok(())
}

/// A member's history: each of its revisions 1..=current holds exactly one key of the run,
/// put once, with its value; every acknowledged put it has reached is at its acked
/// revision; and it has reached every put acknowledged before the joint round.
fn check_member(state: &MemberState, finished: &[FinishedProcess]) -> Result<()> {
    let current = state.current_revision;
    ensure!(
        state.by_revision.keys().copied().eq(1..=current),
        "at revision {current} it holds {} keys with revisions {:?}..={:?}, expected one for each of 1..={current}",
        state.by_revision.len(),
        state.by_revision.keys().next(),
        state.by_revision.keys().last()
    );
    for kv in state.by_revision.values() {
        check_put_once(kv)?;
    }
    let (mut beyond, mut own_beyond) = (0, 0);
    for process in finished {
        let before_joint = process.generation < JOINT;
        for ack in &process.output.acks {
            if !check_ack(state, ack, before_joint)? {
                beyond += 1;
                own_beyond += usize::from(NAMES[process.member] == state.name);
            }
        }
    }
    eprintln!(
        "{}: {beyond} puts acknowledged in the joint round ({own_beyond} by itself) lie beyond its revision",
        state.name
    );
    Ok(())
}

fn check_put_once(kv: &KeyValue) -> Result<()> {
    let key = String::from_utf8_lossy(&kv.key);
    ensure!(
        kv.value == value_for_key(&kv.key, DEFAULT_VALUE_SIZE),
        "{key} reads back with a value ({} bytes) other than the one written",
        kv.value.len()
    );
    ensure!(
        (kv.create_revision, kv.version) == (kv.mod_revision, 1),
        "{key} was put once but reads back with create_revision {}, mod_revision {}, version {}",
        kv.create_revision,
        kv.mod_revision,
        kv.version
    );
    Ok(())
}

/// `before_joint`: the put was acknowledged before the joint round, in which every member
/// applied past it and flushed its state, so it must be here. Returns whether it is here.
fn check_ack(state: &MemberState, ack: &Ack, before_joint: bool) -> Result<bool> {
    let Some(kv) = state.by_revision.get(&ack.mod_revision) else {
        ensure!(
            !before_joint,
            "{} was acknowledged at revision {} before the joint round, but this member reopens at revision {}: an acknowledged put is gone",
            ack.key,
            ack.mod_revision,
            state.current_revision
        );
        // Acknowledged in the joint round beyond what this member shows alone: it had not
        // applied the put when it was killed, or had not yet made its commit durable.
        return Ok(false);
    };
    ensure!(
        kv.key == ack.key.as_bytes(),
        "{} was acknowledged at revision {}, but that revision holds {}",
        ack.key,
        ack.mod_revision,
        String::from_utf8_lossy(&kv.key)
    );
    Ok(true)
}

/// The members hold the same key at every revision up to the lowest one they reached.
fn check_members_agree(states: &[MemberState]) -> Result<()> {
    let common = states
        .iter()
        .map(|state| state.current_revision)
        .min()
        .unwrap_or(0);
    for revision in 1..=common {
        let keys: Vec<&[u8]> = states
            .iter()
            .map(|state| state.by_revision[&revision].key.as_slice())
            .collect();
        ensure!(
            keys.windows(2).all(|pair| pair[0] == pair[1]),
            "the members diverge at revision {revision}: {}",
            states
                .iter()
                .zip(&keys)
                .map(|(state, key)| format!("{} has {}", state.name, String::from_utf8_lossy(key)))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    eprintln!("the members agree on revisions 1..={common}");
    Ok(())
}
