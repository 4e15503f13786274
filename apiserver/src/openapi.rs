//! The OpenAPI v3 documents kubectl reads: the `/openapi/v3` index and one
//! document per group-version, built from k8s-openapi's schemas. They let
//! `create -f`/`apply -f` use server-side field validation and make
//! `explain` work. Not a full Kubernetes spec: only the served resources.
//! `/openapi/v2`, made from the same documents, is in [`v2`].

mod gnostic;
pub mod v2;

use std::collections::BTreeMap;
use std::sync::LazyLock;

use axum::extract::{Path, Query};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use bytes::Bytes;
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
use schemars::generate::SchemaSettings;
use schemars::SchemaGenerator;
use serde_json::{json, Map, Value};

use crate::resources::{self, ResourceType};
use crate::status::ApiError;

/// One generated group-version document, serialized once.
pub struct Document {
    /// `api/v1` or `apis/apps/v1`: the key in the index and the URL suffix.
    pub key: String,
    pub body: Bytes,
    /// An opaque, stable hash of `body` (the `?hash=` of the index).
    pub hash: String,
}

/// The documents of the built-in group-versions, made once. Custom
/// resources' documents are made per request (their CRDs change).
static DOCUMENTS: LazyLock<Vec<Document>> = LazyLock::new(|| {
    resources::group_versions()
        .into_iter()
        .filter(|(group, version)| !is_custom(group, version))
        .map(|(group, version)| make_document(group, version))
        .collect()
});

fn make_document(group: &str, version: &str) -> Document {
    let body = serde_json::to_vec(&group_version_document(group, version))
        .expect("a serde_json::Value always serializes");
    Document {
        key: document_key(group, version),
        hash: content_hash(&body),
        body: Bytes::from(body),
    }
}

/// Whether `group`/`version` is served only by custom resources.
fn is_custom(group: &str, version: &str) -> bool {
    let mut at = resources::served().filter(|r| r.group == group && r.version == version);
    at.all(|r| r.custom.is_some())
}

/// The documents of the custom resources' group-versions, as they are now.
fn custom_documents() -> Vec<Document> {
    let mut seen: Vec<(&str, &str)> = Vec::new();
    for r in resources::served().filter(|r| r.custom.is_some()) {
        if !seen.contains(&(r.group, r.version)) && is_custom(r.group, r.version) {
            seen.push((r.group, r.version));
        }
    }
    seen.into_iter()
        .map(|(group, version)| make_document(group, version))
        .collect()
}

fn index() -> Bytes {
    let custom = custom_documents();
    let paths: Map<String, Value> = DOCUMENTS
        .iter()
        .chain(custom.iter())
        .map(|d| {
            let url = format!("/openapi/v3/{}?hash={}", d.key, d.hash);
            (d.key.clone(), json!({ "serverRelativeURL": url }))
        })
        .collect();
    Bytes::from(serde_json::to_vec(&json!({ "paths": paths })).expect("a Value serializes"))
}

/// The routes of this module: `/openapi/v3`, `/openapi/v3/api/{version}`,
/// `/openapi/v3/apis/{group}/{version}` and `/openapi/v2`.
pub fn router() -> Router {
    Router::new()
        .route("/openapi/v3", get(|| async { index_response() }))
        .route(
            "/openapi/v3/api/{version}",
            get(|Path(version): Path<String>, Query(q): Query<HashQuery>, headers: HeaderMap| async move {
                document_response("", &version, q.hash.as_deref(), &headers)
            }),
        )
        .route(
            "/openapi/v3/apis/{group}/{version}",
            get(
                |Path((group, version)): Path<(String, String)>,
                 Query(q): Query<HashQuery>,
                 headers: HeaderMap| async move {
                    document_response(&group, &version, q.hash.as_deref(), &headers)
                },
            ),
        )
        .route(
            "/openapi/v2",
            get(|headers: HeaderMap| async move { v2::response(&headers) }),
        )
}

#[derive(serde::Deserialize)]
struct HashQuery {
    hash: Option<String>,
}

/// The `/openapi/v3` index: every served group-version with its URL.
pub fn index_response() -> Response {
    let mut response = (StatusCode::OK, index()).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    headers.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache, private"),
    );
    response
}

/// The document of one group-version (`""` for core), or a 404 Status.
/// A request carrying the current `hash` may be cached for good; one with an
/// `If-None-Match` of the current ETag gets a 304.
pub fn document_response(
    group: &str,
    version: &str,
    hash: Option<&str>,
    request: &HeaderMap,
) -> Response {
    let custom;
    let document = match document(group, version) {
        Some(document) => document,
        None if !resources::served().any(|r| r.group == group && r.version == version) => {
            return not_found().into_response();
        }
        None => {
            custom = make_document(group, version);
            &custom
        }
    };
    let etag = format!("\"{}\"", document.hash);
    let cache_control = if hash == Some(document.hash.as_str()) {
        "public, immutable, max-age=31536000"
    } else {
        "no-cache, private"
    };
    let mut response = if if_none_match(request, &etag) {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        (StatusCode::OK, document.body.clone()).into_response()
    };
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    headers.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static(cache_control),
    );
    if let Ok(value) = HeaderValue::from_str(&etag) {
        headers.insert(header::ETAG, value);
    }
    response
}

/// The cached document of one group-version, if it is served.
pub fn document(group: &str, version: &str) -> Option<&'static Document> {
    let key = document_key(group, version);
    DOCUMENTS.iter().find(|d| d.key == key)
}

/// Whether the request's `If-None-Match` names `etag` (or `*`): the
/// client's copy is current, and a 304 answers it.
fn if_none_match(request: &HeaderMap, etag: &str) -> bool {
    request
        .get_all(header::IF_NONE_MATCH)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| {
            v.split(',')
                .any(|tag| tag.trim() == etag || tag.trim() == "*")
        })
}

fn not_acceptable(message: &str) -> Response {
    ApiError::new(406, "NotAcceptable", message).into_response()
}

fn not_found() -> ApiError {
    ApiError::new(
        404,
        "NotFound",
        "the server could not find the requested resource",
    )
}

/// `api/v1` for the core group, `apis/{group}/{version}` otherwise.
fn document_key(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

/// 64-bit FNV-1a as 16 upper-case hex digits: stable across builds and
/// platforms, which is all a cache key needs.
fn content_hash(body: &[u8]) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in body {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{hash:016X}")
}

/// The OpenAPI 3.0 document of one group-version: the schemas of its kinds
/// (with `x-kubernetes-group-version-kind`, which `explain` looks for) and the
/// REST paths of each resource, whose PATCH operations carry the GVK and the
/// `fieldValidation` parameter (kubectl's test for server-side validation).
/// Empty `paths` and `schemas` when nothing is served there.
pub fn group_version_document(group: &str, version: &str) -> Value {
    let served: Vec<&ResourceType> = resources::served()
        .filter(|r| r.group == group && r.version == version)
        .collect();
    let mut generator = SchemaSettings::openapi3().into_generator();
    let shared = SharedRefs::new(&mut generator);
    let object_meta = generator.subschema_for::<meta::ObjectMeta>().to_value();
    let mut paths = Map::new();
    for r in &served {
        let object = match &r.custom {
            Some(_) => reference(r.definition),
            None => (r.schema)(&mut generator).to_value(),
        };
        let refs = KindRefs {
            object,
            list: reference(&list_definition(r)),
            shared: &shared,
        };
        add_resource_paths(&mut paths, r, &refs);
    }
    let mut schemas = generator.take_definitions(true);
    add_patch_strategies(&mut schemas);
    for r in &served {
        if let Some(custom) = &r.custom {
            schemas.insert(
                r.definition.to_string(),
                custom_schema(&custom.schema, &object_meta),
            );
        }
        if let Some(Value::Object(schema)) = schemas.get_mut(r.definition) {
            schema.insert(
                "x-kubernetes-group-version-kind".into(),
                json!([gvk(r, r.kind)]),
            );
            // k8s-openapi requires `metadata` (its field is not optional);
            // Kubernetes' documents do not, and `explain` says so.
            if let Some(Value::Array(required)) = schema.get_mut("required") {
                required.retain(|field| field != "metadata");
                if required.is_empty() {
                    schema.remove("required");
                }
            }
        }
        schemas.insert(list_definition(r), list_schema(r, &shared.list_meta));
    }
    json!({
        "openapi": "3.0.0",
        "info": { "title": "Kubernetes", "version": skiff_machinery::version::GIT_VERSION },
        "paths": paths,
        "components": { "schemas": schemas },
    })
}

/// A custom resource version's `openAPIV3Schema` as Kubernetes publishes
/// it: an object whose apiVersion, kind and metadata are the standard ones.
fn custom_schema(schema: &Value, object_meta: &Value) -> Value {
    let mut schema = schema.clone();
    if !schema.is_object() {
        schema = json!({});
    }
    schema["type"] = json!("object");
    let string = |description: &str| json!({ "type": "string", "description": description });
    if !schema.get("properties").is_some_and(Value::is_object) {
        schema["properties"] = json!({});
    }
    let properties = &mut schema["properties"];
    properties["apiVersion"] = string("APIVersion defines the versioned schema of this representation of an object. Servers should convert recognized schemas to the latest internal value, and may reject unrecognized values.");
    properties["kind"] = string("Kind is a string value representing the REST resource this object represents. Servers may infer this from the endpoint the client submits requests to. Cannot be updated. In CamelCase.");
    properties["metadata"] = json!({
        "allOf": [object_meta],
        "description": "Standard object's metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata",
    });
    schema
}

/// Marks each list that strategic merge patch merges with Kubernetes'
/// `x-kubernetes-patch-strategy` (and `-merge-key`), which k8s-openapi's
/// schemas lack. kubectl apply reads them from this document: without them
/// it replaces such lists whole, so fields the server defaulted inside
/// (a container's `imagePullPolicy`) would make every apply a change.
fn add_patch_strategies(schemas: &mut Map<String, Value>) {
    for (definition, schema) in schemas.iter_mut() {
        let Some(Value::Object(properties)) = schema.get_mut("properties") else {
            continue;
        };
        for (field, property) in properties.iter_mut() {
            let Some(strategy) = crate::patch::list_strategy(definition, field) else {
                continue;
            };
            let Value::Object(property) = property else {
                continue;
            };
            property.insert("x-kubernetes-patch-strategy".into(), json!("merge"));
            if let crate::patch::ListStrategy::MergeByKey(key) = strategy {
                property.insert("x-kubernetes-patch-merge-key".into(), json!(key));
            }
        }
    }
}

/// `$ref`s to the meta types every group-version document uses.
struct SharedRefs {
    list_meta: Value,
    status: Value,
    delete_options: Value,
    patch: Value,
}

impl SharedRefs {
    fn new(generator: &mut SchemaGenerator) -> Self {
        SharedRefs {
            list_meta: generator.subschema_for::<meta::ListMeta>().to_value(),
            status: generator.subschema_for::<meta::Status>().to_value(),
            delete_options: generator.subschema_for::<meta::DeleteOptions>().to_value(),
            patch: generator.subschema_for::<meta::Patch>().to_value(),
        }
    }
}

/// The schemas one resource's operations refer to.
struct KindRefs<'a> {
    object: Value,
    list: Value,
    shared: &'a SharedRefs,
}

fn reference(definition: &str) -> Value {
    json!({ "$ref": format!("#/components/schemas/{definition}") })
}

/// `io.k8s.api.core.v1.PodList` beside `io.k8s.api.core.v1.Pod`.
fn list_definition(r: &ResourceType) -> String {
    match r.definition.rsplit_once('.') {
        Some((package, _)) => format!("{package}.{}", r.list_kind),
        None => r.list_kind.to_string(),
    }
}

fn gvk(r: &ResourceType, kind: &str) -> Value {
    json!({ "group": r.group, "version": r.version, "kind": kind })
}

/// The list kind's schema, written by hand because the resource table holds
/// only the item type.
fn list_schema(r: &ResourceType, list_meta: &Value) -> Value {
    let string = |description: &str| json!({ "type": "string", "description": description });
    json!({
        "description": format!("{} is a list of {} objects.", r.list_kind, r.kind),
        "type": "object",
        "properties": {
            "apiVersion": string("APIVersion defines the versioned schema of this representation of an object."),
            "kind": string("Kind is a string value representing the REST resource this object represents."),
            "metadata": { "allOf": [list_meta], "description": "Standard list metadata." },
            "items": {
                "description": format!("The {} objects.", r.kind),
                "type": "array",
                "items": { "allOf": [reference(r.definition)], "default": {} },
            },
        },
        "required": ["items"],
        "x-kubernetes-group-version-kind": [gvk(r, r.list_kind)],
    })
}

/// The collection, item, all-namespaces and status paths of one resource.
fn add_resource_paths(paths: &mut Map<String, Value>, r: &ResourceType, refs: &KindRefs) {
    let scope = if r.namespaced { "Namespaced" } else { "" };
    let mut scope_params = Vec::new();
    if r.namespaced {
        scope_params.push(path_param(
            "namespace",
            "object name and auth scope, such as for teams and projects",
        ));
    }
    let mut item_params = vec![path_param("name", &format!("name of the {}", r.kind))];
    item_params.extend(scope_params.iter().cloned());
    let root = if r.group.is_empty() {
        format!("/api/{}", r.version)
    } else {
        format!("/apis/{}/{}", r.group, r.version)
    };
    let collection = if r.namespaced {
        format!("{root}/namespaces/{{namespace}}/{}", r.plural)
    } else {
        format!("{root}/{}", r.plural)
    };
    let op = |action: &str, id: String, suffix: &str| {
        Operation {
            r,
            action,
            id,
            suffix,
            refs,
        }
        .render()
    };
    let kind_id = format!("{}{scope}{}", group_version_id(r), r.kind);

    let mut collection_item = json!({
        "get": op("list", format!("list{kind_id}"), ""),
        "post": op("post", format!("create{kind_id}"), ""),
        "delete": op("deletecollection", format!("deletecollection{kind_id}"), ""),
    });
    set_parameters(&mut collection_item, &scope_params);
    paths.insert(collection.clone(), collection_item);

    let mut item = json!({
        "get": op("get", format!("read{kind_id}"), ""),
        "put": op("put", format!("replace{kind_id}"), ""),
        "patch": op("patch", format!("patch{kind_id}"), ""),
        "delete": op("delete", format!("delete{kind_id}"), ""),
    });
    set_parameters(&mut item, &item_params);
    paths.insert(format!("{collection}/{{name}}"), item);

    if r.has_subresource("status") {
        let mut status = json!({
            "get": op("get", format!("read{kind_id}Status"), "status"),
            "put": op("put", format!("replace{kind_id}Status"), "status"),
            "patch": op("patch", format!("patch{kind_id}Status"), "status"),
        });
        set_parameters(&mut status, &item_params);
        paths.insert(format!("{collection}/{{name}}/status"), status);
    }

    if r.namespaced {
        let all_namespaces = json!({
            "get": op("list", format!("list{}{}ForAllNamespaces", group_version_id(r), r.kind), ""),
        });
        paths.insert(format!("{root}/{}", r.plural), all_namespaces);
    }
}

fn set_parameters(path_item: &mut Value, parameters: &[Value]) {
    if !parameters.is_empty() {
        path_item["parameters"] = Value::Array(parameters.to_vec());
    }
}

/// `CoreV1`, `AppsV1`, `CoordinationV1` (from `coordination.k8s.io`), as
/// Kubernetes builds operation ids.
fn group_version_id(r: &ResourceType) -> String {
    let group = match r.group {
        "" => "core",
        g => g.strip_suffix(".k8s.io").unwrap_or(g),
    };
    let mut out: String = group.split(['.', '-']).map(upper_first).collect();
    out.push_str(&upper_first(r.version));
    out
}

fn upper_first(word: &str) -> String {
    let mut chars = word.chars();
    match chars.next() {
        Some(first) => first.to_ascii_uppercase().to_string() + chars.as_str(),
        None => String::new(),
    }
}

/// One REST operation of a resource: `action` is the
/// `x-kubernetes-action` (`get`, `list`, `post`, `put`, `patch`, `delete`,
/// `deletecollection`); `suffix` a subresource, or empty.
struct Operation<'a> {
    r: &'a ResourceType,
    action: &'a str,
    id: String,
    suffix: &'a str,
    refs: &'a KindRefs<'a>,
}

impl Operation<'_> {
    fn render(&self) -> Value {
        let (parameters, request, responses) = self.shape();
        let description = match self.suffix {
            "" => format!("{} {}", self.action, self.r.kind),
            sub => format!("{} {} of the specified {}", self.action, sub, self.r.kind),
        };
        let mut op = json!({
            "tags": [group_version_id(self.r).to_ascii_lowercase()],
            "description": description,
            "operationId": self.id,
            "parameters": parameters,
            "responses": responses,
            "x-kubernetes-action": self.action,
            "x-kubernetes-group-version-kind": gvk(self.r, self.r.kind),
        });
        if let Some(body) = request {
            op["requestBody"] = body;
        }
        op
    }

    /// (query parameters, request body, responses) by action.
    fn shape(&self) -> (Vec<Value>, Option<Value>, Value) {
        let refs = self.refs;
        let object = &refs.object;
        let write = || {
            vec![
                query_param("dryRun"),
                query_param("fieldManager"),
                query_param("fieldValidation"),
            ]
        };
        match self.action {
            "get" => (
                vec![query_param("pretty")],
                None,
                responses(&[("200", object)]),
            ),
            "list" => {
                let params = LIST_PARAMETERS.iter().map(|p| query_param(p)).collect();
                let content = content(
                    &refs.list,
                    &["application/json", "application/json;stream=watch"],
                );
                (
                    params,
                    None,
                    json!({ "200": { "description": "OK", "content": content }, "401": unauthorized() }),
                )
            }
            "post" => (
                write(),
                Some(body(object, &["application/json"])),
                responses(&[("200", object), ("201", object), ("202", object)]),
            ),
            "put" => (
                write(),
                Some(body(object, &["application/json"])),
                responses(&[("200", object), ("201", object)]),
            ),
            "patch" => {
                let mut params = write();
                params.push(query_param("force"));
                // Custom resources take no strategic merge patch (a 415), so
                // their documents do not offer it: kubectl apply picks its
                // patch type from this list.
                let types = match self.r.custom {
                    Some(_) => &PATCH_TYPES[..3],
                    None => PATCH_TYPES,
                };
                (
                    params,
                    Some(body(&refs.shared.patch, types)),
                    responses(&[("200", object), ("201", object)]),
                )
            }
            "delete" => {
                let params = ["dryRun", "gracePeriodSeconds", "propagationPolicy"]
                    .map(query_param)
                    .to_vec();
                let request = body(&refs.shared.delete_options, &["application/json"]);
                (
                    params,
                    Some(request),
                    responses(&[("200", object), ("202", object)]),
                )
            }
            // deletecollection
            _ => {
                let mut params: Vec<Value> =
                    LIST_PARAMETERS.iter().map(|p| query_param(p)).collect();
                params
                    .extend(["dryRun", "gracePeriodSeconds", "propagationPolicy"].map(query_param));
                let request = body(&refs.shared.delete_options, &["application/json"]);
                (
                    params,
                    Some(request),
                    responses(&[("200", &refs.shared.status)]),
                )
            }
        }
    }
}

/// Strategic merge last: custom resources take the first three.
const PATCH_TYPES: &[&str] = &[
    "application/apply-patch+yaml",
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
];

const LIST_PARAMETERS: &[&str] = &[
    "pretty",
    "allowWatchBookmarks",
    "continue",
    "fieldSelector",
    "labelSelector",
    "limit",
    "resourceVersion",
    "resourceVersionMatch",
    "sendInitialEvents",
    "timeoutSeconds",
    "watch",
];

fn content(schema: &Value, media_types: &[&str]) -> Value {
    let map: Map<String, Value> = media_types
        .iter()
        .map(|t| (t.to_string(), json!({ "schema": schema })))
        .collect();
    Value::Object(map)
}

fn body(schema: &Value, media_types: &[&str]) -> Value {
    json!({ "content": content(schema, media_types), "required": true })
}

fn responses(codes: &[(&str, &Value)]) -> Value {
    let mut map: BTreeMap<String, Value> = codes
        .iter()
        .map(|(code, schema)| {
            let description = if *code == "200" { "OK" } else if *code == "201" { "Created" } else { "Accepted" };
            (code.to_string(), json!({ "description": description, "content": content(schema, &["application/json"]) }))
        })
        .collect();
    map.insert("401".into(), unauthorized());
    json!(map)
}

fn unauthorized() -> Value {
    json!({ "description": "Unauthorized" })
}

fn path_param(name: &str, description: &str) -> Value {
    json!({
        "name": name,
        "in": "path",
        "description": description,
        "required": true,
        "schema": { "type": "string", "uniqueItems": true },
    })
}

/// A query parameter the API server accepts, with its type and meaning.
fn query_param(name: &str) -> Value {
    let (kind, description) = match name {
        "pretty" => ("string", "If 'true', then the output is pretty printed."),
        "dryRun" => ("string", "When present, indicates that modifications should not be persisted. The only valid value is All."),
        "fieldManager" => ("string", "A name associated with the actor or entity that is making these changes."),
        "fieldValidation" => (
            "string",
            "How the server handles unknown or duplicate fields in the request: Ignore, Warn or Strict.",
        ),
        "force" => ("boolean", "Force is going to \"force\" Apply requests: re-acquire conflicting fields."),
        "gracePeriodSeconds" => ("integer", "The duration in seconds before the object should be deleted."),
        "propagationPolicy" => ("string", "Whether and how garbage collection will be performed: Orphan, Background or Foreground."),
        "allowWatchBookmarks" => ("boolean", "Requests watch events with type \"BOOKMARK\"."),
        "continue" => ("string", "The continue token of a previous list call, to fetch the next page."),
        "fieldSelector" => ("string", "A selector to restrict the list of returned objects by their fields."),
        "labelSelector" => ("string", "A selector to restrict the list of returned objects by their labels."),
        "limit" => ("integer", "The maximum number of responses to return for a list call."),
        "resourceVersion" => ("string", "Constrains what resource versions a request may be served from."),
        "resourceVersionMatch" => ("string", "Determines how resourceVersion is applied to list calls."),
        "sendInitialEvents" => ("boolean", "Starts a watch with synthetic events for the current state."),
        "timeoutSeconds" => ("integer", "Timeout for the list/watch call."),
        "watch" => ("boolean", "Watch for changes to the described resources and return them as a stream."),
        _ => ("string", ""),
    };
    json!({
        "name": name,
        "in": "query",
        "description": description,
        "schema": { "type": kind, "uniqueItems": true },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::{to_bytes, Body};
    use axum::http::Request;
    use tower::ServiceExt;

    fn parse(bytes: &[u8]) -> Value {
        serde_json::from_slice(bytes).expect("valid JSON")
    }

    #[test]
    fn the_table_names_the_definitions_k8s_openapi_generates() {
        for r in resources::served() {
            let mut generator = SchemaSettings::openapi3().into_generator();
            let reference = (r.schema)(&mut generator).to_value();
            assert_eq!(
                reference["$ref"],
                format!("#/components/schemas/{}", r.definition),
                "definition of {}",
                r.kind
            );
        }
    }

    #[test]
    fn the_core_document_explains_pods() {
        let doc = parse(&document("", "v1").expect("core served").body);
        let pod = &doc["components"]["schemas"]["io.k8s.api.core.v1.Pod"];
        assert_eq!(
            pod["x-kubernetes-group-version-kind"],
            json!([{"group": "", "version": "v1", "kind": "Pod"}])
        );
        assert_eq!(
            pod["properties"]["spec"]["allOf"][0]["$ref"],
            "#/components/schemas/io.k8s.api.core.v1.PodSpec"
        );
        let spec = &doc["components"]["schemas"]["io.k8s.api.core.v1.PodSpec"];
        assert_eq!(spec["properties"]["containers"]["type"], "array");
        assert!(spec["required"]
            .as_array()
            .unwrap()
            .contains(&json!("containers")));
        assert_eq!(
            spec["properties"]["containers"]["x-kubernetes-patch-merge-key"],
            "name"
        );
        assert_eq!(
            spec["properties"]["containers"]["x-kubernetes-patch-strategy"],
            "merge"
        );
        let container = &doc["components"]["schemas"]["io.k8s.api.core.v1.Container"];
        assert_eq!(container["properties"]["image"]["type"], "string");
        assert!(pod.get("required").is_none(), "metadata is not required");
        let list = &doc["components"]["schemas"]["io.k8s.api.core.v1.PodList"];
        assert_eq!(
            list["x-kubernetes-group-version-kind"][0]["kind"],
            "PodList"
        );
        assert!(
            doc["components"]["schemas"]["io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"]
                .is_object()
        );
        assert!(
            doc["components"]["schemas"]["io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta"]
                .is_object()
        );
    }

    #[test]
    fn every_kind_has_a_patch_operation_with_field_validation() {
        for (group, version) in resources::group_versions() {
            let doc = parse(&document(group, version).unwrap().body);
            for r in resources::served().filter(|r| r.group == group && r.version == version) {
                let found = doc["paths"].as_object().unwrap().values().any(|item| {
                    let patch = &item["patch"];
                    patch["x-kubernetes-group-version-kind"] == gvk(r, r.kind)
                        && patch["parameters"].as_array().is_some_and(|ps| {
                            ps.iter()
                                .any(|p| p["name"] == "fieldValidation" && p["in"] == "query")
                        })
                });
                assert!(found, "no PATCH with fieldValidation for {}", r.kind);
                let schema = &doc["components"]["schemas"][r.definition];
                assert_eq!(schema["x-kubernetes-group-version-kind"][0], gvk(r, r.kind));
            }
        }
    }

    #[test]
    fn converted_versions_have_documents_of_their_own() {
        let doc = parse(
            &document("batch", "v1beta1")
                .expect("batch/v1beta1 served")
                .body,
        );
        let schemas = &doc["components"]["schemas"];
        let cron_job = &schemas["io.k8s.api.batch.v1beta1.CronJob"];
        assert_eq!(
            cron_job["x-kubernetes-group-version-kind"],
            json!([{"group": "batch", "version": "v1beta1", "kind": "CronJob"}])
        );
        assert!(cron_job["properties"]["spec"]
            .to_string()
            .contains("io.k8s.api.batch.v1beta1.CronJobSpec"));
        assert!(
            schemas["io.k8s.api.batch.v1beta1.CronJobSpec"]["properties"]["schedule"].is_object()
        );
        let paths = doc["paths"].as_object().unwrap();
        let item = &paths["/apis/batch/v1beta1/namespaces/{namespace}/cronjobs/{name}"];
        assert_eq!(
            item["patch"]["operationId"],
            "patchBatchV1beta1NamespacedCronJob"
        );
        assert!(!paths.contains_key("/apis/batch/v1beta1/namespaces/{namespace}/jobs"));
        let scheduling = parse(&document("scheduling.k8s.io", "v1beta1").unwrap().body);
        assert_eq!(
            scheduling["components"]["schemas"]["io.k8s.api.scheduling.v1beta1.PriorityClass"]
                ["x-kubernetes-group-version-kind"][0]["version"],
            "v1beta1"
        );
    }

    #[test]
    fn paths_follow_the_rest_layout() {
        let doc = parse(&document("apps", "v1").unwrap().body);
        let paths = doc["paths"].as_object().unwrap();
        assert!(paths.contains_key("/apis/apps/v1/namespaces/{namespace}/deployments"));
        assert!(paths.contains_key("/apis/apps/v1/namespaces/{namespace}/deployments/{name}"));
        assert!(
            paths.contains_key("/apis/apps/v1/namespaces/{namespace}/deployments/{name}/status")
        );
        assert!(paths.contains_key("/apis/apps/v1/deployments"));
        let item = &paths["/apis/apps/v1/namespaces/{namespace}/deployments/{name}"];
        assert_eq!(
            item["patch"]["operationId"],
            "patchAppsV1NamespacedDeployment"
        );
        let core = parse(&document("", "v1").unwrap().body);
        assert!(core["paths"]
            .as_object()
            .unwrap()
            .contains_key("/api/v1/nodes/{name}"));
        assert!(!core["paths"]
            .as_object()
            .unwrap()
            .contains_key("/api/v1/namespaces/{namespace}/nodes"));
    }

    #[tokio::test]
    async fn the_index_links_every_group_version_by_hash() {
        let response = router()
            .oneshot(
                Request::get("/openapi/v3?timeout=32s")
                    .body(Body::empty())
                    .unwrap(),
            )
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(response.headers()[header::CONTENT_TYPE], "application/json");
        let index = parse(&to_bytes(response.into_body(), usize::MAX).await.unwrap());
        let core = document("", "v1").unwrap();
        assert_eq!(
            index["paths"]["api/v1"]["serverRelativeURL"],
            format!("/openapi/v3/api/v1?hash={}", core.hash)
        );
        assert!(index["paths"]["apis/apps/v1"]["serverRelativeURL"]
            .as_str()
            .unwrap()
            .starts_with("/openapi/v3/apis/apps/v1?hash="));
        assert_eq!(
            index["paths"].as_object().unwrap().len(),
            resources::group_versions().len()
        );
    }

    #[tokio::test]
    async fn documents_are_served_with_etags_and_unknown_ones_are_404() {
        let core = document("", "v1").unwrap();
        let uri = format!("/openapi/v3/api/v1?hash={}&timeout=32s", core.hash);
        let response = router()
            .oneshot(Request::get(&uri).body(Body::empty()).unwrap())
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        let etag = response.headers()[header::ETAG].clone();
        assert_eq!(
            response.headers()[header::CACHE_CONTROL],
            "public, immutable, max-age=31536000"
        );
        let body = to_bytes(response.into_body(), usize::MAX).await.unwrap();
        assert_eq!(body, core.body);
        assert_eq!(content_hash(&body), core.hash);

        let again = Request::get(&uri)
            .header(header::IF_NONE_MATCH, etag)
            .body(Body::empty())
            .unwrap();
        assert_eq!(
            router().oneshot(again).await.unwrap().status(),
            StatusCode::NOT_MODIFIED
        );

        for uri in [
            "/openapi/v3/apis/apps/v2",
            "/openapi/v3/apis/nope/v1",
            "/openapi/v3/api/v2",
        ] {
            let response = router()
                .oneshot(Request::get(uri).body(Body::empty()).unwrap())
                .await
                .unwrap();
            assert_eq!(response.status(), StatusCode::NOT_FOUND, "{uri}");
            let status = parse(&to_bytes(response.into_body(), usize::MAX).await.unwrap());
            assert_eq!(status["kind"], "Status");
        }
    }

    #[test]
    fn the_hash_is_stable() {
        assert_eq!(content_hash(b""), "CBF29CE484222325");
        assert_eq!(content_hash(b"a"), "AF63DC4C8601EC8C");
        let first = serde_json::to_vec(&group_version_document("apps", "v1")).unwrap();
        let second = serde_json::to_vec(&group_version_document("apps", "v1")).unwrap();
        assert_eq!(content_hash(&first), content_hash(&second));
    }
}
