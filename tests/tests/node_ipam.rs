//! The node IPAM controller of `skiff up`: every Node gets a pod CIDR of
//! its own from `--cluster-cidr`, a Node that finds every range taken waits
//! for one to be freed by a deleted Node, a Node's own CIDR is left alone,
//! and after a restart the ranges Nodes hold are not handed out again.
//! Bad flags stop `skiff controller-manager` with a clear message.

use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Result};
use serde_json::{json, Value};
use skiff_tests::api_server::ApiServer;
use skiff_tests::kube_http::{expect_status, KubeHttp};
use skiff_tests::skiff_process::SkiffProcess;

const TIMEOUT: Duration = Duration::from_secs(60);

async fn create_node(http: &KubeHttp, name: &str, spec: Value) -> Result<()> {
    let node =
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}, "spec": spec});
    let reply = http.post("/api/v1/nodes", &node).await?;
    expect_status(&reply, 201, &format!("create node {name}"))?;
    Ok(())
}

/// The Node's `spec.podCIDRs`, empty while it has none.
async fn pod_cidrs(http: &KubeHttp, name: &str) -> Result<Vec<String>> {
    let node = http.get_json(&format!("/api/v1/nodes/{name}")).await?;
    let cidrs: Vec<String> = node["spec"]["podCIDRs"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c.as_str().map(str::to_string))
        .collect();
    if let Some(first) = cidrs.first() {
        ensure!(
            node["spec"]["podCIDR"] == json!(first),
            "podCIDR is not podCIDRs[0]: {node}"
        );
    }
    Ok(cidrs)
}

/// Waits until the Node has a pod CIDR, and returns it.
async fn allocated(http: &KubeHttp, name: &str) -> Result<String> {
    let start = Instant::now();
    while start.elapsed() < TIMEOUT {
        if let [cidr] = pod_cidrs(http, name).await?.as_slice() {
            return Ok(cidr.clone());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    bail!("timed out waiting for node {name} to get a pod CIDR")
}

/// The Node still has no pod CIDR after a while.
async fn still_waiting(http: &KubeHttp, name: &str) -> Result<()> {
    tokio::time::sleep(Duration::from_secs(2)).await;
    let cidrs = pod_cidrs(http, name).await?;
    ensure!(
        cidrs.is_empty(),
        "node {name} got {cidrs:?}, but every range was taken"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_get_pod_cidrs_of_their_own_and_give_them_back() -> Result<()> {
    // Two /24 ranges in all: a third Node has to wait.
    let args: Vec<String> = [
        "--scheduler=false",
        "--kubelet=false",
        "--controller-manager=true",
        "--controllers=nodeipam",
        "--cluster-cidr=10.99.0.0/23",
        "--node-cidr-mask-size=24",
    ]
    .map(str::to_string)
    .to_vec();
    let (mut server, http) = ApiServer::start_with_plain_port(&args).await?;
    let ranges = ["10.99.0.0/24", "10.99.1.0/24"];

    create_node(&http, "n1", json!({})).await?;
    create_node(&http, "n2", json!({})).await?;
    let n1 = allocated(&http, "n1").await?;
    let n2 = allocated(&http, "n2").await?;
    ensure!(n1 != n2, "n1 and n2 share {n1}");
    for cidr in [&n1, &n2] {
        ensure!(
            ranges.contains(&cidr.as_str()),
            "{cidr} is not a /24 of 10.99.0.0/23"
        );
    }
    // A Node that brings its own range keeps it and takes none.
    create_node(
        &http,
        "own",
        json!({"podCIDR": "192.168.50.0/24", "podCIDRs": ["192.168.50.0/24"]}),
    )
    .await?;
    create_node(&http, "n3", json!({})).await?;
    still_waiting(&http, "n3").await?;
    ensure!(pod_cidrs(&http, "own").await? == ["192.168.50.0/24"]);

    // Deleting n1 frees its range for n3.
    expect_status(&http.delete("/api/v1/nodes/n1").await?, 200, "delete n1")?;
    let n3 = allocated(&http, "n3").await?;
    ensure!(n3 == n1, "n3 got {n3}, not n1's freed {n1}");

    // After a restart the ranges n2 and n3 hold are still taken.
    server.stop().await?;
    server.restart().await?;
    create_node(&http, "n4", json!({})).await?;
    still_waiting(&http, "n4").await?;
    expect_status(&http.delete("/api/v1/nodes/n2").await?, 200, "delete n2")?;
    let n4 = allocated(&http, "n4").await?;
    ensure!(n4 == n2, "n4 got {n4}, not n2's freed {n2}");
    Ok(())
}

#[tokio::test]
async fn node_ipam_flags_that_do_not_fit_are_refused() -> Result<()> {
    for (flags, want) in [
        (
            vec!["--cluster-cidr=10.0.0.0/16", "--node-cidr-mask-size=8"],
            "between /16 and /32",
        ),
        (
            vec!["--cluster-cidr=10.0.0.0/16,10.1.0.0/16"],
            "one IPv4 and one IPv6",
        ),
        (vec!["--cluster-cidr=10.0.0.300/16"], "--cluster-cidr"),
    ] {
        let mut args = vec!["controller-manager", "--kubeconfig=/nonexistent"];
        args.extend(flags.iter().copied());
        let (status, _, stderr) = SkiffProcess::run(&args, TIMEOUT).await?;
        ensure!(!status.success(), "{flags:?} was accepted");
        ensure!(
            stderr.contains(want),
            "{flags:?}: stderr does not say {want:?}: {stderr}"
        );
    }
    Ok(())
}
