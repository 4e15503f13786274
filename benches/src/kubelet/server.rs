//! The `skiff up` the kubelet and controller benchmarks talk to, on free loopback ports
//! with its own data directory: API server and store only for the
//! simulated nodes, with its scheduler and real kubelet for pod starts,
//! or with its scheduler and controllers for simulated nodes' workloads.

use anyhow::{bail, Context, Result};
use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::time::Duration;

use crate::api::server::STOP_GRACE;
use crate::versus::process::ServerProcess;
use crate::versus::system::Program;

/// The kubelet's hard eviction thresholds: low enough that a fairly full
/// disk of the benchmark machine does not put the node under pressure
/// (which would keep every pod off it).
const EVICTION_HARD: &str =
    "memory.available<1Mi,nodefs.available<1%,nodefs.inodesFree<1%,pid.available<1%";
/// The kubelet's default pod capacity, raised when a run needs more.
const DEFAULT_MAX_PODS: usize = 110;
/// The cluster CIDR the node IPAM controller cuts simulated nodes' pod
/// CIDRs from: 65 536 node ranges of /24, where the default 10.244.0.0/16
/// has 256 (a node without one never starts its pods). Simulated nodes
/// configure nothing, so it overlaps nothing on the host.
pub const SIMULATED_CLUSTER_CIDR: &str = "10.0.0.0/8";

/// What `skiff up` runs beside its store and API.
pub enum Components {
    /// Nothing: the simulated nodes are the only nodes.
    ApiOnly,
    /// Its scheduler and its real kubelet, registering one Node `name`
    /// with room for at least `max_pods` pods; with `pod_network`, each
    /// pod gets a network of its own through CNI (`--pod-network=cni`).
    Node {
        name: String,
        max_pods: usize,
        pod_network: Option<PodNetwork>,
        /// The service proxy's nftables table, when it runs.
        service_proxy: Option<String>,
    },
    /// Its scheduler and controller-manager; the nodes are simulated.
    Controllers,
    /// Its scheduler only (the controller-manager runs as a process of
    /// its own); the nodes are simulated.
    Scheduler,
}

impl Components {
    fn args(&self) -> Vec<String> {
        match self {
            // Its controller-manager (on by default) gives the nodes
            // their pod CIDRs, as it would a real cluster's.
            Components::ApiOnly => vec![
                "--scheduler=false".into(),
                "--kubelet=false".into(),
                format!("--cluster-cidr={SIMULATED_CLUSTER_CIDR}"),
            ],
            Components::Controllers => vec![
                "--scheduler=true".into(),
                "--controller-manager=true".into(),
                "--kubelet=false".into(),
                format!("--cluster-cidr={SIMULATED_CLUSTER_CIDR}"),
            ],
            // The controller-manager apart is given the cluster CIDR.
            Components::Scheduler => vec![
                "--scheduler=true".into(),
                "--controller-manager=false".into(),
                "--kubelet=false".into(),
            ],
            Components::Node {
                name,
                max_pods,
                pod_network,
                service_proxy,
            } => {
                let mut args = vec![
                    "--scheduler=true".into(),
                    "--kubelet=true".into(),
                    "--node-name".into(),
                    name.clone(),
                    "--kubelet-listen".into(),
                    "127.0.0.1:0".into(),
                    format!("--eviction-hard={EVICTION_HARD}"),
                    "--capacity".into(),
                    format!("pods={}", (*max_pods).max(DEFAULT_MAX_PODS)),
                ];
                match service_proxy {
                    Some(table) => args.extend([
                        "--service-proxy=true".to_string(),
                        format!("--proxy-table={table}"),
                    ]),
                    // Pods only: the host's nftables are left alone.
                    None => args.push("--service-proxy=false".into()),
                }
                match pod_network {
                    Some(network) => args.extend([
                        "--pod-network=cni".to_string(),
                        format!("--pod-bridge={}", network.bridge),
                        format!("--cluster-cidr={}", network.cluster_cidr),
                    ]),
                    None => args.push("--pod-network=host".into()),
                }
                args
            }
        }
    }
}

/// The pod network of a benchmark's `skiff up`: a bridge and a cluster
/// CIDR of its own, so that it clashes with nothing on the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodNetwork {
    pub bridge: String,
    pub cluster_cidr: String,
}

impl PodNetwork {
    pub fn for_this_run() -> PodNetwork {
        PodNetwork {
            bridge: format!("skb{}", std::process::id() % 100_000),
            cluster_cidr: "10.215.0.0/16".into(),
        }
    }

    /// Why pods cannot have networks of their own on this host, if they
    /// cannot: root and the standard CNI plugins are needed.
    pub fn unavailable() -> Option<String> {
        if unsafe { libc::geteuid() } != 0 {
            return Some("not running as root".into());
        }
        let plugins = ["/usr/lib/cni/bridge", "/opt/cni/bin/bridge"];
        if !plugins.iter().any(|p| std::path::Path::new(p).is_file()) {
            return Some("no CNI plugins (apt-get install containernetworking-plugins)".into());
        }
        None
    }

    /// Removes the bridge the run's kubelet made (the pods' namespaces
    /// and addresses went with the pods).
    pub fn remove_bridge(&self) {
        let _ = std::process::Command::new("ip")
            .args(["link", "del", &self.bridge])
            .stderr(std::process::Stdio::null())
            .status();
        // And the kubelet's masquerading table, named after the bridge.
        let table = skiff_kubelet::network::hostgw::table_name(&self.bridge);
        let _ = std::process::Command::new("nft")
            .args(["delete", "table", "inet", &table])
            .stderr(std::process::Stdio::null())
            .status();
    }
}

pub struct SkiffUp {
    pub api: SocketAddr,
    process: ServerProcess,
}

impl SkiffUp {
    /// Starts `skiff up` with data under `dir` and `components` beside its
    /// API, and waits until it is ready.
    pub async fn start(skiff: &Program, dir: &Path, components: &Components) -> Result<SkiffUp> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let [api, client] = free_ports()?;
        let mut args = vec![
            "up".to_string(),
            "--data-dir".into(),
            dir.join("skiff").display().to_string(),
            // The API over HTTPS on any port; the bench talks to its plain
            // loopback port (the administrator, no TLS on the client side).
            "--api-listen".into(),
            "127.0.0.1:0".into(),
            "--insecure-api-listen".into(),
            api.to_string(),
            "--client-listen".into(),
            client.to_string(),
        ];
        args.extend(components.args());
        let process = ServerProcess::spawn("skiff up", &skiff.path, &args, &dir.join("skiff.log"))?;
        let mut up = SkiffUp { api, process };
        if let Err(err) = up.wait_ready().await {
            bail!(
                "skiff up did not become ready: {err:#}\n{}",
                up.process.log_tail()
            );
        }
        Ok(up)
    }

    async fn wait_ready(&mut self) -> Result<()> {
        let process = &mut self.process;
        crate::api::server::wait_ready(self.api, || {
            process
                .exited()
                .map(|status| format!("it exited while starting ({status})"))
        })
        .await
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.api)
    }

    /// The process id, to find the processes it started for its pods.
    pub fn pid(&self) -> u32 {
        self.process.pid()
    }

    pub fn cpu_time(&self) -> Duration {
        self.process.cpu_time()
    }

    pub fn log_tail(&self) -> String {
        self.process.log_tail()
    }

    /// Stops it; a note if it needed SIGKILL.
    pub async fn stop(self) -> Result<Option<String>> {
        let (status, killed) = self.process.stop(STOP_GRACE).await?;
        Ok(killed.then(|| {
            format!(
                "skiff up did not stop within {STOP_GRACE:?} of SIGTERM and was killed ({status})"
            )
        }))
    }
}

/// Two free ports on 127.0.0.1 (both held until chosen).
fn free_ports() -> Result<[SocketAddr; 2]> {
    let bind = || TcpListener::bind("127.0.0.1:0").context("finding a free port on 127.0.0.1");
    let (a, b) = (bind()?, bind()?);
    Ok([a.local_addr()?, b.local_addr()?])
}
