//! The node agent: a list-watch client of the REST API that registers its
//! Node, renews its Lease, and runs the pods bound to it as local
//! processes (no container engine), or simulates thousands of nodes.
//!
//! - [`node`]: the Node object (capacity from the host), its Lease and
//!   status conditions.
//! - [`runtime`]: containers as process groups under a shim, their state on
//!   disk for recovery, cgroup v2 limits; [`logs`]: their log files.
//! - [`env`], [`volumes`], [`probe`]: what a container sees and how it is
//!   checked; [`token`]: the ServiceAccount tokens its volumes hold.
//! - [`pod`]: one worker per pod, driving containers and the pod status.
//! - [`server`]: the kubelet's HTTP port (logs for `pods/log`), with
//!   [`streaming`]'s exec, attach and port-forward.
//! - [`stats`]: what the node and its containers use, for the Summary
//!   API and resource metrics; [`metrics`]: the kubelet's own.
//! - [`eviction_manager`]: evicts pods when the node is under pressure,
//!   in [`eviction`]'s order.
//! - [`dns`]: the cluster DNS, a list-watch client of Services and
//!   EndpointSlices answering their names.
//! - [`agent`]: all of it as one running kubelet.
//! - [`simulate`]: simulated nodes for scale.

pub mod agent;
pub mod dns;
pub mod env;
pub mod envvars;
pub mod eviction;
pub mod eviction_manager;
pub mod logs;
pub mod metrics;
pub mod network;
pub mod node;
pub mod pod;
pub mod probe;
pub mod proxy;
pub mod runtime;
pub mod server;
pub mod shim;
pub mod simulate;
pub mod stats;
pub mod streaming;
pub mod token;
pub mod volumes;
