//! `skiff-bench store`: the storage engine in-process on a local data
//! directory — durable put latency, group-commit throughput and watch
//! fan-out latency with one member and with a cluster on loopback, side by
//! side, and the memory and disk footprint of a million keys on one member.

mod cluster;
mod compare;
mod footprint;
mod put_latency;
mod throughput;
mod watch_latency;

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use rand::RngCore;
use skiff_store::{Store, StoreConfig};

use crate::data_root::DataRoot;
use crate::machine;
use cluster::Members;
use compare::Run;

/// Every value the benchmark writes has this many bytes.
pub const VALUE_LEN: usize = 256;
/// The largest cluster `--members` starts: every member shares this
/// process, its cores and its disk.
const MAX_MEMBERS: usize = 7;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Section {
    /// Durable put latency from one sequential writer, per member count.
    Latency,
    /// Put throughput with many concurrent writers (group commit), per
    /// member count.
    Throughput,
    /// Put issued -> event received, with many watchers on one prefix, per
    /// member count.
    Watch,
    /// Resident memory and disk use of the engine holding many keys, on one
    /// member.
    Footprint,
}

#[derive(Debug, clap::Args)]
pub struct StoreArgs {
    /// Where the data directories go (`ops/` and `footprint/` inside it,
    /// removed afterwards); its filesystem is the one under test.
    /// [default: a temporary directory under ./target, or the system
    /// temporary directory when there is no ./target]
    #[arg(long, env = "SKIFF_BENCH_DATA_DIR")]
    data_dir: Option<PathBuf>,

    /// Sequential puts timed for put latency [default: 5000; --quick: 500]
    #[arg(long, env = "SKIFF_BENCH_PUTS")]
    puts: Option<usize>,

    /// Seconds each throughput point runs [default: 5; --quick: 1]
    #[arg(long, env = "SKIFF_BENCH_DURATION")]
    duration: Option<f64>,

    /// Concurrent writers, one throughput point each [default: 1,16,256,1000]
    #[arg(long, value_delimiter = ',', env = "SKIFF_BENCH_WRITERS")]
    writers: Option<Vec<usize>>,

    /// Watchers on one prefix, one watch point each
    /// [default: 1,1000,10000; --quick: 1,100,1000]
    #[arg(long, value_delimiter = ',', env = "SKIFF_BENCH_WATCHERS")]
    watchers: Option<Vec<usize>>,

    /// Puts observed by the watchers at each watch point [default: 200; --quick: 50]
    #[arg(long, env = "SKIFF_BENCH_WATCH_PUTS")]
    watch_puts: Option<usize>,

    /// Pause between two watched puts, in milliseconds [default: 5; --quick: 2]
    #[arg(long, env = "SKIFF_BENCH_WATCH_INTERVAL_MS")]
    watch_interval_ms: Option<u64>,

    /// Keys loaded for the footprint [default: 1000000; --quick: 50000]
    #[arg(long, env = "SKIFF_BENCH_KEYS")]
    keys: Option<u64>,

    /// Member counts the latency, throughput and watch sections run with,
    /// side by side, ratios against the first. More than one member is a
    /// cluster in this process over TCP on 127.0.0.1, written through its
    /// leader. The footprint always runs on one member.
    #[arg(
        long,
        value_delimiter = ',',
        env = "SKIFF_BENCH_MEMBERS",
        default_value = "1,3"
    )]
    members: Vec<usize>,

    /// Sections to run (the footprint always runs first, so that its memory
    /// baseline is a fresh process)
    #[arg(
        long,
        value_delimiter = ',',
        env = "SKIFF_BENCH_SECTIONS",
        default_value = "latency,throughput,watch,footprint"
    )]
    sections: Vec<Section>,

    /// Shrink every size so the whole run takes under 40 s (CI smoke test)
    #[arg(long, env = "SKIFF_BENCH_QUICK")]
    quick: bool,
}

/// The sizes of one run: flags, else the defaults for --quick or a real run.
#[derive(Debug, Clone)]
pub struct Plan {
    pub puts: usize,
    pub warmup: usize,
    pub duration: Duration,
    pub writers: Vec<usize>,
    pub watchers: Vec<usize>,
    pub watch_puts: usize,
    pub watch_interval: Duration,
    pub keys: u64,
    pub load_writers: usize,
    pub members: Vec<usize>,
}

impl Plan {
    fn from_args(args: &StoreArgs) -> Result<Plan> {
        let q = args.quick;
        let puts = args.puts.unwrap_or(if q { 500 } else { 5000 });
        let duration_secs = args.duration.unwrap_or(if q { 1.0 } else { 5.0 });
        let plan = Plan {
            puts,
            warmup: (puts / 10).clamp(10, 500),
            duration: Duration::try_from_secs_f64(duration_secs)
                .context("--duration must be a positive number of seconds")?,
            writers: args.writers.clone().unwrap_or(vec![1, 16, 256, 1000]),
            watchers: args.watchers.clone().unwrap_or(if q {
                vec![1, 100, 1000]
            } else {
                vec![1, 1000, 10_000]
            }),
            watch_puts: args.watch_puts.unwrap_or(if q { 50 } else { 200 }),
            watch_interval: Duration::from_millis(args.watch_interval_ms.unwrap_or(if q {
                2
            } else {
                5
            })),
            keys: args.keys.unwrap_or(if q { 50_000 } else { 1_000_000 }),
            load_writers: 256,
            members: args.members.clone(),
        };
        if plan.puts == 0 || plan.watch_puts == 0 || plan.keys == 0 || plan.duration.is_zero() {
            bail!("--puts, --watch-puts, --keys and --duration must be greater than zero");
        }
        if plan.writers.contains(&0) || plan.watchers.contains(&0) {
            bail!("--writers and --watchers take counts greater than zero, e.g. 1,16,256");
        }
        check_members(&plan.members)?;
        Ok(plan)
    }
}

fn check_members(members: &[usize]) -> Result<()> {
    if members.is_empty() || members.iter().any(|&n| n == 0 || n > MAX_MEMBERS) {
        bail!("--members takes member counts from 1 to {MAX_MEMBERS}, e.g. 1,3");
    }
    let mut sorted = members.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    if sorted.len() != members.len() {
        bail!("--members names a member count twice; give each count once, e.g. 1,3");
    }
    Ok(())
}

pub fn run(args: StoreArgs) -> Result<()> {
    let plan = Plan::from_args(&args)?;
    let root = DataRoot::create(
        args.data_dir.as_deref(),
        "skiff-bench-",
        &["ops", "footprint"],
    )?;
    print_setup(&plan, root.path());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the tokio runtime")?;
    let summaries = runtime.block_on(run_sections(&plan, &args.sections, &root))?;
    crate::report::section("Summary");
    for line in summaries {
        println!("{line}");
    }
    root.remove()
}

async fn run_sections(plan: &Plan, sections: &[Section], root: &DataRoot) -> Result<Vec<String>> {
    let mut summaries = Vec::new();
    if sections.contains(&Section::Footprint) {
        let dir = root.subdir("footprint")?;
        summaries.push(footprint::run(plan, &dir).await?);
        std::fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()))?;
    }
    let ops = [Section::Latency, Section::Throughput, Section::Watch];
    if !ops.iter().any(|s| sections.contains(s)) {
        return Ok(summaries);
    }
    let dir = root.subdir("ops")?;
    let mut runs = OpsRuns::default();
    for &members in &plan.members {
        let dir = dir.join(compare::label(members).replace(' ', "-"));
        let cluster = Members::start(members, &dir).await?;
        let measured = measure_ops(&cluster, members, plan, sections, &mut runs).await;
        let closed = cluster.close().await;
        measured?;
        closed.with_context(|| format!("closing the store of {}", compare::label(members)))?;
        std::fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()))?;
    }
    if sections.contains(&Section::Latency) {
        summaries.push(put_latency::report(plan, &runs.latency));
    }
    if sections.contains(&Section::Throughput) {
        summaries.push(throughput::report(plan, &runs.throughput));
    }
    if sections.contains(&Section::Watch) {
        summaries.push(watch_latency::report(plan, &runs.watch));
    }
    Ok(summaries)
}

/// What the latency, throughput and watch sections measured, one run per
/// member count; their tables are printed once every count has run.
#[derive(Default)]
struct OpsRuns {
    latency: Vec<Run<put_latency::Measurement>>,
    throughput: Vec<Run<Vec<throughput::Point>>>,
    watch: Vec<Run<Vec<watch_latency::Point>>>,
}

async fn measure_ops(
    cluster: &Members,
    members: usize,
    plan: &Plan,
    sections: &[Section],
    runs: &mut OpsRuns,
) -> Result<()> {
    let label = compare::label(members);
    let leader = cluster.leader();
    if sections.contains(&Section::Latency) {
        eprintln!("  {label}: put latency");
        let measured = put_latency::measure(leader, plan)
            .await
            .with_context(|| format!("put latency with {label}"))?;
        runs.latency.push(Run { members, measured });
    }
    if sections.contains(&Section::Throughput) {
        eprintln!("  {label}: put throughput");
        let measured = throughput::measure(leader, plan)
            .await
            .with_context(|| format!("put throughput with {label}"))?;
        runs.throughput.push(Run { members, measured });
    }
    if sections.contains(&Section::Watch) {
        eprintln!("  {label}: watch latency");
        let measured = watch_latency::measure(leader, plan)
            .await
            .with_context(|| format!("watch latency with {label}"))?;
        runs.watch.push(Run { members, measured });
    }
    if let Some(warning) = cluster.leadership_moved() {
        println!("{warning}");
    }
    Ok(())
}

pub async fn open_store(dir: &Path) -> Result<Store> {
    Store::open(StoreConfig::new(dir))
        .await
        .with_context(|| format!("opening a store in {}", dir.display()))
}

fn print_setup(plan: &Plan, root: &Path) {
    machine::print_header("store", root);
    let config = StoreConfig::new(root);
    println!(
        "store:   sled cache {}, flush every {:?}, max batch {}, watch buffer {} revisions",
        crate::report::mib(config.cache_capacity),
        config.flush_interval,
        config.max_batch,
        config.watch.buffer
    );
    println!(
        "sizes:   {} timed puts; {:?} per throughput point; writers {:?}; watchers {:?} x {} puts every {:?}; {} keys for the footprint",
        plan.puts, plan.duration, plan.writers, plan.watchers, plan.watch_puts, plan.watch_interval, plan.keys
    );
    let counts: Vec<String> = plan.members.iter().map(|&n| compare::label(n)).collect();
    println!(
        "members: {} for latency, throughput and watch; a cluster runs in this process over TCP on 127.0.0.1, sharing its cores and disk, every put sent to the leader",
        counts.join(", ")
    );
    println!("values:  {VALUE_LEN} random bytes; every put is durable (WAL fdatasync on a quorum of members) before it is answered");
}

/// Incompressible bytes: sled must store what a real object would cost.
pub fn random_value() -> Vec<u8> {
    let mut value = vec![0u8; VALUE_LEN];
    rand::thread_rng().fill_bytes(&mut value);
    value
}

/// The writer's sync counters at one moment; the difference of two shows
/// how many entries shared each WAL fdatasync.
#[derive(Debug, Clone, Copy)]
pub struct SyncCounters {
    pub syncs: u64,
    pub entries: u64,
}

impl SyncCounters {
    pub fn read(store: &Store) -> SyncCounters {
        let stats = store.stats();
        SyncCounters {
            syncs: stats.syncs.load(Ordering::Relaxed),
            entries: stats.entries.load(Ordering::Relaxed),
        }
    }

    pub fn since(self, earlier: SyncCounters) -> SyncCounters {
        SyncCounters {
            syncs: self.syncs - earlier.syncs,
            entries: self.entries - earlier.entries,
        }
    }

    pub fn entries_per_sync(self) -> f64 {
        if self.syncs == 0 {
            return 0.0;
        }
        self.entries as f64 / self.syncs as f64
    }
}
