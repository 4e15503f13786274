//! The pure part of an Endpoints sync: the subsets a Service's pods make,
//! and the Endpoints object to write (none when the stored one is current).

use std::collections::BTreeMap;
use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{
    EndpointAddress, EndpointPort, EndpointSubset, Endpoints, Pod, Service,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::pods::{
    hostname, is_headless, pod_ip, publishes_not_ready, resolve_ports, selects,
    should_be_in_endpoints, target_ref, ResolvedPort,
};
use crate::common::pods::is_ready;

/// When the change the Endpoints reflect happened (kube writes it so that
/// latency to programmed endpoints can be measured).
pub const LAST_CHANGE_TRIGGER_TIME: &str = "endpoints.kubernetes.io/last-change-trigger-time";

/// On the endpoints of a Service with `clusterIP: None`.
pub const HEADLESS_LABEL: &str = "service.kubernetes.io/headless";

/// The subsets of the Service's pods: one per distinct set of resolved
/// ports, ready pods in `addresses`, the others in `notReadyAddresses`.
pub fn subsets(service: &Service, pods: &[Arc<Pod>]) -> Vec<EndpointSubset> {
    let publish = publishes_not_ready(service);
    let has_ports = service
        .spec
        .as_ref()
        .and_then(|s| s.ports.as_ref())
        .is_some_and(|p| !p.is_empty());
    let mut groups: BTreeMap<Vec<ResolvedPort>, (Vec<EndpointAddress>, Vec<EndpointAddress>)> =
        BTreeMap::new();
    for pod in pods
        .iter()
        .filter(|p| selects(service, p) && should_be_in_endpoints(p, publish))
    {
        let ports = resolve_ports(service, pod);
        if (has_ports && ports.is_empty()) || (!has_ports && !is_headless(service)) {
            continue;
        }
        let address = EndpointAddress {
            ip: pod_ip(pod).unwrap_or_default().to_string(),
            hostname: hostname(service, pod),
            node_name: pod.spec.as_ref().and_then(|s| s.node_name.clone()),
            target_ref: Some(target_ref(pod)),
        };
        let (ready, not_ready) = groups.entry(ports).or_default();
        match publish || is_ready(pod) {
            true => ready.push(address),
            false => not_ready.push(address),
        }
    }
    groups
        .into_iter()
        .map(|(ports, (ready, not_ready))| EndpointSubset {
            addresses: sorted(ready),
            not_ready_addresses: sorted(not_ready),
            ports: (!ports.is_empty()).then(|| ports.into_iter().map(endpoint_port).collect()),
        })
        .collect()
}

fn sorted(mut addresses: Vec<EndpointAddress>) -> Option<Vec<EndpointAddress>> {
    let key = |a: &EndpointAddress| {
        let name = a.target_ref.as_ref().and_then(|r| r.name.clone());
        (a.ip.clone(), name)
    };
    addresses.sort_by_key(key);
    (!addresses.is_empty()).then_some(addresses)
}

fn endpoint_port(port: ResolvedPort) -> EndpointPort {
    EndpointPort {
        name: port.name,
        port: port.port,
        protocol: Some(port.protocol),
        app_protocol: port.app_protocol,
    }
}

/// The Service's labels, plus the headless label when it is headless.
pub fn labels(service: &Service) -> BTreeMap<String, String> {
    let mut labels = service.metadata.labels.clone().unwrap_or_default();
    if is_headless(service) {
        labels.insert(HEADLESS_LABEL.into(), String::new());
    }
    labels
}

/// The Endpoints to write for `service`, or `None` when `existing` already
/// says it. `now` becomes the trigger time when the subsets change.
pub fn endpoints(
    service: &Service,
    existing: Option<&Endpoints>,
    pods: &[Arc<Pod>],
    now: Timestamp,
) -> Option<Endpoints> {
    let subsets = subsets(service, pods);
    let labels = labels(service);
    let old_subsets = existing.and_then(|e| e.subsets.clone()).unwrap_or_default();
    let old_labels = existing.and_then(|e| e.metadata.labels.clone());
    let subsets_changed = existing.is_none() || old_subsets != subsets;
    if !subsets_changed && old_labels.unwrap_or_default() == labels {
        return None;
    }
    let mut annotations = existing
        .and_then(|e| e.metadata.annotations.clone())
        .unwrap_or_default();
    if subsets_changed {
        annotations.insert(LAST_CHANGE_TRIGGER_TIME.into(), trigger_time(now));
    }
    Some(Endpoints {
        metadata: ObjectMeta {
            name: service.metadata.name.clone(),
            namespace: service.metadata.namespace.clone(),
            labels: Some(labels),
            annotations: Some(annotations),
            resource_version: existing.and_then(|e| e.metadata.resource_version.clone()),
            ..Default::default()
        },
        subsets: (!subsets.is_empty()).then_some(subsets),
    })
}

/// RFC 3339 with nanoseconds, as Go's `time.RFC3339Nano` writes it.
pub fn trigger_time(now: Timestamp) -> String {
    now.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::endpoint::fixtures::{pod, service, NOW};
    use serde_json::json;

    fn arcs(pods: Vec<Pod>) -> Vec<Arc<Pod>> {
        pods.into_iter().map(Arc::new).collect()
    }

    fn names(addresses: &Option<Vec<EndpointAddress>>) -> Vec<String> {
        addresses
            .iter()
            .flatten()
            .map(|a| a.target_ref.as_ref().unwrap().name.clone().unwrap())
            .collect()
    }

    #[test]
    fn ready_and_not_ready_pods_are_listed_apart_with_resolved_ports() {
        let svc = service(
            "web",
            json!([{"name": "http", "port": 80, "targetPort": "http"}]),
        );
        let pods = arcs(vec![
            pod("b").build(),
            pod("a").build(),
            pod("slow").not_ready().build(),
            pod("leaving").terminating().build(),
            pod("no-ip").no_ip().build(),
            pod("done").phase("Failed").build(),
            pod("other").labels(&[("app", "db")]).build(),
        ]);
        let subsets = subsets(&svc, &pods);
        assert_eq!(subsets.len(), 1);
        assert_eq!(names(&subsets[0].addresses), ["a", "b"]);
        assert_eq!(names(&subsets[0].not_ready_addresses), ["slow"]);
        let ports = subsets[0].ports.as_ref().unwrap();
        assert_eq!(
            (
                ports[0].name.as_deref(),
                ports[0].port,
                ports[0].protocol.as_deref()
            ),
            (Some("http"), 8080, Some("TCP"))
        );
        let address = &subsets[0].addresses.as_ref().unwrap()[0];
        assert_eq!(address.ip, "127.0.0.1");
        assert_eq!(address.node_name.as_deref(), Some("node-1"));
        assert_eq!(
            address.target_ref.as_ref().unwrap().uid.as_deref(),
            Some("uid-a")
        );
    }

    #[test]
    fn pods_resolving_named_ports_differently_make_separate_subsets() {
        let svc = service("web", json!([{"port": 80, "targetPort": "http"}]));
        let pods = arcs(vec![
            pod("a").build(),
            pod("b").port("http", 9000).ip("10.0.0.2").build(),
            pod("c").port("grpc", 9000).build(),
        ]);
        let subsets = subsets(&svc, &pods);
        let by_port: Vec<(i32, Vec<String>)> = subsets
            .iter()
            .map(|s| (s.ports.as_ref().unwrap()[0].port, names(&s.addresses)))
            .collect();
        assert_eq!(
            by_port,
            [(8080, vec!["a".to_string()]), (9000, vec!["b".to_string()])]
        );
    }

    #[test]
    fn publish_not_ready_addresses_lists_every_pod_as_ready() {
        let mut svc = service("web", json!([{"port": 80}]));
        svc.spec.as_mut().unwrap().publish_not_ready_addresses = Some(true);
        let pods = arcs(vec![
            pod("slow").not_ready().build(),
            pod("leaving").terminating().build(),
        ]);
        let subsets = subsets(&svc, &pods);
        assert_eq!(names(&subsets[0].addresses), ["leaving", "slow"]);
        assert!(subsets[0].not_ready_addresses.is_none());
    }

    #[test]
    fn headless_services_without_ports_list_addresses_only() {
        let mut svc = service("web", json!([]));
        let pods = arcs(vec![pod("a").build()]);
        assert!(
            subsets(&svc, &pods).is_empty(),
            "not headless: no ports, no endpoints"
        );
        svc.spec.as_mut().unwrap().cluster_ip = Some("None".into());
        let subsets = subsets(&svc, &pods);
        assert_eq!(names(&subsets[0].addresses), ["a"]);
        assert!(subsets[0].ports.is_none());
        assert!(labels(&svc).contains_key(HEADLESS_LABEL));
    }

    #[test]
    fn endpoints_are_written_only_when_they_change() {
        let svc = service("web", json!([{"port": 80}]));
        let pods = arcs(vec![pod("a").build()]);
        let first = endpoints(&svc, None, &pods, NOW).expect("created");
        assert_eq!(first.metadata.name.as_deref(), Some("web"));
        assert_eq!(first.metadata.labels.as_ref().unwrap()["team"], "a");
        assert_eq!(
            first.metadata.annotations.as_ref().unwrap()[LAST_CHANGE_TRIGGER_TIME],
            NOW.to_string()
        );
        assert!(endpoints(&svc, Some(&first), &pods, NOW).is_none());

        let more = arcs(vec![pod("a").build(), pod("b").not_ready().build()]);
        let mut stored = first.clone();
        stored.metadata.resource_version = Some("8".into());
        let second = endpoints(&svc, Some(&stored), &more, NOW).expect("updated");
        assert_eq!(second.metadata.resource_version.as_deref(), Some("8"));
        assert_eq!(
            names(&second.subsets.as_ref().unwrap()[0].not_ready_addresses),
            ["b"]
        );
        let emptied = endpoints(&svc, Some(&second), &[], NOW).expect("emptied");
        assert!(emptied.subsets.is_none());
    }
}
