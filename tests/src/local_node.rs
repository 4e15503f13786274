//! `skiff up` with its scheduler and a real kubelet for node `node-1`,
//! and the real kubectl pointed at it: what the kubelet and controller
//! tests run against. Dropping it SIGKILLs skiff, then whatever its pods
//! left running.

use std::time::{Duration, Instant};

use anyhow::{bail, Result};

use crate::api_server::ApiServer;
use crate::kubectl::{kubectl_or_skip, Kubectl};
use crate::node_processes;

pub const NODE: &str = "node-1";
pub const TIMEOUT: Duration = Duration::from_secs(60);
const POLL: Duration = Duration::from_millis(200);
/// A build machine's disk may be fuller than the kubelet's default 10 %
/// free: these tests are not about pressure.
pub const RELAXED_EVICTION: &str =
    "--eviction-hard=memory.available<1Mi,nodefs.available<1%,nodefs.inodesFree<1%,pid.available<1%";

pub struct LocalNode {
    pub kubectl: Kubectl,
    pub server: ApiServer,
    /// With pods on networks of their own: what to remove from the host
    /// once skiff is gone (a field, so it goes after `drop` below).
    pub network: Option<PodNetworkCleanup>,
}

/// What a test's pod network leaves on the host if the test fails
/// half-way: its bridge, and the namespaces of the pods it names.
pub struct PodNetworkCleanup {
    pub bridge: String,
    pub uids: Vec<String>,
}

impl Drop for PodNetworkCleanup {
    fn drop(&mut self) {
        for uid in &self.uids {
            let _ = std::process::Command::new("ip")
                .args(["netns", "delete", &format!("skiff-{uid}")])
                .stderr(std::process::Stdio::null())
                .status();
            // The pod's hosts and resolv.conf, beside its namespace.
            let _ = std::fs::remove_dir_all(format!("/run/skiff-pods/{uid}"));
        }
        let _ = std::process::Command::new("ip")
            .args(["link", "del", &self.bridge])
            .stderr(std::process::Stdio::null())
            .status();
        // The kubelet's masquerading table, named after its bridge.
        let _ = std::process::Command::new("nft")
            .args([
                "delete",
                "table",
                "inet",
                &skiff_kubelet::network::hostgw::table_name(&self.bridge),
            ])
            .stderr(std::process::Stdio::null())
            .status();
    }
}

impl Drop for LocalNode {
    /// skiff first (its kubelet would restart what is killed), then what
    /// its pods left running, before the data directory goes.
    fn drop(&mut self) {
        self.server.kill_now();
        node_processes::kill_all(&self.server.data_dir().join("kubelet"));
    }
}

impl LocalNode {
    /// The node, once Ready; `None` when kubectl is missing outside CI.
    pub async fn start(test: &str) -> Result<Option<LocalNode>> {
        Self::start_with(test, RELAXED_EVICTION, &[]).await
    }

    /// As [`LocalNode::start`], with these eviction thresholds and more
    /// `skiff up` flags.
    pub async fn start_with(
        test: &str,
        eviction: &str,
        more: &[&str],
    ) -> Result<Option<LocalNode>> {
        let Some(binary) = kubectl_or_skip(test) else {
            return Ok(None);
        };
        let mut args = vec![
            "--kubelet=true".to_string(),
            "--kubelet-listen=127.0.0.1:0".into(),
            format!("--node-name={NODE}"),
            "--container-restart-backoff=1s".into(),
            eviction.into(),
        ];
        args.extend(more.iter().map(|a| a.to_string()));
        let server = ApiServer::start_scheduling_with(&args).await?;
        let kubectl = Kubectl::new(binary, &server.kubeconfig())?;
        wait_until("the node to be Ready", || {
            Ok(kubectl
                .ok(&[
                    "get",
                    "node",
                    NODE,
                    "-o",
                    "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
                ])
                .unwrap_or_default()
                == "True")
        })
        .await?;
        Ok(Some(LocalNode {
            kubectl,
            server,
            network: None,
        }))
    }

    /// As [`LocalNode::start_with`], with `--pod-network=cni`: a bridge
    /// (`bridge_prefix` and this process's id) and a cluster CIDR of the
    /// test's own, so that concurrent tests clash on nothing, and the
    /// controller-manager for the Node's pod CIDR. `None` when kubectl is
    /// missing outside CI; see [`pod_network_or_skip`] for root and the
    /// plugins.
    pub async fn start_with_pod_network(
        test: &str,
        bridge_prefix: &str,
        cluster_cidr: &str,
        more: &[&str],
    ) -> Result<Option<LocalNode>> {
        let bridge = format!("{bridge_prefix}{}", std::process::id() % 100_000);
        let cleanup = PodNetworkCleanup {
            bridge: bridge.clone(),
            uids: Vec::new(),
        };
        let mut flags = vec![
            "--pod-network=cni".to_string(),
            format!("--pod-bridge={bridge}"),
            "--controller-manager=true".to_string(),
            format!("--cluster-cidr={cluster_cidr}"),
        ];
        flags.extend(more.iter().map(|f| f.to_string()));
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        let started = Self::start_with(test, RELAXED_EVICTION, &flags).await?;
        Ok(started.map(|mut node| {
            node.network = Some(cleanup);
            node
        }))
    }

    /// The bridge of a node started with its pod network.
    pub fn bridge(&self) -> &str {
        self.network.as_ref().map_or("", |n| n.bridge.as_str())
    }

    /// Pods whose namespaces the test's cleanup removes if it fails.
    pub fn clean_up_pods(&mut self, uids: impl IntoIterator<Item = String>) {
        if let Some(network) = self.network.as_mut() {
            network.uids.extend(uids);
        }
    }
}

/// Whether pods can have networks of their own here (`--pod-network=cni`):
/// root, and the standard CNI plugins. Else the test says it was skipped,
/// or fails under CI=true, which installs them.
pub fn pod_network_or_skip(test: &str) -> bool {
    let root = unsafe { libc::geteuid() } == 0;
    let plugins = ["/usr/lib/cni/bridge", "/opt/cni/bin/bridge"]
        .iter()
        .any(|p| std::path::Path::new(p).is_file());
    let why = match (root, plugins) {
        (true, true) => return true,
        (false, _) => "needs root (network namespaces)",
        (true, false) => "needs the CNI plugins: apt-get install containernetworking-plugins",
    };
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{test}: {why}");
    }
    eprintln!("{test}: skipped: {why}");
    false
}

/// Whether the service proxy (and a kubelet's masquerading) can program
/// nftables here: root and `nft`. Else the test says it was skipped, or
/// fails under CI=true, which installs nftables.
pub fn nftables_or_skip(test: &str) -> bool {
    let Some(why) = skiff_kubelet::proxy::unavailable_reason() else {
        return true;
    };
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{test}: {why}");
    }
    eprintln!("{test}: skipped: {why}");
    false
}

/// Polls `check` until it holds, for at most [`TIMEOUT`].
pub async fn wait_until(what: &str, mut check: impl FnMut() -> Result<bool>) -> Result<()> {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        if check()? {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("timed out after {TIMEOUT:?} waiting for {what}");
        }
        tokio::time::sleep(POLL).await;
    }
}

/// `kubectl get KIND NAME -o jsonpath=PATH`.
pub fn jsonpath(kubectl: &Kubectl, kind: &str, name: &str, path: &str) -> Result<String> {
    kubectl.ok(&["get", kind, name, "-o", &format!("jsonpath={path}")])
}

/// Waits until `jsonpath` of the object is `want` (an object that is not
/// there yet, or a failed kubectl, is waited out too); on a timeout the
/// error shows the object and kubectl's last error.
pub async fn wait_for(
    kubectl: &Kubectl,
    kind: &str,
    name: &str,
    path: &str,
    want: &str,
) -> Result<()> {
    let what = format!("{kind} {name} to have {path} = {want}");
    let mut last_error = None;
    let outcome = wait_until(&what, || match jsonpath(kubectl, kind, name, path) {
        Ok(value) => Ok(value == want),
        Err(err) => {
            last_error = Some(format!("{err:#}"));
            Ok(false)
        }
    })
    .await;
    if outcome.is_err() {
        let yaml = kubectl
            .ok(&["get", kind, name, "-o", "yaml"])
            .unwrap_or_default();
        let last_error = last_error.unwrap_or_default();
        bail!(
            "timed out waiting for {what}; kubectl's last error: {last_error}; the object:\n{yaml}"
        );
    }
    Ok(())
}

/// Writes `text` as manifest `name` and applies it.
pub fn apply(kubectl: &Kubectl, name: &str, text: &str) -> Result<()> {
    kubectl.manifest(name, text)?;
    kubectl.ok(&["apply", "-f", name])?;
    Ok(())
}
