//! Backups both ways between skiff and the real etcd (Debian's
//! etcd-server 3.4 and etcdctl): `etcdctl snapshot save` of `skiff store`
//! while a writer runs, read by `etcdctl snapshot status` and restored
//! into real etcd; a real etcd snapshot restored into a three-member skiff
//! cluster with `skiff snapshot restore`; a lost skiff cluster restored
//! from its last snapshot. Every key with its revisions and version is
//! compared, and so is etcd's HashKV. Without etcd and etcdctl the tests
//! are skipped (under CI=true they fail).

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use serde_json::Value;
use skiff_tests::etcdctl::{base64_decode, Etcdctl};
use skiff_tests::real_etcd::{etcd_or_skip, RealEtcd};
use skiff_tests::skiff_process::{free_addrs, SkiffProcess};
use skiff_tests::store_client;
use skiff_tests::store_cluster::StoreCluster;

const SKIFF_TIMEOUT: Duration = Duration::from_secs(60);

/// A key as etcdctl prints it: key, create and mod revision, version,
/// value, lease.
#[derive(Debug, Clone, PartialEq, Eq)]
struct KeyRecord {
    key: Vec<u8>,
    create_revision: i64,
    mod_revision: i64,
    version: i64,
    value: Vec<u8>,
    lease: i64,
}

fn int(value: &Value, field: &str) -> i64 {
    value.get(field).and_then(Value::as_i64).unwrap_or(0)
}

fn json(text: &str) -> Result<Value> {
    serde_json::from_str(text).with_context(|| format!("etcdctl printed no JSON: {text}"))
}

/// Every key (at `revision`, if given) and the store's revision.
fn all_keys(etcdctl: &Etcdctl, revision: Option<i64>) -> Result<(i64, Vec<KeyRecord>)> {
    let rev = revision.map(|r| format!("--rev={r}"));
    let mut args = vec!["get", "", "--prefix", "-w", "json"];
    args.extend(rev.as_deref());
    let out = json(&etcdctl.ok(&args)?)?;
    let mut keys = Vec::new();
    for kv in out["kvs"].as_array().into_iter().flatten() {
        keys.push(KeyRecord {
            key: base64_decode(kv["key"].as_str().unwrap_or_default())?,
            create_revision: int(kv, "create_revision"),
            mod_revision: int(kv, "mod_revision"),
            version: int(kv, "version"),
            value: base64_decode(kv["value"].as_str().unwrap_or_default())?,
            lease: int(kv, "lease"),
        });
    }
    Ok((int(&out["header"], "revision"), keys))
}

/// (hash, compact revision) of each endpoint's HashKV at `revision` (0: current).
fn hash_kv(etcdctl: &Etcdctl, revision: i64) -> Result<Vec<(u64, i64)>> {
    let rev = format!("--rev={revision}");
    let out = json(&etcdctl.ok(&["endpoint", "hashkv", &rev, "-w", "json"])?)?;
    let answers = out.as_array().context("hashkv prints a list")?;
    Ok(answers
        .iter()
        .map(|a| {
            let h = &a["HashKV"];
            (h["hash"].as_u64().unwrap_or(0), int(h, "compact_revision"))
        })
        .collect())
}

/// `etcdctl snapshot status FILE`: (hash, revision, total keys, total size).
fn etcd_snapshot_status(etcdctl: &Etcdctl, file: &Path) -> Result<(u64, i64, i64, i64)> {
    let path = file.display().to_string();
    let out = json(&etcdctl.ok(&["snapshot", "status", &path, "-w", "json"])?)?;
    Ok((
        out["hash"].as_u64().unwrap_or(0),
        int(&out, "revision"),
        int(&out, "totalKey"),
        int(&out, "totalSize"),
    ))
}

async fn skiff(args: &[&str]) -> Result<(bool, String, String)> {
    let (status, stdout, stderr) = SkiffProcess::run(args, SKIFF_TIMEOUT).await?;
    Ok((status.success(), stdout, stderr))
}

/// `skiff snapshot status FILE`, parsed as (hash, revision, total keys, total size).
async fn skiff_snapshot_status(file: &Path) -> Result<(u64, i64, i64, i64)> {
    let path = file.display().to_string();
    let (ok, stdout, stderr) = skiff(&["snapshot", "status", &path]).await?;
    ensure!(ok, "skiff snapshot status failed: {stderr}");
    let field = |name: &str| {
        stdout
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(": "))
            .map(str::to_string)
            .with_context(|| format!("no {name} in {stdout}"))
    };
    Ok((
        u64::from_str_radix(&field("hash")?, 16)?,
        field("revision")?.parse()?,
        field("total keys")?.parse()?,
        field("total size")?.parse()?,
    ))
}

/// A history with overwrites, deletions, a key on a lease and a
/// compaction; returns the lease ID (hex, as etcdctl prints it).
fn write_history(etcdctl: &Etcdctl) -> Result<String> {
    for i in 0..40 {
        etcdctl.ok(&["put", &format!("/h/{:02}", i % 12), &format!("value {i}")])?;
    }
    etcdctl.ok(&["del", "/h/03"])?;
    etcdctl.ok(&["del", "/h/1", "--prefix"])?;
    let grant = etcdctl.ok(&["lease", "grant", "900"])?;
    let lease = grant
        .split_whitespace()
        .nth(1)
        .context("lease grant prints its ID")?
        .to_string();
    etcdctl.ok(&["put", "/leased", "x", "--lease", &lease])?;
    let (revision, _) = all_keys(etcdctl, None)?;
    etcdctl.ok(&["compaction", &(revision - 5).to_string(), "--physical"])?;
    etcdctl.ok(&["put", "/h/05", "after the compaction"])?;
    etcdctl.ok(&["put", "/h/03", "again"])?;
    Ok(lease)
}

/// Puts through the member at `client` until told to stop; counts them.
struct Writer {
    stop: Arc<AtomicBool>,
    done: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<Result<()>>,
}

impl Writer {
    fn start(client: std::net::SocketAddr) -> Writer {
        let stop = Arc::new(AtomicBool::new(false));
        let done = Arc::new(AtomicUsize::new(0));
        let task = tokio::spawn({
            let (stop, done) = (Arc::clone(&stop), Arc::clone(&done));
            async move {
                let mut i = 0usize;
                while !stop.load(Ordering::Relaxed) {
                    store_client::put(client, &format!("/w/{:03}", i % 200), &format!("w{i}"))
                        .await?;
                    i += 1;
                    done.store(i, Ordering::Relaxed);
                }
                Ok(())
            }
        });
        Writer { stop, done, task }
    }

    async fn wait_for(&self, puts: usize) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.done.load(Ordering::Relaxed) < puts {
            ensure!(
                Instant::now() < deadline,
                "the writer made fewer than {puts} puts"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(())
    }

    async fn stop(self) -> Result<usize> {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await??;
        Ok(self.done.load(Ordering::Relaxed))
    }
}

fn path_str(path: &Path) -> String {
    path.display().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_skiff_snapshot_taken_under_writes_restores_into_real_etcd() -> Result<()> {
    let Some(binaries) =
        etcd_or_skip("a_skiff_snapshot_taken_under_writes_restores_into_real_etcd")
    else {
        return Ok(());
    };
    let cluster = StoreCluster::single().await?;
    let member = &cluster.members[0];
    let skiff_ctl = Etcdctl::new(binaries.1.clone(), member.client.to_string());
    let lease = write_history(&skiff_ctl)?;

    let dir = tempfile::tempdir()?;
    let file = dir.path().join("skiff.db");
    let writer = Writer::start(member.client);
    writer.wait_for(20).await?;
    skiff_ctl.ok(&["snapshot", "save", &path_str(&file)])?;
    let before_stop = writer.done.load(Ordering::Relaxed);
    writer.wait_for(before_stop + 20).await?;
    let puts = writer.stop().await?;

    // etcdctl reads it, and skiff reads it the same.
    let offline = Etcdctl::offline(binaries.1.clone());
    let status = etcd_snapshot_status(&offline, &file)?;
    assert_eq!(skiff_snapshot_status(&file).await?, status);
    let snapshot_revision = status.1;
    let (now, _) = all_keys(&skiff_ctl, None)?;
    assert!(
        snapshot_revision < now,
        "the snapshot (revision {snapshot_revision}) was taken while the writer ran ({puts} puts, revision {now} now)"
    );

    // Restored into real etcd, it holds what skiff held at that revision.
    let [peer, client] =
        <[_; 2]>::try_from(free_addrs(2)?).map_err(|_| anyhow::anyhow!("ports"))?;
    let data_dir = dir.path().join("etcd");
    offline.ok(&[
        "snapshot",
        "restore",
        &path_str(&file),
        "--name",
        "e1",
        "--data-dir",
        &path_str(&data_dir),
        "--initial-cluster",
        &RealEtcd::initial_cluster("e1", peer),
        "--initial-advertise-peer-urls",
        &format!("http://{peer}"),
    ])?;
    let etcd = RealEtcd::start(&binaries, "e1", &data_dir, peer, client).await?;
    let etcd_ctl = etcd.etcdctl();
    let (etcd_revision, etcd_keys) = all_keys(&etcd_ctl, None)?;
    let (_, skiff_keys) = all_keys(&skiff_ctl, Some(snapshot_revision))?;
    assert_eq!(etcd_revision, snapshot_revision);
    assert!(skiff_keys.iter().any(|k| k.key.starts_with(b"/w/")));
    assert_eq!(etcd_keys, skiff_keys);
    // Same history, same hash, by etcd's own definition.
    assert_eq!(
        hash_kv(&etcd_ctl, 0)?,
        hash_kv(&skiff_ctl, snapshot_revision)?
    );
    let ttl = etcd_ctl.ok(&["lease", "timetolive", &lease, "--keys"])?;
    assert!(ttl.contains("attached keys([/leased])"), "{ttl}");
    // etcd goes on from there.
    let put = json(&etcd_ctl.ok(&["put", "/from-etcd", "1", "-w", "json"])?)?;
    assert_eq!(int(&put["header"], "revision"), snapshot_revision + 1);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_etcd_snapshot_restores_into_a_skiff_cluster() -> Result<()> {
    let Some(binaries) = etcd_or_skip("a_real_etcd_snapshot_restores_into_a_skiff_cluster") else {
        return Ok(());
    };
    let dir = tempfile::tempdir()?;
    let [peer, client] =
        <[_; 2]>::try_from(free_addrs(2)?).map_err(|_| anyhow::anyhow!("ports"))?;
    let etcd = RealEtcd::start(&binaries, "e1", &dir.path().join("etcd"), peer, client).await?;
    let etcd_ctl = etcd.etcdctl();
    let lease = write_history(&etcd_ctl)?;
    let file = dir.path().join("etcd.db");
    etcd_ctl.ok(&["snapshot", "save", &path_str(&file)])?;
    let (etcd_revision, etcd_keys) = all_keys(&etcd_ctl, None)?;
    let etcd_hash = hash_kv(&etcd_ctl, 0)?;
    let offline = Etcdctl::offline(binaries.1.clone());
    assert_eq!(
        skiff_snapshot_status(&file).await?,
        etcd_snapshot_status(&offline, &file)?
    );

    // Bad input is refused and creates nothing.
    let bytes = std::fs::read(&file)?;
    let cut = dir.path().join("cut.db");
    std::fs::write(&cut, &bytes[..bytes.len() - 7])?;
    let nowhere = dir.path().join("nowhere");
    let (ok, _, stderr) = skiff(&[
        "snapshot",
        "restore",
        &path_str(&cut),
        "--data-dir",
        &path_str(&nowhere),
    ])
    .await?;
    assert!(!ok && stderr.contains("neither a database"), "{stderr}");
    let mut flipped = bytes.clone();
    flipped[bytes.len() / 2] ^= 0x10;
    std::fs::write(&cut, &flipped)?;
    let (ok, _, stderr) = skiff(&[
        "snapshot",
        "restore",
        &path_str(&cut),
        "--data-dir",
        &path_str(&nowhere),
    ])
    .await?;
    assert!(!ok && stderr.contains("checksum"), "{stderr}");
    let (ok, _, stderr) = skiff(&[
        "snapshot",
        "restore",
        &path_str(&file),
        "--name",
        "n9",
        "--data-dir",
        &path_str(&nowhere),
        "--initial-cluster",
        "n1=127.0.0.1:1",
    ])
    .await?;
    assert!(
        !ok && stderr.contains("not in --initial-cluster"),
        "{stderr}"
    );
    assert!(!nowhere.exists());

    // Every member of a new three-member cluster restored from the file.
    let cluster = StoreCluster::start_prepared(3, |name, data_dir, initial_cluster| {
        let status = std::process::Command::new(skiff_tests::skiff_bin::skiff_bin())
            .args(["snapshot", "restore", &path_str(&file), "--name", name])
            .args([
                "--data-dir",
                &path_str(data_dir),
                "--initial-cluster",
                initial_cluster,
            ])
            .output()?;
        ensure!(
            status.status.success(),
            "skiff snapshot restore: {}",
            String::from_utf8_lossy(&status.stderr)
        );
        Ok(())
    })
    .await?;
    drop(etcd);
    for member in &cluster.members {
        let ctl = Etcdctl::new(binaries.1.clone(), member.client.to_string());
        let (revision, keys) = all_keys(&ctl, None)?;
        assert_eq!(
            (revision, &keys),
            (etcd_revision, &etcd_keys),
            "{}",
            member.name
        );
        assert_eq!(hash_kv(&ctl, 0)?, etcd_hash, "{}", member.name);
        // History before the snapshot's compaction is gone, as in etcd.
        let err = ctl.fails(&["get", "/h/00", "--rev=2"])?;
        assert!(
            err.contains("required revision has been compacted"),
            "{err}"
        );
    }
    let all = Etcdctl::new(binaries.1.clone(), cluster.endpoints());
    let ttl = all.ok(&["lease", "timetolive", &lease, "--keys"])?;
    assert!(ttl.contains("attached keys([/leased])"), "{ttl}");
    let put = json(&all.ok(&["put", "/from-skiff", "1", "-w", "json"])?)?;
    assert_eq!(int(&put["header"], "revision"), etcd_revision + 1);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_skiff_cluster_comes_back_from_its_last_snapshot() -> Result<()> {
    let Some(binaries) = etcd_or_skip("a_lost_skiff_cluster_comes_back_from_its_last_snapshot")
    else {
        return Ok(());
    };
    let cluster = StoreCluster::start(3).await?;
    let all = Etcdctl::new(binaries.1.clone(), cluster.endpoints());
    write_history(&all)?;
    // Members that applied the same revisions hash alike.
    let (revision, keys) = all_keys(&all, None)?;
    for at in [0, revision - 1] {
        wait_for_equal_hashes(&all, at).await?;
    }

    let dir = tempfile::tempdir()?;
    let file = dir.path().join("backup.db");
    let one = Etcdctl::new(binaries.1.clone(), cluster.members[1].client.to_string());
    // The member must have applied the last write before it is saved.
    let (applied, _) = all_keys(&one, None)?;
    assert_eq!(applied, revision);
    one.ok(&["snapshot", "save", &path_str(&file)])?;
    let hashes = hash_kv(&all, 0)?;
    drop(cluster);

    let restored = StoreCluster::start_prepared(3, |name, data_dir, initial_cluster| {
        let output = std::process::Command::new(skiff_tests::skiff_bin::skiff_bin())
            .args(["snapshot", "restore", &path_str(&file), "--name", name])
            .args([
                "--data-dir",
                &path_str(data_dir),
                "--initial-cluster",
                initial_cluster,
            ])
            .output()?;
        ensure!(
            output.status.success(),
            "skiff snapshot restore: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        Ok(())
    })
    .await?;
    let all = Etcdctl::new(binaries.1.clone(), restored.endpoints());
    assert_eq!(all_keys(&all, None)?, (revision, keys));
    assert_eq!(hash_kv(&all, 0)?, hashes);
    let put = json(&all.ok(&["put", "/after-the-loss", "1", "-w", "json"])?)?;
    assert_eq!(int(&put["header"], "revision"), revision + 1);
    wait_for_equal_hashes(&all, 0).await?;
    Ok(())
}

/// Waits until every endpoint answers HashKV at `revision` alike (a
/// follower may not have applied the last write yet).
async fn wait_for_equal_hashes(all: &Etcdctl, revision: i64) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        // A member that has not applied `revision` yet answers an error.
        let hashes = hash_kv(all, revision);
        if let Ok(hashes) = &hashes {
            if hashes.len() > 1 && hashes.iter().all(|h| *h == hashes[0]) {
                return Ok(());
            }
        }
        ensure!(
            Instant::now() < deadline,
            "members disagree on HashKV at {revision}: {hashes:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// (when the put was acknowledged, how long it took) of every small put.
type Acks = Arc<std::sync::Mutex<Vec<(Instant, Duration)>>>;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_go_on_while_a_large_snapshot_streams() -> Result<()> {
    use skiff_store::grpc::pb::etcdserverpb::{kv_client::KvClient, PutRequest};
    let Some(binaries) = etcd_or_skip("writes_go_on_while_a_large_snapshot_streams") else {
        return Ok(());
    };
    let cluster = StoreCluster::single().await?;
    let member = &cluster.members[0];
    let mut kv = KvClient::new(store_client::connect(member.client).await?);
    // 64 MiB of state, in values of 1 MiB.
    for i in 0..64 {
        kv.put(PutRequest {
            key: format!("/big/{i:02}").into_bytes(),
            value: vec![b'x'; 1 << 20],
            ..Default::default()
        })
        .await?;
    }

    let stop = Arc::new(AtomicBool::new(false));
    let acks: Acks = Arc::default();
    let writer = tokio::spawn({
        let (stop, acks, mut kv) = (Arc::clone(&stop), Arc::clone(&acks), kv.clone());
        async move {
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) {
                let started = Instant::now();
                kv.put(PutRequest {
                    key: format!("/during/{i}").into_bytes(),
                    value: b"v".to_vec(),
                    ..Default::default()
                })
                .await?;
                acks.lock()
                    .unwrap()
                    .push((Instant::now(), started.elapsed()));
                i += 1;
            }
            anyhow::Ok(())
        }
    });
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("big.db");
    let skiff_ctl = Etcdctl::new(binaries.1.clone(), member.client.to_string());
    let started = Instant::now();
    let save = tokio::task::spawn_blocking({
        let (skiff_ctl, file) = (skiff_ctl.clone(), path_str(&file));
        move || skiff_ctl.ok(&["snapshot", "save", &file])
    });
    save.await??;
    let finished = Instant::now();
    stop.store(true, Ordering::Relaxed);
    writer.await??;

    let acks = acks.lock().unwrap().clone();
    let during: Vec<Duration> = acks
        .iter()
        .filter(|(acked, _)| (started..finished).contains(acked))
        .map(|(_, took)| *took)
        .collect();
    let slowest = during.iter().max().copied().unwrap_or_default();
    let took = finished - started;
    eprintln!(
        "snapshot save of 64 MiB took {took:?}; {} puts acknowledged meanwhile, the slowest in {slowest:?}",
        during.len()
    );
    ensure!(
        during.len() >= 10 && slowest < took / 2,
        "writes stalled while the snapshot streamed: {} puts in {took:?}, the slowest took {slowest:?}",
        during.len()
    );
    // A point-in-time copy: every big value, and the small puts made
    // before it was taken, no more than were acknowledged by its end.
    let offline = Etcdctl::offline(binaries.1.clone());
    let (_, revision, total_keys, _) = etcd_snapshot_status(&offline, &file)?;
    let (now, _) = all_keys(&skiff_ctl, None)?;
    ensure!(
        revision >= 64 && revision < now,
        "the snapshot's revision {revision} is not one of the writes (64..{now})"
    );
    ensure!(total_keys > 64, "{total_keys} keys in the snapshot");
    Ok(())
}
