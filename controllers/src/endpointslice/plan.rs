//! The pure part of an EndpointSlice sync: the endpoints a Service's pods
//! make, grouped by resolved ports, and which slices to create, update and
//! delete so that each endpoint stays in the slice it is in when it can.

use std::collections::BTreeMap;
use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::common::pods::is_ready;
use crate::endpoint::plan::{labels as endpoint_labels, trigger_time, LAST_CHANGE_TRIGGER_TIME};
use crate::endpoint::pods::{
    hostname, is_headless, pod_ip, publishes_not_ready, resolve_ports, selects,
    should_be_in_endpoints, target_ref, ResolvedPort,
};

/// kube-controller-manager's `--max-endpoints-per-slice` default.
pub const MAX_ENDPOINTS_PER_SLICE: usize = 100;
/// Who manages a slice.
pub const MANAGED_BY_LABEL: &str = "endpointslice.kubernetes.io/managed-by";
/// This controller's value of [`MANAGED_BY_LABEL`].
pub const MANAGED_BY: &str = "endpointslice-controller.k8s.io";
/// The Service a slice belongs to.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
/// The only address type skiff's pods have.
pub const ADDRESS_TYPE: &str = "IPv4";

/// Endpoints by the ports they serve (ports in the Service's order).
pub type Groups = BTreeMap<Vec<ResolvedPort>, Vec<Endpoint>>;

/// The Service's endpoints: every selected pod with an IPv4 address that
/// is not terminal, terminating ones included with their condition.
pub fn endpoints(service: &Service, pods: &[Arc<Pod>]) -> Groups {
    let publish = publishes_not_ready(service);
    let has_ports = service
        .spec
        .as_ref()
        .and_then(|s| s.ports.as_ref())
        .is_some_and(|p| !p.is_empty());
    let mut groups = Groups::new();
    for pod in pods
        .iter()
        .filter(|p| selects(service, p) && should_be_in_endpoints(p, true))
    {
        let ip = pod_ip(pod).unwrap_or_default();
        if ip.contains(':') {
            continue;
        }
        let ports = resolve_ports(service, pod);
        if (has_ports && ports.is_empty()) || (!has_ports && !is_headless(service)) {
            continue;
        }
        let serving = is_ready(pod);
        let terminating = pod.metadata.deletion_timestamp.is_some();
        let endpoint = Endpoint {
            addresses: vec![ip.to_string()],
            conditions: Some(EndpointConditions {
                ready: Some(publish || (serving && !terminating)),
                serving: Some(serving),
                terminating: Some(terminating),
            }),
            hostname: hostname(service, pod),
            node_name: pod.spec.as_ref().and_then(|s| s.node_name.clone()),
            target_ref: Some(target_ref(pod)),
            ..Default::default()
        };
        groups.entry(ports).or_default().push(endpoint);
    }
    groups.values_mut().for_each(|e| e.sort_by_key(identity));
    groups
}

/// What identifies an endpoint across syncs: its pod.
fn identity(endpoint: &Endpoint) -> (String, String) {
    let pod = endpoint.target_ref.as_ref();
    let part = |f: Option<&String>| f.cloned().unwrap_or_default();
    (
        part(pod.and_then(|r| r.name.as_ref())),
        part(pod.and_then(|r| r.uid.as_ref())),
    )
}

/// The writes that bring a Service's slices to its endpoints.
#[derive(Debug, Default)]
pub struct Changes {
    pub create: Vec<EndpointSlice>,
    pub update: Vec<EndpointSlice>,
    pub delete: Vec<Arc<EndpointSlice>>,
}

impl Changes {
    pub fn is_empty(&self) -> bool {
        self.create.is_empty() && self.update.is_empty() && self.delete.is_empty()
    }
}

/// kube's slice reconciler, simplified: per port set, each slice keeps the
/// wanted endpoints it holds, new endpoints fill slices with room, then
/// new slices of at most `max` endpoints; emptied slices are deleted. A
/// Service without endpoints keeps one empty placeholder slice.
pub fn reconcile(
    service: &Service,
    existing: &[Arc<EndpointSlice>],
    mut wanted: Groups,
    max: usize,
    now: Timestamp,
) -> Changes {
    let mut changes = Changes::default();
    let labels = slice_labels(service);
    let mut kept: Vec<(EndpointSlice, bool)> = Vec::new();
    let mut placeholder = None;
    let nothing_wanted = wanted.is_empty();
    for slice in existing {
        let ports = ports_of(slice);
        let is_placeholder = slice.endpoints.is_empty() && slice.ports.is_none();
        match wanted.get_mut(&ports) {
            _ if slice.address_type != ADDRESS_TYPE => changes.delete.push(slice.clone()),
            _ if is_placeholder && nothing_wanted && placeholder.is_none() => {
                placeholder = Some(slice.clone());
            }
            None => changes.delete.push(slice.clone()),
            Some(group) => {
                let mut held = Vec::new();
                for endpoint in &slice.endpoints {
                    if let Some(at) = group.iter().position(|e| identity(e) == identity(endpoint)) {
                        held.push(group.remove(at));
                    }
                }
                let mut slice = slice.as_ref().clone();
                let changed = held != slice.endpoints;
                slice.endpoints = held;
                kept.push((slice, changed));
            }
        }
    }
    for (ports, mut remaining) in wanted {
        for (slice, changed) in kept.iter_mut().filter(|(s, _)| ports_of(s) == ports) {
            let room = max
                .saturating_sub(slice.endpoints.len())
                .min(remaining.len());
            if room > 0 {
                slice.endpoints.extend(remaining.drain(..room));
                *changed = true;
            }
        }
        while !remaining.is_empty() {
            let take = remaining.len().min(max);
            let endpoints: Vec<Endpoint> = remaining.drain(..take).collect();
            changes
                .create
                .push(new_slice(service, &ports, endpoints, &labels, now));
        }
    }
    for (mut slice, changed) in kept {
        if slice.endpoints.is_empty() {
            let original = existing
                .iter()
                .find(|s| s.metadata.name == slice.metadata.name);
            changes.delete.extend(original.cloned());
            continue;
        }
        slice.endpoints.sort_by_key(identity);
        let relabel = slice.metadata.labels.as_ref() != Some(&labels);
        if changed || relabel {
            slice.metadata.labels = Some(labels.clone());
            if changed {
                stamp(&mut slice, now);
            }
            changes.update.push(slice);
        }
    }
    let nothing_left = changes.create.is_empty() && changes.update.is_empty();
    let survivors = existing.len() - changes.delete.len();
    match placeholder {
        Some(slice) if slice.metadata.labels.as_ref() != Some(&labels) => {
            let mut slice = slice.as_ref().clone();
            slice.metadata.labels = Some(labels.clone());
            changes.update.push(slice);
        }
        Some(_) => {}
        None if nothing_left && survivors == 0 => {
            changes
                .create
                .push(new_slice(service, &[], Vec::new(), &labels, now));
        }
        None => {}
    }
    changes
}

fn stamp(slice: &mut EndpointSlice, now: Timestamp) {
    slice
        .metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(LAST_CHANGE_TRIGGER_TIME.into(), trigger_time(now));
}

/// The ports of a slice, as [`endpoints`] keys them.
pub fn ports_of(slice: &EndpointSlice) -> Vec<ResolvedPort> {
    let ports = slice.ports.iter().flatten();
    ports
        .map(|p| ResolvedPort {
            name: p.name.clone().filter(|n| !n.is_empty()),
            port: p.port.unwrap_or_default(),
            protocol: p.protocol.clone().unwrap_or_else(|| "TCP".into()),
            app_protocol: p.app_protocol.clone(),
        })
        .collect()
}

/// A slice's labels: the Service's, its name and this controller's.
pub fn slice_labels(service: &Service) -> BTreeMap<String, String> {
    let mut labels = endpoint_labels(service);
    let name = service.metadata.name.clone().unwrap_or_default();
    labels.insert(SERVICE_NAME_LABEL.into(), name);
    labels.insert(MANAGED_BY_LABEL.into(), MANAGED_BY.into());
    labels
}

fn new_slice(
    service: &Service,
    ports: &[ResolvedPort],
    endpoints: Vec<Endpoint>,
    labels: &BTreeMap<String, String>,
    now: Timestamp,
) -> EndpointSlice {
    let name = service.metadata.name.clone().unwrap_or_default();
    let owner = crate::common::owners::controller_reference(service);
    let placeholder = endpoints.is_empty() && ports.is_empty();
    let mut slice = EndpointSlice {
        metadata: ObjectMeta {
            generate_name: Some(format!("{name}-")),
            namespace: service.metadata.namespace.clone(),
            labels: Some(labels.clone()),
            owner_references: Some(vec![owner]),
            ..Default::default()
        },
        address_type: ADDRESS_TYPE.into(),
        endpoints,
        ports: (!placeholder).then(|| ports.iter().map(slice_port).collect()),
    };
    if !placeholder {
        stamp(&mut slice, now);
    }
    slice
}

fn slice_port(port: &ResolvedPort) -> EndpointPort {
    EndpointPort {
        name: Some(port.name.clone().unwrap_or_default()),
        port: Some(port.port),
        protocol: Some(port.protocol.clone()),
        app_protocol: port.app_protocol.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::endpoint::fixtures::{pod, service, NOW};
    use serde_json::json;

    fn arcs(pods: Vec<Pod>) -> Vec<Arc<Pod>> {
        pods.into_iter().map(Arc::new).collect()
    }

    fn pod_names(slice: &EndpointSlice) -> Vec<String> {
        slice.endpoints.iter().map(|e| identity(e).0).collect()
    }

    /// `changes` applied to `existing`, with names given to new slices.
    fn applied(existing: &[Arc<EndpointSlice>], changes: Changes) -> Vec<Arc<EndpointSlice>> {
        let mut slices: Vec<EndpointSlice> = existing
            .iter()
            .filter(|s| {
                !changes
                    .delete
                    .iter()
                    .any(|d| d.metadata.name == s.metadata.name)
            })
            .map(|s| s.as_ref().clone())
            .collect();
        for update in changes.update {
            let at = slices
                .iter()
                .position(|s| s.metadata.name == update.metadata.name);
            slices[at.unwrap()] = update;
        }
        for (i, mut created) in changes.create.into_iter().enumerate() {
            created.metadata.name = Some(format!("web-{}{i}", slices.len()));
            slices.push(created);
        }
        slices.into_iter().map(Arc::new).collect()
    }

    #[test]
    fn endpoints_carry_ready_serving_and_terminating() {
        let svc = service(
            "web",
            json!([{"name": "http", "port": 80, "targetPort": "http"}]),
        );
        let pods = arcs(vec![
            pod("a").build(),
            pod("slow").not_ready().build(),
            pod("leaving").terminating().build(),
            pod("v6").ip("fd00::1").build(),
        ]);
        let groups = endpoints(&svc, &pods);
        let group = groups.values().next().unwrap();
        let conditions: Vec<(String, bool, bool, bool)> = group
            .iter()
            .map(|e| {
                let c = e.conditions.as_ref().unwrap();
                (
                    identity(e).0,
                    c.ready.unwrap(),
                    c.serving.unwrap(),
                    c.terminating.unwrap(),
                )
            })
            .collect();
        assert_eq!(
            conditions,
            [
                ("a".into(), true, true, false),
                ("leaving".into(), false, true, true),
                ("slow".into(), false, false, false),
            ]
        );
        assert_eq!(group[0].node_name.as_deref(), Some("node-1"));
        assert_eq!(group[0].addresses, ["127.0.0.1"]);
    }

    #[test]
    fn a_new_service_gets_one_labelled_owned_slice() {
        let svc = service(
            "web",
            json!([{"name": "http", "port": 80, "targetPort": "http"}]),
        );
        let pods = arcs(vec![pod("a").build(), pod("b").build()]);
        let changes = reconcile(&svc, &[], endpoints(&svc, &pods), 100, NOW);
        assert_eq!(changes.create.len(), 1);
        let slice = &changes.create[0];
        assert_eq!(slice.metadata.generate_name.as_deref(), Some("web-"));
        let labels = slice.metadata.labels.as_ref().unwrap();
        assert_eq!(labels[SERVICE_NAME_LABEL], "web");
        assert_eq!(labels[MANAGED_BY_LABEL], MANAGED_BY);
        assert_eq!(labels["team"], "a");
        let owner = &slice.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str()),
            ("Service", "uid-web")
        );
        assert_eq!(slice.address_type, "IPv4");
        assert_eq!(pod_names(slice), ["a", "b"]);
        let port = &slice.ports.as_ref().unwrap()[0];
        assert_eq!(
            (port.name.as_deref(), port.port),
            (Some("http"), Some(8080))
        );
    }

    #[test]
    fn slices_hold_at_most_max_endpoints_and_keep_their_members() {
        let svc = service("web", json!([{"port": 80}]));
        let names: Vec<String> = (0..5).map(|i| format!("p{i}")).collect();
        let pods = arcs(names.iter().map(|n| pod(n).build()).collect());
        let first = reconcile(&svc, &[], endpoints(&svc, &pods), 2, NOW);
        assert_eq!(first.create.len(), 3);
        let slices = applied(&[], first);
        let steady = reconcile(&svc, &slices, endpoints(&svc, &pods), 2, NOW);
        assert!(steady.is_empty(), "{steady:?}");

        // p1 goes and p9 comes: p9 takes p1's place, nothing else moves.
        let mut fewer: Vec<Arc<Pod>> = pods
            .iter()
            .filter(|p| p.metadata.name.as_deref() != Some("p1"))
            .cloned()
            .collect();
        fewer.push(Arc::new(pod("p9").build()));
        let changes = reconcile(&svc, &slices, endpoints(&svc, &fewer), 2, NOW);
        assert!(changes.create.is_empty() && changes.delete.is_empty());
        assert_eq!(changes.update.len(), 1);
        assert_eq!(pod_names(&changes.update[0]), ["p0", "p9"]);

        // Everything gone: one empty placeholder remains.
        let gone = reconcile(&svc, &slices, Groups::new(), 2, NOW);
        assert_eq!(gone.delete.len(), 3);
        assert_eq!(gone.create.len(), 1);
        assert!(gone.create[0].endpoints.is_empty() && gone.create[0].ports.is_none());
        let placeholder = applied(&slices, gone);
        assert_eq!(placeholder.len(), 1);
        assert!(reconcile(&svc, &placeholder, Groups::new(), 2, NOW).is_empty());
        // A pod arrives: the placeholder goes, a real slice comes.
        let back = reconcile(&svc, &placeholder, endpoints(&svc, &pods[..1]), 2, NOW);
        assert_eq!((back.create.len(), back.delete.len()), (1, 1));
    }

    #[test]
    fn a_readiness_change_updates_the_endpoint_in_place() {
        let svc = service("web", json!([{"port": 80}]));
        let pods = arcs(vec![pod("a").build(), pod("b").build()]);
        let slices = applied(&[], reconcile(&svc, &[], endpoints(&svc, &pods), 100, NOW));
        let changed = arcs(vec![pod("a").build(), pod("b").not_ready().build()]);
        let changes = reconcile(&svc, &slices, endpoints(&svc, &changed), 100, NOW);
        assert_eq!(changes.update.len(), 1);
        let b = &changes.update[0].endpoints[1];
        assert_eq!(b.conditions.as_ref().unwrap().ready, Some(false));
    }

    #[test]
    fn a_changed_port_replaces_the_slice() {
        let svc = service("web", json!([{"port": 80}]));
        let pods = arcs(vec![pod("a").build()]);
        let slices = applied(&[], reconcile(&svc, &[], endpoints(&svc, &pods), 100, NOW));
        let moved = service("web", json!([{"port": 80, "targetPort": 9000}]));
        let changes = reconcile(&moved, &slices, endpoints(&moved, &pods), 100, NOW);
        assert_eq!((changes.create.len(), changes.delete.len()), (1, 1));
        assert_eq!(
            changes.create[0].ports.as_ref().unwrap()[0].port,
            Some(9000)
        );
    }
}
