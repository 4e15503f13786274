//! Subresources with their own kinds: `scale` (autoscaling/v1 Scale) of
//! deployments, replicasets and statefulsets, `pods/binding` (a scheduler
//! places a pod, once) and `pods/eviction` (policy/v1, refused when a
//! PodDisruptionBudget would be violated). `pods/log` is in `pod_logs`.

use serde_json::{json, Value};

use crate::object::{self, metadata_mut};
use crate::registry::{
    storage_error, DeleteOptions, ListOptions, Propagation, Registry, Target, Write,
};
use crate::resources;
use crate::status::{ApiError, ApiResult, Cause};
use crate::storage::StorageError;
use skiff_machinery::selectors::LabelSelector;

/// The Scale of an object of `resource`: a workload's, or a custom
/// resource's at the paths of its CRD's `subresources.scale`.
fn scale_for(resource: &resources::ResourceType, object: &Value) -> Value {
    let Some(paths) = resource.custom.as_ref().and_then(|c| c.scale.as_ref()) else {
        return scale_of(object);
    };
    let at = |path: &str| crate::crd::at_path(object, path).cloned();
    let mut scale = scale_of(&json!({"metadata": object["metadata"]}));
    scale["spec"]["replicas"] = json!(at(&paths.spec_replicas)
        .and_then(|v| v.as_i64())
        .unwrap_or(0));
    scale["status"]["replicas"] = json!(at(&paths.status_replicas)
        .and_then(|v| v.as_i64())
        .unwrap_or(0));
    match paths.label_selector.as_deref().and_then(at) {
        Some(Value::String(selector)) => scale["status"]["selector"] = json!(selector),
        _ => {
            scale["status"]
                .as_object_mut()
                .map(|s| s.remove("selector"));
        }
    }
    scale
}

/// The Scale of a workload object.
pub fn scale_of(object: &Value) -> Value {
    let selector = object["spec"]["selector"].clone();
    let selector = LabelSelector::from_json(&selector)
        .map(|s| s.to_string())
        .unwrap_or_default();
    let meta = &object["metadata"];
    json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {
            "name": meta["name"],
            "namespace": meta["namespace"],
            "uid": meta["uid"],
            "resourceVersion": meta["resourceVersion"],
            "creationTimestamp": meta["creationTimestamp"],
        },
        "spec": {"replicas": object["spec"]["replicas"].as_i64().unwrap_or(1)},
        "status": {
            "replicas": object["status"]["replicas"].as_i64().unwrap_or(0),
            "selector": selector,
        },
    })
}

fn check_scale_target(target: &Target) -> ApiResult<()> {
    if target.resource.has_subresource("scale") {
        Ok(())
    } else {
        Err(ApiError::not_found(
            target.resource.group,
            &format!("{}/scale", target.resource.plural),
            "",
        ))
    }
}

pub async fn get_scale(registry: &Registry, target: &Target<'_>, name: &str) -> ApiResult<Value> {
    check_scale_target(target)?;
    Ok(scale_for(
        target.resource,
        &registry.get(target, name).await?,
    ))
}

/// PUT of a Scale: sets spec.replicas (its resourceVersion, if any, is a
/// precondition on the object).
pub async fn put_scale(
    registry: &Registry,
    target: &Target<'_>,
    name: &str,
    scale: Value,
    write: &Write<'_>,
) -> ApiResult<Value> {
    update_scale(registry, target, name, write, |_| Ok(scale.clone())).await
}

/// PATCH of a Scale: the patch applies to the Scale, then it is put.
pub async fn patch_scale(
    registry: &Registry,
    target: &Target<'_>,
    name: &str,
    content_type: &str,
    body: &[u8],
    write: &Write<'_>,
) -> ApiResult<Value> {
    // The Scale's own patch strategies (a workload's for strategic merge).
    let scale_resource = match target.resource.custom {
        Some(_) => resources::find("apps", "v1", "deployments").expect("deployments are served"),
        None => target.resource,
    };
    update_scale(registry, target, name, write, |current| {
        crate::patch::apply_patch(scale_resource, content_type, current, body)
    })
    .await
}

/// Writes the replicas of the Scale that `make_scale` makes from the
/// current one, through the registry's one update path: a write that
/// raced with a controller's is made again on the new object, unless the
/// Scale carried a resourceVersion of its own.
async fn update_scale(
    registry: &Registry,
    target: &Target<'_>,
    name: &str,
    write: &Write<'_>,
    make_scale: impl Fn(&Value) -> ApiResult<Value>,
) -> ApiResult<Value> {
    check_scale_target(target)?;
    let write = Write {
        via: Some("scale"),
        ..*write
    };
    let scaled = |current: &Value, _: i64| {
        let scale = make_scale(&scale_for(target.resource, current))?;
        let replicas = replicas_of(target, name, &scale)?;
        let mut object = current.clone();
        if let Some(rv) = object::meta_str(&scale, "resourceVersion").filter(|rv| !rv.is_empty()) {
            metadata_mut(&mut object).insert("resourceVersion".into(), json!(rv));
        }
        match target
            .resource
            .custom
            .as_ref()
            .and_then(|c| c.scale.as_ref())
        {
            Some(paths) => crate::crd::set_path(&mut object, &paths.spec_replicas, json!(replicas)),
            None => object["spec"]["replicas"] = json!(replicas),
        }
        Ok(object)
    };
    let updated = registry
        .guaranteed_update(target, name, None, None, &write, true, scaled)
        .await?;
    Ok(scale_for(target.resource, &updated))
}

/// A Scale's `spec.replicas`: present and not negative.
fn replicas_of(target: &Target<'_>, name: &str, scale: &Value) -> ApiResult<i64> {
    let invalid = |reason, message: String| {
        ApiError::invalid(
            "autoscaling",
            "Scale",
            target.resource.plural,
            name,
            vec![Cause {
                reason,
                message,
                field: "spec.replicas".into(),
            }],
        )
    };
    match scale["spec"]["replicas"].as_i64() {
        None => Err(invalid("FieldValueRequired", "Required value".into())),
        Some(replicas) if replicas < 0 => Err(invalid(
            "FieldValueInvalid",
            format!("Invalid value: {replicas}: must be greater than or equal to 0"),
        )),
        Some(replicas) => Ok(replicas),
    }
}

fn success(code: u16) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": code})
}

/// How often a binding reads the pod again when it changed between the
/// read and the write (as Kubernetes' GuaranteedUpdate retries).
const BIND_ATTEMPTS: usize = 5;

/// POST pods/NAME/binding: places the pod on a node, once. As in
/// Kubernetes, admission sees a CREATE of the `Binding` (NamespaceLifecycle
/// and webhooks on `pods/binding`), and the pod is then changed in the
/// store directly: `spec.nodeName`, the binding's annotations, and the
/// `PodScheduled` condition, with no other pod admission or validation
/// (the stored pod passed them) and no field manager.
pub async fn bind(
    registry: &Registry,
    target: &Target<'_>,
    name: &str,
    binding: Value,
    write: &Write<'_>,
) -> ApiResult<Value> {
    let mut attrs = crate::admission::Attributes {
        operation: crate::admission::Operation::Create,
        resource: target.resource,
        subresource: Some("binding".into()),
        namespace: target.namespace.map(str::to_string),
        name: name.to_string(),
        object: Some(binding),
        old_object: None,
        dry_run: write.dry_run,
        user: crate::user::current(),
    };
    registry
        .admission()
        .admit_subresource(registry, &mut attrs)
        .await?;
    let binding = attrs.object.unwrap_or_default();
    // Only a Node is a place to run a pod (Kubernetes' ValidatePodBinding).
    let kind = binding["target"]["kind"].as_str().unwrap_or("");
    if !kind.is_empty() && kind != "Node" {
        return Err(ApiError::invalid(
            "",
            "Binding",
            "bindings",
            name,
            vec![Cause {
                reason: "FieldValueNotSupported",
                message: format!(
                    "Unsupported value: {}: supported values: \"Node\", \"<empty>\"",
                    skiff_machinery::quote::go_quote(kind)
                ),
                field: "target.kind".into(),
            }],
        ));
    }
    let node = binding["target"]["name"]
        .as_str()
        .filter(|n| !n.is_empty())
        .ok_or_else(|| {
            ApiError::invalid(
                "",
                "Binding",
                "bindings",
                name,
                vec![Cause {
                    reason: "FieldValueRequired",
                    message: "Required value".into(),
                    field: "target.name".into(),
                }],
            )
        })?;
    let key = target.resource.key(target.namespace, name);
    for _ in 0..BIND_ATTEMPTS {
        let (mut pod, revision) = registry.read(target, name).await?;
        check_bindable(&pod, &binding, name)?;
        pod["spec"]["nodeName"] = json!(node);
        if let Some(annotations) = binding["metadata"]["annotations"].as_object() {
            let meta = metadata_mut(&mut pod);
            let into = meta.entry("annotations").or_insert_with(|| json!({}));
            if !into.is_object() {
                *into = json!({});
            }
            if let Some(into) = into.as_object_mut() {
                into.extend(annotations.iter().map(|(k, v)| (k.clone(), v.clone())));
            }
        }
        mark_scheduled(&mut pod);
        let generation = pod["metadata"]["generation"].as_i64().unwrap_or(0) + 1;
        metadata_mut(&mut pod).insert("generation".into(), json!(generation));
        if write.dry_run {
            return Ok(success(201));
        }
        match registry
            .storage()
            .update(&key, object::to_stored(&pod), revision, 0)
            .await
        {
            Ok(_) => return Ok(success(201)),
            Err(StorageError::Conflict) => continue,
            Err(err) => return Err(storage_error(target, name, err)),
        }
    }
    Err(storage_error(target, name, StorageError::Conflict))
}

/// Whether `pod` may take `binding`: it is not on a node yet, not being
/// deleted, not gated, and is the pod the binding names (its UID and
/// resourceVersion, when the binding gives them). A 409 otherwise.
fn check_bindable(pod: &Value, binding: &Value, name: &str) -> ApiResult<()> {
    let conflict = |why: String| ApiError::conflict("", "pods", name, &why);
    let want = |field: &str| {
        binding["metadata"][field]
            .as_str()
            .filter(|v| !v.is_empty())
    };
    for (field, what) in [("uid", "UID"), ("resourceVersion", "ResourceVersion")] {
        if let Some(wanted) = want(field) {
            let actual = object::meta_str(pod, field).unwrap_or_default();
            if wanted != actual {
                return Err(conflict(format!(
                    "Precondition failed: {what} in precondition: {wanted}, {what} in object meta: {actual}"
                )));
            }
        }
    }
    if object::is_deleting(pod) {
        return Err(conflict(format!(
            "pod {name} is being deleted, cannot be assigned to a host"
        )));
    }
    if let Some(assigned) = pod["spec"]["nodeName"].as_str().filter(|n| !n.is_empty()) {
        return Err(conflict(format!(
            "pod {name} is already assigned to node \"{assigned}\""
        )));
    }
    if pod["spec"]["schedulingGates"]
        .as_array()
        .is_some_and(|gates| !gates.is_empty())
    {
        return Err(conflict(format!(
            "pod {name} has non-empty .spec.schedulingGates"
        )));
    }
    Ok(())
}

/// Sets the pod's `PodScheduled` condition True, as a binding does.
fn mark_scheduled(pod: &mut Value) {
    let condition = json!({
        "type": "PodScheduled",
        "status": "True",
        "lastProbeTime": null,
        "lastTransitionTime": object::now(),
    });
    if !pod["status"].is_object() {
        pod["status"] = json!({});
    }
    let conditions = &mut pod["status"]["conditions"];
    if !conditions.is_array() {
        *conditions = json!([]);
    }
    if let Some(list) = conditions.as_array_mut() {
        match list.iter_mut().find(|c| c["type"] == "PodScheduled") {
            Some(existing) if existing["status"] == "True" => {}
            Some(existing) => *existing = condition,
            None => list.push(condition),
        }
    }
}

/// Whether a pod counts as healthy for a disruption budget.
fn healthy(pod: &Value) -> bool {
    pod["status"]["phase"] == "Running"
        && pod["status"]["conditions"].as_array().is_some_and(|c| {
            c.iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        })
        && !object::is_deleting(pod)
}

/// `minAvailable`/`maxUnavailable` as a count of `total` pods.
fn resolve(value: &Value, total: usize, round_up: bool) -> Option<usize> {
    if let Some(n) = value.as_u64() {
        return Some(n as usize);
    }
    let percent: f64 = value.as_str()?.strip_suffix('%')?.parse().ok()?;
    let exact = percent * total as f64 / 100.0;
    Some(if round_up {
        exact.ceil()
    } else {
        exact.floor()
    } as usize)
}

/// kube's `canIgnorePDB`: a pod that is not running, or already going,
/// disrupts nothing.
fn ignores_budgets(pod: &Value) -> bool {
    matches!(
        pod["status"]["phase"].as_str(),
        Some("Succeeded" | "Failed" | "Pending")
    ) || object::is_deleting(pod)
}

/// The 429 an eviction gets when its budget forbids it.
fn budget_violated(budget: &Value, needed: i64, healthy_now: i64) -> ApiError {
    let budget_name = object::name(budget);
    let mut err = ApiError::new(
        429,
        "TooManyRequests",
        "Cannot evict pod as it would violate the pod's disruption budget.",
    );
    err.details = Some(Box::new(crate::status::Details {
        causes: vec![Cause {
            reason: "DisruptionBudget",
            message: format!(
                "The disruption budget {budget_name} needs {needed} healthy pods and has {healthy_now} currently"
            ),
            field: String::new(),
        }],
        // As Kubernetes: no Retry-After, so clients do not block in their
        // own retries; `kubectl drain` retries every 5 s itself.
        retry_after_seconds: None,
        ..Default::default()
    }));
    err
}

/// The disruption controller has written the budget's status for its
/// current spec.
fn observed(budget: &Value) -> bool {
    let generation = budget["metadata"]["generation"].as_i64().unwrap_or(0);
    budget["status"]["observedGeneration"]
        .as_i64()
        .is_some_and(|seen| seen >= generation)
}

/// Without a status from the disruption controller (a cluster running
/// none): the budget counted from the pods here, as the controller would.
fn check_uncounted(budget: &Value, pod: &Value, pods: &[Value]) -> ApiResult<()> {
    let Ok(selector) = LabelSelector::from_json(&budget["spec"]["selector"]) else {
        return Ok(());
    };
    let covered: Vec<&Value> = pods.iter().filter(|p| selector.matches_object(p)).collect();
    let total = covered.len();
    let healthy_now = covered.iter().filter(|p| healthy(p)).count();
    let needed = if let Some(min) = resolve(&budget["spec"]["minAvailable"], total, true) {
        min
    } else if let Some(max) = resolve(&budget["spec"]["maxUnavailable"], total, false) {
        total.saturating_sub(max)
    } else {
        return Ok(());
    };
    let after = if healthy(pod) {
        healthy_now.saturating_sub(1)
    } else {
        healthy_now
    };
    if after < needed {
        return Err(budget_violated(budget, needed as i64, healthy_now as i64));
    }
    Ok(())
}

/// kube's eviction against a counted budget: an unhealthy pod goes when the
/// budget is met (or its policy is AlwaysAllow); a healthy one spends one of
/// `disruptionsAllowed` and is recorded in `disruptedPods`, by
/// compare-and-swap on the budget, or is refused with 429 when none is left.
async fn spend(
    registry: &Registry,
    pdbs: &Target<'_>,
    budget: &Value,
    pod: &Value,
    dry_run: bool,
) -> ApiResult<()> {
    let status = &budget["status"];
    let current = status["currentHealthy"].as_i64().unwrap_or(0);
    let desired = status["desiredHealthy"].as_i64().unwrap_or(0);
    if !healthy(pod) {
        let always = budget["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow";
        return match always || current >= desired {
            true => Ok(()),
            false => Err(budget_violated(budget, desired, current)),
        };
    }
    if status["disruptionsAllowed"].as_i64().unwrap_or(0) <= 0 {
        return Err(budget_violated(budget, desired, current));
    }
    if dry_run {
        return Ok(());
    }
    let mut spent = budget.clone();
    let allowed = status["disruptionsAllowed"].as_i64().unwrap_or(0) - 1;
    spent["status"]["disruptionsAllowed"] = json!(allowed);
    if !spent["status"]["disruptedPods"].is_object() {
        spent["status"]["disruptedPods"] = json!({});
    }
    let now = jiff::Timestamp::now()
        .round(jiff::Unit::Second)
        .unwrap_or(jiff::Timestamp::now());
    spent["status"]["disruptedPods"][object::name(pod)] = json!(now.to_string());
    let write = Write::new("disruption-controller", false);
    registry
        .update(pdbs, object::name(budget), spent, Some("status"), &write)
        .await
        .map_err(|err| match err.code {
            // Another eviction spent it first: the client retries.
            409 => ApiError::new(
                429,
                "TooManyRequests",
                "Cannot evict pod as it would violate the pod's disruption budget.",
            ),
            _ => err,
        })?;
    Ok(())
}

/// POST pods/NAME/eviction: deletes the pod unless the PodDisruptionBudget
/// covering it allows no disruption (429), as kube's eviction does: it
/// reads and spends the budget's `status.disruptionsAllowed`, which the
/// disruption controller keeps; a budget it has not counted yet is counted
/// here from the pods.
pub async fn evict(
    registry: &Registry,
    target: &Target<'_>,
    name: &str,
    eviction: Value,
) -> ApiResult<Value> {
    let pod = registry.get(target, name).await?;
    let namespace = target.namespace.unwrap_or("default");
    let dry_run = eviction["deleteOptions"]["dryRun"]
        .as_array()
        .is_some_and(|d| d.iter().any(|v| v == "All"));
    let pdbs = resources::find("policy", "v1", "poddisruptionbudgets").expect("pdbs are served");
    let pdbs = Target {
        resource: pdbs,
        namespace: Some(namespace),
    };
    if !ignores_budgets(&pod) {
        let budgets = registry.list(&pdbs, &ListOptions::default()).await?;
        let covering: Vec<&Value> = budgets["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|b| {
                LabelSelector::from_json(&b["spec"]["selector"])
                    .is_ok_and(|s| !s.is_empty() && s.matches_object(&pod))
            })
            .collect();
        if covering.len() > 1 {
            return Err(ApiError::internal(
                "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
            ));
        }
        if let Some(budget) = covering.first() {
            if observed(budget) {
                spend(registry, &pdbs, budget, &pod, dry_run).await?;
            } else {
                let pods = registry.list(target, &ListOptions::default()).await?;
                let pods = pods["items"].as_array().cloned().unwrap_or_default();
                check_uncounted(budget, &pod, &pods)?;
            }
        }
    }
    let options = DeleteOptions {
        grace_period_seconds: eviction["deleteOptions"]["gracePeriodSeconds"].as_i64(),
        dry_run,
        propagation: match eviction["deleteOptions"]["propagationPolicy"].as_str() {
            Some(policy) => Some(Propagation::parse(policy)?),
            None => None,
        },
        ..DeleteOptions::default()
    };
    registry.delete(target, name, &options).await?;
    Ok(success(201))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pods() -> Target<'static> {
        Target {
            resource: resources::all()
                .iter()
                .find(|r| r.plural == "pods" && r.group.is_empty())
                .expect("pods are served"),
            namespace: Some("default"),
        }
    }

    fn binding_to(node: &str, metadata: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "Binding", "metadata": metadata,
               "target": {"kind": "Node", "name": node}})
    }

    /// A controller writes the Deployment's status all the while; scale
    /// and status writes without a resourceVersion never answer 409.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn scale_and_status_writes_beside_a_busy_controller_do_not_conflict() {
        let (registry, _dir) = crate::registry::test_registry().await;
        let deployments = Target {
            resource: resources::find("apps", "v1", "deployments").unwrap(),
            namespace: Some("default"),
        };
        let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                     "template": {"metadata": {"labels": {"app": "web"}},
                                  "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}});
        let write = Write::new("test", false);
        registry
            .create(&deployments, deployment, &write)
            .await
            .unwrap();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let controller = {
            let (registry, stop) = (registry.clone(), stop.clone());
            tokio::spawn(async move {
                let target = Target {
                    resource: resources::find("apps", "v1", "deployments").unwrap(),
                    namespace: Some("default"),
                };
                let write = Write::new("controller", false);
                let mut generation = 0;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    generation += 1;
                    let status = json!({"apiVersion": "apps/v1", "kind": "Deployment",
                        "metadata": {"name": "web", "namespace": "default"},
                        "status": {"observedGeneration": generation, "replicas": generation}});
                    registry
                        .update(&target, "web", status, Some("status"), &write)
                        .await
                        .expect("the controller's status write");
                    // A busy controller, not one that starves every other writer.
                    tokio::time::sleep(std::time::Duration::from_millis(2)).await;
                }
                generation
            })
        };
        for replicas in 0..40 {
            let patch = format!(r#"{{"spec":{{"replicas":{replicas}}}}}"#);
            let scale = patch_scale(
                &registry,
                &deployments,
                "web",
                "application/merge-patch+json",
                patch.as_bytes(),
                &write,
            )
            .await
            .unwrap_or_else(|err| panic!("PATCH scale {replicas}: {err:?}"));
            assert_eq!(scale["spec"]["replicas"], replicas);
            let put = json!({"apiVersion": "autoscaling/v1", "kind": "Scale",
                             "metadata": {"name": "web", "namespace": "default"},
                             "spec": {"replicas": replicas + 1}});
            put_scale(&registry, &deployments, "web", put, &write)
                .await
                .unwrap_or_else(|err| panic!("PUT scale {replicas}: {err:?}"));
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let status_writes = controller.await.unwrap();
        assert!(status_writes > 1, "the controller wrote meanwhile");
        let stored = registry.get(&deployments, "web").await.unwrap();
        assert_eq!(stored["spec"]["replicas"], 40);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_binding_places_the_pod_with_its_annotations_once() {
        let (registry, _dir) = crate::registry::test_registry().await;
        let write = Write::new("test", false);
        let pod = json!({"metadata": {"name": "web", "annotations": {"kept": "yes"}},
                         "spec": {"containers": [{"name": "c", "image": "nginx"}]}});
        let created = registry.create(&pods(), pod, &write).await.unwrap();
        let uid = created["metadata"]["uid"].as_str().unwrap().to_string();

        let stale = binding_to("n1", json!({"name": "web", "uid": "another-pod"}));
        let err = bind(&registry, &pods(), "web", stale, &write)
            .await
            .unwrap_err();
        assert_eq!((err.code, err.reason), (409, "Conflict"), "{err:?}");
        assert!(
            err.message.contains(&format!(
                "UID in precondition: another-pod, UID in object meta: {uid}"
            )),
            "{}",
            err.message
        );
        let mut elsewhere = binding_to("n1", json!({"name": "web"}));
        elsewhere["target"]["kind"] = json!("Pod");
        let err = bind(&registry, &pods(), "web", elsewhere, &write)
            .await
            .unwrap_err();
        assert_eq!(err.code, 422, "{err:?}");
        assert_eq!(
            err.to_status()["details"]["causes"][0]["field"],
            "target.kind"
        );
        let dry = binding_to("n1", json!({"name": "web"}));
        bind(&registry, &pods(), "web", dry, &Write::new("test", true))
            .await
            .unwrap();
        assert_eq!(
            registry.get(&pods(), "web").await.unwrap()["spec"]["nodeName"],
            Value::Null,
            "a dry run binds nothing"
        );

        let binding = binding_to(
            "n1",
            json!({"name": "web", "uid": uid, "annotations": {"placed-by": "test"}}),
        );
        let status = bind(&registry, &pods(), "web", binding, &write)
            .await
            .unwrap();
        assert_eq!(status["code"], 201);
        let bound = registry.get(&pods(), "web").await.unwrap();
        assert_eq!(bound["spec"]["nodeName"], "n1");
        assert_eq!(
            bound["metadata"]["annotations"],
            json!({"kept": "yes", "placed-by": "test"})
        );
        assert_eq!(
            bound["metadata"]["managedFields"], created["metadata"]["managedFields"],
            "a binding is no field manager"
        );
        let scheduled = bound["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["type"] == "PodScheduled" && c["status"] == "True")
            .count();
        assert_eq!(scheduled, 1, "{bound}");

        let again = binding_to("n2", json!({"name": "web"}));
        let err = bind(&registry, &pods(), "web", again, &write)
            .await
            .unwrap_err();
        assert_eq!(err.code, 409);
        assert!(
            err.message.contains("already assigned to node \"n1\""),
            "{}",
            err.message
        );
    }

    #[test]
    fn a_gated_or_deleting_pod_takes_no_binding() {
        let binding = binding_to("n1", json!({"name": "web"}));
        let gated = json!({"metadata": {"name": "web"},
                           "spec": {"schedulingGates": [{"name": "wait"}]}});
        let err = check_bindable(&gated, &binding, "web").unwrap_err();
        assert!(
            err.message.contains("non-empty .spec.schedulingGates"),
            "{}",
            err.message
        );
        let deleting = json!({"metadata": {"name": "web", "deletionTimestamp": "2026-01-01T00:00:00Z"},
                              "spec": {}});
        let err = check_bindable(&deleting, &binding, "web").unwrap_err();
        assert!(err.message.contains("is being deleted"), "{}", err.message);
        let stale = binding_to("n1", json!({"name": "web", "resourceVersion": "3"}));
        let pod = json!({"metadata": {"name": "web", "resourceVersion": "4"}, "spec": {}});
        let err = check_bindable(&pod, &stale, "web").unwrap_err();
        assert!(
            err.message
                .contains("ResourceVersion in precondition: 3, ResourceVersion in object meta: 4"),
            "{}",
            err.message
        );
        check_bindable(&pod, &binding, "web").unwrap();
    }

    #[test]
    fn a_scale_reads_replicas_and_the_selector() {
        let deploy = json!({
            "metadata": {"name": "web", "namespace": "default", "uid": "u", "resourceVersion": "7"},
            "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}}},
            "status": {"replicas": 2},
        });
        let scale = scale_of(&deploy);
        assert_eq!(scale["kind"], "Scale");
        assert_eq!(scale["apiVersion"], "autoscaling/v1");
        assert_eq!(
            (
                scale["spec"]["replicas"].as_i64(),
                scale["status"]["replicas"].as_i64()
            ),
            (Some(3), Some(2))
        );
        assert_eq!(scale["status"]["selector"], "app=web");
        assert_eq!(scale["metadata"]["resourceVersion"], "7");
    }

    #[test]
    fn budgets_resolve_counts_and_percentages() {
        assert_eq!(resolve(&json!(2), 5, true), Some(2));
        assert_eq!(resolve(&json!("50%"), 5, true), Some(3));
        assert_eq!(resolve(&json!("50%"), 5, false), Some(2));
        assert_eq!(resolve(&Value::Null, 5, true), None);
        let ready = json!({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}});
        assert!(healthy(&ready));
        assert!(!healthy(&json!({"status": {"phase": "Pending"}})));
    }

    #[test]
    fn pods_not_running_ignore_budgets_and_counted_budgets_are_read() {
        assert!(ignores_budgets(&json!({"status": {"phase": "Pending"}})));
        assert!(ignores_budgets(&json!({"status": {"phase": "Succeeded"}})));
        assert!(!ignores_budgets(&json!({"status": {"phase": "Running"}})));
        let budget = json!({"metadata": {"generation": 2}, "status": {"observedGeneration": 2}});
        assert!(observed(&budget));
        assert!(!observed(
            &json!({"metadata": {"generation": 3}, "status": {"observedGeneration": 2}})
        ));
        assert!(!observed(&json!({"metadata": {"generation": 1}})));
        let err = budget_violated(&json!({"metadata": {"name": "web"}}), 2, 1);
        assert_eq!(err.code, 429);
    }
}
