//! The command tree: which subcommands exist, their flags, and where each
//! one runs. Every flag has a default that works on one machine.

use std::io::IsTerminal;

use clap::{Parser, Subcommand};
use tracing_subscriber::EnvFilter;

use crate::cluster::ClusterCommand;
use crate::control_plane::{ControllerManagerArgs, SchedulerArgs};
use crate::kubelet::KubeletArgs;
use crate::member::MemberArgs;
use crate::snapshot::SnapshotCommand;
use crate::store::StoreCommand;
use crate::up::{ServerArgs, UpArgs};

/// `skiff --version`; a build with crash points says so (docs/failpoints.md),
/// which is how the fault suite knows it can use them.
#[cfg(not(feature = "failpoints"))]
const VERSION: &str = env!("CARGO_PKG_VERSION");
#[cfg(feature = "failpoints")]
const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " +failpoints");

#[derive(Debug, Parser)]
#[command(
    name = "skiff",
    version = VERSION,
    about = "A Kubernetes control plane with its own etcd-compatible store",
    long_about = "A Kubernetes control plane with its own etcd-compatible store.\n\n\
        Logs go to stderr; set RUST_LOG (for example RUST_LOG=debug) to change how much."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// The embedded default: a store and the Kubernetes API in this process;
    /// writes DATA_DIR/kubeconfig for kubectl.
    Up(Box<UpArgs>),
    /// One member of a replicated cluster: a store member and the Kubernetes API.
    Server(Box<ServerArgs>),
    /// Run one store member: an etcd replacement serving etcd's v3 gRPC API.
    Store(Box<StoreCommand>),
    /// Run a local replicated cluster of store members on this machine.
    #[command(subcommand)]
    Cluster(ClusterCommand),
    /// List, add and remove store members, or move the leadership.
    Member(MemberArgs),
    /// Read etcd snapshot files (of skiff or etcd): status, and restore
    /// into a new member's data directory.
    #[command(subcommand)]
    Snapshot(SnapshotCommand),
    /// The scheduler alone, for the API of a kubeconfig.
    Scheduler(SchedulerArgs),
    /// The node agent: registers a Node and runs the pods bound to it as
    /// local processes (or simulates many nodes with --simulate N).
    Kubelet(Box<KubeletArgs>),
    /// The controller-manager alone, for the API of a kubeconfig.
    ControllerManager(ControllerManagerArgs),
    /// The service proxy alone, for the API of a kubeconfig: Services'
    /// cluster IPs and node ports reach their endpoints (nftables).
    Proxy(crate::proxy::ProxyArgs),
}

impl Command {
    /// Servers log what they do; client commands print only their answer.
    pub fn default_log_level(&self) -> &'static str {
        match self {
            // raft-rs narrates every election; the store logs leadership itself.
            Command::Store(_)
            | Command::Cluster(_)
            | Command::Up(_)
            | Command::Server(_)
            | Command::Scheduler(_)
            | Command::Kubelet(_)
            | Command::ControllerManager(_)
            | Command::Proxy(_) => "info,raft=warn",
            Command::Member(_) | Command::Snapshot(_) => "warn",
        }
    }
}

impl Cli {
    pub async fn run(self) -> anyhow::Result<()> {
        match self.command {
            Command::Up(args) => crate::up::up(*args).await,
            Command::Server(args) => crate::up::server(*args).await,
            Command::Store(args) => crate::store::run(*args).await,
            Command::Cluster(command) => command.run().await,
            Command::Member(args) => args.run().await,
            Command::Snapshot(command) => command.run(),
            Command::Scheduler(args) => crate::control_plane::scheduler(args).await,
            Command::Kubelet(args) => crate::kubelet::kubelet(*args).await,
            Command::ControllerManager(args) => {
                crate::control_plane::controller_manager(args).await
            }
            Command::Proxy(args) => crate::proxy::run(args).await,
        }
    }
}

/// Logs to stderr at `RUST_LOG`'s level, or `default_level`.
pub fn init_logging(default_level: &str) {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_level));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
}
