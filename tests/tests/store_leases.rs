//! Leases on three `skiff store` processes through the real etcdctl: a
//! lease kept alive through the leader answers the same on the followers
//! (time-to-live with its keys, keep-alive, list) and its key stays; a
//! keep-alive stream through a follower carries the lease across the
//! leader's death; left alone, the lease then expires on every member.
//! Without etcdctl the test is skipped (under CI=true it fails).

use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use skiff_tests::etcdctl::{etcdctl_or_skip, Etcdctl, WatchProcess};
use skiff_tests::store_cluster::StoreCluster;

/// The lease's TTL in seconds: etcdctl renews it every third of it.
const TTL: u64 = 5;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_answers_the_same_on_every_member() -> Result<()> {
    let Some(etcdctl) = etcdctl_or_skip("a_lease_answers_the_same_on_every_member") else {
        return Ok(());
    };
    let cluster = StoreCluster::start(3).await?;
    let at = |i: usize| Etcdctl::new(etcdctl.clone(), cluster.members[i].client.to_string());
    let leader = cluster.leader(&[0, 1, 2]).await?;
    let followers: Vec<usize> = (0..3).filter(|&i| i != leader).collect();

    let granted = at(leader).ok(&["lease", "grant", &TTL.to_string()])?;
    let id = granted
        .strip_prefix("lease ")
        .and_then(|rest| rest.split_whitespace().next())
        .with_context(|| format!("lease grant printed {granted:?}"))?
        .to_string();
    assert_eq!(
        at(leader).ok(&["put", "/held", "v", &format!("--lease={id}")])?,
        "OK\n"
    );

    // Kept alive through the leader for twice its TTL: a follower that
    // went by its own clock would call it expired by now.
    let mut through_leader = at(leader).background(&["lease", "keep-alive", &id])?;
    tokio::time::sleep(Duration::from_secs(2 * TTL + 1)).await;
    still_keeping(&mut through_leader, &id, "through the leader")?;
    for &i in &followers {
        let name = &cluster.members[i].name;
        let left = at(i).ok(&["lease", "timetolive", &id, "--keys"])?;
        let remaining = remaining(&left, &id)?;
        ensure!(
            remaining >= TTL - 2,
            "{name} (a follower) says {remaining}s are left: {left:?}"
        );
        ensure!(
            left.ends_with("attached keys([/held])\n"),
            "{name}: {left:?}"
        );
        assert_eq!(
            at(i).ok(&["lease", "keep-alive", "--once", &id])?,
            format!("lease {id} keepalived with TTL({TTL})\n"),
            "keep-alive --once through {name}"
        );
        assert_eq!(
            at(i).ok(&["lease", "list"])?,
            format!("found 1 leases\n{id}\n"),
            "lease list on {name}"
        );
        assert_eq!(at(i).ok(&["get", "/held", "--print-value-only"])?, "v\n");
    }
    drop(through_leader);

    // A keep-alive stream through a follower, and the leader killed while
    // it runs: the stream goes on with the next leader.
    let survivor = followers[0];
    let mut through_follower = at(survivor).background(&["lease", "keep-alive", &id])?;
    wait_for_lines(&through_follower, 2).await?;
    cluster.members[leader]
        .process
        .signal(libc::SIGKILL)
        .context("killing the leader")?;
    let printed_before = through_follower.lines().len();
    tokio::time::sleep(Duration::from_secs(3 * TTL)).await;
    still_keeping(&mut through_follower, &id, "through a follower")?;
    let printed = through_follower.lines().len();
    ensure!(
        printed >= printed_before + 3,
        "the keep-alive stream stalled across the election: {:?}",
        through_follower.lines()
    );
    let next = cluster.leader(&followers).await?;
    for &i in &followers {
        let name = &cluster.members[i].name;
        let left = at(i).ok(&["lease", "timetolive", &id, "--keys"])?;
        ensure!(
            remaining(&left, &id)? >= 1 && left.ends_with("attached keys([/held])\n"),
            "{name} after the leader change (the leader now {}): {left:?}",
            cluster.members[next].name
        );
        assert_eq!(at(i).ok(&["get", "/held", "--print-value-only"])?, "v\n");
    }

    // Nobody keeps it any more: it expires, and its key goes, everywhere.
    drop(through_follower);
    let stopped = Instant::now();
    let deadline = stopped + Duration::from_secs(TTL + 15);
    for &i in &followers {
        while !at(i).ok(&["get", "/held"])?.is_empty() {
            ensure!(
                Instant::now() < deadline,
                "the lease never expired on {}",
                cluster.members[i].name
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        assert_eq!(
            at(i).ok(&["lease", "timetolive", &id])?,
            format!("lease {id} already expired\n")
        );
    }
    ensure!(
        stopped.elapsed() >= Duration::from_secs(TTL - 2),
        "the lease expired {:?} after its last renewal, before its TTL",
        stopped.elapsed()
    );
    Ok(())
}

/// The remaining seconds `etcdctl lease timetolive` printed for lease `id`.
fn remaining(printed: &str, id: &str) -> Result<u64> {
    let prefix = format!("lease {id} granted with TTL({TTL}s), remaining(");
    printed
        .strip_prefix(&prefix)
        .and_then(|rest| rest.split_once("s)"))
        .and_then(|(secs, _)| secs.parse().ok())
        .with_context(|| format!("timetolive printed {printed:?}"))
}

/// The keep-alive still runs, and has printed only renewals.
fn still_keeping(keep_alive: &mut WatchProcess, id: &str, what: &str) -> Result<()> {
    let lines = keep_alive.lines();
    ensure!(
        keep_alive.try_exit()?.is_none(),
        "the keep-alive {what} ended: {lines:?}; stderr:\n{}",
        keep_alive.stderr()
    );
    let renewed = format!("lease {id} keepalived with TTL({TTL})");
    ensure!(
        !lines.is_empty() && lines.iter().all(|l| *l == renewed),
        "the keep-alive {what} printed {lines:?}"
    );
    Ok(())
}

async fn wait_for_lines(process: &WatchProcess, count: usize) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(2 * TTL);
    while process.lines().len() < count {
        ensure!(
            Instant::now() < deadline,
            "etcdctl printed {:?}; stderr:\n{}",
            process.lines(),
            process.stderr()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}
