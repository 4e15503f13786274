//! The Python `kubernetes` client (37.0.2, which .ci/run installs in a
//! virtualenv) against `skiff up`, loaded from the kubeconfig it writes:
//! create a ConfigMap and pods (POSTs with no Content-Type), list them with
//! label selectors, and watch.Watch().stream seeing ADDED, MODIFIED and
//! DELETED for a pod a thread changes. The script prints what it saw; the
//! values are checked here and against the server over HTTP. Without the
//! client the test is skipped (under CI=true it fails).

use std::time::Duration;

use anyhow::{ensure, Context, Result};
use serde_json::{json, Value};
use skiff_tests::api_server::ApiServer;
use skiff_tests::python::{python_with_kubernetes_or_skip, script};

/// Python's start-up, the client's import and a 15 s watch at most.
const SCRIPT_TIMEOUT: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_client_creates_lists_and_watches() -> Result<()> {
    let Some(python) = python_with_kubernetes_or_skip("python_client_creates_lists_and_watches")
    else {
        return Ok(());
    };
    let server = ApiServer::start().await?;
    let run = tokio::process::Command::new(&python)
        .arg(script("crud_watch.py"))
        .arg(server.kubeconfig())
        .arg("default")
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(SCRIPT_TIMEOUT, run)
        .await
        .context("crud_watch.py did not finish")??;
    let stderr = String::from_utf8_lossy(&output.stderr);
    ensure!(
        output.status.success(),
        "crud_watch.py failed ({}); stderr:\n{stderr}",
        output.status
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    let seen: Value = serde_json::from_str(stdout.trim())
        .with_context(|| format!("crud_watch.py printed {stdout}; stderr:\n{stderr}"))?;

    assert_eq!(seen["failures"], json!([]), "the changing thread failed");
    assert_eq!(seen["configmap"]["name"], "py-settings");
    assert_eq!(seen["configmap"]["namespace"], "default");
    assert_eq!(seen["configmap"]["data"], json!({"mode": "fast"}));
    assert_eq!(seen["configmap_read"], json!({"mode": "fast"}));
    assert_eq!(seen["listed"], json!(["py-a", "py-b"]));
    assert_eq!(seen["listed_not"], json!(["py-other"]));
    assert_eq!(seen["listed_cm"], json!(["py-settings"]));

    // Each event is the change the thread made, with its resourceVersion.
    let changes = seen["changes"].as_array().context("changes")?;
    assert_eq!(changes.len(), 3, "the thread made three changes: {seen}");
    let expected: Vec<Value> = changes
        .iter()
        .zip([Value::Null, json!("two"), json!("two")])
        .map(|(change, step)| json!([change[0], change[1], change[2], step]))
        .collect();
    assert_eq!(seen["events"], json!(expected));
    let revisions: Vec<i64> = changes
        .iter()
        .map(|c| c[2].as_str().and_then(|r| r.parse().ok()).unwrap_or(0))
        .collect();
    ensure!(
        revisions.windows(2).all(|w| w[0] < w[1]),
        "resourceVersions rise: {revisions:?}"
    );

    // What the client made is on the server.
    let http = server.http()?;
    let cm = http
        .get_json("/api/v1/namespaces/default/configmaps/py-settings")
        .await?;
    assert_eq!(cm["metadata"]["uid"], seen["configmap"]["uid"]);
    assert_eq!(cm["metadata"]["labels"], json!({"app": "py"}));
    let pods = http.get_json("/api/v1/namespaces/default/pods").await?;
    let names: Vec<&str> = pods["items"]
        .as_array()
        .context("items")?
        .iter()
        .filter_map(|p| p["metadata"]["name"].as_str())
        .collect();
    assert_eq!(names, ["py-a", "py-b", "py-other"], "py-w was deleted");
    Ok(())
}
