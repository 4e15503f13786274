//! The kubelet of `skiff up`, driven with the real kubectl: pods run as
//! local processes, serve on their ports and log; crashing containers back
//! off, failing liveness probes restart them, deletion runs preStop within
//! the grace period, init containers run first, env comes from ConfigMaps;
//! and a kubelet killed with SIGKILL adopts its pods when it comes back.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use skiff_tests::api_server::ApiServer;
use skiff_tests::kube_http::KubeHttp;
use skiff_tests::kubectl::{kubectl_or_skip, Kubectl};
use skiff_tests::local_node::{
    self, apply, wait_until, LocalNode, NODE, RELAXED_EVICTION, TIMEOUT,
};
use skiff_tests::node_processes::{self, NodeProcesses};
use skiff_tests::skiff_process::{free_addrs, SkiffProcess};
use skiff_tests::test_pki;

/// The pod's `jsonpath`.
fn jsonpath(kubectl: &Kubectl, pod: &str, path: &str) -> Result<String> {
    local_node::jsonpath(kubectl, "pod", pod, path)
}

async fn wait_pod(kubectl: &Kubectl, pod: &str, path: &str, want: &str) -> Result<()> {
    local_node::wait_for(kubectl, "pod", pod, path, want).await
}

async fn node(test: &str) -> Result<Option<LocalNode>> {
    LocalNode::start(test).await
}

/// One HTTP GET on 127.0.0.1:`port`; the status line.
fn http_get(port: u16) -> Result<String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    stream.write_all(b"GET / HTTP/1.0\r\nHost: localhost\r\n\r\n")?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer)?;
    Ok(answer.lines().next().unwrap_or_default().to_string())
}

fn python3_or_skip(test: &str) -> bool {
    let found = std::process::Command::new("python3")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        if std::env::var("CI").as_deref() == Ok("true") {
            panic!("{test}: python3 is needed (apt-get install -y python3)");
        }
        eprintln!("{test}: SKIPPED: python3 is not installed (apt-get install -y python3)");
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_runs_as_a_process_serves_on_its_port_and_logs() -> Result<()> {
    let test = "a_pod_runs_as_a_process_serves_on_its_port_and_logs";
    if !python3_or_skip(test) {
        return Ok(());
    }
    let Some(node) = node(test).await? else {
        return Ok(());
    };
    let kubectl = &node.kubectl;
    let port = free_addrs(1)?[0].port();
    apply(
        kubectl,
        "web.yaml",
        &format!(
            "apiVersion: v1
kind: Pod
metadata:
  name: web
spec:
  containers:
  - name: web
    image: python:3.12
    command: [python3, -m, http.server, \"{port}\", --bind, 127.0.0.1]
    ports: [{{containerPort: {port}}}]
    readinessProbe:
      httpGet: {{path: /, port: {port}}}
      periodSeconds: 1
"
        ),
    )?;
    kubectl.ok(&["wait", "--for=condition=Ready", "pod/web", "--timeout=60s"])?;
    assert_eq!(jsonpath(kubectl, "web", "{.spec.nodeName}")?, NODE);
    assert_eq!(jsonpath(kubectl, "web", "{.status.phase}")?, "Running");
    assert_eq!(jsonpath(kubectl, "web", "{.status.podIP}")?, "127.0.0.1");
    let status = http_get(port)?;
    ensure!(status.contains("200"), "GET / answered {status:?}");
    // http.server logs each request on stderr.
    wait_until("the request in kubectl logs", || {
        Ok(kubectl
            .ok(&["logs", "web"])?
            .contains("\"GET / HTTP/1.0\" 200"))
    })
    .await?;
    let wide = kubectl.ok(&["get", "pod", "web", "-o", "wide"])?;
    ensure!(wide.contains("1/1") && wide.contains("Running"), "{wide}");

    // kubectl run, with the args as the command (no ENTRYPOINT is pulled).
    kubectl.ok(&[
        "run",
        "hello",
        "--image=busybox",
        "--restart=Never",
        "--",
        "sh",
        "-c",
        "echo hello from skiff; sleep 0.3; echo to stderr >&2",
    ])?;
    wait_pod(kubectl, "hello", "{.status.phase}", "Succeeded").await?;
    // stdout and stderr are separate streams, read apart: the pause keeps
    // their lines in order.
    let logs = kubectl.ok(&["logs", "hello"])?;
    assert_eq!(logs, "hello from skiff\nto stderr\n");
    let tail = kubectl.ok(&["logs", "hello", "--tail=1", "--timestamps"])?;
    ensure!(
        tail.ends_with(" to stderr\n") && tail.starts_with("20"),
        "{tail:?}"
    );
    assert_eq!(
        jsonpath(
            kubectl,
            "hello",
            "{.status.containerStatuses[0].state.terminated.reason}"
        )?,
        "Completed"
    );

    // A container with nothing to run waits, saying why.
    kubectl.ok(&["run", "nginx", "--image=nginx"])?;
    wait_pod(
        kubectl,
        "nginx",
        "{.status.containerStatuses[0].state.waiting.reason}",
        "ContainerCommandRequired",
    )
    .await?;
    assert_eq!(jsonpath(kubectl, "nginx", "{.status.phase}")?, "Pending");
    let err = kubectl.fails(&["logs", "nginx"])?;
    ensure!(
        err.contains("is waiting to start: ContainerCommandRequired"),
        "{err}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashing_container_restarts_with_growing_back_off() -> Result<()> {
    let Some(node) = node("a_crashing_container_restarts_with_growing_back_off").await? else {
        return Ok(());
    };
    let kubectl = &node.kubectl;
    kubectl.ok(&[
        "run",
        "crash",
        "--image=busybox",
        "--",
        "sh",
        "-c",
        "echo crashing; exit 3",
    ])?;
    let mut back_offs = Vec::new();
    wait_until("three back-offs of growing length", || {
        let message = jsonpath(
            kubectl,
            "crash",
            "{.status.containerStatuses[0].state.waiting.message}",
        )?;
        if let Some(rest) = message.strip_prefix("back-off ") {
            let delay = rest
                .split_whitespace()
                .next()
                .unwrap_or_default()
                .to_string();
            if back_offs.last() != Some(&delay) {
                back_offs.push(delay);
            }
        }
        Ok(back_offs.len() >= 3)
    })
    .await?;
    assert_eq!(back_offs[..3], ["1s", "2s", "4s"], "{back_offs:?}");
    let restarts: u32 = jsonpath(
        kubectl,
        "crash",
        "{.status.containerStatuses[0].restartCount}",
    )?
    .parse()?;
    ensure!(restarts >= 3, "restartCount {restarts}");
    assert_eq!(
        jsonpath(
            kubectl,
            "crash",
            "{.status.containerStatuses[0].lastState.terminated.exitCode}"
        )?,
        "3"
    );
    wait_until("CrashLoopBackOff in kubectl get", || {
        Ok(kubectl
            .ok(&["get", "pod", "crash"])?
            .contains("CrashLoopBackOff"))
    })
    .await?;
    assert_eq!(kubectl.ok(&["logs", "crash", "--previous"])?, "crashing\n");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_liveness_probe_restarts_the_container() -> Result<()> {
    let Some(node) = node("a_failing_liveness_probe_restarts_the_container").await? else {
        return Ok(());
    };
    let kubectl = &node.kubectl;
    apply(
        kubectl,
        "live.yaml",
        "apiVersion: v1
kind: Pod
metadata:
  name: live
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - name: c
    image: busybox
    command: [sh, -c, 'touch healthy; sleep 2; rm healthy; exec sleep 600']
    livenessProbe:
      exec: {command: [cat, healthy]}
      periodSeconds: 1
      failureThreshold: 1
",
    )?;
    wait_until("a restart after the liveness probe failed", || {
        Ok(jsonpath(
            kubectl,
            "live",
            "{.status.containerStatuses[0].restartCount}",
        )?
        .parse::<u32>()
        .unwrap_or(0)
            >= 1)
    })
    .await?;
    let message = jsonpath(
        kubectl,
        "live",
        "{.status.containerStatuses[0].lastState.terminated.message}",
    )?;
    ensure!(message.starts_with("Liveness probe failed"), "{message:?}");
    let code = jsonpath(
        kubectl,
        "live",
        "{.status.containerStatuses[0].lastState.terminated.exitCode}",
    )?;
    assert_eq!(code, "143", "sleep ends on SIGTERM");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_pod_runs_pre_stop_then_terminates_within_the_grace_period() -> Result<()> {
    let Some(node) =
        node("deleting_a_pod_runs_pre_stop_then_terminates_within_the_grace_period").await?
    else {
        return Ok(());
    };
    let kubectl = &node.kubectl;
    let marks = tempfile::tempdir()?;
    let mark = marks.path().join("marks");
    apply(
        kubectl,
        "graceful.yaml",
        &format!(
            "apiVersion: v1
kind: Pod
metadata:
  name: graceful
spec:
  terminationGracePeriodSeconds: 20
  containers:
  - name: c
    image: busybox
    env: [{{name: MARK, value: {mark}}}]
    command: [sh, -c, 'trap \"echo TERM >> $MARK; exit 0\" TERM; echo started >> $MARK; while true; do sleep 0.1; done']
    lifecycle:
      preStop:
        exec: {{command: [sh, -c, 'echo preStop >> $MARK']}}
---
apiVersion: v1
kind: Pod
metadata:
  name: stubborn
spec:
  terminationGracePeriodSeconds: 3
  containers:
  - name: c
    image: busybox
    command: [sh, -c, 'trap \"\" TERM; while true; do sleep 0.1; done']
",
            mark = mark.display()
        ),
    )?;
    wait_pod(kubectl, "graceful", "{.status.phase}", "Running").await?;
    wait_pod(kubectl, "stubborn", "{.status.phase}", "Running").await?;
    wait_until("the container to have started", || {
        Ok(std::fs::read_to_string(&mark)
            .unwrap_or_default()
            .contains("started"))
    })
    .await?;
    kubectl.ok(&["delete", "pod", "graceful", "--timeout=60s"])?;
    assert_eq!(std::fs::read_to_string(&mark)?, "started\npreStop\nTERM\n");
    let err = kubectl.fails(&["get", "pod", "graceful"])?;
    ensure!(err.contains("NotFound"), "{err}");

    let asked = Instant::now();
    kubectl.ok(&["delete", "pod", "stubborn", "--timeout=60s"])?;
    let took = asked.elapsed();
    ensure!(
        took >= Duration::from_millis(2500),
        "a process ignoring SIGTERM was killed after {took:?}, before its 3 s grace period"
    );
    let root = node.server.data_dir().join("kubelet");
    for process in node_processes::containers(&root) {
        ensure!(
            !node_processes::alive(process.pid),
            "{process:?} still runs"
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn init_containers_run_first_and_env_comes_from_a_config_map() -> Result<()> {
    let Some(node) = node("init_containers_run_first_and_env_comes_from_a_config_map").await?
    else {
        return Ok(());
    };
    let kubectl = &node.kubectl;
    apply(
        kubectl,
        "init.yaml",
        "apiVersion: v1
kind: ConfigMap
metadata:
  name: greetings
data:
  greeting: hello
---
apiVersion: v1
kind: Pod
metadata:
  name: staged
spec:
  restartPolicy: Never
  volumes: [{name: work, emptyDir: {}}]
  initContainers:
  - name: setup
    image: busybox
    command: [sh, -c, 'echo prepared by init > $SKIFF_VOLUME_WORK/ready']
    volumeMounts: [{name: work, mountPath: /work}]
  containers:
  - name: main
    image: busybox
    command: [sh, -c, 'cat $SKIFF_VOLUME_WORK/ready; echo \"greeting=$GREETING pod=$POD\"']
    volumeMounts: [{name: work, mountPath: /work}]
    env:
    - name: GREETING
      valueFrom: {configMapKeyRef: {name: greetings, key: greeting}}
    - name: POD
      valueFrom: {fieldRef: {fieldPath: metadata.name}}
",
    )?;
    wait_pod(kubectl, "staged", "{.status.phase}", "Succeeded").await?;
    assert_eq!(
        kubectl.ok(&["logs", "staged"])?,
        "prepared by init\ngreeting=hello pod=staged\n"
    );
    assert_eq!(
        jsonpath(
            kubectl,
            "staged",
            "{.status.initContainerStatuses[0].state.terminated.reason}"
        )?,
        "Completed"
    );
    assert_eq!(
        jsonpath(
            kubectl,
            "staged",
            "{.status.conditions[?(@.type==\"Initialized\")].status}"
        )?,
        "True"
    );

    // A missing ConfigMap keeps the container waiting, named.
    kubectl.ok(&[
        "run",
        "lost",
        "--image=busybox",
        "--overrides",
        r#"{"spec":{"containers":[{"name":"lost","image":"busybox","command":["sleep","600"],"envFrom":[{"configMapRef":{"name":"absent"}}]}]}}"#,
    ])?;
    wait_pod(
        kubectl,
        "lost",
        "{.status.containerStatuses[0].state.waiting.reason}",
        "CreateContainerConfigError",
    )
    .await?;
    let message = jsonpath(
        kubectl,
        "lost",
        "{.status.containerStatuses[0].state.waiting.message}",
    )?;
    assert_eq!(message, "configmap \"absent\" not found");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kubelet_port_authorizes_each_user_as_the_api_server_says() -> Result<()> {
    let test = "the_kubelet_port_authorizes_each_user_as_the_api_server_says";
    let Some(node) = node(test).await? else {
        return Ok(());
    };
    let port = local_node::jsonpath(
        &node.kubectl,
        "node",
        NODE,
        "{.status.daemonEndpoints.kubeletEndpoint.Port}",
    )?;
    let addr = format!("127.0.0.1:{port}");
    // The kubelet's own certificate, as it keeps it.
    let kubelet_cert =
        std::fs::read_to_string(node.server.data_dir().join("kubelet/pki/kubelet.crt"))?;
    let admin = KubeHttp::from_kubeconfig(&node.server.kubeconfig())?
        .at(&addr)
        .trusting(&kubelet_cert);
    let reply = admin.get("/healthz").await?;
    assert_eq!((reply.status, reply.text()), (200, "ok".to_string()));
    // Without a client certificate: /healthz alone, as the kubelet's
    // health check; logs, stats and metrics answer 401.
    let anonymous = admin.anonymous();
    let health = anonymous.get("/healthz").await?;
    assert_eq!((health.status, health.text()), (200, "ok".to_string()));
    for path in [
        "/metrics",
        "/metrics/resource",
        "/stats/summary",
        "/containerLogs/default/hello/hello",
    ] {
        let refused = anonymous.get(path).await?;
        ensure!(
            refused.status == 401,
            "{path} without a certificate: {} {}",
            refused.status,
            refused.text()
        );
    }
    for path in ["/metrics", "/metrics/resource", "/stats/summary"] {
        let served = admin.get(path).await?;
        ensure!(served.status == 200, "{path}: {}", served.status);
    }
    // Other users of the cluster CA are asked about with a
    // SubjectAccessReview of nodes/<subresource>: another node's kubelet
    // may do nothing here; a monitoring user granted nodes/metrics and
    // nodes/stats reads those and nothing else, by certificate or by a
    // ServiceAccount's token.
    let (cert, key) = test_pki::client_credentials("system:node:other", &["system:nodes"])?;
    let other = admin.with_client_cert(&cert, &key);
    assert_eq!(other.get("/healthz").await?.status, 200);
    for path in ["/metrics", "/containerLogs/default/hello/hello"] {
        let refused = other.get(path).await?;
        ensure!(
            refused.status == 403
                && refused.text().contains("user=system:node:other")
                && refused.text().contains("resource=nodes"),
            "{path} for another node: {} {}",
            refused.status,
            refused.text()
        );
    }
    local_node::apply(
        &node.kubectl,
        "scraper.yaml",
        "apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: node-scraper}
rules:
- apiGroups: [\"\"]
  resources: [nodes/metrics, nodes/stats]
  verbs: [get]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: node-scraper}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: node-scraper}
subjects:
- {kind: User, name: scraper}
- {kind: ServiceAccount, name: scraper, namespace: default}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: scraper}
",
    )?;
    let (cert, key) = test_pki::client_credentials("scraper", &[])?;
    let scraper = admin.with_client_cert(&cert, &key);
    let token = node
        .kubectl
        .ok(&["create", "token", "scraper"])?
        .trim()
        .to_string();
    for client in [scraper, admin.with_token(&token)] {
        for path in ["/metrics", "/stats/summary"] {
            let served = client.get(path).await?;
            ensure!(
                served.status == 200,
                "{path}: {} {}",
                served.status,
                served.text()
            );
        }
        let refused = client.get("/containerLogs/default/hello/hello").await?;
        ensure!(
            refused.status == 403 && refused.text().contains("subresource=proxy"),
            "logs for the scraper: {} {}",
            refused.status,
            refused.text()
        );
    }
    let forged = admin.with_token("not-a-token").get("/metrics").await?;
    ensure!(forged.status == 401, "a bad token: {}", forged.status);
    // Plain HTTP gets nothing.
    let plain = KubeHttp::from_plain(&addr).get("/healthz").await;
    ensure!(
        plain.as_ref().map_or(true, |r| r.status != 200),
        "answered plain HTTP: {plain:?}"
    );
    // The API server still reads logs through it.
    node.kubectl.ok(&[
        "run",
        "hello",
        "--image=busybox",
        "--restart=Never",
        "--",
        "sh",
        "-c",
        "echo hello from the pod; sleep 30",
    ])?;
    wait_pod(&node.kubectl, "hello", "{.status.phase}", "Running").await?;
    wait_until("kubectl logs through the kubelet port", || {
        Ok(node.kubectl.ok(&["logs", "hello"]).unwrap_or_default() == "hello from the pod\n")
    })
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_logs_follow_streams_until_the_container_exits() -> Result<()> {
    let Some(node) = node("kubectl_logs_follow_streams_until_the_container_exits").await? else {
        return Ok(());
    };
    let kubectl = &node.kubectl;
    kubectl.ok(&[
        "run",
        "ticker",
        "--image=busybox",
        "--restart=Never",
        "--",
        "sh",
        "-c",
        "for i in 1 2 3; do echo tick $i; sleep 1; done",
    ])?;
    wait_pod(kubectl, "ticker", "{.status.phase}", "Running").await?;
    let mut follow = kubectl.spawn(&["logs", "-f", "ticker"])?;
    let lines = follow.wait_for_lines(3, TIMEOUT).await?;
    assert_eq!(lines, ["tick 1", "tick 2", "tick 3"]);
    wait_until("kubectl logs -f to end with the container", || {
        Ok(!follow.running()?)
    })
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_memory_pressure_best_effort_pods_are_evicted_first() -> Result<()> {
    // Every host is short of a petabyte of free memory.
    let pressure = "--eviction-hard=memory.available<1000Ti,nodefs.available<1%,nodefs.inodesFree<1%,pid.available<1%";
    let test = "under_memory_pressure_best_effort_pods_are_evicted_first";
    let Some(node) = LocalNode::start_with(test, pressure, &["--eviction-interval=3s"]).await?
    else {
        return Ok(());
    };
    let kubectl = &node.kubectl;
    wait_until("the MemoryPressure condition", || {
        Ok(kubectl.ok(&[
            "get",
            "node",
            NODE,
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"MemoryPressure\")].status}",
        ])? == "True")
    })
    .await?;
    // Bound by hand: the scheduler keeps pods off a node under pressure.
    apply(
        kubectl,
        "pressure.yaml",
        &format!(
            "apiVersion: v1
kind: Pod
metadata:
  name: guaranteed
spec:
  nodeName: {NODE}
  containers:
  - name: c
    image: busybox
    command: [sleep, \"600\"]
    resources:
      limits: {{cpu: 100m, memory: 64Mi}}
---
apiVersion: v1
kind: Pod
metadata:
  name: besteffort
spec:
  nodeName: {NODE}
  containers:
  - name: c
    image: busybox
    command: [sleep, \"600\"]
"
        ),
    )?;
    let reason = |pod: &str| jsonpath(kubectl, pod, "{.status.reason}");
    wait_until("a pod to be evicted", || {
        Ok(reason("besteffort")? == "Evicted" || reason("guaranteed")? == "Evicted")
    })
    .await?;
    assert_eq!(reason("besteffort")?, "Evicted", "BestEffort goes first");
    assert_ne!(reason("guaranteed")?, "Evicted", "one pod per interval");
    assert_eq!(
        jsonpath(kubectl, "besteffort", "{.status.phase}")?,
        "Failed"
    );
    assert_eq!(
        jsonpath(kubectl, "besteffort", "{.status.qosClass}")?,
        "BestEffort"
    );
    let message = jsonpath(kubectl, "besteffort", "{.status.message}")?;
    ensure!(
        message.starts_with("The node was low on resource: memory. Threshold quantity: 1000Ti"),
        "{message}"
    );
    wait_pod(kubectl, "guaranteed", "{.status.reason}", "Evicted").await?;
    assert_eq!(
        jsonpath(kubectl, "guaranteed", "{.status.qosClass}")?,
        "Guaranteed"
    );
    let disruption = jsonpath(
        kubectl,
        "guaranteed",
        "{.status.conditions[?(@.type==\"DisruptionTarget\")].reason}",
    )?;
    assert_eq!(disruption, "TerminationByKubelet");
    let root = node.server.data_dir().join("kubelet");
    wait_until("the evicted pods' processes to end", || {
        Ok(node_processes::containers(&root)
            .iter()
            .all(|p| !node_processes::alive(p.pid)))
    })
    .await?;
    Ok(())
}

/// A `skiff kubelet` beside a `skiff up` without one.
fn start_kubelet(kubeconfig: &Path, root: &Path) -> Result<SkiffProcess> {
    SkiffProcess::spawn(
        "skiff kubelet",
        [
            "kubelet".to_string(),
            "--kubeconfig".into(),
            kubeconfig.display().to_string(),
            "--node-name".into(),
            NODE.into(),
            "--root-dir".into(),
            root.display().to_string(),
            "--kubelet-listen=127.0.0.1:0".into(),
            RELAXED_EVICTION.into(),
        ],
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubelet_killed_with_sigkill_adopts_its_pods_when_it_returns() -> Result<()> {
    let test = "a_kubelet_killed_with_sigkill_adopts_its_pods_when_it_returns";
    let Some(binary) = kubectl_or_skip(test) else {
        return Ok(());
    };
    let server = ApiServer::start_scheduling_with(&[]).await?;
    let kubectl = Kubectl::new(binary, &server.kubeconfig())?;
    let root = server.data_dir().join("node");
    let _leftovers = NodeProcesses::new(&root);
    let mut kubelet = start_kubelet(&server.kubeconfig(), &root)?;
    for name in ["keeper", "goner", "forced"] {
        kubectl.ok(&[
            "run",
            name,
            "--image=busybox",
            "--",
            "sh",
            "-c",
            "while true; do echo alive; sleep 1; done",
        ])?;
    }
    for name in ["keeper", "goner", "forced"] {
        wait_pod(&kubectl, name, "{.status.phase}", "Running").await?;
    }
    let uid = |name: &str| jsonpath(&kubectl, name, "{.metadata.uid}");
    let process_of = |uid: &str| {
        node_processes::containers(&root)
            .into_iter()
            .find(|p| p.pod_uid == uid)
            .context("the container's state file")
    };
    let keeper = process_of(&uid("keeper")?)?;
    let goner = process_of(&uid("goner")?)?;
    let forced = process_of(&uid("forced")?)?;
    let keeper_id = jsonpath(
        &kubectl,
        "keeper",
        "{.status.containerStatuses[0].containerID}",
    )?;

    kubelet.signal(libc::SIGKILL)?;
    kubelet.wait_exit(Duration::from_secs(10)).await?;
    ensure!(
        node_processes::alive(keeper.pid),
        "the pods outlive their kubelet"
    );
    kubectl.ok(&["delete", "pod", "goner", "--wait=false"])?;
    kubectl.ok(&["delete", "pod", "forced", "--force", "--grace-period=0"])?;
    ensure!(node_processes::alive(goner.pid) && node_processes::alive(forced.pid));

    let _kubelet = start_kubelet(&server.kubeconfig(), &root)?;
    wait_until("the deleted pods' processes to stop", || {
        Ok(!node_processes::alive(goner.pid) && !node_processes::alive(forced.pid))
    })
    .await?;
    wait_until("the gracefully deleted pod to be gone", || {
        Ok(kubectl.run(&["get", "pod", "goner"])?.code == Some(1))
    })
    .await?;
    ensure!(
        node_processes::alive(keeper.pid),
        "the adopted container kept running"
    );
    assert_eq!(jsonpath(&kubectl, "keeper", "{.status.phase}")?, "Running");
    assert_eq!(
        jsonpath(
            &kubectl,
            "keeper",
            "{.status.containerStatuses[0].restartCount}"
        )?,
        "0"
    );
    assert_eq!(
        jsonpath(
            &kubectl,
            "keeper",
            "{.status.containerStatuses[0].containerID}"
        )?,
        keeper_id
    );
    wait_until("the adopted container's logs", || {
        Ok(kubectl.ok(&["logs", "keeper", "--tail=1"])? == "alive\n")
    })
    .await?;
    Ok(())
}
