//! `skiff-bench scheduler`: how fast `skiff up`'s scheduler binds pods, in
//! the spirit of kube-scheduler's scheduler_perf — plain Node objects, pods
//! created as fast as the API takes them, bindings seen through a watch —
//! per workload, beside kube-scheduler's published CI floors. Not for the
//! API alone: `skiff-bench api` measures that.

mod bindings;
mod check;
mod create;
mod diagnose;
mod objects;
mod point;
mod table;
mod throughput;
mod workload;

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context, Result};

use crate::api::server::STOP_GRACE;
use crate::data_root::DataRoot;
use crate::machine;
use crate::report;
use crate::versus::progress::Progress;
use crate::versus::system::{self, Program};
use crate::versus::{interrupted, load_average, process};
pub use point::PointResult;
use workload::Workload;

/// skiff should bind at least this many times kube-scheduler's published
/// floor.
pub const TARGET_RATIO: f64 = 3.0;

#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  \
    cargo build --release -p skiff -p skiff-bench && target/release/skiff-bench scheduler\n  \
    target/release/skiff-bench scheduler --quick\n  \
    target/release/skiff-bench scheduler --workloads basic --basic-nodes 1000 --pods 20000\n\n\
    Each workload and node count gets a fresh `skiff up` (API server and scheduler) \
    on free loopback ports. The skiff binary is taken from beside skiff-bench (under \
    `cargo run` it is built first with the same profile) or from --skiff-bin.")]
pub struct SchedulerArgs {
    /// Workloads to run, in this order [default: all]
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        env = "SKIFF_BENCH_SCHEDULER_WORKLOADS"
    )]
    workloads: Option<Vec<Workload>>,

    /// Node counts of the basic workload, one run each [default: 500,5000; --quick: 100]
    #[arg(long, value_delimiter = ',', env = "SKIFF_BENCH_SCHEDULER_BASIC_NODES")]
    basic_nodes: Option<Vec<usize>>,

    /// Nodes of the anti-affinity, topology-spread and node-affinity
    /// workloads [default: 5000; --quick: 100]
    #[arg(long, env = "SKIFF_BENCH_SCHEDULER_NODES")]
    nodes: Option<usize>,

    /// Measured pods of every workload but preemption [default: 5000; --quick: 200]
    #[arg(long, env = "SKIFF_BENCH_SCHEDULER_PODS")]
    pods: Option<usize>,

    /// Anti-affinity pods per group (each group one per node)
    /// [default: 100; --quick: 50]
    #[arg(long, env = "SKIFF_BENCH_SCHEDULER_GROUP")]
    anti_affinity_group: Option<usize>,

    /// Nodes of the preemption workload, each filled by 4 low-priority
    /// pods of 8 cores [default: 500; --quick: 100]
    #[arg(long, env = "SKIFF_BENCH_SCHEDULER_PREEMPTION_NODES")]
    preemption_nodes: Option<usize>,

    /// High-priority pods measured in the preemption workload, each
    /// evicting one low-priority pod; at most 4 per node (each costs the
    /// scheduler a preemption dry run over the nodes) [default: 1000; --quick: 200]
    #[arg(long, env = "SKIFF_BENCH_SCHEDULER_PREEMPTION_PODS")]
    preemption_pods: Option<usize>,

    /// Concurrent create clients (one connection each); 30 as
    /// scheduler_perf's pod creator, whose 30 workers create in parallel
    #[arg(long, env = "SKIFF_BENCH_SCHEDULER_CLIENTS", default_value_t = 30)]
    clients: usize,

    /// Also print each run's pods bound in every second, in order
    #[arg(long, env = "SKIFF_BENCH_SCHEDULER_PRINT_WINDOWS")]
    print_windows: bool,

    /// The skiff binary [default: `skiff` beside skiff-bench]
    #[arg(long, env = "SKIFF_BIN")]
    skiff_bin: Option<PathBuf>,

    /// Where the servers' data directories go (removed afterwards)
    /// [default: a temporary directory under ./target, or the system's]
    #[arg(long, env = "SKIFF_BENCH_DATA_DIR")]
    data_dir: Option<PathBuf>,

    /// Small sizes, for a CI smoke run (seconds per workload in a release
    /// build)
    #[arg(long, env = "SKIFF_BENCH_QUICK")]
    quick: bool,
}

/// One run: a workload at a node count, on a fresh `skiff up`.
#[derive(Debug, Clone, Copy)]
pub struct Point {
    pub workload: Workload,
    pub nodes: usize,
    /// Measured pods.
    pub pods: usize,
    /// Low-priority pods created (and bound) before the measured ones.
    pub fill: usize,
    pub group_size: usize,
}

/// The sizes of a run: flags, else the defaults for --quick or a full run.
#[derive(Debug, Clone)]
pub struct Plan {
    pub points: Vec<Point>,
    pub clients: usize,
}

impl Plan {
    fn from_args(args: &SchedulerArgs) -> Result<Plan> {
        let q = args.quick;
        let pick = |flag: Option<usize>, quick: usize, full: usize| {
            flag.unwrap_or(if q { quick } else { full })
        };
        let nodes = pick(args.nodes, 100, 5000);
        let pods = pick(args.pods, 200, 5000);
        let group_size = pick(args.anti_affinity_group, 50, 100);
        let preemption_nodes = pick(args.preemption_nodes, 100, 500);
        let preemption_pods = pick(args.preemption_pods, 200, 1000);
        let basic_nodes =
            args.basic_nodes
                .clone()
                .unwrap_or(if q { vec![100] } else { vec![500, 5000] });
        let workloads = args.workloads.clone().unwrap_or(Workload::ALL.to_vec());
        let point = |workload, nodes, pods, fill| Point {
            workload,
            nodes,
            pods,
            fill,
            group_size,
        };
        let mut points = Vec::new();
        for workload in workloads {
            match workload {
                Workload::Basic => {
                    points.extend(basic_nodes.iter().map(|&n| point(workload, n, pods, 0)))
                }
                Workload::Preemption => points.push(point(
                    workload,
                    preemption_nodes,
                    preemption_pods,
                    preemption_nodes * objects::FILLERS_PER_NODE,
                )),
                _ => points.push(point(workload, nodes, pods, 0)),
            }
        }
        let plan = Plan {
            points,
            clients: args.clients,
        };
        plan.check()?;
        Ok(plan)
    }

    fn check(&self) -> Result<()> {
        if self.clients == 0 {
            bail!("--clients must be greater than zero");
        }
        if self.points.is_empty() {
            bail!("nothing to run: --workloads and --basic-nodes need at least one value");
        }
        for p in &self.points {
            let what = p.workload.id();
            if p.nodes == 0 || p.pods == 0 || p.group_size == 0 {
                bail!("{what}: node, pod and group counts must be greater than zero");
            }
            // The warm-up pod takes one pod slot on the last node.
            let capacity = match p.workload {
                Workload::NodeAffinity => p.nodes.div_ceil(2) * objects::NODE_PODS - 1,
                Workload::Preemption => p.fill,
                _ => p.nodes * objects::NODE_PODS - 1,
            };
            if p.pods > capacity {
                bail!(
                    "{what}: {} pods do not fit on {} nodes (at most {capacity}); lower --pods or raise the node count",
                    p.pods,
                    p.nodes
                );
            }
            if p.workload == Workload::AntiAffinity && p.group_size > p.nodes {
                bail!(
                    "anti-affinity: groups of {} pods need as many nodes, there are {}; lower --anti-affinity-group",
                    p.group_size,
                    p.nodes
                );
            }
        }
        Ok(())
    }
}

pub fn run(args: SchedulerArgs) -> Result<()> {
    let plan = Plan::from_args(&args)?;
    let skiff = system::skiff_program(args.skiff_bin.as_deref())?;
    let root = DataRoot::create(
        args.data_dir.as_deref(),
        "skiff-bench-scheduler-",
        &["skiff-"],
    )?;
    print_setup(&plan, &skiff, root.path());
    // Two workers: the client shares the machine's cores with the server.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the tokio runtime")?;
    let progress = Progress::new();
    let started = Instant::now();
    let outcome = runtime.block_on(async {
        tokio::select! {
            outcome = run_all(&plan, &skiff, root.path(), &progress) => outcome,
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
    report::section(
        "skiff's scheduler: pods bound per second (after kube-scheduler's scheduler_perf)",
    );
    table::print(&results, args.print_windows);
    println!(
        "total time: {:.1} s; load average after the run: {}",
        started.elapsed().as_secs_f64(),
        load_average()
    );
    Ok(())
}

/// Every point, one `skiff up` at a time.
async fn run_all(
    plan: &Plan,
    skiff: &Program,
    root: &Path,
    progress: &Progress,
) -> Result<Vec<PointResult>> {
    let mut results = Vec::with_capacity(plan.points.len());
    for point in &plan.points {
        results.push(point::measure(point, plan.clients, skiff, root, progress).await?);
    }
    Ok(results)
}

fn print_setup(plan: &Plan, skiff: &Program, root: &Path) {
    machine::print_header("scheduler", root);
    println!("load:    {} (before the run)", load_average());
    println!("skiff:   {} ({})", skiff.path.display(), skiff.version);
    println!(
        "server:  a fresh `skiff up` (in-process store, API server and its leader-elected scheduler) per workload and node count, on 127.0.0.1"
    );
    println!(
        "client:  plain HTTP/1.1 JSON (hyper): {} connections creating, one pod watch counting bindings; tokio with 2 workers",
        plan.clients
    );
    println!(
        "nodes:   Node objects only, no kubelets: allocatable cpu {}, memory {}, pods {}; labels {}, {} (zone-0…zone-{}), {}={} on every other node",
        objects::NODE_CPU_CORES,
        objects::NODE_MEMORY,
        objects::NODE_PODS,
        objects::HOSTNAME_LABEL,
        objects::ZONE_LABEL,
        objects::ZONES - 1,
        objects::POOL_LABEL,
        objects::POOL_VALUE
    );
    println!("pods:    one pause container asking 100m / 500Mi (preemption: {} cores), terminationGracePeriodSeconds 0", objects::PREEMPTION_POD_CPU);
    for p in &plan.points {
        println!("  {}", describe_point(p));
    }
}

fn describe_point(p: &Point) -> String {
    let nodes = report::group_digits(p.nodes as u64);
    let pods = report::group_digits(p.pods as u64);
    let shape = match p.workload {
        Workload::Basic => "resources only".to_string(),
        Workload::AntiAffinity => format!(
            "required podAntiAffinity to their own group on {} (groups of {})",
            objects::HOSTNAME_LABEL,
            p.group_size
        ),
        Workload::TopologySpread => format!(
            "topologySpreadConstraints maxSkew 1 on {}, DoNotSchedule",
            objects::ZONE_LABEL
        ),
        Workload::NodeAffinity => format!(
            "required nodeAffinity {} In [{}] (half the nodes)",
            objects::POOL_LABEL,
            objects::POOL_VALUE
        ),
        Workload::Preemption => format!(
            "priority {}, after {} pods of {} filled every node; each must evict one",
            objects::HIGH_PRIORITY_CLASS,
            report::group_digits(p.fill as u64),
            objects::LOW_PRIORITY_CLASS
        ),
    };
    format!("{}: {pods} pods on {nodes} nodes, {shape}", p.workload.id())
}
