//! Probes against real processes and real sockets on 127.0.0.1.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::http::{HeaderMap, StatusCode};
use axum::routing::get;
use k8s_openapi::api::core::v1::{
    ExecAction, GRPCAction, HTTPGetAction, HTTPHeader, TCPSocketAction,
};
use tokio::net::TcpListener;

use super::*;

fn target() -> ProbeTarget {
    ProbeTarget {
        host: "127.0.0.1".to_string(),
        env: vec![("PATH".to_string(), crate::env::DEFAULT_PATH.to_string())],
        working_dir: PathBuf::new(),
        ports: Vec::new(),
        netns: None,
        files: None,
        mounts: Vec::new(),
    }
}

fn exec_probe(script: &str, timeout_seconds: i32) -> Probe {
    Probe {
        exec: Some(ExecAction {
            command: Some(vec!["sh".into(), "-c".into(), script.into()]),
        }),
        timeout_seconds: Some(timeout_seconds),
        ..Probe::default()
    }
}

fn http_probe(port: IntOrString, path: &str) -> Probe {
    Probe {
        http_get: Some(HTTPGetAction {
            port,
            path: Some(path.to_string()),
            ..HTTPGetAction::default()
        }),
        timeout_seconds: Some(5),
        ..Probe::default()
    }
}

fn failure_text(result: ProbeResult) -> String {
    match result {
        ProbeResult::Failure(message) => message,
        other => panic!("expected a failure, got {other:?}"),
    }
}

#[tokio::test]
async fn exec_probes_judge_the_exit_code_with_env_and_cwd() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut target = target();
    target.env.push(("GREETING".into(), "hello".into()));
    target.working_dir = dir.path().to_path_buf();
    let check = format!(
        "test \"$GREETING\" = hello && test \"$(pwd -P)\" = \"{}\"",
        dir.path().canonicalize().expect("dir").display()
    );
    assert_eq!(
        run_once(&exec_probe(&check, 10), &target).await,
        ProbeResult::Success
    );
    let failed = run_once(&exec_probe("echo out; echo err >&2; exit 1", 10), &target).await;
    assert_eq!(failure_text(failed), "out\nerr\n");
    let silent = run_once(&exec_probe("exit 3", 10), &target).await;
    assert_eq!(
        failure_text(silent),
        "command \"sh -c exit 3\" exited with code 3"
    );
    let missing = Probe {
        exec: Some(ExecAction {
            command: Some(vec!["/nonexistent/probe".into()]),
        }),
        ..Probe::default()
    };
    assert!(failure_text(run_once(&missing, &target).await).contains("failed to run"));
}

#[tokio::test]
async fn exec_probes_time_out_and_keep_only_ten_kib_of_output() {
    let started = Instant::now();
    let slow = run_once(&exec_probe("sleep 30", 1), &target()).await;
    assert_eq!(failure_text(slow), "command \"sh -c sleep 30\" timed out");
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "killed, not waited for"
    );

    let started = Instant::now();
    let background = run_once(&exec_probe("sleep 30 & exit 0", 10), &target()).await;
    assert_eq!(background, ProbeResult::Success);
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "leftovers killed with the group"
    );

    let loud = run_once(
        &exec_probe("head -c 50000 /dev/zero | tr '\\0' x; exit 1", 10),
        &target(),
    )
    .await;
    assert_eq!(failure_text(loud).len(), exec::OUTPUT_LIMIT);
}

#[tokio::test]
async fn tcp_probes_need_an_open_port() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("listener");
    let port = listener.local_addr().expect("addr").port();
    let probe = |port: IntOrString| Probe {
        tcp_socket: Some(TCPSocketAction { port, host: None }),
        ..Probe::default()
    };
    let mut target = target();
    target.ports.push(ContainerPort {
        name: Some("db".into()),
        container_port: i32::from(port),
        ..ContainerPort::default()
    });
    assert_eq!(
        run_once(&probe(IntOrString::Int(i32::from(port))), &target).await,
        ProbeResult::Success
    );
    assert_eq!(
        run_once(&probe(IntOrString::String("db".into())), &target).await,
        ProbeResult::Success
    );
    let unnamed = run_once(&probe(IntOrString::String("web".into())), &target).await;
    assert!(failure_text(unnamed).contains("couldn't find port: web"));
    drop(listener);
    let closed = run_once(&probe(IntOrString::Int(i32::from(port))), &target).await;
    assert!(failure_text(closed).starts_with(&format!("dial tcp 127.0.0.1:{port}")));
}

/// A server whose `/flaky` fails `failures` times, then succeeds.
async fn serve(failures: usize) -> (u16, Arc<AtomicUsize>) {
    let hits = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&hits);
    let app = axum::Router::new()
        .route("/ok", get(|| async { StatusCode::OK }))
        .route(
            "/moved",
            get(|| async { (StatusCode::FOUND, [("location", "http://example.invalid/")]) }),
        )
        .route(
            "/broken",
            get(|| async { StatusCode::INTERNAL_SERVER_ERROR }),
        )
        .route(
            "/slow",
            get(|| async {
                tokio::time::sleep(Duration::from_secs(30)).await;
                StatusCode::OK
            }),
        )
        .route(
            "/headers",
            get(|headers: HeaderMap| async move {
                let custom = headers.get("x-probe").is_some_and(|v| v == "yes");
                let agent = headers
                    .get("user-agent")
                    .is_some_and(|v| v.to_str().is_ok_and(|a| a.starts_with("kube-probe/")));
                if custom && agent {
                    StatusCode::OK
                } else {
                    StatusCode::BAD_REQUEST
                }
            }),
        )
        .route(
            "/flaky",
            get(move || async move {
                if counter.fetch_add(1, Ordering::SeqCst) < failures {
                    StatusCode::INTERNAL_SERVER_ERROR
                } else {
                    StatusCode::OK
                }
            }),
        );
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("listener");
    let port = listener.local_addr().expect("addr").port();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (port, hits)
}

#[tokio::test]
async fn http_probes_accept_2xx_and_3xx_only() {
    let (port, _) = serve(0).await;
    let port_int = IntOrString::Int(i32::from(port));
    let target = target();
    assert_eq!(
        run_once(&http_probe(port_int.clone(), "ok"), &target).await,
        ProbeResult::Success
    );
    assert_eq!(
        run_once(&http_probe(port_int.clone(), "/moved"), &target).await,
        ProbeResult::Success,
        "redirects are not followed"
    );
    let broken = run_once(&http_probe(port_int.clone(), "/broken"), &target).await;
    assert_eq!(
        failure_text(broken),
        "HTTP probe failed with statuscode: 500"
    );

    let mut with_headers = http_probe(IntOrString::String("http".into()), "/headers");
    if let Some(action) = with_headers.http_get.as_mut() {
        action.http_headers = Some(vec![HTTPHeader {
            name: "X-Probe".into(),
            value: "yes".into(),
        }]);
    }
    let mut named = target.clone();
    named.ports.push(ContainerPort {
        name: Some("http".into()),
        container_port: i32::from(port),
        ..ContainerPort::default()
    });
    assert_eq!(run_once(&with_headers, &named).await, ProbeResult::Success);

    let mut slow = http_probe(port_int.clone(), "/slow");
    slow.timeout_seconds = Some(1);
    assert!(failure_text(run_once(&slow, &target).await).contains("context deadline exceeded"));

    let mut https = http_probe(port_int, "/ok");
    if let Some(action) = https.http_get.as_mut() {
        action.scheme = Some("HTTPS".into());
    }
    assert!(
        failure_text(run_once(&https, &target).await).contains("HTTPS probes are not supported")
    );
    let grpc = Probe {
        grpc: Some(GRPCAction {
            port: i32::from(port),
            service: None,
        }),
        ..Probe::default()
    };
    assert_eq!(
        run_once(&grpc, &target).await,
        ProbeResult::Unknown("gRPC probes are not supported".into())
    );
}

#[tokio::test]
async fn a_readiness_prober_follows_a_server_that_recovers() {
    let (port, hits) = serve(2).await;
    let mut probe = http_probe(IntOrString::Int(i32::from(port)), "/flaky");
    probe.period_seconds = Some(1);
    probe.failure_threshold = Some(1);
    let prober = Prober::start(
        ProbeKind::Readiness,
        probe,
        target(),
        std::future::pending(),
    );
    let mut status = prober.subscribe();
    let failed = tokio::time::timeout(
        Duration::from_secs(60),
        status.wait_for(|s| !s.message.is_empty()),
    )
    .await
    .expect("a failure in time")
    .expect("prober alive")
    .clone();
    assert_eq!(
        failed,
        ProbeStatus {
            state: ProbeState::Failure,
            message: "HTTP probe failed with statuscode: 500".into()
        }
    );
    tokio::time::timeout(
        Duration::from_secs(60),
        status.wait_for(|s| s.state == ProbeState::Success),
    )
    .await
    .expect("ready in time")
    .expect("prober alive");
    assert!(
        hits.load(Ordering::SeqCst) >= 3,
        "two failures, then a success"
    );
    assert!(!prober.is_finished());
}

#[tokio::test]
async fn an_observed_prober_hands_over_each_result() {
    let (results, mut seen) = tokio::sync::mpsc::unbounded_channel();
    let probe = Probe {
        grpc: Some(GRPCAction {
            port: 1,
            service: None,
        }),
        period_seconds: Some(1),
        ..Probe::default()
    };
    let _prober = Prober::start_observed(
        ProbeKind::Liveness,
        probe,
        target(),
        std::future::pending(),
        move |result: &ProbeResult| {
            let _ = results.send(result.clone());
        },
    );
    let first = tokio::time::timeout(Duration::from_secs(10), seen.recv())
        .await
        .expect("a result in time");
    assert_eq!(
        first,
        Some(ProbeResult::Unknown("gRPC probes are not supported".into()))
    );
}
