//! One cluster CIDR cut into node ranges of one size, and which of them
//! are taken (kube-controller-manager's `cidrset`): the `i`-th node range
//! of 10.244.0.0/16 in /24s is 10.244.i.0/24.

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::{IpNet, Ipv4Net, Ipv6Net};

/// At most 2^16 node ranges in one cluster CIDR, as Kubernetes allows
/// (`--node-cidr-mask-size` at most 16 more than the cluster's prefix).
pub const MAX_PREFIX_DIFFERENCE: u8 = 16;

#[derive(Debug, Clone)]
pub struct CidrSet {
    cluster: IpNet,
    node_prefix: u8,
    /// Indexes of the node ranges taken.
    used: BTreeSet<u32>,
    /// Where the next search for a free range starts, so that a released
    /// range is not handed out again at once.
    next: u32,
}

impl CidrSet {
    /// `cluster` in node ranges of prefix length `node_prefix`.
    pub fn new(cluster: IpNet, node_prefix: u8) -> Result<CidrSet, String> {
        let cluster = cluster.trunc();
        if node_prefix < cluster.prefix_len() || node_prefix > cluster.max_prefix_len() {
            return Err(format!(
                "the node CIDR mask size /{node_prefix} does not fit the cluster CIDR {cluster}: \
                 it must be between /{} and /{}",
                cluster.prefix_len(),
                cluster.max_prefix_len()
            ));
        }
        if node_prefix - cluster.prefix_len() > MAX_PREFIX_DIFFERENCE {
            return Err(format!(
                "the node CIDR mask size /{node_prefix} cuts the cluster CIDR {cluster} into more than \
                 2^{MAX_PREFIX_DIFFERENCE} ranges: use a node mask of at most /{}",
                cluster.prefix_len() + MAX_PREFIX_DIFFERENCE
            ));
        }
        Ok(CidrSet {
            cluster,
            node_prefix,
            used: BTreeSet::new(),
            next: 0,
        })
    }

    pub fn cluster(&self) -> IpNet {
        self.cluster
    }

    /// How many node ranges the cluster CIDR holds.
    pub fn size(&self) -> u32 {
        1 << (self.node_prefix - self.cluster.prefix_len())
    }

    /// How many are taken.
    pub fn used(&self) -> usize {
        self.used.len()
    }

    /// Every range free again.
    pub fn clear(&mut self) {
        self.used.clear();
        self.next = 0;
    }

    /// The next free node range, now taken; `None` when all are.
    pub fn allocate(&mut self) -> Option<IpNet> {
        let size = self.size();
        let free = (0..size)
            .map(|offset| ((self.next as u64 + offset as u64) % size as u64) as u32)
            .find(|index| !self.used.contains(index))?;
        self.used.insert(free);
        self.next = ((free as u64 + 1) % size as u64) as u32;
        Some(self.range(free))
    }

    /// Marks `cidr` taken (a node that already has it): every node range it
    /// covers, or the one that covers it.
    pub fn occupy(&mut self, cidr: IpNet) -> Result<(), String> {
        let indexes = self.indexes(cidr)?;
        self.used.extend(indexes);
        Ok(())
    }

    /// Frees `cidr`; one outside the cluster CIDR is not this set's.
    pub fn release(&mut self, cidr: IpNet) {
        if let Ok(indexes) = self.indexes(cidr) {
            for index in indexes {
                self.used.remove(&index);
            }
        }
    }

    /// Whether `cidr` lies within the cluster CIDR.
    pub fn holds(&self, cidr: IpNet) -> bool {
        self.cluster.contains(&cidr)
    }

    /// The node range at `index`.
    fn range(&self, index: u32) -> IpNet {
        let shift = self.cluster.max_prefix_len() - self.node_prefix;
        match self.cluster {
            IpNet::V4(net) => {
                let base = u32::from(net.network());
                let address = base | (index << shift);
                IpNet::V4(
                    Ipv4Net::new(Ipv4Addr::from(address), self.node_prefix)
                        .expect("the node prefix was checked against 32"),
                )
            }
            IpNet::V6(net) => {
                let base = u128::from(net.network());
                let address = base | ((index as u128) << shift);
                IpNet::V6(
                    Ipv6Net::new(Ipv6Addr::from(address), self.node_prefix)
                        .expect("the node prefix was checked against 128"),
                )
            }
        }
    }

    /// The indexes of the node ranges `cidr` covers (or lies in).
    fn indexes(&self, cidr: IpNet) -> Result<std::ops::Range<u32>, String> {
        if !self.cluster.contains(&cidr) {
            return Err(format!(
                "{cidr} is not within the cluster CIDR {}",
                self.cluster
            ));
        }
        let shift = self.cluster.max_prefix_len() - self.node_prefix;
        let offset = |address: IpAddr| -> u32 {
            let (address, base) = match (address, self.cluster.network()) {
                (IpAddr::V4(a), IpAddr::V4(b)) => (u32::from(a) as u128, u32::from(b) as u128),
                (IpAddr::V6(a), IpAddr::V6(b)) => (u128::from(a), u128::from(b)),
                // contains() has checked the family.
                _ => (0, 0),
            };
            ((address - base) >> shift) as u32
        };
        let first = offset(cidr.network());
        let last = offset(cidr.broadcast());
        Ok(first..last + 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn net(text: &str) -> IpNet {
        text.parse().unwrap()
    }

    #[test]
    fn node_ranges_are_handed_out_in_order() {
        let mut set = CidrSet::new(net("10.244.0.0/16"), 24).unwrap();
        assert_eq!(set.size(), 256);
        assert_eq!(set.allocate(), Some(net("10.244.0.0/24")));
        assert_eq!(set.allocate(), Some(net("10.244.1.0/24")));
        assert_eq!(set.used(), 2);
    }

    #[test]
    fn the_cluster_cidr_is_read_as_its_network() {
        let mut set = CidrSet::new(net("10.244.7.9/16"), 24).unwrap();
        assert_eq!(set.cluster(), net("10.244.0.0/16"));
        assert_eq!(set.allocate(), Some(net("10.244.0.0/24")));
    }

    #[test]
    fn a_released_range_comes_back_after_the_others() {
        let mut set = CidrSet::new(net("10.0.0.0/30"), 32).unwrap();
        let all: Vec<IpNet> = (0..4).map(|_| set.allocate().unwrap()).collect();
        assert_eq!(set.allocate(), None, "four addresses, four ranges");
        set.release(all[1]);
        assert_eq!(set.allocate(), Some(all[1]));
        assert_eq!(set.allocate(), None);
        set.release(all[0]);
        set.release(all[3]);
        // The search goes on from after the last one handed out.
        assert_eq!(set.allocate(), Some(all[3]));
        assert_eq!(set.allocate(), Some(all[0]));
    }

    #[test]
    fn occupied_ranges_are_skipped() {
        let mut set = CidrSet::new(net("10.244.0.0/16"), 24).unwrap();
        set.occupy(net("10.244.0.0/24")).unwrap();
        // A wider range takes every node range in it.
        set.occupy(net("10.244.2.0/23")).unwrap();
        assert_eq!(set.used(), 3);
        assert_eq!(set.allocate(), Some(net("10.244.1.0/24")));
        assert_eq!(set.allocate(), Some(net("10.244.4.0/24")));
        // A narrower one takes the node range it lies in.
        set.occupy(net("10.244.5.128/25")).unwrap();
        assert_eq!(set.allocate(), Some(net("10.244.6.0/24")));
        assert!(set.occupy(net("10.245.0.0/24")).is_err());
        assert!(set.occupy(net("fd00::/64")).is_err());
        // Releasing what is not ours changes nothing.
        set.release(net("192.168.0.0/24"));
        assert_eq!(set.used(), 7);
    }

    #[test]
    fn ipv6_ranges_are_cut_the_same_way() {
        let mut set = CidrSet::new(net("fd00:10:244::/56"), 64).unwrap();
        assert_eq!(set.size(), 256);
        assert_eq!(set.allocate(), Some(net("fd00:10:244::/64")));
        assert_eq!(set.allocate(), Some(net("fd00:10:244:1::/64")));
        set.occupy(net("fd00:10:244:2::/64")).unwrap();
        assert_eq!(set.allocate(), Some(net("fd00:10:244:3::/64")));
    }

    #[test]
    fn node_masks_that_do_not_fit_are_refused() {
        let narrow = CidrSet::new(net("10.244.0.0/16"), 8).unwrap_err();
        assert!(narrow.contains("between /16 and /32"), "{narrow}");
        let wide = CidrSet::new(net("10.0.0.0/8"), 32).unwrap_err();
        assert!(wide.contains("at most /24"), "{wide}");
        assert!(CidrSet::new(net("fd00::/48"), 129).is_err());
    }
}
