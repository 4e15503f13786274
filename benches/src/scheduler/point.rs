//! One point of a scheduler run, on its own fresh `skiff up`: the nodes,
//! a warm-up pod that proves the scheduler has them all, for preemption
//! the low-priority pods that fill every node, then the measured pods,
//! created as fast as the API takes them while one watch notes each
//! binding.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Result};
use hyper::StatusCode;
use serde_json::Value;

use super::bindings::{BindingWatch, Observed};
use super::create::{create_all, create_one, Created};
use super::objects::{self, PodKind};
use super::throughput::Throughput;
use super::workload::Workload;
use super::{check, diagnose, Point};
use crate::api::http::ApiConnection;
use crate::api::server::{ApiServer, Backend};
use crate::api::watch::own_cpu_time;
use crate::report::{self, Latencies};
use crate::versus::load_average;
use crate::versus::progress::Progress;
use crate::versus::system::Program;

/// How long the warm-up pod may take to be bound.
const WARMUP_TIMEOUT: Duration = Duration::from_secs(120);
/// How long a run waits while no pod changes at all before it gives up.
const STALL_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a run may go without a binding even while pods keep changing
/// (a scheduler retrying the same pods forever).
const BINDING_TIMEOUT: Duration = Duration::from_secs(300);
/// Pause between two looks at the warm-up pod, and between two progress
/// updates while bindings come in.
const POLL: Duration = Duration::from_millis(20);
const PROGRESS_TICK: Duration = Duration::from_millis(200);

/// One batch of pods, created and bound.
pub struct Measured {
    pub throughput: Throughput,
    /// Each pod's create (sent) → binding (seen).
    pub latencies: Latencies,
    pub creates_per_second: f64,
    /// Low-priority pods deleted while the batch was bound.
    pub victims: usize,
    pub reopens: usize,
    pub violations: Vec<String>,
    /// CPU time of `skiff up` while the batch was created and bound.
    pub server_cpu: Duration,
    /// CPU time of this benchmark meanwhile (it shares the cores).
    pub client_cpu: Duration,
}

/// Everything one point measured.
pub struct PointResult {
    pub point: Point,
    pub measured: Measured,
    /// The preemption workload's low-priority pods.
    pub fill: Option<Measured>,
    pub nodes_per_second: f64,
    /// Last node created → the warm-up pod seen bound.
    pub warm_up: Duration,
    /// Processes started → the API ready.
    pub started_in: Duration,
    /// Processes started → processes stopped.
    pub total: Duration,
    pub load_after: String,
    pub notes: Vec<String>,
}

/// What one `skiff up` gave, before its totals.
struct Prepared {
    nodes_per_second: f64,
    warm_up: Duration,
    fill: Option<Measured>,
    measured: Measured,
}

/// Starts `skiff up`, runs `point` on it, stops it.
pub async fn measure(
    point: &Point,
    clients: usize,
    skiff: &Program,
    root: &Path,
    progress: &Progress,
) -> Result<PointResult> {
    let label = format!(
        "{} at {} nodes",
        point.workload.id(),
        report::group_digits(point.nodes as u64)
    );
    progress.set_prefix(format!("[{label}]"));
    progress.step("starting skiff up".into());
    let started = Instant::now();
    let mut server = ApiServer::start(Backend::InProcess, skiff, None, root, true, &[]).await?;
    let outcome = run_point(&server, point, clients, progress).await;
    let outcome = outcome.map_err(|err| {
        let exited = server.exited();
        let log = if exited.is_empty() {
            format!("\n  skiff up's log ends:\n{}", server.log_tail())
        } else {
            exited
        };
        anyhow!("{label}: {err:#}{log}")
    });
    progress.step("stopping".into());
    let started_in = server.started_in;
    let notes = server.stop().await?;
    let Prepared {
        nodes_per_second,
        warm_up,
        fill,
        measured,
    } = outcome?;
    let total = started.elapsed();
    progress.note(&format!(
        "{label}: {} pods/s (avg 1s {}) in {:.1} s",
        report::group_digits(measured.throughput.per_second().round() as u64),
        report::group_digits(measured.throughput.window_average().round() as u64),
        total.as_secs_f64()
    ));
    Ok(PointResult {
        point: *point,
        measured,
        fill,
        nodes_per_second,
        warm_up,
        started_in,
        total,
        load_after: load_average(),
        notes,
    })
}

async fn run_point(
    server: &ApiServer,
    point: &Point,
    clients: usize,
    progress: &Progress,
) -> Result<Prepared> {
    let mut conns = Vec::with_capacity(clients);
    for _ in 0..clients {
        conns.push(ApiConnection::connect(server.api).await?);
    }
    let conn = &mut conns[0];
    create_one(
        conn,
        "/api/v1/namespaces",
        objects::namespace(),
        "the namespace",
        true,
    )
    .await?;
    if point.workload == Workload::Preemption {
        for (name, class) in objects::priority_classes() {
            let path = "/apis/scheduling.k8s.io/v1/priorityclasses";
            create_one(conn, path, class, &format!("PriorityClass {name}"), true).await?;
        }
    }
    progress.step(format!(
        "creating {} nodes",
        report::group_digits(point.nodes as u64)
    ));
    let nodes = create_all(
        &mut conns,
        "/api/v1/nodes",
        point.nodes,
        Arc::new(objects::node),
        progress,
    )
    .await?;
    progress.step("warm-up: a pod only the last node takes".into());
    let warming = Instant::now();
    warm_up(&mut conns[0], &objects::node_name(point.nodes - 1)).await?;
    let warm_up = warming.elapsed();
    let fill = match point.fill {
        0 => None,
        fill => {
            progress.step(format!(
                "filling the nodes: {} low-priority pods",
                report::group_digits(fill as u64)
            ));
            Some(bind_pods(server, &mut conns, PodKind::Filler, fill, point, progress).await?)
        }
    };
    progress.step(format!(
        "measuring: {} pods",
        report::group_digits(point.pods as u64)
    ));
    let kind = PodKind::Measured(point.workload);
    let measured = bind_pods(server, &mut conns, kind, point.pods, point, progress).await?;
    Ok(Prepared {
        nodes_per_second: nodes.per_second(),
        warm_up,
        fill,
        measured,
    })
}

/// Creates the warm-up pod and waits until it is bound.
async fn warm_up(conn: &mut ApiConnection, last_node: &str) -> Result<()> {
    let path = objects::pods_path();
    let pod = objects::warmup_pod(last_node);
    create_one(conn, &path, pod, "the warm-up pod", false).await?;
    let deadline = Instant::now() + WARMUP_TIMEOUT;
    let pod_path = format!("{path}/{}", objects::WARMUP_POD);
    loop {
        let body = conn
            .get(&pod_path)
            .await?
            .expect(StatusCode::OK, "reading the warm-up pod")?;
        let pod: Value = serde_json::from_slice(&body)?;
        match pod["spec"]["nodeName"].as_str() {
            Some(node) if node == last_node => return Ok(()),
            Some(node) if !node.is_empty() => {
                bail!("the warm-up pod, which only {last_node} matches, was bound to {node}")
            }
            _ => {}
        }
        if Instant::now() > deadline {
            let why = diagnose::why_unbound(conn, objects::WARMUP_POD).await;
            bail!(
                "the scheduler did not bind the warm-up pod (nodeAffinity on metadata.name {last_node}) within {WARMUP_TIMEOUT:?}: is it running and leading?{why}"
            );
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Creates `count` pods of `kind` with every connection while a watch
/// notes their bindings; returns once every one is bound.
async fn bind_pods(
    server: &ApiServer,
    conns: &mut Vec<ApiConnection>,
    kind: PodKind,
    count: usize,
    point: &Point,
    progress: &Progress,
) -> Result<Measured> {
    let victims = matches!(kind, PodKind::Measured(Workload::Preemption))
        .then_some(objects::pod_prefix(PodKind::Filler));
    let prefix = objects::pod_prefix(kind);
    let watch = BindingWatch::start(server.api, &mut conns[0], prefix, count, victims).await?;
    let cpu_before = (server.cpu_time(), own_cpu_time());
    let group_size = point.group_size;
    let body = Arc::new(move |i| objects::pod(kind, i, group_size));
    let created = create_all(conns, &objects::pods_path(), count, body, progress).await?;
    progress.step(format!(
        "waiting for {} bindings",
        report::group_digits(count as u64)
    ));
    let stalled = wait_for_bindings(&watch, count, progress).await;
    let observed = watch.finish().await?;
    let cpu = (
        server.cpu_time().saturating_sub(cpu_before.0),
        own_cpu_time().saturating_sub(cpu_before.1),
    );
    if let Some(stalled) = stalled {
        return Err(stall_error(&mut conns[0], kind, &observed, &stalled).await);
    }
    let nodes_of: Vec<Option<usize>> = observed
        .bound
        .iter()
        .map(|b| b.and_then(|b| b.node))
        .collect();
    let violations = match kind {
        PodKind::Measured(workload) => {
            check::violations(workload, point.nodes, group_size, &nodes_of)
        }
        PodKind::Filler => Vec::new(),
    };
    Ok(summarize(&created, &observed, violations, cpu))
}

/// Follows the bindings on the bar until all are in; `Some` if no pod
/// changed at all for `STALL_TIMEOUT` (a preemption run binds nothing
/// for a while, but nominates and evicts meanwhile), or none was bound
/// for `BINDING_TIMEOUT`: then why the run stalled.
async fn wait_for_bindings(
    watch: &BindingWatch,
    count: usize,
    progress: &Progress,
) -> Option<String> {
    progress.set_length(count as u64);
    let (mut reported, mut events) = (0, watch.events());
    let (mut last_change, mut last_bound) = (Instant::now(), Instant::now());
    let mut tick = tokio::time::interval(PROGRESS_TICK);
    loop {
        let bound = watch.bound();
        if bound > reported {
            progress.inc((bound - reported) as u64);
            reported = bound;
            last_bound = Instant::now();
        }
        if watch.events() > events {
            events = watch.events();
            last_change = Instant::now();
        }
        if bound >= count || watch.is_finished() {
            return None;
        }
        if last_change.elapsed() > STALL_TIMEOUT {
            return Some(format!("no pod changed for {STALL_TIMEOUT:?}"));
        }
        if last_bound.elapsed() > BINDING_TIMEOUT {
            return Some(format!(
                "no pod bound for {BINDING_TIMEOUT:?}, though pods kept changing"
            ));
        }
        tick.tick().await;
    }
}

fn summarize(
    created: &Created,
    observed: &Observed,
    violations: Vec<String>,
    (server_cpu, client_cpu): (Duration, Duration),
) -> Measured {
    let first = created.first_sent().unwrap_or_else(Instant::now);
    let mut after_first = Vec::with_capacity(observed.bound.len());
    let mut latencies = Vec::with_capacity(observed.bound.len());
    for (bound, sent) in observed.bound.iter().zip(&created.sent) {
        if let Some(bound) = bound {
            after_first.push(bound.at.saturating_duration_since(first));
            latencies.push(bound.at.saturating_duration_since(*sent));
        }
    }
    Measured {
        throughput: Throughput::from_bindings(&after_first),
        latencies: Latencies::from_durations(&latencies),
        creates_per_second: created.per_second(),
        victims: observed.deleted,
        reopens: observed.reopens,
        violations,
        server_cpu,
        client_cpu,
    }
}

/// Why the run gave up: how far it got, and what the first unbound pod's
/// events and conditions say.
async fn stall_error(
    conn: &mut ApiConnection,
    kind: PodKind,
    observed: &Observed,
    stalled: &str,
) -> anyhow::Error {
    let bound = observed.bound.iter().filter(|b| b.is_some()).count();
    let Some(stuck) = observed.bound.iter().position(Option::is_none) else {
        return anyhow!("the binding watch stopped early");
    };
    let name = objects::pod_name(kind, stuck);
    let why = diagnose::why_unbound(conn, &name).await;
    let placement = diagnose::placement(conn).await;
    anyhow!(
        "the scheduler stalled: {bound} of {} pods bound, {stalled}; {name} is not bound{why}{placement}",
        observed.bound.len()
    )
}
