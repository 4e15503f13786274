//! Discovery: `/version` and what the server serves — `/api`, `/apis` (legacy
//! and aggregated `apidiscovery.k8s.io`), `/api/v1`, `/apis/{group}/{version}`
//! — all derived from the resource table. Not the REST handlers themselves.

use std::cmp::Reverse;

use axum::extract::Path;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use serde_json::{json, Value};

use crate::openapi;
use crate::resources::{self, ResourceType};
use crate::status::ApiError;

/// Verbs of every top-level resource, sorted as Kubernetes lists them.
const RESOURCE_VERBS: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

/// Every discovery and OpenAPI path, to be merged into the main router.
pub fn router() -> Router {
    Router::new()
        // Each root also with a trailing slash, as Kubernetes serves them
        // (the Python client and kr8s ask for `/version/`).
        .route("/version", get(version_response))
        .route("/version/", get(version_response))
        .route("/api", get(core_root))
        .route("/api/", get(core_root))
        .route("/apis", get(groups_root))
        .route("/apis/", get(groups_root))
        .route(
            "/api/{version}",
            get(|Path(version): Path<String>| async move { resource_list_response("", &version) }),
        )
        .route(
            "/apis/{group}",
            get(|Path(group): Path<String>| async move {
                match api_group(&group) {
                    Some(body) => json_response(body, "application/json"),
                    None => not_found(),
                }
            }),
        )
        .route(
            "/apis/{group}/{version}",
            get(
                |Path((group, version)): Path<(String, String)>| async move {
                    resource_list_response(&group, &version)
                },
            ),
        )
        .merge(openapi::router())
}

async fn version_response() -> Response {
    json_response(version_info(), "application/json")
}

/// The `version.Info` of `/version`: the version of the API types served
/// ([`skiff_machinery::version`]). The kubectl dispatcher picks its client binary
/// by the minor.
pub fn version_info() -> Value {
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    };
    json!({
        "major": skiff_machinery::version::MAJOR,
        "minor": skiff_machinery::version::MINOR,
        "gitVersion": skiff_machinery::version::GIT_VERSION,
        "gitCommit": option_env!("SKIFF_GIT_COMMIT").unwrap_or("unknown"),
        "gitTreeState": option_env!("SKIFF_GIT_TREE_STATE").unwrap_or("clean"),
        "buildDate": option_env!("SKIFF_BUILD_DATE").unwrap_or("1970-01-01T00:00:00Z"),
        "goVersion": "n/a (rust)",
        "compiler": "rustc",
        "platform": format!("{}/{arch}", std::env::consts::OS),
    })
}

/// Which form of `/api` and `/apis` a request asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DiscoveryFormat {
    /// `APIVersions` / `APIGroupList`.
    Legacy,
    /// `APIGroupDiscoveryList` of `apidiscovery.k8s.io/v2` or `/v2beta1`.
    Aggregated(AggregatedVersion),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AggregatedVersion {
    V2,
    V2beta1,
}

impl AggregatedVersion {
    fn name(self) -> &'static str {
        match self {
            AggregatedVersion::V2 => "v2",
            AggregatedVersion::V2beta1 => "v2beta1",
        }
    }

    /// The response Content-Type; kubectl recognises aggregated discovery
    /// by this alone.
    pub fn content_type(self) -> &'static str {
        match self {
            AggregatedVersion::V2 => {
                "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
            }
            AggregatedVersion::V2beta1 => {
                "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList"
            }
        }
    }
}

/// Aggregated discovery when the Accept header names
/// `as=APIGroupDiscoveryList` of group `apidiscovery.k8s.io` (v2 preferred
/// over v2beta1, wherever each appears); the legacy form otherwise.
pub fn negotiate(request: &HeaderMap) -> DiscoveryFormat {
    let offered: Vec<String> = crate::accept::json_ranges(request)
        .into_iter()
        .filter(|r| r.group == "apidiscovery.k8s.io" && r.kind == "APIGroupDiscoveryList")
        .map(|r| r.version)
        .collect();
    if offered.iter().any(|v| v == "v2") {
        DiscoveryFormat::Aggregated(AggregatedVersion::V2)
    } else if offered.iter().any(|v| v == "v2beta1") {
        DiscoveryFormat::Aggregated(AggregatedVersion::V2beta1)
    } else {
        DiscoveryFormat::Legacy
    }
}

async fn core_root(request: HeaderMap) -> Response {
    let response = match negotiate(&request) {
        DiscoveryFormat::Aggregated(v) => {
            json_response(aggregated_discovery(true, v), v.content_type())
        }
        DiscoveryFormat::Legacy => {
            let address = request
                .get(header::HOST)
                .and_then(|h| h.to_str().ok())
                .unwrap_or("127.0.0.1:6443");
            json_response(api_versions(address), "application/json")
        }
    };
    vary_on_accept(response)
}

async fn groups_root(request: HeaderMap) -> Response {
    let response = match negotiate(&request) {
        DiscoveryFormat::Aggregated(v) => {
            json_response(aggregated_discovery(false, v), v.content_type())
        }
        DiscoveryFormat::Legacy => json_response(api_group_list(), "application/json"),
    };
    vary_on_accept(response)
}

fn resource_list_response(group: &str, version: &str) -> Response {
    match api_resource_list(group, version) {
        Some(body) => json_response(body, "application/json"),
        None => not_found(),
    }
}

fn json_response(body: Value, content_type: &'static str) -> Response {
    let bytes = serde_json::to_vec(&body).unwrap_or_default();
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, content_type)],
        bytes,
    )
        .into_response()
}

fn vary_on_accept(mut response: Response) -> Response {
    response
        .headers_mut()
        .insert(header::VARY, HeaderValue::from_static("Accept"));
    response
}

fn not_found() -> Response {
    ApiError::new(
        404,
        "NotFound",
        "the server could not find the requested resource",
    )
    .into_response()
}

/// Legacy `GET /api`.
pub fn api_versions(server_address: &str) -> Value {
    let versions: Vec<&str> = core_versions();
    json!({
        "kind": "APIVersions",
        "versions": versions,
        "serverAddressByClientCIDRs": [{ "clientCIDR": "0.0.0.0/0", "serverAddress": server_address }],
    })
}

/// Legacy `GET /apis`: every non-core group.
pub fn api_group_list() -> Value {
    let groups: Vec<Value> = served_groups()
        .iter()
        .map(|(g, vs)| group_json(g, vs))
        .collect();
    json!({ "kind": "APIGroupList", "apiVersion": "v1", "groups": groups })
}

/// Legacy `GET /apis/{group}`, if the group is served.
pub fn api_group(group: &str) -> Option<Value> {
    let (name, versions) = served_groups().into_iter().find(|(g, _)| *g == group)?;
    let mut body = group_json(name, &versions);
    body["kind"] = json!("APIGroup");
    body["apiVersion"] = json!("v1");
    Some(body)
}

fn group_json(group: &str, versions: &[&str]) -> Value {
    let entry = |v: &str| json!({ "groupVersion": format!("{group}/{v}"), "version": v });
    json!({
        "name": group,
        "versions": versions.iter().map(|v| entry(v)).collect::<Vec<_>>(),
        "preferredVersion": entry(versions[0]),
    })
}

/// Legacy `GET /api/v1` and `GET /apis/{group}/{version}`: one entry per
/// resource and one per subresource (`pods/eviction`, …), or `None` when
/// nothing is served at that group-version.
pub fn api_resource_list(group: &str, version: &str) -> Option<Value> {
    let served: Vec<&ResourceType> = served_at(group, version).collect();
    if served.is_empty() && not_stored_at(group, version).next().is_none() {
        return None;
    }
    let mut entries = Vec::new();
    for r in not_stored_at(group, version) {
        entries.push(json!({
            "name": r.plural,
            "singularName": r.kind.to_ascii_lowercase(),
            "namespaced": r.namespaced,
            "kind": r.kind,
            "verbs": r.verbs,
        }));
    }
    for r in served {
        let mut entry = json!({
            "name": r.plural,
            "singularName": r.singular,
            "namespaced": r.namespaced,
            "kind": r.kind,
            "verbs": RESOURCE_VERBS,
        });
        if !r.short_names.is_empty() {
            entry["shortNames"] = json!(r.short_names);
        }
        if !r.categories.is_empty() {
            entry["categories"] = json!(r.categories);
        }
        entries.push(entry);
        for name in r.subresources {
            let sub = Subresource::of(r, name);
            let mut entry = json!({
                "name": format!("{}/{name}", r.plural),
                "singularName": "",
                "namespaced": r.namespaced,
                "kind": sub.kind,
                "verbs": sub.verbs,
            });
            // Set only when the subresource answers in another group-version.
            if (sub.group, sub.version) != (r.group, r.version) {
                entry["group"] = json!(sub.group);
                entry["version"] = json!(sub.version);
            }
            entries.push(entry);
        }
    }
    let group_version = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    Some(json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": entries,
    }))
}

/// The `APIGroupDiscoveryList` of `/api` (`core`) or of `/apis`.
pub fn aggregated_discovery(core: bool, format: AggregatedVersion) -> Value {
    let items: Vec<Value> = if core {
        vec![discovery_group("", &core_versions())]
    } else {
        served_groups()
            .iter()
            .map(|(g, vs)| discovery_group(g, vs))
            .collect()
    };
    json!({
        "kind": "APIGroupDiscoveryList",
        "apiVersion": format!("apidiscovery.k8s.io/{}", format.name()),
        "metadata": {},
        "items": items,
    })
}

fn discovery_group(group: &str, versions: &[&str]) -> Value {
    let versions: Vec<Value> = versions
        .iter()
        .map(|v| {
            let mut resources: Vec<Value> = served_at(group, v).map(discovery_resource).collect();
            for r in not_stored_at(group, v) {
                resources.push(json!({
                    "resource": r.plural,
                    "responseKind": { "group": r.group, "version": r.version, "kind": r.kind },
                    "scope": if r.namespaced { "Namespaced" } else { "Cluster" },
                    "singularResource": r.kind.to_ascii_lowercase(),
                    "verbs": r.verbs,
                }));
            }
            json!({ "version": v, "resources": resources, "freshness": "Current" })
        })
        .collect();
    json!({ "metadata": { "name": group }, "versions": versions })
}

fn discovery_resource(r: &ResourceType) -> Value {
    let subresources: Vec<Value> = r
        .subresources
        .iter()
        .map(|name| {
            let sub = Subresource::of(r, name);
            json!({
                "subresource": name,
                "responseKind": { "group": sub.group, "version": sub.version, "kind": sub.kind },
                "verbs": sub.verbs,
            })
        })
        .collect();
    let mut entry = json!({
        "resource": r.plural,
        "responseKind": { "group": r.group, "version": r.version, "kind": r.kind },
        "scope": if r.namespaced { "Namespaced" } else { "Cluster" },
        "singularResource": r.singular,
        "verbs": RESOURCE_VERBS,
    });
    if !r.short_names.is_empty() {
        entry["shortNames"] = json!(r.short_names);
    }
    if !r.categories.is_empty() {
        entry["categories"] = json!(r.categories);
    }
    if !subresources.is_empty() {
        entry["subresources"] = json!(subresources);
    }
    entry
}

/// The group, version and kind of what subresource `name` of `r` takes
/// and answers: `r`'s own (status), or another type (a pod's `binding`
/// takes a Binding).
pub(crate) fn subresource_kind(
    r: &ResourceType,
    name: &str,
) -> (&'static str, &'static str, &'static str) {
    let sub = Subresource::of(r, name);
    (sub.group, sub.version, sub.kind)
}

/// What a subresource answers with and which verbs it takes.
struct Subresource {
    group: &'static str,
    version: &'static str,
    kind: &'static str,
    verbs: &'static [&'static str],
}

impl Subresource {
    fn of(r: &ResourceType, name: &str) -> Self {
        let own = |verbs| Subresource {
            group: r.group,
            version: r.version,
            kind: r.kind,
            verbs,
        };
        let other = |group, version, kind, verbs| Subresource {
            group,
            version,
            kind,
            verbs,
        };
        match name {
            "status" | "ephemeralcontainers" | "resize" => own(&["get", "patch", "update"]),
            "scale" => other("autoscaling", "v1", "Scale", &["get", "patch", "update"]),
            // kubectl drain looks for exactly this entry to evict instead of delete.
            "eviction" => other("policy", "v1", "Eviction", &["create"]),
            "binding" => other("", "v1", "Binding", &["create"]),
            "token" => other("authentication.k8s.io", "v1", "TokenRequest", &["create"]),
            "finalize" => own(&["update"]),
            "log" => other("", "v1", "Pod", &["get"]),
            "exec" => other("", "v1", "PodExecOptions", &["create", "get"]),
            "attach" => other("", "v1", "PodAttachOptions", &["create", "get"]),
            "portforward" => other("", "v1", "PodPortForwardOptions", &["create", "get"]),
            "proxy" => other("", "v1", "NodeProxyOptions", &["get"]),
            _ => own(&["get"]),
        }
    }
}

/// A resource served beside the table's, storing nothing: the access and
/// identity reviews (`kubectl auth can-i`, `kubectl auth whoami`), which
/// take only `create`, and the resource metrics API (`kubectl top`), read
/// from the kubelets.
#[derive(Debug, Clone, Copy)]
pub struct NotStored {
    pub group: &'static str,
    pub version: &'static str,
    pub plural: &'static str,
    pub kind: &'static str,
    pub namespaced: bool,
    pub verbs: &'static [&'static str],
}

const fn review(plural: &'static str, kind: &'static str, group: &'static str) -> NotStored {
    NotStored {
        group,
        version: "v1",
        plural,
        kind,
        namespaced: false,
        verbs: &["create"],
    }
}

const fn resource_metrics(plural: &'static str, kind: &'static str, namespaced: bool) -> NotStored {
    NotStored {
        group: crate::resource_metrics::GROUP,
        version: crate::resource_metrics::VERSION,
        plural,
        kind,
        namespaced,
        verbs: crate::resource_metrics::VERBS,
    }
}

pub const NOT_STORED: &[NotStored] = &[
    review(
        "selfsubjectaccessreviews",
        "SelfSubjectAccessReview",
        "authorization.k8s.io",
    ),
    review(
        "selfsubjectrulesreviews",
        "SelfSubjectRulesReview",
        "authorization.k8s.io",
    ),
    review(
        "subjectaccessreviews",
        "SubjectAccessReview",
        "authorization.k8s.io",
    ),
    NotStored {
        namespaced: true,
        ..review(
            "localsubjectaccessreviews",
            "LocalSubjectAccessReview",
            "authorization.k8s.io",
        )
    },
    review(
        "selfsubjectreviews",
        "SelfSubjectReview",
        "authentication.k8s.io",
    ),
    resource_metrics("nodes", "NodeMetrics", false),
    resource_metrics("pods", "PodMetrics", true),
];

fn not_stored_at<'a>(
    group: &'a str,
    version: &'a str,
) -> impl Iterator<Item = &'static NotStored> + 'a {
    NOT_STORED
        .iter()
        .filter(move |r| r.group == group && r.version == version)
}

fn served_at<'a>(
    group: &'a str,
    version: &'a str,
) -> impl Iterator<Item = &'static ResourceType> + 'a {
    resources::served().filter(move |r| r.group == group && r.version == version)
}

fn core_versions() -> Vec<&'static str> {
    let mut versions: Vec<&str> = resources::group_versions()
        .into_iter()
        .filter(|(g, _)| g.is_empty())
        .map(|(_, v)| v)
        .collect();
    versions.sort_by_key(|v| version_priority(v));
    versions
}

/// The non-core groups in table order, each with its versions, preferred first.
fn served_groups() -> Vec<(&'static str, Vec<&'static str>)> {
    let mut groups: Vec<(&str, Vec<&str>)> = Vec::new();
    let not_stored = NOT_STORED.iter().map(|r| (r.group, r.version));
    for (group, version) in resources::group_versions().into_iter().chain(not_stored) {
        if group.is_empty() {
            continue;
        }
        match groups.iter_mut().find(|(g, _)| *g == group) {
            Some((_, versions)) if versions.contains(&version) => {}
            Some((_, versions)) => versions.push(version),
            None => groups.push((group, vec![version])),
        }
    }
    for (_, versions) in &mut groups {
        versions.sort_by_key(|v| version_priority(v));
    }
    groups
}

/// A sort key putting versions in Kubernetes' order of preference: GA
/// before beta before alpha, higher numbers first (`v2`, `v1`, `v1beta2`,
/// `v1beta1`, `v1alpha1`), anything else last, by name.
fn version_priority(version: &str) -> (u8, Reverse<u64>, Reverse<u64>, String) {
    let other = (3, Reverse(0), Reverse(0), version.to_string());
    let Some(rest) = version.strip_prefix('v') else {
        return other;
    };
    let digits = rest
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(rest.len());
    let Ok(major) = rest[..digits].parse::<u64>() else {
        return other;
    };
    let tail = &rest[digits..];
    let (class, number) = if tail.is_empty() {
        (0, "0")
    } else if let Some(n) = tail.strip_prefix("beta") {
        (1, n)
    } else if let Some(n) = tail.strip_prefix("alpha") {
        (2, n)
    } else {
        return other;
    };
    match number.parse::<u64>() {
        Ok(minor) => (class, Reverse(major), Reverse(minor), String::new()),
        Err(_) => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::{to_bytes, Body};
    use axum::http::Request;
    use tower::ServiceExt;

    const KUBECTL_ACCEPT: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";

    async fn fetch(uri: &str, accept: Option<&str>) -> (StatusCode, String, Value) {
        let mut request = Request::get(uri);
        if let Some(accept) = accept {
            request = request.header(header::ACCEPT, accept);
        }
        let response = router()
            .oneshot(request.body(Body::empty()).unwrap())
            .await
            .unwrap();
        let status = response.status();
        let content_type = response
            .headers()
            .get(header::CONTENT_TYPE)
            .map(|v| v.to_str().unwrap().to_string())
            .unwrap_or_default();
        let body = to_bytes(response.into_body(), usize::MAX).await.unwrap();
        (status, content_type, serde_json::from_slice(&body).unwrap())
    }

    fn headers(accept: &str) -> HeaderMap {
        let mut map = HeaderMap::new();
        map.insert(header::ACCEPT, HeaderValue::from_str(accept).unwrap());
        map
    }

    #[tokio::test]
    async fn version_reports_the_served_minor_with_every_field() {
        let (status, content_type, body) = fetch("/version?timeout=5s", None).await;
        assert_eq!(
            (status, content_type.as_str()),
            (StatusCode::OK, "application/json")
        );
        assert_eq!(
            (body["major"].as_str(), body["minor"].as_str()),
            (Some("1"), Some("33"))
        );
        assert_eq!(body["gitVersion"], "v1.33.0+skiff");
        let (status, _, slashed) = fetch("/version/", None).await;
        assert_eq!((status, &slashed), (StatusCode::OK, &body));
        for field in [
            "gitCommit",
            "gitTreeState",
            "buildDate",
            "goVersion",
            "compiler",
            "platform",
        ] {
            assert!(body[field].is_string(), "{field}");
        }
    }

    #[test]
    fn accept_negotiation() {
        let aggregated = |v| DiscoveryFormat::Aggregated(v);
        assert_eq!(
            negotiate(&headers(KUBECTL_ACCEPT)),
            aggregated(AggregatedVersion::V2)
        );
        let beta_first = "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList, application/json; g=apidiscovery.k8s.io; v=v2; as=APIGroupDiscoveryList";
        assert_eq!(
            negotiate(&headers(beta_first)),
            aggregated(AggregatedVersion::V2)
        );
        let beta_only = "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";
        assert_eq!(
            negotiate(&headers(beta_only)),
            aggregated(AggregatedVersion::V2beta1)
        );
        assert_eq!(
            negotiate(&headers("application/json, */*")),
            DiscoveryFormat::Legacy
        );
        assert_eq!(negotiate(&HeaderMap::new()), DiscoveryFormat::Legacy);
        let refused = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList;q=0";
        assert_eq!(negotiate(&headers(refused)), DiscoveryFormat::Legacy);
        let other_group = "application/json;g=meta.k8s.io;v=v2;as=APIGroupDiscoveryList";
        assert_eq!(negotiate(&headers(other_group)), DiscoveryFormat::Legacy);
    }

    #[tokio::test]
    async fn aggregated_core_discovery_has_the_exact_content_type() {
        let (status, content_type, body) = fetch("/api?timeout=32s", Some(KUBECTL_ACCEPT)).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(
            content_type,
            "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
        );
        assert_eq!(
            (body["kind"].as_str(), body["apiVersion"].as_str()),
            (
                Some("APIGroupDiscoveryList"),
                Some("apidiscovery.k8s.io/v2")
            )
        );
        let items = body["items"].as_array().unwrap();
        assert_eq!(items.len(), 1);
        assert_eq!(items[0]["metadata"]["name"], "");
        let version = &items[0]["versions"][0];
        assert_eq!(
            (version["version"].as_str(), version["freshness"].as_str()),
            (Some("v1"), Some("Current"))
        );
        let pods = version["resources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["resource"] == "pods")
            .unwrap();
        assert_eq!(
            pods["responseKind"],
            json!({"group": "", "version": "v1", "kind": "Pod"})
        );
        assert_eq!(pods["scope"], "Namespaced");
        assert_eq!(pods["singularResource"], "pod");
        assert_eq!(pods["shortNames"], json!(["po"]));
        assert_eq!(pods["categories"], json!(["all"]));
        assert!(pods["verbs"].as_array().unwrap().contains(&json!("patch")));
        let eviction = pods["subresources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["subresource"] == "eviction")
            .unwrap();
        assert_eq!(
            eviction["responseKind"],
            json!({"group": "policy", "version": "v1", "kind": "Eviction"})
        );
        let nodes = version["resources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["resource"] == "nodes")
            .unwrap();
        assert_eq!(nodes["scope"], "Cluster");
    }

    #[tokio::test]
    async fn aggregated_group_discovery_lists_every_group() {
        let beta = "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";
        let (_, content_type, body) = fetch("/apis", Some(beta)).await;
        assert_eq!(
            content_type,
            "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList"
        );
        assert_eq!(body["apiVersion"], "apidiscovery.k8s.io/v2beta1");
        let names: Vec<&str> = body["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["metadata"]["name"].as_str().unwrap())
            .collect();
        assert!(names.contains(&"apps") && names.contains(&"policy") && !names.contains(&""));
        let apps = body["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["metadata"]["name"] == "apps")
            .unwrap();
        let deployments = apps["versions"][0]["resources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["resource"] == "deployments")
            .unwrap();
        let scale = deployments["subresources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["subresource"] == "scale")
            .unwrap();
        assert_eq!(scale["responseKind"]["kind"], "Scale");
        assert_eq!(deployments["shortNames"], json!(["deploy"]));
    }

    #[tokio::test]
    async fn legacy_roots() {
        let (status, content_type, body) = fetch("/api", Some("application/json, */*")).await;
        assert_eq!(
            (status, content_type.as_str()),
            (StatusCode::OK, "application/json")
        );
        assert_eq!(body["kind"], "APIVersions");
        assert_eq!(body["versions"], json!(["v1"]));
        assert_eq!(
            body["serverAddressByClientCIDRs"][0]["clientCIDR"],
            "0.0.0.0/0"
        );

        let (_, content_type, body) = fetch("/apis", None).await;
        assert_eq!(content_type, "application/json");
        assert_eq!(body["kind"], "APIGroupList");
        let apps = body["groups"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["name"] == "apps")
            .unwrap();
        assert_eq!(
            apps["versions"],
            json!([{"groupVersion": "apps/v1", "version": "v1"}])
        );
        assert_eq!(apps["preferredVersion"]["groupVersion"], "apps/v1");

        let (status, _, body) = fetch("/apis/apps", None).await;
        assert_eq!(
            (status, body["kind"].as_str()),
            (StatusCode::OK, Some("APIGroup"))
        );
    }

    #[tokio::test]
    async fn legacy_resource_lists_carry_subresources() {
        let (status, _, body) = fetch("/api/v1", None).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(
            (body["kind"].as_str(), body["groupVersion"].as_str()),
            (Some("APIResourceList"), Some("v1"))
        );
        let find = |name: &str| {
            body["resources"]
                .as_array()
                .unwrap()
                .iter()
                .find(|r| r["name"] == name)
                .cloned()
                .unwrap()
        };
        let pods = find("pods");
        assert_eq!(
            (
                pods["singularName"].as_str(),
                pods["kind"].as_str(),
                pods["namespaced"].as_bool()
            ),
            (Some("pod"), Some("Pod"), Some(true))
        );
        assert_eq!(pods["verbs"], json!(RESOURCE_VERBS));
        assert_eq!(pods["shortNames"], json!(["po"]));
        let eviction = find("pods/eviction");
        assert_eq!(
            (
                eviction["group"].as_str(),
                eviction["version"].as_str(),
                eviction["kind"].as_str()
            ),
            (Some("policy"), Some("v1"), Some("Eviction"))
        );
        let status_entry = find("pods/status");
        assert_eq!(status_entry["kind"], "Pod");
        assert!(status_entry.get("group").is_none());
        assert!(find("namespaces").get("categories").is_none());

        let (_, _, body) = fetch("/apis/apps/v1", None).await;
        assert_eq!(body["groupVersion"], "apps/v1");
        let scale = body["resources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == "deployments/scale")
            .unwrap();
        assert_eq!(
            (scale["group"].as_str(), scale["kind"].as_str()),
            (Some("autoscaling"), Some("Scale"))
        );
    }

    #[tokio::test]
    async fn unknown_group_versions_are_404_statuses() {
        for uri in ["/api/v2", "/apis/apps/v2", "/apis/nope/v1", "/apis/nope"] {
            let (status, content_type, body) = fetch(uri, None).await;
            assert_eq!(status, StatusCode::NOT_FOUND, "{uri}");
            assert_eq!(content_type, "application/json");
            assert_eq!(
                (body["kind"].as_str(), body["reason"].as_str()),
                (Some("Status"), Some("NotFound"))
            );
        }
    }

    #[tokio::test]
    async fn converted_versions_are_listed_after_the_preferred_one() {
        let (_, _, groups) = fetch("/apis", None).await;
        for (group, beta) in [
            ("batch", "batch/v1beta1"),
            ("scheduling.k8s.io", "scheduling.k8s.io/v1beta1"),
        ] {
            let entry = groups["groups"]
                .as_array()
                .unwrap()
                .iter()
                .find(|g| g["name"] == group)
                .unwrap();
            assert_eq!(entry["preferredVersion"]["version"], "v1", "{group}");
            assert_eq!(entry["versions"][0]["version"], "v1", "{group}");
            assert_eq!(entry["versions"][1]["groupVersion"], beta, "{group}");
        }
        let (_, content_type, aggregated) = fetch("/apis", Some(KUBECTL_ACCEPT)).await;
        assert!(content_type.contains("as=APIGroupDiscoveryList"));
        let batch = aggregated["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["metadata"]["name"] == "batch")
            .unwrap();
        let versions: Vec<&str> = batch["versions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v["version"].as_str().unwrap())
            .collect();
        assert_eq!(versions, ["v1", "v1beta1"]);
        let beta = &batch["versions"][1]["resources"];
        assert_eq!(
            beta.as_array().unwrap().len(),
            1,
            "only cronjobs at v1beta1"
        );
        assert_eq!(
            beta[0]["responseKind"],
            json!({"group": "batch", "version": "v1beta1", "kind": "CronJob"})
        );
        let (status, _, list) = fetch("/apis/scheduling.k8s.io/v1beta1", None).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(list["groupVersion"], "scheduling.k8s.io/v1beta1");
        assert_eq!(list["resources"][0]["kind"], "PriorityClass");
        let (status, _, list) = fetch("/apis/batch/v1beta1", None).await;
        assert_eq!(status, StatusCode::OK);
        let names: Vec<&str> = list["resources"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["cronjobs", "cronjobs/status"]);
    }

    #[test]
    fn versions_sort_by_preference() {
        let mut versions = vec![
            "v1alpha1", "v1beta1", "v1", "v2beta2", "v2", "v1beta2", "foo",
        ];
        versions.sort_by_key(|v| version_priority(v));
        assert_eq!(
            versions,
            ["v2", "v1", "v2beta2", "v1beta2", "v1beta1", "v1alpha1", "foo"]
        );
    }

    /// Serves the router and runs the real kubectl against it. Run with
    /// `cargo test -p skiff-apiserver kubectl_reads -- --ignored --nocapture`.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "needs kubectl on PATH"]
    async fn kubectl_reads_discovery_and_openapi() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let server = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, router()).await });
        let cache = tempfile::tempdir().unwrap();
        let manifest = cache.path().join("pod.yaml");
        std::fs::write(&manifest, "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\nspec:\n  containers:\n  - name: c\n    image: busybox\n").unwrap();
        let commands: [&[&str]; 5] = [
            &["version"],
            &["api-resources"],
            &["explain", "pods.spec.containers"],
            &["explain", "deployments.spec.replicas"],
            &["create", "-f", manifest.to_str().unwrap()],
        ];
        for args in commands {
            let output = tokio::process::Command::new("kubectl")
                .arg(format!("--server={server}"))
                .arg(format!("--cache-dir={}", cache.path().display()))
                .args(args)
                .output()
                .await
                .unwrap();
            println!(
                "$ kubectl {}\n{}{}",
                args.join(" "),
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            );
        }
    }
}
