//! The resource metrics API through the server's router, with a fake
//! kubelet (and a fake simulation process) answering Summaries.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Path as UrlPath, State as UrlState};
use axum::http::{Method, Request, StatusCode};
use serde_json::{json, Value};
use tower::ServiceExt;

use crate::registry::{Registry, Target, Write};

/// What the fake kubelets answer, and how often each path was asked.
#[derive(Clone, Default)]
struct FakeKubelets {
    summaries: Arc<Mutex<HashMap<String, Value>>>,
    hits: Arc<Mutex<HashMap<String, usize>>>,
}

impl FakeKubelets {
    fn answer(&self, path: &str) -> (StatusCode, String) {
        *self
            .hits
            .lock()
            .unwrap()
            .entry(path.to_string())
            .or_default() += 1;
        match self.summaries.lock().unwrap().get(path) {
            Some(summary) => (StatusCode::OK, summary.to_string()),
            None => (StatusCode::NOT_FOUND, "no such node".into()),
        }
    }

    fn hits(&self, path: &str) -> usize {
        self.hits.lock().unwrap().get(path).copied().unwrap_or(0)
    }

    /// Serves `/stats/summary` (a kubelet's) and
    /// `/nodes/NAME/stats/summary` (the simulation's) on a port of its own.
    async fn serve(&self) -> u16 {
        let app = axum::Router::new()
            .route(
                "/stats/summary",
                axum::routing::get(|UrlState(fake): UrlState<FakeKubelets>| async move {
                    fake.answer("/stats/summary")
                }),
            )
            .route(
                "/nodes/{name}/stats/summary",
                axum::routing::get(
                    |UrlState(fake): UrlState<FakeKubelets>, UrlPath(name): UrlPath<String>| async move {
                        fake.answer(&format!("/nodes/{name}/stats/summary"))
                    },
                ),
            )
            .with_state(self.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move { axum::serve(listener, app).await });
        port
    }
}

fn target(plural: &str, namespace: Option<&'static str>) -> Target<'static> {
    Target {
        resource: crate::resources::find("", "v1", plural).unwrap(),
        namespace,
    }
}

async fn create(
    registry: &Registry,
    plural: &str,
    namespace: Option<&'static str>,
    object: Value,
) -> Value {
    registry
        .create(
            &target(plural, namespace),
            object,
            &Write::new("test", false),
        )
        .await
        .unwrap()
}

fn node(name: &str, port: u16, labels: Value, annotations: Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": labels, "annotations": annotations},
        "status": {
            "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": port}},
            "capacity": {"cpu": "4", "memory": "8Gi"},
            "allocatable": {"cpu": "4", "memory": "8Gi"}
        }
    })
}

fn pod(name: &str, node: &str, labels: Value, containers: &[&str]) -> Value {
    let containers: Vec<Value> = containers
        .iter()
        .map(|c| json!({"name": c, "image": "busybox"}))
        .collect();
    let mut pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {"containers": containers}
    });
    if !node.is_empty() {
        pod["spec"]["nodeName"] = json!(node);
    }
    pod
}

fn container(name: &str, nanocores: u64, bytes: u64) -> Value {
    json!({"name": name,
        "cpu": {"time": "2026-12-07T03:00:04Z", "usageNanoCores": nanocores},
        "memory": {"time": "2026-12-07T03:00:04Z", "workingSetBytes": bytes}})
}

fn pod_stats(pod: &Value, containers: Vec<Value>) -> Value {
    json!({
        "podRef": {"name": pod["metadata"]["name"], "namespace": pod["metadata"]["namespace"], "uid": pod["metadata"]["uid"]},
        "containers": containers
    })
}

/// A cluster of four nodes: n1 with a kubelet, n2 simulated (labelled and
/// annotated), n3 with kubelet port 0 and no label, n4 whose kubelet does
/// not answer; and pods on them.
struct Cluster {
    registry: Registry,
    fake: FakeKubelets,
    _dir: tempfile::TempDir,
}

async fn cluster() -> Cluster {
    let (registry, dir) = crate::registry::test_registry().await;
    let fake = FakeKubelets::default();
    let port = fake.serve().await;
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let sim_url = format!("http://127.0.0.1:{port}/nodes/n2/stats/summary");
    create(
        &registry,
        "nodes",
        None,
        node("n1", port, json!({"zone": "a"}), json!({})),
    )
    .await;
    create(
        &registry,
        "nodes",
        None,
        node(
            "n2",
            0,
            json!({"zone": "b", "skiff.dev/simulated": "true"}),
            json!({"skiff.dev/simulated-stats-url": sim_url}),
        ),
    )
    .await;
    create(
        &registry,
        "nodes",
        None,
        node(
            "n3",
            0,
            json!({}),
            json!({"skiff.dev/simulated-stats-url": sim_url}),
        ),
    )
    .await;
    create(
        &registry,
        "nodes",
        None,
        node("n4", closed, json!({}), json!({})),
    )
    .await;
    create(
        &registry,
        "namespaces",
        None,
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}}),
    )
    .await;
    let web = create(
        &registry,
        "pods",
        Some("default"),
        pod("web", "n1", json!({"app": "web"}), &["app", "proxy"]),
    )
    .await;
    let empty = create(
        &registry,
        "pods",
        Some("default"),
        pod("empty", "n1", json!({}), &["waiting"]),
    )
    .await;
    let stale = create(
        &registry,
        "pods",
        Some("default"),
        pod("stale", "n1", json!({}), &["c"]),
    )
    .await;
    create(
        &registry,
        "pods",
        Some("default"),
        pod("pending", "", json!({"app": "web"}), &["c"]),
    )
    .await;
    create(
        &registry,
        "pods",
        Some("default"),
        pod("elsewhere", "n3", json!({}), &["c"]),
    )
    .await;
    let half = create(
        &registry,
        "pods",
        Some("team"),
        pod("half", "n1", json!({"app": "db"}), &["main", "starting"]),
    )
    .await;
    let sim = create(
        &registry,
        "pods",
        Some("team"),
        pod("sim", "n2", json!({"app": "db"}), &["c"]),
    )
    .await;
    let mut stale_stats = pod_stats(&stale, vec![container("c", 1, 1)]);
    stale_stats["podRef"]["uid"] = json!("an-earlier-pod");
    let n1 = json!({
        "node": {"nodeName": "n1",
            "cpu": {"time": "2026-12-07T03:00:05Z", "usageNanoCores": 123456789},
            "memory": {"time": "2026-12-07T03:00:05Z", "workingSetBytes": 1263616}},
        "pods": [
            pod_stats(&web, vec![container("app", 150000000, 10485760), container("proxy", 1000, 1536)]),
            pod_stats(&empty, vec![json!({"name": "waiting"})]),
            stale_stats,
            pod_stats(&half, vec![container("main", 2000000000, 1073741824), json!({"name": "starting", "cpu": {"usageNanoCores": 5}})]),
        ]
    });
    let n2 = json!({
        "node": {"nodeName": "n2",
            "cpu": {"time": "2026-12-07T03:00:06Z", "usageNanoCores": 5000000},
            "memory": {"time": "2026-12-07T03:00:06Z", "workingSetBytes": 2097152}},
        "pods": [pod_stats(&sim, vec![container("c", 1000000, 4096)])]
    });
    {
        let mut summaries = fake.summaries.lock().unwrap();
        summaries.insert("/stats/summary".into(), n1);
        summaries.insert("/nodes/n2/stats/summary".into(), n2);
        // n3 would answer, but is not asked: it is not labelled simulated.
        summaries.insert("/nodes/n3/stats/summary".into(), json!({}));
    }
    Cluster {
        registry,
        fake,
        _dir: dir,
    }
}

async fn call(app: &axum::Router, method: Method, uri: &str) -> (StatusCode, Value) {
    let request = Request::builder()
        .method(method)
        .uri(uri)
        .body(Body::empty())
        .unwrap();
    let response = app.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let body = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    (status, serde_json::from_slice(&body).unwrap_or(Value::Null))
}

async fn get(app: &axum::Router, uri: &str) -> (StatusCode, Value) {
    call(app, Method::GET, uri).await
}

fn names(list: &Value) -> Vec<String> {
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|item| match item["metadata"]["namespace"].as_str() {
            Some(ns) => format!("{ns}/{}", item["metadata"]["name"].as_str().unwrap()),
            None => item["metadata"]["name"].as_str().unwrap().to_string(),
        })
        .collect()
}

const ROOT: &str = "/apis/metrics.k8s.io/v1beta1";

#[tokio::test]
async fn node_metrics_are_read_from_kubelets_and_simulations() {
    let c = cluster().await;
    let app = crate::server::router(c.registry.clone());
    let (status, list) = get(&app, &format!("{ROOT}/nodes")).await;
    assert_eq!(status, StatusCode::OK, "{list}");
    assert_eq!(list["kind"], "NodeMetricsList");
    assert_eq!(list["apiVersion"], "metrics.k8s.io/v1beta1");
    assert_eq!(list["metadata"], json!({}));
    // n3 is not labelled simulated, n4's kubelet does not answer.
    assert_eq!(names(&list), ["n1", "n2"]);
    let n1 = &list["items"][0];
    assert_eq!(
        n1["usage"],
        json!({"cpu": "123456789n", "memory": "1234Ki"})
    );
    assert_eq!(n1["timestamp"], "2026-12-07T03:00:05Z");
    assert_eq!(n1["window"], "10s");
    assert_eq!(n1["metadata"]["labels"], json!({"zone": "a"}));
    assert!(n1["metadata"]["creationTimestamp"].is_string());
    assert_eq!(
        list["items"][1]["usage"],
        json!({"cpu": "5m", "memory": "2Mi"})
    );
    assert_eq!(c.fake.hits("/nodes/n3/stats/summary"), 0);

    let (status, one) = get(&app, &format!("{ROOT}/nodes/n2")).await;
    assert_eq!(status, StatusCode::OK, "{one}");
    assert_eq!(
        (one["kind"].as_str(), one["apiVersion"].as_str()),
        (Some("NodeMetrics"), Some("metrics.k8s.io/v1beta1"))
    );
    assert_eq!(one["metadata"]["name"], "n2");
    assert!(one["metadata"].get("namespace").is_none());
}

#[tokio::test]
async fn node_lists_take_label_and_field_selectors() {
    let c = cluster().await;
    let app = crate::server::router(c.registry.clone());
    let (_, by_label) = get(&app, &format!("{ROOT}/nodes?labelSelector=zone%3Da")).await;
    assert_eq!(names(&by_label), ["n1"]);
    let (_, by_set) = get(
        &app,
        &format!("{ROOT}/nodes?labelSelector=zone%20in%20(a,b)"),
    )
    .await;
    assert_eq!(names(&by_set), ["n1", "n2"]);
    let (_, by_name) = get(
        &app,
        &format!("{ROOT}/nodes?fieldSelector=metadata.name%3Dn2"),
    )
    .await;
    assert_eq!(names(&by_name), ["n2"]);
    let (_, not_name) = get(
        &app,
        &format!("{ROOT}/nodes?fieldSelector=metadata.name!%3Dn2"),
    )
    .await;
    assert_eq!(names(&not_name), ["n1"]);
    let (status, err) = get(
        &app,
        &format!("{ROOT}/nodes?fieldSelector=spec.unschedulable%3Dtrue"),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{err}");
    assert_eq!(err["kind"], "Status");
    let (status, _) = get(&app, &format!("{ROOT}/nodes?labelSelector=%3D%3D")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn missing_metrics_are_metrics_servers_not_found() {
    let c = cluster().await;
    let app = crate::server::router(c.registry.clone());
    for (uri, message) in [
        ("nodes/n3", "nodemetrics.metrics.k8s.io \"n3\" not found"),
        ("nodes/n4", "nodemetrics.metrics.k8s.io \"n4\" not found"),
        ("nodes/nope", "node \"nope\" not found"),
        (
            "namespaces/default/pods/empty",
            "podmetrics.metrics.k8s.io \"default/empty\" not found",
        ),
        (
            "namespaces/default/pods/pending",
            "podmetrics.metrics.k8s.io \"default/pending\" not found",
        ),
        ("namespaces/default/pods/nope", "pods \"nope\" not found"),
    ] {
        let (status, body) = get(&app, &format!("{ROOT}/{uri}")).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{uri}: {body}");
        assert_eq!(
            (body["kind"].as_str(), body["reason"].as_str()),
            (Some("Status"), Some("NotFound")),
            "{uri}"
        );
        assert_eq!(body["message"], message, "{uri}");
    }
    let (_, body) = get(&app, &format!("{ROOT}/nodes/n3")).await;
    assert_eq!(
        body["details"],
        json!({"name": "n3", "group": "metrics.k8s.io", "kind": "nodemetrics"})
    );
}

#[tokio::test]
async fn pod_metrics_list_the_containers_with_numbers() {
    let c = cluster().await;
    let app = crate::server::router(c.registry.clone());
    let (status, list) = get(&app, &format!("{ROOT}/namespaces/default/pods")).await;
    assert_eq!(status, StatusCode::OK, "{list}");
    assert_eq!(list["kind"], "PodMetricsList");
    assert_eq!(list["apiVersion"], "metrics.k8s.io/v1beta1");
    // empty: no container numbers; stale: the kubelet's is another pod's;
    // pending: on no node; elsewhere: on a node without metrics.
    assert_eq!(names(&list), ["default/web"]);
    let web = &list["items"][0];
    assert_eq!(web["metadata"]["labels"], json!({"app": "web"}));
    assert_eq!(web["window"], "10s");
    assert_eq!(web["timestamp"], "2026-12-07T03:00:04Z");
    assert_eq!(
        web["containers"],
        json!([
            {"name": "app", "usage": {"cpu": "150m", "memory": "10Mi"}},
            {"name": "proxy", "usage": {"cpu": "1u", "memory": "1536"}}
        ])
    );

    let (_, all) = get(&app, &format!("{ROOT}/pods")).await;
    assert_eq!(names(&all), ["default/web", "team/half", "team/sim"]);
    let half = &all["items"][1];
    assert_eq!(
        half["containers"],
        json!([{"name": "main", "usage": {"cpu": "2", "memory": "1Gi"}}])
    );

    let (status, one) = get(&app, &format!("{ROOT}/namespaces/team/pods/sim")).await;
    assert_eq!(status, StatusCode::OK, "{one}");
    assert_eq!(one["kind"], "PodMetrics");
    assert_eq!(one["metadata"]["namespace"], "team");
    assert_eq!(
        one["containers"],
        json!([{"name": "c", "usage": {"cpu": "1m", "memory": "4Ki"}}])
    );
}

#[tokio::test]
async fn pod_lists_take_label_and_field_selectors() {
    let c = cluster().await;
    let app = crate::server::router(c.registry.clone());
    let (_, db) = get(&app, &format!("{ROOT}/pods?labelSelector=app%3Ddb")).await;
    assert_eq!(names(&db), ["team/half", "team/sim"]);
    let (_, web) = get(&app, &format!("{ROOT}/pods?labelSelector=app%3Dweb")).await;
    assert_eq!(names(&web), ["default/web"]);
    let (_, team) = get(
        &app,
        &format!("{ROOT}/pods?fieldSelector=metadata.namespace%3Dteam"),
    )
    .await;
    assert_eq!(names(&team), ["team/half", "team/sim"]);
    let (_, named) = get(
        &app,
        &format!("{ROOT}/namespaces/team/pods?fieldSelector=metadata.name%3Dsim"),
    )
    .await;
    assert_eq!(names(&named), ["team/sim"]);
    let (status, err) = get(
        &app,
        &format!("{ROOT}/pods?fieldSelector=spec.nodeName%3Dn1"),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{err}");
    assert!(err["message"].as_str().unwrap().contains("metadata.name"));
}

#[tokio::test]
async fn pod_lists_ask_only_the_nodes_their_pods_run_on() {
    let c = cluster().await;
    let app = crate::server::router(c.registry.clone());
    let (_, list) = get(
        &app,
        &format!("{ROOT}/namespaces/team/pods?labelSelector=app%3Ddb,x!%3Dy"),
    )
    .await;
    assert_eq!(names(&list), ["team/half", "team/sim"]);
    let (_, list) = get(&app, &format!("{ROOT}/namespaces/default/pods/web")).await;
    assert_eq!(list["metadata"]["name"], "web");
    let app = crate::server::router(c.registry.clone());
    let (_, list) = get(
        &app,
        &format!("{ROOT}/namespaces/team/pods?fieldSelector=metadata.name%3Dsim"),
    )
    .await;
    assert_eq!(names(&list), ["team/sim"]);
    // The first list asked n1 and n2, the GET of web (within the cache's
    // second) nobody, and the list of sim (another server) only n2.
    assert_eq!(c.fake.hits("/stats/summary"), 1);
    assert_eq!(c.fake.hits("/nodes/n2/stats/summary"), 2);
}

#[tokio::test]
async fn answers_are_reused_for_a_second() {
    let c = cluster().await;
    let app = crate::server::router(c.registry.clone());
    // Concurrent requests share one fetch.
    let (nodes, pods) = (format!("{ROOT}/nodes"), format!("{ROOT}/pods"));
    let (a, b) = tokio::join!(get(&app, &nodes), get(&app, &pods));
    assert_eq!((a.0, b.0), (StatusCode::OK, StatusCode::OK));
    assert_eq!(c.fake.hits("/stats/summary"), 1);
    get(&app, &format!("{ROOT}/nodes/n1")).await;
    assert_eq!(c.fake.hits("/stats/summary"), 1);
    tokio::time::sleep(super::scrape::CACHE_TTL + Duration::from_millis(100)).await;
    let (_, one) = get(&app, &format!("{ROOT}/nodes/n1")).await;
    assert_eq!(one["metadata"]["name"], "n1");
    assert_eq!(c.fake.hits("/stats/summary"), 2);
}

#[tokio::test]
async fn a_kubelet_that_stops_answering_is_left_out() {
    let c = cluster().await;
    let app = crate::server::router(c.registry.clone());
    c.fake.summaries.lock().unwrap().remove("/stats/summary");
    let (status, list) = get(&app, &format!("{ROOT}/nodes")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(names(&list), ["n2"]);
    let (status, _) = get(&app, &format!("{ROOT}/nodes/n1")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    // A Summary that is not JSON is a failure too.
    c.fake
        .summaries
        .lock()
        .unwrap()
        .insert("/nodes/n2/stats/summary".into(), json!("not a summary"));
    let app = crate::server::router(c.registry.clone());
    let (status, list) = get(&app, &format!("{ROOT}/pods")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(names(&list), Vec::<String>::new());
}

#[tokio::test]
async fn only_get_and_list_are_served() {
    let c = cluster().await;
    let app = crate::server::router(c.registry.clone());
    for (method, uri, verb, resource) in [
        (Method::GET, "nodes?watch=true", "watch", "nodes"),
        (
            Method::GET,
            "namespaces/default/pods?watch=1",
            "watch",
            "pods",
        ),
        (Method::POST, "nodes", "create", "nodes"),
        (Method::PUT, "nodes/n1", "update", "nodes"),
        (
            Method::PATCH,
            "namespaces/default/pods/web",
            "patch",
            "pods",
        ),
        (
            Method::DELETE,
            "namespaces/default/pods/web",
            "delete",
            "pods",
        ),
        (Method::DELETE, "pods", "deletecollection", "pods"),
    ] {
        let (status, body) = call(&app, method.clone(), &format!("{ROOT}/{uri}")).await;
        assert_eq!(
            status,
            StatusCode::METHOD_NOT_ALLOWED,
            "{method} {uri}: {body}"
        );
        assert_eq!(
            (body["kind"].as_str(), body["reason"].as_str()),
            (Some("Status"), Some("MethodNotAllowed")),
            "{method} {uri}"
        );
        assert_eq!(
            body["message"],
            format!("{verb} is not supported on resources of kind \"{resource}.metrics.k8s.io\""),
            "{method} {uri}"
        );
    }
    // Paths that name nothing of the group.
    for uri in ["namespaces/default/nodes", "nodes/n1/status", "widgets"] {
        let (status, _) = get(&app, &format!("{ROOT}/{uri}")).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{uri}");
    }
}

const AGGREGATED_V2: &str =
    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json";
const AGGREGATED_V2BETA1: &str =
    "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";

async fn discover(app: &axum::Router, uri: &str, accept: &str) -> Value {
    let request = Request::get(uri)
        .header("accept", accept)
        .body(Body::empty())
        .unwrap();
    let response = app.clone().oneshot(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK, "{uri}");
    let body = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    serde_json::from_slice(&body).unwrap()
}

/// `kubectl top` checks the group is in discovery before it asks.
#[tokio::test]
async fn discovery_lists_the_group_in_every_form() {
    let (registry, _dir) = crate::registry::test_registry().await;
    let app = crate::server::router(registry);
    let groups = discover(&app, "/apis", "application/json").await;
    let group = groups["groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["name"] == "metrics.k8s.io")
        .expect("metrics.k8s.io in /apis")
        .clone();
    assert_eq!(
        group["preferredVersion"],
        json!({"groupVersion": "metrics.k8s.io/v1beta1", "version": "v1beta1"})
    );
    let group = discover(&app, "/apis/metrics.k8s.io", "application/json").await;
    assert_eq!(group["kind"], "APIGroup");
    let list = discover(&app, ROOT, "application/json").await;
    assert_eq!(list["kind"], "APIResourceList");
    assert_eq!(list["groupVersion"], "metrics.k8s.io/v1beta1");
    assert_eq!(
        list["resources"],
        json!([
            {"name": "nodes", "singularName": "nodemetrics", "namespaced": false, "kind": "NodeMetrics", "verbs": ["get", "list"]},
            {"name": "pods", "singularName": "podmetrics", "namespaced": true, "kind": "PodMetrics", "verbs": ["get", "list"]}
        ])
    );
    for (accept, version) in [(AGGREGATED_V2, "v2"), (AGGREGATED_V2BETA1, "v2beta1")] {
        let aggregated = discover(&app, "/apis", accept).await;
        assert_eq!(
            aggregated["apiVersion"],
            format!("apidiscovery.k8s.io/{version}")
        );
        let group = aggregated["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["metadata"]["name"] == "metrics.k8s.io")
            .expect("metrics.k8s.io in aggregated discovery");
        let v = &group["versions"][0];
        assert_eq!(v["version"], "v1beta1");
        let resources = v["resources"].as_array().unwrap();
        assert_eq!(resources.len(), 2);
        assert_eq!(resources[0]["resource"], "nodes");
        assert_eq!(
            resources[0]["responseKind"],
            json!({"group": "metrics.k8s.io", "version": "v1beta1", "kind": "NodeMetrics"})
        );
        assert_eq!(resources[0]["scope"], "Cluster");
        assert_eq!(resources[1]["resource"], "pods");
        assert_eq!(resources[1]["scope"], "Namespaced");
        assert_eq!(resources[1]["verbs"], json!(["get", "list"]));
    }
}

/// Through the whole server (authentication, RBAC): a user bound to
/// `view` in a namespace may read its pods' metrics, one with no binding
/// may not; `view` shows the aggregated rule.
#[tokio::test]
async fn rbac_lets_viewers_read_metrics() {
    let c = cluster().await;
    let in_process = crate::serving::InProcess::default();
    let user = |name: &str, groups: &[&str]| crate::user::UserInfo {
        name: name.into(),
        groups: groups.iter().map(|g| g.to_string()).collect(),
    };
    let viewer = in_process.service(user("viewer", &[]));
    let nobody = in_process.service(user("nobody", &[]));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let options = crate::ServeOptions {
        in_process: Some(in_process.clone()),
        ..Default::default()
    };
    let serving = tokio::spawn(crate::serve(
        Vec::new(),
        c.registry.clone(),
        options,
        async move {
            let _ = stopped.await;
        },
    ));
    create(
        &c.registry,
        "namespaces",
        None,
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "watched"}}),
    )
    .await;
    let bindings = Target {
        resource: crate::resources::find("rbac.authorization.k8s.io", "v1", "rolebindings")
            .unwrap(),
        namespace: Some("default"),
    };
    c.registry
        .create(
            &bindings,
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                "metadata": {"name": "viewer", "namespace": "default"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
                "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "viewer"}]}),
            &Write::new("test", false),
        )
        .await
        .unwrap();
    let send = |service: &crate::serving::InProcessService, uri: String| {
        let service = service.clone();
        async move {
            let request = Request::get(uri).body(Body::empty()).unwrap();
            let response = service.oneshot(request).await.unwrap();
            let status = response.status();
            let body = axum::body::to_bytes(response.into_body(), usize::MAX)
                .await
                .unwrap();
            (
                status,
                serde_json::from_slice::<Value>(&body).unwrap_or(Value::Null),
            )
        }
    };
    let (status, list) = send(&viewer, format!("{ROOT}/namespaces/default/pods")).await;
    assert_eq!(status, StatusCode::OK, "{list}");
    assert_eq!(names(&list), ["default/web"]);
    // Bound in default only.
    let (status, _) = send(&viewer, format!("{ROOT}/namespaces/watched/pods")).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, body) = send(&nobody, format!("{ROOT}/namespaces/default/pods")).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(
        body["message"],
        "pods.metrics.k8s.io is forbidden: User \"nobody\" cannot list resource \"pods\" in API group \"metrics.k8s.io\" in the namespace \"default\""
    );
    // The stored view role shows what it aggregates.
    let view = c
        .registry
        .get(
            &Target {
                resource: crate::resources::find("rbac.authorization.k8s.io", "v1", "clusterroles")
                    .unwrap(),
                namespace: None,
            },
            "view",
        )
        .await
        .unwrap();
    assert!(
        view["rules"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["apiGroups"] == json!(["metrics.k8s.io"])
                && r["resources"] == json!(["pods", "nodes"])),
        "{view}"
    );
    let _ = stop.send(());
    serving.await.unwrap().unwrap();
}
