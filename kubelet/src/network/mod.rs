//! The pods' network: each pod that is not `hostNetwork` gets a network
//! namespace of its own (its sandbox, which every container of the pod
//! joins) attached through CNI, and the address the network gave it. Where
//! the host cannot (not root, no network namespaces) pods share the host's
//! network, as before, and the Node says so.

pub mod cni;
pub mod files;
pub mod hostgw;
pub mod netns;
pub mod resolv;

use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::Pod;
use serde_json::{json, Map};

use cni::{Addresses, Attachment, Cni, CniError, NetworkList, PortMapping};

/// Where the standard plugins are: Debian's `containernetworking-plugins`
/// package, then the upstream layout.
pub const DEFAULT_CNI_BIN_DIRS: &[&str] = &["/usr/lib/cni", "/opt/cni/bin"];

/// The file skiff's runtime writes in `--cni-conf-dir` when it holds no
/// configuration.
pub const DEFAULT_CONFLIST: &str = "10-skiff.conflist";

/// The prefix of the namespaces of this kubelet's pods in [`netns::NETNS_DIR`].
pub const NETNS_PREFIX: &str = "skiff-";

/// How the kubelet gives pods their network.
#[derive(Debug, Clone)]
pub struct NetworkConfig {
    /// Where the network configuration is read (`--cni-conf-dir`).
    pub conf_dir: PathBuf,
    /// Where the plugins are (`--cni-bin-dir`).
    pub bin_dirs: Vec<PathBuf>,
    /// Where namespaces are kept (`/run/netns`).
    pub netns_dir: PathBuf,
    /// Where the kubelet keeps CNI results and the default network's
    /// address allocations.
    pub state_dir: PathBuf,
    /// The bridge of the default network.
    pub bridge: String,
    /// The cluster DNS pods of the `ClusterFirst` policies resolve
    /// through (`--cluster-dns`).
    pub cluster_dns: Vec<std::net::IpAddr>,
    /// The cluster domain of their search paths (`--cluster-domain`).
    pub cluster_domain: String,
}

/// A pod's network once set up: its namespace and addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sandbox {
    pub netns: PathBuf,
    pub ips: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum NetworkError {
    #[error("network plugin is not ready: {0}")]
    NotReady(String),
    #[error("failed to create the pod's network namespace {}: {source}", path.display())]
    Namespace {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("failed to set up the pod's network: {0}")]
    Cni(#[from] CniError),
    #[error("the network gave the pod no address")]
    NoAddress,
}

/// Why pods share the host's network on this host, or `None` when they
/// can have their own: root, and network namespaces the kernel makes.
pub fn unavailable_reason() -> Option<String> {
    if unsafe { libc::geteuid() } != 0 {
        return Some("the kubelet is not running as root".into());
    }
    if !Path::new("/proc/self/ns/net").exists() {
        return Some("the kernel has no network namespaces".into());
    }
    None
}

/// Why the network cannot be used, or `None` when it can: without a
/// configuration of its own in `--cni-conf-dir`, the default network
/// needs the standard plugins in `--cni-bin-dir`.
pub fn missing_plugins(config: &NetworkConfig) -> Option<String> {
    if NetworkList::load(&config.conf_dir).is_ok() {
        return None;
    }
    let needed = ["bridge", "host-local", "portmap", "loopback"];
    let missing: Vec<&str> = needed
        .iter()
        .copied()
        .filter(|plugin| !config.bin_dirs.iter().any(|d| d.join(plugin).is_file()))
        .collect();
    if missing.is_empty() {
        return None;
    }
    let dirs: Vec<String> = config
        .bin_dirs
        .iter()
        .map(|d| d.display().to_string())
        .collect();
    Some(format!(
        "the CNI plugins {} are not in {} (apt-get install containernetworking-plugins), and {} holds no network configuration",
        missing.join(", "),
        dirs.join(", "),
        config.conf_dir.display()
    ))
}

/// The pod network of one kubelet.
#[derive(Debug, Clone)]
pub struct PodNetwork {
    config: NetworkConfig,
    cni: Cni,
}

impl PodNetwork {
    pub fn new(config: NetworkConfig) -> PodNetwork {
        let cni = Cni {
            bin_dirs: config.bin_dirs.clone(),
            cache_dir: config.state_dir.join("results"),
        };
        PodNetwork { config, cni }
    }

    pub fn config(&self) -> &NetworkConfig {
        &self.config
    }

    /// Writes the default network for the Node's pod CIDRs unless
    /// `--cni-conf-dir` already holds a configuration (a user's, or ours
    /// from before, which a Node keeps as long as it lives).
    pub fn write_default_config(&self, pod_cidrs: &[String]) -> Result<Option<PathBuf>, CniError> {
        if NetworkList::load(&self.config.conf_dir).is_ok() {
            return Ok(None);
        }
        let io = |action, path: &Path, source| CniError::Io {
            action,
            path: path.to_path_buf(),
            source,
        };
        std::fs::create_dir_all(&self.config.conf_dir)
            .map_err(|e| io("create", &self.config.conf_dir, e))?;
        let list = cni::default_conflist(
            &self.config.bridge,
            pod_cidrs,
            &self.config.state_dir.join("networks"),
        );
        let path = self.config.conf_dir.join(DEFAULT_CONFLIST);
        let text = serde_json::to_vec_pretty(&list).expect("JSON values serialize");
        std::fs::write(&path, text).map_err(|e| io("write", &path, e))?;
        Ok(Some(path))
    }

    /// The cluster DNS the pods' resolver configurations point at.
    fn cluster_dns(&self) -> resolv::ClusterDns<'_> {
        resolv::ClusterDns {
            servers: &self.config.cluster_dns,
            domain: &self.config.cluster_domain,
        }
    }

    /// The network pods are attached to, or why there is none yet.
    pub fn network(&self) -> Result<NetworkList, NetworkError> {
        NetworkList::load(&self.config.conf_dir).map_err(|e| NetworkError::NotReady(e.to_string()))
    }

    /// The namespace of the pod with `uid`.
    pub fn netns_path(&self, uid: &str) -> PathBuf {
        self.config.netns_dir.join(format!("{NETNS_PREFIX}{uid}"))
    }

    /// The record that this kubelet made the sandbox of the pod with
    /// `uid`: the namespace directory is the host's, shared with any other
    /// kubelet there, so what is ours is what we wrote down.
    fn record_path(&self, uid: &str) -> PathBuf {
        self.config.state_dir.join("sandboxes").join(uid)
    }

    /// Sets up the pod's network: its namespace, `lo`, and `eth0` through
    /// the network's plugins. A sandbox already set up (by this kubelet
    /// before a restart) is found again with its addresses.
    pub async fn set_up(&self, pod: &Pod) -> Result<Sandbox, NetworkError> {
        let network = self.network()?;
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let path = self.netns_path(&uid);
        let attachment = attachment(pod, &path);
        if netns::is_namespace(&path) {
            if let Some(found) = self.cni.cached_addresses(&network, &attachment) {
                if !found.ips.is_empty() {
                    return Ok(Sandbox {
                        netns: path,
                        ips: found.ips,
                    });
                }
            }
        }
        let record = self.record_path(&uid);
        let recorded = record
            .parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .and_then(|()| std::fs::write(&record, path.as_os_str().as_encoded_bytes()));
        recorded.map_err(|source| NetworkError::Namespace {
            path: record.clone(),
            source,
        })?;
        netns::create(&path).map_err(|source| NetworkError::Namespace {
            path: path.clone(),
            source,
        })?;
        let lo = Attachment {
            ifname: "lo".into(),
            capabilities: Map::new(),
            ..attachment.clone()
        };
        let added = async {
            self.cni.add(&cni::loopback(), &lo).await?;
            let Addresses { ips } = self.cni.add(&network, &attachment).await?;
            match ips.is_empty() {
                true => Err(NetworkError::NoAddress),
                false => Ok(ips),
            }
        }
        .await;
        let added = match added {
            Ok(ips) => files::write(&path, pod, &ips[0], &self.cluster_dns())
                .map(|()| ips)
                .map_err(|source| NetworkError::Namespace {
                    path: files::dir_for(&path),
                    source,
                }),
            Err(err) => Err(err),
        };
        match added {
            Ok(ips) => Ok(Sandbox { netns: path, ips }),
            Err(err) => {
                let _ = self.cni.del(&network, &attachment).await;
                let _ = netns::remove(&path);
                let _ = files::remove(&path);
                Err(err)
            }
        }
    }

    /// Writes the files of a pod in the host's network (see
    /// [`files::write_host_network`]) where a pod's files are kept, and
    /// returns their directory.
    pub fn host_network_files(&self, pod: &Pod) -> Result<PathBuf, NetworkError> {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let dir = files::dir_for(&self.netns_path(&uid));
        files::write_host_network(&dir, pod, &self.cluster_dns()).map_err(|source| {
            NetworkError::Namespace {
                path: dir.clone(),
                source,
            }
        })?;
        Ok(dir)
    }

    /// Removes the files of a pod in the host's network; none there is
    /// nothing to do.
    pub fn remove_host_network_files(&self, pod: &Pod) -> Result<(), NetworkError> {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let dir = files::dir_for(&self.netns_path(&uid));
        files::remove_dir(&dir).map_err(|source| NetworkError::Namespace { path: dir, source })
    }

    /// Tears the pod's network down: `DEL` through the plugins (freeing
    /// its address), then its namespace. Nothing there is nothing to do.
    pub async fn tear_down(&self, pod: &Pod) -> Result<(), NetworkError> {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let path = self.netns_path(&uid);
        let attachment = attachment(pod, &path);
        if let Ok(network) = self.network() {
            self.cni.del(&network, &attachment).await?;
        }
        files::remove(&path).map_err(|source| NetworkError::Namespace {
            path: files::dir_for(&path),
            source,
        })?;
        netns::remove(&path).map_err(|source| NetworkError::Namespace { path, source })?;
        let record = self.record_path(&uid);
        match std::fs::remove_file(&record) {
            Err(source) if source.kind() != std::io::ErrorKind::NotFound => {
                Err(NetworkError::Namespace {
                    path: record,
                    source,
                })
            }
            _ => Ok(()),
        }
    }

    /// The pods (UIDs) whose sandboxes this kubelet made and that are not
    /// in `keep`: what a pod deleted while the kubelet was down left. Only
    /// this kubelet's records count: another kubelet on the host keeps its
    /// pods' namespaces in the same directory.
    pub fn orphaned(&self, keep: &[String]) -> Vec<String> {
        let Ok(entries) = std::fs::read_dir(self.config.state_dir.join("sandboxes")) else {
            return Vec::new();
        };
        let mut found: Vec<String> = entries
            .filter_map(Result::ok)
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|uid| !keep.contains(uid))
            .collect();
        found.sort();
        found
    }
}

/// What a process of a pod enters before it execs: the pod's network
/// namespace (none in the host's network), its files, and the container's
/// volumes at their mountPaths. Opened before the fork, and kept until
/// after the spawn.
pub struct PodEntry {
    netns: Option<std::os::fd::OwnedFd>,
    mounts: Option<files::Mounts>,
}

impl PodEntry {
    /// The entry into the pod whose namespace is at `netns` (`None`: the
    /// host's network) and whose files are in `files` (`None`: beside its
    /// namespace), for a process of the container that mounts `volumes`.
    /// `None` when there is nothing to enter.
    pub fn open(
        netns: Option<&Path>,
        files: Option<&Path>,
        volumes: &[crate::volumes::BindMount],
    ) -> std::io::Result<Option<PodEntry>> {
        let files = files
            .map(Path::to_path_buf)
            .or_else(|| netns.map(files::dir_for));
        let Some(files) = files else {
            return Ok(None);
        };
        Ok(Some(PodEntry {
            netns: netns.map(netns::open).transpose()?,
            mounts: files::prepare(&files, volumes),
        }))
    }

    /// What the child runs before exec, for `pre_exec`: setns(2), then
    /// unshare(2) and mount(2), on what was made before the fork.
    pub fn in_child(&self) -> impl Fn() -> std::io::Result<()> + Send + Sync + 'static {
        let fd = self.netns.as_ref().map(std::os::fd::AsRawFd::as_raw_fd);
        let mounts = self.mounts.clone();
        move || {
            if let Some(fd) = fd {
                netns::enter_fd(fd)?;
            }
            match &mounts {
                Some(mounts) => files::enter(mounts),
                None => Ok(()),
            }
        }
    }
}

/// What the plugins are told of a pod: its UID as the sandbox's ID, its
/// namespace, and its `hostPort`s.
fn attachment(pod: &Pod, netns: &Path) -> Attachment {
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let args = vec![
        (
            "K8S_POD_NAMESPACE".to_string(),
            pod.metadata.namespace.clone().unwrap_or_default(),
        ),
        (
            "K8S_POD_NAME".to_string(),
            pod.metadata.name.clone().unwrap_or_default(),
        ),
        ("K8S_POD_INFRA_CONTAINER_ID".to_string(), uid.clone()),
        ("K8S_POD_UID".to_string(), uid.clone()),
    ];
    let mut capabilities = Map::new();
    let mappings = port_mappings(pod);
    if !mappings.is_empty() {
        capabilities.insert("portMappings".into(), json!(mappings));
    }
    Attachment {
        container_id: uid,
        netns: netns.to_path_buf(),
        ifname: "eth0".into(),
        args,
        capabilities,
    }
}

/// The pod's `hostPort`s, as `portmap` takes them.
pub fn port_mappings(pod: &Pod) -> Vec<PortMapping> {
    let spec = pod.spec.as_ref();
    spec.into_iter()
        .flat_map(|s| s.containers.iter())
        .flat_map(|c| c.ports.iter().flatten())
        .filter_map(|port| {
            let host_port = u16::try_from(port.host_port?).ok().filter(|p| *p > 0)?;
            Some(PortMapping {
                host_port,
                container_port: u16::try_from(port.container_port).ok()?,
                protocol: port
                    .protocol
                    .as_deref()
                    .unwrap_or("TCP")
                    .to_ascii_lowercase(),
                host_ip: port.host_ip.clone().unwrap_or_default(),
            })
        })
        .collect()
}

/// Whether the pod runs in the host's network.
pub fn host_network(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.host_network)
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    use k8s_openapi::api::core::v1::{Container, ContainerPort, PodSpec};

    fn pod(uid: &str) -> Pod {
        let mut pod = Pod::default();
        pod.metadata.name = Some("web".into());
        pod.metadata.namespace = Some("default".into());
        pod.metadata.uid = Some(uid.into());
        pod.spec = Some(PodSpec {
            containers: vec![Container {
                name: "app".into(),
                ports: Some(vec![
                    ContainerPort {
                        container_port: 8080,
                        host_port: Some(18080),
                        ..Default::default()
                    },
                    ContainerPort {
                        container_port: 9090,
                        ..Default::default()
                    },
                ]),
                ..Default::default()
            }],
            ..Default::default()
        });
        pod
    }

    #[test]
    fn host_ports_become_port_mappings() {
        assert_eq!(
            port_mappings(&pod("u")),
            vec![PortMapping {
                host_port: 18080,
                container_port: 8080,
                protocol: "tcp".into(),
                host_ip: String::new(),
            }]
        );
        let attached = attachment(&pod("u1"), Path::new("/run/netns/skiff-u1"));
        assert_eq!(attached.container_id, "u1");
        assert_eq!(attached.capabilities["portMappings"][0]["hostPort"], 18080);
        assert!(attached
            .args
            .contains(&("K8S_POD_NAME".to_string(), "web".to_string())));
    }

    #[test]
    fn without_plugins_or_a_configuration_the_network_says_what_is_missing() {
        let dir = tempfile::tempdir().unwrap();
        let config = NetworkConfig {
            conf_dir: dir.path().join("net.d"),
            bin_dirs: vec![dir.path().join("bin")],
            netns_dir: dir.path().join("netns"),
            state_dir: dir.path().join("state"),
            bridge: "skiff0".into(),
            cluster_dns: vec!["10.96.0.10".parse().unwrap()],
            cluster_domain: "cluster.local".into(),
        };
        let why = missing_plugins(&config).unwrap();
        assert!(
            why.contains("bridge, host-local, portmap, loopback"),
            "{why}"
        );
        assert!(
            why.contains("apt-get install containernetworking-plugins"),
            "{why}"
        );
        std::fs::create_dir_all(dir.path().join("bin")).unwrap();
        for plugin in ["bridge", "host-local", "portmap"] {
            std::fs::write(dir.path().join("bin").join(plugin), "").unwrap();
        }
        assert!(missing_plugins(&config)
            .unwrap()
            .contains("plugins loopback are"));
        std::fs::write(dir.path().join("bin/loopback"), "").unwrap();
        assert_eq!(missing_plugins(&config), None);
        // A configuration of the user's own: its plugins are its business.
        let config = NetworkConfig {
            bin_dirs: vec![dir.path().join("nothing")],
            ..config
        };
        std::fs::create_dir_all(&config.conf_dir).unwrap();
        std::fs::write(
            config.conf_dir.join("10-mine.conflist"),
            r#"{"cniVersion":"1.0.0","name":"mine","plugins":[{"type":"ptp"}]}"#,
        )
        .unwrap();
        assert_eq!(missing_plugins(&config), None);
    }

    /// Plugins installed, root and namespaces: else skipped (failing
    /// under CI=true, which installs them).
    fn plugins_or_skip(test: &str) -> Option<Vec<PathBuf>> {
        let dirs: Vec<PathBuf> = DEFAULT_CNI_BIN_DIRS
            .iter()
            .map(PathBuf::from)
            .filter(|d| d.join("bridge").is_file())
            .collect();
        let why = match (unavailable_reason(), dirs.is_empty()) {
            (Some(why), _) => why,
            (None, true) => "no CNI plugins in /usr/lib/cni or /opt/cni/bin (apt-get install containernetworking-plugins)".into(),
            (None, false) => return Some(dirs),
        };
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!("{test}: {why}; CI must have them");
        }
        eprintln!("{test}: skipped: {why}");
        None
    }

    #[tokio::test]
    async fn a_pod_gets_a_namespace_and_an_address_and_gives_them_back() {
        let test = "a_pod_gets_a_namespace_and_an_address_and_gives_them_back";
        let Some(bin_dirs) = plugins_or_skip(test) else {
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        // A bridge and a range of this test's own.
        let bridge = format!("sk{}", std::process::id() % 100_000);
        let third = 100 + std::process::id() % 100;
        let subnet = format!("10.250.{third}.0/24");
        let network = PodNetwork::new(NetworkConfig {
            conf_dir: dir.path().join("net.d"),
            bin_dirs,
            netns_dir: dir.path().join("netns"),
            state_dir: dir.path().join("state"),
            bridge: bridge.clone(),
            cluster_dns: vec!["10.96.0.10".parse().unwrap()],
            cluster_domain: "cluster.local".into(),
        });
        assert!(matches!(network.network(), Err(NetworkError::NotReady(_))));
        let written = network
            .write_default_config(std::slice::from_ref(&subnet))
            .unwrap();
        assert!(written.is_some());
        // Written once: a configuration there is kept.
        assert!(network
            .write_default_config(std::slice::from_ref(&subnet))
            .unwrap()
            .is_none());

        let one = pod("pod-one");
        let two = pod("pod-two");
        let a = network.set_up(&one).await.unwrap();
        let b = network.set_up(&two).await.unwrap();
        assert_ne!(a.ips, b.ips);
        let prefix = format!("10.250.{third}.");
        assert!(a.ips[0].starts_with(&prefix), "{a:?}");
        let hosts = std::fs::read_to_string(files::dir_for(&a.netns).join("hosts")).unwrap();
        assert!(hosts.contains(&format!("{}\tweb\n", a.ips[0])), "{hosts}");
        let resolv = std::fs::read_to_string(files::dir_for(&a.netns).join("resolv.conf")).unwrap();
        assert!(
            resolv.starts_with("search default.svc.cluster.local svc.cluster.local cluster.local")
                && resolv.contains("\nnameserver 10.96.0.10\noptions ndots:5\n"),
            "{resolv}"
        );
        // Set up again (a restarted kubelet): the same sandbox.
        assert_eq!(network.set_up(&one).await.unwrap(), a);

        // Two pods, one port: each listens on its own address, which the
        // host reaches through the bridge.
        let listen = |sandbox: &Sandbox| {
            let ip = sandbox.ips[0].clone();
            netns::run_in(&sandbox.netns, move || {
                std::net::TcpListener::bind((ip.as_str(), 8080)).unwrap()
            })
            .unwrap()
        };
        let (la, lb) = (listen(&a), listen(&b));
        for (sandbox, listener) in [(&a, &la), (&b, &lb)] {
            let address = format!("{}:8080", sandbox.ips[0]);
            let _client = std::net::TcpStream::connect(&address)
                .unwrap_or_else(|e| panic!("connect to {address}: {e}"));
            listener.accept().unwrap();
        }
        assert_eq!(network.orphaned(&["pod-one".into()]), ["pod-two"]);
        // Another kubelet's pod in the same namespace directory is not ours.
        let elses = dir.path().join("netns/skiff-someone-elses");
        netns::create(&elses).unwrap();
        assert_eq!(network.orphaned(&["pod-one".into()]), ["pod-two"]);
        netns::remove(&elses).unwrap();

        network.tear_down(&one).await.unwrap();
        network.tear_down(&two).await.unwrap();
        network.tear_down(&two).await.unwrap();
        assert!(!a.netns.exists() && !b.netns.exists());
        assert!(
            !files::dir_for(&a.netns).exists(),
            "the pod's files outlived it"
        );
        assert!(network.orphaned(&[]).is_empty());
        // host-local keeps a file an address: none is left.
        let allocations = dir.path().join("state/networks/skiff");
        let left: Vec<String> = std::fs::read_dir(&allocations)
            .map(|entries| {
                entries
                    .filter_map(Result::ok)
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| n.starts_with("10."))
                    .collect()
            })
            .unwrap_or_default();
        assert!(left.is_empty(), "addresses still allocated: {left:?}");
        let _ = std::process::Command::new("ip")
            .args(["link", "del", &bridge])
            .status();
    }
}
