//! Served versions beside the storage version, against `skiff up`:
//! `batch/v1beta1` CronJob and `scheduling.k8s.io/v1beta1` PriorityClass
//! written and read at either version (kubectl and HTTP), a watch at
//! v1beta1 seeing objects written at v1, patches and server-side apply at
//! v1beta1, discovery and explain, the deprecation warning, and unknown
//! v1beta1 fields refused under Strict validation.

use std::time::Duration;

use anyhow::{ensure, Context, Result};
use serde_json::{json, Value};
use skiff_tests::kube_http::KubeHttp;

const EVENT_TIMEOUT: Duration = Duration::from_secs(20);

const CRONJOBS_V1: &str = "/apis/batch/v1/namespaces/default/cronjobs";
const CRONJOBS_V1BETA1: &str = "/apis/batch/v1beta1/namespaces/default/cronjobs";
const CLASSES_V1: &str = "/apis/scheduling.k8s.io/v1/priorityclasses";
const CLASSES_V1BETA1: &str = "/apis/scheduling.k8s.io/v1beta1/priorityclasses";

const CRONJOB_DEPRECATED: &str =
    "batch/v1beta1 CronJob is deprecated in v1.21+, unavailable in v1.25+; use batch/v1 CronJob";
const CLASS_DEPRECATED: &str = "scheduling.k8s.io/v1beta1 PriorityClass is deprecated in v1.14+, unavailable in v1.22+; use scheduling.k8s.io/v1 PriorityClass";

/// A tutorial's CronJob, as many still write it (a schedule that will not
/// fire while the test runs).
const CRONJOB_V1BETA1: &str = "apiVersion: batch/v1beta1
kind: CronJob
metadata:
  name: hello
spec:
  schedule: \"0 0 1 1 *\"
  jobTemplate:
    spec:
      template:
        spec:
          containers:
          - name: hello
            image: busybox
            command: [\"echo\", \"hello\"]
          restartPolicy: OnFailure
";

const CRONJOB_TYPO: &str = "apiVersion: batch/v1beta1
kind: CronJob
metadata:
  name: typo
spec:
  schedule: \"0 0 1 1 *\"
  startingDeadlineSecond: 10
  jobTemplate:
    spec:
      template:
        spec:
          containers: [{name: c, image: busybox}]
          restartPolicy: OnFailure
";

const CLASS_V1BETA1: &str = "apiVersion: scheduling.k8s.io/v1beta1
kind: PriorityClass
metadata:
  name: high
value: 1000000
globalDefault: false
description: for the important pods
";

use skiff_tests::api_server::with_kubectl as session;

use skiff_tests::kube_http::expect_status as expect;

/// The next event of `watch` that is not a bookmark.
async fn next_object(watch: &mut skiff_tests::kube_http::WatchStream) -> Result<Value> {
    loop {
        let event = watch
            .next_event(EVENT_TIMEOUT)
            .await?
            .context("the watch ended")?;
        if event["type"] != "BOOKMARK" {
            return Ok(event);
        }
    }
}

fn cron_job_v1(name: &str) -> Value {
    json!({
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {"name": name},
        "spec": {
            "schedule": "0 0 1 1 *",
            "jobTemplate": {"spec": {"template": {"spec": {
                "restartPolicy": "OnFailure",
                "containers": [{"name": "c", "image": "busybox"}],
            }}}},
        },
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cron_jobs_are_served_at_v1beta1_beside_v1() -> Result<()> {
    let Some((server, kubectl)) = session("cron_jobs_are_served_at_v1beta1_beside_v1").await?
    else {
        return Ok(());
    };
    let http = server.http()?;

    // Discovery lists both versions, v1 preferred.
    let versions = kubectl.ok(&["api-versions"])?;
    for version in ["batch/v1", "batch/v1beta1", "scheduling.k8s.io/v1beta1"] {
        ensure!(
            versions.lines().any(|l| l == version),
            "{version} missing from api-versions:\n{versions}"
        );
    }
    let explained = kubectl.ok(&["explain", "cronjobs.spec", "--api-version=batch/v1beta1"])?;
    ensure!(
        explained.contains("v1beta1") && explained.contains("schedule"),
        "explain at v1beta1:\n{explained}"
    );

    // A v1beta1 manifest, validated by kubectl against the v1beta1 OpenAPI
    // document, created with the deprecation warning printed.
    kubectl.manifest("cronjob.yaml", CRONJOB_V1BETA1)?;
    let applied = kubectl.run(&["apply", "-f", "cronjob.yaml"])?;
    ensure!(
        applied.code == Some(0) && applied.stdout == "cronjob.batch/hello created\n",
        "apply: {applied:?}"
    );
    ensure!(
        applied
            .stderr
            .contains(&format!("Warning: {CRONJOB_DEPRECATED}")),
        "no deprecation warning: {}",
        applied.stderr
    );

    // Stored once, read at either version.
    let v1 = http.get_json(&format!("{CRONJOBS_V1}/hello")).await?;
    assert_eq!(v1["apiVersion"], "batch/v1");
    assert_eq!(v1["spec"]["schedule"], "0 0 1 1 *");
    // v1beta1's defaults were applied on the way in.
    assert_eq!(v1["spec"]["successfulJobsHistoryLimit"], 3);
    assert_eq!(v1["spec"]["concurrencyPolicy"], "Allow");
    let yaml = kubectl.ok(&["get", "cronjobs.v1beta1.batch", "hello", "-o", "yaml"])?;
    ensure!(
        yaml.contains("apiVersion: batch/v1beta1") && yaml.contains("schedule: 0 0 1 1 *"),
        "{yaml}"
    );
    let reply = http.get(&format!("{CRONJOBS_V1BETA1}/hello")).await?;
    let beta = expect(&reply, 200, "GET at v1beta1")?;
    assert_eq!(beta["apiVersion"], "batch/v1beta1");
    assert_eq!(
        beta["metadata"]["resourceVersion"],
        v1["metadata"]["resourceVersion"]
    );
    ensure!(
        reply
            .header("warning")
            .is_some_and(|w| w.contains(CRONJOB_DEPRECATED)),
        "GET at v1beta1 carries no warning: {:?}",
        reply.headers
    );
    ensure!(
        http.get(&format!("{CRONJOBS_V1}/hello"))
            .await?
            .header("warning")
            .is_none(),
        "v1 is not deprecated"
    );
    let table = kubectl.ok(&["get", "cronjobs.v1beta1.batch"])?;
    ensure!(
        table.starts_with("NAME") && table.contains("SCHEDULE") && table.contains("hello"),
        "{table}"
    );

    // Lists are of the version asked for, kind and apiVersion included.
    let list = http.get_json(CRONJOBS_V1BETA1).await?;
    assert_eq!(
        (list["kind"].as_str(), list["apiVersion"].as_str()),
        (Some("CronJobList"), Some("batch/v1beta1"))
    );
    assert_eq!(list["items"][0]["apiVersion"], "batch/v1beta1");

    // A watch at v1beta1 sees an object written at v1, as v1beta1.
    let rv = list["metadata"]["resourceVersion"].as_str().unwrap_or("");
    let mut watch = http
        .watch(&format!(
            "{CRONJOBS_V1BETA1}?watch=true&resourceVersion={rv}"
        ))
        .await?;
    expect(
        &http
            .post(CRONJOBS_V1, &cron_job_v1("written-at-v1"))
            .await?,
        201,
        "create at v1",
    )?;
    let event = next_object(&mut watch).await?;
    assert_eq!(event["type"], "ADDED");
    assert_eq!(event["object"]["metadata"]["name"], "written-at-v1");
    assert_eq!(event["object"]["apiVersion"], "batch/v1beta1");

    // A merge patch at v1beta1, seen at v1 and by the watch.
    let patched = http
        .request(
            "PATCH",
            &format!("{CRONJOBS_V1BETA1}/hello"),
            Some("application/merge-patch+json"),
            Some(br#"{"spec":{"suspend":true}}"#),
        )
        .await?;
    let patched = expect(&patched, 200, "merge patch at v1beta1")?;
    assert_eq!(patched["apiVersion"], "batch/v1beta1");
    assert_eq!(patched["spec"]["suspend"], true);
    let v1 = http.get_json(&format!("{CRONJOBS_V1}/hello")).await?;
    assert_eq!(v1["spec"]["suspend"], true);
    let event = next_object(&mut watch).await?;
    assert_eq!(event["type"], "MODIFIED");
    assert_eq!(event["object"]["apiVersion"], "batch/v1beta1");

    // kubectl apply of a changed v1beta1 manifest patches at v1beta1.
    kubectl.manifest(
        "cronjob.yaml",
        &CRONJOB_V1BETA1.replace("0 0 1 1 *", "0 0 2 1 *"),
    )?;
    assert_eq!(
        kubectl.ok(&["apply", "-f", "cronjob.yaml"])?,
        "cronjob.batch/hello configured\n"
    );
    let v1 = http.get_json(&format!("{CRONJOBS_V1}/hello")).await?;
    assert_eq!(v1["spec"]["schedule"], "0 0 2 1 *");
    assert_eq!(
        v1["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["name"],
        "hello"
    );

    // Strict validation names the unknown v1beta1 field.
    kubectl.manifest("typo.yaml", CRONJOB_TYPO)?;
    let refused = kubectl.fails(&["apply", "-f", "typo.yaml"])?;
    ensure!(
        refused.contains(r#"unknown field "spec.startingDeadlineSecond""#)
            && refused.contains("v1beta1"),
        "{refused}"
    );
    let missing = http.get(&format!("{CRONJOBS_V1}/typo")).await?;
    assert_eq!(missing.status, 404);

    // Deleted at v1beta1, the reply in v1beta1.
    let deleted = http.delete(&format!("{CRONJOBS_V1BETA1}/hello")).await?;
    let deleted = expect(&deleted, 200, "delete at v1beta1")?;
    assert_eq!(deleted["apiVersion"], "batch/v1beta1");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn priority_classes_are_served_at_v1beta1_beside_v1() -> Result<()> {
    let Some((server, kubectl)) =
        session("priority_classes_are_served_at_v1beta1_beside_v1").await?
    else {
        return Ok(());
    };
    let http: KubeHttp = server.http()?;

    kubectl.manifest("class.yaml", CLASS_V1BETA1)?;
    let applied = kubectl.run(&["apply", "-f", "class.yaml"])?;
    ensure!(
        applied.code == Some(0)
            && applied.stdout == "priorityclass.scheduling.k8s.io/high created\n"
            && applied.stderr.contains(CLASS_DEPRECATED),
        "apply: {applied:?}"
    );
    let v1 = http.get_json(&format!("{CLASSES_V1}/high")).await?;
    assert_eq!(v1["apiVersion"], "scheduling.k8s.io/v1");
    assert_eq!(v1["value"], 1000000);
    assert_eq!(v1["description"], "for the important pods");
    let yaml = kubectl.ok(&[
        "get",
        "priorityclasses.v1beta1.scheduling.k8s.io",
        "high",
        "-o",
        "yaml",
    ])?;
    ensure!(
        yaml.contains("apiVersion: scheduling.k8s.io/v1beta1") && yaml.contains("value: 1000000"),
        "{yaml}"
    );

    // A watch at v1beta1 sees a class written at v1.
    let list = http.get_json(CLASSES_V1BETA1).await?;
    assert_eq!(list["kind"], "PriorityClassList");
    assert_eq!(list["apiVersion"], "scheduling.k8s.io/v1beta1");
    let rv = list["metadata"]["resourceVersion"].as_str().unwrap_or("");
    let mut watch = http
        .watch(&format!(
            "{CLASSES_V1BETA1}?watch=true&resourceVersion={rv}"
        ))
        .await?;
    let low = json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "low"}, "value": 10});
    expect(&http.post(CLASSES_V1, &low).await?, 201, "create at v1")?;
    let event = next_object(&mut watch).await?;
    assert_eq!(event["type"], "ADDED");
    assert_eq!(event["object"]["metadata"]["name"], "low");
    assert_eq!(event["object"]["apiVersion"], "scheduling.k8s.io/v1beta1");

    // Server-side apply at v1beta1.
    let config = "apiVersion: scheduling.k8s.io/v1beta1\nkind: PriorityClass\nmetadata:\n  name: mid\nvalue: 500\n";
    let reply = http
        .request(
            "PATCH",
            &format!("{CLASSES_V1BETA1}/mid?fieldManager=test&fieldValidation=Strict"),
            Some("application/apply-patch+yaml"),
            Some(config.as_bytes()),
        )
        .await?;
    let created = expect(&reply, 201, "server-side apply at v1beta1")?;
    assert_eq!(created["apiVersion"], "scheduling.k8s.io/v1beta1");
    assert_eq!(created["value"], 500);
    ensure!(
        reply
            .header("warning")
            .is_some_and(|w| w.contains(CLASS_DEPRECATED)),
        "{:?}",
        reply.headers
    );
    let event = next_object(&mut watch).await?;
    assert_eq!(
        (
            event["type"].as_str(),
            event["object"]["metadata"]["name"].as_str()
        ),
        (Some("ADDED"), Some("mid"))
    );
    assert_eq!(
        http.get_json(&format!("{CLASSES_V1}/mid")).await?["value"],
        500
    );

    // An unknown field in an applied configuration at v1beta1 is refused.
    let typo = "apiVersion: scheduling.k8s.io/v1beta1\nkind: PriorityClass\nmetadata:\n  name: mid\nvalu: 5\n";
    let reply = http
        .request(
            "PATCH",
            &format!("{CLASSES_V1BETA1}/mid?fieldManager=test&fieldValidation=Strict"),
            Some("application/apply-patch+yaml"),
            Some(typo.as_bytes()),
        )
        .await?;
    let status = expect(&reply, 400, "apply with an unknown field")?;
    let message = status["message"].as_str().unwrap_or("");
    ensure!(
        message.contains(r#"unknown field "valu""#) && message.contains("v1beta1"),
        "{message}"
    );

    // A JSON patch at v1beta1.
    let reply = http
        .request(
            "PATCH",
            &format!("{CLASSES_V1BETA1}/high"),
            Some("application/json-patch+json"),
            Some(br#"[{"op":"replace","path":"/description","value":"changed"}]"#),
        )
        .await?;
    let patched = expect(&reply, 200, "JSON patch at v1beta1")?;
    assert_eq!(patched["apiVersion"], "scheduling.k8s.io/v1beta1");
    assert_eq!(
        http.get_json(&format!("{CLASSES_V1}/high")).await?["description"],
        "changed"
    );
    Ok(())
}
