//! `kubelet start`: pod start latency of skiff's real kubelet, measured as
//! Kubernetes' pod startup SLO is — pods created through the API, their
//! Running (container ready) seen on a watch — against a fresh `skiff up`
//! with its scheduler and kubelet. Each pod runs a real `sleep` process.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use bytes::Bytes;
use hyper::{Method, StatusCode};
use serde_json::Value;

use super::pod_events::{parse_event, PodTracker};
use super::procs;
use super::server::{Components, SkiffUp};
use crate::api::http::{ApiConnection, WatchStream};
use crate::report::Latencies;
use crate::versus::progress::Progress;
use crate::versus::system::Program;

pub const NODE_NAME: &str = "bench-node";
pub const NAMESPACE: &str = "bench-start";
/// What each pod's container runs: a process that stays up.
pub const COMMAND: [&str; 2] = ["sleep", "3600"];
/// How long the Node may take to register and turn Ready.
const NODE_READY_TIMEOUT: Duration = Duration::from_secs(60);
/// How long the pods may take to be deleted and their processes to end.
const TEARDOWN_TIMEOUT: Duration = Duration::from_secs(60);
const POLL: Duration = Duration::from_millis(50);

/// What to run.
pub struct StartConfig {
    pub pods: usize,
    /// Clients creating pods at once, each on its own connection.
    pub clients: usize,
    /// Pods get networks of their own (CNI) rather than the host's.
    pub pod_network: Option<super::server::PodNetwork>,
}

impl StartConfig {
    /// How long the pods may take to all run: generous, so that a slow
    /// debug build is measured rather than cut short.
    fn run_timeout(&self) -> Duration {
        Duration::from_secs(60) + Duration::from_millis(500) * self.pods as u32
    }
}

/// What one run gave.
pub struct StartResult {
    pub pods: usize,
    pub clients: usize,
    /// `skiff up` started → the Node Ready and schedulable.
    pub node_ready_in: Duration,
    /// Create sent → its 201 back.
    pub create_calls: Latencies,
    pub to_scheduled: Latencies,
    pub scheduled_to_running: Latencies,
    pub to_running: Latencies,
    /// First create sent → last pod seen Running.
    pub all_running: Duration,
    /// CPU time of the `skiff up` process over `all_running`.
    pub skiff_cpu: Duration,
    /// CPU time of the processes it started for the pods (shims and
    /// containers), all of it: they started within the run.
    pub pods_cpu: Duration,
    /// Container processes alive under `skiff up` once all ran.
    pub processes: usize,
    /// Delete sent → every pod's process gone.
    pub teardown: Duration,
    pub notes: Vec<String>,
}

/// Starts `skiff up` in `dir`, starts `config.pods` pods on its kubelet,
/// deletes them, stops it. Its pods' processes end with it on any error.
pub async fn measure(
    config: &StartConfig,
    skiff: &Program,
    dir: &Path,
    progress: &Progress,
) -> Result<StartResult> {
    progress.step("starting skiff up with its scheduler and kubelet".into());
    let components = Components::Node {
        name: NODE_NAME.into(),
        max_pods: config.pods,
        pod_network: config.pod_network.clone(),
        service_proxy: None,
    };
    let started = Instant::now();
    let server = SkiffUp::start(skiff, dir, &components).await?;
    let mut outcome = run_against(&server, config, started, progress).await;
    if outcome.is_ok() && config.pod_network.is_some() {
        // Pods deleted with grace 0 leave the API before their kubelet has
        // run the plugins' DEL: wait for every address to be free.
        progress.step("waiting for the pods' networks to be torn down".into());
        let allocations = dir.join("skiff/kubelet/cni/networks/skiff");
        if let Err(err) = wait_networks_gone(&allocations).await {
            outcome = Err(err);
        }
    }
    progress.step("stopping skiff up".into());
    // What it runs for its pods now (none, after a clean run), to check
    // that they end with it.
    let pods_procs = procs::descendants(server.pid());
    let log = server.log_tail();
    let stopped = server.stop().await;
    let leftovers: Vec<String> = pods_procs
        .iter()
        .filter(|p| procs::still_alive(p))
        .map(|p| format!("{} ({})", p.pid, p.comm))
        .collect();
    if !leftovers.is_empty() {
        bail!(
            "{} process(es) of skiff up's pods outlived it: {}; stop them by hand",
            leftovers.len(),
            leftovers.join(", ")
        );
    }
    let mut result = outcome.map_err(|err| anyhow!("{err:#}\n  skiff up's log ends:\n{log}"))?;
    result.notes.extend(stopped?);
    Ok(result)
}

/// Waits until host-local holds no address of the run's network (a file
/// per address, named after it).
async fn wait_networks_gone(allocations: &Path) -> Result<()> {
    let deadline = Instant::now() + TEARDOWN_TIMEOUT;
    loop {
        let held = std::fs::read_dir(allocations)
            .map(|entries| {
                entries
                    .filter_map(Result::ok)
                    .filter(|e| {
                        e.file_name()
                            .to_string_lossy()
                            .starts_with(|c: char| c.is_ascii_digit())
                    })
                    .count()
            })
            .unwrap_or(0);
        if held == 0 {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!(
                "{held} pod address(es) still allocated in {} {TEARDOWN_TIMEOUT:?} after the pods were deleted",
                allocations.display()
            );
        }
        tokio::time::sleep(POLL).await;
    }
}

/// The run proper: Node Ready, the watch opened, the pods created until
/// all run, then deleted.
async fn run_against(
    server: &SkiffUp,
    config: &StartConfig,
    started: Instant,
    progress: &Progress,
) -> Result<StartResult> {
    progress.step(format!("waiting for Node {NODE_NAME} to be Ready"));
    wait_node_ready(server, NODE_NAME).await?;
    let node_ready_in = started.elapsed();
    let mut conn = ApiConnection::connect(server.api).await?;
    create_namespace(&mut conn).await?;
    let revision = list_revision(&mut conn).await?;
    let mut watch = WatchStream::open(
        server.api,
        &format!(
            "{}?watch=true&resourceVersion={revision}&timeoutSeconds=3600",
            pods_path()
        ),
    )
    .await?;
    let before = procs::descendants(server.pid());
    if let Some(stray) = procs::named(&before, COMMAND[0]).first() {
        bail!(
            "skiff up runs a {} process (pid {}) before any pod was created",
            COMMAND[0],
            stray.pid
        );
    }

    progress.step(format!(
        "creating {} pods ({} clients) until all are Running",
        config.pods, config.clients
    ));
    progress.set_length(config.pods as u64);
    let mut tracker = PodTracker::default();
    let cpu_before = server.cpu_time();
    let first_sent = Instant::now();
    let deadline = first_sent + config.run_timeout();
    // Both in this task: whichever fails first cancels the other.
    let (created, ()) = tokio::try_join!(
        create_pods(server.api, config.pods, config.clients),
        async {
            read_watch(&mut watch, &mut tracker, deadline, progress, |t| {
                (t.running(), config.pods)
            })
            .await
            .with_context(|| format!("waiting for {} pods to run", config.pods))
        }
    )?;
    let skiff_cpu = server.cpu_time().saturating_sub(cpu_before);
    let pods_procs = procs::descendants(server.pid());
    let containers = procs::named(&pods_procs, COMMAND[0]).len();
    let pods_cpu = procs::cpu_time(&pods_procs);

    let mut result = figures(config, &created, &tracker, first_sent)?;
    result.node_ready_in = node_ready_in;
    result.skiff_cpu = skiff_cpu;
    result.pods_cpu = pods_cpu;
    result.processes = containers;
    if containers != config.pods {
        bail!(
            "{} pods Running but {containers} {} processes under skiff up",
            config.pods,
            COMMAND[0]
        );
    }

    progress.step(format!("deleting {} pods", config.pods));
    progress.set_length(config.pods as u64);
    result.teardown = delete_pods(server, &mut watch, &mut tracker, config.pods, progress).await?;
    Ok(result)
}

/// The latencies of the pods created, as the watch saw them.
fn figures(
    config: &StartConfig,
    created: &[Created],
    tracker: &PodTracker,
    first_sent: Instant,
) -> Result<StartResult> {
    let mut create_calls = Vec::with_capacity(created.len());
    let (mut to_scheduled, mut scheduled_to_running, mut to_running) =
        (Vec::new(), Vec::new(), Vec::new());
    let mut last_running = first_sent;
    for pod in created {
        let name = pod_name(pod.index);
        let seen = tracker
            .get(&name)
            .with_context(|| format!("the watch never showed pod {name}"))?;
        let (Some(scheduled), Some(running)) = (seen.scheduled, seen.running) else {
            bail!("the watch showed pod {name} Running but not bound to a node first");
        };
        create_calls.push(pod.acknowledged - pod.sent);
        to_scheduled.push(scheduled.saturating_duration_since(pod.sent));
        scheduled_to_running.push(running.saturating_duration_since(scheduled));
        to_running.push(running.saturating_duration_since(pod.sent));
        last_running = last_running.max(running);
    }
    Ok(StartResult {
        pods: config.pods,
        clients: config.clients,
        node_ready_in: Duration::ZERO,
        create_calls: Latencies::from_durations(&create_calls),
        to_scheduled: Latencies::from_durations(&to_scheduled),
        scheduled_to_running: Latencies::from_durations(&scheduled_to_running),
        to_running: Latencies::from_durations(&to_running),
        all_running: last_running - first_sent,
        skiff_cpu: Duration::ZERO,
        pods_cpu: Duration::ZERO,
        processes: 0,
        teardown: Duration::ZERO,
        notes: Vec::new(),
    })
}

/// Polls the Node until it is Ready with no taint keeping pods off it.
async fn wait_node_ready(server: &SkiffUp, node: &str) -> Result<()> {
    let deadline = Instant::now() + NODE_READY_TIMEOUT;
    let mut conn = ApiConnection::connect(server.api).await?;
    let mut last = String::from("not registered");
    while Instant::now() < deadline {
        let answer = conn.get(&format!("/api/v1/nodes/{node}")).await?;
        if answer.status == StatusCode::OK {
            let value: Value = serde_json::from_slice(&answer.body).context("a Node's JSON")?;
            match node_blockers(&value) {
                blockers if blockers.is_empty() => return Ok(()),
                blockers => last = blockers.join("; "),
            }
        } else if answer.status != StatusCode::NOT_FOUND {
            answer.expect(StatusCode::OK, &format!("reading Node {node}"))?;
        }
        tokio::time::sleep(POLL).await;
    }
    bail!(
        "Node {node} was not Ready and schedulable within {NODE_READY_TIMEOUT:?}: {last}\n\
         (a node under disk or memory pressure takes no pods: see skiff up's log)"
    )
}

/// What keeps pods off a Node: not Ready, or a NoSchedule / NoExecute taint.
pub fn node_blockers(node: &Value) -> Vec<String> {
    let mut blockers = Vec::new();
    let conditions = node["status"]["conditions"].as_array();
    let ready = conditions
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Ready");
    match ready {
        Some(c) if c["status"] == "True" => {}
        Some(c) => blockers.push(format!(
            "Ready is {} ({})",
            c["status"].as_str().unwrap_or("?"),
            c["message"].as_str().unwrap_or("")
        )),
        None => blockers.push("no Ready condition yet".into()),
    }
    for taint in node["spec"]["taints"].as_array().into_iter().flatten() {
        if matches!(taint["effect"].as_str(), Some("NoSchedule" | "NoExecute")) {
            blockers.push(format!(
                "taint {}:{}",
                taint["key"].as_str().unwrap_or("?"),
                taint["effect"].as_str().unwrap_or("?")
            ));
        }
    }
    blockers
}

fn pods_path() -> String {
    format!("/api/v1/namespaces/{NAMESPACE}/pods")
}

pub fn pod_name(index: usize) -> String {
    format!("start-{index:05}")
}

/// Pod `index`: one container running `COMMAND`; the image is recorded,
/// not pulled.
pub fn pod_json(index: usize) -> Bytes {
    let pod = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod_name(index),
            "namespace": NAMESPACE,
            "labels": {"app": "skiff-bench-start"},
        },
        "spec": {
            "containers": [{
                "name": "sleep",
                "image": "busybox",
                "command": COMMAND,
            }],
        },
    });
    Bytes::from(pod.to_string())
}

async fn create_namespace(conn: &mut ApiConnection) -> Result<()> {
    let body = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": NAMESPACE},
    });
    let answer = conn
        .post("/api/v1/namespaces", Bytes::from(body.to_string()))
        .await?;
    answer.expect(
        StatusCode::CREATED,
        &format!("creating namespace {NAMESPACE}"),
    )?;
    Ok(())
}

/// The namespace's pods' resourceVersion, where the watch starts.
async fn list_revision(conn: &mut ApiConnection) -> Result<String> {
    let what = "listing the namespace's pods";
    let body = conn
        .get(&format!("{}?limit=1", pods_path()))
        .await?
        .expect(StatusCode::OK, what)?;
    let list: Value = serde_json::from_slice(&body).context(what)?;
    list["metadata"]["resourceVersion"]
        .as_str()
        .map(str::to_string)
        .context("a list answered without metadata.resourceVersion")
}

/// One pod's create call.
struct Created {
    index: usize,
    sent: Instant,
    acknowledged: Instant,
}

/// Creates pods 0..`pods` with `clients` clients, each on its own
/// connection taking the next index until none is left. The clients are
/// futures of the caller's task, so that dropping it stops them all.
async fn create_pods(api: SocketAddr, pods: usize, clients: usize) -> Result<Vec<Created>> {
    let next = AtomicUsize::new(0);
    let clients = (0..clients.clamp(1, pods.max(1))).map(|_| create_client(api, &next, pods));
    let created = futures::future::try_join_all(clients).await?;
    Ok(created.into_iter().flatten().collect())
}

/// One client: takes the next index until `pods`, creates that pod.
async fn create_client(api: SocketAddr, next: &AtomicUsize, pods: usize) -> Result<Vec<Created>> {
    let mut conn = ApiConnection::connect(api).await?;
    let mut created = Vec::new();
    loop {
        let index = next.fetch_add(1, Ordering::Relaxed);
        if index >= pods {
            return Ok(created);
        }
        let sent = Instant::now();
        let answer = conn.post(&pods_path(), pod_json(index)).await?;
        let acknowledged = Instant::now();
        answer.expect(
            StatusCode::CREATED,
            &format!("creating pod {}", pod_name(index)),
        )?;
        created.push(Created {
            index,
            sent,
            acknowledged,
        });
    }
}

/// Reads the watch into `tracker` until `progress_of` (pods done, pods
/// to do) says all are done, counting them on the bar; fails on a pod
/// that ended instead of running, an ERROR event, the watch ending, or
/// `deadline`.
async fn read_watch(
    watch: &mut WatchStream,
    tracker: &mut PodTracker,
    deadline: Instant,
    progress: &Progress,
    progress_of: impl Fn(&PodTracker) -> (usize, usize),
) -> Result<()> {
    let mut shown = 0;
    loop {
        let (done, target) = progress_of(tracker);
        progress.inc(done.saturating_sub(shown) as u64);
        shown = done;
        if done >= target {
            return Ok(());
        }
        let mut bad_line = None;
        let read = watch.next_lines(|line, at| match parse_event(line) {
            Ok(Some(event)) => tracker.observe(&event, at),
            Ok(None) => {}
            Err(err) => bad_line = bad_line.take().or(Some(err)),
        });
        let more = tokio::time::timeout_at(deadline.into(), read)
            .await
            .map_err(|_| {
                anyhow!(
                    "no progress within the time allowed: {} scheduled, {} Running, {} deleted; \
                     the latest pod not Running: {}",
                    tracker.scheduled(),
                    tracker.running(),
                    tracker.deleted(),
                    tracker.waiting().unwrap_or_else(|| "(none seen)".into())
                )
            })??;
        if let Some(err) = bad_line {
            return Err(err);
        }
        if let Some(why) = tracker.finished() {
            bail!("a pod ended instead of running: {why}");
        }
        if !more {
            bail!("the API server ended the watch");
        }
    }
}

/// Deletes every pod of the namespace at once with no grace period, then
/// waits for the watch to show them gone and their processes to end.
/// Returns delete sent → the last process gone.
async fn delete_pods(
    server: &SkiffUp,
    watch: &mut WatchStream,
    tracker: &mut PodTracker,
    pods: usize,
    progress: &Progress,
) -> Result<Duration> {
    // The benchmark's own client has no DELETE; the kube client the
    // simulator uses does.
    let client = skiff_kubelet::simulate::client_for(&server.url())?;
    let request = hyper::Request::builder()
        .method(Method::DELETE)
        .uri(format!("{}?gracePeriodSeconds=0", pods_path()))
        .body(Vec::new())
        .context("building the delete request")?;
    let sent = Instant::now();
    client
        .request_text(request)
        .await
        .with_context(|| format!("deleting the pods of namespace {NAMESPACE}"))?;
    let deadline = sent + TEARDOWN_TIMEOUT;
    read_watch(watch, tracker, deadline, progress, |t| (t.deleted(), pods))
        .await
        .context("waiting for the watch to show the pods deleted")?;
    loop {
        let left = procs::descendants(server.pid());
        let running = procs::named(&left, COMMAND[0]).len();
        if running == 0 {
            return Ok(sent.elapsed());
        }
        if Instant::now() > deadline {
            bail!(
                "{running} {} process(es) still run {TEARDOWN_TIMEOUT:?} after their pods were deleted",
                COMMAND[0]
            );
        }
        tokio::time::sleep(POLL).await;
    }
}

#[cfg(test)]
mod tests {
    use super::super::pod_events::PodEvent;
    use super::*;

    #[test]
    fn pods_run_sleep_with_an_image_recorded() {
        let pod: Value = serde_json::from_slice(&pod_json(7)).unwrap();
        assert_eq!(pod["metadata"]["name"], "start-00007");
        assert_eq!(pod["metadata"]["namespace"], NAMESPACE);
        let container = &pod["spec"]["containers"][0];
        assert_eq!(container["image"], "busybox");
        assert_eq!(container["command"], serde_json::json!(["sleep", "3600"]));
    }

    #[test]
    fn latencies_are_split_at_the_binding() {
        let t0 = Instant::now();
        let at = |ms| t0 + Duration::from_millis(ms);
        let mut tracker = PodTracker::default();
        let mut created = Vec::new();
        for index in 0..4u64 {
            let event = |node: bool, phase: &str| PodEvent {
                deleted: false,
                name: pod_name(index as usize),
                node_name: node.then(|| NODE_NAME.to_string()),
                phase: Some(phase.into()),
                ready: phase == "Running",
                reason: None,
            };
            // Pod i: sent at 10·i ms, bound 100 ms later, Running 200·(i+1) ms after that.
            let sent = 10 * index;
            tracker.observe(&event(false, "Pending"), at(sent + 1));
            tracker.observe(&event(true, "Pending"), at(sent + 100));
            tracker.observe(&event(true, "Running"), at(sent + 100 + 200 * (index + 1)));
            created.push(Created {
                index: index as usize,
                sent: at(sent),
                acknowledged: at(sent + 5),
            });
        }
        let config = StartConfig {
            pods: 4,
            clients: 2,
            pod_network: None,
        };
        let r = figures(&config, &created, &tracker, t0).unwrap();
        let ms = Duration::from_millis;
        assert_eq!(r.to_scheduled.max(), ms(100));
        assert_eq!(r.scheduled_to_running.percentile(50.0), ms(400));
        assert_eq!(r.scheduled_to_running.max(), ms(800));
        assert_eq!(r.to_running.percentile(50.0), ms(500));
        assert_eq!(r.to_running.max(), ms(900));
        assert_eq!(r.create_calls.max(), ms(5));
        // The last pod: sent at 30 ms, Running 900 ms later.
        assert_eq!(r.all_running, ms(930));
        created.push(Created {
            index: 9,
            sent: t0,
            acknowledged: t0,
        });
        let err = figures(&config, &created, &tracker, t0).err().unwrap();
        assert!(
            err.to_string().contains("never showed pod start-00009"),
            "{err}"
        );
    }

    #[test]
    fn a_node_takes_pods_once_ready_and_untainted() {
        let node = |ready: &str, taints: Value| {
            serde_json::json!({
                "spec": {"taints": taints},
                "status": {"conditions": [
                    {"type": "DiskPressure", "status": "False"},
                    {"type": "Ready", "status": ready, "message": "kubelet says so"},
                ]},
            })
        };
        assert!(node_blockers(&node("True", Value::Null)).is_empty());
        assert_eq!(
            node_blockers(&node("False", Value::Null)),
            vec!["Ready is False (kubelet says so)"]
        );
        let tainted = node(
            "True",
            serde_json::json!([
                {"key": "node.kubernetes.io/disk-pressure", "effect": "NoSchedule"},
                {"key": "soft", "effect": "PreferNoSchedule"},
            ]),
        );
        assert_eq!(
            node_blockers(&tainted),
            vec!["taint node.kubernetes.io/disk-pressure:NoSchedule"]
        );
        assert_eq!(
            node_blockers(&serde_json::json!({})),
            vec!["no Ready condition yet"]
        );
    }
}
