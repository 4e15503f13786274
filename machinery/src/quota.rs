//! ResourceQuota's usage evaluator, as kube-apiserver's quota admission
//! and kube-controller-manager's quota controller share it: what one
//! object uses under every name a quota may limit (`pods`, `requests.cpu`,
//! `count/deployments.apps`, `services.nodeports`…), which resource each
//! name counts, and a total as `status.used` writes it. Admission charges
//! writes with it and the controller recounts with it, so they agree.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use crate::quantity::Quantity;

/// A resource by API group (`""` for the core group) and plural, as a
/// quota names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GroupResource<'a> {
    pub group: &'a str,
    pub resource: &'a str,
}

impl<'a> GroupResource<'a> {
    pub fn new(group: &'a str, resource: &'a str) -> Self {
        GroupResource { group, resource }
    }
}

/// Resource name → amount.
pub type Usage = BTreeMap<String, Quantity>;

/// What one object uses, by every name a quota may limit it under.
/// `resource` is the object's: its API group and plural.
pub fn usage(resource: GroupResource<'_>, object: &Value) -> Usage {
    let mut used = Usage::new();
    let GroupResource { group, resource } = resource;
    if group.is_empty() && resource == "pods" && is_terminal(object) {
        return used;
    }
    let one = Quantity::count(1);
    let counted = match group {
        "" => format!("count/{resource}"),
        group => format!("count/{resource}.{group}"),
    };
    used.insert(counted, one);
    if !group.is_empty() {
        return used;
    }
    match resource {
        "pods"
        | "services"
        | "configmaps"
        | "secrets"
        | "persistentvolumeclaims"
        | "replicationcontrollers"
        | "resourcequotas" => {
            used.insert(resource.to_string(), one);
        }
        _ => {}
    }
    match resource {
        "pods" => pod_usage(object, &mut used),
        "services" => service_usage(object, &mut used),
        "persistentvolumeclaims" => {
            if let Some(storage) = object
                .pointer("/spec/resources/requests/storage")
                .and_then(Quantity::from_json)
            {
                used.insert("requests.storage".into(), storage);
            }
        }
        _ => {}
    }
    used
}

fn is_terminal(pod: &Value) -> bool {
    matches!(
        pod["status"]["phase"].as_str(),
        Some("Succeeded" | "Failed")
    )
}

/// A pod's compute requests and limits: the larger of the containers' sum
/// and any one init container, per resource.
fn pod_usage(pod: &Value, used: &mut Usage) {
    for list in ["requests", "limits"] {
        let mut sums: BTreeMap<String, Quantity> = BTreeMap::new();
        for container in pod["spec"]["containers"].as_array().into_iter().flatten() {
            for (name, q) in resource_list(&container["resources"][list]) {
                let sum = sums.entry(name).or_default();
                *sum = sum.plus(q);
            }
        }
        for container in pod["spec"]["initContainers"]
            .as_array()
            .into_iter()
            .flatten()
        {
            for (name, q) in resource_list(&container["resources"][list]) {
                let sum = sums.entry(name).or_default();
                if q > *sum {
                    *sum = q;
                }
            }
        }
        for (name, q) in sums {
            if list == "requests" && (name == "cpu" || name == "memory") {
                used.insert(name.clone(), q);
            }
            used.insert(format!("{list}.{name}"), q);
        }
    }
}

fn service_usage(service: &Value, used: &mut Usage) {
    let ports = service["spec"]["ports"].as_array().map_or(0, Vec::len) as i64;
    match service["spec"]["type"].as_str() {
        Some("NodePort") => {
            used.insert("services.nodeports".into(), Quantity::count(ports));
        }
        Some("LoadBalancer") => {
            used.insert("services.loadbalancers".into(), Quantity::count(1));
            if service["spec"]["allocateLoadBalancerNodePorts"] != json!(false) {
                used.insert("services.nodeports".into(), Quantity::count(ports));
            }
        }
        _ => {}
    }
}

fn resource_list(list: &Value) -> Vec<(String, Quantity)> {
    list.as_object()
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| Some((k.clone(), Quantity::from_json(v)?)))
        .collect()
}

/// The resource whose objects a quota name counts: `count/deployments.apps`
/// counts apps' deployments, `requests.cpu` and `memory` pods,
/// `requests.storage` PersistentVolumeClaims, `services.nodeports`
/// services, and a bare plural (`pods`, `secrets`) its own core resource.
/// Whether the API serves that resource is the caller's to find out.
pub fn counted_resource(name: &str) -> GroupResource<'_> {
    if let Some(counted) = name.strip_prefix("count/") {
        let (resource, group) = counted.split_once('.').unwrap_or((counted, ""));
        return GroupResource::new(group, resource);
    }
    let core = |resource| GroupResource::new("", resource);
    match name {
        "cpu" | "memory" => core("pods"),
        "requests.storage" => core("persistentvolumeclaims"),
        n if n.starts_with("requests.") || n.starts_with("limits.") => core("pods"),
        n if n.starts_with("services.") => core("services"),
        n => core(n),
    }
}

/// The resources to list to count every name of a quota's `hard`, each
/// once, in the order of the names.
pub fn counted_resources<'a>(names: impl IntoIterator<Item = &'a str>) -> Vec<GroupResource<'a>> {
    let mut found: Vec<GroupResource<'a>> = Vec::new();
    for resource in names.into_iter().map(counted_resource) {
        if !found.contains(&resource) {
            found.push(resource);
        }
    }
    found
}

/// Adds one object's usage to a total.
pub fn add(total: &mut Usage, used: Usage) {
    for (name, q) in used {
        let sum = total.entry(name).or_default();
        *sum = sum.plus(q);
    }
}

/// How `status.used` shows the total of `name`: zero when nothing uses it,
/// in binary units when the quota's limit (`limit`) is written in them.
pub fn shown_used(total: &Usage, name: &str, limit: &str) -> String {
    let mut used = total.get(name).copied().unwrap_or_default();
    used.binary |= Quantity::parse(limit).is_some_and(|l| l.binary);
    used.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_count_their_resources() {
        let core = |resource| GroupResource::new("", resource);
        assert_eq!(counted_resource("pods"), core("pods"));
        assert_eq!(counted_resource("requests.memory"), core("pods"));
        assert_eq!(counted_resource("limits.cpu"), core("pods"));
        assert_eq!(counted_resource("cpu"), core("pods"));
        assert_eq!(
            counted_resource("requests.storage"),
            core("persistentvolumeclaims")
        );
        assert_eq!(counted_resource("services.nodeports"), core("services"));
        assert_eq!(
            counted_resource("count/deployments.apps"),
            GroupResource::new("apps", "deployments")
        );
        assert_eq!(
            counted_resource("count/widgets.example.com"),
            GroupResource::new("example.com", "widgets")
        );
        assert_eq!(
            counted_resources(["pods", "requests.cpu", "count/pods", "secrets"]),
            [core("pods"), core("secrets")]
        );
    }

    #[test]
    fn a_pod_uses_its_compute_and_a_finished_one_nothing() {
        let pods = GroupResource::new("", "pods");
        let pod = json!({"spec": {
            "containers": [
                {"resources": {"requests": {"cpu": "100m", "memory": "1Gi"}, "limits": {"cpu": "1"}}},
                {"resources": {"requests": {"cpu": "200m"}}}
            ],
            "initContainers": [{"resources": {"requests": {"cpu": "500m"}}}]
        }});
        let used = usage(pods, &pod);
        let shown: BTreeMap<&str, String> = used
            .iter()
            .map(|(k, v)| (k.as_str(), v.to_string()))
            .collect();
        assert_eq!(shown["pods"], "1");
        assert_eq!(shown["count/pods"], "1");
        assert_eq!(
            shown["requests.cpu"], "500m",
            "the init container's is larger"
        );
        assert_eq!(shown["cpu"], "500m");
        assert_eq!(shown["requests.memory"], "1Gi");
        assert_eq!(shown["limits.cpu"], "1");
        let done = json!({"status": {"phase": "Succeeded"}});
        assert!(usage(pods, &done).is_empty());
        assert_eq!(
            usage(GroupResource::new("apps", "deployments"), &json!({}))
                .keys()
                .collect::<Vec<_>>(),
            ["count/deployments.apps"]
        );
        let service = json!({"spec": {"type": "NodePort", "ports": [{"port": 1}, {"port": 2}]}});
        assert_eq!(
            usage(GroupResource::new("", "services"), &service)["services.nodeports"],
            Quantity::count(2)
        );
    }

    #[test]
    fn totals_are_shown_in_the_limits_units() {
        let pods = GroupResource::new("", "pods");
        let pod =
            json!({"spec": {"containers": [{"resources": {"requests": {"memory": "1048576"}}}]}});
        let mut total = Usage::new();
        add(&mut total, usage(pods, &pod));
        add(&mut total, usage(pods, &pod));
        assert_eq!(shown_used(&total, "pods", "10"), "2");
        assert_eq!(shown_used(&total, "requests.memory", "1Gi"), "2Mi");
        assert_eq!(shown_used(&total, "requests.memory", "1G"), "2097152");
        assert_eq!(shown_used(&total, "secrets", "5"), "0");
    }
}
