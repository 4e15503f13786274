//! A Service written → traffic through its ClusterIP: `skiff up` with its
//! pod network and service proxy, one pod serving, then Services created
//! one at a time; each is timed from its create call to the first TCP
//! connection through its ClusterIP from this host that the pod answers
//! (the endpoint slice controller, the proxy's watch and its nftables
//! write on the way), beside connections straight to the pod's own
//! address.

use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, ensure, Context, Result};
use bytes::Bytes;
use hyper::StatusCode;

use crate::api::http::ApiConnection;
use crate::data_root::DataRoot;
use crate::kubelet::server::{Components, PodNetwork, SkiffUp};
use crate::report::{Latencies, Table};
use crate::versus::system::Program;

const NODE: &str = "node-1";
const POD_TIMEOUT: Duration = Duration::from_secs(90);
/// A Service that takes longer than this to carry traffic failed.
const FLOW_TIMEOUT: Duration = Duration::from_secs(30);
const POLL: Duration = Duration::from_millis(1);

pub struct Flowing {
    pub written: Latencies,
    pub direct: Latencies,
}

impl Flowing {
    pub fn print(&self) {
        let mut table = Table::new(&["connection", "runs", "p50 ms", "p90 ms", "max ms"]);
        for (name, latencies) in [
            (
                "Service created → connected through its ClusterIP",
                &self.written,
            ),
            ("floor: connected to the pod's own address", &self.direct),
        ] {
            table.row(super::latency_row(name, latencies));
        }
        table.print();
        println!(
            "each Service: the create call, the endpoint slice controller's slice, the proxy's watch and its nftables change, then a connection from this host retried every {} ms until the pod answers through it.",
            POLL.as_millis()
        );
    }
}

fn pod_json() -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "echo", "namespace": "default", "labels": {"app": "echo"}},
        "spec": {
            "nodeName": NODE,
            "terminationGracePeriodSeconds": 0,
            "containers": [{
                "name": "echo", "image": "python:3",
                "command": ["python3", "-c",
                    "import socket\ns = socket.socket()\ns.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\ns.bind(('0.0.0.0', 8080))\ns.listen(128)\nwhile True:\n    c, _ = s.accept()\n    c.sendall(b'echo')\n    c.close()\n"],
            }],
        },
    })
}

/// Starts the server, measures, stops it and removes what it made.
pub async fn measure(skiff: &Program, data_dir: Option<&Path>, writes: usize) -> Result<Flowing> {
    let root = DataRoot::create(data_dir, "skiff-bench-proxy-", &["skiff"])?;
    let network = PodNetwork::for_this_run();
    let table = format!("skiff-bench-proxy-{}", std::process::id());
    let components = Components::Node {
        name: NODE.into(),
        max_pods: 10,
        pod_network: Some(network.clone()),
        service_proxy: Some(table.clone()),
    };
    let server = SkiffUp::start(skiff, root.path(), &components).await?;
    let outcome = measure_against(&server, writes).await;
    let log = server.log_tail();
    let stopped = server.stop().await;
    network.remove_bridge();
    let _ = skiff_kubelet::proxy::remove_table(&table);
    root.remove()?;
    let flowing = outcome.map_err(|err| anyhow!("{err:#}\n  skiff up's log ends:\n{log}"))?;
    if let Some(note) = stopped? {
        println!("{note}");
    }
    Ok(flowing)
}

async fn measure_against(server: &SkiffUp, writes: usize) -> Result<Flowing> {
    let mut conn = ApiConnection::connect(server.api).await?;
    conn.post(
        "/api/v1/namespaces/default/pods",
        Bytes::from(pod_json().to_string()),
    )
    .await?
    .expect(StatusCode::CREATED, "creating pod echo")?;
    let pod_ip = wait_serving(&mut conn).await?;
    let mut direct = Vec::new();
    for _ in 0..writes {
        let started = Instant::now();
        let pod = SocketAddr::new(pod_ip.parse()?, 8080);
        ensure!(
            answers(&pod, Duration::from_secs(5), Duration::from_secs(5)),
            "the pod at {pod} did not answer"
        );
        direct.push(started.elapsed());
    }
    let mut written = Vec::new();
    for i in 0..writes {
        let name = format!("flow-{i}");
        let service = serde_json::json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"selector": {"app": "echo"}, "ports": [{"port": 80, "targetPort": 8080}]},
        });
        let started = Instant::now();
        let body = conn
            .post(
                "/api/v1/namespaces/default/services",
                Bytes::from(service.to_string()),
            )
            .await?
            .expect(StatusCode::CREATED, &format!("creating Service {name}"))?;
        let created: serde_json::Value = serde_json::from_slice(&body)?;
        let ip: std::net::IpAddr = created["spec"]["clusterIP"]
            .as_str()
            .context("the Service has no clusterIP")?
            .parse()?;
        let target = SocketAddr::new(ip, 80);
        loop {
            if answers(&target, Duration::from_millis(200), ANSWER_WITHIN) {
                break;
            }
            if started.elapsed() > FLOW_TIMEOUT {
                bail!("Service {name} at {target} carried no traffic within {FLOW_TIMEOUT:?}");
            }
            tokio::time::sleep(POLL).await;
        }
        written.push(started.elapsed());
        conn.delete(&format!("/api/v1/namespaces/default/services/{name}"))
            .await?
            .expect(StatusCode::OK, &format!("deleting Service {name}"))?;
    }
    Ok(Flowing {
        written: Latencies::from_durations(&written),
        direct: Latencies::from_durations(&direct),
    })
}

/// The pod's address once it accepts connections there.
async fn wait_serving(conn: &mut ApiConnection) -> Result<String> {
    let deadline = Instant::now() + POD_TIMEOUT;
    let mut last = String::from("not read yet");
    while Instant::now() < deadline {
        let body = conn
            .get("/api/v1/namespaces/default/pods/echo")
            .await?
            .expect(StatusCode::OK, "reading pod echo")?;
        let pod: serde_json::Value = serde_json::from_slice(&body)?;
        if let Some(ip) = pod["status"]["podIP"].as_str() {
            let address = SocketAddr::new(ip.parse()?, 8080);
            if answers(
                &address,
                Duration::from_millis(200),
                Duration::from_millis(200),
            ) {
                return Ok(ip.to_string());
            }
        }
        last = pod["status"].to_string();
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    bail!("pod echo did not serve within {POD_TIMEOUT:?}: {last}")
}

/// How long a connection through a ClusterIP is given to say `echo`: the
/// pod, a hop away, answers at once; what accepted it and stays silent is
/// not the pod (the measurement's resolution is this and the poll).
const ANSWER_WITHIN: Duration = Duration::from_millis(3);

/// Whether the pod answers at `address` (connecting within `connect`,
/// answering within `answer`): it says `echo` and closes. A connection
/// alone proves nothing where the host's network accepts connections to
/// any address (as a transparent proxy on the way out does): that
/// answers nothing, or something else.
fn answers(address: &SocketAddr, connect: Duration, answer: Duration) -> bool {
    use std::io::Read;
    let Ok(stream) = TcpStream::connect_timeout(address, connect) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(answer));
    let mut said = Vec::new();
    let _ = stream.take(16).read_to_end(&mut said);
    said == b"echo"
}
