//! The batch controllers of `skiff up` with a real kubelet, driven with
//! the real kubectl: a Job runs its completions never more than
//! `parallelism` at a time, a failing Job stops at its backoffLimit, a
//! finished Job with ttlSecondsAfterFinished is deleted, and a CronJob
//! starts a Job every minute and keeps only its history limit.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Result};
use skiff_tests::kubectl::Kubectl;
use skiff_tests::local_node::{apply, jsonpath, LocalNode, RELAXED_EVICTION};

async fn node(test: &str) -> Result<Option<LocalNode>> {
    LocalNode::start_with(test, RELAXED_EVICTION, &["--controller-manager=true"]).await
}

/// Polls `check` every half second until it holds or `timeout` passes.
async fn wait_long(
    what: &str,
    timeout: Duration,
    mut check: impl FnMut() -> Result<bool>,
) -> Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        if check()? {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// A Job running `script` in `sh -c`, with more spec lines.
fn job(name: &str, script: &str, spec: &str) -> String {
    format!(
        "apiVersion: batch/v1
kind: Job
metadata:
  name: {name}
spec:
{spec}
  template:
    spec:
      restartPolicy: Never
      terminationGracePeriodSeconds: 1
      containers:
      - name: work
        image: busybox
        command: [sh, -c, \"{script}\"]
"
    )
}

/// Pods of Job `name` that are neither finished nor being deleted.
fn running_pods(kubectl: &Kubectl, name: &str) -> Result<usize> {
    let out = kubectl.ok(&[
        "get",
        "pods",
        "-l",
        &format!("batch.kubernetes.io/job-name={name}"),
        "-o",
        "jsonpath={range .items[*]}{.metadata.deletionTimestamp}|{.status.phase}{\"\\n\"}{end}",
    ])?;
    Ok(out
        .lines()
        .filter(|l| *l == "|Running" || *l == "|Pending" || *l == "|")
        .count())
}

fn condition(kubectl: &Kubectl, name: &str, type_: &str, field: &str) -> Result<String> {
    jsonpath(
        kubectl,
        "job",
        name,
        &format!("{{.status.conditions[?(@.type==\"{type_}\")].{field}}}"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_complete_within_parallelism_fail_at_the_backoff_limit_and_expire() -> Result<()> {
    let Some(node) =
        node("jobs_complete_within_parallelism_fail_at_the_backoff_limit_and_expire").await?
    else {
        return Ok(());
    };
    let kubectl = &node.kubectl;

    // Five completions, two at a time.
    apply(
        kubectl,
        "par.yaml",
        &job("par", "sleep 1", "  completions: 5\n  parallelism: 2"),
    )?;
    apply(
        kubectl,
        "fail.yaml",
        &job("fail", "exit 1", "  backoffLimit: 1"),
    )?;
    let mut most = 0;
    let mut most_in_status = 0;
    wait_long("Job par to complete", Duration::from_secs(180), || {
        most = most.max(running_pods(kubectl, "par")?);
        let active = jsonpath(kubectl, "job", "par", "{.status.active}")?;
        most_in_status = most_in_status.max(active.parse::<usize>().unwrap_or(0));
        Ok(condition(kubectl, "par", "Complete", "status")? == "True")
    })
    .await?;
    ensure!(
        most <= 2,
        "{most} pods of Job par ran at once; parallelism is 2"
    );
    ensure!(
        most_in_status <= 2,
        "status.active reached {most_in_status}"
    );
    ensure!(most >= 1, "no pod of Job par was ever seen running");
    assert_eq!(jsonpath(kubectl, "job", "par", "{.status.succeeded}")?, "5");
    ensure!(jsonpath(kubectl, "job", "par", "{.status.completionTime}")? != "");
    let table = kubectl.ok(&["get", "job", "par"])?;
    ensure!(
        table.contains("5/5") && table.contains("Complete"),
        "{table}"
    );
    let pods = kubectl.ok(&[
        "get",
        "pods",
        "-l",
        "job-name=par",
        "-o",
        "jsonpath={.items[*].metadata.finalizers}",
    ])?;
    ensure!(
        !pods.contains("job-tracking"),
        "counted pods keep no finalizer: {pods}"
    );
    let succeeded = kubectl.ok(&[
        "get",
        "pods",
        "-l",
        "job-name=par",
        "--field-selector=status.phase=Succeeded",
        "-o",
        "name",
    ])?;
    assert_eq!(succeeded.lines().count(), 5, "{succeeded}");

    // exit 1 with backoffLimit 1: the first pod and one replacement fail.
    wait_long("Job fail to fail", Duration::from_secs(120), || {
        Ok(condition(kubectl, "fail", "Failed", "status")? == "True")
    })
    .await?;
    assert_eq!(
        condition(kubectl, "fail", "Failed", "reason")?,
        "BackoffLimitExceeded"
    );
    assert_eq!(jsonpath(kubectl, "job", "fail", "{.status.failed}")?, "2");
    let table = kubectl.ok(&["get", "job", "fail"])?;
    ensure!(table.contains("Failed"), "{table}");

    // A finished Job with a TTL goes, and its pods with it.
    apply(
        kubectl,
        "ttl.yaml",
        &job("ttl", "true", "  ttlSecondsAfterFinished: 2"),
    )?;
    wait_long("Job ttl to complete", Duration::from_secs(120), || {
        let out = kubectl.run(&["get", "job", "ttl", "-o", "name"])?;
        // Complete, or already deleted.
        Ok(out.code != Some(0) || condition(kubectl, "ttl", "Complete", "status")? == "True")
    })
    .await?;
    wait_long("Job ttl to be deleted", Duration::from_secs(60), || {
        let out = kubectl.ok(&["get", "jobs", "-o", "name"])?;
        Ok(!out.contains("job.batch/ttl\n") && !out.lines().any(|l| l == "job.batch/ttl"))
    })
    .await?;
    wait_long(
        "the pods of Job ttl to be deleted",
        Duration::from_secs(60),
        || {
            Ok(kubectl
                .ok(&["get", "pods", "-l", "job-name=ttl", "-o", "name"])?
                .trim()
                .is_empty())
        },
    )
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cron_job_runs_every_minute_and_keeps_its_history_limit() -> Result<()> {
    let Some(node) = node("a_cron_job_runs_every_minute_and_keeps_its_history_limit").await? else {
        return Ok(());
    };
    let kubectl = &node.kubectl;
    apply(
        kubectl,
        "tick.yaml",
        "apiVersion: batch/v1
kind: CronJob
metadata:
  name: tick
spec:
  schedule: \"* * * * *\"
  successfulJobsHistoryLimit: 1
  jobTemplate:
    metadata:
      labels: {app: tick}
    spec:
      template:
        spec:
          restartPolicy: Never
          terminationGracePeriodSeconds: 1
          containers:
          - name: tick
            image: busybox
            command: [sh, -c, \"echo tick\"]
",
    )?;
    let table = kubectl.ok(&["get", "cronjob", "tick"])?;
    ensure!(table.contains("* * * * *"), "{table}");

    // Two minutes bring two Jobs; once the second has completed, only it is kept.
    let mut seen = BTreeSet::new();
    let mut most_kept = 0;
    wait_long("two Jobs of the CronJob to complete", Duration::from_secs(200), || {
        let out = kubectl.ok(&[
            "get", "jobs", "-l", "app=tick", "-o",
            "jsonpath={range .items[*]}{.metadata.name}|{.status.conditions[?(@.type==\"Complete\")].status}{\"\\n\"}{end}",
        ])?;
        let mut complete = 0;
        for line in out.lines() {
            let (name, status) = line.split_once('|').unwrap_or((line, ""));
            seen.insert(name.to_string());
            complete += usize::from(status == "True");
        }
        most_kept = most_kept.max(complete);
        Ok(seen.len() >= 2 && complete == 1 && out.lines().count() == 1)
    })
    .await?;
    for name in &seen {
        let minutes = name
            .strip_prefix("tick-")
            .and_then(|m| m.parse::<i64>().ok());
        ensure!(
            minutes.is_some_and(|m| m > 28_000_000),
            "Job name {name} is not tick-<minutes since epoch>"
        );
    }
    let kept = kubectl.ok(&[
        "get",
        "jobs",
        "-l",
        "app=tick",
        "-o",
        "jsonpath={.items[*].metadata.name}",
    ])?;
    let annotation = jsonpath(
        kubectl,
        "job",
        kept.trim(),
        "{.metadata.annotations.batch\\.kubernetes\\.io/cronjob-scheduled-timestamp}",
    )?;
    ensure!(
        annotation.ends_with(":00Z"),
        "scheduled timestamp {annotation:?}"
    );
    ensure!(
        most_kept <= 2,
        "at most the limit plus the one just finished: {most_kept}"
    );
    ensure!(jsonpath(kubectl, "cronjob", "tick", "{.status.lastSuccessfulTime}")? != "");
    ensure!(jsonpath(kubectl, "cronjob", "tick", "{.status.lastScheduleTime}")? != "");
    Ok(())
}
