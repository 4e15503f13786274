//! Which controllers run and when: `--controllers` as kube-controller-manager
//! reads it (`*` for every controller, `name` to add one, `-name` to leave
//! one out), all run while this process holds the
//! `kube-system/kube-controller-manager` Lease, and stop when it is lost.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use kube::Client;

use crate::common::informers::Informers;
use crate::metrics::ManagerMetrics;
use skiff_machinery::leader::{self, LeaseConfig};

/// One controller: its name on the command line and how it runs (until
/// its task is aborted).
#[derive(Clone, Copy)]
pub struct Controller {
    pub name: &'static str,
    pub run: fn(Arc<Informers>, Arc<Settings>) -> BoxFuture<'static, ()>,
}

/// kube-controller-manager's tunables that skiff's controllers read, with
/// its defaults; the command line sets them under the same flag names.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// How often the node lifecycle controller looks at Node heartbeats
    /// (`--node-monitor-period`).
    pub node_monitor_period: Duration,
    /// How long a Node may go without a heartbeat (its Lease or Ready
    /// condition) before it is marked unreachable
    /// (`--node-monitor-grace-period`).
    pub node_monitor_grace_period: Duration,
    /// The same, for a Node that has never posted a status
    /// (`--node-startup-grace-period`).
    pub node_startup_grace_period: Duration,
    /// Nodes per second whose pods may be evicted when nodes fail
    /// (`--node-eviction-rate`).
    pub node_eviction_rate: f64,
    /// Terminated pods kept before the pod garbage collector deletes the
    /// oldest (`--terminated-pod-gc-threshold`); 0 keeps all.
    pub terminated_pod_gc_threshold: usize,
    /// Where the hostPath provisioner makes its volumes' directories
    /// (`--host-path-provisioner-dir`; `skiff up` uses `DATA_DIR/volumes`).
    pub host_path_provisioner_dir: std::path::PathBuf,
    /// Whether the node IPAM controller gives Nodes pod CIDRs
    /// (`--allocate-node-cidrs`; on in skiff, off in kube-controller-manager).
    pub allocate_node_cidrs: bool,
    /// Where Nodes' pod CIDRs come from: one CIDR, or an IPv4 and an IPv6
    /// one (`--cluster-cidr`).
    pub cluster_cidrs: Vec<ipnet::IpNet>,
    /// The prefix length of each Node's IPv4 pod range
    /// (`--node-cidr-mask-size-ipv4`, or `--node-cidr-mask-size`).
    pub node_cidr_mask_size_ipv4: u8,
    /// The same for IPv6 (`--node-cidr-mask-size-ipv6`).
    pub node_cidr_mask_size_ipv6: u8,
    /// The cluster CA (PEM) the root CA publisher puts in every
    /// namespace's `kube-root-ca.crt` (`--root-ca-file`, else the CA of
    /// the API the controllers run against); `None`: nothing to publish.
    pub root_ca: Option<String>,
}

/// The hostPath provisioner's default base directory, as kube's hostPath
/// recycler and provisioner default to `/tmp`.
pub const DEFAULT_HOST_PATH_PROVISIONER_DIR: &str = "/tmp/skiff-hostpath-provisioner";

impl Default for Settings {
    fn default() -> Self {
        Settings {
            node_monitor_period: Duration::from_secs(5),
            node_monitor_grace_period: Duration::from_secs(50),
            node_startup_grace_period: Duration::from_secs(60),
            node_eviction_rate: 0.1,
            terminated_pod_gc_threshold: 12_500,
            host_path_provisioner_dir: DEFAULT_HOST_PATH_PROVISIONER_DIR.into(),
            allocate_node_cidrs: true,
            cluster_cidrs: vec![crate::nodeipam::DEFAULT_CLUSTER_CIDR
                .parse()
                .expect("a valid CIDR")],
            node_cidr_mask_size_ipv4: 24,
            node_cidr_mask_size_ipv6: 64,
            root_ca: None,
        }
    }
}

impl std::fmt::Debug for Controller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name)
    }
}

/// Every controller, by name.
pub fn all() -> Vec<Controller> {
    vec![
        crate::cronjob::CONTROLLER,
        crate::daemonset::CONTROLLER,
        crate::deployment::CONTROLLER,
        crate::disruption::CONTROLLER,
        crate::endpoint::CONTROLLER,
        crate::endpointslice::CONTROLLER,
        crate::garbagecollector::CONTROLLER,
        crate::job::CONTROLLER,
        crate::namespace::CONTROLLER,
        crate::nodeipam::CONTROLLER,
        crate::nodelifecycle::CONTROLLER,
        crate::persistentvolume::CONTROLLER,
        crate::podgc::CONTROLLER,
        crate::replicaset::CONTROLLER,
        crate::resourcequota::CONTROLLER,
        crate::rootcacertpublisher::CONTROLLER,
        crate::serviceaccount::CONTROLLER,
        crate::statefulset::CONTROLLER,
        crate::tainteviction::CONTROLLER,
        crate::ttlafterfinished::CONTROLLER,
    ]
}

/// The controllers `--controllers` selects, in name order.
pub fn select(flags: &[String]) -> Result<Vec<Controller>, String> {
    let known = all();
    let exists = |name: &str| known.iter().any(|c| c.name == name);
    let mut everything = false;
    let mut on = Vec::new();
    let mut off = Vec::new();
    for flag in flags.iter().map(|f| f.trim()).filter(|f| !f.is_empty()) {
        let (list, name) = match flag.strip_prefix('-') {
            Some(name) => (&mut off, name),
            None => (&mut on, flag),
        };
        if flag == "*" {
            everything = true;
            continue;
        }
        if !exists(name) {
            let names: Vec<&str> = known.iter().map(|c| c.name).collect();
            return Err(format!(
                "unknown controller {name:?} in --controllers; known: {}",
                names.join(", ")
            ));
        }
        list.push(name.to_string());
    }
    let mut chosen: Vec<Controller> = known
        .into_iter()
        .filter(|c| {
            (everything || on.iter().any(|n| n == c.name)) && !off.iter().any(|n| n == c.name)
        })
        .collect();
    chosen.sort_by_key(|c| c.name);
    Ok(chosen)
}

/// The lease of kube-controller-manager, held by `identity`.
pub fn controller_manager_lease(identity: &str) -> LeaseConfig {
    LeaseConfig::new("kube-system", "kube-controller-manager", identity)
}

/// Runs `controllers` (while holding `lease`, if given) until `shutdown`,
/// reporting their work queues and the lease in `metrics`.
pub async fn run(
    client: Client,
    controllers: Vec<Controller>,
    settings: Settings,
    lease: Option<LeaseConfig>,
    metrics: ManagerMetrics,
    shutdown: impl Future<Output = ()> + Send,
) {
    let settings = Arc::new(settings);
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        if let Some(lease) = &lease {
            tokio::select! {
                _ = leader::acquire(&client, lease) => {}
                _ = &mut shutdown => return,
            }
            tracing::info!(identity = %lease.identity, "controller-manager: leading");
            metrics.set_leading(true);
        }
        // One set of informers a term, shared by its controllers; their
        // watches stop when the last controller holding them is aborted.
        let informers = Informers::with_workqueues(client.clone(), metrics.workqueues().clone());
        let tasks: Vec<_> = controllers
            .iter()
            .map(|c| {
                tracing::info!(controller = c.name, "starting controller");
                tokio::spawn((c.run)(informers.clone(), settings.clone()))
            })
            .collect();
        drop(informers);
        let lost = async {
            match &lease {
                Some(lease) => leader::hold(&client, lease).await,
                None => std::future::pending().await,
            }
        };
        let stop = tokio::select! {
            _ = lost => false,
            _ = &mut shutdown => true,
        };
        metrics.set_leading(false);
        for task in tasks {
            task.abort();
        }
        if stop {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(flags: &[&str]) -> Result<Vec<&'static str>, String> {
        let flags: Vec<String> = flags.iter().map(|f| f.to_string()).collect();
        select(&flags).map(|c| c.into_iter().map(|c| c.name).collect())
    }

    #[test]
    fn controllers_are_chosen_as_kube_controller_manager_reads_the_flag() {
        let every = names(&["*"]).unwrap();
        assert_eq!(every.len(), all().len());
        let without = names(&["*", "-replicaset"]).unwrap();
        assert!(!without.contains(&"replicaset"));
        assert_eq!(without.len(), every.len() - 1);
        assert_eq!(names(&["replicaset"]).unwrap(), ["replicaset"]);
        assert!(names(&[]).unwrap().is_empty());
        let err = names(&["replicasets"]).unwrap_err();
        assert!(err.contains("unknown controller \"replicasets\""), "{err}");
    }
}
