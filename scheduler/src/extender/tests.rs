use super::*;

use std::net::SocketAddr;
use std::sync::Mutex;

use axum::extract::State;
use axum::routing::post;
use axum::{Json, Router};
use rustls::pki_types::PrivateKeyDer;
use serde_json::json;
use tokio::net::{TcpListener, TcpStream};

use crate::framework::Code;

/// The request bodies the test extender saw, by path.
#[derive(Clone, Default)]
struct Seen(Arc<Mutex<Vec<(String, Value)>>>);

impl Seen {
    fn record(&self, path: &str, body: &Value) {
        self.0
            .lock()
            .unwrap()
            .push((path.to_string(), body.clone()));
    }

    fn bodies(&self, path: &str) -> Vec<Value> {
        let seen = self.0.lock().unwrap();
        seen.iter()
            .filter(|(p, _)| p == path)
            .map(|(_, b)| b.clone())
            .collect()
    }
}

/// The names of the nodes of an ExtenderArgs, sent whole or by name.
fn names_in(args: &Value) -> Vec<String> {
    match &args["NodeNames"] {
        Value::Array(names) => names
            .iter()
            .map(|n| n.as_str().unwrap().to_string())
            .collect(),
        _ => args["Nodes"]["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n["metadata"]["name"].as_str().unwrap().to_string())
            .collect(),
    }
}

/// Lets every node through but `n2` (busy: resolvable) and `n3` (no gpu:
/// unresolvable, also listed as merely failed), answering in the form it
/// was asked in.
async fn filter(State(seen): State<Seen>, Json(args): Json<Value>) -> Json<Value> {
    seen.record("/filter", &args);
    let names = names_in(&args);
    let passed: Vec<&String> = names.iter().filter(|n| *n != "n2" && *n != "n3").collect();
    let failed = json!({"n2": "n2 is busy", "n3": "overridden"});
    let unresolvable = json!({"n3": "n3 has no gpu"});
    Json(match args["NodeNames"].is_array() {
        true => json!({
            "NodeNames": passed,
            "FailedNodes": failed,
            "FailedAndUnresolvableNodes": unresolvable,
            "Error": "",
        }),
        false => {
            let items: Vec<&Value> = args["Nodes"]["items"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|n| passed.iter().any(|p| n["metadata"]["name"] == ***p))
                .collect();
            json!({
                "Nodes": {"metadata": {}, "items": items},
                "NodeNames": null,
                "FailedNodes": failed,
                "FailedAndUnresolvableNodes": unresolvable,
                "Error": "",
            })
        }
    })
}

async fn prioritize(State(seen): State<Seen>, Json(args): Json<Value>) -> Json<Value> {
    seen.record("/prioritize", &args);
    Json(
        json!([{"Host": "n1", "Score": 3}, {"Host": "n2", "Score": 10}, {"Host": "elsewhere", "Score": 7}]),
    )
}

async fn bind(State(seen): State<Seen>, Json(args): Json<Value>) -> Json<Value> {
    seen.record("/bind", &args);
    Json(json!({"Error": ""}))
}

/// The test extender on 127.0.0.1: its base URL and what it saw.
async fn extender_server() -> (String, Seen) {
    let seen = Seen::default();
    let app = Router::new()
        .route("/filter", post(filter))
        .route("/prioritize", post(prioritize))
        .route("/bind", post(bind))
        .route(
            "/lowercase",
            post(|| async { Json(json!({"nodenames": ["n1"], "failednodes": {"n2": "nope"}})) }),
        )
        .route(
            "/unhappy",
            post(|| async { Json(json!({"NodeNames": ["n1"], "Error": "extender is unhappy"})) }),
        )
        .route(
            "/stranger",
            post(|| async { Json(json!({"NodeNames": ["n9"]})) }),
        )
        .route(
            "/names-only",
            post(|| async { Json(json!({"NodeNames": ["n1"]})) }),
        )
        .route(
            "/refuse-bind",
            post(|| async { Json(json!({"Error": "cannot bind here"})) }),
        )
        .route(
            "/broken",
            post(|| async { (axum::http::StatusCode::INTERNAL_SERVER_ERROR, "boom") }),
        )
        .route("/garbage", post(|| async { "not json" }))
        .route(
            "/bad-score",
            post(|| async { Json(json!([{"Host": "n1", "Score": "high"}])) }),
        )
        .route(
            "/slow",
            post(|| async {
                tokio::time::sleep(Duration::from_secs(3)).await;
                Json(json!({}))
            }),
        )
        .with_state(seen.clone());
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}"), seen)
}

fn extender(config: Value) -> Extender {
    Extender::from_config(&config).unwrap()
}

fn pod_with(resources: Value) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": "p", "namespace": "ns", "uid": "uid-1"},
        "spec": {"containers": [{"name": "c", "image": "i", "resources": resources}]},
    }))
    .unwrap()
}

fn pod() -> Pod {
    pod_with(json!({}))
}

fn nodes(names: &[&str]) -> Vec<Arc<NodeInfo>> {
    names
        .iter()
        .map(|name| {
            let node: Node = serde_json::from_value(json!({
                "metadata": {"name": name, "labels": {"zone": "a"}},
                "status": {"allocatable": {"cpu": "4", "pods": "110"}},
            }))
            .unwrap();
            Arc::new(NodeInfo::new(Arc::new(node)))
        })
        .collect()
}

/// A URL on 127.0.0.1 where nothing listens.
fn closed_url() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    format!("http://127.0.0.1:{port}")
}

#[tokio::test]
async fn filter_sends_the_pod_and_whole_nodes_and_reads_the_result() {
    let (url, seen) = extender_server().await;
    let ext = extender(json!({"urlPrefix": format!("{url}/"), "filterVerb": "filter"}));
    let outcome = ext
        .filter(&pod(), &nodes(&["n1", "n2", "n3", "n4"]))
        .await
        .unwrap();
    assert_eq!(outcome.passed, ["n1", "n4"]);
    assert_eq!(
        outcome.failed,
        BTreeMap::from([("n2".to_string(), "n2 is busy".to_string())])
    );
    assert_eq!(
        outcome.failed_and_unresolvable,
        BTreeMap::from([("n3".to_string(), "n3 has no gpu".to_string())])
    );
    let bodies = seen.bodies("/filter");
    assert_eq!(bodies.len(), 1);
    let args = &bodies[0];
    let keys: BTreeSet<&str> = args
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(keys, BTreeSet::from(["Pod", "Nodes", "NodeNames"]));
    assert_eq!(args["Pod"]["metadata"]["name"], "p");
    assert_eq!(args["Pod"]["metadata"]["namespace"], "ns");
    assert_eq!(args["NodeNames"], Value::Null);
    assert_eq!(args["Nodes"]["metadata"], json!({}));
    let items = args["Nodes"]["items"].as_array().unwrap();
    assert_eq!(items.len(), 4);
    assert_eq!(items[0]["metadata"]["labels"]["zone"], "a");
    assert_eq!(items[0]["status"]["allocatable"]["cpu"], "4");
}

#[tokio::test]
async fn node_cache_capable_extenders_are_sent_node_names_only() {
    let (url, seen) = extender_server().await;
    let ext = extender(json!({"urlPrefix": url, "filterVerb": "filter", "nodeCacheCapable": true}));
    let outcome = ext
        .filter(&pod(), &nodes(&["n1", "n2", "n3"]))
        .await
        .unwrap();
    assert_eq!(outcome.passed, ["n1"]);
    assert_eq!(outcome.failed.keys().collect::<Vec<_>>(), ["n2"]);
    assert_eq!(
        outcome.failed_and_unresolvable.keys().collect::<Vec<_>>(),
        ["n3"]
    );
    let args = &seen.bodies("/filter")[0];
    assert_eq!(args["Nodes"], Value::Null);
    assert_eq!(args["NodeNames"], json!(["n1", "n2", "n3"]));
    assert_eq!(args["Pod"]["metadata"]["uid"], "uid-1");
}

#[tokio::test]
async fn answers_are_read_whatever_the_case_of_their_fields() {
    let (url, _) = extender_server().await;
    let ext =
        extender(json!({"urlPrefix": url, "filterVerb": "lowercase", "nodeCacheCapable": true}));
    let outcome = ext.filter(&pod(), &nodes(&["n1", "n2"])).await.unwrap();
    assert_eq!(outcome.passed, ["n1"]);
    assert_eq!(outcome.failed["n2"], "nope");
}

#[tokio::test]
async fn names_count_only_from_node_cache_capable_extenders() {
    // As kube-scheduler: an extender sent whole nodes answers with nodes;
    // names alone let no node through.
    let (url, _) = extender_server().await;
    let ext = extender(json!({"urlPrefix": url, "filterVerb": "names-only"}));
    let outcome = ext.filter(&pod(), &nodes(&["n1", "n2"])).await.unwrap();
    assert!(outcome.passed.is_empty());
}

#[tokio::test]
async fn an_error_in_the_answer_fails_the_filter() {
    let (url, _) = extender_server().await;
    let ext =
        extender(json!({"urlPrefix": url, "filterVerb": "unhappy", "nodeCacheCapable": true}));
    let err = ext.filter(&pod(), &nodes(&["n1"])).await.unwrap_err();
    assert_eq!(err, "extender is unhappy");
}

#[tokio::test]
async fn a_node_that_was_not_sent_cannot_pass() {
    let (url, _) = extender_server().await;
    let ext =
        extender(json!({"urlPrefix": url, "filterVerb": "stranger", "nodeCacheCapable": true}));
    let err = ext.filter(&pod(), &nodes(&["n1"])).await.unwrap_err();
    assert_eq!(
        err,
        format!("extender {url:?} claims a filtered node \"n9\" which is not found in the input node list")
    );
}

#[tokio::test]
async fn without_a_filter_verb_every_node_passes_uncalled() {
    let ext = extender(json!({"urlPrefix": closed_url(), "prioritizeVerb": "p", "weight": 1}));
    let outcome = ext.filter(&pod(), &nodes(&["n1", "n2"])).await.unwrap();
    assert_eq!(outcome.passed, ["n1", "n2"]);
    assert!(!ext.is_filter());
}

#[tokio::test]
async fn prioritize_scores_are_weighted_and_scaled() {
    let (url, seen) = extender_server().await;
    let ext = extender(json!({"urlPrefix": url, "prioritizeVerb": "prioritize", "weight": 2}));
    let scores = ext.prioritize(&pod(), &nodes(&["n1", "n2"])).await.unwrap();
    // score × weight × (MAX_NODE_SCORE / MAX_EXTENDER_PRIORITY)
    assert_eq!(
        scores,
        [
            ("n1".to_string(), 60),
            ("n2".to_string(), 200),
            ("elsewhere".to_string(), 140)
        ]
    );
    let args = &seen.bodies("/prioritize")[0];
    assert_eq!(names_in(args), ["n1", "n2"]);
    // Without a prioritize verb: 0 for every node, and no call.
    let silent = extender(json!({"urlPrefix": closed_url(), "filterVerb": "f"}));
    let zeros = silent.prioritize(&pod(), &nodes(&["n1"])).await.unwrap();
    assert_eq!(zeros, [("n1".to_string(), 0)]);
}

#[tokio::test]
async fn a_score_that_is_not_a_number_is_an_error() {
    let (url, _) = extender_server().await;
    let ext = extender(json!({"urlPrefix": url, "prioritizeVerb": "bad-score", "weight": 1}));
    let err = ext.prioritize(&pod(), &nodes(&["n1"])).await.unwrap_err();
    assert!(
        err.contains("cannot unmarshal string into Go struct field HostPriority.Score"),
        "{err}"
    );
}

#[tokio::test]
async fn bind_sends_the_binding_and_reads_its_error() {
    let (url, seen) = extender_server().await;
    let ext = extender(json!({"urlPrefix": url, "bindVerb": "bind"}));
    assert!(ext.is_binder());
    ext.bind(&pod(), "n1").await.unwrap();
    assert_eq!(
        seen.bodies("/bind"),
        [json!({"PodName": "p", "PodNamespace": "ns", "PodUID": "uid-1", "Node": "n1"})]
    );
    let refusing = extender(json!({"urlPrefix": url, "bindVerb": "refuse-bind"}));
    assert_eq!(
        refusing.bind(&pod(), "n1").await.unwrap_err(),
        "cannot bind here"
    );
    let not_a_binder = extender(json!({"urlPrefix": url, "filterVerb": "filter"}));
    assert!(not_a_binder.bind(&pod(), "n1").await.is_err());
}

#[tokio::test]
async fn a_call_longer_than_the_http_timeout_fails() {
    let (url, _) = extender_server().await;
    let ext = extender(json!({"urlPrefix": url, "filterVerb": "slow", "httpTimeout": "200ms"}));
    assert_eq!(ext.http_timeout(), Duration::from_millis(200));
    let started = std::time::Instant::now();
    let err = ext.filter(&pod(), &nodes(&["n1"])).await.unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(
        err,
        format!("Post \"{url}/slow\": context deadline exceeded (Client.Timeout exceeded while awaiting headers)")
    );
}

#[tokio::test]
async fn http_failures_read_as_kube_scheduler_words_them() {
    let (url, _) = extender_server().await;
    let broken = extender(json!({"urlPrefix": url, "filterVerb": "broken"}));
    assert_eq!(
        broken.filter(&pod(), &nodes(&["n1"])).await.unwrap_err(),
        format!("failed broken with extender at URL {url}/broken, code 500")
    );
    let garbage = extender(json!({"urlPrefix": url, "filterVerb": "garbage"}));
    let err = garbage.filter(&pod(), &nodes(&["n1"])).await.unwrap_err();
    assert!(
        err.starts_with(&format!(
            "failed to decode the garbage response of extender at URL {url}/garbage: "
        )),
        "{err}"
    );
    let closed = closed_url();
    let port = closed.rsplit(':').next().unwrap();
    let down = extender(json!({"urlPrefix": closed, "filterVerb": "filter"}));
    assert_eq!(
        down.filter(&pod(), &nodes(&["n1"])).await.unwrap_err(),
        format!("Post \"{closed}/filter\": dial tcp 127.0.0.1:{port}: connect: connection refused")
    );
}

#[test]
fn managed_resources_decide_interest() {
    let any = extender(json!({"urlPrefix": "http://e"}));
    assert!(any.is_interested(&pod()));
    let gpu = extender(json!({
        "urlPrefix": "http://e",
        "managedResources": [{"name": "example.com/gpu", "ignoredByScheduler": true}, {"name": "example.com/fpga"}],
    }));
    assert_eq!(gpu.ignored_resources(), ["example.com/gpu"]);
    assert!(!gpu.is_interested(&pod()));
    assert!(!gpu.is_interested(&pod_with(json!({"requests": {"cpu": "1"}}))));
    assert!(gpu.is_interested(&pod_with(json!({"requests": {"example.com/gpu": "1"}}))));
    assert!(gpu.is_interested(&pod_with(json!({"limits": {"example.com/fpga": "1"}}))));
    let init: Pod = serde_json::from_value(json!({
        "metadata": {"name": "p"},
        "spec": {
            "containers": [{"name": "c", "image": "i"}],
            "initContainers": [{"name": "i", "image": "i", "resources": {"limits": {"example.com/gpu": "1"}}}],
        },
    }))
    .unwrap();
    assert!(gpu.is_interested(&init));
    let no_spec = Pod::default();
    assert!(!gpu.is_interested(&no_spec));
    assert!(any.is_interested(&no_spec));
    let extenders = vec![Arc::new(gpu), Arc::new(any)];
    assert_eq!(ignored_resources(&extenders), ["example.com/gpu"]);
}

#[test]
fn configurations_are_read_with_their_defaults() {
    let ext = extender(json!({
        "urlPrefix": "http://127.0.0.1:8888/scheduler",
        "filterVerb": "filter",
        "preemptVerb": "preempt",
        "prioritizeVerb": "prioritize",
        "weight": 3,
        "bindVerb": "bind",
        "enableHTTPS": false,
        "httpTimeout": "1m30s",
        "nodeCacheCapable": true,
        "managedResources": [{"name": "example.com/foo", "ignoredByScheduler": false}],
        "ignorable": true,
    }));
    assert_eq!(ext.name(), "http://127.0.0.1:8888/scheduler");
    assert_eq!(ext.url("filter"), "http://127.0.0.1:8888/scheduler/filter");
    assert_eq!(ext.weight(), 3);
    assert_eq!(ext.http_timeout(), Duration::from_secs(90));
    assert!(
        ext.is_ignorable()
            && ext.is_binder()
            && ext.supports_preemption()
            && ext.node_cache_capable()
    );
    assert!(ext.is_filter() && ext.is_prioritizer());
    assert!(ext.ignored_resources().is_empty());
    let plain = extender(json!({"urlPrefix": "http://e/", "httpTimeout": "0s"}));
    assert_eq!(plain.http_timeout(), DEFAULT_EXTENDER_TIMEOUT);
    assert_eq!(plain.url("f"), "http://e/f");
    assert!(!plain.is_ignorable() && !plain.is_binder() && !plain.supports_preemption());
    let no_timeout = extender(json!({"urlPrefix": "http://e"}));
    assert_eq!(no_timeout.http_timeout(), DEFAULT_EXTENDER_TIMEOUT);
}

#[test]
fn bad_configurations_say_what_is_wrong() {
    let cases = [
        (json!({}), "urlPrefix: Required value"),
        (json!(null), "urlPrefix: Required value"),
        (json!({"urlPrefix": ""}), "urlPrefix: Required value"),
        (json!({"urlPrefix": "ftp://e"}), "urlPrefix: Invalid value: \"ftp://e\": unsupported protocol scheme \"ftp\""),
        (json!({"urlPrefix": "e:80/x"}), "unsupported protocol scheme"),
        (json!({"urlPrefix": "http://e:x/"}), "invalid port"),
        (
            json!({"urlPrefix": "http://e", "prioritizeVerb": "p"}),
            "weight: Invalid value: 0: must have a positive weight applied to it",
        ),
        (
            json!({"urlPrefix": "http://e", "prioritizeVerb": "p", "weight": -1}),
            "weight: Invalid value: -1: must have a positive weight applied to it",
        ),
        (json!({"urlPrefix": "http://e", "httpTimeout": "30"}), "time: missing unit in duration \"30\""),
        (json!({"urlPrefix": "http://e", "httpTimeout": "3d"}), "time: unknown unit \"d\""),
        (json!({"urlPrefix": "http://e", "httpTimeout": "-1s"}), "must not be negative"),
        (json!({"urlPrefix": "http://e", "httpTimeout": 30}), "invalid type"),
        (json!({"urlPrefix": "http://e", "filterverb": "f"}), "unknown field `filterverb`"),
        (json!({"urlPrefix": "http://e", "weight": "1"}), "invalid type"),
        (
            json!({"urlPrefix": "http://e", "managedResources": [{"name": "cpu"}]}),
            "managedResources[0].name: Invalid value: \"cpu\": is an invalid extended resource name",
        ),
        (
            json!({"urlPrefix": "http://e", "managedResources": [{"name": "example.com/bad name"}]}),
            "managedResources[0].name: Invalid value: \"example.com/bad name\"",
        ),
        (
            json!({"urlPrefix": "http://e", "managedResources": [{"name": "example.com/a"}, {"name": "example.com/a"}]}),
            "managedResources[1].name: Invalid value: \"example.com/a\": duplicate extender managed resource name",
        ),
        (
            json!({"urlPrefix": "https://e", "tlsConfig": {"insecure": true, "caData": "AAAA"}}),
            "tlsConfig: specifying a root certificates file with the insecure flag is not allowed",
        ),
        (json!({"urlPrefix": "https://e", "tlsConfig": {"caData": "%%%"}}), "tlsConfig.caData: not base64"),
        (json!({"urlPrefix": "https://e", "tlsConfig": {"caData": "AAAA"}}), "no PEM CERTIFICATE block"),
        (
            json!({"urlPrefix": "https://e", "tlsConfig": {"caFile": "/nonexistent/ca.crt"}}),
            "tlsConfig.caFile: open /nonexistent/ca.crt",
        ),
        (json!({"urlPrefix": "https://e", "tlsConfig": {"certFile": "/dev/null"}}), "needs its key"),
        (json!({"urlPrefix": "https://e", "tlsConfig": {"verify": true}}), "unknown field `verify`"),
    ];
    for (config, wanted) in cases {
        let err = Extender::from_config(&config).unwrap_err();
        assert!(err.contains(wanted), "{config}: {err}");
    }
}

#[test]
fn extenders_are_validated_together() {
    let one = json!({"urlPrefix": "http://one", "bindVerb": "bind"});
    let two = json!({"urlPrefix": "http://two", "bindVerb": "bind"});
    let err = extenders_from_config(&[one.clone(), two]).unwrap_err();
    assert_eq!(
        err,
        "extenders: Invalid value: \"found 2 extenders implementing bind\": only one extender can implement bind"
    );
    let err = extenders_from_config(&[
        one.clone(),
        json!({"urlPrefix": "http://x", "prioritizeVerb": "p"}),
    ])
    .unwrap_err();
    assert_eq!(
        err,
        "extenders[1].weight: Invalid value: 0: must have a positive weight applied to it"
    );
    let err = extenders_from_config(&[json!({"urlPrefix": "http://x", "typo": 1})]).unwrap_err();
    assert!(
        err.starts_with("extenders[0]: unknown field `typo`"),
        "{err}"
    );
    let gpu =
        |url: &str| json!({"urlPrefix": url, "managedResources": [{"name": "example.com/gpu"}]});
    let err = extenders_from_config(&[gpu("http://a"), gpu("http://b")]).unwrap_err();
    assert_eq!(
        err,
        "extenders[1].managedResources[0].name: Invalid value: \"example.com/gpu\": duplicate extender managed resource name"
    );
    // The ignorable ones go last.
    let built = extenders_from_config(&[
        json!({"urlPrefix": "http://ignorable", "ignorable": true}),
        one,
        json!({"urlPrefix": "http://plain"}),
    ])
    .unwrap();
    let names: Vec<&str> = built.iter().map(|e| e.name()).collect();
    assert_eq!(names, ["http://one", "http://plain", "http://ignorable"]);
    assert!(extenders_from_config(&[]).unwrap().is_empty());
}

#[tokio::test]
async fn the_filter_chain_records_why_nodes_fail() {
    let (url, seen) = extender_server().await;
    let extenders: Vec<Arc<Extender>> = vec![
        // Down, but ignorable: skipped.
        Arc::new(extender(
            json!({"urlPrefix": closed_url(), "filterVerb": "filter", "ignorable": true}),
        )),
        Arc::new(extender(
            json!({"urlPrefix": url, "filterVerb": "filter", "nodeCacheCapable": true}),
        )),
        // Not interested in the pod: never called (it would fail).
        Arc::new(extender(json!({
            "urlPrefix": closed_url(), "filterVerb": "filter",
            "managedResources": [{"name": "example.com/gpu"}],
        }))),
    ];
    let mut statuses = NodeStatuses::new();
    let feasible = run_extenders_filter(
        &extenders,
        &pod(),
        nodes(&["n1", "n2", "n3", "n4"]),
        &mut statuses,
    )
    .await
    .unwrap();
    let names: Vec<&str> = feasible.iter().map(|n| n.name()).collect();
    assert_eq!(names, ["n1", "n4"]);
    assert_eq!(statuses.len(), 2);
    assert_eq!(statuses["n2"].code, Code::Unschedulable);
    assert_eq!(statuses["n2"].reasons[..], ["n2 is busy"]);
    assert_eq!(statuses["n2"].plugin, EXTENDER_PLUGIN_NAME);
    assert_eq!(statuses["n3"].code, Code::UnschedulableAndUnresolvable);
    assert_eq!(statuses["n3"].reasons[..], ["n3 has no gpu"]);
    assert_eq!(seen.bodies("/filter").len(), 1);

    // A second extender only sees what the first let through.
    let twice = vec![extenders[1].clone(), extenders[1].clone()];
    let mut statuses = NodeStatuses::new();
    let feasible = run_extenders_filter(&twice, &pod(), nodes(&["n1", "n2", "n3"]), &mut statuses)
        .await
        .unwrap();
    assert_eq!(feasible.len(), 1);
    let bodies = seen.bodies("/filter");
    assert_eq!(bodies.last().unwrap()["NodeNames"], json!(["n1"]));

    // No node left: later extenders are not called.
    let mut statuses = NodeStatuses::new();
    let none = run_extenders_filter(&extenders[1..2], &pod(), Vec::new(), &mut statuses)
        .await
        .unwrap();
    assert!(none.is_empty());
}

#[tokio::test]
async fn a_failing_extender_that_is_not_ignorable_is_an_error() {
    let closed = closed_url();
    let extenders = vec![Arc::new(extender(
        json!({"urlPrefix": closed, "filterVerb": "filter"}),
    ))];
    let mut statuses = NodeStatuses::new();
    let status = run_extenders_filter(&extenders, &pod(), nodes(&["n1"]), &mut statuses)
        .await
        .unwrap_err();
    assert_eq!(status.code, Code::Error);
    assert!(
        status.reasons[0].starts_with(&format!("Post \"{closed}/filter\": dial tcp")),
        "{status}"
    );
    assert!(statuses.is_empty());
}

#[tokio::test]
async fn extender_scores_are_added_to_the_totals() {
    let (url, _) = extender_server().await;
    let extenders = vec![
        Arc::new(extender(
            json!({"urlPrefix": url, "prioritizeVerb": "prioritize", "weight": 1}),
        )),
        Arc::new(extender(
            json!({"urlPrefix": url, "prioritizeVerb": "prioritize", "weight": 2}),
        )),
        // Failing prioritize calls are left out.
        Arc::new(extender(
            json!({"urlPrefix": closed_url(), "prioritizeVerb": "prioritize", "weight": 5}),
        )),
        Arc::new(extender(
            json!({"urlPrefix": url, "prioritizeVerb": "broken", "weight": 5}),
        )),
    ];
    let nodes = nodes(&["n1", "n2", "n3"]);
    let mut totals: Vec<NodeScore> = ["n1", "n2", "n3"]
        .iter()
        .map(|n| NodeScore {
            name: (*n).into(),
            score: 5,
        })
        .collect();
    run_extenders_prioritize(&extenders, &pod(), &nodes, &mut totals).await;
    let scores: Vec<i64> = totals.iter().map(|t| t.score).collect();
    // n1: 5 + 3×1×10 + 3×2×10; n2: 5 + 10×1×10 + 10×2×10; n3: unscored.
    assert_eq!(scores, [95, 305, 5]);
}

#[tokio::test]
async fn the_first_interested_binder_binds() {
    let (url, seen) = extender_server().await;
    let pod = pod();
    let none: Vec<Arc<Extender>> = vec![Arc::new(extender(
        json!({"urlPrefix": url, "filterVerb": "filter"}),
    ))];
    assert!(run_extenders_bind(&none, &pod, "n1").await.is_none());
    let binders = vec![
        Arc::new(extender(
            json!({"urlPrefix": closed_url(), "bindVerb": "bind", "ignorable": true}),
        )),
        Arc::new(extender(json!({"urlPrefix": url, "bindVerb": "bind"}))),
    ];
    let status = run_extenders_bind(&binders, &pod, "n7").await.unwrap();
    assert!(status.is_success());
    assert_eq!(seen.bodies("/bind")[0]["Node"], "n7");
    let refusing = vec![Arc::new(extender(
        json!({"urlPrefix": url, "bindVerb": "refuse-bind"}),
    ))];
    let status = run_extenders_bind(&refusing, &pod, "n1").await.unwrap();
    assert_eq!(status.code, Code::Error);
    assert_eq!(status.reasons[..], ["cannot bind here"]);
}

// ---- https ----

/// Serves the extender over TLS with a new self-signed certificate for
/// 127.0.0.1: its base URL and the certificate's PEM.
async fn tls_extender_server() -> (String, String) {
    let params =
        rcgen::CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()])
            .unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = params.self_signed(&key).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![cert.der().clone()],
            PrivateKeyDer::Pkcs8(key.serialize_der().into()),
        )
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let tcp = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = tcp.local_addr().unwrap();
    let (accepted, incoming) = tokio::sync::mpsc::channel(8);
    tokio::spawn(async move {
        while let Ok((stream, peer)) = tcp.accept().await {
            let (acceptor, accepted) = (acceptor.clone(), accepted.clone());
            tokio::spawn(async move {
                if let Ok(tls) = acceptor.accept(stream).await {
                    let _ = accepted.send((tls, peer)).await;
                }
            });
        }
    });
    let app = Router::new()
        .route("/filter", post(filter))
        .with_state(Seen::default());
    tokio::spawn(async move { axum::serve(TlsListener { addr, incoming }, app).await });
    (format!("https://{addr}"), cert.pem())
}

struct TlsListener {
    addr: SocketAddr,
    incoming: tokio::sync::mpsc::Receiver<(tokio_rustls::server::TlsStream<TcpStream>, SocketAddr)>,
}

impl axum::serve::Listener for TlsListener {
    type Io = tokio_rustls::server::TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.incoming.recv().await {
            Some(accepted) => accepted,
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.addr)
    }
}

fn base64(text: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(text)
}

#[tokio::test]
async fn https_extenders_are_verified_with_their_ca() {
    let (url, pem) = tls_extender_server().await;
    let trusted = extender(json!({
        "urlPrefix": url, "filterVerb": "filter", "nodeCacheCapable": true,
        "enableHTTPS": true, "tlsConfig": {"caData": base64(&pem)},
    }));
    let outcome = trusted.filter(&pod(), &nodes(&["n1", "n2"])).await.unwrap();
    assert_eq!(outcome.passed, ["n1"]);
    // The name verified may be another one the certificate holds.
    let renamed = extender(json!({
        "urlPrefix": url, "filterVerb": "filter", "nodeCacheCapable": true,
        "tlsConfig": {"caData": base64(&pem), "serverName": "localhost"},
    }));
    assert!(renamed.filter(&pod(), &nodes(&["n1"])).await.is_ok());
    let (_, other) = tls_extender_server().await;
    let distrusted = extender(json!({
        "urlPrefix": url, "filterVerb": "filter",
        "enableHTTPS": true, "tlsConfig": {"caData": base64(&other)},
    }));
    let err = distrusted
        .filter(&pod(), &nodes(&["n1"]))
        .await
        .unwrap_err();
    // Both certificates have rcgen's subject: Go adds "(possibly because
    // of a bad signature…)" to the message for a namesake root.
    let unknown = format!(
        "Post \"{url}/filter\": tls: failed to verify certificate: x509: certificate signed by unknown authority"
    );
    assert!(err.starts_with(&unknown), "{err}");
}

#[tokio::test]
async fn enable_https_without_a_ca_does_not_verify() {
    // As kube-scheduler: enableHTTPS without caData/caFile is insecure.
    let (url, _) = tls_extender_server().await;
    let insecure = extender(json!({
        "urlPrefix": url, "filterVerb": "filter", "nodeCacheCapable": true, "enableHTTPS": true,
    }));
    let outcome = insecure
        .filter(&pod(), &nodes(&["n1", "n3"]))
        .await
        .unwrap();
    assert_eq!(outcome.passed, ["n1"]);
    // An https URL without TLS settings trusts the system's roots only.
    let system = extender(json!({"urlPrefix": url, "filterVerb": "filter"}));
    let err = system.filter(&pod(), &nodes(&["n1"])).await.unwrap_err();
    assert!(err.contains("tls: failed to verify certificate"), "{err}");
    // An http server is not a TLS one.
    let (plain, _) = extender_server().await;
    let https_to_http = extender(json!({
        "urlPrefix": plain.replace("http://", "https://"), "filterVerb": "filter", "enableHTTPS": true,
    }));
    let err = https_to_http
        .filter(&pod(), &nodes(&["n1"]))
        .await
        .unwrap_err();
    assert!(err.contains(": tls"), "{err}");
}
