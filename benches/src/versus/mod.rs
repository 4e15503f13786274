//! `skiff-bench versus`: skiff's store and real etcd side by side, each as
//! its own processes on loopback, one system at a time, driven through
//! etcd's v3 gRPC API by the same Rust client with the same workload.
//! Prints one table with a ratio per figure. Not for the engine's inner
//! costs: `skiff-bench store` measures those in-process.

mod client;
mod cluster;
mod load;
mod plot;
pub(crate) mod process;
pub(crate) mod progress;
pub(crate) mod system;
mod table;
mod watch;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::data_root::DataRoot;
use crate::machine;
use crate::report;
use client::Target;
use cluster::{Cluster, STOP_GRACE};
use progress::Progress;
use system::{Program, System};
use table::{Measured, MemberRun};

/// The largest cluster `--members` starts: every member shares the
/// machine's cores and disk.
const MAX_MEMBERS: usize = 5;

#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  \
    cargo run --release -p skiff-bench -- versus\n  \
    cargo run --release -p skiff-bench -- versus --members 1 --quick --plot versus.svg\n\n\
    Under `cargo run` the skiff binary is built first with the same profile; \
    otherwise it is taken from beside skiff-bench or from --skiff-bin. \
    Without etcd the run measures skiff alone (with CI=true it fails instead): \
    apt-get install -y etcd-server")]
pub struct VersusArgs {
    /// Member counts to compare, each a cluster of that many processes of
    /// each system on 127.0.0.1
    #[arg(
        long,
        value_delimiter = ',',
        env = "SKIFF_BENCH_MEMBERS",
        default_value = "1,3"
    )]
    members: Vec<usize>,

    /// Which members requests go to, the same for both systems
    #[arg(long, value_enum, env = "SKIFF_BENCH_TARGET", default_value = "leader")]
    target: Target,

    /// Client connections (HTTP/2) to each member, shared by the request streams
    #[arg(long, env = "SKIFF_BENCH_CONNECTIONS", default_value_t = 8)]
    connections: usize,

    /// Sequential puts timed for put latency [default: 3000; --quick: 300]
    #[arg(long, env = "SKIFF_BENCH_PUTS")]
    puts: Option<usize>,

    /// Seconds each throughput point measures, after a warm-up of a fifth
    /// of that [default: 5; --quick: 1]
    #[arg(long, env = "SKIFF_BENCH_DURATION")]
    duration: Option<f64>,

    /// Concurrent clients (request streams), one put-throughput point each
    #[arg(
        long,
        value_delimiter = ',',
        env = "SKIFF_BENCH_CLIENTS",
        default_value = "16,256,1000"
    )]
    clients: Vec<usize>,

    /// Concurrent clients of the range (single-key get) points
    #[arg(long, env = "SKIFF_BENCH_READ_CLIENTS", default_value_t = 256)]
    read_clients: usize,

    /// Watchers on one prefix, one watch-latency point each
    #[arg(
        long,
        value_delimiter = ',',
        env = "SKIFF_BENCH_WATCHERS",
        default_value = "1,1000,10000"
    )]
    watchers: Vec<usize>,

    /// Watch streams the watchers of a point are spread over
    #[arg(long, env = "SKIFF_BENCH_WATCH_STREAMS", default_value_t = 32)]
    watch_streams: usize,

    /// Most puts observed at a watch point; fewer with many watchers, so
    /// that a point delivers at most --watch-events events
    /// [default: 200; --quick: 20]
    #[arg(long, env = "SKIFF_BENCH_WATCH_PUTS")]
    watch_puts: Option<usize>,

    /// Events a watch point aims to deliver (watchers x puts), at least 3
    /// puts [default: 300000; --quick: 30000]
    #[arg(long, env = "SKIFF_BENCH_WATCH_EVENTS")]
    watch_events: Option<usize>,

    /// Write the latency distributions of both systems to this SVG file
    #[arg(long)]
    plot: Option<PathBuf>,

    /// The skiff binary [default: `skiff` beside skiff-bench]
    #[arg(long, env = "SKIFF_BIN")]
    skiff_bin: Option<PathBuf>,

    /// The etcd binary [default: `etcd` in PATH]
    #[arg(long, env = "SKIFF_BENCH_ETCD")]
    etcd_bin: Option<PathBuf>,

    /// Where the members' data directories go (one per system and member
    /// count, removed afterwards); its filesystem is the one under test
    /// [default: a temporary directory under ./target, or the system's]
    #[arg(long, env = "SKIFF_BENCH_DATA_DIR")]
    data_dir: Option<PathBuf>,

    /// Shrink every size so that a member count takes seconds (CI smoke run)
    #[arg(long, env = "SKIFF_BENCH_QUICK")]
    quick: bool,
}

/// The sizes of one run: flags, else the defaults for --quick or a full run.
#[derive(Debug, Clone)]
pub struct Plan {
    pub members: Vec<usize>,
    pub target: Target,
    pub connections: usize,
    pub warmup_puts: usize,
    pub puts: usize,
    pub warmup: Duration,
    pub duration: Duration,
    pub clients: Vec<usize>,
    pub read_clients: usize,
    pub watchers: Vec<usize>,
    pub watch_streams: usize,
    pub watch_puts: usize,
    pub watch_events: usize,
}

impl Plan {
    fn from_args(args: &VersusArgs) -> Result<Plan> {
        let q = args.quick;
        let puts = args.puts.unwrap_or(if q { 300 } else { 3000 });
        let secs = args.duration.unwrap_or(if q { 1.0 } else { 5.0 });
        let duration = Duration::try_from_secs_f64(secs)
            .context("--duration must be a positive number of seconds")?;
        let plan = Plan {
            members: args.members.clone(),
            target: args.target,
            connections: args.connections,
            warmup_puts: (puts / 10).clamp(10, 200),
            puts,
            warmup: duration / 5,
            duration,
            clients: args.clients.clone(),
            read_clients: args.read_clients,
            watchers: args.watchers.clone(),
            watch_streams: args.watch_streams,
            watch_puts: args.watch_puts.unwrap_or(if q { 20 } else { 200 }),
            watch_events: args
                .watch_events
                .unwrap_or(if q { 30_000 } else { 300_000 }),
        };
        plan.check()?;
        Ok(plan)
    }

    fn check(&self) -> Result<()> {
        if self.puts == 0 || self.duration.is_zero() || self.watch_puts == 0 {
            bail!("--puts, --duration and --watch-puts must be greater than zero");
        }
        if self.connections == 0 || self.read_clients == 0 || self.watch_streams == 0 {
            bail!("--connections, --read-clients and --watch-streams must be greater than zero");
        }
        let counts = [&self.clients, &self.watchers];
        if counts.iter().any(|c| c.is_empty() || c.contains(&0)) {
            bail!("--clients and --watchers take counts greater than zero, e.g. 16,256,1000");
        }
        let mut members = self.members.clone();
        members.sort_unstable();
        members.dedup();
        if members.len() != self.members.len()
            || members.is_empty()
            || members.iter().any(|&n| n == 0 || n > MAX_MEMBERS)
        {
            bail!("--members takes distinct member counts from 1 to {MAX_MEMBERS}, e.g. 1,3");
        }
        Ok(())
    }

    /// Measured puts of the watch point with `watchers` watchers.
    fn watch_puts_for(&self, watchers: usize) -> usize {
        (self.watch_events / watchers).clamp(3, self.watch_puts.max(3))
    }
}

/// "1 member", "3 members".
pub fn members_label(members: usize) -> String {
    match members {
        1 => "1 member".into(),
        n => format!("{n} members"),
    }
}

pub fn run(args: VersusArgs) -> Result<()> {
    let plan = Plan::from_args(&args)?;
    let ci = std::env::var("CI").is_ok_and(|v| v == "true");
    let skiff = system::skiff_program(args.skiff_bin.as_deref())?;
    let etcd = system::etcd_program(args.etcd_bin.as_deref(), ci)?;
    let root = DataRoot::create(
        args.data_dir.as_deref(),
        "skiff-bench-versus-",
        &["skiff-", "etcd-"],
    )?;
    print_setup(&plan, &skiff, etcd.as_ref(), root.path());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the tokio runtime")?;
    let progress = Progress::new();
    let started = Instant::now();
    let outcome = runtime.block_on(async {
        tokio::select! {
            outcome = run_all(&plan, &skiff, etcd.as_ref(), root.path(), &progress) => outcome,
            signal = interrupted() => Err(anyhow::anyhow!("interrupted by {signal}")),
        }
    });
    progress.finish();
    // Servers whose owner an error or the interrupt dropped got SIGTERM
    // then; wait for them (SIGKILL after the grace) before removing data.
    let stopped = runtime.block_on(process::stop_abandoned(STOP_GRACE));
    if stopped > 0 {
        eprintln!("skiff-bench: cleaned up {stopped} server process(es) of the failed run");
    }
    let removed = root.remove();
    let runs = outcome?;
    removed?;
    report::section(&format!(
        "skiff vs etcd over gRPC ({})",
        plan.target.describe()
    ));
    table::print(&plan, &runs);
    println!(
        "total time: {:.1} s; load average after the run: {}",
        started.elapsed().as_secs_f64(),
        load_average()
    );
    if let Some(path) = &args.plot {
        plot::write(path, &runs)?;
        println!("plot: {}", path.display());
    }
    Ok(())
}

/// Resolves on SIGINT (Ctrl-C) or SIGTERM, with the signal's name.
pub(crate) async fn interrupted() -> &'static str {
    use tokio::signal::unix::{signal, SignalKind};
    let mut terminate = signal(SignalKind::terminate()).ok();
    let sigterm = async {
        match terminate.as_mut() {
            Some(stream) => {
                stream.recv().await;
            }
            None => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => "SIGINT",
        () = sigterm => "SIGTERM",
    }
}

/// Every member count, skiff then etcd, one system running at a time.
async fn run_all(
    plan: &Plan,
    skiff: &Program,
    etcd: Option<&Program>,
    root: &Path,
    progress: &Progress,
) -> Result<Vec<MemberRun>> {
    let mut runs = Vec::with_capacity(plan.members.len());
    for &members in &plan.members {
        let skiff_run = measure_system(System::Skiff, skiff, members, plan, root, progress).await?;
        let etcd_run = match etcd {
            Some(etcd) => {
                Some(measure_system(System::Etcd, etcd, members, plan, root, progress).await?)
            }
            None => None,
        };
        runs.push(MemberRun {
            members,
            skiff: skiff_run,
            etcd: etcd_run,
        });
    }
    Ok(runs)
}

/// Starts one system's cluster, runs every workload on it, stops it.
async fn measure_system(
    system: System,
    program: &Program,
    members: usize,
    plan: &Plan,
    root: &Path,
    progress: &Progress,
) -> Result<Measured> {
    let label = format!("{}, {}", system.label(), members_label(members));
    progress.set_prefix(format!("[{label}]"));
    progress.step("starting".into());
    let dir = root.join(format!("{}-{members}", system.label()));
    let started = Instant::now();
    let mut cluster = Cluster::start(system, program, members, &dir, plan.connections).await?;
    let pids: Vec<String> = cluster.pids().iter().map(u32::to_string).collect();
    progress.note(&format!(
        "{label}: ready in {:.1} s (pids {}, leader {} at {})",
        cluster.started_in.as_secs_f64(),
        pids.join(" "),
        cluster.endpoints.leader().name,
        cluster.endpoints.leader().addr
    ));
    let measured = workloads(&cluster, plan, progress).await;
    let measured = measured.map_err(|err| {
        let exited = cluster.exited();
        // The members' fate goes after the failed request, where it reads
        // as the cause.
        anyhow::anyhow!("measuring {label}: {err:#}{exited}")
    });
    let moved = cluster.endpoints.leader_moved().await;
    let started_in = cluster.started_in;
    progress.step("stopping".into());
    let mut notes = cluster.stop().await?;
    let total = started.elapsed();
    let parts = measured?;
    notes.extend(moved);
    std::fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()))?;
    progress.note(&format!("{label}: done in {:.1} s", total.as_secs_f64()));
    Ok(Measured {
        sequential: parts.sequential,
        throughput: parts.throughput,
        linearizable: parts.linearizable,
        serializable: parts.serializable,
        watch: parts.watch,
        started_in,
        total,
        load_after: load_average(),
        notes,
    })
}

/// What the workloads measured on one running cluster.
struct Parts {
    sequential: load::Sequential,
    throughput: Vec<(usize, load::Rate, Duration)>,
    linearizable: load::Rate,
    serializable: load::Rate,
    watch: Vec<watch::WatchPoint>,
}

async fn workloads(cluster: &Cluster, plan: &Plan, progress: &Progress) -> Result<Parts> {
    let pool = cluster.endpoints.pool(plan.target);
    progress.step(format!(
        "put latency: {} sequential puts",
        report::group_digits(plan.puts as u64)
    ));
    let server_cpu = || cluster.cpu_time();
    let sequential =
        load::sequential_puts(&pool, plan.warmup_puts, plan.puts, &server_cpu, progress).await?;
    let mut throughput = Vec::with_capacity(plan.clients.len());
    for &clients in &plan.clients {
        progress.step(format!(
            "put throughput: {} clients for {:?}",
            report::group_digits(clients as u64),
            plan.warmup + plan.duration
        ));
        let cpu_before = cluster.cpu_time();
        let rate = load::put_throughput(&pool, clients, plan.warmup, plan.duration).await?;
        throughput.push((clients, rate, cluster.cpu_time().saturating_sub(cpu_before)));
    }
    progress.step(format!("range: writing {} keys to read", load::READ_KEYS));
    load::write_read_keys(&pool).await?;
    let mut reads = Vec::with_capacity(2);
    for serializable in [false, true] {
        let kind = if serializable {
            "serializable"
        } else {
            "linearizable"
        };
        progress.step(format!(
            "range {kind}: {} clients for {:?}",
            plan.read_clients,
            plan.warmup + plan.duration
        ));
        reads.push(
            load::range_throughput(
                &pool,
                plan.read_clients,
                serializable,
                plan.warmup,
                plan.duration,
            )
            .await?,
        );
    }
    let mut watch = Vec::with_capacity(plan.watchers.len());
    for &watchers in &plan.watchers {
        let puts = plan.watch_puts_for(watchers);
        progress.step(format!(
            "watch latency: {} watchers, {puts} puts",
            report::group_digits(watchers as u64)
        ));
        watch.push(
            watch::measure_point(
                &pool,
                &pool,
                watchers,
                plan.watch_streams,
                puts,
                &server_cpu,
                progress,
            )
            .await?,
        );
    }
    let serializable = reads
        .pop()
        .context("the serializable range point is missing")?;
    let linearizable = reads
        .pop()
        .context("the linearizable range point is missing")?;
    Ok(Parts {
        sequential,
        throughput,
        linearizable,
        serializable,
        watch,
    })
}

/// The lines every side-by-side benchmark opens with: the command, the
/// machine, the data directory, the load, and the two programs (`etcd_as`:
/// how etcd runs; `skipped_means`: what is left out without it).
pub(crate) fn print_common_setup(
    name: &str,
    skiff: &Program,
    etcd: Option<&Program>,
    root: &Path,
    etcd_as: &str,
    skipped_means: &str,
) {
    machine::print_header(name, root);
    println!("load:    {} (before the run)", load_average());
    println!("skiff:   {} ({})", skiff.path.display(), skiff.version);
    match etcd {
        Some(etcd) => println!(
            "etcd:    {} ({}; {etcd_as})",
            etcd.path.display(),
            etcd.version
        ),
        None => {
            let skipped = format!(
                "etcd is NOT INSTALLED: {skipped_means}; \
                 install it with `apt-get install -y {}` to get the side-by-side figures",
                system::ETCD_PACKAGE
            );
            println!("etcd:    {skipped}");
            eprintln!("skiff-bench: {skipped}");
        }
    }
}

fn print_setup(plan: &Plan, skiff: &Program, etcd: Option<&Program>, root: &Path) {
    print_common_setup(
        "versus",
        skiff,
        etcd,
        root,
        "as shipped: fsync on, default heartbeat and snapshot settings",
        "its side is skipped and only skiff is measured",
    );
    let counts: Vec<String> = plan.members.iter().map(|&n| members_label(n)).collect();
    println!(
        "members: {}; each system alone on the machine while it runs (skiff first), processes on 127.0.0.1",
        counts.join(", ")
    );
    println!(
        "client:  one Rust tonic client for both, {} connections per member; {}",
        plan.connections,
        plan.target.describe()
    );
    let watch_puts: Vec<String> = plan
        .watchers
        .iter()
        .map(|&w| {
            format!(
                "{} x {}",
                report::group_digits(w as u64),
                plan.watch_puts_for(w)
            )
        })
        .collect();
    println!(
        "sizes:   {} sequential puts (after {} warm-up); throughput points of {:?} after {:?} warm-up with {:?} clients; range with {} clients over {} keys; watchers x puts {} on {} streams",
        plan.puts,
        plan.warmup_puts,
        plan.duration,
        plan.warmup,
        plan.clients,
        plan.read_clients,
        load::READ_KEYS,
        watch_puts.join(", "),
        plan.watch_streams
    );
    println!(
        "values:  {} random bytes, a fresh key per put; every put is durable (fsync on a quorum) before it is answered",
        crate::store::VALUE_LEN
    );
}

/// The 1, 5 and 15 minute load averages: other work on the machine skews
/// every figure.
pub(crate) fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|| "unknown".into())
}
