//! The Services' environment variables a container gets, as Kubernetes'
//! kubelet makes them (`pkg/kubelet/envvars`): for each Service with a
//! ClusterIP, `<NAME>_SERVICE_HOST`, `<NAME>_SERVICE_PORT` (and one per
//! named port) and the Docker-link variables (`<NAME>_PORT`,
//! `<NAME>_PORT_<port>_<PROTO>` with `_PROTO`, `_PORT`, `_ADDR`). Which
//! Services: `default/kubernetes` always, and those of the pod's
//! namespace unless the pod turns `enableServiceLinks` off.

use std::collections::BTreeMap;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::runtime::reflector::{self, reflector, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, Client};
use tokio::sync::watch;

/// The namespace and names of the API's own Services, whose variables
/// every pod gets.
const MASTER_NAMESPACE: &str = "default";
const MASTER_SERVICES: &[&str] = &["kubernetes"];

/// The kubelet's cache of every Service (one reflector for the node),
/// which containers' Service variables are made from.
#[derive(Clone)]
pub struct ServiceLister {
    store: Store<Service>,
    /// Whether the first list is in.
    synced: watch::Receiver<bool>,
}

impl ServiceLister {
    /// Starts the reflector; it runs until the returned task is aborted.
    pub fn start(client: Client) -> (ServiceLister, tokio::task::JoinHandle<()>) {
        let (store, writer) = reflector::store();
        let (synced_tx, synced) = watch::channel(false);
        let api: Api<Service> = Api::all(client);
        let events = reflector(writer, watcher(api, watcher::Config::default())).default_backoff();
        let task = tokio::spawn(async move {
            let mut events = std::pin::pin!(events);
            while let Some(event) = events.next().await {
                match event {
                    Ok(watcher::Event::InitDone) => {
                        synced_tx.send_replace(true);
                    }
                    Ok(_) => {}
                    Err(err) => {
                        tracing::warn!(error = %err, "the kubelet's Service watch failed; retrying")
                    }
                }
            }
        });
        (ServiceLister { store, synced }, task)
    }

    /// The variables for a pod in `namespace`, once the Services have been
    /// listed (waiting up to `wait` for that), as the kubelet refuses to
    /// start a container without them.
    pub async fn env_for(
        &self,
        namespace: &str,
        enable_service_links: bool,
        wait: Duration,
    ) -> Result<BTreeMap<String, String>, String> {
        let mut synced = self.synced.clone();
        let listed = tokio::time::timeout(wait, synced.wait_for(|s| *s)).await;
        if !matches!(listed, Ok(Ok(_))) {
            return Err(
                "services have not yet been read at least once, cannot construct envvars".into(),
            );
        }
        let services = self.store.state();
        Ok(service_env_map(
            services.iter().map(|s| s.as_ref()),
            namespace,
            enable_service_links,
        ))
    }
}

/// The variables of `services` (all the cluster's, as the kubelet's
/// lister holds them) for a pod in `namespace`.
pub fn service_env_map<'a>(
    services: impl IntoIterator<Item = &'a Service>,
    namespace: &str,
    enable_service_links: bool,
) -> BTreeMap<String, String> {
    let mut chosen: BTreeMap<String, &Service> = BTreeMap::new();
    for service in services {
        if cluster_ip(service).is_none() {
            continue;
        }
        let name = service.metadata.name.clone().unwrap_or_default();
        let service_namespace = service.metadata.namespace.as_deref().unwrap_or_default();
        if service_namespace == MASTER_NAMESPACE && MASTER_SERVICES.contains(&name.as_str()) {
            chosen.entry(name).or_insert(service);
        } else if service_namespace == namespace && enable_service_links {
            chosen.insert(name, service);
        }
    }
    chosen
        .values()
        .flat_map(|service| from_service(service))
        .collect()
}

/// Whether the pod wants its namespace's Services as variables
/// (`enableServiceLinks`, true unless set false).
pub fn enable_service_links(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.enable_service_links)
        .unwrap_or(true)
}

/// The Service's ClusterIP, unless it has none (`None`, or headless).
fn cluster_ip(service: &Service) -> Option<&str> {
    let ip = service.spec.as_ref()?.cluster_ip.as_deref()?;
    (!ip.is_empty() && ip != "None").then_some(ip)
}

/// The variables of one Service with a ClusterIP.
pub fn from_service(service: &Service) -> Vec<(String, String)> {
    let Some(ip) = cluster_ip(service) else {
        return Vec::new();
    };
    let prefix = variable_name(service.metadata.name.as_deref().unwrap_or_default());
    let ports = service
        .spec
        .as_ref()
        .and_then(|s| s.ports.as_deref())
        .unwrap_or_default();
    let mut vars = vec![(format!("{prefix}_SERVICE_HOST"), ip.to_string())];
    if let Some(first) = ports.first() {
        let port_var = format!("{prefix}_SERVICE_PORT");
        vars.push((port_var.clone(), first.port.to_string()));
        for port in ports {
            if let Some(name) = port.name.as_deref().filter(|n| !n.is_empty()) {
                vars.push((
                    format!("{port_var}_{}", variable_name(name)),
                    port.port.to_string(),
                ));
            }
        }
    }
    vars.extend(link_variables(&prefix, ip, ports));
    vars
}

/// Docker's link variables: `<NAME>_PORT` for the first port, and
/// `<NAME>_PORT_<port>_<PROTO>` with its `_PROTO`, `_PORT` and `_ADDR`.
fn link_variables(
    prefix: &str,
    ip: &str,
    ports: &[k8s_openapi::api::core::v1::ServicePort],
) -> Vec<(String, String)> {
    let host = match ip.parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V6(_)) => format!("[{ip}]"),
        _ => ip.to_string(),
    };
    let mut vars = Vec::new();
    for (i, port) in ports.iter().enumerate() {
        let protocol = port
            .protocol
            .as_deref()
            .filter(|p| !p.is_empty())
            .unwrap_or("TCP");
        let lower = protocol.to_ascii_lowercase();
        let url = format!("{lower}://{host}:{}", port.port);
        if i == 0 {
            vars.push((format!("{prefix}_PORT"), url.clone()));
        }
        let port_prefix = format!(
            "{prefix}_PORT_{}_{}",
            port.port,
            protocol.to_ascii_uppercase()
        );
        vars.push((port_prefix.clone(), url));
        vars.push((format!("{port_prefix}_PROTO"), lower));
        vars.push((format!("{port_prefix}_PORT"), port.port.to_string()));
        vars.push((format!("{port_prefix}_ADDR"), ip.to_string()));
    }
    vars
}

/// `my-service` → `MY_SERVICE`.
fn variable_name(name: &str) -> String {
    name.replace('-', "_").to_ascii_uppercase()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn service(namespace: &str, name: &str, ip: &str, ports: serde_json::Value) -> Service {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"clusterIP": ip, "ports": ports},
        }))
        .unwrap()
    }

    fn kubernetes() -> Service {
        service(
            "default",
            "kubernetes",
            "10.96.0.1",
            serde_json::json!([{"name": "https", "port": 443, "protocol": "TCP", "targetPort": 6443}]),
        )
    }

    #[test]
    fn a_service_gives_its_host_ports_and_link_variables() {
        let web = service(
            "team",
            "my-web",
            "10.96.3.4",
            serde_json::json!([
                {"port": 80},
                {"name": "dns-udp", "port": 53, "protocol": "UDP"},
            ]),
        );
        let vars: BTreeMap<String, String> = from_service(&web).into_iter().collect();
        let expected: BTreeMap<String, String> = [
            ("MY_WEB_SERVICE_HOST", "10.96.3.4"),
            ("MY_WEB_SERVICE_PORT", "80"),
            ("MY_WEB_SERVICE_PORT_DNS_UDP", "53"),
            ("MY_WEB_PORT", "tcp://10.96.3.4:80"),
            ("MY_WEB_PORT_80_TCP", "tcp://10.96.3.4:80"),
            ("MY_WEB_PORT_80_TCP_PROTO", "tcp"),
            ("MY_WEB_PORT_80_TCP_PORT", "80"),
            ("MY_WEB_PORT_80_TCP_ADDR", "10.96.3.4"),
            ("MY_WEB_PORT_53_UDP", "udp://10.96.3.4:53"),
            ("MY_WEB_PORT_53_UDP_PROTO", "udp"),
            ("MY_WEB_PORT_53_UDP_PORT", "53"),
            ("MY_WEB_PORT_53_UDP_ADDR", "10.96.3.4"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        assert_eq!(vars, expected);
        let v6 = service("team", "six", "fd00::1", serde_json::json!([{"port": 80}]));
        let vars: BTreeMap<String, String> = from_service(&v6).into_iter().collect();
        assert_eq!(vars["SIX_PORT"], "tcp://[fd00::1]:80");
        assert_eq!(vars["SIX_PORT_80_TCP_ADDR"], "fd00::1");
    }

    #[test]
    fn the_api_service_always_and_the_namespaces_unless_links_are_off() {
        let services = [
            kubernetes(),
            service(
                "team",
                "web",
                "10.96.0.20",
                serde_json::json!([{"port": 80}]),
            ),
            service(
                "other",
                "db",
                "10.96.0.30",
                serde_json::json!([{"port": 5432}]),
            ),
            service(
                "team",
                "headless",
                "None",
                serde_json::json!([{"port": 80}]),
            ),
            service("team", "external", "", serde_json::json!([])),
        ];
        let linked = service_env_map(&services, "team", true);
        assert_eq!(linked["KUBERNETES_SERVICE_HOST"], "10.96.0.1");
        assert_eq!(linked["KUBERNETES_SERVICE_PORT"], "443");
        assert_eq!(linked["KUBERNETES_SERVICE_PORT_HTTPS"], "443");
        assert_eq!(linked["KUBERNETES_PORT"], "tcp://10.96.0.1:443");
        assert_eq!(linked["KUBERNETES_PORT_443_TCP_ADDR"], "10.96.0.1");
        assert_eq!(linked["WEB_SERVICE_HOST"], "10.96.0.20");
        assert!(
            !linked.keys().any(|k| k.starts_with("DB_")),
            "another namespace's"
        );
        assert!(!linked.keys().any(|k| k.starts_with("HEADLESS_")));
        assert!(!linked.keys().any(|k| k.starts_with("EXTERNAL_")));

        let unlinked = service_env_map(&services, "team", false);
        assert_eq!(unlinked["KUBERNETES_SERVICE_HOST"], "10.96.0.1");
        assert!(!unlinked.contains_key("WEB_SERVICE_HOST"));

        // A `kubernetes` Service of the pod's own namespace wins.
        let own = service(
            "team",
            "kubernetes",
            "10.96.9.9",
            serde_json::json!([{"port": 1}]),
        );
        let with_own = service_env_map([&kubernetes(), &own], "team", true);
        assert_eq!(with_own["KUBERNETES_SERVICE_HOST"], "10.96.9.9");
        let in_default = service_env_map([&kubernetes()], "default", false);
        assert_eq!(in_default["KUBERNETES_SERVICE_HOST"], "10.96.0.1");
    }
}
