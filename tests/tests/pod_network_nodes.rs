//! Pods on different nodes: three `skiff kubelet`s, each in a network
//! namespace of its own acting as its own host, joined by a bridge in this
//! host's namespace, and one `skiff up` (API, scheduler, controllers, no
//! kubelet) on this host at the bridge's address. Each node routes the
//! others' pod CIDRs through their addresses (host-gw): a pod on one node
//! reaches a pod on another by its address and is seen there by its own
//! address (no NAT); a pod reaching outside the pods' ranges is
//! masqueraded behind its node; a deleted node's route goes. With the
//! service proxy beside each kubelet, node ports and the Local traffic
//! policies behave as kube-proxy's across nodes, and a UDP flow follows
//! its Service to a new endpoint. Needs root, the CNI plugins, nft and
//! conntrack (CI installs them).

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
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
            let _ = std::fs::remove_dir_all(format!("/run/skiff-pods/{uid}"));
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
            // Through this host, as a host has a way out: without it,
            // what no rule sends elsewhere is unroutable at once.
            ip(
                Some(&ns),
                &["route", "add", "default", "via", &format!("{HOSTS_NET}.1")],
            )?;
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

/// One `skiff up` on this host and a `skiff kubelet` in each host
/// namespace, with `extra` flags; dropped: kubelets, hosts, then the
/// server and its data.
struct Cluster {
    kubectl: Kubectl,
    kubelets: Vec<SkiffProcess>,
    hosts: Hosts,
    /// Each node's pod CIDR.
    cidrs: Vec<String>,
    _server: SkiffProcess,
    _dir: tempfile::TempDir,
    /// Held to the end: the clusters share the hosts' network and the
    /// API's address, so the tests take turns.
    _turn: tokio::sync::MutexGuard<'static, ()>,
}

static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
static CLUSTERS: AtomicU32 = AtomicU32::new(0);

impl Cluster {
    /// `None` (and a note) when this machine cannot run it.
    async fn start(test: &str, extra: &[&str]) -> Result<Option<Cluster>> {
        if !pod_network_or_skip(test) || !nftables_or_skip(test) {
            return Ok(None);
        }
        let Some(binary) = kubectl_or_skip(test) else {
            return Ok(None);
        };
        let turn = TURN.lock().await;
        // A name of its own per cluster: a namespace's veth goes a moment
        // after the namespace, so the next cluster cannot take its name.
        let id = (std::process::id() % 10_000) * 10 + CLUSTERS.fetch_add(1, Ordering::Relaxed) % 10;
        let mut hosts = Hosts::make(id)?;
        let dir = tempfile::tempdir()?;
        let api = format!("{HOSTS_NET}.1:6443");
        let client = free_addrs(1)?[0];
        let data_dir = dir.path().join("skiff");
        let server = SkiffProcess::spawn(
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
        let named = std::fs::read_to_string(&kubeconfig)?;
        ensure!(
            named.contains(&format!("https://{api}")),
            "the kubeconfig names another server:\n{named}"
        );

        let mut kubelets = Vec::new();
        for (i, ns) in hosts.namespaces.clone().iter().enumerate() {
            let root = dir.path().join(format!("kubelet-{i}"));
            hosts.kubelet_roots.push(root.clone());
            let mut args = vec![
                "kubelet".to_string(),
                format!("--kubeconfig={}", kubeconfig.display()),
                format!("--root-dir={}", root.display()),
                format!("--node-name=n{i}"),
                format!("--node-ip={}", node_ip(i)),
                format!("--kubelet-listen={}:10250", node_ip(i)),
                "--pod-network=cni".into(),
                "--container-restart-backoff=1s".into(),
                RELAXED_EVICTION.into(),
            ];
            args.extend(extra.iter().map(|a| a.to_string()));
            kubelets.push(SkiffProcess::spawn_in_netns(
                &format!("skiff kubelet n{i}"),
                ns,
                args,
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
        let cidrs: Vec<String> = (0..NODES)
            .map(|i| jsonpath(&kubectl, "node", &format!("n{i}"), "{.spec.podCIDR}"))
            .collect::<Result<_>>()?;
        Ok(Some(Cluster {
            kubectl,
            kubelets,
            hosts,
            cidrs,
            _server: server,
            _dir: dir,
            _turn: turn,
        }))
    }

    fn routes_of(&self, i: usize) -> Result<String> {
        ip(
            Some(&self.hosts.namespaces[i]),
            &["route", "show", "proto", "211"],
        )
    }

    /// Applies `pods` and waits for every pod named to be Ready (their
    /// namespace files noted for clean-up).
    async fn run_pods(&mut self, pods: &str, names: &[&str]) -> Result<()> {
        apply(&self.kubectl, "pods.yaml", pods)?;
        for pod in names {
            self.hosts
                .pods
                .push(jsonpath(&self.kubectl, "pod", pod, "{.metadata.uid}")?);
        }
        let kubectl = &self.kubectl;
        let running = wait_until("the pods Ready", || {
            Ok(names.iter().all(|name| {
                jsonpath(
                    kubectl,
                    "pod",
                    name,
                    "{.status.conditions[?(@.type==\"Ready\")].status}",
                )
                .unwrap_or_default()
                    == "True"
            }))
        })
        .await;
        if let Err(err) = running {
            let described = kubectl.ok(&["describe", "pods"]).unwrap_or_default();
            let logs: Vec<String> = self.kubelets.iter().map(|k| k.stderr()).collect();
            bail!("{err:#}\n{described}\n{}", logs.join("\n----\n"));
        }
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_on_different_nodes_reach_each_other_by_address() -> Result<()> {
    let test = "pods_on_different_nodes_reach_each_other_by_address";
    let Some(mut cluster) = Cluster::start(test, &[]).await? else {
        return Ok(());
    };
    let cidrs = cluster.cidrs.clone();

    // Each node routes the others' pod CIDRs through their addresses.
    wait_until("every node routing the others' pods", || {
        Ok((0..NODES).all(|i| {
            let routes = cluster.routes_of(i).unwrap_or_default();
            (0..NODES)
                .filter(|j| *j != i)
                .all(|j| routes.contains(&format!("{} via {}", cidrs[j], node_ip(j))))
        }))
    })
    .await?;

    cluster.run_pods(PODS, &["echo", "asker"]).await?;
    let kubectl = &cluster.kubectl;
    let echo_ip = jsonpath(kubectl, "pod", "echo", "{.status.podIP}")?;
    let asker_ip = jsonpath(kubectl, "pod", "asker", "{.status.podIP}")?;
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
    let seen = ask_from_pod(kubectl, &echo_ip, 8080)?;
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
    let seen = ask_from_pod(kubectl, &format!("{HOSTS_NET}.1"), port)?;
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
    let stopped = cluster.kubelets.remove(2);
    drop(stopped);
    kubectl.ok(&["delete", "node", "n2"])?;
    wait_until("n2's route gone from n0", || {
        Ok(!cluster.routes_of(0).unwrap_or_default().contains(&cidrs[2]))
    })
    .await?;
    let routes = cluster.routes_of(0)?;
    ensure!(
        routes.contains(&format!("{} via {}", cidrs[1], node_ip(1))),
        "n1's route went too:\n{routes}"
    );
    let first_host = cluster.hosts.namespaces[0].clone();
    drop(cluster);
    ensure!(
        !Path::new(&format!("/run/netns/{first_host}")).exists(),
        "a host namespace outlived the test"
    );
    Ok(())
}

/// A Python program that connects to `ip:port` and prints `answered
/// <what the server said>`, or the error's name (`TimeoutError` when the
/// connection was dropped, `ConnectionRefusedError` when refused).
fn probe_script(ip: &str, port: u16) -> String {
    format!(
        "import socket
try:
    s = socket.create_connection(('{ip}', {port}), timeout=2)
    print('answered', s.recv(100).decode())
except OSError as e:
    print(type(e).__name__ if type(e) is not OSError else e)"
    )
}

/// [`probe_script`] run on a host: this one (`None`) or a node's
/// namespace.
fn probe_from_host(netns: Option<&str>, ip: &str, port: u16) -> Result<String> {
    let mut command = match netns {
        Some(ns) => {
            let mut command = Command::new("ip");
            command.args(["netns", "exec", ns, "python3"]);
            command
        }
        None => Command::new("python3"),
    };
    let output = command
        .args(["-c", &probe_script(ip, port)])
        .output()
        .context("running python3")?;
    ensure!(
        output.status.success(),
        "python3: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(String::from_utf8_lossy(&output.stdout).trim().to_string())
}

/// [`probe_script`] run in the pod `asker`.
fn probe_from_pod(kubectl: &Kubectl, ip: &str, port: u16) -> Result<String> {
    kubectl
        .ok(&[
            "exec",
            "asker",
            "--",
            "python3",
            "-c",
            &probe_script(ip, port),
        ])
        .map(|out| out.trim().to_string())
}

/// The echo pod (on n1) behind two NodePort Services: one with the
/// default policies, one with `externalTrafficPolicy` and
/// `internalTrafficPolicy` Local.
const SERVICES: &str = "apiVersion: v1
kind: Service
metadata: {name: everywhere}
spec:
  type: NodePort
  selector: {app: echo}
  ports: [{port: 80, targetPort: 8080, nodePort: 30080}]
---
apiVersion: v1
kind: Service
metadata: {name: local}
spec:
  type: NodePort
  externalTrafficPolicy: Local
  internalTrafficPolicy: Local
  selector: {app: echo}
  ports: [{port: 80, targetPort: 8080, nodePort: 30081}]
";

/// kube-proxy's traffic policies across nodes, with the service proxy
/// beside each kubelet: a node port reaches a pod on another node
/// (masqueraded behind the node asked); under `externalTrafficPolicy:
/// Local` only the pod's own node answers, keeping the client's address,
/// and the others drop; under `internalTrafficPolicy: Local` the cluster
/// IP reaches only endpoints on the client's node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_ports_and_local_traffic_policies_across_nodes() -> Result<()> {
    let test = "node_ports_and_local_traffic_policies_across_nodes";
    let Some(mut cluster) = Cluster::start(test, &["--service-proxy=true"]).await? else {
        return Ok(());
    };
    cluster.run_pods(PODS, &["echo", "asker"]).await?;
    apply(&cluster.kubectl, "services.yaml", SERVICES)?;
    let kubectl = &cluster.kubectl;
    let this_host = format!("{HOSTS_NET}.1");
    let answered = |seen: &str| format!("answered {seen}");

    // Default policy: any node's port reaches the pod on n1, seen as
    // coming from the node asked.
    wait_until("n0's node port answering", || {
        Ok(probe_from_host(None, &node_ip(0), 30080)?.starts_with("answered"))
    })
    .await?;
    let seen = probe_from_host(None, &node_ip(0), 30080)?;
    ensure!(
        seen == answered(&node_ip(0)),
        "through n0's node port: {seen:?}, not masqueraded behind n0"
    );

    // externalTrafficPolicy Local: the pod's own node answers with the
    // client's address kept; another node drops (no RST, no hop).
    wait_until("n1's Local node port answering", || {
        Ok(probe_from_host(None, &node_ip(1), 30081)?.starts_with("answered"))
    })
    .await?;
    let seen = probe_from_host(None, &node_ip(1), 30081)?;
    ensure!(
        seen == answered(&this_host),
        "through n1's Local node port: {seen:?}, not the client {this_host}"
    );
    wait_until("n0 dropping the Local node port", || {
        Ok(probe_from_host(None, &node_ip(0), 30081)? == "TimeoutError")
    })
    .await?;

    // internalTrafficPolicy Local: from n0 (its pod or itself) the
    // cluster IP has no endpoint and drops; from n1's host it answers.
    let local_ip = jsonpath(kubectl, "service", "local", "{.spec.clusterIP}")?;
    let everywhere_ip = jsonpath(kubectl, "service", "everywhere", "{.spec.clusterIP}")?;
    let asker_ip = jsonpath(kubectl, "pod", "asker", "{.status.podIP}")?;
    wait_until("the pod on n0 reaching the default Service", || {
        Ok(probe_from_pod(kubectl, &everywhere_ip, 80)? == answered(&asker_ip))
    })
    .await?;
    let from_pod = probe_from_pod(kubectl, &local_ip, 80)?;
    ensure!(
        from_pod == "TimeoutError",
        "the Local cluster IP from a pod on n0 gave {from_pod:?}"
    );
    let from_n0 = probe_from_host(Some(&cluster.hosts.namespaces[0]), &local_ip, 80)?;
    ensure!(
        from_n0 == "TimeoutError",
        "the Local cluster IP from n0 gave {from_n0:?}"
    );
    let from_n1 = probe_from_host(Some(&cluster.hosts.namespaces[1]), &local_ip, 80)?;
    ensure!(
        from_n1.starts_with("answered"),
        "the Local cluster IP from n1 gave {from_n1:?}"
    );
    Ok(())
}

/// Two UDP echo pods answering with their names, on n1 and n2; only `u1`
/// is the Service's at first.
const UDP: &str = "apiVersion: v1
kind: Service
metadata: {name: udp}
spec:
  selector: {app: udp}
  ports: [{port: 53, targetPort: 5353, protocol: UDP}]
---
apiVersion: v1
kind: Pod
metadata: {name: u1, labels: {app: udp}}
spec:
  nodeName: n1
  terminationGracePeriodSeconds: 1
  containers:
  - {name: app, image: python:3, command: [python3, -c, \"$(SCRIPT)\"], env: [{name: SCRIPT, value: \"import socket\\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\\ns.bind(('0.0.0.0', 5353))\\nwhile True:\\n    data, peer = s.recvfrom(100)\\n    s.sendto(b'u1', peer)\\n\"}]}
---
apiVersion: v1
kind: Pod
metadata: {name: u2, labels: {app: spare}}
spec:
  nodeName: n2
  terminationGracePeriodSeconds: 1
  containers:
  - {name: app, image: python:3, command: [python3, -c, \"$(SCRIPT)\"], env: [{name: SCRIPT, value: \"import socket\\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\\ns.bind(('0.0.0.0', 5353))\\nwhile True:\\n    data, peer = s.recvfrom(100)\\n    s.sendto(b'u2', peer)\\n\"}]}
";

/// Whether the `conntrack` tool is here; else the test says it was
/// skipped, or fails under CI=true, which installs it.
fn conntrack_or_skip(test: &str) -> bool {
    let found = Command::new("conntrack")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found && std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{test}: the conntrack tool is missing (apt-get install conntrack)");
    }
    if !found {
        eprintln!("{test}: skipped: the conntrack tool is missing (apt-get install conntrack)");
    }
    found
}

/// A client on n0 that keeps one UDP flow to a Service going (a datagram
/// every 100 ms from one port, as a resolver or a game client would): the
/// flow's connection-tracking entry never expires, so it follows the
/// endpoints only because the proxy deletes it when its endpoint leaves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_udp_flow_follows_its_service_to_a_new_endpoint() -> Result<()> {
    let test = "a_udp_flow_follows_its_service_to_a_new_endpoint";
    if !conntrack_or_skip(test) {
        return Ok(());
    }
    let Some(mut cluster) = Cluster::start(test, &["--service-proxy=true"]).await? else {
        return Ok(());
    };
    cluster.run_pods(UDP, &["u1", "u2"]).await?;
    let kubectl = &cluster.kubectl;
    let service_ip = jsonpath(kubectl, "service", "udp", "{.spec.clusterIP}")?;
    let script = format!(
        "import socket, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(('0.0.0.0', 40404))
s.settimeout(0.1)
end = time.time() + 120
while time.time() < end:
    s.sendto(b'?', ('{service_ip}', 53))
    try:
        print(s.recv(100).decode(), flush=True)
        time.sleep(0.1)
    except socket.timeout:
        print('-', flush=True)"
    );
    let dir = tempfile::tempdir()?;
    let heard = dir.path().join("heard");
    let mut client = Command::new("ip")
        .args([
            "netns",
            "exec",
            &cluster.hosts.namespaces[0],
            "python3",
            "-c",
        ])
        .arg(&script)
        .stdout(std::fs::File::create(&heard)?)
        .spawn()
        .context("running the UDP client")?;
    let last = || {
        std::fs::read_to_string(&heard)
            .unwrap_or_default()
            .lines()
            .last()
            .unwrap_or_default()
            .to_string()
    };
    let followed = async {
        wait_until("u1 answering through the Service", || Ok(last() == "u1")).await?;
        // The Service moves to u2; u1 keeps running (and would keep
        // answering the flow that still went to it).
        kubectl.ok(&["label", "pod", "u2", "app=udp", "--overwrite"])?;
        kubectl.ok(&["label", "pod", "u1", "app=spare", "--overwrite"])?;
        wait_until("the same flow answered by u2", || Ok(last() == "u2")).await
    }
    .await;
    let _ = client.kill();
    let _ = client.wait();
    followed.with_context(|| {
        let text = std::fs::read_to_string(&heard).unwrap_or_default();
        let tail: Vec<&str> = text.lines().rev().take(5).collect();
        let log = cluster.kubelets[0].stderr();
        let said: Vec<&str> = log
            .lines()
            .filter(|l| l.contains("conntrack") || l.contains("UDP") || l.contains("proxy"))
            .collect();
        format!(
            "the client heard last: {tail:?}; n0's kubelet said:\n{}",
            said.join("\n")
        )
    })
}
