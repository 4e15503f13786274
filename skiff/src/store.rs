//! `skiff store`: one store member, an etcd replacement serving etcd's v3
//! gRPC API. Alone without `--initial-cluster`; otherwise one member of a
//! Raft cluster that talks to its peers on `--peer-listen`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Args;
use skiff_store::{ClusterConfig, InitialClusterState, Store, StoreConfig};
use tokio::net::TcpListener;
use tokio::sync::oneshot;

use crate::shutdown::StopSignals;

/// The store's peer port on this host, as etcd's (2380).
const DEFAULT_PEER_LISTEN: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 2380);

/// How long open client streams (watches, keep-alives) may hold up a stop
/// before the store is closed under them.
const CLIENT_DRAIN_TIMEOUT: Duration = Duration::from_secs(3);

#[derive(Debug, Clone, Args)]
#[command(
    after_help = "Alone (no --initial-cluster), the member listens for clients only. \
    For a cluster, start one member per name with the same --initial-cluster, e.g.\n  \
    skiff store --name n1 --data-dir n1 --client-listen 127.0.0.1:2379 \
    --initial-cluster n1=127.0.0.1:2380,n2=127.0.0.1:22380,n3=127.0.0.1:32380"
)]
pub struct StoreArgs {
    /// This member's name; with --initial-cluster, one of the names there.
    #[arg(long, env = "SKIFF_NAME", default_value = "default")]
    pub name: String,
    /// Where the member keeps its write-ahead log, state and identity (created if absent).
    #[arg(long, env = "SKIFF_DATA_DIR", default_value = "./skiff-data")]
    pub data_dir: PathBuf,
    /// Address (host:port) clients and etcdctl reach the etcd v3 gRPC API at.
    #[arg(long, env = "SKIFF_CLIENT_LISTEN", default_value = "127.0.0.1:2379")]
    pub client_listen: String,
    /// Address to listen on for peers [default: this member's address in
    /// --initial-cluster; alone, a member has no peers and does not listen,
    /// and its member list shows this address, or 127.0.0.1:2380, as its
    /// peer URL].
    #[arg(long, env = "SKIFF_PEER_LISTEN")]
    pub peer_listen: Option<SocketAddr>,
    /// Every founding member as name=host:port (their peer addresses),
    /// the same on every member; with "existing", the running cluster's
    /// members and this one.
    #[arg(long, env = "SKIFF_INITIAL_CLUSTER", value_parser = parse_initial_cluster)]
    pub initial_cluster: Option<InitialCluster>,
    /// "new" to found a cluster, "existing" to join one that has added this
    /// member (`skiff member add`).
    #[arg(long, env = "SKIFF_INITIAL_CLUSTER_STATE", default_value = "new", value_parser = parse_state)]
    pub initial_cluster_state: InitialClusterState,
    /// etcd's --initial-cluster-token: the same on every founding member,
    /// and different for every cluster founded from the same
    /// --initial-cluster, so that their cluster and member IDs differ and
    /// one cluster's member is never taken for another's. Empty (the
    /// default) derives the IDs as skiff did before the flag existed.
    #[arg(long, env = "SKIFF_INITIAL_CLUSTER_TOKEN", default_value = "")]
    pub initial_cluster_token: String,
    /// Raft log entries a leader keeps for a follower that is behind; one
    /// further behind (or new) is sent a snapshot of the whole state instead
    /// (etcd's --experimental-snapshot-catchup-entries).
    #[arg(long, default_value_t = skiff_store::raft::CATCH_UP_ENTRIES)]
    pub snapshot_catch_up_entries: u64,
    /// Also serve the etcd v3 API over plain HTTP/2 on this loopback
    /// address (host:port), to any client without a certificate. Off
    /// unless given; the client port always wants TLS with a client
    /// certificate.
    #[arg(long, env = "SKIFF_INSECURE_CLIENT_LISTEN", value_parser = crate::api::parse_loopback)]
    pub insecure_client_listen: Option<SocketAddr>,
    #[command(flatten)]
    pub maintenance: StoreMaintenanceFlags,
}

/// The space quota and the corruption check, as etcd's flags.
#[derive(Debug, Clone, Default, Args)]
pub struct StoreMaintenanceFlags {
    /// Bytes the member's database may take before it raises the NOSPACE
    /// alarm and refuses writes that add to it (puts, txns with puts, lease
    /// grants) until compacted, defragmented and disarmed (etcd's
    /// --quota-backend-bytes); 0 means the default, 2 GiB.
    #[arg(long, env = "SKIFF_QUOTA_BACKEND_BYTES", default_value_t = 0)]
    pub quota_backend_bytes: u64,
    /// How often the leader compares every member's key history hash and
    /// raises the CORRUPT alarm for one that disagrees, after which writes
    /// are refused (etcd's --experimental-corrupt-check-time), e.g. 5m;
    /// off unless given (0s is off too).
    #[arg(
        long,
        env = "SKIFF_CORRUPT_CHECK_INTERVAL",
        alias = "experimental-corrupt-check-time",
        value_parser = crate::control_plane::parse_duration
    )]
    pub corrupt_check_interval: Option<Duration>,
    /// Bytes the member keeps allocated in the file `reserved-space` of its
    /// data directory and gives back to itself when the file system runs
    /// short, raising the NOSPACE alarm before its log or database finds
    /// the disk full; 0 turns the guard off, and a full disk then stops
    /// the member (exit status 74) until space is freed.
    #[arg(long, env = "SKIFF_RESERVED_SPACE_BYTES", default_value_t = skiff_store::node::DEFAULT_RESERVED_SPACE_BYTES)]
    pub reserved_space_bytes: u64,
}

impl StoreMaintenanceFlags {
    pub fn apply(&self, config: &mut StoreConfig) {
        config.quota_backend_bytes = self.quota_backend_bytes;
        config.reserved_space_bytes = self.reserved_space_bytes;
        config.corrupt_check_interval = self.corrupt_check_interval.filter(|d| !d.is_zero());
    }

    /// The same flags for a member process started with them.
    pub fn to_args(&self) -> Vec<String> {
        let mut args = Vec::new();
        if self.quota_backend_bytes != 0 {
            args.extend([
                "--quota-backend-bytes".to_string(),
                self.quota_backend_bytes.to_string(),
            ]);
        }
        if self.reserved_space_bytes != skiff_store::node::DEFAULT_RESERVED_SPACE_BYTES {
            args.extend([
                "--reserved-space-bytes".to_string(),
                self.reserved_space_bytes.to_string(),
            ]);
        }
        if let Some(every) = self.corrupt_check_interval {
            args.extend([
                "--corrupt-check-interval".to_string(),
                format!("{}ms", every.as_millis()),
            ]);
        }
        args
    }
}

/// `skiff store`: a member alone, with where its certificates are kept.
#[derive(Debug, Clone, Args)]
pub struct StoreCommand {
    #[command(flatten)]
    pub store: StoreArgs,
    /// Where the store's CA and certificates are kept, in an `etcd`
    /// directory inside (created on first start) [default: DATA_DIR/pki].
    /// Every member of a cluster needs the same CA.
    #[arg(long, env = "SKIFF_PKI_DIR")]
    pub pki_dir: Option<PathBuf>,
    /// More names or addresses for the member's certificates (beside
    /// localhost, 127.0.0.1, this host's name and its addresses).
    #[arg(long, value_delimiter = ',')]
    pub tls_san: Vec<String>,
}

/// The store's CA and the extra names for its members' certificates.
#[derive(Debug, Clone)]
pub struct StoreSecurity {
    pub pki: std::sync::Arc<crate::pki::Pki>,
    pub tls_sans: Vec<String>,
}

impl StoreSecurity {
    /// The store CA under `pki_dir`, made on first start.
    pub fn ensure(pki_dir: &std::path::Path, tls_sans: &[String]) -> Result<StoreSecurity> {
        Ok(StoreSecurity {
            pki: crate::pki::Pki::ensure_store(pki_dir)?,
            tls_sans: tls_sans.to_vec(),
        })
    }

    /// The etcdctl flags that reach a member with the kept client
    /// certificate.
    pub fn etcdctl_flags(&self) -> String {
        let dir = self.pki.dir();
        format!(
            "--cacert {} --cert {} --key {}",
            dir.join(crate::pki::STORE_CA_CERT).display(),
            dir.join(crate::pki::STORE_CLIENT_CERT).display(),
            dir.join(crate::pki::STORE_CLIENT_KEY).display()
        )
    }
}

/// `--initial-cluster`, parsed: (name, peer address) of every member.
#[derive(Debug, Clone)]
pub struct InitialCluster(pub Vec<(String, SocketAddr)>);

fn parse_initial_cluster(spec: &str) -> Result<InitialCluster, String> {
    ClusterConfig::parse_initial_cluster(spec)
        .map(InitialCluster)
        .map_err(|err| err.to_string())
}

fn parse_state(state: &str) -> Result<InitialClusterState, String> {
    state
        .parse()
        .map_err(|err: skiff_store::StoreError| err.to_string())
}

impl StoreArgs {
    /// The cluster this member belongs to, checked before anything is opened.
    fn cluster_config(&self) -> Result<Option<ClusterConfig>> {
        let Some(InitialCluster(members)) = &self.initial_cluster else {
            if let Some(peer) = self.peer_listen {
                tracing::warn!(%peer, "--peer-listen is ignored without --initial-cluster: a member alone has no peers");
            }
            return Ok(None);
        };
        let Some(advertised) = members.iter().find(|(name, _)| *name == self.name) else {
            let names: Vec<&str> = members.iter().map(|(name, _)| name.as_str()).collect();
            bail!(
                "member name {:?} is not in --initial-cluster ({}); pass --name with one of those names",
                self.name,
                names.join(", ")
            );
        };
        let cluster = ClusterConfig {
            name: self.name.clone(),
            peer_listen: self.peer_listen.unwrap_or(advertised.1),
            initial_cluster: members.clone(),
            initial_cluster_state: self.initial_cluster_state,
            initial_cluster_token: self.initial_cluster_token.clone(),
        };
        cluster.identity()?;
        Ok(Some(cluster))
    }
}

/// Runs the member until SIGINT or SIGTERM, then closes it cleanly.
pub async fn run(command: StoreCommand) -> Result<()> {
    let pki_dir = command
        .pki_dir
        .clone()
        .unwrap_or_else(|| command.store.data_dir.join(crate::pki::DEFAULT_DIR));
    let security = StoreSecurity::ensure(&pki_dir, &command.tls_san)?;
    run_member(command.store, security, None).await
}

/// Where a member also serves the Kubernetes API.
#[derive(Debug, Clone)]
pub struct ApiServing {
    pub listen: String,
    /// Written once the API listens: a kubeconfig for kubectl.
    pub kubeconfig: PathBuf,
    /// The scheduler's KubeSchedulerConfiguration file, if not the default.
    pub scheduler_config: Option<PathBuf>,
    /// Whether the scheduler runs beside the API.
    pub scheduler: bool,
    /// The kubelet run beside the API (`skiff up`), if any.
    pub node: Option<crate::up::LocalNode>,
    /// Whether the controller-manager runs beside the API, and which
    /// controllers.
    pub controller_manager: bool,
    pub controllers: crate::control_plane::ControllerFlags,
    /// Where the scheduler's and the controller-manager's secure ports listen.
    pub secure_ports: crate::control_plane::SecurePortFlags,
    /// How long Events are kept.
    pub events: crate::api::EventFlags,
    /// Where Services' addresses come from.
    pub services: crate::api::ServiceRangeFlags,
    /// The API's request limits and audit log.
    pub serve: skiff_apiserver::ServeOptions,
    /// Encryption at rest, if configured.
    pub encryption: Option<std::sync::Arc<skiff_apiserver::storage::Encryption>>,
    /// TLS, credentials, and the plain-HTTP port if asked for.
    pub security: crate::api::Security,
}

/// Runs a store member, and the Kubernetes API over it if `api` is given,
/// until SIGINT or SIGTERM, then closes both cleanly.
pub async fn run_member(
    args: StoreArgs,
    security: StoreSecurity,
    api: Option<ApiServing>,
) -> Result<()> {
    let cluster = args.cluster_config()?;
    let scheduler_config = match &api {
        Some(api) if api.scheduler => Some(crate::control_plane::scheduler_config(
            api.scheduler_config.as_deref(),
        )?),
        _ => None,
    };
    let mut signals = StopSignals::register()?;
    let listener = TcpListener::bind(&args.client_listen)
        .await
        .with_context(|| {
            format!(
                "cannot listen for clients on {}; is another store or etcd running there? \
                 choose another --client-listen",
                args.client_listen
            )
        })?;
    let client_addr = listener
        .local_addr()
        .context("reading the client listener's address")?;
    let peer_addr = cluster.as_ref().map(|c| c.peer_listen);
    let tls = {
        let client_sans = crate::pki::serving_names(&client_addr, &security.tls_sans);
        let mut peer_sans = Vec::new();
        if let Some(cluster) = &cluster {
            peer_sans = crate::pki::serving_names(&cluster.peer_listen, &security.tls_sans);
            // Peers dial the address --initial-cluster gives, which they
            // check the certificate against.
            for (name, addr) in &cluster.initial_cluster {
                if *name == cluster.name && !addr.ip().is_unspecified() {
                    peer_sans.push(addr.ip().to_string());
                }
            }
        }
        security
            .pki
            .store_tls(&args.name, &client_sans, &peer_sans)?
    };
    // Made now, so that etcdctl can use it as soon as the member serves.
    security.pki.store_client()?;
    let mut client_listeners = vec![skiff_store::grpc::ClientListener {
        listener,
        tls: Some(tls.clients),
    }];
    let mut plain_client_url = None;
    if let Some(plain) = args.insecure_client_listen {
        let listener = TcpListener::bind(plain).await.with_context(|| {
            format!("cannot listen for plain-HTTP clients on {plain} (--insecure-client-listen)")
        })?;
        plain_client_url = Some(format!("http://{}", listener.local_addr()?));
        client_listeners.push(skiff_store::grpc::ClientListener::plain(listener));
    }

    let mut config = StoreConfig::new(&args.data_dir);
    config.name = args.name.clone();
    // Every URL clients reach this member at, as etcd lists its
    // advertised client URLs.
    config.client_urls = vec![format!("https://{client_addr}")];
    config.client_urls.extend(plain_client_url);
    if cluster.is_none() {
        // etcd alone lists the peer URL it listens at (by default
        // http://localhost:2380); skiff alone does not listen, and lists
        // where it would, in the form its peers speak (TLS).
        let peer = args.peer_listen.unwrap_or(DEFAULT_PEER_LISTEN);
        config.peer_urls = vec![format!("https://{peer}")];
    }
    config.peer_tls = Some(tls.peers);
    config.catch_up_entries = args.snapshot_catch_up_entries;
    args.maintenance.apply(&mut config);
    config.cluster = cluster;
    let store = Store::open(config).await.with_context(|| {
        format!(
            "cannot open store member {} in {}",
            args.name,
            args.data_dir.display()
        )
    })?;

    let bound = match &api {
        Some(api) => Some(crate::api::bind(&api.listen, &api.security).await?),
        None => None,
    };
    let (stop_api, api_stopped) = oneshot::channel::<()>();
    let mut local_api = None;
    let mut api_task = match (bound, &api) {
        (Some((listeners, local)), Some(api)) => {
            local.write_admin_kubeconfig(&api.kubeconfig)?;
            let mut storage = skiff_apiserver::Storage::local(store.clone());
            if let Some(encryption) = &api.encryption {
                storage = storage.with_encryption(encryption.clone());
            }
            let registry = api.services.apply(
                api.events.apply(
                    skiff_apiserver::Registry::new(storage)
                        .with_token_issuer(api.security.pki.token_issuer()?)
                        .with_kubelet_client(api.security.pki.kubelet_client()?),
                ),
            )?;
            tracing::info!(addr = %local.addr, kubeconfig = %api.kubeconfig.display(), "serving the Kubernetes API");
            let mut options = api.serve.clone();
            options.authn = api.security.authn.clone();
            options.authorization = api.security.authorization;
            options.in_process = Some(local.in_process.clone());
            local_api = Some((local, api.kubeconfig.clone()));
            Some(tokio::spawn(skiff_apiserver::serve(
                listeners,
                registry,
                options,
                async move {
                    let _ = api_stopped.await;
                },
            )))
        }
        _ => None,
    };
    let (stop_serving, stopped) = oneshot::channel::<()>();
    let mut serving = tokio::spawn(skiff_store::grpc::serve(
        store.clone(),
        client_listeners,
        async move {
            let _ = stopped.await;
        },
    ));
    let (controllers, settings, secure_ports) = match &api {
        Some(api) => (
            api.controllers.chosen(api.controller_manager)?,
            api.controllers.settings(),
            Some(api.secure_ports.clone()),
        ),
        None => (Vec::new(), Default::default(), None),
    };
    let control_plane = match (&local_api, &secure_ports) {
        (Some((local, _)), Some(ports)) => {
            crate::control_plane::ControlPlane::start(
                local,
                &args.name,
                scheduler_config,
                controllers,
                settings,
                ports,
            )
            .await?
        }
        _ => None,
    };
    let kubelet = match (&local_api, api.as_ref().and_then(|a| a.node.as_ref())) {
        (Some((local, _)), Some(node)) => node.start(local).await,
        _ => None,
    };
    print_ready(
        &args.name,
        &store,
        (client_addr, &security),
        peer_addr,
        local_api.as_ref(),
    );
    if let Some(ports) = control_plane.as_ref().and_then(|c| c.secure_ports()) {
        // As the ready line: a closed stdout must not stop the member.
        use std::io::Write;
        let _ = writeln!(std::io::stdout(), "{ports}");
    }

    let removed = {
        let store = store.clone();
        async move {
            while !store.is_removed() {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    };
    let outcome = tokio::select! {
        name = signals.recv() => {
            tracing::info!(signal = name, "stopping: no new clients, then closing the store");
            Ok(())
        }
        Some(served) = async { match api_task.as_mut() { Some(task) => Some(task.await), None => None } } => Err(match served {
            Ok(Ok(())) => anyhow::anyhow!("the Kubernetes API stopped by itself"),
            Ok(Err(err)) => anyhow::Error::new(err).context("serving the Kubernetes API failed"),
            Err(err) => anyhow::Error::new(err).context("the Kubernetes API task failed"),
        }),
        () = removed => {
            tracing::error!("this member was removed from the cluster; stopping (to bring it back, add it again and start it with an empty --data-dir and --initial-cluster-state existing)");
            Ok(())
        }
        served = &mut serving => Err(match served {
            Ok(Ok(())) => anyhow::anyhow!("the client API stopped by itself"),
            Ok(Err(err)) => anyhow::Error::new(err).context("serving clients failed"),
            Err(err) => anyhow::Error::new(err).context("the client API task failed"),
        }),
    };
    signals.exit_on_next("closing the store");
    if let Some(kubelet) = kubelet {
        kubelet.stop().await;
    }
    if let Some(control_plane) = control_plane {
        control_plane.stop().await;
    }
    let _ = stop_api.send(());
    if let Some(mut task) = api_task.take() {
        if !task.is_finished()
            && tokio::time::timeout(CLIENT_DRAIN_TIMEOUT, &mut task)
                .await
                .is_err()
        {
            task.abort();
        }
    }
    let _ = stop_serving.send(());
    if !serving.is_finished()
        && tokio::time::timeout(CLIENT_DRAIN_TIMEOUT, &mut serving)
            .await
            .is_err()
    {
        tracing::info!(timeout = ?CLIENT_DRAIN_TIMEOUT, "clients still connected; closing the store under them");
        serving.abort();
    }
    store.close().await.context("closing the store")?;
    tracing::info!(name = %args.name, "store closed");
    outcome
}

/// One line on stdout that says the member serves, and where.
fn print_ready(
    name: &str,
    store: &Store,
    (client, security): (SocketAddr, &StoreSecurity),
    peer: Option<SocketAddr>,
    api: Option<&(crate::api::LocalApi, PathBuf)>,
) {
    let peer = match peer {
        Some(peer) => format!("peer {peer}"),
        None => "alone (no peers)".to_string(),
    };
    let mut line = format!(
        "skiff store {name} ready: client {client}, {peer}, member id {:x}, cluster id {:x}",
        store.member_id(),
        store.cluster_id()
    );
    line.push_str(&format!(
        "\netcdctl --endpoints https://{client} {} member list",
        security.etcdctl_flags()
    ));
    if let Some((api, kubeconfig)) = api {
        line.push_str(&format!(
            "\nKubernetes API: {}; kubectl --kubeconfig {} get namespaces",
            api.url(),
            kubeconfig.display()
        ));
        if let Some(plain) = api.insecure {
            line.push_str(&format!(
                "\nplain HTTP on loopback, no authentication: http://{plain}"
            ));
        }
    }
    // A closed stdout must not stop the member.
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "{line}").and_then(|()| stdout.flush());
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Flags {
        #[command(flatten)]
        maintenance: StoreMaintenanceFlags,
    }

    fn parse(args: &[&str]) -> Result<StoreMaintenanceFlags, clap::Error> {
        let all = std::iter::once("skiff").chain(args.iter().copied());
        Flags::try_parse_from(all).map(|f| f.maintenance)
    }

    #[test]
    fn quota_and_corruption_check_flags_reach_the_store_and_the_members() {
        let defaults = parse(&[]).unwrap();
        let mut config = StoreConfig::new("d");
        defaults.apply(&mut config);
        assert_eq!(config.quota_backend_bytes, 0, "0: the store's default");
        assert_eq!(config.corrupt_check_interval, None);
        assert_eq!(
            config.reserved_space_bytes,
            skiff_store::node::DEFAULT_RESERVED_SPACE_BYTES
        );
        assert!(defaults.to_args().is_empty());

        let given = parse(&[
            "--quota-backend-bytes",
            "16777216",
            "--corrupt-check-interval",
            "1m30s",
            "--reserved-space-bytes",
            "0",
        ])
        .unwrap();
        given.apply(&mut config);
        assert_eq!(config.quota_backend_bytes, 16 << 20);
        assert_eq!(config.reserved_space_bytes, 0, "0: the guard is off");
        assert_eq!(config.corrupt_check_interval, Some(Duration::from_secs(90)));
        let args = given.to_args();
        let again = parse(&args.iter().map(String::as_str).collect::<Vec<_>>()).unwrap();
        assert_eq!(again.quota_backend_bytes, 16 << 20);
        assert_eq!(again.corrupt_check_interval, Some(Duration::from_secs(90)));
        assert_eq!(again.reserved_space_bytes, 0);

        let etcds = parse(&["--experimental-corrupt-check-time", "2m"]).unwrap();
        assert_eq!(etcds.corrupt_check_interval, Some(Duration::from_secs(120)));
        let off = parse(&["--corrupt-check-interval", "0s"]).unwrap();
        off.apply(&mut config);
        assert_eq!(
            config.corrupt_check_interval, None,
            "0s is off, as etcd's 0"
        );
        assert!(parse(&["--quota-backend-bytes", "-1"]).is_err());
        assert!(parse(&["--corrupt-check-interval", "often"]).is_err());
    }
}
