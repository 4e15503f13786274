//! One node count of `kubelet simulated`: a fresh `skiff up`, the
//! simulator in this process registering N nodes, then their heartbeats
//! for a number of lease intervals; the simulator's counters and both
//! sides' CPU.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Result};
use skiff_kubelet::simulate::{self, SimulateConfig, SimulationStats, Simulator, StatsSnapshot};

use super::server::{Components, SkiffUp};
use crate::api::watch::own_cpu_time;
use crate::versus::progress::Progress;
use crate::versus::system::Program;

/// Pause between two looks at the simulator's counters.
const POLL: Duration = Duration::from_millis(200);

/// What one node count gave.
pub struct NodesResult {
    pub nodes: usize,
    pub snapshot: StatsSnapshot,
    /// Heartbeats measured for this long after registration.
    pub measured: Duration,
    /// CPU time over the measured window.
    pub skiff_cpu: Duration,
    pub simulator_cpu: Duration,
    pub notes: Vec<String>,
}

impl NodesResult {
    /// Every node registered and not one renewal late or failed.
    pub fn kept_up(&self) -> bool {
        let s = &self.snapshot;
        s.nodes_registered == self.nodes as u64
            && s.renewals_late == 0
            && s.renewal_errors == 0
            && s.renewals > 0
    }
}

/// Starts `skiff up` in `dir`, simulates `nodes` nodes for `intervals`
/// lease intervals after they are registered, stops everything.
pub async fn measure(
    nodes: usize,
    intervals: u32,
    lease_interval: Duration,
    skiff: &Program,
    dir: &Path,
    progress: &Progress,
) -> Result<NodesResult> {
    progress.set_prefix(format!("[{nodes} nodes]"));
    progress.step("starting skiff up".into());
    let server = SkiffUp::start(skiff, dir, &Components::ApiOnly).await?;
    let outcome = simulate_against(&server, nodes, intervals, lease_interval, progress).await;
    progress.step("stopping".into());
    let log = server.log_tail();
    let note = server.stop().await?;
    let mut result =
        outcome.map_err(|err| anyhow!("{nodes} nodes: {err:#}\n  skiff up's log ends:\n{log}"))?;
    result.notes.extend(note);
    Ok(result)
}

async fn simulate_against(
    server: &SkiffUp,
    nodes: usize,
    intervals: u32,
    lease_interval: Duration,
    progress: &Progress,
) -> Result<NodesResult> {
    let config = SimulateConfig {
        count: nodes,
        name_prefix: "sim".into(),
        lease_interval,
        ..SimulateConfig::default()
    };
    let simulator = Arc::new(Simulator::new(config));
    let stats = simulator.stats();
    let client = simulate::client_for(&server.url())?;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = Arc::clone(&simulator);
    let task = tokio::spawn(async move {
        running
            .run(client, async move {
                let _ = stopped.await;
            })
            .await
    });
    let outcome = watch_run(
        server,
        &stats,
        nodes,
        intervals,
        lease_interval,
        progress,
        &task,
    )
    .await;
    let _ = stop.send(());
    match task.await {
        Ok(Ok(())) => {}
        Ok(Err(err)) => return Err(err),
        Err(err) => bail!("the simulator task failed: {err}"),
    }
    outcome
}

async fn watch_run(
    server: &SkiffUp,
    stats: &SimulationStats,
    nodes: usize,
    intervals: u32,
    lease_interval: Duration,
    progress: &Progress,
    task: &tokio::task::JoinHandle<Result<()>>,
) -> Result<NodesResult> {
    progress.step(format!("registering {nodes} nodes"));
    progress.set_length(nodes as u64);
    let registration_limit = Duration::from_secs(120) + Duration::from_millis(50) * nodes as u32;
    let started = Instant::now();
    let mut shown = 0;
    loop {
        let snap = stats.snapshot();
        let done = snap.nodes_registered + snap.registration_errors;
        progress.inc(done.saturating_sub(shown));
        shown = done;
        if snap.registration_time.is_some() {
            break;
        }
        if task.is_finished() {
            bail!("the simulator stopped while registering");
        }
        if started.elapsed() > registration_limit {
            bail!("registering {nodes} nodes took over {registration_limit:?}");
        }
        tokio::time::sleep(POLL).await;
    }
    let skiff_before = server.cpu_time();
    let own_before = own_cpu_time();
    let window = lease_interval * intervals;
    progress.step(format!("heartbeats for {} s", window.as_secs()));
    let measuring = Instant::now();
    while measuring.elapsed() < window {
        if task.is_finished() {
            bail!("the simulator stopped while its nodes were heartbeating");
        }
        tokio::time::sleep(POLL).await;
    }
    let notes = Vec::new();
    Ok(NodesResult {
        nodes,
        snapshot: stats.snapshot(),
        measured: measuring.elapsed(),
        skiff_cpu: server.cpu_time().saturating_sub(skiff_before),
        simulator_cpu: own_cpu_time().saturating_sub(own_before),
        notes,
    })
}
