//! The simulated nodes themselves: names, host addresses and the pod
//! addresses they hand out from the pod CIDRs the node IPAM controller
//! gives them, the Node objects built as the real kubelet builds its own,
//! and their registration (Node and Lease) with bounded concurrency.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, NodeCondition};
use k8s_openapi::jiff::Timestamp;
use kube::api::Api;
use parking_lot::Mutex;

use super::pod_ips::{PodAddresses, PodIpError};
use super::stats::SimulationStats;
use super::stats_server::{node_url, STATS_URL_ANNOTATION};
use super::SimulateConfig;
use crate::node::config::{EvictionThresholds, NodeConfig};
use crate::node::host::HostInfo;
use crate::node::lease::NodeLease;
use crate::node::status::patch_conditions;
use crate::node::{build_node, node_conditions, register_node, NodeError, Pressure};

/// Marks simulated nodes, so they can be listed and cleaned up.
pub const SIMULATED_LABEL: &str = "skiff.dev/simulated";
/// Attempts to register one node before it is given up.
const REGISTER_ATTEMPTS: u32 = 3;

/// One simulated node: where it is and what it hands out.
#[derive(Debug)]
pub struct SimNode {
    pub index: usize,
    pub name: String,
    pub host_ip: String,
    /// Empty until the Node is seen with spec.podCIDRs.
    pod_addresses: Mutex<PodAddresses>,
}

impl SimNode {
    pub fn new(prefix: &str, index: usize) -> SimNode {
        let i = index as u32;
        SimNode {
            index,
            name: format!("{prefix}-{index}"),
            // 100.64.0.0/10, one address a node.
            host_ip: format!(
                "100.{}.{}.{}",
                64 + ((i >> 16) & 63),
                (i >> 8) & 255,
                i & 255
            ),
            pod_addresses: Mutex::new(PodAddresses::default()),
        }
    }

    /// Whether the node knows its pod CIDRs (and so can start pods that
    /// are not on the host's network).
    pub fn has_pod_cidrs(&self) -> bool {
        self.pod_addresses.lock().has_ranges()
    }

    /// The pod CIDRs of the Node as stored; empty ones are ignored (the
    /// apiserver lets a Node's podCIDRs be set once, never unset). Whether
    /// the node had none before.
    pub fn set_pod_cidrs(&self, cidrs: &[String]) -> Result<bool, PodIpError> {
        if cidrs.is_empty() {
            return Ok(false);
        }
        let mut addresses = self.pod_addresses.lock();
        let first = !addresses.has_ranges();
        if addresses.set_ranges(cidrs)? && !first {
            tracing::warn!(node = %self.name, ?cidrs, "a simulated node's pod CIDRs changed; new pods get addresses from the new ones");
        }
        Ok(first)
    }

    /// Pod `uid`'s addresses, one from each pod CIDR of the node (the
    /// same ones when asked again).
    pub fn allocate_pod_ips(&self, uid: &str) -> Result<Vec<String>, PodIpError> {
        let given = self.pod_addresses.lock().allocate(uid)?;
        Ok(given.iter().map(IpAddr::to_string).collect())
    }

    /// Pod `uid` reports `ips` already: they are not handed out again.
    pub fn occupy_pod_ips(&self, uid: &str, ips: &[String]) {
        let mut addresses = self.pod_addresses.lock();
        if addresses.holds(uid) {
            return;
        }
        addresses.occupy(uid, ips.iter().filter_map(|ip| ip.parse().ok()).collect());
    }

    pub fn release_pod_ips(&self, uid: &str) {
        self.pod_addresses.lock().release(uid);
    }

    /// Frees the addresses of the pods `keep` says no to.
    pub fn retain_pod_ips(&self, keep: impl FnMut(&str) -> bool) {
        self.pod_addresses.lock().retain(keep);
    }
}

/// A Node's spec.podCIDRs, or its spec.podCIDR alone.
pub fn node_pod_cidrs(node: &Node) -> Vec<String> {
    let spec = node.spec.as_ref();
    match spec.and_then(|s| s.pod_cidrs.clone()) {
        Some(cidrs) if !cidrs.is_empty() => cidrs,
        _ => spec
            .and_then(|s| s.pod_cidr.clone())
            .filter(|c| !c.is_empty())
            .into_iter()
            .collect(),
    }
}

/// The simulated host behind every node: what nodeInfo reports.
fn simulated_host(node: &SimNode, boot_id: &str) -> HostInfo {
    let machine_id = format!("{:032x}", node.index);
    HostInfo {
        hostname: node.name.clone(),
        cpus: 1,
        memory_bytes: 0,
        ephemeral_storage_bytes: 0,
        pid_max: 4_194_304,
        boot_id: boot_id.to_string(),
        system_uuid: format!(
            "{}-{}-{}-{}-{}",
            &machine_id[..8],
            &machine_id[8..12],
            &machine_id[12..16],
            &machine_id[16..20],
            &machine_id[20..]
        ),
        machine_id,
        kernel_version: "skiff-simulated".into(),
        os_image: "skiff simulated node".into(),
        architecture: crate::node::host::kubernetes_arch(std::env::consts::ARCH).to_string(),
        operating_system: std::env::consts::OS.to_string(),
    }
}

/// The Node object of a simulated node, Ready from the start; without pod
/// CIDRs, as a real kubelet registers (the node IPAM controller gives them).
pub fn simulated_node(
    config: &SimulateConfig,
    node: &SimNode,
    boot_id: &str,
    stats_base: &str,
    now: Timestamp,
) -> Node {
    let mut node_config = NodeConfig::new(&node.name, &node.host_ip);
    node_config.labels = config.labels.clone();
    node_config
        .labels
        .insert(SIMULATED_LABEL.to_string(), "true".to_string());
    node_config.taints = config.taints.clone();
    node_config.capacity = config.capacity;
    node_config.eviction_hard = EvictionThresholds::none();
    node_config.runtime_version = format!("skiff-sim://{}", env!("CARGO_PKG_VERSION"));
    // No kubelet port: logs, exec, attach and port-forward have nothing
    // to reach, and port 0 says so (the apiserver answers that the node
    // has no kubelet to stream from) rather than pointing at a port
    // where nothing of this node listens.
    node_config.kubelet_port = 0;
    let mut built = build_node(&node_config, &simulated_host(node, boot_id));
    // Where the API server reads this node's usage, having no kubelet port.
    built
        .metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(
            STATS_URL_ANNOTATION.to_string(),
            node_url(stats_base, &node.name),
        );
    if let Some(status) = built.status.as_mut() {
        status.conditions = Some(ready_conditions(&[], now));
    }
    built
}

/// Ready, with no pressure, at `now`; transition times kept from `previous`.
pub fn ready_conditions(previous: &[NodeCondition], now: Timestamp) -> Vec<NodeCondition> {
    node_conditions(previous, &Pressure::default(), now)
}

/// What registration hands to the heartbeats: each node and its Lease
/// (`None` where registration failed).
pub struct Registered {
    pub nodes: Vec<Arc<SimNode>>,
    pub leases: Vec<Option<NodeLease>>,
    pub last_error: Option<String>,
}

/// Registers every node and creates its Lease, `config.concurrency` at a
/// time.
pub async fn register_all(
    nodes_api: &Api<Node>,
    leases_api: &Api<Lease>,
    config: &SimulateConfig,
    stats_base: &str,
    stats: &SimulationStats,
) -> Registered {
    let boot_id = random_uuid();
    let nodes: Vec<Arc<SimNode>> = (0..config.count)
        .map(|i| Arc::new(SimNode::new(&config.name_prefix, i)))
        .collect();
    let results: Vec<(usize, Result<NodeLease, String>)> =
        futures::stream::iter(nodes.iter().cloned())
            .map(|node| {
                let boot_id = boot_id.clone();
                async move {
                    let result =
                        register_one(nodes_api, leases_api, config, &node, &boot_id, stats_base)
                            .await;
                    (node.index, result)
                }
            })
            .buffer_unordered(config.concurrency.max(1))
            .collect()
            .await;
    let mut leases: Vec<Option<NodeLease>> = (0..config.count).map(|_| None).collect();
    let mut last_error = None;
    for (index, result) in results {
        match result {
            Ok(lease) => {
                stats.node_registered();
                leases[index] = Some(lease);
            }
            Err(err) => {
                stats.registration_failed();
                last_error = Some(err);
            }
        }
    }
    Registered {
        nodes,
        leases,
        last_error,
    }
}

async fn register_one(
    nodes_api: &Api<Node>,
    leases_api: &Api<Lease>,
    config: &SimulateConfig,
    node: &SimNode,
    boot_id: &str,
    stats_base: &str,
) -> Result<NodeLease, String> {
    let mut last = String::new();
    for attempt in 0..REGISTER_ATTEMPTS {
        if attempt > 0 {
            tokio::time::sleep(Duration::from_millis(500 << attempt)).await;
        }
        match try_register(nodes_api, leases_api, config, node, boot_id, stats_base).await {
            Ok(lease) => return Ok(lease),
            Err(err) => {
                tracing::debug!(node = %node.name, attempt, error = %err, "registering a simulated node failed");
                last = err;
            }
        }
    }
    Err(last)
}

async fn try_register(
    nodes_api: &Api<Node>,
    leases_api: &Api<Lease>,
    config: &SimulateConfig,
    node: &SimNode,
    boot_id: &str,
    stats_base: &str,
) -> Result<NodeLease, String> {
    let now = Timestamp::now();
    let built = simulated_node(config, node, boot_id, stats_base, now);
    let stored = register_node(nodes_api, built)
        .await
        .map_err(|e| e.to_string())?;
    if !is_ready(&stored) {
        // An existing Node from an earlier run: mark it Ready again.
        patch_conditions(nodes_api, &node.name, &ready_conditions(&[], now))
            .await
            .map_err(|e: NodeError| e.to_string())?;
    }
    let uid = stored.metadata.uid.clone().unwrap_or_default();
    let mut lease = NodeLease::new(&node.name, &uid, config.lease_duration_seconds);
    lease
        .renew(leases_api, Timestamp::now())
        .await
        .map_err(|e| e.to_string())?;
    Ok(lease)
}

fn is_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// A random version-4 UUID, for the simulated nodes' boot id.
fn random_uuid() -> String {
    let bytes: [u8; 16] = rand::random();
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-4{}-a{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[13..16],
        &hex[17..20],
        &hex[20..32]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nodes_get_distinct_host_addresses_and_pod_addresses_from_their_cidrs() {
        let a = SimNode::new("sim", 0);
        let b = SimNode::new("sim", 257);
        assert_eq!(a.name, "sim-0");
        assert_eq!(a.host_ip, "100.64.0.0");
        assert_eq!(b.host_ip, "100.64.1.1");
        assert!(!b.has_pod_cidrs());
        assert_eq!(b.allocate_pod_ips("p1"), Err(PodIpError::NoPodCidr));
        // Nothing changes on an empty podCIDRs, and a first one is news.
        assert_eq!(b.set_pod_cidrs(&[]), Ok(false));
        let cidrs = vec!["10.244.9.0/24".to_string(), "fd00:0:0:9::/64".to_string()];
        assert_eq!(b.set_pod_cidrs(&cidrs), Ok(true));
        assert_eq!(b.set_pod_cidrs(&cidrs), Ok(false));
        assert!(b.has_pod_cidrs());
        assert_eq!(
            b.allocate_pod_ips("p1").unwrap(),
            ["10.244.9.2", "fd00:0:0:9::2"]
        );
        // A pod already running keeps its address from before.
        b.occupy_pod_ips("p0", &["10.244.9.3".into(), "fd00:0:0:9::3".into()]);
        assert_eq!(
            b.allocate_pod_ips("p2").unwrap(),
            ["10.244.9.4", "fd00:0:0:9::4"]
        );
        b.release_pod_ips("p1");
        b.retain_pod_ips(|uid| uid != "p0");
        assert_eq!(
            b.allocate_pod_ips("p3").unwrap(),
            ["10.244.9.5", "fd00:0:0:9::5"]
        );
        assert_eq!(
            b.allocate_pod_ips("p4").unwrap(),
            ["10.244.9.6", "fd00:0:0:9::6"]
        );
        let uuid = random_uuid();
        assert_eq!(uuid.len(), 36);
        assert_eq!(uuid.matches('-').count(), 4);
    }

    #[test]
    fn a_simulated_node_is_ready_with_its_capacity_as_allocatable() {
        let config = SimulateConfig::default();
        let node = simulated_node(
            &config,
            &SimNode::new("sim", 3),
            "boot",
            "http://127.0.0.1:4321",
            Timestamp::UNIX_EPOCH,
        );
        assert!(is_ready(&node));
        let status = node.status.as_ref().unwrap();
        let capacity = status.capacity.as_ref().unwrap();
        assert_eq!(capacity["cpu"].0, "32");
        assert_eq!(capacity["memory"].0, "256Gi");
        assert_eq!(capacity["pods"].0, "110");
        assert_eq!(status.allocatable, status.capacity);
        let labels = node.metadata.labels.as_ref().unwrap();
        assert_eq!(labels[SIMULATED_LABEL], "true");
        let annotations = node.metadata.annotations.as_ref().unwrap();
        assert_eq!(
            annotations[STATS_URL_ANNOTATION],
            "http://127.0.0.1:4321/nodes/sim-3/stats/summary"
        );
        assert_eq!(labels["kubernetes.io/hostname"], "sim-3");
        let info = status.node_info.as_ref().unwrap();
        assert!(info.container_runtime_version.starts_with("skiff-sim://"));
        assert_eq!(info.system_uuid.len(), 36);
        let endpoint = status.daemon_endpoints.as_ref().unwrap();
        assert_eq!(endpoint.kubelet_endpoint.as_ref().unwrap().port, 0);
        // The node IPAM controller gives the pod CIDRs, not the node.
        let spec = node.spec.as_ref().unwrap();
        assert_eq!(spec.pod_cidr, None);
        assert_eq!(spec.pod_cidrs, None);
        assert!(node_pod_cidrs(&node).is_empty());
    }

    #[test]
    fn pod_cidrs_are_read_from_pod_cidrs_or_else_pod_cidr() {
        let node = |spec: serde_json::Value| -> Node {
            serde_json::from_value(serde_json::json!({"metadata": {"name": "sim-0"}, "spec": spec}))
                .unwrap()
        };
        let dual = node(serde_json::json!({"podCIDR": "10.244.0.0/24",
            "podCIDRs": ["10.244.0.0/24", "fd00::/64"]}));
        assert_eq!(node_pod_cidrs(&dual), ["10.244.0.0/24", "fd00::/64"]);
        let old = node(serde_json::json!({"podCIDR": "10.244.1.0/24"}));
        assert_eq!(node_pod_cidrs(&old), ["10.244.1.0/24"]);
        assert!(node_pod_cidrs(&node(serde_json::json!({"podCIDR": ""}))).is_empty());
    }
}
