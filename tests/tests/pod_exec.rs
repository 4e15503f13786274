//! `pods/exec`, `pods/attach` and `pods/portforward` against `skiff up`:
//! who may open them (RBAC `create` on the subresource, whichever method
//! upgrades; never a kubelet's identity), and the refusals before any
//! connection to a kubelet, each a `Status`.

use anyhow::Result;
use serde_json::json;
use skiff_tests::api_server::ApiServer;
use skiff_tests::kube_http::{expect_status, KubeHttp};

const PODS: &str = "/api/v1/namespaces/default/pods";

fn client(admin: &KubeHttp, user: &str, groups: &[&str]) -> Result<KubeHttp> {
    let (cert, key) = skiff_tests::test_pki::client_credentials(user, groups)?;
    Ok(admin.with_client_cert(&cert, &key))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_create_on_the_subresource_opens_a_stream_into_a_pod() -> Result<()> {
    let server = ApiServer::start().await?;
    let admin = server.http()?;
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
                     "spec": {"containers": [{"name": "c", "image": "busybox", "command": ["sleep", "3600"]}]}});
    expect_status(&admin.post(PODS, &pod).await?, 201, "pod")?;
    // A viewer (get on pods) and a user with create on pods/exec only.
    let viewer_binding = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "viewer", "namespace": "default"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "viewer"}],
    });
    let role = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "exec", "namespace": "default"},
        "rules": [{"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["create"]}],
    });
    let exec_binding = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "exec", "namespace": "default"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "exec"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "execer"}],
    });
    let rbac = "/apis/rbac.authorization.k8s.io/v1/namespaces/default";
    expect_status(
        &admin
            .post(&format!("{rbac}/rolebindings"), &viewer_binding)
            .await?,
        201,
        "viewer binding",
    )?;
    expect_status(
        &admin.post(&format!("{rbac}/roles"), &role).await?,
        201,
        "role",
    )?;
    expect_status(
        &admin
            .post(&format!("{rbac}/rolebindings"), &exec_binding)
            .await?,
        201,
        "exec binding",
    )?;

    let viewer = client(&admin, "viewer", &[])?;
    let kubelet = client(&admin, "system:node:n1", &["system:nodes"])?;
    let execer = client(&admin, "execer", &[])?;
    let exec = format!("{PODS}/p/exec?command=ls&stdout=true");
    // The viewer can read the pod but not exec into it, by GET or POST.
    expect_status(&viewer.get(&format!("{PODS}/p")).await?, 200, "viewer get")?;
    for method in ["GET", "POST"] {
        let reply = viewer.request(method, &exec, None, None).await?;
        let status = expect_status(&reply, 403, "viewer exec")?;
        assert_eq!(
            status["message"],
            "pods \"p\" is forbidden: User \"viewer\" cannot create resource \"pods/exec\" in API group \"\" in the namespace \"default\"",
            "{method}"
        );
    }
    for sub in [
        "exec?command=ls",
        "attach?stdout=true",
        "portforward?ports=80",
    ] {
        let reply = kubelet.get(&format!("{PODS}/p/{sub}")).await?;
        let status = expect_status(&reply, 403, sub)?;
        assert_eq!(status["reason"], "Forbidden", "{sub}");
    }
    // create on pods/exec gets past authorization: this request is not an
    // upgrade, which is the next thing refused.
    for client in [&execer, &admin] {
        let status = expect_status(&client.get(&exec).await?, 400, "exec without upgrade")?;
        assert_eq!(status["message"], "Upgrade request required");
    }
    let status = expect_status(
        &execer.get(&format!("{PODS}/p/attach?stdout=true")).await?,
        403,
        "execer attach",
    )?;
    assert_eq!(status["reason"], "Forbidden");
    Ok(())
}

const EXEC_POD: &str = "apiVersion: v1
kind: Pod
metadata:
  name: shell
spec:
  containers:
  - name: main
    image: busybox
    command: [sleep, '3600']
    env:
    - {name: GREETING, value: hello-from-the-container}
";

/// exec (stdout, stderr, exit codes, stdin), cp both ways and the refusals,
/// with every kubectl version found: 1.27–1.29 speak SPDY/3.1, 1.30 and
/// later WebSocket (`v5.channel.k8s.io`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kubectl_execs_and_copies() -> Result<()> {
    use skiff_tests::kubectl::{every_kubectl_version, Kubectl};
    use skiff_tests::local_node::{apply, wait_for, LocalNode};
    let Some(node) = LocalNode::start("every_kubectl_execs_and_copies").await? else {
        return Ok(());
    };
    apply(&node.kubectl, "shell.yaml", EXEC_POD)?;
    wait_for(&node.kubectl, "pod", "shell", "{.status.phase}", "Running").await?;
    let scratch = tempfile::tempdir()?;
    for (minor, binary) in every_kubectl_version() {
        let kubectl = Kubectl::new(binary, &node.server.kubeconfig())?;
        let v = format!("kubectl.1.{minor}");
        let out = kubectl.ok(&["exec", "shell", "--", "echo", "hi"])?;
        anyhow::ensure!(out == "hi\n", "{v} exec echo: {out:?}");
        let out = kubectl.ok(&["exec", "shell", "--", "sh", "-c", "echo $GREETING"])?;
        anyhow::ensure!(
            out == "hello-from-the-container\n",
            "{v} the container's env: {out:?}"
        );

        let failed = kubectl.run(&[
            "exec",
            "shell",
            "--",
            "sh",
            "-c",
            "echo out; echo err >&2; exit 3",
        ])?;
        anyhow::ensure!(
            failed.code == Some(3) && failed.stdout == "out\n" && failed.stderr.contains("err\n"),
            "{v} exit 3: {failed:?}"
        );

        let input = b"line one\nline two\n";
        let echoed = kubectl.run_with_input(&["exec", "-i", "shell", "--", "cat"], input)?;
        anyhow::ensure!(
            echoed.code == Some(0) && echoed.stdout.as_bytes() == input,
            "{v} exec -i cat: {echoed:?}"
        );

        // cp both ways, through tar in the pod's view of the filesystem.
        let dir = scratch.path().join(format!("v{minor}"));
        std::fs::create_dir_all(&dir)?;
        let local = kubectl.manifest("upload.txt", &format!("copied by {v}\n"))?;
        let remote = format!("shell:{}/in-pod.txt", dir.display());
        kubectl.ok(&["cp", &local.display().to_string(), &remote])?;
        anyhow::ensure!(
            std::fs::read_to_string(dir.join("in-pod.txt"))? == format!("copied by {v}\n"),
            "{v} cp into the pod"
        );
        let back = dir.join("back.txt");
        kubectl.ok(&["cp", &remote, &back.display().to_string()])?;
        anyhow::ensure!(
            std::fs::read_to_string(&back)? == format!("copied by {v}\n"),
            "{v} cp out of the pod"
        );

        interactive_terminal(&kubectl, minor).await?;

        let missing = kubectl.run(&["exec", "shell", "-c", "nope", "--", "true"])?;
        anyhow::ensure!(
            missing.code == Some(1)
                && missing
                    .stderr
                    .contains("container nope is not valid for pod shell"),
            "{v} a missing container: {missing:?}"
        );
        let no_program = kubectl.run(&["exec", "shell", "--", "no-such-program-xyz"])?;
        anyhow::ensure!(
            no_program.code != Some(0)
                && no_program
                    .stderr
                    .contains("executable file not found in $PATH"),
            "{v} a missing program: {no_program:?}"
        );
    }
    Ok(())
}

/// The Python client's exec stream (WebSocket, `v4.channel.k8s.io`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_client_execs() -> Result<()> {
    use anyhow::Context;
    use skiff_tests::local_node::{apply, wait_for, LocalNode};
    use skiff_tests::python::{python_with_kubernetes_or_skip, script};
    let Some(python) = python_with_kubernetes_or_skip("the_python_client_execs") else {
        return Ok(());
    };
    let Some(node) = LocalNode::start("the_python_client_execs").await? else {
        return Ok(());
    };
    apply(&node.kubectl, "shell.yaml", EXEC_POD)?;
    wait_for(&node.kubectl, "pod", "shell", "{.status.phase}", "Running").await?;
    let run = tokio::process::Command::new(&python)
        .arg(script("exec_stream.py"))
        .arg(node.server.kubeconfig())
        .args(["default", "shell"])
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(std::time::Duration::from_secs(90), run)
        .await
        .context("exec_stream.py did not finish")??;
    let stderr = String::from_utf8_lossy(&output.stderr);
    anyhow::ensure!(
        output.status.success(),
        "exec_stream.py failed ({}); stderr:\n{stderr}",
        output.status
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    let seen: serde_json::Value = serde_json::from_str(stdout.trim())
        .with_context(|| format!("exec_stream.py printed {stdout}; stderr:\n{stderr}"))?;
    assert_eq!(seen["echo"], "hello from python\n", "{seen}");
    assert_eq!(
        (&seen["stdout"], &seen["stderr"], &seen["returncode"]),
        (&json!("out\n"), &json!("err\n"), &json!(3)),
        "{seen}"
    );
    assert_eq!(
        (&seen["stdin_echo"], &seen["stdin_returncode"]),
        (&json!("hello\n"), &json!(0)),
        "{seen}"
    );
    Ok(())
}

/// `kubectl exec -it` on a pseudo-terminal (util-linux `script` gives
/// kubectl one): what is typed runs in a shell on the pod's terminal, and
/// the shell's exit code is kubectl's.
async fn interactive_terminal(kubectl: &skiff_tests::kubectl::Kubectl, minor: u32) -> Result<()> {
    use anyhow::Context;
    use tokio::io::AsyncWriteExt;
    let command = kubectl.command_line(&["exec", "-it", "shell", "--", "sh"]);
    let mut child = tokio::process::Command::new("script")
        .args(["-q", "-e", "-c", &command, "/dev/null"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .context("starting util-linux `script` (apt-get install -y util-linux)")?;
    let mut stdin = child.stdin.take().context("script's stdin")?;
    stdin
        .write_all(b"tty; echo typed-$((6*7))\nexit 5\n")
        .await?;
    // The terminal stays open until the shell has exited.
    let output = tokio::time::timeout(std::time::Duration::from_secs(30), async {
        let waited = child.wait_with_output().await;
        drop(stdin);
        waited
    })
    .await
    .context("kubectl exec -it did not end")??;
    let text = String::from_utf8_lossy(&output.stdout);
    anyhow::ensure!(
        output.status.code() == Some(5) && text.contains("typed-42") && text.contains("/dev/pts/"),
        "kubectl.1.{minor} exec -it: {:?} {text:?} {}",
        output.status.code(),
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(())
}

/// `kubectl port-forward` with every kubectl version: a local port reaches
/// an HTTP server in the pod, for several connections one after another.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kubectl_forwards_a_port() -> Result<()> {
    use anyhow::Context;
    use skiff_tests::kubectl::{every_kubectl_version, Kubectl};
    use skiff_tests::local_node::{apply, wait_for, LocalNode};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Some(node) = LocalNode::start("every_kubectl_forwards_a_port").await? else {
        return Ok(());
    };
    let site = tempfile::tempdir()?;
    std::fs::write(site.path().join("index.html"), "served from the pod\n")?;
    let port = skiff_tests::skiff_process::free_addrs(1)?[0].port();
    let pod = format!(
        "apiVersion: v1
kind: Pod
metadata:
  name: web
spec:
  containers:
  - name: main
    image: python
    command: [python3, -m, http.server, '{port}', --bind, 127.0.0.1, --directory, '{}']
    readinessProbe:
      tcpSocket: {{port: {port}, host: 127.0.0.1}}
      periodSeconds: 1
",
        site.path().display()
    );
    apply(&node.kubectl, "web.yaml", &pod)?;
    // Running is not listening yet: Ready is, through the probe.
    wait_for(
        &node.kubectl,
        "pod",
        "web",
        "{.status.conditions[?(@.type=='Ready')].status}",
        "True",
    )
    .await?;
    for (minor, binary) in every_kubectl_version() {
        let kubectl = Kubectl::new(binary, &node.server.kubeconfig())?;
        let local = skiff_tests::skiff_process::free_addrs(1)?[0].port();
        let mut forward =
            kubectl.spawn(&["port-forward", "pod/web", &format!("{local}:{port}")])?;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while !forward
            .lines()
            .iter()
            .any(|l| l.starts_with(&format!("Forwarding from 127.0.0.1:{local}")))
        {
            anyhow::ensure!(
                std::time::Instant::now() < deadline && forward.running()?,
                "kubectl.1.{minor} port-forward did not start: {:?} {}",
                forward.lines(),
                forward.stderr()
            );
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        for attempt in 0..3 {
            let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", local))
                .await
                .with_context(|| format!("kubectl.1.{minor}: connecting to the forwarded port"))?;
            stream
                .write_all(b"GET /index.html HTTP/1.0\r\nHost: pod\r\n\r\n")
                .await?;
            let mut reply = Vec::new();
            tokio::time::timeout(
                std::time::Duration::from_secs(20),
                stream.read_to_end(&mut reply),
            )
            .await
            .with_context(|| format!("kubectl.1.{minor}: no reply through the forward"))??;
            let reply = String::from_utf8_lossy(&reply);
            anyhow::ensure!(
                reply.starts_with("HTTP/1.0 200") && reply.ends_with("served from the pod\n"),
                "kubectl.1.{minor} connection {attempt}: {reply:?}; kubectl: {}",
                forward.stderr()
            );
        }
        anyhow::ensure!(
            forward.running()?,
            "kubectl.1.{minor} port-forward still runs"
        );
    }
    Ok(())
}

/// The Node client's `Exec` (WebSocket): output apart, the exit code in
/// the Status, stdin.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_node_client_execs() -> Result<()> {
    use anyhow::Context;
    use skiff_tests::local_node::{apply, wait_for, LocalNode};
    use skiff_tests::node_client::{node_client_or_skip, script};
    let Some(modules) = node_client_or_skip("the_node_client_execs") else {
        return Ok(());
    };
    let Some(node) = LocalNode::start("the_node_client_execs").await? else {
        return Ok(());
    };
    apply(&node.kubectl, "shell.yaml", EXEC_POD)?;
    wait_for(&node.kubectl, "pod", "shell", "{.status.phase}", "Running").await?;
    let run = tokio::process::Command::new("node")
        .arg(script("exec.mjs"))
        .arg(&modules)
        .arg(node.server.kubeconfig())
        .args(["default", "shell"])
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(std::time::Duration::from_secs(60), run)
        .await
        .context("exec.mjs did not finish")??;
    let stderr = String::from_utf8_lossy(&output.stderr);
    anyhow::ensure!(
        output.status.success(),
        "exec.mjs failed ({}); stderr:\n{stderr}",
        output.status
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    let seen: serde_json::Value = serde_json::from_str(stdout.trim())
        .with_context(|| format!("exec.mjs printed {stdout}; stderr:\n{stderr}"))?;
    let failing = &seen["failing"];
    assert_eq!(
        (&failing["stdout"], &failing["stderr"]),
        (&json!("out\n"), &json!("err\n")),
        "{seen}"
    );
    assert_eq!(failing["status"]["reason"], "NonZeroExitCode", "{seen}");
    assert_eq!(
        failing["status"]["details"]["causes"][0],
        json!({"reason": "ExitCode", "message": "3"})
    );
    assert_eq!(
        (&seen["stdin"]["stdout"], &seen["stdin"]["status"]["status"]),
        (&json!("hello\n"), &json!("Success")),
        "{seen}"
    );
    Ok(())
}

/// `kubectl attach -i` with every kubectl version: what is typed reaches a
/// container started with `stdin: true`, and what it prints comes back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kubectl_attaches() -> Result<()> {
    use skiff_tests::kubectl::{every_kubectl_version, Kubectl};
    use skiff_tests::local_node::{apply, wait_for, LocalNode};
    let Some(node) = LocalNode::start("every_kubectl_attaches").await? else {
        return Ok(());
    };
    for (minor, binary) in every_kubectl_version() {
        let name = format!("reader-1-{minor}");
        let pod = format!(
            "apiVersion: v1
kind: Pod
metadata:
  name: {name}
spec:
  restartPolicy: Never
  containers:
  - name: main
    image: busybox
    stdin: true
    command: [sh, -c, 'read line; echo got-$line']
"
        );
        apply(&node.kubectl, &format!("{name}.yaml"), &pod)?;
        wait_for(&node.kubectl, "pod", &name, "{.status.phase}", "Running").await?;
        let kubectl = Kubectl::new(binary, &node.server.kubeconfig())?;
        let attached = kubectl.run_with_input(&["attach", "-i", &name], b"hello\n")?;
        anyhow::ensure!(
            attached.code == Some(0) && attached.stdout.contains("got-hello"),
            "kubectl.1.{minor} attach -i: {attached:?}"
        );
        wait_for(&node.kubectl, "pod", &name, "{.status.phase}", "Succeeded").await?;
    }
    Ok(())
}

/// `kubectl attach -it` with every kubectl version to one shell started
/// with `tty: true` and `stdinOnce: true` (as `kubectl run -it` makes):
/// each version gets the terminal at its own size (`stty size` in the pod
/// shows it), types a command and sees it run, then leaves by being
/// killed; the terminal stays open for the next (stdinOnce closes only a
/// stdin without a terminal, as containerd does). The last one exits the
/// shell, and `kubectl logs` shows what every session printed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kubectl_attaches_to_a_terminal() -> Result<()> {
    use skiff_tests::kubectl::{every_kubectl_version, Kubectl};
    use skiff_tests::local_node::{apply, wait_for, LocalNode};
    use skiff_tests::tool::on_path_or_skip;
    let test = "every_kubectl_attaches_to_a_terminal";
    if on_path_or_skip("script", test, "apt-get install -y util-linux").is_none() {
        return Ok(());
    }
    let Some(node) = LocalNode::start(test).await? else {
        return Ok(());
    };
    let pod = "apiVersion: v1
kind: Pod
metadata:
  name: console
spec:
  restartPolicy: Never
  containers:
  - name: main
    image: busybox
    stdin: true
    stdinOnce: true
    tty: true
    command: [sh]
";
    apply(&node.kubectl, "console.yaml", pod)?;
    wait_for(
        &node.kubectl,
        "pod",
        "console",
        "{.status.phase}",
        "Running",
    )
    .await?;
    let versions = every_kubectl_version();
    for (index, (minor, binary)) in versions.iter().enumerate() {
        let kubectl = Kubectl::new(binary.clone(), &node.server.kubeconfig())?;
        let columns = 60 + minor;
        let mut session = TerminalSession::start(
            &kubectl,
            &["attach", "-it", "console"],
            &format!("stty cols {columns} rows 17;"),
        )?;
        // kubectl sends its terminal's size as the session opens.
        session
            .wait_for("If you don't see a command prompt", *minor)
            .await?;
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        session
            .type_line(&format!("stty size; echo typed-{minor}-$((6*7))"))
            .await?;
        session
            .wait_for(&format!("17 {columns}\r\n"), *minor)
            .await?;
        session
            .wait_for(&format!("typed-{minor}-42\r\n"), *minor)
            .await?;
        if index + 1 < versions.len() {
            session.kill().await;
            continue;
        }
        session.type_line("exit 3").await?;
        let code = session.wait().await?;
        anyhow::ensure!(
            code == Some(0),
            "kubectl.1.{minor} attach -it ended with {code:?}"
        );
    }
    wait_for(&node.kubectl, "pod", "console", "{.status.phase}", "Failed").await?;
    let code = node.kubectl.ok(&[
        "get",
        "pod",
        "console",
        "-o",
        "jsonpath={.status.containerStatuses[0].state.terminated.exitCode}",
    ])?;
    anyhow::ensure!(code == "3", "the shell's exit code: {code:?}");
    let logs = node.kubectl.ok(&["logs", "console"])?;
    for (minor, _) in &versions {
        anyhow::ensure!(
            logs.contains(&format!("typed-{minor}-42\r\n")),
            "kubectl logs shows the terminal's output of kubectl.1.{minor}: {logs:?}"
        );
    }
    Ok(())
}

/// A container with `stdin` and `stdinOnce` but no terminal: the first
/// attached client's stdin reaches it, and when that stdin ends the
/// container reads end of file; a later `kubectl attach -i` gets no stdin.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdin_once_closes_stdin_after_the_first_attach() -> Result<()> {
    use skiff_tests::kubectl::{every_kubectl_version, Kubectl};
    use skiff_tests::local_node::{apply, wait_for, wait_until, LocalNode};
    let Some(node) = LocalNode::start("stdin_once_closes_stdin_after_the_first_attach").await?
    else {
        return Ok(());
    };
    for (minor, binary) in every_kubectl_version() {
        let name = format!("once-1-{minor}");
        let pod = format!(
            "apiVersion: v1
kind: Pod
metadata:
  name: {name}
spec:
  containers:
  - name: main
    image: busybox
    stdin: true
    stdinOnce: true
    command: [sh, -c, 'cat; echo stdin-closed; while true; do read line && echo got-$line; sleep 0.2; done']
"
        );
        apply(&node.kubectl, &format!("{name}.yaml"), &pod)?;
        wait_for(&node.kubectl, "pod", &name, "{.status.phase}", "Running").await?;
        let kubectl = Kubectl::new(binary, &node.server.kubeconfig())?;
        // The container keeps running, so kubectl keeps streaming its
        // output after its own stdin ended; it is stopped here.
        let first = run_until(
            &kubectl,
            &["attach", "-i", &name],
            b"first\n",
            Some("stdin-closed\n"),
            30,
        )
        .await?;
        anyhow::ensure!(
            first.contains("first\nstdin-closed\n"),
            "kubectl.1.{minor}: the first attach's stdin, then end of file: {first:?}"
        );
        let second = run_until(&kubectl, &["attach", "-i", &name], b"second\n", None, 3).await?;
        anyhow::ensure!(
            !second.contains("second"),
            "kubectl.1.{minor}: a later attach's stdin reached the container: {second:?}"
        );
        let mut logs = String::new();
        wait_until("the log", || {
            logs = node.kubectl.ok(&["logs", &name])?;
            Ok(logs.contains("stdin-closed"))
        })
        .await?;
        anyhow::ensure!(
            logs == "first\nstdin-closed\n",
            "kubectl.1.{minor}: the container's log: {logs:?}"
        );
        node.kubectl
            .ok(&["delete", "pod", &name, "--grace-period=0", "--force"])?;
    }
    Ok(())
}

/// Runs `kubectl ARGS` with `input` on its stdin until it prints `until`
/// or for `seconds` (it would stream on), then stops it; returns what it
/// printed.
async fn run_until(
    kubectl: &skiff_tests::kubectl::Kubectl,
    args: &[&str],
    input: &[u8],
    until: Option<&str>,
    seconds: u64,
) -> Result<String> {
    use anyhow::Context;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let command = kubectl.command_line(args);
    let mut child = tokio::process::Command::new("sh")
        .args(["-c", &format!("exec {command}")])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .context("starting kubectl")?;
    let mut stdin = child.stdin.take().context("kubectl's stdin")?;
    stdin.write_all(input).await?;
    drop(stdin);
    let mut stdout = child.stdout.take().context("kubectl's stdout")?;
    let mut printed = Vec::new();
    let reading = async {
        let mut buf = vec![0u8; 4096];
        while let Ok(read) = stdout.read(&mut buf).await {
            if read == 0 {
                break;
            }
            printed.extend_from_slice(&buf[..read]);
            if until.is_some_and(|until| String::from_utf8_lossy(&printed).contains(until)) {
                break;
            }
        }
    };
    let _ = tokio::time::timeout(std::time::Duration::from_secs(seconds), reading).await;
    let _ = child.kill().await;
    Ok(String::from_utf8_lossy(&printed).into_owned())
}

/// kubectl on a pseudo-terminal of util-linux `script`, typed into and
/// read from as a user would.
struct TerminalSession {
    child: tokio::process::Child,
    stdin: tokio::process::ChildStdin,
    seen: std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
}

impl TerminalSession {
    /// Starts `kubectl ARGS` in `script`, after the shell command `setup`
    /// (an `stty` setting the terminal's size, say).
    fn start(kubectl: &skiff_tests::kubectl::Kubectl, args: &[&str], setup: &str) -> Result<Self> {
        use anyhow::Context;
        use tokio::io::AsyncReadExt;
        let command = format!("{setup} {}", kubectl.command_line(args));
        let mut child = tokio::process::Command::new("script")
            .args(["-q", "-e", "-c", &command, "/dev/null"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .context("starting util-linux `script`")?;
        let stdin = child.stdin.take().context("script's stdin")?;
        let mut stdout = child.stdout.take().context("script's stdout")?;
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let into = seen.clone();
        tokio::spawn(async move {
            let mut buf = vec![0u8; 4096];
            while let Ok(read) = stdout.read(&mut buf).await {
                if read == 0 {
                    break;
                }
                into.lock().unwrap().extend_from_slice(&buf[..read]);
            }
        });
        Ok(TerminalSession { child, stdin, seen })
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.seen.lock().unwrap()).into_owned()
    }

    async fn type_line(&mut self, line: &str) -> Result<()> {
        use tokio::io::AsyncWriteExt;
        self.stdin.write_all(format!("{line}\n").as_bytes()).await?;
        Ok(())
    }

    async fn wait_for(&mut self, text: &str, minor: u32) -> Result<()> {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while !self.text().contains(text) {
            anyhow::ensure!(
                std::time::Instant::now() < deadline,
                "kubectl.1.{minor} did not show {text:?} on its terminal: {:?}",
                self.text()
            );
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        Ok(())
    }

    async fn kill(mut self) {
        let _ = self.child.kill().await;
    }

    /// Waits for kubectl (and so `script`) to end; its exit code.
    async fn wait(mut self) -> Result<Option<i32>> {
        use anyhow::Context;
        let status = tokio::time::timeout(std::time::Duration::from_secs(30), self.child.wait())
            .await
            .context("kubectl attach -it did not end")??;
        Ok(status.code())
    }
}
