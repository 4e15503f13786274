//! `skiff-bench api`: the Kubernetes REST API of `skiff up`, over its
//! in-process store and over real etcd (`--store-endpoints`), one after the
//! other on this machine, driven by the same plain HTTP client in JSON and
//! in protobuf as client-go speaks it: pod creates, lists, watch fan-out
//! and the API server's memory, in one table with ratios. Not for the
//! store alone: `store` and `versus` do that.

mod encoding;
mod floor;
mod h1watch;
mod h2watch;
pub(crate) mod http;
mod list;
mod pods;
mod protobuf;
pub(crate) mod server;
mod table;
pub(crate) mod watch;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::data_root::DataRoot;
use crate::report;
use crate::versus::progress::Progress;
use crate::versus::system::{self, Program};
use crate::versus::{interrupted, load_average, process};
use encoding::Encoding;
use http::ApiConnection;
use server::{ApiServer, Backend, STOP_GRACE};
use table::{Measured, Memory};
use watch::{WatchSetup, WatchTransport};

#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  \
    cargo build --release -p skiff -p skiff-bench && target/release/skiff-bench api\n  \
    target/release/skiff-bench api --quick\n\n\
    The skiff binary is taken from beside skiff-bench (under `cargo run` it is built \
    first with the same profile) or from --skiff-bin. Without etcd only the in-process \
    store is measured (with CI=true the run fails instead): apt-get install -y etcd-server")]
pub struct ApiArgs {
    /// Concurrent clients (one connection each), one create-throughput point each
    #[arg(
        long,
        value_delimiter = ',',
        env = "SKIFF_BENCH_API_CLIENTS",
        default_value = "1,16,64"
    )]
    clients: Vec<usize>,

    /// Pods each create-throughput point creates [default: 2000, --quick:
    /// 100, or fewer so that every create point's pods fit in --list-pods]
    #[arg(long, env = "SKIFF_BENCH_API_CREATES")]
    creates: Option<usize>,

    /// Pods in the namespace when lists are timed [default: 10000; --quick: 500]
    #[arg(long, env = "SKIFF_BENCH_API_LIST_PODS")]
    list_pods: Option<usize>,

    /// Timed repetitions of each list [default: 100; --quick: 3]
    #[arg(long, env = "SKIFF_BENCH_API_LIST_REPS")]
    list_reps: Option<usize>,

    /// Concurrent watchers, one fan-out point each [default: 1,100,1000; --quick: 1,50]
    #[arg(long, value_delimiter = ',', env = "SKIFF_BENCH_API_WATCHERS")]
    watchers: Option<Vec<usize>>,

    /// How watchers connect: http1 (a connection each), http2 (watches
    /// multiplexed on shared connections, as client libraries do), or both
    #[arg(
        long,
        value_delimiter = ',',
        env = "SKIFF_BENCH_API_WATCH_TRANSPORTS",
        default_value = "http1,http2",
        value_parser = watch::WatchTransport::parse
    )]
    watch_transports: Vec<watch::WatchTransport>,

    /// Encodings every create, list and watch point is measured in: json,
    /// protobuf (Kubernetes' `application/vnd.kubernetes.protobuf`, with
    /// client-go's Accept), or both side by side with their ratio
    #[arg(
        long,
        value_delimiter = ',',
        env = "SKIFF_BENCH_API_ENCODINGS",
        default_value = "json,protobuf",
        value_parser = Encoding::parse
    )]
    encodings: Vec<Encoding>,

    /// Measured writes at each watch point [default: 100; --quick: 10]
    #[arg(long, env = "SKIFF_BENCH_API_WATCH_WRITES")]
    watch_writes: Option<usize>,

    /// Pods in the namespace when the API server's memory is read
    /// [default: 100000; --quick: 1000]
    #[arg(long, env = "SKIFF_BENCH_API_MEMORY_PODS")]
    memory_pods: Option<usize>,

    /// The skiff binary [default: `skiff` beside skiff-bench]
    #[arg(long, env = "SKIFF_BIN")]
    skiff_bin: Option<PathBuf>,

    /// The etcd binary [default: `etcd` in PATH]
    #[arg(long, env = "SKIFF_BENCH_ETCD")]
    etcd_bin: Option<PathBuf>,

    /// Where the servers' data directories go (removed afterwards)
    /// [default: a temporary directory under ./target, or the system's]
    #[arg(long, env = "SKIFF_BENCH_DATA_DIR")]
    data_dir: Option<PathBuf>,

    /// Small sizes, for a CI smoke run (seconds per backend in a release
    /// build, under a minute in a debug one)
    #[arg(long, env = "SKIFF_BENCH_QUICK")]
    quick: bool,

    /// Also run the in-process store's create and watch points with the
    /// API server's request metrics off, and print them beside the run
    /// with them on: what recording metrics costs on the hot paths
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, env = "SKIFF_BENCH_API_METRICS_OVERHEAD")]
    metrics_overhead: bool,
}

/// The sizes of one run: flags, else the defaults for --quick or a full run.
#[derive(Debug, Clone)]
pub struct Plan {
    pub clients: Vec<usize>,
    pub creates: usize,
    pub list_pods: usize,
    pub list_reps: usize,
    pub watchers: Vec<usize>,
    pub watch_transports: Vec<watch::WatchTransport>,
    pub encodings: Vec<Encoding>,
    pub watch_writes: usize,
    pub memory_pods: usize,
    pub metrics_overhead: bool,
}

impl Plan {
    fn from_args(args: &ApiArgs) -> Result<Plan> {
        let q = args.quick;
        let mut encodings: Vec<Encoding> = Vec::new();
        for &encoding in &args.encodings {
            if !encodings.contains(&encoding) {
                encodings.push(encoding);
            }
        }
        let list_pods = args.list_pods.unwrap_or(if q { 500 } else { 10_000 });
        let create_points = (args.clients.len() * encodings.len()).max(1);
        let creates = args
            .creates
            .unwrap_or((if q { 100 } else { 2000 }).min(list_pods / create_points));
        let plan = Plan {
            clients: args.clients.clone(),
            creates,
            list_pods,
            list_reps: args.list_reps.unwrap_or(if q { 3 } else { 100 }),
            watchers: args.watchers.clone().unwrap_or(if q {
                vec![1, 50]
            } else {
                vec![1, 100, 1000]
            }),
            watch_transports: args.watch_transports.clone(),
            encodings,
            watch_writes: args.watch_writes.unwrap_or(if q { 10 } else { 100 }),
            memory_pods: args.memory_pods.unwrap_or(if q { 1000 } else { 100_000 }),
            metrics_overhead: args.metrics_overhead,
        };
        plan.check()?;
        Ok(plan)
    }

    /// Every watch point, in the order measured: each transport's
    /// watcher counts, each in every encoding one after the other.
    pub fn watch_points(&self) -> Vec<WatchSetup> {
        let mut points = Vec::new();
        for &transport in &self.watch_transports {
            for &watchers in &self.watchers {
                for &encoding in &self.encodings {
                    points.push(WatchSetup {
                        transport,
                        encoding,
                        watchers,
                    });
                }
            }
        }
        points
    }

    /// The watcher count the raw TCP floor is measured at: the largest,
    /// if it was measured over HTTP/1.1 in JSON (the floor sends the same
    /// JSON event).
    pub fn floor_watchers(&self) -> Option<usize> {
        let largest = self.watchers.iter().copied().max()?;
        let measured = self.watch_transports.contains(&WatchTransport::Http1)
            && self.encodings.contains(&Encoding::Json);
        measured.then_some(largest)
    }

    /// Whether JSON and protobuf are measured side by side.
    pub fn both_encodings(&self) -> bool {
        self.encodings.contains(&Encoding::Json) && self.encodings.contains(&Encoding::Protobuf)
    }

    fn check(&self) -> Result<()> {
        let counts = [&self.clients, &self.watchers];
        if counts.iter().any(|c| c.is_empty() || c.contains(&0)) {
            bail!("--clients and --watchers take counts greater than zero, e.g. 1,16,64");
        }
        if self.watch_transports.is_empty() {
            bail!("--watch-transports takes http1, http2 or both");
        }
        if self.encodings.is_empty() {
            bail!("--encodings takes json, protobuf or both");
        }
        if self.creates == 0 || self.list_reps == 0 || self.watch_writes == 0 {
            bail!(
                "--creates, --list-reps and --watch-writes must be greater than zero \
                 (with --list-pods {}, the default --creates is {})",
                self.list_pods,
                self.creates
            );
        }
        let created = self.creates * self.clients.len() * self.encodings.len();
        if self.list_pods < created || self.memory_pods < self.list_pods {
            bail!(
                "the create points ({} per client count and encoding) write {created} pods: \
                 --list-pods must be at least that, and --memory-pods at least --list-pods",
                self.creates
            );
        }
        Ok(())
    }

    fn max_clients(&self) -> usize {
        self.clients.iter().copied().max().unwrap_or(1)
    }
}

pub fn run(args: ApiArgs) -> Result<()> {
    let plan = Plan::from_args(&args)?;
    let ci = std::env::var("CI").is_ok_and(|v| v == "true");
    let skiff = system::skiff_program(args.skiff_bin.as_deref())?;
    let etcd = system::etcd_program(args.etcd_bin.as_deref(), ci)?;
    raise_open_files_limit(&plan);
    let root = DataRoot::create(args.data_dir.as_deref(), "skiff-bench-api-", &["skiff-"])?;
    print_setup(&plan, &skiff, etcd.as_ref(), root.path());
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
            outcome = run_all(&plan, &skiff, etcd.as_ref(), root.path(), &progress) => outcome,
            signal = interrupted() => Err(anyhow::anyhow!("interrupted by {signal}")),
        }
    });
    progress.finish();
    let stopped = runtime.block_on(process::stop_abandoned(STOP_GRACE));
    if stopped > 0 {
        eprintln!("skiff-bench: cleaned up {stopped} server process(es) of the failed run");
    }
    let removed = root.remove();
    let (in_process, over_etcd, metrics_off) = outcome?;
    removed?;
    report::section("skiff's Kubernetes API: in-process store vs real etcd");
    table::print(&plan, &in_process, over_etcd.as_ref());
    if let Some(metrics_off) = &metrics_off {
        report::section("the cost of request metrics: in-process store, metrics on vs off");
        table::print_metrics_overhead(&plan, &in_process, metrics_off);
    }
    println!(
        "total time: {:.1} s; load average after the run: {}",
        started.elapsed().as_secs_f64(),
        load_average()
    );
    Ok(())
}

/// The in-process store, then etcd if there is one, then (unless left
/// out) the in-process store again with its request metrics off: one
/// server at a time.
async fn run_all(
    plan: &Plan,
    skiff: &Program,
    etcd: Option<&Program>,
    root: &Path,
    progress: &Progress,
) -> Result<(Measured, Option<Measured>, Option<Measured>)> {
    let in_process = measure_backend(
        Run::Full(Backend::InProcess),
        plan,
        skiff,
        etcd,
        root,
        progress,
    )
    .await?;
    let over_etcd = match etcd {
        Some(_) => Some(
            measure_backend(Run::Full(Backend::Etcd), plan, skiff, etcd, root, progress).await?,
        ),
        None => None,
    };
    let metrics_off = match plan.metrics_overhead {
        true => Some(measure_backend(Run::MetricsOff, plan, skiff, etcd, root, progress).await?),
        false => None,
    };
    Ok((in_process, over_etcd, metrics_off))
}

/// What one server is measured for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Run {
    /// Every workload, on this backend.
    Full(Backend),
    /// The in-process store with `--request-metrics=false`: the create
    /// and watch points only (after the same load as a full run's), for
    /// the cost of recording metrics.
    MetricsOff,
}

impl Run {
    fn backend(self) -> Backend {
        match self {
            Run::Full(backend) => backend,
            Run::MetricsOff => Backend::InProcess,
        }
    }

    fn label(self) -> &'static str {
        match self {
            Run::Full(backend) => backend.label(),
            Run::MetricsOff => "in-process store, request metrics off",
        }
    }
}

/// Starts one backend, runs every workload of `run` on it, stops it.
async fn measure_backend(
    run: Run,
    plan: &Plan,
    skiff: &Program,
    etcd: Option<&Program>,
    root: &Path,
    progress: &Progress,
) -> Result<Measured> {
    let label = run.label();
    progress.set_prefix(format!("[{label}]"));
    progress.step("starting".into());
    let started = Instant::now();
    let extra: &[&str] = match run {
        Run::Full(_) => &[],
        Run::MetricsOff => &["--request-metrics=false"],
    };
    let mut server = ApiServer::start(run.backend(), skiff, etcd, root, false, extra).await?;
    progress.note(&format!(
        "{label}: ready in {:.1} s (API http://{})",
        server.started_in.as_secs_f64(),
        server.api
    ));
    let measured = workloads(&server, plan, run, progress).await;
    let measured = measured.map_err(|err| {
        let exited = server.exited();
        anyhow::anyhow!("measuring the API {label}: {err:#}{exited}")
    });
    let started_in = server.started_in;
    progress.step("stopping".into());
    let notes = server.stop().await?;
    let mut measured = measured?;
    measured.started_in = started_in;
    measured.total = started.elapsed();
    measured.load_after = load_average();
    measured.notes.extend(notes);
    progress.note(&format!(
        "{label}: done in {:.1} s",
        measured.total.as_secs_f64()
    ));
    Ok(measured)
}

/// Waits until the servers use under a tenth of a core over half a
/// second (at most 15 s): how long it took, and whether they settled.
async fn settle(cpu_time: impl Fn() -> Duration) -> (Duration, bool) {
    const WINDOW: Duration = Duration::from_millis(500);
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(15) {
        let before = cpu_time();
        tokio::time::sleep(WINDOW).await;
        if cpu_time().saturating_sub(before) < WINDOW / 10 {
            return (start.elapsed(), true);
        }
    }
    (start.elapsed(), false)
}

async fn workloads(
    server: &ApiServer,
    plan: &Plan,
    run: Run,
    progress: &Progress,
) -> Result<Measured> {
    let full = run != Run::MetricsOff;
    let rss_at_start = server.api_resident_bytes().unwrap_or(0);
    let mut conns = Vec::with_capacity(plan.max_clients());
    for _ in 0..plan.max_clients() {
        conns.push(ApiConnection::connect(server.api).await?);
    }
    pods::create_namespace(&mut conns[0]).await?;
    let mut next_pod = 0;
    let mut creates = Vec::with_capacity(plan.clients.len() * plan.encodings.len());
    for &clients in &plan.clients {
        for &encoding in &plan.encodings {
            progress.step(format!(
                "create throughput: {} pods with {clients} client(s), {}",
                plan.creates,
                encoding.name()
            ));
            let range = (next_pod, plan.creates);
            creates.push(pods::create_pods(&mut conns, clients, encoding, range, progress).await?);
            next_pod += plan.creates;
        }
    }
    top_up(&mut conns, plan, &mut next_pod, plan.list_pods, progress).await?;
    // Lists are timed in a steady state, not while the store still digests
    // the pods just loaded (its log compaction and flushes).
    progress.step("waiting for the servers to settle after the load".to_string());
    let settled = settle(|| server.cpu_time()).await;
    progress.step(format!(
        "settled in {:.1} s{}",
        settled.0.as_secs_f64(),
        if settled.1 {
            ""
        } else {
            " (still busy; timing anyway)"
        }
    ));
    let mut lists = Vec::with_capacity(list::ListKind::ALL.len() * plan.encodings.len());
    for kind in list::ListKind::ALL.into_iter().filter(|_| full) {
        for &encoding in &plan.encodings {
            progress.step(format!(
                "list {}, {}: {} times",
                kind.describe(),
                encoding.name(),
                plan.list_reps
            ));
            lists.push(list::measure(&mut conns[0], kind, encoding, plan.list_reps).await?);
        }
    }
    let server_cpu = || server.cpu_time();
    let mut watches = Vec::with_capacity(plan.watch_points().len());
    for setup in plan.watch_points() {
        progress.step(format!(
            "watch fan-out: {} watchers over {}, {}, {} writes",
            report::group_digits(setup.watchers as u64),
            setup.transport.name(),
            setup.encoding.name(),
            plan.watch_writes
        ));
        watches.push(
            watch::measure_point(
                server.api,
                &mut conns[0],
                setup,
                plan.watch_writes,
                &server_cpu,
                progress,
            )
            .await?,
        );
    }
    if !full {
        return Ok(Measured {
            creates,
            lists,
            watches,
            floor: None,
            memory: Default::default(),
            started_in: Duration::ZERO,
            total: Duration::ZERO,
            load_after: String::new(),
            notes: Vec::new(),
        });
    }
    let floor = match plan.floor_watchers() {
        Some(watchers) => {
            progress.step(format!(
                "raw TCP floor: the same event to {} connections, {} writes",
                report::group_digits(watchers as u64),
                plan.watch_writes
            ));
            let event = served_event(&mut conns[0], watchers).await?;
            Some(floor::measure(watchers, plan.watch_writes, &event, progress).await?)
        }
        None => None,
    };
    let mut notes = Vec::new();
    if plan.both_encodings() {
        progress.step("the same pod created from JSON and from protobuf, compared".into());
        if let Some(difference) = pods::encodings_differ(&mut conns[0]).await? {
            notes.push(format!(
                "the pod created from protobuf is not the one created from JSON, as served \
                 (at {difference}): the protobuf and JSON creates did not write the same thing"
            ));
        }
    }
    top_up(&mut conns, plan, &mut next_pod, plan.memory_pods, progress).await?;
    let memory = read_memory(server, &mut conns[0], rss_at_start, progress).await?;
    Ok(Measured {
        creates,
        lists,
        watches,
        floor,
        memory,
        started_in: Duration::ZERO,
        total: Duration::ZERO,
        load_after: String::new(),
        notes,
    })
}

/// A watch event of a pod the HTTP/1.1 point with `watchers` created, as
/// the API server serves it: the floor sends the same bytes.
async fn served_event(conn: &mut ApiConnection, watchers: usize) -> Result<serde_json::Value> {
    let setup = WatchSetup {
        transport: WatchTransport::Http1,
        encoding: Encoding::Json,
        watchers,
    };
    let name = watch::pod_name(setup, 1);
    let path = format!("{}/{name}", pods::pods_path());
    let body = conn
        .get(&path)
        .await?
        .expect(hyper::StatusCode::OK, &format!("reading pod {name}"))?;
    let pod: serde_json::Value =
        serde_json::from_slice(&body).with_context(|| format!("pod {name} as served"))?;
    Ok(serde_json::json!({"type": "ADDED", "object": pod}))
}

/// Creates `pod-…` pods (with every client) until there are `target` of them.
async fn top_up(
    conns: &mut Vec<ApiConnection>,
    plan: &Plan,
    next_pod: &mut usize,
    target: usize,
    progress: &Progress,
) -> Result<()> {
    if *next_pod >= target {
        return Ok(());
    }
    let count = target - *next_pod;
    progress.step(format!(
        "loading {} more pods (to {})",
        report::group_digits(count as u64),
        report::group_digits(target as u64)
    ));
    let range = (*next_pod, count);
    pods::create_pods(conns, plan.max_clients(), Encoding::Json, range, progress).await?;
    *next_pod = target;
    Ok(())
}

/// The API server's resident memory now, and the pods' count and JSON size.
async fn read_memory(
    server: &ApiServer,
    conn: &mut ApiConnection,
    rss_at_start: u64,
    progress: &Progress,
) -> Result<Memory> {
    // Let the last writes' background work (flushes, cache updates) settle.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let rss = server
        .api_resident_bytes()
        .context("reading the API server's VmRSS from /proc")?;
    let etcd_rss = server.etcd_resident_bytes();
    progress.step("measuring the pods' JSON size (paged list)".into());
    let (pods, json_bytes) = list::count_and_size(conn).await?;
    Ok(Memory {
        pods,
        json_bytes,
        rss,
        rss_at_start,
        etcd_rss,
    })
}

/// 1 000 watchers need 1 000 connections on each side: the soft limit on
/// open files goes up to the hard one (the servers inherit it).
fn raise_open_files_limit(plan: &Plan) {
    let needed = plan.watchers.iter().copied().max().unwrap_or(0) + plan.max_clients() + 256;
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit only read and write `limit`.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return;
        }
        if limit.rlim_cur >= needed as libc::rlim_t {
            return;
        }
        limit.rlim_cur = limit.rlim_max;
        if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0
            || limit.rlim_cur < needed as libc::rlim_t
        {
            eprintln!(
                "skiff-bench: WARNING: open files limited to {}, {needed} needed; raise it with `ulimit -n`",
                limit.rlim_cur
            );
        }
    }
}

fn print_setup(plan: &Plan, skiff: &Program, etcd: Option<&Program>, root: &Path) {
    crate::versus::print_common_setup(
        "api",
        skiff,
        etcd,
        root,
        "as shipped, under `skiff up --store-endpoints`",
        "the etcd column is skipped and only the in-process store is measured",
    );
    println!(
        "servers: `skiff up` (in-process store), then etcd + `skiff up --store-endpoints`; one at a time, on 127.0.0.1"
    );
    println!(
        "client:  plain HTTP (hyper): one HTTP/1.1 keep-alive connection per client; watchers each on their own HTTP/1.1 connection (read by a few tasks), or as streams of shared HTTP/2 connections (h2c, up to 1 000 each, read frame by frame by one task per connection); tokio with 2 workers"
    );
    let encodings: Vec<&str> = plan.encodings.iter().map(|e| e.name()).collect();
    println!(
        "encodings: {}; protobuf as client-go: `Accept: {}`, bodies `k8s\\0` + runtime.Unknown (k8s-pb), watches read as length-prefixed WatchEvent frames, each decoded down to its pod's metadata; the writer of a watch point creates in the point's encoding",
        encodings.join(", "),
        Encoding::Protobuf.accept()
    );
    let watchers: Vec<String> = plan
        .watchers
        .iter()
        .map(|&w| report::group_digits(w as u64))
        .collect();
    println!(
        "sizes:   {} creates per point with {:?} clients; lists over {} pods, {} times each; watchers {} x {} writes; memory with {} pods",
        report::group_digits(plan.creates as u64),
        plan.clients,
        report::group_digits(plan.list_pods as u64),
        plan.list_reps,
        watchers.join(", "),
        plan.watch_writes,
        report::group_digits(plan.memory_pods as u64)
    );
    println!(
        "pods:    namespace `{}`, one container, 3 labels (selector {} matches 1 in {}), 4 annotations, ~1 KB JSON",
        pods::NAMESPACE,
        pods::SELECTOR,
        pods::GROUPS
    );
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        api: ApiArgs,
    }

    fn plan(args: &[&str]) -> Result<Plan> {
        let cli = Cli::try_parse_from(std::iter::once("api").chain(args.iter().copied()))?;
        Plan::from_args(&cli.api)
    }

    #[test]
    fn both_encodings_by_default_with_creates_that_fit_the_list() {
        let quick = plan(&["--quick"]).unwrap();
        assert_eq!(quick.encodings, [Encoding::Json, Encoding::Protobuf]);
        // 3 client counts x 2 encodings in 500 pods.
        assert_eq!(quick.creates, 83);
        let full = plan(&[]).unwrap();
        assert_eq!((full.creates, full.list_pods), (1666, 10_000));
        let json = plan(&["--encodings", "json"]).unwrap();
        assert_eq!(json.creates, 2000);
        assert!(!json.both_encodings());
        let err = plan(&["--creates", "2000"]).unwrap_err();
        assert!(
            err.to_string().contains("--list-pods must be at least"),
            "{err}"
        );
        assert!(plan(&["--encodings", "yaml"]).is_err());
        let repeated = plan(&["--encodings", "protobuf,json,protobuf"]).unwrap();
        assert_eq!(repeated.encodings, [Encoding::Protobuf, Encoding::Json]);
    }

    #[test]
    fn watch_points_measure_each_encoding_back_to_back() {
        let plan = plan(&[
            "--quick",
            "--watchers",
            "1,50",
            "--watch-transports",
            "http2",
        ])
        .unwrap();
        let points: Vec<(usize, Encoding)> = plan
            .watch_points()
            .iter()
            .map(|p| (p.watchers, p.encoding))
            .collect();
        let (json, protobuf) = (Encoding::Json, Encoding::Protobuf);
        assert_eq!(
            points,
            [(1, json), (1, protobuf), (50, json), (50, protobuf)]
        );
        // The floor sends a JSON event over HTTP/1.1: not measured here.
        assert_eq!(plan.floor_watchers(), None);
    }
}
