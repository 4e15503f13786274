//! `skiff up`: the embedded default — one store member and the Kubernetes
//! API over it in this process, data in one directory, a kubeconfig beside
//! it. `skiff server`: one member of a replicated cluster, serving the API
//! too.

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;

use crate::store::{run_member, ApiServing, StoreArgs, StoreSecurity};

#[derive(Debug, Clone, Args)]
pub struct UpArgs {
    /// Where the store's data and the kubeconfig go (created if absent).
    #[arg(long, env = "SKIFF_DATA_DIR", default_value = "./skiff-data")]
    pub data_dir: PathBuf,
    /// Address (host:port) of the Kubernetes API (HTTPS).
    #[arg(long, env = "SKIFF_API_LISTEN", default_value = "127.0.0.1:6443")]
    pub api_listen: String,
    /// Address (host:port) of the store's etcd v3 API, for etcdctl.
    #[arg(long, env = "SKIFF_CLIENT_LISTEN", default_value = "127.0.0.1:2379")]
    pub client_listen: String,
    /// Also serve the store's etcd v3 API over plain HTTP/2 on this
    /// loopback address, without client certificates. Off unless given.
    #[arg(long, env = "SKIFF_INSECURE_CLIENT_LISTEN", value_parser = crate::api::parse_loopback)]
    pub insecure_client_listen: Option<std::net::SocketAddr>,
    /// Serve the API over these etcd v3 endpoints (skiff members or real
    /// etcd, comma-separated host:port) instead of a store in this process.
    #[arg(long, env = "SKIFF_STORE_ENDPOINTS", value_delimiter = ',')]
    pub store_endpoints: Vec<String>,
    /// For `https://` store endpoints: the CA, client certificate and key
    /// (PEM files, as kube-apiserver's --etcd-cafile, --etcd-certfile and
    /// --etcd-keyfile) [default: the PKI directory's etcd/ca.crt,
    /// client.crt and client.key, as skiff members make them].
    #[arg(long, requires_all = ["store_certfile", "store_keyfile"])]
    pub store_cafile: Option<PathBuf>,
    #[arg(long, requires = "store_cafile")]
    pub store_certfile: Option<PathBuf>,
    #[arg(long, requires = "store_cafile")]
    pub store_keyfile: Option<PathBuf>,
    /// A KubeSchedulerConfiguration file for the scheduler run beside the
    /// API [default: kube-scheduler's default profile].
    #[arg(long)]
    pub scheduler_config: Option<PathBuf>,
    /// Run the scheduler beside the API (leader-elected); `false` serves
    /// the API alone.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub scheduler: bool,
    /// Run the controller-manager beside the API (leader-elected);
    /// `false` runs no controllers.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub controller_manager: bool,
    #[command(flatten)]
    pub controllers: crate::control_plane::ControllerFlags,
    #[command(flatten)]
    pub secure_ports: crate::control_plane::SecurePortFlags,
    #[command(flatten)]
    pub events: crate::api::EventFlags,
    #[command(flatten)]
    pub services: crate::api::ServiceRangeFlags,
    #[command(flatten)]
    pub store_maintenance: crate::store::StoreMaintenanceFlags,
    /// Run a kubelet for this host beside the API, its state in
    /// DATA_DIR/kubelet; `false` runs no node.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub kubelet: bool,
    #[command(flatten)]
    pub node: crate::kubelet::NodeArgs,
    #[command(flatten)]
    pub limits: crate::limits::LimitFlags,
    #[command(flatten)]
    pub audit: crate::audit::AuditFlags,
    #[command(flatten)]
    pub security: crate::api::SecurityFlags,
    /// An EncryptionConfiguration file: which resources are encrypted in
    /// the store, and with which keys [default:
    /// DATA_DIR/encryption-config.yaml, created with a new AES-GCM key
    /// for Secrets].
    #[arg(long)]
    pub encryption_provider_config: Option<PathBuf>,
}

impl UpArgs {
    /// The encryption configuration: the one given, else the data
    /// directory's (created on first start).
    fn encryption(&self) -> Result<std::sync::Arc<skiff_apiserver::storage::Encryption>> {
        let path = match &self.encryption_provider_config {
            Some(path) => path.clone(),
            None => crate::encryption::ensure_config(
                &self.data_dir.join(crate::encryption::DEFAULT_FILE),
            )?,
        };
        crate::encryption::load(&path)
    }
    /// The credentials for `https://` store endpoints.
    fn store_tls(&self, pki_dir: &std::path::Path) -> Result<tonic::transport::ClientTlsConfig> {
        use tonic::transport::{Certificate, ClientTlsConfig, Identity};
        let (Some(ca), Some(cert), Some(key)) = (
            &self.store_cafile,
            &self.store_certfile,
            &self.store_keyfile,
        ) else {
            return crate::client::store_tls(pki_dir);
        };
        let read = |path: &PathBuf| {
            std::fs::read_to_string(path)
                .map_err(|err| anyhow::anyhow!("cannot read {}: {err}", path.display()))
        };
        Ok(ClientTlsConfig::new()
            .ca_certificate(Certificate::from_pem(read(ca)?))
            .identity(Identity::from_pem(read(cert)?, read(key)?)))
    }

    /// The kubelet to run beside the API, if any. Its cluster DNS left
    /// at the default follows the Service range: the range's tenth
    /// address, where the API keeps the `kube-dns` Service.
    fn local_node(&self) -> Option<LocalNode> {
        let mut args = self.node.clone();
        let default_dns: Vec<std::net::IpAddr> = vec![[10, 96, 0, 10].into()];
        if args.cluster_dns == default_dns {
            if let Ok(ranges) = skiff_apiserver::service_alloc::ServiceRanges::parse(
                &self.services.service_cluster_ip_range,
                &self.services.service_node_port_range,
            ) {
                args.cluster_dns = vec![ranges.dns_ip().into()];
            }
        }
        self.kubelet.then(|| LocalNode {
            args,
            root_dir: self.data_dir.join("kubelet"),
        })
    }
}

/// The kubelet `skiff up` runs for its host.
#[derive(Debug, Clone)]
pub struct LocalNode {
    pub args: crate::kubelet::NodeArgs,
    pub root_dir: PathBuf,
}

impl LocalNode {
    /// Starts it for the API at `api`; an error is logged, not fatal: the
    /// API serves without a node.
    pub async fn start(&self, api: &crate::api::LocalApi) -> Option<crate::kubelet::LocalKubelet> {
        match crate::kubelet::LocalKubelet::start(api, &self.args, &self.root_dir).await {
            Ok(kubelet) => Some(kubelet),
            Err(err) => {
                tracing::error!(error = %crate::one_line(&err), "not starting the kubelet");
                None
            }
        }
    }
}

pub async fn up(mut args: UpArgs) -> Result<()> {
    if args.controllers.host_path_provisioner_dir.is_none() {
        let volumes = std::path::absolute(args.data_dir.join("volumes"))?;
        args.controllers.host_path_provisioner_dir = Some(volumes);
    }
    if !args.store_endpoints.is_empty() {
        return api_only(args).await;
    }
    let node = args.local_node();
    let encryption = Some(args.encryption()?);
    let store = StoreArgs {
        name: "default".into(),
        data_dir: args.data_dir.join("store"),
        client_listen: args.client_listen,
        peer_listen: None,
        initial_cluster: None,
        initial_cluster_token: String::new(),
        initial_cluster_state: Default::default(),
        snapshot_catch_up_entries: skiff_store::raft::CATCH_UP_ENTRIES,
        insecure_client_listen: args.insecure_client_listen,
        maintenance: args.store_maintenance.clone(),
    };
    let security = args
        .security
        .resolve(&args.data_dir)?
        .with_names(args.services.kubernetes_names());
    let store_security = StoreSecurity::ensure(security.pki.dir(), &security.tls_sans)?;
    let api = ApiServing {
        kubeconfig: args.data_dir.join("kubeconfig"),
        node,
        listen: args.api_listen,
        scheduler_config: args.scheduler_config,
        scheduler: args.scheduler,
        controller_manager: args.controller_manager,
        controllers: args.controllers,
        secure_ports: args.secure_ports,
        events: args.events,
        services: args.services,
        serve: skiff_apiserver::ServeOptions {
            limits: args.limits.apply(),
            audit: Some(args.audit.auditor(&args.data_dir)?),
            authn: Default::default(),
            authorization: Default::default(),
            in_process: None,
        },
        encryption,
        security,
    };
    run_member(store, store_security, Some(api)).await
}

/// The API alone, over a store reached through etcd's v3 API.
async fn api_only(args: UpArgs) -> Result<()> {
    let scheduler_config =
        crate::control_plane::scheduler_config(args.scheduler_config.as_deref())?;
    let security = args
        .security
        .resolve(&args.data_dir)?
        .with_names(args.services.kubernetes_names());
    let tls = match args
        .store_endpoints
        .iter()
        .any(|e| e.starts_with("https://"))
    {
        false => None,
        true => Some(args.store_tls(security.pki.dir())?),
    };
    let storage =
        skiff_apiserver::storage::EtcdStorage::connect(&args.store_endpoints, tls.as_ref())
            .map_err(|err| anyhow::anyhow!(err))?;
    let storage = skiff_apiserver::Storage::etcd(storage).with_encryption(args.encryption()?);
    let registry = args.services.apply(
        args.events.apply(
            skiff_apiserver::Registry::new(storage)
                .with_token_issuer(security.pki.token_issuer()?)
                .with_kubelet_client(security.pki.kubelet_client()?),
        ),
    )?;
    let mut signals = crate::shutdown::StopSignals::register()?;
    let (listeners, local) = crate::api::bind(&args.api_listen, &security).await?;
    let kubeconfig = args.data_dir.join("kubeconfig");
    local.write_admin_kubeconfig(&kubeconfig)?;
    println!(
        "skiff up ready: API {} over the store at {}; kubeconfig {}",
        local.url(),
        args.store_endpoints.join(","),
        kubeconfig.display()
    );
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let options = skiff_apiserver::ServeOptions {
        limits: args.limits.apply(),
        audit: Some(args.audit.auditor(&args.data_dir)?),
        authn: security.authn.clone(),
        authorization: security.authorization,
        in_process: Some(local.in_process.clone()),
    };
    let mut serving = tokio::spawn(skiff_apiserver::serve(
        listeners,
        registry,
        options,
        async move {
            let _ = stopped.await;
        },
    ));
    let controllers = args.controllers.chosen(args.controller_manager)?;
    let control_plane = crate::control_plane::ControlPlane::start(
        &local,
        "up",
        args.scheduler.then_some(scheduler_config),
        controllers,
        args.controllers.settings(),
        &args.secure_ports,
    )
    .await?;
    if let Some(ports) = control_plane.as_ref().and_then(|c| c.secure_ports()) {
        println!("{ports}");
    }
    let kubelet = match args.local_node() {
        Some(node) => node.start(&local).await,
        None => None,
    };
    tokio::select! {
        name = signals.recv() => tracing::info!(signal = name, "stopping the API"),
        served = &mut serving => {
            return match served {
                Ok(Ok(())) => Ok(()),
                Ok(Err(err)) => Err(anyhow::Error::new(err).context("serving the Kubernetes API failed")),
                Err(err) => Err(anyhow::Error::new(err).context("the API task failed")),
            };
        }
    }
    signals.exit_on_next("stopping the API");
    if let Some(kubelet) = kubelet {
        kubelet.stop().await;
    }
    if let Some(control_plane) = control_plane {
        control_plane.stop().await;
    }
    let _ = stop.send(());
    if tokio::time::timeout(std::time::Duration::from_secs(3), &mut serving)
        .await
        .is_err()
    {
        serving.abort();
    }
    Ok(())
}

#[derive(Debug, Clone, Args)]
pub struct ServerArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    /// Address (host:port) of the Kubernetes API (HTTPS).
    #[arg(long, env = "SKIFF_API_LISTEN", default_value = "127.0.0.1:6443")]
    pub api_listen: String,
    /// Where to write the kubeconfig for this member's API [default:
    /// DATA_DIR/kubeconfig].
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// A KubeSchedulerConfiguration file for the scheduler run beside the
    /// API [default: kube-scheduler's default profile].
    #[arg(long)]
    pub scheduler_config: Option<PathBuf>,
    /// Run the scheduler beside the API (leader-elected); `false` serves
    /// the API alone.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub scheduler: bool,
    /// Run the controller-manager beside the API (leader-elected);
    /// `false` runs no controllers.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub controller_manager: bool,
    #[command(flatten)]
    pub controllers: crate::control_plane::ControllerFlags,
    #[command(flatten)]
    pub secure_ports: crate::control_plane::SecurePortFlags,
    #[command(flatten)]
    pub events: crate::api::EventFlags,
    #[command(flatten)]
    pub services: crate::api::ServiceRangeFlags,
    #[command(flatten)]
    pub limits: crate::limits::LimitFlags,
    #[command(flatten)]
    pub audit: crate::audit::AuditFlags,
    #[command(flatten)]
    pub security: crate::api::SecurityFlags,
    /// An EncryptionConfiguration file: which resources are encrypted in
    /// the store, and with which keys. Every member of a cluster needs the
    /// same one (`skiff cluster up` gives them one). Without it, Secrets
    /// are stored in plaintext.
    #[arg(long)]
    pub encryption_provider_config: Option<PathBuf>,
}

pub async fn server(args: ServerArgs) -> Result<()> {
    let encryption = match &args.encryption_provider_config {
        Some(path) => Some(crate::encryption::load(path)?),
        None => {
            tracing::warn!("no --encryption-provider-config: Secrets are stored in plaintext");
            None
        }
    };
    let kubeconfig = args
        .kubeconfig
        .unwrap_or_else(|| args.store.data_dir.join("kubeconfig"));
    let kubernetes_names = args.services.kubernetes_names();
    let api = ApiServing {
        listen: args.api_listen,
        kubeconfig,
        scheduler_config: args.scheduler_config,
        scheduler: args.scheduler,
        node: None,
        controller_manager: args.controller_manager,
        controllers: args.controllers,
        secure_ports: args.secure_ports,
        events: args.events,
        services: args.services,
        serve: skiff_apiserver::ServeOptions {
            limits: args.limits.apply(),
            audit: Some(args.audit.auditor(&args.store.data_dir)?),
            authn: Default::default(),
            authorization: Default::default(),
            in_process: None,
        },
        encryption,
        security: args
            .security
            .resolve(&args.store.data_dir)?
            .with_names(kubernetes_names),
    };
    let store_security = StoreSecurity::ensure(api.security.pki.dir(), &api.security.tls_sans)?;
    run_member(args.store, store_security, Some(api)).await
}
