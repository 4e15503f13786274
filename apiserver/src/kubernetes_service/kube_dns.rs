//! The `kube-dns` Service in `kube-system`, which pods of dnsPolicy
//! ClusterFirst resolve through (the kubelet's `--cluster-dns`): at the
//! tenth address of the service range, port 53 over UDP (`dns`) and TCP
//! (`dns-tcp`). Selectorless: each node's cluster DNS answers at its
//! address. Created when missing, never changed once there (an operator's
//! edits stay).

use serde_json::json;

use super::create_named_unless_there;
use crate::registry::{Registry, Target, Write};
use crate::status::ApiResult;

const MANAGER: &str = "kube-apiserver";
pub const NAME: &str = "kube-dns";
pub const NAMESPACE: &str = "kube-system";

/// Creates the Service unless it exists; whether it did.
pub async fn ensure(registry: &Registry) -> ApiResult<bool> {
    let target = Target {
        resource: crate::resources::find("", "v1", "services").expect("services are served"),
        namespace: Some(NAMESPACE),
    };
    let service = json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": NAME, "namespace": NAMESPACE,
                     "labels": {"k8s-app": "kube-dns", "kubernetes.io/name": "KubeDNS",
                                "kubernetes.io/cluster-service": "true"}},
        "spec": {
            "type": "ClusterIP",
            "clusterIP": registry.service_ranges().dns_ip().to_string(),
            "sessionAffinity": "None",
            "ports": [
                {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 53},
                {"name": "dns-tcp", "port": 53, "protocol": "TCP", "targetPort": 53},
            ],
        },
    });
    let write = Write::new(MANAGER, false);
    create_named_unless_there(registry, &target, NAME, service, &write).await
}

/// Whether an error creating the Service may go away by itself (the store
/// not taking writes yet) rather than need an operator (its address held
/// by another Service).
pub fn is_transient(code: u16) -> bool {
    code >= 500 || code == 404 || code == 409 || code == 429
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target() -> Target<'static> {
        Target {
            resource: crate::resources::find("", "v1", "services").unwrap(),
            namespace: Some(NAMESPACE),
        }
    }

    #[tokio::test]
    async fn the_kube_dns_service_is_at_the_tenth_address() {
        let (registry, _dir) = crate::registry::test_registry().await;
        registry.ensure_default_namespaces().await.unwrap();
        assert!(ensure(&registry).await.unwrap());
        let service = registry.get(&target(), NAME).await.unwrap();
        assert_eq!(service["spec"]["clusterIP"], "10.96.0.10");
        assert_eq!(service["metadata"]["labels"]["k8s-app"], "kube-dns");
        assert_eq!(
            service["metadata"]["labels"]["kubernetes.io/name"],
            "KubeDNS"
        );
        let ports: Vec<(String, String, i64)> = service["spec"]["ports"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| {
                (
                    p["name"].as_str().unwrap().to_string(),
                    p["protocol"].as_str().unwrap().to_string(),
                    p["port"].as_i64().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            ports,
            [
                ("dns".to_string(), "UDP".to_string(), 53),
                ("dns-tcp".to_string(), "TCP".to_string(), 53)
            ]
        );
        assert!(service["spec"].get("selector").is_none());

        // There already, and changed by an operator: left as it is.
        let mut edited = service.clone();
        edited["metadata"]["labels"]["team"] = json!("dns");
        registry
            .update(&target(), NAME, edited, None, &Write::new("kubectl", false))
            .await
            .unwrap();
        assert!(!ensure(&registry).await.unwrap());
        let service = registry.get(&target(), NAME).await.unwrap();
        assert_eq!(service["metadata"]["labels"]["team"], "dns");
    }

    #[tokio::test]
    async fn an_address_held_by_another_service_is_not_retried() {
        let (registry, _dir) = crate::registry::test_registry().await;
        registry.ensure_default_namespaces().await.unwrap();
        let squatter = json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "squatter", "namespace": "kube-system"},
            "spec": {"clusterIP": "10.96.0.10", "ports": [{"port": 80}]},
        });
        registry
            .create(&target(), squatter, &Write::new("kubectl", false))
            .await
            .unwrap();
        let err = ensure(&registry).await.unwrap_err();
        assert!(!is_transient(err.code), "{err:?}");
        assert!(err.message.contains("10.96.0.10"), "{}", err.message);
    }
}
