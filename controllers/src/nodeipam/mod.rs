//! The node IPAM controller (`nodeipam`, kube-controller-manager's range
//! allocator): gives every Node a `spec.podCIDR` and `spec.podCIDRs` from
//! `--cluster-cidr` (one range per IP family, `--node-cidr-mask-size-ipv4`
//! and `-ipv6` wide), the addresses its kubelet hands to its pods, and takes
//! the range back when the Node is deleted. What Nodes already hold is
//! counted first, so a restarted controller hands out no range twice.

pub mod cidr_set;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use ipnet::IpNet;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Patch, PatchParams};
use kube::runtime::reflector::Store;
use kube::runtime::watcher::Event;
use kube::{Api, Client, ResourceExt};

use crate::common::informers::Informers;
use crate::manager::{Controller, Settings};
use cidr_set::CidrSet;

/// The `nodeipam` controller of the controller-manager.
pub const CONTROLLER: Controller = Controller {
    name: "nodeipam",
    run: |informers, settings| Box::pin(run(informers, settings)),
};

/// The cluster CIDR `skiff` uses unless told otherwise, as kubeadm's
/// examples and flannel do.
pub const DEFAULT_CLUSTER_CIDR: &str = "10.244.0.0/16";

/// How often Nodes still without a range (the patch failed, or every
/// range was taken) are tried again.
const RETRY_PERIOD: Duration = Duration::from_secs(10);

/// The ranges of every IP family of the cluster, and which Node holds
/// which.
#[derive(Debug)]
pub struct Allocator {
    /// One set a family, in `--cluster-cidr`'s order (a Node's podCIDRs
    /// follow it, and podCIDR is the first).
    sets: Vec<CidrSet>,
    by_node: BTreeMap<String, Vec<IpNet>>,
}

/// What a Node needs.
#[derive(Debug, PartialEq, Eq)]
pub enum Decision {
    /// Its ranges are as recorded.
    Nothing,
    /// It needs these ranges written to it.
    Patch(Vec<IpNet>),
    /// No range is free in some family.
    Exhausted,
}

impl Allocator {
    /// From `--cluster-cidr` (one CIDR, or an IPv4 and an IPv6 one) and
    /// the node range sizes of each family.
    pub fn new(cluster_cidrs: &[IpNet], mask_ipv4: u8, mask_ipv6: u8) -> Result<Allocator, String> {
        match cluster_cidrs {
            [] => return Err("--cluster-cidr is empty".to_string()),
            [_] => {}
            [a, b] if matches!(a, IpNet::V4(_)) != matches!(b, IpNet::V4(_)) => {}
            [_, _] => {
                return Err(
                    "--cluster-cidr: two CIDRs must be one IPv4 and one IPv6 (dual-stack)"
                        .to_string(),
                )
            }
            _ => return Err("--cluster-cidr: at most two CIDRs (one a family)".to_string()),
        }
        let sets = cluster_cidrs
            .iter()
            .map(|&cluster| {
                let mask = match cluster {
                    IpNet::V4(_) => mask_ipv4,
                    IpNet::V6(_) => mask_ipv6,
                };
                CidrSet::new(cluster, mask).map_err(|e| format!("--cluster-cidr: {e}"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Allocator {
            sets,
            by_node: BTreeMap::new(),
        })
    }

    /// What Node `name`, holding `pod_cidrs` now, needs. A Node with
    /// ranges keeps them (they are counted as taken where they lie in the
    /// cluster CIDRs); one without gets a range of each family, the same
    /// ones again until its patch is seen.
    pub fn node(&mut self, name: &str, pod_cidrs: &[String]) -> Decision {
        let held: Vec<IpNet> = pod_cidrs.iter().filter_map(|c| c.parse().ok()).collect();
        if !held.is_empty() {
            if self.by_node.get(name) != Some(&held) {
                self.removed(name);
                for &cidr in &held {
                    match self.sets.iter_mut().find(|set| set.holds(cidr)) {
                        Some(set) => {
                            let _ = set.occupy(cidr);
                        }
                        None => tracing::debug!(
                            node = name,
                            %cidr,
                            "the node's pod CIDR lies outside --cluster-cidr; left as it is"
                        ),
                    }
                }
                self.by_node.insert(name.to_string(), held);
            }
            return Decision::Nothing;
        }
        if let Some(pending) = self.by_node.get(name) {
            return Decision::Patch(pending.clone());
        }
        let mut taken = Vec::with_capacity(self.sets.len());
        for set in &mut self.sets {
            match set.allocate() {
                Some(cidr) => taken.push(cidr),
                None => {
                    for (set, &cidr) in self.sets.iter_mut().zip(&taken) {
                        set.release(cidr);
                    }
                    return Decision::Exhausted;
                }
            }
        }
        self.by_node.insert(name.to_string(), taken.clone());
        Decision::Patch(taken)
    }

    /// Node `name` is gone: its ranges are free.
    pub fn removed(&mut self, name: &str) {
        for cidr in self.by_node.remove(name).unwrap_or_default() {
            for set in &mut self.sets {
                set.release(cidr);
            }
        }
    }

    /// Starts again from a full list of the Nodes (name, podCIDRs): what
    /// they hold is taken before any Node without ranges is given one.
    /// The Nodes that need a patch, and those for which no range is free.
    pub fn relisted(&mut self, nodes: &[(String, Vec<String>)]) -> Vec<(String, Decision)> {
        for set in &mut self.sets {
            set.clear();
        }
        self.by_node.clear();
        for (name, cidrs) in nodes.iter().filter(|(_, c)| !c.is_empty()) {
            self.node(name, cidrs);
        }
        nodes
            .iter()
            .filter(|(_, c)| c.is_empty())
            .map(|(name, cidrs)| (name.clone(), self.node(name, cidrs)))
            .collect()
    }

    /// The Node holding (or being given) ranges, for tests and metrics.
    pub fn holders(&self) -> usize {
        self.by_node.len()
    }
}

/// A Node's `spec.podCIDRs`, or its `spec.podCIDR` alone.
fn pod_cidrs(node: &Node) -> Vec<String> {
    let spec = node.spec.as_ref();
    match spec
        .and_then(|s| s.pod_cidrs.clone())
        .filter(|c| !c.is_empty())
    {
        Some(cidrs) => cidrs,
        None => spec
            .and_then(|s| s.pod_cidr.clone())
            .filter(|c| !c.is_empty())
            .into_iter()
            .collect(),
    }
}

/// The merge patch that gives a Node its ranges.
pub fn cidr_patch(cidrs: &[IpNet]) -> serde_json::Value {
    let all: Vec<String> = cidrs.iter().map(|c| c.to_string()).collect();
    serde_json::json!({"spec": {"podCIDR": all[0], "podCIDRs": all}})
}

/// Allocates until aborted.
pub async fn run(informers: Arc<Informers>, settings: Arc<Settings>) {
    if !settings.allocate_node_cidrs {
        tracing::info!("nodeipam: --allocate-node-cidrs is false; nodes get no pod CIDR");
        return;
    }
    let mut allocator = match Allocator::new(
        &settings.cluster_cidrs,
        settings.node_cidr_mask_size_ipv4,
        settings.node_cidr_mask_size_ipv6,
    ) {
        Ok(allocator) => allocator,
        Err(err) => {
            tracing::error!(error = %err, "nodeipam: not allocating");
            return;
        }
    };
    let client = informers.client();
    let (store, mut events) = informers.all::<Node>().await.into_parts();
    let mut writer = Writer::new(client);
    let mut listing: Vec<(String, Vec<String>)> = Vec::new();
    let mut retry = tokio::time::interval(RETRY_PERIOD);
    retry.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            event = events.next() => match event {
                None => return,
                Some(Err(err)) => tracing::warn!(error = %err, "nodeipam: node watch"),
                Some(Ok(Event::Init)) => listing.clear(),
                Some(Ok(Event::InitApply(node))) => listing.push((node.name_any(), pod_cidrs(&node))),
                Some(Ok(Event::InitDone)) => {
                    for (name, decision) in allocator.relisted(&listing) {
                        writer.apply(&mut allocator, &name, decision).await;
                    }
                    listing.clear();
                }
                Some(Ok(Event::Apply(node))) => {
                    let name = node.name_any();
                    let decision = allocator.node(&name, &pod_cidrs(&node));
                    writer.apply(&mut allocator, &name, decision).await;
                }
                Some(Ok(Event::Delete(node))) => {
                    let name = node.name_any();
                    allocator.removed(&name);
                    writer.forget(&name);
                    tracing::info!(node = %name, "nodeipam: released the node's pod CIDRs");
                    // A Node waiting for a free range may have one now.
                    allocate_waiting(&store, &mut allocator, &mut writer).await;
                }
            },
            _ = retry.tick() => allocate_waiting(&store, &mut allocator, &mut writer).await,
        }
    }
}

/// Gives a range to every cached Node that has none yet.
async fn allocate_waiting(store: &Store<Node>, allocator: &mut Allocator, writer: &mut Writer) {
    for node in store.state() {
        let cidrs = pod_cidrs(&node);
        if cidrs.is_empty() {
            let name = node.name_any();
            let decision = allocator.node(&name, &cidrs);
            writer.apply(allocator, &name, decision).await;
        }
    }
}

/// Writes ranges to Nodes, and says once a Node that no range is free for.
struct Writer {
    api: Api<Node>,
    starved: BTreeSet<String>,
}

impl Writer {
    fn new(client: Client) -> Writer {
        Writer {
            api: Api::all(client),
            starved: BTreeSet::new(),
        }
    }

    async fn apply(&mut self, allocator: &mut Allocator, name: &str, decision: Decision) {
        let cidrs = match decision {
            Decision::Nothing => return,
            Decision::Exhausted => {
                if self.starved.insert(name.to_string()) {
                    tracing::warn!(
                        node = name,
                        "nodeipam: no pod CIDR is free for the node (CIDRNotAvailable); tried again as nodes leave"
                    );
                }
                return;
            }
            Decision::Patch(cidrs) => cidrs,
        };
        self.starved.remove(name);
        let patch = cidr_patch(&cidrs);
        match self
            .api
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => tracing::info!(node = name, cidrs = ?cidrs, "nodeipam: pod CIDRs allocated"),
            Err(kube::Error::Api(status)) if status.code == 404 => allocator.removed(name),
            // Kept for the node: the next event or retry writes it again.
            Err(err) => {
                tracing::warn!(node = name, error = %err, "nodeipam: writing the node's pod CIDRs failed")
            }
        }
    }

    fn forget(&mut self, name: &str) {
        self.starved.remove(name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nets(texts: &[&str]) -> Vec<IpNet> {
        texts.iter().map(|t| t.parse().unwrap()).collect()
    }

    fn strings(texts: &[&str]) -> Vec<String> {
        texts.iter().map(|t| t.to_string()).collect()
    }

    fn allocator(cidrs: &[&str]) -> Allocator {
        Allocator::new(&nets(cidrs), 24, 64).unwrap()
    }

    #[test]
    fn a_node_without_ranges_gets_one_and_keeps_it_until_the_patch_lands() {
        let mut a = allocator(&["10.244.0.0/16"]);
        assert_eq!(a.node("n1", &[]), Decision::Patch(nets(&["10.244.0.0/24"])));
        // A second event before the patch is seen: the same range again.
        assert_eq!(a.node("n1", &[]), Decision::Patch(nets(&["10.244.0.0/24"])));
        assert_eq!(
            a.node("n1", &strings(&["10.244.0.0/24"])),
            Decision::Nothing
        );
        assert_eq!(a.node("n2", &[]), Decision::Patch(nets(&["10.244.1.0/24"])));
    }

    #[test]
    fn dual_stack_nodes_get_a_range_of_each_family_in_order() {
        let mut a = allocator(&["fd00:10:244::/56", "10.244.0.0/16"]);
        assert_eq!(
            a.node("n1", &[]),
            Decision::Patch(nets(&["fd00:10:244::/64", "10.244.0.0/24"]))
        );
        assert_eq!(
            cidr_patch(&nets(&["fd00:10:244::/64", "10.244.0.0/24"])),
            serde_json::json!({"spec": {"podCIDR": "fd00:10:244::/64",
                "podCIDRs": ["fd00:10:244::/64", "10.244.0.0/24"]}})
        );
    }

    #[test]
    fn what_nodes_hold_is_taken_before_anything_is_handed_out() {
        let mut a = allocator(&["10.244.0.0/16"]);
        let nodes = vec![
            ("new".to_string(), vec![]),
            ("old".to_string(), strings(&["10.244.0.0/24"])),
            ("older".to_string(), strings(&["10.244.1.0/24"])),
            ("foreign".to_string(), strings(&["192.168.7.0/24"])),
        ];
        assert_eq!(
            a.relisted(&nodes),
            vec![("new".to_string(), Decision::Patch(nets(&["10.244.2.0/24"])))]
        );
        assert_eq!(a.holders(), 4);
        // A relist starts again: a node deleted meanwhile frees its range.
        let after = vec![
            ("old".to_string(), strings(&["10.244.0.0/24"])),
            ("newer".to_string(), vec![]),
        ];
        assert_eq!(
            a.relisted(&after),
            vec![(
                "newer".to_string(),
                Decision::Patch(nets(&["10.244.1.0/24"]))
            )]
        );
    }

    #[test]
    fn a_deleted_node_frees_its_range_and_a_waiting_node_gets_it() {
        let mut a = Allocator::new(&nets(&["10.0.0.0/23"]), 24, 64).unwrap();
        assert!(matches!(a.node("a", &[]), Decision::Patch(_)));
        assert_eq!(a.node("b", &[]), Decision::Patch(nets(&["10.0.1.0/24"])));
        assert_eq!(a.node("c", &[]), Decision::Exhausted);
        a.removed("a");
        assert_eq!(a.node("c", &[]), Decision::Patch(nets(&["10.0.0.0/24"])));
    }

    #[test]
    fn exhausting_one_family_takes_nothing_from_the_other() {
        let mut a = Allocator::new(&nets(&["fd00::/63", "10.0.0.0/24"]), 24, 64).unwrap();
        assert_eq!(
            a.node("a", &[]),
            Decision::Patch(nets(&["fd00::/64", "10.0.0.0/24"]))
        );
        assert_eq!(a.node("b", &[]), Decision::Exhausted);
        assert_eq!(a.sets[0].used(), 1, "b's IPv6 range went back");
        a.removed("a");
        assert_eq!(
            a.node("b", &[]),
            Decision::Patch(nets(&["fd00::/64", "10.0.0.0/24"]))
        );
    }

    #[test]
    fn bad_cluster_cidrs_are_refused() {
        assert!(Allocator::new(&[], 24, 64).is_err());
        let same_family = Allocator::new(&nets(&["10.0.0.0/16", "10.1.0.0/16"]), 24, 64);
        assert!(same_family.unwrap_err().contains("one IPv4 and one IPv6"));
        assert!(Allocator::new(&nets(&["10.0.0.0/16"]), 12, 64).is_err());
    }

    #[test]
    fn a_node_without_pod_cidrs_reads_its_pod_cidr() {
        let mut node = Node::default();
        assert!(pod_cidrs(&node).is_empty());
        node.spec = Some(k8s_openapi::api::core::v1::NodeSpec {
            pod_cidr: Some("10.244.3.0/24".into()),
            ..Default::default()
        });
        assert_eq!(pod_cidrs(&node), ["10.244.3.0/24"]);
    }
}
