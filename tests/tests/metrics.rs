//! `/metrics` of every component of `skiff up` as operators consume it:
//! the API server, the store (etcd's names), the kubelet (and its
//! `/metrics/resource`), the scheduler and the controller-manager each
//! answer only credentials, `promtool check metrics` (Debian's
//! `prometheus` package) finds nothing wrong in them, and a real
//! Prometheus, given a scrape config over TLS with client certificates,
//! scrapes them all as `up` and answers PromQL over them. Without the
//! tools the test is skipped (under CI=true it fails).

use std::io::Write as _;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use serde_json::Value;
use skiff_tests::kube_http::KubeHttp;

fn tool_or_skip(name: &str, test: &str) -> Option<PathBuf> {
    skiff_tests::tool::on_path_or_skip(
        name,
        test,
        "apt-get install -y --no-install-recommends prometheus",
    )
}

/// One component's metrics as a test and Prometheus reach them.
struct Target {
    job: &'static str,
    /// The client that fetches them (with its credentials and trust).
    client: KubeHttp,
    path: &'static str,
    /// The Prometheus `tls_config` lines (indented for a scrape config).
    tls: String,
    /// Names that must be among its metrics.
    names: &'static [&'static str],
    /// Metrics whose promtool lint findings are the original's too.
    tolerated: &'static [&'static str],
}

/// `promtool check metrics` of `text`: no parse error and no lint finding,
/// but about the metrics `tolerated` names (lint findings exit 3, parse
/// errors 1).
fn check_with_promtool(
    promtool: &std::path::Path,
    what: &str,
    text: &str,
    tolerated: &[&str],
) -> Result<()> {
    let mut check = std::process::Command::new(promtool)
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
    let findings =
        String::from_utf8_lossy(&checked.stdout) + String::from_utf8_lossy(&checked.stderr);
    let only_tolerated = checked.status.code() == Some(3)
        && findings.lines().filter(|l| !l.trim().is_empty()).all(|l| {
            tolerated
                .iter()
                .any(|name| l.starts_with(&format!("{name} ")))
        });
    ensure!(
        checked.status.success() || only_tolerated,
        "promtool check metrics of {what}: {}{}",
        String::from_utf8_lossy(&checked.stdout),
        String::from_utf8_lossy(&checked.stderr)
    );
    Ok(())
}

const PROBED_POD: &str = "apiVersion: v1
kind: Pod
metadata: {name: probed}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: app
    image: busybox
    command: [sleep, \"3600\"]
    readinessProbe:
      exec: {command: [\"true\"]}
      periodSeconds: 1
";

/// `skiff up` with its kubelet, scheduler and controller-manager: every
/// component's `/metrics` (and the kubelet's `/metrics/resource`) answers
/// its client certificate only, passes `promtool check metrics`, carries
/// the names operators graph, and a real Prometheus scrapes all of them
/// as `up` and answers PromQL over them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_scrapes_every_component_of_skiff_up() -> Result<()> {
    use skiff_tests::local_node::{self, LocalNode, NODE, RELAXED_EVICTION};
    let test = "prometheus_scrapes_every_component_of_skiff_up";
    let (Some(promtool), Some(prometheus)) = (
        tool_or_skip("promtool", test),
        tool_or_skip("prometheus", test),
    ) else {
        return Ok(());
    };
    let ports = skiff_tests::skiff_process::free_addrs(3)?;
    let (scheduler, controllers, web) = (ports[0], ports[1], ports[2]);
    let flags = [
        "--controller-manager=true".to_string(),
        format!("--scheduler-secure-listen={scheduler}"),
        format!("--controller-manager-secure-listen={controllers}"),
    ];
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let Some(node) = LocalNode::start_with(test, RELAXED_EVICTION, &flags).await? else {
        return Ok(());
    };
    local_node::apply(&node.kubectl, "probed.yaml", PROBED_POD)?;
    local_node::wait_for(
        &node.kubectl,
        "pod",
        "probed",
        "{.status.conditions[?(@.type==\"Ready\")].status}",
        "True",
    )
    .await?;
    let kubelet_port = local_node::jsonpath(
        &node.kubectl,
        "node",
        NODE,
        "{.status.daemonEndpoints.kubeletEndpoint.Port}",
    )?;
    let kubelet = format!("127.0.0.1:{kubelet_port}");

    let pki = skiff_tests::test_pki::dir();
    let [store_ca, store_cert, store_key] = skiff_tests::test_pki::store_files();
    let read = |path: &std::path::Path| {
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
    };
    let admin = node.server.http()?;
    let store = admin
        .at(&node.server.client_addr().to_string())
        .trusting(&read(&store_ca)?)
        .with_client_cert(&read(&store_cert)?, &read(&store_key)?);
    let self_signed = |authority: &str| admin.at(authority).skipping_verification();
    let admin_tls = |ca: &str| {
        format!(
            "    {ca}\n    cert_file: {d}/admin.crt\n    key_file: {d}/admin.key\n",
            d = pki.display()
        )
    };
    let cluster_ca = admin_tls(&format!("ca_file: {}/ca.crt", pki.display()));
    let skip = admin_tls("insecure_skip_verify: true");
    let targets = [
        Target {
            job: "apiserver",
            client: admin.clone(),
            path: "/metrics",
            tls: cluster_ca,
            names: &[
                "apiserver_request_total",
                "apiserver_request_duration_seconds_bucket",
                "apiserver_current_inflight_requests",
                "apiserver_storage_objects",
                "apiserver_watch_events_total",
                "apiserver_longrunning_requests",
                "process_cpu_seconds_total",
            ],
            tolerated: &[],
        },
        Target {
            job: "etcd",
            client: store,
            path: "/metrics",
            tls: format!(
                "    ca_file: {}\n    cert_file: {}\n    key_file: {}\n",
                store_ca.display(),
                store_cert.display(),
                store_key.display()
            ),
            names: &[
                "etcd_server_has_leader",
                "etcd_mvcc_db_total_size_in_bytes",
                "process_resident_memory_bytes",
            ],
            // etcd exports this gauge under a counter's suffix.
            tolerated: &["etcd_debugging_mvcc_keys_total"],
        },
        Target {
            job: "kubelet",
            client: self_signed(&kubelet),
            path: "/metrics",
            tls: skip.clone(),
            names: &[
                "kubelet_running_pods",
                "kubelet_running_containers",
                "kubelet_pod_start_duration_seconds_bucket",
                "prober_probe_total",
                "process_cpu_seconds_total",
            ],
            tolerated: &[],
        },
        Target {
            job: "kubelet-resource",
            client: self_signed(&kubelet),
            path: "/metrics/resource",
            tls: skip.clone(),
            names: &[
                "node_cpu_usage_seconds_total",
                "node_memory_working_set_bytes",
                "container_cpu_usage_seconds_total",
                "container_memory_working_set_bytes",
                "pod_cpu_usage_seconds_total",
            ],
            tolerated: &[],
        },
        Target {
            job: "scheduler",
            client: self_signed(&scheduler.to_string()),
            path: "/metrics",
            tls: skip.clone(),
            names: &[
                "scheduler_schedule_attempts_total",
                "scheduler_pending_pods",
                "process_cpu_seconds_total",
            ],
            tolerated: &[],
        },
        Target {
            job: "controller-manager",
            client: self_signed(&controllers.to_string()),
            path: "/metrics",
            tls: skip,
            names: &[
                "workqueue_adds_total",
                "workqueue_depth",
                "workqueue_work_duration_seconds_bucket",
                "process_cpu_seconds_total",
            ],
            tolerated: &[],
        },
    ];

    // Requests to count, under kube-apiserver's labels.
    admin
        .get_json("/api/v1/namespaces/default/configmaps")
        .await?;
    let counted = admin.get("/metrics").await?.text();
    ensure!(
        counted.contains("apiserver_request_total{code=\"200\",component=\"apiserver\",group=\"\",resource=\"configmaps\",scope=\"namespace\",subresource=\"\",verb=\"LIST\",version=\"v1\"}"),
        "{counted}"
    );
    for target in &targets {
        // Nothing without a client certificate.
        let anonymous = target.client.anonymous().get(target.path).await;
        ensure!(
            anonymous
                .as_ref()
                .map_or(true, |r| r.status == 401 || r.status == 403),
            "{} answered {} without credentials: {:?}",
            target.job,
            target.path,
            anonymous.map(|r| r.status)
        );
        // The kubelet's resource metrics appear after its first samples.
        let deadline = Instant::now() + Duration::from_secs(60);
        let text = loop {
            let reply = target.client.get(target.path).await?;
            ensure!(reply.status == 200, "{}: {}", target.job, reply.status);
            let text = reply.text();
            let missing: Vec<&str> = target
                .names
                .iter()
                .copied()
                .filter(|name| {
                    !text
                        .lines()
                        .any(|l| !l.starts_with('#') && l.starts_with(name))
                })
                .collect();
            if missing.is_empty() {
                break text;
            }
            ensure!(
                Instant::now() < deadline,
                "{} {} lacks {missing:?}:\n{text}",
                target.job,
                target.path
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        };
        check_with_promtool(&promtool, target.job, &text, target.tolerated)?;
    }

    // The kubelet's through the API server's node proxy, as operators
    // read them (`kubectl get --raw`), behind RBAC's nodes/proxy.
    let proxied = node.kubectl.ok(&[
        "get",
        "--raw",
        &format!("/api/v1/nodes/{NODE}/proxy/metrics/resource"),
    ])?;
    ensure!(
        proxied.contains("node_cpu_usage_seconds_total"),
        "{proxied}"
    );
    let summary: Value = serde_json::from_str(&node.kubectl.ok(&[
        "get",
        "--raw",
        &format!("/api/v1/nodes/{NODE}/proxy/stats/summary"),
    ])?)?;
    ensure!(summary["node"]["nodeName"] == NODE, "{summary}");
    let missing = admin
        .get(&format!("/api/v1/nodes/{NODE}/proxy/nothing"))
        .await?;
    ensure!(
        missing.status == 404,
        "a path the kubelet lacks: {}",
        missing.status
    );
    let (cert, key) = skiff_tests::test_pki::client_credentials("viewer", &[])?;
    node.kubectl.ok(&[
        "create",
        "clusterrolebinding",
        "viewer",
        "--clusterrole=view",
        "--user=viewer",
    ])?;
    let viewer = admin.with_client_cert(&cert, &key);
    let refused = viewer
        .get(&format!("/api/v1/nodes/{NODE}/proxy/metrics"))
        .await?;
    ensure!(
        refused.status == 403,
        "a viewer through nodes/proxy: {} {}",
        refused.status,
        refused.text()
    );
    let posted = admin
        .request(
            "POST",
            &format!("/api/v1/nodes/{NODE}/proxy/metrics"),
            None,
            Some(b""),
        )
        .await?;
    ensure!(
        posted.status == 405,
        "POST through nodes/proxy: {}",
        posted.status
    );

    // A real Prometheus scrapes them all.
    let dir = tempfile::tempdir()?;
    let mut config = String::from("global:\n  scrape_interval: 1s\nscrape_configs:\n");
    for target in &targets {
        config.push_str(&format!(
            "- job_name: {}\n  scheme: https\n  metrics_path: {}\n  tls_config:\n{}  static_configs:\n  - targets: ['{}']\n",
            target.job,
            target.path,
            target.tls,
            target.client.authority()
        ));
    }
    std::fs::write(dir.path().join("prometheus.yml"), &config)?;
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
    let web_client = KubeHttp::from_plain(&web.to_string());
    let query = |q: &str| {
        let url = format!("/api/v1/query?query={q}");
        let client = web_client.clone();
        async move { client.get(&url).await.and_then(|r| r.json()) }
    };
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut last = String::new();
    while Instant::now() < deadline {
        if let Ok(Some(status)) = running.try_wait() {
            anyhow::bail!("prometheus exited: {status}");
        }
        let up = query("up").await.unwrap_or(Value::Null);
        let results = up["data"]["result"].as_array().cloned().unwrap_or_default();
        let all_up = results.len() == targets.len() && results.iter().all(|r| r["value"][1] == "1");
        // One PromQL query per component, over what it exports.
        let mut answered = all_up;
        for q in [
            "sum(apiserver_request_total)",
            "sum(rate(workqueue_adds_total[1m]))%20>=%200",
            "kubelet_running_pods",
            "etcd_server_has_leader",
            "sum(scheduler_schedule_attempts_total)",
        ] {
            let answer = query(q).await.unwrap_or(Value::Null);
            let value = answer["data"]["result"][0]["value"][1]
                .as_str()
                .and_then(|v| v.parse::<f64>().ok());
            answered &= value.is_some_and(|v| v >= 0.0);
            if q == "sum(apiserver_request_total)" {
                answered &= value.is_some_and(|v| v > 0.0);
            }
        }
        if answered {
            let _ = running.kill().await;
            return Ok(());
        }
        last = format!("{results:?}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let _ = running.kill().await;
    anyhow::bail!("Prometheus did not scrape every component as up with their series; up: {last}\nconfig:\n{config}")
}

/// `--request-metrics=false` (for measuring what recording costs): the
/// API answers as before and records no request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_metrics_can_be_turned_off_to_measure_their_cost() -> Result<()> {
    let server = skiff_tests::api_server::ApiServer::start_scheduling_with(&[
        "--request-metrics=false".into(),
    ])
    .await?;
    let admin = server.http()?;
    admin
        .get_json("/api/v1/namespaces/default/configmaps")
        .await?;
    let text = admin.get("/metrics").await?.text();
    ensure!(
        !text
            .lines()
            .any(|l| l.starts_with("apiserver_request_total{")),
        "{text}"
    );
    ensure!(text.contains("\nprocess_cpu_seconds_total "), "{text}");
    Ok(())
}
