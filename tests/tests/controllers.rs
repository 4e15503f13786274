//! The controller-manager of `skiff up` with a real kubelet, driven with
//! the real kubectl: a Deployment's ReplicaSet keeps its pods running, a
//! rolling update never drops below the allowed availability and `rollout
//! undo` brings the old ReplicaSet back, and deleting a Deployment removes
//! its ReplicaSets and pods in the background, in the foreground, or
//! leaves them orphaned.

use std::time::{Duration, Instant};

use anyhow::{ensure, Result};
use skiff_tests::kubectl::Kubectl;
use skiff_tests::local_node::{apply, jsonpath, wait_for, wait_until, LocalNode, RELAXED_EVICTION};

async fn node(test: &str) -> Result<Option<LocalNode>> {
    LocalNode::start_with(test, RELAXED_EVICTION, &["--controller-manager=true"]).await
}

/// A Deployment of `replicas` pods running `sleep`, labelled `version`.
fn deployment(name: &str, replicas: u32, version: &str) -> String {
    format!(
        "apiVersion: apps/v1
kind: Deployment
metadata:
  name: {name}
spec:
  replicas: {replicas}
  selector: {{matchLabels: {{app: {name}}}}}
  strategy:
    rollingUpdate: {{maxSurge: 1, maxUnavailable: 1}}
  template:
    metadata:
      labels: {{app: {name}, version: \"{version}\"}}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - name: app
        image: busybox:{version}
        command: [sleep, \"3600\"]
"
    )
}

/// Names of the objects of `kind` with label `app=NAME`.
fn names(kubectl: &Kubectl, kind: &str, app: &str) -> Result<Vec<String>> {
    let out = kubectl.ok(&[
        "get",
        kind,
        "-l",
        &format!("app={app}"),
        "-o",
        "jsonpath={.items[*].metadata.name}",
    ])?;
    Ok(out.split_whitespace().map(str::to_string).collect())
}

/// Ready pods of `app` that are not being deleted.
fn ready_pods(kubectl: &Kubectl, app: &str) -> Result<usize> {
    let out = kubectl.ok(&[
        "get",
        "pods",
        "-l",
        &format!("app={app}"),
        "-o",
        "jsonpath={range .items[*]}{.metadata.deletionTimestamp}|{.status.conditions[?(@.type==\"Ready\")].status}{\"\\n\"}{end}",
    ])?;
    Ok(out.lines().filter(|l| *l == "|True").count())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deployment_rolls_out_within_its_availability_and_rolls_back() -> Result<()> {
    let Some(node) = node("a_deployment_rolls_out_within_its_availability_and_rolls_back").await?
    else {
        return Ok(());
    };
    let kubectl = &node.kubectl;
    apply(kubectl, "web-1.yaml", &deployment("web", 3, "1"))?;
    kubectl.ok(&["rollout", "status", "deployment/web", "--timeout=90s"])?;
    ensure!(ready_pods(kubectl, "web")? == 3);
    let first_rs = names(kubectl, "replicaset", "web")?;
    ensure!(first_rs.len() == 1, "{first_rs:?}");
    assert_eq!(
        jsonpath(
            kubectl,
            "replicaset",
            &first_rs[0],
            "{.metadata.annotations.deployment\\.kubernetes\\.io/revision}"
        )?,
        "1"
    );

    // A pod deleted by hand is replaced.
    let pods = names(kubectl, "pods", "web")?;
    kubectl.ok(&["delete", "pod", &pods[0], "--wait=false"])?;
    wait_until("the ReplicaSet to replace the pod", || {
        Ok(ready_pods(kubectl, "web")? == 3 && !names(kubectl, "pods", "web")?.contains(&pods[0]))
    })
    .await?;

    // Roll to version 2, sampling availability all along: with
    // maxUnavailable 1, never fewer than 2 ready pods.
    apply(kubectl, "web-2.yaml", &deployment("web", 3, "2"))?;
    let started = Instant::now();
    let mut lowest = usize::MAX;
    loop {
        lowest = lowest.min(ready_pods(kubectl, "web")?);
        let status = kubectl.run(&["rollout", "status", "deployment/web", "--timeout=1s"])?;
        if status.code == Some(0) {
            break;
        }
        ensure!(
            started.elapsed() < Duration::from_secs(120),
            "the rollout did not finish"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    ensure!(
        lowest >= 2,
        "availability fell to {lowest} ready pods during the rollout"
    );
    let history = kubectl.ok(&["rollout", "history", "deployment/web"])?;
    ensure!(history.contains('1') && history.contains('2'), "{history}");
    let versions = kubectl.ok(&[
        "get",
        "pods",
        "-l",
        "app=web",
        "-o",
        "jsonpath={.items[*].metadata.labels.version}",
    ])?;
    ensure!(versions.split_whitespace().all(|v| v == "2"), "{versions}");

    // Undo: the first ReplicaSet comes back as revision 3.
    kubectl.ok(&["rollout", "undo", "deployment/web"])?;
    kubectl.ok(&["rollout", "status", "deployment/web", "--timeout=120s"])?;
    wait_for(
        kubectl,
        "replicaset",
        &first_rs[0],
        "{.status.readyReplicas}",
        "3",
    )
    .await?;
    assert_eq!(
        jsonpath(
            kubectl,
            "replicaset",
            &first_rs[0],
            "{.metadata.annotations.deployment\\.kubernetes\\.io/revision}"
        )?,
        "3"
    );

    kubectl.ok(&["scale", "deployment/web", "--replicas=1"])?;
    wait_until("the scale down", || {
        Ok(names(kubectl, "pods", "web")?.len() == 1)
    })
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_deployment_cascades_as_asked() -> Result<()> {
    let Some(node) = node("deleting_a_deployment_cascades_as_asked").await? else {
        return Ok(());
    };
    let kubectl = &node.kubectl;
    for name in ["background", "foreground", "orphan"] {
        apply(kubectl, &format!("{name}.yaml"), &deployment(name, 2, "1"))?;
    }
    for name in ["background", "foreground", "orphan"] {
        kubectl.ok(&[
            "rollout",
            "status",
            &format!("deployment/{name}"),
            "--timeout=90s",
        ])?;
    }

    kubectl.ok(&["delete", "deployment", "background"])?;
    wait_until(
        "the background deletion to remove the ReplicaSet and pods",
        || {
            Ok(names(kubectl, "replicaset", "background")?.is_empty()
                && names(kubectl, "pods", "background")?.is_empty())
        },
    )
    .await?;

    // Foreground: kubectl waits until the dependents are gone first.
    kubectl.ok(&[
        "delete",
        "deployment",
        "foreground",
        "--cascade=foreground",
        "--timeout=90s",
    ])?;
    ensure!(names(kubectl, "replicaset", "foreground")?.is_empty());
    wait_until("the foreground deletion's pods to go", || {
        Ok(names(kubectl, "pods", "foreground")?.is_empty())
    })
    .await?;

    // Orphan: the ReplicaSet stays, without its owner.
    kubectl.ok(&["delete", "deployment", "orphan", "--cascade=orphan"])?;
    let kept = names(kubectl, "replicaset", "orphan")?;
    ensure!(kept.len() == 1, "{kept:?}");
    wait_for(
        kubectl,
        "replicaset",
        &kept[0],
        "{.metadata.ownerReferences}",
        "",
    )
    .await?;
    assert_eq!(names(kubectl, "pods", "orphan")?.len(), 2);
    Ok(())
}
