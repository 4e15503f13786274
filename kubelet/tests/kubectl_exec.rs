//! The real kubectl's exec and port-forward against the kubelet's streaming endpoint, behind
//! a stand-in apiserver that serves the pod and forwards `pods/exec` as
//! the apiserver does: over WebSocket (kubectl's default since 1.30) and
//! over SPDY/3.1 (`KUBECTL_REMOTE_COMMAND_WEBSOCKETS=false`, as kubectl
//! before 1.30), with every kubectl version found beside the dispatcher.
//! Skipped when no kubectl is installed, unless CI=true.

use std::collections::HashMap;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::Request;
use axum::http::{StatusCode, Uri};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use skiff_kubelet::runtime::{
    ContainerHandle, ContainerId, ContainerSpec, Limits, ProcessRuntime, RuntimeConfig,
};
use skiff_kubelet::streaming::{self, ContainerFinder, Refusal};
use tokio::io::AsyncWriteExt;
use tower::ServiceExt;

const PATIENCE: Duration = Duration::from_secs(60);

/// The stand-in apiserver's state: the kubelet it forwards to, and the
/// Upgrade header of every request forwarded, so a test knows which
/// protocol kubectl used.
#[derive(Clone)]
struct Forwarding {
    kubelet: Router,
    upgrades: Arc<std::sync::Mutex<Vec<String>>>,
}

struct OnePod(ContainerHandle);

impl ContainerFinder for OnePod {
    fn running_container(
        &self,
        _namespace: &str,
        pod: &str,
        container: &str,
    ) -> Result<ContainerHandle, Refusal> {
        if container == "app" {
            Ok(self.0.clone())
        } else {
            Err(Refusal::new(
                StatusCode::BAD_REQUEST,
                format!("container {container} is not valid for pod {pod}"),
            ))
        }
    }
    fn running_pod(
        &self,
        _namespace: &str,
        _pod: &str,
    ) -> Result<Option<std::path::PathBuf>, Refusal> {
        Ok(None)
    }
}

/// One kubectl to test with, and its minor version.
struct Kubectl {
    path: String,
    minor: u32,
}

impl Kubectl {
    /// kubectl speaks WebSocket for exec (on asking) since 1.29.
    fn exec_websockets(&self) -> bool {
        self.minor >= 29
    }

    /// kubectl tunnels port-forward through WebSocket (on asking) since 1.30.
    fn port_forward_websockets(&self) -> bool {
        self.minor >= 30
    }
}

/// `$KUBECTL`, or `kubectl` on the PATH and every `kubectl.1.NN` beside
/// the file it resolves to (the dispatcher's versions). None: skipped,
/// unless CI=true.
fn kubectls() -> Vec<Kubectl> {
    let mut paths = Vec::new();
    if let Ok(path) = std::env::var("KUBECTL") {
        paths.push(std::path::PathBuf::from(path));
    } else if let Some(found) = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|dir| dir.join("kubectl"))
            .find(|candidate| candidate.is_file())
    }) {
        let resolved = std::fs::canonicalize(&found).unwrap_or(found.clone());
        paths.push(found);
        if let Some(Ok(siblings)) = resolved.parent().map(std::fs::read_dir) {
            let mut versions: Vec<_> = siblings
                .flatten()
                .map(|e| e.path())
                .filter(|p| {
                    p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.starts_with("kubectl.1."))
                })
                .collect();
            versions.sort();
            paths.extend(versions);
        }
    }
    let found: Vec<Kubectl> = paths
        .into_iter()
        .filter_map(|path| {
            let output = std::process::Command::new(&path)
                .args(["version", "--client", "-o", "json"])
                .stderr(Stdio::null())
                .output()
                .ok()?;
            let version: serde_json::Value = serde_json::from_slice(&output.stdout).ok()?;
            let minor = version["clientVersion"]["minor"]
                .as_str()?
                .trim_end_matches('+')
                .parse()
                .ok()?;
            Some(Kubectl {
                path: path.display().to_string(),
                minor,
            })
        })
        .collect();
    if found.is_empty() && std::env::var("CI").as_deref() == Ok("true") {
        panic!("no kubectl to test with under CI");
    }
    if found.is_empty() {
        eprintln!("no kubectl; skipped");
    }
    found
}

struct Cluster {
    kubeconfig: std::path::PathBuf,
    upgrades: Arc<std::sync::Mutex<Vec<String>>>,
    handle: ContainerHandle,
    _dirs: Vec<tempfile::TempDir>,
}

impl Cluster {
    async fn start() -> Cluster {
        Self::start_running(&["sleep", "300"]).await
    }

    async fn start_running(argv: &[&str]) -> Cluster {
        Self::start_with(argv, false).await
    }

    async fn start_with(argv: &[&str], stdin: bool) -> Cluster {
        let root = tempfile::tempdir().unwrap();
        let shim = vec![env!("CARGO_BIN_EXE_kubelet-shim").into()];
        let runtime = Arc::new(ProcessRuntime::new(RuntimeConfig::new(root.path(), shim)));
        let handle = runtime
            .start(ContainerSpec {
                id: ContainerId {
                    pod_uid: "uid-1".into(),
                    pod_namespace: "default".into(),
                    pod_name: "web".into(),
                    container: "app".into(),
                    attempt: 0,
                },
                argv: argv.iter().map(|a| a.to_string()).collect(),
                env: vec![("PATH".into(), "/usr/local/bin:/usr/bin:/bin".into())],
                working_dir: "/".into(),
                limits: Limits::default(),
                stdin,
                stdin_once: false,
                tty: false,
                netns: None,
                files: None,
                mounts: Vec::new(),
            })
            .await
            .unwrap();
        let kubelet = streaming::router::<()>(Arc::new(OnePod(handle.clone())), runtime);
        let upgrades = Arc::new(std::sync::Mutex::new(Vec::new()));
        let apiserver = Router::new()
            .route("/api", get(|| async { axum::Json(api_versions()) }))
            .route("/apis", get(|| async { axum::Json(api_groups()) }))
            .route("/api/v1", get(|| async { axum::Json(core_resources()) }))
            .route("/api/v1/namespaces/{namespace}/pods/{pod}", get(pod))
            .route(
                "/api/v1/namespaces/{namespace}/pods/{pod}/exec",
                get(forward).post(forward),
            )
            .route(
                "/api/v1/namespaces/{namespace}/pods/{pod}/portforward",
                get(forward).post(forward),
            )
            .route(
                "/api/v1/namespaces/{namespace}/pods/{pod}/attach",
                get(forward).post(forward),
            )
            .with_state(Forwarding {
                kubelet,
                upgrades: upgrades.clone(),
            });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(skiff_kubelet::server::serve(
            listener,
            apiserver,
            None,
            std::future::pending(),
        ));
        let config_dir = tempfile::tempdir().unwrap();
        let kubeconfig = config_dir.path().join("kubeconfig");
        std::fs::write(
            &kubeconfig,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: http://{address}\nusers:\n- name: u\n  user: {{}}\ncontexts:\n- name: x\n  context:\n    cluster: c\n    user: u\n    namespace: default\ncurrent-context: x\n"
            ),
        )
        .unwrap();
        Cluster {
            kubeconfig,
            upgrades,
            handle,
            _dirs: vec![root, config_dir],
        }
    }

    /// Runs kubectl exec; its exit code, stdout and stderr.
    async fn exec(
        &self,
        kubectl: &str,
        websockets: bool,
        args: &[&str],
        stdin: Option<&[u8]>,
    ) -> (i32, String, String) {
        let mut command = tokio::process::Command::new(kubectl);
        command
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .arg("exec")
            .args(args)
            .env(
                "KUBECTL_REMOTE_COMMAND_WEBSOCKETS",
                if websockets { "true" } else { "false" },
            )
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = command.spawn().unwrap();
        if let (Some(data), Some(mut pipe)) = (stdin, child.stdin.take()) {
            pipe.write_all(data).await.unwrap();
        }
        let output = tokio::time::timeout(PATIENCE, child.wait_with_output())
            .await
            .expect("kubectl ends")
            .unwrap();
        (
            output.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&output.stdout).into_owned(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    }
}

/// Discovery, as much as kubectl reads before an exec.
fn api_versions() -> serde_json::Value {
    serde_json::json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}],
    })
}

fn api_groups() -> serde_json::Value {
    serde_json::json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": []})
}

fn core_resources() -> serde_json::Value {
    serde_json::json!({
        "kind": "APIResourceList",
        "groupVersion": "v1",
        "resources": [
            {"name": "pods", "singularName": "pod", "namespaced": true, "kind": "Pod",
             "verbs": ["get", "list"], "shortNames": ["po"]},
            {"name": "pods/exec", "singularName": "", "namespaced": true,
             "kind": "PodExecOptions", "verbs": ["create", "get"]},
        ],
    })
}

async fn pod(
    axum::extract::Path((namespace, name)): axum::extract::Path<(String, String)>,
) -> axum::response::Response {
    axum::Json(serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "uid": "uid-1"},
        "spec": {"containers": [{"name": "app", "image": "none", "stdin": true}]},
        "status": {"phase": "Running"},
    }))
    .into_response()
}

/// As the apiserver does: the same request, at the kubelet's path.
async fn forward(
    axum::extract::State(forwarding): axum::extract::State<Forwarding>,
    axum::extract::Path((namespace, name)): axum::extract::Path<(String, String)>,
    mut request: Request,
) -> axum::response::Response {
    if let Some(upgrade) = request.headers().get("upgrade") {
        forwarding
            .upgrades
            .lock()
            .unwrap()
            .push(upgrade.to_str().unwrap_or_default().to_ascii_lowercase());
    }
    let query = request.uri().query().unwrap_or_default().to_string();
    let pairs: Vec<(String, String)> = serde_urlencoded_pairs(&query);
    let container = pairs
        .iter()
        .find(|(k, _)| k == "container")
        .map(|(_, v)| v.clone())
        .unwrap_or_else(|| "app".into());
    let target = if request.uri().path().ends_with("/portforward") {
        format!("/portForward/{namespace}/{name}?{query}")
    } else if request.uri().path().ends_with("/attach") {
        format!("/attach/{namespace}/{name}/{container}?{query}")
    } else {
        format!("/exec/{namespace}/{name}/{container}?{query}")
    };
    let uri: Uri = target.parse().unwrap();
    // A fresh request (this router's matched path is not the kubelet's),
    // keeping what a proxy keeps: method, headers and the upgrade.
    let mut forwarded = Request::builder()
        .method(request.method().clone())
        .uri(uri)
        .body(axum::body::Body::empty())
        .unwrap();
    *forwarded.headers_mut() = request.headers().clone();
    if let Some(upgrade) = request
        .extensions_mut()
        .remove::<hyper::upgrade::OnUpgrade>()
    {
        forwarded.extensions_mut().insert(upgrade);
    }
    forwarding.kubelet.oneshot(forwarded).await.into_response()
}

fn serde_urlencoded_pairs(query: &str) -> Vec<(String, String)> {
    query
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[tokio::test]
async fn kubectl_exec_exit_codes_and_stdin_over_websocket_and_spdy() {
    for kubectl in kubectls() {
        exec_exit_codes_and_stdin(&kubectl).await;
    }
}

async fn exec_exit_codes_and_stdin(kubectl: &Kubectl) {
    let minor = kubectl.minor;
    let cluster = Cluster::start().await;
    let mut failures = HashMap::new();
    let protocols: &[bool] = if kubectl.exec_websockets() {
        &[true, false]
    } else {
        &[false]
    };
    let kubectl = kubectl.path.as_str();
    for &websockets in protocols {
        let (code, stdout, stderr) = cluster
            .exec(
                kubectl,
                websockets,
                &["web", "-c", "app", "--", "echo", "hi"],
                None,
            )
            .await;
        if (code, stdout.as_str()) != (0, "hi\n") {
            failures.insert(
                format!("1.{minor} echo ws={websockets}"),
                (code, stdout, stderr),
            );
        }
        let (code, stdout, stderr) = cluster
            .exec(
                kubectl,
                websockets,
                &["web", "-c", "app", "--", "sh", "-c", "exit 3"],
                None,
            )
            .await;
        if code != 3 {
            failures.insert(
                format!("1.{minor} exit 3 ws={websockets}"),
                (code, stdout, stderr),
            );
        }
        let (code, stdout, stderr) = cluster
            .exec(
                kubectl,
                websockets,
                &["-i", "web", "-c", "app", "--", "cat"],
                Some(b"piped\n"),
            )
            .await;
        if (code, stdout.as_str()) != (0, "piped\n") {
            failures.insert(
                format!("1.{minor} cat ws={websockets}"),
                (code, stdout, stderr),
            );
        }
        let (code, stdout, stderr) = cluster
            .exec(
                kubectl,
                websockets,
                &["web", "-c", "app", "--", "no-such-program-xyz"],
                None,
            )
            .await;
        if code == 0 || !stderr.contains("executable file not found") {
            failures.insert(
                format!("1.{minor} missing ws={websockets}"),
                (code, stdout, stderr),
            );
        }
    }
    cluster.handle.stop(Duration::from_secs(5)).await;
    assert!(failures.is_empty(), "{failures:#?}");
    let upgrades = cluster.upgrades.lock().unwrap().clone();
    assert_eq!(
        upgrades.iter().filter(|u| *u == "websocket").count(),
        if protocols.len() == 2 { 4 } else { 0 },
        "kubectl 1.{minor}: {upgrades:?}"
    );
    assert_eq!(
        upgrades.iter().filter(|u| *u == "spdy/3.1").count(),
        4,
        "kubectl 1.{minor}: {upgrades:?}"
    );
}

/// A TCP server standing in for the pod's port: answers each connection
/// with what it read, upper-cased, once the client half-closes.
async fn upper_case_server() -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                use tokio::io::AsyncReadExt;
                let mut got = Vec::new();
                if socket.read_to_end(&mut got).await.is_ok() {
                    let _ = socket.write_all(&got.to_ascii_uppercase()).await;
                }
            });
        }
    });
    port
}

async fn kubectl_port_forward_carries_several_connections(kubectl: &str, websockets: bool) {
    let cluster = Cluster::start().await;
    let pod_port = upper_case_server().await;
    let mut child = tokio::process::Command::new(kubectl)
        .arg("--kubeconfig")
        .arg(&cluster.kubeconfig)
        .args(["port-forward", "web", &format!(":{pod_port}")])
        .env(
            "KUBECTL_PORT_FORWARD_WEBSOCKETS",
            if websockets { "true" } else { "false" },
        )
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut lines = tokio::io::BufReader::new(stdout);
    let mut line = String::new();
    use tokio::io::AsyncBufReadExt;
    tokio::time::timeout(PATIENCE, lines.read_line(&mut line))
        .await
        .expect("kubectl says where it listens")
        .unwrap();
    // "Forwarding from 127.0.0.1:41234 -> 8080"
    let local: u16 = line
        .split("127.0.0.1:")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|port| port.parse().ok())
        .unwrap_or_else(|| panic!("unexpected kubectl output {line:?}"));
    for word in ["first", "second"] {
        use tokio::io::AsyncReadExt;
        let mut socket = tokio::net::TcpStream::connect(("127.0.0.1", local))
            .await
            .unwrap();
        socket.write_all(word.as_bytes()).await.unwrap();
        socket.shutdown().await.unwrap();
        let mut answer = Vec::new();
        tokio::time::timeout(PATIENCE, socket.read_to_end(&mut answer))
            .await
            .expect("an answer through the forward")
            .unwrap();
        assert_eq!(answer, word.to_uppercase().as_bytes());
    }
    let _ = child.start_kill();
    let _ = child.wait().await;
    cluster.handle.stop(Duration::from_secs(5)).await;
    let upgrades = cluster.upgrades.lock().unwrap().clone();
    let wanted = if websockets { "websocket" } else { "spdy/3.1" };
    assert!(
        !upgrades.is_empty() && upgrades.iter().all(|u| u == wanted),
        "{upgrades:?}"
    );
}

#[tokio::test]
async fn kubectl_port_forward_over_spdy() {
    for kubectl in kubectls() {
        kubectl_port_forward_carries_several_connections(&kubectl.path, false).await;
    }
}

/// kubectl 1.31 and later tunnel SPDY through a WebSocket.
#[tokio::test]
async fn kubectl_port_forward_over_websocket() {
    for kubectl in kubectls().iter().filter(|k| k.port_forward_websockets()) {
        kubectl_port_forward_carries_several_connections(&kubectl.path, true).await;
    }
}

/// `kubectl exec -it` on a pseudo-terminal (util-linux `script` gives it
/// one): the command sees a terminal, reads what is typed, and its exit
/// code is kubectl's.
async fn kubectl_exec_on_a_terminal(kubectl: &str, websockets: bool) {
    if std::process::Command::new("script")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("no script(1) to give kubectl a terminal; skipped");
        return;
    }
    let cluster = Cluster::start().await;
    let inner = format!(
        "{kubectl} --kubeconfig {} exec -it web -c app -- sh -c '[ -t 0 ] && echo tty-yes; read x; echo got-$x; exit 5'",
        cluster.kubeconfig.display()
    );
    let mut child = tokio::process::Command::new("script")
        .args(["-qec", &inner, "/dev/null"])
        .env(
            "KUBECTL_REMOTE_COMMAND_WEBSOCKETS",
            if websockets { "true" } else { "false" },
        )
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut seen = Vec::new();
    // Type only once the command runs on its terminal.
    while !String::from_utf8_lossy(&seen).contains("tty-yes") {
        use tokio::io::AsyncReadExt;
        let mut buf = [0u8; 1024];
        let n = tokio::time::timeout(PATIENCE, stdout.read(&mut buf))
            .await
            .expect("kubectl prints")
            .unwrap();
        assert!(n > 0, "ended early: {:?}", String::from_utf8_lossy(&seen));
        seen.extend_from_slice(&buf[..n]);
    }
    stdin.write_all(b"abc\r").await.unwrap();
    let mut rest = Vec::new();
    {
        use tokio::io::AsyncReadExt;
        tokio::time::timeout(PATIENCE, stdout.read_to_end(&mut rest))
            .await
            .expect("kubectl ends")
            .unwrap();
    }
    seen.extend_from_slice(&rest);
    let status = tokio::time::timeout(PATIENCE, child.wait())
        .await
        .unwrap()
        .unwrap();
    let output = String::from_utf8_lossy(&seen);
    assert!(output.contains("got-abc"), "{output:?}");
    assert_eq!(status.code(), Some(5), "{output:?}");
    cluster.handle.stop(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn kubectl_exec_it_over_websocket() {
    for kubectl in kubectls().iter().filter(|k| k.exec_websockets()) {
        kubectl_exec_on_a_terminal(&kubectl.path, true).await;
    }
}

#[tokio::test]
async fn kubectl_exec_it_over_spdy() {
    for kubectl in kubectls() {
        kubectl_exec_on_a_terminal(&kubectl.path, false).await;
    }
}

/// `kubectl cp` both ways: `tar` run through exec, with stdin (and its
/// close) into the pod and stdout out of it.
async fn kubectl_cp_both_ways(kubectl: &str, websockets: bool) {
    let cluster = Cluster::start().await;
    // The process runtime's containers see the host's filesystem.
    let pod_dir = tempfile::tempdir().unwrap();
    let local = tempfile::tempdir().unwrap();
    let content: String = (0..20_000).map(|i| format!("line {i}\n")).collect();
    std::fs::write(pod_dir.path().join("from-pod.txt"), &content).unwrap();
    std::fs::write(local.path().join("to-pod.txt"), "uploaded\n").unwrap();
    let run = |args: Vec<String>| {
        let kubectl = kubectl.to_string();
        let kubeconfig = cluster.kubeconfig.clone();
        async move {
            let output = tokio::process::Command::new(&kubectl)
                .arg("--kubeconfig")
                .arg(&kubeconfig)
                .args(&args)
                .env(
                    "KUBECTL_REMOTE_COMMAND_WEBSOCKETS",
                    if websockets { "true" } else { "false" },
                )
                .stdin(Stdio::null())
                .output();
            let output = tokio::time::timeout(PATIENCE, output)
                .await
                .expect("kubectl cp ends")
                .unwrap();
            assert!(
                output.status.success(),
                "kubectl {args:?}: {}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
    };
    let pod_path = |name: &str| format!("web:{}", pod_dir.path().join(name).display());
    let local_path = |name: &str| local.path().join(name).display().to_string();
    run(vec![
        "cp".into(),
        "-c".into(),
        "app".into(),
        pod_path("from-pod.txt"),
        local_path("copied.txt"),
    ])
    .await;
    assert_eq!(
        std::fs::read_to_string(local.path().join("copied.txt")).unwrap(),
        content
    );
    run(vec![
        "cp".into(),
        "-c".into(),
        "app".into(),
        local_path("to-pod.txt"),
        pod_path("uploaded.txt"),
    ])
    .await;
    assert_eq!(
        std::fs::read_to_string(pod_dir.path().join("uploaded.txt")).unwrap(),
        "uploaded\n"
    );
    cluster.handle.stop(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn kubectl_cp_over_websocket() {
    for kubectl in kubectls().iter().filter(|k| k.exec_websockets()) {
        kubectl_cp_both_ways(&kubectl.path, true).await;
    }
}

#[tokio::test]
async fn kubectl_cp_over_spdy() {
    for kubectl in kubectls() {
        kubectl_cp_both_ways(&kubectl.path, false).await;
    }
}

/// `kubectl attach` streams the container's output as it comes.
async fn kubectl_attach_streams_output(kubectl: &str, websockets: bool) {
    let script = "i=0; while [ $i -lt 2000 ]; do echo tick$i; i=$((i+1)); sleep 0.05; done";
    let cluster = Cluster::start_running(&["sh", "-c", script]).await;
    let mut child = tokio::process::Command::new(kubectl)
        .arg("--kubeconfig")
        .arg(&cluster.kubeconfig)
        .args(["attach", "web", "-c", "app"])
        .env(
            "KUBECTL_REMOTE_COMMAND_WEBSOCKETS",
            if websockets { "true" } else { "false" },
        )
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut seen = String::new();
    while seen.matches("tick").count() < 3 {
        use tokio::io::AsyncReadExt;
        let mut buf = [0u8; 1024];
        let n = tokio::time::timeout(PATIENCE, stdout.read(&mut buf))
            .await
            .expect("kubectl attach prints the container's output")
            .unwrap();
        if n == 0 {
            let mut stderr = String::new();
            let _ = tokio::io::AsyncReadExt::read_to_string(
                &mut child.stderr.take().unwrap(),
                &mut stderr,
            )
            .await;
            panic!("kubectl attach ended: {seen:?} {stderr}");
        }
        seen.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
    assert!(seen.lines().all(|l| l.starts_with("tick")), "{seen:?}");
    let _ = child.start_kill();
    let _ = child.wait().await;
    cluster.handle.stop(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn kubectl_attach_over_websocket() {
    for kubectl in kubectls().iter().filter(|k| k.exec_websockets()) {
        kubectl_attach_streams_output(&kubectl.path, true).await;
    }
}

#[tokio::test]
async fn kubectl_attach_over_spdy() {
    for kubectl in kubectls() {
        kubectl_attach_streams_output(&kubectl.path, false).await;
    }
}

/// `kubectl attach -i` writes to the stdin of a container started with it.
async fn kubectl_attach_writes_stdin(kubectl: &str, websockets: bool) {
    let cluster = Cluster::start_with(&["cat"], true).await;
    let mut child = tokio::process::Command::new(kubectl)
        .arg("--kubeconfig")
        .arg(&cluster.kubeconfig)
        .args(["attach", "-i", "web", "-c", "app"])
        .env(
            "KUBECTL_REMOTE_COMMAND_WEBSOCKETS",
            if websockets { "true" } else { "false" },
        )
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut seen = String::new();
    // Until attach is connected what is typed may go nowhere; type again.
    let mut typed = 0;
    while !seen.contains("piped\n") {
        use tokio::io::AsyncReadExt;
        if typed < 50 {
            stdin.write_all(b"piped\n").await.unwrap();
            typed += 1;
        }
        let mut buf = [0u8; 1024];
        match tokio::time::timeout(Duration::from_millis(200), stdout.read(&mut buf)).await {
            Ok(Ok(0)) => panic!("kubectl attach ended: {seen:?}"),
            Ok(Ok(n)) => seen.push_str(&String::from_utf8_lossy(&buf[..n])),
            Ok(Err(err)) => panic!("{err}"),
            Err(_) => assert!(typed < 50, "nothing came back: {seen:?}"),
        }
    }
    let _ = child.start_kill();
    let _ = child.wait().await;
    cluster.handle.stop(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn kubectl_attach_i_over_websocket() {
    for kubectl in kubectls().iter().filter(|k| k.exec_websockets()) {
        kubectl_attach_writes_stdin(&kubectl.path, true).await;
    }
}

#[tokio::test]
async fn kubectl_attach_i_over_spdy() {
    for kubectl in kubectls() {
        kubectl_attach_writes_stdin(&kubectl.path, false).await;
    }
}
