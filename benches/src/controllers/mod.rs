//! `skiff-bench controllers`: how fast the controller-manager of `skiff up`
//! (with its scheduler) brings a large Deployment up on simulated nodes,
//! and rolls it to a new template: created → every replica available, and
//! image changed → rollout complete, with the lowest availability seen
//! during the rollout against what maxUnavailable allows.

mod rollout;
mod table;

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context, Result};

use crate::api::server::STOP_GRACE;
use crate::data_root::DataRoot;
use crate::machine;
use crate::report;
use crate::versus::progress::Progress;
use crate::versus::system;
use crate::versus::{interrupted, load_average, process};
use rollout::RolloutConfig;

#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  \
    cargo build --release -p skiff -p skiff-bench && target/release/skiff-bench controllers\n  \
    target/release/skiff-bench controllers --quick\n  \
    target/release/skiff-bench controllers --replicas 3000 --nodes 300")]
pub struct ControllersArgs {
    /// Replicas of the Deployment [default: 1000; --quick: 100]
    #[arg(long, env = "SKIFF_BENCH_CONTROLLERS_REPLICAS")]
    replicas: Option<u32>,

    /// Simulated nodes the pods run on [default: 100; --quick: 10]
    #[arg(long, env = "SKIFF_BENCH_CONTROLLERS_NODES")]
    nodes: Option<usize>,

    /// The skiff binary [default: `skiff` beside skiff-bench]
    #[arg(long, env = "SKIFF_BIN")]
    skiff_bin: Option<PathBuf>,

    /// Where the server's data directory goes (removed afterwards)
    #[arg(long, env = "SKIFF_BENCH_DATA_DIR")]
    data_dir: Option<PathBuf>,

    /// Run the controller-manager as a process of its own (`skiff
    /// controller-manager`, for the API's plain loopback port) instead of
    /// inside `skiff up`, and report its resident memory and CPU apart
    #[arg(long, env = "SKIFF_BENCH_CONTROLLER_MANAGER_PROCESS")]
    controller_manager_process: bool,

    /// 100 replicas on 10 nodes: a smoke run of under a minute
    #[arg(long, env = "SKIFF_BENCH_QUICK")]
    quick: bool,
}

pub fn run(args: ControllersArgs) -> Result<()> {
    let config = RolloutConfig {
        replicas: args.replicas.unwrap_or(if args.quick { 100 } else { 1000 }),
        nodes: args.nodes.unwrap_or(if args.quick { 10 } else { 100 }),
        controller_manager_process: args.controller_manager_process,
    };
    if config.replicas == 0 || config.nodes == 0 {
        bail!("--replicas and --nodes need to be at least 1");
    }
    if config.replicas as usize > config.nodes * rollout::PODS_PER_NODE {
        bail!(
            "{} replicas do not fit on {} nodes of {} pods each: add nodes",
            config.replicas,
            config.nodes,
            rollout::PODS_PER_NODE
        );
    }
    let skiff = system::skiff_program(args.skiff_bin.as_deref())?;
    let root = DataRoot::create(
        args.data_dir.as_deref(),
        "skiff-bench-controllers-",
        &["skiff-"],
    )?;
    machine::print_header("controllers", root.path());
    println!("load:    {} (before the run)", load_average());
    println!("skiff:   {} ({})", skiff.path.display(), skiff.version);
    match config.controller_manager_process {
        false => println!("server:  a fresh `skiff up --kubelet=false` with its scheduler and controller-manager, on 127.0.0.1"),
        true => println!("server:  a fresh `skiff up --kubelet=false --controller-manager=false` with its scheduler, and `skiff controller-manager` as a process of its own, on 127.0.0.1"),
    }
    println!(
        "nodes:   {} simulated nodes (skiff-kubelet's simulator in this process: pods bound to them turn Running and Ready at once)",
        config.nodes
    );
    println!(
        "work:    a Deployment of {} replicas (default strategy: maxSurge 25%, maxUnavailable 25%), then its image changed; \
         Deployment status polled every {} ms",
        config.replicas,
        rollout::POLL.as_millis()
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the tokio runtime")?;
    let progress = Progress::new();
    let started = Instant::now();
    let dir = root.path().join("skiff-controllers");
    let outcome = runtime.block_on(async {
        tokio::select! {
            outcome = rollout::measure(&config, &skiff, &dir, &progress) => outcome,
            signal = interrupted() => Err(anyhow::anyhow!("interrupted by {signal}")),
        }
    });
    progress.finish();
    let stopped = runtime.block_on(process::stop_abandoned(STOP_GRACE));
    if stopped > 0 {
        eprintln!("skiff-bench: stopped skiff up after the failed run ({stopped} process)");
    }
    let removed = root.remove();
    let result = outcome?;
    removed?;
    report::section("a Deployment on simulated nodes: created → available, then rolled");
    table::print(&config, &result);
    println!(
        "total time: {:.1} s; load average after the run: {}",
        started.elapsed().as_secs_f64(),
        load_average()
    );
    Ok(())
}
