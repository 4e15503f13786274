//! One or three `skiff store` processes on free loopback ports, each in its
//! own temporary data directory, as a client finds them: by their client
//! addresses. Dropping the cluster SIGKILLs every member.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use tempfile::TempDir;

use crate::skiff_process::{free_addrs, store_args, SkiffProcess};
use crate::store_client;

/// Opening a store and electing a leader on a loaded 2-core machine.
pub const READY_TIMEOUT: Duration = Duration::from_secs(60);

pub struct StoreMember {
    pub name: String,
    pub client: SocketAddr,
    /// Where it listens for peers; `None` alone.
    pub peer: Option<SocketAddr>,
    pub data_dir: PathBuf,
    pub process: SkiffProcess,
}

impl StoreMember {
    pub fn peer_addr(&self) -> Result<SocketAddr> {
        self.peer
            .with_context(|| format!("{} is alone: it has no peer address", self.name))
    }
}

pub struct StoreCluster {
    pub members: Vec<StoreMember>,
    _dir: TempDir,
}

impl StoreCluster {
    /// One member alone (no --initial-cluster), named `default`.
    pub async fn single() -> Result<StoreCluster> {
        let dir = tempfile::tempdir()?;
        let client = free_addrs(1)?[0];
        let data_dir = dir.path().join("default");
        let args = store_args("default", &data_dir, client, None);
        let process = SkiffProcess::spawn("skiff store default", args)?;
        let cluster = StoreCluster {
            members: vec![StoreMember {
                name: "default".into(),
                client,
                peer: None,
                data_dir,
                process,
            }],
            _dir: dir,
        };
        cluster.wait_ready().await?;
        Ok(cluster)
    }

    /// `count` members `n1`… founding one cluster.
    pub async fn start(count: usize) -> Result<StoreCluster> {
        Self::start_prepared(count, |_, _, _| Ok(())).await
    }

    /// `count` members `n1`… founding one cluster, each started with
    /// `flags` besides its own.
    pub async fn start_with(count: usize, flags: &[String]) -> Result<StoreCluster> {
        Self::start_inner(count, flags, |_, _, _| Ok(())).await
    }

    /// `count` members `n1`… founding one cluster, each data directory
    /// made first by `prepare(name, data_dir, initial_cluster)` (a
    /// restore from a snapshot, say).
    pub async fn start_prepared(
        count: usize,
        prepare: impl FnMut(&str, &std::path::Path, &str) -> Result<()>,
    ) -> Result<StoreCluster> {
        Self::start_inner(count, &[], prepare).await
    }

    async fn start_inner(
        count: usize,
        flags: &[String],
        mut prepare: impl FnMut(&str, &std::path::Path, &str) -> Result<()>,
    ) -> Result<StoreCluster> {
        let dir = tempfile::tempdir()?;
        let addrs = free_addrs(2 * count)?;
        let (clients, peers) = addrs.split_at(count);
        let initial_cluster = (0..count)
            .map(|i| format!("n{}={}", i + 1, peers[i]))
            .collect::<Vec<_>>()
            .join(",");
        let mut members = Vec::new();
        for i in 0..count {
            let name = format!("n{}", i + 1);
            let data_dir = dir.path().join(&name);
            prepare(&name, &data_dir, &initial_cluster)?;
            let mut args = store_args(
                &name,
                &data_dir,
                clients[i],
                Some((peers[i], &initial_cluster)),
            );
            args.extend_from_slice(flags);
            let process = SkiffProcess::spawn(&format!("skiff store {name}"), args)?;
            members.push(StoreMember {
                name,
                client: clients[i],
                peer: Some(peers[i]),
                data_dir,
                process,
            });
        }
        let cluster = StoreCluster { members, _dir: dir };
        cluster.wait_ready().await?;
        Ok(cluster)
    }

    /// Every client address, comma-separated, for `--endpoints`.
    pub fn endpoints(&self) -> String {
        self.members
            .iter()
            .map(|m| m.client.to_string())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Waits until every member answers Status and all name the same leader.
    pub async fn wait_ready(&self) -> Result<u64> {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            let mut leaders = Vec::new();
            for member in &self.members {
                let ready = member.process.stdout().contains(" ready: ");
                match store_client::status(member.client).await {
                    Ok(status) if ready => leaders.push(status.leader),
                    _ => break,
                }
            }
            if leaders.len() == self.members.len()
                && leaders[0] != 0
                && leaders.iter().all(|&l| l == leaders[0])
            {
                return Ok(leaders[0]);
            }
            if Instant::now() >= deadline {
                let stderrs: Vec<String> = self
                    .members
                    .iter()
                    .map(|m| format!("{}:\n{}", m.name, m.process.stderr()))
                    .collect();
                bail!(
                    "the members did not agree on a leader within {READY_TIMEOUT:?} (saw {leaders:?}); stderr:\n{}",
                    stderrs.join("\n")
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Index of the member that leads among the members `among`, once
    /// every one of them names the same leader.
    pub async fn leader(&self, among: &[usize]) -> Result<usize> {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            let mut ids = Vec::new();
            let mut leaders = Vec::new();
            for &i in among {
                if let Ok(status) = store_client::status(self.members[i].client).await {
                    ids.push((i, status.header.map_or(0, |h| h.member_id)));
                    leaders.push(status.leader);
                }
            }
            if leaders.len() == among.len() && leaders.iter().all(|l| *l != 0 && *l == leaders[0]) {
                if let Some((i, _)) = ids.iter().find(|(_, id)| *id == leaders[0]) {
                    return Ok(*i);
                }
            }
            if Instant::now() > deadline {
                bail!("no leader among members {among:?} (they name {leaders:?})");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Passes `result` on; when it is an error, first prints what each
    /// member wrote to stderr (a test that returns an error does not
    /// unwind, so the processes' own dump on panic does not run).
    pub fn logs_on_error<T>(&self, result: Result<T>) -> Result<T> {
        if result.is_err() {
            for member in &self.members {
                eprintln!(
                    "--- stderr of member {} ---\n{}",
                    member.name,
                    member.process.stderr()
                );
            }
        }
        result
    }

    pub fn member(&self, name: &str) -> Result<&StoreMember> {
        self.members
            .iter()
            .find(|m| m.name == name)
            .with_context(|| format!("no member {name}"))
    }
}
