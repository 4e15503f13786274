//! `skiff snapshot`: etcd snapshot files (as `etcdctl snapshot save`
//! writes them, of skiff or of etcd) read offline: `status` to look at
//! one, `restore` to start a new member, or a new cluster, from one.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use skiff_store::snapshot::{self, restore::restore_data_dir};
use skiff_store::{ClusterConfig, InitialClusterState};

#[derive(Debug, Subcommand)]
pub enum SnapshotCommand {
    /// Make a new member's data directory from a snapshot file; revisions
    /// continue from the snapshot's. Restore every member of the new
    /// cluster from the same file with the same --initial-cluster.
    Restore(RestoreArgs),
    /// Print a snapshot file's hash, revision, key count and size, as
    /// `etcdctl snapshot status` does.
    Status(StatusArgs),
}

#[derive(Debug, Args)]
pub struct RestoreArgs {
    /// The snapshot file (`etcdctl snapshot save` of skiff or etcd).
    pub file: PathBuf,
    /// The restored member's name; with --initial-cluster, one of the names there.
    #[arg(long, default_value = "default")]
    pub name: String,
    /// The new data directory (must not exist).
    #[arg(long)]
    pub data_dir: PathBuf,
    /// Every member of the new cluster as name=host:port (peer addresses),
    /// as `skiff store` will be given it. Without it the member runs alone.
    #[arg(long)]
    pub initial_cluster: Option<String>,
    /// This member's peer URL; must be its address in --initial-cluster.
    #[arg(long)]
    pub initial_advertise_peer_urls: Option<String>,
    /// The new cluster's --initial-cluster-token (the same for every
    /// member restored from the file, and given to `skiff store` too).
    #[arg(long, default_value = "")]
    pub initial_cluster_token: String,
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    pub file: PathBuf,
}

impl SnapshotCommand {
    pub fn run(self) -> Result<()> {
        match self {
            SnapshotCommand::Restore(args) => restore(args),
            SnapshotCommand::Status(args) => status(args),
        }
    }
}

fn read(file: &PathBuf) -> Result<Vec<u8>> {
    std::fs::read(file).with_context(|| format!("reading snapshot {}", file.display()))
}

fn cluster_config(args: &RestoreArgs) -> Result<Option<ClusterConfig>> {
    let Some(spec) = &args.initial_cluster else {
        if args.initial_advertise_peer_urls.is_some() {
            bail!("--initial-advertise-peer-urls needs --initial-cluster");
        }
        return Ok(None);
    };
    let members = ClusterConfig::parse_initial_cluster(spec)?;
    let Some((_, ours)) = members.iter().find(|(name, _)| *name == args.name) else {
        bail!(
            "member name {:?} is not in --initial-cluster; pass --name with one of its names",
            args.name
        );
    };
    if let Some(urls) = &args.initial_advertise_peer_urls {
        let advertised = urls
            .split(',')
            .map(|url| {
                let addr = url
                    .trim()
                    .trim_start_matches("http://")
                    .trim_end_matches('/');
                addr.parse::<std::net::SocketAddr>().with_context(|| {
                    format!("--initial-advertise-peer-urls {url:?} is not http://IP:PORT")
                })
            })
            .collect::<Result<Vec<_>>>()?;
        if !advertised.contains(ours) {
            bail!(
                "--initial-advertise-peer-urls {urls} does not match {}'s address {ours} in --initial-cluster",
                args.name
            );
        }
    }
    let cluster = ClusterConfig {
        name: args.name.clone(),
        peer_listen: *ours,
        initial_cluster: members,
        initial_cluster_state: InitialClusterState::New,
        initial_cluster_token: args.initial_cluster_token.clone(),
    };
    Ok(Some(cluster))
}

fn restore(args: RestoreArgs) -> Result<()> {
    let cluster = cluster_config(&args)?;
    let file = read(&args.file)?;
    let restored = restore_data_dir(&file, &args.data_dir, cluster.as_ref())
        .with_context(|| format!("restoring {}", args.file.display()))?;
    println!(
        "restored {} into {}: revision {}, compacted at {}, {} records of history, {} leases",
        args.file.display(),
        args.data_dir.display(),
        restored.revision,
        restored.compact_revision,
        restored.records,
        restored.leases
    );
    let cluster_flag = args
        .initial_cluster
        .as_ref()
        .map(|spec| format!(" --initial-cluster {spec}"))
        .unwrap_or_default();
    let cluster_flag = if args.initial_cluster_token.is_empty() || args.initial_cluster.is_none() {
        cluster_flag
    } else {
        format!(
            "{cluster_flag} --initial-cluster-token {}",
            args.initial_cluster_token
        )
    };
    println!(
        "start it with: skiff store --name {} --data-dir {}{cluster_flag}",
        args.name,
        args.data_dir.display()
    );
    Ok(())
}

fn status(args: StatusArgs) -> Result<()> {
    let file = read(&args.file)?;
    let status =
        snapshot::status(&file).with_context(|| format!("reading {}", args.file.display()))?;
    println!("hash: {:08x}", status.hash);
    println!("revision: {}", status.revision);
    println!("total keys: {}", status.total_keys);
    println!("total size: {}", status.total_size);
    Ok(())
}
