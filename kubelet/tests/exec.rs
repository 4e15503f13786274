//! `kubectl exec` against the kubelet's streaming endpoint: a real
//! container under the real shim, and a WebSocket client speaking the
//! channel protocols as client-go and kubectl do.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use futures::{SinkExt, StreamExt};
use serde_json::Value;
use skiff_kubelet::runtime::{
    ContainerHandle, ContainerId, ContainerSpec, Limits, ProcessRuntime, RuntimeConfig,
};
use skiff_kubelet::streaming::{self, ContainerFinder, Refusal};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::{self, Message};

/// Far above anything these commands need, so a loaded machine never
/// fails a test by timing.
const PATIENCE: Duration = Duration::from_secs(60);

/// Containers by (pod, container), all in namespace `default`.
struct Containers(HashMap<(String, String), ContainerHandle>);

impl ContainerFinder for Containers {
    fn running_container(
        &self,
        namespace: &str,
        pod: &str,
        container: &str,
    ) -> Result<ContainerHandle, Refusal> {
        if namespace != "default" || !self.0.keys().any(|(p, _)| p == pod) {
            return Err(Refusal::new(StatusCode::NOT_FOUND, "pod not found"));
        }
        self.0
            .get(&(pod.to_string(), container.to_string()))
            .cloned()
            .ok_or_else(|| {
                Refusal::new(
                    StatusCode::BAD_REQUEST,
                    format!("container {container} is not valid for pod {pod}"),
                )
            })
    }
    fn running_pod(
        &self,
        namespace: &str,
        pod: &str,
    ) -> Result<Option<std::path::PathBuf>, Refusal> {
        if namespace == "default" && self.0.keys().any(|(p, _)| p == pod) {
            Ok(None)
        } else {
            Err(Refusal::new(StatusCode::NOT_FOUND, "pod not found"))
        }
    }
}

/// How the container was started: with `stdin`, with `tty`.
#[derive(Debug, Clone, Copy, Default)]
struct Console {
    stdin: bool,
    tty: bool,
}

const STDIN: Console = Console {
    stdin: true,
    tty: false,
};

/// A kubelet port serving one pod `web` whose container `app` sleeps in
/// `workdir` with `GREETING=hello` in its environment.
struct Kubelet {
    address: std::net::SocketAddr,
    handle: ContainerHandle,
    root: tempfile::TempDir,
    workdir: tempfile::TempDir,
}

impl Kubelet {
    async fn start() -> Kubelet {
        Self::start_running(&["sleep", "300"]).await
    }

    async fn start_running(argv: &[&str]) -> Kubelet {
        Self::start_with(argv, streaming::DEFAULT_IDLE_TIMEOUT).await
    }

    async fn start_with(argv: &[&str], idle_timeout: Duration) -> Kubelet {
        Self::start_serving(argv, idle_timeout, None, Console::default()).await
    }

    async fn start_serving(
        argv: &[&str],
        idle_timeout: Duration,
        tls: Option<Arc<rustls::ServerConfig>>,
        console: Console,
    ) -> Kubelet {
        let root = tempfile::tempdir().unwrap();
        let workdir = tempfile::tempdir().unwrap();
        let shim = vec![env!("CARGO_BIN_EXE_kubelet-shim").into()];
        let runtime = Arc::new(ProcessRuntime::new(RuntimeConfig::new(root.path(), shim)));
        let spec = ContainerSpec {
            id: ContainerId {
                pod_uid: "uid-1".into(),
                pod_namespace: "default".into(),
                pod_name: "web".into(),
                container: "app".into(),
                attempt: 0,
            },
            argv: argv.iter().map(|a| a.to_string()).collect(),
            env: vec![
                ("PATH".into(), "/usr/local/bin:/usr/bin:/bin".into()),
                ("GREETING".into(), "hello".into()),
            ],
            working_dir: workdir.path().to_path_buf(),
            limits: Limits::default(),
            stdin: console.stdin,
            stdin_once: false,
            tty: console.tty,
            netns: None,
            files: None,
            mounts: Vec::new(),
        };
        let handle = runtime.start(spec).await.unwrap();
        let containers = HashMap::from([(("web".into(), "app".into()), handle.clone())]);
        let router = streaming::router_with_idle_timeout::<()>(
            Arc::new(Containers(containers)),
            runtime,
            idle_timeout,
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(skiff_kubelet::server::serve(
            listener,
            router,
            tls,
            std::future::pending(),
        ));
        Kubelet {
            address,
            handle,
            root,
            workdir,
        }
    }

    fn exec_url(&self, container: &str, command: &[&str], streams: &str) -> String {
        let mut url = format!(
            "ws://{}/exec/default/web/{container}?{streams}",
            self.address
        );
        for word in command {
            url.push_str("&command=");
            url.push_str(&urlencode(word));
        }
        url
    }

    async fn stop(self) {
        self.handle.stop(Duration::from_secs(5)).await;
    }
}

fn urlencode(word: &str) -> String {
    word.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

async fn connect(url: &str, protocols: &str) -> Result<(Socket, String), tungstenite::Error> {
    let mut request = url.into_client_request().unwrap();
    request
        .headers_mut()
        .insert("Sec-WebSocket-Protocol", protocols.parse().unwrap());
    let (socket, response) = tokio_tungstenite::connect_async(request).await?;
    let chosen = response
        .headers()
        .get("Sec-WebSocket-Protocol")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    Ok((socket, chosen))
}

/// What a session sent, by channel, until the server closed it.
#[derive(Debug, Default)]
struct Received {
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    error: Vec<u8>,
}

impl Received {
    fn status(&self) -> Value {
        serde_json::from_slice(&self.error)
            .unwrap_or_else(|_| panic!("a Status: {:?}", String::from_utf8_lossy(&self.error)))
    }
}

/// Reads binary channel messages until the close.
async fn read_all(socket: &mut Socket) -> Received {
    let mut received = Received::default();
    loop {
        let message = tokio::time::timeout(PATIENCE, socket.next())
            .await
            .expect("the session ends");
        let bytes = match message {
            Some(Ok(Message::Binary(bytes))) => bytes.to_vec(),
            Some(Ok(Message::Text(text))) => decode_base64_message(text.as_str()),
            Some(Ok(Message::Close(_))) | None => return received,
            Some(Ok(_)) => continue,
            Some(Err(err)) => panic!("socket failed: {err}"),
        };
        let Some((channel, payload)) = bytes.split_first() else {
            continue;
        };
        match channel {
            1 => received.stdout.extend_from_slice(payload),
            2 => received.stderr.extend_from_slice(payload),
            3 => received.error.extend_from_slice(payload),
            other => panic!("unexpected channel {other}"),
        }
    }
}

fn decode_base64_message(text: &str) -> Vec<u8> {
    use base64::Engine;
    let (channel, payload) = text.split_at(1);
    let mut bytes = vec![channel.as_bytes()[0] - b'0'];
    bytes.extend(
        base64::engine::general_purpose::STANDARD
            .decode(payload)
            .unwrap(),
    );
    bytes
}

#[tokio::test]
async fn echo_prints_to_stdout_and_ends_with_success() {
    let kubelet = Kubelet::start().await;
    let url = kubelet.exec_url("app", &["echo", "hi"], "stdout=true&stderr=true");
    let (mut socket, chosen) = connect(&url, "v5.channel.k8s.io,v4.channel.k8s.io")
        .await
        .unwrap();
    assert_eq!(chosen, "v5.channel.k8s.io");
    let received = read_all(&mut socket).await;
    assert_eq!(received.stdout, b"hi\n");
    assert_eq!(
        received.status(),
        serde_json::json!({"metadata": {}, "status": "Success"})
    );
    kubelet.stop().await;
}

#[tokio::test]
async fn a_non_zero_exit_is_a_status_with_the_exit_code() {
    let kubelet = Kubelet::start().await;
    let url = kubelet.exec_url(
        "app",
        &["sh", "-c", "echo oops >&2; exit 3"],
        "stdout=true&stderr=true",
    );
    let (mut socket, chosen) = connect(&url, "v4.channel.k8s.io").await.unwrap();
    assert_eq!(chosen, "v4.channel.k8s.io");
    let received = read_all(&mut socket).await;
    assert_eq!(received.stderr, b"oops\n");
    let status = received.status();
    assert_eq!(status["status"], "Failure");
    assert_eq!(status["reason"], "NonZeroExitCode");
    assert_eq!(
        status["details"]["causes"][0],
        serde_json::json!({"reason": "ExitCode", "message": "3"})
    );
    assert_eq!(
        status["message"],
        "command terminated with non-zero exit code: error executing command [sh -c echo oops >&2; exit 3], exit code 3"
    );
    kubelet.stop().await;
}

#[tokio::test]
async fn the_command_runs_with_the_containers_env_and_working_dir() {
    let kubelet = Kubelet::start().await;
    let url = kubelet.exec_url("app", &["sh", "-c", "echo $GREETING; pwd"], "stdout=true");
    let (mut socket, _) = connect(&url, "v4.channel.k8s.io").await.unwrap();
    let received = read_all(&mut socket).await;
    let expected = format!(
        "hello\n{}\n",
        std::fs::canonicalize(kubelet.workdir.path())
            .unwrap()
            .display()
    );
    assert_eq!(String::from_utf8_lossy(&received.stdout), expected);
    kubelet.stop().await;
}

#[tokio::test]
async fn the_command_joins_the_containers_cgroup() {
    let kubelet = Kubelet::start().await;
    let skiff_kubelet::runtime::LimitsEnforcement::Applied { cgroup } =
        kubelet.handle.limits().clone()
    else {
        eprintln!("this host gives containers no cgroup; skipped");
        kubelet.stop().await;
        return;
    };
    let url = kubelet.exec_url("app", &["cat", "/proc/self/cgroup"], "stdout=true");
    let (mut socket, _) = connect(&url, "v5.channel.k8s.io").await.unwrap();
    let received = read_all(&mut socket).await;
    let own = String::from_utf8_lossy(&received.stdout);
    let path = own
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .unwrap_or_else(|| panic!("no cgroup v2 line: {own:?}"));
    assert!(
        cgroup.ends_with(path.trim_start_matches('/')),
        "exec ran in {path}, the container is in {}",
        cgroup.display()
    );
    kubelet.stop().await;
}

#[tokio::test]
async fn stdin_is_echoed_by_cat_and_ends_on_the_v5_close_signal() {
    let kubelet = Kubelet::start().await;
    let url = kubelet.exec_url("app", &["cat"], "stdin=true&stdout=true&stderr=true");
    let (mut socket, _) = connect(&url, "v5.channel.k8s.io").await.unwrap();
    socket
        .send(Message::binary(b"\x00hello ".to_vec()))
        .await
        .unwrap();
    // A resize on a session without a terminal, an unknown channel and a
    // malformed message change nothing.
    socket
        .send(Message::binary(
            b"\x04{\"Width\":80,\"Height\":24}".to_vec(),
        ))
        .await
        .unwrap();
    socket
        .send(Message::binary(b"\x09junk".to_vec()))
        .await
        .unwrap();
    socket.send(Message::binary(vec![255])).await.unwrap();
    socket
        .send(Message::binary(b"\x00world".to_vec()))
        .await
        .unwrap();
    socket.send(Message::binary(vec![255, 0])).await.unwrap();
    let received = read_all(&mut socket).await;
    assert_eq!(received.stdout, b"hello world");
    assert_eq!(received.status()["status"], "Success");
    kubelet.stop().await;
}

#[tokio::test]
async fn base64_protocols_use_text_messages() {
    let kubelet = Kubelet::start().await;
    let url = kubelet.exec_url("app", &["cat"], "stdin=true&stdout=true");
    let (mut socket, chosen) = connect(&url, "v4.base64.channel.k8s.io").await.unwrap();
    assert_eq!(chosen, "v4.base64.channel.k8s.io");
    socket.send(Message::text("0aGkK")).await.unwrap();
    // v4 has no close signal: the first output shows cat got stdin.
    let mut stdout = Vec::new();
    while stdout != b"hi\n" {
        let message = tokio::time::timeout(PATIENCE, socket.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        let Message::Text(text) = message else {
            panic!("not a text message: {message:?}");
        };
        let bytes = decode_base64_message(text.as_str());
        assert_eq!(bytes[0], 1);
        stdout.extend_from_slice(&bytes[1..]);
    }
    kubelet.stop().await;
}

#[tokio::test]
async fn a_missing_program_is_a_failure_status_with_runcs_words() {
    let kubelet = Kubelet::start().await;
    let url = kubelet.exec_url("app", &["no-such-program-xyz"], "stdout=true");
    let (mut socket, _) = connect(&url, "v5.channel.k8s.io").await.unwrap();
    let status = read_all(&mut socket).await.status();
    assert_eq!(status["status"], "Failure");
    let message = status["message"].as_str().unwrap();
    assert!(
        message.contains("exec: \"no-such-program-xyz\": executable file not found in $PATH"),
        "{message}"
    );
    kubelet.stop().await;
}

#[tokio::test]
async fn pre_v4_protocols_get_the_bare_message_on_failure() {
    let kubelet = Kubelet::start().await;
    let url = kubelet.exec_url("app", &["sh", "-c", "exit 2"], "stdout=true");
    let (mut socket, chosen) = connect(&url, "channel.k8s.io").await.unwrap();
    assert_eq!(chosen, "channel.k8s.io");
    let received = read_all(&mut socket).await;
    assert_eq!(
        String::from_utf8_lossy(&received.error),
        "command terminated with non-zero exit code: error executing command [sh -c exit 2], exit code 2"
    );
    kubelet.stop().await;
}

/// The status of a refused upgrade, and its body.
async fn refused(url: &str, protocols: &str) -> (u16, String) {
    match connect(url, protocols).await {
        Err(tungstenite::Error::Http(response)) => (
            response.status().as_u16(),
            String::from_utf8_lossy(response.body().as_deref().unwrap_or_default()).into_owned(),
        ),
        Err(other) => panic!("not an HTTP refusal: {other}"),
        Ok(_) => panic!("upgraded"),
    }
}

#[tokio::test]
async fn bad_requests_are_refused_before_the_upgrade() {
    let kubelet = Kubelet::start().await;
    let missing = kubelet.exec_url("nope", &["true"], "stdout=true");
    assert_eq!(
        refused(&missing, "v5.channel.k8s.io").await,
        (400, "container nope is not valid for pod web".to_string())
    );
    let other_pod = format!(
        "ws://{}/exec/default/db/app?command=true&stdout=true",
        kubelet.address
    );
    assert_eq!(refused(&other_pod, "v5.channel.k8s.io").await.0, 404);
    let no_streams = kubelet.exec_url("app", &["true"], "tty=false");
    assert_eq!(refused(&no_streams, "v5.channel.k8s.io").await.0, 400);
    let fine = kubelet.exec_url("app", &["true"], "stdout=true");
    let (code, body) = refused(&fine, "v3.channel.k8s.io").await;
    assert_eq!(code, 400);
    assert!(body.contains("v5.channel.k8s.io"), "{body}");
    kubelet.stop().await;
}

#[tokio::test]
async fn a_client_that_goes_away_ends_the_command() {
    let kubelet = Kubelet::start().await;
    let marker = kubelet.workdir.path().join("pid");
    let script = format!("echo $$ > {}; exec sleep 300", marker.display());
    let url = kubelet.exec_url("app", &["sh", "-c", &script], "stdout=true");
    let (mut socket, _) = connect(&url, "v5.channel.k8s.io").await.unwrap();
    let pid = wait_for_file(&marker).await;
    socket.close(None).await.unwrap();
    drop(socket);
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while process_runs(pid) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "pid {pid} still runs"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    kubelet.stop().await;
}

/// After its status and Close the kubelet reads on until the client's
/// Close: a connection dropped with the client's bytes unread is reset,
/// and a reset throws away what is still queued to the client (the
/// status itself, on a loaded machine). Here the client writes after the
/// kubelet's Close and must find the connection still read, then ended
/// cleanly.
#[tokio::test]
async fn the_kubelet_waits_for_the_clients_close() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let kubelet = Kubelet::start().await;
    let url = kubelet.exec_url("app", &["true"], "stdout=true");
    let (mut socket, _) = connect(&url, "v5.channel.k8s.io").await.unwrap();
    loop {
        let message = tokio::time::timeout(PATIENCE, socket.next())
            .await
            .expect("the session ends")
            .expect("a message before the status")
            .unwrap();
        if matches!(&message, Message::Binary(bytes) if bytes.first() == Some(&3)) {
            break;
        }
    }
    let tokio_tungstenite::MaybeTlsStream::Plain(tcp) = socket.get_mut() else {
        panic!("the test kubelet serves plain HTTP");
    };
    // Long enough for a kubelet that does not wait to have closed.
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Masked client frames (a zero key): a message on stdin, then Close 1000.
    tcp.write_all(&[0x82, 0x82, 0, 0, 0, 0, 0, b'x'])
        .await
        .expect("the stdin message is written");
    tokio::time::sleep(Duration::from_millis(100)).await;
    tcp.write_all(&[0x88, 0x82, 0, 0, 0, 0, 0x03, 0xe8])
        .await
        .expect("the Close is written to a connection still open");
    let mut rest = Vec::new();
    tokio::time::timeout(PATIENCE, tcp.read_to_end(&mut rest))
        .await
        .expect("the kubelet ends the connection")
        .expect("an orderly end, not a reset");
    kubelet.stop().await;
}

#[tokio::test]
async fn an_idle_connection_is_closed_and_its_command_stopped() {
    let kubelet = Kubelet::start_with(&["sleep", "300"], Duration::from_millis(500)).await;
    let marker = kubelet.workdir.path().join("pid");
    let script = format!("echo $$ > {}; exec sleep 300", marker.display());
    let url = kubelet.exec_url("app", &["sh", "-c", &script], "stdout=true");
    let (mut socket, _) = connect(&url, "v5.channel.k8s.io").await.unwrap();
    let pid = wait_for_file(&marker).await;
    // The server closes the socket: the stream ends without a Status.
    let ended = tokio::time::timeout(PATIENCE, async {
        loop {
            match socket.next().await {
                Some(Ok(Message::Binary(bytes))) if bytes.len() > 1 => {
                    panic!("unexpected output {bytes:?}")
                }
                Some(Ok(_)) => continue,
                Some(Err(_)) | None => return,
            }
        }
    })
    .await;
    assert!(ended.is_ok(), "the idle connection stays open");
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while process_runs(pid) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "pid {pid} still runs"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    kubelet.stop().await;
}

async fn wait_for_file(path: &Path) -> u32 {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        if let Ok(text) = std::fs::read_to_string(path) {
            if let Ok(pid) = text.trim().parse() {
                return pid;
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} never written",
            path.display()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn process_runs(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        !stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z')
    })
}

#[tokio::test]
async fn a_tty_session_runs_on_a_terminal_that_the_client_resizes() {
    let kubelet = Kubelet::start().await;
    let script = "read line; [ -t 0 ] && [ -t 1 ] && echo on-a-tty; stty size; echo got:$line";
    let url = kubelet.exec_url(
        "app",
        &["sh", "-c", script],
        "stdin=true&stdout=true&stderr=true&tty=true",
    );
    let (mut socket, _) = connect(&url, "v5.channel.k8s.io").await.unwrap();
    socket
        .send(Message::binary(
            b"\x04{\"Width\":100,\"Height\":40}".to_vec(),
        ))
        .await
        .unwrap();
    socket
        .send(Message::binary(b"\x00x\n".to_vec()))
        .await
        .unwrap();
    let received = read_all(&mut socket).await;
    let output = String::from_utf8_lossy(&received.stdout);
    assert!(output.contains("on-a-tty\r\n"), "{output:?}");
    assert!(output.contains("40 100\r\n"), "{output:?}");
    assert!(output.contains("got:x\r\n"), "{output:?}");
    assert!(received.stderr.is_empty());
    assert_eq!(received.status()["status"], "Success");
    kubelet.stop().await;
}

#[tokio::test]
async fn a_tty_sessions_exit_code_is_reported() {
    let kubelet = Kubelet::start().await;
    let url = kubelet.exec_url("app", &["sh", "-c", "exit 7"], "stdout=true&tty=true");
    let (mut socket, _) = connect(&url, "v4.channel.k8s.io").await.unwrap();
    let status = read_all(&mut socket).await.status();
    assert_eq!(status["details"]["causes"][0]["message"], "7");
    kubelet.stop().await;
}

mod spdy {
    //! A SPDY/3.1 exec client as client-go's: upgrade, then one stream per
    //! streamType, the error stream first.

    use super::*;
    use bytes::Bytes;
    use skiff_kubelet::streaming::spdy::frame::{Frame, FrameReader, FrameWriter};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// Sends the upgrade request; returns the response head and the
    /// connection.
    async fn upgrade(
        kubelet: &Kubelet,
        path_and_query: &str,
        protocols: &[&str],
    ) -> (String, tokio::net::TcpStream) {
        let stream = tokio::net::TcpStream::connect(kubelet.address)
            .await
            .unwrap();
        upgrade_on(stream, path_and_query, protocols).await
    }

    async fn upgrade_on<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(
        mut stream: S,
        path_and_query: &str,
        protocols: &[&str],
    ) -> (String, S) {
        let mut request = format!(
            "POST {path_and_query} HTTP/1.1\r\nHost: kubelet\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\nContent-Length: 0\r\n"
        );
        for protocol in protocols {
            request.push_str(&format!("X-Stream-Protocol-Version: {protocol}\r\n"));
        }
        request.push_str("\r\n");
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut head = Vec::new();
        while !head.ends_with(b"\r\n\r\n") {
            let mut byte = [0u8; 1];
            let n = tokio::time::timeout(PATIENCE, stream.read(&mut byte))
                .await
                .unwrap()
                .unwrap();
            assert_eq!(n, 1, "connection closed in the head: {head:?}");
            head.push(byte[0]);
        }
        (String::from_utf8(head).unwrap(), stream)
    }

    fn path(command: &[&str], streams: &str) -> String {
        let mut path = format!("/exec/default/web/app?{streams}");
        for word in command {
            path.push_str("&command=");
            path.push_str(&urlencode(word));
        }
        path
    }

    /// Opens `kinds` as streams 1, 3, 5…, sends `stdin` (then its end) if
    /// a stdin stream is among them, and reads what comes back by stream
    /// type until the server ends the connection.
    async fn session<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(
        stream: S,
        kinds: &[&str],
        stdin: &[u8],
    ) -> HashMap<String, Vec<u8>> {
        let (read, mut write) = tokio::io::split(stream);
        let mut writer = FrameWriter::new();
        let mut ids = HashMap::new();
        for (i, kind) in kinds.iter().enumerate() {
            let stream_id = 2 * i as u32 + 1;
            ids.insert(stream_id, kind.to_string());
            let frame = Frame::SynStream {
                stream_id,
                fin: false,
                headers: vec![("streamtype".into(), kind.to_string())],
            };
            write.write_all(&writer.encode(&frame)).await.unwrap();
        }
        if let Some((&stdin_id, _)) = ids.iter().find(|(_, k)| *k == "stdin") {
            let data = Frame::Data {
                stream_id: stdin_id,
                fin: true,
                data: Bytes::copy_from_slice(stdin),
            };
            write.write_all(&writer.encode(&data)).await.unwrap();
        }
        let mut reader = FrameReader::new(read);
        let mut received: HashMap<String, Vec<u8>> = HashMap::new();
        let mut replies = 0;
        loop {
            let frame = tokio::time::timeout(PATIENCE, reader.next())
                .await
                .expect("the session ends")
                .unwrap();
            match frame {
                None | Some(Frame::GoAway { .. }) => break,
                Some(Frame::SynReply { stream_id, .. }) => {
                    assert!(ids.contains_key(&stream_id));
                    replies += 1;
                }
                Some(Frame::Data {
                    stream_id, data, ..
                }) => received
                    .entry(ids[&stream_id].clone())
                    .or_default()
                    .extend_from_slice(&data),
                Some(other) => panic!("unexpected frame {other:?}"),
            }
        }
        assert_eq!(replies, kinds.len(), "every stream gets a reply");
        received
    }

    #[tokio::test]
    async fn exec_over_spdy_with_stdin_and_a_v4_status() {
        let kubelet = Kubelet::start().await;
        let (head, stream) = upgrade(
            &kubelet,
            &path(
                &["sh", "-c", "cat; echo err >&2; exit 3"],
                "stdin=true&stdout=true&stderr=true",
            ),
            &["v4.channel.k8s.io", "v3.channel.k8s.io"],
        )
        .await;
        assert!(head.starts_with("HTTP/1.1 101"), "{head}");
        assert!(
            head.to_ascii_lowercase()
                .contains("x-stream-protocol-version: v4.channel.k8s.io"),
            "{head}"
        );
        let received = session(stream, &["error", "stdin", "stdout", "stderr"], b"hello").await;
        assert_eq!(received["stdout"], b"hello");
        assert_eq!(received["stderr"], b"err\n");
        let status: Value = serde_json::from_slice(&received["error"]).unwrap();
        assert_eq!(status["reason"], "NonZeroExitCode");
        assert_eq!(status["details"]["causes"][0]["message"], "3");
        kubelet.stop().await;
    }

    #[tokio::test]
    async fn a_successful_spdy_exec_writes_nothing_on_the_v2_error_stream() {
        let kubelet = Kubelet::start().await;
        let (head, stream) = upgrade(
            &kubelet,
            &path(&["echo", "hi"], "stdout=true"),
            &["v2.channel.k8s.io"],
        )
        .await;
        assert!(head.starts_with("HTTP/1.1 101"), "{head}");
        let received = session(stream, &["error", "stdout"], b"").await;
        assert_eq!(received["stdout"], b"hi\n");
        assert!(
            received.get("error").is_none_or(Vec::is_empty),
            "{received:?}"
        );
        kubelet.stop().await;
    }

    /// The kubelet's port is HTTPS: the upgrade works through TLS too.
    #[tokio::test]
    async fn exec_over_spdy_through_the_kubelets_tls() {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let certified = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
        let key =
            rustls::pki_types::PrivateKeyDer::Pkcs8(certified.signing_key.serialize_der().into());
        let server = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![certified.cert.der().clone()], key)
            .unwrap();
        let kubelet = Kubelet::start_serving(
            &["sleep", "300"],
            streaming::DEFAULT_IDLE_TIMEOUT,
            Some(Arc::new(server)),
            Console::default(),
        )
        .await;
        let mut roots = rustls::RootCertStore::empty();
        roots.add(certified.cert.der().clone()).unwrap();
        let client = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        let tcp = tokio::net::TcpStream::connect(kubelet.address)
            .await
            .unwrap();
        let tls = tokio_rustls::TlsConnector::from(Arc::new(client))
            .connect("localhost".try_into().unwrap(), tcp)
            .await
            .unwrap();
        let (head, stream) = upgrade_on(
            tls,
            &path(&["echo", "secure"], "stdout=true"),
            &["v4.channel.k8s.io"],
        )
        .await;
        assert!(head.starts_with("HTTP/1.1 101"), "{head}");
        let received = session(stream, &["error", "stdout"], b"").await;
        assert_eq!(received["stdout"], b"secure\n");
        let status: Value = serde_json::from_slice(&received["error"]).unwrap();
        assert_eq!(status["status"], "Success");
        kubelet.stop().await;
    }

    #[tokio::test]
    async fn an_unknown_spdy_protocol_is_forbidden() {
        let kubelet = Kubelet::start().await;
        let (head, _) = upgrade(
            &kubelet,
            &path(&["true"], "stdout=true"),
            &["v9.channel.k8s.io"],
        )
        .await;
        assert!(head.starts_with("HTTP/1.1 403"), "{head}");
        kubelet.stop().await;
    }
}

mod port_forward {
    //! Port-forward over WebSocket's channel protocol.

    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A stand-in for a pod's port that answers every read at once,
    /// upper-cased.
    async fn upper_case_echo() -> u16 {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut buf = [0u8; 1024];
                    while let Ok(n) = socket.read(&mut buf).await {
                        if n == 0
                            || socket
                                .write_all(&buf[..n].to_ascii_uppercase())
                                .await
                                .is_err()
                        {
                            return;
                        }
                    }
                });
            }
        });
        port
    }

    async fn next_binary(socket: &mut Socket) -> Vec<u8> {
        loop {
            let message = tokio::time::timeout(PATIENCE, socket.next())
                .await
                .expect("a message")
                .expect("the socket is open")
                .unwrap();
            if let Message::Binary(bytes) = message {
                return bytes.to_vec();
            }
        }
    }

    #[tokio::test]
    async fn each_port_has_a_data_and_an_error_channel_opened_with_the_port() {
        let kubelet = Kubelet::start().await;
        let open = upper_case_echo().await;
        let closed = {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            listener.local_addr().unwrap().port()
        };
        let url = format!(
            "ws://{}/portForward/default/web?ports={open}&ports={closed}",
            kubelet.address
        );
        let (mut socket, chosen) = connect(&url, "v4.channel.k8s.io").await.unwrap();
        assert_eq!(chosen, "v4.channel.k8s.io");
        let mut opened = Vec::new();
        for _ in 0..4 {
            opened.push(next_binary(&mut socket).await);
        }
        let mut expected = Vec::new();
        for (i, port) in [open, closed].into_iter().enumerate() {
            for channel in [2 * i as u8, 2 * i as u8 + 1] {
                let mut message = vec![channel];
                message.extend_from_slice(&port.to_le_bytes());
                expected.push(message);
            }
        }
        assert_eq!(opened, expected);
        // The closed port says why on its error channel (3).
        let error = next_binary(&mut socket).await;
        assert_eq!(error[0], 3, "{error:?}");
        let text = String::from_utf8_lossy(&error[1..]);
        assert!(
            text.starts_with(&format!(
                "error forwarding port {closed} to pod default/web"
            )),
            "{text}"
        );
        socket
            .send(Message::binary(b"\x00hello".to_vec()))
            .await
            .unwrap();
        // Unknown channels and stray bytes change nothing.
        socket
            .send(Message::binary(b"\x09junk".to_vec()))
            .await
            .unwrap();
        socket.send(Message::binary(Vec::new())).await.unwrap();
        let mut answer = Vec::new();
        while answer != b"HELLO" {
            let message = next_binary(&mut socket).await;
            assert_eq!(message[0], 0, "{message:?}");
            answer.extend_from_slice(&message[1..]);
        }
        kubelet.stop().await;
    }

    #[tokio::test]
    async fn port_forward_without_ports_or_pod_is_refused() {
        let kubelet = Kubelet::start().await;
        let no_ports = format!("ws://{}/portForward/default/web", kubelet.address);
        assert_eq!(refused(&no_ports, "v4.channel.k8s.io").await.0, 400);
        let bad_port = format!(
            "ws://{}/portForward/default/web?ports=http",
            kubelet.address
        );
        assert_eq!(refused(&bad_port, "v4.channel.k8s.io").await.0, 400);
        let no_pod = format!("ws://{}/portForward/default/db?ports=80", kubelet.address);
        assert_eq!(refused(&no_pod, "v4.channel.k8s.io").await.0, 404);
        kubelet.stop().await;
    }
}

mod attach {
    //! Attach streams the container's output from now on.

    use super::*;

    #[tokio::test]
    async fn attach_streams_new_output_on_its_own_channels_until_the_container_ends() {
        let script = "i=0; while [ $i -lt 600 ]; do echo out$i; echo err$i >&2; i=$((i+1)); sleep 0.05; done";
        let kubelet = Kubelet::start_running(&["sh", "-c", script]).await;
        // Attach once the first lines are logged: they are not replayed.
        let log = kubelet.root.path().join("pods/default_web_uid-1/app/0.log");
        let deadline = tokio::time::Instant::now() + PATIENCE;
        while !std::fs::read_to_string(&log).is_ok_and(|text| text.contains(" out1\n")) {
            assert!(tokio::time::Instant::now() < deadline, "nothing logged");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let url = format!(
            "ws://{}/attach/default/web/app?stdout=true&stderr=true",
            kubelet.address
        );
        let (mut socket, chosen) = connect(&url, "v5.channel.k8s.io").await.unwrap();
        assert_eq!(chosen, "v5.channel.k8s.io");
        let mut stdout = Vec::new();
        let mut stderr = Vec::new();
        while !(stdout.ends_with(b"\n") && stderr.ends_with(b"\n") && stdout.len() > 10) {
            let message = tokio::time::timeout(PATIENCE, socket.next())
                .await
                .unwrap()
                .unwrap()
                .unwrap();
            let Message::Binary(bytes) = message else {
                continue;
            };
            match bytes.first() {
                Some(1) => stdout.extend_from_slice(&bytes[1..]),
                Some(2) => stderr.extend_from_slice(&bytes[1..]),
                other => panic!("unexpected channel {other:?}"),
            }
        }
        let stdout = String::from_utf8(stdout).unwrap();
        let stderr = String::from_utf8(stderr).unwrap();
        assert!(stdout.lines().all(|l| l.starts_with("out")), "{stdout}");
        assert!(stderr.lines().all(|l| l.starts_with("err")), "{stderr}");
        assert!(!stdout.starts_with("out0\n"), "{stdout}");
        // The container ending ends the session with Success.
        kubelet.handle.stop(Duration::from_secs(5)).await;
        let rest = read_all(&mut socket).await;
        assert_eq!(rest.status()["status"], "Success");
    }

    #[tokio::test]
    async fn attach_writes_stdin_to_a_container_started_with_stdin() {
        let kubelet =
            Kubelet::start_serving(&["cat"], streaming::DEFAULT_IDLE_TIMEOUT, None, STDIN).await;
        let url = format!(
            "ws://{}/attach/default/web/app?stdin=true&stdout=true&stderr=true",
            kubelet.address
        );
        let mut stdout = Vec::new();
        for word in ["hello", "again"] {
            // Each attach is a new client of the same stdin.
            let (mut socket, _) = connect(&url, "v5.channel.k8s.io").await.unwrap();
            let line = format!("\x00{word}\n");
            socket
                .send(Message::binary(line.into_bytes()))
                .await
                .unwrap();
            stdout.clear();
            while stdout != format!("{word}\n").as_bytes() {
                let message = tokio::time::timeout(PATIENCE, socket.next())
                    .await
                    .expect("cat's output comes back")
                    .unwrap()
                    .unwrap();
                if let Message::Binary(bytes) = message {
                    if bytes.first() == Some(&1) {
                        stdout.extend_from_slice(&bytes[1..]);
                    }
                }
            }
            socket.close(None).await.unwrap();
        }
        kubelet.stop().await;
    }

    #[tokio::test]
    async fn attach_with_a_terminal_relays_it_both_ways_and_resizes_it() {
        let script = "read line; stty size; echo got:$line";
        let kubelet = Kubelet::start_serving(
            &["sh", "-c", script],
            streaming::DEFAULT_IDLE_TIMEOUT,
            None,
            Console {
                stdin: true,
                tty: true,
            },
        )
        .await;
        let url = format!(
            "ws://{}/attach/default/web/app?stdin=true&stdout=true&tty=true",
            kubelet.address
        );
        let (mut socket, _) = connect(&url, "v5.channel.k8s.io").await.unwrap();
        socket
            .send(Message::binary(
                b"\x04{\"Width\":100,\"Height\":40}".to_vec(),
            ))
            .await
            .unwrap();
        socket
            .send(Message::binary(b"\x00x\n".to_vec()))
            .await
            .unwrap();
        // The container's exit ends the session.
        let received = read_all(&mut socket).await;
        let output = String::from_utf8_lossy(&received.stdout);
        // The terminal echoes what is typed, then the shell's output.
        assert!(output.starts_with("x\r\n"), "{output:?}");
        assert!(output.contains("40 100\r\n"), "{output:?}");
        assert!(output.contains("got:x\r\n"), "{output:?}");
        assert!(received.stderr.is_empty());
        assert_eq!(received.status()["status"], "Success");
        let log = kubelet.root.path().join("pods/default_web_uid-1/app/0.log");
        let log = std::fs::read_to_string(log).unwrap();
        assert!(log.contains(" stdout F got:x\r\n"), "{log}");
        kubelet.stop().await;
    }

    #[tokio::test]
    async fn attach_with_a_terminal_to_a_container_without_one_is_refused() {
        let kubelet = Kubelet::start_serving(
            &["sleep", "300"],
            streaming::DEFAULT_IDLE_TIMEOUT,
            None,
            STDIN,
        )
        .await;
        let url = format!(
            "ws://{}/attach/default/web/app?stdin=true&stdout=true&tty=true",
            kubelet.address
        );
        let (code, body) = refused(&url, "v5.channel.k8s.io").await;
        assert_eq!(code, 400);
        assert!(body.contains("without tty: true"), "{body}");
        kubelet.stop().await;
    }

    #[tokio::test]
    async fn attach_with_stdin_to_a_container_without_stdin_is_refused() {
        let kubelet = Kubelet::start().await;
        let url = format!(
            "ws://{}/attach/default/web/app?stdin=true&stdout=true",
            kubelet.address
        );
        let (code, body) = refused(&url, "v5.channel.k8s.io").await;
        assert_eq!(code, 400);
        assert!(body.contains("without stdin"), "{body}");
        kubelet.stop().await;
    }
}
