//! Over HTTP against `skiff up`, as a client library or curl would: server-
//! side apply (YAML bodies, create when absent, the 409 a conflict is and
//! `force`), `fieldValidation` (Warning headers under Warn, duplicate and
//! unknown fields refused under Strict), `propagationPolicy` recorded on
//! the object, and `pods/log` answering a clear error rather than hanging.

use anyhow::{ensure, Result};
use serde_json::{json, Value};
use skiff_tests::api_server::ApiServer;
use skiff_tests::kube_http::{HttpResponse, KubeHttp};

const PODS: &str = "/api/v1/namespaces/default/pods";
const DEPLOYS: &str = "/apis/apps/v1/namespaces/default/deployments";
const CONFIGMAPS: &str = "/api/v1/namespaces/default/configmaps";
const APPLY: &str = "application/apply-patch+yaml";

async fn send(
    http: &KubeHttp,
    method: &str,
    path: &str,
    content_type: &str,
    body: &[u8],
) -> Result<HttpResponse> {
    http.request(method, path, Some(content_type), Some(body))
        .await
}

use skiff_tests::kube_http::expect_status as expect;

const DEPLOYMENT_YAML: &str = "apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  labels:
    team: a
spec:
  replicas: 2
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: web
        image: nginx:1.27
";

/// The managedFields entry of `manager` with `operation`.
fn entry<'v>(object: &'v Value, manager: &str, operation: &str) -> Option<&'v Value> {
    object["metadata"]["managedFields"]
        .as_array()?
        .iter()
        .find(|e| e["manager"] == manager && e["operation"] == operation)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_side_apply_creates_merges_and_reports_conflicts() -> Result<()> {
    let server = ApiServer::start().await?;
    let http = server.http()?;
    let web = format!("{DEPLOYS}/web");

    // fieldManager is required for apply.
    let reply = send(&http, "PATCH", &web, APPLY, DEPLOYMENT_YAML.as_bytes()).await?;
    let status = expect(&reply, 422, "apply without fieldManager")?;
    ensure!(
        status["message"]
            .as_str()
            .is_some_and(|m| m.contains("fieldManager: Required value")),
        "{status}"
    );
    assert_eq!(http.get(&web).await?.status, 404, "nothing was created");

    // A YAML apply to a missing object creates it (201).
    let path = format!("{web}?fieldManager=alice");
    let reply = send(&http, "PATCH", &path, APPLY, DEPLOYMENT_YAML.as_bytes()).await?;
    let created = expect(&reply, 201, "apply creating")?;
    assert_eq!(created["spec"]["replicas"], 2);
    let alice = entry(&created, "alice", "Apply").expect("alice's Apply entry");
    assert_eq!(alice["fieldsType"], "FieldsV1");
    assert_eq!(alice["apiVersion"], "apps/v1");
    ensure!(
        alice["fieldsV1"]["f:spec"]["f:replicas"].is_object(),
        "alice owns spec.replicas: {alice}"
    );

    // The same apply again changes nothing, not even the resourceVersion.
    let reply = send(&http, "PATCH", &path, APPLY, DEPLOYMENT_YAML.as_bytes()).await?;
    let again = expect(&reply, 200, "apply again")?;
    assert_eq!(
        again["metadata"]["resourceVersion"],
        created["metadata"]["resourceVersion"]
    );

    // Another manager setting alice's field to another value: a conflict.
    let bob = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
                     "spec": {"replicas": 5}});
    let bob_path = format!("{web}?fieldManager=bob");
    let reply = send(&http, "PATCH", &bob_path, APPLY, &serde_json::to_vec(&bob)?).await?;
    let conflict = expect(&reply, 409, "bob's conflicting apply")?;
    assert_eq!(conflict["reason"], "Conflict");
    let causes = conflict["details"]["causes"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(causes.len(), 1, "{conflict}");
    assert_eq!(causes[0]["reason"], "FieldManagerConflict");
    assert_eq!(causes[0]["field"], ".spec.replicas");
    ensure!(
        conflict["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("Apply failed with 1 conflict: conflict with \"alice\"")),
        "{conflict}"
    );
    assert_eq!(http.get_json(&web).await?["spec"]["replicas"], 2);

    // The same value is no conflict: both own the field.
    let same = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
                      "spec": {"replicas": 2}});
    let reply = send(
        &http,
        "PATCH",
        &bob_path,
        APPLY,
        &serde_json::to_vec(&same)?,
    )
    .await?;
    expect(&reply, 200, "bob applying the same value")?;

    // force takes the field.
    let forced = format!("{bob_path}&force=true");
    let reply = send(&http, "PATCH", &forced, APPLY, &serde_json::to_vec(&bob)?).await?;
    let taken = expect(&reply, 200, "bob's forced apply")?;
    assert_eq!(taken["spec"]["replicas"], 5);
    let alice = entry(&taken, "alice", "Apply").expect("alice keeps her other fields");
    ensure!(
        alice["fieldsV1"]["f:spec"].get("f:replicas").is_none(),
        "alice lost spec.replicas: {alice}"
    );

    // alice drops her label from her configuration: it is removed, since
    // she alone owned it.
    let without_label = DEPLOYMENT_YAML.replace("  labels:\n    team: a\n", "");
    let without_label = without_label.replace("replicas: 2", "replicas: 5");
    let reply = send(&http, "PATCH", &path, APPLY, without_label.as_bytes()).await?;
    let applied = expect(&reply, 200, "alice without her label")?;
    ensure!(
        applied["metadata"]["labels"].get("team").is_none(),
        "{}",
        applied["metadata"]
    );

    // A body that is not an object is a 400, and changes nothing.
    let reply = send(&http, "PATCH", &path, APPLY, b"- just\n- a list\n").await?;
    expect(&reply, 400, "a YAML list")?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn field_validation_warns_or_refuses_unknown_and_duplicate_fields() -> Result<()> {
    let server = ApiServer::start().await?;
    let http = server.http()?;
    let body = br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"w"},"data":{"a":"1"},"colour":"red"}"#;

    let reply = send(
        &http,
        "POST",
        &format!("{CONFIGMAPS}?fieldValidation=Warn"),
        "application/json",
        body,
    )
    .await?;
    let created = expect(&reply, 201, "Warn")?;
    assert_eq!(
        reply.header("warning"),
        Some(r#"299 - "unknown field \"colour\"""#)
    );
    ensure!(
        created.get("colour").is_none(),
        "unknown fields are dropped"
    );

    let ignored =
        br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"i"},"colour":"red"}"#;
    let reply = send(
        &http,
        "POST",
        &format!("{CONFIGMAPS}?fieldValidation=Ignore"),
        "application/json",
        ignored,
    )
    .await?;
    expect(&reply, 201, "Ignore")?;
    assert_eq!(reply.header("warning"), None);

    let duplicated = br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"d"},"data":{"a":"1","a":"2"}}"#;
    let reply = send(
        &http,
        "POST",
        &format!("{CONFIGMAPS}?fieldValidation=Strict"),
        "application/json",
        duplicated,
    )
    .await?;
    let refused = expect(&reply, 400, "Strict with a duplicate")?;
    assert_eq!(
        refused["message"],
        r#"ConfigMap in version "v1" cannot be handled as a ConfigMap: strict decoding error: duplicate field "data.a""#
    );
    assert_eq!(http.get(&format!("{CONFIGMAPS}/d")).await?.status, 404);

    // A patch under Strict: an unknown field refused, the object unchanged.
    let patch = br#"{"data":{"b":"2"},"colour":"red"}"#;
    let path = format!("{CONFIGMAPS}/w?fieldValidation=Strict");
    let reply = send(&http, "PATCH", &path, "application/merge-patch+json", patch).await?;
    let refused = expect(&reply, 400, "Strict patch")?;
    ensure!(
        refused["message"]
            .as_str()
            .is_some_and(|m| m.ends_with(r#"unknown field "colour""#)),
        "{refused}"
    );
    assert_eq!(
        http.get_json(&format!("{CONFIGMAPS}/w")).await?["data"],
        json!({"a": "1"})
    );
    // Under Warn the same patch applies, with its warning.
    let path = format!("{CONFIGMAPS}/w?fieldValidation=Warn");
    let reply = send(&http, "PATCH", &path, "application/merge-patch+json", patch).await?;
    let patched = expect(&reply, 200, "Warn patch")?;
    assert_eq!(patched["data"], json!({"a": "1", "b": "2"}));
    assert_eq!(
        reply.header("warning"),
        Some(r#"299 - "unknown field \"colour\"""#)
    );

    let reply = send(
        &http,
        "POST",
        &format!("{CONFIGMAPS}?fieldValidation=Loose"),
        "application/json",
        body,
    )
    .await?;
    expect(&reply, 400, "an unknown fieldValidation")?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn propagation_policies_are_recorded_on_the_object() -> Result<()> {
    let server = ApiServer::start().await?;
    let http = server.http()?;
    for name in ["fg", "orphan", "bg"] {
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}});
        expect(&http.post(CONFIGMAPS, &cm).await?, 201, "create")?;
    }
    let delete = |name: &str, body: Value| {
        let path = format!("{CONFIGMAPS}/{name}");
        let body = serde_json::to_vec(&body).unwrap_or_default();
        let http = &http;
        async move { send(http, "DELETE", &path, "application/json", &body).await }
    };

    // Foreground: kept, marked, with the foregroundDeletion finalizer.
    let reply = delete("fg", json!({"propagationPolicy": "Foreground"})).await?;
    let marked = expect(&reply, 200, "Foreground")?;
    assert_eq!(
        marked["metadata"]["finalizers"],
        json!(["foregroundDeletion"])
    );
    ensure!(
        marked["metadata"]["deletionTimestamp"].is_string(),
        "{marked}"
    );
    let stored = http.get_json(&format!("{CONFIGMAPS}/fg")).await?;
    assert_eq!(
        stored["metadata"]["finalizers"],
        json!(["foregroundDeletion"])
    );

    // Orphan (also as the older orphanDependents, in the query).
    let reply = http
        .delete(&format!("{CONFIGMAPS}/orphan?orphanDependents=true"))
        .await?;
    let marked = expect(&reply, 200, "orphanDependents")?;
    assert_eq!(marked["metadata"]["finalizers"], json!(["orphan"]));

    // Background: gone at once.
    let reply = delete("bg", json!({"propagationPolicy": "Background"})).await?;
    expect(&reply, 200, "Background")?;
    assert_eq!(http.get(&format!("{CONFIGMAPS}/bg")).await?.status, 404);

    // A later delete asking another policy switches the finalizer.
    let reply = delete("fg", json!({"propagationPolicy": "Orphan"})).await?;
    let switched = expect(&reply, 200, "switch to Orphan")?;
    assert_eq!(switched["metadata"]["finalizers"], json!(["orphan"]));

    // Removing the finalizer (what the garbage collector does) ends it.
    let unfinalize = json!({"metadata": {"finalizers": null}});
    let reply = send(
        &http,
        "PATCH",
        &format!("{CONFIGMAPS}/fg"),
        "application/merge-patch+json",
        &serde_json::to_vec(&unfinalize)?,
    )
    .await?;
    expect(&reply, 200, "finalizer removed")?;
    assert_eq!(http.get(&format!("{CONFIGMAPS}/fg")).await?.status, 404);

    // Bad options are refused and change nothing.
    let reply = delete("orphan", json!({"propagationPolicy": "Sideways"})).await?;
    let refused = expect(&reply, 422, "unknown policy")?;
    ensure!(
        refused["message"]
            .as_str()
            .is_some_and(|m| m.contains("Unsupported value: \"Sideways\"")),
        "{refused}"
    );
    let reply = delete(
        "orphan",
        json!({"propagationPolicy": "Background", "orphanDependents": true}),
    )
    .await?;
    expect(&reply, 422, "both orphanDependents and a policy")?;
    let kept = http.get_json(&format!("{CONFIGMAPS}/orphan")).await?;
    assert_eq!(kept["metadata"]["finalizers"], json!(["orphan"]));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_logs_answer_a_clear_error_without_a_kubelet() -> Result<()> {
    let server = ApiServer::start().await?;
    let http = server.http()?;
    let pod = |name: &str, node: Option<&str>, containers: &[&str]| {
        let containers: Vec<Value> = containers
            .iter()
            .map(|c| json!({"name": c, "image": "busybox"}))
            .collect();
        let mut pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
                             "spec": {"containers": containers}});
        if let Some(node) = node {
            pod["spec"]["nodeName"] = json!(node);
        }
        pod
    };
    expect(
        &http.post(PODS, &pod("pending", None, &["c"])).await?,
        201,
        "create",
    )?;
    expect(
        &http.post(PODS, &pod("bound", Some("n1"), &["c"])).await?,
        201,
        "create",
    )?;
    expect(
        &http
            .post(PODS, &pod("two", Some("n1"), &["a", "b"]))
            .await?,
        201,
        "create",
    )?;

    let status = |reply: &HttpResponse| {
        reply
            .json()
            .map(|s| s["message"].as_str().unwrap_or("").to_string())
    };
    let reply = http.get(&format!("{PODS}/pending/log")).await?;
    assert_eq!(reply.status, 400, "{}", reply.text());
    ensure!(
        status(&reply)?.contains("is waiting to start"),
        "{}",
        reply.text()
    );

    let reply = http.get(&format!("{PODS}/bound/log?follow=true")).await?;
    assert_eq!(reply.status, 503, "{}", reply.text());
    ensure!(status(&reply)?.contains("node \"n1\""), "{}", reply.text());
    let reply = http.get(&format!("{PODS}/bound/log?tailLines=-1")).await?;
    assert_eq!(reply.status, 422, "{}", reply.text());
    ensure!(status(&reply)?.contains("tailLines"), "{}", reply.text());

    let reply = http.get(&format!("{PODS}/two/log")).await?;
    assert_eq!(reply.status, 400);
    assert_eq!(
        status(&reply)?,
        "a container name must be specified for pod two, choose one of: [a b]"
    );
    let reply = http.get(&format!("{PODS}/two/log?container=z")).await?;
    assert_eq!(status(&reply)?, "container z is not valid for pod two");
    assert_eq!(http.get(&format!("{PODS}/missing/log")).await?.status, 404);
    Ok(())
}
