//! TLS on the store's ports, as an etcd operator meets it: the client
//! port wants a client certificate signed by the store's own CA (the real
//! etcdctl with one works; without one, with plain TCP, or with the API's
//! administrator certificate it gets nothing), the plain port exists only
//! on loopback and only when asked for, and a member whose certificates
//! come from another CA cannot talk to the cluster's peers.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use skiff_store::grpc::pb::etcdserverpb::kv_client::KvClient;
use skiff_store::grpc::pb::etcdserverpb::RangeRequest;
use skiff_tests::api_server::ApiServer;
use skiff_tests::etcdctl::{etcdctl_or_skip, Etcdctl};
use skiff_tests::skiff_process::{free_addrs, store_args, SkiffProcess};
use skiff_tests::store_client;
use skiff_tests::test_pki;

const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// `etcdctl get KEY` at `endpoint` with only the given flags (no client
/// certificate unless they name one); its output, or the failure.
fn bare_etcdctl(etcdctl: &Path, endpoint: &str, flags: &[&str], key: &str) -> Result<String> {
    let output = Command::new(etcdctl)
        .env("ETCDCTL_API", "3")
        .args([
            "--endpoints",
            endpoint,
            "--dial-timeout",
            "2s",
            "--command-timeout",
            "4s",
        ])
        .args(flags)
        .args(["get", key, "--print-value-only"])
        .output()
        .context("running etcdctl")?;
    match output.status.success() {
        true => Ok(String::from_utf8_lossy(&output.stdout).trim().to_string()),
        false => bail!("{}", String::from_utf8_lossy(&output.stderr).trim()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcdctl_needs_a_client_certificate_of_the_store_ca() -> Result<()> {
    let Some(etcdctl) = etcdctl_or_skip("etcdctl_needs_a_client_certificate_of_the_store_ca")
    else {
        return Ok(());
    };
    let server = ApiServer::start().await?;
    let addr = server.client_addr();
    let endpoint = format!("https://{addr}");
    // With the store's client certificate (as `skiff up` prints it).
    let trusted = Etcdctl::new(etcdctl.clone(), endpoint.clone());
    trusted.ok(&["put", "/tls/probe", "seen"])?;
    let value = trusted.ok(&["get", "/tls/probe", "--print-value-only"])?;
    assert_eq!(value.trim(), "seen");

    let [ca, _, _] = test_pki::store_files();
    let ca = ca.display().to_string();
    // TLS without a client certificate.
    bare_etcdctl(&etcdctl, &endpoint, &["--cacert", &ca], "/tls/probe")
        .expect_err("TLS without a client certificate reached the store");
    // The API administrator's certificate is of the cluster CA, which the
    // store does not trust.
    let pki = test_pki::dir();
    let admin = [
        "--cacert".to_string(),
        ca.clone(),
        "--cert".into(),
        pki.join("admin.crt").display().to_string(),
        "--key".into(),
        pki.join("admin.key").display().to_string(),
    ];
    let admin: Vec<&str> = admin.iter().map(String::as_str).collect();
    bare_etcdctl(&etcdctl, &endpoint, &admin, "/tls/probe")
        .expect_err("the API administrator's certificate opened the store");
    // Plain HTTP/2.
    bare_etcdctl(&etcdctl, &format!("http://{addr}"), &[], "/tls/probe")
        .expect_err("plain HTTP/2 reached the store");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_plain_client_port_is_loopback_only_and_off_unless_asked() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let [client, plain]: [std::net::SocketAddr; 2] = free_addrs(2)?
        .try_into()
        .map_err(|_| anyhow::anyhow!("two addresses"))?;
    let mut args = store_args("default", &dir.path().join("default"), client, None);
    args.extend(["--insecure-client-listen".into(), plain.to_string()]);
    let mut member = SkiffProcess::spawn("skiff store --insecure-client-listen", &args)?;
    member.wait_for_line(" ready: ", READY_TIMEOUT).await?;
    let revision = store_client::put(client, "/plain/probe", "over TLS").await?;
    // The plain port needs no certificate and sees the same store.
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{plain}"))?
        .connect()
        .await?;
    let got = KvClient::new(channel)
        .range(RangeRequest {
            key: b"/plain/probe".to_vec(),
            ..Default::default()
        })
        .await?
        .into_inner();
    assert_eq!(got.kvs.len(), 1);
    assert_eq!(got.kvs[0].value, b"over TLS");
    assert_eq!(got.kvs[0].mod_revision, revision);
    // The TLS port does not speak plain HTTP/2.
    let plain_on_tls = tonic::transport::Endpoint::from_shared(format!("http://{client}"))?
        .connect_timeout(Duration::from_secs(3))
        .timeout(Duration::from_secs(3))
        .connect()
        .await;
    if let Ok(channel) = plain_on_tls {
        let answer = KvClient::new(channel)
            .range(RangeRequest {
                key: b"/plain/probe".to_vec(),
                ..Default::default()
            })
            .await;
        ensure!(answer.is_err(), "plain HTTP/2 was answered on the TLS port");
    }
    drop(member);

    let (status, _, stderr) = SkiffProcess::run(
        [
            "store",
            "--data-dir",
            &dir.path().join("other").display().to_string(),
            "--insecure-client-listen",
            "0.0.0.0:23790",
        ],
        READY_TIMEOUT,
    )
    .await?;
    assert!(!status.success());
    assert!(stderr.contains("is not a loopback address"), "{stderr}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_with_another_ca_cannot_reach_its_peers() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let addrs = free_addrs(6)?;
    let (clients, peers) = addrs.split_at(3);
    let initial_cluster = (0..3)
        .map(|i| format!("n{}={}", i + 1, peers[i]))
        .collect::<Vec<_>>()
        .join(",");
    let mut members = Vec::new();
    for i in 0..3 {
        let name = format!("n{}", i + 1);
        let mut args = store_args(
            &name,
            &dir.path().join(&name),
            clients[i],
            Some((peers[i], &initial_cluster)),
        );
        if i == 2 {
            // Its own CA: a stranger to n1 and n2.
            args.extend([
                "--pki-dir".into(),
                dir.path().join("stranger-pki").display().to_string(),
            ]);
        }
        members.push(SkiffProcess::spawn(&format!("skiff store {name}"), &args)?);
    }
    // n1 and n2 are a quorum and take writes.
    let deadline = Instant::now() + READY_TIMEOUT;
    let revision = loop {
        match store_client::put(clients[0], "/peers/probe", "quorum").await {
            Ok(revision) => break revision,
            Err(err) if Instant::now() > deadline => {
                bail!("n1 and n2 took no write: {err:#}\n{}", members[0].stderr())
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    };
    // Replicated to n2.
    let deadline = Instant::now() + READY_TIMEOUT;
    while store_client::get_value(clients[1], "/peers/probe")
        .await
        .ok()
        .flatten()
        .as_deref()
        != Some("quorum")
    {
        ensure!(
            Instant::now() < deadline,
            "the write at {revision} never reached n2"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The stranger's connections are refused for their certificate, and
    // it refuses theirs.
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        let refused = |i: usize| {
            members[i]
                .stderr()
                .contains("refused a peer connection: TLS failed")
        };
        if refused(0) && refused(2) {
            break;
        }
        ensure!(
            Instant::now() < deadline,
            "no TLS refusal logged;\nn1:\n{}\nn3:\n{}",
            members[0].stderr(),
            members[2].stderr()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // n3 never learns of the write: it has no leader.
    let n3_log = members[2].stderr();
    ensure!(
        !n3_log.contains("became follower") && !n3_log.contains("became leader"),
        "n3 joined a term with the others:\n{n3_log}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_runs_over_a_member_reached_with_tls() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let [client, api]: [std::net::SocketAddr; 2] = free_addrs(2)?
        .try_into()
        .map_err(|_| anyhow::anyhow!("two addresses"))?;
    let args = store_args("default", &dir.path().join("store"), client, None);
    let mut member = SkiffProcess::spawn("skiff store", &args)?;
    member.wait_for_line(" ready: ", READY_TIMEOUT).await?;
    let data_dir = dir.path().join("api");
    let args = [
        "up".to_string(),
        "--data-dir".into(),
        data_dir.display().to_string(),
        "--api-listen".into(),
        api.to_string(),
        "--store-endpoints".into(),
        format!("https://{client}"),
        "--scheduler=false".into(),
        "--controller-manager=false".into(),
        "--kubelet=false".into(),
    ];
    let mut up = SkiffProcess::spawn("skiff up --store-endpoints https://", &args)?;
    up.wait_for_line(" ready: ", READY_TIMEOUT).await?;
    let http = skiff_tests::kube_http::KubeHttp::from_kubeconfig(&data_dir.join("kubeconfig"))?;
    let namespace = serde_json::json!({
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "over-tls"}
    });
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        let reply = http.post("/api/v1/namespaces", &namespace).await?;
        if reply.status == 201 {
            break;
        }
        ensure!(
            Instant::now() < deadline,
            "creating a namespace: {} {}\n{}",
            reply.status,
            reply.text(),
            up.stderr()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // In the member's store, read over TLS.
    let stored = store_client::get(client, "/registry/core/namespaces/over-tls").await?;
    ensure!(
        stored.kvs.len() == 1,
        "the namespace is not in the member's store"
    );
    Ok(())
}
