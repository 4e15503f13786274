//! What the proxy programs, read from Services and EndpointSlices as
//! kube-proxy reads them: one entry per Service port with its cluster
//! IPs, node port, policies and endpoints, and which endpoints each kind of
//! traffic may go to.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;

/// The label that ties an EndpointSlice to its Service.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Protocol {
    Tcp,
    Udp,
    Sctp,
}

impl Protocol {
    fn parse(text: Option<&str>) -> Option<Protocol> {
        match text.unwrap_or("TCP") {
            "TCP" => Some(Protocol::Tcp),
            "UDP" => Some(Protocol::Udp),
            "SCTP" => Some(Protocol::Sctp),
            _ => None,
        }
    }

    /// The name nftables knows it by.
    pub fn nft(self) -> &'static str {
        match self {
            Protocol::Tcp => "tcp",
            Protocol::Udp => "udp",
            Protocol::Sctp => "sctp",
        }
    }
}

/// One endpoint of a Service port.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Endpoint {
    pub ip: Ipv4Addr,
    pub port: u16,
    pub ready: bool,
    pub serving: bool,
    pub terminating: bool,
    pub node: Option<String>,
}

/// One port of a Service, as the proxy programs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServicePort {
    pub namespace: String,
    pub name: String,
    /// The port's name, or its number where it has none.
    pub port_name: String,
    pub protocol: Protocol,
    pub cluster_ips: Vec<Ipv4Addr>,
    pub port: u16,
    pub node_port: Option<u16>,
    /// `sessionAffinity: ClientIP`: how long a client keeps its endpoint.
    pub affinity_seconds: Option<u32>,
    /// `internalTrafficPolicy: Local`.
    pub internal_local: bool,
    /// `externalTrafficPolicy: Local` (for node ports).
    pub external_local: bool,
    pub endpoints: Vec<Endpoint>,
}

impl ServicePort {
    /// `namespace/name/protocol/port`: what names its chains.
    pub fn id(&self) -> String {
        format!(
            "{}/{}/{}/{}",
            self.namespace,
            self.name,
            self.protocol.nft(),
            self.port_name
        )
    }

    /// Where traffic to the cluster IPs goes: ready endpoints (only this
    /// node's under `internalTrafficPolicy: Local`), else those still
    /// serving while they terminate, as kube-proxy picks them.
    pub fn cluster_endpoints(&self, node: &str) -> Vec<&Endpoint> {
        usable(
            self.endpoints
                .iter()
                .filter(|e| !self.internal_local || e.node.as_deref() == Some(node)),
        )
    }

    /// Where node-port traffic goes: as for cluster IPs, but only this
    /// node's under `externalTrafficPolicy: Local`.
    pub fn external_endpoints(&self, node: &str) -> Vec<&Endpoint> {
        usable(
            self.endpoints
                .iter()
                .filter(|e| !self.external_local || e.node.as_deref() == Some(node)),
        )
    }
}

/// Ready endpoints, else the serving terminating ones.
fn usable<'a>(endpoints: impl Iterator<Item = &'a Endpoint> + Clone) -> Vec<&'a Endpoint> {
    let ready: Vec<&Endpoint> = endpoints.clone().filter(|e| e.ready).collect();
    match ready.is_empty() {
        false => ready,
        true => endpoints.filter(|e| e.serving && e.terminating).collect(),
    }
}

/// Every Service port the proxy programs: Services with a cluster IP
/// (not headless, not ExternalName), with the endpoints of their slices.
pub fn service_ports<'a>(
    services: impl IntoIterator<Item = &'a Service>,
    slices: impl IntoIterator<Item = &'a EndpointSlice>,
) -> Vec<ServicePort> {
    let mut by_service: BTreeMap<(String, String), Vec<&EndpointSlice>> = BTreeMap::new();
    for slice in slices {
        if slice.address_type != "IPv4" {
            continue;
        }
        let Some(service) = slice
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(SERVICE_NAME_LABEL))
        else {
            continue;
        };
        let namespace = slice.metadata.namespace.clone().unwrap_or_default();
        by_service
            .entry((namespace, service.clone()))
            .or_default()
            .push(slice);
    }
    let mut ports = Vec::new();
    for service in services {
        let Some(spec) = service.spec.as_ref() else {
            continue;
        };
        if spec.type_.as_deref() == Some("ExternalName") {
            continue;
        }
        let mut cluster_ips: Vec<String> = spec.cluster_ips.clone().unwrap_or_default();
        if cluster_ips.is_empty() {
            cluster_ips.extend(spec.cluster_ip.clone());
        }
        let cluster_ips: Vec<Ipv4Addr> = cluster_ips
            .iter()
            .filter_map(|ip| ip.parse().ok())
            .collect();
        if cluster_ips.is_empty() {
            // Headless (None) or not allocated: nothing to proxy.
            continue;
        }
        let namespace = service.metadata.namespace.clone().unwrap_or_default();
        let name = service.metadata.name.clone().unwrap_or_default();
        let affinity_seconds = match spec.session_affinity.as_deref() {
            Some("ClientIP") => Some(
                spec.session_affinity_config
                    .as_ref()
                    .and_then(|c| c.client_ip.as_ref())
                    .and_then(|c| c.timeout_seconds)
                    .and_then(|s| u32::try_from(s).ok())
                    .filter(|s| *s > 0)
                    .unwrap_or(10_800),
            ),
            _ => None,
        };
        let slices = by_service
            .get(&(namespace.clone(), name.clone()))
            .map(Vec::as_slice)
            .unwrap_or_default();
        for port in spec.ports.iter().flatten() {
            let Some(protocol) = Protocol::parse(port.protocol.as_deref()) else {
                continue;
            };
            let Ok(number) = u16::try_from(port.port) else {
                continue;
            };
            let port_name = port.name.clone().filter(|n| !n.is_empty());
            let node_port = port
                .node_port
                .and_then(|p| u16::try_from(p).ok())
                .filter(|p| *p > 0);
            ports.push(ServicePort {
                namespace: namespace.clone(),
                name: name.clone(),
                port_name: port_name.clone().unwrap_or_else(|| format!("p{number}")),
                protocol,
                cluster_ips: cluster_ips.clone(),
                port: number,
                node_port,
                affinity_seconds,
                internal_local: spec.internal_traffic_policy.as_deref() == Some("Local"),
                external_local: spec.external_traffic_policy.as_deref() == Some("Local"),
                endpoints: endpoints_for(slices, port_name.as_deref().unwrap_or(""), protocol),
            });
        }
    }
    ports
}

/// The endpoints of the slices for the Service port named `port_name`.
fn endpoints_for(slices: &[&EndpointSlice], port_name: &str, protocol: Protocol) -> Vec<Endpoint> {
    let mut found = Vec::new();
    for slice in slices {
        let port = slice.ports.iter().flatten().find(|p| {
            p.name.as_deref().unwrap_or("") == port_name
                && Protocol::parse(p.protocol.as_deref()) == Some(protocol)
        });
        let Some(number) = port
            .and_then(|p| p.port)
            .and_then(|p| u16::try_from(p).ok())
            .filter(|p| *p > 0)
        else {
            continue;
        };
        for endpoint in &slice.endpoints {
            let conditions = endpoint.conditions.clone().unwrap_or_default();
            // Unset ready is ready; unset serving is ready's value.
            let ready = conditions.ready.unwrap_or(true);
            let Some(ip) = endpoint.addresses.first().and_then(|a| a.parse().ok()) else {
                continue;
            };
            found.push(Endpoint {
                ip,
                port: number,
                ready,
                serving: conditions.serving.unwrap_or(ready),
                terminating: conditions.terminating.unwrap_or(false),
                node: endpoint.node_name.clone(),
            });
        }
    }
    found.sort();
    found.dedup_by(|a, b| a.ip == b.ip && a.port == b.port);
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn service(name: &str, spec: serde_json::Value) -> Service {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "default"},
            "spec": spec,
        }))
        .unwrap()
    }

    pub(crate) fn slice(
        service: &str,
        ports: serde_json::Value,
        endpoints: serde_json::Value,
    ) -> EndpointSlice {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": format!("{service}-x"), "namespace": "default",
                         "labels": {SERVICE_NAME_LABEL: service}},
            "addressType": "IPv4",
            "ports": ports,
            "endpoints": endpoints,
        }))
        .unwrap()
    }

    #[test]
    fn ports_carry_their_endpoints_and_policies() {
        let services = [
            service(
                "web",
                serde_json::json!({"clusterIP": "10.96.0.20", "type": "NodePort",
                    "sessionAffinity": "ClientIP", "externalTrafficPolicy": "Local",
                    "ports": [{"name": "http", "port": 80, "nodePort": 30080},
                              {"name": "dns", "port": 53, "protocol": "UDP"}]}),
            ),
            service(
                "headless",
                serde_json::json!({"clusterIP": "None", "ports": [{"port": 80}]}),
            ),
            service(
                "elsewhere",
                serde_json::json!({"type": "ExternalName", "externalName": "example.com"}),
            ),
            service(
                "bare",
                serde_json::json!({"clusterIP": "10.96.0.21", "ports": [{"port": 8080}]}),
            ),
        ];
        let slices = [
            slice(
                "web",
                serde_json::json!([{"name": "http", "port": 8080}, {"name": "dns", "port": 5353, "protocol": "UDP"}]),
                serde_json::json!([
                    {"addresses": ["10.244.0.2"], "conditions": {"ready": true}, "nodeName": "a"},
                    {"addresses": ["10.244.1.2"], "conditions": {"ready": false, "serving": true, "terminating": true}, "nodeName": "b"},
                    {"addresses": ["10.244.1.3"], "nodeName": "b"},
                ]),
            ),
            slice(
                "bare",
                serde_json::json!([{"port": 9090}]),
                serde_json::json!([{"addresses": ["10.244.0.9"]}]),
            ),
        ];
        let ports = service_ports(&services, &slices);
        let ids: Vec<String> = ports.iter().map(ServicePort::id).collect();
        assert_eq!(
            ids,
            [
                "default/web/tcp/http",
                "default/web/udp/dns",
                "default/bare/tcp/p8080"
            ]
        );
        let http = &ports[0];
        assert_eq!(http.node_port, Some(30080));
        assert_eq!(http.affinity_seconds, Some(10_800));
        assert!(http.external_local && !http.internal_local);
        let ips = |eps: Vec<&Endpoint>| eps.iter().map(|e| e.ip.to_string()).collect::<Vec<_>>();
        // Ready ones; the terminating one leaves while others are ready.
        assert_eq!(
            ips(http.cluster_endpoints("a")),
            ["10.244.0.2", "10.244.1.3"]
        );
        assert_eq!(ips(http.external_endpoints("a")), ["10.244.0.2"]);
        assert_eq!(ips(http.external_endpoints("b")), ["10.244.1.3"]);
        assert_eq!(ports[1].endpoints[0].port, 5353);
        assert_eq!(ports[2].endpoints[0].port, 9090);
    }

    #[test]
    fn terminating_endpoints_serve_only_when_nothing_is_ready() {
        let services = [service(
            "web",
            serde_json::json!({"clusterIP": "10.96.0.20", "internalTrafficPolicy": "Local", "ports": [{"port": 80}]}),
        )];
        let slices = [slice(
            "web",
            serde_json::json!([{"port": 8080}]),
            serde_json::json!([
                {"addresses": ["10.244.0.2"], "conditions": {"ready": false, "serving": true, "terminating": true}, "nodeName": "a"},
                {"addresses": ["10.244.0.3"], "conditions": {"ready": false, "serving": false, "terminating": false}, "nodeName": "a"},
                {"addresses": ["10.244.1.2"], "conditions": {"ready": true}, "nodeName": "b"},
            ]),
        )];
        let ports = service_ports(&services, &slices);
        let a: Vec<String> = ports[0]
            .cluster_endpoints("a")
            .iter()
            .map(|e| e.ip.to_string())
            .collect();
        assert_eq!(
            a,
            ["10.244.0.2"],
            "internal Local: this node's, the serving terminating one"
        );
        assert!(ports[0].cluster_endpoints("c").is_empty());
        assert_eq!(ports[0].cluster_endpoints("b").len(), 1);
    }
}
