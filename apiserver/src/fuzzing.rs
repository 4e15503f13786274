//! The bodies of the fuzz targets over what a client sends the API server
//! (`fuzz/fuzz_targets/`): request bodies in JSON, YAML and protobuf, the
//! three kinds of PATCH, and server-side apply. They run the functions the
//! request path runs, in its order, without a store. Here so that a stable
//! test replays the committed corpora through the same code. Not an API:
//! each function panics when an invariant is broken, and every refusal
//! must be a 4xx `Status`.

use std::sync::LazyLock;

use serde_json::{json, Value};

use skiff_machinery::quota::{self, GroupResource};

use crate::admission::limit_ranger;
use crate::resources::{self, ResourceType};
use crate::status::{ApiError, ApiResult};
use crate::{apply, field_validation, object, patch, protobuf, validation};

/// The fuzz targets of this crate, by the name of their corpus folder.
pub const TARGETS: &[skiff_machinery::fuzzing::Target] = &[
    ("request_body", request_body),
    ("protobuf_body", protobuf_body),
    ("json_patch", json_patch),
    ("merge_patch", merge_patch),
    ("strategic_merge_patch", strategic_merge_patch),
    ("apply_yaml", apply_yaml),
];

/// The time every managedFields entry is stamped with: a fixed one, so
/// that two runs of one input give one result.
const NOW: &str = "2026-01-01T00:00:00Z";

/// The LimitRange of the namespace the bodies are created in.
static LIMIT_RANGE: LazyLock<Value> = LazyLock::new(|| {
    json!({"spec": {"limits": [
        {"type": "Container", "default": {"cpu": "500m", "memory": "256Mi"},
         "defaultRequest": {"cpu": "100m", "memory": "128Mi"},
         "max": {"cpu": "4", "memory": "8Gi"}, "min": {"cpu": "10m"},
         "maxLimitRequestRatio": {"cpu": "10", "memory": "4"}},
        {"type": "Pod", "max": {"cpu": "16"}, "maxLimitRequestRatio": {"memory": "8"}},
        {"type": "PersistentVolumeClaim", "max": {"storage": "100Gi"}, "min": {"storage": "1Gi"}},
    ]}})
});

/// The pod a LimitRange body is checked against.
static POD: LazyLock<Value> = LazyLock::new(|| {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "namespace": "default"},
    "spec": {"containers": [
        {"name": "web", "image": "nginx", "resources": {"requests": {"cpu": "250m"}, "limits": {"cpu": "1"}}},
        {"name": "log", "image": "busybox"},
    ]}})
});

/// Every built-in resource at every served version.
static SERVED: LazyLock<Vec<&'static ResourceType>> =
    LazyLock::new(|| resources::served().collect());

/// The resource an object names by `apiVersion` and `kind`, as the URL
/// of a request that sends it does; else the one `byte` picks.
fn resource_of(object: Option<&Value>, byte: u8) -> &'static ResourceType {
    let named = object.and_then(|object| {
        let api_version = object.get("apiVersion")?.as_str()?;
        resources::find_kind(api_version, object.get("kind")?.as_str()?)
    });
    named.unwrap_or_else(|| SERVED[usize::from(byte) % SERVED.len()])
}

/// The resource the registry stores objects of `served` as.
fn storage_of(served: &'static ResourceType) -> &'static ResourceType {
    served
        .conversion
        .as_ref()
        .and_then(|c| resources::find(served.group, c.storage_version, served.plural))
        .unwrap_or(served)
}

/// A refusal is a client error: never a 5xx, never a panic.
fn refused<T>(what: &str, result: ApiResult<T>) -> Option<T> {
    match result {
        Ok(value) => Some(value),
        Err(err) => {
            assert_client_error(what, &err);
            None
        }
    }
}

fn assert_client_error(what: &str, err: &ApiError) {
    assert!(
        (400..500).contains(&err.code),
        "{what}: answered {} {}: {}",
        err.code,
        err.reason,
        err.message
    );
}

fn manager(resource: &ResourceType) -> (String, &'static str) {
    (resource.api_version(), "fuzz")
}

/// The body of a create (POST) or update (PUT): byte 0 picks the
/// `Content-Type` and `fieldValidation`, the rest is the body. The
/// resource is the one the body names (byte 1 picks one when it names
/// none). Decoded, field-checked, converted, defaulted by LimitRanger,
/// pruned and validated as the create path does, then checked against a
/// LimitRange and counted for ResourceQuota (a LimitRange body is itself
/// checked against a pod); an object that passes is stored and read back,
/// and written as protobuf when its kind has that form.
pub fn request_body(data: &[u8]) {
    let [head, which, body @ ..] = data else {
        return;
    };
    const CONTENT_TYPES: [&str; 6] = [
        "application/json",
        "",
        "application/yaml",
        protobuf::MEDIA_TYPE,
        "application/json; charset=utf-8",
        "text/plain",
    ];
    const MODES: [field_validation::Mode; 3] = [
        field_validation::Mode::Strict,
        field_validation::Mode::Warn,
        field_validation::Mode::Ignore,
    ];
    let content_type = CONTENT_TYPES[usize::from(head & 7) % CONTENT_TYPES.len()];
    let mode = MODES[usize::from(head >> 3) % MODES.len()];
    let parsed = object::parse_request_body(content_type, body);
    let Some(parsed) = refused("decoding the body", parsed) else {
        return;
    };
    let served = resource_of(Some(&parsed), *which);
    let checked = field_validation::check(served, mode, &parsed, Some(body));
    if refused("field validation", checked).is_none() {
        return;
    }
    let incoming = crate::conversion::served::incoming(served, parsed);
    let Some(mut object) = refused("conversion", incoming) else {
        return;
    };
    let resource = storage_of(served);
    if refused("the type", object::check_type(resource, &mut object)).is_none() {
        return;
    }
    let namespaced = object::check_namespace(resource, Some("default"), &mut object);
    if refused("the namespace", namespaced).is_none() {
        return;
    }
    let core = |kind: &str| resource.group.is_empty() && resource.kind == kind;
    if core("Pod") {
        limit_ranger::set_defaults(&LIMIT_RANGE, &mut object);
    }
    validation::prune_unknown_fields(resource, &mut object);
    let (api_version, name) = manager(resource);
    let manager = apply::Manager {
        name,
        api_version: &api_version,
        subresource: None,
    };
    apply::record_update(resource, None, &mut object, &manager, NOW);
    if refused("validation", validation::validate_object(resource, &object)).is_none() {
        return;
    }
    let _ = validation::warnings::on_create(resource, &object);
    let _ = limit_ranger::violations(&LIMIT_RANGE, &object, core("Pod"));
    if core("LimitRange") {
        let mut pod = POD.clone();
        limit_ranger::set_defaults(&object, &mut pod);
        let _ = limit_ranger::violations(&object, &pod, true);
    }
    let _ = quota::usage(GroupResource::new(resource.group, resource.plural), &object);
    let update = validation::update::validate_update(resource, &object, &object);
    refused("an update to itself", update);
    let stored = object::to_stored(&object);
    let read = object::from_stored(resource, &stored, 1)
        .unwrap_or_else(|err| panic!("a stored object does not read back: {}", err.message));
    assert_eq!(object::name(&read), object::name(&object));
    if let Ok(encoded) = protobuf::encode(&read) {
        if let Err(err) = protobuf::decode(&encoded) {
            panic!("an accepted object written as protobuf does not read back: {err}");
        }
    }
}

/// A protobuf body (`k8s\0` + `runtime.Unknown`), as read for a create:
/// one that decodes is written back as protobuf and reads as the same
/// JSON.
pub fn protobuf_body(data: &[u8]) {
    let decoded = match protobuf::decode(data) {
        Ok(decoded) => decoded,
        Err(_) => {
            refused("a protobuf body", object::protobuf_body(data));
            return;
        }
    };
    let encoded = protobuf::encode(&decoded)
        .unwrap_or_else(|err| panic!("a decoded body cannot be encoded again: {err}"));
    let again = protobuf::decode(&encoded)
        .unwrap_or_else(|err| panic!("a body written from a decoded one does not decode: {err}"));
    assert_eq!(again, decoded, "a protobuf body changes on its way back");
}

/// A JSON patch (RFC 6902); see [`patch_body`].
pub fn json_patch(data: &[u8]) {
    patch_body(patch::JSON_PATCH, data);
}

/// A JSON merge patch (RFC 7386), which is idempotent: the patched object
/// patched again is itself. See [`patch_body`].
pub fn merge_patch(data: &[u8]) {
    if let Some((resource, patched, body)) = patch_body(patch::MERGE_PATCH, data) {
        let again = patch::apply_patch(resource, patch::MERGE_PATCH, &patched, body)
            .unwrap_or_else(|err| panic!("a merge patch applies once, not twice: {}", err.message));
        assert_eq!(again, patched, "a merge patch is not idempotent");
    }
}

/// A strategic merge patch; see [`patch_body`].
pub fn strategic_merge_patch(data: &[u8]) {
    patch_body(patch::STRATEGIC_MERGE_PATCH, data);
}

/// The current object and the body of a PATCH: the rest is `current NUL
/// patch` (current: a JSON object, whose kind is the resource) or only
/// the patch, applied to a bare object of the resource byte 0 picks. The patched object is
/// checked as the patch path checks it. Returns the resource, the patched
/// object and the patch when all of that passed.
fn patch_body<'d>(
    content_type: &str,
    data: &'d [u8],
) -> Option<(&'static ResourceType, Value, &'d [u8])> {
    let (which, rest) = data.split_first()?;
    let (current, body) = split_current(rest);
    let resource = storage_of(resource_of(current.as_ref(), *which));
    let current = current.unwrap_or_else(|| bare(resource));
    let patched = patch::apply_patch(resource, content_type, &current, body);
    let patched = refused("applying the patch", patched)?;
    let strategic = content_type == patch::STRATEGIC_MERGE_PATCH;
    let sent: Value = match strategic {
        true => serde_json::from_slice(body).unwrap_or(Value::Null),
        false => Value::Null,
    };
    let checked = validation::check_patched(resource, strategic, &sent, &patched);
    refused("the patched object", checked)?;
    if let Some(err) = validation::validate_object(resource, &patched).err() {
        assert_client_error("validating the patched object", &err);
    }
    Some((resource, patched, body))
}

/// `current NUL body`, or no current object and all of `rest`.
fn split_current(rest: &[u8]) -> (Option<Value>, &[u8]) {
    if let Some(at) = rest.iter().position(|&b| b == 0) {
        if let Ok(current @ Value::Object(_)) = serde_json::from_slice(&rest[..at]) {
            return (Some(current), &rest[at + 1..]);
        }
    }
    (None, rest)
}

/// The smallest object of `resource` that the store could hold.
fn bare(resource: &ResourceType) -> Value {
    let mut object = json!({
        "apiVersion": resource.api_version(),
        "kind": resource.kind,
        "metadata": {"name": "fuzz", "uid": "0d1f2e3c-0000-4000-8000-000000000000"},
    });
    if resource.namespaced {
        object["metadata"]["namespace"] = json!("default");
    }
    object
}

/// A server-side apply (`application/apply-patch+yaml`): byte 1 says
/// whether to force; the rest is `current NUL configuration` or only the
/// configuration, which then creates the object. The resource is the one
/// the configuration names (byte 0 picks one when it names none). The configuration is decoded, field-checked and pruned as the
/// patch path does; applying it once more by the same manager changes
/// nothing.
pub fn apply_yaml(data: &[u8]) {
    let [which, flags, rest @ ..] = data else {
        return;
    };
    let force = flags & 1 == 1;
    let (current, body) = split_current(rest);
    let Some(applied) = refused("decoding the configuration", patch::decode_apply(body)) else {
        return;
    };
    let served = resource_of(Some(&applied), *which);
    let converted = crate::conversion::served::applied(served, applied);
    let Some(mut applied) = refused("converting the configuration", converted) else {
        return;
    };
    let resource = storage_of(served);
    let checked = field_validation::check(
        resource,
        field_validation::Mode::Strict,
        &applied,
        Some(body),
    );
    if refused("field validation", checked).is_none() {
        return;
    }
    validation::prune_unknown_fields(resource, &mut applied);
    let (api_version, name) = manager(resource);
    let manager = apply::Manager {
        name,
        api_version: &api_version,
        subresource: None,
    };
    let merged = apply::apply(resource, current.as_ref(), &applied, &manager, force, NOW);
    let Some(merged) = refused("applying", merged) else {
        return;
    };
    let again = apply::apply(resource, Some(&merged), &applied, &manager, force, NOW);
    let again = again.unwrap_or_else(|err| {
        panic!(
            "an applied configuration applies once, not twice: {}",
            err.message
        )
    });
    assert_eq!(again, merged, "applying twice is not applying once");
    if let Some(err) = validation::validate_object(resource, &merged).err() {
        assert_client_error("validating the applied object", &err);
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn replays_the_fuzz_corpora() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus");
        skiff_machinery::fuzzing::replay_corpora(&root, super::TARGETS);
    }
}
