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

fn single_change(kind: raft::eraftpb::ConfChangeType, node: u64) -> raft::eraftpb::ConfChangeV2 {
    let mut change = raft::eraftpb::ConfChangeSingle::default();
    change.set_change_type(kind);
    change.node_id = node;
    let mut v2 = raft::eraftpb::ConfChangeV2::default();
    v2.mut_changes().push(change);
    v2
}

/// Proposes a membership change at the leader and waits until every
/// running member has applied it.
fn change_membership(sim: &mut Sim, change: raft::eraftpb::ConfChangeV2, voters: &[u64]) {
    let leader = sim.wait_for_leader();
    sim.core_mut(leader)
        .propose_conf_change(change)
        .expect("proposed");
    let want = voters.to_vec();
    assert!(
        // A removed member need not hear of its own removal.
        sim.run_until(2000, |s| want
            .iter()
            .all(|&id| s.running(id).is_none_or(|c| c.voters() == want))),
        "membership never became {want:?}: {:?}",
        sim.ids()
            .iter()
            .map(|&id| (
                id,
                sim.running(id)
                    .map(|c| (c.voters(), c.kv().applied_index(), c.commit_index()))
            ))
            .collect::<Vec<_>>()
    );
}

#[test]
fn a_new_member_joins_catches_up_and_votes() {
    use raft::eraftpb::ConfChangeType::*;
    let mut sim = Sim::new(7, 3);
    for i in 0..15 {
        sim.put(&format!("before-{i}"), "v");
    }
    sim.join(4);
    change_membership(&mut sim, single_change(AddNode, 4), &[1, 2, 3, 4]);
    assert!(sim.converge(3000), "the new member caught up from the log");
    assert_all_equal(&sim, &[1, 2, 3, 4]);
    // With four voters, losing two of the old members leaves no quorum
    // unless the new one votes: it does.
    let leader = sim.wait_for_leader();
    let down: Vec<u64> = [1, 2, 3]
        .into_iter()
        .filter(|&id| id != leader)
        .take(1)
        .collect();
    sim.crash(down[0]);
    let revision = sim.put("with-the-new-member", "v");
    assert!(sim.converge(2000));
    assert_eq!(sim.core(4).kv().current_revision(), revision);
}

#[test]
fn a_removed_member_no_longer_counts_for_quorum() {
    use raft::eraftpb::ConfChangeType::*;
    let mut sim = Sim::new(8, 5);
    sim.put("k", "v");
    let leader = sim.wait_for_leader();
    let removed: Vec<u64> = sim
        .ids()
        .into_iter()
        .filter(|&id| id != leader)
        .take(2)
        .collect();
    let keep: Vec<u64> = sim
        .ids()
        .into_iter()
        .filter(|id| !removed.contains(id))
        .collect();
    let mut four = sim.ids();
    four.retain(|&id| id != removed[0]);
    change_membership(&mut sim, single_change(RemoveNode, removed[0]), &four);
    change_membership(&mut sim, single_change(RemoveNode, removed[1]), &keep);
    sim.crash(removed[0]);
    sim.crash(removed[1]);
    // Three voters left; two of them are a quorum.
    let other = keep.iter().copied().find(|&id| id != leader).unwrap();
    sim.crash(other);
    sim.put("after-removal", "v");
}

#[test]
fn leadership_moves_where_it_is_sent() {
    let mut sim = Sim::new(9, 3);
    sim.put("k", "v");
    let leader = sim.wait_for_leader();
    let target = sim.ids().into_iter().find(|&id| id != leader).unwrap();
    sim.core_mut(leader).transfer_leader(target);
    assert!(
        sim.run_until(1000, |s| s.leader() == Some(target)),
        "leadership did not move"
    );
    sim.put("after-transfer", "v");
    assert!(sim.converge(1000));
    assert_all_equal(&sim, &[1, 2, 3]);
}

#[test]
fn a_follower_left_behind_the_compacted_log_gets_a_snapshot() {
    let mut sim = Sim::new(11, 3);
    let leader = sim.wait_for_leader();
    let behind = [1, 2, 3].into_iter().find(|&id| id != leader).unwrap();
    let others: Vec<u64> = [1, 2, 3].into_iter().filter(|&id| id != behind).collect();
    sim.partition(&[behind], &others);
    for i in 0..40 {
        sim.put(&format!("k{i}"), &format!("v{i}"));
    }
    let leader = sim.wait_for_leader();
    sim.compact_log(leader);
    let first = sim.core(leader).first_index();
    assert!(
        first > sim.core(behind).last_index() + 1,
        "the leader no longer has what the follower needs"
    );
    sim.heal();
    assert!(sim.converge(3000), "the follower caught up");
    assert_all_equal(&sim, &[1, 2, 3]);
    assert!(
        sim.core(behind).first_index() >= first,
        "the follower's log starts after the snapshot, not from the leader's old entries"
    );
    // Writes after the snapshot reach it through the log as usual, and
    // the installed state survives a restart.
    let revision = sim.put("after", "v");
    assert!(sim.converge(2000));
    sim.crash(behind);
    sim.restart(behind);
    assert!(sim.converge(2000));
    assert_eq!(sim.core(behind).kv().current_revision(), revision);
    assert_all_equal(&sim, &[1, 2, 3]);
}

#[test]
fn a_new_member_with_an_empty_directory_is_restored_by_snapshot() {
    use raft::eraftpb::ConfChangeType::*;
    let mut sim = Sim::new(12, 3);
    for i in 0..30 {
        sim.put(&format!("before-{i}"), "v");
    }
    for id in [1, 2, 3] {
        sim.compact_log(id);
    }
    sim.join(4);
    change_membership(&mut sim, single_change(AddNode, 4), &[1, 2, 3, 4]);
    assert!(sim.converge(3000), "the new member caught up");
    assert_all_equal(&sim, &[1, 2, 3, 4]);
    assert!(sim.core(4).first_index() > 30, "it started from a snapshot");
}

#[test]
fn a_lost_snapshot_is_sent_again() {
    let mut sim = Sim::new(13, 3);
    let leader = sim.wait_for_leader();
    let behind = [1, 2, 3].into_iter().find(|&id| id != leader).unwrap();
    sim.crash(behind);
    for i in 0..30 {
        sim.put(&format!("k{i}"), "v");
    }
    let leader = sim.wait_for_leader();
    sim.compact_log(leader);
    sim.restart(behind);
    sim.loss_per_mille = 300;
    assert!(
        sim.converge(20_000),
        "the follower caught up over a lossy network"
    );
    sim.loss_per_mille = 0;
    assert!(sim.converge(2000));
    assert_all_equal(&sim, &[1, 2, 3]);
    assert!(
        sim.core(behind).first_index() > 30,
        "it caught up by snapshot"
    );
}

#[test]
fn a_lease_outlives_a_leader_change_and_then_expires_once() {
    use super::sim::STEP_MS;
    use crate::api::PutRequest;
    use crate::command::Command;
    let mut sim = Sim::new(21, 3);
    let leader = sim.wait_for_leader();
    let ttl_ms = 3_000;
    let grant = sim
        .propose(
            leader,
            &Command::LeaseGrant {
                id: 7,
                ttl: ttl_ms as i64 / 1000,
            },
        )
        .unwrap();
    assert!(matches!(sim.answer(leader, grant, 500), Some(Ok(_))));
    let granted_at = sim.now() * STEP_MS;
    let mut put = PutRequest::new("leased", "v");
    put.lease = 7;
    let put = sim.propose(leader, &Command::Put(put)).unwrap();
    assert!(matches!(sim.answer(leader, put, 500), Some(Ok(_))));
    assert!(sim.converge(500));
    let revision = sim.core(leader).kv().current_revision();

    // A second later a keep-alive reaches the leader (its own clock only,
    // as in etcd), and half a second after that the leader dies.
    sim.run_until(1_000 / STEP_MS, |_| false);
    sim.core(leader).lessor().renew(7).unwrap();
    let renewed_at = sim.now() * STEP_MS;
    sim.run_until(500 / STEP_MS, |_| false);
    sim.crash(leader);
    let new_leader = sim.wait_for_leader();
    let promoted_at = sim.now() * STEP_MS;
    let running: Vec<u64> = [1, 2, 3].into_iter().filter(|&id| id != leader).collect();

    // Never early: the key lives at least its TTL from the last
    // keep-alive, which only the dead leader saw, and the election does
    // not eat into it.
    assert!(renewed_at > granted_at);
    while sim.now() * STEP_MS < renewed_at + ttl_ms {
        for &id in &running {
            assert!(
                sim.local_get(id, b"leased").is_some(),
                "the lease expired early on {id} at {} ms (renewed at {renewed_at} ms)",
                sim.now() * STEP_MS
            );
        }
        sim.step();
    }
    // Then it expires on the new leader's clock, within its full TTL and
    // an election's grace from the promotion, in one revision.
    let deadline = promoted_at + ttl_ms + 2_000;
    assert!(
        sim.run_until((deadline - sim.now() * STEP_MS) / STEP_MS, |s| running
            .iter()
            .all(|&id| s.local_get(id, b"leased").is_none())),
        "the lease never expired after the leader change"
    );
    assert!(sim.converge(500));
    for &id in &running {
        assert_eq!(
            sim.core(id).kv().current_revision(),
            revision + 1,
            "one revoke"
        );
        assert!(!sim.core(id).lessor().contains(7));
    }
    assert!(sim.core(new_leader).is_leader() || sim.leader().is_some());
}

#[test]
fn a_learner_catches_up_without_a_vote_and_votes_once_promoted() {
    use raft::eraftpb::ConfChangeType::*;
    let mut sim = Sim::new(14, 3);
    for i in 0..20 {
        sim.put(&format!("before-{i}"), "v");
    }
    let leader = sim.wait_for_leader();
    sim.core_mut(leader)
        .propose_conf_change(single_change(AddLearnerNode, 4))
        .expect("proposed");
    let tracked = |s: &Sim| matches!(s.core(leader).learner_readiness(4), Ok(Some(_)));
    assert!(sim.run_until(2000, tracked), "the learner was added");
    // Added, not started: the leader tracks it, far behind; only the
    // leader knows.
    let behind = sim.core(leader).learner_readiness(4).unwrap().unwrap();
    assert!(!behind.is_ready(), "{behind:?}");
    assert_eq!(sim.core(leader).learner_readiness(99).unwrap(), None);
    let follower = [1, 2, 3].into_iter().find(|&id| id != leader).unwrap();
    assert!(matches!(
        sim.core(follower).learner_readiness(4),
        Err(crate::error::StoreError::NotLeader)
    ));

    sim.join(4);
    assert!(sim.converge(3000), "the learner caught up");
    assert_all_equal(&sim, &[1, 2, 3, 4]);
    assert!(sim.core(4).is_learner());
    assert!(!sim.core(leader).is_learner());
    // The leader learns how far it is from its answers to appends.
    let ready = |s: &Sim| {
        s.leader()
            .and_then(|l| s.core(l).learner_readiness(4).ok().flatten())
            .is_some_and(|r| r.is_ready())
    };
    assert!(sim.run_until(2000, ready), "the leader sees it caught up");
    let leader = sim.wait_for_leader();

    // Without a vote it makes no quorum: the leader and the learner alone
    // commit nothing.
    let others: Vec<u64> = [1, 2, 3].into_iter().filter(|&id| id != leader).collect();
    for &id in &others {
        sim.crash(id);
    }
    let proposal = sim.propose_put(leader, "without-quorum", "v").unwrap();
    assert!(sim.answer(leader, proposal, 300).is_none());
    for &id in &others {
        sim.restart(id);
    }
    assert!(sim.converge(3000));
    // A new leader takes no membership change until its first entry is
    // applied (raft drops it meanwhile).
    let settled = |s: &Sim| {
        s.leader()
            .is_some_and(|l| s.core(l).kv().applied_index() == s.core(l).last_index())
    };
    assert!(sim.run_until(2000, settled));

    change_membership(&mut sim, super::promotion(4), &[1, 2, 3, 4]);
    assert!(!sim.core(4).is_learner());
    // Now it votes: with one old voter down, three of four commit only
    // with it.
    let leader = sim.wait_for_leader();
    let down = [1, 2, 3].into_iter().find(|&id| id != leader).unwrap();
    sim.crash(down);
    let revision = sim.put("with-the-promoted-member", "v");
    assert!(sim.run_until(2000, |s| s.core(4).kv().current_revision() == revision));
}
