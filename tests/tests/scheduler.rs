//! The scheduler in `skiff up`, driven with the real kubectl through the
//! scenarios the Kubernetes documentation describes: resources, taints and
//! tolerations, node affinity (and a DaemonSet-style pod pinned by
//! metadata.name), pod anti-affinity across zones, topology spread,
//! preemption, and an unschedulable pod scheduled once a fitting node is
//! added. Nodes are plain Node objects: no kubelet is needed to schedule.

use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Result};
use skiff_tests::api_server::with_kubectl_scheduling as session;
use skiff_tests::kubectl::Kubectl;

const SCHEDULE_TIMEOUT: Duration = Duration::from_secs(30);

/// A Node with allocatable cpu, pods and labels, and optional taints.
fn node(name: &str, cpu: &str, labels: &str, taints: &str) -> String {
    format!(
        "apiVersion: v1
kind: Node
metadata:
  name: {name}
  labels: {{kubernetes.io/hostname: {name}{labels}}}
spec:
  taints: [{taints}]
status:
  capacity: {{cpu: \"{cpu}\", memory: 8Gi, pods: \"110\"}}
  allocatable: {{cpu: \"{cpu}\", memory: 8Gi, pods: \"110\"}}
  conditions:
  - {{type: Ready, status: \"True\"}}
---
"
    )
}

/// A pod asking for `cpu`, with extra spec lines (indented two spaces).
fn pod(name: &str, labels: &str, cpu: &str, spec: &str) -> String {
    format!(
        "apiVersion: v1
kind: Pod
metadata:
  name: {name}
  labels: {{{labels}}}
spec:
  terminationGracePeriodSeconds: 0
  containers:
  - name: c
    image: registry.k8s.io/pause:3.10
    resources: {{requests: {{cpu: \"{cpu}\"}}}}
{spec}---
"
    )
}

fn apply(kubectl: &Kubectl, file: &str, text: &str) -> Result<()> {
    kubectl.manifest(file, text)?;
    kubectl.ok(&["apply", "-f", file])?;
    Ok(())
}

fn node_of(kubectl: &Kubectl, pod: &str) -> Result<String> {
    kubectl.ok(&["get", "pod", pod, "-o", "jsonpath={.spec.nodeName}"])
}

/// Waits until `pod` is bound; returns its node.
async fn bound(kubectl: &Kubectl, pod: &str) -> Result<String> {
    let deadline = Instant::now() + SCHEDULE_TIMEOUT;
    loop {
        let node = node_of(kubectl, pod)?;
        if !node.is_empty() {
            return Ok(node);
        }
        if Instant::now() > deadline {
            let events = kubectl.ok(&[
                "get",
                "events",
                "--field-selector",
                &format!("involvedObject.name={pod}"),
            ])?;
            bail!("pod {pod} was not scheduled in {SCHEDULE_TIMEOUT:?}; its events:\n{events}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Returns once the scheduler's cache has `node` — and so every node
/// written before it, since a watch delivers in order: a probe pod that
/// only `node` takes is bound, then deleted.
async fn scheduler_sees(kubectl: &Kubectl, node: &str) -> Result<()> {
    let probe = format!("probe-{node}");
    let pinned = format!("  nodeSelector: {{kubernetes.io/hostname: {node}}}\n");
    let manifest = pod(&probe, "probe: \"yes\"", "1m", &pinned);
    apply(kubectl, &format!("{probe}.yaml"), &manifest)?;
    let at = bound(kubectl, &probe).await?;
    ensure!(at == node, "the probe went to {at}");
    kubectl.ok(&["delete", "pod", &probe, "--wait=false"])?;
    Ok(())
}

/// Waits for a FailedScheduling event of `pod` whose message contains
/// `text`; returns the message.
async fn failed(kubectl: &Kubectl, pod: &str, text: &str) -> Result<String> {
    let deadline = Instant::now() + SCHEDULE_TIMEOUT;
    let selector = format!("involvedObject.name={pod},reason=FailedScheduling");
    loop {
        let messages = kubectl.ok(&[
            "get",
            "events",
            "--field-selector",
            &selector,
            "-o",
            "jsonpath={range .items[*]}{.message}{\"\\n\"}{end}",
        ])?;
        if let Some(line) = messages.lines().find(|m| m.contains(text)) {
            return Ok(line.to_string());
        }
        if Instant::now() > deadline {
            bail!("no FailedScheduling event of {pod} says {text:?}; they say:\n{messages}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unschedulable_pod_is_scheduled_once_a_fitting_node_is_added() -> Result<()> {
    let Some((server, kubectl)) =
        session("an_unschedulable_pod_is_scheduled_once_a_fitting_node_is_added").await?
    else {
        return Ok(());
    };
    apply(&kubectl, "small.yaml", &node("small", "1", "", ""))?;
    apply(
        &kubectl,
        "pods.yaml",
        &(pod("fits", "app: a", "500m", "") + &pod("big", "app: b", "2", "")),
    )?;
    assert_eq!(bound(&kubectl, "fits").await?, "small");
    let message = failed(&kubectl, "big", "Insufficient cpu").await?;
    assert_eq!(message, "0/1 nodes are available: 1 Insufficient cpu. preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod.");
    let condition = kubectl.ok(&[
        "get", "pod", "big", "-o",
        "jsonpath={.status.conditions[?(@.type==\"PodScheduled\")].status}/{.status.conditions[?(@.type==\"PodScheduled\")].reason}",
    ])?;
    assert_eq!(condition, "False/Unschedulable");
    // A change to the node sends the pod back; its next failure, the
    // same, counts on the first event instead of adding one.
    kubectl.ok(&["label", "node", "small", "touched=yes"])?;
    let deadline = Instant::now() + SCHEDULE_TIMEOUT;
    let counts = loop {
        let counts = kubectl.ok(&[
            "get",
            "events",
            "--field-selector",
            "involvedObject.name=big,reason=FailedScheduling",
            "-o",
            "jsonpath={range .items[*]}{.count} {end}",
        ])?;
        if counts.trim() != "1" || Instant::now() > deadline {
            break counts;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    if counts.trim() != "2" {
        let events = kubectl.ok(&["get", "events", "-o", "wide"])?;
        bail!(
            "expected one FailedScheduling event counted twice, found counts {counts:?}:\n{events}\nserver log:\n{}",
            server.stderr()
        );
    }
    let scheduled = kubectl.ok(&[
        "get",
        "events",
        "--field-selector",
        "involvedObject.name=fits,reason=Scheduled",
        "-o",
        "jsonpath={.items[0].message}",
    ])?;
    assert_eq!(scheduled, "Successfully assigned default/fits to small");

    apply(&kubectl, "large.yaml", &node("large", "4", "", ""))?;
    assert_eq!(bound(&kubectl, "big").await?, "large");
    let condition = kubectl.ok(&[
        "get",
        "pod",
        "big",
        "-o",
        "jsonpath={.status.conditions[?(@.type==\"PodScheduled\")].status}",
    ])?;
    assert_eq!(condition, "True");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn taints_repel_pods_that_do_not_tolerate_them() -> Result<()> {
    let Some((_server, kubectl)) = session("taints_repel_pods_that_do_not_tolerate_them").await?
    else {
        return Ok(());
    };
    apply(
        &kubectl,
        "gpu.yaml",
        &node(
            "gpu",
            "4",
            ", pool: gpu",
            "{key: dedicated, value: gpu, effect: NoSchedule}",
        ),
    )?;
    apply(&kubectl, "plain.yaml", &pod("plain", "app: a", "100m", ""))?;
    let message = failed(&kubectl, "plain", "untolerated taint").await?;
    assert!(
        message.starts_with(
            "0/1 nodes are available: 1 node(s) had untolerated taint {dedicated: gpu}."
        ),
        "{message}"
    );
    let tolerating = "  tolerations: [{key: dedicated, operator: Equal, value: gpu, effect: NoSchedule}]\n  nodeSelector: {pool: gpu}\n";
    apply(
        &kubectl,
        "tolerating.yaml",
        &pod("tolerating", "app: b", "100m", tolerating),
    )?;
    assert_eq!(bound(&kubectl, "tolerating").await?, "gpu");
    apply(&kubectl, "open.yaml", &node("open", "4", "", ""))?;
    assert_eq!(bound(&kubectl, "plain").await?, "open");
    // A pod too big for either node waits; once kubectl taints the open
    // node, its next attempt (the node change sends it back) names both
    // taints, since taints are checked before resources.
    apply(&kubectl, "late.yaml", &pod("late", "app: c", "5", ""))?;
    failed(&kubectl, "late", "1 Insufficient cpu").await?;
    kubectl.ok(&["taint", "nodes", "open", "maintenance=true:NoSchedule"])?;
    let message = failed(&kubectl, "late", "{maintenance: true}").await?;
    assert!(
        message.starts_with("0/2 nodes are available: 1 node(s) had untolerated taint {dedicated: gpu}, 1 node(s) had untolerated taint {maintenance: true}."),
        "{message}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_affinity_and_a_daemonset_style_pod_pinned_by_name() -> Result<()> {
    let Some((_server, kubectl)) =
        session("node_affinity_and_a_daemonset_style_pod_pinned_by_name").await?
    else {
        return Ok(());
    };
    let nodes = node("n1", "4", ", disktype: hdd", "")
        + &node("n2", "4", ", disktype: ssd", "")
        + &node("n3", "4", ", disktype: ssd", "");
    apply(&kubectl, "nodes.yaml", &nodes)?;
    scheduler_sees(&kubectl, "n3").await?;
    let pinned = "  affinity:
    nodeAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        nodeSelectorTerms:
        - matchFields: [{key: metadata.name, operator: In, values: [n3]}]
";
    let ssd_preferring_n2 = "  affinity:
    nodeAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        nodeSelectorTerms:
        - matchExpressions: [{key: disktype, operator: In, values: [ssd]}]
      preferredDuringSchedulingIgnoredDuringExecution:
      - weight: 100
        preference:
          matchExpressions: [{key: kubernetes.io/hostname, operator: In, values: [n2]}]
";
    let nowhere = "  nodeSelector: {disktype: nvme}\n";
    let pods = pod("daemon", "app: d", "100m", pinned)
        + &pod("ssd", "app: s", "100m", ssd_preferring_n2)
        + &pod("nowhere", "app: none", "100m", nowhere);
    apply(&kubectl, "pods.yaml", &pods)?;
    assert_eq!(bound(&kubectl, "daemon").await?, "n3");
    assert_eq!(bound(&kubectl, "ssd").await?, "n2");
    let message = failed(&kubectl, "nowhere", "affinity/selector").await?;
    assert!(
        message.starts_with(
            "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector."
        ),
        "{message}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_anti_affinity_keeps_replicas_in_different_zones() -> Result<()> {
    let Some((_server, kubectl)) =
        session("pod_anti_affinity_keeps_replicas_in_different_zones").await?
    else {
        return Ok(());
    };
    let zone = |z: &str| format!(", topology.kubernetes.io/zone: {z}");
    let nodes = node("a1", "4", &zone("a"), "")
        + &node("a2", "4", &zone("a"), "")
        + &node("b1", "4", &zone("b"), "");
    apply(&kubectl, "nodes.yaml", &nodes)?;
    scheduler_sees(&kubectl, "b1").await?;
    let anti = "  affinity:
    podAntiAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
      - labelSelector: {matchLabels: {app: store}}
        topologyKey: topology.kubernetes.io/zone
";
    apply(&kubectl, "r1.yaml", &pod("r1", "app: store", "100m", anti))?;
    let first = bound(&kubectl, "r1").await?;
    apply(&kubectl, "r2.yaml", &pod("r2", "app: store", "100m", anti))?;
    let second = bound(&kubectl, "r2").await?;
    let zone_of = |n: &str| n.chars().next();
    assert_ne!(
        zone_of(&first),
        zone_of(&second),
        "{first} and {second} share a zone"
    );
    apply(&kubectl, "r3.yaml", &pod("r3", "app: store", "100m", anti))?;
    let message = failed(&kubectl, "r3", "anti-affinity").await?;
    assert!(
        message.starts_with(
            "0/3 nodes are available: 3 node(s) didn't match pod anti-affinity rules."
        ),
        "{message}"
    );
    // A pod that wants to be near the store, in zone b only.
    let near = "  affinity:
    podAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
      - labelSelector: {matchLabels: {app: store}}
        topologyKey: kubernetes.io/hostname
";
    apply(&kubectl, "web.yaml", &pod("web", "app: web", "100m", near))?;
    let web = bound(&kubectl, "web").await?;
    ensure!(
        web == first || web == second,
        "web on {web}, not beside a store replica"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topology_spread_balances_pods_across_zones() -> Result<()> {
    let Some((_server, kubectl)) = session("topology_spread_balances_pods_across_zones").await?
    else {
        return Ok(());
    };
    let zone = |z: &str| format!(", topology.kubernetes.io/zone: {z}");
    let nodes = node("a1", "8", &zone("a"), "")
        + &node("a2", "8", &zone("a"), "")
        + &node("b1", "8", &zone("b"), "");
    apply(&kubectl, "nodes.yaml", &nodes)?;
    scheduler_sees(&kubectl, "b1").await?;
    let spread = "  topologySpreadConstraints:
  - maxSkew: 1
    topologyKey: topology.kubernetes.io/zone
    whenUnsatisfiable: DoNotSchedule
    labelSelector: {matchLabels: {app: spread}}
";
    let mut zones = std::collections::BTreeMap::new();
    for i in 0..6 {
        let name = format!("s{i}");
        apply(
            &kubectl,
            &format!("{name}.yaml"),
            &pod(&name, "app: spread", "100m", spread),
        )?;
        let node = bound(&kubectl, &name).await?;
        *zones.entry(node[..1].to_string()).or_insert(0) += 1;
    }
    assert_eq!(zones.get("a"), Some(&3), "{zones:?}");
    assert_eq!(zones.get("b"), Some(&3), "{zones:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_high_priority_pod_preempts_a_low_priority_one() -> Result<()> {
    let Some((_server, kubectl)) =
        session("a_high_priority_pod_preempts_a_low_priority_one").await?
    else {
        return Ok(());
    };
    let classes = "apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: low}
value: 10
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: high}
value: 1000
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: polite}
value: 1000
preemptionPolicy: Never
---
";
    apply(&kubectl, "classes.yaml", classes)?;
    apply(&kubectl, "node.yaml", &node("n1", "1", "", ""))?;
    apply(
        &kubectl,
        "low.yaml",
        &pod("low", "app: low", "800m", "  priorityClassName: low\n"),
    )?;
    assert_eq!(bound(&kubectl, "low").await?, "n1");

    apply(
        &kubectl,
        "polite.yaml",
        &pod("polite", "app: p", "800m", "  priorityClassName: polite\n"),
    )?;
    failed(&kubectl, "polite", "Insufficient cpu").await?;
    ensure!(
        !node_of(&kubectl, "low")?.is_empty(),
        "a preemptionPolicy Never pod preempted"
    );

    apply(
        &kubectl,
        "high.yaml",
        &pod("high", "app: h", "800m", "  priorityClassName: high\n"),
    )?;
    assert_eq!(bound(&kubectl, "high").await?, "n1");
    let nominated = kubectl.ok(&[
        "get",
        "pod",
        "high",
        "-o",
        "jsonpath={.status.nominatedNodeName}",
    ])?;
    assert_eq!(nominated, "n1");
    let gone = kubectl.run(&["get", "pod", "low"])?;
    ensure!(
        gone.code != Some(0),
        "the victim is still there: {}",
        gone.stdout
    );
    let preempted = kubectl.ok(&[
        "get",
        "events",
        "--field-selector",
        "involvedObject.name=low,reason=Preempted",
        "-o",
        "jsonpath={.items[0].message}",
    ])?;
    assert_eq!(preempted, "Preempted by pod default/high on node n1");
    Ok(())
}

/// A second scheduler (`skiff scheduler` without leader election) races
/// the one in `skiff up` for every pod: each pod is bound once, to one
/// node, and stays there; the loser of a race sees a 409 and lets go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_schedulers_racing_for_pods_bind_each_once() -> Result<()> {
    use skiff_tests::skiff_process::SkiffProcess;
    let Some((server, kubectl)) = session("two_schedulers_racing_for_pods_bind_each_once").await?
    else {
        return Ok(());
    };
    let kubeconfig = server.kubeconfig();
    let kubeconfig = kubeconfig.to_string_lossy();
    let secure = skiff_tests::skiff_process::free_addrs(1)?[0];
    let mut rival = SkiffProcess::spawn(
        "rival scheduler",
        [
            "scheduler",
            "--kubeconfig",
            &kubeconfig,
            "--leader-elect=false",
            "--bind-address=127.0.0.1",
            &format!("--secure-port={}", secure.port()),
        ],
    )?;
    rival
        .wait_for_line("skiff scheduler: scheduling", Duration::from_secs(30))
        .await?;
    let nodes: String = (0..4)
        .map(|i| node(&format!("n{i}"), "64", "", ""))
        .collect();
    apply(&kubectl, "nodes.yaml", &nodes)?;
    let pods: String = (0..40)
        .map(|i| pod(&format!("p{i}"), "app: race", "100m", ""))
        .collect();
    apply(&kubectl, "pods.yaml", &pods)?;
    let mut placed = Vec::new();
    for i in 0..40 {
        placed.push(bound(&kubectl, &format!("p{i}")).await?);
    }
    // Every Scheduled event names the node the pod is on: no pod was bound
    // twice, and none moved.
    let events = kubectl.ok(&[
        "get",
        "events",
        "--field-selector",
        "reason=Scheduled",
        "-o",
        "jsonpath={range .items[*]}{.involvedObject.name} {.message}{\"\\n\"}{end}",
    ])?;
    let mut scheduled = std::collections::BTreeMap::new();
    for line in events.lines() {
        let (pod, message) = line.split_once(' ').unwrap_or((line, ""));
        *scheduled.entry(pod.to_string()).or_insert(0) += 1;
        let i: usize = pod.trim_start_matches('p').parse()?;
        ensure!(
            message.ends_with(&format!(" to {}", placed[i])),
            "{pod}: {message}, but it is on {}",
            placed[i]
        );
    }
    ensure!(
        scheduled.len() == 40,
        "Scheduled events for {} pods",
        scheduled.len()
    );
    ensure!(
        scheduled.values().all(|n| *n == 1),
        "a pod was bound more than once: {scheduled:?}"
    );
    for (i, node) in placed.iter().enumerate() {
        assert_eq!(&node_of(&kubectl, &format!("p{i}"))?, node);
    }
    // The scheduler alone serves its metrics on its secure port, as
    // kube-scheduler does: it tried pods too.
    let metrics =
        skiff_tests::kube_http::secure_port_metrics(&server.http()?, &secure.to_string()).await?;
    ensure!(
        metrics
            .lines()
            .any(|l| l.starts_with("scheduler_schedule_attempts_total{")),
        "{metrics}"
    );
    rival.signal(libc::SIGTERM)?;
    rival.wait_exit(Duration::from_secs(20)).await?;
    Ok(())
}

/// Three `skiff server` members each run a scheduler; one holds the
/// kube-system/kube-scheduler Lease and schedules. When that member dies,
/// another takes the lease over and pods are scheduled again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_scheduler_of_a_cluster_leads_and_another_takes_over() -> Result<()> {
    use skiff_tests::api_server::{ApiServer, Backend};
    let test = "scheduler::one_scheduler_of_a_cluster_leads_and_another_takes_over";
    let Some(binary) = skiff_tests::kubectl::kubectl_or_skip(test) else {
        return Ok(());
    };
    let Some(mut server) = ApiServer::start_on_scheduling(Backend::Cluster, test).await? else {
        return Ok(());
    };
    // Through the first member's API; the leader may be any member.
    let kubectl = Kubectl::new(binary, &server.kubeconfig())?;
    apply(&kubectl, "node.yaml", &node("n1", "8", "", ""))?;
    apply(&kubectl, "a.yaml", &pod("a", "app: a", "100m", ""))?;
    assert_eq!(bound(&kubectl, "a").await?, "n1");
    let holder = || {
        kubectl.ok(&[
            "get",
            "lease",
            "-n",
            "kube-system",
            "kube-scheduler",
            "-o",
            "jsonpath={.spec.holderIdentity}",
        ])
    };
    let leader = holder()?;
    // The identity is host_member_pid.
    let member = leader.split('_').nth(1).unwrap_or_default().to_string();
    ensure!(
        ["n1", "n2", "n3"].contains(&member.as_str()),
        "lease held by {leader:?}"
    );
    if member == "n1" {
        // The test talks through n1; let it lead, and check only that a
        // second pod is scheduled by it.
        apply(&kubectl, "b.yaml", &pod("b", "app: b", "100m", ""))?;
        assert_eq!(bound(&kubectl, "b").await?, "n1");
        return Ok(());
    }
    ensure!(
        server.kill_other_member(&member)?,
        "no member {member} to stop"
    );
    // Two members remain: the store keeps its quorum, and the lease runs
    // out (15 s) before another scheduler takes it.
    let deadline = Instant::now() + Duration::from_secs(60);
    let next = loop {
        // The store may be electing a new leader for a moment.
        let now = holder().unwrap_or_default();
        if now != leader && !now.is_empty() {
            break now;
        }
        ensure!(
            Instant::now() < deadline,
            "nobody took the lease over from {leader}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    ensure!(!next.contains(&format!("_{member}_")), "{next}");
    apply(&kubectl, "b.yaml", &pod("b", "app: b", "100m", ""))?;
    assert_eq!(bound(&kubectl, "b").await?, "n1");
    let transitions = kubectl.ok(&[
        "get",
        "lease",
        "-n",
        "kube-system",
        "kube-scheduler",
        "-o",
        "jsonpath={.spec.leaseTransitions}",
    ])?;
    ensure!(
        transitions.parse::<i64>()? >= 1,
        "leaseTransitions {transitions}"
    );
    Ok(())
}

/// An HTTP extender served by the test: its filter takes n1 out (and every
/// node for pods labelled `extender: none`), its priorities favour n3.
async fn extender_filter(
    axum::Json(args): axum::Json<serde_json::Value>,
) -> axum::Json<serde_json::Value> {
    let none = args["Pod"]["metadata"]["labels"]["extender"] == "none";
    let names: Vec<String> = args["NodeNames"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|n| n.as_str().map(str::to_string))
        .collect();
    let mut passed = Vec::new();
    let mut failed = serde_json::Map::new();
    for name in names {
        if none || name == "n1" {
            failed.insert(name, "node(s) were refused by the test extender".into());
        } else {
            passed.push(name);
        }
    }
    axum::Json(serde_json::json!({"NodeNames": passed, "FailedNodes": failed, "Error": ""}))
}

async fn extender_prioritize(
    axum::Json(args): axum::Json<serde_json::Value>,
) -> axum::Json<serde_json::Value> {
    let scores: Vec<serde_json::Value> = args["NodeNames"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|n| n.as_str())
        .map(|n| serde_json::json!({"Host": n, "Score": if n == "n3" { 10 } else { 0 }}))
        .collect();
    axum::Json(serde_json::Value::Array(scores))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_extender_filters_and_prioritizes_nodes() -> Result<()> {
    use skiff_tests::api_server::ApiServer;
    let test = "scheduler::an_http_extender_filters_and_prioritizes_nodes";
    let Some(binary) = skiff_tests::kubectl::kubectl_or_skip(test) else {
        return Ok(());
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let app = axum::Router::new()
        .route("/ext/filter", axum::routing::post(extender_filter))
        .route("/ext/prioritize", axum::routing::post(extender_prioritize));
    tokio::spawn(async move { axum::serve(listener, app).await });
    let dir = tempfile::tempdir()?;
    let config = dir.path().join("scheduler.yaml");
    std::fs::write(
        &config,
        format!(
            "apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
extenders:
- urlPrefix: http://{addr}/ext
  filterVerb: filter
  prioritizeVerb: prioritize
  weight: 5
  nodeCacheCapable: true
  httpTimeout: 5s
"
        ),
    )?;
    let server = ApiServer::start_scheduling_with(&[
        "--scheduler-config".into(),
        config.display().to_string(),
    ])
    .await?;
    let kubectl = Kubectl::new(binary, &server.kubeconfig())?;
    let nodes: String = (1..=3)
        .map(|i| node(&format!("n{i}"), "4", "", ""))
        .collect();
    apply(&kubectl, "nodes.yaml", &nodes)?;
    scheduler_sees(&kubectl, "n3").await?;
    apply(&kubectl, "a.yaml", &pod("a", "app: a", "100m", ""))?;
    assert_eq!(
        bound(&kubectl, "a").await?,
        "n3",
        "the extender's priority wins"
    );
    apply(&kubectl, "b.yaml", &pod("b", "extender: none", "100m", ""))?;
    let message = failed(&kubectl, "b", "test extender").await?;
    assert!(
        message
            .starts_with("0/3 nodes are available: 3 node(s) were refused by the test extender."),
        "{message}"
    );
    Ok(())
}
