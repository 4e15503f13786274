//! Three members in one process over real TCP on loopback: election,
//! writes through every member, a member restarted and caught up, and a
//! leader stopped and replaced.

use std::net::{SocketAddr, TcpListener};
use std::time::Duration;

use super::testing::test_config;
use super::{ClusterConfig, Store};
use crate::api::{PutRequest, RangeRequest};
use crate::error::StoreError;

/// The clusters here are founded with a token: their IDs are the token's.
const TOKEN: &str = "replication-tests";

fn free_addr() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap()
}

struct Cluster {
    dirs: Vec<tempfile::TempDir>,
    initial: Vec<(String, SocketAddr)>,
    members: Vec<Option<Store>>,
}

impl Cluster {
    async fn start(size: usize) -> Cluster {
        let initial: Vec<(String, SocketAddr)> =
            (1..=size).map(|i| (format!("n{i}"), free_addr())).collect();
        let dirs: Vec<_> = (0..size).map(|_| tempfile::tempdir().unwrap()).collect();
        let mut cluster = Cluster {
            dirs,
            initial,
            members: (0..size).map(|_| None).collect(),
        };
        for i in 0..size {
            cluster.open(i).await;
        }
        cluster
    }

    async fn open(&mut self, i: usize) {
        let mut config = test_config(self.dirs[i].path());
        config.cluster = Some(ClusterConfig {
            name: self.initial[i].0.clone(),
            peer_listen: self.initial[i].1,
            initial_cluster: self.initial.clone(),
            initial_cluster_state: Default::default(),
            initial_cluster_token: TOKEN.into(),
        });
        self.members[i] = Some(Store::open(config).await.expect("open member"));
    }

    async fn stop(&mut self, i: usize) {
        let store = self.members[i].take().expect("running");
        store.close().await.unwrap();
    }

    fn member(&self, i: usize) -> &Store {
        self.members[i].as_ref().expect("running")
    }

    async fn leader(&self) -> usize {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
        loop {
            let leaders: Vec<usize> = (0..self.members.len())
                .filter(|&i| self.members[i].as_ref().is_some_and(|s| s.is_leader()))
                .collect();
            if leaders.len() == 1 {
                return leaders[0];
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no single leader: {leaders:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Puts through member `i`, retrying while an election settles.
    async fn put(&self, i: usize, key: &str) -> i64 {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
        loop {
            match self.member(i).put(PutRequest::new(key, "v")).await {
                Ok(resp) => return resp.header.revision,
                Err(StoreError::NoLeader | StoreError::Timeout) => {
                    assert!(
                        tokio::time::Instant::now() < deadline,
                        "put {key} never succeeded"
                    );
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(err) => panic!("put {key}: {err}"),
            }
        }
    }

    /// Waits until every running member has applied revision `rev`.
    async fn converge(&self, rev: i64) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
        for store in self.members.iter().flatten() {
            while store.kv().current_revision() < rev {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "member stuck below {rev}"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }

    async fn keys(&self, i: usize) -> Vec<(Vec<u8>, i64)> {
        let resp = self
            .member(i)
            .range(RangeRequest {
                key: vec![0],
                range_end: vec![0],
                // This member's own state, whatever the quorum says.
                serializable: true,
                ..Default::default()
            })
            .await
            .unwrap();
        resp.kvs
            .into_iter()
            .map(|kv| (kv.key, kv.mod_revision))
            .collect()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_members_replicate_writes_made_through_any_member() {
    let mut cluster = Cluster::start(3).await;
    let leader = cluster.leader().await;
    let mut last = 0;
    for round in 0..3 {
        for i in 0..3 {
            last = cluster.put(i, &format!("r{round}-via-{i}")).await;
        }
    }
    assert_eq!(last, 9, "one revision per write, wherever it was made");
    cluster.converge(last).await;
    let expected = cluster.keys(leader).await;
    assert_eq!(expected.len(), 9);
    for i in 0..3 {
        assert_eq!(cluster.keys(i).await, expected, "member {i}");
    }

    // A follower stopped and restarted catches up with what it missed.
    let follower = (leader + 1) % 3;
    cluster.stop(follower).await;
    for k in 0..20 {
        last = cluster
            .put(leader, &format!("while-{follower}-down-{k}"))
            .await;
    }
    cluster.open(follower).await;
    cluster.converge(last).await;
    assert_eq!(cluster.keys(follower).await, cluster.keys(leader).await);

    // A linearizable read through any member sees the write just
    // acknowledged through another.
    for k in 0..30 {
        let key = format!("read-your-write-{k}");
        cluster.put(leader, &key).await;
        let reader = (leader + 1 + k % 2) % 3;
        let resp = cluster
            .member(reader)
            .range(RangeRequest::key(key.as_str()))
            .await
            .unwrap();
        assert_eq!(resp.kvs.len(), 1, "member {reader} missed {key}");
    }
    // With others voting, no member reads its own state unconfirmed.
    let confirmed: u64 = (0..3)
        .map(|i| {
            cluster
                .member(i)
                .stats()
                .read_index_reads
                .load(std::sync::atomic::Ordering::Relaxed)
        })
        .sum();
    assert!(
        confirmed >= 30,
        "{confirmed} reads went through the read index"
    );

    // Stopping the leader: another takes over and writes go on.
    cluster.stop(leader).await;
    let next = cluster.leader().await;
    assert_ne!(next, leader);
    last = cluster.put(next, "after-leader-change").await;
    cluster.open(leader).await;
    cluster.converge(last).await;
    let all = cluster.keys(next).await;
    assert_eq!(all.len(), 60);
    for i in 0..3 {
        assert_eq!(cluster.keys(i).await, all, "member {i}");
    }
    for i in 0..3 {
        cluster.stop(i).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_alone_cannot_acknowledge_writes() {
    let mut cluster = Cluster::start(3).await;
    let leader = cluster.leader().await;
    cluster.put(leader, "before").await;
    let others: Vec<usize> = (0..3).filter(|&i| i != leader).collect();
    for &i in &others {
        cluster.stop(i).await;
    }
    let started = tokio::time::Instant::now();
    let err = cluster
        .member(leader)
        .put(PutRequest::new("alone", "v"))
        .await
        .unwrap_err();
    assert!(
        matches!(err, StoreError::Timeout | StoreError::NoLeader),
        "{err}"
    );
    assert!(started.elapsed() < Duration::from_secs(10), "bounded wait");
    assert!(
        cluster
            .keys(leader)
            .await
            .iter()
            .all(|(k, _)| k != b"alone"),
        "nothing applied without a quorum"
    );
    cluster.stop(leader).await;
}

#[tokio::test]
async fn a_member_of_another_cluster_refuses_to_start() {
    let dir = tempfile::tempdir().unwrap();
    let initial = vec![
        ("n1".to_string(), free_addr()),
        ("n2".to_string(), free_addr()),
    ];
    let mut config = test_config(dir.path());
    config.cluster = Some(ClusterConfig {
        name: "n1".into(),
        peer_listen: initial[0].1,
        initial_cluster: initial.clone(),
        initial_cluster_state: Default::default(),
        initial_cluster_token: String::new(),
    });
    Store::open(config.clone())
        .await
        .unwrap()
        .close()
        .await
        .unwrap();
    let mut other = config.clone();
    other
        .cluster
        .as_mut()
        .unwrap()
        .initial_cluster
        .push(("n3".into(), free_addr()));
    let Err(err) = Store::open(other).await else {
        panic!("opened")
    };
    assert!(
        err.to_string().contains("belongs to another cluster"),
        "{err}"
    );
    let mut retokened = config.clone();
    retokened.cluster.as_mut().unwrap().initial_cluster_token = "another".into();
    let Err(err) = Store::open(retokened).await else {
        panic!("opened")
    };
    assert!(err.to_string().contains("--initial-cluster-token"), "{err}");
    let mut stranger = config;
    stranger.cluster.as_mut().unwrap().name = "n9".into();
    let Err(err) = Store::open(stranger).await else {
        panic!("opened")
    };
    assert!(
        err.to_string().contains("not in --initial-cluster"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_outlives_a_leader_change_then_expires_everywhere() {
    let mut cluster = Cluster::start(3).await;
    let leader = cluster.leader().await;
    let ttl = 4;
    let lease = cluster.member(leader).lease_grant(ttl, 0).await.unwrap().id;
    let mut put = PutRequest::new("leased", "v");
    put.lease = lease;
    let granted = tokio::time::Instant::now();
    cluster.member(leader).put(put).await.unwrap();

    cluster.stop(leader).await;
    let next = cluster.leader().await;
    // The election took a while, but the lease did not expire because of it.
    let read = |i: usize| {
        let store = cluster.member(i).clone();
        async move {
            let mut req = RangeRequest::key("leased");
            req.serializable = true;
            store.range(req).await.unwrap().kvs.len()
        }
    };
    assert_eq!(read(next).await, 1, "the lease expired across the election");
    let left = cluster
        .member(next)
        .lease_time_to_live(lease, true)
        .await
        .unwrap();
    assert_eq!(left.keys, vec![b"leased".to_vec()]);

    // The new leader expires it on time and every member loses the key.
    let deadline = granted + Duration::from_secs(ttl as u64 + 8);
    let others: Vec<usize> = (0..3).filter(|&i| i != leader).collect();
    for &i in &others {
        while read(i).await == 1 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the lease never expired on member {i}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    assert!(
        granted.elapsed() >= Duration::from_secs(ttl as u64),
        "expired before its TTL: {:?}",
        granted.elapsed()
    );
    for i in others {
        cluster.stop(i).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_alives_through_a_follower_keep_a_lease() {
    let mut cluster = Cluster::start(3).await;
    let leader = cluster.leader().await;
    let follower = (leader + 1) % 3;
    let ttl = 2;
    let lease = cluster
        .member(follower)
        .lease_grant(ttl, 0)
        .await
        .unwrap()
        .id;
    let mut put = PutRequest::new("kept", "v");
    put.lease = lease;
    cluster.member(follower).put(put).await.unwrap();
    let present = |store: Store| async move {
        let mut req = RangeRequest::key("kept");
        req.serializable = true;
        store.range(req).await.unwrap().count == 1
    };
    // Twice the TTL, renewed only through the follower.
    let until = tokio::time::Instant::now() + Duration::from_secs(2 * ttl as u64);
    while tokio::time::Instant::now() < until {
        let resp = cluster
            .member(follower)
            .lease_keep_alive(lease)
            .await
            .unwrap();
        assert_eq!(resp.ttl, ttl);
        tokio::time::sleep(Duration::from_millis(400)).await;
    }
    assert!(
        present(cluster.member(leader).clone()).await,
        "the leader expired a kept lease"
    );
    // Left alone, it expires.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(ttl as u64 + 5);
    while present(cluster.member(follower).clone()).await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the lease never expired"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(matches!(
        cluster.member(follower).lease_keep_alive(lease).await,
        Err(StoreError::LeaseNotFound)
    ));
    for i in 0..3 {
        cluster.stop(i).await;
    }
}

/// Renews `lease` through member `i` every 400 ms for `period`,
/// checking each answer carries the full TTL.
async fn keep_alive_through(cluster: &Cluster, i: usize, lease: i64, ttl: i64, period: Duration) {
    let until = tokio::time::Instant::now() + period;
    while tokio::time::Instant::now() < until {
        let resp = cluster.member(i).lease_keep_alive(lease).await;
        assert_eq!(resp.unwrap().ttl, ttl, "keep-alive through member {i}");
        tokio::time::sleep(Duration::from_millis(400)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn followers_answer_for_leases_with_the_leaders_view() {
    let mut cluster = Cluster::start(3).await;
    let leader = cluster.leader().await;
    let followers: Vec<usize> = (0..3).filter(|&i| i != leader).collect();
    let ttl = 3;
    let lease = cluster.member(leader).lease_grant(ttl, 0).await.unwrap().id;
    let mut put = PutRequest::new("held", "v");
    put.lease = lease;
    let rev = cluster
        .member(leader)
        .put(put)
        .await
        .unwrap()
        .header
        .revision;
    cluster.converge(rev).await;

    // Kept alive through the leader only, well past its TTL: the
    // followers' own clocks say it expired, the leader's does not.
    keep_alive_through(
        &cluster,
        leader,
        lease,
        ttl,
        Duration::from_secs(2 * ttl as u64),
    )
    .await;
    for &i in &followers {
        let left = cluster
            .member(i)
            .lease_time_to_live(lease, true)
            .await
            .unwrap();
        assert_eq!(left.granted_ttl, ttl, "member {i}");
        assert!(left.ttl >= ttl - 1, "member {i} sees {} s left", left.ttl);
        assert_eq!(left.keys, vec![b"held".to_vec()], "member {i}");
        let renewed = cluster.member(i).lease_keep_alive(lease).await.unwrap();
        assert_eq!(renewed.ttl, ttl, "member {i}");
        let leases = cluster.member(i).lease_leases().await.unwrap().leases;
        assert_eq!(leases, vec![lease], "member {i}");
    }
    let missing = cluster
        .member(followers[0])
        .lease_time_to_live(lease + 1, false)
        .await;
    assert_eq!(missing.unwrap().ttl, -1);
    assert!(matches!(
        cluster
            .member(followers[0])
            .lease_keep_alive(lease + 1)
            .await,
        Err(StoreError::LeaseNotFound)
    ));

    // The leader goes; keep-alives through a survivor carry the lease
    // across the election and after it.
    cluster.stop(leader).await;
    let survivor = followers[0];
    keep_alive_through(
        &cluster,
        survivor,
        lease,
        ttl,
        Duration::from_secs(3 * ttl as u64),
    )
    .await;
    let next = cluster.leader().await;
    let other = followers[1];
    for i in [survivor, other] {
        let mut req = RangeRequest::key("held");
        req.serializable = true;
        let found = cluster.member(i).range(req).await.unwrap().count;
        assert_eq!(found, 1, "member {i} lost the key of a kept lease");
        let left = cluster
            .member(i)
            .lease_time_to_live(lease, true)
            .await
            .unwrap();
        assert!(left.ttl > 0 && left.keys.len() == 1, "member {i}: {left:?}");
    }

    // A revoke through the member that does not lead ends it everywhere.
    let follower = if next == survivor { other } else { survivor };
    let rev = cluster
        .member(follower)
        .lease_revoke(lease)
        .await
        .unwrap()
        .header
        .revision;
    cluster.converge(rev).await;
    for i in [survivor, other] {
        let left = cluster
            .member(i)
            .lease_time_to_live(lease, false)
            .await
            .unwrap();
        assert_eq!(left.ttl, -1, "member {i}");
        assert!(
            cluster.keys(i).await.is_empty(),
            "member {i} kept a revoked lease's key"
        );
    }
    for i in [survivor, other] {
        cluster.stop(i).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leadership_is_handed_over_and_a_member_removed() {
    let mut cluster = Cluster::start(3).await;
    let leader = cluster.leader().await;
    cluster.put(leader, "k").await;
    let target = (leader + 1) % 3;
    let target_id = cluster.member(target).member_id();
    let refused = cluster.member(target).transfer_leadership(target_id).await;
    assert!(
        matches!(refused, Err(StoreError::InvalidConfig(_))),
        "only a leader hands over"
    );
    cluster
        .member(leader)
        .transfer_leadership(target_id)
        .await
        .unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !cluster.member(target).is_leader() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "leadership never moved"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // Remove the old leader: two voters remain, and both are needed.
    let removed = leader;
    let removed_id = cluster.member(removed).member_id();
    let voters = cluster
        .member(target)
        .remove_member(removed_id)
        .await
        .unwrap();
    assert_eq!(voters.len(), 2);
    assert!(!voters.contains(&removed_id));
    cluster.stop(removed).await;
    let last = cluster.put(target, "after-removal").await;
    cluster.converge(last).await;
    let bogus = cluster.member(target).remove_member(12345).await;
    assert!(
        matches!(bogus, Err(StoreError::MemberNotFound)),
        "{bogus:?}"
    );
    for i in 0..3 {
        if i != removed {
            cluster.stop(i).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_is_added_joins_by_snapshot_and_is_listed() {
    let mut cluster = Cluster::start(3).await;
    let leader = cluster.leader().await;
    let mut last = 0;
    for i in 0..40 {
        last = cluster.put(leader, &format!("before-{i}")).await;
    }
    cluster.converge(last).await;

    // Add n4 (through a follower: forwarded), then start it empty.
    let follower = (leader + 1) % 3;
    let addr = free_addr();
    let url = format!("http://{addr}");
    let (added, members) = cluster
        .member(follower)
        .add_member(vec![url.clone()], false)
        .await
        .unwrap();
    assert_eq!(members.len(), 4);
    assert!(members
        .iter()
        .any(|m| m.id == added.id && m.peer_urls == [url.clone()]));
    let again = cluster
        .member(leader)
        .add_member(vec![url.clone()], false)
        .await;
    assert!(
        matches!(again, Err(StoreError::PeerUrlExists(_))),
        "{again:?}"
    );

    // The leader's log no longer holds what n4 needs: a snapshot it is.
    let keep = cluster.member(leader).config().catch_up_entries;
    assert!(keep < 40, "the test config keeps few entries for laggards");
    let dir = tempfile::tempdir().unwrap();
    let mut initial = cluster.initial.clone();
    initial.push(("n4".into(), addr));
    let mut config = test_config(dir.path());
    config.name = "n4".into();
    config.cluster = Some(ClusterConfig {
        name: "n4".into(),
        peer_listen: addr,
        initial_cluster: initial,
        initial_cluster_state: super::InitialClusterState::Existing,
        initial_cluster_token: TOKEN.into(),
    });
    let joined = Store::open(config).await.expect("n4 joins");
    assert_eq!(joined.member_id(), added.id);
    assert_eq!(joined.cluster_id(), cluster.member(leader).cluster_id());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    while joined.kv().current_revision() < last {
        assert!(tokio::time::Instant::now() < deadline, "n4 never caught up");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let after = cluster.put(leader, "after-join").await;
    cluster.converge(after).await;
    while joined.kv().current_revision() < after {
        assert!(
            tokio::time::Instant::now() < deadline,
            "n4 stopped following"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let on_n4 = joined
        .range(RangeRequest {
            key: vec![0],
            range_end: vec![0],
            serializable: true,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(on_n4.count, 41);
    // n4 published its name: every member lists it.
    while !cluster
        .member(leader)
        .members()
        .unwrap()
        .iter()
        .any(|m| m.id == added.id && m.name == "n4")
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "n4 never published its name"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // Removing it takes it out of the list; the others go on.
    let voters = cluster
        .member(leader)
        .remove_member(added.id)
        .await
        .unwrap();
    assert_eq!(voters.len(), 3);
    assert!(!cluster
        .member(leader)
        .members()
        .unwrap()
        .iter()
        .any(|m| m.id == added.id));
    joined.close().await.unwrap();
    let last = cluster.put(leader, "after-remove").await;
    cluster.converge(last).await;
    for i in 0..3 {
        cluster.stop(i).await;
    }
}

/// Opens a member that joins the running `cluster` as `name`, listening
/// for peers at `listen` (the cluster knows it at `advertised`).
async fn join(
    cluster: &Cluster,
    dir: &std::path::Path,
    name: &str,
    advertised: SocketAddr,
    listen: SocketAddr,
) -> Store {
    let mut initial = cluster.initial.clone();
    initial.push((name.into(), advertised));
    let mut config = test_config(dir);
    config.name = name.into();
    config.cluster = Some(ClusterConfig {
        name: name.into(),
        peer_listen: listen,
        initial_cluster: initial,
        initial_cluster_state: super::InitialClusterState::Existing,
        initial_cluster_token: TOKEN.into(),
    });
    Store::open(config).await.expect("the member joins")
}

/// Waits, at most 15 s, for `done`.
async fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    while !done() {
        assert!(tokio::time::Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_learner_catches_up_is_promoted_through_a_follower_and_moves() {
    let mut cluster = Cluster::start(3).await;
    let leader = cluster.leader().await;
    let follower = (leader + 1) % 3;
    let mut last = 0;
    for i in 0..30 {
        last = cluster.put(leader, &format!("before-{i}")).await;
    }
    cluster.converge(last).await;

    let addr = free_addr();
    let (learner, members) = cluster
        .member(follower)
        .add_member(vec![format!("http://{addr}")], true)
        .await
        .unwrap();
    assert!(learner.is_learner);
    assert!(members.iter().any(|m| m.id == learner.id && m.is_learner));
    let second = cluster
        .member(leader)
        .add_member(vec![format!("http://{}", free_addr())], true)
        .await;
    assert!(
        matches!(second, Err(StoreError::TooManyLearners { max: 1 })),
        "{second:?}"
    );
    // Not started: far behind, as the leader tells the follower.
    let early = cluster.member(follower).promote_member(learner.id).await;
    assert!(
        matches!(
            early,
            Err(StoreError::LearnerNotReady {
                learner_match: 0,
                ..
            })
        ),
        "{early:?}"
    );
    let voter = cluster.member(leader).member_id();
    let not_learner = cluster.member(follower).promote_member(voter).await;
    assert!(
        matches!(not_learner, Err(StoreError::MemberNotLearner)),
        "{not_learner:?}"
    );
    let unknown = cluster.member(follower).promote_member(0x1234).await;
    assert!(
        matches!(unknown, Err(StoreError::MemberNotFound)),
        "{unknown:?}"
    );

    let dir = tempfile::tempdir().unwrap();
    let n4 = join(&cluster, dir.path(), "n4", addr, addr).await;
    assert_eq!(n4.member_id(), learner.id);
    assert!(n4.is_learner(), "a learner from its start");
    assert!(n4.status().is_learner);
    eventually("the learner caught up", || {
        n4.kv().current_revision() >= last
    })
    .await;

    // Promoted through a follower once the leader sees it caught up.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    let members = loop {
        match cluster.member(follower).promote_member(learner.id).await {
            Ok(members) => break members,
            Err(StoreError::LearnerNotReady { .. }) if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(err) => panic!("promoting the learner: {err}"),
        }
    };
    assert!(members.iter().all(|m| !m.is_learner), "{members:?}");
    eventually("the promoted member votes", || !n4.is_learner()).await;
    let again = cluster.member(leader).promote_member(learner.id).await;
    assert!(
        matches!(again, Err(StoreError::MemberNotLearner)),
        "{again:?}"
    );

    // It moves to another peer address: stopped, updated through a
    // follower, started there; every member lists and reaches it there.
    n4.close().await.unwrap();
    let moved = free_addr();
    let url = format!("http://{moved}");
    let members = cluster
        .member(follower)
        .update_member(learner.id, vec![url.clone()])
        .await
        .unwrap();
    assert!(members
        .iter()
        .any(|m| m.id == learner.id && m.peer_urls == [url.clone()]));
    let taken = cluster.initial[leader].1;
    let clash = cluster
        .member(leader)
        .update_member(learner.id, vec![format!("http://{taken}")])
        .await;
    assert!(
        matches!(clash, Err(StoreError::PeerUrlExists(_))),
        "{clash:?}"
    );
    let unknown = cluster
        .member(leader)
        .update_member(0x1234, vec![format!("http://{}", free_addr())])
        .await;
    assert!(
        matches!(unknown, Err(StoreError::MemberNotFound)),
        "{unknown:?}"
    );
    let n4 = join(&cluster, dir.path(), "n4", addr, moved).await;
    for i in 0..3 {
        let listed = cluster.member(i).members().unwrap();
        eventually("every member lists the new peer URL", || {
            cluster
                .member(i)
                .members()
                .unwrap()
                .iter()
                .any(|m| m.id == learner.id && m.peer_urls == [url.clone()])
        })
        .await;
        assert_eq!(listed.len(), 4);
    }
    // With one old voter stopped, three of four commit only with n4.
    let leader = cluster.leader().await;
    let down = (leader + 1) % 3;
    cluster.stop(down).await;
    let after = cluster.put(leader, "after-the-move").await;
    eventually("n4 applied the write made with its vote", || {
        n4.kv().current_revision() >= after
    })
    .await;
    n4.close().await.unwrap();
    for i in (0..3).filter(|&i| i != down) {
        cluster.stop(i).await;
    }
}
