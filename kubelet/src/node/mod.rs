//! The kubelet's Node: its identity and capacity from the host, its
//! registration, status conditions (and the events they cause) and Lease
//! heartbeat. Not the pods on it
//! (`pod`) nor eviction itself (`eviction` reads the [`Pressure`] published here).

pub mod build;
pub mod conditions;
pub mod config;
pub mod events;
pub mod host;
pub mod lease;
pub mod register;
pub mod status;

pub use build::build_node;
pub use conditions::{node_conditions, Pressure};
pub use config::{
    parse_labels, parse_taints, ConfigError, EvictionThresholds, NodeConfig, ResourceList,
    Threshold,
};
pub use host::{HostError, HostInfo, HostReader, HostStats, LinuxHost};
pub use lease::{run_lease, LeaseError, NodeLease};
pub use register::{register, register_node};
pub use status::{pressure_channel, run_status, StatusIntervals};

/// Why registering the Node or writing its status failed.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error("creating the Node {node}: {source}")]
    Create { node: String, source: kube::Error },
    #[error("updating the existing Node {node}: {source}")]
    Update { node: String, source: kube::Error },
    #[error("writing the status of the Node {node}: {source}")]
    Status { node: String, source: kube::Error },
    #[error(
        "the Node {node} changed under each attempt to update it; another writer keeps changing it"
    )]
    Conflicts { node: String },
    #[error("reading the host: {0}")]
    Host(#[from] HostError),
}
