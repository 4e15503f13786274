//! A simulated node's pod addresses, handed out from its spec.podCIDRs in
//! the order of the host-local IPAM plugin: the network address and the
//! gateway (the first address) are never given, nor IPv4's broadcast
//! address, and the search wraps around after the last address. Nothing
//! is configured anywhere: these are only the addresses pods report.

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The first offset handed out: after the network address and the gateway.
const FIRST_OFFSET: u128 = 2;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PodIpError {
    #[error("{0:?} is not a pod CIDR: expected an address and a prefix length, as 10.244.1.0/24 or fd00:10:244:1::/64")]
    InvalidCidr(String),
    #[error("the pod CIDR {0} is too small to hand out addresses (it needs one beside its network, gateway and broadcast addresses)")]
    TooSmall(String),
    #[error(
        "the node has no pod CIDR yet: its pods wait until the node IPAM controller gives it one"
    )]
    NoPodCidr,
    #[error("every address of the node's pod CIDR {0} is taken by a pod")]
    Exhausted(String),
}

/// One pod CIDR of a node: its network address (as a number) and the
/// offsets of its usable addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PodRange {
    network: u128,
    prefix: u8,
    ipv4: bool,
    /// The last usable offset from the network address.
    last: u128,
}

impl PodRange {
    /// `10.244.1.0/24` or `fd00:10:244:1::/64`; host bits are cleared.
    pub fn parse(text: &str) -> Result<PodRange, PodIpError> {
        let invalid = || PodIpError::InvalidCidr(text.to_string());
        let (address, prefix) = text.trim().split_once('/').ok_or_else(invalid)?;
        let address: IpAddr = address.parse().map_err(|_| invalid())?;
        let prefix: u8 = prefix.parse().map_err(|_| invalid())?;
        let (value, bits, ipv4) = match address {
            IpAddr::V4(a) => (u128::from(u32::from(a)), 32u8, true),
            IpAddr::V6(a) => (u128::from(a), 128u8, false),
        };
        if prefix > bits {
            return Err(invalid());
        }
        let host_bits = u32::from(bits - prefix);
        let host_mask = match host_bits {
            128 => u128::MAX,
            n => (1u128 << n) - 1,
        };
        // The last address of the range, less IPv4's broadcast address.
        let last = host_mask
            .checked_sub(u128::from(ipv4))
            .filter(|&last| last >= FIRST_OFFSET)
            .ok_or_else(|| PodIpError::TooSmall(text.to_string()))?;
        Ok(PodRange {
            network: value & !host_mask,
            prefix,
            ipv4,
            last,
        })
    }

    pub fn is_ipv4(&self) -> bool {
        self.ipv4
    }

    /// How many addresses it hands out.
    pub fn usable(&self) -> u128 {
        self.last - FIRST_OFFSET + 1
    }

    fn address(&self, offset: u128) -> IpAddr {
        let value = self.network + offset;
        match self.ipv4 {
            // The range is IPv4, so the value fits 32 bits.
            true => IpAddr::V4(Ipv4Addr::from(value as u32)),
            false => IpAddr::V6(Ipv6Addr::from(value)),
        }
    }

    /// The offset after `offset`, back to the first after the last.
    fn after(&self, offset: Option<u128>) -> u128 {
        match offset {
            Some(o) if o < self.last => o + 1,
            _ => FIRST_OFFSET,
        }
    }
}

impl std::fmt::Display for PodRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.address(0), self.prefix)
    }
}

/// A node's ranges, the addresses its pods hold, and where each range's
/// next search starts (after the address it gave last, as host-local does).
#[derive(Debug, Default)]
pub struct PodAddresses {
    ranges: Vec<PodRange>,
    /// The offset each range gave last.
    last_given: Vec<Option<u128>>,
    by_pod: HashMap<String, Vec<IpAddr>>,
    in_use: HashSet<IpAddr>,
}

impl PodAddresses {
    pub fn has_ranges(&self) -> bool {
        !self.ranges.is_empty()
    }

    /// The node's spec.podCIDRs (one a family, the first is podCIDR).
    /// Addresses pods hold are kept; the ranges are searched from their
    /// start again when they change. Whether they changed.
    pub fn set_ranges(&mut self, cidrs: &[String]) -> Result<bool, PodIpError> {
        let ranges = cidrs
            .iter()
            .map(|c| PodRange::parse(c))
            .collect::<Result<Vec<_>, _>>()?;
        if ranges == self.ranges {
            return Ok(false);
        }
        self.last_given = vec![None; ranges.len()];
        self.ranges = ranges;
        Ok(true)
    }

    /// The addresses of pod `uid`, one from each range: those it was
    /// given already, or new ones.
    pub fn allocate(&mut self, uid: &str) -> Result<Vec<IpAddr>, PodIpError> {
        if let Some(given) = self.by_pod.get(uid) {
            return Ok(given.clone());
        }
        if self.ranges.is_empty() {
            return Err(PodIpError::NoPodCidr);
        }
        let mut offsets = Vec::with_capacity(self.ranges.len());
        for range in &self.ranges {
            let start = self.last_given[offsets.len()];
            let offset = self
                .free_offset(range, start)
                .ok_or_else(|| PodIpError::Exhausted(range.to_string()))?;
            offsets.push(offset);
        }
        let addresses: Vec<IpAddr> = self
            .ranges
            .iter()
            .zip(&offsets)
            .map(|(range, &offset)| range.address(offset))
            .collect();
        for (last, offset) in self.last_given.iter_mut().zip(offsets) {
            *last = Some(offset);
        }
        self.in_use.extend(addresses.iter().copied());
        self.by_pod.insert(uid.to_string(), addresses.clone());
        Ok(addresses)
    }

    /// The first offset after `last` whose address no pod holds. Only
    /// taken addresses are stepped over, so the search is bounded by
    /// their number, however large the range.
    fn free_offset(&self, range: &PodRange, last: Option<u128>) -> Option<u128> {
        let tries = range.usable().min(self.in_use.len() as u128 + 1);
        let mut offset = last;
        for _ in 0..tries {
            let next = range.after(offset);
            if !self.in_use.contains(&range.address(next)) {
                return Some(next);
            }
            offset = Some(next);
        }
        None
    }

    /// Pod `uid` holds `addresses` already (given before this simulator
    /// started): they are not handed out again.
    pub fn occupy(&mut self, uid: &str, addresses: Vec<IpAddr>) {
        if self.by_pod.contains_key(uid) || addresses.is_empty() {
            return;
        }
        self.in_use.extend(addresses.iter().copied());
        self.by_pod.insert(uid.to_string(), addresses);
    }

    pub fn holds(&self, uid: &str) -> bool {
        self.by_pod.contains_key(uid)
    }

    /// Pod `uid` is gone or finished: its addresses are free.
    pub fn release(&mut self, uid: &str) {
        for address in self.by_pod.remove(uid).unwrap_or_default() {
            self.in_use.remove(&address);
        }
    }

    /// Frees the addresses of every pod `keep` says no to.
    pub fn retain(&mut self, mut keep: impl FnMut(&str) -> bool) {
        let gone: Vec<String> = self
            .by_pod
            .keys()
            .filter(|uid| !keep(uid))
            .cloned()
            .collect();
        for uid in gone {
            self.release(&uid);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(cidrs: &[&str]) -> PodAddresses {
        let mut node = PodAddresses::default();
        let cidrs: Vec<String> = cidrs.iter().map(|c| c.to_string()).collect();
        assert!(node.set_ranges(&cidrs).unwrap());
        node
    }

    fn text(addresses: &[IpAddr]) -> Vec<String> {
        addresses.iter().map(|a| a.to_string()).collect()
    }

    #[test]
    fn ipv4_addresses_start_after_the_gateway_and_wrap_before_the_broadcast() {
        let mut node = node(&["10.244.7.0/29"]);
        let given: Vec<String> = (0..5)
            .map(|i| text(&node.allocate(&format!("p{i}")).unwrap()).join(","))
            .collect();
        assert_eq!(
            given,
            [
                "10.244.7.2",
                "10.244.7.3",
                "10.244.7.4",
                "10.244.7.5",
                "10.244.7.6"
            ]
        );
        assert_eq!(
            node.allocate("p5"),
            Err(PodIpError::Exhausted("10.244.7.0/29".into()))
        );
        // .3 and .5 are freed; the search goes on after .6 and wraps to .2,
        // which is taken, then .3.
        node.release("p1");
        node.release("p3");
        assert_eq!(text(&node.allocate("p6").unwrap()), ["10.244.7.3"]);
        assert_eq!(text(&node.allocate("p7").unwrap()), ["10.244.7.5"]);
        assert!(node.allocate("p8").is_err());
    }

    #[test]
    fn a_24_hands_out_253_addresses_then_the_freed_ones() {
        let mut node = node(&["10.244.1.0/24"]);
        let all: Vec<String> = (0..253)
            .map(|i| text(&node.allocate(&i.to_string()).unwrap()).remove(0))
            .collect();
        assert_eq!(all[0], "10.244.1.2");
        assert_eq!(all[252], "10.244.1.254");
        assert!(!all.iter().any(|a| a.ends_with(".255") || a.ends_with(".1")));
        node.release("7");
        assert_eq!(text(&node.allocate("again").unwrap()), ["10.244.1.9"]);
    }

    #[test]
    fn a_pod_keeps_its_addresses_and_pods_already_running_keep_theirs() {
        let mut node = node(&["10.244.0.0/24"]);
        node.occupy("old", vec!["10.244.0.2".parse().unwrap()]);
        assert_eq!(text(&node.allocate("new").unwrap()), ["10.244.0.3"]);
        assert_eq!(text(&node.allocate("new").unwrap()), ["10.244.0.3"]);
        assert!(node.holds("old"));
        node.retain(|uid| uid == "new");
        assert!(!node.holds("old"));
        assert!(node.holds("new"));
    }

    #[test]
    fn ipv6_ranges_use_their_last_address_and_dual_stack_gives_one_of_each() {
        let mut v6 = node(&["fd00:10:244:1::/126"]);
        let given: Vec<String> = (0..2)
            .map(|i| text(&v6.allocate(&i.to_string()).unwrap()).remove(0))
            .collect();
        assert_eq!(given, ["fd00:10:244:1::2", "fd00:10:244:1::3"]);

        let mut dual = node(&["10.244.3.0/24", "fd00:10:244:3::/64"]);
        assert_eq!(
            text(&dual.allocate("a").unwrap()),
            ["10.244.3.2", "fd00:10:244:3::2"]
        );
        assert_eq!(
            text(&dual.allocate("b").unwrap()),
            ["10.244.3.3", "fd00:10:244:3::3"]
        );
    }

    #[test]
    fn a_node_without_ranges_gives_nothing_and_bad_ranges_are_refused() {
        let mut node = PodAddresses::default();
        assert_eq!(node.allocate("p"), Err(PodIpError::NoPodCidr));
        assert!(!node.has_ranges());
        for bad in ["10.244.0.0", "10.244.0.0/33", "nonsense/24", "fd00::/129"] {
            assert!(
                matches!(PodRange::parse(bad), Err(PodIpError::InvalidCidr(_))),
                "{bad}"
            );
        }
        for small in ["10.244.0.0/31", "10.244.0.0/32", "fd00::/127"] {
            assert!(
                matches!(PodRange::parse(small), Err(PodIpError::TooSmall(_))),
                "{small}"
            );
        }
        let range = PodRange::parse("10.244.5.9/24").unwrap();
        assert_eq!(range.to_string(), "10.244.5.0/24");
        assert_eq!(range.usable(), 253);
        assert_eq!(PodRange::parse("10.244.0.0/30").unwrap().usable(), 1);
        assert_eq!(
            PodRange::parse("fd00::/64").unwrap().usable(),
            (1 << 64) - 2
        );
        assert!(!node.set_ranges(&[]).unwrap());
        assert!(node.set_ranges(&["10.244.0.0/24".into()]).unwrap());
        assert!(!node.set_ranges(&["10.244.0.0/24".into()]).unwrap());
    }
}
