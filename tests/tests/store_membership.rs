//! Three `skiff store` processes on loopback, as an operator runs them:
//! writes through every member; the leader SIGKILLed under a write load, a
//! new one elected and writes going on; the killed member restarted and
//! caught up; a follower's data directory wiped, the member removed and
//! added again, and restored by a snapshot. Every acknowledged write is
//! then on every member at the revision it was acknowledged with, and no
//! revision holds two writes.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use skiff_store::grpc::pb::etcdserverpb::cluster_client::ClusterClient;
use skiff_store::grpc::pb::etcdserverpb::kv_client::KvClient;
use skiff_store::grpc::pb::etcdserverpb::{
    MemberAddRequest, MemberListRequest, MemberRemoveRequest, PutRequest, RangeRequest,
};
use skiff_tests::skiff_process::{store_args, SkiffProcess};
use skiff_tests::store_client;
use skiff_tests::store_cluster::{StoreCluster, READY_TIMEOUT};

/// (key, revision) of every acknowledged put.
type Acks = Arc<Mutex<Vec<(String, i64)>>>;

fn initial_cluster(cluster: &StoreCluster) -> Result<String> {
    let mut parts = Vec::new();
    for member in &cluster.members {
        parts.push(format!("{}={}", member.name, member.peer_addr()?));
    }
    Ok(parts.join(","))
}

/// Index of the member that leads, as the members say.
async fn leader(cluster: &StoreCluster, among: &[usize]) -> Result<usize> {
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        let mut ids = Vec::new();
        let mut leaders = Vec::new();
        for &i in among {
            if let Ok(status) = store_client::status(cluster.members[i].client).await {
                ids.push((i, status.header.map_or(0, |h| h.member_id)));
                leaders.push(status.leader);
            }
        }
        if leaders.len() == among.len()
            && leaders[0] != 0
            && leaders.iter().all(|l| *l == leaders[0])
        {
            if let Some((i, _)) = ids.iter().find(|(_, id)| *id == leaders[0]) {
                return Ok(*i);
            }
        }
        if Instant::now() > deadline {
            bail!("no leader among members {among:?} (they say {leaders:?})");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Puts `{prefix}{n}` through `addr` until `stop`, recording each ack.
fn writer(
    addr: SocketAddr,
    prefix: String,
    acks: Acks,
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut n = 0u64;
        while !stop.load(Ordering::Relaxed) {
            let Ok(channel) = store_client::connect(addr).await else {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            };
            let mut client = KvClient::new(channel);
            while !stop.load(Ordering::Relaxed) {
                let key = format!("{prefix}{n:06}");
                let put = PutRequest {
                    key: key.clone().into_bytes(),
                    value: b"v".to_vec(),
                    ..Default::default()
                };
                match client.put(put).await {
                    Ok(resp) => {
                        let revision = resp.into_inner().header.map_or(0, |h| h.revision);
                        acks.lock().unwrap().push((key, revision));
                        n += 1;
                    }
                    // Not acknowledged: it may or may not have happened.
                    // The next put uses a new key either way.
                    Err(_) => {
                        n += 1;
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        break;
                    }
                }
            }
        }
    })
}

/// Every key and its (mod revision, version) as `addr` has applied it.
async fn contents(addr: SocketAddr) -> Result<BTreeMap<String, (i64, i64)>> {
    let mut client = KvClient::new(store_client::connect(addr).await?);
    let resp = client
        .range(RangeRequest {
            key: vec![0],
            range_end: vec![0],
            serializable: true,
            ..Default::default()
        })
        .await?
        .into_inner();
    Ok(resp
        .kvs
        .into_iter()
        .map(|kv| {
            (
                String::from_utf8_lossy(&kv.key).into_owned(),
                (kv.mod_revision, kv.version),
            )
        })
        .collect())
}

/// A put through `addr`, retried while the member has no leader yet (it
/// has just joined).
async fn put_retrying(addr: SocketAddr, key: &str) -> Result<i64> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match store_client::put(addr, key, "v").await {
            Ok(revision) => return Ok(revision),
            Err(err) if Instant::now() < deadline && format!("{err:#}").contains("no leader") => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(err) => return Err(err),
        }
    }
}

async fn acked_count_grows(acks: &Acks, from: usize, by: usize, within: Duration) -> Result<()> {
    let deadline = Instant::now() + within;
    while acks.lock().unwrap().len() < from + by {
        if Instant::now() > deadline {
            bail!(
                "writes did not go on: {} acks, wanted {}",
                acks.lock().unwrap().len(),
                from + by
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_loses_its_leader_and_a_disk_and_keeps_every_acknowledged_write() -> Result<()> {
    let mut cluster = StoreCluster::start(3).await?;
    let spec = initial_cluster(&cluster)?;
    let acks: Acks = Arc::default();

    // Writes through every member (a follower forwards to the leader).
    for member in &cluster.members {
        let key = format!("through-{}", member.name);
        let revision = store_client::put(member.client, &key, "v").await?;
        acks.lock().unwrap().push((key, revision));
    }

    // A write load through every member, then the leader dies.
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = cluster
        .members
        .iter()
        .map(|m| {
            writer(
                m.client,
                format!("load-{}-", m.name),
                Arc::clone(&acks),
                Arc::clone(&stop),
            )
        })
        .collect();
    acked_count_grows(&acks, 3, 100, Duration::from_secs(30)).await?;
    let old = leader(&cluster, &[0, 1, 2]).await?;
    cluster.members[old].process.signal(libc::SIGKILL)?;
    cluster.members[old]
        .process
        .wait_exit(Duration::from_secs(10))
        .await?;
    let others: Vec<usize> = (0..3).filter(|&i| i != old).collect();
    let new = leader(&cluster, &others).await?;
    assert_ne!(new, old);
    let seen = acks.lock().unwrap().len();
    acked_count_grows(&acks, seen, 100, Duration::from_secs(30))
        .await
        .context("writes after the leader was killed")?;

    // The killed member comes back and catches up.
    let member = &mut cluster.members[old];
    let args = store_args(
        &member.name,
        &member.data_dir,
        member.client,
        Some((member.peer_addr()?, &spec)),
    );
    member.process =
        SkiffProcess::spawn(&format!("skiff store {} (restarted)", member.name), args)?;
    member
        .process
        .wait_for_line(" ready: ", READY_TIMEOUT)
        .await?;
    let seen = acks.lock().unwrap().len();
    acked_count_grows(&acks, seen, 50, Duration::from_secs(30)).await?;
    stop.store(true, Ordering::Relaxed);
    for writer in writers {
        writer.await?;
    }

    // A follower loses its disk: it is removed, its directory wiped, added
    // again under a new ID, and restored by a snapshot of the state.
    let leader_now = leader(&cluster, &[0, 1, 2]).await?;
    let lost = (0..3).find(|&i| i != leader_now).context("a follower")?;
    let lost_id = store_client::status(cluster.members[lost].client)
        .await?
        .header
        .map_or(0, |h| h.member_id);
    cluster.members[lost].process.signal(libc::SIGKILL)?;
    cluster.members[lost]
        .process
        .wait_exit(Duration::from_secs(10))
        .await?;
    std::fs::remove_dir_all(&cluster.members[lost].data_dir)?;
    let mut admin =
        ClusterClient::new(store_client::connect(cluster.members[leader_now].client).await?);
    admin
        .member_remove(MemberRemoveRequest { id: lost_id })
        .await?;
    // Two members are the cluster now; writes still go through.
    let revision = store_client::put(cluster.members[leader_now].client, "while-two", "v").await?;
    acks.lock().unwrap().push(("while-two".into(), revision));
    let peer_url = format!("http://{}", cluster.members[lost].peer_addr()?);
    let added = admin
        .member_add(MemberAddRequest {
            peer_ur_ls: vec![peer_url.clone()],
            is_learner: false,
        })
        .await?
        .into_inner();
    let new_id = added.member.as_ref().map_or(0, |m| m.id);
    assert_ne!(new_id, lost_id, "a member added again is a new member");
    let member = &mut cluster.members[lost];
    let mut args = store_args(
        &member.name,
        &member.data_dir,
        member.client,
        Some((member.peer_addr()?, &spec)),
    );
    args.extend(["--initial-cluster-state".into(), "existing".into()]);
    member.process = SkiffProcess::spawn(&format!("skiff store {} (re-added)", member.name), args)?;
    member
        .process
        .wait_for_line(" ready: ", READY_TIMEOUT)
        .await?;
    let revision = put_retrying(cluster.members[lost].client, "after-re-add").await?;
    acks.lock().unwrap().push(("after-re-add".into(), revision));
    assert!(
        cluster.members[lost]
            .process
            .stderr()
            .contains("installed a snapshot"),
        "the wiped member was restored by a snapshot:\n{}",
        cluster.members[lost].process.stderr()
    );
    let listed = admin
        .member_list(MemberListRequest { linearizable: true })
        .await?
        .into_inner();
    let ids: Vec<u64> = listed.members.iter().map(|m| m.id).collect();
    assert_eq!(ids.len(), 3, "{ids:x?}");
    assert!(ids.contains(&new_id) && !ids.contains(&lost_id), "{ids:x?}");

    // Every acknowledged write, on every member, at its revision; no
    // revision holds two writes; every member holds the same.
    let acks = acks.lock().unwrap().clone();
    let mut revisions: Vec<i64> = acks.iter().map(|(_, r)| *r).collect();
    revisions.sort_unstable();
    revisions.dedup();
    assert_eq!(
        revisions.len(),
        acks.len(),
        "two acknowledged writes share a revision"
    );
    let last = *revisions.last().context("some writes")?;
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut first: Option<BTreeMap<String, (i64, i64)>> = None;
    for member in &cluster.members {
        let mut held = contents(member.client).await?;
        while held.values().map(|(r, _)| *r).max().unwrap_or(0) < last {
            if Instant::now() > deadline {
                bail!("{} never caught up to revision {last}", member.name);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
            held = contents(member.client).await?;
        }
        for (key, revision) in &acks {
            assert_eq!(
                held.get(key),
                Some(&(*revision, 1)),
                "{} lost or changed the acknowledged put of {key} at {revision}",
                member.name
            );
        }
        let mut by_revision: Vec<i64> = held.values().map(|(r, _)| *r).collect();
        let count = by_revision.len();
        by_revision.sort_unstable();
        by_revision.dedup();
        assert_eq!(
            by_revision.len(),
            count,
            "{}: a revision applied twice",
            member.name
        );
        match &first {
            None => first = Some(held),
            Some(first) => assert_eq!(
                first, &held,
                "{} differs from {}",
                member.name, cluster.members[0].name
            ),
        }
    }
    Ok(())
}
