//! `skiff-bench proxy`: what the service proxy costs. The rules for N
//! Services with M endpoints in all, written whole (a start) and changed
//! one Service at a time (the steady state), into a network namespace of
//! the benchmark's own, beside the floor of one `nft -f` that writes
//! nothing; then, against a `skiff up` with its pod network and proxy, the
//! time from a Service's create call to the first connection through its
//! ClusterIP, beside a connection to the pod's own address.

mod traffic;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use skiff_kubelet::network::netns;
use skiff_kubelet::proxy::{self, model, Ruleset};

use crate::report::{self, Latencies, Table};

#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  \
    cargo build --release -p skiff -p skiff-bench && sudo target/release/skiff-bench proxy\n  \
    target/debug/skiff-bench proxy --quick")]
pub struct ProxyArgs {
    /// Services programmed [default: 1000; --quick: 100]
    #[arg(long)]
    services: Option<usize>,
    /// Endpoints in all, spread over the Services [default: 10000; --quick: 1000]
    #[arg(long)]
    endpoints: Option<usize>,
    /// One-Service changes timed at that scale [default: 50; --quick: 10]
    #[arg(long)]
    changes: Option<usize>,
    /// Services created and reached through a real `skiff up`
    /// [default: 30; --quick: 5]
    #[arg(long)]
    writes: Option<usize>,
    /// The skiff binary [default: `skiff` beside skiff-bench]
    #[arg(long, env = "SKIFF_BIN")]
    skiff_bin: Option<PathBuf>,
    /// Where the server's data directory goes (removed afterwards)
    #[arg(long, env = "SKIFF_BENCH_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// Small counts: a smoke run of a few seconds
    #[arg(long, env = "SKIFF_BENCH_QUICK")]
    quick: bool,
}

/// Why the proxy cannot be measured here, failing under CI=true (which
/// can), else `None`.
fn unavailable() -> Result<Option<String>> {
    let why = proxy::unavailable_reason().or_else(skiff_kubelet::network::unavailable_reason);
    match why {
        Some(why) if std::env::var("CI").is_ok_and(|v| v == "true") => {
            bail!("the proxy benchmark cannot run here ({why}), and CI=true needs it: run as root with nftables installed")
        }
        other => Ok(other),
    }
}

pub fn run(args: ProxyArgs) -> Result<()> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(run_async(args))
}

async fn run_async(args: ProxyArgs) -> Result<()> {
    if let Some(why) = unavailable()? {
        println!("skiff-bench proxy: skipped: {why}");
        return Ok(());
    }
    let services = args.services.unwrap_or(if args.quick { 100 } else { 1000 });
    let endpoints = args
        .endpoints
        .unwrap_or(if args.quick { 1000 } else { 10_000 });
    let changes = args.changes.unwrap_or(if args.quick { 10 } else { 50 });
    let writes = args.writes.unwrap_or(if args.quick { 5 } else { 30 });
    if services == 0 || endpoints < services || changes == 0 || writes == 0 {
        bail!("--services, --changes and --writes need at least 1, and --endpoints at least one per Service");
    }
    for line in crate::machine::describe() {
        println!("{line}");
    }
    report::section(&format!(
        "programming {services} Services with {endpoints} endpoints (nftables, in a network namespace of this run)"
    ));
    let programmed =
        tokio::task::spawn_blocking(move || program(services, endpoints, changes)).await??;
    programmed.print();

    report::section(
        "a Service written → traffic through its ClusterIP (skiff up, pod network and proxy)",
    );
    let bin = crate::versus::system::skiff_program(args.skiff_bin.as_deref())?;
    let flowing = traffic::measure(&bin, args.data_dir.as_deref(), writes).await?;
    flowing.print();
    Ok(())
}

/// The cells of a latency row: `name`, the runs, then p50, p90 and the
/// slowest in milliseconds.
fn latency_row(name: &str, latencies: &Latencies) -> Vec<String> {
    vec![
        name.to_string(),
        latencies.len().to_string(),
        report::millis(latencies.percentile(50.0)),
        report::millis(latencies.percentile(90.0)),
        report::millis(latencies.max()),
    ]
}

/// What programming gave.
struct Programmed {
    services: usize,
    endpoints: usize,
    build: Duration,
    full: Latencies,
    change: Latencies,
    floor: Latencies,
    script_bytes: usize,
}

impl Programmed {
    fn print(&self) {
        let mut table = Table::new(&["write", "runs", "p50 ms", "p90 ms", "max ms", "÷ floor p50"]);
        let floor = self.floor.percentile(50.0).as_secs_f64();
        for (name, latencies) in [
            ("whole table (a start)", &self.full),
            ("one Service's endpoints changed", &self.change),
            ("floor: the table with no Service", &self.floor),
        ] {
            let p50 = latencies.percentile(50.0).as_secs_f64();
            let mut row = latency_row(name, latencies);
            row.push(report::ratio(p50, floor));
            table.row(row);
        }
        table.print();
        println!(
            "{} Services, {} endpoints; the rules computed from the objects in {} ms; the whole table is a script of {} bytes for nft, in one transaction.",
            self.services,
            self.endpoints,
            report::millis(self.build),
            report::group_digits(self.script_bytes as u64)
        );
        println!("floor: `nft -f -` writing the proxy's table with no Service in it, the process and the netlink transaction every write pays.");
    }
}

/// `services` Services in `default`, each with one port and its share
/// of `endpoints` (10.128.0.0/9 addresses), and their slices.
fn objects(
    services: usize,
    endpoints: usize,
    generation: usize,
) -> (Vec<Service>, Vec<EndpointSlice>) {
    let mut all_services = Vec::with_capacity(services);
    let mut slices = Vec::with_capacity(services);
    let mut next = 0u32;
    for i in 0..services {
        let name = format!("svc-{i}");
        let ip = 0x0a60_0000u32 + 16 + i as u32; // 10.96.0.16 …
        let service: Service = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"clusterIP": std::net::Ipv4Addr::from(ip).to_string(),
                     "ports": [{"name": "http", "port": 80}]}}))
        .expect("a Service");
        let share = endpoints / services + usize::from(i < endpoints % services);
        let addresses: Vec<serde_json::Value> = (0..share)
            .map(|_| {
                next += 1;
                let address = std::net::Ipv4Addr::from(0x0a80_0000u32 + next + generation as u32 * 7);
                serde_json::json!({"addresses": [address.to_string()], "conditions": {"ready": true}})
            })
            .collect();
        let slice: EndpointSlice = serde_json::from_value(serde_json::json!({
            "metadata": {"name": format!("{name}-1"), "namespace": "default",
                         "labels": {model::SERVICE_NAME_LABEL: name}},
            "addressType": "IPv4", "ports": [{"name": "http", "port": 8080}],
            "endpoints": addresses}))
        .expect("an EndpointSlice");
        all_services.push(service);
        slices.push(slice);
    }
    (all_services, slices)
}

fn program(services: usize, endpoints: usize, changes: usize) -> Result<Programmed> {
    let dir = tempfile::tempdir()?;
    let ns = dir.path().join("host");
    netns::create(&ns)?;
    let outcome = netns::run_in(&ns, move || program_here(services, endpoints, changes));
    let _ = netns::remove(&ns);
    outcome?
}

/// The measurement, on a thread in the benchmark's namespace.
fn program_here(services: usize, endpoints: usize, changes: usize) -> Result<Programmed> {
    const TABLE: &str = "skiff-bench-proxy";
    let (all_services, mut slices) = objects(services, endpoints, 0);
    let started = Instant::now();
    let ports = model::service_ports(&all_services, &slices);
    let ruleset = Ruleset::build(&ports, "bench", None);
    let build = started.elapsed();
    let script_bytes = ruleset.full(TABLE).len();
    let mut full = Vec::new();
    for _ in 0..3 {
        let started = Instant::now();
        proxy::apply(TABLE, &ruleset, None).map_err(anyhow::Error::msg)?;
        full.push(started.elapsed());
    }
    let mut change = Vec::new();
    let mut applied = ruleset;
    for step in 0..changes {
        // One Service's endpoints move (a rollout of it).
        let i = step % services;
        if let Some(endpoint) = slices[i].endpoints.first_mut() {
            let moved = std::net::Ipv4Addr::from(0x0b00_0000u32 + step as u32);
            endpoint.addresses = vec![moved.to_string()];
        }
        let started = Instant::now();
        let ports = model::service_ports(&all_services, &slices);
        let next = Ruleset::build(&ports, "bench", None);
        proxy::apply(TABLE, &next, Some(&applied)).map_err(anyhow::Error::msg)?;
        change.push(started.elapsed());
        applied = next;
    }
    let mut floor = Vec::new();
    for _ in 0..changes.max(10) {
        let started = Instant::now();
        proxy::apply("skiff-bench-floor", &Ruleset::default(), None).map_err(anyhow::Error::msg)?;
        floor.push(started.elapsed());
    }
    Ok(Programmed {
        services,
        endpoints,
        build,
        full: Latencies::from_durations(&full),
        change: Latencies::from_durations(&change),
        floor: Latencies::from_durations(&floor),
        script_bytes,
    })
}
