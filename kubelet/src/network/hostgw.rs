//! Between nodes, as flannel's `host-gw` backend: every node routes each
//! other node's pod CIDRs through that node's address, so that pods reach
//! pods on other nodes by their own addresses, without NAT; and traffic
//! from this node's pods to anywhere outside the pods' ranges is
//! masqueraded behind the node (an nftables table of this kubelet's own).
//!
//! The routes carry a routing protocol number of skiff's, so that the ones
//! a node no longer needs are found and removed; the next hop must be on a
//! network the host is attached to (host-gw needs one layer-2 network), and
//! a node whose address is the host's own (another kubelet on this host)
//! needs no route.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::process::Command;
use std::time::Duration;

use futures::StreamExt;
use ipnet::IpNet;
use k8s_openapi::api::core::v1::Node;
use kube::runtime::watcher::{self, watcher, Event};
use kube::runtime::WatchStreamExt;
use kube::{Api, Client};
use serde_json::Value;

/// The routing protocol (`ip route … proto 211`) of the routes skiff adds.
pub const ROUTE_PROTOCOL: u8 = 211;
/// Routes and rules are checked again this often, so that what someone
/// removed comes back.
const RESYNC: Duration = Duration::from_secs(30);

/// What another node tells this one: its pod CIDRs and its addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    pub cidrs: Vec<IpNet>,
    /// InternalIP first, then the others of `status.addresses`.
    pub addresses: Vec<IpAddr>,
}

impl Peer {
    pub fn of(node: &Node) -> Peer {
        let spec = node.spec.clone().unwrap_or_default();
        let mut cidrs: Vec<String> = spec.pod_cidrs.unwrap_or_default();
        if cidrs.is_empty() {
            cidrs.extend(spec.pod_cidr);
        }
        let mut addresses: Vec<(bool, IpAddr)> = node
            .status
            .as_ref()
            .and_then(|s| s.addresses.as_ref())
            .into_iter()
            .flatten()
            .filter_map(|a| Some((a.type_ != "InternalIP", a.address.parse().ok()?)))
            .collect();
        addresses.sort_by_key(|(other, _)| *other);
        Peer {
            cidrs: cidrs.iter().filter_map(|c| c.parse().ok()).collect(),
            addresses: addresses.into_iter().map(|(_, a)| a).collect(),
        }
    }
}

/// The host's addresses, each with the network it is on.
pub type HostAddresses = Vec<IpNet>;

/// One route to another node's pods.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Route {
    pub dst: IpNet,
    pub via: IpAddr,
}

/// The routes this node needs, and why the pods of some nodes cannot
/// be routed (node, reason).
pub fn plan(
    own: &str,
    peers: &BTreeMap<String, Peer>,
    host: &HostAddresses,
) -> (BTreeSet<Route>, BTreeMap<String, String>) {
    let mut routes = BTreeSet::new();
    let mut unroutable = BTreeMap::new();
    for (name, peer) in peers {
        if name == own {
            continue;
        }
        for cidr in &peer.cidrs {
            let v4 = matches!(cidr, IpNet::V4(_));
            let Some(via) = peer.addresses.iter().find(|a| a.is_ipv4() == v4) else {
                unroutable.insert(
                    name.clone(),
                    format!(
                        "it has no IPv{} address for pod CIDR {cidr}",
                        if v4 { 4 } else { 6 }
                    ),
                );
                continue;
            };
            if host.iter().any(|net| net.addr() == *via) {
                // Another kubelet on this host: its bridge is here too.
                continue;
            }
            if !host.iter().any(|net| net.contains(via)) {
                unroutable.insert(
                    name.clone(),
                    format!("its address {via} is not on a network of this host (host-gw routes need one network between nodes)"),
                );
                continue;
            }
            routes.insert(Route {
                dst: cidr.trunc(),
                via: *via,
            });
        }
    }
    (routes, unroutable)
}

/// The nftables table of this node: its pods' traffic to anywhere but
/// the pods of the cluster leaves masqueraded behind the node's address.
pub fn masquerade_rules(table: &str, own: &[IpNet], pods: &[IpNet]) -> String {
    let elements = |nets: &[IpNet], v4: bool| -> String {
        let listed: Vec<String> = nets
            .iter()
            .filter(|n| matches!(n, IpNet::V4(_)) == v4)
            .map(|n| n.trunc().to_string())
            .collect();
        match listed.is_empty() {
            true => String::new(),
            false => format!("\t\telements = {{ {} }}\n", listed.join(", ")),
        }
    };
    let set = |name: &str, kind: &str, body: String| {
        format!(
            "\tset {name} {{\n\t\ttype {kind}\n\t\tflags interval\n\t\tauto-merge\n{body}\t}}\n"
        )
    };
    // Created, deleted and made again in one transaction: the table is
    // replaced whole, never missing.
    format!(
        "add table inet {table}\ndelete table inet {table}\ntable inet {table} {{\n{}{}{}{}\tchain postrouting {{\n\t\ttype nat hook postrouting priority srcnat; policy accept;\n\t\tip saddr @own4 ip daddr != @pods4 masquerade\n\t\tip6 saddr @own6 ip6 daddr != @pods6 masquerade\n\t}}\n}}\n",
        set("own4", "ipv4_addr", elements(own, true)),
        set("own6", "ipv6_addr", elements(own, false)),
        set("pods4", "ipv4_addr", elements(pods, true)),
        set("pods6", "ipv6_addr", elements(pods, false)),
    )
}

/// The name of the nftables table of the kubelet whose bridge is `bridge`
/// (distinct for every kubelet of a host, as their bridges are).
pub fn table_name(bridge: &str) -> String {
    let safe: String = bridge
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    format!("skiff_{safe}")
}

/// Runs `program args`, its stdin `input`; its stdout, or its stderr as
/// the error.
pub(crate) fn run(program: &str, args: &[&str], input: Option<&str>) -> Result<String, String> {
    use std::io::Write;
    let mut command = Command::new(program);
    command
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = command
        .spawn()
        .map_err(|e| format!("cannot run {program}: {e}"))?;
    if let Some(mut stdin) = child.stdin.take() {
        if let Some(input) = input {
            let _ = stdin.write_all(input.as_bytes());
        }
    }
    let output = child
        .wait_with_output()
        .map_err(|e| format!("{program}: {e}"))?;
    match output.status.success() {
        true => Ok(String::from_utf8_lossy(&output.stdout).into_owned()),
        false => Err(format!(
            "{program} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr).trim()
        )),
    }
}

/// The host's addresses (`ip -j addr show`).
pub fn host_addresses() -> Result<HostAddresses, String> {
    let text = run("ip", &["-j", "addr", "show"], None)?;
    parse_addresses(&text)
}

fn parse_addresses(text: &str) -> Result<HostAddresses, String> {
    let links: Vec<Value> =
        serde_json::from_str(text).map_err(|e| format!("reading `ip -j addr show`: {e}"))?;
    let mut found = Vec::new();
    for info in links
        .iter()
        .flat_map(|l| l["addr_info"].as_array().into_iter().flatten())
    {
        let (Some(local), Some(prefix)) = (info["local"].as_str(), info["prefixlen"].as_u64())
        else {
            continue;
        };
        if let Ok(net) = format!("{local}/{prefix}").parse::<IpNet>() {
            found.push(net);
        }
    }
    Ok(found)
}

/// skiff's routes now in the main table.
pub fn current_routes() -> Result<BTreeSet<Route>, String> {
    let proto = ROUTE_PROTOCOL.to_string();
    let mut routes = BTreeSet::new();
    for family in ["-4", "-6"] {
        let text = run(
            "ip",
            &["-j", family, "route", "show", "proto", &proto],
            None,
        )?;
        routes.extend(parse_routes(&text)?);
    }
    Ok(routes)
}

fn parse_routes(text: &str) -> Result<Vec<Route>, String> {
    if text.trim().is_empty() {
        return Ok(Vec::new());
    }
    let listed: Vec<Value> =
        serde_json::from_str(text).map_err(|e| format!("reading `ip -j route show`: {e}"))?;
    Ok(listed
        .iter()
        .filter_map(|r| {
            let dst = r["dst"].as_str()?;
            let dst = dst
                .parse::<IpNet>()
                .or_else(|_| dst.parse::<IpAddr>().map(IpNet::from))
                .ok()?;
            let via = r["gateway"].as_str()?.parse().ok()?;
            Some(Route { dst, via })
        })
        .collect())
}

/// This node's routes to the others' pods and its masquerading, kept as
/// the Nodes say.
pub struct HostGateway {
    node_name: String,
    table: String,
    /// What was last applied, so that nothing unchanged runs again.
    applied_rules: Option<String>,
    /// What was last said of each node that cannot be routed.
    said: BTreeMap<String, String>,
    said_nft: Option<String>,
}

impl HostGateway {
    pub fn new(node_name: &str, bridge: &str) -> HostGateway {
        HostGateway {
            node_name: node_name.to_string(),
            table: table_name(bridge),
            applied_rules: None,
            said: BTreeMap::new(),
            said_nft: None,
        }
    }

    /// Makes the host's routes and rules what `peers` (every Node) need.
    pub fn sync(&mut self, peers: &BTreeMap<String, Peer>) {
        match host_addresses() {
            Ok(host) => self.sync_routes(peers, &host),
            Err(err) => {
                tracing::warn!(error = %err, "reading the host's addresses for routes to other nodes' pods")
            }
        }
        self.sync_masquerade(peers);
    }

    fn sync_routes(&mut self, peers: &BTreeMap<String, Peer>, host: &HostAddresses) {
        let (wanted, unroutable) = plan(&self.node_name, peers, host);
        for (node, why) in &unroutable {
            if self.said.get(node) != Some(why) {
                tracing::warn!(node = %node, reason = %why, "pods of node are not routed from this one");
            }
        }
        self.said = unroutable;
        let current = match current_routes() {
            Ok(current) => current,
            Err(err) => {
                tracing::warn!(error = %err, "listing the routes to other nodes' pods");
                return;
            }
        };
        let proto = ROUTE_PROTOCOL.to_string();
        for stale in current.difference(&wanted) {
            let (dst, via) = (stale.dst.to_string(), stale.via.to_string());
            match run(
                "ip",
                &["route", "del", &dst, "via", &via, "proto", &proto],
                None,
            ) {
                Ok(_) => tracing::info!(%dst, %via, "removed the route to a node's pods"),
                Err(err) => tracing::warn!(error = %err, "removing a route to a node's pods"),
            }
        }
        for route in wanted.difference(&current) {
            let (dst, via) = (route.dst.to_string(), route.via.to_string());
            match run(
                "ip",
                &["route", "replace", &dst, "via", &via, "proto", &proto],
                None,
            ) {
                Ok(_) => tracing::info!(%dst, %via, "routed a node's pods"),
                Err(err) => tracing::warn!(error = %err, "routing a node's pods"),
            }
        }
    }

    fn sync_masquerade(&mut self, peers: &BTreeMap<String, Peer>) {
        let own: Vec<IpNet> = peers
            .get(&self.node_name)
            .map(|p| p.cidrs.clone())
            .unwrap_or_default();
        let mut pods: Vec<IpNet> = peers
            .values()
            .flat_map(|p| p.cidrs.iter().copied())
            .collect();
        pods.sort();
        pods.dedup();
        let rules = masquerade_rules(&self.table, &own, &pods);
        if self.applied_rules.as_ref() == Some(&rules) {
            return;
        }
        match run("nft", &["-f", "-"], Some(&rules)) {
            Ok(_) => {
                match own.is_empty() {
                    true => {
                        tracing::debug!(table = %self.table, "no pod CIDR of this node to masquerade yet")
                    }
                    false => {
                        tracing::info!(table = %self.table, own = ?own, "pods' traffic leaving the cluster is masqueraded")
                    }
                }
                self.applied_rules = Some(rules);
                self.said_nft = None;
            }
            Err(err) => {
                let err = match err.contains("cannot run nft") {
                    true => format!("{err} (apt-get install nftables)"),
                    false => err,
                };
                if self.said_nft.as_ref() != Some(&err) {
                    tracing::warn!(error = %err, "pods' traffic leaving the cluster is not masqueraded");
                    self.said_nft = Some(err);
                }
            }
        }
    }
}

/// Whether the nftables table is there (someone may have flushed the
/// ruleset since it was made).
fn table_exists(table: &str) -> bool {
    run("nft", &["list", "table", "inet", table], None).is_ok()
}

/// Keeps this node's routes and masquerading as the Nodes say, until
/// the task is dropped.
pub async fn run_host_gateway(client: Client, node_name: String, bridge: String) {
    let nodes: Api<Node> = Api::all(client);
    let mut events = watcher(nodes, watcher::Config::default())
        .default_backoff()
        .boxed();
    let mut gateway = HostGateway::new(&node_name, &bridge);
    let mut peers: BTreeMap<String, Peer> = BTreeMap::new();
    let mut listing: Option<BTreeMap<String, Peer>> = None;
    let mut resync = tokio::time::interval(RESYNC);
    resync.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut synced_once = false;
    loop {
        let changed = tokio::select! {
            event = events.next() => {
                let Some(event) = event else { return };
                match event {
                    Ok(Event::Init) => { listing = Some(BTreeMap::new()); false }
                    Ok(Event::InitApply(node)) => {
                        if let Some(listing) = listing.as_mut() {
                            listing.insert(node.metadata.name.clone().unwrap_or_default(), Peer::of(&node));
                        }
                        false
                    }
                    Ok(Event::InitDone) => {
                        if let Some(listed) = listing.take() {
                            peers = listed;
                        }
                        true
                    }
                    Ok(Event::Apply(node)) => {
                        let name = node.metadata.name.clone().unwrap_or_default();
                        let peer = Peer::of(&node);
                        peers.insert(name, peer.clone()).as_ref() != Some(&peer)
                    }
                    Ok(Event::Delete(node)) => {
                        peers.remove(node.metadata.name.as_deref().unwrap_or_default()).is_some()
                    }
                    Err(err) => {
                        tracing::debug!(error = %err, "watching nodes for routes to their pods");
                        false
                    }
                }
            }
            _ = resync.tick() => {
                let table = gateway.table.clone();
                let there = tokio::task::spawn_blocking(move || table_exists(&table));
                if synced_once && !there.await.unwrap_or(true) {
                    gateway.applied_rules = None;
                }
                synced_once
            }
        };
        if changed {
            synced_once = true;
            let snapshot = peers.clone();
            gateway = match tokio::task::spawn_blocking(move || {
                gateway.sync(&snapshot);
                gateway
            })
            .await
            {
                Ok(gateway) => gateway,
                Err(_) => HostGateway::new(&node_name, &bridge),
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(cidrs: &[&str], addresses: &[&str]) -> Peer {
        Peer {
            cidrs: cidrs.iter().map(|c| c.parse().unwrap()).collect(),
            addresses: addresses.iter().map(|a| a.parse().unwrap()).collect(),
        }
    }

    #[test]
    fn a_node_routes_the_others_pods_through_their_addresses() {
        let peers = BTreeMap::from([
            ("a".to_string(), peer(&["10.244.0.0/24"], &["192.168.5.2"])),
            (
                "b".to_string(),
                peer(&["10.244.1.0/24", "fd00:1::/64"], &["192.168.5.3"]),
            ),
            ("c".to_string(), peer(&["10.244.2.0/24"], &["172.16.0.9"])),
            ("d".to_string(), peer(&["10.244.3.0/24"], &["192.168.5.2"])),
            ("e".to_string(), peer(&[], &["192.168.5.7"])),
        ]);
        let host: HostAddresses = vec![
            "127.0.0.1/8".parse().unwrap(),
            "192.168.5.2/24".parse().unwrap(),
        ];
        let (routes, unroutable) = plan("a", &peers, &host);
        // b through its address; not a (this node), not d (this host's
        // own address: another kubelet here), not e (no CIDR yet).
        assert_eq!(
            routes.into_iter().collect::<Vec<_>>(),
            [Route {
                dst: "10.244.1.0/24".parse().unwrap(),
                via: "192.168.5.3".parse().unwrap()
            }]
        );
        assert!(
            unroutable["b"].contains("no IPv6 address"),
            "{unroutable:?}"
        );
        assert!(unroutable["c"].contains("172.16.0.9 is not on a network of this host"));
        assert_eq!(unroutable.len(), 2);
    }

    #[test]
    fn a_nodes_internal_ip_comes_first() {
        let address = |t: &str, a: &str| k8s_openapi::api::core::v1::NodeAddress {
            type_: t.into(),
            address: a.into(),
        };
        let node = Node {
            spec: Some(k8s_openapi::api::core::v1::NodeSpec {
                pod_cidr: Some("10.244.4.0/24".into()),
                ..Default::default()
            }),
            status: Some(k8s_openapi::api::core::v1::NodeStatus {
                addresses: Some(vec![
                    address("Hostname", "not-an-address"),
                    address("ExternalIP", "203.0.113.4"),
                    address("InternalIP", "10.0.0.4"),
                ]),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(
            Peer::of(&node),
            peer(&["10.244.4.0/24"], &["10.0.0.4", "203.0.113.4"])
        );
    }

    #[test]
    fn the_masquerade_table_exempts_the_cluster_pods() {
        let own: Vec<IpNet> = vec!["10.244.0.0/24".parse().unwrap()];
        let pods: Vec<IpNet> = vec![
            "10.244.0.0/24".parse().unwrap(),
            "10.244.1.0/24".parse().unwrap(),
            "fd00:1::/64".parse().unwrap(),
        ];
        let rules = masquerade_rules("skiff_skiff0", &own, &pods);
        assert!(rules.starts_with("add table inet skiff_skiff0\ndelete table inet skiff_skiff0\n"));
        assert!(
            rules.contains("elements = { 10.244.0.0/24, 10.244.1.0/24 }"),
            "{rules}"
        );
        assert!(rules.contains("elements = { fd00:1::/64 }"), "{rules}");
        assert!(rules.contains("ip saddr @own4 ip daddr != @pods4 masquerade"));
        assert_eq!(table_name("sk-1.a"), "skiff_sk_1_a");
    }

    #[test]
    fn ip_json_is_read() {
        let addresses = parse_addresses(
            r#"[{"ifname":"lo","addr_info":[{"family":"inet","local":"127.0.0.1","prefixlen":8}]},
                {"ifname":"eth0","addr_info":[{"family":"inet6","local":"fe80::1","prefixlen":64}]},
                {"ifname":"dummy","addr_info":[]}]"#,
        )
        .unwrap();
        assert_eq!(
            addresses,
            vec![
                "127.0.0.1/8".parse::<IpNet>().unwrap(),
                "fe80::1/64".parse().unwrap()
            ]
        );
        let routes = parse_routes(
            r#"[{"dst":"10.244.1.0/24","gateway":"192.168.5.3","dev":"eth0","protocol":"211","flags":[]},
                {"dst":"10.9.9.9","gateway":"192.168.5.4","dev":"eth0","flags":[]},
                {"dst":"10.244.7.0/24","dev":"skiff0","flags":[]}]"#,
        )
        .unwrap();
        assert_eq!(routes.len(), 2);
        assert_eq!(routes[1].dst, "10.9.9.9/32".parse::<IpNet>().unwrap());
        assert!(parse_routes("").unwrap().is_empty());
    }

    /// The routes and the table on a real host: a namespace of the test's
    /// own, a veth pair on a network, a route to a "node" there, then
    /// that node gone.
    #[test]
    fn routes_and_rules_are_made_and_removed_in_a_namespace() {
        let test = "routes_and_rules_are_made_and_removed_in_a_namespace";
        if let Some(why) = super::super::unavailable_reason() {
            eprintln!("{test}: skipped: {why}");
            return;
        }
        let nft = run("nft", &["--version"], None).is_ok();
        if !nft {
            if std::env::var("CI").is_ok_and(|v| v == "true") {
                panic!("{test}: needs nft; CI must have it (apt-get install nftables)");
            }
            eprintln!("{test}: skipped: needs nft (apt-get install nftables)");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let ns = dir.path().join("host");
        super::super::netns::create(&ns).unwrap();
        let outcome = super::super::netns::run_in(&ns, || {
            let link = [
                "link", "add", "eth9", "type", "veth", "peer", "name", "eth9p",
            ];
            run("ip", &link, None).unwrap();
            run(
                "ip",
                &["addr", "add", "192.168.77.2/24", "dev", "eth9"],
                None,
            )
            .unwrap();
            run("ip", &["link", "set", "eth9", "up"], None).unwrap();
            run("ip", &["link", "set", "eth9p", "up"], None).unwrap();
            let mut gateway = HostGateway::new("a", "skt0");
            let mut peers = BTreeMap::from([
                ("a".to_string(), peer(&["10.244.0.0/24"], &["192.168.77.2"])),
                ("b".to_string(), peer(&["10.244.5.0/24"], &["192.168.77.3"])),
            ]);
            gateway.sync(&peers);
            let routes = current_routes().unwrap();
            let table = run("nft", &["list", "table", "inet", "skiff_skt0"], None).unwrap();
            peers.remove("b");
            gateway.sync(&peers);
            let after = current_routes().unwrap();
            let table_after = run("nft", &["list", "table", "inet", "skiff_skt0"], None).unwrap();
            (routes, table, after, table_after)
        });
        super::super::netns::remove(&ns).unwrap();
        let (routes, table, after, table_after) = outcome.unwrap();
        assert_eq!(
            routes.into_iter().collect::<Vec<_>>(),
            [Route {
                dst: "10.244.5.0/24".parse().unwrap(),
                via: "192.168.77.3".parse().unwrap()
            }]
        );
        assert!(table.contains("10.244.5.0/24"), "{table}");
        assert!(table.contains("masquerade"), "{table}");
        assert!(after.is_empty(), "a gone node's route stayed: {after:?}");
        assert!(!table_after.contains("10.244.5.0/24"), "{table_after}");
    }
}
