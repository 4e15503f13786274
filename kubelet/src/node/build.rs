//! The Node object the kubelet registers: well-known labels, taints,
//! capacity and allocatable, addresses, the kubelet endpoint and nodeInfo.
//! Pure: built from the configuration and one host reading.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    DaemonEndpoint, Node, NodeAddress, NodeDaemonEndpoints, NodeSpec, NodeStatus, NodeSystemInfo,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as ApiQuantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use skiff_machinery::quantity::Quantity;

use super::config::{NodeConfig, ResourceList, DEFAULT_MAX_PODS, KUBELET_VERSION};
use super::host::HostInfo;

pub const LABEL_HOSTNAME: &str = "kubernetes.io/hostname";
pub const LABEL_OS: &str = "kubernetes.io/os";
pub const LABEL_ARCH: &str = "kubernetes.io/arch";
pub const LABEL_BETA_OS: &str = "beta.kubernetes.io/os";
pub const LABEL_BETA_ARCH: &str = "beta.kubernetes.io/arch";

/// The Node as first registered: no conditions yet (the status loop
/// posts them).
pub fn build_node(config: &NodeConfig, host: &HostInfo) -> Node {
    let capacity = node_capacity(config, host);
    let allocatable = node_allocatable(config, &capacity);
    Node {
        metadata: ObjectMeta {
            name: Some(config.name.clone()),
            labels: Some(node_labels(config, host)),
            ..ObjectMeta::default()
        },
        spec: Some(NodeSpec {
            taints: (!config.taints.is_empty()).then(|| config.taints.clone()),
            ..NodeSpec::default()
        }),
        status: Some(NodeStatus {
            capacity: Some(to_api(&capacity)),
            allocatable: Some(to_api(&allocatable)),
            addresses: Some(node_addresses(config)),
            daemon_endpoints: Some(NodeDaemonEndpoints {
                kubelet_endpoint: Some(DaemonEndpoint {
                    port: i32::from(config.kubelet_port),
                }),
            }),
            node_info: Some(node_info(config, host)),
            ..NodeStatus::default()
        }),
    }
}

/// The well-known labels, then the configured ones (which win, as with
/// the real kubelet's --node-labels).
pub fn node_labels(config: &NodeConfig, host: &HostInfo) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::from([
        (LABEL_HOSTNAME.to_string(), config.hostname.clone()),
        (LABEL_OS.to_string(), host.operating_system.clone()),
        (LABEL_ARCH.to_string(), host.architecture.clone()),
        (LABEL_BETA_OS.to_string(), host.operating_system.clone()),
        (LABEL_BETA_ARCH.to_string(), host.architecture.clone()),
    ]);
    labels.extend(config.labels.clone());
    labels
}

/// Resource name → quantity, as status.capacity and allocatable hold them.
pub type Resources = BTreeMap<&'static str, Quantity>;

fn bytes(n: u64) -> Quantity {
    Quantity {
        milli: i128::from(n) * 1000,
        binary: true,
    }
}

/// What the host has, unless the configuration overrides it.
pub fn node_capacity(config: &NodeConfig, host: &HostInfo) -> Resources {
    let over = &config.capacity;
    BTreeMap::from([
        (
            "cpu",
            over.cpu.unwrap_or(Quantity::count(i64::from(host.cpus))),
        ),
        ("memory", over.memory.unwrap_or(bytes(host.memory_bytes))),
        (
            "pods",
            over.pods.unwrap_or(Quantity::count(DEFAULT_MAX_PODS)),
        ),
        (
            "ephemeral-storage",
            over.ephemeral_storage
                .unwrap_or(bytes(host.ephemeral_storage_bytes)),
        ),
    ])
}

/// Capacity minus system-reserved, kube-reserved and the hard eviction
/// threshold of memory and nodefs, never below zero.
pub fn node_allocatable(config: &NodeConfig, capacity: &Resources) -> Resources {
    let eviction = &config.eviction_hard;
    capacity
        .iter()
        .map(|(&name, &total)| {
            let reserved = reserved_of(&config.system_reserved, name)
                .plus(reserved_of(&config.kube_reserved, name));
            let total_units = u64::try_from(total.milli.max(0) / 1000).unwrap_or(u64::MAX);
            let threshold = match name {
                "memory" => eviction.memory_available,
                "ephemeral-storage" => eviction.nodefs_available,
                _ => None,
            }
            .map(|t| bytes(t.amount_of(total_units)))
            .unwrap_or_default();
            let mut left = total.minus(reserved).minus(threshold);
            left.binary = total.binary;
            if left.milli < 0 {
                left.milli = 0;
            }
            (name, left)
        })
        .collect()
}

fn reserved_of(list: &ResourceList, name: &str) -> Quantity {
    match name {
        "cpu" => list.cpu,
        "memory" => list.memory,
        "pods" => list.pods,
        "ephemeral-storage" => list.ephemeral_storage,
        _ => None,
    }
    .unwrap_or_default()
}

/// Resources as the API writes them (`4`, `16318412Ki`, `100Gi`).
pub fn to_api(resources: &Resources) -> BTreeMap<String, ApiQuantity> {
    resources
        .iter()
        .map(|(name, q)| (name.to_string(), ApiQuantity(q.to_string())))
        .collect()
}

fn node_addresses(config: &NodeConfig) -> Vec<NodeAddress> {
    vec![
        NodeAddress {
            type_: "InternalIP".into(),
            address: config.address.clone(),
        },
        NodeAddress {
            type_: "Hostname".into(),
            address: config.hostname.clone(),
        },
    ]
}

fn node_info(config: &NodeConfig, host: &HostInfo) -> NodeSystemInfo {
    NodeSystemInfo {
        machine_id: host.machine_id.clone(),
        system_uuid: host.system_uuid.clone(),
        boot_id: host.boot_id.clone(),
        kernel_version: host.kernel_version.clone(),
        os_image: host.os_image.clone(),
        container_runtime_version: config.runtime_version.clone(),
        kubelet_version: KUBELET_VERSION.to_string(),
        // Deprecated, and left empty by a 1.33 kubelet
        // (DisableNodeKubeProxyVersion is on by default there).
        kube_proxy_version: String::new(),
        operating_system: host.operating_system.clone(),
        architecture: host.architecture.clone(),
        swap: None,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::node::config::{parse_labels, parse_taints, EvictionThresholds};

    pub(crate) fn host() -> HostInfo {
        HostInfo {
            hostname: "box".into(),
            cpus: 8,
            memory_bytes: 16 << 30,
            ephemeral_storage_bytes: 100 << 30,
            pid_max: 32768,
            boot_id: "b".into(),
            machine_id: "m".into(),
            system_uuid: "u".into(),
            kernel_version: "6.1.0".into(),
            os_image: "Debian GNU/Linux 12 (bookworm)".into(),
            architecture: "amd64".into(),
            operating_system: "linux".into(),
        }
    }

    fn get<'a>(map: &'a Option<BTreeMap<String, ApiQuantity>>, key: &str) -> &'a str {
        &map.as_ref().expect("resources")[key].0
    }

    #[test]
    fn the_node_carries_well_known_and_given_labels_and_taints() {
        let mut config = NodeConfig::new("n1", "10.0.0.5");
        config.labels = parse_labels("zone=a,kubernetes.io/hostname=other").unwrap();
        config.taints = parse_taints("dedicated=gpu:NoSchedule").unwrap();
        let node = build_node(&config, &host());
        let labels = node.metadata.labels.as_ref().unwrap();
        assert_eq!(labels[LABEL_OS], "linux");
        assert_eq!(labels[LABEL_ARCH], "amd64");
        assert_eq!(labels[LABEL_BETA_ARCH], "amd64");
        assert_eq!(labels["zone"], "a");
        assert_eq!(labels[LABEL_HOSTNAME], "other", "given labels win");
        let taints = node.spec.unwrap().taints.unwrap();
        assert_eq!(taints[0].key, "dedicated");
        let status = node.status.unwrap();
        let addresses = status.addresses.unwrap();
        assert_eq!(addresses[0].type_, "InternalIP");
        assert_eq!(addresses[0].address, "10.0.0.5");
        assert_eq!(addresses[1].type_, "Hostname");
        let info = status.node_info.unwrap();
        assert_eq!(info.kubelet_version, "v1.33.0+skiff");
        assert_eq!(info.kube_proxy_version, "");
        assert!(info
            .container_runtime_version
            .starts_with("skiff-process://"));
        assert_eq!(
            status
                .daemon_endpoints
                .unwrap()
                .kubelet_endpoint
                .unwrap()
                .port,
            10250
        );
    }

    #[test]
    fn allocatable_is_capacity_less_reserved_and_eviction_threshold() {
        let mut config = NodeConfig::new("n1", "10.0.0.5");
        config.system_reserved = ResourceList::parse("cpu=500m,memory=1Gi").unwrap();
        config.kube_reserved = ResourceList::parse("cpu=500m,ephemeral-storage=10Gi").unwrap();
        let node = build_node(&config, &host());
        let status = node.status.unwrap();
        assert_eq!(get(&status.capacity, "cpu"), "8");
        assert_eq!(get(&status.capacity, "memory"), "16Gi");
        assert_eq!(get(&status.capacity, "pods"), "110");
        assert_eq!(get(&status.capacity, "ephemeral-storage"), "100Gi");
        assert_eq!(get(&status.allocatable, "cpu"), "7");
        // 16Gi - 1Gi reserved - 100Mi memory.available.
        assert_eq!(get(&status.allocatable, "memory"), "15260Mi");
        assert_eq!(get(&status.allocatable, "pods"), "110");
        // 100Gi - 10Gi reserved - 10% nodefs.available.
        assert_eq!(get(&status.allocatable, "ephemeral-storage"), "80Gi");
    }

    #[test]
    fn overrides_replace_the_hosts_figures_and_allocatable_never_goes_negative() {
        let mut config = NodeConfig::new("n1", "10.0.0.5");
        config.capacity = ResourceList::parse("cpu=32,memory=256Gi,pods=50").unwrap();
        config.system_reserved = ResourceList::parse("cpu=40").unwrap();
        config.eviction_hard = EvictionThresholds::none();
        let status = build_node(&config, &host()).status.unwrap();
        assert_eq!(get(&status.capacity, "cpu"), "32");
        assert_eq!(get(&status.capacity, "pods"), "50");
        assert_eq!(get(&status.allocatable, "cpu"), "0");
        assert_eq!(get(&status.allocatable, "memory"), "256Gi");
    }
}
