//! `skiff cluster up`: a replicated cluster on this machine, one `skiff
//! store` child process per member on loopback, described in
//! `DIR/cluster.json`, stopped together on Ctrl-C.

pub mod layout;
pub mod manifest;
mod members;
mod up;

use std::path::PathBuf;

use clap::{Args, Subcommand};

#[derive(Debug, Subcommand)]
pub enum ClusterCommand {
    /// Start a local cluster and keep it running until Ctrl-C or SIGTERM.
    Up(UpArgs),
}

impl ClusterCommand {
    pub async fn run(self) -> anyhow::Result<()> {
        match self {
            ClusterCommand::Up(args) => up::run(args).await,
        }
    }
}

#[derive(Debug, Clone, Args)]
#[command(
    after_help = "Ports: by default etcd's local-cluster ports, member k at client/peer \
    2379/2380, 22379/22380, 32379/32380, … (up to 6 members). Run again on the same \
    --data-dir to restart the same cluster with its data: names and ports come from \
    DIR/cluster.json."
)]
pub struct UpArgs {
    /// How many members (1 to 7; 3 or 5 tolerate one or two failures).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u16).range(1..=7))]
    pub members: u16,
    /// Where members keep their data (DIR/n1, DIR/n2, …) and logs (DIR/n1.log, …), and cluster.json.
    #[arg(long, env = "SKIFF_CLUSTER_DIR", default_value = "./skiff-cluster")]
    pub data_dir: PathBuf,
    /// Member k listens for clients on BASE+10(k-1) and for peers on the port after it.
    #[arg(long, conflicts_with = "free_ports")]
    pub base_port: Option<u16>,
    /// Let the system choose free ports (see cluster.json for which).
    #[arg(long)]
    pub free_ports: bool,
    /// Seconds to wait for every member to answer and a leader to be elected.
    #[arg(long, default_value_t = 60)]
    pub ready_timeout: u64,
    /// The PKI directory every member shares (cluster CA, store CA, keys)
    /// [default: DIR/pki].
    #[arg(long, env = "SKIFF_PKI_DIR")]
    pub pki_dir: Option<PathBuf>,
    #[command(flatten)]
    pub store_maintenance: crate::store::StoreMaintenanceFlags,
}
