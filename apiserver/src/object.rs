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

/// Drops every member whose value is JSON `null` from a built-in object
/// about to be written, at any depth, as Kubernetes does by decoding the
/// body into its typed structs (a null field is absent, and absent fields
/// are omitted): `"spec": null`, `"labels": null`, `"selfLink": null` are
/// not stored or answered. A custom resource keeps its own fields (its
/// schema may make them nullable); its metadata is typed, and dropped
/// likewise. Null elements of arrays stay (a typed decode makes them
/// zero values, which validation then judges).
pub fn drop_nulls(resource: &ResourceType, object: &mut Value) {
    if resource.custom.is_some() {
        if let Some(meta) = object.get_mut("metadata") {
            drop_null_members(meta);
        }
        if let Some(map) = object.as_object_mut() {
            map.retain(|key, value| key != "metadata" || !value.is_null());
        }
        return;
    }
    drop_null_members(object);
}

fn drop_null_members(value: &mut Value) {
    match value {
        Value::Object(map) => {
            map.retain(|_, member| !member.is_null());
            map.values_mut().for_each(drop_null_members);
        }
        Value::Array(items) => items.iter_mut().for_each(drop_null_members),
        _ => {}
    }
}

/// Parses a request body as one JSON object.
pub fn parse_body(body: &[u8]) -> ApiResult<Value> {
    if body.is_empty() {
        return Err(ApiError::bad_request(
            "the request body is empty; an object was expected",
        ));
    }
    if body.starts_with(crate::protobuf::MAGIC) {
        return protobuf_body(body);
    }
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("the body is not valid JSON: {e}")))?;
    check_shape(value)
}

/// The JSON of a protobuf body: a 400 naming what could not be read, or
/// a 415 for a kind that has no protobuf form (a custom resource).
pub fn protobuf_body(body: &[u8]) -> ApiResult<Value> {
    match crate::protobuf::decode(body) {
        Ok(value) => Ok(value),
        Err(err @ crate::protobuf::DecodeError::Malformed(_)) => {
            Err(ApiError::bad_request(err.to_string()))
        }
        Err(err) => Err(ApiError::unsupported_media_type(err.to_string())),
    }
}

/// The media types an object body may have, as Kubernetes lists them in
/// its 415.
const BODY_MEDIA_TYPES: &str =
    "application/json, application/yaml, application/vnd.kubernetes.protobuf";

/// Parses the body of a POST or PUT by its `Content-Type`: JSON (also
/// when there is none, as the Python client sends it) or YAML; protobuf
/// is recognised by its prefix. Any other type is a 415, not read as JSON.
pub fn parse_request_body(content_type: &str, body: &[u8]) -> ApiResult<Value> {
    let media_type = content_type
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    match media_type.as_str() {
        "" | "application/json" => parse_body(body),
        "application/vnd.kubernetes.protobuf" => {
            if body.is_empty() {
                return parse_body(body);
            }
            protobuf_body(body)
        }
        "application/yaml" => {
            if body.is_empty() {
                return parse_body(body);
            }
            let value: Value = serde_yaml::from_slice(body)
                .map_err(|e| ApiError::bad_request(format!("the body is not valid YAML: {e}")))?;
            check_shape(value)
        }
        other => Err(ApiError::unsupported_media_type(format!(
            "the body of the request was in an unknown format ({other}) - accepted media types include: {BODY_MEDIA_TYPES}"
        ))),
    }
}

/// One object, whose type fields are strings and whose metadata is an
/// object, as every Kubernetes object decodes.
fn check_shape(value: Value) -> ApiResult<Value> {
    let Some(map) = value.as_object() else {
        return Err(ApiError::bad_request("the body must be a JSON object"));
    };
    for field in ["apiVersion", "kind"] {
        if map
            .get(field)
            .is_some_and(|v| !v.is_string() && !v.is_null())
        {
            return Err(ApiError::bad_request(format!(
                "the body's {field} must be a string"
            )));
        }
    }
    if map
        .get("metadata")
        .is_some_and(|m| !m.is_object() && !m.is_null())
    {
        return Err(ApiError::bad_request(
            "the body's metadata must be an object (ObjectMeta)",
        ));
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
    match object.get("metadata") {
        // Written as it is, leaving the two fields out: no copy of the
        // object (a pod's copy was a few % of the API server's CPU).
        Some(Value::Object(meta)) => serde_json::to_vec(&Stored { object, meta }),
        // No metadata object: one is made, as the store always has one.
        _ => {
            let mut stored = object.clone();
            metadata_mut(&mut stored);
            serde_json::to_vec(&stored)
        }
    }
    .unwrap_or_default()
}

/// Not stored: the revision is the store's, selfLink is no longer served.
const NOT_STORED: [&str; 2] = ["resourceVersion", "selfLink"];

/// An object serialized as stored; `meta` is its metadata object.
struct Stored<'a> {
    object: &'a Value,
    meta: &'a Map<String, Value>,
}

impl serde::Serialize for Stored<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let Some(fields) = self.object.as_object() else {
            return self.object.serialize(serializer);
        };
        let mut map = serializer.serialize_map(Some(fields.len()))?;
        for (key, value) in fields {
            if key == "metadata" {
                map.serialize_entry(key, &StoredMeta(self.meta))?;
            } else {
                map.serialize_entry(key, value)?;
            }
        }
        map.end()
    }
}

struct StoredMeta<'a>(&'a Map<String, Value>);

impl serde::Serialize for StoredMeta<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let kept = self
            .0
            .iter()
            .filter(|(key, _)| !NOT_STORED.contains(&key.as_str()));
        let mut map = serializer.serialize_map(None)?;
        for (key, value) in kept {
            map.serialize_entry(key, value)?;
        }
        map.end()
    }
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

/// Where a stored object's resourceVersion goes when it is served as
/// JSON bytes without parsing it: as the first field of its metadata.
/// Found once per object (the watch cache keeps it), used for every list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Splice {
    /// Just after the `{` of the top-level metadata.
    at: u32,
    /// Whether the metadata is `{}` (no comma after the field).
    empty: bool,
}

impl Splice {
    /// `None` when `stored` is not what [`to_stored`] writes.
    pub fn find(stored: &[u8]) -> Option<Splice> {
        let layout = scan_top_level(stored)?;
        let at = layout.metadata_body?;
        if !(layout.api_version && layout.kind) || layout.metadata_has_resource_version {
            return None;
        }
        let empty = stored[at..]
            .iter()
            .find(|b| !b.is_ascii_whitespace())
            .is_some_and(|b| *b == b'}');
        Some(Splice {
            at: u32::try_from(at).ok()?,
            empty,
        })
    }

    /// Appends `stored`, which this splice was found in, as served at
    /// `revision`.
    pub fn write(self, out: &mut Vec<u8>, stored: &[u8], revision: i64) {
        let at = (self.at as usize).min(stored.len());
        out.extend_from_slice(&stored[..at]);
        out.extend_from_slice(b"\"resourceVersion\":\"");
        // Writing to a Vec cannot fail.
        let _ = std::io::Write::write_fmt(out, format_args!("{revision}"));
        out.extend_from_slice(if self.empty { b"\"" } else { b"\"," });
        out.extend_from_slice(&stored[at..]);
    }
}

/// What [`Splice::find`] needs to know of an object's JSON.
#[derive(Default)]
struct Layout {
    api_version: bool,
    kind: bool,
    /// Just after the `{` of the top-level metadata object.
    metadata_body: Option<usize>,
    metadata_has_resource_version: bool,
}

/// One pass over JSON bytes, reading only the keys of the top level and of
/// its metadata. `None` when the bytes are not a JSON object.
fn scan_top_level(bytes: &[u8]) -> Option<Layout> {
    let mut layout = Layout::default();
    let mut depth = 0usize;
    let mut in_metadata = false;
    let mut i = 0;
    let skip_ws = |mut i: usize| {
        while i < bytes.len() && bytes[i].is_ascii_whitespace() {
            i += 1;
        }
        i
    };
    if bytes.get(skip_ws(0)) != Some(&b'{') {
        return None;
    }
    while i < bytes.len() {
        match bytes[i] {
            b'"' => {
                let start = i + 1;
                let mut j = start;
                while j < bytes.len() && bytes[j] != b'"' {
                    j += if bytes[j] == b'\\' { 2 } else { 1 };
                }
                if j >= bytes.len() {
                    return None;
                }
                let text = &bytes[start..j];
                let after = skip_ws(j + 1);
                let is_key = bytes.get(after) == Some(&b':');
                if is_key && depth == 1 {
                    match text {
                        b"apiVersion" => layout.api_version = true,
                        b"kind" => layout.kind = true,
                        b"metadata" => {
                            let value = skip_ws(after + 1);
                            if bytes.get(value) == Some(&b'{') {
                                layout.metadata_body = Some(value + 1);
                                in_metadata = true;
                                depth += 1;
                                i = value + 1;
                                continue;
                            }
                        }
                        _ => {}
                    }
                } else if is_key && depth == 2 && in_metadata && text == b"resourceVersion" {
                    layout.metadata_has_resource_version = true;
                }
                i = j + 1;
            }
            b'{' | b'[' => {
                depth += 1;
                i += 1;
            }
            b'}' | b']' => {
                depth = depth.checked_sub(1)?;
                if depth == 1 {
                    in_metadata = false;
                }
                i += 1;
            }
            _ => i += 1,
        }
    }
    (depth == 0).then_some(layout)
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

    #[test]
    fn nulls_are_dropped_at_any_depth_but_array_elements_stay() {
        let pods = crate::resources::find("", "v1", "pods").unwrap();
        let mut pod = json!({"metadata": {"name": "p", "labels": null},
                             "spec": {"containers": [{"name": "c", "args": null,
                                                      "env": [{"name": "E", "value": null}]}],
                                      "nodeSelector": null, "tolerations": [null]},
                             "status": null});
        drop_nulls(pods, &mut pod);
        assert_eq!(
            pod,
            json!({"metadata": {"name": "p"},
                   "spec": {"containers": [{"name": "c", "env": [{"name": "E"}]}],
                            "tolerations": [null]}})
        );
    }

    use super::*;

    #[test]
    fn uids_look_like_uuids() {
        let uid = new_uid();
        assert_eq!(uid.len(), 36);
        assert_eq!(&uid[14..15], "4");
        assert_ne!(uid, new_uid());
    }

    fn served_json(stored: &[u8], revision: i64) -> Option<Vec<u8>> {
        let mut out = Vec::new();
        Splice::find(stored)?.write(&mut out, stored, revision);
        Some(out)
    }

    #[test]
    fn served_json_splices_the_resource_version_as_from_stored_does() {
        let pod = crate::resources::find("", "v1", "pods").unwrap();
        let objects = [
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "a", "labels": {"x": "{\"metadata\":{"}},
                   "spec": {"containers": [{"name": "c", "args": ["}", "]", "\\\""]}]}}),
            json!({"aaa": {"metadata": {"name": "nested"}}, "apiVersion": "v1", "kind": "Pod", "metadata": {}}),
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"annotations": {"resourceVersion": "x"}, "name": "b"}}),
        ];
        for object in objects {
            let stored = to_stored(&object);
            let spliced = served_json(&stored, 42).expect("a stored object is spliced");
            let spliced: Value = serde_json::from_slice(&spliced).expect("valid JSON");
            assert_eq!(spliced, from_stored(pod, &stored, 42).unwrap());
        }
        // What to_stored never writes is left to from_stored.
        for odd in [
            &br#"{"kind":"Pod","metadata":{"name":"a"}}"#[..],
            br#"{"apiVersion":"v1","kind":"Pod","metadata":{"resourceVersion":"3"}}"#,
            br#"{"apiVersion":"v1","kind":"Pod","metadata":null}"#,
            br#"[1,2]"#,
            br#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a""#,
            b"",
        ] {
            assert_eq!(
                served_json(odd, 1),
                None,
                "{}",
                String::from_utf8_lossy(odd)
            );
        }
    }

    /// Written without a copy, a stored object is byte for byte what
    /// serializing a copy without those two fields gives.
    #[test]
    fn stored_bytes_are_the_object_without_the_served_fields() {
        let by_copy = |object: &Value| {
            let mut copy = object.clone();
            let meta = metadata_mut(&mut copy);
            meta.remove("resourceVersion");
            meta.remove("selfLink");
            serde_json::to_vec(&copy).unwrap()
        };
        for object in [
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "a", "resourceVersion": "7", "selfLink": "/x", "uid": "u"},
                   "spec": {"containers": [{"name": "c", "env": [{"name": "resourceVersion", "value": "\"q\u{e9}"}]}]}, "status": {"phase": "Pending"}}),
            json!({"aaa": {"metadata": {"resourceVersion": "kept"}}, "metadata": {}, "zzz": 1.5}),
            json!({"metadata": {"resourceVersion": "1"}}),
            json!({"kind": "Pod"}),
            json!({"kind": "Pod", "metadata": null}),
        ] {
            assert_eq!(
                String::from_utf8(to_stored(&object)).unwrap(),
                String::from_utf8(by_copy(&object)).unwrap()
            );
        }
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
        assert!(parse_body(br#"{"metadata":"x"}"#).is_err());
        assert!(parse_body(br#"{"kind":5}"#).is_err());
    }

    #[test]
    fn a_body_is_read_by_its_content_type_and_other_types_are_415() {
        let json = br#"{"kind":"ConfigMap","data":{"a":"b"}}"#;
        for content_type in ["", "application/json", "application/json; charset=utf-8"] {
            assert_eq!(
                parse_request_body(content_type, json).unwrap()["data"]["a"],
                "b"
            );
        }
        let yaml = b"kind: ConfigMap\ndata:\n  a: b\n";
        assert_eq!(
            parse_request_body("application/yaml", yaml).unwrap()["data"]["a"],
            "b"
        );
        for content_type in [
            "text/plain",
            "application/xml",
            "application/x-www-form-urlencoded",
        ] {
            let err = parse_request_body(content_type, json).unwrap_err();
            assert_eq!(err.code, 415, "{content_type}");
        }
        assert_eq!(
            parse_request_body("application/yaml", b"- 1\n")
                .unwrap_err()
                .code,
            400
        );
    }
}
