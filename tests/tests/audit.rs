//! The audit log of `skiff up`: with a policy file, each request the
//! policy selects is one JSON line at its level (Request carries the body,
//! Metadata does not), with the user, verb, object, source address, user
//! agent, response code and the Audit-Id the response carried; what the
//! policy leaves out is not written. Without flags, `skiff up` writes
//! DATA_DIR/audit.log with its default policy: writes and Secrets at
//! Metadata, never a Secret's value.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use serde_json::{json, Value};
use skiff_tests::api_server::ApiServer;

const CONFIG_MAPS: &str = "/api/v1/namespaces/default/configmaps";

/// The log's events once `wanted` holds for them (within 10 s).
async fn events_until(log: &Path, wanted: impl Fn(&[Value]) -> bool) -> Result<Vec<Value>> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        let events = text
            .lines()
            .map(|line| serde_json::from_str(line).with_context(|| format!("not JSON: {line}")))
            .collect::<Result<Vec<Value>>>()?;
        if wanted(&events) {
            return Ok(events);
        }
        ensure!(Instant::now() < deadline, "the audit log holds {events:#?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn find<'a>(events: &'a [Value], verb: &str, resource: &str, name: &str) -> Option<&'a Value> {
    events.iter().find(|e| {
        e["verb"] == verb
            && e["objectRef"]["resource"] == resource
            && e["objectRef"]["name"] == name
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_are_audited_at_the_level_the_policy_gives_them() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let policy = dir.path().join("policy.yaml");
    std::fs::write(
        &policy,
        r#"apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: None
  verbs: ["get", "list"]
- level: Request
  resources: [{group: "", resources: ["configmaps"]}]
  omitManagedFields: true
- level: Metadata
"#,
    )?;
    let log = dir.path().join("audit").join("audit.log");
    let server = ApiServer::start_scheduling_with(&[
        "--audit-policy-file".into(),
        policy.display().to_string(),
        "--audit-log-path".into(),
        log.display().to_string(),
    ])
    .await?;
    let http = server.http()?;
    let created = http
        .post(
            CONFIG_MAPS,
            &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "audited"},
                    "data": {"color": "blue"}}),
        )
        .await?;
    ensure!(created.status == 201, "{}", created.text());
    let audit_id = created
        .header("audit-id")
        .context("no Audit-Id header")?
        .to_string();
    ensure!(http.get(&format!("{CONFIG_MAPS}/audited")).await?.status == 200);
    let missing = http.delete("/api/v1/namespaces/default/pods/nope").await?;
    ensure!(missing.status == 404);
    let events = events_until(&log, |events| {
        find(events, "delete", "pods", "nope").is_some()
            && events
                .iter()
                .any(|e| e["verb"] == "create" && e["objectRef"]["resource"] == "configmaps")
    })
    .await?;
    let create = events
        .iter()
        .find(|e| e["auditID"] == audit_id.as_str())
        .context("no event with the response's Audit-Id")?;
    ensure!(
        create["kind"] == "Event" && create["apiVersion"] == "audit.k8s.io/v1",
        "{create}"
    );
    ensure!(
        create["level"] == "Request" && create["stage"] == "ResponseComplete",
        "{create}"
    );
    ensure!(create["verb"] == "create", "{create}");
    // The user the client certificate of the admin's kubeconfig names.
    ensure!(create["user"]["username"] == "kubernetes-admin", "{create}");
    ensure!(
        create["user"]["groups"] == json!(["system:masters", "system:authenticated"]),
        "{create}"
    );
    ensure!(create["sourceIPs"] == json!(["127.0.0.1"]), "{create}");
    ensure!(create["userAgent"] == "skiff-tests", "{create}");
    ensure!(
        create["objectRef"]
            == json!({"resource": "configmaps", "namespace": "default", "apiVersion": "v1"}),
        "{create}"
    );
    ensure!(create["responseStatus"]["code"] == 201, "{create}");
    ensure!(
        create["requestObject"]["data"]["color"] == "blue",
        "{create}"
    );
    ensure!(create.get("responseObject").is_none(), "{create}");
    for field in ["requestReceivedTimestamp", "stageTimestamp"] {
        ensure!(
            create[field].as_str().is_some_and(|t| t.ends_with('Z')),
            "{create}"
        );
    }
    let delete = find(&events, "delete", "pods", "nope").context("the delete")?;
    ensure!(delete["level"] == "Metadata", "{delete}");
    ensure!(delete.get("requestObject").is_none(), "{delete}");
    ensure!(delete["responseStatus"]["code"] == 404, "{delete}");
    ensure!(delete["responseStatus"]["reason"] == "NotFound", "{delete}");
    ensure!(
        find(&events, "get", "configmaps", "audited").is_none(),
        "a get the policy leaves out was logged"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skiff_up_audits_writes_by_default_and_never_a_secret_value() -> Result<()> {
    let server = ApiServer::start().await?;
    let http = server.http()?;
    let secret = http
        .post(
            "/api/v1/namespaces/default/secrets",
            &json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "token"},
                    "stringData": {"token": "never-in-the-audit-log"}}),
        )
        .await?;
    ensure!(secret.status == 201, "{}", secret.text());
    ensure!(
        http.get("/api/v1/namespaces/default/secrets/token")
            .await?
            .status
            == 200
    );
    let log = server.data_dir().join("audit.log");
    let events = events_until(&log, |events| {
        find(events, "get", "secrets", "token").is_some()
    })
    .await?;
    let create = events
        .iter()
        .find(|e| e["verb"] == "create" && e["objectRef"]["resource"] == "secrets")
        .context("the Secret's create")?;
    ensure!(create["level"] == "Metadata", "{create}");
    let text = std::fs::read_to_string(&log)?;
    ensure!(
        !text.contains("never-in-the-audit-log"),
        "a Secret value is in the audit log"
    );
    // Reads of anything else are not recorded.
    ensure!(http.get(CONFIG_MAPS).await?.status == 200);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let text = std::fs::read_to_string(&log)?;
    ensure!(
        !text
            .lines()
            .any(|l| l.contains("\"verb\":\"list\"") && l.contains("configmaps")),
        "a list was audited by the default policy"
    );
    Ok(())
}
