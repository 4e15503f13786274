//! `skiff kubelet`: the node agent for the API of a kubeconfig (or, with
//! `--simulate N`, N simulated nodes); and the kubelet `skiff up` runs for
//! its own host. `skiff kubelet-shim` is the per-container shim the
//! kubelet starts; it is not for people.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use skiff_kubelet::agent::{self, KubeletConfig};
use skiff_kubelet::network::NetworkConfig;
use skiff_kubelet::node::config::{
    parse_labels, parse_taints, EvictionThresholds, NodeConfig, ResourceList,
};
use skiff_kubelet::pod::backoff::BackoffConfig;
use skiff_kubelet::simulate::{self, SimulateConfig};

/// The subcommand name of the shim, run before any async runtime starts.
pub const SHIM_COMMAND: &str = "kubelet-shim";

/// The node agent's own settings, shared by `skiff kubelet` and `skiff up`.
#[derive(Debug, Clone, Args)]
pub struct NodeArgs {
    /// The Node's name [default: this host's name].
    #[arg(long, env = "SKIFF_NODE_NAME")]
    pub node_name: Option<String>,
    /// The Node's InternalIP: where the API reaches the kubelet, where
    /// other nodes route this node's pods, and the podIP of pods on the
    /// host's network.
    #[arg(long, env = "SKIFF_NODE_IP", default_value = "127.0.0.1")]
    pub node_ip: String,
    /// Address (host:port) of the kubelet's port, which serves container
    /// logs to the API (port 0: any free port).
    #[arg(long, env = "SKIFF_KUBELET_LISTEN", default_value = "127.0.0.1:10250")]
    pub kubelet_listen: SocketAddr,
    /// Labels of the Node beside the well-known ones (k=v,k2=v2).
    #[arg(long, default_value = "")]
    pub node_labels: String,
    /// Taints the Node registers with (key=value:Effect,key:Effect).
    #[arg(long, default_value = "")]
    pub register_with_taints: String,
    /// Capacity instead of the host's (cpu=4,memory=8Gi,pods=110,ephemeral-storage=100Gi).
    #[arg(long, default_value = "")]
    pub capacity: String,
    /// Resources kept for the system (cpu=500m,memory=1Gi).
    #[arg(long, default_value = "")]
    pub system_reserved: String,
    /// Resources kept for Kubernetes daemons (cpu=500m,memory=1Gi).
    #[arg(long, default_value = "")]
    pub kube_reserved: String,
    /// Hard eviction thresholds [default: memory.available<100Mi,nodefs.available<10%,nodefs.inodesFree<5%,pid.available<5%].
    #[arg(long)]
    pub eviction_hard: Option<String>,
    /// The cgroup v2 under which containers get their own cgroups with
    /// cpu.max and memory.max [default: a `skiff-kubelet` child of the
    /// kubelet's own]; without cgroup v2 limits are skipped with a warning.
    #[arg(long)]
    pub cgroup_parent: Option<PathBuf>,
    /// The first crash-loop back-off after a restart (doubles each time).
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub container_restart_backoff: Duration,
    /// The longest crash-loop back-off.
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    pub container_restart_backoff_max: Duration,
    /// Under memory or disk pressure, one pod is evicted per this interval.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub eviction_interval: Duration,
    /// An exec, attach or port-forward connection idle this long is
    /// closed, as the kubelet's flag of the same name.
    #[arg(long, default_value = "4h", value_parser = parse_duration)]
    pub streaming_connection_idle_timeout: Duration,
    /// How often a running pod's volumes (ConfigMaps, Secrets, downward
    /// API, ServiceAccount tokens due for refresh) are written again, as
    /// the kubelet's flag of the same name.
    #[arg(long, default_value = "1m", value_parser = parse_duration)]
    pub sync_frequency: Duration,
    /// How often the node's and its containers' CPU and memory are
    /// sampled for the stats and resource metrics endpoints, as the
    /// kubelet's flag of the same name.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub housekeeping_interval: Duration,
    /// Leave the pods' processes running when the kubelet stops (as the
    /// real kubelet does; the next start adopts them) instead of stopping
    /// them within their grace periods.
    #[arg(long)]
    pub keep_pods_on_exit: bool,
    /// How pods get their network: `cni` gives each pod a network
    /// namespace and an address of its own through the CNI plugins (where
    /// the kubelet runs as root, the kernel has network namespaces and the
    /// plugins or a configuration are installed; elsewhere pods share the
    /// host's, and the kubelet and the Node say why); `host`: every pod
    /// shares the host's network.
    #[arg(long, value_enum, env = "SKIFF_POD_NETWORK", default_value = "cni")]
    pub pod_network: PodNetworkMode,
    /// Where the CNI network configuration is read; without one there the
    /// kubelet writes a bridge network over the Node's pod CIDR
    /// [default: ROOT_DIR/cni/net.d].
    #[arg(long)]
    pub cni_conf_dir: Option<PathBuf>,
    /// Where the CNI plugins are, comma-separated (Debian's
    /// containernetworking-plugins package puts them in /usr/lib/cni).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "/usr/lib/cni,/opt/cni/bin"
    )]
    pub cni_bin_dir: Vec<PathBuf>,
    /// The bridge of the default network.
    #[arg(long, default_value = "skiff0")]
    pub pod_bridge: String,
    #[command(flatten)]
    pub proxy: crate::proxy::ProxyFlags,
    /// The cluster DNS pods resolve through (dnsPolicy ClusterFirst),
    /// comma-separated IPs: the kube-dns Service's, by default the tenth
    /// address of the API's service range.
    #[arg(
        long,
        env = "SKIFF_CLUSTER_DNS",
        value_delimiter = ',',
        default_value = "10.96.0.10"
    )]
    pub cluster_dns: Vec<std::net::IpAddr>,
    /// The cluster's DNS domain, which pods search in (empty: none).
    #[arg(long, env = "SKIFF_CLUSTER_DOMAIN", default_value = "cluster.local")]
    pub cluster_domain: String,
}

/// How pods get their network (`--pod-network`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PodNetworkMode {
    Host,
    Cni,
}

#[derive(Debug, Clone, Args)]
pub struct KubeletArgs {
    /// The kubeconfig of the API to register with.
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: PathBuf,
    /// Where container state, logs and pod volumes go.
    #[arg(
        long,
        env = "SKIFF_KUBELET_ROOT_DIR",
        default_value = "./skiff-kubelet"
    )]
    pub root_dir: PathBuf,
    /// Run this many simulated nodes (no processes) instead of a real one.
    #[arg(long)]
    pub simulate: Option<usize>,
    /// Simulated nodes are named PREFIX-0, PREFIX-1, …
    #[arg(long, default_value = "sim")]
    pub simulate_prefix: String,
    /// Where the simulated nodes' Summary API is served (plain HTTP,
    /// `/nodes/NAME/stats/summary`; port 0: any free port). Each simulated
    /// Node names its URL in the skiff.dev/simulated-stats-url annotation;
    /// with 0.0.0.0 the URL names this process's address towards the API.
    #[arg(long, default_value = "127.0.0.1:0")]
    pub simulated_stats_listen: SocketAddr,
    #[command(flatten)]
    pub node: NodeArgs,
}

/// `skiff kubelet`: until SIGINT or SIGTERM.
pub async fn kubelet(args: KubeletArgs) -> Result<()> {
    let client = crate::control_plane::kubeconfig_client(&args.kubeconfig).await?;
    let mut signals = crate::shutdown::StopSignals::register()?;
    let stop = async move {
        let name = signals.recv().await;
        tracing::info!(signal = name, "stopping the kubelet");
    };
    if let Some(count) = args.simulate {
        let mut config = simulated(&args, count)?;
        if config.stats_listen.ip().is_unspecified() {
            config.stats_advertise = Some(address_towards_api(&args.kubeconfig).await?);
        }
        println!(
            "skiff kubelet: simulating {count} nodes ({}-0 …) for the API of {}",
            config.name_prefix,
            args.kubeconfig.display()
        );
        return simulate::run(client, config, stop).await;
    }
    let roots = crate::control_plane::kubeconfig_roots(&args.kubeconfig).await?;
    let config = with_tls(kubelet_config(&args.node, &args.root_dir)?, roots)?;
    println!(
        "skiff kubelet: node {} for the API of {}; state in {}",
        config.node.name,
        args.kubeconfig.display(),
        args.root_dir.display()
    );
    let proxy_client = match &args.node.proxy.proxy_kubeconfig {
        Some(path) => crate::control_plane::kubeconfig_client(path).await?,
        None => client.clone(),
    };
    let proxy = crate::proxy::NodeProxy::start(proxy_client, &args.node, &config.node.name).await?;
    // What `/metrics` serves is `Kubelet::metrics_registry`, which the
    // process may add its own collectors to.
    let ran = match agent::Kubelet::new(config) {
        Ok(kubelet) => kubelet.run(client, stop).await,
        Err(err) => Err(err),
    };
    if let Some(proxy) = proxy {
        proxy.stop().await;
    }
    ran
}

fn simulated(args: &KubeletArgs, count: usize) -> Result<SimulateConfig> {
    if count == 0 {
        bail!("--simulate takes a number of nodes greater than zero");
    }
    let mut config = SimulateConfig {
        count,
        name_prefix: args.simulate_prefix.clone(),
        labels: parse_labels(&args.node.node_labels)?,
        taints: parse_taints(&args.node.register_with_taints)?,
        stats_listen: args.simulated_stats_listen,
        ..SimulateConfig::default()
    };
    let capacity = ResourceList::parse(&args.node.capacity)?;
    config.capacity = merge(capacity, config.capacity);
    Ok(config)
}

/// This host's address on the way to the API server of `kubeconfig`: the
/// local address a connection to it would have (a UDP socket connected
/// to it sends nothing but has the route's source address).
async fn address_towards_api(kubeconfig: &Path) -> Result<std::net::IpAddr> {
    let read = kube::config::Kubeconfig::read_from(kubeconfig)
        .with_context(|| format!("reading the kubeconfig {}", kubeconfig.display()))?;
    let config = kube::Config::from_custom_kubeconfig(read, &Default::default())
        .await
        .with_context(|| format!("using the kubeconfig {}", kubeconfig.display()))?;
    let url = &config.cluster_url;
    let host = url
        .host()
        .with_context(|| format!("the API server URL {url} has no host"))?
        .trim_matches(|c| c == '[' || c == ']')
        .to_string();
    let port = url
        .port_u16()
        .unwrap_or(if url.scheme_str() == Some("http") {
            80
        } else {
            443
        });
    let api = tokio::net::lookup_host((host.as_str(), port))
        .await
        .with_context(|| format!("resolving the API server {host}"))?
        .next()
        .with_context(|| format!("the API server {host} has no address"))?;
    let unspecified: SocketAddr = match api {
        SocketAddr::V4(_) => (std::net::Ipv4Addr::UNSPECIFIED, 0).into(),
        SocketAddr::V6(_) => (std::net::Ipv6Addr::UNSPECIFIED, 0).into(),
    };
    let socket = std::net::UdpSocket::bind(unspecified).context("a socket to find the route")?;
    socket
        .connect(api)
        .with_context(|| format!("finding the route to the API server {api}"))?;
    Ok(socket.local_addr()?.ip())
}

/// `given`'s quantities, else `defaults`'.
fn merge(given: ResourceList, defaults: ResourceList) -> ResourceList {
    ResourceList {
        cpu: given.cpu.or(defaults.cpu),
        memory: given.memory.or(defaults.memory),
        pods: given.pods.or(defaults.pods),
        ephemeral_storage: given.ephemeral_storage.or(defaults.ephemeral_storage),
    }
}

/// The agent's configuration from the node flags.
pub fn kubelet_config(args: &NodeArgs, root_dir: &Path) -> Result<KubeletConfig> {
    let name = match &args.node_name {
        Some(name) if !name.is_empty() => name.clone(),
        _ => host_name(),
    };
    let mut node = NodeConfig::new(&name, &args.node_ip);
    node.labels = parse_labels(&args.node_labels)?;
    node.taints = parse_taints(&args.register_with_taints)?;
    node.capacity = ResourceList::parse(&args.capacity)?;
    node.system_reserved = ResourceList::parse(&args.system_reserved)?;
    node.kube_reserved = ResourceList::parse(&args.kube_reserved)?;
    if let Some(thresholds) = &args.eviction_hard {
        node.eviction_hard = EvictionThresholds::parse(thresholds)?;
    }
    if args.housekeeping_interval.is_zero() {
        bail!("--housekeeping-interval must be longer than zero");
    }
    if args.container_restart_backoff.is_zero()
        || args.container_restart_backoff > args.container_restart_backoff_max
    {
        bail!("--container-restart-backoff must be above zero and at most --container-restart-backoff-max");
    }
    let root_dir = std::path::absolute(root_dir)
        .with_context(|| format!("resolving {}", root_dir.display()))?;
    let exe = std::env::current_exe().context("finding the skiff binary for the container shim")?;
    Ok(KubeletConfig {
        node,
        root_dir: root_dir.clone(),
        listen: args.kubelet_listen,
        shim: vec![exe.into_os_string(), OsString::from(SHIM_COMMAND)],
        cgroup_parent: args.cgroup_parent.clone(),
        backoff: BackoffConfig {
            initial: args.container_restart_backoff,
            max: args.container_restart_backoff_max,
            ..BackoffConfig::default()
        },
        stop_pods_on_exit: !args.keep_pods_on_exit,
        stop_timeout: Duration::from_secs(35),
        eviction_interval: args.eviction_interval,
        streaming_idle_timeout: args.streaming_connection_idle_timeout,
        sync_frequency: args.sync_frequency,
        housekeeping_interval: args.housekeeping_interval,
        tls: None,
        network: match args.pod_network {
            PodNetworkMode::Host => None,
            PodNetworkMode::Cni => Some(NetworkConfig {
                conf_dir: args
                    .cni_conf_dir
                    .clone()
                    .unwrap_or_else(|| root_dir.join("cni/net.d")),
                bin_dirs: args.cni_bin_dir.clone(),
                netns_dir: skiff_kubelet::network::netns::NETNS_DIR.into(),
                state_dir: root_dir.join("cni"),
                bridge: args.pod_bridge.clone(),
                cluster_dns: args.cluster_dns.clone(),
                cluster_domain: cluster_domain(&args.cluster_domain)?,
            }),
        },
    })
}

/// `--cluster-domain` without its trailing dot, checked to be a DNS
/// domain (or empty: no cluster search paths).
fn cluster_domain(domain: &str) -> Result<String> {
    let domain = domain.trim().trim_end_matches('.');
    let label_ok = |label: &str| {
        !label.is_empty()
            && label.len() <= 63
            && label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-')
            && !label.starts_with('-')
            && !label.ends_with('-')
    };
    if !domain.is_empty() && (domain.len() > 253 || !domain.split('.').all(label_ok)) {
        bail!("--cluster-domain {domain:?} is not a DNS domain such as cluster.local");
    }
    Ok(domain.to_ascii_lowercase())
}

/// TLS for the kubelet's port of `config`: client certificates of the
/// cluster CA (`roots`), or none; the kubelet authorizes each request with
/// the API server (SubjectAccessReview).
fn with_tls(
    mut config: KubeletConfig,
    roots: Vec<rustls::pki_types::CertificateDer<'static>>,
) -> Result<KubeletConfig> {
    let mut names = vec![
        config.node.name.clone(),
        host_name(),
        "localhost".to_string(),
        "127.0.0.1".to_string(),
    ];
    names.push(config.node.address.clone());
    names.sort();
    names.dedup();
    let (tls, cert_pem) = crate::pki::kubelet_tls(&names, roots)?;
    // Where the kubelet keeps it (its --cert-dir): for whoever wants to
    // check the port's certificate.
    let dir = config.root_dir.join("pki");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    crate::files::write_private(&dir.join("kubelet.crt"), cert_pem.as_bytes())?;
    config.tls = Some(tls);
    Ok(config)
}

/// This host's name, as Kubernetes names a node by default.
pub fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_lowercase())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".into())
}

/// A duration flag as the kubelet takes it: Go's syntax (`10s`,
/// `500ms`, `5m`), not negative.
pub fn parse_duration(text: &str) -> Result<Duration> {
    skiff_machinery::duration::parse(text.trim()).map_err(|err| anyhow!(err))
}

/// The kubelet `skiff up` runs beside its API, stopped before the API.
pub struct LocalKubelet {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<Result<()>>,
    /// The service proxy beside it.
    proxy: Option<crate::proxy::NodeProxy>,
}

impl LocalKubelet {
    /// Starts the kubelet for the API, as the node's user
    /// (`system:node:NAME` in `system:nodes`).
    pub async fn start(
        api: &crate::api::LocalApi,
        args: &NodeArgs,
        root_dir: &Path,
    ) -> Result<LocalKubelet> {
        let roots = crate::pki::pem_certs(api.pki.ca_pem())?;
        let config = with_tls(kubelet_config(args, root_dir)?, roots)?;
        let user = format!("system:node:{}", config.node.name);
        let client = api.client(&user, &["system:nodes"]);
        let proxy = crate::proxy::NodeProxy::start(
            api.client("system:kube-proxy", &[]),
            args,
            &config.node.name,
        )
        .await?;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let kubelet = agent::Kubelet::new(config)?;
        let task = tokio::spawn(kubelet.run(client, async move {
            let _ = stopped.await;
        }));
        Ok(LocalKubelet {
            stop: Some(stop),
            task,
            proxy,
        })
    }

    /// Stops the kubelet (and its pods, within their grace periods).
    pub async fn stop(mut self) {
        if let Some(proxy) = self.proxy.take() {
            proxy.stop().await;
        }
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        match tokio::time::timeout(Duration::from_secs(40), &mut self.task).await {
            Ok(Ok(Err(err))) => tracing::warn!(error = %err, "the kubelet stopped with an error"),
            Ok(_) => {}
            Err(_) => self.task.abort(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_as_flags_give_them() {
        assert_eq!(parse_duration("10s").unwrap(), Duration::from_secs(10));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("5m").unwrap(), Duration::from_secs(300));
        assert!(parse_duration("2").is_err(), "Go wants a unit");
        assert!(parse_duration("soon").is_err());
        assert!(parse_duration("3d").is_err());
    }

    /// The node flags of `skiff kubelet ARGS`.
    fn node_args(args: &[&str]) -> Result<NodeArgs, clap::Error> {
        #[derive(clap::Parser)]
        struct Flags {
            #[command(flatten)]
            node: NodeArgs,
        }
        <Flags as clap::Parser>::try_parse_from(
            std::iter::once("kubelet").chain(args.iter().copied()),
        )
        .map(|f| f.node)
    }

    #[test]
    fn the_housekeeping_interval_is_a_go_duration_of_10s_by_default() {
        assert_eq!(
            node_args(&[]).unwrap().housekeeping_interval,
            Duration::from_secs(10)
        );
        let node = node_args(&["--housekeeping-interval=2s"]).unwrap();
        assert_eq!(node.housekeeping_interval, Duration::from_secs(2));
        let config = kubelet_config(&node, Path::new("/tmp/skiff-flags-test")).unwrap();
        assert_eq!(config.housekeeping_interval, Duration::from_secs(2));
        assert!(node_args(&["--housekeeping-interval=2"]).is_err());
        let zero = node_args(&["--housekeeping-interval=0s"]).unwrap();
        let err = kubelet_config(&zero, Path::new("/tmp/skiff-flags-test"))
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("--housekeeping-interval"), "{err}");
    }

    #[test]
    fn simulations_serve_their_stats_on_any_free_port_by_default() {
        #[derive(clap::Parser)]
        struct Flags {
            #[command(flatten)]
            kubelet: KubeletArgs,
        }
        let parse = |extra: &[&str]| {
            let args = ["kubelet", "--kubeconfig=/dev/null", "--simulate=2"];
            <Flags as clap::Parser>::try_parse_from(args.iter().chain(extra)).map(|f| f.kubelet)
        };
        let args = parse(&[]).unwrap();
        let config = simulated(&args, 2).unwrap();
        assert_eq!(
            config.stats_listen,
            "127.0.0.1:0".parse::<SocketAddr>().unwrap()
        );
        let args = parse(&["--simulated-stats-listen=0.0.0.0:9123"]).unwrap();
        assert_eq!(simulated(&args, 2).unwrap().stats_listen.port(), 9123);
    }

    #[tokio::test]
    async fn the_address_towards_the_api_is_the_routes_source() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kubeconfig");
        std::fs::write(
            &path,
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: http://127.0.0.1:6443\n\
             contexts:\n- name: c\n  context:\n    cluster: c\n    user: u\ncurrent-context: c\nusers:\n- name: u\n  user: {}\n",
        )
        .unwrap();
        let address = address_towards_api(&path).await.unwrap();
        assert_eq!(address, "127.0.0.1".parse::<std::net::IpAddr>().unwrap());
    }

    #[test]
    fn pods_get_networks_of_their_own_unless_told_otherwise() {
        if std::env::var_os("SKIFF_POD_NETWORK").is_none() {
            assert_eq!(node_args(&[]).unwrap().pod_network, PodNetworkMode::Cni);
        }
        assert_eq!(
            node_args(&["--pod-network=host"]).unwrap().pod_network,
            PodNetworkMode::Host
        );
        let node = node_args(&["--pod-network", "cni"]).unwrap();
        assert_eq!(node.pod_network, PodNetworkMode::Cni);
        assert_eq!(node.pod_bridge, "skiff0");
        assert_eq!(
            node.cni_bin_dir,
            [PathBuf::from("/usr/lib/cni"), PathBuf::from("/opt/cni/bin")]
        );
    }

    #[test]
    fn pods_resolve_through_the_cluster_dns_of_the_flags() {
        if std::env::var_os("SKIFF_CLUSTER_DNS").is_none()
            && std::env::var_os("SKIFF_CLUSTER_DOMAIN").is_none()
        {
            let node = node_args(&[]).unwrap();
            assert_eq!(
                node.cluster_dns,
                ["10.96.0.10".parse::<std::net::IpAddr>().unwrap()]
            );
            assert_eq!(node.cluster_domain, "cluster.local");
        }
        let node = node_args(&[
            "--cluster-dns=10.0.0.10,fd00::10",
            "--cluster-domain=Corp.Example.",
        ])
        .unwrap();
        assert_eq!(node.cluster_dns.len(), 2);
        let config = kubelet_config(
            &NodeArgs {
                pod_network: PodNetworkMode::Cni,
                ..node
            },
            Path::new("/tmp/skiff-flags-test"),
        )
        .unwrap();
        let network = config.network.unwrap();
        assert_eq!(
            network.cluster_dns[1],
            "fd00::10".parse::<std::net::IpAddr>().unwrap()
        );
        assert_eq!(network.cluster_domain, "corp.example");
        let err = node_args(&["--cluster-dns=ten.zero"])
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("--cluster-dns"), "{err}");
        let err = cluster_domain("bad domain").unwrap_err().to_string();
        assert!(err.contains("--cluster-domain"), "{err}");
        assert_eq!(cluster_domain("").unwrap(), "");
    }
}
