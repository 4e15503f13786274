//! The namespace and node lifecycle controllers of `skiff up`, driven with
//! the real kubectl: a deleted namespace shows Terminating, refuses new
//! content, is emptied and then goes; the system namespaces cannot be
//! deleted; a node whose kubelet stops is marked unreachable and tainted,
//! its pods are evicted and recreated on the other node, and the taints go
//! when the kubelet returns.

use std::path::Path;

use anyhow::{bail, ensure, Result};
use skiff_tests::kubectl::Kubectl;
use skiff_tests::local_node::{
    apply, jsonpath, wait_for, wait_until, LocalNode, NODE, RELAXED_EVICTION,
};
use skiff_tests::skiff_process::SkiffProcess;

const CONTENT: &str = "apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: doomed}
spec:
  replicas: 1
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - {name: app, image: busybox, command: [sleep, \"3600\"]}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: one, namespace: doomed}
data: {a: \"1\"}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: two, namespace: doomed}
data: {b: \"2\"}
---
apiVersion: v1
kind: Pod
metadata: {name: slow, namespace: doomed}
spec:
  terminationGracePeriodSeconds: 8
  containers:
  - name: app
    image: busybox
    command: [sh, -c, \"trap '' TERM; while true; do sleep 1; done\"]
";

/// `kubectl get KIND -n NAMESPACE -o name`, one name a line.
fn names_in(kubectl: &Kubectl, kind: &str, namespace: &str) -> Result<Vec<String>> {
    let out = kubectl.ok(&["get", kind, "-n", namespace, "-o", "name"])?;
    Ok(out.lines().map(str::to_string).collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_namespace_terminates_empties_and_goes() -> Result<()> {
    let test = "a_deleted_namespace_terminates_empties_and_goes";
    let Some(node) =
        LocalNode::start_with(test, RELAXED_EVICTION, &["--controller-manager=true"]).await?
    else {
        return Ok(());
    };
    let kubectl = &node.kubectl;
    // (`kubectl create namespace` sends protobuf, which skiff does not read.)
    apply(
        kubectl,
        "namespace.yaml",
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: doomed}\n",
    )?;
    ensure!(
        jsonpath(kubectl, "namespace", "doomed", "{.spec.finalizers}")? == "[\"kubernetes\"]",
        "a new namespace carries the kubernetes finalizer"
    );
    apply(kubectl, "content.yaml", CONTENT)?;
    wait_until("the pods of doomed to run", || {
        let phases = kubectl.ok(&[
            "get",
            "pods",
            "-n",
            "doomed",
            "-o",
            "jsonpath={.items[*].status.phase}",
        ])?;
        Ok(phases
            .split_whitespace()
            .filter(|p| *p == "Running")
            .count()
            == 2)
    })
    .await?;

    let deleted = kubectl.ok(&["delete", "namespace", "doomed", "--wait=false"])?;
    ensure!(
        deleted.contains("namespace \"doomed\" deleted"),
        "{deleted}"
    );
    ensure!(
        jsonpath(kubectl, "namespace", "doomed", "{.status.phase}")? == "Terminating",
        "the namespace shows Terminating while its pod stops"
    );
    kubectl.manifest(
        "late.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: late, namespace: doomed}\n",
    )?;
    let refused = kubectl.fails(&["create", "-f", "late.yaml"])?;
    ensure!(
        refused.contains(
            "unable to create new content in namespace doomed because it is being terminated"
        ),
        "{refused}"
    );
    // The slow pod keeps the namespace for its grace period: the
    // controller says what remains.
    wait_for(
        kubectl,
        "namespace",
        "doomed",
        "{.status.conditions[?(@.type==\"NamespaceContentRemaining\")].status}",
        "True",
    )
    .await?;
    wait_until("the namespace to go", || {
        let out = kubectl.run(&["get", "namespace", "doomed"])?;
        Ok(out.stderr.contains("NotFound") || out.stderr.contains("not found"))
    })
    .await?;
    for kind in ["pods", "configmaps", "deployments", "replicasets"] {
        let left = names_in(kubectl, kind, "doomed")?;
        ensure!(left.is_empty(), "{kind} left in doomed: {left:?}");
    }

    let refused = kubectl.fails(&["delete", "namespace", "default"])?;
    ensure!(
        refused.contains("namespaces \"default\" is forbidden: this namespace may not be deleted"),
        "{refused}"
    );
    ensure!(jsonpath(kubectl, "namespace", "default", "{.status.phase}")? == "Active");
    Ok(())
}

/// The second node: simulated, named `spare-0`.
const SPARE: &str = "spare-0";

fn start_spare(kubeconfig: &Path) -> Result<SkiffProcess> {
    SkiffProcess::spawn(
        "skiff kubelet --simulate 1",
        [
            "kubelet".to_string(),
            "--kubeconfig".into(),
            kubeconfig.display().to_string(),
            "--simulate".into(),
            "1".into(),
            "--simulate-prefix".into(),
            "spare".into(),
        ],
    )
}

/// Two pods that tolerate an unreachable or not-ready node for 2 seconds
/// (not the 300 DefaultTolerationSeconds would give them).
const EVICTEE: &str = "apiVersion: apps/v1
kind: Deployment
metadata: {name: evictee}
spec:
  replicas: 2
  selector: {matchLabels: {app: evictee}}
  template:
    metadata: {labels: {app: evictee}}
    spec:
      terminationGracePeriodSeconds: 1
      tolerations:
      - {key: node.kubernetes.io/unreachable, operator: Exists, effect: NoExecute, tolerationSeconds: 2}
      - {key: node.kubernetes.io/not-ready, operator: Exists, effect: NoExecute, tolerationSeconds: 2}
      containers:
      - {name: app, image: busybox, command: [sleep, \"3600\"]}
";

/// `node|deleting|ready` of each pod of the evictee Deployment.
fn evictee_pods(kubectl: &Kubectl) -> Result<Vec<String>> {
    let out = kubectl.ok(&[
        "get",
        "pods",
        "-l",
        "app=evictee",
        "-o",
        "jsonpath={range .items[*]}{.spec.nodeName}|{.metadata.deletionTimestamp}|{.status.conditions[?(@.type==\"Ready\")].status}{\"\\n\"}{end}",
    ])?;
    Ok(out.lines().map(str::to_string).collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_of_an_unreachable_node_are_evicted_and_the_taints_go_when_it_returns() -> Result<()> {
    let test = "pods_of_an_unreachable_node_are_evicted_and_the_taints_go_when_it_returns";
    // Kubelets renew their Lease every 10 s: the grace period is twice that.
    let flags = [
        "--controller-manager=true",
        "--node-monitor-period=1s",
        "--node-monitor-grace-period=20s",
    ];
    let Some(node) = LocalNode::start_with(test, RELAXED_EVICTION, &flags).await? else {
        return Ok(());
    };
    let kubectl = &node.kubectl;
    let kubeconfig = node.server.kubeconfig();
    let mut spare = start_spare(&kubeconfig)?;
    wait_for(
        kubectl,
        "node",
        SPARE,
        "{.status.conditions[?(@.type==\"Ready\")].status}",
        "True",
    )
    .await?;

    // Everything lands on the spare node, then node-1 takes pods again.
    kubectl.ok(&["cordon", NODE])?;
    apply(kubectl, "evictee.yaml", EVICTEE)?;
    wait_until("both pods to run on the spare node", || {
        let pods = evictee_pods(kubectl)?;
        Ok(pods.len() == 2 && pods.iter().all(|p| *p == format!("{SPARE}||True")))
    })
    .await?;
    kubectl.ok(&["uncordon", NODE])?;

    spare.signal(libc::SIGKILL)?;
    spare.wait_exit(std::time::Duration::from_secs(10)).await?;
    wait_for(
        kubectl,
        "node",
        SPARE,
        "{.status.conditions[?(@.type==\"Ready\")].reason}",
        "NodeStatusUnknown",
    )
    .await?;
    let ready = jsonpath(
        kubectl,
        "node",
        SPARE,
        "{.status.conditions[?(@.type==\"Ready\")].status}",
    )?;
    ensure!(ready == "Unknown", "Ready is {ready}");
    wait_until("the unreachable taints", || {
        let taints = jsonpath(
            kubectl,
            "node",
            SPARE,
            "{range .spec.taints[*]}{.key}:{.effect} {end}",
        )?;
        Ok(taints.contains("node.kubernetes.io/unreachable:NoSchedule")
            && taints.contains("node.kubernetes.io/unreachable:NoExecute"))
    })
    .await?;
    let nodes = kubectl.ok(&["get", "nodes"])?;
    ensure!(nodes.contains("NotReady"), "{nodes}");

    // Evicted after their 2 seconds, and replaced on node-1.
    let replaced = wait_until("two ready replacements on node-1", || {
        let pods = evictee_pods(kubectl)?;
        let replaced = pods
            .iter()
            .filter(|p| **p == format!("{NODE}||True"))
            .count();
        Ok(replaced == 2)
    })
    .await;
    if let Err(err) = replaced {
        let pods = kubectl.run(&["get", "pods", "-o", "wide"])?;
        let sets = kubectl.run(&["get", "replicasets", "-o", "wide"])?;
        let log = node.server.stderr();
        let tail: Vec<&str> = log.lines().rev().take(60).collect();
        bail!(
            "{err}\n{}\n{}\n{}",
            pods.stdout,
            sets.stdout,
            tail.join("\n")
        );
    }
    let reasons = kubectl.ok(&[
        "get",
        "pods",
        "-l",
        "app=evictee",
        "--field-selector",
        &format!("spec.nodeName={SPARE}"),
        "-o",
        "jsonpath={range .items[*]}{.status.conditions[?(@.type==\"DisruptionTarget\")].reason} {end}",
    ])?;
    // The evicted pods stay Terminating until their kubelet returns.
    ensure!(
        reasons
            .split_whitespace()
            .all(|r| r == "DeletionByTaintManager"),
        "{reasons}"
    );

    let _spare = start_spare(&kubeconfig)?;
    wait_for(
        kubectl,
        "node",
        SPARE,
        "{.status.conditions[?(@.type==\"Ready\")].status}",
        "True",
    )
    .await?;
    wait_for(kubectl, "node", SPARE, "{.spec.taints}", "").await?;
    // Its kubelet back, the evicted pods finish terminating.
    wait_until("only the replacements to be left", || {
        let pods = evictee_pods(kubectl)?;
        Ok(pods.len() == 2 && pods.iter().all(|p| p.starts_with(NODE)))
    })
    .await?;
    Ok(())
}
