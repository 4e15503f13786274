//! Stale UDP flows. Connection tracking keeps a UDP flow going to the
//! endpoint it was first sent to for as long as packets keep coming, so a
//! client of an endpoint that left would keep sending into the void, and
//! a flow that met a Service while it had no endpoint would not reach the
//! ones it has since. As kube-proxy does, once the rules have changed the
//! proxy deletes such flows' entries, through the `conntrack` tool
//! (conntrack-tools); TCP needs none of this (a connection to an endpoint
//! gone is reset and the client connects again).

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;

use super::model::{Protocol, ServicePort};

/// The entries to delete: one `conntrack -D` filter each.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Stale {
    /// Flows to a cluster IP's port sent to an endpoint that left.
    ClusterIpToEndpoint {
        ip: Ipv4Addr,
        port: u16,
        endpoint: Ipv4Addr,
    },
    /// Flows to a node port sent to an endpoint that left.
    NodePortToEndpoint { port: u16, endpoint: Ipv4Addr },
    /// Every flow to a cluster IP's port, which had no endpoint and has.
    ClusterIp { ip: Ipv4Addr, port: u16 },
    /// Every flow to a node port, which had no endpoint and has.
    NodePort { port: u16 },
}

impl Stale {
    /// The arguments of `conntrack` that delete these entries.
    pub fn args(&self) -> Vec<String> {
        let mut args: Vec<String> = ["-D", "-p", "udp"].map(String::from).to_vec();
        let mut push = |flag: &str, value: String| {
            args.push(flag.to_string());
            args.push(value);
        };
        match self {
            Stale::ClusterIpToEndpoint { ip, port, endpoint } => {
                push("--orig-dst", ip.to_string());
                push("--orig-port-dst", port.to_string());
                push("--dst-nat", endpoint.to_string());
            }
            Stale::NodePortToEndpoint { port, endpoint } => {
                push("--orig-port-dst", port.to_string());
                push("--dst-nat", endpoint.to_string());
            }
            Stale::ClusterIp { ip, port } => {
                push("--orig-dst", ip.to_string());
                push("--orig-port-dst", port.to_string());
            }
            Stale::NodePort { port } => push("--orig-port-dst", port.to_string()),
        }
        args
    }
}

/// The UDP flows made stale when this node's rules went from `before` to
/// `after`: those sent to an endpoint no longer used, and every flow to a
/// port that had no endpoint and now has one.
pub fn stale(before: &[ServicePort], after: &[ServicePort], node: &str) -> BTreeSet<Stale> {
    let udp = |ports: &[ServicePort]| -> BTreeMap<String, ServicePort> {
        ports
            .iter()
            .filter(|p| p.protocol == Protocol::Udp)
            .map(|p| (p.id(), p.clone()))
            .collect()
    };
    let (before, after) = (udp(before), udp(after));
    let cluster_ips = |port: Option<&ServicePort>| -> BTreeSet<Ipv4Addr> {
        port.map(|p| p.cluster_endpoints(node).iter().map(|e| e.ip).collect())
            .unwrap_or_default()
    };
    let external_ips = |port: Option<&ServicePort>| -> BTreeSet<Ipv4Addr> {
        port.filter(|p| p.node_port.is_some())
            .map(|p| p.external_endpoints(node).iter().map(|e| e.ip).collect())
            .unwrap_or_default()
    };
    let mut stale = BTreeSet::new();
    for (id, old) in &before {
        let new = after.get(id);
        for endpoint in cluster_ips(Some(old)).difference(&cluster_ips(new)) {
            for ip in &old.cluster_ips {
                stale.insert(Stale::ClusterIpToEndpoint {
                    ip: *ip,
                    port: old.port,
                    endpoint: *endpoint,
                });
            }
        }
        if let Some(port) = old.node_port {
            for endpoint in external_ips(Some(old)).difference(&external_ips(new)) {
                stale.insert(Stale::NodePortToEndpoint {
                    port,
                    endpoint: *endpoint,
                });
            }
        }
    }
    for (id, new) in &after {
        let old = before.get(id);
        if cluster_ips(old).is_empty() && !cluster_ips(Some(new)).is_empty() {
            for ip in &new.cluster_ips {
                stale.insert(Stale::ClusterIp {
                    ip: *ip,
                    port: new.port,
                });
            }
        }
        if let Some(port) = new.node_port {
            if external_ips(old).is_empty() && !external_ips(Some(new)).is_empty() {
                stale.insert(Stale::NodePort { port });
            }
        }
    }
    stale
}

/// Deletes the entries of `stale` with the `conntrack` tool; what it
/// could not do, said. None to delete is not an error.
pub fn delete(stale: &BTreeSet<Stale>) -> Result<(), String> {
    let mut failed = Vec::new();
    for entry in stale {
        let args = entry.args();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        match crate::network::hostgw::run("conntrack", &args, None) {
            Ok(_) => {}
            // conntrack exits 1 when no entry matched.
            Err(err) if err.contains("0 flow entries have been deleted") => {}
            Err(err) => failed.push(err),
        }
    }
    match failed.is_empty() {
        true => Ok(()),
        false => Err(failed.join("; ")),
    }
}

/// Whether the `conntrack` tool can be run here.
pub fn available() -> bool {
    crate::network::hostgw::run("conntrack", &["--version"], None).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    use k8s_openapi::api::core::v1::Service;
    use k8s_openapi::api::discovery::v1::EndpointSlice;

    /// A UDP Service at 10.96.0.20:53 (node port 30053) and a TCP one,
    /// each with endpoints at `addresses` (ready unless `not_ready`).
    fn ports(addresses: &[&str], not_ready: &[&str]) -> Vec<ServicePort> {
        let service = |name: &str, ip: &str, protocol: &str| -> Service {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": name, "namespace": "default"},
                "spec": {"type": "NodePort", "clusterIP": ip, "clusterIPs": [ip],
                    "ports": [{"name": "p", "port": 53, "protocol": protocol, "nodePort": 30053}]}
            }))
            .unwrap()
        };
        let slice = |name: &str, protocol: &str| -> EndpointSlice {
            let endpoints: Vec<serde_json::Value> = addresses
                .iter()
                .map(|a| {
                    serde_json::json!({"addresses": [a],
                        "conditions": {"ready": !not_ready.contains(a)}, "nodeName": "a"})
                })
                .collect();
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": format!("{name}-x"), "namespace": "default",
                    "labels": {"kubernetes.io/service-name": name}},
                "addressType": "IPv4",
                "ports": [{"name": "p", "port": 5353, "protocol": protocol}],
                "endpoints": endpoints
            }))
            .unwrap()
        };
        let services = [
            service("dns", "10.96.0.20", "UDP"),
            service("web", "10.96.0.30", "TCP"),
        ];
        let slices = [slice("dns", "UDP"), slice("web", "TCP")];
        super::super::model::service_ports(&services, &slices)
    }

    fn ip(text: &str) -> Ipv4Addr {
        text.parse().unwrap()
    }

    #[test]
    fn an_endpoint_that_leaves_has_its_udp_flows_deleted() {
        let before = ports(&["10.244.0.2", "10.244.0.3"], &[]);
        let after = ports(&["10.244.0.3"], &[]);
        let found = stale(&before, &after, "a");
        let endpoint = ip("10.244.0.2");
        assert_eq!(
            found,
            BTreeSet::from([
                Stale::ClusterIpToEndpoint {
                    ip: ip("10.96.0.20"),
                    port: 53,
                    endpoint,
                },
                Stale::NodePortToEndpoint {
                    port: 30053,
                    endpoint,
                },
            ]),
            "only the UDP Service's flows"
        );
        // Not ready is gone as far as the rules go.
        assert_eq!(
            stale(
                &before,
                &ports(&["10.244.0.2", "10.244.0.3"], &["10.244.0.2"]),
                "a"
            ),
            found
        );
        // Nothing changed, nothing stale.
        assert!(stale(&before, &before, "a").is_empty());
    }

    #[test]
    fn a_port_that_gets_its_first_endpoint_has_every_flow_deleted() {
        let found = stale(&ports(&[], &[]), &ports(&["10.244.0.2"], &[]), "a");
        assert_eq!(
            found,
            BTreeSet::from([
                Stale::ClusterIp {
                    ip: ip("10.96.0.20"),
                    port: 53,
                },
                Stale::NodePort { port: 30053 },
            ])
        );
        // A new Service with endpoints at once is the same.
        assert_eq!(stale(&[], &ports(&["10.244.0.2"], &[]), "a"), found);
        // Going to none leaves flows to the endpoint that left.
        let emptied = stale(&ports(&["10.244.0.2"], &[]), &ports(&[], &[]), "a");
        assert_eq!(emptied.len(), 2, "{emptied:?}");
    }

    #[test]
    fn filters_name_what_conntrack_matches() {
        let args = Stale::ClusterIpToEndpoint {
            ip: ip("10.96.0.20"),
            port: 53,
            endpoint: ip("10.244.0.2"),
        }
        .args();
        assert_eq!(
            args.join(" "),
            "-D -p udp --orig-dst 10.96.0.20 --orig-port-dst 53 --dst-nat 10.244.0.2"
        );
        assert_eq!(
            Stale::NodePort { port: 30053 }.args().join(" "),
            "-D -p udp --orig-port-dst 30053"
        );
    }
}
