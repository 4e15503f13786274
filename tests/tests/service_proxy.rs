//! Services through the service proxy, with the real kubectl against
//! `skiff up --pod-network=cni --service-proxy=true`: `kubectl expose` a
//! two-replica Deployment and its ClusterIP reaches both replicas from the
//! host and from a pod; its NodePort answers on the host's 127.0.0.1;
//! `sessionAffinity: ClientIP` keeps a client on one replica; scaled to
//! zero, the ClusterIP refuses at once; a pod reaches the API server
//! through the `kubernetes` Service; the proxy killed and restarted
//! converges on the same rules; from a pod, the Service's names, a
//! headless Service's and a StatefulSet pod's resolve through the node's
//! cluster DNS. Needs root, nft and the CNI plugins (CI
//! installs them).

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use skiff_tests::kubectl::Kubectl;
use skiff_tests::local_node::{
    apply, jsonpath, nftables_or_skip, pod_network_or_skip, wait_until, LocalNode,
};

const CLUSTER_CIDR: &str = "10.207.0.0/16";
/// Service addresses and node ports of this test alone: the proxy of
/// another test programs its own.
const SERVICE_RANGE: &str = "10.206.0.0/16";
const NODE_PORTS: &str = "31100-31199";

const WEB: &str = "apiVersion: apps/v1
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
        env:
        - name: POD_NAME
          valueFrom: {fieldRef: {fieldPath: metadata.name}}
        command:
        - python3
        - -c
        - |
          import http.server, os
          class Name(http.server.BaseHTTPRequestHandler):
              def do_GET(self):
                  body = os.environ['POD_NAME'].encode()
                  self.send_response(200)
                  self.send_header('Content-Length', str(len(body)))
                  self.end_headers()
                  self.wfile.write(body)
              def log_message(self, *args):
                  pass
          http.server.ThreadingHTTPServer(('0.0.0.0', 8080), Name).serve_forever()
        ports: [{containerPort: 8080}]
        readinessProbe:
          tcpSocket: {port: 8080}
          periodSeconds: 1
";

/// A headless Service over the web pods, and a StatefulSet whose pod
/// gets a name under its own headless Service.
const NAMED: &str = "apiVersion: v1
kind: Service
metadata: {name: web-headless}
spec:
  clusterIP: None
  selector: {app: web}
  ports: [{port: 80, targetPort: 8080}]
---
apiVersion: v1
kind: Service
metadata: {name: db}
spec:
  clusterIP: None
  selector: {app: db}
  ports: [{port: 5432}]
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db}
spec:
  serviceName: db
  replicas: 1
  selector: {matchLabels: {app: db}}
  template:
    metadata: {labels: {app: db}}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - {name: db, image: python:3, command: [sleep, \"3600\"]}
";

/// The body of `GET /` at `ip:port`, from this host.
fn get(ip: &str, port: u16) -> Result<String> {
    let mut stream =
        TcpStream::connect_timeout(&format!("{ip}:{port}").parse()?, Duration::from_secs(5))
            .with_context(|| format!("connecting to {ip}:{port}"))?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(stream, "GET / HTTP/1.0\r\nHost: {ip}\r\n\r\n")?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer)?;
    let body = answer
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Ok(body)
}

/// The pods `GET /` reaches in `tries`.
fn reached(ip: &str, port: u16, tries: usize) -> Result<BTreeSet<String>> {
    (0..tries).map(|_| get(ip, port)).collect()
}

/// `field` of each pod of the web Deployment (`metadata.name`,
/// `status.podIP`, ...).
fn of_web_pods(kubectl: &Kubectl, field: &str) -> Result<BTreeSet<String>> {
    let path = format!("jsonpath={{.items[*].{field}}}");
    let listed = kubectl.ok(&["get", "pods", "-l", "app=web", "-o", &path])?;
    Ok(listed.split_whitespace().map(String::from).collect())
}

/// Whether pods can have networks of their own and the service proxy can
/// program nftables here, as [`pod_network_or_skip`] and
/// [`nftables_or_skip`] say.
fn pod_network_and_proxy_or_skip(test: &str) -> bool {
    pod_network_or_skip(test) && nftables_or_skip(test)
}

/// `skiff up` with its pod network (`bridge_prefix`, `cluster_cidr`) and
/// the service proxy writing nftables table `table`, for Services in
/// `service_range` and node ports in `node_ports`: ranges of the test's
/// own. `None` when kubectl is missing outside CI.
async fn start_with_service_proxy(
    test: &str,
    bridge_prefix: &str,
    cluster_cidr: &str,
    table: &str,
    service_range: &str,
    node_ports: &str,
) -> Result<Option<LocalNode>> {
    let flags = [
        "--service-proxy=true".to_string(),
        format!("--proxy-table={table}"),
        format!("--service-cluster-ip-range={service_range}"),
        format!("--service-node-port-range={node_ports}"),
    ];
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    LocalNode::start_with_pod_network(test, bridge_prefix, cluster_cidr, &flags).await
}

/// The proxy's nftables table of a test, deleted when the test ends.
struct Table(String);

impl Drop for Table {
    fn drop(&mut self) {
        let script = format!("add table ip {0}\ndelete table ip {0}\n", self.0);
        let mut child = Command::new("nft")
            .args(["-f", "-"])
            .stdin(std::process::Stdio::piped())
            .spawn();
        if let Ok(child) = child.as_mut() {
            if let Some(mut stdin) = child.stdin.take() {
                let _ = stdin.write_all(script.as_bytes());
            }
            let _ = child.wait();
        }
    }
}

fn table_listing(table: &str) -> String {
    Command::new("nft")
        .args(["list", "table", "ip", table])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn services_reach_their_endpoints_through_the_proxy() -> Result<()> {
    let test = "services_reach_their_endpoints_through_the_proxy";
    if !pod_network_and_proxy_or_skip(test) {
        return Ok(());
    }
    let table = format!("skt-proxy-{}", std::process::id());
    let _table = Table(table.clone());
    let Some(mut node) =
        start_with_service_proxy(test, "skp", CLUSTER_CIDR, &table, SERVICE_RANGE, NODE_PORTS)
            .await?
    else {
        return Ok(());
    };
    let kubectl: &Kubectl = &node.kubectl;
    apply(kubectl, "web.yaml", WEB)?;
    kubectl.ok(&[
        "expose",
        "deployment",
        "web",
        "--port=80",
        "--target-port=8080",
        "--type=NodePort",
    ])?;
    let ready = wait_until("both replicas Ready", || {
        Ok(
            jsonpath(kubectl, "deployment", "web", "{.status.readyReplicas}").unwrap_or_default()
                == "2",
        )
    })
    .await;
    if let Err(err) = ready {
        let described = kubectl.ok(&["describe", "pods"]).unwrap_or_default();
        bail!("{err:#}\n{described}");
    }
    let uids = of_web_pods(kubectl, "metadata.uid")?;
    node.clean_up_pods(uids);
    let kubectl: &Kubectl = &node.kubectl;
    let names = of_web_pods(kubectl, "metadata.name")?;
    let cluster_ip = jsonpath(kubectl, "service", "web", "{.spec.clusterIP}")?;
    ensure!(cluster_ip.starts_with("10.206."), "clusterIP {cluster_ip}");
    let node_port: u16 =
        jsonpath(kubectl, "service", "web", "{.spec.ports[0].nodePort}")?.parse()?;

    // From the host, to both replicas.
    let mut seen = BTreeSet::new();
    wait_until("the ClusterIP reaching both replicas from the host", || {
        if let Ok(more) = reached(&cluster_ip, 80, 10) {
            seen.extend(more);
        }
        Ok(seen == names)
    })
    .await
    .with_context(|| format!("reached {seen:?} of {names:?}\n{}", table_listing(&table)))?;

    // From a pod, by the same address.
    let pod = names.iter().next().unwrap().clone();
    let script = format!(
        "import urllib.request\nseen = set()\nfor _ in range(30):\n    seen.add(urllib.request.urlopen('http://{cluster_ip}/', timeout=5).read().decode())\nprint(' '.join(sorted(seen)))"
    );
    let from_pod = kubectl.ok(&["exec", &pod, "--", "python3", "-c", &script])?;
    let from_pod: BTreeSet<String> = from_pod.split_whitespace().map(String::from).collect();
    ensure!(
        from_pod == names,
        "from {pod}, the ClusterIP reached {from_pod:?} of {names:?}"
    );

    // Names: the Service by its short, namespaced and full names, through
    // the node's cluster DNS at the range's tenth address.
    let resolve = "import socket\nprint(' '.join(socket.gethostbyname(n) for n in ['web', 'web.default', 'web.default.svc.cluster.local']))";
    let resolved = kubectl.ok(&["exec", &pod, "--", "python3", "-c", resolve])?;
    ensure!(
        resolved.split_whitespace().all(|ip| ip == cluster_ip)
            && resolved.split_whitespace().count() == 3,
        "from {pod}, web resolved to {resolved:?}, not {cluster_ip}"
    );
    let resolv_conf = kubectl.ok(&["exec", &pod, "--", "cat", "/etc/resolv.conf"])?;
    ensure!(
        resolv_conf.contains("nameserver 10.206.0.10")
            && resolv_conf
                .contains("search default.svc.cluster.local svc.cluster.local cluster.local")
            && resolv_conf.contains("ndots:5"),
        "{pod}'s resolv.conf:\n{resolv_conf}"
    );
    // A headless Service: both pods' addresses; a StatefulSet's pod by
    // its name under its Service.
    apply(kubectl, "named.yaml", NAMED)?;
    wait_until("db-0 Ready", || {
        Ok(jsonpath(
            kubectl,
            "pod",
            "db-0",
            "{.status.conditions[?(@.type==\"Ready\")].status}",
        )
        .unwrap_or_default()
            == "True")
    })
    .await?;
    let db_uid = jsonpath(kubectl, "pod", "db-0", "{.metadata.uid}")?;
    if let Some(network) = node.network.as_mut() {
        network.uids.push(db_uid);
    }
    let db_ip = jsonpath(kubectl, "pod", "db-0", "{.status.podIP}")?;
    let pod_ips = of_web_pods(kubectl, "status.podIP")?;
    let lookup = "import socket\nprint(' '.join(sorted({a[4][0] for a in socket.getaddrinfo('web-headless', 80, socket.AF_INET)})))\nprint(socket.gethostbyname('db-0.db'))";
    let mut answer = String::new();
    wait_until("the headless and StatefulSet names resolving", || {
        answer = kubectl
            .ok(&["exec", &pod, "--", "python3", "-c", lookup])
            .unwrap_or_else(|e| format!("{e:#}"));
        let mut lines = answer.lines();
        let headless: BTreeSet<String> = lines
            .next()
            .unwrap_or_default()
            .split_whitespace()
            .map(String::from)
            .collect();
        Ok(headless == pod_ips && lines.next() == Some(db_ip.as_str()))
    })
    .await
    .with_context(|| format!("answered {answer:?}; web pods {pod_ips:?}, db-0 {db_ip}"))?;

    // The NodePort, on the host's loopback.
    let by_node_port = reached("127.0.0.1", node_port, 10)?;
    ensure!(
        !by_node_port.is_empty() && by_node_port.is_subset(&names),
        "NodePort {node_port}: {by_node_port:?}"
    );

    // A pod reaches the API server through the kubernetes Service.
    let api_ip = jsonpath(kubectl, "service", "kubernetes", "{.spec.clusterIP}")?;
    let connect = format!(
        "import socket; s = socket.create_connection(('{api_ip}', 443), timeout=5); print('connected')"
    );
    let connected = kubectl.ok(&["exec", &pod, "--", "python3", "-c", &connect])?;
    ensure!(
        connected.trim() == "connected",
        "{api_ip}:443 from {pod}: {connected}"
    );

    // Client affinity: one replica for this client.
    kubectl.ok(&[
        "patch",
        "service",
        "web",
        "-p",
        "{\"spec\":{\"sessionAffinity\":\"ClientIP\"}}",
    ])?;
    let mut sticky = BTreeSet::new();
    wait_until("one replica for every request", || {
        sticky = reached(&cluster_ip, 80, 10)?;
        Ok(sticky.len() == 1)
    })
    .await
    .with_context(|| table_listing(&table))?;

    // The proxy's rules after a SIGKILL and restart of skiff: the same.
    let before = table_listing(&table);
    node.server.kill_now();
    node.server.restart().await?;
    let kubectl: &Kubectl = &node.kubectl;
    let mut after = String::new();
    wait_until("the same rules after a restart", || {
        after = table_listing(&table);
        Ok(normalized(&after) == normalized(&before))
    })
    .await
    .with_context(|| format!("before:\n{before}\nafter:\n{after}"))?;
    ensure!(reached(&cluster_ip, 80, 3)?.len() == 1, "after the restart");

    // No replica: refused at once, not left to time out.
    kubectl.ok(&["scale", "deployment", "web", "--replicas=0"])?;
    let mut refused = String::new();
    wait_until("the ClusterIP refusing", || {
        let started = Instant::now();
        match TcpStream::connect_timeout(
            &format!("{cluster_ip}:80").parse()?,
            Duration::from_secs(3),
        ) {
            Ok(_) => Ok(false),
            Err(err) => {
                refused = format!("{err} after {:?}", started.elapsed());
                Ok(err.kind() == std::io::ErrorKind::ConnectionRefused
                    && started.elapsed() < Duration::from_secs(1))
            }
        }
    })
    .await
    .with_context(|| format!("{refused}\n{}", table_listing(&table)))?;
    drop(node);
    Ok(())
}

/// A listing as a set of its maps, sets and chains (their order is the
/// order they were made in), without what a restart changes by design:
/// the affinity sets' remembered clients, and the port the node's cluster
/// DNS got (any free one, again at each start).
fn normalized(listing: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut block: Vec<String> = Vec::new();
    let mut in_dns = false;
    for line in listing.lines() {
        let trimmed = line.trim_start();
        if trimmed.is_empty() || line.starts_with("table ") || line == "}" {
            continue;
        }
        if trimmed.starts_with("chain ") {
            in_dns = trimmed.starts_with("chain cluster-dns ");
        }
        if trimmed.starts_with("elements = {") && !line.contains(':') {
            continue;
        }
        match (in_dns, line.rsplit_once("127.0.0.1:")) {
            (true, Some((head, _))) => block.push(format!("{head}127.0.0.1:PORT")),
            _ => block.push(line.to_string()),
        }
        if line == "\t}" {
            blocks.push(sorted_elements(&block.join(" ")));
            block.clear();
        }
    }
    blocks.sort();
    blocks
}

/// A map's or set's elements in order (the kernel lists a hash's in its
/// own, which a new table changes).
fn sorted_elements(block: &str) -> String {
    let Some((head, rest)) = block.split_once("elements = {") else {
        return block.split_whitespace().collect::<Vec<_>>().join(" ");
    };
    let Some((elements, tail)) = rest.split_once('}') else {
        return block.to_string();
    };
    let mut listed: Vec<String> = elements
        .split(',')
        .map(|e| e.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect();
    listed.sort();
    let head = head.split_whitespace().collect::<Vec<_>>().join(" ");
    let tail = tail.split_whitespace().collect::<Vec<_>>().join(" ");
    format!("{head} elements = {{ {} }} {tail}", listed.join(", "))
}

/// A Service with no selector, its EndpointSlice naming `port` on this
/// host's loopback.
fn loopback_service(port: u16) -> String {
    format!(
        "apiVersion: v1
kind: Service
metadata: {{name: local}}
spec:
  clusterIP: 10.203.0.80
  ports: [{{name: http, port: 80}}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: local-1
  labels: {{kubernetes.io/service-name: local}}
addressType: IPv4
ports: [{{name: http, port: {port}}}]
endpoints: [{{addresses: [127.0.0.1], conditions: {{ready: true}}}}]
"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skiff_proxy_alone_programs_the_services_of_a_kubeconfig() -> Result<()> {
    let test = "skiff_proxy_alone_programs_the_services_of_a_kubeconfig";
    if !nftables_or_skip(test) {
        return Ok(());
    }
    let Some(binary) = skiff_tests::kubectl::kubectl_or_skip(test) else {
        return Ok(());
    };
    let server = skiff_tests::api_server::ApiServer::start_scheduling_with(&[
        "--kubelet=false".to_string(),
        "--service-cluster-ip-range=10.203.0.0/16".into(),
    ])
    .await?;
    let kubectl = Kubectl::new(binary, &server.kubeconfig())?;
    let table = format!("skt-alone-{}", std::process::id());
    let _table = Table(table.clone());
    let kubeconfig = server.kubeconfig().display().to_string();
    let mut proxy = skiff_tests::skiff_process::SkiffProcess::spawn(
        "skiff proxy",
        [
            "proxy",
            "--kubeconfig",
            &kubeconfig,
            "--proxy-table",
            &table,
            "--node-name",
            "n1",
        ],
    )?;
    proxy
        .wait_for_line(
            &format!("nftables table ip {table}"),
            Duration::from_secs(30),
        )
        .await?;

    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let port = listener.local_addr()?.port();
    apply(&kubectl, "local.yaml", &loopback_service(port))?;
    let mut listing = String::new();
    wait_until("the Service programmed", || {
        listing = table_listing(&table);
        Ok(listing.contains("10.203.0.80 . tcp . 80"))
    })
    .await
    .with_context(|| format!("{listing}\n{}", proxy.stderr()))?;
    // Through the ClusterIP to the listener on loopback.
    let client = TcpStream::connect_timeout(&"10.203.0.80:80".parse()?, Duration::from_secs(5))?;
    listener.set_nonblocking(false)?;
    let (_accepted, peer) = listener.accept()?;
    ensure!(
        peer == client.local_addr()?,
        "accepted {peer}, connected from {:?}",
        client.local_addr()
    );

    // The slice emptied: refused at once.
    kubectl.ok(&["delete", "endpointslice", "local-1"])?;
    wait_until("the Service refused", || {
        Ok(matches!(
            TcpStream::connect_timeout(&"10.203.0.80:80".parse()?, Duration::from_secs(2)),
            Err(err) if err.kind() == std::io::ErrorKind::ConnectionRefused
        ))
    })
    .await?;

    // SIGTERM stops it; --cleanup removes its table.
    proxy.signal(libc::SIGTERM)?;
    let status = proxy.wait_exit(Duration::from_secs(10)).await?;
    ensure!(status.success(), "skiff proxy exited {status}");
    let (status, out, err) = skiff_tests::skiff_process::SkiffProcess::run(
        [
            "proxy",
            "--kubeconfig",
            &kubeconfig,
            "--proxy-table",
            &table,
            "--cleanup",
        ],
        Duration::from_secs(30),
    )
    .await?;
    ensure!(status.success(), "skiff proxy --cleanup: {out}{err}");
    ensure!(
        table_listing(&table).is_empty(),
        "the table outlived --cleanup"
    );
    Ok(())
}

/// A pod whose container is the Python `kubernetes` client with its
/// in-cluster configuration, as ServiceAccount `reader`, which may list
/// pods and nothing else.
fn in_cluster_client(python: &std::path::Path) -> String {
    let script = "from kubernetes import client, config\\n\
from kubernetes.client.rest import ApiException\\n\
config.load_incluster_config()\\n\
v1 = client.CoreV1Api()\\n\
print('pods', len(v1.list_namespaced_pod('default').items))\\n\
try:\\n    v1.list_namespaced_secret('default')\\n    print('secrets listed')\\n\
except ApiException as e:\\n    print('secrets', e.status)\\n";
    format!(
        "apiVersion: v1
kind: ServiceAccount
metadata: {{name: reader}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {{name: pod-reader}}
rules: [{{apiGroups: [\"\"], resources: [pods], verbs: [list]}}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{name: reader-reads-pods}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: pod-reader}}
subjects: [{{kind: ServiceAccount, name: reader, namespace: default}}]
---
apiVersion: v1
kind: Pod
metadata: {{name: in-cluster}}
spec:
  serviceAccountName: reader
  restartPolicy: Never
  containers:
  - name: client
    image: python:3
    command: [\"{}\", \"-c\", \"{script}\"]
",
        python.display()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_clients_in_cluster_configuration_works_in_a_pod() -> Result<()> {
    let test = "the_python_clients_in_cluster_configuration_works_in_a_pod";
    if !pod_network_and_proxy_or_skip(test) {
        return Ok(());
    }
    let Some(python) = skiff_tests::python::python_with_kubernetes_or_skip(test) else {
        return Ok(());
    };
    let table = format!("skt-incluster-{}", std::process::id());
    let _table = Table(table.clone());
    let Some(mut node) = start_with_service_proxy(
        test,
        "ski",
        "10.201.0.0/16",
        &table,
        "10.202.0.0/16",
        "31200-31299",
    )
    .await?
    else {
        return Ok(());
    };
    apply(
        &node.kubectl,
        "in-cluster.yaml",
        &in_cluster_client(&python),
    )?;
    let uid = jsonpath(&node.kubectl, "pod", "in-cluster", "{.metadata.uid}")?;
    node.clean_up_pods([uid]);
    let kubectl = &node.kubectl;
    let mut phase = String::new();
    let done = wait_until("the in-cluster client done", || {
        phase = jsonpath(kubectl, "pod", "in-cluster", "{.status.phase}").unwrap_or_default();
        Ok(phase == "Succeeded" || phase == "Failed")
    })
    .await;
    if let Err(err) = done {
        let described = kubectl
            .ok(&["describe", "pod", "in-cluster"])
            .unwrap_or_default();
        let logs = kubectl.ok(&["logs", "in-cluster"]).unwrap_or_default();
        bail!("{err:#}\n{described}\n{logs}");
    }
    let logs = kubectl.ok(&["logs", "in-cluster"])?;
    ensure!(phase == "Succeeded", "the client {phase}:\n{logs}");
    // It listed pods (itself at least) and was refused Secrets, as its
    // ServiceAccount is bound.
    let pods: usize = logs
        .lines()
        .find_map(|l| l.strip_prefix("pods "))
        .and_then(|n| n.trim().parse().ok())
        .with_context(|| format!("no pod count in:\n{logs}"))?;
    ensure!(pods >= 1, "{logs}");
    ensure!(
        logs.contains("secrets 403"),
        "Secrets were not refused:\n{logs}"
    );
    drop(node);
    Ok(())
}
