//! `skiff up`: the embedded default — one store member and the Kubernetes
//! API over it in this process, data in one directory, a kubeconfig beside
//! it. `skiff server`: one member of a replicated cluster, serving the API
//! too.

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;

use crate::store::{run_member, ApiServing, StoreArgs};

#[derive(Debug, Clone, Args)]
pub struct UpArgs {
    /// Where the store's data and the kubeconfig go (created if absent).
    #[arg(long, env = "SKIFF_DATA_DIR", default_value = "./skiff-data")]
    pub data_dir: PathBuf,
    /// Address (host:port) of the Kubernetes API (plain HTTP for now).
    #[arg(long, env = "SKIFF_API_LISTEN", default_value = "127.0.0.1:6443")]
    pub api_listen: String,
    /// Address (host:port) of the store's etcd v3 API, for etcdctl.
    #[arg(long, env = "SKIFF_CLIENT_LISTEN", default_value = "127.0.0.1:2379")]
    pub client_listen: String,
}

pub async fn up(args: UpArgs) -> Result<()> {
    let store = StoreArgs {
        name: "default".into(),
        data_dir: args.data_dir.join("store"),
        client_listen: args.client_listen,
        peer_listen: None,
        initial_cluster: None,
        initial_cluster_state: Default::default(),
        snapshot_catch_up_entries: skiff_store::raft::CATCH_UP_ENTRIES,
    };
    let api = ApiServing {
        listen: args.api_listen,
        kubeconfig: args.data_dir.join("kubeconfig"),
    };
    run_member(store, Some(api)).await
}

#[derive(Debug, Clone, Args)]
pub struct ServerArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    /// Address (host:port) of the Kubernetes API (plain HTTP for now).
    #[arg(long, env = "SKIFF_API_LISTEN", default_value = "127.0.0.1:6443")]
    pub api_listen: String,
    /// Where to write the kubeconfig for this member's API [default:
    /// DATA_DIR/kubeconfig].
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
}

pub async fn server(args: ServerArgs) -> Result<()> {
    let kubeconfig = args
        .kubeconfig
        .unwrap_or_else(|| args.store.data_dir.join("kubeconfig"));
    let api = ApiServing {
        listen: args.api_listen,
        kubeconfig,
    };
    run_member(args.store, Some(api)).await
}
