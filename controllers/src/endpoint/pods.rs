//! What a Service's endpoints read off a pod: whether the Service selects
//! it, whether it belongs in endpoints at all, its hostname, and the ports
//! the Service's targetPorts resolve to on it. Shared with the
//! EndpointSlice controller.

use k8s_openapi::api::core::v1::{ObjectReference, Pod, Service, ServicePort};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::common::pods::phase;

/// A port of an endpoint, as both Endpoints and EndpointSlices list it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ResolvedPort {
    pub name: Option<String>,
    pub port: i32,
    pub protocol: String,
    pub app_protocol: Option<String>,
}

/// The Service's `spec.selector`, if it has a non-empty one: a Service
/// without one has its endpoints managed by someone else.
pub fn selector(service: &Service) -> Option<&std::collections::BTreeMap<String, String>> {
    service
        .spec
        .as_ref()?
        .selector
        .as_ref()
        .filter(|s| !s.is_empty())
}

/// The pod is in the Service's namespace and carries every selector label.
pub fn selects(service: &Service, pod: &Pod) -> bool {
    let Some(selector) = selector(service) else {
        return false;
    };
    if pod.metadata.namespace != service.metadata.namespace {
        return false;
    }
    let labels = pod.metadata.labels.as_ref();
    selector
        .iter()
        .all(|(k, v)| labels.and_then(|l| l.get(k)) == Some(v))
}

/// `spec.publishNotReadyAddresses`: every pod counts as ready.
pub fn publishes_not_ready(service: &Service) -> bool {
    service
        .spec
        .as_ref()
        .and_then(|s| s.publish_not_ready_addresses)
        .unwrap_or(false)
}

/// `spec.clusterIP: None`.
pub fn is_headless(service: &Service) -> bool {
    service.spec.as_ref().and_then(|s| s.cluster_ip.as_deref()) == Some("None")
}

/// `status.podIP`, once the kubelet has set one.
pub fn pod_ip(pod: &Pod) -> Option<&str> {
    pod.status
        .as_ref()
        .and_then(|s| s.pod_ip.as_deref())
        .filter(|ip| !ip.is_empty())
}

/// kube's `ShouldPodBeInEndpoints`: it has an IP and is not terminal; a
/// terminating pod only when `include_terminating`.
pub fn should_be_in_endpoints(pod: &Pod, include_terminating: bool) -> bool {
    if pod_ip(pod).is_none() || matches!(phase(pod), "Succeeded" | "Failed") {
        return false;
    }
    include_terminating || pod.metadata.deletion_timestamp.is_none()
}

/// `spec.hostname` when the pod's `spec.subdomain` names this Service in
/// its namespace (the pod's DNS name under the Service).
pub fn hostname(service: &Service, pod: &Pod) -> Option<String> {
    let spec = pod.spec.as_ref()?;
    let hostname = spec.hostname.as_deref().filter(|h| !h.is_empty())?;
    let same = spec.subdomain.as_deref() == service.metadata.name.as_deref()
        && pod.metadata.namespace == service.metadata.namespace;
    same.then(|| hostname.to_string())
}

/// `targetRef` of an endpoint: the pod.
pub fn target_ref(pod: &Pod) -> ObjectReference {
    ObjectReference {
        kind: Some("Pod".into()),
        namespace: pod.metadata.namespace.clone(),
        name: pod.metadata.name.clone(),
        uid: pod.metadata.uid.clone(),
        ..Default::default()
    }
}

/// The Service's ports as this pod serves them; a port whose named
/// targetPort the pod's containers do not declare is left out.
pub fn resolve_ports(service: &Service, pod: &Pod) -> Vec<ResolvedPort> {
    let ports = service.spec.as_ref().and_then(|s| s.ports.as_ref());
    ports
        .into_iter()
        .flatten()
        .filter_map(|port| {
            Some(ResolvedPort {
                name: port.name.clone().filter(|n| !n.is_empty()),
                port: target_port(port, pod)?,
                protocol: protocol(port),
                app_protocol: port.app_protocol.clone(),
            })
        })
        .collect()
}

fn protocol(port: &ServicePort) -> String {
    port.protocol.clone().unwrap_or_else(|| "TCP".into())
}

/// kube's `FindPort`: a number as it is, a name looked up among the
/// containers' ports of the same protocol; no targetPort means `port`.
fn target_port(port: &ServicePort, pod: &Pod) -> Option<i32> {
    match &port.target_port {
        None => Some(port.port),
        Some(IntOrString::Int(n)) => Some(*n),
        Some(IntOrString::String(name)) => {
            if let Ok(n) = name.parse::<i32>() {
                return Some(n);
            }
            let wanted = protocol(port);
            let containers = pod.spec.as_ref().map(|s| s.containers.as_slice());
            containers
                .into_iter()
                .flatten()
                .flat_map(|c| c.ports.iter().flatten())
                .find(|p| {
                    p.name.as_deref() == Some(name.as_str())
                        && p.protocol.as_deref().unwrap_or("TCP") == wanted
                })
                .map(|p| p.container_port)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::endpoint::fixtures::{pod, service};

    #[test]
    fn target_ports_resolve_by_number_or_container_port_name() {
        let svc = service(
            "web",
            serde_json::json!([
                {"name": "http", "port": 80, "targetPort": "http"},
                {"name": "metrics", "port": 9090, "targetPort": 9100},
                {"name": "plain", "port": 8080},
                {"name": "missing", "port": 81, "targetPort": "nope"},
            ]),
        );
        let ports: Vec<(Option<String>, i32)> = resolve_ports(&svc, &pod("a").build())
            .into_iter()
            .map(|p| (p.name, p.port))
            .collect();
        assert_eq!(
            ports,
            [
                (Some("http".into()), 8080),
                (Some("metrics".into()), 9100),
                (Some("plain".into()), 8080),
            ]
        );
    }

    #[test]
    fn only_pods_with_an_ip_that_are_not_terminal_count() {
        assert!(should_be_in_endpoints(&pod("a").build(), false));
        assert!(!should_be_in_endpoints(&pod("a").no_ip().build(), false));
        assert!(!should_be_in_endpoints(
            &pod("a").phase("Succeeded").build(),
            false
        ));
        let leaving = pod("a").terminating().build();
        assert!(!should_be_in_endpoints(&leaving, false));
        assert!(should_be_in_endpoints(&leaving, true));
    }

    #[test]
    fn hostname_only_under_the_matching_subdomain() {
        let svc = service("web", serde_json::json!([{"port": 80}]));
        let named = pod("a").hostname("a-0", "web").build();
        assert_eq!(hostname(&svc, &named).as_deref(), Some("a-0"));
        let elsewhere = pod("a").hostname("a-0", "db").build();
        assert_eq!(hostname(&svc, &elsewhere), None);
    }

    #[test]
    fn selection_needs_every_selector_label_in_the_namespace() {
        let svc = service("web", serde_json::json!([{"port": 80}]));
        assert!(selects(&svc, &pod("a").build()));
        assert!(!selects(&svc, &pod("a").labels(&[("app", "db")]).build()));
        let mut no_selector = svc.clone();
        no_selector.spec.as_mut().unwrap().selector = None;
        assert!(!selects(&no_selector, &pod("a").build()));
    }
}
