//! Helpers on objects as JSON: metadata access, server-set fields, and the
//! stored form (without resourceVersion, which is the store's revision).

use serde_json::{json, Map, Value};

use crate::resources::ResourceType;
use crate::status::{ApiError, ApiResult};

/// The object's `metadata`, created if absent.
pub fn metadata_mut(object: &mut Value) -> &mut Map<String, Value> {
    if !object.get("metadata").is_some_and(Value::is_object) {
        object["metadata"] = json!({});
    }
    object["metadata"]
        .as_object_mut()
        .expect("metadata was just made an object")
}

pub fn meta_str<'a>(object: &'a Value, field: &str) -> Option<&'a str> {
    object.get("metadata")?.get(field)?.as_str()
}

pub fn name(object: &Value) -> &str {
    meta_str(object, "name").unwrap_or("")
}

pub fn labels(object: &Value) -> Map<String, Value> {
    object
        .get("metadata")
        .and_then(|m| m.get("labels"))
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default()
}

pub fn finalizers(object: &Value) -> Vec<String> {
    object
        .get("metadata")
        .and_then(|m| m.get("finalizers"))
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|f| f.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

pub fn is_deleting(object: &Value) -> bool {
    meta_str(object, "deletionTimestamp").is_some()
}

/// Parses a request body as one JSON object.
pub fn parse_body(body: &[u8]) -> ApiResult<Value> {
    if body.is_empty() {
        return Err(ApiError::bad_request(
            "the request body is empty; an object was expected",
        ));
    }
    if body.first() == Some(&0x6b) && body.starts_with(b"k8s\0") {
        return Err(ApiError::unsupported_media_type(
            "the body is protobuf (application/vnd.kubernetes.protobuf); this server accepts JSON only",
        ));
    }
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("the body is not valid JSON: {e}")))?;
    if !value.is_object() {
        return Err(ApiError::bad_request("the body must be a JSON object"));
    }
    Ok(value)
}

/// Checks (or fills in) `kind` and `apiVersion` against the URL's resource.
pub fn check_type(resource: &ResourceType, object: &mut Value) -> ApiResult<()> {
    let expected_version = resource.api_version();
    match object.get("apiVersion").and_then(Value::as_str) {
        None | Some("") => object["apiVersion"] = json!(expected_version),
        Some(v) if v == expected_version => {}
        Some(v) => {
            return Err(ApiError::bad_request(format!(
                "the API version in the data ({v}) does not match the expected API version ({expected_version})"
            )))
        }
    }
    match object.get("kind").and_then(Value::as_str) {
        None | Some("") => object["kind"] = json!(resource.kind),
        Some(k) if k == resource.kind => {}
        Some(k) => {
            return Err(ApiError::bad_request(format!(
                "the kind in the data ({k}) does not match the expected kind ({})",
                resource.kind
            )))
        }
    }
    Ok(())
}

/// Checks (or fills in) `metadata.namespace` against the URL's.
pub fn check_namespace(
    resource: &ResourceType,
    namespace: Option<&str>,
    object: &mut Value,
) -> ApiResult<()> {
    let meta = metadata_mut(object);
    if !resource.namespaced {
        meta.remove("namespace");
        return Ok(());
    }
    let Some(namespace) = namespace else {
        return Err(ApiError::bad_request(format!(
            "{} is namespaced: create it under /namespaces/{{namespace}}/{}",
            resource.kind, resource.plural
        )));
    };
    match meta.get("namespace").and_then(Value::as_str) {
        None | Some("") => {
            meta.insert("namespace".into(), json!(namespace));
            Ok(())
        }
        Some(ns) if ns == namespace => Ok(()),
        Some(_) => Err(ApiError::bad_request(
            "the namespace of the provided object does not match the namespace sent on the request",
        )),
    }
}

/// The object as stored: without resourceVersion and selfLink.
pub fn to_stored(object: &Value) -> Vec<u8> {
    let mut stored = object.clone();
    let meta = metadata_mut(&mut stored);
    meta.remove("resourceVersion");
    meta.remove("selfLink");
    serde_json::to_vec(&stored).unwrap_or_default()
}

/// A stored object as served: its resourceVersion is `revision`.
pub fn from_stored(resource: &ResourceType, bytes: &[u8], revision: i64) -> ApiResult<Value> {
    let mut object: Value = serde_json::from_slice(bytes).map_err(|e| {
        ApiError::internal(format!("a stored {} is not valid JSON: {e}", resource.kind))
    })?;
    if !object.is_object() {
        return Err(ApiError::internal(format!(
            "a stored {} is not an object",
            resource.kind
        )));
    }
    if object.get("apiVersion").is_none() {
        object["apiVersion"] = json!(resource.api_version());
    }
    if object.get("kind").is_none() {
        object["kind"] = json!(resource.kind);
    }
    metadata_mut(&mut object).insert("resourceVersion".into(), json!(revision.to_string()));
    Ok(object)
}

/// Now, as Kubernetes writes timestamps (RFC 3339, seconds, UTC).
pub fn now() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// `now + seconds`, as [`now`] writes it.
pub fn now_plus(seconds: i64) -> String {
    let at = jiff::Timestamp::now()
        .checked_add(jiff::SignedDuration::from_secs(seconds))
        .unwrap_or_else(|_| jiff::Timestamp::now());
    at.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// A random version-4 UUID.
pub fn new_uid() -> String {
    let b: [u8; 16] = rand::random();
    format!(
        "{:02x}{:02x}{:02x}{:02x}-{:02x}{:02x}-4{:x}{:02x}-{:x}{:x}{:02x}-{:02x}{:02x}{:02x}{:02x}{:02x}{:02x}",
        b[0],
        b[1],
        b[2],
        b[3],
        b[4],
        b[5],
        b[6] & 0x0f,
        b[7],
        8 | (b[8] & 0x3),
        b[8] >> 4,
        b[9],
        b[10],
        b[11],
        b[12],
        b[13],
        b[14],
        b[15]
    )
}

/// The five random characters Kubernetes appends to a generateName.
pub fn name_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    (0..5)
        .map(|_| ALPHABET[rand::random::<usize>() % ALPHABET.len()] as char)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uids_look_like_uuids() {
        let uid = new_uid();
        assert_eq!(uid.len(), 36);
        assert_eq!(&uid[14..15], "4");
        assert_ne!(uid, new_uid());
    }

    #[test]
    fn stored_objects_carry_no_resource_version() {
        let pod = crate::resources::find("", "v1", "pods").unwrap();
        let object = json!({"metadata": {"name": "a", "resourceVersion": "7"}});
        let stored = to_stored(&object);
        assert!(!String::from_utf8_lossy(&stored).contains("resourceVersion"));
        let served = from_stored(pod, &stored, 9).unwrap();
        assert_eq!(served["metadata"]["resourceVersion"], "9");
        assert_eq!(
            (served["kind"].as_str(), served["apiVersion"].as_str()),
            (Some("Pod"), Some("v1"))
        );
    }

    #[test]
    fn a_body_of_another_kind_or_namespace_is_refused() {
        let pod = crate::resources::find("", "v1", "pods").unwrap();
        let mut other = json!({"apiVersion": "apps/v1", "kind": "Deployment"});
        assert_eq!(check_type(pod, &mut other).unwrap_err().code, 400);
        let mut bare = json!({"metadata": {"name": "a"}});
        check_type(pod, &mut bare).unwrap();
        assert_eq!(bare["kind"], "Pod");
        let mut elsewhere = json!({"metadata": {"name": "a", "namespace": "b"}});
        assert_eq!(
            check_namespace(pod, Some("a"), &mut elsewhere)
                .unwrap_err()
                .code,
            400
        );
        assert!(parse_body(b"[1]").is_err());
        assert!(parse_body(b"{").is_err());
    }
}
