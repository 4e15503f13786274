//! Checks of an update against the object it replaces: the fields
//! Kubernetes makes immutable (a ConfigMap set `immutable`, a binding's
//! `roleRef`, a pod's spec but for the few fields that may change, a
//! workload's selector…), worded as its `ValidateXUpdate` functions word
//! them. Run on every PUT and on the result of every patch and apply,
//! after [`super::validate_object`]; not for creates.

use serde_json::Value;

use super::{field, forbidden, go_quote, invalid, items, text, Cause};
use crate::resources::ResourceType;
use crate::status::ApiError;

const IMMUTABLE: &str = "field is immutable";
const IMMUTABLE_WHEN_SET: &str = "field is immutable when `immutable` is set";

/// How Kubernetes prints a value in an Invalid cause: strings quoted,
/// numbers and booleans bare, structures as JSON.
fn render(value: &Value) -> String {
    match value {
        Value::String(s) => go_quote(s),
        Value::Null => "null".into(),
        other => other.to_string(),
    }
}

/// `path` of `new` must equal that of `old`.
fn immutable(causes: &mut Vec<Cause>, old: &Value, new: &Value, path: &str) {
    let (old, new) = (at(old, path), at(new, path));
    if old != new {
        causes.push(invalid(path, &render(new), IMMUTABLE));
    }
}

/// The value at a dotted path, null where any part is missing.
fn at<'a>(value: &'a Value, path: &str) -> &'a Value {
    path.split('.').fold(value, |v, name| field(v, name))
}

/// Checks `new` as an update of `old` (both as they would be stored):
/// a 422 Invalid listing every immutable field that changed.
pub fn validate_update(resource: &ResourceType, old: &Value, new: &Value) -> Result<(), ApiError> {
    let mut causes = Vec::new();
    match (resource.group, resource.kind) {
        ("", "ConfigMap") => immutable_data(&mut causes, old, new, &["data", "binaryData"]),
        ("", "Secret") => {
            immutable_data(&mut causes, old, new, &["data"]);
            immutable(&mut causes, old, new, "type");
        }
        ("", "Pod") => pod(&mut causes, old, new),
        ("", "Service") => service(&mut causes, old, new),
        ("", "PersistentVolumeClaim") => persistent_volume_claim(&mut causes, old, new),
        ("", "PersistentVolume") => persistent_volume(&mut causes, old, new),
        ("", "Node") => node(&mut causes, old, new),
        ("rbac.authorization.k8s.io", "RoleBinding" | "ClusterRoleBinding")
            if field(old, "roleRef") != field(new, "roleRef") =>
        {
            causes.push(invalid(
                "roleRef",
                &render(field(new, "roleRef")),
                "cannot change roleRef",
            ));
        }
        ("apps", "Deployment" | "ReplicaSet" | "DaemonSet") => {
            immutable(&mut causes, old, new, "spec.selector")
        }
        ("apps", "StatefulSet") => stateful_set(&mut causes, old, new),
        ("batch", "Job") => job(&mut causes, old, new),
        ("storage.k8s.io", "StorageClass") => {
            for name in ["parameters", "provisioner", "reclaimPolicy"] {
                if field(old, name) != field(new, name) {
                    causes.push(forbidden(
                        name,
                        &format!("updates to {name} are forbidden."),
                    ));
                }
            }
            immutable(&mut causes, old, new, "volumeBindingMode");
        }
        ("discovery.k8s.io", "EndpointSlice") => immutable(&mut causes, old, new, "addressType"),
        ("apps", "ControllerRevision") => immutable(&mut causes, old, new, "data"),
        ("scheduling.k8s.io", "PriorityClass") => {
            if field(old, "value") != field(new, "value") {
                causes.push(forbidden("value", "may not be changed in an update."));
            }
            immutable(&mut causes, old, new, "preemptionPolicy");
        }
        ("apiextensions.k8s.io", "CustomResourceDefinition") if resource.custom.is_none() => {
            immutable(&mut causes, old, new, "spec.group");
            immutable(&mut causes, old, new, "spec.scope");
        }
        _ => {}
    }
    if causes.is_empty() {
        return Ok(());
    }
    Err(ApiError::invalid(
        resource.group,
        resource.kind,
        resource.plural,
        text(field(new, "metadata"), "name"),
        causes,
    ))
}

/// A ConfigMap or Secret created or set `immutable: true` keeps its data
/// and the flag itself for ever.
fn immutable_data(causes: &mut Vec<Cause>, old: &Value, new: &Value, data: &[&str]) {
    if field(old, "immutable") != &Value::Bool(true) {
        return;
    }
    if field(new, "immutable") != &Value::Bool(true) {
        causes.push(forbidden("immutable", IMMUTABLE_WHEN_SET));
    }
    for name in data {
        if field(old, name) != field(new, name) {
            causes.push(forbidden(*name, IMMUTABLE_WHEN_SET));
        }
    }
}

const POD_UPDATE_FORBIDDEN: &str = "pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)";

/// A pod's spec may change only where Kubernetes lets it: images,
/// a shorter active deadline, added tolerations, scheduling gates taken
/// away, and a negative grace period made 1.
fn pod(causes: &mut Vec<Cause>, old: &Value, new: &Value) {
    let (old_spec, new_spec) = (field(old, "spec"), field(new, "spec"));
    let mut allowed = old_spec.clone();
    let Some(spec) = allowed.as_object_mut() else {
        return;
    };
    for list in ["containers", "initContainers"] {
        let (old_list, new_list) = (items(old_spec, list), items(new_spec, list));
        if old_list.len() != new_list.len() {
            continue;
        }
        if let Some(Value::Array(containers)) = spec.get_mut(list) {
            for (container, updated) in containers.iter_mut().zip(new_list) {
                if let (Some(c), Some(image)) = (container.as_object_mut(), updated.get("image")) {
                    c.insert("image".into(), image.clone());
                }
            }
        }
    }
    let old_deadline = field(old_spec, "activeDeadlineSeconds").as_i64();
    match field(new_spec, "activeDeadlineSeconds").as_i64() {
        Some(new) if new > 0 && old_deadline.is_none_or(|old| new <= old) => {
            spec.insert("activeDeadlineSeconds".into(), new.into());
        }
        Some(_) | None => {}
    }
    let old_tolerations = items(old_spec, "tolerations");
    let new_tolerations = items(new_spec, "tolerations");
    if old_tolerations.iter().all(|t| new_tolerations.contains(t)) {
        if let Some(t) = new_spec.get("tolerations") {
            spec.insert("tolerations".into(), t.clone());
        }
    }
    let old_gates = items(old_spec, "schedulingGates");
    let new_gates = items(new_spec, "schedulingGates");
    if new_gates.iter().all(|g| old_gates.contains(g)) {
        match new_spec.get("schedulingGates") {
            Some(g) => spec.insert("schedulingGates".into(), g.clone()),
            None => spec.remove("schedulingGates"),
        };
    }
    let old_grace = field(old_spec, "terminationGracePeriodSeconds").as_i64();
    let new_grace = field(new_spec, "terminationGracePeriodSeconds").as_i64();
    if old_grace.is_some_and(|g| g < 0) && new_grace == Some(1) {
        spec.insert("terminationGracePeriodSeconds".into(), 1.into());
    }
    // Ephemeral containers change through their own subresource.
    match new_spec.get("ephemeralContainers") {
        Some(e) => spec.insert("ephemeralContainers".into(), e.clone()),
        None => spec.remove("ephemeralContainers"),
    };
    if &allowed != new_spec {
        causes.push(forbidden("spec", POD_UPDATE_FORBIDDEN));
    }
    if let (Some(old), Some(new)) = (
        old_deadline,
        field(new_spec, "activeDeadlineSeconds").as_i64(),
    ) {
        if new > old {
            causes.push(invalid(
                "spec.activeDeadlineSeconds",
                &new.to_string(),
                "must be less than or equal to previous value",
            ));
        }
    }
}

/// A ClusterIP, once set, stays (unless the Service becomes an
/// ExternalName, which has none).
fn service(causes: &mut Vec<Cause>, old: &Value, new: &Value) {
    let old_ip = text(field(old, "spec"), "clusterIP");
    let new_ip = text(field(new, "spec"), "clusterIP");
    let external = text(field(new, "spec"), "type") == "ExternalName";
    if !old_ip.is_empty() && !new_ip.is_empty() && old_ip != new_ip && !external {
        causes.push(invalid("spec.clusterIP", &go_quote(new_ip), IMMUTABLE));
    }
}

const PVC_SPEC_FORBIDDEN: &str =
    "spec is immutable after creation except resources.requests and volumeAttributesClassName for bound claims";

/// A claim's spec is fixed once created, but for its requests (expansion),
/// its volume attributes class, and the volume it is bound to, which the
/// binder sets once.
fn persistent_volume_claim(causes: &mut Vec<Cause>, old: &Value, new: &Value) {
    let (old_spec, new_spec) = (field(old, "spec"), field(new, "spec"));
    let mut allowed = old_spec.clone();
    let Some(spec) = allowed.as_object_mut() else {
        return;
    };
    let mut copy = |name: &str| match new_spec.get(name) {
        Some(v) => spec.insert(name.into(), v.clone()),
        None => spec.remove(name),
    };
    copy("volumeAttributesClassName");
    if text(old_spec, "volumeName").is_empty() {
        copy("volumeName");
    }
    if field(old_spec, "storageClassName").is_null() {
        copy("storageClassName");
    }
    let requests = field(field(new_spec, "resources"), "requests").clone();
    if let Some(resources) = spec
        .entry("resources")
        .or_insert_with(|| serde_json::json!({}))
        .as_object_mut()
    {
        match requests {
            Value::Null => resources.remove("requests"),
            requests => resources.insert("requests".into(), requests),
        };
    }
    let normalise = |spec: &Value| {
        let mut spec = spec.clone();
        if let Some(map) = spec.as_object_mut() {
            if map
                .get("resources")
                .is_some_and(|r| r == &serde_json::json!({}))
            {
                map.remove("resources");
            }
        }
        spec
    };
    if normalise(&allowed) != normalise(new_spec) {
        causes.push(forbidden("spec", PVC_SPEC_FORBIDDEN));
    }
}

/// The volume sources a PersistentVolume may name.
const VOLUME_SOURCE_FIELDS: &[&str] = &[
    "awsElasticBlockStore",
    "azureDisk",
    "azureFile",
    "cephfs",
    "cinder",
    "csi",
    "fc",
    "flexVolume",
    "flocker",
    "gcePersistentDisk",
    "glusterfs",
    "hostPath",
    "iscsi",
    "local",
    "nfs",
    "photonPersistentDisk",
    "portworxVolume",
    "quobyte",
    "rbd",
    "scaleIO",
    "storageos",
    "vsphereVolume",
];

fn persistent_volume(causes: &mut Vec<Cause>, old: &Value, new: &Value) {
    let (old_spec, new_spec) = (field(old, "spec"), field(new, "spec"));
    if VOLUME_SOURCE_FIELDS
        .iter()
        .any(|name| field(old_spec, name) != field(new_spec, name))
    {
        causes.push(forbidden(
            "spec.persistentvolumesource",
            "spec.persistentvolumesource is immutable after creation",
        ));
    }
    immutable(causes, old, new, "spec.volumeMode");
}

/// A node's pod CIDR and provider ID are set once.
fn node(causes: &mut Vec<Cause>, old: &Value, new: &Value) {
    for (name, what) in [("podCIDR", "podCIDR"), ("providerID", "providerID")] {
        let before = text(field(old, "spec"), name);
        let after = text(field(new, "spec"), name);
        if !before.is_empty() && before != after {
            causes.push(forbidden(
                format!("spec.{name}"),
                &format!("node updates may not change {what} except from \"\" to valid"),
            ));
        }
    }
}

const STATEFUL_SET_MUTABLE: &[&str] = &[
    "replicas",
    "ordinals",
    "template",
    "updateStrategy",
    "revisionHistoryLimit",
    "persistentVolumeClaimRetentionPolicy",
    "minReadySeconds",
];

fn stateful_set(causes: &mut Vec<Cause>, old: &Value, new: &Value) {
    let without_mutable = |value: &Value| {
        let mut spec = field(value, "spec").clone();
        if let Some(map) = spec.as_object_mut() {
            for name in STATEFUL_SET_MUTABLE {
                map.remove(*name);
            }
        }
        spec
    };
    if without_mutable(old) != without_mutable(new) {
        causes.push(forbidden(
            "spec",
            "updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', 'updateStrategy', 'revisionHistoryLimit', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden",
        ));
    }
}

/// The template fields a Job that is suspended and has never started may
/// change (so that a queueing controller can place it).
const JOB_SCHEDULING_DIRECTIVES: &[&str] =
    &["nodeSelector", "tolerations", "affinity", "schedulingGates"];

fn job(causes: &mut Vec<Cause>, old: &Value, new: &Value) {
    immutable(causes, old, new, "spec.selector");
    immutable(causes, old, new, "spec.completionMode");
    let old_spec = field(old, "spec");
    let new_spec = field(new, "spec");
    let never_started = field(old_spec, "suspend") == &Value::Bool(true)
        && field(field(old, "status"), "startTime").is_null();
    let mut template = field(old_spec, "template").clone();
    if never_started {
        let new_template = field(new_spec, "template");
        if let Some(map) = template.as_object_mut() {
            match new_template.get("metadata") {
                Some(m) => map.insert("metadata".into(), m.clone()),
                None => map.remove("metadata"),
            };
        }
        if let Some(spec) = template.get_mut("spec").and_then(Value::as_object_mut) {
            for name in JOB_SCHEDULING_DIRECTIVES {
                match field(new_template, "spec").get(*name) {
                    Some(v) => spec.insert((*name).into(), v.clone()),
                    None => spec.remove(*name),
                };
            }
        }
    }
    if &template != field(new_spec, "template") {
        causes.push(invalid(
            "spec.template",
            &render(field(new_spec, "template")),
            IMMUTABLE,
        ));
    }
    // Completions change only with parallelism, for an Indexed Job
    // (elastic Jobs).
    let completions_changed = field(old_spec, "completions") != field(new_spec, "completions");
    let elastic = text(new_spec, "completionMode") == "Indexed"
        && field(new_spec, "completions") == field(new_spec, "parallelism");
    if completions_changed && !elastic {
        causes.push(invalid(
            "spec.completions",
            &render(field(new_spec, "completions")),
            IMMUTABLE,
        ));
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn resource(group: &str, plural: &str) -> &'static ResourceType {
        crate::resources::all()
            .iter()
            .find(|r| r.group == group && r.plural == plural && r.custom.is_none())
            .expect("served")
    }

    /// The field paths of the causes, or nothing when the update is valid.
    fn refused(group: &str, plural: &str, old: Value, new: Value) -> Vec<String> {
        match validate_update(resource(group, plural), &old, &new) {
            Ok(()) => Vec::new(),
            Err(err) => {
                assert_eq!(err.code, 422);
                err.details
                    .unwrap()
                    .causes
                    .iter()
                    .map(|c| format!("{}: {}", c.field, c.message))
                    .collect()
            }
        }
    }

    #[test]
    fn an_immutable_config_map_keeps_its_data_and_the_flag() {
        let old = json!({"metadata": {"name": "c"}, "immutable": true, "data": {"a": "1"}});
        let mut changed = old.clone();
        changed["data"]["a"] = json!("2");
        assert_eq!(
            refused("", "configmaps", old.clone(), changed),
            ["data: Forbidden: field is immutable when `immutable` is set"]
        );
        let mut unset = old.clone();
        unset["immutable"] = json!(false);
        assert_eq!(
            refused("", "configmaps", old.clone(), unset),
            ["immutable: Forbidden: field is immutable when `immutable` is set"]
        );
        let mut labelled = old.clone();
        labelled["metadata"]["labels"] = json!({"x": "y"});
        assert!(refused("", "configmaps", old, labelled).is_empty());
        let mutable = json!({"metadata": {"name": "c"}, "data": {"a": "1"}});
        let mut changed = mutable.clone();
        changed["data"]["a"] = json!("2");
        changed["immutable"] = json!(true);
        assert!(refused("", "configmaps", mutable, changed).is_empty());
    }

    #[test]
    fn a_secret_keeps_its_type_and_immutable_data() {
        let old = json!({"metadata": {"name": "s"}, "type": "Opaque", "immutable": true,
                         "data": {"a": "MQ=="}});
        let mut new = old.clone();
        new["type"] = json!("kubernetes.io/tls");
        new["data"] = json!({});
        let causes = refused("", "secrets", old, new);
        assert!(
            causes
                .iter()
                .any(|c| c
                    .starts_with("type: Invalid value: \"kubernetes.io/tls\": field is immutable")),
            "{causes:?}"
        );
        assert!(
            causes.iter().any(|c| c.starts_with("data: Forbidden")),
            "{causes:?}"
        );
    }

    #[test]
    fn a_binding_cannot_change_its_role() {
        let old = json!({"metadata": {"name": "b"},
                         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
                         "subjects": [{"kind": "User", "name": "u"}]});
        let mut new = old.clone();
        new["roleRef"]["name"] = json!("cluster-admin");
        for plural in ["rolebindings", "clusterrolebindings"] {
            let causes = refused(
                "rbac.authorization.k8s.io",
                plural,
                old.clone(),
                new.clone(),
            );
            assert_eq!(causes.len(), 1);
            assert!(
                causes[0].starts_with("roleRef: Invalid value: "),
                "{causes:?}"
            );
            assert!(causes[0].ends_with(": cannot change roleRef"), "{causes:?}");
        }
        let mut subjects = old.clone();
        subjects["subjects"] = json!([]);
        assert!(refused("rbac.authorization.k8s.io", "rolebindings", old, subjects).is_empty());
    }

    fn pod_with(spec: Value) -> Value {
        json!({"metadata": {"name": "p"}, "spec": spec})
    }

    #[test]
    fn a_pod_changes_only_what_kubernetes_lets_change() {
        let old = pod_with(json!({
            "restartPolicy": "Always",
            "containers": [{"name": "c", "image": "nginx:1", "command": ["a"]}],
            "tolerations": [{"key": "k", "operator": "Exists"}],
            "schedulingGates": [{"name": "g"}],
            "activeDeadlineSeconds": 100,
        }));
        let change = |f: &dyn Fn(&mut Value)| {
            let mut new = old.clone();
            f(&mut new["spec"]);
            refused("", "pods", old.clone(), new)
        };
        assert!(change(&|s| s["containers"][0]["image"] = json!("nginx:2")).is_empty());
        assert!(change(&|s| s["activeDeadlineSeconds"] = json!(50)).is_empty());
        assert!(change(&|s| s["tolerations"]
            .as_array_mut()
            .unwrap()
            .push(json!({"key": "other", "operator": "Exists"})))
        .is_empty());
        assert!(change(&|s| {
            s.as_object_mut().unwrap().remove("schedulingGates");
        })
        .is_empty());
        let forbidden = |causes: Vec<String>| {
            assert_eq!(causes.len(), 1, "{causes:?}");
            assert!(
                causes[0]
                    .starts_with("spec: Forbidden: pod updates may not change fields other than"),
                "{causes:?}"
            );
        };
        forbidden(change(&|s| s["restartPolicy"] = json!("Never")));
        forbidden(change(&|s| s["containers"][0]["command"] = json!(["b"])));
        forbidden(change(&|s| s["tolerations"] = json!([])));
        forbidden(change(&|s| {
            s["schedulingGates"] = json!([{"name": "g"}, {"name": "h"}])
        }));
        forbidden(change(&|s| s["nodeName"] = json!("n1")));
        forbidden(change(&|s| {
            s["containers"]
                .as_array_mut()
                .unwrap()
                .push(json!({"name": "d", "image": "x"}))
        }));
        let later = change(&|s| s["activeDeadlineSeconds"] = json!(200));
        assert!(
            later
                .iter()
                .any(|c| c.starts_with("spec.activeDeadlineSeconds")),
            "{later:?}"
        );
    }

    #[test]
    fn a_pods_status_and_metadata_change_freely() {
        let old = pod_with(json!({"containers": [{"name": "c", "image": "i"}]}));
        let mut new = old.clone();
        new["status"] = json!({"phase": "Running"});
        new["metadata"]["labels"] = json!({"a": "b"});
        assert!(refused("", "pods", old, new).is_empty());
    }

    #[test]
    fn workload_selectors_are_immutable() {
        let old = json!({"metadata": {"name": "d"},
                         "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "a"}}}});
        let mut scaled = old.clone();
        scaled["spec"]["replicas"] = json!(3);
        let mut moved = old.clone();
        moved["spec"]["selector"]["matchLabels"]["app"] = json!("b");
        for plural in ["deployments", "replicasets", "daemonsets"] {
            assert!(refused("apps", plural, old.clone(), scaled.clone()).is_empty());
            let causes = refused("apps", plural, old.clone(), moved.clone());
            assert_eq!(causes.len(), 1, "{causes:?}");
            assert!(
                causes[0].starts_with("spec.selector: Invalid value: "),
                "{causes:?}"
            );
            assert!(causes[0].ends_with("field is immutable"), "{causes:?}");
        }
    }

    #[test]
    fn a_stateful_set_changes_only_its_mutable_fields() {
        let old = json!({"metadata": {"name": "s"},
                         "spec": {"replicas": 1, "serviceName": "db", "template": {"metadata": {}},
                                  "selector": {"matchLabels": {"app": "db"}}}});
        let mut scaled = old.clone();
        scaled["spec"]["replicas"] = json!(3);
        scaled["spec"]["template"]["metadata"]["labels"] = json!({"app": "db"});
        assert!(refused("apps", "statefulsets", old.clone(), scaled).is_empty());
        let mut renamed = old.clone();
        renamed["spec"]["serviceName"] = json!("other");
        let causes = refused("apps", "statefulsets", old, renamed);
        assert!(
            causes[0].starts_with("spec: Forbidden: updates to statefulset spec"),
            "{causes:?}"
        );
    }

    #[test]
    fn a_jobs_template_selector_and_completions_are_immutable() {
        let old = json!({"metadata": {"name": "j"},
                         "spec": {"completions": 2, "parallelism": 1,
                                  "selector": {"matchLabels": {"x": "1"}},
                                  "template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}},
                         "status": {"startTime": "2026-01-01T00:00:00Z"}});
        let mut parallel = old.clone();
        parallel["spec"]["parallelism"] = json!(2);
        assert!(refused("batch", "jobs", old.clone(), parallel).is_empty());
        let mut new = old.clone();
        new["spec"]["template"]["spec"]["containers"][0]["image"] = json!("j");
        new["spec"]["completions"] = json!(3);
        let fields: Vec<String> = refused("batch", "jobs", old.clone(), new)
            .iter()
            .map(|c| c.split(':').next().unwrap().to_string())
            .collect();
        assert_eq!(fields, ["spec.template", "spec.completions"]);
        // A suspended Job that never ran may be placed elsewhere.
        let mut suspended = old.clone();
        suspended["spec"]["suspend"] = json!(true);
        suspended.as_object_mut().unwrap().remove("status");
        let mut placed = suspended.clone();
        placed["spec"]["template"]["spec"]["nodeSelector"] = json!({"zone": "a"});
        assert!(refused("batch", "jobs", suspended, placed).is_empty());
    }

    #[test]
    fn a_claims_spec_is_fixed_but_for_requests_and_its_volume() {
        let old = json!({"metadata": {"name": "c"},
                         "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "standard",
                                  "resources": {"requests": {"storage": "1Gi"}}}});
        let mut bound = old.clone();
        bound["spec"]["volumeName"] = json!("pv-1");
        bound["spec"]["resources"]["requests"]["storage"] = json!("2Gi");
        assert!(refused("", "persistentvolumeclaims", old.clone(), bound.clone()).is_empty());
        let mut rebound = bound.clone();
        rebound["spec"]["volumeName"] = json!("pv-2");
        assert_eq!(
            refused("", "persistentvolumeclaims", bound, rebound).len(),
            1
        );
        let mut modes = old.clone();
        modes["spec"]["accessModes"] = json!(["ReadWriteMany"]);
        let causes = refused("", "persistentvolumeclaims", old, modes);
        assert!(
            causes[0].starts_with("spec: Forbidden: spec is immutable after creation"),
            "{causes:?}"
        );
    }

    #[test]
    fn a_services_cluster_ip_stays_once_set() {
        let old =
            json!({"metadata": {"name": "s"}, "spec": {"clusterIP": "10.96.0.10", "ports": []}});
        let mut new = old.clone();
        new["spec"]["clusterIP"] = json!("10.96.0.11");
        let causes = refused("", "services", old.clone(), new);
        assert_eq!(
            causes,
            ["spec.clusterIP: Invalid value: \"10.96.0.11\": field is immutable"]
        );
        let mut external = old.clone();
        external["spec"] =
            json!({"type": "ExternalName", "externalName": "example.com", "clusterIP": "x"});
        assert!(refused("", "services", old, external).is_empty());
    }

    #[test]
    fn storage_classes_priority_classes_and_nodes_keep_their_fixed_fields() {
        let class =
            json!({"metadata": {"name": "s"}, "provisioner": "a", "parameters": {"x": "1"}});
        let mut new = class.clone();
        new["provisioner"] = json!("b");
        assert_eq!(
            refused("storage.k8s.io", "storageclasses", class, new),
            ["provisioner: Forbidden: updates to provisioner are forbidden."]
        );
        let class = json!({"metadata": {"name": "s"}, "provisioner": "a",
            "reclaimPolicy": "Delete", "volumeBindingMode": "Immediate"});
        let mut new = class.clone();
        new["reclaimPolicy"] = json!("Retain");
        new["volumeBindingMode"] = json!("WaitForFirstConsumer");
        assert_eq!(
            refused("storage.k8s.io", "storageclasses", class, new),
            [
                "reclaimPolicy: Forbidden: updates to reclaimPolicy are forbidden.",
                "volumeBindingMode: Invalid value: \"WaitForFirstConsumer\": field is immutable",
            ]
        );
        let slice = json!({"metadata": {"name": "e"}, "addressType": "IPv4", "endpoints": []});
        let mut new = slice.clone();
        new["addressType"] = json!("IPv6");
        assert_eq!(
            refused("discovery.k8s.io", "endpointslices", slice.clone(), new),
            ["addressType: Invalid value: \"IPv6\": field is immutable"]
        );
        let mut endpoints = slice.clone();
        endpoints["endpoints"] = json!([{"addresses": ["10.0.0.1"]}]);
        assert!(refused("discovery.k8s.io", "endpointslices", slice, endpoints).is_empty());
        let revision = json!({"metadata": {"name": "r"}, "revision": 1, "data": {"a": 1}});
        let mut new = revision.clone();
        new["data"] = json!({"a": 2});
        assert_eq!(
            refused("apps", "controllerrevisions", revision, new),
            ["data: Invalid value: {\"a\":2}: field is immutable"]
        );
        let priority = json!({"metadata": {"name": "p"}, "value": 10});
        let mut new = priority.clone();
        new["value"] = json!(11);
        assert_eq!(
            refused("scheduling.k8s.io", "priorityclasses", priority, new),
            ["value: Forbidden: may not be changed in an update."]
        );
        let node = json!({"metadata": {"name": "n"}, "spec": {}});
        let mut cidr = node.clone();
        cidr["spec"]["podCIDR"] = json!("10.244.1.0/24");
        assert!(refused("", "nodes", node, cidr.clone()).is_empty());
        let mut moved = cidr.clone();
        moved["spec"]["podCIDR"] = json!("10.244.2.0/24");
        assert_eq!(refused("", "nodes", cidr, moved).len(), 1);
    }
}
