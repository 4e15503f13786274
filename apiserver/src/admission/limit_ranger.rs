//! LimitRanger: the namespace's LimitRanges give new pods' containers their
//! default requests and limits, and refuse pods (and claims) outside their
//! min and max. Not quota (ResourceQuota).

use std::sync::Arc;

use serde_json::{json, Map, Value};

use super::{list, Attributes, Operation};
use crate::registry::Registry;
use crate::status::ApiResult;
use skiff_machinery::quantity::Quantity;

const LIMIT_RANGES: (&str, &str, &str) = ("", "v1", "limitranges");

/// The annotation that tells what LimitRanger set on a pod.
pub const ANNOTATION: &str = "kubernetes.io/limit-ranger";

/// Pods on create (containers cannot change later); claims on create and
/// update.
fn applies(attrs: &Attributes) -> bool {
    attrs.on_object()
        && attrs.object.is_some()
        && ((attrs.is_core("Pod") && attrs.operation == Operation::Create)
            || (attrs.is_core("PersistentVolumeClaim") && attrs.operation != Operation::Delete))
}

async fn ranges(registry: &Registry, attrs: &Attributes) -> ApiResult<Vec<Arc<Value>>> {
    match attrs.namespace.as_deref() {
        Some(namespace) => list(registry, LIMIT_RANGES, Some(namespace)).await,
        None => Ok(Vec::new()),
    }
}

/// The `type: Container` items' defaults, for every container that lacks
/// them.
pub async fn admit(registry: &Registry, attrs: &mut Attributes) -> ApiResult<()> {
    if !applies(attrs) || !attrs.is_core("Pod") {
        return Ok(());
    }
    let ranges = ranges(registry, attrs).await?;
    if let Some(pod) = attrs.object.as_mut() {
        for range in &ranges {
            set_defaults(range, pod);
        }
    }
    Ok(())
}

/// Sets one range's container defaults on `pod`, and says so in its
/// annotation, as Kubernetes does.
pub fn set_defaults(range: &Value, pod: &mut Value) {
    let items = range["spec"]["limits"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let mut said = Vec::new();
    for item in items.iter().filter(|i| i["type"] == "Container") {
        let defaults = [
            ("requests", "request", item["defaultRequest"].as_object()),
            ("limits", "limit", item["default"].as_object()),
        ];
        for (field, prefix) in [
            ("containers", "container"),
            ("initContainers", "init container"),
        ] {
            let Some(containers) = pod["spec"].get_mut(field).and_then(Value::as_array_mut) else {
                continue;
            };
            for container in containers.iter_mut().filter(|c| c.is_object()) {
                let name = container["name"].as_str().unwrap_or("").to_string();
                for (list, word, default) in &defaults {
                    let Some(default) = default else { continue };
                    let set = merge(container, list, default);
                    if !set.is_empty() {
                        said.push(format!("{} {word} for {prefix} {name}", set.join(", ")));
                    }
                }
            }
        }
    }
    if !said.is_empty() {
        let meta = crate::object::metadata_mut(pod);
        if !meta.get("annotations").is_some_and(Value::is_object) {
            meta.insert("annotations".into(), json!({}));
        }
        meta["annotations"][ANNOTATION] =
            json!(format!("LimitRanger plugin set: {}", said.join("; ")));
    }
}

/// Adds the `default` entries `container.resources.<list>` lacks; returns
/// their names, sorted.
fn merge(container: &mut Value, list: &str, default: &Map<String, Value>) -> Vec<String> {
    if !container["resources"].is_object() {
        container["resources"] = json!({});
    }
    let resources = &mut container["resources"];
    if !resources[list].is_object() {
        resources[list] = json!({});
    }
    let Some(current) = resources[list].as_object_mut() else {
        return Vec::new();
    };
    let mut set: Vec<String> = Vec::new();
    for (name, value) in default {
        if !current.contains_key(name) {
            current.insert(name.clone(), value.clone());
            set.push(name.clone());
        }
    }
    if current.is_empty() {
        if let Some(map) = resources.as_object_mut() {
            map.remove(list);
        }
    }
    set.sort();
    set
}

/// min, max and maxLimitRequestRatio of every range item that applies.
pub async fn validate(registry: &Registry, attrs: &Attributes) -> ApiResult<()> {
    if !applies(attrs) {
        return Ok(());
    }
    let ranges = ranges(registry, attrs).await?;
    let Some(object) = attrs.object.as_ref() else {
        return Ok(());
    };
    let mut problems = Vec::new();
    for range in &ranges {
        problems.extend(violations(range, object, attrs.is_core("Pod")));
    }
    match problems.len() {
        0 => Ok(()),
        1 => Err(attrs.forbidden(&problems[0])),
        _ => Err(attrs.forbidden(format!("[{}]", problems.join(", ")))),
    }
}

/// What `object` (a pod, or a claim when `pod` is false) breaks of `range`.
pub fn violations(range: &Value, object: &Value, pod: bool) -> Vec<String> {
    let mut problems = Vec::new();
    let items = range["spec"]["limits"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    for item in &items {
        match (item["type"].as_str(), pod) {
            (Some("Container"), true) => {
                for field in ["initContainers", "containers"] {
                    for container in object["spec"][field].as_array().into_iter().flatten() {
                        let requests = quantities(&container["resources"]["requests"]);
                        let limits = quantities(&container["resources"]["limits"]);
                        check(item, "Container", &requests, &limits, &mut problems);
                    }
                }
            }
            (Some("Pod"), true) => {
                let (requests, limits) = pod_totals(object);
                check(item, "Pod", &requests, &limits, &mut problems);
            }
            (Some("PersistentVolumeClaim"), false) => {
                let requests = quantities(&object["spec"]["resources"]["requests"]);
                let limits = quantities(&object["spec"]["resources"]["limits"]);
                check(
                    item,
                    "PersistentVolumeClaim",
                    &requests,
                    &limits,
                    &mut problems,
                );
            }
            _ => {}
        }
    }
    problems
}

/// Whether `limit / request > ratio`, exactly while the products fit
/// (quantities reach i128's range: `1e35` is 10^38 thousandths), else
/// as floating point, as Kubernetes compares them.
fn exceeds_ratio(limit: Quantity, request: Quantity, ratio: Quantity) -> bool {
    match (
        limit.milli.checked_mul(1000),
        ratio.milli.checked_mul(request.milli),
    ) {
        (Some(limit), Some(allowed)) => limit > allowed,
        _ => limit.milli as f64 / request.milli as f64 > ratio.milli as f64 / 1000.0,
    }
}

type Quantities = std::collections::BTreeMap<String, Quantity>;

fn quantities(list: &Value) -> Quantities {
    list.as_object()
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| Some((k.clone(), Quantity::from_json(v)?)))
        .collect()
}

/// The sums over a pod's containers.
fn pod_totals(pod: &Value) -> (Quantities, Quantities) {
    let mut requests = Quantities::new();
    let mut limits = Quantities::new();
    for container in pod["spec"]["containers"].as_array().into_iter().flatten() {
        for (into, list) in [(&mut requests, "requests"), (&mut limits, "limits")] {
            for (name, q) in quantities(&container["resources"][list]) {
                let total = into.entry(name).or_default();
                *total = total.plus(q);
            }
        }
    }
    (requests, limits)
}

fn check(
    item: &Value,
    kind: &str,
    requests: &Quantities,
    limits: &Quantities,
    out: &mut Vec<String>,
) {
    for (name, min) in quantities(&item["min"]) {
        match (requests.get(&name), limits.get(&name)) {
            (None, _) => out.push(format!(
                "minimum {name} usage per {kind} is {min}.  No request is specified"
            )),
            (Some(request), _) if *request < min => out.push(format!(
                "minimum {name} usage per {kind} is {min}, but request is {request}"
            )),
            (_, Some(limit)) if *limit < min => out.push(format!(
                "minimum {name} usage per {kind} is {min}, but limit is {limit}"
            )),
            _ => {}
        }
    }
    for (name, max) in quantities(&item["max"]) {
        match (requests.get(&name), limits.get(&name)) {
            (_, None) => out.push(format!(
                "maximum {name} usage per {kind} is {max}.  No limit is specified"
            )),
            (_, Some(limit)) if *limit > max => out.push(format!(
                "maximum {name} usage per {kind} is {max}, but limit is {limit}"
            )),
            (Some(request), _) if *request > max => out.push(format!(
                "maximum {name} usage per {kind} is {max}, but request is {request}"
            )),
            _ => {}
        }
    }
    for (name, ratio) in quantities(&item["maxLimitRequestRatio"]) {
        let (Some(request), Some(limit)) = (requests.get(&name), limits.get(&name)) else {
            continue;
        };
        if request.milli > 0 && exceeds_ratio(*limit, *request, ratio) {
            let observed = limit.milli as f64 / request.milli as f64;
            out.push(format!(
                "{name} max limit to request ratio per {kind} is {ratio}, but provided ratio is {observed:.6}"
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range(items: Value) -> Value {
        json!({"spec": {"limits": items}})
    }

    /// Found beside the fuzzing of quantities (the same overflow as
    /// `Quantity::plus`): a limit of `1e35` times 1000 overflowed i128, a
    /// panic in debug builds and a wrong answer in release builds.
    #[test]
    fn a_huge_limit_to_request_ratio_is_a_violation_not_an_overflow() {
        let r = range(json!([{"type": "Container", "maxLimitRequestRatio": {"cpu": "10"}}]));
        let pod = |limit: &str| {
            json!({"spec": {"containers": [{"name": "c", "resources": {
                "requests": {"cpu": "1"}, "limits": {"cpu": limit}}}]}})
        };
        let problems = violations(&r, &pod("1e35"), true);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(
            problems[0].starts_with(
                "cpu max limit to request ratio per Container is 10, but provided ratio is"
            ),
            "{problems:?}"
        );
        assert!(violations(&r, &pod("10"), true).is_empty());
        assert_eq!(violations(&r, &pod("10001m"), true).len(), 1);
    }

    #[test]
    fn defaults_fill_what_containers_lack_and_say_so() {
        let r = range(json!([{"type": "Container",
            "default": {"cpu": "500m", "memory": "256Mi"},
            "defaultRequest": {"cpu": "100m", "memory": "128Mi"}}]));
        let mut pod = json!({"metadata": {"name": "p"}, "spec": {"containers": [
            {"name": "a", "resources": {"limits": {"cpu": "1"}}},
            {"name": "b"}
        ]}});
        set_defaults(&r, &mut pod);
        let a = &pod["spec"]["containers"][0]["resources"];
        assert_eq!(a["limits"], json!({"cpu": "1", "memory": "256Mi"}));
        assert_eq!(a["requests"], json!({"cpu": "100m", "memory": "128Mi"}));
        assert_eq!(
            pod["metadata"]["annotations"][ANNOTATION],
            "LimitRanger plugin set: cpu, memory request for container a; memory limit for container a; cpu, memory request for container b; cpu, memory limit for container b"
        );
    }

    #[test]
    fn min_and_max_are_enforced_with_kubernetes_words() {
        let r =
            range(json!([{"type": "Container", "min": {"cpu": "100m"}, "max": {"memory": "1Gi"}}]));
        let pod = |resources: Value| json!({"spec": {"containers": [{"name": "c", "resources": resources}]}});
        assert!(violations(
            &r,
            &pod(json!({"requests": {"cpu": "200m"}, "limits": {"memory": "1Gi"}})),
            true
        )
        .is_empty());
        assert_eq!(
            violations(
                &r,
                &pod(json!({"requests": {"cpu": "50m"}, "limits": {"memory": "2Gi"}})),
                true
            ),
            vec![
                "minimum cpu usage per Container is 100m, but request is 50m".to_string(),
                "maximum memory usage per Container is 1Gi, but limit is 2Gi".to_string(),
            ]
        );
        assert_eq!(
            violations(&r, &pod(json!({})), true),
            vec![
                "minimum cpu usage per Container is 100m.  No request is specified".to_string(),
                "maximum memory usage per Container is 1Gi.  No limit is specified".to_string(),
            ]
        );
        let claim_range =
            range(json!([{"type": "PersistentVolumeClaim", "max": {"storage": "2Gi"}}]));
        let claim = json!({"spec": {"resources": {"requests": {"storage": "5Gi"}, "limits": {"storage": "5Gi"}}}});
        assert_eq!(
            violations(&claim_range, &claim, false),
            vec![
                "maximum storage usage per PersistentVolumeClaim is 2Gi, but limit is 5Gi"
                    .to_string()
            ]
        );
    }
}
