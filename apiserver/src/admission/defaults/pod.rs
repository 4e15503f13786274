//! Pod and pod template defaults (`SetDefaults_PodSpec`, `_Container`,
//! `_Probe`, `_Volume`…) and the QoS class of a pod.

use serde_json::{json, Value};

use super::{each, set};
use skiff_machinery::quantity::Quantity;

/// A Pod: its spec's defaults, plus requests taken from limits where only
/// limits are given (Kubernetes does this for pods, not templates).
pub fn pod(pod: &mut Value) {
    if !pod.get("spec").is_some_and(Value::is_object) {
        return;
    }
    spec(&mut pod["spec"]);
    for field in ["containers", "initContainers"] {
        each(&mut pod["spec"], field, requests_from_limits);
    }
}

/// A `PodTemplateSpec` (Deployment, Job… `.spec.template`).
pub fn template(template: &mut Value) {
    if let Some(spec) = template.get_mut("spec").filter(|s| s.is_object()) {
        self::spec(spec);
    }
}

fn spec(spec: &mut Value) {
    set(spec, "dnsPolicy", json!("ClusterFirst"));
    set(spec, "restartPolicy", json!("Always"));
    set(spec, "terminationGracePeriodSeconds", json!(30));
    set(spec, "securityContext", json!({}));
    set(spec, "schedulerName", json!("default-scheduler"));
    set(spec, "enableServiceLinks", json!(true));
    // The deprecated `serviceAccount` mirrors `serviceAccountName`.
    let account = spec["serviceAccountName"]
        .as_str()
        .filter(|s| !s.is_empty())
        .or_else(|| spec["serviceAccount"].as_str().filter(|s| !s.is_empty()))
        .map(str::to_string);
    if let Some(account) = account {
        spec["serviceAccountName"] = json!(account);
        spec["serviceAccount"] = json!(account);
    }
    let host_network = spec["hostNetwork"].as_bool() == Some(true);
    for field in ["containers", "initContainers", "ephemeralContainers"] {
        each(spec, field, |c| container(c, host_network));
    }
    each(spec, "volumes", volume);
}

fn container(container: &mut Value, host_network: bool) {
    set(
        container,
        "terminationMessagePath",
        json!("/dev/termination-log"),
    );
    set(container, "terminationMessagePolicy", json!("File"));
    if let Some(image) = container["image"].as_str() {
        let policy = image_pull_policy(image);
        set(container, "imagePullPolicy", json!(policy));
    }
    set(container, "resources", json!({}));
    each(container, "ports", |port| {
        set(port, "protocol", json!("TCP"));
        if host_network {
            if let Some(container_port) = port.get("containerPort").cloned() {
                set(port, "hostPort", container_port);
            }
        }
    });
    each(container, "env", |env| {
        if let Some(field_ref) = env.pointer_mut("/valueFrom/fieldRef") {
            set(field_ref, "apiVersion", json!("v1"));
        }
    });
    for probe in ["livenessProbe", "readinessProbe", "startupProbe"] {
        if let Some(probe) = container.get_mut(probe).filter(|p| p.is_object()) {
            set(probe, "timeoutSeconds", json!(1));
            set(probe, "periodSeconds", json!(10));
            set(probe, "successThreshold", json!(1));
            set(probe, "failureThreshold", json!(3));
            http_get(probe);
        }
    }
    for hook in ["postStart", "preStop"] {
        if let Some(handler) = container.get_mut("lifecycle").and_then(|l| l.get_mut(hook)) {
            http_get(handler);
        }
    }
}

fn http_get(handler: &mut Value) {
    if let Some(get) = handler.get_mut("httpGet").filter(|g| g.is_object()) {
        set(get, "scheme", json!("HTTP"));
    }
}

/// `Always` for an image tagged `latest` or not tagged at all (and not
/// pinned by digest), else `IfNotPresent`.
pub fn image_pull_policy(image: &str) -> &'static str {
    if image.contains('@') {
        return "IfNotPresent";
    }
    let last = image.rsplit('/').next().unwrap_or(image);
    match last.rsplit_once(':') {
        Some((_, "latest")) | None => "Always",
        Some(_) => "IfNotPresent",
    }
}

fn volume(volume: &mut Value) {
    let Some(map) = volume.as_object() else {
        return;
    };
    if !crate::validation::VOLUME_SOURCES
        .iter()
        .any(|s| map.contains_key(*s))
    {
        volume["emptyDir"] = json!({});
    }
    for source in ["secret", "configMap", "downwardAPI", "projected"] {
        if let Some(source) = volume.get_mut(source).filter(|s| s.is_object()) {
            set(source, "defaultMode", json!(420));
        }
    }
    if let Some(host_path) = volume.get_mut("hostPath").filter(|s| s.is_object()) {
        set(host_path, "type", json!(""));
    }
    if let Some(items) = volume.pointer_mut("/downwardAPI/items") {
        if let Some(items) = items.as_array_mut() {
            for item in items {
                if let Some(field_ref) = item.get_mut("fieldRef") {
                    set(field_ref, "apiVersion", json!("v1"));
                }
            }
        }
    }
}

/// A container with limits but no request for the same resource requests
/// its limit.
fn requests_from_limits(container: &mut Value) {
    let Some(limits) = container
        .pointer("/resources/limits")
        .and_then(Value::as_object)
        .cloned()
    else {
        return;
    };
    let resources = &mut container["resources"];
    for (name, limit) in limits {
        set(&mut resources["requests"], &name, limit);
    }
}

/// The pod's QoS class: `Guaranteed` when every container's cpu and memory
/// requests equal their limits, `BestEffort` when nothing is requested or
/// limited, else `Burstable`.
pub fn qos_class(spec: &Value) -> &'static str {
    let mut any = false;
    let mut guaranteed = true;
    let containers = ["containers", "initContainers"]
        .iter()
        .filter_map(|f| spec.get(*f).and_then(Value::as_array))
        .flatten();
    for container in containers {
        let requests = container.pointer("/resources/requests");
        let limits = container.pointer("/resources/limits");
        let nonzero = |list: Option<&Value>, name: &str| {
            list.and_then(|l| l.get(name))
                .and_then(Quantity::from_json)
                .filter(|q| !q.is_zero())
        };
        for name in ["cpu", "memory"] {
            let (request, limit) = (nonzero(requests, name), nonzero(limits, name));
            any |= request.is_some() || limit.is_some();
            if limit.is_none() || request.is_some_and(|r| Some(r) != limit) {
                guaranteed = false;
            }
        }
    }
    match (any, guaranteed) {
        (false, _) => "BestEffort",
        (true, true) => "Guaranteed",
        (true, false) => "Burstable",
    }
}
