//! kubectl on nodes and on what it reads rather than writes, against
//! `skiff up`: cordon, uncordon and taint of a Node; drain, with and
//! without a PodDisruptionBudget in its way; describe of a pod with its
//! events; explain; api-resources and api-versions; and the table rows of
//! `get -w`.

use std::time::Duration;

use anyhow::{ensure, Result};

const WATCH_TIMEOUT: Duration = Duration::from_secs(20);

const NODE: &str = "apiVersion: v1
kind: Node
metadata:
  name: n1
  labels: {kubernetes.io/hostname: n1}
";

/// Two pods bound to n1 (no controller, so drain needs --force).
const PODS: &str = "apiVersion: v1
kind: Pod
metadata:
  name: a
  labels: {app: db}
spec:
  nodeName: n1
  containers: [{name: c, image: busybox}]
---
apiVersion: v1
kind: Pod
metadata:
  name: b
  labels: {app: db}
spec:
  nodeName: n1
  containers: [{name: c, image: busybox}]
";

const BUDGET: &str = "apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: db}
spec:
  minAvailable: 2
  selector: {matchLabels: {app: db}}
";

use skiff_tests::api_server::with_kubectl as session;

/// The whitespace-separated cells of a table line.
fn cells(line: &str) -> Vec<&str> {
    line.split_whitespace().collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cordon_uncordon_and_taint_a_node() -> Result<()> {
    let Some((_server, kubectl)) = session("cordon_uncordon_and_taint_a_node").await? else {
        return Ok(());
    };
    kubectl.manifest("node.yaml", NODE)?;
    assert_eq!(
        kubectl.ok(&["apply", "-f", "node.yaml"])?,
        "node/n1 created\n"
    );

    assert_eq!(kubectl.ok(&["cordon", "n1"])?, "node/n1 cordoned\n");
    assert_eq!(kubectl.ok(&["cordon", "n1"])?, "node/n1 already cordoned\n");
    let unschedulable = "jsonpath={.spec.unschedulable}";
    assert_eq!(
        kubectl.ok(&["get", "node", "n1", "-o", unschedulable])?,
        "true"
    );
    let table = kubectl.ok(&["get", "nodes"])?;
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(
        cells(lines[0]),
        ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
    );
    assert_eq!(
        cells(lines[1])[..2],
        ["n1", "Unknown,SchedulingDisabled"],
        "{table}"
    );
    assert_eq!(kubectl.ok(&["uncordon", "n1"])?, "node/n1 uncordoned\n");
    assert_eq!(kubectl.ok(&["get", "node", "n1", "-o", unschedulable])?, "");
    assert_eq!(
        kubectl.ok(&["uncordon", "n1"])?,
        "node/n1 already uncordoned\n"
    );

    let taints = "jsonpath={.spec.taints}";
    assert_eq!(
        kubectl.ok(&["taint", "nodes", "n1", "dedicated=db:NoSchedule"])?,
        "node/n1 tainted\n"
    );
    assert_eq!(
        kubectl.ok(&["taint", "nodes", "n1", "spot:PreferNoSchedule"])?,
        "node/n1 tainted\n"
    );
    // kubectl sends the whole new list, in an order of its own.
    let mut shown: Vec<serde_json::Value> =
        serde_json::from_str(&kubectl.ok(&["get", "node", "n1", "-o", taints])?)?;
    shown.sort_by_key(|t| t["key"].as_str().map(str::to_string));
    assert_eq!(
        shown,
        serde_json::json!([
            {"effect": "NoSchedule", "key": "dedicated", "value": "db"},
            {"effect": "PreferNoSchedule", "key": "spot"},
        ])
        .as_array()
        .cloned()
        .unwrap_or_default()
    );
    // The same key and effect again is refused by kubectl without --overwrite.
    let refused = kubectl.fails(&["taint", "nodes", "n1", "dedicated=other:NoSchedule"])?;
    ensure!(refused.contains("already has dedicated taint"), "{refused}");
    assert_eq!(
        kubectl.ok(&[
            "taint",
            "nodes",
            "n1",
            "dedicated=other:NoSchedule",
            "--overwrite"
        ])?,
        "node/n1 modified\n"
    );
    let described = kubectl.ok(&["describe", "node", "n1"])?;
    ensure!(
        described.contains("Taints:             dedicated=other:NoSchedule"),
        "{described}"
    );
    assert_eq!(
        kubectl.ok(&["taint", "nodes", "n1", "dedicated-", "spot-"])?,
        "node/n1 untainted\n"
    );
    assert_eq!(kubectl.ok(&["get", "node", "n1", "-o", taints])?, "");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_evicts_pods_unless_a_disruption_budget_forbids_it() -> Result<()> {
    let Some((_server, kubectl)) =
        session("drain_evicts_pods_unless_a_disruption_budget_forbids_it").await?
    else {
        return Ok(());
    };
    kubectl.manifest("node.yaml", NODE)?;
    kubectl.manifest("pods.yaml", PODS)?;
    kubectl.manifest("budget.yaml", BUDGET)?;
    kubectl.ok(&["apply", "-f", "node.yaml"])?;
    kubectl.ok(&["apply", "-f", "pods.yaml"])?;
    let running =
        r#"{"status":{"phase":"Running","conditions":[{"type":"Ready","status":"True"}]}}"#;
    for pod in ["a", "b"] {
        kubectl.ok(&[
            "patch",
            "pod",
            pod,
            "--subresource=status",
            "--type=merge",
            "-p",
            running,
        ])?;
    }
    kubectl.ok(&["apply", "-f", "budget.yaml"])?;

    // Bare pods need --force; drain says so and evicts nothing.
    let refused = kubectl.fails(&["drain", "n1", "--grace-period=0", "--timeout=10s"])?;
    ensure!(
        refused.contains("cannot delete Pods that declare no controller"),
        "{refused}"
    );
    // The budget wants both pods: every eviction is refused (429) and
    // retried until drain's timeout.
    let blocked = kubectl.run(&["drain", "n1", "--force", "--grace-period=0", "--timeout=7s"])?;
    ensure!(blocked.code == Some(1), "drain must fail: {blocked:?}");
    ensure!(
        blocked
            .stderr
            .contains("Cannot evict pod as it would violate the pod's disruption budget.")
            && blocked.stderr.contains("global timeout reached: 7s"),
        "{}",
        blocked.stderr
    );
    let names = "jsonpath={.items[*].metadata.name}";
    assert_eq!(kubectl.ok(&["get", "pods", "-o", names])?, "a b");
    assert_eq!(
        kubectl.ok(&["get", "node", "n1", "-o", "jsonpath={.spec.unschedulable}"])?,
        "true",
        "the node stays cordoned"
    );

    // Without the budget the pods are evicted and the node drained.
    kubectl.ok(&["delete", "pdb", "db"])?;
    let drained = kubectl.ok(&[
        "drain",
        "n1",
        "--force",
        "--grace-period=0",
        "--timeout=20s",
    ])?;
    for line in ["pod/a evicted", "pod/b evicted", "node/n1 drained"] {
        ensure!(drained.lines().any(|l| l == line), "{line:?} in {drained}");
    }
    assert_eq!(kubectl.ok(&["get", "pods", "-o", names])?, "");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn describe_pod_shows_the_pod_and_only_its_events() -> Result<()> {
    let Some((_server, kubectl)) =
        session("describe_pod_shows_the_pod_and_only_its_events").await?
    else {
        return Ok(());
    };
    kubectl.manifest("node.yaml", NODE)?;
    kubectl.manifest("pods.yaml", PODS)?;
    kubectl.ok(&["apply", "-f", "node.yaml"])?;
    kubectl.ok(&["apply", "-f", "pods.yaml"])?;
    let uid = kubectl.ok(&["get", "pod", "a", "-o", "jsonpath={.metadata.uid}"])?;
    let events = format!(
        "apiVersion: v1
kind: Event
metadata: {{name: a.1}}
involvedObject: {{kind: Pod, name: a, namespace: default, uid: \"{uid}\"}}
reason: Scheduled
message: Successfully assigned default/a to n1
type: Normal
source: {{component: default-scheduler}}
count: 1
---
apiVersion: v1
kind: Event
metadata: {{name: b.1}}
involvedObject: {{kind: Pod, name: b, namespace: default}}
reason: Other
message: about pod b
type: Warning
"
    );
    kubectl.manifest("events.yaml", &events)?;
    kubectl.ok(&["apply", "-f", "events.yaml"])?;

    let described = kubectl.ok(&["describe", "pod", "a"])?;
    for expected in [
        // Admission sets the priority, the service account, the QoS class
        // and the default tolerations, which widen the label column as in
        // Kubernetes.
        "Name:             a",
        "Namespace:        default",
        "Priority:         0",
        "Service Account:  default",
        "Node:             n1/",
        "Labels:           app=db",
        "Status:           Pending",
        "    Image:        busybox",
        "QoS Class:        BestEffort",
        "Tolerations:      node.kubernetes.io/not-ready:NoExecute op=Exists for 300s",
    ] {
        ensure!(
            described.lines().any(|l| l.trim_end() == expected),
            "{expected:?} in:\n{described}"
        );
    }
    let event_line = described
        .lines()
        .find(|l| l.contains("Scheduled"))
        .unwrap_or_default();
    assert_eq!(
        cells(event_line)[..2],
        ["Normal", "Scheduled"],
        "{described}"
    );
    ensure!(
        event_line.contains("default-scheduler  Successfully assigned default/a to n1"),
        "{described}"
    );
    ensure!(
        !described.contains("about pod b"),
        "b's event is not a's:\n{described}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_api_resources_and_api_versions() -> Result<()> {
    let Some((_server, kubectl)) = session("explain_api_resources_and_api_versions").await? else {
        return Ok(());
    };
    let explained = kubectl.ok(&["explain", "pod.spec.containers"])?;
    ensure!(
        explained.contains("FIELD: containers <[]Container>"),
        "{explained}"
    );
    ensure!(
        explained.contains("List of containers belonging to the pod."),
        "{explained}"
    );
    ensure!(explained.contains("  image\t<string>"), "{explained}");
    let replicas = kubectl.ok(&["explain", "deployment.spec.replicas"])?;
    ensure!(
        replicas.contains("GROUP:      apps") && replicas.contains("FIELD: replicas <integer>"),
        "{replicas}"
    );
    let missing = kubectl.fails(&["explain", "pod.spec.nosuchfield"])?;
    ensure!(missing.contains("nosuchfield"), "{missing}");

    let versions = kubectl.ok(&["api-versions"])?;
    for version in [
        "v1",
        "apps/v1",
        "batch/v1",
        "policy/v1",
        "coordination.k8s.io/v1",
    ] {
        ensure!(
            versions.lines().any(|l| l == version),
            "{version} in {versions}"
        );
    }
    let resources = kubectl.ok(&["api-resources"])?;
    let header = resources.lines().next().unwrap_or_default();
    assert_eq!(
        cells(header),
        ["NAME", "SHORTNAMES", "APIVERSION", "NAMESPACED", "KIND"]
    );
    let row = |name: &str| {
        resources
            .lines()
            .map(cells)
            .find(|c| c.first() == Some(&name))
            .unwrap_or_default()
    };
    assert_eq!(row("pods"), ["pods", "po", "v1", "true", "Pod"]);
    assert_eq!(
        row("deployments"),
        ["deployments", "deploy", "apps/v1", "true", "Deployment"]
    );
    assert_eq!(row("nodes"), ["nodes", "no", "v1", "false", "Node"]);
    let namespaced = kubectl.ok(&["api-resources", "--namespaced=false", "-o", "name"])?;
    ensure!(namespaced.lines().any(|l| l == "nodes"), "{namespaced}");
    ensure!(!namespaced.lines().any(|l| l == "pods"), "{namespaced}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_watch_prints_table_rows_as_objects_change() -> Result<()> {
    let Some((_server, kubectl)) = session("get_watch_prints_table_rows_as_objects_change").await?
    else {
        return Ok(());
    };
    kubectl.manifest("pods.yaml", &PODS.replace("  nodeName: n1\n", ""))?;
    kubectl.ok(&["apply", "-f", "pods.yaml"])?;
    let mut watch = kubectl.spawn(&["get", "pods", "-w"])?;
    let lines = watch.wait_for_lines(3, WATCH_TIMEOUT).await?;
    assert_eq!(
        cells(&lines[0]),
        ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    );
    assert_eq!(cells(&lines[1])[..4], ["a", "0/1", "Pending", "0"]);
    assert_eq!(cells(&lines[2])[..4], ["b", "0/1", "Pending", "0"]);

    let running = r#"{"status":{"phase":"Running"}}"#;
    kubectl.ok(&[
        "patch",
        "pod",
        "a",
        "--subresource=status",
        "--type=merge",
        "-p",
        running,
    ])?;
    let lines = watch.wait_for_lines(4, WATCH_TIMEOUT).await?;
    assert_eq!(
        cells(&lines[3])[..4],
        ["a", "0/1", "Running", "0"],
        "{lines:?}"
    );
    kubectl.ok(&["delete", "pod", "b"])?;
    let lines = watch.wait_for_lines(5, WATCH_TIMEOUT).await?;
    assert_eq!(
        cells(&lines[4])[..4],
        ["b", "0/1", "Pending", "0"],
        "{lines:?}"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        watch.lines().len(),
        5,
        "one header, one row per event: {:?}",
        watch.lines()
    );
    ensure!(watch.running()?, "get -w still watches");
    Ok(())
}
