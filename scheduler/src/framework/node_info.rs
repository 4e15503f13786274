//! What the scheduler knows of a node and of the pods on it: the cache
//! keeps one `NodeInfo` per node, and each scheduling cycle works on a
//! snapshot of them.

use std::collections::HashMap;
use std::sync::Arc;

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{
    Node, PersistentVolumeClaim, Pod, ReplicationController, Service, Taint,
};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;

use super::resources::{pod_requests, Resources};

/// A host port a container asks for: (hostIP, protocol, port).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct HostPort {
    pub ip: String,
    pub protocol: String,
    pub port: i32,
}

impl HostPort {
    /// Two host ports clash when protocol and port are equal and either IP
    /// is the wildcard or both are the same.
    pub fn conflicts(&self, other: &HostPort) -> bool {
        let wildcard = |ip: &str| ip.is_empty() || ip == "0.0.0.0";
        self.port == other.port
            && self.protocol == other.protocol
            && (wildcard(&self.ip) || wildcard(&other.ip) || self.ip == other.ip)
    }
}

/// A pod with what the scheduler computes from it once.
#[derive(Debug, Clone)]
pub struct PodInfo {
    pub pod: Arc<Pod>,
    /// `namespace/name`.
    pub key: String,
    pub requests: Resources,
    /// Requests with the non-zero defaults, for scoring.
    pub non_zero: Resources,
    pub host_ports: Vec<HostPort>,
}

impl PodInfo {
    pub fn new(pod: Arc<Pod>) -> PodInfo {
        let key = pod_key(&pod);
        let host_ports = pod
            .spec
            .iter()
            .flat_map(|s| {
                s.containers
                    .iter()
                    .chain(s.init_containers.iter().flatten())
            })
            .flat_map(|c| c.ports.iter().flatten())
            .filter(|p| p.host_port.is_some_and(|h| h > 0))
            .map(|p| HostPort {
                ip: p.host_ip.clone().unwrap_or_default(),
                protocol: p.protocol.clone().unwrap_or_else(|| "TCP".into()),
                port: p.host_port.unwrap_or_default(),
            })
            .collect();
        PodInfo {
            requests: pod_requests(&pod, false),
            non_zero: pod_requests(&pod, true),
            host_ports,
            key,
            pod,
        }
    }

    pub fn name(&self) -> &str {
        self.pod.metadata.name.as_deref().unwrap_or_default()
    }

    pub fn namespace(&self) -> &str {
        self.pod.metadata.namespace.as_deref().unwrap_or("default")
    }

    pub fn labels(&self) -> &BTreeMap<String, String> {
        static EMPTY: BTreeMap<String, String> = std::collections::BTreeMap::new();
        self.pod.metadata.labels.as_ref().unwrap_or(&EMPTY)
    }

    pub fn priority(&self) -> i32 {
        self.pod.spec.as_ref().and_then(|s| s.priority).unwrap_or(0)
    }

    pub fn node_name(&self) -> Option<&str> {
        self.pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .filter(|n| !n.is_empty())
    }

    /// Whether the pod has (anti-)affinity terms to other pods.
    pub fn has_pod_affinity(&self) -> bool {
        let affinity = self.pod.spec.as_ref().and_then(|s| s.affinity.as_ref());
        affinity.is_some_and(|a| a.pod_affinity.is_some() || a.pod_anti_affinity.is_some())
    }

    pub fn has_required_anti_affinity(&self) -> bool {
        self.pod
            .spec
            .as_ref()
            .and_then(|s| s.affinity.as_ref())
            .and_then(|a| a.pod_anti_affinity.as_ref())
            .and_then(|a| {
                a.required_during_scheduling_ignored_during_execution
                    .as_ref()
            })
            .is_some_and(|terms| !terms.is_empty())
    }
}

pub fn pod_key(pod: &Pod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or("default"),
        pod.metadata.name.as_deref().unwrap_or_default()
    )
}

/// A node and the pods on it (bound or assumed).
#[derive(Debug, Clone)]
pub struct NodeInfo {
    pub node: Arc<Node>,
    /// The node's name, shared with the scores of every cycle that
    /// scores it (no copy of it per node per pod).
    name: Arc<str>,
    pub pods: Vec<Arc<PodInfo>>,
    /// Sum of the pods' requests.
    pub requested: Resources,
    /// Sum with the non-zero defaults.
    pub non_zero_requested: Resources,
    pub allocatable: Resources,
    pub used_ports: Vec<HostPort>,
    /// Pods here with pod (anti-)affinity terms, and with required
    /// anti-affinity terms: InterPodAffinity only looks at those.
    pub pods_with_affinity: usize,
    pub pods_with_required_anti_affinity: usize,
    /// Image name → size in bytes, from `status.images`.
    pub images: HashMap<String, i64>,
    /// `spec.unschedulable` and `spec.taints`, then the NoSchedule taints
    /// its conditions stand for: kept here so that filtering thousands of
    /// nodes per pod reads only their NodeInfo, not each Node object.
    pub unschedulable: bool,
    taints: Vec<Taint>,
    pub condition_taints: Vec<Taint>,
    /// The node's labels in one buffer, for [`NodeInfo::label`].
    flat_labels: FlatLabels,
    /// Bumped on every change, so snapshots can tell what moved.
    pub generation: u64,
}

/// A node's labels laid out in one buffer. Filters look up a label (a
/// topology key) of each of the hundreds of nodes a pod visits; in the
/// Node's `BTreeMap<String, String>` that reads every key passed on the
/// way from its own allocation, a cache miss apiece, where here the keys'
/// lengths are compared first and only a key of the right length is read,
/// from the one buffer.
#[derive(Debug, Clone, Default, PartialEq)]
struct FlatLabels {
    text: String,
    /// Key start, key end, value end (the value starts at the key's end);
    /// kept in the NodeInfo itself for the usual dozen labels or fewer.
    spans: smallvec::SmallVec<[(u32, u32, u32); 12]>,
}

impl FlatLabels {
    fn new(labels: Option<&BTreeMap<String, String>>) -> FlatLabels {
        let mut flat = FlatLabels::default();
        for (key, value) in labels.into_iter().flatten() {
            let offset = |len: usize| u32::try_from(len).ok();
            let start = offset(flat.text.len());
            flat.text.push_str(key);
            let key_end = offset(flat.text.len());
            flat.text.push_str(value);
            // A Node's labels come within the API's request size limit,
            // far below 4 GiB; past that, the rest would not be kept.
            let (Some(start), Some(key_end), Some(end)) = (start, key_end, offset(flat.text.len()))
            else {
                break;
            };
            flat.spans.push((start, key_end, end));
        }
        flat
    }

    fn get(&self, key: &str) -> Option<&str> {
        self.spans
            .iter()
            .map(|&(start, key_end, end)| (start as usize, key_end as usize, end as usize))
            .find(|&(start, key_end, _)| {
                key_end - start == key.len() && &self.text[start..key_end] == key
            })
            .map(|(_, key_end, end)| &self.text[key_end..end])
    }
}

impl NodeInfo {
    pub fn new(node: Arc<Node>) -> NodeInfo {
        let mut info = NodeInfo {
            node: node.clone(),
            name: Arc::from(""),
            pods: Vec::new(),
            requested: Resources::default(),
            non_zero_requested: Resources::default(),
            allocatable: Resources::default(),
            used_ports: Vec::new(),
            pods_with_affinity: 0,
            pods_with_required_anti_affinity: 0,
            images: HashMap::new(),
            unschedulable: false,
            taints: Vec::new(),
            condition_taints: Vec::new(),
            flat_labels: FlatLabels::default(),
            generation: 0,
        };
        info.set_node(node);
        info
    }

    /// Replaces the Node object (allocatable, images, labels, taints).
    pub fn set_node(&mut self, node: Arc<Node>) {
        let status = node.status.as_ref();
        self.allocatable = status
            .and_then(|s| s.allocatable.as_ref().or(s.capacity.as_ref()))
            .map(Resources::from_list)
            .unwrap_or_default();
        self.images = status
            .and_then(|s| s.images.as_ref())
            .into_iter()
            .flatten()
            .flat_map(|image| {
                let size = image.size_bytes.unwrap_or(0);
                image
                    .names
                    .iter()
                    .flatten()
                    .map(move |name| (normalized_image(name), size))
            })
            .collect();
        let spec = node.spec.as_ref();
        self.unschedulable = spec.and_then(|s| s.unschedulable).unwrap_or(false);
        self.taints = spec.and_then(|s| s.taints.clone()).unwrap_or_default();
        self.condition_taints =
            crate::plugins::taint_toleration::condition_taints(&node, &self.taints);
        self.flat_labels = FlatLabels::new(node.metadata.labels.as_ref());
        let name = node.metadata.name.as_deref().unwrap_or_default();
        if self.name.as_ref() != name {
            self.name = Arc::from(name);
        }
        self.node = node;
        self.generation += 1;
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Asks the CPU to start loading the parts of this NodeInfo the
    /// filters read first (its flags, amounts, taints and labels), without waiting
    /// for them. A pod's filters visit hundreds of nodes, each NodeInfo
    /// its own allocation and, on a big cluster, seldom still in cache:
    /// loaded a few nodes ahead, it is there by the time its turn comes.
    pub fn prefetch(&self) {
        prefetch(&self.unschedulable);
        prefetch(&self.allocatable);
        prefetch(&self.requested);
        prefetch(&self.non_zero_requested);
        prefetch(&self.taints);
        prefetch(&self.condition_taints);
        prefetch(&self.flat_labels);
    }

    /// [`NodeInfo::prefetch`] for the labels' text, its own allocation
    /// (the first lines of it, where the well-known labels are): called a
    /// few nodes after `prefetch`, when the NodeInfo that points to it is
    /// in cache.
    pub fn prefetch_labels(&self) {
        let text = self.flat_labels.text.as_bytes();
        for line in text.chunks(64).take(4) {
            prefetch(line);
        }
    }

    /// [`NodeInfo::prefetch`] for the name's own allocation, which
    /// [`NodeInfo::shared_name`] counts a reference in.
    pub fn prefetch_name(&self) {
        prefetch(&*self.name);
    }

    /// The name, shared.
    pub fn shared_name(&self) -> Arc<str> {
        self.name.clone()
    }

    pub fn labels(&self) -> &BTreeMap<String, String> {
        static EMPTY: BTreeMap<String, String> = std::collections::BTreeMap::new();
        self.node.metadata.labels.as_ref().unwrap_or(&EMPTY)
    }

    /// The value of one label, found faster than through [`Self::labels`]
    /// (see `FlatLabels`).
    pub fn label(&self, key: &str) -> Option<&str> {
        self.flat_labels.get(key)
    }

    pub fn taints(&self) -> &[Taint] {
        &self.taints
    }

    pub fn add_pod(&mut self, pod: Arc<PodInfo>) {
        self.requested.add(&pod.requests);
        self.non_zero_requested.add(&pod.non_zero);
        self.used_ports.extend(pod.host_ports.iter().cloned());
        if pod.has_pod_affinity() {
            self.pods_with_affinity += 1;
        }
        if pod.has_required_anti_affinity() {
            self.pods_with_required_anti_affinity += 1;
        }
        self.pods.push(pod);
        self.generation += 1;
    }

    /// Removes the pod with this key; false if it was not here.
    pub fn remove_pod(&mut self, key: &str) -> bool {
        let Some(at) = self.pods.iter().position(|p| p.key == key) else {
            return false;
        };
        let pod = self.pods.swap_remove(at);
        self.requested.sub(&pod.requests);
        self.non_zero_requested.sub(&pod.non_zero);
        for port in &pod.host_ports {
            if let Some(i) = self.used_ports.iter().position(|p| p == port) {
                self.used_ports.swap_remove(i);
            }
        }
        if pod.has_pod_affinity() {
            self.pods_with_affinity -= 1;
        }
        if pod.has_required_anti_affinity() {
            self.pods_with_required_anti_affinity -= 1;
        }
        self.generation += 1;
        true
    }
}

/// `nginx` and `docker.io/library/nginx:latest` are one image, as
/// ImageLocality compares them.
pub fn normalized_image(name: &str) -> String {
    let name = name.split('@').next().unwrap_or(name);
    let last = name.rsplit('/').next().unwrap_or(name);
    let tagged = last.contains(':');
    let mut out = match name.split('/').count() {
        1 => format!("docker.io/library/{name}"),
        _ if !name
            .split('/')
            .next()
            .is_some_and(|h| h.contains('.') || h.contains(':') || h == "localhost") =>
        {
            format!("docker.io/{name}")
        }
        _ => name.to_string(),
    };
    if !tagged {
        out.push_str(":latest");
    }
    out
}

/// The other objects plugins read: namespaces (namespaceSelector),
/// PodDisruptionBudgets (preemption), the workloads and services that
/// select pods (default spreading), and claims (volume plugins). The
/// cache keeps it; a snapshot shares it.
#[derive(Debug, Clone, Default)]
pub struct ClusterObjects {
    /// Namespace name → its labels.
    pub namespaces: HashMap<String, BTreeMap<String, String>>,
    pub pdbs: Vec<Arc<PodDisruptionBudget>>,
    pub services: Vec<Arc<Service>>,
    pub replica_sets: Vec<Arc<ReplicaSet>>,
    pub stateful_sets: Vec<Arc<StatefulSet>>,
    pub replication_controllers: Vec<Arc<ReplicationController>>,
    /// `namespace/name` → claim.
    pub claims: HashMap<String, Arc<PersistentVolumeClaim>>,
}

/// The nodes of one scheduling cycle, in a stable order.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    pub nodes: Vec<Arc<NodeInfo>>,
    index: HashMap<String, usize>,
    /// Image → how many nodes hold it, kept as nodes are replaced:
    /// ImageLocality reads it for every pod, where counting over every
    /// node each time cost a tenth of the scheduler's time at 5 000 nodes.
    images: HashMap<String, usize>,
    pub cluster: Arc<ClusterObjects>,
}

impl Snapshot {
    pub fn new(nodes: Vec<Arc<NodeInfo>>, cluster: Arc<ClusterObjects>) -> Snapshot {
        let index = nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.name().to_string(), i))
            .collect();
        let mut snapshot = Snapshot {
            nodes: Vec::new(),
            index,
            images: HashMap::new(),
            cluster,
        };
        for node in &nodes {
            snapshot.count_images(node, true);
        }
        snapshot.nodes = nodes;
        snapshot
    }

    pub fn get(&self, name: &str) -> Option<&Arc<NodeInfo>> {
        self.index.get(name).map(|&i| &self.nodes[i])
    }

    /// How many nodes hold `image` (a normalized name).
    pub fn nodes_with_image(&self, image: &str) -> usize {
        self.images.get(image).copied().unwrap_or(0)
    }

    fn count_images(&mut self, node: &NodeInfo, add: bool) {
        for image in node.images.keys() {
            if add {
                *self.images.entry(image.clone()).or_default() += 1;
            } else if let Some(count) = self.images.get_mut(image) {
                *count = count.saturating_sub(1);
                if *count == 0 {
                    self.images.remove(image);
                }
            }
        }
    }

    /// Replaces one node's info (preemption simulates removals on a copy).
    pub fn replace(&mut self, info: Arc<NodeInfo>) {
        self.count_images(&info, true);
        match self.index.get(info.name()) {
            Some(&i) => {
                let old = std::mem::replace(&mut self.nodes[i], info);
                self.count_images(&old, false);
            }
            None => {
                self.index.insert(info.name().to_string(), self.nodes.len());
                self.nodes.push(info);
            }
        }
    }
}

/// A hint to load the cache line that holds `value`.
#[inline(always)]
fn prefetch<T: ?Sized>(value: &T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is only a hint: it reads nothing the program can
    // see and cannot fault, whatever the address (here a live reference);
    // the SSE it needs is part of every x86_64 CPU.
    unsafe {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        _mm_prefetch::<_MM_HINT_T0>((value as *const T).cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = value;
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn images_are_compared_by_their_full_names() {
        assert_eq!(normalized_image("nginx"), "docker.io/library/nginx:latest");
        assert_eq!(
            normalized_image("nginx:1.25"),
            "docker.io/library/nginx:1.25"
        );
        assert_eq!(normalized_image("me/app"), "docker.io/me/app:latest");
        assert_eq!(
            normalized_image("registry.k8s.io/pause:3.10"),
            "registry.k8s.io/pause:3.10"
        );
        assert_eq!(
            normalized_image("localhost:5000/x"),
            "localhost:5000/x:latest"
        );
    }

    #[test]
    fn pods_add_and_remove_their_requests_and_ports() {
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": "n1"},
            "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"}},
        }))
        .unwrap();
        let mut info = NodeInfo::new(Arc::new(node));
        assert_eq!(info.allocatable.milli_cpu, 4000);
        assert_eq!(info.allocatable.allowed_pods, 110);
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns"},
            "spec": {"containers": [{"name": "c", "image": "i",
                "ports": [{"containerPort": 80, "hostPort": 8080}],
                "resources": {"requests": {"cpu": "1"}}}]},
        }))
        .unwrap();
        let pod = Arc::new(PodInfo::new(Arc::new(pod)));
        info.add_pod(pod.clone());
        assert_eq!(info.requested.milli_cpu, 1000);
        assert_eq!(info.used_ports.len(), 1);
        assert!(info.used_ports[0].conflicts(&HostPort {
            ip: "10.0.0.1".into(),
            protocol: "TCP".into(),
            port: 8080
        }));
        assert!(info.remove_pod("ns/p"));
        assert!(!info.remove_pod("ns/p"));
        assert_eq!(info.requested, Resources::default());
        assert!(info.used_ports.is_empty());
    }

    /// A label looked up by `label` is the one `labels` holds, for keys
    /// of equal length, empty values and missing keys, and follows a
    /// change of the node.
    #[test]
    fn a_label_is_found_as_in_the_node_labels() {
        let node = |labels: serde_json::Value| -> Arc<Node> {
            Arc::new(
                serde_json::from_value(json!({"metadata": {"name": "n1", "labels": labels}}))
                    .unwrap(),
            )
        };
        let mut info = NodeInfo::new(node(json!({
            "topology.kubernetes.io/zone": "z1",
            "topology.kubernetes.io/zonf": "z2",
            "kubernetes.io/hostname": "n1",
            "empty": "",
            "zone": "short",
        })));
        for key in [
            "topology.kubernetes.io/zone",
            "topology.kubernetes.io/zonf",
            "kubernetes.io/hostname",
            "empty",
            "zone",
            "missing",
            "",
            "topology.kubernetes.io/zon",
        ] {
            assert_eq!(
                info.label(key),
                info.labels().get(key).map(String::as_str),
                "{key}"
            );
        }
        assert_eq!(info.label("topology.kubernetes.io/zone"), Some("z1"));
        assert_eq!(info.label("empty"), Some(""));
        info.set_node(node(json!({"zone": "moved"})));
        assert_eq!(info.label("zone"), Some("moved"));
        assert_eq!(info.label("topology.kubernetes.io/zone"), None);
        let bare: Node = serde_json::from_value(json!({"metadata": {"name": "n2"}})).unwrap();
        assert_eq!(NodeInfo::new(Arc::new(bare)).label("zone"), None);
    }
}
