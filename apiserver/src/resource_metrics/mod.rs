//! The resource metrics API, `metrics.k8s.io/v1beta1`, served by the API
//! server itself (what metrics-server serves elsewhere), so that `kubectl
//! top` works: NodeMetrics (`nodes`, cluster-scoped) and PodMetrics
//! (`pods`, namespaced), get and list only, read on each request from the
//! nodes' kubelet Summaries (`scrape`). Nothing is stored. Authorization is
//! the server's, as for every resource (RBAC on group `metrics.k8s.io`);
//! discovery lists the group beside the stored ones (`crate::discovery`).

pub mod scrape;
pub mod summary;

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::{header, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use axum::Router;
use serde_json::{json, Value};
use skiff_machinery::selectors::{FieldSelector, LabelSelector};

use crate::registry::{ListOptions, Registry, Target};
use crate::request_info::RequestInfo;
use crate::resources::{self, ResourceType};
use crate::status::{ApiError, ApiResult};
use scrape::Scraper;
use summary::{NodeUsage, Usage};

pub const GROUP: &str = "metrics.k8s.io";
pub const VERSION: &str = "v1beta1";
/// The verbs both resources take.
pub const VERBS: &[&str] = &["get", "list"];
/// What `window` reports: the Summary API does not say over how long the
/// kubelet averaged its CPU rate, so this is the kubelet's (cAdvisor's)
/// usual housekeeping interval.
pub const WINDOW: &str = "10s";

const API_VERSION: &str = "metrics.k8s.io/v1beta1";
const ROOT: &str = "/apis/metrics.k8s.io/v1beta1";

/// The two resources of the group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Node,
    Pod,
}

impl Kind {
    fn plural(self) -> &'static str {
        match self {
            Kind::Node => "nodes",
            Kind::Pod => "pods",
        }
    }

    fn kind(self) -> &'static str {
        match self {
            Kind::Node => "NodeMetrics",
            Kind::Pod => "PodMetrics",
        }
    }

    /// The resource metrics-server names in its NotFound messages.
    fn not_found_resource(self) -> &'static str {
        match self {
            Kind::Node => "nodemetrics",
            Kind::Pod => "podmetrics",
        }
    }
}

struct MetricsApi {
    registry: Registry,
    scraper: Scraper,
}

/// The group's routes (its discovery documents are `crate::discovery`'s).
pub fn router(registry: Registry) -> Router {
    let api = Arc::new(MetricsApi {
        scraper: Scraper::new(registry.kubelet_client().cloned()),
        registry,
    });
    Router::new()
        .route(&format!("{ROOT}/nodes"), any(list_nodes))
        .route(&format!("{ROOT}/nodes/{{name}}"), any(get_node))
        .route(&format!("{ROOT}/pods"), any(list_all_pods))
        .route(
            &format!("{ROOT}/namespaces/{{namespace}}/pods"),
            any(list_pods),
        )
        .route(
            &format!("{ROOT}/namespaces/{{namespace}}/pods/{{name}}"),
            any(get_pod),
        )
        .with_state(api)
}

/// Only get and list: any other verb (watch, create, …) is a 405 Status.
fn check_verb(kind: Kind, method: &Method, uri: &Uri) -> ApiResult<()> {
    let verb = RequestInfo::of(method, uri).verb;
    match verb.as_str() {
        "get" | "list" => Ok(()),
        _ => Err(ApiError::method_not_supported(GROUP, kind.plural(), &verb)),
    }
}

/// The list's selectors: `labelSelector` (on the Node's or Pod's labels)
/// and `fieldSelector` (`metadata.name`, and `metadata.namespace`).
fn selectors(
    kind: Kind,
    query: Result<Query<HashMap<String, String>>, QueryRejection>,
) -> ApiResult<ListOptions> {
    let Query(query) = query.map_err(|err| ApiError::bad_request(err.body_text()))?;
    let labels = match query.get("labelSelector").filter(|s| !s.is_empty()) {
        Some(s) => Some(LabelSelector::parse(s)?),
        None => None,
    };
    let fields = match query.get("fieldSelector").filter(|s| !s.is_empty()) {
        Some(s) => {
            let selector = FieldSelector::parse(s)?;
            selector.check_supported(kind.kind())?;
            Some(selector)
        }
        None => None,
    };
    Ok(ListOptions {
        labels,
        fields,
        // From the watch cache: what `kubectl top` reads need not be
        // newer than the moment.
        resource_version: "0".into(),
        ..ListOptions::default()
    })
}

fn json_response(body: &Value) -> Response {
    let bytes = serde_json::to_vec(body).unwrap_or_default();
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        bytes,
    )
        .into_response()
}

fn answer(result: ApiResult<Value>) -> Response {
    match result {
        Ok(body) => json_response(&body),
        Err(err) => err.into_response(),
    }
}

fn core(plural: &str) -> &'static ResourceType {
    resources::find("", "v1", plural).expect("nodes and pods are served")
}

fn list_json(kind: Kind, items: Vec<Value>) -> Value {
    json!({
        "kind": format!("{}List", kind.kind()),
        "apiVersion": API_VERSION,
        "metadata": {},
        "items": items,
    })
}

/// The metadata of a metrics object: its object's name, namespace and
/// labels, created now (metrics-server's).
fn metadata_of(object: &Value) -> Value {
    let mut metadata = json!({
        "name": object["metadata"]["name"],
        "creationTimestamp": crate::object::now(),
    });
    if let Some(namespace) = object["metadata"]["namespace"].as_str() {
        metadata["namespace"] = json!(namespace);
    }
    if let Some(labels) = object["metadata"]["labels"]
        .as_object()
        .filter(|l| !l.is_empty())
    {
        metadata["labels"] = json!(labels);
    }
    metadata
}

fn usage_json(usage: &Usage) -> Value {
    json!({
        "cpu": summary::cpu_quantity(usage.cpu_nanocores),
        "memory": summary::memory_quantity(usage.memory_bytes),
    })
}

/// The NodeMetrics of `node`, if its kubelet reported its usage.
fn node_metrics(node: &Value, usage: &NodeUsage) -> Option<Value> {
    let usage = usage.node.as_ref()?;
    Some(json!({
        "metadata": metadata_of(node),
        "timestamp": usage.timestamp,
        "window": WINDOW,
        "usage": usage_json(usage),
    }))
}

/// The PodMetrics of `pod`, if its node's kubelet reported any of its
/// containers (and, when both name one, for the same pod uid).
fn pod_metrics(pod: &Value, usage: &NodeUsage) -> Option<Value> {
    let key = (
        pod["metadata"]["namespace"].as_str()?.to_string(),
        pod["metadata"]["name"].as_str()?.to_string(),
    );
    let found = usage.pods.get(&key)?;
    let uid = pod["metadata"]["uid"].as_str().unwrap_or("");
    if !found.uid.is_empty() && !uid.is_empty() && found.uid != uid {
        // An earlier pod of the same name, still on the kubelet.
        return None;
    }
    let containers: Vec<Value> = found
        .containers
        .iter()
        .map(|(name, usage)| json!({"name": name, "usage": usage_json(usage)}))
        .collect();
    Some(json!({
        "metadata": metadata_of(pod),
        "timestamp": found.timestamp,
        "window": WINDOW,
        "containers": containers,
    }))
}

fn with_type(mut object: Value, kind: Kind) -> Value {
    object["kind"] = json!(kind.kind());
    object["apiVersion"] = json!(API_VERSION);
    object
}

fn name_of(object: &Value) -> &str {
    object["metadata"]["name"].as_str().unwrap_or("")
}

async fn list_nodes(
    State(api): State<Arc<MetricsApi>>,
    method: Method,
    uri: Uri,
    query: Result<Query<HashMap<String, String>>, QueryRejection>,
) -> Response {
    answer(node_list(&api, &method, &uri, query).await)
}

async fn node_list(
    api: &MetricsApi,
    method: &Method,
    uri: &Uri,
    query: Result<Query<HashMap<String, String>>, QueryRejection>,
) -> ApiResult<Value> {
    check_verb(Kind::Node, method, uri)?;
    let mut options = selectors(Kind::Node, query)?;
    // The field selector is metrics-server's (on the node's metadata), not
    // the Node resource's own.
    let fields = options.fields.take();
    let target = Target {
        resource: core("nodes"),
        namespace: None,
    };
    let nodes = api.registry.list(&target, &options).await?;
    let nodes: Vec<&Value> = nodes["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|node| fields.as_ref().is_none_or(|f| f.matches(node)))
        .collect();
    let usage = api.scraper.scrape(&nodes).await;
    let mut items: Vec<Value> = nodes
        .iter()
        .filter_map(|node| node_metrics(node, usage.get(name_of(node))?))
        .collect();
    items.sort_by(|a, b| name_of(a).cmp(name_of(b)));
    Ok(list_json(Kind::Node, items))
}

async fn get_node(
    State(api): State<Arc<MetricsApi>>,
    Path(name): Path<String>,
    method: Method,
    uri: Uri,
) -> Response {
    let result = async {
        check_verb(Kind::Node, &method, &uri)?;
        let target = Target {
            resource: core("nodes"),
            namespace: None,
        };
        let node = match api.registry.get_at(&target, &name, "0").await {
            // metrics-server's node lister's words.
            Err(err) if err.code == 404 => return Err(ApiError::not_found("", "node", &name)),
            other => other?,
        };
        let usage = api.scraper.scrape(&[&node]).await;
        usage
            .get(&name)
            .and_then(|usage| node_metrics(&node, usage))
            .map(|metrics| with_type(metrics, Kind::Node))
            .ok_or_else(|| ApiError::not_found(GROUP, Kind::Node.not_found_resource(), &name))
    };
    answer(result.await)
}

async fn list_all_pods(
    State(api): State<Arc<MetricsApi>>,
    method: Method,
    uri: Uri,
    query: Result<Query<HashMap<String, String>>, QueryRejection>,
) -> Response {
    answer(pod_list(&api, None, &method, &uri, query).await)
}

async fn list_pods(
    State(api): State<Arc<MetricsApi>>,
    Path(namespace): Path<String>,
    method: Method,
    uri: Uri,
    query: Result<Query<HashMap<String, String>>, QueryRejection>,
) -> Response {
    answer(pod_list(&api, Some(&namespace), &method, &uri, query).await)
}

async fn pod_list(
    api: &MetricsApi,
    namespace: Option<&str>,
    method: &Method,
    uri: &Uri,
    query: Result<Query<HashMap<String, String>>, QueryRejection>,
) -> ApiResult<Value> {
    check_verb(Kind::Pod, method, uri)?;
    let options = selectors(Kind::Pod, query)?;
    let target = Target {
        resource: core("pods"),
        namespace,
    };
    let pods = api.registry.list(&target, &options).await?;
    let pods: Vec<&Value> = pods["items"].as_array().into_iter().flatten().collect();
    let mut items = pods_metrics(api, &pods).await?;
    items.sort_by(|a, b| {
        let key = |m: &Value| {
            (
                m["metadata"]["namespace"]
                    .as_str()
                    .unwrap_or("")
                    .to_string(),
                name_of(m).to_string(),
            )
        };
        key(a).cmp(&key(b))
    });
    Ok(list_json(Kind::Pod, items))
}

/// The metrics of each of `pods` that has any, asking only the nodes they
/// run on.
async fn pods_metrics(api: &MetricsApi, pods: &[&Value]) -> ApiResult<Vec<Value>> {
    let node_of = |pod: &Value| {
        pod["spec"]["nodeName"]
            .as_str()
            .filter(|n| !n.is_empty())
            .map(str::to_string)
    };
    let names: BTreeSet<String> = pods.iter().filter_map(|pod| node_of(pod)).collect();
    let target = Target {
        resource: core("nodes"),
        namespace: None,
    };
    let mut nodes = Vec::with_capacity(names.len());
    for name in &names {
        match api.registry.get_at(&target, name, "0").await {
            Ok(node) => nodes.push(node),
            // A pod on a node that is gone has no metrics.
            Err(err) if err.code == 404 => {}
            Err(err) => return Err(err),
        }
    }
    let nodes: Vec<&Value> = nodes.iter().collect();
    let usage = api.scraper.scrape(&nodes).await;
    Ok(pods
        .iter()
        .filter_map(|pod| pod_metrics(pod, usage.get(&node_of(pod)?)?))
        .collect())
}

async fn get_pod(
    State(api): State<Arc<MetricsApi>>,
    Path((namespace, name)): Path<(String, String)>,
    method: Method,
    uri: Uri,
) -> Response {
    let result = async {
        check_verb(Kind::Pod, &method, &uri)?;
        let target = Target {
            resource: core("pods"),
            namespace: Some(&namespace),
        };
        // A missing pod is the registry's 404 (`pods "x" not found`), as
        // metrics-server's pod lister answers.
        let pod = api.registry.get_at(&target, &name, "0").await?;
        let found = pods_metrics(&api, &[&pod]).await?;
        found
            .into_iter()
            .next()
            .map(|metrics| with_type(metrics, Kind::Pod))
            .ok_or_else(|| {
                // metrics-server names the pod `namespace/name` here.
                ApiError::not_found(
                    GROUP,
                    Kind::Pod.not_found_resource(),
                    &format!("{namespace}/{name}"),
                )
            })
    };
    answer(result.await)
}

#[cfg(test)]
mod tests;
