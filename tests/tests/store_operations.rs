//! What an operator does to a store with the real etcdctl and curl,
//! against `skiff store` and, to compare, against a real etcd: compaction
//! of a store never compacted; health, version and metrics over HTTP on
//! the client port (TLS and plain), `endpoint health`, `check datascale`. Without etcdctl (or etcd, for the comparison) the tests are
//! skipped (under CI=true they fail).

use anyhow::{ensure, Context, Result};
use skiff_tests::etcdctl::{etcdctl_or_skip, Etcdctl};
use skiff_tests::real_etcd::{etcd_or_skip, RealEtcd};
use skiff_tests::skiff_process::{free_addrs, store_args, SkiffProcess};
use skiff_tests::store_cluster::StoreCluster;
use skiff_tests::store_cluster::READY_TIMEOUT;

/// `compaction 0` on a store never compacted is accepted once, as etcd's
/// compacted revision starts below 0; then refused as compacted. A future
/// revision is refused.
fn compaction_of_revision_zero(etcdctl: &Etcdctl) -> Result<()> {
    assert_eq!(etcdctl.ok(&["compaction", "0"])?, "compacted revision 0\n");
    let again = etcdctl.fails(&["compaction", "0"])?;
    ensure!(
        again.contains("Error: etcdserver: mvcc: required revision has been compacted"),
        "compaction 0 again: {again}"
    );
    let future = etcdctl.fails(&["compaction", "1000"])?;
    ensure!(
        future.contains("Error: etcdserver: mvcc: required revision is a future revision"),
        "compaction 1000: {future}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compaction_zero_on_a_fresh_skiff_store() -> Result<()> {
    let Some(etcdctl) = etcdctl_or_skip("compaction_zero_on_a_fresh_skiff_store") else {
        return Ok(());
    };
    let cluster = StoreCluster::single().await?;
    compaction_of_revision_zero(&Etcdctl::new(etcdctl, cluster.endpoints()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compaction_zero_on_a_fresh_real_etcd() -> Result<()> {
    let test = "compaction_zero_on_a_fresh_real_etcd";
    let Some(binaries) = etcd_or_skip(test) else {
        return Ok(());
    };
    let etcd = RealEtcd::alone(&binaries).await?;
    compaction_of_revision_zero(&etcd.etcdctl())
}

/// The metrics skiff exposes under etcd's names.
const ETCD_METRICS: &[&str] = &[
    "etcd_server_has_leader",
    "etcd_server_is_leader",
    "etcd_server_leader_changes_seen_total",
    "etcd_server_proposals_committed_total",
    "etcd_server_proposals_applied_total",
    "etcd_server_proposals_pending",
    "etcd_server_proposals_failed_total",
    "etcd_disk_wal_fsync_duration_seconds_count",
    "etcd_disk_backend_commit_duration_seconds_count",
    "etcd_mvcc_db_total_size_in_bytes",
    "etcd_debugging_mvcc_keys_total",
    "process_resident_memory_bytes",
    "etcd_server_version",
];

/// curl on PATH, or a skip (a failure under CI=true).
fn curl_or_skip(test: &str) -> Option<std::path::PathBuf> {
    let found = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|dir| dir.join("curl"))
            .find(|candidate| candidate.is_file())
    });
    if found.is_none() {
        if std::env::var("CI").is_ok_and(|ci| ci == "true") {
            panic!("curl is not installed, and CI must run {test}: apt-get install -y curl");
        }
        use std::io::Write;
        let _ = writeln!(std::io::stderr(), "SKIPPED {test}: curl is not installed");
    }
    found
}

/// `curl URL` (with the shared client certificate for https): the HTTP
/// status and the body.
fn curl(curl: &std::path::Path, url: &str) -> Result<(u16, String)> {
    let mut command = std::process::Command::new(curl);
    command.args(["-s", "-w", "\n%{http_code}"]);
    if url.starts_with("https://") {
        let [ca, cert, key] = skiff_tests::test_pki::store_files();
        command
            .arg("--cacert")
            .arg(ca)
            .arg("--cert")
            .arg(cert)
            .arg("--key")
            .arg(key);
    }
    let output = command.arg(url).output()?;
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    let (body, code) = text
        .rsplit_once('\n')
        .with_context(|| format!("curl {url} printed {text:?}"))?;
    Ok((code.parse()?, body.to_string()))
}

fn metric_names(text: &str) -> Vec<String> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split([' ', '{']).next())
        .map(str::to_string)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_version_and_metrics_over_http_on_the_client_port() -> Result<()> {
    let test = "health_version_and_metrics_over_http_on_the_client_port";
    let (Some(etcdctl), Some(curl_bin)) = (etcdctl_or_skip(test), curl_or_skip(test)) else {
        return Ok(());
    };
    let dir = tempfile::tempdir()?;
    let addrs = free_addrs(2)?;
    let (client, insecure) = (addrs[0], addrs[1]);
    let mut args = store_args("default", &dir.path().join("data"), client, None);
    args.extend(["--insecure-client-listen".into(), insecure.to_string()]);
    let mut store = SkiffProcess::spawn("skiff store", args)?;
    store.wait_for_line(" ready: ", READY_TIMEOUT).await?;

    for base in [format!("https://{client}"), format!("http://{insecure}")] {
        assert_eq!(
            curl(&curl_bin, &format!("{base}/health"))?,
            (200, r#"{"health":"true","reason":""}"#.to_string()),
            "{base}"
        );
        assert_eq!(
            curl(&curl_bin, &format!("{base}/version"))?,
            (
                200,
                r#"{"etcdcluster":"3.5.0","etcdserver":"3.5.0"}"#.to_string()
            ),
            "{base}"
        );
        assert_eq!(
            curl(&curl_bin, &format!("{base}/livez"))?,
            (200, "ok\n".into())
        );
        assert_eq!(
            curl(&curl_bin, &format!("{base}/readyz"))?,
            (200, "ok\n".into())
        );
        assert_eq!(curl(&curl_bin, &format!("{base}/nothing"))?.0, 404);
        let (status, metrics) = curl(&curl_bin, &format!("{base}/metrics"))?;
        assert_eq!(status, 200);
        let names = metric_names(&metrics);
        for name in ETCD_METRICS {
            ensure!(
                names.iter().any(|n| n == name),
                "{base}: no {name} in\n{metrics}"
            );
        }
        ensure!(
            metrics.contains("\netcd_server_has_leader 1\n"),
            "{metrics}"
        );
    }

    // etcdctl's own checks read the same endpoints.
    let tls = Etcdctl::new(etcdctl.clone(), client.to_string());
    let health = tls.run(&["endpoint", "health"])?;
    let printed = String::from_utf8_lossy(&health.stderr) + String::from_utf8_lossy(&health.stdout);
    ensure!(
        health.status.success() && printed.contains(" is healthy: "),
        "{printed}"
    );
    // etcdctl 3.4 fetches /metrics without the client certificate: plain.
    let plain = Etcdctl::plain(etcdctl, format!("http://{insecure}"));
    // The member list shows both URLs clients reach the member at.
    let listed = plain.ok(&["member", "list"])?;
    ensure!(
        listed.contains(&format!(", https://{client},http://{insecure}, false")),
        "member list: {listed}"
    );
    let scale = plain.ok(&["check", "datascale"])?;
    ensure!(
        scale.contains("PASS: Approximate system memory used"),
        "check datascale: {scale}"
    );
    Ok(())
}

/// Every metric name skiff exposes is one real etcd exposes, and etcd's
/// /health and /version answer the shape skiff's do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_endpoints_on_real_etcd() -> Result<()> {
    let test = "the_same_endpoints_on_real_etcd";
    let (Some(binaries), Some(curl_bin)) = (etcd_or_skip(test), curl_or_skip(test)) else {
        return Ok(());
    };
    let etcd = RealEtcd::alone(&binaries).await?;
    let base = format!("http://{}", etcd.client);
    let (status, health) = curl(&curl_bin, &format!("{base}/health"))?;
    assert_eq!(status, 200);
    ensure!(health.starts_with(r#"{"health":"true""#), "{health}");
    let (status, version) = curl(&curl_bin, &format!("{base}/version"))?;
    assert_eq!(status, 200);
    ensure!(
        version.contains(r#""etcdserver":"3."#) && version.contains(r#""etcdcluster":"3."#),
        "{version}"
    );
    let (_, metrics) = curl(&curl_bin, &format!("{base}/metrics"))?;
    let names = metric_names(&metrics);
    for name in ETCD_METRICS {
        ensure!(names.iter().any(|n| n == name), "etcd has no {name}");
    }
    Ok(())
}
