//! `skiff-bench kubelet`: how many simulated nodes one `skiff up` keeps
//! alive — Nodes registered, then their Leases renewed on time — with the
//! simulator of skiff-kubelet running in this process. Not pod start
//! latency of the real kubelet.

mod server;
mod simulated;
mod table;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::api::server::STOP_GRACE;
use crate::data_root::DataRoot;
use crate::machine;
use crate::report;
use crate::versus::progress::Progress;
use crate::versus::system::{self, Program};
use crate::versus::{interrupted, load_average, process};
use simulated::NodesResult;

/// The real kubelet's renew interval, and the late limit of a renewal.
const LEASE_INTERVAL: Duration = Duration::from_secs(10);
const LATE_AFTER: Duration = Duration::from_secs(2);

#[derive(Debug, clap::Args)]
pub struct KubeletArgs {
    #[command(subcommand)]
    command: KubeletCommand,
}

#[derive(Debug, clap::Subcommand)]
enum KubeletCommand {
    /// Simulated nodes against a fresh `skiff up` per node count: nodes
    /// registered and how fast, Lease renewals on time, late (> 2 s past
    /// due) or failed, renewal lag, and the CPU of both sides.
    Simulated(SimulatedArgs),
}

#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  \
    cargo build --release -p skiff -p skiff-bench && target/release/skiff-bench kubelet simulated\n  \
    target/release/skiff-bench kubelet simulated --quick\n  \
    target/release/skiff-bench kubelet simulated --nodes 10000 --intervals 3")]
pub struct SimulatedArgs {
    /// Node counts, one fresh `skiff up` each [default: 1000,2500,5000; --quick: 200]
    #[arg(long, value_delimiter = ',', env = "SKIFF_BENCH_KUBELET_NODES")]
    nodes: Option<Vec<usize>>,

    /// Lease intervals (10 s each) measured after registration [default: 3; --quick: 1]
    #[arg(long, env = "SKIFF_BENCH_KUBELET_INTERVALS")]
    intervals: Option<u32>,

    /// The skiff binary [default: `skiff` beside skiff-bench]
    #[arg(long, env = "SKIFF_BIN")]
    skiff_bin: Option<PathBuf>,

    /// Where the servers' data directories go (removed afterwards)
    #[arg(long, env = "SKIFF_BENCH_DATA_DIR")]
    data_dir: Option<PathBuf>,

    /// 200 nodes for one interval: a smoke run of about a minute
    #[arg(long, env = "SKIFF_BENCH_QUICK")]
    quick: bool,
}

pub fn run(args: KubeletArgs) -> Result<()> {
    match args.command {
        KubeletCommand::Simulated(args) => run_simulated(args),
    }
}

fn run_simulated(args: SimulatedArgs) -> Result<()> {
    let counts = args.nodes.clone().unwrap_or(if args.quick {
        vec![200]
    } else {
        vec![1000, 2500, 5000]
    });
    let intervals = args.intervals.unwrap_or(if args.quick { 1 } else { 3 });
    if counts.is_empty() || counts.contains(&0) || intervals == 0 {
        bail!("--nodes needs counts above zero and --intervals at least 1");
    }
    let skiff = system::skiff_program(args.skiff_bin.as_deref())?;
    let root = DataRoot::create(
        args.data_dir.as_deref(),
        "skiff-bench-kubelet-",
        &["skiff-"],
    )?;
    print_setup(&counts, intervals, &skiff, root.path());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the tokio runtime")?;
    let progress = Progress::new();
    let started = Instant::now();
    let outcome = runtime.block_on(async {
        tokio::select! {
            outcome = run_all(&counts, intervals, &skiff, root.path(), &progress) => outcome,
            signal = interrupted() => Err(anyhow::anyhow!("interrupted by {signal}")),
        }
    });
    progress.finish();
    let stopped = runtime.block_on(process::stop_abandoned(STOP_GRACE));
    if stopped > 0 {
        eprintln!("skiff-bench: cleaned up {stopped} server process(es) of the failed run");
    }
    let removed = root.remove();
    let results = outcome?;
    removed?;
    report::section("simulated nodes: registration and Lease renewals against skiff up");
    table::print(&results, LATE_AFTER);
    println!(
        "total time: {:.1} s; load average after the run: {}",
        started.elapsed().as_secs_f64(),
        load_average()
    );
    Ok(())
}

async fn run_all(
    counts: &[usize],
    intervals: u32,
    skiff: &Program,
    root: &Path,
    progress: &Progress,
) -> Result<Vec<NodesResult>> {
    let mut results = Vec::with_capacity(counts.len());
    for (i, &nodes) in counts.iter().enumerate() {
        let dir = root.join(format!("skiff-{i}-{nodes}"));
        let result =
            simulated::measure(nodes, intervals, LEASE_INTERVAL, skiff, &dir, progress).await?;
        std::fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()))?;
        progress.note(&format!(
            "{nodes} nodes: registered in {:.1} s, {} renewals, {} late, {} failed",
            result
                .snapshot
                .registration_time
                .unwrap_or_default()
                .as_secs_f64(),
            result.snapshot.renewals,
            result.snapshot.renewals_late,
            result.snapshot.renewal_errors
        ));
        results.push(result);
    }
    Ok(results)
}

fn print_setup(counts: &[usize], intervals: u32, skiff: &Program, root: &Path) {
    let args: Vec<String> = std::env::args().collect();
    println!("skiff-bench kubelet simulated");
    println!("command: {}", args.join(" "));
    for line in machine::describe() {
        println!("{line}");
    }
    println!(
        "data:    {} [{}]",
        root.display(),
        machine::filesystem_of(root)
    );
    println!("load:    {} (before the run)", load_average());
    println!("skiff:   {} ({})", skiff.path.display(), skiff.version);
    println!("server:  a fresh `skiff up --scheduler=false --kubelet=false` (in-process store and API server) per node count, on 127.0.0.1");
    println!(
        "nodes:   {} simulated nodes (cpu 32, memory 256Gi, pods 110), Lease renewed every {} s, measured for {} interval(s) after registration; \
         simulator in this process, tokio with 2 workers",
        counts.iter().map(|n| n.to_string()).collect::<Vec<_>>().join(", "),
        LEASE_INTERVAL.as_secs(),
        intervals
    );
}
