//! When a member's database grows, with the real etcdctl: the space quota
//! reached (NOSPACE raised, writes refused with etcd's error, reads,
//! deletes and compaction still served), `defrag` giving the space back,
//! `alarm disarm`; the same steps against a real etcd, to compare. Defrag
//! of one member of three while the others take writes, with HashKV equal
//! after it. The periodic corruption check raising CORRUPT for a member
//! whose history was changed on disk. Without etcdctl (or etcd, for the
//! comparison) the tests are skipped (under CI=true they fail).

use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use serde_json::Value;
use skiff_tests::etcdctl::{etcdctl_or_skip, Etcdctl};
use skiff_tests::real_etcd::{etcd_or_skip, RealEtcd};
use skiff_tests::skiff_process::{free_addrs, store_args, SkiffProcess};
use skiff_tests::store_client;
use skiff_tests::store_cluster::{StoreCluster, READY_TIMEOUT};

const NO_SPACE: &str = "etcdserver: mvcc: database space exceeded";

fn json(text: &str) -> Result<Value> {
    serde_json::from_str(text).with_context(|| format!("etcdctl printed no JSON: {text}"))
}

/// `endpoint status` of the one endpoint `etcdctl` talks to.
fn status(etcdctl: &Etcdctl) -> Result<Value> {
    let all = json(&etcdctl.ok(&["endpoint", "status", "-w", "json"])?)?;
    Ok(all[0]["Status"].clone())
}

fn number(value: &Value, path: &[&str]) -> Result<u64> {
    let mut at = value;
    for field in path {
        at = &at[field];
    }
    at.as_u64()
        .with_context(|| format!("no number at {path:?} in {value}"))
}

/// Overwrites one key with 64 KiB values until a put is refused; returns
/// how many went through and what the refused one printed.
fn fill_until_refused(etcdctl: &Etcdctl) -> Result<(usize, String)> {
    let value = "x".repeat(64 * 1024);
    for i in 0..600 {
        let out = etcdctl.run_with_stdin(&["put", "big"], &value)?;
        if !out.status.success() {
            return Ok((i, String::from_utf8_lossy(&out.stderr).into_owned()));
        }
    }
    bail!("600 puts of 64 KiB went through under the quota")
}

/// The operator's steps when a member reports NOSPACE, against a member
/// started with a quota a few MiB above its empty size: the same on skiff
/// and on etcd.
fn quota_then_defrag_then_disarm(etcdctl: &Etcdctl) -> Result<()> {
    let member = number(&status(etcdctl)?, &["header", "member_id"])?;
    let (went_through, refused) = fill_until_refused(etcdctl)?;
    ensure!(went_through > 0, "the first put was refused: {refused}");
    ensure!(refused.contains(NO_SPACE), "put past the quota: {refused}");
    // etcdctl prints a space after the alarm's name.
    let nospace = format!("memberID:{member} alarm:NOSPACE \n");
    assert_eq!(etcdctl.ok(&["alarm", "list"])?, nospace);

    // Past the quota: no write that adds, but reads, deletes, compaction.
    let small = etcdctl.fails(&["put", "small", "1"])?;
    ensure!(small.contains(NO_SPACE), "{small}");
    let txn = "\nput t 1\n\n\n";
    let out = etcdctl.run_with_stdin(&["txn"], txn)?;
    let printed = String::from_utf8_lossy(&out.stderr);
    ensure!(
        !out.status.success() && printed.contains(NO_SPACE),
        "a txn that puts: {printed}"
    );
    let grant = etcdctl.fails(&["lease", "grant", "60"])?;
    ensure!(grant.contains(NO_SPACE), "lease grant: {grant}");
    assert_eq!(etcdctl.ok(&["get", "big", "--keys-only"])?.trim(), "big");
    assert_eq!(etcdctl.ok(&["del", "big"])?, "1\n");
    let revision = number(&status(etcdctl)?, &["header", "revision"])?;
    assert_eq!(
        etcdctl.ok(&["compaction", &revision.to_string(), "--physical"])?,
        format!("compacted revision {revision}\n")
    );

    let before = status(etcdctl)?;
    let size_before = number(&before, &["dbSize"])?;
    let defragged = etcdctl.ok(&["defrag"])?;
    ensure!(
        defragged.starts_with("Finished defragmenting etcd member["),
        "defrag: {defragged}"
    );
    let after = status(etcdctl)?;
    let size_after = number(&after, &["dbSize"])?;
    ensure!(
        size_after < size_before,
        "defrag left {size_after} bytes of {size_before}"
    );
    let in_use = number(&after, &["dbSizeInUse"])?;
    ensure!(
        in_use > 0 && in_use <= size_after,
        "{in_use} bytes in use of {size_after}"
    );

    // Below the quota again, but writes wait for the operator's disarm.
    let early = etcdctl.fails(&["put", "small", "1"])?;
    ensure!(early.contains(NO_SPACE), "before disarm: {early}");
    assert_eq!(etcdctl.ok(&["alarm", "disarm"])?, nospace);
    assert_eq!(etcdctl.ok(&["alarm", "list"])?, "");
    assert_eq!(etcdctl.ok(&["put", "small", "1"])?, "OK\n");
    ensure!(etcdctl
        .ok(&["lease", "grant", "60"])?
        .contains(" granted with TTL(60s)"));
    Ok(())
}

/// A member's quota: its size empty, plus this.
const QUOTA_ROOM: u64 = 3 << 20;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_its_quota_skiff_refuses_writes_until_defrag_and_disarm() -> Result<()> {
    let test = "past_its_quota_skiff_refuses_writes_until_defrag_and_disarm";
    let Some(binary) = etcdctl_or_skip(test) else {
        return Ok(());
    };
    let dir = tempfile::tempdir()?;
    let data = dir.path().join("data");
    let client = free_addrs(1)?[0];
    let etcdctl = Etcdctl::new(binary, client.to_string());

    // The size of an empty member decides the quota the test starts with.
    let args = store_args("default", &data, client, None);
    let mut first = SkiffProcess::spawn("skiff store", args.clone())?;
    first.wait_for_line(" ready: ", READY_TIMEOUT).await?;
    let empty = number(&status(&etcdctl)?, &["dbSize"])?;
    first.signal(libc::SIGTERM)?;
    first.wait_exit(READY_TIMEOUT).await?;

    let quota = empty + QUOTA_ROOM;
    let mut args = args;
    args.extend(["--quota-backend-bytes".into(), quota.to_string()]);
    let mut store = SkiffProcess::spawn("skiff store", args)?;
    store.wait_for_line(" ready: ", READY_TIMEOUT).await?;
    quota_then_defrag_then_disarm(&etcdctl)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_its_quota_real_etcd_refuses_writes_until_defrag_and_disarm() -> Result<()> {
    let test = "past_its_quota_real_etcd_refuses_writes_until_defrag_and_disarm";
    let Some(binaries) = etcd_or_skip(test) else {
        return Ok(());
    };
    let empty = {
        let etcd = RealEtcd::alone(&binaries).await?;
        number(&status(&etcd.etcdctl())?, &["dbSize"])?
    };
    let quota = format!("--quota-backend-bytes={}", empty + QUOTA_ROOM);
    let etcd = RealEtcd::alone_with(&binaries, &[quota]).await?;
    quota_then_defrag_then_disarm(&etcd.etcdctl())
}

/// Overwrites ten keys `rounds` times with 16 KiB values through `addr`.
async fn churn(addr: std::net::SocketAddr, rounds: usize) -> Result<()> {
    for round in 0..rounds {
        let value = char::from(b'a' + (round % 26) as u8)
            .to_string()
            .repeat(16 * 1024);
        for key in 0..10 {
            store_client::put(addr, &format!("churn/{key}"), &value).await?;
        }
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn defrag_of_one_member_while_the_others_take_writes() -> Result<()> {
    let test = "defrag_of_one_member_while_the_others_take_writes";
    let Some(binary) = etcdctl_or_skip(test) else {
        return Ok(());
    };
    let cluster = StoreCluster::start(3).await?;
    let all = Etcdctl::new(binary.clone(), cluster.endpoints());
    let one = |i: usize| Etcdctl::new(binary.clone(), cluster.members[i].client.to_string());
    churn(cluster.members[0].client, 30).await?;
    let revision = number(&status(&one(0))?, &["header", "revision"])?;
    all.ok(&["compaction", &revision.to_string(), "--physical"])?;

    let target = 1;
    let before: Vec<u64> = (0..3)
        .map(|i| number(&status(&one(i))?, &["dbSize"]))
        .collect::<Result<_>>()?;
    // Writes go on through another member during the defrag.
    let writer_addr = cluster.members[2].client;
    let writer = tokio::spawn(async move {
        let mut revisions = Vec::new();
        for i in 0..100 {
            revisions.push(store_client::put(writer_addr, &format!("during/{i:03}"), "v").await?);
        }
        anyhow::Ok(revisions)
    });
    let out = one(target).ok(&["defrag"])?;
    assert_eq!(
        out,
        format!(
            "Finished defragmenting etcd member[{}]\n",
            cluster.members[target].client
        )
    );
    let revisions = writer.await??;
    ensure!(revisions.windows(2).all(|w| w[0] < w[1]), "{revisions:?}");

    let after = number(&status(&one(target))?, &["dbSize"])?;
    ensure!(
        after < before[target],
        "member {target}: {after} bytes after defrag, {} before",
        before[target]
    );
    // The defragmented member still serves every key, written before and during.
    let during = one(target).ok(&["get", "during/", "--prefix", "--keys-only", "-w", "json"])?;
    assert_eq!(json(&during)?["count"], 100);
    let churned = one(target).ok(&["get", "churn/7", "--print-value-only"])?;
    assert_eq!(churned.trim().len(), 16 * 1024);

    // Every member hashes the same history at the same revision.
    let last = *revisions.last().context("no writes")?;
    let hashes = json(&all.ok(&[
        "endpoint",
        "hashkv",
        "--rev",
        &last.to_string(),
        "-w",
        "json",
    ])?)?;
    let hashes: Vec<u64> = hashes
        .as_array()
        .context("hashkv prints a list")?
        .iter()
        .map(|h| number(h, &["HashKV", "hash"]))
        .collect::<Result<_>>()?;
    ensure!(
        hashes.len() == 3 && hashes.iter().all(|&h| h == hashes[0]),
        "hashes after defrag: {hashes:?}"
    );
    Ok(())
}

/// Changes, in a stopped member's database, the value `from` of a record
/// to `to` (the same length): its history no longer matches its peers'.
fn corrupt_value(data_dir: &std::path::Path, from: &[u8], to: &[u8]) -> Result<()> {
    assert_eq!(from.len(), to.len());
    let db = sled::Config::new().path(data_dir.join("db")).open()?;
    let tree = db.open_tree("mvcc")?;
    let mut changed = 0;
    for item in tree.iter() {
        let (key, value) = item?;
        if value.ends_with(from) {
            let mut corrupt = value.to_vec();
            let at = corrupt.len() - from.len();
            corrupt[at..].copy_from_slice(to);
            tree.insert(key, corrupt)?;
            changed += 1;
        }
    }
    db.flush()?;
    ensure!(changed == 1, "{changed} records hold the value");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_corruption_check_raises_corrupt_for_a_member_whose_history_changed() -> Result<()> {
    let test = "the_corruption_check_raises_corrupt_for_a_member_whose_history_changed";
    let Some(binary) = etcdctl_or_skip(test) else {
        return Ok(());
    };
    let check = ["--corrupt-check-interval".to_string(), "1s".to_string()];
    let mut cluster = StoreCluster::start_with(3, &check).await?;
    let result = raise_corrupt_for_a_changed_member(&mut cluster, binary, &check).await;
    cluster.logs_on_error(result)
}

async fn raise_corrupt_for_a_changed_member(
    cluster: &mut StoreCluster,
    binary: std::path::PathBuf,
    check: &[String],
) -> Result<()> {
    let all = Etcdctl::new(binary.clone(), cluster.endpoints());
    let original = "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";
    all.ok(&["put", "victim", original])?;
    all.ok(&["put", "other", "1"])?;
    // Members that agree raise nothing over a few checks.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(all.ok(&["alarm", "list"])?, "");

    let leader = cluster.leader(&[0, 1, 2]).await?;
    let victim = (leader + 1) % 3;
    let victim_id = number(
        &status(&Etcdctl::new(
            binary.clone(),
            cluster.members[victim].client.to_string(),
        ))?,
        &["header", "member_id"],
    )?;
    let peers: Vec<String> = (0..3)
        .map(|i| Ok(format!("n{}={}", i + 1, cluster.members[i].peer_addr()?)))
        .collect::<Result<_>>()?;
    let member = &mut cluster.members[victim];
    member.process.signal(libc::SIGTERM)?;
    member.process.wait_exit(READY_TIMEOUT).await?;
    corrupt_value(
        &member.data_dir,
        original.as_bytes(),
        &original.replace('A', "B").into_bytes(),
    )?;
    let mut args = store_args(
        &member.name,
        &member.data_dir,
        member.client,
        Some((member.peer_addr()?, &peers.join(","))),
    );
    args.extend(check.iter().cloned());
    member.process = SkiffProcess::spawn(&format!("skiff store {}", member.name), args)?;
    member
        .process
        .wait_for_line(" ready: ", READY_TIMEOUT)
        .await?;

    let raised = format!("memberID:{victim_id} alarm:CORRUPT \n");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let listed = all.ok(&["alarm", "list"])?;
        if listed == raised {
            break;
        }
        ensure!(
            Instant::now() < deadline,
            "no CORRUPT alarm for {victim_id:x} within 60 s; alarm list: {listed:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Writes are refused on every member; reads are served.
    for i in 0..3 {
        let one = Etcdctl::new(binary.clone(), cluster.members[i].client.to_string());
        // The restarted member may still be calling an election.
        let deadline = Instant::now() + Duration::from_secs(30);
        let refused = loop {
            let refused = one.fails(&["put", "after", "1"])?;
            if !refused.contains("etcdserver: no leader") || Instant::now() > deadline {
                break refused;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        ensure!(
            refused.contains("etcdserver: corrupt cluster"),
            "put through member {i}: {refused}"
        );
    }
    let leader_view = Etcdctl::new(binary, cluster.members[leader].client.to_string());
    assert_eq!(
        leader_view.ok(&["get", "victim", "--print-value-only"])?,
        format!("{original}\n")
    );
    Ok(())
}
