//! The kubelet as one running agent: registers the Node, keeps its Lease
//! and conditions, runs the pods bound to it, serves their logs, and evicts
//! under pressure. `skiff kubelet` and `skiff up` run this.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::{Node, NodeCondition};
use kube::Client;
use skiff_machinery::events::Recorder;
use tokio::sync::watch;

use crate::env::NodeFacts;
use crate::metrics::KubeletMetrics;
use crate::network::{NetworkConfig, PodNetwork};
use crate::node::config::NodeConfig;
use crate::node::host::{HostReader, LinuxHost};
use crate::node::{lease, register, status};
use crate::pod::backoff::BackoffConfig;
use crate::pod::launch::PodLauncher;
use crate::pod::{PodManager, PodManagerConfig};
use crate::runtime::{CgroupConfig, ProcessRuntime, RuntimeConfig};
use crate::server::Observability;
use crate::stats::StatsProvider;

/// The Lease's renewal interval and duration, as the kubelet's defaults.
const LEASE_INTERVAL: Duration = Duration::from_secs(10);
const LEASE_DURATION_SECONDS: i32 = 40;
/// Registration is retried this often while the API is not reachable.
const REGISTER_RETRY: Duration = Duration::from_secs(1);
/// The events' source component, as the kubelet names itself.
const COMPONENT: &str = "kubelet";

pub struct KubeletConfig {
    pub node: NodeConfig,
    /// State, logs (`pods/`) and pod volumes (`volumes/`) live here.
    pub root_dir: PathBuf,
    /// The kubelet's HTTP port; port 0 picks a free one, which the Node
    /// then advertises.
    pub listen: SocketAddr,
    /// The program and arguments that run the container shim.
    pub shim: Vec<OsString>,
    pub cgroup_parent: Option<PathBuf>,
    pub backoff: BackoffConfig,
    /// On a clean stop, stop the pods' processes too (they are started
    /// again at the next start); otherwise leave them running, as the
    /// kubelet does, to be adopted at the next start.
    pub stop_pods_on_exit: bool,
    /// The longest a clean stop waits for pods to stop.
    pub stop_timeout: Duration,
    /// How often, under pressure, another pod is evicted.
    pub eviction_interval: Duration,
    /// An exec, attach or port-forward connection that carries nothing
    /// for this long is closed (`--streaming-connection-idle-timeout`).
    pub streaming_idle_timeout: Duration,
    /// How often running pods' volumes are written again
    /// (`--sync-frequency`).
    pub sync_frequency: Duration,
    /// TLS for the kubelet's port; it decides whose certificates get in.
    /// `None`: plain HTTP.
    pub tls: Option<std::sync::Arc<rustls::ServerConfig>>,
    /// Each pod's own network through CNI; `None`: pods share the host's.
    pub network: Option<NetworkConfig>,
    /// How often the node's and containers' usage is sampled
    /// (`--housekeeping-interval`).
    pub housekeeping_interval: Duration,
}

/// Runs the kubelet until `shutdown` resolves.
pub async fn run(
    client: Client,
    config: KubeletConfig,
    shutdown: impl std::future::Future<Output = ()> + Send,
) -> Result<()> {
    Kubelet::new(config)?.run(client, shutdown).await
}

/// A kubelet about to run, whose metrics registry the process can add
/// its own collectors to first.
pub struct Kubelet {
    config: KubeletConfig,
    metrics: Arc<KubeletMetrics>,
}

impl Kubelet {
    pub fn new(config: KubeletConfig) -> Result<Kubelet> {
        if config.housekeeping_interval.is_zero() {
            anyhow::bail!("the housekeeping interval must be longer than zero");
        }
        let metrics =
            KubeletMetrics::new(&config.node.name).context("registering the kubelet's metrics")?;
        Ok(Kubelet {
            config,
            metrics: Arc::new(metrics),
        })
    }

    /// The registry `/metrics` serves; what is registered in it is served.
    pub fn metrics_registry(&self) -> prometheus::Registry {
        self.metrics.registry()
    }

    /// Runs the kubelet until `shutdown` resolves.
    pub async fn run(
        self,
        client: Client,
        shutdown: impl std::future::Future<Output = ()> + Send,
    ) -> Result<()> {
        run_kubelet(client, self.config, self.metrics, shutdown).await
    }
}

async fn run_kubelet(
    client: Client,
    mut config: KubeletConfig,
    metrics: Arc<KubeletMetrics>,
    shutdown: impl std::future::Future<Output = ()> + Send,
) -> Result<()> {
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("binding the kubelet port {}", config.listen))?;
    config.node.kubelet_port = listener.local_addr()?.port();
    std::fs::create_dir_all(&config.root_dir)
        .with_context(|| format!("creating {}", config.root_dir.display()))?;
    config.node.root_dir = config.root_dir.clone();
    let host = LinuxHost::new(&config.root_dir);
    let info = host.info().context("reading the host's capacity")?;
    let mut shutdown = std::pin::pin!(shutdown);
    let node = tokio::select! {
        node = register_until_done(&client, &config.node, &info) => node,
        _ = &mut shutdown => return Ok(()),
    };
    let uid = node.metadata.uid.clone().unwrap_or_default();
    tracing::info!(node = %config.node.name, port = config.node.kubelet_port, "kubelet registered its node");
    // One recorder for the whole kubelet, its events from `kubelet` on
    // this node.
    let recorder = Recorder::new(client.clone(), COMPONENT, Some(&config.node.name));
    recorder.record(crate::node::events::starting(&config.node.name));
    let network = match config.network.clone() {
        None => None,
        Some(wanted) => {
            let network = pod_network(wanted);
            let condition = network_condition(network.as_ref().err(), jiff::Timestamp::now());
            let nodes: kube::Api<Node> = kube::Api::all(client.clone());
            if let Err(err) =
                status::patch_conditions(&nodes, &config.node.name, &[condition]).await
            {
                tracing::warn!(node = %config.node.name, error = %err, "posting the node's NetworkUnavailable condition");
            }
            network.ok()
        }
    };

    let (stop_tx, stop_rx) = watch::channel(false);
    let stopped = move || {
        let mut rx = stop_rx.clone();
        async move {
            let _ = rx.wait_for(|s| *s).await;
        }
    };
    let mut tasks = Vec::new();
    {
        let (client, name, uid) = (client.clone(), config.node.name.clone(), uid.clone());
        let stopped = stopped();
        tasks.push(tokio::spawn(async move {
            lease::run_lease(
                client,
                &name,
                &uid,
                LEASE_INTERVAL,
                LEASE_DURATION_SECONDS,
                stopped,
            )
            .await
        }));
    }
    if let Some(network) = network.as_ref() {
        tasks.push(tokio::spawn(crate::network::hostgw::run_host_gateway(
            client.clone(),
            config.node.name.clone(),
            network.config().bridge.clone(),
        )));
    }
    let (pressure_tx, pressure_rx) = status::pressure_channel();
    tasks.push(tokio::spawn(status::run_status(
        client.clone(),
        config.node.clone(),
        host,
        pressure_tx,
        status::StatusIntervals::default(),
        recorder.clone(),
        stopped(),
    )));

    let runtime = Arc::new(ProcessRuntime::new(RuntimeConfig {
        root: config.root_dir.clone(),
        shim: config.shim.clone(),
        cgroup: CgroupConfig {
            parent: config.cgroup_parent.clone(),
            ..CgroupConfig::default()
        },
    }));
    let recovered = runtime
        .recover()
        .context("reading the containers of a previous run")?;
    if !recovered.is_empty() {
        tracing::info!(
            containers = recovered.len(),
            "kubelet found the containers of its previous run"
        );
    }
    // One Service lister for the node, for containers' Service variables.
    let (services, services_task) = crate::envvars::ServiceLister::start(client.clone());
    tasks.push(services_task);
    let manager = Arc::new(PodManager::new(
        client.clone(),
        PodManagerConfig {
            node_name: config.node.name.clone(),
            launcher: launcher(&client, &config, &node, services),
            backoff: config.backoff,
            config_retry: Duration::from_secs(5),
            network,
            volume_resync: config.sync_frequency,
            recorder,
            metrics: metrics.clone(),
        },
        runtime.clone(),
        recovered,
    ));
    tasks.push(tokio::spawn(manager.clone().run()));
    tasks.push(tokio::spawn(crate::eviction_manager::run(
        manager.clone(),
        pressure_rx,
        config.node.eviction_hard,
        config.eviction_interval,
    )));
    let stats = Arc::new(StatsProvider::new(&config.node.name));
    tasks.push(tokio::spawn(stats.clone().run(
        manager.clone(),
        metrics.clone(),
        config.housekeeping_interval,
    )));
    let server = crate::server::router(
        manager.clone(),
        runtime.clone(),
        config.streaming_idle_timeout,
        Observability {
            stats,
            metrics,
            pods: Some(manager.clone()),
        },
        crate::server::access::Access {
            node: config.node.name.clone(),
            delegated: Some(Arc::new(
                skiff_machinery::serving::delegated::Delegated::new(client.clone()),
            )),
        },
    );
    let serving = tokio::spawn(crate::server::serve(
        listener,
        server,
        config.tls.clone(),
        stopped(),
    ));

    shutdown.await;
    if config.stop_pods_on_exit {
        manager.stop_all(config.stop_timeout).await;
    }
    let _ = stop_tx.send(true);
    for task in tasks {
        task.abort();
    }
    let _ = serving.await;
    Ok(())
}

/// The pods' network, where the host can give pods their own: else the
/// kubelet says once why they share the host's.
fn pod_network(config: NetworkConfig) -> Result<Arc<PodNetwork>, String> {
    match crate::network::unavailable_reason().or_else(|| crate::network::missing_plugins(&config))
    {
        None => {
            tracing::info!(conf_dir = %config.conf_dir.display(), "pods get their own network through CNI");
            Ok(Arc::new(PodNetwork::new(config)))
        }
        Some(why) => {
            tracing::warn!(reason = %why, "pods share the host's network: they cannot have their own here");
            Err(why)
        }
    }
}

/// The Node's `NetworkUnavailable` condition, which the network plugin
/// owns: False either way (pods have a network), its reason saying whether
/// they have their own or share the host's (`fallback`, and why).
pub fn network_condition(fallback: Option<&String>, now: jiff::Timestamp) -> NodeCondition {
    let time = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now));
    let (reason, message) = match fallback {
        None => (
            "PodNetworkReady",
            "pods get networks of their own through CNI".to_string(),
        ),
        Some(why) => (
            "PodsShareHostNetwork",
            format!("pods share the host's network: {why}"),
        ),
    };
    NodeCondition {
        type_: "NetworkUnavailable".into(),
        status: "False".into(),
        reason: Some(reason.into()),
        message: Some(message),
        last_heartbeat_time: time.clone(),
        last_transition_time: time,
    }
}

/// Registers the Node, retrying while the API cannot be reached.
async fn register_until_done(
    client: &Client,
    config: &NodeConfig,
    info: &crate::node::host::HostInfo,
) -> Node {
    loop {
        match register::register(client.clone(), config, info).await {
            Ok(node) => return node,
            Err(err) => {
                tracing::warn!(node = %config.name, error = %err, "registering the node; retrying");
                tokio::time::sleep(REGISTER_RETRY).await;
            }
        }
    }
}

fn launcher(
    client: &Client,
    config: &KubeletConfig,
    node: &Node,
    services: crate::envvars::ServiceLister,
) -> PodLauncher {
    let address = config.node.address.clone();
    PodLauncher {
        client: client.clone(),
        pods_dir: config.root_dir.join("volumes"),
        node: NodeFacts {
            node_name: config.node.name.clone(),
            host_ip: address.clone(),
            host_ips: vec![address.clone()],
            pod_ip: address.clone(),
            pod_ips: vec![address],
        },
        allocatable: node
            .status
            .as_ref()
            .and_then(|s| s.allocatable.clone())
            .unwrap_or_default(),
        tokens: Arc::new(crate::token::TokenManager::new(client.clone())),
        services: Some(services),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_network_condition_says_whether_pods_have_their_own() {
        let now = jiff::Timestamp::from_second(1_700_000_000).unwrap();
        let own = network_condition(None, now);
        assert_eq!(
            (
                own.type_.as_str(),
                own.status.as_str(),
                own.reason.as_deref()
            ),
            ("NetworkUnavailable", "False", Some("PodNetworkReady"))
        );
        let why = "the kubelet is not running as root".to_string();
        let shared = network_condition(Some(&why), now);
        assert_eq!(shared.status, "False", "pods still have the host's network");
        assert_eq!(shared.reason.as_deref(), Some("PodsShareHostNetwork"));
        assert_eq!(
            shared.message.as_deref(),
            Some("pods share the host's network: the kubelet is not running as root")
        );
    }
}
