//! Node restriction, as Kubernetes' NodeRestriction: a kubelet (user
//! `system:node:NAME` in `system:nodes`) may change only its own Node, its
//! own Lease, and the pods bound to it; it may not create pods (skiff's
//! kubelets make no mirror pods) nor delete pods by collection. As
//! Kubernetes' Node authorizer, it may read only the Secrets and
//! ConfigMaps that a pod bound to it uses, one at a time (no lists or
//! watches of them). RBAC's `system:node` role says which kinds a kubelet
//! may touch; this says which objects.

use serde_json::Value;

use super::Attributes;
use crate::registry::Target;
use crate::status::ApiError;
use crate::user::UserInfo;
use crate::Registry;

/// The group of every kubelet.
pub const NODES: &str = "system:nodes";

/// The node a kubelet's user is, if it is one.
pub fn node_of(user: &UserInfo) -> Option<&str> {
    let name = user.name.strip_prefix("system:node:")?;
    (user.groups.iter().any(|g| g == NODES) && !name.is_empty()).then_some(name)
}

fn refuse(group: &str, resource: &str, name: &str, why: String) -> ApiError {
    let qualified = if group.is_empty() {
        resource.to_string()
    } else {
        format!("{resource}.{group}")
    };
    ApiError::forbidden(
        group,
        resource,
        name,
        format!("{qualified} \"{name}\" is forbidden: {why}"),
    )
}

/// `Some(403)` when a kubelet asks to change what is not its own.
pub async fn restrict(
    registry: &Registry,
    user: &UserInfo,
    attributes: &Attributes,
) -> Option<ApiError> {
    let node = node_of(user)?;
    let r = attributes.resource.as_ref()?;
    let verb = attributes.verb.as_str();
    if r.group.is_empty()
        && matches!(r.resource.as_str(), "secrets" | "configmaps")
        && matches!(verb, "get" | "list" | "watch")
    {
        return restrict_read(registry, node, user, verb, r).await;
    }
    if !matches!(
        verb,
        "create" | "update" | "patch" | "delete" | "deletecollection"
    ) {
        return None;
    }
    match (r.group.as_str(), r.resource.as_str()) {
        ("", "nodes") => (verb != "create" && r.name != node).then(|| {
            refuse(
                "",
                "nodes",
                &r.name,
                format!(
                    "node \"{node}\" is not allowed to modify node \"{}\"",
                    r.name
                ),
            )
        }),
        ("coordination.k8s.io", "leases") if r.namespace == "kube-node-lease" => {
            (verb != "create" && r.name != node).then(|| {
                refuse(
                    "coordination.k8s.io",
                    "leases",
                    &r.name,
                    format!("node \"{node}\" can only access leases with the same name as itself"),
                )
            })
        }
        ("", "pods") => {
            if verb == "deletecollection" || (verb == "create" && r.subresource.is_empty()) {
                return Some(refuse(
                    "",
                    "pods",
                    &r.name,
                    format!("node \"{node}\" can only change the pods bound to it, one at a time"),
                ));
            }
            let pods = Target {
                resource: crate::resources::find("", "v1", "pods").expect("pods are served"),
                namespace: Some(r.namespace.as_str()),
            };
            let bound_to = registry
                .get_at(&pods, &r.name, "0")
                .await
                .ok()
                .and_then(|pod| pod["spec"]["nodeName"].as_str().map(String::from));
            match bound_to {
                // A pod that is gone: the request answers 404 by itself.
                None => None,
                Some(bound) if bound == node => None,
                Some(_) => {
                    let what = match (verb, r.subresource.as_str()) {
                        ("delete", _) => "delete pods",
                        ("create", "eviction") => "evict pods",
                        _ => "update pods",
                    };
                    Some(refuse(
                        "",
                        "pods",
                        &r.name,
                        format!("node \"{node}\" can only {what} with spec.nodeName set to itself"),
                    ))
                }
            }
        }
        _ => None,
    }
}

/// A kubelet's read of a Secret or ConfigMap: allowed when a pod bound to
/// it (read consistently, so a pod bound just now counts) uses the object.
async fn restrict_read(
    registry: &Registry,
    node: &str,
    user: &UserInfo,
    verb: &str,
    r: &super::rbac::ResourceAttributes,
) -> Option<ApiError> {
    let denied = |why: &str| {
        let mut message = format!(
            "User \"{}\" cannot {verb} resource \"{}\" in API group \"\"",
            user.name, r.resource
        );
        if !r.namespace.is_empty() {
            message.push_str(&format!(" in the namespace \"{}\"", r.namespace));
        }
        message.push_str(&format!(": {why}"));
        refuse("", &r.resource, &r.name, message)
    };
    if verb != "get" || r.name.is_empty() || r.namespace.is_empty() {
        return Some(denied(&format!(
            "node \"{node}\" may read {} only one by one, those its pods use",
            r.resource
        )));
    }
    let pods = Target {
        resource: crate::resources::find("", "v1", "pods").expect("pods are served"),
        namespace: Some(r.namespace.as_str()),
    };
    let options = crate::registry::ListOptions {
        fields: skiff_machinery::selectors::FieldSelector::parse(&format!("spec.nodeName={node}"))
            .ok(),
        ..Default::default()
    };
    let used = match registry.list(&pods, &options).await {
        Ok(list) => list["items"]
            .as_array()
            .is_some_and(|pods| pods.iter().any(|pod| uses(pod, &r.resource, &r.name))),
        Err(_) => false,
    };
    (!used).then(|| {
        denied(&format!(
            "no relationship found between node '{node}' and this object"
        ))
    })
}

/// The items of a JSON array (none if it is not one).
fn in_list(list: &Value) -> impl Iterator<Item = &Value> {
    list.as_array().into_iter().flatten()
}

/// Whether `pod` uses the Secret or ConfigMap `name` (`resource` is
/// "secrets" or "configmaps"): in a volume (projected too), in env or
/// envFrom of any container, or (Secrets) as an image pull secret.
pub fn uses(pod: &Value, resource: &str, name: &str) -> bool {
    let spec = &pod["spec"];
    let named = |value: &Value| value.as_str() == Some(name);
    let secrets = resource == "secrets";
    let (volume, volume_key, env_ref, from_ref) = match secrets {
        true => ("secret", "secretName", "secretKeyRef", "secretRef"),
        false => ("configMap", "name", "configMapKeyRef", "configMapRef"),
    };
    let in_volumes = in_list(&spec["volumes"]).any(|v| {
        named(&v[volume][volume_key])
            || in_list(&v["projected"]["sources"]).any(|source| named(&source[volume]["name"]))
    });
    let in_containers = ["containers", "initContainers", "ephemeralContainers"]
        .iter()
        .flat_map(|list| in_list(&spec[*list]))
        .any(|c| {
            in_list(&c["env"]).any(|e| named(&e["valueFrom"][env_ref]["name"]))
                || in_list(&c["envFrom"]).any(|e| named(&e[from_ref]["name"]))
        });
    let pull = secrets && in_list(&spec["imagePullSecrets"]).any(|s| named(&s["name"]));
    in_volumes || in_containers || pull
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pod_uses_the_secrets_and_config_maps_it_names() {
        let pod = serde_json::json!({"spec": {
            "volumes": [
                {"name": "a", "secret": {"secretName": "vol-secret"}},
                {"name": "b", "configMap": {"name": "vol-config"}},
                {"name": "c", "projected": {"sources": [
                    {"secret": {"name": "projected-secret"}},
                    {"configMap": {"name": "projected-config"}}
                ]}}
            ],
            "initContainers": [{"name": "i", "envFrom": [{"secretRef": {"name": "init-secret"}}]}],
            "containers": [{"name": "c", "env": [
                {"name": "A", "valueFrom": {"secretKeyRef": {"name": "env-secret", "key": "k"}}},
                {"name": "B", "valueFrom": {"configMapKeyRef": {"name": "env-config", "key": "k"}}}
            ], "envFrom": [{"configMapRef": {"name": "from-config"}}]}],
            "imagePullSecrets": [{"name": "pull"}]
        }});
        for secret in [
            "vol-secret",
            "projected-secret",
            "init-secret",
            "env-secret",
            "pull",
        ] {
            assert!(uses(&pod, "secrets", secret), "{secret}");
        }
        for config in [
            "vol-config",
            "projected-config",
            "env-config",
            "from-config",
        ] {
            assert!(uses(&pod, "configmaps", config), "{config}");
        }
        assert!(!uses(&pod, "secrets", "vol-config"));
        assert!(!uses(&pod, "configmaps", "env-secret"));
        assert!(!uses(&pod, "secrets", "other"));
    }

    #[test]
    fn only_members_of_system_nodes_are_nodes() {
        let kubelet = UserInfo {
            name: "system:node:n1".into(),
            groups: vec![NODES.into()],
        };
        assert_eq!(node_of(&kubelet), Some("n1"));
        let pretender = UserInfo {
            name: "system:node:n1".into(),
            groups: vec![],
        };
        assert_eq!(node_of(&pretender), None);
        let other = UserInfo {
            name: "alice".into(),
            groups: vec![NODES.into()],
        };
        assert_eq!(node_of(&other), None);
    }
}
