//! Simulated nodes for scale tests, as KWOK does: thousands of Nodes in one
//! process, kept Ready with Leases renewed on time, whose pods are moved
//! through their phases (with addresses from the pod CIDRs the node IPAM
//! controller gives the Nodes) without running or configuring anything.

pub mod heartbeats;
pub mod nodes;
pub mod pod_ips;
pub mod pod_status;
pub mod pods;
pub mod stats;
pub mod stats_server;
pub mod usage;
pub mod wheel;

use std::collections::BTreeMap;
use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use k8s_openapi::api::core::v1::Taint;
use kube::{Api, Client};
use skiff_machinery::quantity::Quantity;

use crate::node::config::ResourceList;
use crate::node::lease::{lease_api, DEFAULT_LEASE_DURATION_SECONDS, DEFAULT_RENEW_INTERVAL};
use heartbeats::Heartbeats;
use pods::PodSimulator;
pub use stats::{SimulationStats, StatsSnapshot};
use usage::SimulatedUsage;

/// What to simulate.
#[derive(Debug, Clone)]
pub struct SimulateConfig {
    pub count: usize,
    /// Nodes are named `<prefix>-0` to `<prefix>-<count-1>`.
    pub name_prefix: String,
    /// Each node's capacity (and allocatable: nothing is reserved).
    pub capacity: ResourceList,
    pub labels: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
    pub lease_interval: Duration,
    pub lease_duration_seconds: i32,
    /// How often each node's Ready condition is refreshed (the Lease is the
    /// heartbeat; this is the real kubelet's status report).
    pub status_interval: Duration,
    /// Bound pod → Running.
    pub pod_start_delay: Duration,
    /// API calls in flight, each for registration, heartbeats and pods.
    pub concurrency: usize,
    /// A renewal acknowledged more than this past its due time is late.
    pub late_after: Duration,
    /// Where the nodes' Summary API is served (plain HTTP; port 0: any
    /// free port, so that simulations side by side do not collide).
    pub stats_listen: SocketAddr,
    /// The host the nodes' stats URLs name [default: the listener's
    /// address, or loopback when it listens on every address].
    pub stats_advertise: Option<IpAddr>,
}

impl Default for SimulateConfig {
    fn default() -> Self {
        let q = |s: &str| Quantity::parse(s);
        SimulateConfig {
            count: 1,
            name_prefix: "sim".into(),
            capacity: ResourceList {
                cpu: q("32"),
                memory: q("256Gi"),
                pods: q("110"),
                ephemeral_storage: q("1Ti"),
            },
            labels: BTreeMap::new(),
            taints: Vec::new(),
            lease_interval: DEFAULT_RENEW_INTERVAL,
            lease_duration_seconds: DEFAULT_LEASE_DURATION_SECONDS,
            status_interval: Duration::from_secs(60),
            pod_start_delay: Duration::ZERO,
            concurrency: 32,
            late_after: Duration::from_secs(2),
            stats_listen: SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
            stats_advertise: None,
        }
    }
}

impl SimulateConfig {
    fn check(&self) -> anyhow::Result<()> {
        if self.name_prefix.is_empty() {
            bail!("the simulated nodes need a name prefix");
        }
        if self.lease_interval.is_zero() || self.status_interval.is_zero() {
            bail!("the lease and status intervals must be longer than zero");
        }
        if self.concurrency == 0 {
            bail!("the simulation needs at least one API call in flight (concurrency 0)");
        }
        Ok(())
    }
}

/// A simulation and its counters, readable while it runs.
pub struct Simulator {
    config: SimulateConfig,
    stats: Arc<SimulationStats>,
}

impl Simulator {
    pub fn new(config: SimulateConfig) -> Simulator {
        Simulator {
            config,
            stats: Arc::new(SimulationStats::default()),
        }
    }

    pub fn stats(&self) -> Arc<SimulationStats> {
        Arc::clone(&self.stats)
    }

    /// Registers the nodes, then keeps them alive and runs their pods
    /// until `shutdown`. Fails only when no node could be registered.
    pub async fn run(
        &self,
        client: Client,
        shutdown: impl Future<Output = ()>,
    ) -> anyhow::Result<()> {
        self.config.check()?;
        let config = &self.config;
        tokio::pin!(shutdown);
        let started = Instant::now();
        let names: Vec<String> = (0..config.count)
            .map(|i| format!("{}-{i}", config.name_prefix))
            .collect();
        let memory = config
            .capacity
            .memory
            .and_then(|q| u64::try_from(q.milli / 1000).ok());
        let usage = Arc::new(SimulatedUsage::new(
            names.iter().map(String::as_str),
            memory,
            jiff::Timestamp::now(),
        ));
        let (stats_base, _serving) = serve_stats(config, Arc::clone(&usage)).await?;
        let nodes_api = Api::all(client.clone());
        let leases_api = lease_api(client.clone());
        let registered = tokio::select! {
            r = nodes::register_all(&nodes_api, &leases_api, config, &stats_base, &self.stats) => r,
            () = &mut shutdown => return Ok(()),
        };
        self.stats.registration_done(started.elapsed());
        let ok = registered.leases.iter().filter(|l| l.is_some()).count();
        if ok == 0 && config.count > 0 {
            let why = registered.last_error.unwrap_or_default();
            bail!(
                "none of the {} simulated nodes could be registered: {why}",
                config.count
            );
        }
        tracing::info!(nodes = ok, failed = config.count - ok, took = ?started.elapsed(), "simulated nodes registered");
        let pods = Arc::new(PodSimulator::new(
            client,
            &registered.nodes,
            config.pod_start_delay,
            config.concurrency,
            self.stats(),
            usage,
        ));
        let heartbeats = Heartbeats::new(
            registered.nodes,
            registered.leases,
            leases_api,
            nodes_api,
            config.clone(),
            self.stats(),
        );
        tokio::select! {
            () = heartbeats.run() => {}
            () = pods.run() => {}
            () = &mut shutdown => {}
        }
        Ok(())
    }
}

/// Stops the task it holds when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Binds the stats listener and serves the nodes' Summaries on it until
/// the returned guard is dropped; the base URL the nodes advertise.
async fn serve_stats(
    config: &SimulateConfig,
    usage: Arc<SimulatedUsage>,
) -> anyhow::Result<(String, AbortOnDrop)> {
    let listener = tokio::net::TcpListener::bind(config.stats_listen)
        .await
        .with_context(|| {
            format!(
                "binding the simulated stats listener {}",
                config.stats_listen
            )
        })?;
    let bound = listener.local_addr()?;
    let host = stats_server::advertised_host(bound, config.stats_advertise);
    let base = stats_server::base_url(host, bound.port());
    tracing::info!(listen = %bound, url = %base, "simulated nodes serve their stats");
    let app = stats_server::router(usage);
    let task = tokio::spawn(async move {
        if let Err(err) = axum::serve(listener, app).await {
            tracing::warn!(error = %err, "the simulated stats listener stopped");
        }
    });
    Ok((base, AbortOnDrop(task)))
}

/// Runs `config.count` simulated nodes until `shutdown`.
pub async fn run(
    client: Client,
    config: SimulateConfig,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    Simulator::new(config).run(client, shutdown).await
}

/// A client for the API at `url` (`http://127.0.0.1:6443`), for callers
/// that have no kubeconfig.
pub fn client_for(url: &str) -> anyhow::Result<Client> {
    let uri: hyper::Uri = url
        .parse()
        .with_context(|| format!("{url:?} is not an API server URL"))?;
    Client::try_from(kube::Config::new(uri)).context("building the API client")
}
