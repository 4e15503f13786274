//! Core (v1) defaults other than pods: Service, Namespace, Secret,
//! Endpoints, volumes and claims, LimitRange.

use serde_json::{json, Map, Value};

use super::{child, each, existing, set};

/// `type: Opaque`, and `stringData` merged into `data` (base64, over any
/// value of the same key): `stringData` is write-only, never stored.
pub fn secret(object: &mut Value) {
    set(object, "type", json!("Opaque"));
    let Some(map) = object.as_object_mut() else {
        return;
    };
    let Some(Value::Object(strings)) = map.remove("stringData") else {
        return;
    };
    use base64::Engine;
    let data = map.entry("data").or_insert_with(|| json!({}));
    if data.is_null() {
        *data = json!({});
    }
    let Some(data) = data.as_object_mut() else {
        return;
    };
    for (key, value) in strings {
        if let Value::String(text) = value {
            let encoded = base64::engine::general_purpose::STANDARD.encode(text);
            data.insert(key, Value::String(encoded));
        }
    }
}

pub fn service(object: &mut Value) {
    let Some(spec) = child(object, "spec") else {
        return;
    };
    set(spec, "type", json!("ClusterIP"));
    set(spec, "sessionAffinity", json!("None"));
    if spec["sessionAffinity"] == "ClientIP" {
        if let Some(client_ip) =
            child(spec, "sessionAffinityConfig").and_then(|c| child(c, "clientIP"))
        {
            set(client_ip, "timeoutSeconds", json!(10800));
        }
    }
    let kind = spec["type"].as_str().unwrap_or("").to_string();
    each(spec, "ports", |port| {
        set(port, "protocol", json!("TCP"));
        let target = &port["targetPort"];
        let missing = target.is_null() || *target == json!(0) || *target == json!("");
        if missing {
            if let Some(number) = port.get("port").cloned() {
                port["targetPort"] = number;
            }
        }
    });
    if kind == "ExternalName" {
        return;
    }
    set(spec, "internalTrafficPolicy", json!("Cluster"));
    if kind == "NodePort" || kind == "LoadBalancer" {
        set(spec, "externalTrafficPolicy", json!("Cluster"));
    }
    if kind == "LoadBalancer" {
        set(spec, "allocateLoadBalancerNodePorts", json!(true));
    }
    set(spec, "ipFamilyPolicy", json!("SingleStack"));
    set(spec, "ipFamilies", json!(["IPv4"]));
}

/// Every namespace carries its name as the label
/// `kubernetes.io/metadata.name`.
pub fn namespace(object: &mut Value) {
    let Some(name) = object
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .map(str::to_string)
    else {
        return;
    };
    if let Some(labels) = child(object, "metadata").and_then(|m| child(m, "labels")) {
        labels["kubernetes.io/metadata.name"] = json!(name);
    }
}

pub fn endpoints(object: &mut Value) {
    each(object, "subsets", |subset| {
        each(subset, "ports", |port| set(port, "protocol", json!("TCP")));
    });
}

/// A claim is `Pending` until the binder says otherwise.
pub fn persistent_volume_claim(object: &mut Value) {
    if let Some(spec) = existing(object, "spec") {
        set(spec, "volumeMode", json!("Filesystem"));
    }
    set(&mut object["status"], "phase", json!("Pending"));
}

/// A volume is `Pending` until the binder makes it `Available`.
pub fn persistent_volume(object: &mut Value) {
    if let Some(spec) = existing(object, "spec") {
        set(spec, "persistentVolumeReclaimPolicy", json!("Retain"));
        set(spec, "volumeMode", json!("Filesystem"));
    }
    set(&mut object["status"], "phase", json!("Pending"));
}

/// A Container item's `default` (limits) comes from `max`, and its
/// `defaultRequest` from `default`, then `min`.
pub fn limit_range(object: &mut Value) {
    let Some(spec) = existing(object, "spec") else {
        return;
    };
    each(spec, "limits", |item| {
        if item["type"] != "Container" {
            return;
        }
        let list = |item: &Value, field: &str| -> Map<String, Value> {
            item.get(field)
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default()
        };
        let mut default = list(item, "default");
        for (name, value) in list(item, "max") {
            default.entry(name).or_insert(value);
        }
        let mut request = list(item, "defaultRequest");
        for (name, value) in default.iter().chain(list(item, "min").iter()) {
            request.entry(name.clone()).or_insert(value.clone());
        }
        if !default.is_empty() {
            item["default"] = Value::Object(default);
        }
        if !request.is_empty() {
            item["defaultRequest"] = Value::Object(request);
        }
    });
}
