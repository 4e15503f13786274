//! Admission webhooks against `skiff up`, served by the test itself on
//! 127.0.0.1: a mutating webhook's JSON patch lands on the object, a
//! validating webhook's denial is the client's error, selectors and rules
//! pick what is sent, and a webhook that is down, answers 500 or is too
//! slow fails the request under failurePolicy Fail and is passed over
//! under Ignore.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{ensure, Result};
use axum::routing::post;
use axum::{Json, Router};
use base64::Engine;
use serde_json::{json, Value};
use skiff_tests::api_server::ApiServer;
use skiff_tests::kube_http::KubeHttp;
use skiff_tests::kubectl::{kubectl_or_skip, Kubectl};

const PODS: &str = "/api/v1/namespaces/default/pods";
const MUTATING: &str = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations";
const VALIDATING: &str = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations";

/// The allowed response to `review`, with an optional JSON patch.
fn allow(review: &Value, patch: Option<Value>) -> Value {
    let mut response = json!({"uid": review["request"]["uid"], "allowed": true});
    if let Some(patch) = patch {
        response["patchType"] = json!("JSONPatch");
        response["patch"] =
            json!(base64::engine::general_purpose::STANDARD.encode(patch.to_string()));
    }
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response})
}

/// Labels every pod `mutated: "yes"` and records the operation it saw.
async fn mutate(Json(review): Json<Value>) -> Json<Value> {
    let labels = &review["request"]["object"]["metadata"]["labels"];
    let patch = match labels.is_object() {
        true => json!([{"op": "add", "path": "/metadata/labels/mutated", "value": "yes"}]),
        false => json!([{"op": "add", "path": "/metadata/labels", "value": {"mutated": "yes"}}]),
    };
    Json(allow(&review, Some(patch)))
}

/// Denies pods named `bad`; allows the rest.
async fn deny(Json(review): Json<Value>) -> Json<Value> {
    let name = review["request"]["name"].as_str().unwrap_or("");
    if name != "bad" {
        return Json(allow(&review, None));
    }
    Json(
        json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": {
            "uid": review["request"]["uid"],
            "allowed": false,
            "status": {"code": 403, "message": "pods named bad are not welcome"},
        }}),
    )
}

async fn broken() -> (axum::http::StatusCode, &'static str) {
    (
        axum::http::StatusCode::INTERNAL_SERVER_ERROR,
        "webhook exploded",
    )
}

async fn slow(Json(review): Json<Value>) -> Json<Value> {
    tokio::time::sleep(Duration::from_secs(5)).await;
    Json(allow(&review, None))
}

/// Serves the webhooks; returns the address.
async fn serve_webhooks() -> Result<SocketAddr> {
    let app = Router::new()
        .route("/mutate", post(mutate))
        .route("/deny", post(deny))
        .route("/broken", post(broken))
        .route("/slow", post(slow));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(addr)
}

/// A webhook on pod CREATE with `url`, `policy`, and an objectSelector on
/// `hook: <selector>`.
fn webhook(name: &str, url: &str, policy: &str, selector: &str, extra: Value) -> Value {
    let mut hook = json!({
        "name": name,
        "clientConfig": {"url": url},
        "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}],
        "failurePolicy": policy,
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
        "objectSelector": {"matchLabels": {"hook": selector}},
    });
    if let Some(map) = extra.as_object() {
        for (k, v) in map {
            hook[k] = v.clone();
        }
    }
    hook
}

fn configuration(kind: &str, name: &str, webhooks: Vec<Value>) -> Value {
    json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": kind,
        "metadata": {"name": name}, "webhooks": webhooks})
}

fn pod(name: &str, hook: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"hook": hook}},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]}})
}

use skiff_tests::kube_http::expect_status as expect;

async fn create(http: &KubeHttp, path: &str, object: &Value) -> Result<Value> {
    expect(&http.post(path, object).await?, 201, path)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutating_and_validating_webhooks_patch_and_deny() -> Result<()> {
    let server = ApiServer::start().await?;
    let http = server.http()?;
    let addr = serve_webhooks().await?;

    let mutating = configuration(
        "MutatingWebhookConfiguration",
        "labeller",
        vec![webhook(
            "label.example.com",
            &format!("http://{addr}/mutate"),
            "Fail",
            "on",
            json!({}),
        )],
    );
    let stored = create(&http, MUTATING, &mutating).await?;
    let hook = &stored["webhooks"][0];
    assert_eq!(hook["timeoutSeconds"], 10, "defaulted: {stored}");
    assert_eq!(hook["matchPolicy"], "Equivalent");
    assert_eq!(hook["reinvocationPolicy"], "Never");
    let validating = configuration(
        "ValidatingWebhookConfiguration",
        "gate",
        vec![webhook(
            "gate.example.com",
            &format!("http://{addr}/deny"),
            "Fail",
            "on",
            json!({}),
        )],
    );
    create(&http, VALIDATING, &validating).await?;

    let patched = create(&http, PODS, &pod("good", "on")).await?;
    assert_eq!(patched["metadata"]["labels"]["mutated"], "yes", "{patched}");
    assert_eq!(
        patched["spec"]["restartPolicy"], "Always",
        "defaults still apply"
    );
    let untouched = create(&http, PODS, &pod("elsewhere", "off")).await?;
    ensure!(
        untouched["metadata"]["labels"].get("mutated").is_none(),
        "the objectSelector leaves it out: {untouched}"
    );

    let reply = http.post(PODS, &pod("bad", "on")).await?;
    let status = expect(&reply, 403, "a denied pod")?;
    assert_eq!(
        status["message"],
        "admission webhook \"gate.example.com\" denied the request: pods named bad are not welcome"
    );
    assert_eq!(http.get(&format!("{PODS}/bad")).await?.status, 404);

    // Side-effect free webhooks are called on dry runs too.
    let reply = http
        .request(
            "POST",
            &format!("{PODS}?dryRun=All"),
            Some("application/json"),
            Some(&serde_json::to_vec(&pod("dry", "on"))?),
        )
        .await?;
    let dry = expect(&reply, 201, "a dry run")?;
    assert_eq!(dry["metadata"]["labels"]["mutated"], "yes");

    // The configurations can always be removed.
    expect(
        &http.delete(&format!("{VALIDATING}/gate")).await?,
        200,
        "delete gate",
    )?;
    create(&http, PODS, &pod("bad", "on")).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_webhooks_fail_or_are_ignored_by_their_policy() -> Result<()> {
    let server = ApiServer::start().await?;
    let http = server.http()?;
    let addr = serve_webhooks().await?;
    let down = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        listener.local_addr()?
    };
    let hooks = vec![
        webhook(
            "down.example.com",
            &format!("http://{down}/"),
            "Fail",
            "down",
            json!({}),
        ),
        webhook(
            "down-ok.example.com",
            &format!("http://{down}/"),
            "Ignore",
            "down-ok",
            json!({}),
        ),
        webhook(
            "broken.example.com",
            &format!("http://{addr}/broken"),
            "Fail",
            "broken",
            json!({}),
        ),
        webhook(
            "broken-ok.example.com",
            &format!("http://{addr}/broken"),
            "Ignore",
            "broken-ok",
            json!({}),
        ),
        webhook(
            "slow.example.com",
            &format!("http://{addr}/slow"),
            "Fail",
            "slow",
            json!({"timeoutSeconds": 1}),
        ),
        webhook(
            "slow-ok.example.com",
            &format!("http://{addr}/slow"),
            "Ignore",
            "slow-ok",
            json!({"timeoutSeconds": 1}),
        ),
    ];
    create(
        &http,
        VALIDATING,
        &configuration("ValidatingWebhookConfiguration", "flaky", hooks),
    )
    .await?;

    for (label, name) in [
        ("down", "down.example.com"),
        ("broken", "broken.example.com"),
        ("slow", "slow.example.com"),
    ] {
        let reply = http.post(PODS, &pod(label, label)).await?;
        let status = expect(&reply, 500, label)?;
        assert_eq!(status["reason"], "InternalError");
        let message = status["message"].as_str().unwrap_or("");
        ensure!(
            message.starts_with(&format!("Internal error occurred: failed calling webhook \"{name}\": failed to call webhook: ")),
            "{label}: {message}"
        );
        assert_eq!(http.get(&format!("{PODS}/{label}")).await?.status, 404);
    }
    let slow = http.post(PODS, &pod("slow2", "slow")).await?;
    ensure!(
        slow.text().contains("context deadline exceeded"),
        "{}",
        slow.text()
    );
    let broken = http.post(PODS, &pod("broken2", "broken")).await?;
    ensure!(
        broken.text().contains("webhook exploded"),
        "{}",
        broken.text()
    );

    for label in ["down-ok", "broken-ok", "slow-ok"] {
        create(&http, PODS, &pod(label, label)).await?;
    }

    // kubectl shows the failure as it does for Kubernetes.
    if let Some(binary) = kubectl_or_skip("failing_webhooks_fail_or_are_ignored_by_their_policy") {
        let kubectl = Kubectl::new(binary, &server.kubeconfig())?;
        kubectl.manifest("down.yaml", &serde_json::to_string(&pod("down3", "down"))?)?;
        let refused = kubectl.fails(&["create", "-f", "down.yaml"])?;
        ensure!(
            refused.contains("Error from server (InternalError): error when creating \"down.yaml\": Internal error occurred: failed calling webhook \"down.example.com\""),
            "{refused}"
        );
    }
    Ok(())
}
