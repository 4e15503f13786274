//! `/metrics` of `skiff up` as operators consume it: `promtool check
//! metrics` (Debian's `prometheus` package) finds nothing wrong in it, and
//! a real Prometheus, given a scrape config for the API over TLS with a
//! client certificate, scrapes it as `up` and answers a PromQL query for
//! `apiserver_request_total`. Without the tools the test is skipped (under
//! CI=true it fails).

use std::io::Write as _;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use serde_json::Value;
use skiff_tests::api_server::ApiServer;

fn tool_or_skip(name: &str, test: &str) -> Option<PathBuf> {
    skiff_tests::tool::on_path_or_skip(
        name,
        test,
        "apt-get install -y --no-install-recommends prometheus",
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_scrapes_the_api_server() -> Result<()> {
    let test = "prometheus_scrapes_the_api_server";
    let (Some(promtool), Some(prometheus)) = (
        tool_or_skip("promtool", test),
        tool_or_skip("prometheus", test),
    ) else {
        return Ok(());
    };
    let server = ApiServer::start().await?;
    let admin = server.http()?;
    // Some requests to count.
    admin
        .get_json("/api/v1/namespaces/default/configmaps")
        .await?;
    let unauthenticated = admin.anonymous().get("/metrics").await?;
    ensure!(
        unauthenticated.status == 401 || unauthenticated.status == 403,
        "anonymous /metrics: {}",
        unauthenticated.status
    );
    let metrics = admin.get("/metrics").await?;
    ensure!(
        metrics.status == 200,
        "/metrics: {} {}",
        metrics.status,
        metrics.text()
    );
    let text = metrics.text();
    ensure!(
        text.contains("apiserver_request_total{code=\"200\",component=\"apiserver\",group=\"\",resource=\"configmaps\",scope=\"namespace\",subresource=\"\",verb=\"LIST\",version=\"v1\"}"),
        "{text}"
    );
    let mut check = std::process::Command::new(&promtool)
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()?;
    check
        .stdin
        .take()
        .context("promtool's stdin")?
        .write_all(text.as_bytes())?;
    let checked = check.wait_with_output()?;
    ensure!(
        checked.status.success(),
        "promtool check metrics: {}{}",
        String::from_utf8_lossy(&checked.stdout),
        String::from_utf8_lossy(&checked.stderr)
    );

    // A real Prometheus, with the administrator's certificate.
    let dir = tempfile::tempdir()?;
    let kubeconfig: serde_yaml::Value =
        serde_yaml::from_str(&std::fs::read_to_string(server.kubeconfig())?)?;
    let decode = |value: &serde_yaml::Value| -> Result<Vec<u8>> {
        use base64::Engine;
        Ok(base64::engine::general_purpose::STANDARD
            .decode(value.as_str().context("base64 data")?)?)
    };
    let files = [
        (
            "ca.crt",
            &kubeconfig["clusters"][0]["cluster"]["certificate-authority-data"],
        ),
        (
            "admin.crt",
            &kubeconfig["users"][0]["user"]["client-certificate-data"],
        ),
        (
            "admin.key",
            &kubeconfig["users"][0]["user"]["client-key-data"],
        ),
    ];
    for (name, value) in files {
        std::fs::write(dir.path().join(name), decode(value)?)?;
    }
    let web = skiff_tests::skiff_process::free_addrs(1)?[0];
    let config = format!(
        "global:\n  scrape_interval: 1s\nscrape_configs:\n- job_name: skiff-apiserver\n  scheme: https\n  tls_config:\n    ca_file: {d}/ca.crt\n    cert_file: {d}/admin.crt\n    key_file: {d}/admin.key\n    server_name: localhost\n  static_configs:\n  - targets: ['{api}']\n",
        d = dir.path().display(),
        api = admin.authority(),
    );
    std::fs::write(dir.path().join("prometheus.yml"), config)?;
    let mut running = tokio::process::Command::new(&prometheus)
        .arg(format!(
            "--config.file={}",
            dir.path().join("prometheus.yml").display()
        ))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.path().join("data").display()
        ))
        .arg(format!("--web.listen-address={web}"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let query = |q: &str| {
        let url = format!("/api/v1/query?query={q}");
        let client = skiff_tests::kube_http::KubeHttp::from_plain(&web.to_string());
        async move { client.get(&url).await.and_then(|r| r.json()) }
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    let (mut up, mut requests) = (Value::Null, Value::Null);
    while Instant::now() < deadline {
        if let Ok(answer) = query("up").await {
            up = answer["data"]["result"][0]["value"][1].clone();
        }
        if let Ok(answer) = query("sum(apiserver_request_total)").await {
            requests = answer["data"]["result"][0]["value"][1].clone();
        }
        if up == "1"
            && requests
                .as_str()
                .and_then(|v| v.parse::<f64>().ok())
                .is_some_and(|v| v > 0.0)
        {
            let _ = running.kill().await;
            return Ok(());
        }
        if let Ok(Some(status)) = running.try_wait() {
            anyhow::bail!("prometheus exited: {status}");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let _ = running.kill().await;
    anyhow::bail!(
        "Prometheus did not scrape skiff: up = {up}, sum(apiserver_request_total) = {requests}"
    )
}
