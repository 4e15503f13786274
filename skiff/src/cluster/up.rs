//! `skiff cluster up`: start the members, wait until each answers and one
//! leads, tell the user how to reach them, then stop them all on a signal.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context, Result};

use super::layout::{self, MemberLayout, Ports};
use super::manifest::{self, ClusterManifest};
use super::members::{self, Members};
use super::UpArgs;
use crate::client;
use crate::shutdown::StopSignals;

/// How long members get to close their stores after SIGTERM.
const STOP_GRACE: Duration = Duration::from_secs(10);
/// Between two rounds of Status requests while members start.
const READY_POLL: Duration = Duration::from_millis(200);

pub async fn run(args: UpArgs) -> Result<()> {
    let dir = args.data_dir.as_path();
    std::fs::create_dir_all(dir)
        .with_context(|| format!("creating the cluster directory {}", dir.display()))?;
    let layouts = layouts(&args)?;
    // One CA for every member, made before any starts.
    let pki_dir = args
        .pki_dir
        .clone()
        .unwrap_or_else(|| dir.join(crate::pki::DEFAULT_DIR));
    let pki = crate::pki::Pki::ensure(&pki_dir)?;
    pki.admin()?;
    pki.service_account_key()?;
    let store_pki = crate::pki::Pki::ensure_store(pki.dir())?;
    store_pki.store_client()?;
    let tls = client::store_tls(pki.dir())?;
    let mut signals = StopSignals::register()?;
    let initial_cluster = layout::initial_cluster(&layouts);
    let mut members = Members::new();
    for layout in &layouts {
        if let Err(err) = members.spawn(
            dir,
            layout,
            &initial_cluster,
            &pki_dir,
            &args.store_maintenance,
        ) {
            members.stop(STOP_GRACE).await;
            return Err(err);
        }
    }
    manifest::save(dir, &members.manifest(false))?;

    let ready_timeout = Duration::from_secs(args.ready_timeout);
    let leader = tokio::select! {
        ready = wait_ready(&mut members, &tls, ready_timeout) => match ready {
            Ok(leader) => Some(leader),
            Err(err) => {
                members.stop(STOP_GRACE).await;
                manifest::save(dir, &members.manifest(false))?;
                return Err(err);
            }
        },
        name = signals.recv() => {
            println!("skiff cluster: {name} before the cluster was ready; stopping it");
            None
        }
    };
    if let Some(leader) = leader {
        // The kubeconfig first: whoever sees the ready manifest may use it.
        if let Some(first) = members.processes.first() {
            let url = format!("https://{}", first.layout.api);
            crate::api::write_admin_kubeconfig(&dir.join("kubeconfig"), &url, &pki)?;
        }
        manifest::save(dir, &members.manifest(true))?;
        print_ready(dir, &members, &leader, pki.dir());
        watch_members(&mut members, &mut signals).await;
    }
    signals.exit_on_next("stopping the members");
    members.stop(STOP_GRACE).await;
    manifest::save(dir, &members.manifest(false))?;
    println!("skiff cluster: stopped {} members", members.processes.len());
    Ok(())
}

/// The names and ports of an earlier run in this directory, or new ones.
fn layouts(args: &UpArgs) -> Result<Vec<MemberLayout>> {
    let dir = args.data_dir.as_path();
    let Some(earlier) = manifest::load(dir)? else {
        let ports = match (args.base_port, args.free_ports) {
            (_, true) => Ports::Free,
            (Some(base), false) => Ports::Base(base),
            (None, false) => Ports::EtcdConvention,
        };
        return layout::plan(args.members, ports);
    };
    if earlier.members.len() != usize::from(args.members) {
        bail!(
            "{} holds a cluster of {} members; pass --members {} to restart it, or choose another --data-dir",
            dir.display(),
            earlier.members.len(),
            earlier.members.len()
        );
    }
    if let Some(running) = earlier
        .members
        .iter()
        .find(|m| m.pid.is_some_and(members::is_running_skiff))
    {
        bail!(
            "a cluster from {} is still running (member {}, pid {}); stop it first",
            dir.display(),
            running.name,
            running.pid.unwrap_or_default()
        );
    }
    if args.base_port.is_some() || args.free_ports {
        tracing::warn!(
            manifest = %manifest::path(dir).display(),
            "restarting the cluster recorded there: its ports, not those of the flags"
        );
    }
    earlier.members.iter().map(recorded_layout).collect()
}

fn recorded_layout(member: &manifest::ManifestMember) -> Result<MemberLayout> {
    let parse = |what: &str, addr: &str| {
        addr.parse()
            .with_context(|| format!("cluster.json: {what} address {addr:?} of {}", member.name))
    };
    let Some(api) = &member.api else {
        bail!(
            "cluster.json records no API address for {} (written by an older skiff); remove it to start afresh",
            member.name
        );
    };
    Ok(MemberLayout {
        name: member.name.clone(),
        client: parse("client", &member.client)?,
        peer: parse("peer", &member.peer)?,
        api: parse("API", api)?,
    })
}

/// Waits until every member answers Status and knows a leader; returns the
/// leader's name. Fails if a member exits first or time runs out.
async fn wait_ready(
    members: &mut Members,
    tls: &tonic::transport::ClientTlsConfig,
    timeout: Duration,
) -> Result<String> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(leader) = poll_ready(members, tls).await {
            return Ok(leader);
        }
        tokio::select! {
            exited = members.next_exit() => {
                let Some(index) = exited else { bail!("lost track of the members") };
                let process = &members.processes[index];
                bail!(
                    "member {} exited before the cluster was ready ({}); the end of {}:\n{}",
                    process.layout.name,
                    process.ended.as_deref().unwrap_or("unknown"),
                    process.log.display(),
                    members::log_tail(&process.log)
                );
            }
            _ = tokio::time::sleep(READY_POLL) => {}
        }
        if tokio::time::Instant::now() >= deadline {
            bail!(
                "the members did not all answer with a leader within {timeout:?}; their logs are in {}",
                members.processes.first().and_then(|p| p.log.parent()).map_or_else(String::new, |d| d.display().to_string())
            );
        }
    }
}

/// The leader's name if every member answers and all know a leader.
async fn poll_ready(members: &Members, tls: &tonic::transport::ClientTlsConfig) -> Option<String> {
    let mut names = HashMap::new();
    let mut leader = 0;
    for process in &members.processes {
        let endpoint = client::endpoint_url(&process.layout.client.to_string());
        let channel = client::connect(&endpoint, Some(tls)).await.ok()?;
        let status = client::status(channel).await.ok()?;
        if status.leader == 0 {
            return None;
        }
        leader = status.leader;
        names.insert(status.header?.member_id, process.layout.name.clone());
    }
    names.remove(&leader)
}

fn print_ready(dir: &Path, members: &Members, leader: &str, pki_dir: &Path) {
    let ClusterManifest { endpoints, .. } = members.manifest(true);
    println!(
        "skiff cluster: {} members ready, {leader} leads; {} describes them",
        members.processes.len(),
        manifest::path(dir).display()
    );
    for p in &members.processes {
        println!(
            "  {}  pid {}  api https://{}  client {}  peer {}  log {}",
            p.layout.name,
            p.pid,
            p.layout.api,
            p.layout.client,
            p.layout.peer,
            p.log.display()
        );
    }
    println!("Use it with:");
    println!(
        "  kubectl --kubeconfig {} get namespaces     (each member's own: DIR/nK/kubeconfig)",
        dir.join("kubeconfig").display()
    );
    let store = pki_dir.join(crate::pki::STORE_DIR);
    println!(
        "  etcdctl --endpoints {endpoints} --cacert {} --cert {} --key {} member list",
        store.join(crate::pki::STORE_CA_CERT).display(),
        store.join(crate::pki::STORE_CLIENT_CERT).display(),
        store.join(crate::pki::STORE_CLIENT_KEY).display()
    );
    println!(
        "  skiff member list --endpoints {endpoints} --pki-dir {}",
        pki_dir.display()
    );
    println!("Ctrl-C stops every member.");
}

/// Runs until a signal, saying so when a member dies; returns early if
/// every member has died.
async fn watch_members(members: &mut Members, signals: &mut StopSignals) {
    loop {
        tokio::select! {
            name = signals.recv() => {
                println!("skiff cluster: {name}; stopping every member");
                return;
            }
            exited = members.next_exit() => {
                let Some(index) = exited else { return };
                let process = &members.processes[index];
                eprintln!(
                    "skiff cluster: member {} (pid {}) exited unexpectedly ({}); {} of {} still running. The end of {}:\n{}",
                    process.layout.name,
                    process.pid,
                    process.ended.as_deref().unwrap_or("unknown"),
                    members.running(),
                    members.processes.len(),
                    process.log.display(),
                    members::log_tail(&process.log)
                );
                if members.running() == 0 {
                    eprintln!("skiff cluster: every member has exited");
                    return;
                }
            }
        }
    }
}
