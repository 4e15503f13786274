//! Crash points (docs/failpoints.md), process by process: a `skiff store`
//! started with `FAILPOINTS` dies at the point while a client writes, is
//! started again without it, and must hold every write it acknowledged and
//! answer. Only with `--features failpoints`:
//! `cargo test -p skiff --features failpoints --test failpoints`.
#![cfg(feature = "failpoints")]

use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::net::{SocketAddr, TcpListener};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use skiff_store::grpc::pb::etcdserverpb::kv_client::KvClient;
use skiff_store::grpc::pb::etcdserverpb::maintenance_client::MaintenanceClient;
use skiff_store::grpc::pb::etcdserverpb::{
    CompactionRequest, DefragmentRequest, PutRequest, RangeRequest, StatusRequest,
};
use tonic::transport::{Channel, Endpoint};

/// Opening a store (and, in a cluster, electing a leader) on a loaded
/// 2-core machine.
const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a member may take to reach its crash point once written to.
const CRASH_TIMEOUT: Duration = Duration::from_secs(60);
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// A `skiff store` process and what it takes to start it again.
struct Member {
    name: String,
    data_dir: PathBuf,
    pki_dir: PathBuf,
    /// The TLS client port (required; the tests use the plain one).
    client: SocketAddr,
    plain: SocketAddr,
    /// `--peer-listen` and `--initial-cluster`, in a cluster.
    peer: Option<(SocketAddr, String)>,
    extra: Vec<String>,
    /// stderr of every run, appended.
    log: PathBuf,
    child: Option<Child>,
}

impl Member {
    fn alone(dir: &Path) -> Result<Member> {
        let [client, plain] = free_addrs::<2>()?;
        Ok(Member {
            name: "default".into(),
            data_dir: dir.join("data"),
            pki_dir: dir.join("pki"),
            client,
            plain,
            peer: None,
            extra: Vec::new(),
            log: dir.join("default.log"),
            child: None,
        })
    }

    fn start(&mut self, failpoints: Option<&str>) -> Result<()> {
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)?;
        let mut command = Command::new(env!("CARGO_BIN_EXE_skiff"));
        command
            .args(["store", "--name", &self.name, "--data-dir"])
            .arg(&self.data_dir)
            .arg("--pki-dir")
            .arg(&self.pki_dir)
            .args(["--client-listen", &self.client.to_string()])
            .args(["--insecure-client-listen", &self.plain.to_string()])
            .args(&self.extra)
            .env("RUST_LOG", "info,raft=warn")
            .env_remove("FAILPOINTS")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(log));
        if let Some((peer, initial_cluster)) = &self.peer {
            command
                .args(["--peer-listen", &peer.to_string()])
                .args(["--initial-cluster", initial_cluster]);
        }
        if let Some(failpoints) = failpoints {
            command.env("FAILPOINTS", failpoints);
        }
        self.child = Some(command.spawn().context("starting skiff store")?);
        Ok(())
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    async fn channel(&self) -> Result<Channel> {
        Ok(Endpoint::from_shared(format!("http://{}", self.plain))?
            .connect_timeout(Duration::from_secs(2))
            .timeout(REQUEST_TIMEOUT)
            .connect()
            .await?)
    }

    /// Waits until the member answers Status and knows a leader.
    async fn wait_serving(&mut self) -> Result<()> {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                bail!(
                    "{} exited with {status} before serving; its log:\n{}",
                    self.name,
                    self.log_text()
                );
            }
            if let Ok(channel) = self.channel().await {
                let status = MaintenanceClient::new(channel)
                    .status(StatusRequest {})
                    .await;
                if status.is_ok_and(|s| s.into_inner().leader != 0) {
                    return Ok(());
                }
            }
            ensure!(
                Instant::now() < deadline,
                "{} did not serve within {READY_TIMEOUT:?}; its log:\n{}",
                self.name,
                self.log_text()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits for the process to die at `point`: by SIGABRT, after saying so.
    async fn wait_crash(&mut self, point: &str) -> Result<()> {
        let deadline = Instant::now() + CRASH_TIMEOUT;
        let child = self.child.as_mut().context("the member is not running")?;
        let status = loop {
            if let Some(status) = child.try_wait()? {
                break status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                bail!(
                    "{} did not crash at {point} within {CRASH_TIMEOUT:?}; its log:\n{}",
                    self.name,
                    self.log_text()
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        self.child = None;
        let log = self.log_text();
        ensure!(
            status.signal() == Some(libc::SIGABRT),
            "{} ended with {status}, not SIGABRT at {point}; its log:\n{log}",
            self.name
        );
        let line = format!("skiff: crashing at failpoint {point} ");
        ensure!(
            log.contains(&line),
            "{} died without naming {point}; its log:\n{log}",
            self.name
        );
        Ok(())
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        self.kill();
    }
}

/// `N` loopback addresses free a moment ago.
fn free_addrs<const N: usize>() -> Result<[SocketAddr; N]> {
    let listeners: Vec<TcpListener> = (0..N)
        .map(|_| TcpListener::bind("127.0.0.1:0"))
        .collect::<std::io::Result<_>>()?;
    let addrs: Vec<SocketAddr> = listeners
        .iter()
        .map(TcpListener::local_addr)
        .collect::<std::io::Result<_>>()?;
    Ok(addrs.try_into().expect("N addresses"))
}

/// Every put acknowledged, key to value.
type Acked = BTreeMap<Vec<u8>, Vec<u8>>;

/// Puts under `prefix` from `writers` concurrent clients until puts fail
/// (the member died) or `limit` passed; returns every acknowledged put.
async fn write_until_down(
    member: &Member,
    prefix: &str,
    writers: usize,
    value_size: usize,
    limit: Duration,
) -> Result<Acked> {
    let channel = member.channel().await?;
    let deadline = Instant::now() + limit;
    let mut tasks = Vec::new();
    for writer in 0..writers {
        let mut client = KvClient::new(channel.clone());
        let prefix = format!("{prefix}{writer}/");
        tasks.push(tokio::spawn(async move {
            let mut acked = Vec::new();
            for n in 0u64.. {
                if Instant::now() > deadline {
                    break;
                }
                let key = format!("{prefix}{n:08}").into_bytes();
                let mut value = format!("{n}:").into_bytes();
                value.resize(value_size.max(value.len()), b'v');
                let put = client.put(PutRequest {
                    key: key.clone(),
                    value: value.clone(),
                    ..Default::default()
                });
                match put.await {
                    Ok(_) => acked.push((key, value)),
                    Err(_) => break,
                }
            }
            acked
        }));
    }
    let mut acked = Acked::new();
    for task in tasks {
        acked.extend(task.await?);
    }
    Ok(acked)
}

/// Every key under `prefix` and its value, as the member reads them
/// (`serializable`: from its own state, without asking the leader).
async fn read_prefix(member: &Member, prefix: &str, serializable: bool) -> Result<Acked> {
    let mut end = prefix.as_bytes().to_vec();
    *end.last_mut().context("empty prefix")? += 1;
    let mut client = KvClient::new(member.channel().await?);
    let mut found = Acked::new();
    let mut from = prefix.as_bytes().to_vec();
    // In pages: thousands of kilobyte values pass the client's 4 MiB limit.
    loop {
        let response = client
            .range(RangeRequest {
                key: from,
                range_end: end.clone(),
                serializable,
                limit: 1000,
                ..Default::default()
            })
            .await?
            .into_inner();
        let last = response.kvs.last().map(|kv| kv.key.clone());
        found.extend(response.kvs.into_iter().map(|kv| (kv.key, kv.value)));
        match last {
            Some(mut key) if response.more => {
                key.push(0);
                from = key;
            }
            _ => return Ok(found),
        }
    }
}

/// Every acknowledged put must read back, with its value.
async fn check_acked(
    member: &Member,
    prefix: &str,
    acked: &Acked,
    serializable: bool,
) -> Result<()> {
    let found = read_prefix(member, prefix, serializable).await?;
    let missing: Vec<String> = acked
        .iter()
        .filter(|(key, value)| found.get(*key) != Some(value))
        .map(|(key, _)| String::from_utf8_lossy(key).into_owned())
        .collect();
    ensure!(
        missing.is_empty(),
        "{} of {} acknowledged puts are missing or changed after the restart (first: {:?}); log:\n{}",
        missing.len(),
        acked.len(),
        missing.first(),
        member.log_text()
    );
    Ok(())
}

async fn put(member: &Member, key: &str, value: &str) -> Result<i64> {
    let response = KvClient::new(member.channel().await?)
        .put(PutRequest {
            key: key.into(),
            value: value.into(),
            ..Default::default()
        })
        .await?
        .into_inner();
    Ok(response.header.map_or(0, |h| h.revision))
}

/// Starts a member alone with `failpoints`, writes until it dies at
/// `point`, restarts it without, and checks every acknowledged put and a
/// new one.
async fn crash_while_writing(point: &str, failpoints: &str, value_size: usize) -> Result<()> {
    let dir = tempfile::tempdir()?;
    let mut member = Member::alone(dir.path())?;
    member.start(Some(failpoints))?;
    member.wait_serving().await?;
    let acked = write_until_down(&member, "/fp/", 4, value_size, CRASH_TIMEOUT).await?;
    member.wait_crash(point).await?;
    ensure!(
        !acked.is_empty(),
        "no put was acknowledged before the crash at {point}: nothing was tested"
    );
    member.start(None)?;
    member.wait_serving().await?;
    check_acked(&member, "/fp/", &acked, false).await?;
    put(&member, "/after/restart", "1").await?;
    eprintln!(
        "{point}: {} acknowledged puts survived the crash",
        acked.len()
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_before_the_wal_fsync() -> Result<()> {
    crash_while_writing("wal::before_fsync", "wal::before_fsync=40*off->return", 100).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_after_the_wal_fsync() -> Result<()> {
    crash_while_writing("wal::after_fsync", "wal::after_fsync=40*off->return", 100).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_before_raft_persists_a_ready() -> Result<()> {
    crash_while_writing(
        "raft::before_persist",
        "raft::before_persist=40*off->return",
        100,
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_after_raft_persists_a_ready() -> Result<()> {
    crash_while_writing(
        "raft::after_persist",
        "raft::after_persist=40*off->return",
        100,
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_between_apply_and_answer() -> Result<()> {
    crash_while_writing(
        "apply::before_answer",
        "apply::before_answer=40*off->return",
        100,
    )
    .await
}

/// A power cut: the log loses every byte written since its last fsync,
/// and the state database goes back to its last fsync (a copy taken then).
/// Several rounds on one data directory, long enough for the state to be
/// flushed, the log to roll and release segments, and some to tear the
/// last record instead of dropping it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn power_cut_loses_only_unsynced_writes() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let mut member = Member::alone(dir.path())?;
    let mut acked = Acked::new();
    let rounds = [
        "wal::lose_unsynced=1500*off->return",
        "wal::lose_unsynced=900*off->return(torn)",
        "wal::lose_unsynced=2500*off->return",
    ];
    for (round, failpoints) in rounds.into_iter().enumerate() {
        let before = member.log_text().len();
        member.start(Some(failpoints))?;
        member.wait_serving().await?;
        let prefix = format!("/power/{round}/");
        let written = write_until_down(&member, &prefix, 2, 1024, CRASH_TIMEOUT).await?;
        member.wait_crash("wal::lose_unsynced").await?;
        let log = member.log_text().split_off(before);
        ensure!(
            log.contains("wal::lose_unsynced dropped"),
            "round {round}: the log was not cut back; log:\n{log}"
        );
        let state_restored = log.contains("back as of its last fsync");
        ensure!(!written.is_empty(), "round {round}: nothing acknowledged");
        acked.extend(written);

        member.start(None)?;
        member.wait_serving().await?;
        check_acked(&member, "/power/", &acked, false).await?;
        // Idle, the member makes its state durable (every second) and then
        // rolls and releases the log it no longer needs: the next round
        // starts from a log whose oldest segments are gone.
        // (A write first: a member flushes only what it applied since it
        // started.)
        put(&member, &format!("/power/idle/{round}"), "idle").await?;
        let released = Instant::now() + Duration::from_secs(10);
        while !member.log_text()[before..].contains("released write-ahead log segment")
            && Instant::now() < released
        {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        member.kill();
        eprintln!(
            "round {round}: {} acknowledged puts in all survived; state database put back: {state_restored}",
            acked.len()
        );
    }
    let log = member.log_text();
    ensure!(
        log.contains("back as of its last fsync"),
        "no round put the state database back to its last fsync: the rounds were too short"
    );
    ensure!(
        log.contains("released write-ahead log segment"),
        "no log segment was released: the rounds were too short"
    );
    Ok(())
}

/// Compaction of 3 000 records dies after its first batch; the next start
/// resumes it, and the history below it stays compacted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_in_the_middle_of_a_compaction() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let mut member = Member::alone(dir.path())?;
    member.start(Some("compaction::mid=return"))?;
    member.wait_serving().await?;
    let mut acked = Acked::new();
    let mut revision = 0;
    for n in 0..3000 {
        let key = format!("/compact/{:02}", n % 20);
        revision = put(&member, &key, &n.to_string()).await?;
        acked.insert(key.into_bytes(), n.to_string().into_bytes());
    }
    let compact = KvClient::new(member.channel().await?)
        .compact(CompactionRequest {
            revision,
            physical: true,
        })
        .await;
    ensure!(compact.is_err(), "the compaction finished: {compact:?}");
    member.wait_crash("compaction::mid").await?;

    member.start(None)?;
    member.wait_serving().await?;
    check_acked(&member, "/compact/", &acked, false).await?;
    let old = KvClient::new(member.channel().await?)
        .range(RangeRequest {
            key: b"/compact/00".to_vec(),
            revision: 1,
            ..Default::default()
        })
        .await;
    ensure!(
        old.as_ref()
            .is_err_and(|s| s.message().contains("compacted")),
        "a read below the compacted revision answered {old:?}"
    );
    let deadline = Instant::now() + READY_TIMEOUT;
    while !member.log_text().contains("compaction finished") {
        ensure!(
            Instant::now() < deadline,
            "the interrupted compaction did not finish after the restart; log:\n{}",
            member.log_text()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    put(&member, "/after/restart", "1").await?;
    Ok(())
}

/// Defrag dies with its copy half made, or once it is switched to on disk;
/// either way the next start has one state database holding everything.
async fn crash_in_defrag(point: &str, moved: bool) -> Result<()> {
    let dir = tempfile::tempdir()?;
    let mut member = Member::alone(dir.path())?;
    member.start(Some(&format!("{point}=return")))?;
    member.wait_serving().await?;
    let acked = write_until_down(&member, "/defrag/", 4, 200, Duration::from_secs(2)).await?;
    ensure!(!acked.is_empty(), "nothing acknowledged before the defrag");
    let defrag = MaintenanceClient::new(member.channel().await?)
        .defragment(DefragmentRequest {})
        .await;
    ensure!(defrag.is_err(), "the defrag finished: {defrag:?}");
    member.wait_crash(point).await?;

    member.start(None)?;
    member.wait_serving().await?;
    check_acked(&member, "/defrag/", &acked, false).await?;
    let log = member.log_text();
    ensure!(
        log.contains("the defragmented state database is in place") == moved,
        "after a crash at {point} the copy should {}have been moved into place; log:\n{log}",
        if moved { "" } else { "not " }
    );
    let mut databases: Vec<String> = std::fs::read_dir(&member.data_dir)?
        .filter_map(|entry| entry.ok())
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with("db"))
        .collect();
    databases.sort();
    ensure!(databases == ["db"], "state databases left: {databases:?}");
    put(&member, "/after/restart", "1").await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_while_defrag_copies() -> Result<()> {
    crash_in_defrag("defrag::mid", false).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_once_defrag_switched_on_disk() -> Result<()> {
    crash_in_defrag("defrag::switched", true).await
}

/// Three members `n1`..`n3` in `dir`, sharing one CA, each with `extra`.
fn cluster(dir: &Path, extra: &[&str]) -> Result<Vec<Member>> {
    let addrs = free_addrs::<9>()?;
    let initial_cluster = (0..3)
        .map(|i| format!("n{}={}", i + 1, addrs[6 + i]))
        .collect::<Vec<_>>()
        .join(",");
    Ok((0..3)
        .map(|i| {
            let name = format!("n{}", i + 1);
            Member {
                data_dir: dir.join(&name),
                pki_dir: dir.join("pki"),
                client: addrs[i],
                plain: addrs[3 + i],
                peer: Some((addrs[6 + i], initial_cluster.clone())),
                extra: extra.iter().map(|s| s.to_string()).collect(),
                log: dir.join(format!("{name}.log")),
                child: None,
                name,
            }
        })
        .collect())
}

async fn start_cluster(members: &mut [Member], failpoints: [Option<&str>; 3]) -> Result<()> {
    for (member, failpoints) in members.iter_mut().zip(failpoints) {
        member.start(failpoints)?;
    }
    for member in members.iter_mut() {
        member.wait_serving().await?;
    }
    Ok(())
}

/// A follower that fell behind past the leader's log gets a snapshot and
/// dies installing it, its old state cleared and the new one not in; the
/// next start finishes the install from the snapshot it kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_while_installing_a_snapshot() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let mut members = cluster(dir.path(), &["--snapshot-catch-up-entries", "5"])?;
    start_cluster(&mut members, [None; 3]).await?;
    let mut acked =
        write_until_down(&members[0], "/snap/a/", 2, 100, Duration::from_secs(1)).await?;

    // A follower: with the leader killed, the writes wait out an election
    // and may be too few for the new leader to compact its log past it.
    let victim = if members[2].log_text().contains("became leader") {
        1
    } else {
        2
    };
    members[victim].kill();
    // Enough for the leader to flush its state, compact its log past n3
    // and keep a few entries only.
    acked.extend(write_until_down(&members[0], "/snap/b/", 2, 100, Duration::from_secs(3)).await?);
    tokio::time::sleep(Duration::from_millis(2500)).await;
    members[victim].start(Some("snapshot::install=return"))?;
    members[victim].wait_crash("snapshot::install").await?;

    members[victim].start(None)?;
    members[victim].wait_serving().await?;
    let log = members[victim].log_text();
    ensure!(
        log.contains("finished installing a snapshot interrupted by a stop"),
        "n{} did not finish the interrupted install at its start; log:\n{log}",
        victim + 1
    );
    // A write after the restart reaches n3 too: then it holds all before.
    put(&members[0], "/snap/c", "after").await?;
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        let found = read_prefix(&members[victim], "/snap/c", true).await?;
        if !found.is_empty() {
            break;
        }
        ensure!(
            Instant::now() < deadline,
            "n{} did not catch up after the restart",
            victim + 1
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    check_acked(&members[victim], "/snap/", &acked, true).await
}

/// A member dies as it sends to a peer; the cluster goes on, and the
/// member catches up after its restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_while_sending_to_a_peer() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let mut members = cluster(dir.path(), &[])?;
    start_cluster(
        &mut members,
        [None, Some("peer::send=200*off->return"), None],
    )
    .await?;
    let acked = write_until_down(&members[0], "/peer/", 2, 100, Duration::from_secs(10)).await?;
    members[1].wait_crash("peer::send").await?;
    members[1].start(None)?;
    members[1].wait_serving().await?;
    put(&members[0], "/peer/last", "after").await?;
    let deadline = Instant::now() + READY_TIMEOUT;
    while read_prefix(&members[1], "/peer/last", true)
        .await?
        .is_empty()
    {
        ensure!(
            Instant::now() < deadline,
            "n2 did not catch up after the restart"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    check_acked(&members[1], "/peer/", &acked, true).await
}

/// A name that is no crash point is refused at start, not ignored.
#[test]
fn an_unknown_failpoint_is_refused() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let output = Command::new(env!("CARGO_BIN_EXE_skiff"))
        .args(["store", "--data-dir"])
        .arg(dir.path().join("data"))
        .args(["--client-listen", "127.0.0.1:0"])
        .env("FAILPOINTS", "wal::befor_fsync=return")
        .stdin(Stdio::null())
        .output()?;
    let stderr = String::from_utf8_lossy(&output.stderr);
    ensure!(
        output.status.code() == Some(1),
        "{:?}: {stderr}",
        output.status
    );
    ensure!(
        stderr.contains("\"wal::befor_fsync\", which is no failpoint"),
        "{stderr}"
    );
    Ok(())
}
