//! Admission webhooks against `skiff up`, served by the test itself on
//! 127.0.0.1: a mutating webhook's JSON patch lands on the object, a
//! validating webhook's denial is the client's error, selectors and rules
//! pick what is sent, and a webhook that is down, answers 500 or is too
//! slow fails the request under failurePolicy Fail and is passed over
//! under Ignore. Over https the webhook's caBundle decides whom to trust.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{ensure, Result};
use axum::routing::post;
use axum::{Json, Router};
use base64::Engine;
use serde_json::{json, Value};
use skiff_tests::api_server::ApiServer;
use skiff_tests::kube_http::KubeHttp;
use skiff_tests::kubectl::{kubectl_or_skip, Kubectl};
use tokio::sync::mpsc;
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::PrivateKeyDer;
use tokio_rustls::server::TlsStream;

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

/// On `pods/binding`: denies bindings to the node `tainted`, and any review
/// that is not of a Binding created through the pod's binding subresource.
async fn bindings(Json(review): Json<Value>) -> Json<Value> {
    let request = &review["request"];
    let seen = format!(
        "{} {} of {}/{}",
        request["operation"].as_str().unwrap_or(""),
        request["kind"]["kind"].as_str().unwrap_or(""),
        request["resource"]["resource"].as_str().unwrap_or(""),
        request["subResource"].as_str().unwrap_or(""),
    );
    let refusal = if seen != "CREATE Binding of pods/binding" {
        Some(format!("unexpected review: {seen}"))
    } else if request["object"]["target"]["name"] == "tainted" {
        Some("no pods on tainted".to_string())
    } else {
        None
    };
    match refusal {
        None => Json(allow(&review, None)),
        Some(message) => Json(
            json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": {
                "uid": request["uid"], "allowed": false,
                "status": {"code": 403, "message": message},
            }}),
        ),
    }
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

fn webhook_app() -> Router {
    Router::new()
        .route("/mutate", post(mutate))
        .route("/deny", post(deny))
        .route("/bindings", post(bindings))
        .route("/broken", post(broken))
        .route("/slow", post(slow))
}

/// Serves the webhooks over plain http; returns the address.
async fn serve_webhooks() -> Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move { axum::serve(listener, webhook_app()).await });
    Ok(addr)
}

/// A self-signed certificate for 127.0.0.1 and localhost, and its key.
fn serving_certificate() -> Result<rcgen::CertifiedKey<rcgen::KeyPair>> {
    Ok(rcgen::generate_simple_self_signed(vec![
        "127.0.0.1".to_string(),
        "localhost".to_string(),
    ])?)
}

/// A self-signed CA certificate of no webhook, as a caBundle.
fn unrelated_ca_bundle() -> Result<String> {
    let mut params = rcgen::CertificateParams::new(Vec::new())?;
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params.distinguished_name = rcgen::DistinguishedName::new();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "unrelated webhook CA");
    let ca = params.self_signed(&rcgen::KeyPair::generate()?)?;
    Ok(base64::engine::general_purpose::STANDARD.encode(ca.pem()))
}

/// Serves the webhooks over TLS with a new self-signed certificate for
/// 127.0.0.1 and localhost; the address and the caBundle that trusts it.
async fn serve_webhooks_over_tls() -> Result<(SocketAddr, String)> {
    let certified = serving_certificate()?;
    let key = PrivateKeyDer::Pkcs8(certified.signing_key.serialize_der().into());
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(vec![certified.cert.der().clone()], key)?;
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = tcp.local_addr()?;
    let (handshaken, incoming) = mpsc::channel(16);
    tokio::spawn(async move {
        while let Ok((stream, peer)) = tcp.accept().await {
            let (acceptor, handshaken) = (acceptor.clone(), handshaken.clone());
            // A client that does not trust the certificate ends its
            // handshake; that connection is dropped here.
            tokio::spawn(async move {
                if let Ok(tls) = acceptor.accept(stream).await {
                    let _ = handshaken.send((tls, peer)).await;
                }
            });
        }
    });
    let listener = TlsListener { addr, incoming };
    tokio::spawn(async move { axum::serve(listener, webhook_app()).await });
    let ca_bundle = base64::engine::general_purpose::STANDARD.encode(certified.cert.pem());
    Ok((addr, ca_bundle))
}

/// The TLS connections whose handshake completed, for `axum::serve`.
struct TlsListener {
    addr: SocketAddr,
    incoming: mpsc::Receiver<(TlsStream<tokio::net::TcpStream>, SocketAddr)>,
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<tokio::net::TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.incoming.recv().await {
            Some(handshaken) => handshaken,
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        Ok(self.addr)
    }
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

/// As in Kubernetes, a binding is reviewed as the CREATE of a Binding
/// through `pods/binding`, and a denial leaves the pod unplaced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_binding_is_reviewed_as_a_binding() -> Result<()> {
    let server = ApiServer::start().await?;
    let http = server.http()?;
    let addr = serve_webhooks().await?;
    let mut hook = webhook(
        "bindings.example.com",
        &format!("http://{addr}/bindings"),
        "Fail",
        "",
        json!({}),
    );
    hook["rules"][0]["resources"] = json!(["pods/binding"]);
    hook.as_object_mut().map(|h| h.remove("objectSelector"));
    create(
        &http,
        VALIDATING,
        &configuration("ValidatingWebhookConfiguration", "placement", vec![hook]),
    )
    .await?;
    let mut manual = pod("placed", "off");
    manual["spec"]["schedulerName"] = json!("by-hand");
    create(&http, PODS, &manual).await?;
    let bind = |node: &str| {
        json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "placed"},
               "target": {"kind": "Node", "name": node}})
    };
    let path = format!("{PODS}/placed/binding");
    let reply = http.post(&path, &bind("tainted")).await?;
    let status = expect(&reply, 403, "a denied binding")?;
    assert_eq!(
        status["message"],
        "admission webhook \"bindings.example.com\" denied the request: no pods on tainted"
    );
    let placed = http.get_json(&format!("{PODS}/placed")).await?;
    assert_eq!(placed["spec"]["nodeName"], Value::Null, "{placed}");
    create(&http, &path, &bind("n1")).await?;
    let placed = http.get_json(&format!("{PODS}/placed")).await?;
    assert_eq!(placed["spec"]["nodeName"], "n1", "{placed}");
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_webhooks_are_trusted_through_their_ca_bundle() -> Result<()> {
    let server = ApiServer::start().await?;
    let http = server.http()?;
    let (addr, ca_bundle) = serve_webhooks_over_tls().await?;
    let unrelated = unrelated_ca_bundle()?;
    let port = addr.port();
    let https = |name: &str, host: &str, bundle: &str, policy: &str, selector: &str| {
        let mut hook = webhook(
            name,
            &format!("https://{host}:{port}/mutate"),
            policy,
            selector,
            json!({}),
        );
        hook["clientConfig"]["caBundle"] = json!(bundle);
        hook
    };
    let hooks = vec![
        https("ip.example.com", "127.0.0.1", &ca_bundle, "Fail", "ip"),
        https("dns.example.com", "localhost", &ca_bundle, "Fail", "dns"),
        https(
            "untrusted.example.com",
            "127.0.0.1",
            &unrelated,
            "Fail",
            "untrusted",
        ),
        https(
            "untrusted-ok.example.com",
            "127.0.0.1",
            &unrelated,
            "Ignore",
            "untrusted-ok",
        ),
    ];
    create(
        &http,
        MUTATING,
        &configuration("MutatingWebhookConfiguration", "tls-labeller", hooks),
    )
    .await?;

    for label in ["ip", "dns"] {
        let patched = create(&http, PODS, &pod(label, label)).await?;
        assert_eq!(
            patched["metadata"]["labels"]["mutated"], "yes",
            "{label}: {patched}"
        );
    }

    let reply = http.post(PODS, &pod("untrusted", "untrusted")).await?;
    let status = expect(&reply, 500, "an untrusted webhook under Fail")?;
    assert_eq!(status["reason"], "InternalError");
    let message = status["message"].as_str().unwrap_or("");
    let url = format!("https://127.0.0.1:{port}/mutate");
    assert_eq!(
        message,
        format!(
            "Internal error occurred: failed calling webhook \"untrusted.example.com\": failed to call webhook: \
             Post {url:?}: tls: failed to verify certificate: x509: certificate signed by unknown authority"
        )
    );
    assert_eq!(http.get(&format!("{PODS}/untrusted")).await?.status, 404);

    let unmutated = create(&http, PODS, &pod("untrusted-ok", "untrusted-ok")).await?;
    ensure!(
        unmutated["metadata"]["labels"].get("mutated").is_none(),
        "an untrusted webhook under Ignore is passed over: {unmutated}"
    );
    Ok(())
}
