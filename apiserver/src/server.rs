//! HTTP: routes every resource path of the table to the registry, plus
//! discovery, OpenAPI and health. Bodies are read as bytes whatever the
//! Content-Type (the Python client sends none), up to 3 MiB.

use std::collections::HashMap;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Query, State};
use axum::http::{header, HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use axum::Extension;
use axum::Router;
use serde_json::Value;
use tower::ServiceExt;

use crate::accept::{self, Offer, Output};
use crate::conversion::served as convert;
use crate::field_validation;
use crate::options::{self, OptionsKind};
use crate::pod_streams::PodStream;
use crate::registry::{ListJson, Registry, Target, Write};
use crate::reply;
use crate::request_info::{RequestInfo, ResourceInfo};
use crate::resources::{self, ResourceType};
use crate::status::{ApiError, ApiResult};
use crate::table;
use crate::watch::WatchOptions;

/// Kubernetes refuses request bodies over 3 MiB.
pub const MAX_BODY_BYTES: usize = 3 * 1024 * 1024;

#[derive(Clone)]
struct App {
    registry: Registry,
    discovery: Router,
}

/// The whole API as one router.
pub fn router(registry: Registry) -> Router {
    let discovery = crate::discovery::router();
    let resource_metrics = crate::resource_metrics::router(registry.clone());
    let app = App {
        registry,
        discovery: discovery.clone(),
    };
    Router::new()
        .route("/healthz", get(healthz))
        .route("/livez", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", crate::cache::metrics::route(&app.registry))
        .route(
            "/api/v1/namespaces/{namespace}/pods/{name}/exec",
            pod_stream(PodStream::Exec),
        )
        .route(
            "/api/v1/namespaces/{namespace}/pods/{name}/attach",
            pod_stream(PodStream::Attach),
        )
        .route(
            "/api/v1/namespaces/{namespace}/pods/{name}/portforward",
            pod_stream(PodStream::PortForward),
        )
        .route("/api/{*rest}", any(resource))
        .route("/apis/{*rest}", any(resource))
        .fallback(fallback)
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(app)
        .merge(discovery_routes(discovery))
        // metrics.k8s.io: served from the kubelets, not the registry.
        .merge(resource_metrics)
}

/// The handler of one of the connections into a pod (exec, attach,
/// port-forward), whose request is upgraded rather than read.
fn pod_stream(stream: PodStream) -> axum::routing::MethodRouter<App> {
    any(
        move |State(app): State<App>,
              axum::extract::Path((namespace, name)): axum::extract::Path<(String, String)>,
              request: axum::extract::Request| async move {
            crate::pod_streams::connect(&app.registry, &namespace, &name, stream, request).await
        },
    )
}

/// Discovery answers `/version`, `/api`, `/apis` and `/openapi/…`; the
/// resource routes hand it the group-version paths under `/api` and `/apis`.
fn discovery_routes(discovery: Router) -> Router {
    let mut router = Router::new();
    for path in [
        "/version",
        "/version/",
        "/api",
        "/api/",
        "/apis",
        "/apis/",
        "/openapi/v2",
        "/openapi/v3",
        "/openapi/v3/{*rest}",
    ] {
        let discovery = discovery.clone();
        router = router.route(
            path,
            any(move |request: axum::extract::Request| async move {
                // A fresh request: this router's matched path parameters
                // must not reach the discovery router's extractors.
                let (parts, body) = request.into_parts();
                forward(&discovery, parts.method, parts.uri, parts.headers, body).await
            }),
        );
    }
    router
}

async fn forward(
    router: &Router,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let mut request = axum::extract::Request::new(body);
    *request.method_mut() = method;
    *request.uri_mut() = uri;
    *request.headers_mut() = headers;
    router.clone().oneshot(request).await.into_response()
}

async fn healthz() -> &'static str {
    "ok"
}

/// Ready once the store answers a read and the default objects (the
/// namespaces and RBAC's default roles) exist.
async fn readyz(State(app): State<App>) -> Response {
    if !app.registry.is_bootstrapped() {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "[-]poststarthook/rbac/bootstrap-roles failed: not finished\nreadyz check failed",
        )
            .into_response();
    }
    match tokio::time::timeout(Duration::from_secs(2), app.registry.storage().revision()).await {
        Ok(Ok(_)) => "ok".into_response(),
        Ok(Err(err)) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("[-]store failed: {err}\nreadyz check failed"),
        )
            .into_response(),
        Err(_) => (
            StatusCode::SERVICE_UNAVAILABLE,
            "[-]store did not answer within 2s\nreadyz check failed",
        )
            .into_response(),
    }
}

async fn fallback(uri: Uri) -> Response {
    ApiError::new(
        404,
        "NotFound",
        format!(
            "the server could not find the requested resource ({})",
            uri.path()
        ),
    )
    .into_response()
}

/// What a resource path names.
#[derive(Debug)]
struct Route {
    resource: &'static ResourceType,
    namespace: Option<String>,
    name: Option<String>,
    subresource: Option<String>,
    /// What follows a Node's `proxy` subresource: the kubelet's path.
    rest: Vec<String>,
}

/// The resource a request's info names, or a 404: the resource must be
/// served at the group-version, a cluster-scoped one is not reached
/// through a namespace, a subresource must be one it has, and nothing may
/// follow the subresource.
fn route_of(info: &ResourceInfo) -> ApiResult<Route> {
    let not_found = || {
        ApiError::new(
            404,
            "NotFound",
            "the server could not find the requested resource".to_string(),
        )
    };
    let resource =
        resources::find(&info.group, &info.version, &info.resource).ok_or_else(not_found)?;
    // A namespace is named by the path of a namespaced resource, and by a
    // Namespace's own path (`/api/v1/namespaces/NAME`), whose name it is.
    let namespace = match &info.namespace {
        Some(_) if resource.namespaced => info.namespace.clone(),
        Some(namespace) if info.name.as_ref() == Some(namespace) => None,
        Some(_) => return Err(not_found()),
        None => None,
    };
    let node_proxy = resource.kind == "Node" && info.subresource.as_deref() == Some("proxy");
    if info.parts.len() > 3 && !node_proxy {
        return Err(not_found());
    }
    if let Some(sub) = &info.subresource {
        if !resource.has_subresource(sub) {
            return Err(not_found());
        }
    }
    Ok(Route {
        resource,
        namespace,
        name: info.name.clone(),
        subresource: info.subresource.clone(),
        rest: info.parts.iter().skip(3).cloned().collect(),
    })
}

/// The field manager of a write: `fieldManager`, or else the client's name
/// as its User-Agent gives it (`kubectl/v1.32.0 (linux/amd64) …` →
/// `kubectl`), as Kubernetes does.
fn field_manager<'a>(
    query: &'a HashMap<String, String>,
    headers: &'a HeaderMap,
) -> ApiResult<&'a str> {
    if let Some(manager) = query.get("fieldManager").filter(|m| !m.is_empty()) {
        if manager.len() > 128 {
            return Err(ApiError::invalid(
                "meta.k8s.io",
                "PatchOptions",
                "patchoptions",
                "",
                vec![crate::status::Cause {
                    reason: "FieldValueTooLong",
                    message: "Too long: may not be more than 128 bytes".into(),
                    field: "fieldManager".into(),
                }],
            ));
        }
        if manager.chars().any(|c| c.is_control()) {
            return Err(ApiError::bad_request(
                "fieldManager: Invalid value: must only contain printable characters",
            ));
        }
        return Ok(manager);
    }
    let agent = headers
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .and_then(|a| a.split('/').next())
        .map(str::trim)
        .filter(|a| !a.is_empty())
        .unwrap_or("unknown");
    Ok(&agent[..agent.floor_char_boundary(128)])
}

/// A JSON reply carrying one `Warning` header per warning.
fn warned_response(code: StatusCode, value: &Value, warnings: &[String]) -> Response {
    let mut response = json_response(code, value);
    for warning in warnings {
        if let Ok(header) =
            header::HeaderValue::from_str(&field_validation::warning_header(warning))
        {
            response.headers_mut().append(header::WARNING, header);
        }
    }
    response
}

/// Whether the reply is a Table (kubectl's `get`), and what its rows carry.
fn render_as(
    headers: &HeaderMap,
    query: &HashMap<String, String>,
) -> ApiResult<Option<(table::TableVersion, table::IncludeObject)>> {
    let Some(version) = table::wants_table(headers) else {
        return Ok(None);
    };
    let include = table::IncludeObject::from_query(query.get("includeObject").map(String::as_str))
        .map_err(|err| ApiError::bad_request(err.to_string()))?;
    Ok(Some((version, include)))
}

fn table_response(version: table::TableVersion, table: &Value) -> Response {
    let body = serde_json::to_vec(table).unwrap_or_default();
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, table::content_type(version))],
        body,
    )
        .into_response()
}

fn json_response(code: StatusCode, value: &Value) -> Response {
    let body = serde_json::to_vec(value).unwrap_or_default();
    (code, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

async fn resource(
    State(app): State<App>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    info: Option<Extension<RequestInfo>>,
    Query(query): Query<HashMap<String, String>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    // What the outermost layer worked out (worked out here only for a
    // router used without it, as in this module's tests).
    let info = match info {
        Some(Extension(info)) => info,
        None => RequestInfo::of(&method, &uri),
    };
    let watch_path = info.verb == "watch" && !crate::request_info::query_flag(&uri, "watch");
    let Some(info) = info.resource else {
        // `/api/v1`, `/apis/GROUP/VERSION`: discovery's.
        return forward(&app.discovery, method, uri, headers, Body::empty()).await;
    };
    if watch_path {
        // The deprecated `/watch/` paths are not served.
        return fallback(uri).await;
    }
    let body = match body {
        Ok(body) => body,
        Err(rejection) if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE => {
            return ApiError::too_large(format!(
                "the request body is larger than {MAX_BODY_BYTES} bytes"
            ))
            .into_response()
        }
        Err(rejection) => return ApiError::bad_request(rejection.body_text()).into_response(),
    };
    let route = route_of(&info);
    let deprecation = route
        .as_ref()
        .ok()
        .as_ref()
        .and_then(|route| route.resource.conversion)
        .and_then(|conversion| conversion.deprecation);
    let watch = method == Method::GET
        && route.as_ref().is_ok_and(|r| r.name.is_none())
        && options::flag(&query, "watch").unwrap_or(false);
    // The form of the reply, chosen before anything is done: a client
    // that accepts nothing offered gets a 406 and changes nothing.
    let streams = route
        .as_ref()
        .ok()
        .and_then(|r| r.subresource.as_deref())
        .is_some_and(|sub| matches!(sub, "log" | "exec" | "attach" | "portforward" | "proxy"));
    let output = if streams {
        Output::Json
    } else {
        let offer = Offer {
            protobuf: route.as_ref().map_or(true, |r| {
                crate::protobuf::SCHEMA
                    .message_for(&r.resource.api_version(), r.resource.kind)
                    .is_some()
            }),
            watch,
        };
        match accept::negotiate(&headers, offer) {
            Some(output) => output,
            None => {
                return ApiError::new(
                    406,
                    "NotAcceptable",
                    format!(
                        "only the following media types are accepted: {}",
                        offer.media_types().join(", ")
                    ),
                )
                .into_response()
            }
        }
    };
    // A 405 names what the path takes, as RFC 9110 requires.
    let allow = route
        .as_ref()
        .ok()
        .and_then(|r| allowed_methods(r.name.is_some(), r.subresource.as_deref()));
    let request = Request {
        method,
        route,
        query: &query,
        headers: &headers,
        body: &body,
    };
    let (served, warnings) = crate::warning::collect(serve(&app.registry, request)).await;
    let mut response = match served {
        Ok(response) => response,
        Err(err) => err.into_response(),
    };
    if let Some(allow) = allow.filter(|_| response.status() == StatusCode::METHOD_NOT_ALLOWED) {
        response
            .headers_mut()
            .insert(header::ALLOW, header::HeaderValue::from_static(allow));
    }
    for warning in warnings {
        if let Ok(value) =
            header::HeaderValue::from_str(&field_validation::warning_header(&warning))
        {
            response.headers_mut().append(header::WARNING, value);
        }
    }
    if let Some(text) = deprecation {
        // As Kubernetes warns on every request at a deprecated version.
        if let Ok(value) = header::HeaderValue::from_str(&field_validation::warning_header(text)) {
            response.headers_mut().append(header::WARNING, value);
        }
    }
    match output {
        Output::Protobuf if watch && response.status() == StatusCode::OK => {
            reply::watch_as_protobuf(response)
        }
        output => reply::write_as(output, response).await,
    }
}

/// The methods a resource path takes, for the `Allow` header of a 405:
/// a collection, an object, or one of its subresources.
fn allowed_methods(item: bool, subresource: Option<&str>) -> Option<&'static str> {
    match (item, subresource) {
        (false, None) => Some("GET, POST, DELETE"),
        (true, None) => Some("GET, PUT, PATCH, DELETE"),
        (true, Some("status" | "scale")) => Some("GET, PUT, PATCH"),
        (true, Some("finalize")) => Some("PUT"),
        (true, Some("binding" | "eviction" | "token")) => Some("POST"),
        (true, Some("log" | "proxy")) => Some("GET"),
        (true, Some("exec" | "attach" | "portforward")) => Some("GET, POST"),
        _ => None,
    }
}

/// A request on a resource path, as the handler took it apart.
struct Request<'a> {
    method: Method,
    /// What the path names, or why it names nothing served.
    route: ApiResult<Route>,
    query: &'a HashMap<String, String>,
    headers: &'a HeaderMap,
    body: &'a [u8],
}

/// One call on a resource path, worked out once: what every verb's
/// handler reads.
struct Call<'a> {
    registry: &'a Registry,
    /// The version the client speaks.
    served: &'static ResourceType,
    /// What the registry sees: the storage version (the same unless
    /// `served` is converted: `conversion::served`).
    resource: &'static ResourceType,
    target: Target<'a>,
    query: &'a HashMap<String, String>,
    headers: &'a HeaderMap,
    body: &'a [u8],
    content_type: &'a str,
    validation: field_validation::Mode,
    manager: &'a str,
}

impl Call<'_> {
    /// The object the request's body holds, checked as `fieldValidation`
    /// asks (with the warnings to send) and converted to the storage
    /// version: what a create or an update writes.
    fn body_object(&self) -> ApiResult<(Value, Vec<String>)> {
        let object = crate::object::parse_request_body(self.content_type, self.body)?;
        let warnings =
            field_validation::check(self.served, self.validation, &object, Some(self.body))?;
        Ok((convert::incoming(self.served, object)?, warnings))
    }

    /// A read's reply: `whole` as JSON, or the Table of `items` (with a
    /// list's `metadata`) when the client asked for one.
    fn reply_read(
        &self,
        whole: &Value,
        items: &[Value],
        list_meta: Option<&Value>,
    ) -> ApiResult<Response> {
        match render_as(self.headers, self.query)? {
            Some((version, include)) => {
                let now = jiff::Timestamp::now();
                let rows = table::table(self.served, items, list_meta, include, version, now);
                Ok(table_response(version, &rows))
            }
            None => Ok(json_response(StatusCode::OK, whole)),
        }
    }

    /// Who writes, and whether for real (dryRun is read only by writes).
    fn write(&self, kind: OptionsKind) -> ApiResult<Write<'_>> {
        Ok(Write::new(
            self.manager,
            options::dry_run(self.query, kind)?,
        ))
    }
}

async fn serve(registry: &Registry, request: Request<'_>) -> ApiResult<Response> {
    let Request {
        method,
        route,
        query,
        headers,
        body,
    } = request;
    let route = route?;
    let served = route.resource;
    let resource = served.storage();
    let call = Call {
        registry,
        served,
        resource,
        target: Target {
            resource,
            namespace: route.namespace.as_deref(),
        },
        query,
        headers,
        body,
        content_type: headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or(""),
        validation: match method {
            Method::GET => field_validation::Mode::Ignore,
            _ => field_validation::Mode::from_query(query)?,
        },
        manager: field_manager(query, headers)?,
    };
    match (&method, route.name.as_deref(), route.subresource.as_deref()) {
        (&Method::GET, None, None) if options::flag(query, "watch")? => watch(&call).await,
        (&Method::GET, None, None) => list(&call).await,
        (&Method::GET, Some(name), Some("scale")) => {
            let scale = crate::subresources::get_scale(registry, &call.target, name).await?;
            Ok(json_response(StatusCode::OK, &scale))
        }
        (&Method::PUT, Some(name), Some("scale")) => put_scale(&call, name).await,
        (&Method::PATCH, Some(name), Some("scale")) => patch_scale(&call, name).await,
        (&Method::POST, Some(name), Some("binding")) => bind(&call, name).await,
        (&Method::POST, Some(name), Some("token")) if resource.kind == "ServiceAccount" => {
            let namespace = route.namespace.as_deref().unwrap_or("default");
            token_request(&call, namespace, name).await
        }
        (&Method::POST, Some(name), Some("eviction")) => {
            let eviction = crate::object::parse_request_body(call.content_type, body)?;
            let status = crate::subresources::evict(registry, &call.target, name, eviction).await?;
            Ok(json_response(StatusCode::CREATED, &status))
        }
        (&Method::GET, Some(name), Some("log"))
            if resource.kind == "Pod" && resource.group.is_empty() =>
        {
            crate::pod_logs::logs(registry, &call.target, name, query).await
        }
        (&Method::GET, Some(name), Some("proxy")) if resource.kind == "Node" => {
            crate::node_proxy::get(registry, name, &route.rest, query).await
        }
        (_, Some(_), Some("proxy")) if resource.kind == "Node" => Err(ApiError::new(
            405,
            "MethodNotAllowed",
            format!("the server does not allow this method on the requested resource: {method} on nodes/proxy"),
        )),
        (&Method::GET, Some(name), None | Some("status")) => get_one(&call, name).await,
        (&Method::POST, None, None) => create(&call).await,
        (&Method::PUT, Some(name), sub @ (None | Some("status") | Some("finalize"))) => {
            update(&call, name, sub).await
        }
        (&Method::PATCH, Some(name), sub @ (None | Some("status"))) => {
            patch(&call, name, sub).await
        }
        (&Method::DELETE, Some(name), None) => {
            let options = options::delete_options(query, body)?;
            let deleted = registry.delete(&call.target, name, &options).await?;
            Ok(json_response(
                StatusCode::OK,
                &convert::outgoing(served, deleted),
            ))
        }
        (&Method::DELETE, None, None) => delete_collection(&call).await,
        (method, _, _) => Err(ApiError::method_not_allowed(format!(
            "the server does not allow this method on the requested resource ({} {})",
            method.as_str(),
            resource.plural
        ))),
    }
}

/// `GET` of a collection with `watch=true`: one event per line.
async fn watch(call: &Call<'_>) -> ApiResult<Response> {
    let (query, served) = (call.query, call.served);
    let options = WatchOptions {
        list: options::list_options(call.resource, query, true)?,
        allow_bookmarks: options::flag(query, "allowWatchBookmarks")?,
        timeout: options::count(query, "timeoutSeconds")?
            .map(|t| Duration::from_secs(t.unsigned_abs())),
        send_initial_events: options::flag(query, "sendInitialEvents")?,
        table: render_as(call.headers, query)?,
        convert: convert::watch_converter(served),
    };
    let stream = crate::watch::start(call.registry, &call.target, options).await?;
    // Each event is one line.
    let (group, version, kind) = (served.group, served.version, served.kind);
    let stream = futures::StreamExt::inspect(stream, move |chunk| {
        if let Ok(bytes) = chunk {
            let events = bytes.iter().filter(|b| **b == b'\n').count() as u64;
            if events > 0 {
                crate::metrics::watch_events_sent(group, version, kind, events);
            }
        }
    });
    Ok((
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, "application/json"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        Body::from_stream(stream),
    )
        .into_response())
}

/// `GET` of a collection: from the watch cache's bytes when it can, as a
/// Table when asked.
async fn list(call: &Call<'_>) -> ApiResult<Response> {
    let (registry, served, query) = (call.registry, call.served, call.query);
    let options = options::list_options(call.resource, query, false)?;
    let plain = render_as(call.headers, query)?.is_none() && std::ptr::eq(served, call.resource);
    if plain {
        // From the watch cache, without parsing each object.
        if let Some(body) = registry.list_json(&call.target, &options).await? {
            let body = match body {
                ListJson::Whole(bytes) => Body::from(bytes),
                ListJson::Chunks(chunks) => Body::from_stream(futures::stream::iter(
                    chunks.map(Ok::<_, std::convert::Infallible>),
                )),
            };
            return Ok((
                StatusCode::OK,
                [(header::CONTENT_TYPE, "application/json")],
                body,
            )
                .into_response());
        }
    }
    let list = registry.list(&call.target, &options).await?;
    let list = convert::outgoing(served, list);
    let items = list["items"].as_array().map(Vec::as_slice).unwrap_or(&[]);
    call.reply_read(&list, items, Some(&list["metadata"]))
}

/// `GET` of one object (or its status), as a Table when asked.
async fn get_one(call: &Call<'_>, name: &str) -> ApiResult<Response> {
    let at = call.query.get("resourceVersion").map_or("", String::as_str);
    let object = call.registry.get_at(&call.target, name, at).await?;
    let object = convert::outgoing(call.served, object);
    call.reply_read(&object, std::slice::from_ref(&object), None)
}

async fn put_scale(call: &Call<'_>, name: &str) -> ApiResult<Response> {
    let scale = crate::object::parse_request_body(call.content_type, call.body)?;
    let write = call.write(OptionsKind::Update)?;
    let scale =
        crate::subresources::put_scale(call.registry, &call.target, name, scale, &write).await?;
    Ok(json_response(StatusCode::OK, &scale))
}

async fn patch_scale(call: &Call<'_>, name: &str) -> ApiResult<Response> {
    let write = call.write(OptionsKind::Patch)?;
    let scale = crate::subresources::patch_scale(
        call.registry,
        &call.target,
        name,
        call.content_type,
        call.body,
        &write,
    )
    .await?;
    Ok(json_response(StatusCode::OK, &scale))
}

async fn bind(call: &Call<'_>, name: &str) -> ApiResult<Response> {
    let binding = crate::object::parse_request_body(call.content_type, call.body)?;
    let write = call.write(OptionsKind::Create)?;
    let status =
        crate::subresources::bind(call.registry, &call.target, name, binding, &write).await?;
    Ok(json_response(StatusCode::CREATED, &status))
}

/// `POST …/serviceaccounts/NAME/token` (TokenRequest).
async fn token_request(call: &Call<'_>, namespace: &str, name: &str) -> ApiResult<Response> {
    let request = if call.body.starts_with(crate::protobuf::MAGIC) {
        crate::object::protobuf_body(call.body)?
    } else {
        crate::object::parse_body(call.body)?
    };
    let token =
        crate::authn::token_request::create(call.registry, namespace, name, request).await?;
    Ok(json_response(StatusCode::CREATED, &token))
}

async fn create(call: &Call<'_>) -> ApiResult<Response> {
    let (object, warnings) = call.body_object()?;
    let write = call.write(OptionsKind::Create)?;
    let created = call.registry.create(&call.target, object, &write).await?;
    let created = convert::outgoing(call.served, created);
    Ok(warned_response(StatusCode::CREATED, &created, &warnings))
}

async fn update(call: &Call<'_>, name: &str, sub: Option<&str>) -> ApiResult<Response> {
    let (object, warnings) = call.body_object()?;
    let write = call.write(OptionsKind::Update)?;
    let updated = call
        .registry
        .update(&call.target, name, object, sub, &write)
        .await?;
    let updated = convert::outgoing(call.served, updated);
    Ok(warned_response(StatusCode::OK, &updated, &warnings))
}

async fn patch(call: &Call<'_>, name: &str, sub: Option<&str>) -> ApiResult<Response> {
    let (served, validation, content_type, query) =
        (call.served, call.validation, call.content_type, call.query);
    // Fields given twice in the patch itself, then unknown fields of the
    // patched object.
    let duplicates = match validation {
        field_validation::Mode::Ignore => Vec::new(),
        _ => field_validation::duplicate_fields(call.body),
    };
    let warnings = std::sync::Mutex::new(Vec::new());
    let check = |object: &Value| {
        let mut found: Vec<String> = duplicates
            .iter()
            .map(|f| format!("duplicate field {}", skiff_machinery::quote::go_quote(f)))
            .collect();
        found.extend(field_validation::check(served, validation, object, None)?);
        if validation == field_validation::Mode::Strict && !found.is_empty() {
            return Err(crate::validation::strict_decoding_error(served, &found));
        }
        *warnings.lock().unwrap_or_else(|e| e.into_inner()) = found;
        Ok(())
    };
    if crate::patch::is_apply(content_type)
        && query.get("fieldManager").is_none_or(|m| m.is_empty())
    {
        return Err(ApiError::invalid(
            "meta.k8s.io",
            "PatchOptions",
            "patchoptions",
            "",
            vec![crate::status::Cause {
                reason: "FieldValueRequired",
                message: "Required value: is required for apply patch".into(),
                field: "fieldManager".into(),
            }],
        ));
    }
    let force = options::check_force(query, crate::patch::is_apply(content_type))?;
    let write = call.write(OptionsKind::Patch)?;
    let patch = crate::registry::Patch {
        content_type,
        body: call.body,
        check: &check,
        force,
    };
    let (patched, created) = convert::patch(
        call.registry,
        served,
        &call.target,
        name,
        &patch,
        sub,
        &write,
    )
    .await?;
    let warnings = warnings.into_inner().unwrap_or_else(|e| e.into_inner());
    let code = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok(warned_response(code, &patched, &warnings))
}

async fn delete_collection(call: &Call<'_>) -> ApiResult<Response> {
    let options = options::delete_options(call.query, call.body)?;
    let list = options::list_options(call.resource, call.query, false)?;
    let deleted = call
        .registry
        .delete_collection(&call.target, &list, &options)
        .await?;
    Ok(json_response(
        StatusCode::OK,
        &convert::outgoing(call.served, deleted),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The route of a GET of `path`, as the router works it out from the
    /// request's info; `None` for a discovery path.
    fn route(path: &str) -> Option<ApiResult<Route>> {
        let info = RequestInfo::of(&Method::GET, &path.parse().unwrap());
        info.resource.map(|info| route_of(&info))
    }

    fn names(path: &str) -> (&'static str, Option<String>, Option<String>, Option<String>) {
        let route = route(path).expect("a resource path").unwrap();
        (
            route.resource.plural,
            route.namespace,
            route.name,
            route.subresource,
        )
    }

    #[test]
    fn paths_name_resources_as_kubernetes_does() {
        let some = |s: &str| Some(s.to_string());
        assert_eq!(
            names("/api/v1/namespaces/default/pods/web"),
            ("pods", some("default"), some("web"), None)
        );
        assert_eq!(
            names("/api/v1/namespaces/default"),
            ("namespaces", None, some("default"), None)
        );
        assert_eq!(
            names("/api/v1/namespaces/default/status"),
            ("namespaces", None, some("default"), some("status"))
        );
        assert_eq!(
            names("/apis/apps/v1/deployments"),
            ("deployments", None, None, None)
        );
        assert_eq!(
            names("/api/v1/nodes/n1/status"),
            ("nodes", None, some("n1"), some("status"))
        );
        let not_found = |path: &str| route(path).expect("a resource path").unwrap_err().code;
        // Not served; a cluster-scoped resource under a namespace; not a
        // subresource of pods; something after the subresource.
        assert_eq!(not_found("/api/v1/namespaces/default/widgets"), 404);
        assert_eq!(not_found("/api/v1/namespaces/default/nodes/n1"), 404);
        assert_eq!(not_found("/api/v1/namespaces/default/pods/web/scale"), 404);
        assert_eq!(
            not_found("/api/v1/namespaces/default/pods/web/status/more"),
            404
        );
        assert!(route("/api/v1").is_none());
        assert!(route("/apis/apps/v1").is_none());
    }

    /// The roots answer with and without a trailing slash, as Kubernetes'
    /// do, and `/openapi/v2` is served.
    /// What the router answers from the request's info alone: a list, a
    /// discovery document, a 405 for a method no resource takes, and a 404
    /// for the deprecated `/watch/` paths and for paths naming nothing.
    #[tokio::test]
    async fn the_router_answers_from_the_request_info() {
        let (registry, _dir) = crate::registry::test_registry().await;
        let app = router(registry);
        let status = |method: Method, path: &'static str| {
            let app = app.clone();
            async move {
                let request = axum::extract::Request::builder()
                    .method(method)
                    .uri(path)
                    .body(Body::empty())
                    .unwrap();
                app.oneshot(request).await.unwrap().status()
            }
        };
        assert_eq!(
            status(Method::GET, "/api/v1/namespaces/default/pods").await,
            StatusCode::OK
        );
        assert_eq!(status(Method::GET, "/apis/apps/v1").await, StatusCode::OK);
        assert_eq!(
            status(Method::OPTIONS, "/api/v1/namespaces/default/pods").await,
            StatusCode::METHOD_NOT_ALLOWED
        );
        assert_eq!(
            status(Method::GET, "/api/v1/watch/namespaces/default/pods").await,
            StatusCode::NOT_FOUND
        );
        assert_eq!(
            status(
                Method::GET,
                "/api/v1/namespaces/default/pods/web/status/more"
            )
            .await,
            StatusCode::NOT_FOUND
        );
    }

    /// schemathesis' unsupported_method check: a 405 came without the
    /// `Allow` header RFC 9110 requires.
    #[tokio::test]
    async fn method_not_allowed_names_the_allowed_methods() {
        let (registry, _dir) = crate::registry::test_registry().await;
        let app = router(registry);
        let allow = |method: Method, path: &'static str| {
            let app = app.clone();
            async move {
                let request = axum::extract::Request::builder()
                    .method(method)
                    .uri(path)
                    .body(Body::empty())
                    .unwrap();
                let response = app.oneshot(request).await.unwrap();
                assert_eq!(response.status(), StatusCode::METHOD_NOT_ALLOWED);
                let allow = response.headers().get(header::ALLOW).cloned();
                allow.map(|v| v.to_str().unwrap().to_string())
            }
        };
        let collection = "/api/v1/namespaces/default/configmaps";
        assert_eq!(
            allow(Method::TRACE, collection).await.as_deref(),
            Some("GET, POST, DELETE")
        );
        assert_eq!(
            allow(Method::POST, "/api/v1/namespaces/default/configmaps/c")
                .await
                .as_deref(),
            Some("GET, PUT, PATCH, DELETE")
        );
        assert_eq!(
            allow(Method::DELETE, "/api/v1/namespaces/default/pods/p/status")
                .await
                .as_deref(),
            Some("GET, PUT, PATCH")
        );
    }

    #[tokio::test]
    async fn roots_answer_with_a_trailing_slash_too() {
        let (registry, _dir) = crate::registry::test_registry().await;
        let app = router(registry);
        let get = |path: &'static str| {
            let app = app.clone();
            async move {
                let request = axum::extract::Request::get(path)
                    .body(Body::empty())
                    .unwrap();
                let response = app.oneshot(request).await.unwrap();
                let status = response.status();
                let body = axum::body::to_bytes(response.into_body(), usize::MAX)
                    .await
                    .unwrap();
                (status, body)
            }
        };
        for (plain, slashed) in [
            ("/version", "/version/"),
            ("/api", "/api/"),
            ("/apis", "/apis/"),
        ] {
            let (status, body) = get(plain).await;
            assert_eq!(status, StatusCode::OK, "{plain}");
            assert_eq!(get(slashed).await, (StatusCode::OK, body), "{slashed}");
        }
        let (status, body) = get("/openapi/v2").await;
        assert_eq!(status, StatusCode::OK);
        let swagger: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(swagger["swagger"], "2.0");
    }
}
