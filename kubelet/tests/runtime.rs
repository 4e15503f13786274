//! The process runtime with the real shim binary: exit statuses, logs,
//! environment, stopping, recovery by a second runtime, cgroup limits.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use futures::StreamExt;
use skiff_kubelet::logs::{read_log, LogOptions};
use skiff_kubelet::runtime::{
    ContainerHandle, ContainerId, ContainerSpec, ExitStatus, Limits, LimitsEnforcement,
    ProcessRuntime, RecoveredState, RuntimeConfig, RuntimeError,
};

/// Far above anything these containers need, so a loaded machine never
/// fails a test by timing.
const PATIENCE: Duration = Duration::from_secs(60);

fn runtime(root: &Path) -> ProcessRuntime {
    let shim = vec![env!("CARGO_BIN_EXE_kubelet-shim").into()];
    ProcessRuntime::new(RuntimeConfig::new(root, shim))
}

fn spec(container: &str, attempt: u32, argv: &[&str]) -> ContainerSpec {
    ContainerSpec {
        id: ContainerId {
            pod_uid: "uid-1".into(),
            pod_namespace: "default".into(),
            pod_name: "web".into(),
            container: container.into(),
            attempt,
        },
        argv: argv.iter().map(|a| a.to_string()).collect(),
        env: vec![("PATH".into(), "/usr/local/bin:/usr/bin:/bin".into())],
        working_dir: PathBuf::from("/"),
        limits: Limits::default(),
        stdin: false,
        stdin_once: false,
        tty: false,
        netns: None,
        files: None,
        mounts: Vec::new(),
    }
}

async fn wait(handle: &ContainerHandle) -> ExitStatus {
    tokio::time::timeout(PATIENCE, handle.wait())
        .await
        .expect("container exits")
}

async fn logs(runtime: &ProcessRuntime, id: &ContainerId, options: LogOptions) -> String {
    let path = runtime.container_logs(id).path(id.attempt);
    let stream = read_log(&path, options, std::future::ready(()))
        .await
        .unwrap();
    let chunks: Vec<_> = stream.collect().await;
    let bytes: Vec<u8> = chunks
        .into_iter()
        .flat_map(|c| c.unwrap().to_vec())
        .collect();
    String::from_utf8(bytes).unwrap()
}

fn pid_exists(pid: u32) -> bool {
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
async fn exit_code_and_both_streams_are_recorded() {
    let root = tempfile::tempdir().unwrap();
    let runtime = runtime(root.path());
    let script = "echo out; echo err >&2; printf partial; exit 3";
    let handle = runtime
        .start(spec("app", 0, &["sh", "-c", script]))
        .await
        .unwrap();
    let (first, second) = tokio::join!(wait(&handle), wait(&handle));
    assert_eq!(first, second, "every waiter sees the same status");
    assert_eq!(
        (first.exit_code, first.signal, first.reason.as_str()),
        (3, None, "Error")
    );
    assert!(first.finished_at >= handle.started_at());
    assert_eq!(handle.exited(), Some(first));

    let raw = std::fs::read_to_string(runtime.container_logs(handle.id()).path(0)).unwrap();
    let records: HashSet<_> = raw.lines().map(|l| l.split_once(' ').unwrap().1).collect();
    let expected = HashSet::from(["stdout F out", "stderr F err", "stdout P partial"]);
    assert_eq!(records, expected, "raw log:\n{raw}");
    let shown = logs(&runtime, handle.id(), LogOptions::default()).await;
    for piece in ["out\n", "err\n", "partial"] {
        assert!(shown.contains(piece), "{shown:?} lacks {piece:?}");
    }
}

#[tokio::test]
async fn successful_exit_is_completed() {
    let root = tempfile::tempdir().unwrap();
    let runtime = runtime(root.path());
    let handle = runtime.start(spec("app", 0, &["true"])).await.unwrap();
    let status = wait(&handle).await;
    assert_eq!((status.exit_code, status.reason.as_str()), (0, "Completed"));
}

#[tokio::test]
async fn process_sees_exactly_its_env_and_working_dir() {
    let root = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let runtime = runtime(root.path());
    let mut spec = spec(
        "app",
        0,
        &["sh", "-c", "echo $FOO; pwd; echo ${HOME:-unset}"],
    );
    spec.env.push(("FOO".into(), "bar baz".into()));
    spec.working_dir = work.path().to_path_buf();
    let handle = runtime.start(spec).await.unwrap();
    assert_eq!(wait(&handle).await.exit_code, 0);
    let shown = logs(&runtime, handle.id(), LogOptions::default()).await;
    let work = work.path().canonicalize().unwrap();
    assert_eq!(shown, format!("bar baz\n{}\nunset\n", work.display()));
}

#[tokio::test]
async fn missing_program_fails_the_start_with_a_clear_error() {
    let root = tempfile::tempdir().unwrap();
    let runtime = runtime(root.path());
    let err = runtime
        .start(spec("app", 0, &["no-such-program-xyz", "arg"]))
        .await
        .unwrap_err();
    assert!(
        matches!(err, RuntimeError::ExecutableNotFound { .. }),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        "exec: \"no-such-program-xyz\": executable file not found in $PATH"
    );
    let mut spec = spec("app", 0, &["sh"]);
    spec.working_dir = root.path().join("missing");
    let err = runtime.start(spec).await.unwrap_err();
    assert!(matches!(err, RuntimeError::WorkingDir { .. }), "{err:?}");
}

#[tokio::test]
async fn stop_kills_a_process_that_ignores_sigterm_after_the_grace_period() {
    let root = tempfile::tempdir().unwrap();
    let runtime = runtime(root.path());
    let script = "trap '' TERM; echo ready; sleep 100";
    let handle = runtime
        .start(spec("app", 0, &["sh", "-c", script]))
        .await
        .unwrap();
    wait_for_log(&runtime, handle.id(), "ready").await;
    let grace = Duration::from_secs(1);
    let asked = Instant::now();
    let status = tokio::time::timeout(PATIENCE, handle.stop(grace))
        .await
        .unwrap();
    assert!(
        asked.elapsed() >= grace,
        "killed before the grace period ended"
    );
    assert_eq!(
        (status.exit_code, status.signal),
        (137, Some(libc::SIGKILL))
    );
    assert_eq!(status.reason, "Error");
    assert!(!pid_exists(handle.pid()));
}

#[tokio::test]
async fn stop_of_a_well_behaved_process_gives_143() {
    let root = tempfile::tempdir().unwrap();
    let runtime = runtime(root.path());
    let handle = runtime
        .start(spec("app", 0, &["sleep", "100"]))
        .await
        .unwrap();
    let status = tokio::time::timeout(PATIENCE, handle.stop(PATIENCE))
        .await
        .unwrap();
    assert_eq!(
        (status.exit_code, status.signal),
        (143, Some(libc::SIGTERM))
    );
}

#[tokio::test]
async fn a_second_runtime_recovers_a_running_container_and_its_exit() {
    let root = tempfile::tempdir().unwrap();
    let trigger = root.path().join("go");
    let script = format!(
        "while [ ! -e {} ]; do sleep 0.1; done; exit 7",
        trigger.display()
    );
    let first = runtime(root.path());
    let started = first
        .start(spec("app", 0, &["sh", "-c", &script]))
        .await
        .unwrap();

    let second = runtime(root.path());
    let recovered = second.recover().unwrap();
    assert_eq!(recovered.len(), 1);
    assert_eq!(&recovered[0].id, started.id());
    assert_eq!(recovered[0].started_at, started.started_at());
    let RecoveredState::Running(handle) = &recovered[0].state else {
        panic!("container should still run: {:?}", recovered[0].state);
    };
    assert_eq!(handle.pid(), started.pid());
    assert_eq!(handle.exited(), None);

    std::fs::write(&trigger, b"").unwrap();
    let status = wait(handle).await;
    assert_eq!((status.exit_code, status.reason.as_str()), (7, "Error"));

    let third = runtime(root.path()).recover().unwrap();
    let RecoveredState::Exited(status) = &third[0].state else {
        panic!("container should have exited: {:?}", third[0].state);
    };
    assert_eq!(status.exit_code, 7);
}

#[tokio::test]
async fn a_shim_that_vanished_leaves_an_unknown_status_and_no_container() {
    let root = tempfile::tempdir().unwrap();
    let runtime = runtime(root.path());
    let handle = runtime
        .start(spec("app", 0, &["sleep", "100"]))
        .await
        .unwrap();
    let state_path = root.path().join("containers/uid-1/app/0/state.json");
    let state: serde_json::Value =
        serde_json::from_slice(&std::fs::read(state_path).unwrap()).unwrap();
    let shim_pid = state["shim_pid"].as_i64().unwrap() as i32;
    // SAFETY: kill(2) on the shim this test started.
    assert_eq!(unsafe { libc::kill(shim_pid, libc::SIGKILL) }, 0);

    let status = wait(&handle).await;
    assert_eq!(
        (status.exit_code, status.reason.as_str()),
        (137, "ContainerStatusUnknown")
    );
    let deadline = Instant::now() + PATIENCE;
    while pid_exists(handle.pid()) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        !pid_exists(handle.pid()),
        "the orphaned container is killed"
    );
    let recovered = runtime.recover().unwrap();
    assert!(matches!(&recovered[0].state, RecoveredState::Exited(s) if *s == status));
}

#[tokio::test]
async fn cgroup_limits_are_applied_or_skipped_consistently() {
    let root = tempfile::tempdir().unwrap();
    let runtime = runtime(root.path());
    let mut spec = spec("app", 0, &["sleep", "100"]);
    spec.limits = Limits {
        cpu_millis: Some(500),
        memory_bytes: Some(64 * 1024 * 1024),
    };
    let handle = runtime.start(spec).await.unwrap();
    match handle.limits() {
        LimitsEnforcement::Applied { cgroup } => {
            let read = |f: &str| std::fs::read_to_string(cgroup.join(f)).unwrap();
            assert_eq!(read("memory.max").trim(), "67108864");
            assert_eq!(read("cpu.max").trim(), "50000 100000");
            let procs = read("cgroup.procs");
            assert!(
                procs.lines().any(|p| p == handle.pid().to_string()),
                "{procs}"
            );
            assert_eq!(Ok(cgroup.parent().unwrap()), runtime.cgroup_parent());
        }
        LimitsEnforcement::Skipped { reason } => {
            assert!(!reason.is_empty());
            assert_eq!(runtime.cgroup_parent(), Err(reason.as_str()));
        }
    }
    tokio::time::timeout(PATIENCE, handle.stop(Duration::from_secs(5)))
        .await
        .unwrap();
    if let LimitsEnforcement::Applied { cgroup } = handle.limits() {
        assert!(!cgroup.exists(), "the shim removes the container's cgroup");
    }
}

#[tokio::test]
async fn follow_streams_until_the_container_exits() {
    let root = tempfile::tempdir().unwrap();
    let runtime = runtime(root.path());
    let script = "echo one; sleep 0.5; echo two; sleep 0.5; printf three";
    let handle = runtime
        .start(spec("app", 0, &["sh", "-c", script]))
        .await
        .unwrap();
    let path = runtime.container_logs(handle.id()).path(0);
    let waiter = handle.clone();
    let exited = async move {
        waiter.wait().await;
    };
    let options = LogOptions {
        follow: true,
        ..Default::default()
    };
    let stream = read_log(&path, options, exited).await.unwrap();
    let chunks: Vec<_> = tokio::time::timeout(PATIENCE, stream.collect())
        .await
        .unwrap();
    let bytes: Vec<u8> = chunks
        .into_iter()
        .flat_map(|c| c.unwrap().to_vec())
        .collect();
    assert_eq!(String::from_utf8(bytes).unwrap(), "one\ntwo\nthree");
}

#[tokio::test]
async fn removing_a_pod_kills_its_containers_and_deletes_state_and_logs() {
    let root = tempfile::tempdir().unwrap();
    let runtime = runtime(root.path());
    let handle = runtime
        .start(spec("app", 0, &["sleep", "100"]))
        .await
        .unwrap();
    let mut other = spec("db", 0, &["sleep", "100"]);
    other.id.pod_uid = "uid-2".into();
    other.id.pod_name = "db".into();
    let kept = runtime.start(other).await.unwrap();

    let removed = tokio::time::timeout(
        PATIENCE,
        runtime.remove_pods_except(&HashSet::from(["uid-2".to_string()])),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(removed, vec!["uid-1".to_string()]);
    assert_eq!(wait(&handle).await.exit_code, 137);
    assert!(!root.path().join("containers/uid-1").exists());
    assert!(!root.path().join("pods/default_web_uid-1").exists());
    assert_eq!(kept.exited(), None);
    assert!(root.path().join("pods/default_db_uid-2/db/0.log").exists());

    let orphaned_logs = root.path().join("pods/default_old_uid-3/app");
    std::fs::create_dir_all(&orphaned_logs).unwrap();
    let removed = runtime
        .remove_pods_except(&HashSet::from(["uid-2".to_string()]))
        .await
        .unwrap();
    assert_eq!(
        removed,
        vec!["uid-3".to_string()],
        "pods with only logs left"
    );
    assert!(!root.path().join("pods/default_old_uid-3").exists());

    runtime.remove_pod("uid-2").await.unwrap();
    assert_eq!(wait(&kept).await.exit_code, 137);
    assert!(runtime.recover().unwrap().is_empty());
}

#[tokio::test]
async fn restarts_keep_the_logs_of_the_last_two_attempts() {
    let root = tempfile::tempdir().unwrap();
    let runtime = runtime(root.path());
    for attempt in 0..4 {
        let script = format!("echo attempt {attempt}");
        let handle = runtime
            .start(spec("app", attempt, &["sh", "-c", &script]))
            .await
            .unwrap();
        wait(&handle).await;
    }
    let files = runtime.container_logs(&spec("app", 3, &[]).id);
    assert_eq!(files.attempts().unwrap(), vec![2, 3]);
    let previous = files.attempt_to_read(true).unwrap().unwrap();
    let id = spec("app", previous, &[]).id;
    assert_eq!(
        logs(&runtime, &id, LogOptions::default()).await,
        "attempt 2\n"
    );
    let states: Vec<_> = runtime
        .recover()
        .unwrap()
        .iter()
        .map(|c| c.id.attempt)
        .collect();
    assert_eq!(states, vec![2, 3]);
}

async fn wait_for_log(runtime: &ProcessRuntime, id: &ContainerId, text: &str) {
    let deadline = Instant::now() + PATIENCE;
    while Instant::now() < deadline {
        if logs(runtime, id, LogOptions::default())
            .await
            .contains(text)
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("container never logged {text:?}");
}

#[tokio::test]
async fn long_lines_are_split_in_the_file_and_joined_when_read() {
    let root = tempfile::tempdir().unwrap();
    let runtime = runtime(root.path());
    let script = "head -c 40000 /dev/zero | tr '\\0' x; echo; echo last";
    let handle = runtime
        .start(spec("app", 0, &["sh", "-c", script]))
        .await
        .unwrap();
    assert_eq!(wait(&handle).await.exit_code, 0);
    let raw = std::fs::read_to_string(runtime.container_logs(handle.id()).path(0)).unwrap();
    let tags: Vec<_> = raw.lines().map(|l| l.split(' ').nth(2).unwrap()).collect();
    assert_eq!(tags, vec!["P", "P", "F", "F"]);
    let shown = logs(&runtime, handle.id(), LogOptions::default()).await;
    assert_eq!(shown, format!("{}\nlast\n", "x".repeat(40000)));
    let options = LogOptions {
        tail_lines: Some(1),
        timestamps: true,
        ..Default::default()
    };
    let last = logs(&runtime, handle.id(), options).await;
    assert!(
        last.ends_with("Z last\n") && last.len() == "2024-05-01T10:00:00.000000000Z last\n".len(),
        "{last:?}"
    );
}
