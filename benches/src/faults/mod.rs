//! `skiff-bench faults`: the fault-injection suite of the replicated store.
//! Each run starts three or five `skiff store` members, each in its own
//! network namespace acting as its own host, drives them from this machine
//! with KV, lease and watch clients, injects faults picked by the run's
//! seed, heals everything, and checks what the clients saw: the KV history
//! is linearizable, no acknowledged write is missing or shares its
//! revision, every watch stream was ordered, gap-free, duplicate-free,
//! atomic per revision and honest in its progress reports, no lease
//! expired early, and every member replays the same events with the same
//! HashKV. A run that fails prints its seed, which replays its faults.

mod check;
mod cluster;
mod inject;
mod net;
mod rest;
mod traffic;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Args;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use skiff_store::grpc::pb::etcdserverpb::kv_client::KvClient;
use skiff_store::grpc::pb::etcdserverpb::watch_client::WatchClient;
use skiff_store::grpc::pb::etcdserverpb::watch_request::RequestUnion;
use skiff_store::grpc::pb::etcdserverpb::{
    RangeRequest, WatchCreateRequest, WatchProgressRequest, WatchRequest,
};
use tonic::transport::Channel;

use crate::report::Table;
use check::{Violation, WatchEvent};
use cluster::Cluster;
use inject::{Injected, Kind, Lengths};
use net::Hosts;
use traffic::{Clock, Records, PREFIX};

/// The size of each member's own tmpfs in a run with a full-disk fault:
/// room for a run's data (a few MiB) and the 8 MiB reserve many times
/// over, small enough that filling it costs little memory.
const SMALL_DISK_MIB: u64 = 256;

#[derive(Debug, Args)]
pub struct FaultsArgs {
    /// A few minutes: one run per fault kind with three members, and one
    /// run of mixed faults with five.
    #[arg(long)]
    pub quick: bool,
    /// Keep starting runs (faults picked at random) for this long, e.g.
    /// `1h`; without it, `--runs` runs.
    #[arg(long, value_parser = parse_duration)]
    pub duration: Option<Duration>,
    /// Runs to make without --duration or --quick.
    #[arg(long, default_value_t = 1)]
    pub runs: u64,
    /// The first run's seed; run i uses seed + i. A failed run prints its
    /// seed: `--seed S --runs 1` with the same members and faults per run
    /// replays it.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Members per run (3 or 5); by default each run picks one.
    #[arg(long)]
    pub members: Option<usize>,
    /// Faults per run, one after the other, dealt from shuffled decks of
    /// the kinds (as many as the kinds: each once).
    #[arg(long, default_value_t = 6)]
    pub faults_per_run: usize,
    /// What the members run and the clients drive: `store` (skiff store,
    /// etcd KV, lease and watch traffic), `kubernetes` (skiff server, that
    /// traffic and the Kubernetes API's: ConfigMap writes with
    /// resourceVersions, paged lists, watches with bookmarks), or `both`,
    /// picked per run by its seed.
    #[arg(long, value_enum, default_value = "both")]
    pub profile: Profile,
    /// Only these kinds of faults.
    #[arg(long, value_enum, value_delimiter = ',')]
    pub kinds: Vec<Kind>,
    /// The longest partition, e.g. `60s` (the shortest is 1 s).
    #[arg(long, value_parser = parse_duration, default_value = "20s")]
    pub max_partition: Duration,
    /// How long after a partition heals every member may take to follow
    /// the leader again before it counts as a violation: two election
    /// timeouts (2 s) by default.
    #[arg(long, value_parser = parse_duration, default_value = "2s")]
    pub rejoin_limit: Duration,
    /// The skiff binary [default: the one beside this benchmark].
    #[arg(long)]
    pub skiff_bin: Option<PathBuf>,
    /// Where runs keep their data and logs (a failed run's are kept).
    #[arg(long)]
    pub work_dir: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Profile {
    Store,
    Kubernetes,
    Both,
}

fn parse_duration(text: &str) -> Result<Duration, String> {
    let (number, unit) = text
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .map_or((text, "s"), |at| text.split_at(at));
    let value: f64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a duration like 30s, 5m or 1h"))?;
    let seconds = match unit {
        "ms" => value / 1000.0,
        "s" => value,
        "m" => value * 60.0,
        "h" => value * 3600.0,
        _ => return Err(format!("{text:?}: the unit must be ms, s, m or h")),
    };
    Ok(Duration::from_secs_f64(seconds))
}

/// One run's plan: its seed, members and faults.
#[derive(Debug, Clone)]
struct Plan {
    seed: u64,
    members: usize,
    kinds: Vec<Kind>,
    /// `skiff server` members and the Kubernetes traffic too.
    kubernetes: bool,
}

/// What one run found.
struct Outcome {
    plan: Plan,
    injected: Vec<Injected>,
    answered: u64,
    unanswered: u64,
    watch_events: usize,
    /// For a Kubernetes run: what its REST clients did.
    rest: Option<String>,
    violations: Vec<Violation>,
    inconclusive: Option<String>,
    dir: PathBuf,
}

pub fn run(args: FaultsArgs) -> Result<()> {
    if let Some(missing) = net::missing_prerequisite() {
        if std::env::var_os("CI").is_some_and(|v| v == "true") {
            bail!("{missing}");
        }
        println!("skiff-bench faults: SKIPPED — {missing}");
        return Ok(());
    }
    let skiff = crate::versus::system::skiff_program(args.skiff_bin.as_deref())?;
    println!("skiff: {} ({})", skiff.path.display(), skiff.version);
    let kinds = available_kinds(&args, &skiff.version)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(run_all(args, kinds, &skiff.path))
}

/// The kinds asked for (all by default) that this machine and binary can
/// inject. One asked for by name, or any under CI=true, that cannot be is
/// an error; otherwise it is skipped, saying why and how to get it.
fn available_kinds(args: &FaultsArgs, skiff_version: &str) -> Result<Vec<Kind>> {
    let named = !args.kinds.is_empty();
    let requested = if named {
        args.kinds.clone()
    } else {
        Kind::ALL.to_vec()
    };
    let ci = std::env::var_os("CI").is_some_and(|v| v == "true");
    let mut kinds = Vec::new();
    for kind in requested {
        match kind.needs().and_then(|need| need.missing(skiff_version)) {
            None => kinds.push(kind),
            Some(why) if named || ci => bail!("cannot inject {}: {why}", kind.name()),
            Some(why) => println!("skiff-bench faults: SKIPPED {}: {why}", kind.name()),
        }
    }
    Ok(kinds)
}

fn plans(args: &FaultsArgs, kinds: Vec<Kind>, seed: u64) -> impl FnMut(u64) -> Option<Plan> + '_ {
    move |i| {
        let seed = seed + i;
        let mut rng = StdRng::seed_from_u64(seed);
        let mixed = |rng: &mut StdRng, count: usize| deal(&kinds, rng, count);
        if args.quick {
            // One run per kind, then a mixed run of five members, then
            // (unless only the store) a mixed run of skiff server members.
            let i = i as usize;
            let kubernetes_run = args.profile != Profile::Store;
            return match kinds.get(i) {
                Some(&kind) => Some(Plan {
                    seed,
                    members: args.members.unwrap_or(3),
                    kinds: vec![kind],
                    kubernetes: args.profile == Profile::Kubernetes,
                }),
                None if i == kinds.len() => Some(Plan {
                    seed,
                    members: args.members.unwrap_or(5),
                    kinds: mixed(&mut rng, 3),
                    kubernetes: args.profile == Profile::Kubernetes,
                }),
                None if i == kinds.len() + 1 && kubernetes_run => Some(Plan {
                    seed,
                    members: args.members.unwrap_or(3),
                    kinds: mixed(&mut rng, 3),
                    kubernetes: true,
                }),
                None => None,
            };
        }
        let members = args
            .members
            .unwrap_or(if rng.gen_bool(0.5) { 3 } else { 5 });
        let kubernetes = match args.profile {
            Profile::Store => false,
            Profile::Kubernetes => true,
            Profile::Both => rng.gen_bool(0.5),
        };
        Some(Plan {
            seed,
            members,
            kinds: mixed(&mut rng, args.faults_per_run),
            kubernetes,
        })
    }
}

/// `count` faults dealt from decks of `kinds`, each deck shuffled: no kind
/// comes twice before every other has come once, so a run of as many
/// faults as kinds injects each once, and a long run injects every kind
/// about as often as the others.
fn deal(kinds: &[Kind], rng: &mut StdRng, count: usize) -> Vec<Kind> {
    use rand::seq::SliceRandom;
    let mut dealt = Vec::with_capacity(count);
    while dealt.len() < count && !kinds.is_empty() {
        let mut deck = kinds.to_vec();
        deck.shuffle(rng);
        dealt.extend(deck);
    }
    dealt.truncate(count);
    dealt
}

async fn run_all(args: FaultsArgs, kinds: Vec<Kind>, skiff: &Path) -> Result<()> {
    let seed = args.seed.unwrap_or_else(|| rand::random::<u32>().into());
    let work = match &args.work_dir {
        Some(dir) => dir.clone(),
        None => std::env::temp_dir().join(format!("skiff-faults-{}", std::process::id())),
    };
    std::fs::create_dir_all(&work).with_context(|| format!("creating {}", work.display()))?;
    let lengths = if args.quick {
        Lengths {
            partition: (Duration::from_secs(1), Duration::from_secs(4)),
            outage: (Duration::from_millis(1_500), Duration::from_secs(3)),
        }
    } else {
        Lengths {
            partition: (
                Duration::from_secs(1),
                args.max_partition.max(Duration::from_secs(1)),
            ),
            outage: (Duration::from_millis(1_500), Duration::from_secs(6)),
        }
    };
    println!("seed {seed}; work directory {}", work.display());
    let started = Instant::now();
    let mut next_plan = plans(&args, kinds, seed);
    let mut outcomes = Vec::new();
    for i in 0.. {
        let more = match args.duration {
            Some(d) => started.elapsed() < d,
            None if args.quick => true,
            None => i < args.runs,
        };
        if !more {
            break;
        }
        let Some(plan) = next_plan(i) else { break };
        let dir = work.join(format!("run-{}", plan.seed));
        let outcome = one_run(skiff, plan, &dir, lengths).await?;
        print_run(&outcome, args.rejoin_limit);
        if outcome.violations.is_empty() && slow_rejoins(&outcome, args.rejoin_limit) == 0 {
            let _ = std::fs::remove_dir_all(&dir);
        }
        outcomes.push(outcome);
    }
    let failed = summarize(&outcomes, args.rejoin_limit, started.elapsed());
    if outcomes
        .iter()
        .all(|o| o.violations.is_empty() && slow_rejoins(o, args.rejoin_limit) == 0)
    {
        let _ = std::fs::remove_dir_all(&work);
    }
    if failed > 0 {
        bail!(
            "{failed} of {} runs found violations; replay one with its seed",
            outcomes.len()
        );
    }
    Ok(())
}

fn slow_rejoins(outcome: &Outcome, limit: Duration) -> usize {
    outcome
        .injected
        .iter()
        .filter(|f| f.rejoin.is_some_and(|r| r > limit))
        .count()
}

async fn one_run(skiff: &Path, plan: Plan, dir: &Path, lengths: Lengths) -> Result<Outcome> {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir)?;
    let mut rng = StdRng::seed_from_u64(plan.seed);
    let hosts = Hosts::create(plan.members)?;
    let token = format!("faults-{}", plan.seed);
    // Members on disks of their own when a full-disk fault is planned.
    let disk_mib = plan
        .kinds
        .contains(&Kind::FullDisk)
        .then_some(SMALL_DISK_MIB);
    let mut cluster = Cluster::start(skiff, &hosts, dir, &token, plan.kubernetes, disk_mib).await?;
    let channels = cluster.channels.clone();
    let start = current_revision(&channels).await? + 1;
    let records = Arc::new(Records::default());
    let clock = Clock(Instant::now());
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let mut tasks = Vec::new();
    for id in 1..=6u64 {
        tasks.push(tokio::spawn(traffic::kv_client(
            id,
            plan.seed,
            channels.clone(),
            records.clone(),
            stopped.clone(),
        )));
    }
    for id in 1..=2u64 {
        tasks.push(tokio::spawn(traffic::lease_client(
            id,
            plan.seed,
            channels.clone(),
            records.clone(),
            clock,
            stopped.clone(),
        )));
    }
    for id in 0..3usize {
        tasks.push(tokio::spawn(traffic::watcher(
            id,
            start,
            channels.clone(),
            records.clone(),
            clock,
            stopped.clone(),
        )));
    }
    if plan.kubernetes {
        let apis = cluster.apis().await?;
        for id in 1..=3u64 {
            tasks.push(tokio::spawn(rest::writer(
                id,
                plan.seed,
                apis.clone(),
                records.clone(),
                stopped.clone(),
            )));
        }
        tasks.push(tokio::spawn(rest::lister(
            apis.clone(),
            records.clone(),
            stopped.clone(),
        )));
        for id in 0..2usize {
            tasks.push(tokio::spawn(rest::watcher(
                id,
                apis.clone(),
                records.clone(),
                clock,
                stopped.clone(),
            )));
        }
    }
    let mut injected = Vec::new();
    let mut errors = Vec::new();
    tokio::time::sleep(Duration::from_secs(1)).await;
    for &kind in &plan.kinds {
        match inject::inject(kind, &mut cluster, &hosts, &mut rng, lengths).await {
            Ok(fault) => injected.push(fault),
            Err(err) => errors.push(format!("{err:#}")),
        }
        // Traffic on the healed cluster before the next fault.
        tokio::time::sleep(Duration::from_millis(rng.gen_range(500..2_000))).await;
    }
    let _ = stop.send(true);
    for task in tasks {
        let _ = tokio::time::timeout(Duration::from_secs(10), task).await;
    }
    // Everything healed and running before the checks.
    hosts.heal_all()?;
    for i in 0..cluster.members.len() {
        if cluster.paused(i) {
            cluster.resume(i);
        }
        if let Some(exited) = cluster.exited(i) {
            errors.push(format!("m{i} exited on its own ({exited})"));
        }
        cluster.restart(i)?;
    }
    cluster.wait_healthy(Duration::from_secs(60)).await?;
    let mut violations: Vec<Violation> = errors
        .into_iter()
        .map(|detail| Violation {
            kind: "fault failed",
            detail,
        })
        .collect();
    violations.extend(
        injected
            .iter()
            .flat_map(|f| f.missed.iter().map(move |detail| (f.kind, detail)))
            .map(|(kind, detail)| Violation {
                kind: match kind {
                    Kind::FullDisk => "full disk mishandled",
                    _ => "peer loss not logged",
                },
                detail: detail.clone(),
            }),
    );
    let end = current_revision(&channels).await?;
    let mut references = Vec::new();
    let mut kubernetes_references = Vec::new();
    for (i, channel) in channels.iter().enumerate() {
        let events = replay(channel, PREFIX, start, end).await.with_context(|| {
            format!(
                "replaying m{i}'s events {start}..={end}\n{}",
                cluster.log_tail(i)
            )
        })?;
        references.push((format!("m{i}"), events));
        if plan.kubernetes {
            let events = replay(channel, rest::KEY_PREFIX, start, end)
                .await
                .with_context(|| format!("replaying m{i}'s ConfigMaps {start}..={end}"))?;
            kubernetes_references.push((format!("m{i}"), rest::reference(&events)));
        }
    }
    violations.extend(check::members_agree(&references));
    violations.extend(check::members_agree(&kubernetes_references));
    if let Some((_, reference)) = kubernetes_references.first() {
        let acks = records.rest_acks.lock().unwrap().clone();
        violations.extend(check::rest_writes(&acks, reference));
        let lists = records.rest_lists.lock().unwrap().clone();
        violations.extend(check::rest_lists(&lists, reference));
        let watches = records.rest_watches.lock().unwrap().clone();
        violations.extend(check::watches(&watches, reference));
    }
    let hashes = cluster.hashes(end).await?;
    let named: Vec<(String, u32)> = hashes
        .iter()
        .enumerate()
        .map(|(i, h)| (format!("m{i}"), h.0))
        .collect();
    violations.extend(check::hashes_agree(end, &named));
    let reference = &references[0].1;
    let acks = records.acks.lock().unwrap().clone();
    violations.extend(check::acknowledged_writes(&acks, reference));
    let watches = records.watches.lock().unwrap().clone();
    violations.extend(check::watches(&watches, reference));
    let leases = records.leases.lock().unwrap().clone();
    violations.extend(check::leases(&leases, &watches, reference));
    let history = records.history.history();
    let inconclusive = match check::linearizable(&history) {
        Ok(found) => {
            violations.extend(found);
            None
        }
        Err(why) => Some(why),
    };
    let rest = plan.kubernetes.then(|| {
        let watches = records.rest_watches.lock().unwrap();
        let events: usize = watches
            .iter()
            .flat_map(|w| &w.segments)
            .flat_map(|s| &s.responses)
            .filter(|r| matches!(r, check::WatchResponse::Events { .. }))
            .count();
        let streams: usize = watches.iter().map(|w| w.segments.len()).sum();
        format!(
            "{} writes acknowledged, {} paged lists, {events} watch events on {streams} streams",
            records.rest_acks.lock().unwrap().len(),
            records.rest_lists.lock().unwrap().len(),
        )
    });
    cluster.stop();
    if !violations.is_empty() {
        // The tmpfs disks go when the cluster does: keep what is on them.
        cluster.keep_disks();
    }
    drop(hosts);
    use std::sync::atomic::Ordering::Relaxed;
    Ok(Outcome {
        plan,
        injected,
        answered: records.answered.load(Relaxed),
        unanswered: records.unanswered.load(Relaxed),
        watch_events: watches
            .iter()
            .flat_map(|w| &w.segments)
            .flat_map(|s| &s.responses)
            .map(|r| match r {
                check::WatchResponse::Events { events, .. } => events.len(),
                _ => 0,
            })
            .sum(),
        violations,
        inconclusive,
        dir: dir.to_path_buf(),
        rest,
    })
}

/// The store's revision, read linearizably through any member.
async fn current_revision(channels: &[Channel]) -> Result<i64> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        for channel in channels {
            let mut client = KvClient::new(channel.clone());
            let read = client.range(RangeRequest {
                key: PREFIX.to_vec(),
                ..Default::default()
            });
            if let Ok(Ok(answer)) = tokio::time::timeout(Duration::from_secs(3), read).await {
                return Ok(answer.into_inner().header.map_or(0, |h| h.revision));
            }
        }
        if Instant::now() > deadline {
            bail!("no member answered a read for 30 s");
        }
    }
}

/// Every event of the run's keys from `start` to `end`, as one member
/// replays them.
async fn replay(channel: &Channel, prefix: &[u8], start: i64, end: i64) -> Result<Vec<WatchEvent>> {
    let mut events = Vec::new();
    if end < start {
        return Ok(events);
    }
    let (requests, rx) = tokio::sync::mpsc::channel(4);
    requests
        .send(WatchRequest {
            request_union: Some(RequestUnion::CreateRequest(WatchCreateRequest {
                key: prefix.to_vec(),
                range_end: traffic::prefix_end(prefix),
                start_revision: start,
                ..Default::default()
            })),
        })
        .await?;
    let mut stream = WatchClient::new(channel.clone())
        .watch(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await?
        .into_inner();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        // A member still applying the newest entries says so in progress.
        let _ = requests.try_send(WatchRequest {
            request_union: Some(RequestUnion::ProgressRequest(WatchProgressRequest {})),
        });
        let response = tokio::time::timeout_at(deadline, stream.message())
            .await
            .context("the replay did not reach the run's last revision in 60 s")??
            .context("the replay's stream ended")?;
        if response.canceled {
            bail!("the replay was canceled: {}", response.cancel_reason);
        }
        for e in &response.events {
            let kv = e.kv.clone().unwrap_or_default();
            events.push(WatchEvent {
                revision: kv.mod_revision,
                key: kv.key,
                value: (e.r#type == 0).then_some(kv.value),
            });
        }
        let reached = response.header.map_or(0, |h| h.revision);
        let last_event = events.last().map_or(0, |e| e.revision);
        if last_event >= end || (!response.created && response.events.is_empty() && reached >= end)
        {
            events.retain(|e| e.revision <= end);
            return Ok(events);
        }
    }
}

fn print_run(outcome: &Outcome, rejoin_limit: Duration) {
    let status = if outcome.violations.is_empty() {
        "ok"
    } else {
        "VIOLATIONS"
    };
    println!(
        "run seed {} ({} members): {status}; {} ops answered, {} unanswered, {} watch events",
        outcome.plan.seed,
        outcome.plan.members,
        outcome.answered,
        outcome.unanswered,
        outcome.watch_events
    );
    if let Some(rest) = &outcome.rest {
        println!("  skiff server members; the Kubernetes API: {rest}");
    }
    for fault in &outcome.injected {
        let rejoin = match fault.rejoin {
            Some(r) if r > rejoin_limit => {
                format!("; rejoined after {r:.1?} — SLOWER THAN {rejoin_limit:?}")
            }
            Some(r) => format!("; rejoined after {r:.1?}"),
            None => String::new(),
        };
        println!("  {}: {}{rejoin}", fault.kind.name(), fault.what);
    }
    for v in outcome.violations.iter().take(10) {
        println!("  VIOLATION {v}");
    }
    if let Some(why) = &outcome.inconclusive {
        println!("  linearizability inconclusive: {why}");
    }
    if !outcome.violations.is_empty() || slow_rejoins(outcome, rejoin_limit) > 0 {
        println!("  logs and data kept in {}", outcome.dir.display());
    }
}

/// Prints the table; returns the number of runs with violations.
fn summarize(outcomes: &[Outcome], rejoin_limit: Duration, elapsed: Duration) -> usize {
    #[derive(Default)]
    struct Row {
        faults: usize,
        runs: usize,
        ops: u64,
        violations: usize,
        slow: usize,
        worst_rejoin: Option<Duration>,
        seeds: Vec<u64>,
    }
    let mut rows: BTreeMap<Kind, Row> = BTreeMap::new();
    for outcome in outcomes {
        let mut kinds: Vec<Kind> = outcome.injected.iter().map(|f| f.kind).collect();
        for fault in &outcome.injected {
            let row = rows.entry(fault.kind).or_default();
            row.faults += 1;
            if let Some(r) = fault.rejoin {
                row.worst_rejoin = Some(row.worst_rejoin.map_or(r, |w| w.max(r)));
                if r > rejoin_limit {
                    row.slow += 1;
                }
            }
        }
        kinds.sort();
        kinds.dedup();
        for kind in kinds {
            let row = rows.entry(kind).or_default();
            row.runs += 1;
            row.ops += outcome.answered + outcome.unanswered;
            row.violations += outcome.violations.len();
            if !outcome.violations.is_empty() {
                row.seeds.push(outcome.plan.seed);
            }
        }
    }
    crate::report::section(&format!(
        "fault injection: {} runs in {:.0?}",
        outcomes.len(),
        elapsed
    ));
    let mut table = Table::new(&[
        "fault",
        "injected",
        "runs",
        "ops",
        "violations",
        "rejoin max",
        "rejoins > limit",
        "seeds with violations",
    ]);
    for (kind, row) in &rows {
        table.row(vec![
            kind.name().to_string(),
            row.faults.to_string(),
            row.runs.to_string(),
            row.ops.to_string(),
            row.violations.to_string(),
            row.worst_rejoin.map_or("-".into(), |r| format!("{r:.1?}")),
            if row.worst_rejoin.is_some() {
                row.slow.to_string()
            } else {
                "-".into()
            },
            row.seeds
                .iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(" "),
        ]);
    }
    let answered: u64 = outcomes.iter().map(|o| o.answered).sum();
    let unanswered: u64 = outcomes.iter().map(|o| o.unanswered).sum();
    let events: usize = outcomes.iter().map(|o| o.watch_events).sum();
    let violations: usize = outcomes.iter().map(|o| o.violations.len()).sum();
    let inconclusive = outcomes.iter().filter(|o| o.inconclusive.is_some()).count();
    table.print();
    println!(
        "{answered} ops answered, {unanswered} unanswered, {events} watch events; {violations} violations; \
         {inconclusive} runs whose linearizability check was inconclusive; rejoin limit {rejoin_limit:?}"
    );
    outcomes
        .iter()
        .filter(|o| !o.violations.is_empty() || slow_rejoins(o, rejoin_limit) > 0)
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faults_are_dealt_from_shuffled_decks_of_every_kind() {
        let kinds = Kind::ALL.to_vec();
        let mut rng = StdRng::seed_from_u64(9);
        let counts = |dealt: &[Kind]| {
            let mut counts = BTreeMap::new();
            for kind in dealt {
                *counts.entry(*kind).or_insert(0) += 1;
            }
            counts
        };
        // As many as the kinds: each once.
        let one_each = deal(&kinds, &mut rng, kinds.len());
        assert!(counts(&one_each).values().all(|&n| n == 1));
        assert_eq!(counts(&one_each).len(), kinds.len());
        // Two decks and a half: each two or three times.
        let more = deal(&kinds, &mut rng, kinds.len() * 5 / 2);
        assert!(counts(&more).values().all(|&n| n == 2 || n == 3));
        // Shuffled: two decks are not in the same order.
        assert_ne!(more[..kinds.len()], more[kinds.len()..2 * kinds.len()]);
        // The same seed deals the same faults (a run replays).
        let again = |seed| deal(&kinds, &mut StdRng::seed_from_u64(seed), 6);
        assert_eq!(again(4), again(4));
        assert!(deal(&[], &mut rng, 3).is_empty());
    }
}
