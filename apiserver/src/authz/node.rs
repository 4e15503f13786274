//! Node restriction, as Kubernetes' NodeRestriction: a kubelet (user
//! `system:node:NAME` in `system:nodes`) may change only its own Node, its
//! own Lease, and the pods bound to it; it may not create pods (skiff's
//! kubelets make no mirror pods) nor delete pods by collection. RBAC's
//! `system:node` role says which kinds a kubelet may touch; this says
//! which objects.

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

#[cfg(test)]
mod tests {
    use super::*;

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
