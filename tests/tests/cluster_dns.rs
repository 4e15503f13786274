//! The cluster DNS against `skiff up`: the API server keeps the kube-dns
//! Service at 10.96.0.10; `skiff_kubelet::dns`, run in this process with a
//! client of the API's kubeconfig, answers Services and EndpointSlices made
//! with kubectl (a ClusterIP Service and its SRV record, a headless
//! Service's ready endpoints and hostnames, an ExternalName), follows
//! their changes, says NXDOMAIN for unknown cluster names, and forwards
//! every other name to an upstream of the test's own, over UDP and TCP.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use hickory_proto::op::{Message, Query, ResponseCode};
use hickory_proto::rr::rdata::A;
use hickory_proto::rr::{Name, RData, Record, RecordType};
use skiff_kubelet::dns::{self, DnsConfig};
use skiff_tests::api_server::with_kubectl;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UdpSocket};

const NAMESPACE: &str = "dns-test";

const OBJECTS: &str = "apiVersion: v1
kind: Namespace
metadata: {name: dns-test}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: dns-test}
spec:
  ports: [{name: http, port: 80, protocol: TCP}]
---
apiVersion: v1
kind: Service
metadata: {name: db, namespace: dns-test}
spec:
  clusterIP: None
  ports: [{name: db, port: 5432, protocol: TCP}]
---
apiVersion: v1
kind: Service
metadata: {name: mail, namespace: dns-test}
spec:
  type: ExternalName
  externalName: smtp.upstream.test
";

/// The headless Service's endpoints: two ready with hostnames (as a
/// StatefulSet's pods under their subdomain), one not ready; `extra`
/// adds a ready one without a hostname.
fn slice(extra: bool) -> String {
    let mut text = String::from(
        "apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: db-1
  namespace: dns-test
  labels: {kubernetes.io/service-name: db}
addressType: IPv4
ports: [{name: db, port: 5432, protocol: TCP}]
endpoints:
- {addresses: [10.244.0.5], hostname: db-0, conditions: {ready: true}}
- {addresses: [10.244.0.6], hostname: db-1, conditions: {ready: true}}
- {addresses: [10.244.0.7], hostname: db-2, conditions: {ready: false}}
",
    );
    if extra {
        text.push_str("- {addresses: [10.244.0.8], conditions: {ready: true}}\n");
    }
    text
}

/// The upstream: names under `upstream.test` are 192.0.2.44, others
/// NXDOMAIN. Counts what it was asked.
async fn upstream() -> Result<(SocketAddr, tokio::sync::mpsc::UnboundedReceiver<String>)> {
    let socket = UdpSocket::bind("127.0.0.1:0").await?;
    let address = socket.local_addr()?;
    let (asked, asked_rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut buffer = vec![0u8; 4096];
        while let Ok((length, from)) = socket.recv_from(&mut buffer).await {
            let Ok(query) = Message::from_vec(&buffer[..length]) else {
                continue;
            };
            let mut answer = Message::response(query.metadata.id, query.metadata.op_code);
            answer.metadata.recursion_available = true;
            answer.add_queries(query.queries.iter().cloned());
            let Some(name) = query.queries.first().map(|q| q.name().clone()) else {
                continue;
            };
            let _ = asked.send(name.to_ascii());
            if name.to_ascii().ends_with(".upstream.test.") {
                answer.add_answer(Record::from_rdata(
                    name,
                    30,
                    RData::A(A::new(192, 0, 2, 44)),
                ));
            } else {
                answer.metadata.response_code = ResponseCode::NXDomain;
            }
            if let Ok(bytes) = answer.to_vec() {
                let _ = socket.send_to(&bytes, from).await;
            }
        }
    });
    Ok((address, asked_rx))
}

#[derive(Debug, Clone, Copy)]
enum Transport {
    Udp,
    Tcp,
}

async fn ask(
    server: SocketAddr,
    transport: Transport,
    name: &str,
    qtype: RecordType,
) -> Result<Message> {
    let mut query = Message::query();
    query.metadata.recursion_desired = true;
    query.add_query(Query::query(Name::from_ascii(name)?, qtype));
    let bytes = query.to_vec()?;
    let exchange = async {
        match transport {
            Transport::Udp => {
                let socket = UdpSocket::bind("127.0.0.1:0").await?;
                socket.send_to(&bytes, server).await?;
                let mut buffer = vec![0u8; 65535];
                let (length, _) = socket.recv_from(&mut buffer).await?;
                buffer.truncate(length);
                anyhow::Ok(buffer)
            }
            Transport::Tcp => {
                let mut stream = TcpStream::connect(server).await?;
                stream
                    .write_all(&u16::try_from(bytes.len())?.to_be_bytes())
                    .await?;
                stream.write_all(&bytes).await?;
                let length = stream.read_u16().await?;
                let mut buffer = vec![0u8; usize::from(length)];
                stream.read_exact(&mut buffer).await?;
                Ok(buffer)
            }
        }
    };
    let answer = tokio::time::timeout(Duration::from_secs(10), exchange)
        .await
        .with_context(|| format!("no answer for {name} {qtype} over {transport:?}"))??;
    let answer = Message::from_vec(&answer)?;
    ensure!(
        answer.metadata.id == query.metadata.id,
        "an answer to another query"
    );
    Ok(answer)
}

/// The answers' data of `qtype`, sorted.
fn data(message: &Message, qtype: RecordType) -> Vec<String> {
    let mut found: Vec<String> = message
        .answers
        .iter()
        .filter(|r| r.record_type() == qtype)
        .map(|r| r.data.to_string())
        .collect();
    found.sort();
    found
}

/// Asks until `check` passes (the watch may not have caught up yet).
async fn eventually(
    what: &str,
    server: SocketAddr,
    name: &str,
    qtype: RecordType,
    check: impl Fn(&Message) -> bool,
) -> Result<Message> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let answer = ask(server, Transport::Udp, name, qtype).await?;
        if check(&answer) {
            return Ok(answer);
        }
        if Instant::now() > deadline {
            bail!("{what}: {name} {qtype} still answers {answer:?}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn service(name: &str) -> String {
    format!("{name}.{NAMESPACE}.svc.cluster.local.")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cluster_dns_answers_services_and_forwards_the_rest() -> Result<()> {
    let Some((server, kubectl)) =
        with_kubectl("the_cluster_dns_answers_services_and_forwards_the_rest").await?
    else {
        return Ok(());
    };

    // The kube-dns Service, kept by the API server.
    let mut kube_dns = String::new();
    for _ in 0..100 {
        kube_dns = kubectl
            .run(&[
                "get", "service", "kube-dns", "-n", "kube-system", "-o",
                "jsonpath={.spec.clusterIP} {.spec.ports[*].name} {.spec.ports[*].protocol} {.metadata.labels.k8s-app}",
            ])?
            .stdout;
        if !kube_dns.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(kube_dns, "10.96.0.10 dns dns-tcp UDP TCP kube-dns");

    kubectl.ok(&[
        "apply",
        "-f",
        kubectl
            .manifest("objects.yaml", OBJECTS)?
            .to_str()
            .context("path")?,
    ])?;
    kubectl.ok(&[
        "apply",
        "-f",
        kubectl
            .manifest("slice.yaml", &slice(false))?
            .to_str()
            .context("path")?,
    ])?;
    let web_ip = kubectl.ok(&[
        "get",
        "service",
        "web",
        "-n",
        NAMESPACE,
        "-o",
        "jsonpath={.spec.clusterIP}",
    ])?;
    ensure!(
        web_ip.starts_with("10."),
        "web has no cluster IP: {web_ip:?}"
    );

    // The DNS, with a client of the API's kubeconfig.
    let kubeconfig = kube::config::Kubeconfig::read_from(server.kubeconfig())?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?;
    let client = kube::Client::try_from(config)?;
    let (upstream, mut upstream_asked) = upstream().await?;
    let bound = dns::bind(DnsConfig {
        listen: "127.0.0.1:0".parse()?,
        domain: "cluster.local".into(),
        upstream: vec![upstream],
    })
    .await?;
    let dns = bound.local_addr();
    ensure!(dns.port() != 0);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(bound.serve(client, async move {
        let _ = stopped.await;
    }));

    // Until the lists are in: SERVFAIL, then the answers.
    let web = eventually(
        "the first lists",
        dns,
        &service("web"),
        RecordType::A,
        |m| m.metadata.response_code != ResponseCode::ServFail,
    )
    .await?;
    for transport in [Transport::Udp, Transport::Tcp] {
        let web = ask(dns, transport, &service("web"), RecordType::A).await?;
        assert_eq!(
            web.metadata.response_code,
            ResponseCode::NoError,
            "{transport:?}"
        );
        assert!(web.metadata.authoritative);
        assert_eq!(
            data(&web, RecordType::A),
            std::slice::from_ref(&web_ip),
            "{transport:?}"
        );

        let srv = ask(
            dns,
            transport,
            &format!("_http._tcp.{}", service("web")),
            RecordType::SRV,
        )
        .await?;
        assert_eq!(
            data(&srv, RecordType::SRV),
            [format!("0 100 80 {}", service("web"))]
        );

        let db = ask(dns, transport, &service("db"), RecordType::A).await?;
        assert_eq!(
            data(&db, RecordType::A),
            ["10.244.0.5", "10.244.0.6"],
            "{transport:?}"
        );
        let db_0 = ask(
            dns,
            transport,
            &format!("db-0.{}", service("db")),
            RecordType::A,
        )
        .await?;
        assert_eq!(data(&db_0, RecordType::A), ["10.244.0.5"]);
        let db_2 = ask(
            dns,
            transport,
            &format!("db-2.{}", service("db")),
            RecordType::A,
        )
        .await?;
        assert_eq!(
            db_2.metadata.response_code,
            ResponseCode::NXDomain,
            "not ready: {db_2:?}"
        );
        let srv = ask(
            dns,
            transport,
            &format!("_db._tcp.{}", service("db")),
            RecordType::SRV,
        )
        .await?;
        assert_eq!(
            data(&srv, RecordType::SRV),
            [
                format!("0 50 5432 db-0.{}", service("db")),
                format!("0 50 5432 db-1.{}", service("db"))
            ]
        );

        let mail = ask(dns, transport, &service("mail"), RecordType::A).await?;
        assert_eq!(data(&mail, RecordType::CNAME), ["smtp.upstream.test."]);
        assert_eq!(
            data(&mail, RecordType::A),
            ["192.0.2.44"],
            "the CNAME's target from upstream"
        );

        let kube_dns = ask(
            dns,
            transport,
            "kube-dns.kube-system.svc.cluster.local.",
            RecordType::A,
        )
        .await?;
        assert_eq!(data(&kube_dns, RecordType::A), ["10.96.0.10"]);

        let missing = ask(dns, transport, &service("nothing"), RecordType::A).await?;
        assert_eq!(missing.metadata.response_code, ResponseCode::NXDomain);
        assert_eq!(missing.authorities[0].record_type(), RecordType::SOA);

        // Every other name: the upstream's answer.
        let outside = ask(dns, transport, "www.upstream.test.", RecordType::A).await?;
        assert_eq!(outside.metadata.response_code, ResponseCode::NoError);
        assert!(!outside.metadata.authoritative);
        assert_eq!(data(&outside, RecordType::A), ["192.0.2.44"]);
        let nowhere = ask(dns, transport, "nowhere.example.", RecordType::A).await?;
        assert_eq!(nowhere.metadata.response_code, ResponseCode::NXDomain);
    }
    assert_eq!(web.metadata.response_code, ResponseCode::NoError);
    // Cluster names never went upstream.
    let mut asked = Vec::new();
    while let Ok(name) = upstream_asked.try_recv() {
        asked.push(name);
    }
    assert!(asked.contains(&"nowhere.example.".to_string()), "{asked:?}");
    assert!(
        asked.iter().all(|n| !n.ends_with(".cluster.local.")),
        "{asked:?}"
    );

    // Changes are followed: a new endpoint, a deleted Service.
    kubectl.ok(&[
        "apply",
        "-f",
        kubectl
            .manifest("slice.yaml", &slice(true))?
            .to_str()
            .context("path")?,
    ])?;
    eventually(
        "the new endpoint",
        dns,
        &service("db"),
        RecordType::A,
        |m| data(m, RecordType::A) == ["10.244.0.5", "10.244.0.6", "10.244.0.8"],
    )
    .await?;
    let by_address = ask(
        dns,
        Transport::Tcp,
        &format!("10-244-0-8.{}", service("db")),
        RecordType::A,
    )
    .await?;
    assert_eq!(data(&by_address, RecordType::A), ["10.244.0.8"]);
    kubectl.ok(&["delete", "service", "web", "-n", NAMESPACE])?;
    eventually(
        "the deleted Service",
        dns,
        &service("web"),
        RecordType::A,
        |m| m.metadata.response_code == ResponseCode::NXDomain,
    )
    .await?;

    let _ = stop.send(());
    tokio::time::timeout(Duration::from_secs(10), serving)
        .await
        .context("the DNS did not stop")???;
    drop(server);
    Ok(())
}
