//! Pods on different nodes: three `skiff kubelet`s, each in a network
//! namespace of its own acting as its own host, joined by a bridge in this
//! host's namespace, and one `skiff up` (API, scheduler, controllers, no
//! kubelet) on this host at the bridge's address. Each node routes the
//! others' pod CIDRs through their addresses (host-gw): a pod on one node
//! reaches a pod on another by its address and is seen there by its own
//! address (no NAT); a pod reaching outside the pods' ranges is
//! masqueraded behind its node; a deleted node's route goes. Needs root,
//! the CNI plugins and nft (CI installs them).

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, ensure, Context, Result};
use skiff_tests::kubectl::{kubectl_or_skip, Kubectl};
use skiff_tests::local_node::{
    apply, jsonpath, nftables_or_skip, pod_network_or_skip, wait_until, RELAXED_EVICTION,
};
use skiff_tests::node_processes;
use skiff_tests::skiff_process::{free_addrs, SkiffProcess};

/// The network between the hosts (this host is .1, node i is .(i+2)).
const HOSTS_NET: &str = "10.218.0";
/// The pods' addresses: a /24 of it for each node.
const CLUSTER_CIDR: &str = "10.219.0.0/16";
const NODES: usize = 3;

/// Runs `ip ARGS` (in namespace `netns` when given); an error says what
/// failed.
fn ip(netns: Option<&str>, args: &[&str]) -> Result<String> {
    let mut command = Command::new("ip");
    if let Some(netns) = netns {
        command.args(["netns", "exec", netns, "ip"]);
    }
    let output = command.args(args).output().context("running ip")?;
    ensure!(
        output.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&output.stderr).trim()
    );
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// The hosts: a bridge here, and a namespace with an `eth0` on it for
/// each node. Dropped: the kubelets' pods' processes, then the
/// namespaces (with their links and routes) and the bridge.
struct Hosts {
    bridge: String,
    namespaces: Vec<String>,
    kubelet_roots: Vec<PathBuf>,
    /// Pods whose namespace files the kubelets (each in a mount namespace
    /// of its own, where the files' bind mounts live) leave when killed.
    pods: Vec<String>,
}

impl Drop for Hosts {
    fn drop(&mut self) {
        for root in &self.kubelet_roots {
            node_processes::kill_all(root);
        }
        for uid in &self.pods {
            let _ = std::fs::remove_file(format!("/run/netns/skiff-{uid}"));
        }
        for ns in &self.namespaces {
            let _ = Command::new("ip").args(["netns", "delete", ns]).status();
        }
        let _ = Command::new("ip")
            .args(["link", "del", &self.bridge])
            .status();
    }
}

impl Hosts {
    fn make(id: u32) -> Result<Hosts> {
        let mut hosts = Hosts {
            bridge: format!("skh{id}"),
            namespaces: Vec::new(),
            kubelet_roots: Vec::new(),
            pods: Vec::new(),
        };
        ip(None, &["link", "add", &hosts.bridge, "type", "bridge"])?;
        ip(
            None,
            &[
                "addr",
                "add",
                &format!("{HOSTS_NET}.1/24"),
                "dev",
                &hosts.bridge,
            ],
        )?;
        ip(None, &["link", "set", &hosts.bridge, "up"])?;
        for i in 0..NODES {
            let ns = format!("skh{id}-{i}");
            ip(None, &["netns", "add", &ns])?;
            hosts.namespaces.push(ns.clone());
            let outside = format!("skh{id}v{i}");
            ip(
                None,
                &[
                    "link", "add", &outside, "type", "veth", "peer", "name", "eth0", "netns", &ns,
                ],
            )?;
            ip(
                None,
                &["link", "set", &outside, "master", &hosts.bridge, "up"],
            )?;
            let address = format!("{HOSTS_NET}.{}/24", i + 2);
            ip(Some(&ns), &["addr", "add", &address, "dev", "eth0"])?;
            ip(Some(&ns), &["link", "set", "eth0", "up"])?;
            ip(Some(&ns), &["link", "set", "lo", "up"])?;
        }
        Ok(hosts)
    }
}

fn node_ip(i: usize) -> String {
    format!("{HOSTS_NET}.{}", i + 2)
}

/// A server that answers each connection with the address it came from,
/// and a pod that asks a server for it.
const PODS: &str = "apiVersion: v1
kind: Pod
metadata: {name: echo, labels: {app: echo}}
spec:
  nodeName: n1
  terminationGracePeriodSeconds: 1
  containers:
  - name: app
    image: python:3
    command:
    - python3
    - -c
    - |
      import socket
      s = socket.socket()
      s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
      s.bind(('0.0.0.0', 8080))
      s.listen(16)
      while True:
          c, peer = s.accept()
          c.sendall(peer[0].encode())
          c.close()
    readinessProbe:
      tcpSocket: {port: 8080}
      periodSeconds: 1
---
apiVersion: v1
kind: Pod
metadata: {name: asker}
spec:
  nodeName: n0
  terminationGracePeriodSeconds: 1
  containers:
  - {name: app, image: python:3, command: [sleep, \"3600\"]}
";

/// What a server at `ip:port` says, asked from the pod `asker`.
fn ask_from_pod(kubectl: &Kubectl, ip: &str, port: u16) -> Result<String> {
    let script = format!(
        "import socket; s = socket.create_connection(('{ip}', {port}), timeout=5); print(s.recv(100).decode())"
    );
    kubectl
        .ok(&["exec", "asker", "--", "python3", "-c", &script])
        .map(|out| out.trim().to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_on_different_nodes_reach_each_other_by_address() -> Result<()> {
    let test = "pods_on_different_nodes_reach_each_other_by_address";
    if !pod_network_or_skip(test) {
        return Ok(());
    }
    if !nftables_or_skip(test) {
        return Ok(());
    }
    let Some(binary) = kubectl_or_skip(test) else {
        return Ok(());
    };
    let id = std::process::id() % 100_000;
    let mut hosts = Hosts::make(id)?;
    let dir = tempfile::tempdir()?;
    let api = format!("{HOSTS_NET}.1:6443");
    let client = free_addrs(1)?[0];
    let data_dir = dir.path().join("skiff");
    let _server = SkiffProcess::spawn(
        "skiff up",
        [
            "up".to_string(),
            format!("--data-dir={}", data_dir.display()),
            format!("--api-listen={api}"),
            format!("--client-listen={client}"),
            format!("--tls-san={HOSTS_NET}.1"),
            "--kubelet=false".into(),
            format!("--cluster-cidr={CLUSTER_CIDR}"),
        ],
    )?;
    let kubeconfig = data_dir.join("kubeconfig");
    wait_until("skiff up's kubeconfig", || Ok(kubeconfig.exists())).await?;
    let kubectl = Kubectl::new(binary, &kubeconfig)?;
    let server = std::fs::read_to_string(&kubeconfig)?;
    ensure!(
        server.contains(&format!("https://{api}")),
        "the kubeconfig names another server:\n{server}"
    );

    let mut kubelets = Vec::new();
    for (i, ns) in hosts.namespaces.clone().iter().enumerate() {
        let root = dir.path().join(format!("kubelet-{i}"));
        hosts.kubelet_roots.push(root.clone());
        kubelets.push(SkiffProcess::spawn_in_netns(
            &format!("skiff kubelet n{i}"),
            ns,
            [
                "kubelet".to_string(),
                format!("--kubeconfig={}", kubeconfig.display()),
                format!("--root-dir={}", root.display()),
                format!("--node-name=n{i}"),
                format!("--node-ip={}", node_ip(i)),
                format!("--kubelet-listen={}:10250", node_ip(i)),
                "--pod-network=cni".into(),
                "--container-restart-backoff=1s".into(),
                RELAXED_EVICTION.into(),
            ],
        )?);
    }
    let ready = wait_until("three Ready nodes with pod CIDRs", || {
        let out = kubectl
            .ok(&[
                "get",
                "nodes",
                "-o",
                "jsonpath={range .items[*]}{.spec.podCIDR} {.status.conditions[?(@.type==\"Ready\")].status}{\"\\n\"}{end}",
            ])
            .unwrap_or_default();
        Ok(out.lines().filter(|l| l.starts_with("10.219.") && l.ends_with(" True")).count() == NODES)
    })
    .await;
    if let Err(err) = ready {
        let logs: Vec<String> = kubelets.iter().map(|k| k.stderr()).collect();
        bail!("{err:#}\n{}", logs.join("\n----\n"));
    }

    // Each node routes the others' pod CIDRs through their addresses.
    let cidrs: Vec<String> = (0..NODES)
        .map(|i| jsonpath(&kubectl, "node", &format!("n{i}"), "{.spec.podCIDR}"))
        .collect::<Result<_>>()?;
    let routes_of = |i: usize| {
        ip(
            Some(&hosts.namespaces[i]),
            &["route", "show", "proto", "211"],
        )
    };
    wait_until("every node routing the others' pods", || {
        Ok((0..NODES).all(|i| {
            let routes = routes_of(i).unwrap_or_default();
            (0..NODES)
                .filter(|j| *j != i)
                .all(|j| routes.contains(&format!("{} via {}", cidrs[j], node_ip(j))))
        }))
    })
    .await?;

    apply(&kubectl, "pods.yaml", PODS)?;
    for pod in ["echo", "asker"] {
        hosts
            .pods
            .push(jsonpath(&kubectl, "pod", pod, "{.metadata.uid}")?);
    }
    let running = wait_until("both pods Ready", || {
        let ready = |name| {
            jsonpath(
                &kubectl,
                "pod",
                name,
                "{.status.conditions[?(@.type==\"Ready\")].status}",
            )
            .unwrap_or_default()
                == "True"
        };
        Ok(ready("echo") && ready("asker"))
    })
    .await;
    if let Err(err) = running {
        let described = kubectl.ok(&["describe", "pods"]).unwrap_or_default();
        let logs: Vec<String> = kubelets.iter().map(|k| k.stderr()).collect();
        bail!("{err:#}\n{described}\n{}", logs.join("\n----\n"));
    }
    let echo_ip = jsonpath(&kubectl, "pod", "echo", "{.status.podIP}")?;
    let asker_ip = jsonpath(&kubectl, "pod", "asker", "{.status.podIP}")?;
    let prefix = |cidr: &str| {
        cidr.rsplit_once('.')
            .map(|(p, _)| format!("{p}."))
            .unwrap_or_default()
    };
    ensure!(
        echo_ip.starts_with(&prefix(&cidrs[1])),
        "echo on n1 has {echo_ip} ({})",
        cidrs[1]
    );
    ensure!(
        asker_ip.starts_with(&prefix(&cidrs[0])),
        "asker on n0 has {asker_ip} ({})",
        cidrs[0]
    );

    // Node to node, pod to pod: the server sees the asking pod's own
    // address.
    let seen = ask_from_pod(&kubectl, &echo_ip, 8080)?;
    ensure!(
        seen == asker_ip,
        "echo on n1 saw {seen:?}, not the asking pod {asker_ip}"
    );

    // Outside the pods' ranges (this host, on the hosts' network): the
    // connection leaves masqueraded behind node n0's address; unmasked,
    // this host (which has no route to the pods) could not answer.
    let outside = TcpListener::bind((format!("{HOSTS_NET}.1"), 0))?;
    let port = outside.local_addr()?.port();
    outside.set_nonblocking(true)?;
    let accepting = std::thread::spawn(move || -> Result<String> {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        let (mut stream, peer) = loop {
            match outside.accept() {
                Ok(accepted) => break accepted,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    ensure!(std::time::Instant::now() < deadline, "nothing connected");
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(e) => return Err(e.into()),
            }
        };
        stream.set_nonblocking(false)?;
        stream.write_all(peer.ip().to_string().as_bytes())?;
        stream.set_read_timeout(Some(Duration::from_secs(5)))?;
        let mut rest = Vec::new();
        let _ = stream.read_to_end(&mut rest);
        Ok(peer.ip().to_string())
    });
    let seen = ask_from_pod(&kubectl, &format!("{HOSTS_NET}.1"), port)?;
    let accepted = accepting
        .join()
        .map_err(|_| anyhow::anyhow!("the listener panicked"))??;
    ensure!(
        seen == node_ip(0) && accepted == node_ip(0),
        "outside the cluster, the pod was seen as {seen:?}/{accepted:?}, not as its node {}",
        node_ip(0)
    );

    // A node gone: the others drop its route.
    kubectl.ok(&["delete", "pod", "echo", "--wait=false"])?;
    let stopped = kubelets.remove(2);
    drop(stopped);
    kubectl.ok(&["delete", "node", "n2"])?;
    wait_until("n2's route gone from n0", || {
        Ok(!routes_of(0).unwrap_or_default().contains(&cidrs[2]))
    })
    .await?;
    let routes = routes_of(0)?;
    ensure!(
        routes.contains(&format!("{} via {}", cidrs[1], node_ip(1))),
        "n1's route went too:\n{routes}"
    );
    drop(kubelets);
    drop(hosts);
    ensure!(
        !Path::new(&format!("/run/netns/skh{id}-0")).exists(),
        "a host namespace outlived the test"
    );
    Ok(())
}
