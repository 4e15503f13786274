//! One run of `controllers`: a fresh `skiff up` with its scheduler and
//! controller-manager, simulated nodes in this process, a Deployment
//! created and waited for until every replica is available, then its
//! image changed and waited for until the rollout is complete — timed from
//! the Deployment's status, as `kubectl rollout status` reads it.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use bytes::Bytes;
use hyper::StatusCode;
use serde_json::{json, Value};
use skiff_kubelet::simulate::{self, SimulateConfig, Simulator};

use crate::api::http::ApiConnection;
use crate::api::server::STOP_GRACE;
use crate::kubelet::server::{Components, SkiffUp, SIMULATED_CLUSTER_CIDR};
use crate::machine;
use crate::versus::process::ServerProcess;
use crate::versus::progress::Progress;
use crate::versus::system::Program;

/// How often the Deployment's status is read.
pub const POLL: Duration = Duration::from_millis(100);
/// Pods a simulated node takes (the kubelet's default max pods).
pub const PODS_PER_NODE: usize = 110;
const NAMESPACE: &str = "bench-controllers";
const DEPLOYMENT: &str = "web";
const FIRST_IMAGE: &str = "busybox:1.36";
const SECOND_IMAGE: &str = "busybox:1.37";

pub struct RolloutConfig {
    pub replicas: u32,
    pub nodes: usize,
    /// The controller-manager as a process of its own, not in `skiff up`.
    pub controller_manager_process: bool,
}

impl RolloutConfig {
    /// Generous, so that a slow debug build is measured, not cut short.
    fn phase_timeout(&self) -> Duration {
        Duration::from_secs(120) + Duration::from_millis(200) * self.replicas
    }

    /// What the default strategy lets go unavailable (25%, rounded down).
    pub fn max_unavailable(&self) -> u32 {
        self.replicas / 4
    }

    /// What the default strategy lets run above replicas (25%, rounded up).
    pub fn max_surge(&self) -> u32 {
        self.replicas.div_ceil(4)
    }
}

/// One timed phase: from its start to its last milestone.
#[derive(Default)]
pub struct Phase {
    /// Start → status.replicas reached the Deployment's replicas with
    /// every one of the new template (pods created).
    pub created: Option<Duration>,
    /// Start → every replica ready.
    pub ready: Option<Duration>,
    /// Start → complete: observed, updated, no old replicas, all available.
    pub complete: Duration,
    /// The lowest status.availableReplicas seen once the phase started
    /// with every replica available (the rollout only).
    pub min_available: Option<u32>,
    /// The most status.replicas seen (old and new pods).
    pub max_replicas: u32,
    /// CPU time of `skiff up` over the phase.
    pub skiff_cpu: Duration,
    /// Status reads made.
    pub polls: u64,
}

pub struct RolloutResult {
    pub nodes_ready_in: Duration,
    pub create: Phase,
    pub update: Phase,
    /// ReplicaSets of the Deployment at the end (one per template).
    pub replica_sets: usize,
    /// Peak resident memory of `skiff up` over the run.
    pub skiff_peak_rss: Option<u64>,
    /// The controller-manager's own process, when it ran as one.
    pub controller_manager: Option<ProcessCost>,
    pub notes: Vec<String>,
}

/// What a process of the run cost.
pub struct ProcessCost {
    /// Peak resident memory (VmHWM).
    pub peak_rss: Option<u64>,
    /// CPU time over the run.
    pub cpu: Duration,
}

/// Starts `skiff up` in `dir` (and the controller-manager beside it if it
/// runs apart), runs the two phases, stops everything.
pub async fn measure(
    config: &RolloutConfig,
    skiff: &Program,
    dir: &Path,
    progress: &Progress,
) -> Result<RolloutResult> {
    let components = match config.controller_manager_process {
        false => Components::Controllers,
        true => Components::Scheduler,
    };
    progress.step("starting skiff up with its scheduler and controllers".into());
    let server = SkiffUp::start(skiff, dir, &components).await?;
    let manager = match config.controller_manager_process {
        false => None,
        true => match start_controller_manager(skiff, dir, &server) {
            Ok(manager) => Some(manager),
            Err(err) => {
                let _ = server.stop().await;
                return Err(err);
            }
        },
    };
    let outcome = with_nodes(&server, config, progress).await;
    let skiff_peak_rss = machine::peak_resident_bytes_of(server.pid());
    let manager_cost = manager.as_ref().map(|m| ProcessCost {
        peak_rss: machine::peak_resident_bytes_of(m.pid()),
        cpu: m.cpu_time(),
    });
    let mut notes = Vec::new();
    if let Some(manager) = manager {
        progress.step("stopping the controller-manager".into());
        let log = manager.log_tail();
        let (status, killed) = manager.stop(STOP_GRACE).await?;
        if killed {
            notes.push(format!("the controller-manager did not stop within {STOP_GRACE:?} of SIGTERM and was killed ({status})\n{log}"));
        }
    }
    progress.step("stopping skiff up".into());
    let log = server.log_tail();
    let note = server.stop().await?;
    let mut result = outcome.map_err(|err| anyhow!("{err:#}\n  skiff up's log ends:\n{log}"))?;
    result.skiff_peak_rss = skiff_peak_rss;
    result.controller_manager = manager_cost;
    result.notes.extend(notes);
    result.notes.extend(note);
    Ok(result)
}

/// `skiff controller-manager` for `server`'s plain loopback port (where
/// every request acts as the administrator), without leader election.
fn start_controller_manager(
    skiff: &Program,
    dir: &Path,
    server: &SkiffUp,
) -> Result<ServerProcess> {
    let kubeconfig = dir.join("controller-manager.kubeconfig");
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: skiff\n  cluster: {{server: \"{}\"}}\n\
         users:\n- name: admin\n  user: {{}}\ncontexts:\n- name: skiff\n  context: {{cluster: skiff, user: admin}}\n\
         current-context: skiff\n",
        server.url()
    );
    std::fs::write(&kubeconfig, text)
        .with_context(|| format!("writing {}", kubeconfig.display()))?;
    let args = [
        "controller-manager".to_string(),
        "--kubeconfig".into(),
        kubeconfig.display().to_string(),
        "--leader-elect=false".into(),
        // Room for every simulated node's pod CIDR.
        format!("--cluster-cidr={SIMULATED_CLUSTER_CIDR}"),
    ];
    ServerProcess::spawn(
        "skiff controller-manager",
        &skiff.path,
        &args,
        &dir.join("controller-manager.log"),
    )
}

/// Runs the simulated nodes around the phases.
async fn with_nodes(
    server: &SkiffUp,
    config: &RolloutConfig,
    progress: &Progress,
) -> Result<RolloutResult> {
    let simulator = Arc::new(Simulator::new(SimulateConfig {
        count: config.nodes,
        name_prefix: "sim".into(),
        ..SimulateConfig::default()
    }));
    let stats = simulator.stats();
    let client = simulate::client_for(&server.url())?;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = Arc::clone(&simulator);
    let task = tokio::spawn(async move {
        running
            .run(client, async move {
                let _ = stopped.await;
            })
            .await
    });
    progress.step(format!("registering {} simulated nodes", config.nodes));
    let started = Instant::now();
    while stats.snapshot().registration_time.is_none() {
        if task.is_finished() || started.elapsed() > Duration::from_secs(120) {
            bail!("the simulated nodes did not register within 120 s");
        }
        tokio::time::sleep(POLL).await;
    }
    let nodes_ready_in = started.elapsed();
    let outcome = phases(server, config, progress).await;
    let _ = stop.send(());
    match task.await {
        Ok(Ok(())) => {}
        Ok(Err(err)) => return Err(err.context("the simulated nodes failed")),
        Err(err) => bail!("the simulator task failed: {err}"),
    }
    let mut result = outcome?;
    result.nodes_ready_in = nodes_ready_in;
    let failed = stats.snapshot().renewal_errors;
    if failed > 0 {
        result.notes.push(format!(
            "{failed} Lease renewals of the simulated nodes failed"
        ));
    }
    Ok(result)
}

async fn phases(
    server: &SkiffUp,
    config: &RolloutConfig,
    progress: &Progress,
) -> Result<RolloutResult> {
    let mut conn = ApiConnection::connect(server.api).await?;
    let namespace =
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}});
    conn.post("/api/v1/namespaces", body(&namespace)?)
        .await?
        .expect(StatusCode::CREATED, "creating the namespace")?;

    progress.step(format!(
        "Deployment of {} replicas: created → available",
        config.replicas
    ));
    let cpu = server.cpu_time();
    let start = Instant::now();
    conn.post(&deployments_path(), body(&deployment(config.replicas))?)
        .await?
        .expect(StatusCode::CREATED, "creating the Deployment")?;
    let mut create = follow(&mut conn, config, start, FIRST_IMAGE, false, progress).await?;
    create.skiff_cpu = server.cpu_time().saturating_sub(cpu);

    progress.step(format!(
        "rolling {} replicas to {SECOND_IMAGE}",
        config.replicas
    ));
    let cpu = server.cpu_time();
    let start = Instant::now();
    change_image(&mut conn, SECOND_IMAGE).await?;
    let mut update = follow(&mut conn, config, start, SECOND_IMAGE, true, progress).await?;
    update.skiff_cpu = server.cpu_time().saturating_sub(cpu);

    let replica_sets = count_replica_sets(&mut conn).await?;
    Ok(RolloutResult {
        nodes_ready_in: Duration::ZERO,
        create,
        update,
        replica_sets,
        skiff_peak_rss: None,
        controller_manager: None,
        notes: Vec::new(),
    })
}

/// Reads the Deployment's status until the rollout to `image` is complete.
async fn follow(
    conn: &mut ApiConnection,
    config: &RolloutConfig,
    start: Instant,
    image: &str,
    rolling: bool,
    progress: &Progress,
) -> Result<Phase> {
    let want = config.replicas;
    let deadline = start + config.phase_timeout();
    let mut phase = Phase {
        min_available: rolling.then_some(want),
        ..Phase::default()
    };
    progress.set_length(u64::from(want));
    let mut shown = 0;
    loop {
        let object = get_deployment(conn).await?;
        phase.polls += 1;
        let status = Status::of(&object, image)?;
        phase.max_replicas = phase.max_replicas.max(status.replicas);
        if let Some(min) = &mut phase.min_available {
            *min = (*min).min(status.available);
        }
        // Counts of an older generation say nothing of this template.
        let current = status.observed >= status.generation;
        if phase.created.is_none() && current && status.updated >= want {
            phase.created = Some(start.elapsed());
        }
        if phase.ready.is_none() && current && status.updated >= want && status.ready >= want {
            phase.ready = Some(start.elapsed());
        }
        let done = u64::from(status.updated.min(status.available));
        progress.inc(done.saturating_sub(shown));
        shown = shown.max(done);
        if status.complete(want) {
            phase.complete = start.elapsed();
            return Ok(phase);
        }
        if Instant::now() > deadline {
            bail!(
                "the rollout to {image} was not complete within {:?}: {}",
                config.phase_timeout(),
                status.describe()
            );
        }
        tokio::time::sleep(POLL).await;
    }
}

/// The parts of a Deployment's status a rollout is judged by.
struct Status {
    generation: i64,
    observed: i64,
    replicas: u32,
    updated: u32,
    ready: u32,
    available: u32,
}

impl Status {
    /// Reads `object`, checking that its template is of `image`.
    fn of(object: &Value, image: &str) -> Result<Status> {
        let template_image = &object["spec"]["template"]["spec"]["containers"][0]["image"];
        if template_image != image {
            bail!("the Deployment's template is {template_image}, not {image}");
        }
        let count = |field: &str| object["status"][field].as_u64().unwrap_or(0) as u32;
        Ok(Status {
            generation: object["metadata"]["generation"].as_i64().unwrap_or(0),
            observed: object["status"]["observedGeneration"].as_i64().unwrap_or(0),
            replicas: count("replicas"),
            updated: count("updatedReplicas"),
            ready: count("readyReplicas"),
            available: count("availableReplicas"),
        })
    }

    /// What `kubectl rollout status` waits for.
    fn complete(&self, want: u32) -> bool {
        self.observed >= self.generation
            && self.updated == want
            && self.replicas == want
            && self.available == want
    }

    fn describe(&self) -> String {
        format!(
            "generation {} observed {}, replicas {}, updated {}, ready {}, available {}",
            self.generation, self.observed, self.replicas, self.updated, self.ready, self.available
        )
    }
}

fn deployments_path() -> String {
    format!("/apis/apps/v1/namespaces/{NAMESPACE}/deployments")
}

fn body(value: &Value) -> Result<Bytes> {
    Ok(Bytes::from(serde_json::to_vec(value)?))
}

fn deployment(replicas: u32) -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": DEPLOYMENT, "namespace": NAMESPACE},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": DEPLOYMENT}},
            "template": {
                "metadata": {"labels": {"app": DEPLOYMENT}},
                "spec": {
                    "terminationGracePeriodSeconds": 0,
                    "containers": [{
                        "name": "app",
                        "image": FIRST_IMAGE,
                        "command": ["sleep", "3600"],
                        "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}},
                    }],
                },
            },
        },
    })
}

async fn get_deployment(conn: &mut ApiConnection) -> Result<Value> {
    let path = format!("{}/{DEPLOYMENT}", deployments_path());
    let bytes = conn
        .get(&path)
        .await?
        .expect(StatusCode::OK, "reading the Deployment")?;
    serde_json::from_slice(&bytes).context("the Deployment as JSON")
}

/// Replaces the template's image (read, change, write; again on a
/// conflict with the controllers' writes).
async fn change_image(conn: &mut ApiConnection, image: &str) -> Result<()> {
    let path = format!("{}/{DEPLOYMENT}", deployments_path());
    for _ in 0..20 {
        let mut object = get_deployment(conn).await?;
        object["spec"]["template"]["spec"]["containers"][0]["image"] = json!(image);
        let answer = conn.put(&path, body(&object)?).await?;
        if answer.status == StatusCode::CONFLICT {
            continue;
        }
        answer.expect(StatusCode::OK, "changing the Deployment's image")?;
        return Ok(());
    }
    bail!("changing the Deployment's image conflicted 20 times in a row")
}

async fn count_replica_sets(conn: &mut ApiConnection) -> Result<usize> {
    let path = format!("/apis/apps/v1/namespaces/{NAMESPACE}/replicasets");
    let bytes = conn
        .get(&path)
        .await?
        .expect(StatusCode::OK, "listing ReplicaSets")?;
    let list: Value = serde_json::from_slice(&bytes).context("the ReplicaSets as JSON")?;
    Ok(list["items"].as_array().map_or(0, Vec::len))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rollout_is_complete_as_kubectl_rollout_status_reads_it() {
        let object = |observed: i64, replicas: u32, updated: u32, available: u32| {
            json!({
                "metadata": {"generation": 2},
                "spec": {"template": {"spec": {"containers": [{"image": SECOND_IMAGE}]}}},
                "status": {"observedGeneration": observed, "replicas": replicas,
                           "updatedReplicas": updated, "readyReplicas": available,
                           "availableReplicas": available},
            })
        };
        let status = |o: &Value| Status::of(o, SECOND_IMAGE).unwrap();
        assert!(status(&object(2, 10, 10, 10)).complete(10));
        assert!(!status(&object(1, 10, 10, 10)).complete(10), "not observed");
        assert!(
            !status(&object(2, 12, 10, 10)).complete(10),
            "old pods left"
        );
        assert!(
            !status(&object(2, 10, 10, 9)).complete(10),
            "one unavailable"
        );
        assert!(Status::of(&object(2, 10, 10, 10), FIRST_IMAGE).is_err());
    }

    #[test]
    fn the_default_strategy_allows_a_quarter() {
        let config = RolloutConfig {
            replicas: 1000,
            nodes: 100,
            controller_manager_process: false,
        };
        assert_eq!(config.max_unavailable(), 250);
        assert_eq!(config.max_surge(), 250);
        let odd = RolloutConfig {
            replicas: 10,
            nodes: 1,
            controller_manager_process: false,
        };
        assert_eq!((odd.max_unavailable(), odd.max_surge()), (2, 3));
    }
}
