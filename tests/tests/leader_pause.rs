//! A control plane paused (SIGSTOP: a stalled VM, a long GC, a debugger)
//! past its leader-election renew deadline, and resumed before its Leases
//! run out, keeps leading: the scheduler's and the controller-manager's
//! Leases keep their holder, acquire time and transitions, and nothing
//! steps down and restarts what it runs (issue 44's pause probe).

use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use serde_json::Value;
use skiff_tests::api_server::ApiServer;

const LEASES: [&str; 2] = ["kube-scheduler", "kube-controller-manager"];

fn lease_path(name: &str) -> String {
    format!("/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/{name}")
}

/// (holder, acquire time, transitions, renew time) of a Lease.
fn lease_state(lease: &Value) -> (String, String, i64, String) {
    let spec = &lease["spec"];
    (
        spec["holderIdentity"].as_str().unwrap_or_default().into(),
        spec["acquireTime"].as_str().unwrap_or_default().into(),
        spec["leaseTransitions"].as_i64().unwrap_or_default(),
        spec["renewTime"].as_str().unwrap_or_default().into(),
    )
}

fn signal(pid: u32, signal: libc::c_int) {
    // SAFETY: kill has no memory effects; the pid is the test's own child.
    unsafe { libc::kill(pid as libc::pid_t, signal) };
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_control_plane_paused_past_its_renew_deadline_keeps_its_leases() -> Result<()> {
    let server = ApiServer::start_scheduling_with(&["--controller-manager=true".into()]).await?;
    let http = server.http()?;
    let pid = server.pid().context("skiff up runs")?;
    let mut before = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    for name in LEASES {
        loop {
            let lease = http.get_json(&lease_path(name)).await.unwrap_or_default();
            let state = lease_state(&lease);
            if !state.0.is_empty() {
                before.push(state);
                break;
            }
            ensure!(
                Instant::now() < deadline,
                "nobody took the {name} Lease; log:\n{}",
                server.stderr()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    // Past the 10 s renew deadline, within the 15 s lease.
    signal(pid, libc::SIGSTOP);
    tokio::time::sleep(Duration::from_secs(12)).await;
    signal(pid, libc::SIGCONT);
    // Two retry periods (2 s) for the renewals after the resume.
    tokio::time::sleep(Duration::from_secs(5)).await;
    for (name, before) in LEASES.iter().zip(&before) {
        let after = lease_state(&http.get_json(&lease_path(name)).await?);
        ensure!(
            (&after.0, &after.1, after.2) == (&before.0, &before.1, before.2),
            "the {name} Lease changed hands across the pause: {before:?} then {after:?}; log:\n{}",
            server.stderr()
        );
        ensure!(
            after.3 > before.3,
            "the {name} Lease was not renewed after the pause: {before:?} then {after:?}"
        );
    }
    let log = server.stderr();
    ensure!(
        !log.contains("stepping down"),
        "a leader-elected component stepped down after the pause:\n{log}"
    );
    Ok(())
}
