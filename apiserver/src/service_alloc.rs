//! Cluster IPs and node ports of Services, as kube-apiserver's allocators
//! hand them out: a cluster IP from `--service-cluster-ip-range` (10.96.0.0/12
//! by default) for every Service but ExternalName and headless ones, a node
//! port from `--service-node-port-range` (30000–32767) for each port of a
//! NodePort or LoadBalancer Service. A requested IP or port is reserved or
//! refused (taken, out of range) with Kubernetes' 422; an unrequested one
//! is picked at random, IPs from the upper part of the range (the lower
//! part is left to requested IPs, as Kubernetes does).
//!
//! Each allocation is a key of its own in the store, created only if absent
//! (`/registry/skiff/serviceips/IP`, `/registry/skiff/servicenodeports/PORT`),
//! holding the Service's namespace, name and uid: two API servers of a
//! cluster can never hand out the same one, and a restart forgets nothing.
//! An allocation is taken before the Service is written and given back if
//! the write fails; one the Service no longer holds (deleted, type changed,
//! port removed) is given back after it is written. [`Repair`] gives back
//! what a crash between the two left behind.

use std::net::Ipv4Addr;
use std::ops::RangeInclusive;

use rand::Rng;
use serde_json::{json, Value};

use crate::registry::Registry;
use crate::status::{ApiError, ApiResult, Cause};
use crate::storage::StorageError;

const IP_PREFIX: &str = "/registry/skiff/serviceips/";
const PORT_PREFIX: &str = "/registry/skiff/servicenodeports/";

/// The ranges Services' addresses come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceRanges {
    /// The cluster IP network: its address and prefix length.
    pub network: Ipv4Addr,
    pub prefix: u8,
    pub node_ports: RangeInclusive<u16>,
}

impl Default for ServiceRanges {
    fn default() -> Self {
        ServiceRanges {
            network: Ipv4Addr::new(10, 96, 0, 0),
            prefix: 12,
            node_ports: 30000..=32767,
        }
    }
}

impl ServiceRanges {
    /// `cidr` as `--service-cluster-ip-range` takes it (IPv4), and the
    /// node port range as `--service-node-port-range` (`30000-32767`).
    pub fn parse(cidr: &str, node_ports: &str) -> Result<ServiceRanges, String> {
        let (address, prefix) = cidr
            .split_once('/')
            .ok_or_else(|| format!("{cidr:?} is not a CIDR such as 10.96.0.0/12"))?;
        let address: Ipv4Addr = address
            .parse()
            .map_err(|_| format!("{cidr:?} is not an IPv4 CIDR such as 10.96.0.0/12"))?;
        let prefix: u8 = prefix
            .parse()
            .ok()
            .filter(|p| (8..=30).contains(p))
            .ok_or_else(|| format!("{cidr:?}: the prefix length must be between 8 and 30"))?;
        let mask = u32::MAX << (32 - prefix);
        let network = Ipv4Addr::from(u32::from(address) & mask);
        let (low, high) = node_ports
            .split_once('-')
            .ok_or_else(|| format!("{node_ports:?} is not a port range such as 30000-32767"))?;
        let port = |text: &str| {
            text.trim()
                .parse::<u16>()
                .ok()
                .filter(|p| *p > 0)
                .ok_or_else(|| format!("{node_ports:?}: {text:?} is not a port"))
        };
        let (low, high) = (port(low)?, port(high)?);
        if low > high {
            return Err(format!("{node_ports:?}: the range is empty"));
        }
        Ok(ServiceRanges {
            network,
            prefix,
            node_ports: low..=high,
        })
    }

    fn cidr(&self) -> String {
        format!("{}/{}", self.network, self.prefix)
    }

    fn size(&self) -> u32 {
        1u32 << (32 - self.prefix)
    }

    /// The range's usable addresses are offsets 1 ..= size-2 (neither the
    /// network nor the broadcast address).
    fn offset_of(&self, ip: Ipv4Addr) -> Option<u32> {
        let offset = u32::from(ip).wrapping_sub(u32::from(self.network));
        (offset >= 1 && offset < self.size() - 1).then_some(offset)
    }

    fn address(&self, offset: u32) -> Ipv4Addr {
        Ipv4Addr::from(u32::from(self.network) + offset)
    }

    /// The first address: the `kubernetes` Service's.
    pub fn first_ip(&self) -> Ipv4Addr {
        self.address(1)
    }

    /// The tenth address: the cluster DNS Service's, by convention.
    pub fn dns_ip(&self) -> Ipv4Addr {
        self.address(10)
    }

    /// Where dynamic allocation starts: above the part kept for requested
    /// IPs (a sixteenth of the range, at least 16, at most 256 addresses).
    fn dynamic_start(&self) -> u32 {
        let band = (self.size() / 16).clamp(16, 256);
        band.min(self.size() - 2)
    }

    fn port_range_text(&self) -> String {
        format!("{}-{}", self.node_ports.start(), self.node_ports.end())
    }
}

/// What a Service holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Held {
    pub ip: Option<Ipv4Addr>,
    pub node_ports: Vec<u16>,
}

impl Held {
    fn is_empty(&self) -> bool {
        self.ip.is_none() && self.node_ports.is_empty()
    }

    /// What `self` holds that `other` does not.
    pub fn minus(&self, other: &Held) -> Held {
        Held {
            ip: self.ip.filter(|ip| other.ip != Some(*ip)),
            node_ports: self
                .node_ports
                .iter()
                .copied()
                .filter(|p| !other.node_ports.contains(p))
                .collect(),
        }
    }
}

fn service_type(service: &Value) -> &str {
    service["spec"]["type"].as_str().unwrap_or("ClusterIP")
}

fn wants_ip(service: &Value) -> bool {
    service_type(service) != "ExternalName" && service["spec"]["clusterIP"] != "None"
}

fn wants_node_ports(service: &Value) -> bool {
    match service_type(service) {
        "NodePort" => true,
        "LoadBalancer" => service["spec"]["allocateLoadBalancerNodePorts"] != json!(false),
        _ => false,
    }
}

fn is_external(service: &Value) -> bool {
    matches!(service_type(service), "NodePort" | "LoadBalancer")
}

/// On an update that changes a Service's type, the fields the new type
/// has no use for go, where the client left them as they were (it sent
/// back what it read): Kubernetes' `dropTypeDependentFields`, done before
/// validation so that `kubectl edit` of the type alone is valid.
pub fn drop_type_dependent_fields(old: &Value, new: &mut Value) {
    if service_type(old) == service_type(new) || !new["spec"].is_object() {
        return;
    }
    let unchanged = |new: &Value, field: &str| new["spec"][field] == old["spec"][field];
    let drop = |new: &mut Value, field: &str| {
        if unchanged(new, field) {
            if let Some(spec) = new["spec"].as_object_mut() {
                spec.remove(field);
            }
        }
    };
    if service_type(new) == "ExternalName" {
        for field in ["clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy"] {
            drop(new, field);
        }
    }
    if !is_external(new) && is_external(old) {
        drop(new, "externalTrafficPolicy");
        let old_ports = old["spec"]["ports"].as_array().cloned().unwrap_or_default();
        if let Some(ports) = new["spec"]["ports"].as_array_mut() {
            for port in ports {
                let same = old_ports
                    .iter()
                    .any(|o| o["port"] == port["port"] && o["nodePort"] == port["nodePort"]);
                if same {
                    if let Some(port) = port.as_object_mut() {
                        port.remove("nodePort");
                    }
                }
            }
        }
    }
    if service_type(new) != "LoadBalancer" && service_type(old) == "LoadBalancer" {
        for field in [
            "healthCheckNodePort",
            "allocateLoadBalancerNodePorts",
            "loadBalancerClass",
        ] {
            drop(new, field);
        }
    }
}

/// The cluster IP and node ports `service` (as stored) holds.
pub fn held(service: &Value) -> Held {
    let ip = service["spec"]["clusterIP"]
        .as_str()
        .and_then(|ip| ip.parse().ok());
    let node_ports = service["spec"]["ports"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p["nodePort"].as_u64())
        .filter_map(|p| u16::try_from(p).ok())
        .collect();
    Held { ip, node_ports }
}

fn owner(service: &Value) -> Vec<u8> {
    let meta = &service["metadata"];
    json!({"namespace": meta["namespace"], "name": meta["name"], "uid": meta["uid"]})
        .to_string()
        .into_bytes()
}

fn invalid(service: &Value, field: String, message: String) -> ApiError {
    ApiError::invalid(
        "",
        "Service",
        "services",
        service["metadata"]["name"].as_str().unwrap_or_default(),
        vec![Cause {
            reason: "FieldValueInvalid",
            message,
            field,
        }],
    )
}

/// Takes `key` for `service`: `Ok(false)` when another holds it.
async fn take(registry: &Registry, key: &str, service: &Value, dry_run: bool) -> ApiResult<bool> {
    let storage = registry.storage();
    if dry_run {
        return match storage.get(key).await {
            Ok(found) => Ok(found.is_none()),
            Err(err) => Err(ApiError::internal(format!("reading {key}: {err}"))),
        };
    }
    match storage.create(key, owner(service), 0).await {
        Ok(_) => Ok(true),
        Err(StorageError::AlreadyExists) => Ok(false),
        Err(err) => Err(ApiError::internal(format!("allocating {key}: {err}"))),
    }
}

/// Gives back `key` if `uid` (the Service's) holds it.
async fn give_back(registry: &Registry, key: &str, uid: &str) {
    let storage = registry.storage();
    let Ok(Some(kv)) = storage.get(key).await else {
        return;
    };
    let holder: Value = serde_json::from_slice(&kv.value).unwrap_or_default();
    if holder["uid"].as_str() != Some(uid) {
        return;
    }
    if let Err(err) = storage.delete(key, kv.mod_revision).await {
        tracing::warn!(%key, error = %err, "giving back a Service allocation");
    }
}

fn ip_key(ip: Ipv4Addr) -> String {
    format!("{IP_PREFIX}{ip}")
}

fn port_key(port: u16) -> String {
    format!("{PORT_PREFIX}{port}")
}

/// Gives back what `held` names, for the Service `service`.
pub async fn release(registry: &Registry, service: &Value, held: &Held) {
    if held.is_empty() {
        return;
    }
    let uid = service["metadata"]["uid"].as_str().unwrap_or_default();
    if let Some(ip) = held.ip {
        give_back(registry, &ip_key(ip), uid).await;
    }
    for port in &held.node_ports {
        give_back(registry, &port_key(*port), uid).await;
    }
}

/// Fills in `service`'s cluster IP and node ports before it is written
/// (created, or updated from `old`), taking what it newly holds; returns
/// that, to give back if the write fails. What `old` held is kept where
/// the Service still asks for it.
pub async fn allocate(
    registry: &Registry,
    old: Option<&Value>,
    service: &mut Value,
    dry_run: bool,
) -> ApiResult<Held> {
    let ranges = registry.service_ranges().clone();
    let before = old.map(held).unwrap_or_default();
    let mut taken = Held::default();
    let outcome = fill(
        registry, &ranges, old, service, dry_run, &before, &mut taken,
    )
    .await;
    match outcome {
        Ok(()) => Ok(taken),
        Err(err) => {
            if !dry_run {
                release(registry, service, &taken).await;
            }
            Err(err)
        }
    }
}

async fn fill(
    registry: &Registry,
    ranges: &ServiceRanges,
    old: Option<&Value>,
    service: &mut Value,
    dry_run: bool,
    before: &Held,
    taken: &mut Held,
) -> ApiResult<()> {
    if !service["spec"].is_object() {
        return Ok(());
    }
    // The cluster IP.
    if wants_ip(service) {
        let asked = service["spec"]["clusterIP"]
            .as_str()
            .filter(|ip| !ip.is_empty())
            .or_else(|| {
                service["spec"]["clusterIPs"][0]
                    .as_str()
                    .filter(|ip| !ip.is_empty())
            })
            .map(str::to_string);
        let ip = match (asked, before.ip) {
            // Kept from before (an update that leaves it out keeps it).
            (None, Some(kept)) => kept,
            (Some(asked), Some(kept)) if asked == kept.to_string() => kept,
            (Some(asked), _) => {
                let ip: Ipv4Addr = asked.parse().map_err(|_| {
                    invalid(
                        service,
                        "spec.clusterIPs".into(),
                        format!(
                            "Invalid value: []string{{\"{asked}\"}}: must be a valid IP address"
                        ),
                    )
                })?;
                let refuse = |why: String| {
                    invalid(
                        service,
                        "spec.clusterIPs".into(),
                        format!("Invalid value: []string{{\"{asked}\"}}: failed to allocate IP {asked}: {why}"),
                    )
                };
                if ranges.offset_of(ip).is_none() {
                    return Err(refuse(format!(
                        "the provided IP ({ip}) is not in the valid range. The range of valid IPs is {}",
                        ranges.cidr()
                    )));
                }
                if !take(registry, &ip_key(ip), service, dry_run).await? {
                    return Err(refuse("provided IP is already allocated".into()));
                }
                taken.ip = Some(ip);
                ip
            }
            (None, None) => {
                let ip = pick_ip(registry, ranges, service, dry_run).await?;
                taken.ip = Some(ip);
                ip
            }
        };
        let spec = &mut service["spec"];
        spec["clusterIP"] = json!(ip.to_string());
        spec["clusterIPs"] = json!([ip.to_string()]);
    } else if service_type(service) == "ExternalName" {
        if let Some(spec) = service["spec"].as_object_mut() {
            spec.remove("clusterIP");
            spec.remove("clusterIPs");
        }
    } else {
        service["spec"]["clusterIPs"] = json!(["None"]);
    }
    if service_type(service) != "ExternalName" {
        let spec = &mut service["spec"];
        if spec["ipFamilies"].as_array().is_none_or(Vec::is_empty) {
            spec["ipFamilies"] = json!(["IPv4"]);
        }
        if spec["ipFamilyPolicy"].as_str().is_none_or(str::is_empty) {
            spec["ipFamilyPolicy"] = json!("SingleStack");
        }
    }

    // The node ports.
    let wants_ports = wants_node_ports(service);
    let old_ports = old
        .and_then(|o| o["spec"]["ports"].as_array().cloned())
        .unwrap_or_default();
    let count = service["spec"]["ports"].as_array().map_or(0, Vec::len);
    let mut unassigned = Vec::new();
    for i in 0..count {
        let port = &service["spec"]["ports"][i];
        if !wants_ports {
            if let Some(map) = service["spec"]["ports"][i].as_object_mut() {
                // A type that has none drops those it had, as Kubernetes
                // does when the user left them as they were.
                if old.is_some() {
                    map.remove("nodePort");
                }
            }
            continue;
        }
        let asked = port["nodePort"].as_u64().filter(|p| *p != 0);
        let same_port = |o: &&Value| {
            o["port"] == port["port"]
                && o["protocol"].as_str().unwrap_or("TCP")
                    == port["protocol"].as_str().unwrap_or("TCP")
        };
        let kept = old_ports
            .iter()
            .find(same_port)
            .and_then(|o| o["nodePort"].as_u64())
            .and_then(|p| u16::try_from(p).ok())
            .filter(|p| before.node_ports.contains(p));
        let node_port = match (asked, kept) {
            (None, Some(kept)) => kept,
            (Some(asked), _) if before.node_ports.iter().any(|p| u64::from(*p) == asked) => {
                asked as u16
            }
            (Some(asked), _) => {
                let field = format!("spec.ports[{i}].nodePort");
                let refuse = |why: String| {
                    invalid(
                        service,
                        field.clone(),
                        format!("Invalid value: {asked}: {why}"),
                    )
                };
                let in_range = u16::try_from(asked)
                    .ok()
                    .filter(|p| ranges.node_ports.contains(p));
                let Some(asked) = in_range else {
                    return Err(refuse(format!(
                        "provided port is not in the valid range. The range of valid ports is {}",
                        ranges.port_range_text()
                    )));
                };
                if taken.node_ports.contains(&asked)
                    || !take(registry, &port_key(asked), service, dry_run).await?
                {
                    return Err(refuse("provided port is already allocated".into()));
                }
                taken.node_ports.push(asked);
                asked
            }
            // Picked once every port asked for is taken, so that a
            // random pick never takes a port another entry asks for.
            (None, None) => {
                unassigned.push(i);
                continue;
            }
        };
        service["spec"]["ports"][i]["nodePort"] = json!(node_port);
    }
    for i in unassigned {
        let port = pick_port(registry, ranges, service, dry_run, &taken.node_ports).await?;
        taken.node_ports.push(port);
        service["spec"]["ports"][i]["nodePort"] = json!(port);
    }
    Ok(())
}

/// How many random addresses or ports are tried before a scan.
const RANDOM_TRIES: usize = 32;

async fn pick_ip(
    registry: &Registry,
    ranges: &ServiceRanges,
    service: &Value,
    dry_run: bool,
) -> ApiResult<Ipv4Addr> {
    let start = ranges.dynamic_start();
    let end = ranges.size() - 2;
    let candidates = candidates(start..=end, 1..start);
    for offset in candidates {
        let ip = ranges.address(offset);
        if take(registry, &ip_key(ip), service, dry_run).await? {
            return Ok(ip);
        }
    }
    Err(ApiError::internal(
        "failed to allocate a serviceIP: range is full".to_string(),
    ))
}

async fn pick_port(
    registry: &Registry,
    ranges: &ServiceRanges,
    service: &Value,
    dry_run: bool,
    already: &[u16],
) -> ApiResult<u16> {
    let (low, high) = (
        u32::from(*ranges.node_ports.start()),
        u32::from(*ranges.node_ports.end()),
    );
    for candidate in candidates(low..=high, 0..0) {
        let port = candidate as u16;
        if already.contains(&port) {
            continue;
        }
        if take(registry, &port_key(port), service, dry_run).await? {
            return Ok(port);
        }
    }
    Err(ApiError::internal(
        "failed to allocate a nodePort: range is full".to_string(),
    ))
}

/// Offsets to try: some at random in `preferred`, then all of `preferred`
/// from a random point, then all of `fallback`.
fn candidates(
    preferred: RangeInclusive<u32>,
    fallback: std::ops::Range<u32>,
) -> impl Iterator<Item = u32> {
    let mut rng = rand::thread_rng();
    let (low, high) = (*preferred.start(), *preferred.end());
    let empty = low > high;
    let random: Vec<u32> = if empty {
        Vec::new()
    } else {
        (0..RANDOM_TRIES)
            .map(|_| rng.gen_range(low..=high))
            .collect()
    };
    let from = if empty { 0 } else { rng.gen_range(low..=high) };
    let scan = (from..=high).chain(low..from).filter(move |_| !empty);
    random.into_iter().chain(scan).chain(fallback)
}

/// Finds and gives back allocations no Service holds: what a crash
/// between taking one and writing its Service (or between deleting a
/// Service and giving back) left. An allocation is given back only when a
/// second run finds it still unheld and unchanged, so a Service being
/// created meanwhile (taken, not yet written) keeps what it took, as
/// kube-apiserver's repair controller waits before it frees a leak.
#[derive(Debug, Default)]
pub struct Repair {
    /// Allocations no Service held at the last run: key → mod revision.
    suspects: std::collections::HashMap<String, i64>,
}

/// How often the API server looks for leaked allocations.
pub const REPAIR_INTERVAL: std::time::Duration = std::time::Duration::from_secs(180);

impl Repair {
    /// One run: how many allocations it gave back.
    pub async fn run(&mut self, registry: &Registry) -> ApiResult<usize> {
        let storage = registry.storage();
        let services = crate::resources::find("", "v1", "services").expect("services are served");
        let prefix = services.storage_prefix();
        let listed = storage
            .list(&prefix, &crate::storage::prefix_end(&prefix), 0, 0)
            .await
            .map_err(|err| ApiError::internal(format!("listing Services: {err}")))?;
        let mut held_by: std::collections::HashMap<String, String> = Default::default();
        for kv in &listed.kvs {
            let Ok(service) = serde_json::from_slice::<Value>(&kv.value) else {
                continue;
            };
            let uid = service["metadata"]["uid"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            let held = held(&service);
            if let Some(ip) = held.ip {
                held_by.insert(ip_key(ip), uid.clone());
            }
            for port in held.node_ports {
                held_by.insert(port_key(port), uid.clone());
            }
        }
        let mut suspects = std::collections::HashMap::new();
        let mut given_back = 0;
        for prefix in [IP_PREFIX, PORT_PREFIX] {
            let allocations = storage
                .list(prefix, &crate::storage::prefix_end(prefix), 0, 0)
                .await
                .map_err(|err| ApiError::internal(format!("listing allocations: {err}")))?;
            for kv in allocations.kvs {
                let holder: Value = serde_json::from_slice(&kv.value).unwrap_or_default();
                let uid = holder["uid"].as_str().unwrap_or_default();
                if held_by.get(&kv.key).is_some_and(|held| held == uid) {
                    continue;
                }
                if self.suspects.get(&kv.key) != Some(&kv.mod_revision) {
                    suspects.insert(kv.key, kv.mod_revision);
                    continue;
                }
                if storage.delete(&kv.key, kv.mod_revision).await.is_ok() {
                    tracing::info!(key = %kv.key, "gave back an allocation no Service holds");
                    given_back += 1;
                }
            }
        }
        self.suspects = suspects;
        Ok(given_back)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_parse_as_the_flags_take_them() {
        let ranges = ServiceRanges::parse("10.96.0.0/12", "30000-32767").unwrap();
        assert_eq!(ranges, ServiceRanges::default());
        assert_eq!(ranges.first_ip(), Ipv4Addr::new(10, 96, 0, 1));
        assert_eq!(ranges.dns_ip(), Ipv4Addr::new(10, 96, 0, 10));
        assert_eq!(ranges.dynamic_start(), 256);
        let small = ServiceRanges::parse("192.168.7.9/24", "100-200").unwrap();
        assert_eq!(small.network, Ipv4Addr::new(192, 168, 7, 0));
        assert_eq!(small.dynamic_start(), 16);
        assert_eq!(small.offset_of(Ipv4Addr::new(192, 168, 7, 0)), None);
        assert_eq!(small.offset_of(Ipv4Addr::new(192, 168, 7, 255)), None);
        assert_eq!(small.offset_of(Ipv4Addr::new(192, 168, 7, 254)), Some(254));
        assert_eq!(small.offset_of(Ipv4Addr::new(192, 168, 8, 1)), None);
        for (cidr, ports) in [
            ("10.96.0.0", "30000-32767"),
            ("10.96.0.0/33", "30000-32767"),
            ("fd00::/108", "30000-32767"),
            ("10.96.0.0/12", "30000"),
            ("10.96.0.0/12", "32767-30000"),
            ("10.96.0.0/12", "0-10"),
        ] {
            assert!(ServiceRanges::parse(cidr, ports).is_err(), "{cidr} {ports}");
        }
    }

    #[test]
    fn candidates_cover_the_range_once_scanned() {
        let all: std::collections::BTreeSet<u32> = candidates(10..=20, 1..10).collect();
        assert_eq!(all, (1..=20).collect());
        let (low, high) = (5, 4);
        assert_eq!(candidates(low..=high, 0..0).count(), 0);
    }

    #[test]
    fn what_a_service_holds() {
        let service = json!({"spec": {"type": "NodePort", "clusterIP": "10.96.0.7",
            "ports": [{"port": 80, "nodePort": 30080}, {"port": 443}]}});
        assert_eq!(
            held(&service),
            Held {
                ip: Some(Ipv4Addr::new(10, 96, 0, 7)),
                node_ports: vec![30080]
            }
        );
        let headless = json!({"spec": {"clusterIP": "None"}});
        assert_eq!(held(&headless), Held::default());
        let old = held(&service);
        let new = Held {
            ip: old.ip,
            node_ports: vec![],
        };
        assert_eq!(
            old.minus(&new),
            Held {
                ip: None,
                node_ports: vec![30080]
            }
        );
    }
}

#[cfg(test)]
mod allocation_tests {
    use super::*;
    use axum::body::Body;
    use tower::ServiceExt;

    struct Api {
        router: axum::Router,
        registry: Registry,
        _dir: tempfile::TempDir,
    }

    impl Api {
        async fn new() -> Api {
            let (registry, dir) = crate::registry::test_registry().await;
            let registry = registry
                .with_service_ranges(ServiceRanges::parse("10.0.0.0/24", "30000-30009").unwrap());
            Api {
                router: crate::server::router(registry.clone()),
                registry,
                _dir: dir,
            }
        }

        async fn call(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
            let request = axum::extract::Request::builder()
                .method(method)
                .uri(path)
                .header("content-type", "application/json")
                .body(body.map_or(Body::empty(), |b| Body::from(b.to_string())))
                .unwrap();
            let response = self.router.clone().oneshot(request).await.unwrap();
            let code = response.status().as_u16();
            let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
                .await
                .unwrap();
            (code, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
        }

        async fn create(&self, service: Value) -> (u16, Value) {
            self.call("POST", SERVICES, Some(service)).await
        }
    }

    const SERVICES: &str = "/api/v1/namespaces/default/services";

    fn service(name: &str, spec: Value) -> Value {
        let mut spec = spec;
        if spec.get("ports").is_none() && spec["type"] != "ExternalName" {
            spec["ports"] = json!([{"port": 80}]);
        }
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name}, "spec": spec})
    }

    #[tokio::test]
    async fn cluster_ips_are_allocated_requested_or_refused() {
        let api = Api::new().await;
        let (code, made) = api.create(service("a", json!({}))).await;
        assert_eq!(code, 201, "{made}");
        let ip: Ipv4Addr = made["spec"]["clusterIP"].as_str().unwrap().parse().unwrap();
        let offset = u32::from(ip) - u32::from(Ipv4Addr::new(10, 0, 0, 0));
        assert!(
            (16..=254).contains(&offset),
            "dynamic IPs come from the upper band: {ip}"
        );
        assert_eq!(made["spec"]["clusterIPs"], json!([ip.to_string()]));
        assert_eq!(made["spec"]["ipFamilies"], json!(["IPv4"]));
        assert_eq!(made["spec"]["ipFamilyPolicy"], "SingleStack");

        let (code, made) = api
            .create(service("b", json!({"clusterIP": "10.0.0.5"})))
            .await;
        assert_eq!(
            (code, &made["spec"]["clusterIP"]),
            (201, &json!("10.0.0.5")),
            "{made}"
        );
        let (code, refused) = api
            .create(service("c", json!({"clusterIP": "10.0.0.5"})))
            .await;
        assert_eq!(code, 422, "{refused}");
        assert_eq!(
            refused["message"],
            "Service \"c\" is invalid: spec.clusterIPs: Invalid value: []string{\"10.0.0.5\"}: failed to allocate IP 10.0.0.5: provided IP is already allocated"
        );
        let (code, refused) = api
            .create(service("c", json!({"clusterIP": "10.1.0.5"})))
            .await;
        assert_eq!(code, 422, "{refused}");
        assert_eq!(
            refused["message"],
            "Service \"c\" is invalid: spec.clusterIPs: Invalid value: []string{\"10.1.0.5\"}: failed to allocate IP 10.1.0.5: the provided IP (10.1.0.5) is not in the valid range. The range of valid IPs is 10.0.0.0/24"
        );
        assert_eq!(api.call("GET", &format!("{SERVICES}/c"), None).await.0, 404);

        // Headless and ExternalName Services take none.
        let (code, headless) = api.create(service("h", json!({"clusterIP": "None"}))).await;
        assert_eq!(
            (code, &headless["spec"]["clusterIPs"]),
            (201, &json!(["None"]))
        );
        let (code, external) = api
            .create(service(
                "x",
                json!({"type": "ExternalName", "externalName": "example.com"}),
            ))
            .await;
        assert_eq!(code, 201, "{external}");
        assert!(external["spec"].get("clusterIP").is_none(), "{external}");

        // A dry run takes nothing; a delete gives the IP back.
        let (code, dry) = api
            .call(
                "POST",
                &format!("{SERVICES}?dryRun=All"),
                Some(service("d", json!({"clusterIP": "10.0.0.6"}))),
            )
            .await;
        assert_eq!((code, &dry["spec"]["clusterIP"]), (201, &json!("10.0.0.6")));
        let (code, _) = api
            .create(service("d", json!({"clusterIP": "10.0.0.6"})))
            .await;
        assert_eq!(code, 201, "the dry run took nothing");
        assert_eq!(
            api.call("DELETE", &format!("{SERVICES}/b"), None).await.0,
            200
        );
        let (code, again) = api
            .create(service("e", json!({"clusterIP": "10.0.0.5"})))
            .await;
        assert_eq!(code, 201, "the deleted Service's IP is free: {again}");
    }

    /// A port left to be picked never takes one another entry of the same
    /// Service asks for, whatever their order: ten Services each ask for
    /// 30009 on their second port, and the first one's pick has the other
    /// nine ports of the range to choose from.
    #[tokio::test]
    async fn a_random_node_port_leaves_the_ones_asked_for() {
        let api = Api::new().await;
        for i in 0..10 {
            let name = format!("s{i}");
            let (code, made) = api
                .create(service(&name, json!({"type": "NodePort", "ports": [{"port": 80, "name": "a"}, {"port": 443, "name": "b", "nodePort": 30009}]})))
                .await;
            assert_eq!(code, 201, "{made}");
            assert_eq!(made["spec"]["ports"][1]["nodePort"], 30009);
            let (code, gone) = api
                .call("DELETE", &format!("{SERVICES}/{name}"), None)
                .await;
            assert_eq!(code, 200, "{gone}");
        }
    }

    #[tokio::test]
    async fn node_ports_follow_the_type_and_the_ports() {
        let api = Api::new().await;
        let (code, made) = api
            .create(service("n", json!({"type": "NodePort", "ports": [{"port": 80, "name": "http"}, {"port": 443, "name": "https", "nodePort": 30003}]})))
            .await;
        assert_eq!(code, 201, "{made}");
        let first = made["spec"]["ports"][0]["nodePort"].as_u64().unwrap();
        assert!((30000..=30009).contains(&first) && first != 30003, "{made}");
        assert_eq!(made["spec"]["ports"][1]["nodePort"], 30003);

        let (code, refused) = api
            .create(service(
                "m",
                json!({"type": "NodePort", "ports": [{"port": 80, "nodePort": 30003}]}),
            ))
            .await;
        assert_eq!(code, 422, "{refused}");
        assert_eq!(
            refused["message"],
            "Service \"m\" is invalid: spec.ports[0].nodePort: Invalid value: 30003: provided port is already allocated"
        );
        let (code, refused) = api
            .create(service(
                "m",
                json!({"type": "NodePort", "ports": [{"port": 80, "nodePort": 31000}]}),
            ))
            .await;
        assert_eq!(code, 422, "{refused}");
        assert_eq!(
            refused["message"],
            "Service \"m\" is invalid: spec.ports[0].nodePort: Invalid value: 31000: provided port is not in the valid range. The range of valid ports is 30000-30009"
        );
        // The refused create gave back the IP it had taken: 8 more
        // ports fill the range exactly.
        let mut made_ports = vec![first, 30003];
        for i in 0..8 {
            let (code, more) = api
                .create(service(&format!("p{i}"), json!({"type": "NodePort"})))
                .await;
            assert_eq!(code, 201, "{more}");
            made_ports.push(more["spec"]["ports"][0]["nodePort"].as_u64().unwrap());
        }
        made_ports.sort_unstable();
        assert_eq!(made_ports, (30000..=30009).collect::<Vec<u64>>());
        let (code, full) = api
            .create(service("full", json!({"type": "NodePort"})))
            .await;
        assert_eq!(
            (code, &full["message"]),
            (500, &json!("failed to allocate a nodePort: range is full"))
        );

        // An update that leaves the fields out keeps the IP and ports; a
        // change to ClusterIP gives the ports back.
        let mut replaced = made.clone();
        replaced["spec"]
            .as_object_mut()
            .unwrap()
            .remove("clusterIP");
        replaced["spec"]
            .as_object_mut()
            .unwrap()
            .remove("clusterIPs");
        replaced["spec"]["ports"][0]
            .as_object_mut()
            .unwrap()
            .remove("nodePort");
        let (code, kept) = api
            .call("PUT", &format!("{SERVICES}/n"), Some(replaced))
            .await;
        assert_eq!(code, 200, "{kept}");
        assert_eq!(kept["spec"]["clusterIP"], made["spec"]["clusterIP"]);
        assert_eq!(kept["spec"]["ports"][0]["nodePort"], first);
        let mut cluster_ip = kept.clone();
        cluster_ip["spec"]["type"] = json!("ClusterIP");
        let (code, changed) = api
            .call("PUT", &format!("{SERVICES}/n"), Some(cluster_ip))
            .await;
        assert_eq!(code, 200, "{changed}");
        assert!(
            changed["spec"]["ports"][0].get("nodePort").is_none(),
            "{changed}"
        );
        let (code, reused) = api
            .create(service(
                "q",
                json!({"type": "NodePort", "ports": [{"port": 80, "nodePort": 30003}]}),
            ))
            .await;
        assert_eq!(code, 201, "the ports were given back: {reused}");
    }

    #[tokio::test]
    async fn repair_gives_back_what_no_service_holds() {
        let api = Api::new().await;
        let (code, made) = api
            .create(service(
                "a",
                json!({"type": "NodePort", "clusterIP": "10.0.0.100",
                "ports": [{"port": 80, "nodePort": 30000}]}),
            ))
            .await;
        assert_eq!(code, 201, "{made}");
        // A crash between taking an IP and writing its Service.
        let orphan = json!({"namespace": "default", "name": "lost", "uid": "u-lost"});
        let storage = api.registry.storage();
        storage
            .create(
                &ip_key(Ipv4Addr::new(10, 0, 0, 7)),
                orphan.to_string().into_bytes(),
                0,
            )
            .await
            .unwrap();
        storage
            .create(&port_key(30009), orphan.to_string().into_bytes(), 0)
            .await
            .unwrap();
        let mut repair = Repair::default();
        assert_eq!(
            repair.run(&api.registry).await.unwrap(),
            0,
            "first suspected"
        );
        assert_eq!(
            repair.run(&api.registry).await.unwrap(),
            2,
            "then given back"
        );
        assert_eq!(
            repair.run(&api.registry).await.unwrap(),
            0,
            "the Service's own stay"
        );
        let (code, _) = api
            .create(service("b", json!({"clusterIP": "10.0.0.7"})))
            .await;
        assert_eq!(code, 201);
        let held = held(&made);
        let still = storage.get(&ip_key(held.ip.unwrap())).await.unwrap();
        assert!(still.is_some());
    }
}
