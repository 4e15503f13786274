//! `skiff up` as a process on free loopback ports in its own data
//! directory, reached the way a user reaches it: through the kubeconfig it
//! writes. It can be stopped with SIGTERM and started again on the same
//! data. Dropping it SIGKILLs the process.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use tempfile::TempDir;

use crate::kube_http::KubeHttp;
use crate::skiff_process::{free_addrs, SkiffProcess};

/// Opening the store and serving the API on a loaded 2-core machine.
pub const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// A clean stop: end the watches, drain clients, close the store.
pub const STOP_TIMEOUT: Duration = Duration::from_secs(30);

/// What the API runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// `skiff up`: the store in the same process.
    Embedded,
    /// `skiff up --store-endpoints` over a real etcd (Debian's etcd-server).
    Etcd,
    /// Three `skiff server` members: writes through the first member's API,
    /// watches through the third's.
    Cluster,
}

pub struct ApiServer {
    process: Option<SkiffProcess>,
    data_dir: PathBuf,
    api: SocketAddr,
    client: SocketAddr,
    backend: Backend,
    /// The other members (Cluster), or real etcd (Etcd).
    others: Vec<SkiffProcess>,
    etcd: Option<EtcdProcess>,
    /// The API that watches go to (Cluster: another member's).
    watch_data_dir: PathBuf,
    /// Whether the scheduler runs beside the API. Tests of the API alone
    /// leave it off, so that no other client changes their pods.
    scheduling: bool,
    /// More flags for `skiff up` (Embedded only).
    extra_args: Vec<String>,
    _dir: TempDir,
}

/// A real etcd, SIGKILLed on drop.
struct EtcdProcess {
    child: std::process::Child,
}

impl Drop for EtcdProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Real etcd on PATH. Missing: under CI=true a panic that says how to
/// install it; otherwise a note that the test is skipped, and `None`.
pub fn etcd_or_skip(test: &str) -> Option<PathBuf> {
    crate::tool::on_path_or_skip("etcd", test, "apt-get install -y etcd-server")
}

impl ApiServer {
    /// `skiff up` in a fresh data directory, ready to serve.
    pub async fn start() -> Result<ApiServer> {
        Self::start_on(Backend::Embedded, "")
            .await
            .map(|s| s.expect("the embedded backend needs no external tool"))
    }

    /// The API on `backend`, ready to serve; `None` when the backend needs
    /// a tool that is missing outside CI (the test is then skipped).
    pub async fn start_on(backend: Backend, test: &str) -> Result<Option<ApiServer>> {
        Self::start_with(backend, test, false).await
    }

    /// The API on `backend` with the scheduler running beside it (on a
    /// cluster, one per member, leader-elected).
    pub async fn start_on_scheduling(backend: Backend, test: &str) -> Result<Option<ApiServer>> {
        Self::start_with(backend, test, true).await
    }

    /// `skiff up` with its scheduler running and `args` added to its
    /// command line (e.g. `--scheduler-config FILE`).
    pub async fn start_scheduling_with(args: &[String]) -> Result<ApiServer> {
        Self::start_scheduling_with_addrs(args, free_addrs(2)?).await
    }

    /// As [`Self::start_scheduling_with`], also serving the API over plain
    /// HTTP on a loopback port (`--insecure-api-listen`), where every
    /// request acts as the administrator; a client of that port.
    pub async fn start_with_plain_port(args: &[String]) -> Result<(ApiServer, KubeHttp)> {
        // One call, so the three ports differ.
        let mut addrs = free_addrs(3)?;
        let plain = addrs.pop().context("a third port")?;
        let mut args = args.to_vec();
        args.push(format!("--insecure-api-listen={plain}"));
        let server = Self::start_scheduling_with_addrs(&args, addrs).await?;
        Ok((server, KubeHttp::from_plain(&plain.to_string())))
    }

    async fn start_scheduling_with_addrs(
        args: &[String],
        addrs: Vec<std::net::SocketAddr>,
    ) -> Result<ApiServer> {
        let dir = tempfile::tempdir()?;
        let data_dir = dir.path().join("skiff");
        let mut server = ApiServer {
            process: None,
            watch_data_dir: data_dir.clone(),
            data_dir,
            api: addrs[0],
            client: addrs[1],
            backend: Backend::Embedded,
            others: Vec::new(),
            etcd: None,
            scheduling: true,
            extra_args: args.to_vec(),
            _dir: dir,
        };
        server.launch().await?;
        Ok(server)
    }

    /// `skiff up` with its scheduler running, as a user starts it.
    pub async fn start_scheduling() -> Result<ApiServer> {
        Self::start_with(Backend::Embedded, "", true)
            .await
            .map(|s| s.expect("the embedded backend needs no external tool"))
    }

    async fn start_with(
        backend: Backend,
        test: &str,
        scheduling: bool,
    ) -> Result<Option<ApiServer>> {
        let dir = tempfile::tempdir()?;
        let addrs = free_addrs(2)?;
        let data_dir = dir.path().join("skiff");
        let mut server = ApiServer {
            process: None,
            watch_data_dir: data_dir.clone(),
            data_dir,
            api: addrs[0],
            client: addrs[1],
            backend,
            others: Vec::new(),
            etcd: None,
            scheduling,
            extra_args: Vec::new(),
            _dir: dir,
        };
        match backend {
            Backend::Embedded => server.launch().await?,
            Backend::Etcd => {
                let Some(etcd) = etcd_or_skip(test) else {
                    return Ok(None);
                };
                server.launch_on_etcd(&etcd).await?;
            }
            Backend::Cluster => server.launch_cluster().await?,
        }
        Ok(Some(server))
    }

    /// The kubeconfig of the API that watches should use: another member's
    /// on a cluster, else the same as [`Self::kubeconfig`].
    pub fn watch_kubeconfig(&self) -> PathBuf {
        self.watch_data_dir.join("kubeconfig")
    }

    pub fn backend(&self) -> Backend {
        self.backend
    }

    async fn launch_on_etcd(&mut self, etcd: &Path) -> Result<()> {
        let ports = free_addrs(2)?;
        let etcd_dir = self._dir.path().join("etcd");
        let log = std::fs::File::create(self._dir.path().join("etcd.log"))?;
        let child = std::process::Command::new(etcd)
            .args(["--name", "e1", "--data-dir"])
            .arg(&etcd_dir)
            .arg(format!("--listen-client-urls=http://{}", ports[0]))
            .arg(format!("--advertise-client-urls=http://{}", ports[0]))
            .arg(format!("--listen-peer-urls=http://{}", ports[1]))
            .arg(format!("--initial-advertise-peer-urls=http://{}", ports[1]))
            .arg(format!("--initial-cluster=e1=http://{}", ports[1]))
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("starting etcd")?;
        self.etcd = Some(EtcdProcess { child });
        let args = [
            "up".to_string(),
            "--data-dir".into(),
            self.data_dir.display().to_string(),
            "--api-listen".into(),
            self.api.to_string(),
            "--store-endpoints".into(),
            ports[0].to_string(),
            format!("--scheduler={}", self.scheduling),
            "--kubelet=false".into(),
            "--controller-manager=false".into(),
        ];
        let mut process = SkiffProcess::spawn("skiff up --store-endpoints", args)?;
        process.wait_for_line(" ready: ", READY_TIMEOUT).await?;
        let kubeconfig = self.kubeconfig();
        let process = self.process.insert(process);
        wait_serving(process, &kubeconfig).await
    }

    async fn launch_cluster(&mut self) -> Result<()> {
        let addrs = free_addrs(9)?;
        let initial = (0..3)
            .map(|i| format!("n{}={}", i + 1, addrs[3 * i + 1]))
            .collect::<Vec<_>>()
            .join(",");
        let mut members = Vec::new();
        for i in 0..3 {
            let name = format!("n{}", i + 1);
            let data_dir = self._dir.path().join(&name);
            let args = vec![
                "server".to_string(),
                "--name".into(),
                name.clone(),
                "--data-dir".into(),
                data_dir.display().to_string(),
                "--client-listen".into(),
                addrs[3 * i].to_string(),
                "--peer-listen".into(),
                addrs[3 * i + 1].to_string(),
                "--initial-cluster".into(),
                initial.clone(),
                "--api-listen".into(),
                addrs[3 * i + 2].to_string(),
                format!("--scheduler={}", self.scheduling),
                "--controller-manager=false".into(),
            ];
            members.push((
                data_dir,
                SkiffProcess::spawn(&format!("skiff server {name}"), args)?,
            ));
        }
        for (data_dir, process) in &mut members {
            process.wait_for_line(" ready: ", READY_TIMEOUT).await?;
            wait_serving(process, &data_dir.join("kubeconfig")).await?;
        }
        let mut members = members.into_iter();
        let (first_dir, first) = members.next().context("three members")?;
        self.data_dir = first_dir;
        self.api = addrs[2];
        self.client = addrs[0];
        self.process = Some(first);
        for (dir, process) in members {
            self.watch_data_dir = dir;
            self.others.push(process);
        }
        Ok(())
    }

    /// The kubeconfig `skiff up` wrote: the one way tests reach the API.
    pub fn kubeconfig(&self) -> PathBuf {
        self.data_dir.join("kubeconfig")
    }

    /// An HTTP client for the server the kubeconfig names.
    pub fn http(&self) -> Result<KubeHttp> {
        KubeHttp::from_kubeconfig(&self.kubeconfig())
    }

    /// The store's etcd v3 client address (Embedded: the member in `skiff up`).
    pub fn client_addr(&self) -> std::net::SocketAddr {
        self.client
    }

    /// The pid of the `skiff up` process, if one runs.
    /// What the (first) skiff process has written to stderr so far: its
    /// log, for a failing test's message.
    pub fn stderr(&self) -> String {
        self.process
            .as_ref()
            .map(SkiffProcess::stderr)
            .unwrap_or_default()
    }

    pub fn pid(&self) -> Option<u32> {
        self.process.as_ref().map(|p| p.pid())
    }

    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// SIGKILLs skiff (and any other member) now; its data stays until
    /// this is dropped.
    pub fn kill_now(&mut self) {
        self.process = None;
        self.others.clear();
    }

    /// SIGTERM, then waits for a clean exit.
    pub async fn stop(&mut self) -> Result<ExitStatus> {
        let mut process = self.process.take().context("skiff up is not running")?;
        process.signal(libc::SIGTERM)?;
        let status = process.wait_exit(STOP_TIMEOUT).await?;
        if !status.success() {
            bail!(
                "skiff up exited with {status} on SIGTERM; stderr:\n{}",
                process.stderr()
            );
        }
        Ok(status)
    }

    /// SIGKILLs the other cluster member whose process label ends with
    /// `name` (e.g. "n2"); false if there is none.
    pub fn kill_other_member(&mut self, name: &str) -> Result<bool> {
        let Some(at) = self
            .others
            .iter()
            .position(|p| p.label().ends_with(&format!(" {name}")))
        else {
            return Ok(false);
        };
        let process = self.others.remove(at);
        process.signal(libc::SIGKILL)?;
        drop(process);
        Ok(true)
    }

    /// Starts `skiff up` again on the same data directory and ports.
    pub async fn restart(&mut self) -> Result<()> {
        if self.backend != Backend::Embedded {
            bail!("only the embedded backend restarts");
        }
        if self.process.is_some() {
            bail!("skiff up is still running; stop it first");
        }
        self.launch().await
    }

    async fn launch(&mut self) -> Result<()> {
        // A kubeconfig left by an earlier run must not be taken for this one's.
        let _ = std::fs::remove_file(self.kubeconfig());
        let args = [
            "up".to_string(),
            "--data-dir".into(),
            self.data_dir.display().to_string(),
            "--api-listen".into(),
            self.api.to_string(),
            "--client-listen".into(),
            self.client.to_string(),
        ];
        // No node and no controllers unless a test asks for them.
        let asks = |flag: &str| self.extra_args.iter().any(|a| a.starts_with(flag));
        let scheduler = (!asks("--scheduler=")).then(|| format!("--scheduler={}", self.scheduling));
        let no_kubelet = (!asks("--kubelet=")).then(|| "--kubelet=false".to_string());
        let no_controllers =
            (!asks("--controller-manager=")).then(|| "--controller-manager=false".to_string());
        let args = args
            .into_iter()
            .chain(scheduler)
            .chain(no_kubelet)
            .chain(no_controllers)
            .chain(self.extra_args.iter().cloned());
        let mut process = SkiffProcess::spawn("skiff up", args)?;
        process.wait_for_line(" ready: ", READY_TIMEOUT).await?;
        let kubeconfig = self.kubeconfig();
        let process = self.process.insert(process);
        wait_serving(process, &kubeconfig).await
    }
}

/// Waits until the kubeconfig exists and the API it names is ready and
/// has its default namespace.
async fn wait_serving(process: &mut SkiffProcess, kubeconfig: &Path) -> Result<()> {
    let deadline = Instant::now() + READY_TIMEOUT;
    let mut last = String::from("no kubeconfig yet");
    loop {
        if kubeconfig.is_file() {
            let http = KubeHttp::from_kubeconfig(kubeconfig)?;
            match (
                http.get("/readyz").await,
                http.get("/api/v1/namespaces/default").await,
            ) {
                (Ok(ready), Ok(default)) if ready.status == 200 && default.status == 200 => {
                    return Ok(())
                }
                (ready, default) => {
                    last = format!(
                        "readyz: {:?}; default namespace: {:?}",
                        ready.map(|r| (r.status, r.text())),
                        default.map(|r| r.status)
                    )
                }
            }
        }
        if let Some(status) = process.try_exit()? {
            bail!(
                "skiff up exited ({status}) before serving; stderr:\n{}",
                process.stderr()
            );
        }
        if Instant::now() >= deadline {
            bail!(
                "skiff up did not serve the API within {READY_TIMEOUT:?} ({last}); stderr:\n{}",
                process.stderr()
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Runs each named scenario, an `async fn(Backend) -> anyhow::Result<()>`
/// of the calling test file, as three tests: against `skiff up`, against
/// the API on a real etcd (the registry relies on etcd's semantics only),
/// and against a three-member skiff cluster (writes through one member's
/// API, watches through another's).
#[macro_export]
macro_rules! on_every_backend {
    ($($scenario:ident),* $(,)?) => {$(
        mod $scenario {
            use $crate::api_server::Backend;

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn embedded_store() -> anyhow::Result<()> {
                super::$scenario(Backend::Embedded).await
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn real_etcd() -> anyhow::Result<()> {
                super::$scenario(Backend::Etcd).await
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn three_member_cluster() -> anyhow::Result<()> {
                super::$scenario(Backend::Cluster).await
            }
        }
    )*};
}

/// `skiff up` with the real kubectl pointed at it; `None` when kubectl is
/// missing outside CI (the test is then skipped, saying so).
pub async fn with_kubectl(test: &str) -> Result<Option<(ApiServer, crate::kubectl::Kubectl)>> {
    kubectl_session(test, false).await
}

/// As [`with_kubectl`], with the scheduler running beside the API.
pub async fn with_kubectl_scheduling(
    test: &str,
) -> Result<Option<(ApiServer, crate::kubectl::Kubectl)>> {
    kubectl_session(test, true).await
}

async fn kubectl_session(
    test: &str,
    scheduling: bool,
) -> Result<Option<(ApiServer, crate::kubectl::Kubectl)>> {
    let Some(binary) = crate::kubectl::kubectl_or_skip(test) else {
        return Ok(None);
    };
    let server = match scheduling {
        true => ApiServer::start_scheduling().await?,
        false => ApiServer::start().await?,
    };
    let kubectl = crate::kubectl::Kubectl::new(binary, &server.kubeconfig())?;
    Ok(Some((server, kubectl)))
}
