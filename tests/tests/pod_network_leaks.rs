//! Nothing of a pod's network outlives the pod: 500 pods with networks of
//! their own (`skiff up --pod-network=cni`), in five waves of 100 scaled
//! up and down, leave no network namespace, no veth on the bridge and no
//! allocated address. Needs root and Debian's containernetworking-plugins
//! (CI installs them).

use std::collections::BTreeSet;
use std::path::Path;

use anyhow::{ensure, Result};
use skiff_tests::kubectl::Kubectl;
use skiff_tests::local_node::{apply, pod_network_or_skip, wait_until, LocalNode};

const WAVES: usize = 5;
const PER_WAVE: usize = 100;
/// The cluster CIDR of this test: none other uses it.
const CLUSTER_CIDR: &str = "10.216.0.0/16";

const SLEEPERS: &str = "apiVersion: apps/v1
kind: Deployment
metadata: {name: sleepers}
spec:
  replicas: 0
  selector: {matchLabels: {app: sleepers}}
  template:
    metadata: {labels: {app: sleepers}}
    spec:
      terminationGracePeriodSeconds: 0
      containers:
      - {name: app, image: busybox, command: [sleep, \"3600\"]}
";

/// The UIDs and addresses of the running sleepers.
fn sleepers(kubectl: &Kubectl) -> Result<Vec<(String, String)>> {
    let out = kubectl.ok(&[
        "get",
        "pods",
        "-l",
        "app=sleepers",
        "-o",
        "jsonpath={range .items[*]}{.metadata.uid} {.status.podIP}{\"\\n\"}{end}",
    ])?;
    Ok(out
        .lines()
        .filter_map(|line| {
            let (uid, ip) = line.split_once(' ')?;
            Some((uid.to_string(), ip.trim().to_string()))
        })
        .collect())
}

/// The links whose master is `bridge` (the pods' veths).
fn ports_of(bridge: &str) -> usize {
    std::process::Command::new("ip")
        .args(["-o", "link", "show", "master", bridge])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).lines().count())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_hundred_pods_leave_no_network_behind() -> Result<()> {
    let test = "five_hundred_pods_leave_no_network_behind";
    if !pod_network_or_skip(test) {
        return Ok(());
    }
    let capacity = format!("--capacity=pods={}", PER_WAVE + 10);
    let Some(node) =
        LocalNode::start_with_pod_network(test, "skl", CLUSTER_CIDR, &[capacity.as_str()]).await?
    else {
        return Ok(());
    };
    let kubectl = &node.kubectl;
    apply(kubectl, "sleepers.yaml", SLEEPERS)?;
    let mut uids = BTreeSet::new();
    for wave in 0..WAVES {
        let replicas = format!("--replicas={PER_WAVE}");
        kubectl.ok(&["scale", "deployment", "sleepers", &replicas])?;
        let mut running = Vec::new();
        wait_until(
            &format!("wave {wave}: {PER_WAVE} pods with addresses"),
            || {
                running = sleepers(kubectl)?;
                Ok(running.len() == PER_WAVE
                    && running.iter().all(|(_, ip)| ip.starts_with("10.216.")))
            },
        )
        .await?;
        let addresses: BTreeSet<&String> = running.iter().map(|(_, ip)| ip).collect();
        ensure!(
            addresses.len() == PER_WAVE,
            "wave {wave}: addresses shared: {running:?}"
        );
        uids.extend(running.iter().map(|(uid, _)| uid.clone()));
        kubectl.ok(&["scale", "deployment", "sleepers", "--replicas=0"])?;
        wait_until(&format!("wave {wave}: every pod gone"), || {
            Ok(sleepers(kubectl)?.is_empty())
        })
        .await?;
    }
    ensure!(uids.len() == WAVES * PER_WAVE, "{} pods seen", uids.len());
    let allocations = node.server.data_dir().join("kubelet/cni/networks/skiff");
    wait_until("every namespace, veth and address gone", || {
        let namespaces = uids
            .iter()
            .filter(|uid| Path::new(&format!("/run/netns/skiff-{uid}")).exists())
            .count();
        let addresses = std::fs::read_dir(&allocations)
            .map(|entries| {
                entries
                    .filter_map(Result::ok)
                    .filter(|e| e.file_name().to_string_lossy().starts_with("10."))
                    .count()
            })
            .unwrap_or(0);
        Ok(namespaces == 0 && addresses == 0 && ports_of(node.bridge()) == 0)
    })
    .await?;
    drop(node);
    Ok(())
}
