//! The proxy's nftables table, laid out as kube-proxy's nftables mode lays
//! out its own: maps from (cluster IP, protocol, port) and from (protocol,
//! node port) to a chain per Service port, which picks an endpoint at
//! random (or the one a client's affinity set remembers) and jumps to its
//! chain, which DNATs; marked packets are masqueraded on the way out; a
//! Service port with no endpoints is rejected in the filter hooks before
//! anything waits on it.
//!
//! The state is kept as [`Ruleset`] (chains with their rules, map
//! elements, affinity sets); [`Ruleset::full`] writes the whole table and
//! [`Ruleset::changes_from`] only what differs from the last one applied.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;
use std::net::SocketAddr;

use super::model::{Endpoint, ServicePort};

/// The mark of packets to masquerade, as kube-proxy's.
const MASQUERADE_MARK: &str = "0x4000";

/// The chains and maps every sync keeps (declared by [`Ruleset::full`]).
const SERVICE_IPS: &str = "service-ips";
const SERVICE_NODEPORTS: &str = "service-nodeports";
const NO_ENDPOINT_SERVICES: &str = "no-endpoint-services";
const NO_ENDPOINT_NODEPORTS: &str = "no-endpoint-nodeports";

/// What the proxy wants in its table.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ruleset {
    /// Chains of Service ports and endpoints, each with its rules.
    pub chains: BTreeMap<String, Vec<String>>,
    /// Map name → element key → verdict.
    pub maps: BTreeMap<&'static str, BTreeMap<String, String>>,
    /// Affinity sets, each with its timeout in seconds.
    pub sets: BTreeMap<String, u32>,
}

/// Where the node's own cluster DNS answers: the cluster DNS address's
/// port 53 goes there instead of to the `kube-dns` Service's endpoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeDns {
    pub cluster_ip: std::net::Ipv4Addr,
    pub listen: SocketAddr,
}

impl Ruleset {
    /// The rules for `ports` on node `node`.
    pub fn build(ports: &[ServicePort], node: &str, dns: Option<NodeDns>) -> Ruleset {
        let mut set = Ruleset::default();
        for map in [
            SERVICE_IPS,
            SERVICE_NODEPORTS,
            NO_ENDPOINT_SERVICES,
            NO_ENDPOINT_NODEPORTS,
        ] {
            set.maps.insert(map, BTreeMap::new());
        }
        let mut dns_keys = BTreeSet::new();
        if let Some(dns) = dns {
            let chain = "cluster-dns".to_string();
            let listen = dns.listen;
            set.chains.insert(
                chain.clone(),
                vec![
                    format!("meta l4proto udp dnat to {listen}"),
                    format!("meta l4proto tcp dnat to {listen}"),
                ],
            );
            for proto in ["udp", "tcp"] {
                let key = format!("{} . {proto} . 53", dns.cluster_ip);
                dns_keys.insert(key.clone());
                set.map(SERVICE_IPS).insert(key, format!("goto {chain}"));
            }
        }
        for port in ports {
            set.add_port(port, node, &dns_keys);
        }
        set
    }

    fn map(&mut self, name: &'static str) -> &mut BTreeMap<String, String> {
        self.maps.entry(name).or_default()
    }

    fn add_port(&mut self, port: &ServicePort, node: &str, skip: &BTreeSet<String>) {
        let id = port.id();
        let proto = port.protocol.nft();
        let cluster = port.cluster_endpoints(node);
        let external = port.external_endpoints(node);
        let ip_keys: Vec<String> = port
            .cluster_ips
            .iter()
            .map(|ip| format!("{ip} . {proto} . {}", port.port))
            .filter(|key| !skip.contains(key))
            .collect();
        let node_port_key = port.node_port.map(|p| format!("{proto} . {p}"));

        // Endpoint chains, for whichever traffic reaches them.
        let mut used: BTreeSet<&Endpoint> = cluster.iter().copied().collect();
        used.extend(external.iter().copied());
        for endpoint in &used {
            self.add_endpoint(port, endpoint);
        }

        // Cluster IPs.
        let service_chain = format!("svc-{id}");
        match (
            cluster.is_empty(),
            port.endpoints.iter().any(|e| e.ready || e.serving),
        ) {
            (false, _) => {
                self.chains
                    .insert(service_chain.clone(), self.picker(port, &cluster));
                for key in &ip_keys {
                    self.map(SERVICE_IPS)
                        .insert(key.clone(), format!("goto {service_chain}"));
                }
            }
            // None anywhere: refused at once. Only elsewhere (a Local
            // policy): dropped, as kube-proxy does.
            (true, anywhere) => {
                let verdict = if anywhere {
                    "drop"
                } else {
                    "goto reject-chain"
                };
                for key in &ip_keys {
                    self.map(NO_ENDPOINT_SERVICES)
                        .insert(key.clone(), verdict.to_string());
                }
            }
        }

        // Node ports.
        let Some(node_port_key) = node_port_key else {
            return;
        };
        if external.is_empty() {
            let anywhere = port.endpoints.iter().any(|e| e.ready || e.serving);
            let verdict = if anywhere {
                "drop"
            } else {
                "goto reject-chain"
            };
            self.map(NO_ENDPOINT_NODEPORTS)
                .insert(node_port_key, verdict.to_string());
            return;
        }
        let external_chain = format!("ext-{id}");
        let mut rules = Vec::new();
        if port.external_local {
            // The client's address is kept, unless the client is this
            // node itself.
            rules.push("fib saddr type local jump mark-for-masquerade".to_string());
            rules.extend(self.picker(port, &external));
        } else {
            rules.push("jump mark-for-masquerade".to_string());
            match external == cluster {
                true => rules.push(format!("goto {service_chain}")),
                // Cluster IPs only to this node's, node ports anywhere.
                false => rules.extend(self.picker(port, &external)),
            }
        }
        self.chains.insert(external_chain.clone(), rules);
        self.map(SERVICE_NODEPORTS)
            .insert(node_port_key, format!("goto {external_chain}"));
    }

    /// The rules that send a connection to one of `endpoints`: the one
    /// the client's affinity remembers, else one at random.
    fn picker(&self, port: &ServicePort, endpoints: &[&Endpoint]) -> Vec<String> {
        let mut rules = Vec::new();
        if port.affinity_seconds.is_some() {
            for endpoint in endpoints {
                let name = endpoint_name(port, endpoint);
                rules.push(format!("ip saddr @affinity-{name} goto ep-{name}"));
            }
        }
        let choices: Vec<String> = endpoints
            .iter()
            .enumerate()
            .map(|(i, e)| format!("{i} : goto ep-{}", endpoint_name(port, e)))
            .collect();
        rules.push(format!(
            "numgen random mod {} vmap {{ {} }}",
            endpoints.len(),
            choices.join(", ")
        ));
        rules
    }

    fn add_endpoint(&mut self, port: &ServicePort, endpoint: &Endpoint) {
        let name = endpoint_name(port, endpoint);
        let mut rules = vec![format!("ip saddr {} jump mark-for-masquerade", endpoint.ip)];
        if let Some(seconds) = port.affinity_seconds {
            self.sets.insert(format!("affinity-{name}"), seconds);
            rules.push(format!("update @affinity-{name} {{ ip saddr }}"));
        }
        rules.push(format!(
            "meta l4proto {} dnat to {}:{}",
            port.protocol.nft(),
            endpoint.ip,
            endpoint.port
        ));
        self.chains.insert(format!("ep-{name}"), rules);
    }

    /// The whole table, replaced in one transaction.
    pub fn full(&self, table: &str) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "add table ip {table}");
        let _ = writeln!(out, "delete table ip {table}");
        let _ = writeln!(out, "table ip {table} {{");
        for (map, key) in [
            (SERVICE_IPS, "ipv4_addr . inet_proto . inet_service"),
            (
                NO_ENDPOINT_SERVICES,
                "ipv4_addr . inet_proto . inet_service",
            ),
            (SERVICE_NODEPORTS, "inet_proto . inet_service"),
            (NO_ENDPOINT_NODEPORTS, "inet_proto . inet_service"),
        ] {
            let _ = writeln!(out, "\tmap {map} {{ type {key} : verdict; }}");
        }
        let _ = writeln!(
            out,
            "\tchain filter-input {{ type filter hook input priority -110; policy accept; ct state new jump endpoints-check; }}"
        );
        let _ = writeln!(
            out,
            "\tchain filter-forward {{ type filter hook forward priority -110; policy accept; ct state new jump endpoints-check; }}"
        );
        let _ = writeln!(
            out,
            "\tchain filter-output {{ type filter hook output priority -110; policy accept; ct state new jump endpoints-check; }}"
        );
        let _ = writeln!(
            out,
            "\tchain endpoints-check {{ ip daddr . meta l4proto . th dport vmap @{NO_ENDPOINT_SERVICES}; fib daddr type local meta l4proto . th dport vmap @{NO_ENDPOINT_NODEPORTS}; }}"
        );
        let _ = writeln!(out, "\tchain reject-chain {{ reject; }}");
        let _ = writeln!(
            out,
            "\tchain nat-prerouting {{ type nat hook prerouting priority -100; policy accept; jump services; }}"
        );
        let _ = writeln!(
            out,
            "\tchain nat-output {{ type nat hook output priority -100; policy accept; jump services; }}"
        );
        let _ = writeln!(
            out,
            "\tchain nat-postrouting {{ type nat hook postrouting priority 100; policy accept; jump masquerading; }}"
        );
        let _ = writeln!(
            out,
            "\tchain services {{ ip daddr . meta l4proto . th dport vmap @{SERVICE_IPS}; fib daddr type local meta l4proto . th dport vmap @{SERVICE_NODEPORTS}; }}"
        );
        let _ = writeln!(
            out,
            "\tchain mark-for-masquerade {{ meta mark set meta mark | {MASQUERADE_MARK}; }}"
        );
        let _ = writeln!(
            out,
            "\tchain masquerading {{ meta mark & {MASQUERADE_MARK} == 0 return; meta mark set meta mark ^ {MASQUERADE_MARK}; masquerade fully-random; }}"
        );
        let _ = writeln!(out, "}}");
        out.push_str(&self.changes_from(&Ruleset::default(), table));
        out
    }

    /// What turns `before` (applied last) into this.
    pub fn changes_from(&self, before: &Ruleset, table: &str) -> String {
        let mut out = String::new();
        // New sets and chains first, so that rules and elements can name
        // them.
        for (set, seconds) in &self.sets {
            if !before.sets.contains_key(set) {
                let _ = writeln!(
                    out,
                    "add set ip {table} {set} {{ type ipv4_addr; flags dynamic,timeout; timeout {seconds}s; }}"
                );
            }
        }
        for chain in self.chains.keys() {
            if !before.chains.contains_key(chain) {
                let _ = writeln!(out, "add chain ip {table} {chain}");
            }
        }
        for (chain, rules) in &self.chains {
            match before.chains.get(chain) {
                Some(old) if old == rules => continue,
                Some(_) => {
                    let _ = writeln!(out, "flush chain ip {table} {chain}");
                }
                None => {}
            }
            for rule in rules {
                let _ = writeln!(out, "add rule ip {table} {chain} {rule}");
            }
        }
        let empty = BTreeMap::new();
        let names: BTreeSet<&&str> = self.maps.keys().chain(before.maps.keys()).collect();
        for map in names {
            let now = self.maps.get(*map).unwrap_or(&empty);
            let was = before.maps.get(*map).unwrap_or(&empty);
            for (key, verdict) in was {
                if now.get(key) != Some(verdict) {
                    let _ = writeln!(out, "delete element ip {table} {map} {{ {key} }}");
                }
            }
            for (key, verdict) in now {
                if was.get(key) != Some(verdict) {
                    let _ = writeln!(out, "add element ip {table} {map} {{ {key} : {verdict} }}");
                }
            }
        }
        // Chains no longer wanted: emptied first (one may jump to
        // another), then removed; then their sets.
        let gone: Vec<&String> = before
            .chains
            .keys()
            .filter(|c| !self.chains.contains_key(*c))
            .collect();
        for chain in &gone {
            let _ = writeln!(out, "flush chain ip {table} {chain}");
        }
        for chain in &gone {
            let _ = writeln!(out, "delete chain ip {table} {chain}");
        }
        for set in before.sets.keys() {
            if !self.sets.contains_key(set) {
                let _ = writeln!(out, "delete set ip {table} {set}");
            }
        }
        out
    }
}

/// `namespace/name/protocol/port__ip/port`: names an endpoint's chain and
/// affinity set.
fn endpoint_name(port: &ServicePort, endpoint: &Endpoint) -> String {
    format!("{}__{}/{}", port.id(), endpoint.ip, endpoint.port)
}

#[cfg(test)]
mod tests {
    use super::super::model::service_ports;
    use super::*;
    use k8s_openapi::api::core::v1::Service;
    use k8s_openapi::api::discovery::v1::EndpointSlice;

    fn web(endpoints: serde_json::Value, spec: serde_json::Value) -> Vec<ServicePort> {
        let mut service_spec = serde_json::json!({"clusterIP": "10.96.0.20",
            "ports": [{"name": "http", "port": 80, "nodePort": 30080}], "type": "NodePort"});
        if let (Some(base), Some(more)) = (service_spec.as_object_mut(), spec.as_object()) {
            base.extend(more.clone());
        }
        let service: Service = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web", "namespace": "default"}, "spec": service_spec}))
        .unwrap();
        let slice: EndpointSlice = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web-1", "namespace": "default",
                         "labels": {"kubernetes.io/service-name": "web"}},
            "addressType": "IPv4", "ports": [{"name": "http", "port": 8080}],
            "endpoints": endpoints}))
        .unwrap();
        service_ports(&[service], &[slice])
    }

    #[test]
    fn a_service_port_picks_among_its_ready_endpoints() {
        let ports = web(
            serde_json::json!([{"addresses": ["10.244.0.2"]}, {"addresses": ["10.244.0.3"]}]),
            serde_json::json!({}),
        );
        let rules = Ruleset::build(&ports, "a", None);
        assert_eq!(
            rules.maps[SERVICE_IPS]["10.96.0.20 . tcp . 80"],
            "goto svc-default/web/tcp/http"
        );
        assert_eq!(
            rules.chains["svc-default/web/tcp/http"],
            ["numgen random mod 2 vmap { 0 : goto ep-default/web/tcp/http__10.244.0.2/8080, 1 : goto ep-default/web/tcp/http__10.244.0.3/8080 }"]
        );
        assert_eq!(
            rules.chains["ep-default/web/tcp/http__10.244.0.3/8080"],
            [
                "ip saddr 10.244.0.3 jump mark-for-masquerade",
                "meta l4proto tcp dnat to 10.244.0.3:8080"
            ]
        );
        assert_eq!(
            rules.maps[SERVICE_NODEPORTS]["tcp . 30080"],
            "goto ext-default/web/tcp/http"
        );
        assert_eq!(
            rules.chains["ext-default/web/tcp/http"],
            ["jump mark-for-masquerade", "goto svc-default/web/tcp/http"]
        );
        assert!(rules.maps[NO_ENDPOINT_SERVICES].is_empty());
    }

    #[test]
    fn without_endpoints_a_service_is_refused_and_under_local_policy_dropped() {
        let none = Ruleset::build(
            &web(serde_json::json!([]), serde_json::json!({})),
            "a",
            None,
        );
        assert!(none.chains.is_empty());
        assert_eq!(
            none.maps[NO_ENDPOINT_SERVICES]["10.96.0.20 . tcp . 80"],
            "goto reject-chain"
        );
        assert_eq!(
            none.maps[NO_ENDPOINT_NODEPORTS]["tcp . 30080"],
            "goto reject-chain"
        );
        let elsewhere = Ruleset::build(
            &web(
                serde_json::json!([{"addresses": ["10.244.1.2"], "nodeName": "b"}]),
                serde_json::json!({"externalTrafficPolicy": "Local"}),
            ),
            "a",
            None,
        );
        assert_eq!(elsewhere.maps[NO_ENDPOINT_NODEPORTS]["tcp . 30080"], "drop");
        assert!(elsewhere.maps[SERVICE_IPS].contains_key("10.96.0.20 . tcp . 80"));
    }

    #[test]
    fn client_ip_affinity_remembers_the_endpoint() {
        let rules = Ruleset::build(
            &web(
                serde_json::json!([{"addresses": ["10.244.0.2"]}]),
                serde_json::json!({"sessionAffinity": "ClientIP",
                    "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 60}}}),
            ),
            "a",
            None,
        );
        let name = "default/web/tcp/http__10.244.0.2/8080";
        assert_eq!(rules.sets[&format!("affinity-{name}")], 60);
        assert_eq!(
            rules.chains["svc-default/web/tcp/http"][0],
            format!("ip saddr @affinity-{name} goto ep-{name}")
        );
        assert!(rules.chains[&format!("ep-{name}")]
            .contains(&format!("update @affinity-{name} {{ ip saddr }}")));
    }

    #[test]
    fn the_nodes_dns_takes_the_cluster_dns_address() {
        let dns = NodeDns {
            cluster_ip: "10.96.0.10".parse().unwrap(),
            listen: "127.0.0.1:5353".parse().unwrap(),
        };
        let kube_dns: Service = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "kube-dns", "namespace": "kube-system"},
            "spec": {"clusterIP": "10.96.0.10", "ports": [{"name": "dns", "port": 53, "protocol": "UDP"}]}})).unwrap();
        let ports = service_ports(&[kube_dns], &[]);
        let rules = Ruleset::build(&ports, "a", Some(dns));
        assert_eq!(
            rules.maps[SERVICE_IPS]["10.96.0.10 . udp . 53"],
            "goto cluster-dns"
        );
        assert!(!rules.maps[NO_ENDPOINT_SERVICES].contains_key("10.96.0.10 . udp . 53"));
        assert_eq!(
            rules.chains["cluster-dns"][0],
            "meta l4proto udp dnat to 127.0.0.1:5353"
        );
    }

    #[test]
    fn only_what_changed_is_written_again() {
        let two = Ruleset::build(
            &web(
                serde_json::json!([{"addresses": ["10.244.0.2"]}, {"addresses": ["10.244.0.3"]}]),
                serde_json::json!({}),
            ),
            "a",
            None,
        );
        let one = Ruleset::build(
            &web(
                serde_json::json!([{"addresses": ["10.244.0.2"]}]),
                serde_json::json!({}),
            ),
            "a",
            None,
        );
        assert_eq!(two.changes_from(&two, "t"), "");
        let change = one.changes_from(&two, "t");
        assert_eq!(
            change,
            "flush chain ip t svc-default/web/tcp/http\n\
             add rule ip t svc-default/web/tcp/http numgen random mod 1 vmap { 0 : goto ep-default/web/tcp/http__10.244.0.2/8080 }\n\
             flush chain ip t ep-default/web/tcp/http__10.244.0.3/8080\n\
             delete chain ip t ep-default/web/tcp/http__10.244.0.3/8080\n"
        );
        let none = Ruleset::build(
            &web(serde_json::json!([]), serde_json::json!({})),
            "a",
            None,
        );
        let change = none.changes_from(&one, "t");
        assert!(
            change.contains("delete element ip t service-ips { 10.96.0.20 . tcp . 80 }"),
            "{change}"
        );
        assert!(change.contains("add element ip t no-endpoint-services { 10.96.0.20 . tcp . 80 : goto reject-chain }"), "{change}");
        // Chains are emptied before any is removed (one jumps to another).
        let flushed = change
            .find("flush chain ip t svc-default/web/tcp/http")
            .unwrap();
        let deleted = change
            .find("delete chain ip t ep-default/web/tcp/http__10.244.0.2/8080")
            .unwrap();
        assert!(flushed < deleted, "{change}");
        let full = one.full("t");
        assert!(full.starts_with("add table ip t\ndelete table ip t\ntable ip t {\n"));
        assert!(full.contains("add element ip t service-ips { 10.96.0.20 . tcp . 80 : goto svc-default/web/tcp/http }"));
    }
}
