//! The API server's request limits against `skiff up` over its plain-HTTP
//! loopback port (so that the clients' TLS handshakes do not set the
//! pace), each client a distinct loopback address: a flood of clients over their rate
//! gets 429 TooManyRequests with Retry-After while a client within its rate
//! is always served and the server's memory stays bounded; requests over
//! the in-flight cap are refused at once, but the administrator's are
//! served; a request past the request
//! timeout is answered 504; a client's watches are capped and a closed
//! watch frees its place; the server's allocator asks for no transparent
//! huge pages.

use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use skiff_tests::api_server::ApiServer;
use skiff_tests::kube_http::{HttpResponse, KubeHttp};

const PODS: &str = "/api/v1/namespaces/default/pods";

fn ip(text: &str) -> IpAddr {
    text.parse().expect("an IP address")
}

/// `skiff up` with `args` and no client of its own (no scheduler, no
/// controllers, no kubelet): only the test's requests count. The client
/// is its plain-HTTP port.
async fn start(args: &[&str]) -> Result<(ApiServer, KubeHttp)> {
    let args: Vec<String> = std::iter::once("--scheduler=false")
        .chain(args.iter().copied())
        .map(str::to_string)
        .collect();
    ApiServer::start_with_plain_port(&args).await
}

/// A 429 as Kubernetes writes it: a TooManyRequests Status that says when
/// to retry, in its details and in a Retry-After header.
fn check_too_many(reply: &HttpResponse) -> Result<()> {
    ensure!(reply.status == 429, "{} {}", reply.status, reply.text());
    let status = reply.json()?;
    ensure!(status["kind"] == "Status", "{status}");
    ensure!(status["reason"] == "TooManyRequests", "{status}");
    let retry = reply
        .header("retry-after")
        .context("a 429 without Retry-After")?;
    let seconds: u64 = retry.parse().context("Retry-After is not seconds")?;
    ensure!(seconds >= 1, "Retry-After {seconds}");
    ensure!(
        status["details"]["retryAfterSeconds"].as_u64() == Some(seconds),
        "{status}"
    );
    Ok(())
}

/// GET that must answer 200, waiting out 429s for up to 20 s (the
/// scheduler's own lists may hold every slot of a small cap at start).
async fn get_ok(http: &KubeHttp, path: &str) -> Result<serde_json::Value> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let reply = http.get(path).await?;
        if reply.status == 200 {
            return reply.json();
        }
        ensure!(
            reply.status == 429 && Instant::now() < deadline,
            "GET {path}: {} {}",
            reply.status,
            reply.text()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn rss_kib(pid: u32) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .context("no VmRSS")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_flood_over_its_rate_gets_429s_while_a_client_within_it_is_served() -> Result<()> {
    let (server, http) = start(&["--client-qps", "20", "--client-burst", "20"]).await?;
    let pid = server.pid().context("skiff up runs")?;
    // Warm the pods' cache, then note the memory.
    http.get_json(PODS).await?;
    let rss_before = rss_kib(pid)?;
    let flood_for = Duration::from_secs(4);
    // The flood goes on until the polite client is done, and 4 s at least.
    let polite_done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flood_start = Instant::now();
    let ok = Arc::new(AtomicU64::new(0));
    let refused = Arc::new(AtomicU64::new(0));
    let mut flooders = Vec::new();
    // Eight flooding clients, four connections each, as fast as answered.
    for client in 2..10 {
        let from = http.from_source(ip(&format!("127.0.0.{client}")));
        for _ in 0..4 {
            let (from, ok, refused) = (from.clone(), ok.clone(), refused.clone());
            let polite_done = polite_done.clone();
            flooders.push(tokio::spawn(async move {
                let start = Instant::now();
                while start.elapsed() < flood_for || !polite_done.load(Ordering::Relaxed) {
                    let reply = from.get(PODS).await?;
                    match reply.status {
                        200 => ok.fetch_add(1, Ordering::Relaxed),
                        _ => {
                            check_too_many(&reply)?;
                            refused.fetch_add(1, Ordering::Relaxed)
                        }
                    };
                }
                anyhow::Ok(())
            }));
        }
    }
    // A well-behaved client: at most five requests a second, under its
    // 20 (each is a new TLS connection, which the flood slows down).
    let polite = http.from_source(ip("127.0.0.20"));
    let mut served = 0;
    while served < 15 {
        let reply = polite.get(PODS).await?;
        ensure!(
            reply.status == 200,
            "the client within its rate was refused: {} {}",
            reply.status,
            reply.text()
        );
        served += 1;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    polite_done.store(true, Ordering::Relaxed);
    for flooder in flooders {
        flooder.await??;
    }
    let flooded = flood_start.elapsed().as_secs() + 1;
    let (ok, refused) = (ok.load(Ordering::Relaxed), refused.load(Ordering::Relaxed));
    // Each flooder gets its burst and then 20 a second.
    ensure!(
        ok <= 8 * (20 + 20 * flooded),
        "{ok} flood requests served in {flooded} s"
    );
    ensure!(refused > ok, "{refused} refused, {ok} served");
    let rss_after = rss_kib(pid)?;
    ensure!(
        rss_after < rss_before + 100 * 1024,
        "RSS grew from {rss_before} KiB to {rss_after} KiB during the flood"
    );
    // After a second the flooders' buckets hold tokens again.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let reply = http.from_source(ip("127.0.0.2")).get(PODS).await?;
    ensure!(reply.status == 200, "{} {}", reply.status, reply.text());
    Ok(())
}

/// Users of the in-flight test, each its own client, none an administrator.
const LIMITED_TOKENS: &str = "\
limited-2,user-2,2002,\"limited\"
limited-3,user-3,2003,\"limited\"
limited-4,user-4,2004,\"limited\"
limited-9,user-9,2009,\"limited\"
";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn requests_over_the_in_flight_cap_are_refused_and_slow_ones_time_out() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let tokens = dir.path().join("tokens.csv");
    std::fs::write(&tokens, LIMITED_TOKENS)?;
    let token_file = format!("--token-auth-file={}", tokens.display());
    let (server, admin) = start(&[
        "--max-requests-inflight",
        "3",
        "--request-timeout",
        "2s",
        &token_file,
    ])
    .await?;
    // The users of group "limited" may edit the default namespace.
    let binding = serde_json::json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "limited-edit", "namespace": "default"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "limited"}]
    });
    let bound = admin
        .post(
            "/apis/rbac.authorization.k8s.io/v1/namespaces/default/rolebindings",
            &binding,
        )
        .await?;
    ensure!(bound.status == 201, "{} {}", bound.status, bound.text());
    let tls = server.http()?;
    let user = |n: u32| tls.with_token(&format!("limited-{n}"));
    let listed = get_ok(&user(2), PODS).await?;
    let revision: u64 = listed["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|r| r.parse().ok())
        .context("a list without resourceVersion")?;
    // A list at a revision the store has not reached waits for it: three
    // of them hold every read slot until the request timeout ends them.
    let future = format!(
        "{PODS}?resourceVersion={}&resourceVersionMatch=NotOlderThan",
        revision + 1_000_000
    );
    let mut waiting = Vec::new();
    for client in 2..5 {
        let from = user(client);
        let future = future.clone();
        waiting.push(tokio::spawn(async move {
            // Until it gets a slot (the fourth client's reads below may
            // hold one for a moment).
            loop {
                let start = Instant::now();
                let reply = from.get(&future).await?;
                if reply.status != 429 {
                    return anyhow::Ok((reply, start.elapsed()));
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }));
    }
    // While all three are in, a fourth read is refused at once.
    let fourth = user(9);
    let refused = loop {
        let reply = fourth.get(PODS).await?;
        if reply.status == 429 || waiting.iter().all(|w| w.is_finished()) {
            break reply;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    check_too_many(&refused)?;
    ensure!(
        refused.json()?["message"]
            .as_str()
            .is_some_and(|m| m.contains("Too many requests")),
        "{}",
        refused.text()
    );
    // The administrator (system:masters, as the plain port's user) is
    // served past the cap, as kube-apiserver serves it.
    let listed = admin.get(PODS).await?;
    ensure!(
        listed.status == 200,
        "the administrator was refused: {} {}",
        listed.status,
        listed.text()
    );
    // Writes have their own slots.
    let created = fourth
        .post(
            "/api/v1/namespaces/default/configmaps",
            &serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "during"}}),
        )
        .await?;
    ensure!(
        created.status == 201,
        "{} {}",
        created.status,
        created.text()
    );
    for wait in waiting {
        let (reply, took) = wait.await??;
        ensure!(reply.status == 504, "{} {}", reply.status, reply.text());
        let status = reply.json()?;
        ensure!(status["reason"] == "Timeout", "{status}");
        ensure!(
            took >= Duration::from_millis(1900) && took < Duration::from_secs(10),
            "answered after {took:?}"
        );
    }
    // The slots are free again.
    get_ok(&fourth, PODS).await?;
    // A request's own shorter ?timeout= applies.
    let start = Instant::now();
    let reply = fourth.get(&format!("{future}&timeout=500ms")).await?;
    ensure!(reply.status == 504, "{} {}", reply.status, reply.text());
    ensure!(
        start.elapsed() < Duration::from_millis(1800),
        "{:?}",
        start.elapsed()
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn each_client_may_hold_only_so_many_watches() -> Result<()> {
    let (_server, http) = start(&["--max-watches-per-client", "3"]).await?;
    let client = http.from_source(ip("127.0.0.5"));
    let watch = format!("{PODS}?watch=true");
    let mut open = Vec::new();
    for _ in 0..3 {
        open.push(client.watch(&watch).await?);
    }
    let reply = client.get(&watch).await?;
    check_too_many(&reply)?;
    ensure!(
        reply.text().contains("Too many watches"),
        "{}",
        reply.text()
    );
    // Another client is not affected, and lists are not watches.
    let other = http.from_source(ip("127.0.0.6"));
    drop(other.watch(&watch).await?);
    ensure!(client.get(PODS).await?.status == 200);
    // A closed watch frees its place once the server sees the connection go.
    drop(open.pop());
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match client.watch(&watch).await {
            Ok(stream) => {
                open.push(stream);
                break;
            }
            Err(err) if Instant::now() < deadline => {
                ensure!(format!("{err:#}").contains("429"), "{err:#}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(err) => return Err(err.context("the closed watch still counts after 10 s")),
        }
    }
    Ok(())
}

/// The mappings of process `pid` that were madvised into transparent huge
/// pages (`hg` among their VmFlags in /proc/PID/smaps).
fn huge_page_mappings(pid: u32) -> Result<Vec<String>> {
    let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps"))
        .with_context(|| format!("reading /proc/{pid}/smaps"))?;
    let mut mapping = "";
    let mut found = Vec::new();
    for line in smaps.lines() {
        match line.strip_prefix("VmFlags:") {
            Some(flags) if flags.split_whitespace().any(|f| f == "hg") => {
                found.push(mapping.to_string())
            }
            Some(_) => {}
            // A mapping's first line starts with its address range.
            None if line
                .split_whitespace()
                .next()
                .is_some_and(|w| w.contains('-') && !w.ends_with(':')) =>
            {
                mapping = line
            }
            None => {}
        }
    }
    Ok(found)
}

/// The server's allocator keeps its memory out of transparent huge pages:
/// memory it returns to the kernel and later uses again would otherwise
/// fault in (and zero) 2 MiB at a time, and partly used huge pages count
/// whole in its resident memory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_servers_allocator_asks_for_no_huge_pages() -> Result<()> {
    let (server, http) = start(&[]).await?;
    // Enough objects, written and read back, for the allocator to have
    // taken memory of its own from the kernel several times over.
    for i in 0..200 {
        let data: String = "x".repeat(8 << 10);
        let map = serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": format!("filler-{i}")},
            "data": {"filler": data},
        });
        let reply = http
            .post("/api/v1/namespaces/default/configmaps", &map)
            .await?;
        ensure!(reply.status == 201, "{} {}", reply.status, reply.text());
    }
    let listed = get_ok(&http, "/api/v1/namespaces/default/configmaps").await?;
    ensure!(
        listed["items"].as_array().map(Vec::len) == Some(200),
        "{listed}"
    );
    let pid = server.pid().context("the server's pid")?;
    let huge = huge_page_mappings(pid)?;
    ensure!(
        huge.is_empty(),
        "mappings madvised into huge pages: {huge:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_schedulers_bindings_wait_out_a_full_api_rather_than_fail() -> Result<()> {
    // Two writes at once: the pods' creators (the administrator, served
    // past the cap, but taking the slots while they are free) leave the
    // scheduler's bindings and events little room.
    let args = ["--max-mutating-requests-inflight".to_string(), "2".into()];
    let (_server, http) = ApiServer::start_with_plain_port(&args).await?;
    let node = serde_json::json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "big", "labels": {"kubernetes.io/hostname": "big"}},
        "status": {
            "capacity": {"cpu": "64", "memory": "64Gi", "pods": "500"},
            "allocatable": {"cpu": "64", "memory": "64Gi", "pods": "500"},
            "conditions": [{"type": "Ready", "status": "True"}]
        }
    });
    let created = http.post("/api/v1/nodes", &node).await?;
    ensure!(
        created.status == 201,
        "{} {}",
        created.status,
        created.text()
    );
    const PODS_CREATED: usize = 60;
    let mut creators = Vec::new();
    for creator in 0..12 {
        let http = http.clone();
        creators.push(tokio::spawn(async move {
            for i in (creator..PODS_CREATED).step_by(12) {
                let pod = serde_json::json!({
                    "apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": format!("p{i}")},
                    "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                        "resources": {"requests": {"cpu": "10m"}}}]}
                });
                let reply = http.post(PODS, &pod).await?;
                ensure!(
                    reply.status == 201,
                    "p{i}: {} {}",
                    reply.status,
                    reply.text()
                );
            }
            anyhow::Ok(())
        }));
    }
    for creator in creators {
        creator.await??;
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let pods = get_ok(&http, PODS).await?;
        let items = pods["items"].as_array().cloned().unwrap_or_default();
        let bound = items
            .iter()
            .filter(|p| p["spec"]["nodeName"] == "big")
            .count();
        if bound == PODS_CREATED {
            break;
        }
        ensure!(
            Instant::now() < deadline,
            "{bound} of {PODS_CREATED} pods bound after 60 s"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // No binding was given up because the API was full.
    let events = get_ok(&http, "/api/v1/namespaces/default/events").await?;
    let refused: Vec<String> = events["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["reason"] == "FailedScheduling")
        .map(|e| e["message"].as_str().unwrap_or_default().to_string())
        .collect();
    ensure!(refused.is_empty(), "bindings refused: {refused:?}");
    Ok(())
}
