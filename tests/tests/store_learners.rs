//! Replacing a member as an operator does it with the real etcdctl 3.4:
//! `member add --learner`, the learner started with
//! `--initial-cluster-state existing` and catching up while it refuses
//! writes and linearizable reads, `member promote` refused until it has
//! caught up and then making it a voter that takes writes; `member update`
//! moving a member to another peer address, seen by every member. Every
//! refusal is checked to etcd's gRPC code and message, and the refusals
//! etcd itself gives are compared with real etcd's. Without etcdctl (and
//! etcd, for the comparison) the tests are skipped (under CI=true they
//! fail).

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use serde_json::Value;
use skiff_tests::etcdctl::{etcdctl_or_skip, Etcdctl};
use skiff_tests::real_etcd::{etcd_or_skip, RealEtcd};
use skiff_tests::skiff_process::{free_addrs, store_args, SkiffProcess};
use skiff_tests::store_cluster::{StoreCluster, READY_TIMEOUT};

/// (gRPC code, message) of the refusal etcdctl printed: its log line
/// says `rpc error: code = CODE desc = MESSAGE`.
fn refusal(stderr: &str) -> Result<(String, String)> {
    let (_, rest) = stderr
        .split_once("rpc error: code = ")
        .with_context(|| format!("etcdctl printed no gRPC error: {stderr}"))?;
    let (code, rest) = rest
        .split_once(" desc = ")
        .with_context(|| format!("no description: {stderr}"))?;
    let message = rest.split(['"', '\n']).next().unwrap_or_default();
    Ok((code.to_string(), message.to_string()))
}

fn refused(etcdctl: &Etcdctl, args: &[&str]) -> Result<(String, String)> {
    refusal(&etcdctl.fails(args)?)
}

fn expect_refusal(etcdctl: &Etcdctl, args: &[&str], code: &str, message: &str) -> Result<()> {
    let got = refused(etcdctl, args)?;
    ensure!(
        got == (code.to_string(), message.to_string()),
        "etcdctl {}: {got:?}, wanted ({code}, {message})",
        args.join(" ")
    );
    Ok(())
}

const NOT_IN_SYNC: &str =
    "etcdserver: can only promote a learner member which is in sync with leader";
const NOT_A_LEARNER: &str = "etcdserver: can only promote a learner member";
const NOT_FOR_LEARNER: &str = "etcdserver: rpc not supported for learner";
const NOT_FOUND: &str = "etcdserver: member not found";

/// `member add NAME --peer-urls URL [--learner]` → the new member's ID
/// (hex), from etcdctl's "Member ID added to cluster …".
fn member_add(etcdctl: &Etcdctl, name: &str, peer: &str, learner: bool) -> Result<String> {
    let mut args = vec!["member", "add", name, "--peer-urls", peer];
    if learner {
        args.push("--learner");
    }
    let out = etcdctl.ok(&args)?;
    let id = out
        .split_whitespace()
        .nth(1)
        .with_context(|| format!("no member ID in {out}"))?;
    Ok(id.to_string())
}

/// A member as `member list -w json` gives it: (ID in hex, name, peer
/// URLs, learner).
type Listed = (String, String, Vec<String>, bool);

/// Every member, as the member `etcdctl` reaches lists them.
fn members(etcdctl: &Etcdctl) -> Result<Vec<Listed>> {
    let out: Value = serde_json::from_str(&etcdctl.ok(&["member", "list", "-w", "json"])?)?;
    let mut members = Vec::new();
    for m in out["members"].as_array().into_iter().flatten() {
        let urls = m["peerURLs"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|u| u.as_str().map(str::to_string))
            .collect();
        members.push((
            format!("{:x}", m["ID"].as_u64().unwrap_or(0)),
            m["name"].as_str().unwrap_or_default().to_string(),
            urls,
            m["isLearner"].as_bool().unwrap_or(false),
        ));
    }
    Ok(members)
}

/// A member joining a running skiff cluster.
struct Joiner {
    process: SkiffProcess,
    etcdctl: Etcdctl,
}

/// Starts `skiff store NAME` joining the cluster (which has added it at
/// `advertised`), listening for peers at `listen`.
async fn join(
    cluster: &StoreCluster,
    etcdctl: &Path,
    data_dir: &Path,
    client: SocketAddr,
    (advertised, listen): (SocketAddr, SocketAddr),
) -> Result<Joiner> {
    let mut initial: Vec<String> = cluster
        .members
        .iter()
        .map(|m| Ok(format!("{}={}", m.name, m.peer_addr()?)))
        .collect::<Result<_>>()?;
    initial.push(format!("n4={advertised}"));
    let mut args = store_args("n4", data_dir, client, Some((listen, &initial.join(","))));
    args.extend(["--initial-cluster-state".into(), "existing".into()]);
    let mut process = SkiffProcess::spawn("skiff store n4", args)?;
    process.wait_for_line(" ready: ", READY_TIMEOUT).await?;
    Ok(Joiner {
        process,
        etcdctl: Etcdctl::new(etcdctl.to_path_buf(), client.to_string()),
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_learner_replaces_a_member_and_moves_to_another_peer_address() -> Result<()> {
    let Some(binary) =
        etcdctl_or_skip("a_learner_replaces_a_member_and_moves_to_another_peer_address")
    else {
        return Ok(());
    };
    let mut cluster = StoreCluster::start(3).await?;
    let clients: Vec<SocketAddr> = cluster.members.iter().map(|m| m.client).collect();
    let at = |i: usize| Etcdctl::new(binary.clone(), clients[i].to_string());
    for i in 0..20 {
        at(i % 3).ok(&["put", &format!("/before/{i:02}"), "v"])?;
    }

    let [client, peer, moved, other]: [SocketAddr; 4] = free_addrs(4)?
        .try_into()
        .map_err(|_| anyhow::anyhow!("four addresses"))?;
    let peer_url = format!("http://{peer}");
    let id = member_add(&at(0), "n4", &peer_url, true)?;
    let listed = members(&at(1))?;
    ensure!(
        listed.iter().any(|(m, name, urls, learner)| *m == id
            && name.is_empty()
            && *urls == [format!("https://{peer}")]
            && *learner),
        "the learner is listed, unstarted: {listed:?}"
    );
    // etcd 3.4 takes one learner at a time.
    let (code, message) = refused(
        &at(1),
        &[
            "member",
            "add",
            "n5",
            "--peer-urls",
            &format!("http://{other}"),
            "--learner",
        ],
    )?;
    ensure!(
        (code.as_str(), message.as_str())
            == (
                "FailedPrecondition",
                "etcdserver: too many learner members in cluster"
            ),
        "{code} {message}"
    );
    // Not started yet: nowhere near the leader's log, whoever is asked.
    for i in 0..3 {
        expect_refusal(
            &at(i),
            &["member", "promote", &id],
            "FailedPrecondition",
            NOT_IN_SYNC,
        )?;
    }
    let voter = members(&at(0))?
        .into_iter()
        .find(|(_, name, _, _)| name == "n2")
        .context("n2 is listed")?
        .0;
    expect_refusal(
        &at(0),
        &["member", "promote", &voter],
        "FailedPrecondition",
        NOT_A_LEARNER,
    )?;
    expect_refusal(
        &at(0),
        &["member", "promote", "1234"],
        "NotFound",
        NOT_FOUND,
    )?;

    // Started, it catches up and serves what a learner serves.
    let dir = tempfile::tempdir()?;
    let data_dir = dir.path().join("n4");
    let n4 = join(&cluster, &binary, &data_dir, client, (peer, peer)).await?;
    let status: Value =
        serde_json::from_str(&n4.etcdctl.ok(&["endpoint", "status", "-w", "json"])?)?;
    ensure!(status[0]["Status"]["isLearner"] == true, "{status}");
    expect_refusal(
        &n4.etcdctl,
        &["put", "/refused", "v"],
        "Unavailable",
        NOT_FOR_LEARNER,
    )?;
    expect_refusal(
        &n4.etcdctl,
        &["get", "/before/00"],
        "Unavailable",
        NOT_FOR_LEARNER,
    )?;
    expect_refusal(
        &n4.etcdctl,
        &["member", "list"],
        "Unavailable",
        NOT_FOR_LEARNER,
    )?;
    // A backup may be taken off a learner (etcd 3.5 serves it too).
    let backup = dir.path().join("from-learner.db");
    n4.etcdctl
        .ok(&["snapshot", "save", &backup.display().to_string()])?;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let read =
            n4.etcdctl
                .ok(&["get", "/before/19", "--consistency=s", "--print-value-only"])?;
        if read.trim() == "v" {
            break;
        }
        ensure!(
            Instant::now() < deadline,
            "the learner never caught up: {read:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Promoted (through a follower of the leader, or the leader) once the
    // leader sees it caught up; then it takes writes.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let output = at(2).run(&["member", "promote", &id])?;
        if output.status.success() {
            let out = String::from_utf8_lossy(&output.stdout);
            ensure!(out.contains(&format!("Member {id:>16} promoted")), "{out}");
            break;
        }
        let stderr = String::from_utf8_lossy(&output.stderr);
        let (code, message) = refusal(&stderr)?;
        ensure!(
            message == NOT_IN_SYNC && code == "FailedPrecondition" && Instant::now() < deadline,
            "promotion refused: {code} {message}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    ensure!(members(&at(0))?.iter().all(|(_, _, _, learner)| !learner));
    expect_refusal(
        &at(1),
        &["member", "promote", &id],
        "FailedPrecondition",
        NOT_A_LEARNER,
    )?;
    n4.etcdctl.ok(&["put", "/through/n4", "promoted"])?;
    for i in 0..3 {
        let value = at(i).ok(&["get", "/through/n4", "--print-value-only"])?;
        ensure!(value.trim() == "promoted", "member {i} reads {value:?}");
    }

    // It moves: stopped, updated, started on its new peer address; every
    // member lists it there and reaches it there.
    drop(n4);
    let moved_url = format!("http://{moved}");
    let out = at(1).ok(&["member", "update", &id, "--peer-urls", &moved_url])?;
    ensure!(out.contains(&format!("Member {id:>16} updated")), "{out}");
    expect_refusal(
        &at(1),
        &[
            "member",
            "update",
            "1234",
            "--peer-urls",
            &format!("http://{other}"),
        ],
        "NotFound",
        NOT_FOUND,
    )?;
    let n4 = join(&cluster, &binary, &data_dir, client, (peer, moved)).await?;
    // (n4 itself lists it once it has caught up with the change.)
    let deadline = Instant::now() + Duration::from_secs(30);
    for etcdctl in [at(0), at(1), at(2), n4.etcdctl.clone()] {
        loop {
            let listed = members(&etcdctl)?;
            let moved_there = listed.iter().any(|(m, name, urls, learner)| {
                *m == id && name == "n4" && *urls == [format!("https://{moved}")] && !learner
            });
            if moved_there {
                break;
            }
            ensure!(
                Instant::now() < deadline,
                "the new peer URL is not listed everywhere: {listed:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    // With one old member stopped, three of four commit only if n4 is
    // reached at its new address.
    let down = &mut cluster.members[2].process;
    down.signal(libc::SIGKILL)?;
    down.wait_exit(Duration::from_secs(10)).await?;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match at(0).run(&["put", "/after/move", "v"])? {
            output if output.status.success() => break,
            output if Instant::now() >= deadline => bail!(
                "no write with n4 at its new address: {}",
                String::from_utf8_lossy(&output.stderr)
            ),
            _ => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
    let value = n4
        .etcdctl
        .ok(&["get", "/after/move", "--print-value-only"])?;
    ensure!(value.trim() == "v", "{value:?}");
    drop(n4.process);
    Ok(())
}

/// What etcd refuses about learners and member changes on a cluster of
/// one voter with a learner added and not started: (code, message) each.
fn refusals(etcdctl: &Etcdctl, learner: &str, voter: &str) -> Result<Vec<(String, String)>> {
    let other = format!("http://{}", free_addrs(1)?[0]);
    Ok(vec![
        refused(etcdctl, &["member", "promote", learner])?,
        refused(etcdctl, &["member", "promote", voter])?,
        refused(etcdctl, &["member", "promote", "1234"])?,
        refused(
            etcdctl,
            &["member", "update", "1234", "--peer-urls", &other],
        )?,
        refused(
            etcdctl,
            &["member", "add", "x", "--peer-urls", &other, "--learner"],
        )?,
    ])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn member_change_refusals_are_real_etcds() -> Result<()> {
    let Some(binaries) = etcd_or_skip("member_change_refusals_are_real_etcds") else {
        return Ok(());
    };
    let etcd = RealEtcd::alone(&binaries).await?;
    let skiff = StoreCluster::start(1).await?;
    let mut answers = Vec::new();
    for etcdctl in [
        etcd.etcdctl(),
        Etcdctl::new(binaries.1.clone(), skiff.members[0].client.to_string()),
    ] {
        let voter = members(&etcdctl)?.first().context("one member")?.0.clone();
        let learner = member_add(
            &etcdctl,
            "l",
            &format!("http://{}", free_addrs(1)?[0]),
            true,
        )?;
        answers.push(refusals(&etcdctl, &learner, &voter)?);
    }
    let expected: Vec<(String, String)> = [
        ("FailedPrecondition", NOT_IN_SYNC),
        ("FailedPrecondition", NOT_A_LEARNER),
        ("NotFound", NOT_FOUND),
        ("NotFound", NOT_FOUND),
        (
            "FailedPrecondition",
            "etcdserver: too many learner members in cluster",
        ),
    ]
    .into_iter()
    .map(|(c, m)| (c.to_string(), m.to_string()))
    .collect();
    assert_eq!(answers[0], expected, "real etcd");
    assert_eq!(answers[1], answers[0], "skiff answers as etcd");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lone_member_lists_the_peer_url_it_would_use() -> Result<()> {
    let Some(binary) = etcdctl_or_skip("a_lone_member_lists_the_peer_url_it_would_use") else {
        return Ok(());
    };
    let cluster = StoreCluster::single().await?;
    let member = &cluster.members[0];
    let listed = members(&Etcdctl::new(binary, member.client.to_string()))?;
    ensure!(
        listed.len() == 1
            && listed[0].1 == "default"
            && listed[0].2 == ["https://127.0.0.1:2380"]
            && !listed[0].3,
        "{listed:?}"
    );
    Ok(())
}
