//! The `skiff` command line as a user runs it: `skiff store` alone (serves,
//! stops cleanly on SIGTERM and SIGINT, keeps its data across a restart),
//! its refusals (bad flags, a name outside --initial-cluster, another
//! cluster's data directory, a taken port, a data directory in use), and
//! `skiff cluster up --members 3` (cluster.json, writes through every
//! member read from every other, Ctrl-C stops them all, a restart reuses
//! the data).

use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use serde_json::Value;
use skiff_tests::skiff_process::{free_addrs, pid_exists, store_args, SkiffProcess};
use skiff_tests::store_client;
use skiff_tests::store_cluster::StoreCluster;

/// Opening a store, or a cluster electing its leader, on a loaded 2-core machine.
const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// A clean stop: drain clients, close the store (flush sled).
const STOP_TIMEOUT: Duration = Duration::from_secs(30);
/// A command that fails at once.
const FAIL_TIMEOUT: Duration = Duration::from_secs(30);
const SIGINT: i32 = libc::SIGINT;
const SIGTERM: i32 = libc::SIGTERM;

async fn start_store(args: Vec<String>) -> Result<SkiffProcess> {
    let mut process = SkiffProcess::spawn("skiff store", args)?;
    process.wait_for_line(" ready: ", READY_TIMEOUT).await?;
    Ok(process)
}

async fn stop(process: &mut SkiffProcess, signal: i32) -> Result<ExitStatus> {
    process.signal(signal)?;
    process.wait_exit(STOP_TIMEOUT).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lone_store_serves_stops_cleanly_and_keeps_its_data() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let data_dir = dir.path().join("data");
    let client = free_addrs(1)?[0];
    let mut store = start_store(store_args("solo", &data_dir, client, None)).await?;
    let ready = store.wait_for_line(" ready: ", READY_TIMEOUT).await?;
    ensure!(
        ready.starts_with(&format!(
            "skiff store solo ready: client {client}, alone (no peers), member id "
        )),
        "ready line: {ready}"
    );

    let first = store_client::put(client, "/cli/a", "1").await?;
    let second = store_client::put(client, "/cli/b", "2").await?;
    assert_eq!(second, first + 1, "each put takes the next revision");
    assert_eq!(
        store_client::get_value(client, "/cli/a").await?.as_deref(),
        Some("1")
    );

    let status = stop(&mut store, SIGTERM).await?;
    assert_eq!(
        status.code(),
        Some(0),
        "SIGTERM: {status}; stderr:\n{}",
        store.stderr()
    );
    ensure!(
        !store.stderr().contains("panicked"),
        "stderr:\n{}",
        store.stderr()
    );

    // The same data directory behind another port: the data is still there.
    let client = free_addrs(1)?[0];
    let mut store = start_store(store_args("solo", &data_dir, client, None)).await?;
    let read = store_client::get(client, "/cli/b").await?;
    assert_eq!(read.kvs.len(), 1);
    assert_eq!(read.kvs[0].value, b"2");
    assert_eq!(read.kvs[0].mod_revision, second);
    assert_eq!(read.header.map(|h| h.revision), Some(second));
    let third = store_client::put(client, "/cli/c", "3").await?;
    assert_eq!(third, second + 1, "revisions go on after a restart");

    let status = stop(&mut store, SIGINT).await?;
    assert_eq!(
        status.code(),
        Some(0),
        "SIGINT: {status}; stderr:\n{}",
        store.stderr()
    );
    Ok(())
}

/// Runs `skiff ARGS`, which must exit with 1 and say `needle` on one stderr line.
async fn refused(args: &[&str], needle: &str) -> Result<()> {
    let (status, _stdout, stderr) = SkiffProcess::run(args, FAIL_TIMEOUT).await?;
    ensure!(
        status.code() == Some(1),
        "skiff {} exited with {status}, not 1; stderr:\n{stderr}",
        args.join(" ")
    );
    ensure!(
        !stderr.contains("panicked") && !stderr.contains("backtrace"),
        "skiff {} panicked:\n{stderr}",
        args.join(" ")
    );
    let lines: Vec<&str> = stderr.lines().filter(|l| l.contains(needle)).collect();
    ensure!(
        lines.len() == 1,
        "skiff {}: expected one stderr line saying {needle:?}, got:\n{stderr}",
        args.join(" ")
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_invocations_exit_1_with_a_clear_line() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let data = dir.path().join("data");
    let data = data.to_str().context("temp path")?;
    let [client, peer, other_peer]: [SocketAddr; 3] = free_addrs(3)?
        .try_into()
        .map_err(|_| anyhow::anyhow!("three addresses"))?;
    let (client, peer, other_peer) = (client.to_string(), peer.to_string(), other_peer.to_string());

    refused(
        &["store", "--no-such-flag"],
        "unexpected argument '--no-such-flag'",
    )
    .await?;
    refused(
        &["store", "--initial-cluster-state", "maybe"],
        "\"new\" or \"existing\"",
    )
    .await?;
    refused(
        &["store", "--initial-cluster", "n1"],
        "is not name=host:port",
    )
    .await?;
    let two_members = format!("n1={peer},n2={other_peer}");
    refused(
        &[
            "store",
            "--name",
            "n4",
            "--data-dir",
            data,
            "--client-listen",
            &client,
            "--initial-cluster",
            &two_members,
        ],
        "member name \"n4\" is not in --initial-cluster (n1, n2)",
    )
    .await?;
    ensure!(
        !Path::new(data).exists(),
        "a refused member must not create its data directory"
    );

    // A data directory made for a one-member cluster of n1 ...
    let alone = format!("n1={peer}");
    let mut member = start_store(
        [
            "store",
            "--name",
            "n1",
            "--data-dir",
            data,
            "--client-listen",
            &client,
            "--initial-cluster",
            &alone,
        ]
        .map(String::from)
        .to_vec(),
    )
    .await?;
    // ... in use: a second process is refused.
    let second_client = free_addrs(1)?[0].to_string();
    refused(
        &[
            "store",
            "--name",
            "n1",
            "--data-dir",
            data,
            "--client-listen",
            &second_client,
            "--initial-cluster",
            &alone,
        ],
        "is in use by another process",
    )
    .await?;
    // ... and its client port is taken.
    refused(
        &[
            "store",
            "--data-dir",
            dir.path().join("other").to_str().context("path")?,
            "--client-listen",
            &client,
        ],
        &format!("cannot listen for clients on {client}"),
    )
    .await?;
    assert_eq!(stop(&mut member, SIGTERM).await?.code(), Some(0));
    // ... is not a member of another cluster.
    refused(
        &[
            "store",
            "--name",
            "n1",
            "--data-dir",
            data,
            "--client-listen",
            &client,
            "--initial-cluster",
            &two_members,
        ],
        "belongs to another cluster or member",
    )
    .await?;

    // A peer port taken by someone else.
    let taken = TcpListener::bind("127.0.0.1:0")?;
    let taken_addr = taken.local_addr()?.to_string();
    let with_taken_peer = format!("n1={taken_addr}");
    refused(
        &[
            "store",
            "--name",
            "n1",
            "--data-dir",
            dir.path().join("peerless").to_str().context("path")?,
            "--client-listen",
            &client,
            "--initial-cluster",
            &with_taken_peer,
        ],
        "listening for peers",
    )
    .await?;
    Ok(())
}

/// A running `skiff cluster up`; on drop it and every member it recorded are SIGKILLed.
struct ClusterUp {
    process: SkiffProcess,
    dir: std::path::PathBuf,
}

impl ClusterUp {
    fn start(dir: &Path) -> Result<ClusterUp> {
        let args = [
            "cluster",
            "up",
            "--members",
            "3",
            "--free-ports",
            "--data-dir",
        ];
        let process = SkiffProcess::spawn(
            "skiff cluster up",
            args.iter()
                .map(|a| a.to_string())
                .chain([dir.display().to_string()]),
        )?;
        Ok(ClusterUp {
            process,
            dir: dir.to_path_buf(),
        })
    }

    fn manifest(&self) -> Result<Option<Value>> {
        match std::fs::read_to_string(self.dir.join("cluster.json")) {
            Ok(text) => Ok(Some(serde_json::from_str(&text)?)),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(err) => Err(err.into()),
        }
    }

    /// Waits until cluster.json says every member is ready; returns it.
    async fn wait_ready(&mut self) -> Result<Value> {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if let Some(manifest) = self.manifest()? {
                if manifest["ready"] == Value::Bool(true) {
                    return Ok(manifest);
                }
            }
            if let Some(status) = self.process.try_exit()? {
                bail!(
                    "cluster up exited ({status}) before it was ready; stderr:\n{}",
                    self.process.stderr()
                );
            }
            if Instant::now() >= deadline {
                bail!(
                    "cluster up was not ready within {READY_TIMEOUT:?}; stdout:\n{}",
                    self.process.stdout()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for ClusterUp {
    fn drop(&mut self) {
        if !matches!(self.process.try_exit(), Ok(None)) {
            return;
        }
        let _ = self.process.signal(libc::SIGKILL);
        let pids = self
            .manifest()
            .ok()
            .flatten()
            .map(|m| member_pids(&m))
            .unwrap_or_default();
        for pid in pids {
            // SAFETY: kill touches no memory; these are the members of this test's cluster.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
        }
    }
}

fn member_pids(manifest: &Value) -> Vec<u32> {
    manifest["members"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m["pid"].as_u64())
        .map(|pid| pid as u32)
        .collect()
}

/// (name, client address) of each member in cluster.json, checked field by field.
fn check_manifest(manifest: &Value, dir: &Path) -> Result<Vec<(String, SocketAddr)>> {
    let members = manifest["members"]
        .as_array()
        .context("cluster.json has no members")?;
    assert_eq!(members.len(), 3, "{manifest:#}");
    let mut clients = Vec::new();
    for (i, member) in members.iter().enumerate() {
        let name = format!("n{}", i + 1);
        assert_eq!(member["name"], Value::from(name.as_str()), "{manifest:#}");
        assert!(
            member["pid"].as_u64().is_some_and(|pid| pid > 0),
            "{manifest:#}"
        );
        let api: SocketAddr = member["api"].as_str().context("api")?.parse()?;
        assert!(api.ip().is_loopback(), "{manifest:#}");
        if i == 0 {
            // The cluster's kubeconfig points at the first member's API.
            let kubeconfig = std::fs::read_to_string(dir.join("kubeconfig"))?;
            assert!(
                kubeconfig.contains(&format!("server: https://{api}")),
                "{kubeconfig}"
            );
        }
        assert_eq!(
            member["data_dir"],
            Value::from(dir.join(&name).display().to_string())
        );
        let client: SocketAddr = member["client"].as_str().context("client")?.parse()?;
        let peer: SocketAddr = member["peer"].as_str().context("peer")?.parse()?;
        assert!(client.ip().is_loopback() && peer.ip().is_loopback());
        clients.push((name, client));
    }
    let endpoints: Vec<String> = clients.iter().map(|(_, c)| c.to_string()).collect();
    assert_eq!(manifest["endpoints"], Value::from(endpoints.join(",")));
    Ok(clients)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_up_runs_three_members_and_stops_them_on_ctrl_c() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let cluster_dir = dir.path().join("cluster");
    let mut cluster = ClusterUp::start(&cluster_dir)?;
    let manifest = cluster.wait_ready().await?;
    let members = check_manifest(&manifest, &cluster_dir)?;
    let stdout = cluster
        .process
        .wait_for_line("etcdctl --endpoints", READY_TIMEOUT)
        .await?;
    let endpoints = manifest["endpoints"].as_str().context("endpoints")?;
    let [ca, cert, key] = skiff_tests::test_pki::store_files();
    assert_eq!(
        stdout.trim(),
        format!(
            "etcdctl --endpoints {endpoints} --cacert {} --cert {} --key {} member list",
            ca.display(),
            cert.display(),
            key.display()
        )
    );

    // A put through each member is read back, at its revision, from every member.
    let mut revisions = Vec::new();
    for (name, client) in &members {
        let revision =
            store_client::put(*client, &format!("/up/{name}"), &format!("from {name}")).await?;
        revisions.push(revision);
    }
    // In order (each member's API writes its default objects meanwhile,
    // so the revisions need not be consecutive).
    assert!(
        revisions[0] < revisions[1] && revisions[1] < revisions[2],
        "{revisions:?}"
    );
    for (_, client) in &members {
        for ((name, _), revision) in members.iter().zip(&revisions) {
            let read = store_client::get(*client, &format!("/up/{name}")).await?;
            assert_eq!(read.kvs.len(), 1, "{name}'s key read through {client}");
            assert_eq!(read.kvs[0].value, format!("from {name}").into_bytes());
            assert_eq!(read.kvs[0].mod_revision, *revision);
        }
    }

    // A follower killed behind cluster up's back is reported; the others run
    // on. (A killed leader would hold writes up for an election.)
    let pids = member_pids(&manifest);
    assert_eq!(pids.len(), 3);
    ensure!(
        !cluster.process.stderr().contains("unexpectedly"),
        "a member died by itself:\n{}",
        cluster.process.stderr()
    );
    let leader = store_client::status(members[0].1).await?.leader;
    let mut victim = None;
    for (index, (_, client)) in members.iter().enumerate() {
        let status = store_client::status(*client).await?;
        if status.header.map(|h| h.member_id) != Some(leader) {
            victim = Some(index);
        }
    }
    let victim = victim.context("no follower")?;
    let survivor = members[(victim + 1) % 3].1;
    // SAFETY: kill touches no memory; the pid is a member of this test's cluster.
    unsafe { libc::kill(pids[victim] as libc::pid_t, libc::SIGKILL) };
    let report = format!(
        "skiff cluster: member {} (pid {}) exited unexpectedly (signal: 9 (SIGKILL)); 2 of 3 still running.",
        members[victim].0, pids[victim]
    );
    let deadline = Instant::now() + STOP_TIMEOUT;
    while !cluster.process.stderr().contains(&report) {
        ensure!(
            Instant::now() < deadline,
            "no report of {}'s death; stderr:\n{}",
            members[victim].0,
            cluster.process.stderr()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    store_client::put(survivor, "/up/after-kill", "still writable").await?;

    // Ctrl-C: every member stops, cluster up exits 0, cluster.json keeps no pid.
    let status = stop(&mut cluster.process, SIGINT).await?;
    assert_eq!(
        status.code(),
        Some(0),
        "cluster up: {status}; stderr:\n{}",
        cluster.process.stderr()
    );
    for pid in &pids {
        ensure!(
            !pid_exists(*pid),
            "member pid {pid} still exists after cluster up stopped"
        );
    }
    let stopped = cluster.manifest()?.context("cluster.json is gone")?;
    assert_eq!(stopped["ready"], Value::Bool(false));
    assert!(member_pids(&stopped).is_empty(), "{stopped:#}");

    // Up again on the same directory (one member's after a SIGKILL): same names and ports, same data.
    let mut again = ClusterUp::start(&cluster_dir)?;
    let manifest = again.wait_ready().await?;
    assert_eq!(check_manifest(&manifest, &cluster_dir)?, members);
    for (name, client) in &members {
        assert_eq!(
            store_client::get_value(*client, &format!("/up/{name}")).await?,
            Some(format!("from {name}"))
        );
    }
    assert_eq!(
        store_client::get_value(members[victim].1, "/up/after-kill")
            .await?
            .as_deref(),
        Some("still writable")
    );
    let status = stop(&mut again.process, SIGTERM).await?;
    assert_eq!(
        status.code(),
        Some(0),
        "cluster up: {status}; stderr:\n{}",
        again.process.stderr()
    );
    Ok(())
}

/// `skiff member …` against three `skiff store` processes: list, move the
/// leadership, add a fourth member and start it with the printed command,
/// remove it again; server errors are one line and exit 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn member_commands_list_move_leader_add_and_remove() -> Result<()> {
    let cluster = StoreCluster::start(3).await?;
    let endpoints = cluster.endpoints();
    let member = |args: &[&str]| {
        let mut all = vec!["member".to_string()];
        all.extend(args.iter().map(|a| a.to_string()));
        all.extend(["--endpoints".to_string(), endpoints.clone()]);
        SkiffProcess::run(all, FAIL_TIMEOUT)
    };
    let mut ids = Vec::new();
    for m in &cluster.members {
        let status = store_client::status(m.client).await?;
        ids.push(status.header.context("status header")?.member_id);
    }

    // A member publishes its client URL through the log once it has started.
    let deadline = Instant::now() + READY_TIMEOUT;
    let listed = loop {
        let (status, listed, stderr) = member(&["list"]).await?;
        ensure!(status.success(), "member list: {status}; {stderr}");
        if !listed.contains("<none>") || Instant::now() >= deadline {
            break listed;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let rows = table_rows(&listed);
    assert_eq!(
        rows[0],
        ["ID", "NAME", "PEER", "URLS", "CLIENT", "URLS", "LEARNER"]
    );
    assert_eq!(rows.len(), 4, "{listed}");
    for (m, id) in cluster.members.iter().zip(&ids) {
        let row = rows
            .iter()
            .find(|row| row[1] == m.name)
            .with_context(|| format!("{} in {listed}", m.name))?;
        assert_eq!(row[0], format!("{id:x}"), "{listed}");
        assert_eq!(row[3], format!("https://{}", m.client), "{listed}");
        assert_eq!(row[4], "false", "{listed}");
    }

    // Leadership to a follower, asked through every endpoint.
    let leader = cluster.wait_ready().await?;
    let target = *ids.iter().find(|&&id| id != leader).context("a follower")?;
    let (status, moved, stderr) = member(&["move-leader", &format!("{target:x}")]).await?;
    ensure!(status.success(), "move-leader: {status}; {stderr}");
    assert_eq!(
        moved,
        format!("Leadership transferred from {leader:x} to {target:x}\n")
    );
    wait_for_leader(&cluster, target).await?;

    // A fourth member: added, started with the printed command line, removed.
    let dir = tempfile::tempdir()?;
    let [peer, client]: [SocketAddr; 2] = free_addrs(2)?
        .try_into()
        .map_err(|_| anyhow::anyhow!("two addresses"))?;
    let n4_dir = dir.path().join("n4").display().to_string();
    let (status, added, stderr) = member(&[
        "add",
        "n4",
        "--peer-urls",
        &format!("http://{peer}"),
        "--client-listen",
        &client.to_string(),
        "--data-dir",
        &n4_dir,
    ])
    .await?;
    ensure!(status.success(), "member add: {status}; {stderr}");
    let lines: Vec<&str> = added.lines().collect();
    let new_id = lines[0]
        .strip_prefix("Member ")
        .and_then(|rest| rest.split(' ').next())
        .with_context(|| added.clone())?
        .to_string();
    let initial_cluster: Vec<String> = cluster
        .members
        .iter()
        .map(|m| m.peer_addr().map(|peer| format!("{}={peer}", m.name)))
        .chain([Ok(format!("n4={peer}"))])
        .collect::<Result<_>>()?;
    let command = format!(
        "skiff store --name n4 --data-dir {n4_dir} --pki-dir {} --client-listen {client} \
         --peer-listen {peer} --initial-cluster {} --initial-cluster-state existing",
        skiff_tests::test_pki::dir().display(),
        initial_cluster.join(",")
    );
    assert_eq!(lines[3].trim(), command, "{added}");
    let args: Vec<&str> = command.split(' ').skip(1).collect();
    let mut n4 = SkiffProcess::spawn("skiff store n4", &args)?;
    n4.wait_for_line(" ready: ", READY_TIMEOUT).await?;
    let revision = store_client::put(cluster.members[0].client, "/members/n4", "joined").await?;
    wait_for_value(client, "/members/n4", "joined", revision).await?;
    let n4_row = [
        new_id.clone(),
        "n4".into(),
        format!("https://{peer}"),
        format!("https://{client}"),
        "false".into(),
    ];
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        let (_, listed, _) = member(&["list"]).await?;
        if table_rows(&listed).contains(&n4_row.to_vec()) {
            break;
        }
        ensure!(
            Instant::now() < deadline,
            "n4 is not listed as started: {listed}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    let (status, removed, stderr) = member(&["remove", &new_id]).await?;
    ensure!(status.success(), "member remove: {status}; {stderr}");
    ensure!(
        removed.starts_with(&format!("Member {new_id} removed from cluster ")),
        "{removed}"
    );
    let (_, listed, _) = member(&["list"]).await?;
    assert_eq!(table_rows(&listed).len(), 4, "n4 gone: {listed}");
    drop(n4);

    // The server's refusal, and no server at all: one line each, exit 1.
    let (status, _, stderr) = member(&["remove", "1234"]).await?;
    assert_eq!(status.code(), Some(1));
    assert_eq!(stderr, "error: etcdserver: member not found\n");
    let nobody = free_addrs(1)?[0].to_string();
    let (status, _, stderr) =
        SkiffProcess::run(["member", "list", "--endpoints", &nobody], FAIL_TIMEOUT).await?;
    assert_eq!(status.code(), Some(1));
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    ensure!(
        stderr.starts_with(&format!("error: cannot reach {nobody}: ")),
        "{stderr}"
    );
    Ok(())
}

/// Whitespace-separated cells of each line of `skiff member list`.
fn table_rows(table: &str) -> Vec<Vec<String>> {
    table
        .lines()
        .map(|line| line.split_whitespace().map(String::from).collect())
        .collect()
}

async fn wait_for_leader(cluster: &StoreCluster, leader: u64) -> Result<()> {
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        let mut leaders = Vec::new();
        for m in &cluster.members {
            leaders.push(store_client::status(m.client).await?.leader);
        }
        if leaders.iter().all(|&l| l == leader) {
            return Ok(());
        }
        ensure!(
            Instant::now() < deadline,
            "leaders {leaders:?}, not {leader:x}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until the member at `client` serves `key` = `value` at `revision`.
async fn wait_for_value(client: SocketAddr, key: &str, value: &str, revision: i64) -> Result<()> {
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        if let Ok(read) = store_client::get(client, key).await {
            if let Some(kv) = read.kvs.first() {
                assert_eq!(
                    (kv.value.as_slice(), kv.mod_revision),
                    (value.as_bytes(), revision)
                );
                return Ok(());
            }
        }
        ensure!(Instant::now() < deadline, "{client} never served {key}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
