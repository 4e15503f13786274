//! The service proxy's flags, shared by `skiff kubelet` and `skiff up`
//! (which run it beside their kubelet), and `skiff proxy`, which runs it
//! alone for the API of a kubeconfig.

use std::path::PathBuf;

use anyhow::{bail, Result};
use clap::Args;
use skiff_kubelet::dns::DnsConfig;
use skiff_kubelet::proxy::{self, ProxyConfig};

/// How the service proxy runs beside a kubelet.
#[derive(Debug, Clone, Args)]
pub struct ProxyFlags {
    /// Run the service proxy beside the kubelet (as root, with nft): a
    /// Service's cluster IPs and node ports reach its endpoints; `false`
    /// leaves Services unproxied on this node.
    #[arg(long, env = "SKIFF_SERVICE_PROXY", default_value_t = true, action = clap::ArgAction::Set)]
    pub service_proxy: bool,
    /// The nftables table (`ip` family) of the service proxy.
    #[arg(long, default_value = proxy::DEFAULT_TABLE)]
    pub proxy_table: String,
    /// Where the node's cluster DNS answers (UDP and TCP; port 0: any
    /// free port); the proxy sends the cluster DNS address's port 53
    /// there.
    #[arg(long, default_value = "127.0.0.1:0")]
    pub cluster_dns_listen: std::net::SocketAddr,
    /// For `skiff kubelet`: the kubeconfig the proxy reads Services and
    /// EndpointSlices with (a user the `system:node-proxier` role is bound
    /// to, as kube-proxy's) [default: the kubelet's --kubeconfig].
    #[arg(long)]
    pub proxy_kubeconfig: Option<PathBuf>,
}

impl ProxyFlags {
    /// The proxy for node `node_name` (whose pods' bridge is
    /// `pod_bridge`), if it is to run.
    pub fn config(&self, node_name: &str, pod_bridge: Option<&str>) -> Result<Option<ProxyConfig>> {
        if !self.service_proxy {
            return Ok(None);
        }
        Ok(Some(ProxyConfig {
            node_name: node_name.to_string(),
            table: table_name(&self.proxy_table)?,
            localnet_interfaces: pod_bridge.map(str::to_string).into_iter().collect(),
            dns: None,
        }))
    }
}

/// The service proxy and the node's cluster DNS running beside a
/// kubelet, until stopped.
pub struct NodeProxy {
    stop: Option<tokio::sync::watch::Sender<bool>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl NodeProxy {
    /// Starts the proxy of `node` beside its kubelet, as `client` (the
    /// user `system:kube-proxy`, whose default role reads Services and
    /// EndpointSlices), unless the flags say not to; where it cannot run
    /// (not root, no nft) it says so once and runs nothing. With it, the
    /// node's cluster DNS, on `--cluster-dns-listen`, which the proxy
    /// gives the first `--cluster-dns` address's port 53.
    pub async fn start(
        client: kube::Client,
        node: &crate::kubelet::NodeArgs,
        node_name: &str,
    ) -> Result<Option<NodeProxy>> {
        let bridge = (node.pod_network == crate::kubelet::PodNetworkMode::Cni)
            .then_some(node.pod_bridge.as_str());
        let Some(mut config) = node.proxy.config(node_name, bridge)? else {
            return Ok(None);
        };
        if let Some(why) = proxy::unavailable_reason() {
            tracing::warn!(reason = %why, "Services are not proxied on this node");
            return Ok(None);
        }
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let until_stopped = move || {
            let mut stopped = stopped.clone();
            async move {
                let _ = stopped.wait_for(|s| *s).await;
            }
        };
        let mut tasks = Vec::new();
        let cluster_ip = node.cluster_dns.iter().find_map(|ip| match ip {
            std::net::IpAddr::V4(ip) => Some(*ip),
            std::net::IpAddr::V6(_) => None,
        });
        if let Some(cluster_ip) = cluster_ip {
            let mut dns = DnsConfig::new(node.proxy.cluster_dns_listen);
            dns.domain = node
                .cluster_domain
                .trim_end_matches('.')
                .to_ascii_lowercase();
            match skiff_kubelet::dns::bind(dns).await {
                Ok(bound) => {
                    let listen = bound.local_addr();
                    tracing::info!(%listen, %cluster_ip, "cluster DNS of this node");
                    config.dns = Some(proxy::NodeDns { cluster_ip, listen });
                    let client = client.clone();
                    let stop = until_stopped();
                    tasks.push(tokio::spawn(async move {
                        if let Err(err) = bound.serve(client, stop).await {
                            tracing::warn!(error = %format!("{err:#}"), "the cluster DNS stopped");
                        }
                    }));
                }
                Err(err) => {
                    tracing::warn!(error = %err, "no cluster DNS on this node");
                }
            }
        }
        tasks.push(tokio::spawn(proxy::run_proxy(
            client,
            config,
            until_stopped(),
            None,
        )));
        Ok(Some(NodeProxy {
            stop: Some(stop),
            tasks,
        }))
    }

    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(true);
        }
        for mut task in self.tasks.drain(..) {
            let _ = tokio::time::timeout(std::time::Duration::from_secs(5), &mut task).await;
            task.abort();
        }
    }
}

/// An nftables table name: letters, digits, `-` and `_`, a letter first.
fn table_name(name: &str) -> Result<String> {
    let ok = name.len() <= 64
        && name.starts_with(|c: char| c.is_ascii_alphabetic())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if !ok {
        bail!("--proxy-table {name:?} is not an nftables table name (letters, digits, - and _, a letter first)");
    }
    Ok(name.to_string())
}

#[derive(Debug, Clone, Args)]
pub struct ProxyArgs {
    /// The kubeconfig of the API whose Services are proxied.
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: PathBuf,
    /// The node this runs on (`Local` traffic policies keep traffic to
    /// its endpoints) [default: this host's name].
    #[arg(long, env = "SKIFF_NODE_NAME")]
    pub node_name: Option<String>,
    /// The nftables table (`ip` family) of the service proxy.
    #[arg(long, default_value = proxy::DEFAULT_TABLE)]
    pub proxy_table: String,
    /// Interfaces where packets to 127.0.0.0/8 are routed (the pods'
    /// bridge), so that pods reach endpoints on the host's loopback.
    #[arg(long, value_delimiter = ',', default_value = "skiff0")]
    pub localnet_interface: Vec<String>,
    /// Remove the proxy's table and exit.
    #[arg(long)]
    pub cleanup: bool,
}

/// `skiff proxy`: until SIGINT or SIGTERM.
pub async fn run(args: ProxyArgs) -> Result<()> {
    let table = table_name(&args.proxy_table)?;
    if let Some(why) = proxy::unavailable_reason() {
        bail!("{why}");
    }
    if args.cleanup {
        proxy::remove_table(&table).map_err(anyhow::Error::msg)?;
        println!("skiff proxy: removed table ip {table}");
        return Ok(());
    }
    let client = crate::control_plane::kubeconfig_client(&args.kubeconfig).await?;
    let mut signals = crate::shutdown::StopSignals::register()?;
    let stop = async move {
        let name = signals.recv().await;
        tracing::info!(signal = name, "stopping the service proxy");
    };
    let node_name = args
        .node_name
        .clone()
        .unwrap_or_else(crate::kubelet::host_name);
    println!(
        "skiff proxy: Services of the API of {} programmed in nftables table ip {table} for node {node_name}",
        args.kubeconfig.display()
    );
    let config = ProxyConfig {
        node_name,
        table,
        localnet_interfaces: args.localnet_interface.clone(),
        dns: None,
    };
    proxy::run_proxy(client, config, stop, None).await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_names_are_checked() {
        assert_eq!(table_name("skiff-proxy").unwrap(), "skiff-proxy");
        assert!(table_name("a_b-9").is_ok());
        let err = table_name("x; flush ruleset").unwrap_err().to_string();
        assert!(err.contains("not an nftables table name"), "{err}");
        assert!(table_name("-x").is_err());
        assert!(table_name("").is_err());
    }
}
