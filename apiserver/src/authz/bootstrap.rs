//! The default roles and bindings (policy.yaml), created where missing
//! when the API starts. Roles that aggregate others are written with the
//! rules they aggregate, so `kubectl get clusterrole view -o yaml` shows
//! what `view` grants.

use std::sync::LazyLock;

use serde_json::{json, Value};

use super::{rbac, RBAC_GROUP};
use crate::registry::{Target, Write, SERVER_MANAGER};
use crate::status::ApiResult;
use crate::Registry;

static POLICY: LazyLock<Vec<Value>> = LazyLock::new(|| {
    let mut objects: Vec<Value> =
        serde_yaml::from_str(include_str!("policy.yaml")).expect("policy.yaml is valid YAML");
    for object in &mut objects {
        object["apiVersion"] = json!(format!("{RBAC_GROUP}/v1"));
    }
    let cluster_roles: Vec<Value> = objects
        .iter()
        .filter(|o| o["kind"] == "ClusterRole")
        .cloned()
        .collect();
    let rules = rbac::cluster_role_rules(&cluster_roles);
    for object in &mut objects {
        if object["kind"] == "ClusterRole" && object.get("aggregationRule").is_some() {
            let name = object["metadata"]["name"].as_str().unwrap_or("");
            let aggregated: Vec<Value> = rules
                .get(name)
                .into_iter()
                .flat_map(|r| r.iter())
                .map(rbac::Rule::to_json)
                .collect();
            object["rules"] = json!(aggregated);
        }
        // As Kubernetes marks its bootstrap objects.
        object["metadata"]["annotations"]["rbac.authorization.kubernetes.io/autoupdate"] =
            json!("true");
        object["metadata"]["labels"]["kubernetes.io/bootstrapping"] = json!("rbac-defaults");
    }
    objects
});

/// The default objects.
pub fn objects() -> &'static [Value] {
    &POLICY
}

/// Creates every default object that does not exist yet.
pub async fn ensure(registry: &Registry) -> ApiResult<()> {
    for object in objects() {
        let plural = match object["kind"].as_str() {
            Some("ClusterRole") => "clusterroles",
            _ => "clusterrolebindings",
        };
        let target = Target {
            resource: crate::resources::find(RBAC_GROUP, "v1", plural)
                .expect("the RBAC resources are served"),
            namespace: None,
        };
        match registry
            .create(&target, object.clone(), &Write::new(SERVER_MANAGER, false))
            .await
        {
            Ok(_) => {}
            Err(err) if err.reason == "AlreadyExists" => {}
            Err(err) => return Err(err),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::authz::rbac::{Attributes, Index, ResourceAttributes};
    use crate::user::UserInfo;

    fn can(user: &UserInfo, verb: &str, group: &str, resource: &str, namespace: &str) -> bool {
        let roles: Vec<Value> = objects()
            .iter()
            .filter(|o| o["kind"] == "ClusterRole")
            .cloned()
            .collect();
        let bindings: Vec<Value> = objects()
            .iter()
            .filter(|o| o["kind"] == "ClusterRoleBinding")
            .cloned()
            .collect();
        let view_binding = json!({"metadata": {"name": "v", "namespace": "team"},
            "roleRef": {"kind": "ClusterRole", "name": "view"},
            "subjects": [{"kind": "User", "name": "viewer"}]});
        let edit_binding = json!({"metadata": {"name": "e", "namespace": "team"},
            "roleRef": {"kind": "ClusterRole", "name": "edit"},
            "subjects": [{"kind": "User", "name": "editor"}]});
        let admin_binding = json!({"metadata": {"name": "a", "namespace": "team"},
            "roleRef": {"kind": "ClusterRole", "name": "admin"},
            "subjects": [{"kind": "User", "name": "owner"}]});
        let index = Index::build(
            &[],
            &roles,
            &[view_binding, edit_binding, admin_binding],
            &bindings,
        );
        index.allows(
            user,
            &Attributes {
                verb: verb.into(),
                resource: Some(ResourceAttributes {
                    group: group.into(),
                    resource: resource.into(),
                    namespace: namespace.into(),
                    ..Default::default()
                }),
                path: String::new(),
            },
        )
    }

    fn user(name: &str, groups: &[&str]) -> UserInfo {
        UserInfo {
            name: name.into(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
        }
    }

    #[test]
    fn view_edit_and_admin_nest_as_in_kubernetes() {
        let viewer = user("viewer", &["system:authenticated"]);
        assert!(can(&viewer, "list", "", "pods", "team"));
        assert!(can(&viewer, "watch", "apps", "deployments", "team"));
        assert!(!can(&viewer, "delete", "", "pods", "team"));
        assert!(!can(&viewer, "get", "", "secrets", "team"));
        assert!(!can(&viewer, "list", "", "pods", "other"));
        let editor = user("editor", &["system:authenticated"]);
        assert!(can(&editor, "delete", "", "pods", "team"));
        assert!(can(&editor, "get", "", "secrets", "team"));
        assert!(can(&editor, "list", "", "pods", "team"));
        assert!(!can(&editor, "create", RBAC_GROUP, "rolebindings", "team"));
        let owner = user("owner", &["system:authenticated"]);
        assert!(can(&owner, "create", RBAC_GROUP, "rolebindings", "team"));
        assert!(can(&owner, "update", "apps", "deployments", "team"));
        assert!(can(&owner, "list", "", "pods", "team"));
    }

    #[test]
    fn viewers_may_read_metrics_and_anonymous_users_may_not() {
        let viewer = user("viewer", &["system:authenticated"]);
        assert!(can(&viewer, "list", "metrics.k8s.io", "pods", "team"));
        assert!(can(&viewer, "get", "metrics.k8s.io", "pods", "team"));
        assert!(!can(&viewer, "list", "metrics.k8s.io", "pods", "other"));
        for name in ["editor", "owner"] {
            let user = user(name, &["system:authenticated"]);
            assert!(
                can(&user, "list", "metrics.k8s.io", "pods", "team"),
                "{name}"
            );
        }
        let anonymous = user("system:anonymous", &["system:unauthenticated"]);
        assert!(!can(&anonymous, "list", "metrics.k8s.io", "pods", "team"));
        assert!(!can(&anonymous, "list", "metrics.k8s.io", "nodes", ""));
        let anyone = user("someone", &["system:authenticated"]);
        assert!(!can(&anyone, "list", "metrics.k8s.io", "pods", "default"));
        // The stored view role carries the rule it aggregates.
        let view = objects()
            .iter()
            .find(|o| o["metadata"]["name"] == "view")
            .unwrap();
        assert!(view["rules"].as_array().unwrap().iter().any(|r| {
            r["apiGroups"] == json!(["metrics.k8s.io"])
                && r["resources"] == json!(["pods", "nodes"])
        }));
    }

    /// The monitoring group reads the server's metrics and health, and
    /// the API server's kubelet client user may do anything to a kubelet.
    #[test]
    fn monitoring_and_the_kubelet_client_get_kubernetes_roles() {
        let roles: Vec<Value> = objects()
            .iter()
            .filter(|o| o["kind"] == "ClusterRole")
            .cloned()
            .collect();
        let bindings: Vec<Value> = objects()
            .iter()
            .filter(|o| o["kind"] == "ClusterRoleBinding")
            .cloned()
            .collect();
        let index = Index::build(&[], &roles, &[], &bindings);
        let path = |p: &str| Attributes {
            verb: "get".into(),
            resource: None,
            path: p.into(),
        };
        let monitor = user("prometheus", &["system:monitoring", "system:authenticated"]);
        for p in [
            "/metrics",
            "/metrics/slis",
            "/livez/ping",
            "/readyz",
            "/healthz/etcd",
        ] {
            assert!(index.allows(&monitor, &path(p)), "{p}");
        }
        assert!(!index.allows(&monitor, &path("/debug/pprof")));
        let anyone = user("someone", &["system:authenticated"]);
        assert!(!index.allows(&anyone, &path("/metrics")));
        let node = |verb: &str, subresource: &str| Attributes {
            verb: verb.into(),
            resource: Some(ResourceAttributes {
                resource: "nodes".into(),
                subresource: subresource.into(),
                name: "n1".into(),
                ..Default::default()
            }),
            path: String::new(),
        };
        let client = user("kube-apiserver-kubelet-client", &["system:authenticated"]);
        for (verb, sub) in [
            ("get", "stats"),
            ("create", "proxy"),
            ("get", "log"),
            ("get", "metrics"),
            ("get", "spec"),
            ("proxy", ""),
            ("get", ""),
        ] {
            assert!(
                index.allows(&client, &node(verb, sub)),
                "{verb} nodes/{sub}"
            );
        }
        assert!(!index.allows(&client, &node("delete", "")));
        assert!(!index.allows(&anyone, &node("get", "stats")));
    }

    #[test]
    fn the_components_and_every_user_get_their_system_roles() {
        let anyone = user("someone", &["system:authenticated"]);
        assert!(can(
            &anyone,
            "create",
            "authorization.k8s.io",
            "selfsubjectaccessreviews",
            ""
        ));
        assert!(!can(&anyone, "list", "", "pods", "default"));
        let scheduler = user("system:kube-scheduler", &["system:authenticated"]);
        assert!(!can(&scheduler, "create", "", "pods", "default"));
        assert!(can(&scheduler, "watch", "", "nodes", ""));
        assert!(can(
            &scheduler,
            "create",
            "coordination.k8s.io",
            "leases",
            "kube-system"
        ));
        let node = user("system:node:n1", &["system:nodes", "system:authenticated"]);
        assert!(can(&node, "watch", "", "pods", ""));
        assert!(can(
            &node,
            "create",
            "coordination.k8s.io",
            "leases",
            "kube-node-lease"
        ));
        assert!(!can(&node, "create", "apps", "deployments", "default"));
        let controllers = user("system:kube-controller-manager", &["system:authenticated"]);
        assert!(can(
            &controllers,
            "create",
            "apps",
            "replicasets",
            "default"
        ));
    }
}
