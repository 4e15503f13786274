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

pub struct ApiServer {
    process: Option<SkiffProcess>,
    data_dir: PathBuf,
    api: SocketAddr,
    client: SocketAddr,
    _dir: TempDir,
}

impl ApiServer {
    /// `skiff up` in a fresh data directory, ready to serve.
    pub async fn start() -> Result<ApiServer> {
        let dir = tempfile::tempdir()?;
        let addrs = free_addrs(2)?;
        let mut server = ApiServer {
            process: None,
            data_dir: dir.path().join("skiff"),
            api: addrs[0],
            client: addrs[1],
            _dir: dir,
        };
        server.launch().await?;
        Ok(server)
    }

    /// The kubeconfig `skiff up` wrote: the one way tests reach the API.
    pub fn kubeconfig(&self) -> PathBuf {
        self.data_dir.join("kubeconfig")
    }

    /// An HTTP client for the server the kubeconfig names.
    pub fn http(&self) -> Result<KubeHttp> {
        KubeHttp::from_kubeconfig(&self.kubeconfig())
    }

    pub fn data_dir(&self) -> &Path {
        &self.data_dir
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

    /// Starts `skiff up` again on the same data directory and ports.
    pub async fn restart(&mut self) -> Result<()> {
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
