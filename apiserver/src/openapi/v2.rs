//! `/openapi/v2`: one Swagger 2.0 document of every served type, made from
//! the same group-version documents as `/openapi/v3`, served as JSON and as
//! gnostic's protobuf `openapi.v2.Document`, the form kubectl 1.27 and 1.28
//! read for client-side validation, `apply` and `explain`.

use std::sync::{Arc, LazyLock, Mutex};

use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use prost::Message;
use serde_json::{json, Map, Value};

use super::{content_hash, custom_documents, if_none_match, Document, DOCUMENTS};
use skiff_machinery::version;

/// What kubectl and client-go ask for (`@v1.0`, as kube-openapi still
/// accepts it) and what Kubernetes answers with (`.v1.0`).
const PROTOBUF_ASKED: &str = "com.github.proto-openapi.spec.v2@v1.0+protobuf";
const PROTOBUF: &str = "com.github.proto-openapi.spec.v2.v1.0+protobuf";
const PROTOBUF_CONTENT_TYPE: &str = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf";

/// The v2 document in both forms, with one ETag (kube-openapi's: the hash
/// of the JSON form, for either form).
pub struct Spec {
    pub json: Bytes,
    pub protobuf: Bytes,
    pub etag: String,
}

/// The built-in types' document, made once.
static BUILT_IN: LazyLock<Arc<Spec>> = LazyLock::new(|| Arc::new(make_spec(&DOCUMENTS, &[])));

/// The last document made with custom resources, by the hashes of their
/// group-version documents: it is made again only when a CRD changed.
static WITH_CUSTOM: Mutex<Option<(String, Arc<Spec>)>> = Mutex::new(None);

/// The document as the served types are now.
pub fn spec() -> Arc<Spec> {
    let custom = custom_documents();
    if custom.is_empty() {
        return BUILT_IN.clone();
    }
    let key: Vec<&str> = custom.iter().map(|d| d.hash.as_str()).collect();
    let key = key.join(",");
    let mut cached = WITH_CUSTOM.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((made_for, spec)) = cached.as_ref() {
        if *made_for == key {
            return spec.clone();
        }
    }
    let spec = Arc::new(make_spec(&DOCUMENTS, &custom));
    *cached = Some((key, spec.clone()));
    spec
}

fn make_spec(built_in: &[Document], custom: &[Document]) -> Spec {
    let documents: Vec<Value> = built_in
        .iter()
        .chain(custom)
        .filter_map(|d| serde_json::from_slice(&d.body).ok())
        .collect();
    let swagger = swagger(&documents);
    let json = serde_json::to_vec(&swagger).expect("a serde_json::Value always serializes");
    let protobuf = super::gnostic::document(&swagger).encode_to_vec();
    Spec {
        etag: format!("\"{}\"", content_hash(&json)),
        json: Bytes::from(json),
        protobuf: Bytes::from(protobuf),
    }
}

/// Which form a request's `Accept` asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    Json,
    Protobuf,
}

/// The form the best-rated media range of `accept` names, as kube-openapi
/// chooses: ranges by quality, then by how specific they are; within a
/// range JSON before protobuf. No `Accept` is JSON; an `Accept` that names
/// neither is `None` (a 406).
pub fn negotiate(accept: Option<&str>) -> Option<Form> {
    let Some(accept) = accept.filter(|a| !a.trim().is_empty()) else {
        return Some(Form::Json);
    };
    let mut ranges: Vec<(String, String, f32)> = accept
        .split(',')
        .filter_map(|range| {
            let mut parts = range.split(';');
            let (kind, sub) = parts.next()?.trim().split_once('/')?;
            let quality = parts
                .filter_map(|p| p.trim().strip_prefix("q="))
                .find_map(|q| q.trim().parse::<f32>().ok())
                .unwrap_or(1.0);
            Some((
                kind.trim().to_ascii_lowercase(),
                sub.trim().to_ascii_lowercase(),
                quality,
            ))
        })
        .filter(|(_, _, quality)| *quality > 0.0)
        .collect();
    let specific = |kind: &str, sub: &str| u8::from(kind != "*") + u8::from(sub != "*");
    ranges.sort_by(|a, b| {
        b.2.total_cmp(&a.2)
            .then(specific(&b.0, &b.1).cmp(&specific(&a.0, &a.1)))
    });
    let offered = [
        ("json", Form::Json),
        (PROTOBUF_ASKED, Form::Protobuf),
        (PROTOBUF, Form::Protobuf),
    ];
    ranges.iter().find_map(|(kind, sub, _)| {
        if kind != "application" && kind != "*" {
            return None;
        }
        offered
            .iter()
            .find(|(offer, _)| sub == "*" || sub == offer)
            .map(|(_, form)| *form)
    })
}

/// `GET /openapi/v2`: the document in the form asked for, a 304 when
/// `If-None-Match` names its ETag, a 406 when no form is acceptable.
pub fn response(request: &HeaderMap) -> Response {
    let accept = request.get(header::ACCEPT).and_then(|v| v.to_str().ok());
    let Some(form) = negotiate(accept) else {
        return super::not_acceptable(
            "only application/json and application/com.github.proto-openapi.spec.v2.v1.0+protobuf are served",
        );
    };
    let spec = spec();
    let (body, content_type) = match form {
        Form::Json => (spec.json.clone(), "application/json"),
        Form::Protobuf => (spec.protobuf.clone(), PROTOBUF_CONTENT_TYPE),
    };
    let mut response = match if_none_match(request, &spec.etag) {
        true => StatusCode::NOT_MODIFIED.into_response(),
        false => (StatusCode::OK, body).into_response(),
    };
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(header::VARY, HeaderValue::from_static("Accept"));
    if let Ok(etag) = HeaderValue::from_str(&spec.etag) {
        headers.insert(header::ETAG, etag);
    }
    response
}

/// The Swagger 2.0 document of these OpenAPI 3 group-version documents:
/// their schemas as `definitions`, their paths with operations in v2's
/// shape (a body parameter, `consumes` and `produces`).
pub fn swagger(documents: &[Value]) -> Value {
    let mut definitions = Map::new();
    let mut paths = Map::new();
    for document in documents {
        if let Some(schemas) = document["components"]["schemas"].as_object() {
            for (name, schema) in schemas {
                definitions
                    .entry(name.clone())
                    .or_insert_with(|| schema_v2(schema));
            }
        }
        if let Some(items) = document["paths"].as_object() {
            for (path, item) in items {
                paths
                    .entry(path.clone())
                    .or_insert_with(|| path_item_v2(item));
            }
        }
    }
    json!({
        "swagger": "2.0",
        "info": { "title": "Kubernetes", "version": version::GIT_VERSION },
        "paths": paths,
        "definitions": definitions,
    })
}

const V3_REFS: &str = "#/components/schemas/";
const V2_REFS: &str = "#/definitions/";

/// One schema in the form kubectl's v2 reader takes, as Kubernetes
/// publishes it: references to `#/definitions/`; an `allOf` of one
/// reference becomes that reference (keeping its description); other
/// combinations are dropped; a nullable value, or one that keeps unknown
/// fields, says nothing of its inner structure; an array without items is
/// untyped; and an int-or-string is a string of format `int-or-string`.
pub fn schema_v2(schema: &Value) -> Value {
    let Value::Object(source) = schema else {
        return schema.clone();
    };
    let mut out = Map::new();
    for (key, value) in source {
        match key.as_str() {
            "$ref" => {
                let target = value.as_str().unwrap_or_default();
                let target = target.strip_prefix(V3_REFS).unwrap_or(target);
                out.insert(key.clone(), json!(format!("{V2_REFS}{target}")));
            }
            "allOf" => {
                if let Some(reference) = lone_reference(value) {
                    out.insert("$ref".into(), schema_v2(reference)["$ref"].clone());
                }
            }
            "oneOf" | "anyOf" | "not" | "nullable" => {}
            "properties" => {
                let properties: Map<String, Value> = value
                    .as_object()
                    .into_iter()
                    .flatten()
                    .map(|(name, property)| (name.clone(), schema_v2(property)))
                    .collect();
                out.insert(key.clone(), Value::Object(properties));
            }
            "items" | "additionalProperties" if value.is_object() => {
                out.insert(key.clone(), schema_v2(value));
            }
            _ => {
                out.insert(key.clone(), value.clone());
            }
        }
    }
    let flag = |name: &str| source.get(name).and_then(Value::as_bool) == Some(true);
    if flag("nullable") {
        for key in ["type", "items", "properties"] {
            out.remove(key);
        }
    }
    if flag("x-kubernetes-preserve-unknown-fields") {
        out.remove("items");
        out.remove("properties");
    }
    if out.get("type").and_then(Value::as_str) == Some("array") && !out.contains_key("items") {
        out.remove("type");
    }
    if flag("x-kubernetes-int-or-string") && !out.contains_key("type") {
        out.insert("type".into(), json!("string"));
        out.insert("format".into(), json!("int-or-string"));
    }
    // A nullable field is not required: it may be sent as null.
    let nullable = |field: &Value| {
        field
            .as_str()
            .and_then(|name| source.get("properties")?.get(name)?.get("nullable"))
            .and_then(Value::as_bool)
            == Some(true)
    };
    if let Some(Value::Array(required)) = out.get_mut("required") {
        required.retain(|field| !nullable(field));
    }
    Value::Object(out)
}

/// The schema inside `allOf: [{"$ref": …}]`, if that is all it holds.
fn lone_reference(all_of: &Value) -> Option<&Value> {
    match all_of.as_array()?.as_slice() {
        [only] if only.get("$ref").is_some() && only.as_object()?.len() == 1 => Some(only),
        _ => None,
    }
}

const OPERATIONS: [&str; 7] = ["get", "put", "post", "delete", "options", "head", "patch"];

fn path_item_v2(item: &Value) -> Value {
    let mut out = Map::new();
    for method in OPERATIONS {
        if let Some(operation) = item.get(method) {
            out.insert(method.into(), operation_v2(operation));
        }
    }
    if let Some(Value::Array(parameters)) = item.get("parameters") {
        out.insert(
            "parameters".into(),
            parameters.iter().map(parameter_v2).collect(),
        );
    }
    Value::Object(out)
}

/// An OpenAPI 3 operation as v2 writes it: the request body becomes the
/// first parameter (`in: body`), its media types `consumes`, the
/// responses' media types `produces`.
fn operation_v2(operation: &Value) -> Value {
    let Value::Object(source) = operation else {
        return operation.clone();
    };
    let mut out = Map::new();
    let mut parameters = Vec::new();
    if let Some(body) = source.get("requestBody") {
        let (consumes, schema) = content_v2(&body["content"]);
        parameters.push(json!({
            "name": "body",
            "in": "body",
            "required": body["required"].as_bool().unwrap_or(false),
            "schema": schema,
        }));
        out.insert("consumes".into(), json!(consumes));
    }
    if let Some(Value::Array(more)) = source.get("parameters") {
        parameters.extend(more.iter().map(parameter_v2));
    }
    let mut produces: Vec<String> = Vec::new();
    let mut responses = Map::new();
    for (code, response) in source
        .get("responses")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        let mut v2 = json!({ "description": response["description"] });
        if response.get("content").is_some() {
            let (types, schema) = content_v2(&response["content"]);
            v2["schema"] = schema;
            for t in types {
                if !produces.contains(&t) {
                    produces.push(t);
                }
            }
        }
        responses.insert(code.clone(), v2);
    }
    for (key, value) in source {
        match key.as_str() {
            "requestBody" | "parameters" | "responses" => {}
            _ => {
                out.insert(key.clone(), value.clone());
            }
        }
    }
    produces.sort();
    out.insert("produces".into(), json!(produces));
    out.insert("parameters".into(), Value::Array(parameters));
    out.insert("responses".into(), Value::Object(responses));
    Value::Object(out)
}

/// The media types of a v3 `content` map and the schema they share.
fn content_v2(content: &Value) -> (Vec<String>, Value) {
    let Some(content) = content.as_object() else {
        return (Vec::new(), json!({}));
    };
    let types = content.keys().cloned().collect();
    let schema = content
        .values()
        .next()
        .map(|media| schema_v2(&media["schema"]))
        .unwrap_or_else(|| json!({}));
    (types, schema)
}

/// A v3 path or query parameter: its schema's `type` (and `uniqueItems`)
/// move up beside its name, as v2 has them.
fn parameter_v2(parameter: &Value) -> Value {
    let Value::Object(source) = parameter else {
        return parameter.clone();
    };
    let mut out: Map<String, Value> = source
        .iter()
        .filter(|(key, _)| *key != "schema")
        .map(|(key, value)| (key.clone(), value.clone()))
        .collect();
    if let Some(Value::Object(schema)) = source.get("schema") {
        for (key, value) in schema {
            out.entry(key.clone()).or_insert_with(|| value.clone());
        }
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests;
