//! The Go client's `concurrency` package (etcdctl 3.4's `lock` and
//! `elect`, which are built on its Mutex and Election) against three
//! `skiff store` processes: a lock and a leadership taken through one
//! follower hold through another member's view and across the death of the
//! Raft leader (their sessions' leases kept alive through the election),
//! exclude a second contender the whole time, and pass to it once given
//! up. Without etcdctl the test is skipped (under CI=true it fails).

use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use skiff_tests::etcdctl::{etcdctl_or_skip, Etcdctl, WatchProcess};
use skiff_tests::store_cluster::StoreCluster;

/// The sessions' TTL in seconds.
const TTL: u64 = 5;

async fn wait_for_line(process: &WatchProcess, containing: &str, what: &str) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !process.lines().iter().any(|l| l.contains(containing)) {
        ensure!(
            Instant::now() < deadline,
            "{what}: no line with {containing:?} in {:?}; stderr:\n{}",
            process.lines(),
            process.stderr()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mutex_and_an_election_hold_across_a_leader_change() -> Result<()> {
    let Some(etcdctl) = etcdctl_or_skip("a_mutex_and_an_election_hold_across_a_leader_change")
    else {
        return Ok(());
    };
    let cluster = StoreCluster::start(3).await?;
    let at = |i: usize| Etcdctl::new(etcdctl.clone(), cluster.members[i].client.to_string());
    let leader = cluster.leader(&[0, 1, 2]).await?;
    let followers: Vec<usize> = (0..3).filter(|&i| i != leader).collect();
    let (one, two) = (followers[0], followers[1]);
    let ttl = format!("--ttl={TTL}");

    let holder = at(one).background(&["lock", &ttl, "/locks/db"])?;
    wait_for_line(&holder, "/locks/db/", "the first lock").await?;
    let waiter = at(two).background(&["lock", &ttl, "/locks/db"])?;
    let alice = at(one).background(&["elect", "/elections/primary", "alice"])?;
    wait_for_line(&alice, "alice", "alice's campaign").await?;
    let observer = at(two).background(&["elect", "--listen", "/elections/primary"])?;
    wait_for_line(&observer, "alice", "the observer").await?;
    let bob = at(two).background(&["elect", "/elections/primary", "bob"])?;

    cluster.members[leader]
        .process
        .signal(libc::SIGKILL)
        .context("killing the leader")?;
    tokio::time::sleep(Duration::from_secs(3 * TTL)).await;
    let next = cluster.leader(&followers).await?;
    ensure!(next != leader);
    // Held the whole time: the waiter and bob are still waiting, and both
    // holders' keys are there, read through the other member.
    ensure!(
        waiter.lines().is_empty(),
        "the lock was taken twice: {:?}",
        waiter.lines()
    );
    ensure!(
        bob.lines().is_empty(),
        "bob was elected beside alice: {:?}",
        bob.lines()
    );
    ensure!(
        !observer.lines().iter().any(|l| l.contains("bob")),
        "the observer saw a change of leadership: {:?}",
        observer.lines()
    );
    let keys = at(two).ok(&["get", "--prefix", "/locks/db/", "--keys-only"])?;
    ensure!(
        keys.lines().filter(|l| !l.is_empty()).count() == 2,
        "the holder's and the waiter's keys: {keys:?}"
    );

    // Given up, each passes to the one waiting.
    holder.interrupt()?;
    wait_for_line(&waiter, "/locks/db/", "the second lock").await?;
    alice.interrupt()?;
    wait_for_line(&bob, "bob", "bob's campaign").await?;
    wait_for_line(&observer, "bob", "the observer").await?;
    Ok(())
}
