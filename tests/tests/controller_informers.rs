//! `skiff controller-manager` against a bare API server: all its
//! controllers share one watch per resource (kube-controller-manager's
//! shared informers), counted on the API server's `/metrics` before and
//! after it starts; and they still work through the shared caches — a
//! ReplicaSet gets its pods, and deleting it lets the garbage collector
//! (which reads pods through the same informer) delete them.

use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Result};
use serde_json::json;
use skiff_tests::api_server::ApiServer;
use skiff_tests::kube_http::KubeHttp;
use skiff_tests::skiff_process::SkiffProcess;

const TIMEOUT: Duration = Duration::from_secs(60);

/// Open watches of `resource` served by the API server's watch cache.
async fn watchers(http: &KubeHttp, resource: &str) -> Result<u64> {
    let reply = http.get("/metrics").await?;
    ensure!(reply.status == 200, "/metrics: {}", reply.status);
    let sample = format!("skiff_watch_cache_watchers{{resource=\"{resource}\"}} ");
    Ok(reply
        .text()
        .lines()
        .find_map(|line| line.strip_prefix(&sample)?.trim().parse().ok())
        .unwrap_or(0))
}

async fn pod_names(http: &KubeHttp) -> Result<Vec<String>> {
    let pods = http
        .get_json("/api/v1/namespaces/default/pods?labelSelector=app%3Dweb")
        .await?;
    Ok(pods["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p["metadata"]["name"].as_str().map(str::to_string))
        .collect())
}

async fn eventually<F, Fut>(what: &str, mut check: F) -> Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<bool>>,
{
    let start = Instant::now();
    while start.elapsed() < TIMEOUT {
        if check().await? {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    bail!("timed out waiting for {what}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_controllers_share_one_watch_per_resource() -> Result<()> {
    let args: Vec<String> = [
        "--scheduler=false",
        "--controller-manager=false",
        "--kubelet=false",
    ]
    .map(str::to_string)
    .to_vec();
    let (server, http) = ApiServer::start_with_plain_port(&args).await?;
    let before = |resource: &'static str| {
        let http = http.clone();
        async move { watchers(&http, resource).await }
    };
    // Each watched by several controllers and by the garbage collector.
    let resources = [
        "pods",
        "nodes",
        "replicasets.apps",
        "jobs.batch",
        "services",
        "configmaps",
    ];
    let mut base = Vec::new();
    for resource in resources {
        base.push(before(resource).await?);
    }

    let kubeconfig = server.kubeconfig();
    let secure = skiff_tests::skiff_process::free_addrs(1)?[0];
    let mut manager = SkiffProcess::spawn(
        "controller-manager",
        [
            "controller-manager",
            "--leader-elect=false",
            "--kubeconfig",
            kubeconfig.to_str().unwrap_or_default(),
            "--bind-address=127.0.0.1",
            &format!("--secure-port={}", secure.port()),
        ],
    )?;
    // The garbage collector is the last to open its watches (after API
    // discovery); limitranges are watched by it alone.
    let start = Instant::now();
    while watchers(&http, "limitranges").await? == 0 {
        if let Some(exit) = manager.try_exit()? {
            bail!(
                "the controller-manager exited ({exit}): {}",
                manager.stderr()
            );
        }
        ensure!(
            start.elapsed() < TIMEOUT,
            "the garbage collector opened no watch: {}",
            manager.stderr()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Give any late watch time to open before counting.
    tokio::time::sleep(Duration::from_secs(1)).await;
    for (resource, base) in resources.iter().zip(base) {
        let now = watchers(&http, resource).await?;
        ensure!(
            now == base + 1,
            "{resource}: {base} watches before the controller-manager started, {now} after (one shared informer expected)"
        );
    }

    let replica_set = json!({
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": "busybox", "command": ["sleep", "3600"]}]}
            }
        }
    });
    let reply = http
        .post("/apis/apps/v1/namespaces/default/replicasets", &replica_set)
        .await?;
    ensure!(reply.status == 201, "{} {}", reply.status, reply.text());
    eventually("the ReplicaSet's two pods", || async {
        Ok(pod_names(&http).await?.len() == 2)
    })
    .await?;
    let reply = http
        .delete("/apis/apps/v1/namespaces/default/replicasets/web")
        .await?;
    ensure!(reply.status == 200, "{} {}", reply.status, reply.text());
    // Nothing runs the pods, so they are deleted at once (no kubelet to
    // wait for); the garbage collector must find them through the shared
    // pod informer.
    eventually("the garbage collector to delete the pods", || async {
        Ok(pod_names(&http).await?.is_empty())
    })
    .await?;
    // The controller-manager alone serves its queues' metrics on its
    // secure port, as kube-controller-manager does.
    let metrics =
        skiff_tests::kube_http::secure_port_metrics(&server.http()?, &secure.to_string()).await?;
    ensure!(
        metrics.lines().any(
            |l| l.starts_with("workqueue_adds_total{name=\"replicaset\"} ") && !l.ends_with(" 0")
        ),
        "{metrics}"
    );
    ensure!(manager.try_exit()?.is_none(), "{}", manager.stderr());
    Ok(())
}
