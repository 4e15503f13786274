//! `kubectl top` against `skiff up` with a real kubelet: the API server
//! serves metrics.k8s.io from what the kubelet measures of its pods
//! (`/stats/summary`). A pod that burns a core for a while shows it, an
//! idle one does not, the node's usage includes it, and when the burning
//! stops the usage falls — with every kubectl on the machine. Simulated
//! nodes report the usage they simulate for their pods.

use std::collections::HashMap;

use anyhow::{bail, ensure, Context, Result};
use skiff_tests::kubectl::{every_kubectl_version, Kubectl};
use skiff_tests::local_node::{apply, wait_for, wait_until, LocalNode, NODE, RELAXED_EVICTION};
use skiff_tests::skiff_process::SkiffProcess;

/// Seconds the `burn` pod spins before it goes idle.
const BURN_SECONDS: u32 = 30;

fn pods() -> String {
    format!(
        "apiVersion: v1
kind: Pod
metadata: {{name: burn, labels: {{load: high}}}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: spin
    image: busybox
    command: [sh, -c, \"timeout {BURN_SECONDS} sh -c 'while :; do :; done'; exec sleep 3600\"]
  - {{name: side, image: busybox, command: [sleep, \"3600\"]}}
---
apiVersion: v1
kind: Pod
metadata: {{name: idle, labels: {{load: low}}}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - {{name: app, image: busybox, command: [sleep, \"3600\"]}}
"
    )
}

/// The rows of a `kubectl top` table, each as column → value.
fn table(text: &str) -> Result<Vec<HashMap<String, String>>> {
    let mut lines = text.lines().filter(|l| !l.trim().is_empty());
    let header: Vec<&str> = lines
        .next()
        .with_context(|| format!("no header in {text:?}"))?
        .split_whitespace()
        .collect();
    lines
        .map(|line| {
            let cells: Vec<&str> = line.split_whitespace().collect();
            ensure!(
                cells.len() == header.len(),
                "row {line:?} does not match the header {header:?}"
            );
            Ok(header
                .iter()
                .zip(cells)
                .map(|(h, c)| (h.to_string(), c.to_string()))
                .collect())
        })
        .collect()
}

/// Millicores of kubectl's CPU column ("250m", "2").
fn millicores(cell: &str) -> Result<u64> {
    match cell.strip_suffix('m') {
        Some(m) => m.parse().with_context(|| format!("CPU {cell:?}")),
        None => Ok(cell
            .parse::<u64>()
            .with_context(|| format!("CPU {cell:?}"))?
            * 1000),
    }
}

/// Mebibytes of kubectl's memory column ("12Mi").
fn mebibytes(cell: &str) -> Result<u64> {
    cell.strip_suffix("Mi")
        .with_context(|| format!("memory {cell:?} is not in Mi"))?
        .parse()
        .with_context(|| format!("memory {cell:?}"))
}

/// `kubectl top pods --containers`: (pod, container) → (millicores, MiB).
fn containers(kubectl: &Kubectl) -> Result<HashMap<(String, String), (u64, u64)>> {
    let text = kubectl.ok(&["top", "pods", "--containers"])?;
    table(&text)?
        .into_iter()
        .map(|row| {
            Ok((
                (row["POD"].clone(), row["NAME"].clone()),
                (
                    millicores(&row["CPU(cores)"])?,
                    mebibytes(&row["MEMORY(bytes)"])?,
                ),
            ))
        })
        .collect()
}

/// The node's row of `kubectl top nodes`.
fn node_row(kubectl: &Kubectl) -> Result<HashMap<String, String>> {
    let text = kubectl.ok(&["top", "nodes"])?;
    table(&text)?
        .into_iter()
        .find(|row| row["NAME"] == NODE)
        .with_context(|| format!("no {NODE} in {text}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_top_follows_a_pod_that_burns_cpu() -> Result<()> {
    let test = "kubectl_top_follows_a_pod_that_burns_cpu";
    let Some(node) =
        LocalNode::start_with(test, RELAXED_EVICTION, &["--housekeeping-interval=1s"]).await?
    else {
        return Ok(());
    };
    let kubectl = &node.kubectl;
    apply(kubectl, "pods.yaml", &pods())?;
    for pod in ["burn", "idle"] {
        wait_for(kubectl, "pod", pod, "{.status.phase}", "Running").await?;
    }

    // The spinning container shows most of a core; the others almost none.
    // Each container's rate needs two samples, and the pods started apart, so
    // wait until every container has one.
    let mut seen = HashMap::new();
    wait_until(
        "kubectl top to show burn/spin busy and every container",
        || {
            seen = containers(kubectl).unwrap_or_default();
            Ok(seen
                .get(&("burn".into(), "spin".into()))
                .is_some_and(|(cpu, _)| *cpu >= 300)
                && seen.contains_key(&("idle".into(), "app".into()))
                && seen.contains_key(&("burn".into(), "side".into())))
        },
    )
    .await
    .with_context(|| format!("last seen: {seen:?}"))?;
    for quiet in [("burn", "side"), ("idle", "app")] {
        let (cpu, _) = seen
            .get(&(quiet.0.to_string(), quiet.1.to_string()))
            .with_context(|| format!("no {quiet:?} in {seen:?}"))?;
        ensure!(*cpu < 100, "{quiet:?} uses {cpu}m: {seen:?}");
    }
    ensure!(
        seen.values().any(|(_, mib)| *mib > 0),
        "no container uses any memory: {seen:?}"
    );

    // The node's usage includes it.
    let row = node_row(kubectl)?;
    ensure!(
        millicores(&row["CPU(cores)"])? >= 300,
        "node usage while burn spins: {row:?}"
    );
    ensure!(mebibytes(&row["MEMORY(bytes)"])? > 0, "{row:?}");

    // Per pod, across namespaces, by label and by name.
    let all = table(&kubectl.ok(&["top", "pods", "-A"])?)?;
    ensure!(
        all.iter()
            .any(|r| r["NAMESPACE"] == "default" && r["NAME"] == "burn"),
        "{all:?}"
    );
    let selected = table(&kubectl.ok(&["top", "pods", "-l", "load=low"])?)?;
    ensure!(
        selected.len() == 1 && selected[0]["NAME"] == "idle",
        "{selected:?}"
    );
    let one = table(&kubectl.ok(&["top", "pod", "burn"])?)?;
    ensure!(
        one.len() == 1 && millicores(&one[0]["CPU(cores)"])? >= 300,
        "{one:?}"
    );
    let missing = kubectl.fails(&["top", "pod", "nosuch"])?;
    ensure!(missing.contains("not found"), "{missing}");

    // Every kubectl on the machine reads the same API.
    for (minor, binary) in every_kubectl_version() {
        let versioned = Kubectl::new(binary, &node.server.kubeconfig())?;
        let nodes = versioned.ok(&["top", "nodes"])?;
        ensure!(nodes.contains(NODE), "kubectl 1.{minor} top nodes: {nodes}");
        let pods = versioned.ok(&["top", "pods", "--containers"])?;
        ensure!(
            pods.contains("spin") && pods.contains("idle"),
            "kubectl 1.{minor} top pods --containers: {pods}"
        );
    }

    // The usage follows the load: once the spinning stops, it falls.
    wait_until("burn/spin to go quiet in kubectl top", || {
        seen = containers(kubectl).unwrap_or_default();
        Ok(seen
            .get(&("burn".into(), "spin".into()))
            .is_some_and(|(cpu, _)| *cpu < 100))
    })
    .await
    .with_context(|| format!("last seen: {seen:?}"))?;
    Ok(())
}

const SIMULATED_WORKLOAD: &str = "apiVersion: apps/v1
kind: Deployment
metadata: {name: sim}
spec:
  replicas: 4
  selector: {matchLabels: {app: sim}}
  template:
    metadata: {labels: {app: sim}}
    spec:
      nodeSelector: {skiff.test/simulated: \"true\"}
      containers:
      - name: app
        image: busybox
        resources: {requests: {cpu: 200m, memory: 64Mi}}
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn simulated_nodes_report_the_usage_they_simulate() -> Result<()> {
    let test = "simulated_nodes_report_the_usage_they_simulate";
    let Some(node) =
        LocalNode::start_with(test, RELAXED_EVICTION, &["--controller-manager=true"]).await?
    else {
        return Ok(());
    };
    let kubectl = &node.kubectl;
    let _simulation = SkiffProcess::spawn(
        "simulated kubelet",
        [
            "kubelet".to_string(),
            format!("--kubeconfig={}", node.server.kubeconfig().display()),
            "--simulate=2".into(),
            "--simulate-prefix=sim".into(),
            "--node-labels=skiff.test/simulated=true".into(),
            "--kubelet-listen=127.0.0.1:0".into(),
        ],
    )?;
    apply(kubectl, "sim.yaml", SIMULATED_WORKLOAD)?;
    wait_for(kubectl, "deployment", "sim", "{.status.readyReplicas}", "4").await?;

    // Each pod uses between 40 % and 100 % of what it requests.
    let mut rows = Vec::new();
    wait_until("kubectl top to show the four simulated pods", || {
        rows = kubectl
            .ok(&["top", "pods", "-l", "app=sim"])
            .ok()
            .and_then(|text| table(&text).ok())
            .unwrap_or_default();
        Ok(rows.len() == 4)
    })
    .await
    .with_context(|| format!("last seen: {rows:?}"))?;
    for row in &rows {
        let cpu = millicores(&row["CPU(cores)"])?;
        let memory = mebibytes(&row["MEMORY(bytes)"])?;
        ensure!((80..=200).contains(&cpu), "{row:?}");
        ensure!((25..=64).contains(&memory), "{row:?}");
    }
    // Both nodes, with their pods' usage in theirs (once a sampling
    // interval has passed with the pods running).
    let mut text = String::new();
    wait_until("the simulated nodes' CPU to include their pods'", || {
        text = kubectl
            .ok(&["top", "nodes", "-l", "skiff.test/simulated=true"])
            .unwrap_or_default();
        let Ok(nodes) = table(&text) else {
            return Ok(false);
        };
        let total: u64 = nodes
            .iter()
            .filter_map(|row| millicores(&row["CPU(cores)"]).ok())
            .sum();
        Ok(nodes.len() == 2 && total >= 4 * 80)
    })
    .await
    .with_context(|| format!("last seen: {text}"))?;
    Ok(())
}

#[test]
fn kubectl_top_tables_are_read_by_their_headers() -> Result<()> {
    let rows = table(
        "NAME     CPU(cores)   CPU%   MEMORY(bytes)   MEMORY%\nnode-1   1250m        62%    3021Mi          12%\n",
    )?;
    assert_eq!(millicores(&rows[0]["CPU(cores)"])?, 1250);
    assert_eq!(mebibytes(&rows[0]["MEMORY(bytes)"])?, 3021);
    assert_eq!(millicores("2")?, 2000);
    if table("NAME CPU\nx\n").is_ok() {
        bail!("a short row is not a row");
    }
    Ok(())
}
