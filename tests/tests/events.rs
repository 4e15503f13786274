//! Events as Kubernetes components write them, read back with kubectl: a
//! Deployment rolled out and scaled down (the deployment and replica set
//! controllers' `ScalingReplicaSet`, `SuccessfulCreate`,
//! `SuccessfulDelete`; the scheduler's `Scheduled`; the kubelet's
//! `Pulled`, `Created`, `Started`, `Killing`), a crash-looping pod
//! (`BackOff`, counted) and one failing readiness (`Unhealthy` with the
//! probe's output, counted), and the node's own (`Starting`,
//! `NodeReady`). `kubectl describe` shows them with their sources and
//! counts.

use anyhow::{ensure, Context, Result};
use serde_json::Value;
use skiff_tests::kubectl::Kubectl;
use skiff_tests::local_node::{apply, wait_until, LocalNode, NODE, RELAXED_EVICTION};

const WORKLOADS: &str = "apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - {name: app, image: busybox, command: [sleep, \"3600\"]}
---
apiVersion: v1
kind: Pod
metadata: {name: crash}
spec:
  containers:
  - {name: app, image: busybox, command: [sh, -c, \"exit 3\"]}
---
apiVersion: v1
kind: Pod
metadata: {name: unready}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: app
    image: busybox
    command: [sleep, \"3600\"]
    readinessProbe:
      exec: {command: [sh, -c, \"echo not yet; exit 1\"]}
      periodSeconds: 1
";

/// Every event in the namespace (and the node's, in `default`).
fn events(kubectl: &Kubectl) -> Result<Vec<Value>> {
    let text = kubectl.ok(&["get", "events", "-A", "-o", "json"])?;
    let list: Value = serde_json::from_str(&text).context("events as JSON")?;
    Ok(list["items"].as_array().cloned().unwrap_or_default())
}

/// The first event of `reason` about an object of `kind` whose name
/// starts with `name`.
fn find<'a>(events: &'a [Value], kind: &str, name: &str, reason: &str) -> Option<&'a Value> {
    events.iter().find(|e| {
        e["reason"] == reason
            && e["involvedObject"]["kind"] == kind
            && e["involvedObject"]["name"]
                .as_str()
                .is_some_and(|n| n.starts_with(name))
    })
}

fn count(event: &Value) -> i64 {
    event["count"].as_i64().unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn components_record_events_that_kubectl_shows() -> Result<()> {
    let test = "components_record_events_that_kubectl_shows";
    let Some(node) =
        LocalNode::start_with(test, RELAXED_EVICTION, &["--controller-manager=true"]).await?
    else {
        return Ok(());
    };
    let kubectl = &node.kubectl;
    apply(kubectl, "workloads.yaml", WORKLOADS)?;
    kubectl.ok(&["rollout", "status", "deployment/web", "--timeout=90s"])?;
    kubectl.ok(&["scale", "deployment/web", "--replicas=1"])?;

    let wanted: &[(&str, &str, &str, &str)] = &[
        // kind, name prefix, reason, source component
        (
            "Deployment",
            "web",
            "ScalingReplicaSet",
            "deployment-controller",
        ),
        (
            "ReplicaSet",
            "web-",
            "SuccessfulCreate",
            "replicaset-controller",
        ),
        (
            "ReplicaSet",
            "web-",
            "SuccessfulDelete",
            "replicaset-controller",
        ),
        ("Pod", "web-", "Scheduled", "default-scheduler"),
        ("Pod", "web-", "Pulled", "kubelet"),
        ("Pod", "web-", "Created", "kubelet"),
        ("Pod", "web-", "Started", "kubelet"),
        ("Pod", "web-", "Killing", "kubelet"),
        ("Pod", "crash", "BackOff", "kubelet"),
        ("Pod", "unready", "Unhealthy", "kubelet"),
        ("Node", NODE, "Starting", "kubelet"),
        ("Node", NODE, "NodeReady", "kubelet"),
    ];
    let mut last = Vec::new();
    let all_there = wait_until("every component's events, repeats counted", || {
        last = events(kubectl)?;
        let present = wanted.iter().all(|(kind, name, reason, source)| {
            find(&last, kind, name, reason).is_some_and(|e| e["source"]["component"] == *source)
        });
        let counted = ["crash", "unready"]
            .iter()
            .zip(["BackOff", "Unhealthy"])
            .all(|(pod, reason)| find(&last, "Pod", pod, reason).is_some_and(|e| count(e) >= 2));
        Ok(present && counted)
    })
    .await;
    if let Err(err) = all_there {
        let seen: Vec<String> = last
            .iter()
            .map(|e| {
                format!(
                    "{} {}/{} {} x{} from {}: {}",
                    e["type"].as_str().unwrap_or_default(),
                    e["involvedObject"]["kind"].as_str().unwrap_or_default(),
                    e["involvedObject"]["name"].as_str().unwrap_or_default(),
                    e["reason"].as_str().unwrap_or_default(),
                    count(e),
                    e["source"]["component"].as_str().unwrap_or_default(),
                    e["message"].as_str().unwrap_or_default()
                )
            })
            .collect();
        anyhow::bail!("{err:#}; the events:\n{}", seen.join("\n"));
    }

    // What each says, as the components say it.
    let events = last;
    let scaled = find(&events, "Deployment", "web", "ScalingReplicaSet").context("scaled")?;
    let message = scaled["message"].as_str().unwrap_or_default();
    ensure!(
        message.starts_with("Scaled up replica set web-") && message.ends_with("from 0 to 2"),
        "{message:?}"
    );
    let backoff = find(&events, "Pod", "crash", "BackOff").context("backoff")?;
    ensure!(
        backoff["type"] == "Warning"
            && backoff["message"].as_str().is_some_and(
                |m| m.starts_with("Back-off restarting failed container app in pod crash")
            )
            && backoff["involvedObject"]["fieldPath"] == "spec.containers{app}",
        "{backoff}"
    );
    let unhealthy = find(&events, "Pod", "unready", "Unhealthy").context("unhealthy")?;
    ensure!(
        unhealthy["type"] == "Warning"
            && unhealthy["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("Readiness probe failed: not yet")),
        "{unhealthy}"
    );
    let started = find(&events, "Pod", "web-", "Started").context("started")?;
    ensure!(
        started["source"]["host"] == NODE
            && started["involvedObject"]["fieldPath"] == "spec.containers{app}",
        "{started}"
    );

    // kubectl describe lists them under Events, with their sources and
    // the repeats folded.
    let described = kubectl.ok(&["describe", "pod", "crash"])?;
    let line = described
        .lines()
        .skip_while(|l| !l.starts_with("Events:"))
        .find(|l| l.contains("BackOff"))
        .with_context(|| format!("no BackOff under Events:\n{described}"))?;
    ensure!(
        line.contains("Warning") && line.contains("kubelet") && line.contains(" over "),
        "the BackOff line: {line:?}"
    );
    let described = kubectl.ok(&["describe", "deployment", "web"])?;
    ensure!(
        described
            .lines()
            .any(|l| l.contains("ScalingReplicaSet") && l.contains("deployment-controller")),
        "{described}"
    );
    Ok(())
}
