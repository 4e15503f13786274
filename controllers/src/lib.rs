//! The controller-manager: level-triggered reconcilers, each a list-watch
//! client of the REST API built on `kube`'s runtime (watcher, reflector,
//! work queue with per-key deduplication and rate-limited retries).
//!
//! - [`manager`]: which controllers run, leader-elected through the
//!   `kube-system/kube-controller-manager` Lease.
//! - [`metrics`]: the process's registry (work queues, lease, process).
//! - one module per controller, named as kube-controller-manager names it.

pub mod backoff;
pub mod common;
pub mod cronjob;
pub mod daemonset;
pub mod deployment;
pub mod disruption;
pub mod endpoint;
pub mod endpointslice;
pub mod garbagecollector;
pub mod history;
pub mod job;
pub mod manager;
pub mod metrics;
pub mod namespace;
pub mod nodeipam;
pub mod nodelifecycle;
pub mod persistentvolume;
pub mod podgc;
pub mod replicaset;
pub mod resourcequota;
pub mod rootcacertpublisher;
pub mod serviceaccount;
pub mod statefulset;
pub mod tainteviction;
pub mod ttlafterfinished;
