//! Matching pods per topology domain for one set of constraints, kept
//! between scheduling cycles: pods of one workload share their
//! constraints, and between two cycles only a node or two change (another
//! `Arc<NodeInfo>` at that position of the snapshot), so a cycle re-counts
//! those nodes instead of every pod of the cluster.

use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{NodeSelector, Pod, Toleration};

use super::constraints::{count_matching, has_all_keys, Constraint, Inclusion, NodeInclusion};
use crate::framework::NodeInfo;

/// How many memos a plugin keeps (one per recent workload shape).
const KEPT: usize = 4;

/// One domain: its matching pods, and its nodes (it exists while it has
/// a node, even with no pod).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Domain {
    pub pods: i64,
    pub nodes: i64,
}

/// Per constraint (same index): topology value → domain.
pub type Domains = Vec<HashMap<String, Domain, BuildHasherDefault<Fnv>>>;

/// FNV-1a, for the domains' keys: short topology values (a zone, a
/// hostname), one looked up per node a pod visits (all 5 000 of a big
/// cluster under a hard spread), where SipHash's rounds cost more than
/// the rest of the check. The keys are node labels, which only those
/// who may write Nodes set.
pub struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Fnv {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
}

impl Hasher for Fnv {
    fn write(&mut self, bytes: &[u8]) {
        for byte in bytes {
            self.0 = (self.0 ^ u64::from(*byte)).wrapping_mul(0x0100_0000_01b3);
        }
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// A pod's nodeSelector and required node affinity.
pub type NodeAffinitySpec = (Option<BTreeMap<String, String>>, Option<NodeSelector>);

/// What the counts depend on besides the nodes.
#[derive(Debug, Clone, PartialEq)]
pub struct MemoKey {
    pub constraints: Vec<Constraint>,
    pub namespace: String,
    /// The pod's nodeSelector and required node affinity, if a constraint
    /// honors them.
    pub node_affinity: Option<NodeAffinitySpec>,
    /// The pod's tolerations, if a constraint honors taints.
    pub tolerations: Option<Vec<Toleration>>,
    /// Nodes without every topology key are no domain of any constraint
    /// (else they are the domain "" of the constraints they lack).
    pub require_all: bool,
}

impl MemoKey {
    pub fn new(constraints: Vec<Constraint>, pod: &Pod, require_all: bool) -> MemoKey {
        let spec = pod.spec.as_ref();
        let node_affinity = constraints.iter().any(|c| c.honor_node_affinity).then(|| {
            let required = spec
                .and_then(|s| s.affinity.as_ref())
                .and_then(|a| a.node_affinity.as_ref())
                .and_then(|a| {
                    a.required_during_scheduling_ignored_during_execution
                        .clone()
                });
            (spec.and_then(|s| s.node_selector.clone()), required)
        });
        let tolerations = constraints
            .iter()
            .any(|c| c.honor_node_taints)
            .then(|| spec.and_then(|s| s.tolerations.clone()).unwrap_or_default());
        MemoKey {
            constraints,
            namespace: pod
                .metadata
                .namespace
                .clone()
                .unwrap_or_else(|| "default".into()),
            node_affinity,
            tolerations,
            require_all,
        }
    }
}

pub struct DomainCounts {
    key: MemoKey,
    /// The snapshot's nodes as of the last sync, by position.
    nodes: Vec<Arc<NodeInfo>>,
    /// Position × constraint: the node's matching pods, or -1 when the node
    /// is no domain of the constraint.
    per_node: Vec<i64>,
    domains: Arc<Domains>,
}

/// The memos of one plugin, the most recently used first.
#[derive(Default)]
pub struct Memos(Vec<DomainCounts>);

impl Memos {
    /// The domains of `key`'s constraints over `nodes`, for `pod`.
    pub fn domains(&mut self, key: MemoKey, pod: &Pod, nodes: &[Arc<NodeInfo>]) -> Arc<Domains> {
        let at = self.0.iter().position(|m| m.key == key);
        let mut memo = match at {
            Some(at) => self.0.remove(at),
            None => DomainCounts {
                domains: Arc::new(key.constraints.iter().map(|_| HashMap::default()).collect()),
                key,
                nodes: Vec::new(),
                per_node: Vec::new(),
            },
        };
        memo.sync(pod, nodes);
        let domains = memo.domains.clone();
        self.0.insert(0, memo);
        self.0.truncate(KEPT);
        domains
    }
}

impl DomainCounts {
    fn sync(&mut self, pod: &Pod, nodes: &[Arc<NodeInfo>]) {
        let width = self.key.constraints.len();
        let inclusion = Inclusion::of_pod(pod);
        // Constraints often share a selector: count once per node.
        let twins: Vec<Option<usize>> = self
            .key
            .constraints
            .iter()
            .enumerate()
            .map(|(i, c)| (0..i).find(|&j| self.key.constraints[j].selector == c.selector))
            .collect();
        let domains = Arc::make_mut(&mut self.domains);
        let mut counts = vec![-1; width];
        for at in 0..self.nodes.len().max(nodes.len()) {
            let old = self.nodes.get(at);
            let new = nodes.get(at);
            if let (Some(old), Some(new)) = (old, new) {
                if Arc::ptr_eq(old, new) {
                    continue;
                }
            }
            if let Some(old) = old {
                let before = &self.per_node[at * width..(at + 1) * width];
                apply(domains, &self.key, old, before, -1);
            }
            let Some(new) = new else {
                continue;
            };
            self.key.count(&inclusion, &twins, new, &mut counts);
            apply(domains, &self.key, new, &counts, 1);
            match self.nodes.get_mut(at) {
                Some(slot) => {
                    *slot = new.clone();
                    self.per_node[at * width..(at + 1) * width].copy_from_slice(&counts);
                }
                None => {
                    self.nodes.push(new.clone());
                    self.per_node.extend_from_slice(&counts);
                }
            }
        }
        self.nodes.truncate(nodes.len());
        self.per_node.truncate(nodes.len() * width);
    }
}

impl MemoKey {
    /// The node's matching pods per constraint into `out` (-1: no domain).
    fn count(
        &self,
        inclusion: &Inclusion,
        twins: &[Option<usize>],
        node: &NodeInfo,
        out: &mut [i64],
    ) {
        out.fill(-1);
        if self.require_all && !has_all_keys(node.labels(), &self.constraints) {
            return;
        }
        let mut seen = NodeInclusion::default();
        for (i, c) in self.constraints.iter().enumerate() {
            if !inclusion.includes(c, &node.node, &mut seen) {
                continue;
            }
            out[i] = match twins[i].map(|j| out[j]) {
                Some(count) if count >= 0 => count,
                _ => count_matching(&node.pods, &c.selector, &self.namespace),
            };
        }
    }
}

/// Adds (`sign` 1) or takes away (-1) a node's counts to its domains.
fn apply(domains: &mut Domains, key: &MemoKey, node: &NodeInfo, counts: &[i64], sign: i64) {
    let labels = node.labels();
    for ((c, &count), values) in key.constraints.iter().zip(counts).zip(domains.iter_mut()) {
        if count < 0 {
            continue;
        }
        let value = labels.get(&c.topology_key).map_or("", String::as_str);
        let domain = match values.get_mut(value) {
            Some(domain) => domain,
            None => values.entry(value.to_string()).or_default(),
        };
        domain.pods += sign * count;
        domain.nodes += sign;
        if domain.nodes <= 0 {
            values.remove(value);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv_is_fnv_1a() {
        let hash = |text: &str| {
            let mut hasher = Fnv::default();
            hasher.write(text.as_bytes());
            hasher.finish()
        };
        // The published 64-bit FNV-1a test vectors.
        assert_eq!(hash(""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(hash("a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(hash("foobar"), 0x8594_4171_f739_67e8);
    }
}
