//! The scheduler's cache: every node with the pods on it, from the watches
//! of nodes and bound pods, plus the pods it has *assumed* onto a node
//! itself — so the next decision sees them before their binding is
//! confirmed — and forgets if the binding fails. A scheduling cycle works
//! on a [`Snapshot`] that is brought up to date from the nodes that
//! changed, not rebuilt.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod};

use crate::framework::{ClusterObjects, NodeInfo, PodInfo, Snapshot};

#[derive(Debug, Clone)]
struct PodState {
    pod: Arc<PodInfo>,
    node: String,
    /// Assumed by this scheduler, not yet seen bound in a watch event.
    assumed: bool,
}

#[derive(Default)]
pub struct Cache {
    nodes: HashMap<String, NodeInfo>,
    /// Pods whose node has no Node object (yet): kept until it appears.
    pods: HashMap<String, PodState>,
    /// Nodes changed since the last snapshot update.
    dirty: HashSet<String>,
    /// Node names in the order snapshots list them.
    order: Vec<String>,
    order_changed: bool,
    pub cluster: Arc<ClusterObjects>,
    cluster_changed: bool,
}

impl Cache {
    pub fn new() -> Cache {
        Cache::default()
    }

    /// A Node was added or changed.
    pub fn set_node(&mut self, node: Node) {
        let name = node.metadata.name.clone().unwrap_or_default();
        let node = Arc::new(node);
        match self.nodes.get_mut(&name) {
            Some(info) => info.set_node(node),
            None => {
                let mut info = NodeInfo::new(node);
                for state in self.pods.values().filter(|s| s.node == name) {
                    info.add_pod(state.pod.clone());
                }
                self.nodes.insert(name.clone(), info);
                self.order.push(name.clone());
                self.order_changed = true;
            }
        }
        self.dirty.insert(name);
    }

    pub fn remove_node(&mut self, name: &str) {
        if self.nodes.remove(name).is_some() {
            self.order.retain(|n| n != name);
            self.order_changed = true;
            self.dirty.insert(name.to_string());
        }
    }

    /// Keeps only the nodes named (after a relist).
    pub fn retain_nodes(&mut self, names: &HashSet<String>) {
        let gone: Vec<String> = self
            .nodes
            .keys()
            .filter(|n| !names.contains(*n))
            .cloned()
            .collect();
        for name in gone {
            self.remove_node(&name);
        }
    }

    /// A bound pod seen in a watch (added or changed). A pod that has
    /// finished (Succeeded/Failed) no longer holds its node's resources.
    pub fn set_pod(&mut self, pod: Pod) {
        let finished = matches!(
            pod.status.as_ref().and_then(|s| s.phase.as_deref()),
            Some("Succeeded" | "Failed")
        );
        let node = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .unwrap_or_default();
        let info = PodInfo::new(Arc::new(pod));
        if node.is_empty() || finished {
            self.remove_pod(&info.key);
            return;
        }
        self.place(Arc::new(info), node, false);
    }

    pub fn remove_pod(&mut self, key: &str) {
        if let Some(state) = self.pods.remove(key) {
            if let Some(info) = self.nodes.get_mut(&state.node) {
                info.remove_pod(key);
                self.dirty.insert(state.node);
            }
        }
    }

    /// Keeps only the bound pods named (after a relist); assumed pods stay.
    pub fn retain_pods(&mut self, keys: &HashSet<String>) {
        let gone: Vec<String> = self
            .pods
            .iter()
            .filter(|(k, s)| !s.assumed && !keys.contains(*k))
            .map(|(k, _)| k.clone())
            .collect();
        for key in gone {
            self.remove_pod(&key);
        }
    }

    /// Puts `pod` on `node` at once, before its binding.
    pub fn assume(&mut self, pod: Arc<PodInfo>, node: &str) {
        self.place(pod, node.to_string(), true);
    }

    /// The binding failed: the assumed pod leaves its node.
    pub fn forget(&mut self, key: &str) {
        if self.pods.get(key).is_some_and(|s| s.assumed) {
            self.remove_pod(key);
        }
    }

    pub fn is_assumed(&self, key: &str) -> bool {
        self.pods.get(key).is_some_and(|s| s.assumed)
    }

    /// The node a pod is on (bound or assumed).
    pub fn node_of(&self, key: &str) -> Option<&str> {
        self.pods.get(key).map(|s| s.node.as_str())
    }

    fn place(&mut self, pod: Arc<PodInfo>, node: String, assumed: bool) {
        let key = pod.key.clone();
        if let Some(old) = self.pods.remove(&key) {
            if let Some(info) = self.nodes.get_mut(&old.node) {
                info.remove_pod(&key);
                self.dirty.insert(old.node);
            }
        }
        if let Some(info) = self.nodes.get_mut(&node) {
            info.add_pod(pod.clone());
            self.dirty.insert(node.clone());
        }
        self.pods.insert(key, PodState { pod, node, assumed });
    }

    /// Changes the cluster objects plugins read.
    pub fn update_cluster(&mut self, change: impl FnOnce(&mut ClusterObjects)) {
        change(Arc::make_mut(&mut self.cluster));
        self.cluster_changed = true;
    }

    /// Brings `snapshot` up to date: only nodes changed since are copied.
    pub fn update_snapshot(&mut self, snapshot: &mut Snapshot) {
        if self.order_changed || snapshot.nodes.len() != self.nodes.len() {
            let nodes = self
                .order
                .iter()
                .filter_map(|n| self.nodes.get(n))
                .map(|info| Arc::new(info.clone()))
                .collect();
            *snapshot = Snapshot::new(nodes, self.cluster.clone());
            self.order_changed = false;
            self.cluster_changed = false;
            self.dirty.clear();
            return;
        }
        for name in self.dirty.drain() {
            if let Some(info) = self.nodes.get(&name) {
                let stale = snapshot
                    .get(&name)
                    .is_none_or(|s| s.generation != info.generation);
                if stale {
                    snapshot.replace(Arc::new(info.clone()));
                }
            }
        }
        if self.cluster_changed {
            snapshot.cluster = self.cluster.clone();
            self.cluster_changed = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(name: &str) -> Node {
        serde_json::from_value(json!({
            "metadata": {"name": name},
            "status": {"allocatable": {"cpu": "2", "memory": "4Gi", "pods": "10"}},
        }))
        .unwrap()
    }

    fn pod(name: &str, node: Option<&str>, phase: &str) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "i",
                     "resources": {"requests": {"cpu": "500m"}}}]},
            "status": {"phase": phase},
        }))
        .unwrap()
    }

    fn cpu(snapshot: &Snapshot, node: &str) -> i64 {
        snapshot.get(node).unwrap().requested.milli_cpu
    }

    #[test]
    fn bound_and_assumed_pods_count_on_their_nodes() {
        let mut cache = Cache::new();
        cache.set_node(node("n1"));
        cache.set_node(node("n2"));
        cache.set_pod(pod("a", Some("n1"), "Running"));
        let mut snapshot = Snapshot::default();
        cache.update_snapshot(&mut snapshot);
        assert_eq!((cpu(&snapshot, "n1"), cpu(&snapshot, "n2")), (500, 0));

        let b = Arc::new(PodInfo::new(Arc::new(pod("b", None, "Pending"))));
        cache.assume(b.clone(), "n2");
        let before = snapshot.get("n1").unwrap().clone();
        cache.update_snapshot(&mut snapshot);
        assert_eq!(cpu(&snapshot, "n2"), 500, "the next decision sees it");
        assert!(
            Arc::ptr_eq(&before, snapshot.get("n1").unwrap()),
            "n1 not copied"
        );
        cache.forget("default/b");
        cache.update_snapshot(&mut snapshot);
        assert_eq!(cpu(&snapshot, "n2"), 0);

        // Assumed, then confirmed by the watch: counted once.
        cache.assume(b, "n2");
        cache.set_pod(pod("b", Some("n2"), "Pending"));
        assert!(!cache.is_assumed("default/b"));
        cache.update_snapshot(&mut snapshot);
        assert_eq!(cpu(&snapshot, "n2"), 500);
    }

    #[test]
    fn finished_and_deleted_pods_free_their_node_and_pods_wait_for_their_node() {
        let mut cache = Cache::new();
        cache.set_pod(pod("early", Some("n3"), "Running"));
        cache.set_node(node("n1"));
        cache.set_pod(pod("a", Some("n1"), "Running"));
        cache.set_pod(pod("a", Some("n1"), "Succeeded"));
        let mut snapshot = Snapshot::default();
        cache.update_snapshot(&mut snapshot);
        assert_eq!(cpu(&snapshot, "n1"), 0);
        cache.set_node(node("n3"));
        cache.update_snapshot(&mut snapshot);
        assert_eq!(
            cpu(&snapshot, "n3"),
            500,
            "a pod seen before its node counts"
        );
        cache.remove_node("n1");
        cache.update_snapshot(&mut snapshot);
        assert!(snapshot.get("n1").is_none());
        assert_eq!(snapshot.nodes.len(), 1);
        cache.retain_pods(&HashSet::new());
        cache.update_snapshot(&mut snapshot);
        assert_eq!(cpu(&snapshot, "n3"), 0);
    }
}
