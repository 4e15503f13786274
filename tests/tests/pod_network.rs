//! Pods with networks of their own: `skiff up --pod-network=cni` with its
//! node IPAM controller and the standard CNI plugins. Two replicas of a
//! server on one port are both Ready on distinct addresses from the
//! Node's pod CIDR, each reachable from the host and from the other pod;
//! a `hostPort` answers on the host's 127.0.0.1; a `hostNetwork` pod
//! keeps the host's address; deleting the pods removes
//! their namespaces and frees their addresses. Needs root and Debian's
//! containernetworking-plugins (CI installs them).

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use skiff_tests::kubectl::Kubectl;
use skiff_tests::local_node::{apply, jsonpath, pod_network_or_skip, wait_until, LocalNode};

/// The cluster CIDR of this test: none other uses it, so its bridge's
/// routes clash with nothing.
const CLUSTER_CIDR: &str = "10.213.0.0/16";

const SERVERS: &str = "apiVersion: apps/v1
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
      - name: app
        image: python:3
        command: [python3, -m, http.server, \"8080\"]
        ports: [{containerPort: 8080}]
        env:
        - name: POD_IP
          valueFrom: {fieldRef: {fieldPath: status.podIP}}
        readinessProbe:
          httpGet: {port: 8080, path: /}
          periodSeconds: 1
---
apiVersion: v1
kind: Pod
metadata: {name: on-host}
spec:
  hostNetwork: true
  terminationGracePeriodSeconds: 1
  containers:
  - {name: app, image: busybox, command: [sleep, \"3600\"]}
";

/// A server whose `hostPort` is `port`.
fn porter(port: u16) -> String {
    format!(
        "apiVersion: v1
kind: Pod
metadata: {{name: porter}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: app
    image: python:3
    command: [python3, -m, http.server, \"8080\"]
    ports: [{{containerPort: 8080, hostPort: {port}}}]
"
    )
}

/// `GET /` of `ip:8080` from the host.
fn get_from_host(ip: &str) -> Result<String> {
    get_from(ip, 8080)
}

/// `GET /` of `ip:port` from the host.
fn get_from(ip: &str, port: u16) -> Result<String> {
    let mut stream = std::net::TcpStream::connect((ip, port))
        .with_context(|| format!("connecting to {ip}:{port} from the host"))?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(stream, "GET / HTTP/1.0\r\nHost: {ip}\r\n\r\n")?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer)?;
    Ok(answer)
}

fn web_pods(kubectl: &Kubectl) -> Result<Vec<(String, String, String)>> {
    let out = kubectl.ok(&[
        "get",
        "pods",
        "-l",
        "app=web",
        "-o",
        "jsonpath={range .items[*]}{.metadata.name} {.metadata.uid} {.status.podIP}{\"\\n\"}{end}",
    ])?;
    Ok(out
        .lines()
        .filter_map(|line| {
            let mut parts = line.split_whitespace();
            Some((
                parts.next()?.to_string(),
                parts.next()?.to_string(),
                parts.next().unwrap_or_default().to_string(),
            ))
        })
        .collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_get_addresses_of_their_own_and_give_them_back() -> Result<()> {
    let test = "pods_get_addresses_of_their_own_and_give_them_back";
    if !pod_network_or_skip(test) {
        return Ok(());
    }
    let Some(mut node) = LocalNode::start_with_pod_network(test, "skt", CLUSTER_CIDR, &[]).await?
    else {
        return Ok(());
    };
    let kubectl = &node.kubectl;
    let pod_cidr = jsonpath(
        kubectl,
        "node",
        skiff_tests::local_node::NODE,
        "{.spec.podCIDR}",
    )?;
    ensure!(
        pod_cidr.starts_with("10.213."),
        "the node's pod CIDR is {pod_cidr:?}"
    );
    // The network plugin's condition: False, and pods have their own.
    let reason = jsonpath(
        kubectl,
        "node",
        skiff_tests::local_node::NODE,
        "{.status.conditions[?(@.type==\"NetworkUnavailable\")].status}/{.status.conditions[?(@.type==\"NetworkUnavailable\")].reason}",
    )?;
    ensure!(
        reason == "False/PodNetworkReady",
        "NetworkUnavailable: {reason:?}"
    );
    let prefix = pod_cidr
        .rsplit_once('.')
        .map(|(p, _)| format!("{p}."))
        .unwrap_or_default();

    apply(kubectl, "servers.yaml", SERVERS)?;
    let ready = wait_until("both replicas Ready", || {
        Ok(kubectl
            .ok(&[
                "get",
                "deployment",
                "web",
                "-o",
                "jsonpath={.status.readyReplicas}",
            ])
            .unwrap_or_default()
            == "2")
    })
    .await;
    if let Err(err) = ready {
        let pods = kubectl
            .ok(&["get", "pods", "-o", "wide"])
            .unwrap_or_default();
        let described = kubectl.ok(&["describe", "pods"]).unwrap_or_default();
        anyhow::bail!("{err:#}\n{pods}\n{described}");
    }
    let pods = web_pods(kubectl)?;
    let mut uids: Vec<String> = pods.iter().map(|(_, uid, _)| uid.clone()).collect();
    if let Some(network) = node.network.as_mut() {
        network.uids.extend(uids.iter().cloned());
    }
    ensure!(pods.len() == 2, "pods: {pods:?}");
    let (a, b) = (&pods[0], &pods[1]);
    ensure!(a.2 != b.2, "both pods have {}", a.2);
    for (name, uid, ip) in [a, b] {
        ensure!(
            ip.starts_with(&prefix),
            "{name} has {ip}, not an address of {pod_cidr}"
        );
        ensure!(
            Path::new(&format!("/run/netns/skiff-{uid}")).exists(),
            "{name} has no network namespace"
        );
        // From the host, through the bridge.
        let answer = get_from_host(ip)?;
        ensure!(
            answer.starts_with("HTTP/1.0 200"),
            "{name} at {ip}: {answer}"
        );
        // The downward API's podIP is the pod's own.
        let env = kubectl.ok(&["exec", name, "--", "sh", "-c", "echo $POD_IP"])?;
        ensure!(
            env.trim() == ip.as_str(),
            "{name}: POD_IP is {env}, not {ip}"
        );
    }
    // The pod's own /etc/hosts names it at its address; the host's is
    // untouched.
    let hosts = kubectl.ok(&["exec", &a.0, "--", "cat", "/etc/hosts"])?;
    ensure!(
        hosts.contains(&format!("{}\t{}", a.2, a.0)),
        "{}'s /etc/hosts:\n{hosts}",
        a.0
    );
    let host_hosts = std::fs::read_to_string("/etc/hosts")?;
    ensure!(
        !host_hosts.contains(&a.2),
        "the host's /etc/hosts changed:\n{host_hosts}"
    );
    // From one pod to the other, by address.
    let fetch = format!(
        "import urllib.request; print(urllib.request.urlopen('http://{}:8080/').status)",
        b.2
    );
    let status = kubectl.ok(&["exec", &a.0, "--", "python3", "-c", &fetch])?;
    ensure!(status.trim() == "200", "{} → {}: {status}", a.0, b.2);
    // A server of the pod on 127.0.0.1 is the pod's own loopback: the
    // other pod's port is not there.
    let local = "import socket; s = socket.socket(); s.settimeout(2); print(s.connect_ex(('127.0.0.1', 8080)))";
    let connected = kubectl.ok(&["exec", &a.0, "--", "python3", "-c", local])?;
    ensure!(
        connected.trim() == "0",
        "the pod's own port on its loopback: {connected}"
    );

    // A hostPort: the host's port reaches the pod (portmap).
    let host_port = skiff_tests::skiff_process::free_addrs(1)?[0].port();
    apply(kubectl, "porter.yaml", &porter(host_port))?;
    wait_until("the hostPort pod Running", || {
        Ok(jsonpath(kubectl, "pod", "porter", "{.status.phase}").unwrap_or_default() == "Running")
    })
    .await?;
    let porter_uid = jsonpath(kubectl, "pod", "porter", "{.metadata.uid}")?;
    if let Some(network) = node.network.as_mut() {
        network.uids.push(porter_uid.clone());
    }
    uids.push(porter_uid);
    let mut answer = String::new();
    let served = wait_until("the hostPort answering on 127.0.0.1", || {
        answer = get_from("127.0.0.1", host_port).unwrap_or_else(|e| format!("{e:#}"));
        Ok(answer.starts_with("HTTP/1.0 200"))
    })
    .await;
    if let Err(err) = served {
        anyhow::bail!("{err:#}: 127.0.0.1:{host_port} answered {answer}");
    }

    // hostNetwork keeps the host's address.
    wait_until("the hostNetwork pod running", || {
        Ok(jsonpath(kubectl, "pod", "on-host", "{.status.phase}").unwrap_or_default() == "Running")
    })
    .await?;
    let host_ip = jsonpath(kubectl, "pod", "on-host", "{.status.podIP}")?;
    ensure!(host_ip == "127.0.0.1", "the hostNetwork pod has {host_ip}");

    // Deleting the pods removes their namespaces and frees their addresses.
    kubectl.ok(&["delete", "deployment", "web", "--wait=false"])?;
    kubectl.ok(&["delete", "pod", "porter", "--wait=false"])?;
    let namespaces: Vec<PathBuf> = uids
        .iter()
        .map(|uid| PathBuf::from(format!("/run/netns/skiff-{uid}")))
        .collect();
    wait_until("the pods' namespaces gone", || {
        Ok(namespaces.iter().all(|path| !path.exists()))
    })
    .await?;
    let allocations = node.server.data_dir().join("kubelet/cni/networks/skiff");
    wait_until("the pods' addresses freed", || {
        let left = std::fs::read_dir(&allocations)
            .map(|entries| {
                entries
                    .filter_map(Result::ok)
                    .filter(|e| e.file_name().to_string_lossy().starts_with("10."))
                    .count()
            })
            .unwrap_or(0);
        Ok(left == 0)
    })
    .await?;
    drop(node);
    Ok(())
}

const KEEPER: &str = "apiVersion: v1
kind: Pod
metadata: {name: keeper}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: app
    image: python:3
    command: [python3, -m, http.server, \"8080\"]
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubelet_killed_and_restarted_keeps_its_pods_addresses() -> Result<()> {
    let test = "a_kubelet_killed_and_restarted_keeps_its_pods_addresses";
    if !pod_network_or_skip(test) {
        return Ok(());
    }
    let Some(mut node) =
        LocalNode::start_with_pod_network(test, "skr", "10.217.0.0/16", &[]).await?
    else {
        return Ok(());
    };
    apply(&node.kubectl, "keeper.yaml", KEEPER)?;
    let mut ip = String::new();
    wait_until("the pod serving on its address", || {
        ip = jsonpath(&node.kubectl, "pod", "keeper", "{.status.podIP}").unwrap_or_default();
        Ok(ip.starts_with("10.217.") && get_from_host(&ip).is_ok())
    })
    .await?;
    let uid = jsonpath(&node.kubectl, "pod", "keeper", "{.metadata.uid}")?;
    node.clean_up_pods([uid.clone()]);

    // SIGKILL: the pod's processes and namespace stay; the restarted
    // kubelet adopts them and reports the same address.
    node.server.kill_now();
    let answer = get_from_host(&ip)?;
    ensure!(
        answer.starts_with("HTTP/1.0 200"),
        "while skiff is down: {answer}"
    );
    node.server.restart().await?;
    wait_until("the pod Running again after the restart", || {
        Ok(
            jsonpath(&node.kubectl, "pod", "keeper", "{.status.phase}").unwrap_or_default()
                == "Running",
        )
    })
    .await?;
    let after = jsonpath(&node.kubectl, "pod", "keeper", "{.status.podIP}")?;
    ensure!(after == ip, "the pod had {ip}, now {after}");
    let restarts = jsonpath(
        &node.kubectl,
        "pod",
        "keeper",
        "{.status.containerStatuses[0].restartCount}",
    )?;
    ensure!(restarts == "0", "the container was restarted ({restarts})");
    let answer = get_from_host(&ip)?;
    ensure!(
        answer.starts_with("HTTP/1.0 200"),
        "after the restart: {answer}"
    );

    node.kubectl
        .ok(&["delete", "pod", "keeper", "--wait=true"])?;
    let namespace = PathBuf::from(format!("/run/netns/skiff-{uid}"));
    wait_until("the adopted pod's namespace gone", || {
        Ok(!namespace.exists())
    })
    .await?;
    drop(node);
    Ok(())
}
