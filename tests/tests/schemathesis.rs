//! schemathesis (4.32.5, which .ci/run installs in a virtualenv) against
//! skiff's own `/openapi/v2` document, on a `skiff up` with no controllers,
//! scheduler or kubelet, as the administrator (its client certificate):
//! generated and mutated requests for a bounded set of operations, one at
//! a time. No answer may be a 5xx or take longer than the request timeout;
//! every 4xx must be a Kubernetes `Status` with its code and reason; what
//! skiff documents (content types, the objects' schemas) must hold; and a
//! rejected request must not move the store's revision
//! (tests/python/schemathesis_hooks.py has the last two checks). Without
//! schemathesis the test is skipped (under CI=true it fails).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use serde_json::{json, Value};
use skiff_tests::api_server::ApiServer;
use skiff_tests::kube_http::KubeHttp;
use skiff_tests::python::{schemathesis_or_skip, script};
use skiff_tests::{store_client, test_pki};

/// The namespace the generated namespaced requests go to.
const NAMESPACE: &str = "schemathesis";
/// The operations of a CI run (35): the collections and objects of small
/// kinds that cover the write paths — ConfigMap, Secret, Service (with its
/// allocators), Lease, and Namespace (cluster-scoped, with its lifecycle).
const OPERATIONS: &str = concat!(
    "^/api/v1/namespaces/\\{namespace\\}/(configmaps|secrets|services)(/\\{name\\})?$",
    "|^/apis/coordination.k8s.io/v1/namespaces/\\{namespace\\}/leases(/\\{name\\})?$",
    "|^/api/v1/namespaces(/\\{name\\})?$",
);
/// Cases per operation and phase.
const MAX_EXAMPLES: &str = "10";
/// A request answered later than this is a hang (a watch ends in 1 s).
const REQUEST_TIMEOUT_SECONDS: &str = "20";
/// The whole run on a loaded 2-core machine, against a debug build.
const RUN_TIMEOUT: Duration = Duration::from_secs(600);
/// The checks that mean something for Kubernetes' OpenAPI documents; see
/// [`checks`].
const CHECKS: &[&str] = &[
    "not_a_server_error",
    "content_type_conformance",
    "response_schema_conformance",
    "unsupported_method",
    "kubernetes_status_for_rejections",
    "rejected_requests_change_nothing",
    "watch_events_are_json_lines",
];

/// Why the other built-in checks are left out: Kubernetes' OpenAPI lists
/// only the success codes and 401, so `status_code_conformance` would flag
/// every 404, 409 and 422 (the Status check covers them instead);
/// Kubernetes ignores what it does not know (unknown fields, `pretty=x`),
/// so `negative_data_rejection` would flag accepted schema violations; and
/// a schema-valid object is often invalid (a Pod with no containers), so
/// `positive_data_acceptance` would flag every 422. The document has no
/// links, security schemes or documented headers, which the stateful and
/// auth checks need.
fn checks() -> String {
    CHECKS.join(",")
}

/// One request as the hooks logged it.
struct Logged {
    line: Value,
    status: u64,
    before: i64,
    after: i64,
}

fn read_log(path: &Path) -> Result<Vec<Logged>> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .map(|line| {
            let line: Value = serde_json::from_str(line).with_context(|| line.to_string())?;
            let number = |field: &str| line[field].as_i64().unwrap_or(-1);
            Ok(Logged {
                status: line["status"].as_u64().unwrap_or(0),
                before: number("before"),
                after: number("after"),
                line,
            })
        })
        .collect()
}

/// The objects item operations find: `fixture` of each namespaced kind.
async fn create_fixtures(http: &KubeHttp) -> Result<()> {
    let namespace =
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}});
    expect_created(http, "/api/v1/namespaces", &namespace).await?;
    let ns = format!("/api/v1/namespaces/{NAMESPACE}");
    let metadata = json!({"name": "fixture", "labels": {"suite": "schemathesis"}});
    let objects = [
        (
            format!("{ns}/configmaps"),
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "data": {"a": "b"}}),
        ),
        (
            format!("{ns}/secrets"),
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": metadata, "stringData": {"a": "b"}}),
        ),
        (
            format!("{ns}/services"),
            json!({"apiVersion": "v1", "kind": "Service", "metadata": metadata,
            "spec": {"ports": [{"port": 80}], "selector": {"app": "fixture"}}}),
        ),
        (
            format!("/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases"),
            json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": metadata,
                "spec": {"holderIdentity": "fixture"}}),
        ),
    ];
    for (collection, object) in &objects {
        expect_created(http, collection, object).await?;
    }
    Ok(())
}

async fn expect_created(http: &KubeHttp, collection: &str, object: &Value) -> Result<()> {
    let reply = http.post(collection, object).await?;
    ensure!(
        reply.status == 201,
        "creating in {collection}: {} {}",
        reply.status,
        reply.text()
    );
    Ok(())
}

/// The keys written at revisions a rejected request spanned, for the
/// failure message (a key written again later shows its later revision).
async fn written_during(server: &ApiServer, moved: &[&Logged]) -> Result<Vec<String>> {
    let dump = store_client::dump(server.client_addr(), "/registry/").await?;
    Ok(moved
        .iter()
        .map(|r| {
            let keys: Vec<&str> = dump
                .iter()
                .filter(|(_, revision, _)| *revision > r.before && *revision <= r.after)
                .map(|(key, _, _)| key.as_str())
                .collect();
            format!("{} wrote {keys:?}", r.line)
        })
        .collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schemathesis_finds_no_server_error_hang_or_non_status_refusal() -> Result<()> {
    let test = "schemathesis_finds_no_server_error_hang_or_non_status_refusal";
    let Some(schemathesis) = schemathesis_or_skip(test) else {
        return Ok(());
    };
    let server = ApiServer::start().await?;
    let http = server.http()?;
    create_fixtures(&http).await?;

    let work = tempfile::tempdir()?;
    let spec = work.path().join("openapi-v2.json");
    let document = http.get("/openapi/v2").await?;
    ensure!(document.status == 200, "/openapi/v2: {}", document.status);
    std::fs::write(&spec, &document.body)?;
    // The PKI every skiff the tests start shares: the cluster CA and the
    // administrator's certificate (what `skiff up`'s kubeconfig holds).
    let pki = test_pki::dir();
    let (ca, cert, key) = (
        pki.join("ca.crt"),
        pki.join("admin.crt"),
        pki.join("admin.key"),
    );
    let log = work.path().join("requests.jsonl");
    let api = format!("https://{}", http.authority());

    let started = Instant::now();
    let run = tokio::process::Command::new(&schemathesis)
        .current_dir(work.path())
        .env("SCHEMATHESIS_HOOKS", script("schemathesis_hooks.py"))
        .env("SKIFF_ST_API", &api)
        .env("SKIFF_ST_CA", &ca)
        .env("SKIFF_ST_CERT", &cert)
        .env("SKIFF_ST_KEY", &key)
        .env("SKIFF_ST_NAMESPACE", NAMESPACE)
        .env("SKIFF_ST_LOG", &log)
        .args(["--no-color", "run"])
        .arg(&spec)
        .args(["--url", &api, "--workers", "1"])
        .arg("--request-cert")
        .arg(&cert)
        .arg("--request-cert-key")
        .arg(&key)
        .arg("--tls-verify")
        .arg(&ca)
        .args(["--request-timeout", REQUEST_TIMEOUT_SECONDS])
        .args(["--checks", &checks()])
        .args(["--include-path-regex", OPERATIONS])
        .args(["--max-examples", MAX_EXAMPLES])
        .args(["--phases", "examples,coverage,fuzzing"])
        .args(["--generation-database", "none"])
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(RUN_TIMEOUT, run)
        .await
        .context("schemathesis did not finish")??;
    let report = format!(
        "{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );

    let requests = read_log(&log)?;
    let mut by_status: BTreeMap<u64, usize> = BTreeMap::new();
    for r in &requests {
        *by_status.entry(r.status).or_default() += 1;
    }
    eprintln!(
        "schemathesis: {} requests in {:.0?}, by status {by_status:?}",
        requests.len(),
        started.elapsed()
    );
    ensure!(
        output.status.success(),
        "schemathesis failed ({}):\n{report}",
        output.status
    );

    // The hooks' own record, checked here too: the run reached the API,
    // wrote through it, and no refusal moved the store's revision.
    let accepted_writes = requests
        .iter()
        .filter(|r| r.status < 300 && r.after > r.before)
        .count();
    let refused = requests.iter().filter(|r| r.status >= 400).count();
    ensure!(
        accepted_writes > 0 && refused > 0,
        "the run wrote nothing or refused nothing ({by_status:?}):\n{report}"
    );
    let server_errors: Vec<&Value> = requests
        .iter()
        .filter(|r| r.status >= 500)
        .map(|r| &r.line)
        .collect();
    ensure!(server_errors.is_empty(), "5xx answers: {server_errors:?}");
    let moved: Vec<&Logged> = requests
        .iter()
        .filter(|r| r.status >= 400 && r.after != r.before)
        .collect();
    if !moved.is_empty() {
        let written = written_during(&server, &moved).await?;
        anyhow::bail!(
            "refused requests changed the store:\n{}",
            written.join("\n")
        );
    }
    Ok(())
}
