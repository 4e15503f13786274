//! The cluster's records: what DNS needs of each Service and EndpointSlice,
//! kept by [`super::informer`], and the answers the Kubernetes DNS
//! specification gives for a name of the cluster domain. No I/O here.

use std::collections::{BTreeSet, HashMap};
use std::net::IpAddr;

use hickory_proto::rr::rdata::{CNAME, PTR, SRV, TXT};
use hickory_proto::rr::{Name, RData, Record, RecordType};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;

use super::names::{label_of_ip, ClusterName, SCHEMA_VERSION};
use super::zone::{address_record, Zone, TTL};

/// The label that ties an EndpointSlice to its Service.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
/// The older way of publishing a Service's unready endpoints, which the
/// specification still honours.
const TOLERATE_UNREADY: &str = "service.alpha.kubernetes.io/tolerate-unready-endpoints";

/// (namespace, name).
type Key = (String, String);

#[derive(Debug, Clone, PartialEq, Eq)]
enum ServiceKind {
    /// Its cluster IPs (both families of a dual-stack Service).
    ClusterIp(Vec<IpAddr>),
    /// `clusterIP: None`: the addresses are its endpoints'.
    Headless,
    ExternalName(String),
}

/// A named port: a Service's, or an EndpointSlice's.
#[derive(Debug, Clone, PartialEq, Eq)]
struct NamedPort {
    name: String,
    /// Lowercase, as SRV names carry it (`tcp`).
    protocol: String,
    port: u16,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct ServiceEntry {
    kind: ServiceKind,
    ports: Vec<NamedPort>,
    /// Unready endpoints count as ready (`publishNotReadyAddresses`).
    publish_not_ready: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct EndpointEntry {
    /// The first address: the others of an endpoint are fungible with it,
    /// and consumers may use only the first.
    address: IpAddr,
    hostname: Option<String>,
    ready: bool,
}

impl EndpointEntry {
    /// Its hostname, else the label its address gives.
    fn hostname(&self) -> String {
        self.hostname
            .clone()
            .unwrap_or_else(|| label_of_ip(self.address))
    }

    fn answers_to(&self, hostname: &str) -> bool {
        self.hostname.as_deref() == Some(hostname) || label_of_ip(self.address) == hostname
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct SliceEntry {
    service: String,
    endpoints: Vec<EndpointEntry>,
    ports: Vec<NamedPort>,
}

/// What a name of the cluster domain resolves to.
#[derive(Debug, Clone, PartialEq)]
pub enum Lookup {
    /// Records of the asked type (answers), and the addresses of the
    /// names they point to (additionals).
    Found {
        answers: Vec<Record>,
        additionals: Vec<Record>,
    },
    /// An ExternalName Service: its CNAME, whose target the server
    /// resolves further.
    Alias { cname: Box<Record>, target: Name },
    /// The name exists, without records of the asked type.
    NoData,
    /// No such name.
    NxDomain,
}

/// The Services and EndpointSlices of the cluster, as DNS sees them.
#[derive(Debug, Default)]
pub struct ClusterRecords {
    services: HashMap<Key, ServiceEntry>,
    /// By (namespace, slice name).
    slices: HashMap<Key, SliceEntry>,
    /// The names of each Service's slices, by (namespace, Service).
    slices_of: HashMap<Key, BTreeSet<String>>,
    /// How many Services each namespace holds: `<ns>.svc.<zone>` exists
    /// while it holds one.
    namespaces: HashMap<String, usize>,
    /// Changes with every change of the records (the SOA serial).
    serial: u32,
}

fn key_of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> Option<Key> {
    Some((meta.namespace.clone()?, meta.name.clone()?))
}

/// A port as SRV names know it: one without a name, or with a number out
/// of range, has none.
fn named_port(name: Option<&str>, protocol: Option<&str>, port: Option<i32>) -> Option<NamedPort> {
    Some(NamedPort {
        name: name.filter(|n| !n.is_empty())?.to_ascii_lowercase(),
        protocol: protocol.unwrap_or("TCP").to_ascii_lowercase(),
        port: u16::try_from(port?).ok()?,
    })
}

fn service_entry(service: &Service) -> ServiceEntry {
    let spec = service.spec.clone().unwrap_or_default();
    let kind = if spec.type_.as_deref() == Some("ExternalName") {
        ServiceKind::ExternalName(spec.external_name.clone().unwrap_or_default())
    } else {
        let ips: Vec<String> = match spec.cluster_ips.clone().filter(|ips| !ips.is_empty()) {
            Some(ips) => ips,
            None => spec.cluster_ip.clone().into_iter().collect(),
        };
        if ips.iter().any(|ip| ip == "None") {
            ServiceKind::Headless
        } else {
            let mut parsed: Vec<IpAddr> = ips.iter().filter_map(|ip| ip.parse().ok()).collect();
            parsed.sort();
            parsed.dedup();
            ServiceKind::ClusterIp(parsed)
        }
    };
    let ports = spec
        .ports
        .iter()
        .flatten()
        .filter_map(|port| {
            named_port(
                port.name.as_deref(),
                port.protocol.as_deref(),
                Some(port.port),
            )
        })
        .collect();
    let tolerates = service
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(TOLERATE_UNREADY))
        .is_some_and(|v| v.eq_ignore_ascii_case("true"));
    ServiceEntry {
        kind,
        ports,
        publish_not_ready: spec.publish_not_ready_addresses.unwrap_or(false) || tolerates,
    }
}

fn slice_entry(slice: &EndpointSlice) -> Option<SliceEntry> {
    let service = slice
        .metadata
        .labels
        .as_ref()?
        .get(SERVICE_NAME_LABEL)?
        .clone();
    if !matches!(slice.address_type.as_str(), "IPv4" | "IPv6") {
        return None;
    }
    let endpoints = slice
        .endpoints
        .iter()
        .filter_map(|endpoint| {
            Some(EndpointEntry {
                address: endpoint.addresses.first()?.parse().ok()?,
                hostname: endpoint
                    .hostname
                    .clone()
                    .filter(|h| !h.is_empty())
                    .map(|h| h.to_ascii_lowercase()),
                // Unknown readiness is ready, as the API says.
                ready: endpoint
                    .conditions
                    .as_ref()
                    .and_then(|c| c.ready)
                    .unwrap_or(true),
            })
        })
        .collect();
    let ports = slice
        .ports
        .iter()
        .flatten()
        .filter_map(|port| named_port(port.name.as_deref(), port.protocol.as_deref(), port.port))
        .collect();
    Some(SliceEntry {
        service: service.to_ascii_lowercase(),
        endpoints,
        ports,
    })
}

impl ClusterRecords {
    pub fn new() -> ClusterRecords {
        ClusterRecords {
            // Any start: resolvers only compare serials of one server.
            serial: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs() as u32)
                .unwrap_or(1),
            ..ClusterRecords::default()
        }
    }

    pub fn serial(&self) -> u32 {
        self.serial
    }

    fn changed(&mut self) {
        self.serial = self.serial.wrapping_add(1);
    }

    /// Adds or updates a Service.
    pub fn apply_service(&mut self, service: &Service) {
        let Some(key) = key_of(&service.metadata) else {
            return;
        };
        let entry = service_entry(service);
        match self.services.insert(key.clone(), entry) {
            None => *self.namespaces.entry(key.0).or_default() += 1,
            Some(old) if old == self.services[&key] => return,
            Some(_) => {}
        }
        self.changed();
    }

    pub fn delete_service(&mut self, service: &Service) {
        let Some(key) = key_of(&service.metadata) else {
            return;
        };
        if self.services.remove(&key).is_none() {
            return;
        }
        if let Some(count) = self.namespaces.get_mut(&key.0) {
            *count -= 1;
            if *count == 0 {
                self.namespaces.remove(&key.0);
            }
        }
        self.changed();
    }

    /// Every Service, as a fresh list gives them.
    pub fn replace_services(&mut self, services: &[Service]) {
        self.services.clear();
        self.namespaces.clear();
        for service in services {
            self.apply_service(service);
        }
        self.changed();
    }

    /// Adds or updates an EndpointSlice (one without a Service's label,
    /// or of FQDN addresses, is no endpoint of any Service's name).
    pub fn apply_slice(&mut self, slice: &EndpointSlice) {
        let Some((namespace, name)) = key_of(&slice.metadata) else {
            return;
        };
        let entry = slice_entry(slice);
        let key = (namespace.clone(), name.clone());
        if self.slices.get(&key) == entry.as_ref() {
            return;
        }
        self.forget_slice(&key);
        if let Some(entry) = entry {
            self.slices_of
                .entry((namespace, entry.service.clone()))
                .or_default()
                .insert(name);
            self.slices.insert(key, entry);
        }
        self.changed();
    }

    pub fn delete_slice(&mut self, slice: &EndpointSlice) {
        if let Some(key) = key_of(&slice.metadata) {
            if self.forget_slice(&key) {
                self.changed();
            }
        }
    }

    /// Every EndpointSlice, as a fresh list gives them.
    pub fn replace_slices(&mut self, slices: &[EndpointSlice]) {
        self.slices.clear();
        self.slices_of.clear();
        for slice in slices {
            self.apply_slice(slice);
        }
        self.changed();
    }

    fn forget_slice(&mut self, key: &Key) -> bool {
        let Some(old) = self.slices.remove(key) else {
            return false;
        };
        let owner = (key.0.clone(), old.service);
        if let Some(names) = self.slices_of.get_mut(&owner) {
            names.remove(&key.1);
            if names.is_empty() {
                self.slices_of.remove(&owner);
            }
        }
        true
    }

    /// The Service `namespace/service`, if the records know it.
    fn entry_of(&self, namespace: &str, service: &str) -> Option<&ServiceEntry> {
        self.services
            .get(&(namespace.to_string(), service.to_string()))
    }

    fn slices(&self, namespace: &str, service: &str) -> impl Iterator<Item = &SliceEntry> {
        let owner = (namespace.to_string(), service.to_string());
        self.slices_of
            .get(&owner)
            .into_iter()
            .flatten()
            .filter_map(move |name| self.slices.get(&(owner.0.clone(), name.clone())))
    }

    /// The endpoints of a Service that DNS gives out, each once, by address.
    fn ready_endpoints(
        &self,
        namespace: &str,
        service: &str,
        entry: &ServiceEntry,
    ) -> Vec<&EndpointEntry> {
        let mut found: Vec<&EndpointEntry> = self
            .slices(namespace, service)
            .flat_map(|slice| slice.endpoints.iter())
            .filter(|e| e.ready || entry.publish_not_ready)
            .collect();
        found.sort_by(|a, b| a.address.cmp(&b.address).then(a.hostname.cmp(&b.hostname)));
        found.dedup_by_key(|e| e.address);
        found
    }

    /// The answer for `name` (what [`super::names::classify`] made of
    /// `qname`) and the type asked.
    pub fn lookup(
        &self,
        zone: &Zone,
        name: &ClusterName,
        qname: &Name,
        qtype: RecordType,
    ) -> Lookup {
        let qname = || {
            let mut name = qname.to_lowercase();
            name.set_fqdn(true);
            name
        };
        match name {
            ClusterName::Apex => match qtype {
                RecordType::SOA | RecordType::ANY => Lookup::Found {
                    answers: vec![zone.soa(self.serial)],
                    additionals: Vec::new(),
                },
                _ => Lookup::NoData,
            },
            ClusterName::Version => match qtype {
                RecordType::TXT | RecordType::ANY => Lookup::Found {
                    answers: vec![Record::from_rdata(
                        qname(),
                        TTL,
                        RData::TXT(TXT::new(vec![SCHEMA_VERSION.to_string()])),
                    )],
                    additionals: Vec::new(),
                },
                _ => Lookup::NoData,
            },
            ClusterName::Suffix | ClusterName::PodNamespace => Lookup::NoData,
            ClusterName::ServiceNamespace { namespace } => {
                match self.namespaces.contains_key(namespace) {
                    true => Lookup::NoData,
                    false => Lookup::NxDomain,
                }
            }
            ClusterName::Service { namespace, service } => {
                self.service(namespace, service, qname(), qtype)
            }
            ClusterName::Endpoint {
                namespace,
                service,
                hostname,
            } => self.endpoint(namespace, service, hostname, qname(), qtype),
            ClusterName::PortProtocol {
                namespace,
                service,
                protocol,
            } => {
                let any = self
                    .ports(namespace, service)
                    .iter()
                    .any(|p| &p.protocol == protocol);
                match any {
                    true => Lookup::NoData,
                    false => Lookup::NxDomain,
                }
            }
            ClusterName::Port {
                namespace,
                service,
                port,
                protocol,
            } => self.srv(zone, namespace, service, port, protocol, qname(), qtype),
            ClusterName::Pod { ip } => address_answers(&qname(), qtype, [*ip]),
            ClusterName::Unknown => Lookup::NxDomain,
        }
    }

    fn service(&self, namespace: &str, service: &str, qname: Name, qtype: RecordType) -> Lookup {
        let Some(entry) = self.entry_of(namespace, service) else {
            return Lookup::NxDomain;
        };
        let addresses: Vec<IpAddr> = match &entry.kind {
            ServiceKind::ExternalName(target) => {
                let Ok(mut target) = Name::from_ascii(target) else {
                    return Lookup::NoData;
                };
                target.set_fqdn(true);
                let cname = Box::new(Record::from_rdata(
                    qname,
                    TTL,
                    RData::CNAME(CNAME(target.clone())),
                ));
                return Lookup::Alias { cname, target };
            }
            ServiceKind::ClusterIp(ips) => ips.clone(),
            ServiceKind::Headless => {
                let ready = self.ready_endpoints(namespace, service, entry);
                if ready.is_empty() {
                    // The specification: no ready endpoints, no name.
                    return Lookup::NxDomain;
                }
                ready.iter().map(|e| e.address).collect()
            }
        };
        address_answers(&qname, qtype, addresses)
    }

    fn endpoint(
        &self,
        namespace: &str,
        service: &str,
        hostname: &str,
        qname: Name,
        qtype: RecordType,
    ) -> Lookup {
        let Some(entry) = self.entry_of(namespace, service) else {
            return Lookup::NxDomain;
        };
        if entry.kind != ServiceKind::Headless {
            return Lookup::NxDomain;
        }
        let addresses: Vec<IpAddr> = self
            .ready_endpoints(namespace, service, entry)
            .into_iter()
            .filter(|e| e.answers_to(hostname))
            .map(|e| e.address)
            .collect();
        if addresses.is_empty() {
            return Lookup::NxDomain;
        }
        address_answers(&qname, qtype, addresses)
    }

    /// The named ports of a Service: its own, or for a headless one its
    /// endpoints' (the ports the endpoints listen on).
    fn ports(&self, namespace: &str, service: &str) -> Vec<NamedPort> {
        let Some(entry) = self.entry_of(namespace, service) else {
            return Vec::new();
        };
        match entry.kind {
            ServiceKind::Headless => self
                .slices(namespace, service)
                .flat_map(|s| s.ports.iter().cloned())
                .collect(),
            _ => entry.ports.clone(),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn srv(
        &self,
        zone: &Zone,
        namespace: &str,
        service: &str,
        port: &str,
        protocol: &str,
        qname: Name,
        qtype: RecordType,
    ) -> Lookup {
        let Some(entry) = self.entry_of(namespace, service) else {
            return Lookup::NxDomain;
        };
        let matches = |p: &NamedPort| p.name == port && p.protocol == protocol;
        // (port, target, the target's addresses)
        let mut targets: Vec<(u16, Name, Vec<IpAddr>)> = Vec::new();
        match &entry.kind {
            ServiceKind::ClusterIp(ips) => {
                if let Some(name) = zone.service(namespace, service) {
                    for p in entry.ports.iter().filter(|p| matches(p)) {
                        targets.push((p.port, name.clone(), ips.clone()));
                    }
                }
            }
            ServiceKind::ExternalName(target) => {
                if let Ok(mut name) = Name::from_ascii(target) {
                    name.set_fqdn(true);
                    for p in entry.ports.iter().filter(|p| matches(p)) {
                        targets.push((p.port, name.clone(), Vec::new()));
                    }
                }
            }
            ServiceKind::Headless => {
                let ready = self.ready_endpoints(namespace, service, entry);
                let mut ports: Vec<u16> = self
                    .slices(namespace, service)
                    .flat_map(|s| s.ports.iter())
                    .filter(|p| matches(p))
                    .map(|p| p.port)
                    .collect();
                ports.sort_unstable();
                ports.dedup();
                for number in ports {
                    for endpoint in &ready {
                        let host = endpoint.hostname();
                        if let Some(name) = zone.endpoint(&host, namespace, service) {
                            targets.push((number, name, vec![endpoint.address]));
                        }
                    }
                }
            }
        }
        if targets.is_empty() {
            return Lookup::NxDomain;
        }
        if !matches!(qtype, RecordType::SRV | RecordType::ANY) {
            return Lookup::NoData;
        }
        // Equal shares, as CoreDNS gives them.
        let weight = u16::try_from(100 / targets.len()).unwrap_or(1).max(1);
        let mut answers = Vec::new();
        let mut additionals = Vec::new();
        for (number, target, addresses) in targets {
            let srv = SRV::new(0, weight, number, target.clone());
            answers.push(Record::from_rdata(qname.clone(), TTL, RData::SRV(srv)));
            for ip in addresses {
                let record = address_record(target.clone(), ip);
                if !additionals.contains(&record) {
                    additionals.push(record);
                }
            }
        }
        Lookup::Found {
            answers,
            additionals,
        }
    }

    /// The names of the cluster with `ip`: the Service whose cluster IP
    /// it is, the endpoints of headless Services at it. Empty when the
    /// address is not the cluster's.
    pub fn reverse(&self, zone: &Zone, ip: IpAddr) -> Vec<Name> {
        let mut names = Vec::new();
        for ((namespace, service), entry) in &self.services {
            match &entry.kind {
                ServiceKind::ClusterIp(ips) if ips.contains(&ip) => {
                    names.extend(zone.service(namespace, service));
                }
                ServiceKind::Headless => {
                    for endpoint in self.ready_endpoints(namespace, service, entry) {
                        if endpoint.address == ip {
                            names.extend(zone.endpoint(&endpoint.hostname(), namespace, service));
                        }
                    }
                }
                _ => {}
            }
        }
        names.sort();
        names
    }
}

/// PTR records of `qname` for `targets`.
pub fn pointer_records(qname: &Name, targets: Vec<Name>) -> Vec<Record> {
    targets
        .into_iter()
        .map(|target| Record::from_rdata(qname.clone(), TTL, RData::PTR(PTR(target))))
        .collect()
}

/// The address records of `qname` at those of `addresses` that answer a
/// query of `qtype`.
fn address_answers(
    qname: &Name,
    qtype: RecordType,
    addresses: impl IntoIterator<Item = IpAddr>,
) -> Lookup {
    found(
        addresses
            .into_iter()
            .filter(|ip| wanted(qtype, *ip))
            .map(|ip| address_record(qname.clone(), ip))
            .collect(),
        Vec::new(),
    )
}

/// Whether an address answers a query of `qtype`.
fn wanted(qtype: RecordType, ip: IpAddr) -> bool {
    matches!(
        (qtype, ip),
        (RecordType::A, IpAddr::V4(_)) | (RecordType::AAAA, IpAddr::V6(_)) | (RecordType::ANY, _)
    )
}

fn found(answers: Vec<Record>, additionals: Vec<Record>) -> Lookup {
    match answers.is_empty() {
        true => Lookup::NoData,
        false => Lookup::Found {
            answers,
            additionals,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use hickory_proto::rr::rdata::A;
    use k8s_openapi::api::core::v1::{ServicePort, ServiceSpec};
    use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort};

    use crate::dns::names::classify;

    fn zone() -> Zone {
        Zone::new("cluster.local").unwrap()
    }

    fn service(namespace: &str, name: &str, spec: ServiceSpec) -> Service {
        let mut service = Service::default();
        service.metadata.namespace = Some(namespace.into());
        service.metadata.name = Some(name.into());
        service.spec = Some(spec);
        service
    }

    fn port(name: &str, protocol: &str, number: i32) -> ServicePort {
        ServicePort {
            name: Some(name.into()),
            protocol: Some(protocol.into()),
            port: number,
            ..Default::default()
        }
    }

    fn cluster_ip(namespace: &str, name: &str, ips: &[&str]) -> Service {
        service(
            namespace,
            name,
            ServiceSpec {
                cluster_ip: Some(ips[0].into()),
                cluster_ips: Some(ips.iter().map(|ip| ip.to_string()).collect()),
                ports: Some(vec![
                    port("http", "TCP", 80),
                    port("dns", "UDP", 53),
                    ServicePort {
                        port: 9000,
                        ..Default::default()
                    },
                ]),
                ..Default::default()
            },
        )
    }

    fn headless(namespace: &str, name: &str) -> Service {
        service(
            namespace,
            name,
            ServiceSpec {
                cluster_ip: Some("None".into()),
                ports: Some(vec![port("db", "TCP", 5432)]),
                ..Default::default()
            },
        )
    }

    /// (address, hostname, ready)
    fn slice(
        namespace: &str,
        name: &str,
        service: &str,
        endpoints: &[(&str, Option<&str>, Option<bool>)],
    ) -> EndpointSlice {
        let mut slice = EndpointSlice {
            address_type: "IPv4".into(),
            endpoints: endpoints
                .iter()
                .map(|(ip, hostname, ready)| Endpoint {
                    addresses: vec![ip.to_string()],
                    hostname: hostname.map(String::from),
                    conditions: Some(EndpointConditions {
                        ready: *ready,
                        ..Default::default()
                    }),
                    ..Default::default()
                })
                .collect(),
            ports: Some(vec![EndpointPort {
                name: Some("db".into()),
                protocol: Some("TCP".into()),
                port: Some(15432),
                ..Default::default()
            }]),
            ..Default::default()
        };
        slice.metadata.namespace = Some(namespace.into());
        slice.metadata.name = Some(name.into());
        slice.metadata.labels =
            Some([(SERVICE_NAME_LABEL.to_string(), service.to_string())].into());
        slice
    }

    fn ask(records: &ClusterRecords, name: &str, qtype: RecordType) -> Lookup {
        let name = Name::from_ascii(name).unwrap();
        let cluster_name = classify(&name, zone().origin()).expect("a name of the zone");
        records.lookup(&zone(), &cluster_name, &name, qtype)
    }

    /// Asserts what each (name, type) looks up to.
    fn assert_lookups(records: &ClusterRecords, expected: &[(&str, RecordType, Lookup)]) {
        for (name, qtype, lookup) in expected {
            assert_eq!(ask(records, name, *qtype), *lookup, "{name} {qtype}");
        }
    }

    /// The answers' data as text, sorted.
    fn data(lookup: &Lookup) -> Vec<String> {
        let Lookup::Found { answers, .. } = lookup else {
            panic!("no records: {lookup:?}")
        };
        let mut data: Vec<String> = answers.iter().map(|r| r.data.to_string()).collect();
        data.sort();
        data
    }

    /// The data of the answers to `name`, as [`data`] gives them.
    fn answer_data(records: &ClusterRecords, name: &str, qtype: RecordType) -> Vec<String> {
        data(&ask(records, name, qtype))
    }

    fn additional_data(lookup: &Lookup) -> Vec<String> {
        let Lookup::Found { additionals, .. } = lookup else {
            panic!("no records: {lookup:?}")
        };
        additionals
            .iter()
            .map(|r| format!("{} {}", r.name, r.data))
            .collect()
    }

    #[test]
    fn a_cluster_ip_service_answers_its_addresses_by_family() {
        let mut records = ClusterRecords::new();
        records.apply_service(&cluster_ip("shop", "web", &["10.96.3.4", "fd00::3:4"]));
        let a = ask(&records, "web.shop.svc.cluster.local.", RecordType::A);
        assert_eq!(data(&a), ["10.96.3.4"]);
        let Lookup::Found { answers, .. } = &a else {
            unreachable!()
        };
        assert_eq!(answers[0].name.to_ascii(), "web.shop.svc.cluster.local.");
        assert_eq!(answers[0].ttl, TTL);
        assert_eq!(
            answer_data(&records, "WEB.Shop.svc.cluster.local.", RecordType::AAAA),
            ["fd00::3:4"]
        );
        assert_eq!(
            answer_data(&records, "web.shop.svc.cluster.local.", RecordType::ANY).len(),
            2
        );
        assert_lookups(
            &records,
            &[
                (
                    "web.shop.svc.cluster.local.",
                    RecordType::MX,
                    Lookup::NoData,
                ),
                (
                    "api.shop.svc.cluster.local.",
                    RecordType::A,
                    Lookup::NxDomain,
                ),
                (
                    "web.other.svc.cluster.local.",
                    RecordType::A,
                    Lookup::NxDomain,
                ),
                // Endpoint names are a headless Service's only.
                (
                    "x.web.shop.svc.cluster.local.",
                    RecordType::A,
                    Lookup::NxDomain,
                ),
                // The namespace exists while it has a Service.
                ("shop.svc.cluster.local.", RecordType::A, Lookup::NoData),
                ("other.svc.cluster.local.", RecordType::A, Lookup::NxDomain),
            ],
        );
        records.delete_service(&cluster_ip("shop", "web", &["10.96.3.4"]));
        assert_lookups(
            &records,
            &[
                (
                    "web.shop.svc.cluster.local.",
                    RecordType::A,
                    Lookup::NxDomain,
                ),
                ("shop.svc.cluster.local.", RecordType::A, Lookup::NxDomain),
            ],
        );
    }

    #[test]
    fn named_ports_of_a_cluster_ip_service_get_srv_records() {
        let mut records = ClusterRecords::new();
        records.apply_service(&cluster_ip("shop", "web", &["10.96.3.4"]));
        let srv = ask(
            &records,
            "_http._tcp.web.shop.svc.cluster.local.",
            RecordType::SRV,
        );
        assert_eq!(data(&srv), ["0 100 80 web.shop.svc.cluster.local."]);
        assert_eq!(
            additional_data(&srv),
            ["web.shop.svc.cluster.local. 10.96.3.4"]
        );
        assert_eq!(
            answer_data(
                &records,
                "_dns._udp.web.shop.svc.cluster.local.",
                RecordType::SRV
            ),
            ["0 100 53 web.shop.svc.cluster.local."]
        );
        assert_lookups(
            &records,
            &[
                // The protocol must match; unnamed ports have none.
                (
                    "_dns._tcp.web.shop.svc.cluster.local.",
                    RecordType::SRV,
                    Lookup::NxDomain,
                ),
                (
                    "_http._tcp.web.shop.svc.cluster.local.",
                    RecordType::A,
                    Lookup::NoData,
                ),
                (
                    "_tcp.web.shop.svc.cluster.local.",
                    RecordType::SRV,
                    Lookup::NoData,
                ),
                (
                    "_sctp.web.shop.svc.cluster.local.",
                    RecordType::SRV,
                    Lookup::NxDomain,
                ),
            ],
        );
    }

    #[test]
    fn a_headless_service_answers_its_ready_endpoints() {
        let mut records = ClusterRecords::new();
        records.apply_service(&headless("shop", "db"));
        // No endpoints yet: no name, as the specification says.
        assert_lookups(
            &records,
            &[(
                "db.shop.svc.cluster.local.",
                RecordType::A,
                Lookup::NxDomain,
            )],
        );
        records.apply_slice(&slice(
            "shop",
            "db-abc",
            "db",
            &[
                ("10.244.0.5", Some("db-0"), Some(true)),
                ("10.244.1.6", Some("db-1"), None),
                ("10.244.2.7", None, Some(true)),
                ("10.244.3.8", Some("db-3"), Some(false)),
            ],
        ));
        // Another slice repeating an endpoint: it is given once.
        records.apply_slice(&slice(
            "shop",
            "db-def",
            "db",
            &[("10.244.0.5", Some("db-0"), Some(true))],
        ));
        assert_eq!(
            answer_data(&records, "db.shop.svc.cluster.local.", RecordType::A),
            ["10.244.0.5", "10.244.1.6", "10.244.2.7"]
        );
        // Endpoints by hostname, or by their address's label.
        assert_eq!(
            answer_data(&records, "db-1.db.shop.svc.cluster.local.", RecordType::A),
            ["10.244.1.6"]
        );
        assert_eq!(
            answer_data(
                &records,
                "10-244-2-7.db.shop.svc.cluster.local.",
                RecordType::A
            ),
            ["10.244.2.7"]
        );
        assert_lookups(
            &records,
            &[
                (
                    "db.shop.svc.cluster.local.",
                    RecordType::AAAA,
                    Lookup::NoData,
                ),
                // Not ready: not there.
                (
                    "db-3.db.shop.svc.cluster.local.",
                    RecordType::A,
                    Lookup::NxDomain,
                ),
            ],
        );
        // SRV: one a ready endpoint, at the endpoints' port.
        let srv = ask(
            &records,
            "_db._tcp.db.shop.svc.cluster.local.",
            RecordType::SRV,
        );
        assert_eq!(
            data(&srv),
            [
                "0 33 15432 10-244-2-7.db.shop.svc.cluster.local.",
                "0 33 15432 db-0.db.shop.svc.cluster.local.",
                "0 33 15432 db-1.db.shop.svc.cluster.local.",
            ]
        );
        assert!(additional_data(&srv)
            .contains(&"db-0.db.shop.svc.cluster.local. 10.244.0.5".to_string()));

        // publishNotReadyAddresses: every endpoint counts.
        let mut publishing = headless("shop", "db");
        publishing
            .spec
            .as_mut()
            .unwrap()
            .publish_not_ready_addresses = Some(true);
        records.apply_service(&publishing);
        assert_eq!(
            answer_data(&records, "db-3.db.shop.svc.cluster.local.", RecordType::A),
            ["10.244.3.8"]
        );

        // Slices go: so do the endpoints.
        records.delete_slice(&slice("shop", "db-abc", "db", &[]));
        records.delete_slice(&slice("shop", "db-def", "db", &[]));
        assert_lookups(
            &records,
            &[
                (
                    "db.shop.svc.cluster.local.",
                    RecordType::A,
                    Lookup::NxDomain,
                ),
                (
                    "_db._tcp.db.shop.svc.cluster.local.",
                    RecordType::SRV,
                    Lookup::NxDomain,
                ),
            ],
        );
    }

    #[test]
    fn a_slice_that_moves_to_another_service_leaves_the_first() {
        let mut records = ClusterRecords::new();
        records.apply_service(&headless("shop", "a"));
        records.apply_service(&headless("shop", "b"));
        records.apply_slice(&slice(
            "shop",
            "s",
            "a",
            &[("10.244.0.5", None, Some(true))],
        ));
        assert!(matches!(
            ask(&records, "a.shop.svc.cluster.local.", RecordType::A),
            Lookup::Found { .. }
        ));
        records.apply_slice(&slice(
            "shop",
            "s",
            "b",
            &[("10.244.0.5", None, Some(true))],
        ));
        assert_lookups(
            &records,
            &[("a.shop.svc.cluster.local.", RecordType::A, Lookup::NxDomain)],
        );
        assert_eq!(
            answer_data(&records, "b.shop.svc.cluster.local.", RecordType::A),
            ["10.244.0.5"]
        );
        // A slice of no Service, or of FQDNs: no endpoints of any name.
        let mut orphan = slice("shop", "o", "a", &[("10.244.9.9", None, Some(true))]);
        orphan.metadata.labels = None;
        records.apply_slice(&orphan);
        let mut fqdn = slice("shop", "f", "a", &[("example.com", None, Some(true))]);
        fqdn.address_type = "FQDN".into();
        records.apply_slice(&fqdn);
        assert_lookups(
            &records,
            &[("a.shop.svc.cluster.local.", RecordType::A, Lookup::NxDomain)],
        );
    }

    #[test]
    fn an_external_name_is_a_cname() {
        let mut records = ClusterRecords::new();
        records.apply_service(&service(
            "shop",
            "mail",
            ServiceSpec {
                type_: Some("ExternalName".into()),
                external_name: Some("smtp.example.com".into()),
                ports: Some(vec![port("smtp", "TCP", 25)]),
                ..Default::default()
            },
        ));
        let Lookup::Alias { cname, target } =
            ask(&records, "mail.shop.svc.cluster.local.", RecordType::A)
        else {
            panic!("not an alias")
        };
        assert_eq!(target.to_ascii(), "smtp.example.com.");
        assert_eq!(cname.record_type(), RecordType::CNAME);
        assert_eq!(cname.name.to_ascii(), "mail.shop.svc.cluster.local.");
        assert_eq!(
            answer_data(
                &records,
                "_smtp._tcp.mail.shop.svc.cluster.local.",
                RecordType::SRV
            ),
            ["0 100 25 smtp.example.com."]
        );
    }

    #[test]
    fn the_zone_answers_its_soa_version_and_pod_names() {
        let records = ClusterRecords::new();
        let soa = ask(&records, "cluster.local.", RecordType::SOA);
        assert!(
            matches!(&soa, Lookup::Found { answers, .. } if answers[0].record_type() == RecordType::SOA)
        );
        assert_eq!(
            answer_data(&records, "dns-version.cluster.local.", RecordType::TXT),
            ["1.0.1"]
        );
        let pod = ask(
            &records,
            "10-244-1-7.default.pod.cluster.local.",
            RecordType::A,
        );
        let Lookup::Found { answers, .. } = &pod else {
            panic!("{pod:?}")
        };
        assert_eq!(answers[0].data, RData::A(A::new(10, 244, 1, 7)));
        assert_lookups(
            &records,
            &[
                ("cluster.local.", RecordType::A, Lookup::NoData),
                ("svc.cluster.local.", RecordType::A, Lookup::NoData),
                (
                    "10-244-1-7.default.pod.cluster.local.",
                    RecordType::AAAA,
                    Lookup::NoData,
                ),
                ("nonsense.cluster.local.", RecordType::A, Lookup::NxDomain),
            ],
        );
    }

    #[test]
    fn reverse_lookups_name_services_and_headless_endpoints() {
        let mut records = ClusterRecords::new();
        records.apply_service(&cluster_ip("shop", "web", &["10.96.3.4"]));
        records.apply_service(&headless("shop", "db"));
        records.apply_slice(&slice(
            "shop",
            "db-abc",
            "db",
            &[("10.244.0.5", Some("db-0"), Some(true))],
        ));
        let names = |ip: &str| -> Vec<String> {
            records
                .reverse(&zone(), ip.parse().unwrap())
                .iter()
                .map(Name::to_ascii)
                .collect()
        };
        assert_eq!(names("10.96.3.4"), ["web.shop.svc.cluster.local."]);
        assert_eq!(names("10.244.0.5"), ["db-0.db.shop.svc.cluster.local."]);
        assert!(names("192.0.2.1").is_empty());
    }

    #[test]
    fn a_relist_replaces_what_was_known() {
        let mut records = ClusterRecords::new();
        records.apply_service(&cluster_ip("shop", "web", &["10.96.3.4"]));
        let serial = records.serial();
        records.replace_services(&[cluster_ip("shop", "api", &["10.96.3.5"])]);
        assert!(records.serial() != serial);
        assert_lookups(
            &records,
            &[(
                "web.shop.svc.cluster.local.",
                RecordType::A,
                Lookup::NxDomain,
            )],
        );
        assert_eq!(
            answer_data(&records, "api.shop.svc.cluster.local.", RecordType::A),
            ["10.96.3.5"]
        );
        records.apply_slice(&slice(
            "shop",
            "s",
            "api",
            &[("10.244.0.5", None, Some(true))],
        ));
        records.replace_slices(&[]);
        assert!(records.slices_of.is_empty() && records.slices.is_empty());
    }
}
