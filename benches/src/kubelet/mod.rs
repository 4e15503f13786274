//! `skiff-bench kubelet`: how many simulated nodes one `skiff up` keeps
//! alive — Nodes registered, then their Leases renewed on time — with the
//! simulator of skiff-kubelet running in this process (`simulated`); and
//! pod start latency of the real kubelet, created → Running (`start`).

mod pod_events;
mod procs;
pub mod server;
mod simulated;
mod start;
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
use start::{StartConfig, StartResult};

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
    /// Pod start latency of the real kubelet: a fresh `skiff up` with its
    /// scheduler and kubelet, N pods each running a real `sleep` created
    /// through the API, created → scheduled → Running (container ready)
    /// as a watch shows it, time until all run, and the CPU it took.
    Start(StartArgs),
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

#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  \
    cargo build -p skiff -p skiff-bench && target/debug/skiff-bench kubelet start --quick\n  \
    target/release/skiff-bench kubelet start\n  \
    target/release/skiff-bench kubelet start --pods 300 --concurrency 1")]
pub struct StartArgs {
    /// Pods started [default: 100; --quick: 20]
    #[arg(long, env = "SKIFF_BENCH_KUBELET_PODS")]
    pods: Option<usize>,

    /// Clients creating the pods at once, each on its own connection, as
    /// fast as they go
    #[arg(long, default_value_t = 8, env = "SKIFF_BENCH_KUBELET_CONCURRENCY")]
    concurrency: usize,

    /// The skiff binary [default: `skiff` beside skiff-bench]
    #[arg(long, env = "SKIFF_BIN")]
    skiff_bin: Option<PathBuf>,

    /// Where the server's data directory goes (removed afterwards)
    #[arg(long, env = "SKIFF_BENCH_DATA_DIR")]
    data_dir: Option<PathBuf>,

    /// How pods get their network, one run each, side by side: host
    /// (the host's network) and cni (a network namespace and address of
    /// their own, `skiff up --pod-network=cni`, which needs root and the
    /// standard CNI plugins)
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "host,cni",
        env = "SKIFF_BENCH_KUBELET_POD_NETWORK"
    )]
    pod_network: Vec<NetworkMode>,

    /// 20 pods: a smoke run of a few seconds
    #[arg(long, env = "SKIFF_BENCH_QUICK")]
    quick: bool,
}

/// How the pods of a `kubelet start` run get their network.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum NetworkMode {
    Host,
    Cni,
}

pub fn run(args: KubeletArgs) -> Result<()> {
    match args.command {
        KubeletCommand::Simulated(args) => run_simulated(args),
        KubeletCommand::Start(args) => run_start(args),
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

fn run_start(args: StartArgs) -> Result<()> {
    let pods = args.pods.unwrap_or(if args.quick { 20 } else { 100 });
    if pods == 0 || args.concurrency == 0 {
        bail!("--pods and --concurrency need to be at least 1");
    }
    let mut modes = args.pod_network.clone();
    modes.dedup();
    if modes.is_empty() {
        bail!("--pod-network needs host, cni or both");
    }
    let mut skipped = None;
    if modes.contains(&NetworkMode::Cni) {
        if let Some(why) = server::PodNetwork::unavailable() {
            if std::env::var("CI").is_ok_and(|v| v == "true") {
                bail!("--pod-network cni cannot run here ({why}), and CI=true needs it: run as root with containernetworking-plugins installed");
            }
            modes.retain(|m| *m != NetworkMode::Cni);
            skipped = Some(why);
            if modes.is_empty() {
                bail!(
                    "--pod-network cni cannot run here: {}",
                    skipped.unwrap_or_default()
                );
            }
        }
    }
    let mut results = Vec::new();
    for mode in &modes {
        let config = StartConfig {
            pods,
            clients: args.concurrency,
            pod_network: match mode {
                NetworkMode::Host => None,
                NetworkMode::Cni => Some(server::PodNetwork::for_this_run()),
            },
        };
        let result = run_start_once(&args, &config);
        if let Some(network) = &config.pod_network {
            network.remove_bridge();
        }
        results.push((*mode, result?));
    }
    if let Some(why) = skipped {
        println!("pod network (cni) was SKIPPED: {why}; run as root with `apt-get install containernetworking-plugins` for the side-by-side figures.");
    }
    if let [(NetworkMode::Host, host), (NetworkMode::Cni, cni)] = results.as_slice() {
        table::print_network_comparison(host, cni);
    }
    Ok(())
}

/// One `kubelet start` run, with its report.
fn run_start_once(args: &StartArgs, config: &StartConfig) -> Result<StartResult> {
    let skiff = system::skiff_program(args.skiff_bin.as_deref())?;
    let root = DataRoot::create(
        args.data_dir.as_deref(),
        "skiff-bench-kubelet-start-",
        &["skiff-"],
    )?;
    print_start_setup(config, &skiff, root.path());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the tokio runtime")?;
    let progress = Progress::new();
    let started = Instant::now();
    let dir = root.path().join("skiff-start");
    let outcome = runtime.block_on(async {
        tokio::select! {
            outcome = start::measure(config, &skiff, &dir, &progress) => outcome,
            signal = interrupted() => Err(anyhow::anyhow!("interrupted by {signal}")),
        }
    });
    progress.finish();
    let stopped = runtime.block_on(process::stop_abandoned(STOP_GRACE));
    if stopped > 0 {
        eprintln!("skiff-bench: stopped skiff up after the failed run ({stopped} process)");
    }
    let removed = root.remove();
    let result: StartResult = outcome?;
    removed?;
    let network = match config.pod_network {
        None => "pods on the host's network",
        Some(_) => "pods with networks of their own (CNI)",
    };
    report::section(&format!(
        "pod start latency of the real kubelet: created → Running, seen on a watch; {network}"
    ));
    table::print_start(&result);
    println!(
        "total time: {:.1} s; load average after the run: {}",
        started.elapsed().as_secs_f64(),
        load_average()
    );
    Ok(result)
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
    machine::print_header("kubelet simulated", root);
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

fn print_start_setup(config: &StartConfig, skiff: &Program, root: &Path) {
    machine::print_header("kubelet start", root);
    println!("load:    {} (before the run)", load_average());
    println!("skiff:   {} ({})", skiff.path.display(), skiff.version);
    let network = match &config.pod_network {
        None => "pods on the host's network".to_string(),
        Some(network) => format!(
            "--pod-network=cni: each pod a network namespace and an address through CNI (bridge {}, cluster CIDR {})",
            network.bridge, network.cluster_cidr
        ),
    };
    println!(
        "server:  a fresh `skiff up` with its scheduler, controller-manager and kubelet (Node {}), on 127.0.0.1; {network}",
        start::NODE_NAME
    );
    println!(
        "pods:    {} in namespace {}, each one container `{}` (image busybox, recorded, not pulled), \
         created by {} client(s) as fast as they go, watched from the list's resourceVersion; \
         client in this process, tokio with 2 workers",
        config.pods,
        start::NAMESPACE,
        start::COMMAND.join(" "),
        config.clients
    );
}
