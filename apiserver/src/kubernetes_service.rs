//! The `kubernetes` Service in `default`, which in-cluster clients reach
//! the API through: at the first address of the service range, port 443
//! (`https`) to the API servers' own port, and its Endpoints and
//! EndpointSlice listing every API server of the cluster, each adding its
//! own address when it starts, as kube-apiserver's endpoint reconciler
//! does. [`kube_dns`] keeps the cluster DNS's Service beside it.

pub mod kube_dns;

use std::net::SocketAddr;

use serde_json::{json, Value};

use crate::registry::{Registry, Target, Write};
use crate::status::ApiResult;

/// Who writes these objects.
const MANAGER: &str = "kube-apiserver";
const NAME: &str = "kubernetes";

fn target(plural: &str, group: &str, version: &str) -> Target<'static> {
    Target {
        resource: crate::resources::find(group, version, plural).expect("served"),
        namespace: Some("default"),
    }
}

/// Creates the Service if it does not exist, and lists `api` (this API
/// server's address) in its Endpoints and EndpointSlice.
pub async fn ensure(registry: &Registry, api: SocketAddr) -> ApiResult<()> {
    let write = Write::new(MANAGER, false);
    let service = json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": NAME, "namespace": "default",
                     "labels": {"component": "apiserver", "provider": "kubernetes"}},
        "spec": {
            "type": "ClusterIP",
            "clusterIP": registry.service_ranges().first_ip().to_string(),
            "sessionAffinity": "None",
            "ports": [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": api.port()}],
        },
    });
    create_unless_there(registry, &target("services", "", "v1"), service, &write).await?;

    let ip = api.ip().to_string();
    let endpoints = target("endpoints", "", "v1");
    let port = json!({"name": "https", "port": api.port(), "protocol": "TCP"});
    let fresh = json!({
        "apiVersion": "v1", "kind": "Endpoints",
        "metadata": {"name": NAME, "namespace": "default",
                     "labels": {"endpointslice.kubernetes.io/skip-mirror": "true"}},
        "subsets": [{"addresses": [{"ip": ip}], "ports": [port]}],
    });
    add_address(registry, &endpoints, fresh, &write, |object| {
        let addresses = &mut object["subsets"][0]["addresses"];
        let listed = addresses
            .as_array()
            .is_some_and(|a| a.iter().any(|a| a["ip"] == ip.as_str()));
        if listed {
            return false;
        }
        match addresses.as_array_mut() {
            Some(list) => list.push(json!({"ip": ip})),
            None => *addresses = json!([{"ip": ip}]),
        }
        true
    })
    .await?;

    let slices = target("endpointslices", "discovery.k8s.io", "v1");
    let fresh = json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": NAME, "namespace": "default",
                     "labels": {"kubernetes.io/service-name": NAME}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": [ip], "conditions": {"ready": true}}],
        "ports": [port],
    });
    add_address(registry, &slices, fresh, &write, |object| {
        let endpoints = &mut object["endpoints"];
        let listed = endpoints
            .as_array()
            .is_some_and(|e| e.iter().any(|e| e["addresses"][0] == ip.as_str()));
        if listed {
            return false;
        }
        let endpoint = json!({"addresses": [ip], "conditions": {"ready": true}});
        match endpoints.as_array_mut() {
            Some(list) => list.push(endpoint),
            None => *endpoints = json!([endpoint]),
        }
        true
    })
    .await
}

async fn create_unless_there(
    registry: &Registry,
    target: &Target<'_>,
    object: Value,
    write: &Write<'_>,
) -> ApiResult<bool> {
    create_named_unless_there(registry, target, NAME, object, write).await
}

/// Creates `object` (named `name`) unless an object of that name is
/// there; whether it created it.
pub(crate) async fn create_named_unless_there(
    registry: &Registry,
    target: &Target<'_>,
    name: &str,
    object: Value,
    write: &Write<'_>,
) -> ApiResult<bool> {
    // Looked up first: the create of a Service that is there would be
    // refused for its IP (held by itself) before its name.
    match registry.get(target, name).await {
        Ok(_) => return Ok(false),
        Err(err) if err.code == 404 => {}
        Err(err) => return Err(err),
    }
    match registry.create(target, object, write).await {
        Ok(_) => Ok(true),
        Err(err) if err.reason == "AlreadyExists" => Ok(false),
        Err(err) => Err(err),
    }
}

/// Creates `fresh`, or adds this server's address to the stored object
/// with `add` (which says whether it changed anything).
async fn add_address(
    registry: &Registry,
    target: &Target<'_>,
    fresh: Value,
    write: &Write<'_>,
    add: impl Fn(&mut Value) -> bool,
) -> ApiResult<()> {
    if create_unless_there(registry, target, fresh, write).await? {
        return Ok(());
    }
    let mut current = registry.get(target, NAME).await?;
    if add(&mut current) {
        registry.update(target, NAME, current, None, write).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_service_lists_every_api_server_once() {
        let (registry, _dir) = crate::registry::test_registry().await;
        registry.ensure_default_namespaces().await.unwrap();
        let one: SocketAddr = "192.0.2.1:6443".parse().unwrap();
        let two: SocketAddr = "192.0.2.2:6443".parse().unwrap();
        ensure(&registry, one).await.unwrap();
        ensure(&registry, two).await.unwrap();
        ensure(&registry, one).await.unwrap();
        let service = registry
            .get(&target("services", "", "v1"), NAME)
            .await
            .unwrap();
        assert_eq!(service["spec"]["clusterIP"], "10.96.0.1");
        assert_eq!(service["spec"]["ports"][0]["port"], 443);
        assert_eq!(service["spec"]["ports"][0]["targetPort"], 6443);
        let endpoints = registry
            .get(&target("endpoints", "", "v1"), NAME)
            .await
            .unwrap();
        assert_eq!(
            endpoints["subsets"][0]["addresses"],
            json!([{"ip": "192.0.2.1"}, {"ip": "192.0.2.2"}])
        );
        let slice = registry
            .get(&target("endpointslices", "discovery.k8s.io", "v1"), NAME)
            .await
            .unwrap();
        let addresses: Vec<&Value> = slice["endpoints"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| &e["addresses"][0])
            .collect();
        assert_eq!(addresses, [&json!("192.0.2.1"), &json!("192.0.2.2")]);
    }
}
