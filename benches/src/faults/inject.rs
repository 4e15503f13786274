//! The faults, each picked and timed by a run's seeded random source:
//! SIGKILL of members, SIGSTOP pauses longer than the election timeout,
//! partitions and one-way loss between members (nftables in their
//! namespaces), and crashes at failpoints. Each waits out its fault and
//! undoes it before it returns.

use std::time::{Duration, Instant};

use anyhow::Result;
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
}

impl Kind {
    pub const ALL: [Kind; 10] = [
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
        }
    }
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
}

fn pick(rng: &mut StdRng, (min, max): (Duration, Duration)) -> Duration {
    let (min, max) = (min.as_millis() as u64, max.as_millis() as u64);
    Duration::from_millis(rng.gen_range(min..=max.max(min)))
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
    };
    Ok(Injected { kind, what, rejoin })
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
