//! `skiff-bench exec`: what `kubectl exec` and `kubectl port-forward` cost
//! through skiff's API server — exec round trips of `true` and a
//! port-forward transfer beside the same transfer over plain loopback —
//! against a fresh `skiff up` with its kubelet, over TLS as kubectl goes.

mod channel;
mod port_forward;
mod round_trip;
mod sink;
mod table;
pub(crate) mod tls_api;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use bytes::Bytes;
use hyper::StatusCode;

use crate::api::http::ApiConnection;
use crate::api::server::STOP_GRACE;
use crate::data_root::DataRoot;
use crate::kubelet::server::{Components, SkiffUp};
use crate::machine;
use crate::report::{self, Latencies};
use crate::versus::progress::Progress;
use crate::versus::system::{self, Program};
use crate::versus::{interrupted, load_average, process};
use tls_api::TlsApi;

const NODE_NAME: &str = "node-1";
/// How long the pod may take to run and its sink to listen: generous, so
/// that a debug build is measured rather than cut short.
const POD_TIMEOUT: Duration = Duration::from_secs(90);
const POLL: Duration = Duration::from_millis(50);
/// A megabyte as the table counts it.
const MB: u64 = 1_000_000;
/// Transfers of this size before the measured ones, to warm both paths.
const WARM_UP_BYTES: u64 = MB;

#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  \
    cargo build --release -p skiff -p skiff-bench && target/release/skiff-bench exec\n  \
    cargo build -p skiff -p skiff-bench && target/debug/skiff-bench exec --quick\n  \
    target/release/skiff-bench exec --execs 1000 --megabytes 500")]
pub struct ExecArgs {
    /// Sequential exec round trips of `true` [default: 200; --quick: 20]
    #[arg(long, env = "SKIFF_BENCH_EXEC_EXECS")]
    execs: Option<usize>,

    /// Megabytes (10^6 bytes) sent through the port-forward, and over
    /// plain loopback [default: 100; --quick: 10]
    #[arg(long, env = "SKIFF_BENCH_EXEC_MEGABYTES")]
    megabytes: Option<u64>,

    /// The skiff binary [default: `skiff` beside skiff-bench]
    #[arg(long, env = "SKIFF_BIN")]
    skiff_bin: Option<PathBuf>,

    /// Where the server's data directory goes (removed afterwards)
    #[arg(long, env = "SKIFF_BENCH_DATA_DIR")]
    data_dir: Option<PathBuf>,

    /// 20 execs and 10 MB: a smoke run of a few seconds
    #[arg(long, env = "SKIFF_BENCH_QUICK")]
    quick: bool,
}

/// What to run.
pub struct ExecConfig {
    pub execs: usize,
    pub bytes: u64,
}

/// What one run gave.
pub struct ExecResult {
    pub config: ExecConfig,
    pub exec_total: Latencies,
    pub exec_connect: Latencies,
    pub exec_upgrade: Latencies,
    /// Port-forward: connect to both channels open.
    pub forward_setup: Duration,
    pub forward_transfer: Duration,
    pub loopback_transfer: Duration,
    /// CPU time of `skiff up` (API server and kubelet) over the
    /// port-forward transfer.
    pub forward_cpu: Duration,
    pub pod_running_in: Duration,
    pub notes: Vec<String>,
}

pub fn run(args: ExecArgs) -> Result<()> {
    let config = ExecConfig {
        execs: args.execs.unwrap_or(if args.quick { 20 } else { 200 }),
        bytes: args.megabytes.unwrap_or(if args.quick { 10 } else { 100 }) * MB,
    };
    if config.execs == 0 || config.bytes == 0 {
        bail!("--execs and --megabytes need to be at least 1");
    }
    sink::check_python()?;
    let skiff = system::skiff_program(args.skiff_bin.as_deref())?;
    let root = DataRoot::create(args.data_dir.as_deref(), "skiff-bench-exec-", &["skiff-"])?;
    print_setup(&config, &skiff, root.path());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the tokio runtime")?;
    let progress = Progress::new();
    let started = Instant::now();
    let dir = root.path().join("skiff-exec");
    let outcome = runtime.block_on(async {
        tokio::select! {
            outcome = measure(config, &skiff, &dir, &progress) => outcome,
            signal = interrupted() => Err(anyhow!("interrupted by {signal}")),
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
    report::section("exec and port-forward through the API server (TLS, admin client certificate)");
    table::print(&result);
    println!(
        "total time: {:.1} s; load average after the run: {}",
        started.elapsed().as_secs_f64(),
        load_average()
    );
    Ok(())
}

/// Starts `skiff up` in `dir`, runs the pod and measures, stops it.
async fn measure(
    config: ExecConfig,
    skiff: &Program,
    dir: &Path,
    progress: &Progress,
) -> Result<ExecResult> {
    progress.step("starting skiff up with its scheduler and kubelet".into());
    let components = Components::Node {
        name: NODE_NAME.into(),
        max_pods: 1,
        pod_network: None,
        service_proxy: None,
    };
    let server = SkiffUp::start(skiff, dir, &components).await?;
    let port = free_port()?;
    let outcome = run_against(
        &server,
        &dir.join("skiff").join("kubeconfig"),
        port,
        config,
        progress,
    )
    .await;
    progress.step("stopping skiff up".into());
    let log = server.log_tail();
    let stopped = server.stop().await;
    let mut result = outcome.map_err(|err| anyhow!("{err:#}\n  skiff up's log ends:\n{log}"))?;
    result.notes.extend(stopped?);
    if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
        result.notes.push(format!(
            "the sink still listens on 127.0.0.1:{port} after skiff up stopped: a python3 process outlived it; stop it by hand"
        ));
    }
    Ok(result)
}

async fn run_against(
    server: &SkiffUp,
    kubeconfig: &Path,
    port: u16,
    config: ExecConfig,
    progress: &Progress,
) -> Result<ExecResult> {
    let api = TlsApi::from_kubeconfig(kubeconfig)?;
    progress.step(format!(
        "creating pod {} and waiting for it to run",
        sink::POD
    ));
    let started = Instant::now();
    start_pod(server, port).await?;
    let pod_running_in = started.elapsed();

    progress.step("warming up".into());
    round_trip::exec_true(&api)
        .await
        .context("the first exec")?;
    sink::transfer_direct(port, WARM_UP_BYTES).await?;
    port_forward::transfer(&api, port, WARM_UP_BYTES)
        .await
        .context("the first port-forward")?;

    progress.step(format!("{} exec round trips of `true`", config.execs));
    progress.set_length(config.execs as u64);
    let (mut total, mut connect, mut upgrade) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..config.execs {
        let times = round_trip::exec_true(&api)
            .await
            .with_context(|| format!("exec {} of {}", i + 1, config.execs))?;
        total.push(times.total);
        connect.push(times.connected);
        upgrade.push(times.upgraded);
        progress.inc(1);
    }

    let megabytes = config.bytes / MB;
    progress.step(format!("{megabytes} MB over plain loopback to the sink"));
    let loopback_transfer = sink::transfer_direct(port, config.bytes).await?;
    progress.step(format!("{megabytes} MB through the port-forward"));
    let cpu_before = server.cpu_time();
    let forwarded = port_forward::transfer(&api, port, config.bytes).await?;
    let forward_cpu = server.cpu_time().saturating_sub(cpu_before);
    Ok(ExecResult {
        config,
        exec_total: Latencies::from_durations(&total),
        exec_connect: Latencies::from_durations(&connect),
        exec_upgrade: Latencies::from_durations(&upgrade),
        forward_setup: forwarded.setup,
        forward_transfer: forwarded.transfer,
        loopback_transfer,
        forward_cpu,
        pod_running_in,
        notes: Vec::new(),
    })
}

/// Creates the pod and waits until it runs and its sink answers.
async fn start_pod(server: &SkiffUp, port: u16) -> Result<()> {
    let mut conn = ApiConnection::connect(server.api).await?;
    let pods = format!("/api/v1/namespaces/{}/pods", sink::NAMESPACE);
    conn.post(&pods, Bytes::from(sink::pod_json(port).to_string()))
        .await?
        .expect(StatusCode::CREATED, &format!("creating pod {}", sink::POD))?;
    let deadline = Instant::now() + POD_TIMEOUT;
    let mut last = String::from("not read yet");
    while Instant::now() < deadline {
        let body = conn
            .get(&sink::pod_path())
            .await?
            .expect(StatusCode::OK, &format!("reading pod {}", sink::POD))?;
        let pod: serde_json::Value = serde_json::from_slice(&body).context("a Pod's JSON")?;
        let phase = pod["status"]["phase"].as_str().unwrap_or("none");
        match phase {
            "Running" => {
                if sink::transfer_direct(port, 0).await.is_ok() {
                    return Ok(());
                }
                last = format!("Running, its sink not yet listening on 127.0.0.1:{port}");
            }
            "Failed" | "Succeeded" => bail!(
                "pod {} ended ({phase}) instead of serving its sink: {}",
                sink::POD,
                pod["status"]
            ),
            _ => last = format!("phase {phase}, status {}", pod["status"]),
        }
        tokio::time::sleep(POLL).await;
    }
    bail!(
        "pod {} did not run its sink within {POD_TIMEOUT:?}: {last}",
        sink::POD
    )
}

/// A free port on 127.0.0.1 for the sink (free when chosen).
fn free_port() -> Result<u16> {
    let listener = TcpListener::bind("127.0.0.1:0").context("finding a free port on 127.0.0.1")?;
    Ok(listener.local_addr()?.port())
}

fn print_setup(config: &ExecConfig, skiff: &Program, root: &Path) {
    machine::print_header("exec", root);
    println!("load:    {} (before the run)", load_average());
    println!("skiff:   {} ({})", skiff.path.display(), skiff.version);
    println!(
        "server:  a fresh `skiff up` with its scheduler and kubelet (Node {NODE_NAME}), on 127.0.0.1; \
         reached over its HTTPS port with the admin kubeconfig's client certificate"
    );
    println!(
        "pod:     {}/{}, one container running python3: a TCP sink on a loopback port that reads a \
         length-prefixed payload and answers the count",
        sink::NAMESPACE,
        sink::POD
    );
    println!(
        "runs:    {} sequential execs of `true` (WebSocket {}), each on a new TLS connection; \
         {} MB to the sink over plain loopback, then through a port-forward (WebSocket {}, {} KiB messages); \
         client in this process, tokio with 2 workers",
        config.execs,
        round_trip::PROTOCOL,
        config.bytes / MB,
        port_forward::PROTOCOL,
        sink::CHUNK / 1024
    );
}
