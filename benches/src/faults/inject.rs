//! The faults, each picked and timed by a run's seeded random source:
//! SIGKILL of members, SIGSTOP pauses longer than the election timeout,
//! partitions and one-way loss between members (nftables in their
//! namespaces), and crashes at failpoints. Each waits out its fault and
//! undoes it before it returns.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::Rng;

use super::cluster::Cluster;
use super::net::Hosts;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, clap::ValueEnum)]
pub enum Kind {
    KillOne,
    KillLeader,
    KillMajority,
    KillAll,
    PauseOne,
    PauseLeader,
    PartitionLeader,
    PartitionMinority,
    PartitionBridge,
    OneWay,
    /// A member dies at a crash point of a failpoints build.
    Crash,
    /// Every member loses power: each dies at a write, losing what it had
    /// not fsynced (`wal::lose_unsynced`, a failpoints build).
    PowerCut,
    /// One member's wall clock jumps (libfaketime); its monotonic clock
    /// does not, as with an NTP step.
    ClockJump,
    /// Another process takes every byte left on one member's file system
    /// (its data directory is on a small tmpfs of its own), half the time
    /// also the room the member gives itself back from its reserve; then
    /// the space is freed.
    FullDisk,
}

/// What a member logs when its file system is short and it refuses writes
/// that add data, when it has room again, and when a write found the disk
/// full and it stops (skiff-store's `disk_space` and `durability`).
const ALMOST_FULL: &str = "the data directory's file system is almost full";
const ROOM_AGAIN: &str = "the data directory's file system has room again";
const STOPS_FULL: &str = "the file system of the data directory is full. This member stops";
/// How soon after space is freed a member that refused writes must take
/// them again (it looks every 100 ms; the rest is the client's retry).
const RECOVER_WITHIN: Duration = Duration::from_secs(10);

/// The crash points a running cluster passes (docs/failpoints.md). Of the
/// others, the defrag points are reached by asking the armed member to
/// defragment (DEFRAG_POINTS); a snapshot install and a compaction need
/// a state a run does not make, and have process tests of their own.
const CRASH_POINTS: [&str; 6] = [
    "wal::before_fsync",
    "wal::after_fsync",
    "raft::before_persist",
    "raft::after_persist",
    "apply::before_answer",
    "peer::send",
];

/// Crash points in a defragmentation: a `crash` fault picks one of them a
/// quarter of the time, and then asks the member to defragment.
const DEFRAG_POINTS: [&str; 2] = ["defrag::mid", "defrag::switched"];

/// How long an armed member may take to reach its crash point before it
/// is killed instead.
const CRASH_WITHIN: Duration = Duration::from_secs(15);

/// libfaketime, as Debian's `faketime` package installs it.
pub const LIBFAKETIME: [&str; 2] = [
    "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/faketime/libfaketime.so.1",
];

impl Kind {
    pub const ALL: [Kind; 14] = [
        Kind::KillOne,
        Kind::KillLeader,
        Kind::KillMajority,
        Kind::KillAll,
        Kind::PauseOne,
        Kind::PauseLeader,
        Kind::PartitionLeader,
        Kind::PartitionMinority,
        Kind::PartitionBridge,
        Kind::OneWay,
        Kind::Crash,
        Kind::PowerCut,
        Kind::ClockJump,
        Kind::FullDisk,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Kind::KillOne => "kill one",
            Kind::KillLeader => "kill the leader",
            Kind::KillMajority => "kill a majority",
            Kind::KillAll => "kill all",
            Kind::PauseOne => "pause one",
            Kind::PauseLeader => "pause the leader",
            Kind::PartitionLeader => "isolate the leader",
            Kind::PartitionMinority => "partition a minority",
            Kind::PartitionBridge => "partition with a bridge",
            Kind::OneWay => "one-way loss",
            Kind::Crash => "crash at a failpoint",
            Kind::PowerCut => "power cut of all",
            Kind::ClockJump => "wall clock jump",
            Kind::FullDisk => "full disk",
        }
    }

    /// What this kind needs that the machine or the binary may lack.
    pub fn needs(self) -> Option<Need> {
        match self {
            Kind::Crash | Kind::PowerCut => Some(Need::Failpoints),
            Kind::ClockJump => Some(Need::Faketime),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// A skiff built with `--features failpoints`.
    Failpoints,
    /// libfaketime.
    Faketime,
}

impl Need {
    /// Why the need is not met here, if it is not.
    pub fn missing(self, skiff_version: &str) -> Option<String> {
        match self {
            Need::Failpoints if !skiff_version.contains("+failpoints") => Some(
                "the skiff binary has no crash points (cargo build -p skiff --features failpoints, then --skiff-bin)"
                    .into(),
            ),
            Need::Faketime if libfaketime().is_none() => {
                Some("libfaketime is missing (apt-get install faketime)".into())
            }
            _ => None,
        }
    }
}

pub fn libfaketime() -> Option<&'static str> {
    LIBFAKETIME
        .into_iter()
        .find(|p| std::path::Path::new(p).is_file())
}

/// How long faults last.
#[derive(Debug, Clone, Copy)]
pub struct Lengths {
    /// A partition or a loss: from `min` to `max`.
    pub partition: (Duration, Duration),
    /// A pause (always longer than the election timeout) or a member down.
    pub outage: (Duration, Duration),
}

/// What one fault did.
#[derive(Debug, Clone)]
pub struct Injected {
    pub kind: Kind,
    pub what: String,
    /// For a partition: how long after it healed every cut-off member
    /// followed the leader again.
    pub rejoin: Option<Duration>,
    /// What the fault should have made a member do and it did not.
    pub missed: Vec<String>,
}

fn pick(rng: &mut StdRng, (min, max): (Duration, Duration)) -> Duration {
    let (min, max) = (min.as_millis() as u64, max.as_millis() as u64);
    Duration::from_millis(rng.gen_range(min..=max.max(min)))
}

/// The leader half the time (any member when there is none), otherwise any
/// member: faults on the leader test elections, faults elsewhere catch-up.
async fn leader_half_the_time(cluster: &Cluster, rng: &mut StdRng) -> usize {
    match rng.gen_bool(0.5) {
        true => leader_or_any(cluster, rng).await,
        false => rng.gen_range(0..cluster.members.len()),
    }
}

/// The leader, or a random member while there is none.
async fn leader_or_any(cluster: &Cluster, rng: &mut StdRng) -> usize {
    match cluster.leader().await {
        Some(leader) => leader,
        None => rng.gen_range(0..cluster.members.len()),
    }
}

pub async fn inject(
    kind: Kind,
    cluster: &mut Cluster,
    hosts: &Hosts,
    rng: &mut StdRng,
    lengths: Lengths,
) -> Result<Injected> {
    let n = cluster.members.len();
    let names = |members: &[usize]| {
        members
            .iter()
            .map(|&i| format!("m{i}"))
            .collect::<Vec<_>>()
            .join(",")
    };
    let mut rejoin = None;
    let mut missed = Vec::new();
    let what = match kind {
        Kind::KillOne | Kind::KillLeader | Kind::KillMajority | Kind::KillAll => {
            let victims: Vec<usize> = match kind {
                Kind::KillOne => vec![rng.gen_range(0..n)],
                Kind::KillLeader => vec![leader_or_any(cluster, rng).await],
                Kind::KillMajority => {
                    let mut all: Vec<usize> = (0..n).collect();
                    all.shuffle(rng);
                    all.truncate(n / 2 + 1);
                    all
                }
                _ => (0..n).collect(),
            };
            let down = pick(rng, lengths.outage);
            for &i in &victims {
                cluster.kill(i);
            }
            tokio::time::sleep(down).await;
            for &i in &victims {
                cluster.restart(i)?;
            }
            format!("SIGKILL {} for {down:?}", names(&victims))
        }
        Kind::PauseOne | Kind::PauseLeader => {
            let victim = match kind {
                Kind::PauseOne => rng.gen_range(0..n),
                _ => leader_or_any(cluster, rng).await,
            };
            let paused = pick(rng, lengths.outage);
            cluster.pause(victim);
            tokio::time::sleep(paused).await;
            cluster.resume(victim);
            format!("SIGSTOP m{victim} for {paused:?}")
        }
        Kind::PartitionLeader | Kind::PartitionMinority | Kind::PartitionBridge => {
            let mut all: Vec<usize> = (0..n).collect();
            all.shuffle(rng);
            let (left, right, bridge): (Vec<usize>, Vec<usize>, Option<usize>) = match kind {
                Kind::PartitionLeader => {
                    let leader = leader_or_any(cluster, rng).await;
                    (
                        vec![leader],
                        (0..n).filter(|&i| i != leader).collect(),
                        None,
                    )
                }
                Kind::PartitionMinority => {
                    let size = rng.gen_range(1..=(n - 1) / 2);
                    (all[..size].to_vec(), all[size..].to_vec(), None)
                }
                _ => {
                    // One member sees both sides, which do not see each other.
                    let bridge = all[0];
                    let rest = &all[1..];
                    let half = rest.len() / 2;
                    (rest[..half].to_vec(), rest[half..].to_vec(), Some(bridge))
                }
            };
            let length = pick(rng, lengths.partition);
            let logs: Vec<u64> = left.iter().map(|&l| cluster.log_len(l)).collect();
            // Only a peer a member reaches when the partition begins can
            // become unreachable (one restarting, or lost already, cannot).
            let reached: Vec<Vec<usize>> = left
                .iter()
                .map(|&l| reachable_peers(&cluster.log_since(l, 0), &right))
                .collect();
            for &l in &left {
                hosts.cut(l, &right, true)?;
            }
            for &r in &right {
                hosts.cut(r, &left, true)?;
            }
            tokio::time::sleep(length).await;
            hosts.heal_all()?;
            let healed = Instant::now();
            rejoin = Some(rejoin_after(cluster, healed).await);
            if length >= LOGGED_AFTER {
                // A peer is reached again at its next redial, up to a
                // second after the partition healed.
                let deadline = Instant::now() + Duration::from_secs(3);
                loop {
                    missed = left
                        .iter()
                        .zip(&logs)
                        .zip(&reached)
                        .flat_map(|((&l, &from), reached)| {
                            unlogged(&cluster.log_since(l, from), l, &right, reached)
                        })
                        .collect();
                    if missed.is_empty() || Instant::now() > deadline {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
            match bridge {
                Some(b) => format!(
                    "{} | {} apart, m{b} seeing both, for {length:?}",
                    names(&left),
                    names(&right)
                ),
                None => format!("{} | {} for {length:?}", names(&left), names(&right)),
            }
        }
        Kind::OneWay => {
            let from = rng.gen_range(0..n);
            let to = (from + rng.gen_range(1..n)) % n;
            let length = pick(rng, lengths.partition);
            hosts.cut(from, &[to], false)?;
            tokio::time::sleep(length).await;
            hosts.heal(from)?;
            let healed = Instant::now();
            rejoin = Some(rejoin_after(cluster, healed).await);
            format!("m{from} -> m{to} dropped for {length:?}")
        }
        Kind::Crash => {
            let victim = leader_half_the_time(cluster, rng).await;
            let armed = if rng.gen_bool(0.25) {
                let point = DEFRAG_POINTS[rng.gen_range(0..DEFRAG_POINTS.len())];
                arm(cluster, victim, &format!("{point}=return"))?;
                let asked = defragment(cluster, victim).await;
                format!("{point}, asked to defragment ({asked})")
            } else {
                let point = CRASH_POINTS[rng.gen_range(0..CRASH_POINTS.len())];
                let passes = rng.gen_range(1..200);
                arm(cluster, victim, &format!("{point}={passes}*off->return"))?;
                format!("{point} after {passes} passes")
            };
            let ended = crash_or_kill(cluster, victim).await;
            cluster.restart(victim)?;
            format!("m{victim} armed at {armed}: {ended}")
        }
        Kind::PowerCut => {
            let mut armed = Vec::new();
            for i in 0..n {
                let passes = rng.gen_range(1..300);
                let torn = if rng.gen_bool(0.5) { "(torn)" } else { "" };
                arm(
                    cluster,
                    i,
                    &format!("wal::lose_unsynced={passes}*off->return{torn}"),
                )?;
                armed.push(format!("m{i} at write {passes}{torn}"));
            }
            // Each dies at its own write; whoever has not when the others
            // have (or in time) loses power by SIGKILL.
            let deadline = Instant::now() + CRASH_WITHIN;
            let mut ended: Vec<Option<String>> = vec![None; n];
            while ended.iter().any(Option::is_none) && Instant::now() < deadline {
                for (i, end) in ended.iter_mut().enumerate() {
                    if end.is_none() {
                        *end = cluster.exited(i).map(|how| format!("m{i} crashed ({how})"));
                    }
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            let ended: Vec<String> = ended
                .into_iter()
                .enumerate()
                .map(|(i, end)| {
                    end.unwrap_or_else(|| {
                        cluster.kill(i);
                        format!("m{i} not reached, SIGKILL")
                    })
                })
                .collect();
            for i in 0..n {
                cluster.restart(i)?;
            }
            format!("{}: {}", armed.join(", "), ended.join(", "))
        }
        Kind::ClockJump => {
            // The leader half the time: it expires leases.
            let victim = leader_half_the_time(cluster, rng).await;
            let minutes: i64 = rng.gen_range(1..=180) * if rng.gen_bool(0.5) { 1 } else { -1 };
            let length = pick(rng, lengths.outage) * 2;
            let offset_file = cluster.clock_file(victim);
            if !cluster.members[victim]
                .env
                .iter()
                .any(|(k, _)| k == "LD_PRELOAD")
            {
                // Started under libfaketime at +0 (its monotonic clock is
                // never faked), then the wall clock jumps.
                std::fs::write(&offset_file, "+0\n")?;
                let lib = libfaketime().context("libfaketime is missing")?;
                cluster.members[victim].env = vec![
                    ("LD_PRELOAD".into(), lib.into()),
                    (
                        "FAKETIME_TIMESTAMP_FILE".into(),
                        offset_file.display().to_string(),
                    ),
                    ("FAKETIME_DONT_FAKE_MONOTONIC".into(), "1".into()),
                    ("FAKETIME_CACHE_DURATION".into(), "1".into()),
                ];
                cluster.kill(victim);
                cluster.restart(victim)?;
                cluster.wait_healthy(Duration::from_secs(30)).await?;
            }
            std::fs::write(&offset_file, format!("{minutes:+}m\n"))?;
            tokio::time::sleep(length).await;
            std::fs::write(&offset_file, "+0\n")?;
            tokio::time::sleep(Duration::from_secs(2)).await;
            format!("m{victim}'s wall clock {minutes:+} min for {length:?}")
        }
        Kind::FullDisk => {
            let victim = leader_half_the_time(cluster, rng).await;
            let disk = cluster
                .disk(victim)
                .context("the members' data directories are not on disks of their own")?
                .to_path_buf();
            let greedy = rng.gen_bool(0.5);
            let length = pick(rng, lengths.outage) * 2;
            let from = cluster.log_len(victim);
            let fillers = [disk.join("filler"), disk.join("filler-2")];
            fill(&fillers[0])?;
            let until = Instant::now() + length;
            let mut refilled = false;
            while Instant::now() < until {
                if greedy && !refilled && cluster.log_since(victim, from).contains(ALMOST_FULL) {
                    fill(&fillers[1])?;
                    refilled = true;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            for filler in &fillers {
                if filler.exists() {
                    std::fs::remove_file(filler)
                        .with_context(|| format!("removing {}", filler.display()))?;
                }
            }
            let (how, wrong) = full_disk_outcome(cluster, victim, from).await;
            missed.extend(wrong);
            cluster.restart(victim)?;
            let also = if refilled {
                " (and then the reserve's room)"
            } else {
                ""
            };
            format!("m{victim}'s disk full{also} for {length:?}: {how}")
        }
    };
    Ok(Injected {
        kind,
        what,
        rejoin,
        missed,
    })
}

/// Takes every byte left on the file system of `path` with one file: all
/// but a MiB in one fallocate, then page by page until the kernel says
/// there is no room (the member writes meanwhile).
fn fill(path: &std::path::Path) -> Result<()> {
    use std::io::Write;
    use std::os::fd::AsRawFd;
    let dir = path.parent().context("a filler in a directory")?;
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .with_context(|| format!("creating {}", path.display()))?;
    let bulk = available_bytes(dir)?.saturating_sub(1 << 20);
    if bulk > 0 {
        // SAFETY: fallocate on a file this function holds open.
        // A failure (space taken meanwhile) leaves the writes below to fill.
        let _ = unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, bulk as libc::off_t) };
    }
    let page = [0u8; 4096];
    loop {
        match file.write(&page) {
            Ok(0) => return Ok(()),
            Ok(_) => {}
            Err(err) if err.raw_os_error() == Some(libc::ENOSPC) => return Ok(()),
            Err(err) => {
                return Err(err).with_context(|| format!("filling {}", path.display()));
            }
        }
    }
}

/// Bytes available to an unprivileged writer on the file system of `dir`.
fn available_bytes(dir: &std::path::Path) -> Result<u64> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes())?;
    // SAFETY: statvfs writes only into `stat`, which outlives the call.
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(path.as_ptr(), &mut stat) } != 0 {
        return Err(std::io::Error::last_os_error())
            .with_context(|| format!("statvfs {}", dir.display()));
    }
    Ok(stat.f_bavail as u64 * stat.f_frsize as u64)
}

/// What member `i` did about its full disk (its log since `from`), and
/// what it should have done and did not: either it refused writes (and,
/// space freed, takes them again), or a write found the disk full and it
/// stopped with exit status 74 saying so. Anything else (another exit, or
/// nothing logged at all) is wrong.
async fn full_disk_outcome(cluster: &mut Cluster, i: usize, from: u64) -> (String, Vec<String>) {
    let mut wrong = Vec::new();
    if let Some(status) = cluster.exited(i) {
        let log = cluster.log_since(i, from);
        if !status.contains("74") {
            wrong.push(format!("m{i} on a full disk ended with {status}, not 74"));
        }
        if !log.contains(STOPS_FULL) {
            wrong.push(format!(
                "m{i} ended ({status}) without saying its disk was full"
            ));
        }
        return (format!("it stopped ({status}), started again"), wrong);
    }
    if !cluster.log_since(i, from).contains(ALMOST_FULL) {
        wrong.push(format!(
            "m{i}'s disk was full and it neither refused writes nor stopped"
        ));
        return ("nothing logged".into(), wrong);
    }
    let deadline = Instant::now() + RECOVER_WITHIN;
    loop {
        if cluster.log_since(i, from).contains(ROOM_AGAIN) {
            return ("it refused writes, then took them again".into(), wrong);
        }
        if let Some(status) = cluster.exited(i) {
            let log = cluster.log_since(i, from);
            if !status.contains("74") || !log.contains(STOPS_FULL) {
                wrong.push(format!("m{i} on a full disk ended with {status}"));
            }
            return (format!("it refused writes, then stopped ({status})"), wrong);
        }
        if Instant::now() > deadline {
            wrong.push(format!(
                "m{i} did not take writes again within {RECOVER_WITHIN:?} of its disk's space being freed"
            ));
            return ("it refused writes and went on refusing them".into(), wrong);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A partition at least this long is logged by the members it cut off (a
/// peer is unreachable after a second of silence).
const LOGGED_AFTER: Duration = Duration::from_secs(3);

/// What member `member`'s log (since a partition from `peers` began)
/// lacks: a line saying each peer it reached then (`reached`) became
/// unreachable, and for every peer one saying it is reachable (again),
/// each naming the peer.
fn unlogged(log: &str, member: usize, peers: &[usize], reached: &[usize]) -> Vec<String> {
    let mut missed = Vec::new();
    for &peer in peers {
        let named = format!("peer=m{peer} ");
        let logged = |phrase: &str| {
            log.lines()
                .any(|line| line.contains(phrase) && line.contains(&named))
        };
        if reached.contains(&peer) && !logged("peer became unreachable") {
            missed.push(format!(
                "m{member} did not log \"peer became unreachable\" for m{peer}"
            ));
        }
        if !logged("peer is reachable") {
            missed.push(format!(
                "m{member} did not log \"peer is reachable (again)\" for m{peer}"
            ));
        }
    }
    missed
}

/// Which of `peers` a member's whole log shows reachable now: reached
/// since the member last started and not lost since.
fn reachable_peers(log: &str, peers: &[usize]) -> Vec<usize> {
    let mut reachable = vec![false; peers.len()];
    for line in log.lines() {
        if line.contains("opened write-ahead log") {
            reachable.fill(false);
            continue;
        }
        let up = line.contains("peer is reachable");
        if !up && !line.contains("peer became unreachable") {
            continue;
        }
        for (state, peer) in reachable.iter_mut().zip(peers) {
            if line.contains(&format!("peer=m{peer} ")) {
                *state = up;
            }
        }
    }
    peers
        .iter()
        .zip(reachable)
        .filter_map(|(&peer, up)| up.then_some(peer))
        .collect()
}

/// Restarts member `i` with `failpoints` set (its next start is without).
fn arm(cluster: &mut Cluster, i: usize, failpoints: &str) -> Result<()> {
    cluster.kill(i);
    cluster.members[i].failpoints = Some(failpoints.to_string());
    let started = cluster.restart(i);
    cluster.members[i].failpoints = None;
    started
}

/// Asks a member just restarted to defragment, again while it does not
/// answer yet (for up to CRASH_WITHIN): what came of the last request. An
/// armed member dies in the middle, so the request fails.
async fn defragment(cluster: &mut Cluster, i: usize) -> String {
    let deadline = Instant::now() + CRASH_WITHIN;
    loop {
        let outcome = tokio::time::timeout(Duration::from_secs(5), cluster.defragment(i)).await;
        let not_up = match &outcome {
            Ok(Ok(())) => return "it answered".into(),
            Ok(Err(status)) => status.code() == tonic::Code::Unavailable,
            Err(_) => true,
        };
        if !not_up || cluster.gone(i) || Instant::now() > deadline {
            return match outcome {
                Ok(Err(status)) => format!("{:?}: {}", status.code(), status.message()),
                _ => "no answer".into(),
            };
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Waits for an armed member to die at its point, or kills it: which.
async fn crash_or_kill(cluster: &mut Cluster, i: usize) -> String {
    match cluster.wait_exit(i, CRASH_WITHIN).await {
        Some(how) => format!("crashed ({how})"),
        None => {
            cluster.kill(i);
            format!("not reached in {CRASH_WITHIN:?}, SIGKILL")
        }
    }
}

/// How long from `healed` until every member answers and names one
/// leader (at most 60 s, which is then what it reports).
async fn rejoin_after(cluster: &Cluster, healed: Instant) -> Duration {
    let limit = Duration::from_secs(60);
    loop {
        let mut leaders = Vec::new();
        for i in 0..cluster.members.len() {
            match cluster.status(i).await {
                Ok((_, leader, _)) => leaders.push(leader),
                Err(_) => leaders.push(0),
            }
        }
        let first = leaders[0];
        if first != 0 && leaders.iter().all(|&l| l == first) {
            return healed.elapsed();
        }
        if healed.elapsed() > limit {
            return limit;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOG: &str = "\
        INFO skiff_store::wal: opened write-ahead log dir=d\n\
        INFO skiff_store::raft::transport: peer is reachable peer=m1 id=1\n\
        INFO skiff_store::raft::transport: peer is reachable peer=m2 id=2\n\
        WARN skiff_store::raft::transport: peer became unreachable peer=m2 id=2 silent_for=1s\n";

    #[test]
    fn only_peers_reached_and_not_lost_since_the_last_start_are_reachable() {
        assert_eq!(reachable_peers(LOG, &[1, 2, 3]), [1]);
        let restarted = format!("{LOG}INFO skiff_store::wal: opened write-ahead log dir=d\n");
        assert!(reachable_peers(&restarted, &[1, 2]).is_empty());
        let again = format!("{LOG}INFO x: peer is reachable again peer=m2 id=2 away=3s\n");
        assert_eq!(reachable_peers(&again, &[1, 2]), [1, 2]);
    }

    #[test]
    fn a_partition_must_be_logged_for_the_peers_reached_when_it_began() {
        let during = "WARN x: peer became unreachable peer=m1 id=1\n\
                      INFO x: peer is reachable again peer=m1 id=1\n\
                      INFO x: peer is reachable peer=m2 id=2\n";
        assert!(unlogged(during, 0, &[1, 2], &[1]).is_empty());
        // m2 was reached too: its loss is missing.
        let missed = unlogged(during, 0, &[1, 2], &[1, 2]);
        assert_eq!(
            missed,
            ["m0 did not log \"peer became unreachable\" for m2"]
        );
        // Nothing said about m1's return.
        let silent = "WARN x: peer became unreachable peer=m1 id=1\n";
        assert_eq!(unlogged(silent, 0, &[1], &[1]).len(), 1);
        // m10 is not m1.
        let other = "WARN x: peer became unreachable peer=m10 id=1\n";
        assert_eq!(unlogged(other, 0, &[1], &[1]).len(), 2);
    }
}
