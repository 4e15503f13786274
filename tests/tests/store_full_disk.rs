//! A member whose data directory is on a small tmpfs that another process
//! fills to the last byte, with the real etcdctl. Alone: writes are refused
//! with etcd's NOSPACE error and the alarm is raised, reads go on, and once
//! the space is freed and the alarm disarmed writes go on in the same
//! process. One of three: the other two keep taking writes, the full one
//! refuses its own clients' writes and stops when it can no longer store
//! what the leader sends; started again once space is freed it catches up
//! and every member's HashKV agrees. No acknowledged write is lost.
//! Mounting needs root and the tests need etcdctl: without them they are
//! skipped (under CI=true they fail).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use serde_json::Value;
use skiff_tests::etcdctl::{etcdctl_or_skip, Etcdctl};
use skiff_tests::skiff_process::{free_addrs, store_args, SkiffProcess};
use skiff_tests::store_client;
use skiff_tests::store_cluster::{StoreCluster, READY_TIMEOUT};

const NO_SPACE: &str = "etcdserver: mvcc: database space exceeded";
/// skiff-store's `EXIT_STORAGE_FAILED`.
const EXIT_STORAGE_FAILED: i32 = 74;
/// The line a member logs when it stops for want of space.
const STOPS_FULL: &str = "the file system of the data directory is full. This member stops";
const ROOM_AGAIN: &str = "the data directory's file system has room again";

/// A tmpfs of a few MiB mounted in a directory of its own, unmounted on
/// drop (also when the test fails).
struct Tmpfs {
    mount: PathBuf,
    _dir: tempfile::TempDir,
}

impl Tmpfs {
    /// `None` (skipped) when this process is not root; a failure under CI=true.
    fn mount_or_skip(test: &str, mib: u64) -> Result<Option<Tmpfs>> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            let why = "needs root to mount a tmpfs";
            if std::env::var("CI").is_ok_and(|ci| ci == "true") {
                panic!("{test}: {why}");
            }
            let _ = writeln!(std::io::stderr(), "SKIPPED {test}: {why}");
            return Ok(None);
        }
        let dir = tempfile::tempdir()?;
        let mount = dir.path().join("fs");
        std::fs::create_dir(&mount)?;
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={mib}m"), "tmpfs"])
            .arg(&mount)
            .status()
            .context("running mount")?;
        ensure!(status.success(), "mount -t tmpfs failed: {status}");
        Ok(Some(Tmpfs { mount, _dir: dir }))
    }

    fn path(&self) -> &Path {
        &self.mount
    }

    /// Takes every byte the file system has left, in one fallocate (so
    /// that space the member frees meanwhile is not taken too), and checks
    /// that not one more byte fits unless the member has already given
    /// its reserve back. Returns the filler's path.
    /// The member may write between the look at what is available and
    /// the fallocate, which then fails whole: it is tried again with what
    /// is available then.
    fn fill(&self) -> Result<PathBuf> {
        let path = self.mount.join("filler");
        let mut tries = 0;
        let available = loop {
            let available = available_bytes(&self.mount)?;
            let status = Command::new("fallocate")
                .args(["-l", &available.to_string()])
                .arg(&path)
                .stderr(std::process::Stdio::null())
                .status()
                .context("running fallocate")?;
            if status.success() {
                break available;
            }
            tries += 1;
            ensure!(
                tries < 20,
                "fallocate of {available} bytes failed {tries} times"
            );
            std::thread::sleep(Duration::from_millis(10));
        };
        let one_more = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)?
            .write_all(b"x");
        let reserve_given_back = !self.mount.join("data/reserved-space").exists();
        ensure!(
            one_more.is_err() || reserve_given_back,
            "the file system still had room after taking {available} bytes"
        );
        Ok(path)
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let unmounted = Command::new("umount")
            .arg(&self.mount)
            .status()
            .is_ok_and(|s| s.success());
        if !unmounted {
            // A killed member not yet reaped may still hold it: detach it.
            let _ = Command::new("umount").arg("-l").arg(&self.mount).status();
        }
    }
}

fn available_bytes(path: &Path) -> Result<u64> {
    let out = Command::new("df")
        .args(["-B1", "--output=avail"])
        .arg(path)
        .output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .nth(1)
        .and_then(|line| line.trim().parse().ok())
        .with_context(|| format!("df printed {text}"))
}

fn json(text: &str) -> Result<Value> {
    serde_json::from_str(text).with_context(|| format!("etcdctl printed no JSON: {text}"))
}

fn member_id(etcdctl: &Etcdctl) -> Result<u64> {
    let all = json(&etcdctl.ok(&["endpoint", "status", "-w", "json"])?)?;
    all[0]["Status"]["header"]["member_id"]
        .as_u64()
        .context("no member ID in endpoint status")
}

/// Waits until the process's stderr holds `needle`.
async fn wait_for_log(process: &SkiffProcess, needle: &str, timeout: Duration) -> Result<()> {
    let deadline = Instant::now() + timeout;
    while !process.stderr().contains(needle) {
        if Instant::now() > deadline {
            bail!("{} never logged {needle:?}", process.label());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}

/// The value written under `key`: a few KiB, recognisable.
fn value_for(key: &str, size: usize) -> String {
    let mut value = format!("{key}=");
    while value.len() < size {
        value.push_str("0123456789abcdef");
    }
    value.truncate(size);
    value
}

/// Every acknowledged key reads back from the member at `addr` with its
/// value. Read ten keys at a time (keys that differ in their last digit):
/// all at once would pass a client's 4 MiB message limit.
async fn check_acked(addr: std::net::SocketAddr, acked: &[(String, usize)]) -> Result<()> {
    let mut groups: std::collections::BTreeMap<&str, Vec<&(String, usize)>> = Default::default();
    for entry in acked {
        groups
            .entry(&entry.0[..entry.0.len() - 1])
            .or_default()
            .push(entry);
    }
    for (prefix, entries) in groups {
        let found: std::collections::HashMap<String, Vec<u8>> = store_client::dump(addr, prefix)
            .await?
            .into_iter()
            .map(|(k, _, v)| (k, v))
            .collect();
        for (key, size) in entries {
            let value = found
                .get(key)
                .with_context(|| format!("acknowledged {key} is missing from {addr}"))?;
            ensure!(
                value == value_for(key, *size).as_bytes(),
                "{key} on {addr} holds another value"
            );
        }
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lone_member_on_a_full_disk_refuses_writes_with_nospace_and_recovers_after_disarm(
) -> Result<()> {
    let test = "a_lone_member_on_a_full_disk_refuses_writes_with_nospace_and_recovers_after_disarm";
    let Some(binary) = etcdctl_or_skip(test) else {
        return Ok(());
    };
    let Some(fs) = Tmpfs::mount_or_skip(test, 64)? else {
        return Ok(());
    };
    let data = fs.path().join("data");
    let client = free_addrs(1)?[0];
    let args = store_args("default", &data, client, None);
    let mut store = SkiffProcess::spawn("skiff store on a tmpfs", args.clone())?;
    store.wait_for_line(" ready: ", READY_TIMEOUT).await?;
    let result = lone_member_steps(&fs, &mut store, &args, client, binary).await;
    if result.is_err() {
        eprintln!("--- stderr of {} ---\n{}", store.label(), store.stderr());
    }
    result
}

async fn lone_member_steps(
    fs: &Tmpfs,
    store: &mut SkiffProcess,
    args: &[String],
    client: std::net::SocketAddr,
    binary: PathBuf,
) -> Result<()> {
    let etcdctl = Etcdctl::new(binary, client.to_string());
    let me = member_id(&etcdctl)?;
    ensure!(
        fs.path().join("data/reserved-space").exists(),
        "no reserve file"
    );
    let mut acked = Vec::new();
    for i in 0..40 {
        let key = format!("k/{i:03}");
        etcdctl.ok(&["put", &key, &value_for(&key, 2048)])?;
        acked.push((key, 2048));
    }

    let filler = fs.fill()?;
    let refused = etcdctl.fails(&["put", "k/full", "v"])?;
    ensure!(refused.contains(NO_SPACE), "put on a full disk: {refused}");
    let nospace = format!("memberID:{me} alarm:NOSPACE \n");
    assert_eq!(etcdctl.ok(&["alarm", "list"])?, nospace);
    let lease = etcdctl.fails(&["lease", "grant", "60"])?;
    ensure!(lease.contains(NO_SPACE), "lease grant: {lease}");
    // Reads, linearizable and serializable, go on.
    check_acked(client, &acked).await?;
    let keys = etcdctl.ok(&["get", "k/", "--prefix", "--keys-only", "--consistency=s"])?;
    ensure!(keys.lines().filter(|l| !l.is_empty()).count() == acked.len());
    ensure!(store.try_exit()?.is_none(), "the member stopped");

    // The operator frees space: writes wait for the disarm, as with etcd.
    std::fs::remove_file(filler)?;
    wait_for_log(store, ROOM_AGAIN, Duration::from_secs(20)).await?;
    let early = etcdctl.fails(&["put", "k/early", "v"])?;
    ensure!(early.contains(NO_SPACE), "before disarm: {early}");
    assert_eq!(etcdctl.ok(&["alarm", "disarm"])?, nospace);
    assert_eq!(etcdctl.ok(&["alarm", "list"])?, "");
    for i in 40..60 {
        let key = format!("k/{i:03}");
        assert_eq!(etcdctl.ok(&["put", &key, &value_for(&key, 2048)])?, "OK\n");
        acked.push((key, 2048));
    }
    ensure!(store.try_exit()?.is_none(), "the member stopped");
    ensure!(
        fs.path().join("data/reserved-space").exists(),
        "the reserve was not made again"
    );

    // Nothing acknowledged is lost across a restart either.
    store.signal(libc::SIGTERM)?;
    let status = store.wait_exit(READY_TIMEOUT).await?;
    ensure!(status.success(), "stopping: {status}");
    let mut again = SkiffProcess::spawn("skiff store on a tmpfs, again", args)?;
    again.wait_for_line(" ready: ", READY_TIMEOUT).await?;
    check_acked(client, &acked).await?;
    let hash = etcdctl.ok(&["endpoint", "hashkv"])?;
    ensure!(hash.contains(", "), "hashkv: {hash}");
    Ok(())
}

/// Puts `key` through `addr`, retrying through an election; `None` if it
/// was never acknowledged.
async fn put_retrying(addr: std::net::SocketAddr, key: &str, size: usize) -> Option<i64> {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if let Ok(revision) = store_client::put(addr, key, &value_for(key, size)).await {
            return Some(revision);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_full_member_of_three_stops_while_the_others_take_writes_and_catches_up_after(
) -> Result<()> {
    let test = "one_full_member_of_three_stops_while_the_others_take_writes_and_catches_up_after";
    let Some(binary) = etcdctl_or_skip(test) else {
        return Ok(());
    };
    // Room, once the filler is gone, for the catch-up: the others' 15 MiB
    // of writes in n3's log and again in its database, and its reserve
    // made anew (64 MiB was sometimes too little, and n3 stopped again).
    let Some(fs) = Tmpfs::mount_or_skip(test, 128)? else {
        return Ok(());
    };
    let on_tmpfs = fs.path().join("data");
    std::fs::create_dir(&on_tmpfs)?;
    let mut initial = String::new();
    let mut cluster = StoreCluster::start_prepared(3, |name, data_dir, initial_cluster| {
        initial = initial_cluster.to_string();
        if name == "n3" {
            std::os::unix::fs::symlink(&on_tmpfs, data_dir)?;
        }
        Ok(())
    })
    .await?;
    let result = three_member_steps(&fs, &mut cluster, &initial, binary).await;
    cluster.logs_on_error(result)
}

async fn three_member_steps(
    fs: &Tmpfs,
    cluster: &mut StoreCluster,
    initial_cluster: &str,
    binary: PathBuf,
) -> Result<()> {
    let clients: Vec<_> = cluster.members.iter().map(|m| m.client).collect();
    let mut acked = Vec::new();
    for i in 0..30 {
        let key = format!("k/a{i:03}");
        let revision = put_retrying(clients[i % 3], &key, 2048).await;
        ensure!(revision.is_some(), "put {key} before the disk filled");
        acked.push((key, 2048));
    }

    let filler = fs.fill()?;
    // The full member refuses its own clients' writes (if it is still up).
    match store_client::put(clients[2], "k/full", "v").await {
        Ok(_) => bail!("the full member took a write"),
        Err(err) => {
            let text = format!("{err:#}");
            ensure!(
                text.contains(NO_SPACE) || cluster.members[2].process.try_exit()?.is_some(),
                "put through the full member: {text}"
            );
        }
    }
    // The other two take writes: more than the full member's reserve, so
    // it must stop for want of space.
    let size = 96 << 10;
    for i in 0..160 {
        let key = format!("k/b{i:03}");
        let revision = put_retrying(clients[i % 2], &key, size).await;
        ensure!(revision.is_some(), "the healthy members refused {key}");
        acked.push((key, size));
    }
    let full = &mut cluster.members[2].process;
    let status = full.wait_exit(READY_TIMEOUT).await?;
    ensure!(
        status.code() == Some(EXIT_STORAGE_FAILED),
        "the full member ended with {status}"
    );
    ensure!(full.stderr().contains(STOPS_FULL), "no clear log line");
    let etcdctl = Etcdctl::new(binary.clone(), clients[0].to_string());
    assert_eq!(
        etcdctl.ok(&["alarm", "list"])?,
        "",
        "no alarm for the others"
    );

    // Space freed, the member started again: it catches up.
    std::fs::remove_file(filler)?;
    let member = &cluster.members[2];
    let args = store_args(
        &member.name,
        &member.data_dir,
        member.client,
        Some((member.peer_addr()?, initial_cluster)),
    );
    let again = SkiffProcess::spawn("skiff store n3, again", args)?;
    cluster.members[2].process = again;
    cluster.wait_ready().await?;
    let key = "k/c000";
    let revision = put_retrying(clients[2], key, 2048)
        .await
        .context("the restarted member takes writes")?;
    acked.push((key.to_string(), 2048));
    let all = Etcdctl::new(binary, cluster.endpoints());
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        let printed = all.ok(&[
            "endpoint",
            "hashkv",
            "--rev",
            &revision.to_string(),
            "-w",
            "json",
        ]);
        let why = format!("{printed:?}");
        let hashes: Option<Vec<u64>> = printed.ok().and_then(|p| json(&p).ok()).and_then(|v| {
            v.as_array()?
                .iter()
                .map(|h| h["HashKV"]["hash"].as_u64())
                .collect()
        });
        match hashes {
            Some(h) if h.len() == 3 && h.iter().all(|&x| x == h[0]) => break,
            other if Instant::now() > deadline => {
                bail!("HashKV never agreed at revision {revision}: {other:?} from {why}")
            }
            _ => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
    for client in clients {
        check_acked(client, &acked).await?;
    }
    Ok(())
}

/// With the guard off (`--reserved-space-bytes 0`) the log and the state
/// database are the first to find the disk full: the member ends with exit
/// status 74, having acknowledged nothing it could not make durable, and
/// once the file system has room again a restart finds every acknowledged
/// write. Run many times by hand (`SKIFF_FULL_DISK_ROUNDS`), since where the
/// disk runs out (the log's append, its fsync, the database's write, its
/// flush) differs from run to run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_reserve_a_member_stops_on_a_full_disk_and_a_restart_finds_every_acknowledged_write(
) -> Result<()> {
    let test = "without_the_reserve_a_member_stops_on_a_full_disk_and_a_restart_finds_every_acknowledged_write";
    let rounds: usize = std::env::var("SKIFF_FULL_DISK_ROUNDS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1);
    for round in 0..rounds {
        let Some(fs) = Tmpfs::mount_or_skip(test, 16)? else {
            return Ok(());
        };
        full_without_reserve(&fs)
            .await
            .with_context(|| format!("round {round}"))?;
    }
    Ok(())
}

async fn full_without_reserve(fs: &Tmpfs) -> Result<()> {
    const SIZE: usize = 32 << 10;
    let data = fs.path().join("data");
    let client = free_addrs(1)?[0];
    let mut args = store_args("default", &data, client, None);
    args.extend(["--reserved-space-bytes".into(), "0".into()]);
    let mut store = SkiffProcess::spawn("skiff store without a reserve", args.clone())?;
    store.wait_for_line(" ready: ", READY_TIMEOUT).await?;
    ensure!(
        !data.join("reserved-space").exists(),
        "a reserve file with the guard off"
    );
    let mut acked = Vec::new();
    let failure = loop {
        let key = format!("k/{:04}", acked.len());
        match store_client::put(client, &key, &value_for(&key, SIZE)).await {
            Ok(_) => acked.push((key, SIZE)),
            Err(err) => break err,
        }
        ensure!(acked.len() < 2000, "a 16 MiB file system never filled");
    };
    let status = store.wait_exit(Duration::from_secs(30)).await;
    let status = match status {
        Ok(status) => status,
        Err(err) => {
            eprintln!("--- stderr ---\n{}", store.stderr());
            return Err(err.context(format!("after the put that failed ({failure:#})")));
        }
    };
    ensure!(
        status.code() == Some(EXIT_STORAGE_FAILED),
        "exit {status} after {failure:#}; stderr:\n{}",
        store.stderr()
    );
    ensure!(
        store.stderr().contains(STOPS_FULL),
        "no word of the full disk:\n{}",
        store.stderr()
    );

    // Room again: the same tmpfs, made bigger.
    let grown = Command::new("mount")
        .args(["-o", "remount,size=64m"])
        .arg(fs.path())
        .status()?;
    ensure!(grown.success(), "remounting the tmpfs bigger: {grown}");
    let mut again = SkiffProcess::spawn("skiff store without a reserve, again", args)?;
    again.wait_for_line(" ready: ", READY_TIMEOUT).await?;
    let checked = check_acked(client, &acked).await;
    if let Err(err) = checked {
        eprintln!("--- stderr, first run ---\n{}", store.stderr());
        eprintln!("--- stderr, again ---\n{}", again.stderr());
        return Err(err.context(format!(
            "{} acknowledged before the put that failed ({failure:#})",
            acked.len()
        )));
    }
    store_client::put(client, "k/after", "v").await?;
    again.signal(libc::SIGTERM)?;
    ensure!(again.wait_exit(READY_TIMEOUT).await?.success());
    Ok(())
}
