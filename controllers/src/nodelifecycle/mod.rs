//! The node lifecycle controller (`nodelifecycle`): every
//! `--node-monitor-period` it looks at each node's heartbeat (its Lease and
//! Ready condition); a node silent for `--node-monitor-grace-period` gets
//! its conditions set Unknown and its pods marked not ready; a node not
//! ready gets the `not-ready` or `unreachable` NoSchedule and NoExecute
//! taints (NoExecute at `--node-eviction-rate` nodes per second per zone),
//! lifted once it is ready again. Evicting the pods of a NoExecute-tainted
//! node is the taint eviction controller's.

pub mod events;
#[cfg(test)]
pub mod fixtures;
pub mod health;
pub mod ratelimit;
pub mod taints;

use std::collections::HashMap;
use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};
use skiff_machinery::events::Recorder;
use skiff_machinery::metrics::QueueMetrics;

use crate::common::informers::Informers;
use crate::manager::{Controller, Settings};
use health::Probe;
use ratelimit::ZoneLimiter;
use taints::NoExecute;

/// The `nodelifecycle` controller of the controller-manager.
pub const CONTROLLER: Controller = Controller {
    name: "nodelifecycle",
    run: |informers, settings| Box::pin(run(informers, settings)),
};

/// The source of its events, as kube-controller-manager names it.
pub const COMPONENT: &str = "node-controller";

/// Where kubelets keep their heartbeat Leases.
pub const NODE_LEASE_NAMESPACE: &str = "kube-node-lease";

/// Why a write for a node failed; tried again on the next pass.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{action} node {node}: {source}")]
    Api {
        node: String,
        action: &'static str,
        #[source]
        source: kube::Error,
    },
}

/// kube-controller-manager's name for the node lifecycle controller's
/// queue of nodes.
pub const QUEUE: &str = "node_lifecycle_controller";

/// Caches nodes, node Leases and pods, and monitors nodes until aborted.
pub async fn run(informers: Arc<Informers>, settings: Arc<Settings>) {
    let client = informers.client();
    let nodes = informers.all::<Node>().await.store;
    let leases = informers
        .watch_namespaced::<Lease>(NODE_LEASE_NAMESPACE, watcher::Config::default())
        .await
        .store;
    let pods = informers.all::<Pod>().await.store;
    let mut monitor = Monitor {
        queue: informers.workqueue(QUEUE),
        recorder: Recorder::new(client.clone(), COMPONENT, None),
        client,
        settings: settings.clone(),
        probes: HashMap::new(),
        limiter: ZoneLimiter::new(settings.node_eviction_rate),
    };
    let caches = Caches {
        nodes,
        leases,
        pods,
    };
    monitor.forever(caches).await;
}

struct Caches {
    nodes: Store<Node>,
    leases: Store<Lease>,
    pods: Store<Pod>,
}

/// The controller's memory between passes: what it saw of each node's
/// heartbeat, and the eviction rate limiter.
struct Monitor {
    /// Each pass queues every node, and each node's monitoring is its
    /// processing.
    queue: QueueMetrics,
    client: Client,
    /// Events as `node-controller`.
    recorder: Recorder,
    settings: Arc<Settings>,
    probes: HashMap<String, Probe>,
    limiter: ZoneLimiter,
}

impl Monitor {
    async fn forever(&mut self, caches: Caches) {
        loop {
            let nodes = caches.nodes.state();
            self.probes
                .retain(|name, _| nodes.iter().any(|n| n.name_any() == *name));
            let keys: Vec<String> = nodes.iter().map(|n| n.name_any()).collect();
            for key in &keys {
                self.queue.add(key);
            }
            for (node, key) in nodes.into_iter().zip(keys) {
                self.queue.start(&key);
                let lease = caches
                    .leases
                    .get(&ObjectRef::new(&node.name_any()).within(NODE_LEASE_NAMESPACE));
                if let Err(err) = self.monitor(&node, lease.as_deref(), &caches.pods).await {
                    tracing::warn!(error = %err, "node lifecycle pass failed");
                }
                self.queue.done(&key);
            }
            tokio::time::sleep(self.settings.node_monitor_period).await;
        }
    }

    /// One node: its health, taints and pods.
    async fn monitor(
        &mut self,
        node: &Node,
        lease: Option<&Lease>,
        pods: &Store<Pod>,
    ) -> Result<(), Error> {
        let name = node.name_any();
        let now = Timestamp::now();
        let heartbeat = health::heartbeat(node, lease);
        let seen = self.probes.get(&name).copied();
        if seen.is_none() {
            self.recorder.record(events::registered_node(node));
        }
        let probe = health::observe(seen, node, heartbeat, now);
        self.probes.insert(name.clone(), probe);
        let api = Api::<Node>::all(self.client.clone());
        let failed = |action: &'static str| {
            let node = name.clone();
            move |source| Error::Api {
                node,
                action,
                source,
            }
        };
        let mut node = node.clone();
        let silent = health::is_silent(
            &node,
            &probe,
            now,
            self.settings.node_monitor_grace_period,
            self.settings.node_startup_grace_period,
        );
        if silent {
            if let Some(conditions) = health::unknown_conditions(&node, now) {
                let was_ready = health::ready_status(&node) == Some("True");
                node.status.get_or_insert_with(Default::default).conditions = Some(conditions);
                node.metadata.managed_fields = None;
                node = api
                    .replace_status(&name, &PostParams::default(), &node)
                    .await
                    .map_err(failed("set unknown conditions of"))?;
                tracing::info!(node = %name, "node stopped posting status; its conditions are Unknown");
                if was_ready {
                    let changed = events::node_status_change(&node, "NodeNotReady");
                    self.recorder.record(changed);
                }
            }
        }
        // A node that has not posted its Ready condition yet (just
        // registered) is left alone until it does or its startup grace
        // runs out, as Kubernetes does.
        let Some(ready) = health::ready_status(&node).map(str::to_string) else {
            return Ok(());
        };
        self.taint(&api, &mut node, &ready, now)
            .await
            .map_err(failed("taint"))?;
        if ready != "True" {
            mark_pods_not_ready(&self.client, &self.recorder, &name, &pods.state(), now).await;
        }
        Ok(())
    }

    /// Writes the taints the node's Ready status calls for, when they
    /// differ from its own.
    async fn taint(
        &mut self,
        api: &Api<Node>,
        node: &mut Node,
        ready: &str,
        now: Timestamp,
    ) -> Result<(), kube::Error> {
        let current = node
            .spec
            .as_ref()
            .and_then(|s| s.taints.clone())
            .unwrap_or_default();
        let add_no_execute = match taints::no_execute_need(&current, ready) {
            NoExecute::Steady => false,
            NoExecute::Swap => true,
            NoExecute::Add => self.limiter.try_take(&ratelimit::zone_of(node), now),
        };
        let next = taints::reconcile(&current, ready, add_no_execute, now);
        if next == current {
            return Ok(());
        }
        let name = node.name_any();
        node.spec.get_or_insert_with(Default::default).taints =
            (!next.is_empty()).then_some(next.clone());
        node.metadata.managed_fields = None;
        *node = api.replace(&name, &PostParams::default(), node).await?;
        let keys: Vec<String> = next
            .iter()
            .map(|t| format!("{}:{}", t.key, t.effect))
            .collect();
        tracing::info!(node = %name, ready, taints = ?keys, "node taints updated");
        Ok(())
    }
}

/// The pods bound to `node` whose Ready condition is True.
pub fn ready_pods_on<'a>(node: &str, pods: &'a [Arc<Pod>]) -> Vec<&'a Arc<Pod>> {
    pods.iter()
        .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node))
        .filter(|p| crate::common::pods::is_ready(p))
        .collect()
}

/// Sets the Ready condition of the pods of a not-ready node False
/// (`MarkPodsNotReady`), so that Services and ReplicaSets stop counting
/// them.
async fn mark_pods_not_ready(
    client: &Client,
    recorder: &Recorder,
    node: &str,
    pods: &[Arc<Pod>],
    now: Timestamp,
) {
    for pod in ready_pods_on(node, pods) {
        let namespace = pod.namespace().unwrap_or_default();
        let api = Api::<Pod>::namespaced(client.clone(), &namespace);
        let patch = serde_json::json!({"status": {"conditions": [{
            "type": "Ready",
            "status": "False",
            "lastTransitionTime": now.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
        }]}});
        match api
            .patch_status(
                &pod.name_any(),
                &PatchParams::default(),
                &Patch::Strategic(&patch),
            )
            .await
        {
            Ok(_) => {
                tracing::info!(pod = %format!("{namespace}/{}", pod.name_any()), node, "pod marked not ready");
                recorder.record(events::pod_node_not_ready(pod));
            }
            Err(err) => {
                tracing::warn!(pod = %pod.name_any(), node, error = %err, "marking pod not ready failed")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fixtures::pod;

    #[test]
    fn only_ready_pods_of_the_node_are_marked() {
        let mut not_ready = pod("b", "down", vec![]);
        not_ready
            .status
            .as_mut()
            .unwrap()
            .conditions
            .as_mut()
            .unwrap()[0]
            .status = "False".into();
        let pods: Vec<Arc<Pod>> = vec![pod("a", "down", vec![]), not_ready, pod("c", "up", vec![])]
            .into_iter()
            .map(Arc::new)
            .collect();
        let names: Vec<String> = ready_pods_on("down", &pods)
            .iter()
            .map(|p| p.name_any())
            .collect();
        assert_eq!(names, ["a"]);
    }
}
