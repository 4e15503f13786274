//! The clients of the API that `skiff up` and `skiff server` run beside it
//! — the scheduler and the controller-manager — each leader-elected
//! through its Lease, so that in a replicated cluster one member's copy
//! works at a time. `skiff scheduler` and `skiff controller-manager` run
//! them alone against any apiserver.

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result};
use clap::Args;
use skiff_controllers::manager::{self, controller_manager_lease, Controller, Settings};
use skiff_controllers::metrics::ManagerMetrics;
use skiff_machinery::serving::{read_certificates, SecureServer, SecureServingOptions};
use skiff_scheduler::config::SchedulerConfig;
use skiff_scheduler::metrics::Metrics;
use skiff_scheduler::run::{run, scheduler_lease, RunOptions};

/// The scheduler's user, as kube-scheduler's.
pub const SCHEDULER_USER: &str = "system:kube-scheduler";
/// The controller-manager's user, as kube-controller-manager's.
pub const CONTROLLER_MANAGER_USER: &str = "system:kube-controller-manager";

/// A client from a kubeconfig file.
pub async fn kubeconfig_client(path: &Path) -> Result<kube::Client> {
    kube::Client::try_from(kubeconfig(path).await?).context("building the API client")
}

async fn kubeconfig(path: &Path) -> Result<kube::Config> {
    let kubeconfig = kube::config::Kubeconfig::read_from(path)
        .with_context(|| format!("reading the kubeconfig {}", path.display()))?;
    kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .with_context(|| format!("using the kubeconfig {}", path.display()))
}

/// The CA certificates a kubeconfig trusts (its cluster's
/// certificate-authority).
pub async fn kubeconfig_roots(
    path: &Path,
) -> Result<Vec<rustls::pki_types::CertificateDer<'static>>> {
    let roots = kubeconfig(path).await?.root_cert.unwrap_or_default();
    anyhow::ensure!(
        !roots.is_empty(),
        "the kubeconfig {} names no certificate authority, which the kubelet's port needs to check the API server's certificate",
        path.display()
    );
    Ok(roots.into_iter().map(Into::into).collect())
}

/// The scheduler's configuration: the file given, or the defaults.
pub fn scheduler_config(path: Option<&Path>) -> Result<SchedulerConfig> {
    let text = match path {
        Some(path) => std::fs::read_to_string(path)
            .with_context(|| format!("reading the scheduler configuration {}", path.display()))?,
        None => String::new(),
    };
    SchedulerConfig::parse(&text).map_err(|e| match path {
        Some(path) => anyhow::anyhow!("{}: {e}", path.display()),
        None => anyhow::anyhow!(e),
    })
}

/// A name for this process in leader-election leases.
pub fn identity(name: &str) -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "localhost".into());
    format!("{host}_{name}_{}", std::process::id())
}

/// Where `skiff up` and `skiff server` serve the secure ports of the
/// scheduler and the controller-manager they run.
#[derive(Debug, Clone, Args)]
pub struct SecurePortFlags {
    /// The scheduler's secure port (HTTPS: /metrics, /healthz, /livez,
    /// /readyz), as IP:port; port 0 takes a free one, `off` serves none.
    #[arg(long, default_value = "127.0.0.1:0")]
    pub scheduler_secure_listen: SecureListen,
    /// The same for the controller-manager.
    #[arg(long, default_value = "127.0.0.1:0")]
    pub controller_manager_secure_listen: SecureListen,
}

/// An address to serve a secure port on, or none (`off`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SecureListen(pub Option<SocketAddr>);

impl std::str::FromStr for SecureListen {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        match text.trim() {
            "off" | "" => Ok(SecureListen(None)),
            addr => addr.parse().map(|a| SecureListen(Some(a))).map_err(|_| {
                format!("{addr:?} is not an IP:port (e.g. 127.0.0.1:10259), nor `off`")
            }),
        }
    }
}

/// The control-plane clients running beside an API, stopped on drop.
pub struct ControlPlane {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
    scheduler_port: Option<SecureServer>,
    controller_manager_port: Option<SecureServer>,
}

impl ControlPlane {
    /// Starts the scheduler (if configured) and the controllers against
    /// the API, each leader-elected through its own Lease and with its own
    /// identity (`system:kube-scheduler`, `system:kube-controller-manager`);
    /// `None` when there is nothing to run. Each serves its secure port
    /// where `ports` says, trusting the cluster CA's client certificates.
    pub async fn start(
        api: &crate::api::LocalApi,
        name: &str,
        scheduler: Option<SchedulerConfig>,
        controllers: Vec<Controller>,
        mut settings: Settings,
        ports: &SecurePortFlags,
    ) -> Result<Option<ControlPlane>> {
        if scheduler.is_none() && controllers.is_empty() {
            return Ok(None);
        }
        if settings.root_ca.is_none() {
            settings.root_ca = Some(api.pki.ca_pem().to_string());
        }
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let until_stopped = move || {
            let mut stopped = stopped.clone();
            async move {
                let _ = stopped.wait_for(|s| *s).await;
            }
        };
        let client_ca = crate::pki::pem_certs(api.pki.ca_pem())
            .context("reading the cluster CA for the secure ports")?;
        let secure = |bind: SocketAddr| SecureServingOptions {
            bind,
            cert_file: None,
            key_file: None,
            client_ca: client_ca.clone(),
        };
        let mut parts = Vec::new();
        let mut scheduler_port = None;
        if let Some(config) = scheduler {
            let client = api.client(SCHEDULER_USER, &[]);
            let metrics = Arc::new(Metrics::default());
            if let Some(bind) = ports.scheduler_secure_listen.0 {
                scheduler_port = Some(
                    serve_secure_port("scheduler", secure(bind), &client, metrics.registry())
                        .await?,
                );
            }
            let options = RunOptions {
                config,
                lease: Some(scheduler_lease(&identity(name))),
                metrics,
            };
            parts.push(tokio::spawn(run(client, options, until_stopped())));
        }
        let mut controller_manager_port = None;
        if !controllers.is_empty() {
            let client = api.client(CONTROLLER_MANAGER_USER, &[]);
            let metrics = ManagerMetrics::new();
            if let Some(bind) = ports.controller_manager_secure_listen.0 {
                controller_manager_port = Some(
                    serve_secure_port(
                        "controller-manager",
                        secure(bind),
                        &client,
                        metrics.registry(),
                    )
                    .await?,
                );
            }
            parts.push(tokio::spawn(manager::run(
                client,
                controllers,
                settings,
                Some(controller_manager_lease(&identity(name))),
                metrics,
                until_stopped(),
            )));
        }
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let _ = stop_rx.await;
            let _ = stop.send(true);
            for part in parts {
                let _ = part.await;
            }
        });
        Ok(Some(ControlPlane {
            stop: Some(stop_tx),
            task,
            scheduler_port,
            controller_manager_port,
        }))
    }

    /// Where the secure ports listen, as a line for the ready message;
    /// `None` when neither is served.
    pub fn secure_ports(&self) -> Option<String> {
        let ports: Vec<String> = [
            ("scheduler", &self.scheduler_port),
            ("controller-manager", &self.controller_manager_port),
        ]
        .into_iter()
        .filter_map(|(name, port)| {
            port.as_ref()
                .map(|p| format!("{name} https://{}/metrics", p.local_addr()))
        })
        .collect();
        (!ports.is_empty()).then(|| format!("secure ports: {}", ports.join(", ")))
    }

    pub async fn stop(mut self) {
        for port in [
            self.scheduler_port.take(),
            self.controller_manager_port.take(),
        ]
        .into_iter()
        .flatten()
        {
            port.stop().await;
        }
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let task = &mut self.task;
        if tokio::time::timeout(std::time::Duration::from_secs(2), task)
            .await
            .is_err()
        {
            self.task.abort();
        }
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Serves a component's secure port, its reviews asked through `client`.
async fn serve_secure_port(
    component: &str,
    options: SecureServingOptions,
    client: &kube::Client,
    registry: &skiff_machinery::metrics::Registry,
) -> Result<SecureServer> {
    let bind = options.bind;
    let server = SecureServer::start(options, client.clone(), registry.clone())
        .await
        .with_context(|| format!("serving the {component}'s secure port on {bind}"))?;
    tracing::info!(component, addr = %server.local_addr(), "serving the secure port");
    Ok(server)
}

/// kube-scheduler's and kube-controller-manager's secure serving flags.
#[derive(Debug, Clone, Args)]
pub struct SecureServingFlags {
    /// The address the secure port listens on.
    #[arg(long, default_value = "0.0.0.0")]
    pub bind_address: IpAddr,
    /// A PEM certificate (chain) to serve with; without it (and
    /// --tls-private-key-file), a self-signed one for the bind address
    /// and localhost.
    #[arg(long)]
    pub tls_cert_file: Option<PathBuf>,
    /// The key of --tls-cert-file (PEM).
    #[arg(long)]
    pub tls_private_key_file: Option<PathBuf>,
    /// The CAs (PEM) whose client certificates name users (CN) and groups
    /// (O) [default: the kubeconfig's certificate authority].
    #[arg(long)]
    pub client_ca_file: Option<PathBuf>,
}

impl SecureServingFlags {
    /// How to serve `port` (`None` for 0: not served).
    async fn options(
        &self,
        port: u16,
        kubeconfig_path: &Path,
    ) -> Result<Option<SecureServingOptions>> {
        if port == 0 {
            return Ok(None);
        }
        let client_ca = match &self.client_ca_file {
            Some(path) => read_certificates(path).context("--client-ca-file")?,
            None => kubeconfig(kubeconfig_path)
                .await?
                .root_cert
                .unwrap_or_default()
                .into_iter()
                .map(Into::into)
                .collect(),
        };
        Ok(Some(SecureServingOptions {
            bind: SocketAddr::new(self.bind_address, port),
            cert_file: self.tls_cert_file.clone(),
            key_file: self.tls_private_key_file.clone(),
            client_ca,
        }))
    }
}

#[derive(Debug, Clone, Args)]
pub struct SchedulerArgs {
    /// The kubeconfig of the API to schedule for.
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: PathBuf,
    /// A KubeSchedulerConfiguration (kubescheduler.config.k8s.io/v1) file.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Take the kube-system/kube-scheduler Lease before scheduling.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub leader_elect: bool,
    /// The HTTPS port of /metrics, /healthz, /livez and /readyz, with
    /// delegated authentication and authorization; 0 serves none.
    #[arg(long, default_value_t = 10259)]
    pub secure_port: u16,
    #[command(flatten)]
    pub serving: SecureServingFlags,
}

/// `skiff scheduler`: the scheduler alone, until SIGINT or SIGTERM.
pub async fn scheduler(args: SchedulerArgs) -> Result<()> {
    let config = scheduler_config(args.config.as_deref())?;
    let client = kubeconfig_client(&args.kubeconfig).await?;
    let metrics = Arc::new(Metrics::default());
    let port = match args
        .serving
        .options(args.secure_port, &args.kubeconfig)
        .await?
    {
        Some(options) => {
            Some(serve_secure_port("scheduler", options, &client, metrics.registry()).await?)
        }
        None => None,
    };
    let mut signals = crate::shutdown::StopSignals::register()?;
    let options = RunOptions {
        config,
        lease: args
            .leader_elect
            .then(|| scheduler_lease(&identity("scheduler"))),
        metrics,
    };
    println!(
        "skiff scheduler: scheduling for the API of {}{}",
        args.kubeconfig.display(),
        secure_port_note(port.as_ref())
    );
    run(client, options, async move {
        let name = signals.recv().await;
        tracing::info!(signal = name, "stopping the scheduler");
    })
    .await;
    if let Some(port) = port {
        port.stop().await;
    }
    Ok(())
}

/// Which controllers run and how: kube-controller-manager's flags, shared
/// by `skiff up`, `skiff server` and `skiff controller-manager`.
#[derive(Debug, Clone, Args)]
pub struct ControllerFlags {
    /// Controllers to run: `*` for all, `name` to add one, `-name` to
    /// leave one out.
    #[arg(long, value_delimiter = ',', default_value = "*")]
    pub controllers: Vec<String>,
    /// How often Node heartbeats are checked (e.g. 5s).
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub node_monitor_period: std::time::Duration,
    /// How long a Node may miss heartbeats before it is marked
    /// unreachable, tainted, and its pods evicted (e.g. 50s).
    #[arg(long, default_value = "50s", value_parser = parse_duration)]
    pub node_monitor_grace_period: std::time::Duration,
    /// The same for a Node that has never posted a status (e.g. 1m).
    #[arg(long, default_value = "1m", value_parser = parse_duration)]
    pub node_startup_grace_period: std::time::Duration,
    /// Nodes per second whose pods are evicted when nodes fail.
    #[arg(long, default_value_t = 0.1)]
    pub node_eviction_rate: f64,
    /// Terminated pods kept before the oldest are deleted; 0 keeps all.
    #[arg(long, default_value_t = 12_500)]
    pub terminated_pod_gc_threshold: usize,
    /// Where the hostPath provisioner (StorageClass provisioner
    /// skiff.dev/host-path) makes volume directories [default:
    /// /tmp/skiff-hostpath-provisioner; `skiff up`: DATA_DIR/volumes].
    #[arg(long)]
    pub host_path_provisioner_dir: Option<PathBuf>,
    /// Give Nodes pod CIDRs from --cluster-cidr (the node IPAM
    /// controller; kube-controller-manager's default is false).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub allocate_node_cidrs: bool,
    /// Where Nodes' pod CIDRs come from: a CIDR, or an IPv4 and an IPv6
    /// one, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = skiff_controllers::nodeipam::DEFAULT_CLUSTER_CIDR)]
    pub cluster_cidr: Vec<ipnet::IpNet>,
    /// The prefix length of each Node's pod range in a single-stack
    /// cluster [default: 24 for IPv4, 64 for IPv6].
    #[arg(long)]
    pub node_cidr_mask_size: Option<u8>,
    /// The prefix length of each Node's IPv4 pod range.
    #[arg(long, default_value_t = 24)]
    pub node_cidr_mask_size_ipv4: u8,
    /// The prefix length of each Node's IPv6 pod range.
    #[arg(long, default_value_t = 64)]
    pub node_cidr_mask_size_ipv6: u8,
    /// The cluster CA (a PEM bundle) the root CA publisher puts in every
    /// namespace's kube-root-ca.crt ConfigMap [default: `skiff up` and
    /// `skiff server`: their cluster CA; `skiff controller-manager`: the
    /// kubeconfig's certificate authority].
    #[arg(long)]
    pub root_ca_file: Option<PathBuf>,
}

impl ControllerFlags {
    /// The controllers chosen, none when `enabled` is false. The node
    /// IPAM flags are checked here when that controller is among them.
    pub fn chosen(&self, enabled: bool) -> Result<Vec<Controller>> {
        if !enabled {
            return Ok(Vec::new());
        }
        let chosen = manager::select(&self.controllers).map_err(|e| anyhow::anyhow!(e))?;
        if self.allocate_node_cidrs && chosen.iter().any(|c| c.name == "nodeipam") {
            let settings = self.settings();
            skiff_controllers::nodeipam::Allocator::new(
                &settings.cluster_cidrs,
                settings.node_cidr_mask_size_ipv4,
                settings.node_cidr_mask_size_ipv6,
            )
            .map_err(|e| anyhow::anyhow!(e))?;
        }
        if let Some(path) = &self.root_ca_file {
            read_root_ca(path)?;
        }
        Ok(chosen)
    }

    pub fn settings(&self) -> Settings {
        Settings {
            node_monitor_period: self.node_monitor_period,
            node_monitor_grace_period: self.node_monitor_grace_period,
            node_startup_grace_period: self.node_startup_grace_period,
            node_eviction_rate: self.node_eviction_rate,
            terminated_pod_gc_threshold: self.terminated_pod_gc_threshold,
            host_path_provisioner_dir: self
                .host_path_provisioner_dir
                .clone()
                .unwrap_or_else(|| manager::DEFAULT_HOST_PATH_PROVISIONER_DIR.into()),
            allocate_node_cidrs: self.allocate_node_cidrs,
            cluster_cidrs: self.cluster_cidr.clone(),
            // --node-cidr-mask-size is for a single-stack cluster, of
            // whichever family it is.
            node_cidr_mask_size_ipv4: match self.cluster_cidr.as_slice() {
                [ipnet::IpNet::V4(_)] => self
                    .node_cidr_mask_size
                    .unwrap_or(self.node_cidr_mask_size_ipv4),
                _ => self.node_cidr_mask_size_ipv4,
            },
            node_cidr_mask_size_ipv6: match self.cluster_cidr.as_slice() {
                [ipnet::IpNet::V6(_)] => self
                    .node_cidr_mask_size
                    .unwrap_or(self.node_cidr_mask_size_ipv6),
                _ => self.node_cidr_mask_size_ipv6,
            },
            // Checked by `chosen`; a file that went since is reported by
            // the publisher, which then has no CA.
            root_ca: self
                .root_ca_file
                .as_deref()
                .and_then(|path| read_root_ca(path).ok()),
        }
    }
}

/// The PEM bundle of `--root-ca-file`, which must hold certificates.
pub fn read_root_ca(path: &Path) -> Result<String> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading --root-ca-file {}", path.display()))?;
    let certificates = crate::pki::pem_certs(&text)
        .with_context(|| format!("--root-ca-file {}", path.display()))?;
    anyhow::ensure!(
        !certificates.is_empty(),
        "--root-ca-file {} holds no PEM certificate (-----BEGIN CERTIFICATE-----)",
        path.display()
    );
    Ok(text)
}

/// The certificate authority a kubeconfig trusts, as PEM: what the root
/// CA publisher publishes when no --root-ca-file is given, as
/// kube-controller-manager uses its own client's CA.
pub async fn kubeconfig_ca_pem(path: &Path) -> Result<Option<String>> {
    use base64::Engine;
    let roots = kubeconfig(path).await?.root_cert.unwrap_or_default();
    let mut pem = String::new();
    for der in roots {
        let encoded = base64::engine::general_purpose::STANDARD.encode(der);
        pem.push_str("-----BEGIN CERTIFICATE-----\n");
        for line in encoded.as_bytes().chunks(64) {
            pem.push_str(&String::from_utf8_lossy(line));
            pem.push('\n');
        }
        pem.push_str("-----END CERTIFICATE-----\n");
    }
    Ok((!pem.is_empty()).then_some(pem))
}

/// A duration flag as kube-controller-manager takes it: Go's syntax
/// (`500ms`, `40s`, `1m30s`), not negative.
pub fn parse_duration(text: &str) -> Result<std::time::Duration, String> {
    skiff_machinery::duration::parse(text.trim())
}

#[derive(Debug, Clone, Args)]
pub struct ControllerManagerArgs {
    /// The kubeconfig of the API to reconcile.
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: PathBuf,
    #[command(flatten)]
    pub controllers: ControllerFlags,
    /// Take the kube-system/kube-controller-manager Lease before running.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub leader_elect: bool,
    /// The HTTPS port of /metrics, /healthz, /livez and /readyz, with
    /// delegated authentication and authorization; 0 serves none.
    #[arg(long, default_value_t = 10257)]
    pub secure_port: u16,
    #[command(flatten)]
    pub serving: SecureServingFlags,
}

/// ` (secure port https://ADDR/metrics)`, or nothing.
fn secure_port_note(port: Option<&SecureServer>) -> String {
    port.map(|p| format!("; secure port https://{}/metrics", p.local_addr()))
        .unwrap_or_default()
}

/// `skiff controller-manager`: the controllers alone, until SIGINT or SIGTERM.
pub async fn controller_manager(args: ControllerManagerArgs) -> Result<()> {
    let controllers = args.controllers.chosen(true)?;
    let client = kubeconfig_client(&args.kubeconfig).await?;
    let mut settings = args.controllers.settings();
    if settings.root_ca.is_none() {
        settings.root_ca = kubeconfig_ca_pem(&args.kubeconfig).await?;
    }
    let metrics = ManagerMetrics::new();
    let port = match args
        .serving
        .options(args.secure_port, &args.kubeconfig)
        .await?
    {
        Some(options) => Some(
            serve_secure_port("controller-manager", options, &client, metrics.registry()).await?,
        ),
        None => None,
    };
    let mut signals = crate::shutdown::StopSignals::register()?;
    let names: Vec<&str> = controllers.iter().map(|c| c.name).collect();
    println!(
        "skiff controller-manager: running {} for the API of {}{}",
        names.join(", "),
        args.kubeconfig.display(),
        secure_port_note(port.as_ref())
    );
    let lease = args
        .leader_elect
        .then(|| controller_manager_lease(&identity("controller-manager")));
    manager::run(client, controllers, settings, lease, metrics, async move {
        let name = signals.recv().await;
        tracing::info!(signal = name, "stopping the controller-manager");
    })
    .await;
    if let Some(port) = port {
        port.stop().await;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{parse_duration, read_root_ca, SecureListen};
    use std::time::Duration;

    #[test]
    fn the_root_ca_file_must_hold_certificates() {
        let dir = tempfile::tempdir().unwrap();
        let pki = crate::pki::Pki::ensure(&dir.path().join("pki")).unwrap();
        let good = dir.path().join("ca.crt");
        std::fs::write(&good, pki.ca_pem()).unwrap();
        assert_eq!(read_root_ca(&good).unwrap(), pki.ca_pem());

        let empty = dir.path().join("empty.crt");
        std::fs::write(&empty, "not a certificate\n").unwrap();
        let err = format!("{:#}", read_root_ca(&empty).unwrap_err());
        assert!(err.contains("holds no PEM certificate"), "{err}");
        let missing = format!("{:#}", read_root_ca(&dir.path().join("none")).unwrap_err());
        assert!(missing.contains("reading --root-ca-file"), "{missing}");
    }

    #[test]
    fn a_secure_listen_is_an_address_or_off() {
        assert_eq!(
            "127.0.0.1:0".parse::<SecureListen>(),
            Ok(SecureListen(Some("127.0.0.1:0".parse().unwrap())))
        );
        assert_eq!("off".parse::<SecureListen>(), Ok(SecureListen(None)));
        let err = "localhost:10259".parse::<SecureListen>().unwrap_err();
        assert!(err.contains("not an IP:port"), "{err}");
    }

    #[test]
    fn durations_read_as_kube_controller_manager_reads_them() {
        assert_eq!(parse_duration("50s"), Ok(Duration::from_secs(50)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("1.5h"), Ok(Duration::from_secs(5400)));
        for bad in ["", "50", "s", "5x", "-1s", "1m3"] {
            assert!(parse_duration(bad).is_err(), "{bad:?} accepted");
        }
    }
}
