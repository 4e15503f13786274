//! Replication scenarios on the simulator: election, replication,
//! forwarding, catch-up after a restart, leader loss, partitions, a lossy
//! network, and seed determinism.

use super::sim::Sim;
use crate::mvcc::CommandResult;

fn assert_all_equal(sim: &Sim, ids: &[u64]) {
    let first = sim.contents(ids[0]);
    for &id in &ids[1..] {
        assert_eq!(
            sim.contents(id),
            first,
            "member {id} differs from member {}",
            ids[0]
        );
    }
}

#[test]
fn three_members_elect_one_leader_and_replicate() {
    let mut sim = Sim::new(1, 3);
    let leader = sim.wait_for_leader();
    let leaders: Vec<u64> = sim
        .ids()
        .into_iter()
        .filter(|&id| sim.core(id).is_leader())
        .collect();
    assert_eq!(leaders, vec![leader], "exactly one leader");
    for i in 0..20 {
        assert_eq!(
            sim.put(&format!("k{i:02}"), "v"),
            i + 1,
            "revisions follow the log"
        );
    }
    assert!(sim.converge(500));
    assert_all_equal(&sim, &[1, 2, 3]);
    assert_eq!(sim.contents(2).len(), 20);
}

#[test]
fn a_follower_forwards_proposals_and_gets_the_answer() {
    let mut sim = Sim::new(2, 3);
    let leader = sim.wait_for_leader();
    let follower = sim.ids().into_iter().find(|&id| id != leader).unwrap();
    // The follower must know the leader before it can forward.
    assert!(sim.run_until(500, |s| s.core(follower).leader_id() == leader));
    let proposal = sim.propose_put(follower, "from-follower", "v").unwrap();
    let answer = sim.answer(follower, proposal, 500).expect("answered");
    assert!(
        matches!(answer, Ok(CommandResult::Put(ref r)) if r.header.revision == 1),
        "{answer:?}"
    );
    assert!(sim.converge(500));
    assert_all_equal(&sim, &[1, 2, 3]);
}

#[test]
fn a_restarted_member_catches_up_from_the_log() {
    let mut sim = Sim::new(3, 3);
    let leader = sim.wait_for_leader();
    let down = sim.ids().into_iter().find(|&id| id != leader).unwrap();
    sim.put("before", "v");
    sim.crash(down);
    for i in 0..30 {
        sim.put(&format!("while-down-{i}"), "v");
    }
    sim.restart(down);
    assert!(sim.converge(2000), "the restarted member caught up");
    assert_all_equal(&sim, &[1, 2, 3]);
    assert_eq!(sim.core(down).kv().current_revision(), 31);
}

#[test]
fn losing_the_leader_keeps_every_acknowledged_write() {
    let mut sim = Sim::new(4, 3);
    let first = sim.wait_for_leader();
    let mut acknowledged = Vec::new();
    for i in 0..10 {
        acknowledged.push((format!("a{i}"), sim.put(&format!("a{i}"), "v")));
    }
    sim.crash(first);
    let second = sim.wait_for_leader();
    assert_ne!(second, first);
    for i in 0..10 {
        acknowledged.push((format!("b{i}"), sim.put(&format!("b{i}"), "v")));
    }
    sim.restart(first);
    assert!(sim.converge(3000));
    assert_all_equal(&sim, &[1, 2, 3]);
    let contents = sim.contents(first);
    for (key, revision) in acknowledged {
        assert_eq!(contents[key.as_bytes()].1, revision, "{key}");
    }
}

#[test]
fn a_leader_cut_off_from_the_majority_commits_nothing() {
    let mut sim = Sim::new(5, 3);
    let old = sim.wait_for_leader();
    sim.put("before", "v");
    let others: Vec<u64> = sim.ids().into_iter().filter(|&id| id != old).collect();
    sim.partition(&[old], &others);
    let stranded = sim.propose_put(old, "stranded", "v").unwrap();
    assert!(
        sim.answer(old, stranded, 300).is_none(),
        "a minority leader must not acknowledge"
    );
    // The majority elects a new leader and goes on.
    assert!(sim.run_until(2000, |s| s.leader().is_some_and(|l| l != old)));
    let majority_write = sim.put("after", "v");
    sim.heal();
    assert!(sim.converge(3000));
    assert_all_equal(&sim, &[1, 2, 3]);
    let contents = sim.contents(old);
    assert!(
        !contents.contains_key(b"stranded".as_slice()),
        "the uncommitted write is gone"
    );
    assert_eq!(contents[b"after".as_slice()].1, majority_write);
    assert!(
        sim.answer(old, stranded, 100).is_none(),
        "and was never acknowledged"
    );
}

#[test]
fn five_members_converge_over_a_lossy_reordering_network() {
    let mut sim = Sim::new(6, 5);
    sim.loss_per_mille = 100;
    sim.max_delay = 6;
    for i in 0..40 {
        sim.put(&format!("k{i}"), &format!("v{i}"));
    }
    sim.loss_per_mille = 0;
    assert!(sim.converge(5000));
    assert_all_equal(&sim, &[1, 2, 3, 4, 5]);
    assert_eq!(sim.contents(5).len(), 40);
}

#[test]
fn one_seed_replays_one_run() {
    let run = |seed| {
        let mut sim = Sim::new(seed, 3);
        sim.loss_per_mille = 50;
        sim.max_delay = 5;
        for i in 0..10 {
            sim.put(&format!("k{i}"), "v");
        }
        let leader = sim.wait_for_leader();
        sim.crash(leader);
        sim.put("after-crash", "v");
        sim.trace.clone()
    };
    let first = run(42);
    assert_eq!(first, run(42), "same seed, same run");
    assert_ne!(first, run(43), "another seed, another run");
}
