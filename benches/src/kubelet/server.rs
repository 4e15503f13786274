//! The `skiff up` the simulated nodes talk to: API server and store only
//! (no scheduler, and no real kubelet where `skiff up` has that flag), on
//! free loopback ports with its own data directory.

use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use hyper::StatusCode;

use crate::api::http::ApiConnection;
use crate::api::server::STOP_GRACE;
use crate::versus::process::ServerProcess;
use crate::versus::system::Program;

/// How long `skiff up` may take to answer /readyz.
const START_TIMEOUT: Duration = Duration::from_secs(60);
const READY_POLL: Duration = Duration::from_millis(50);

pub struct SkiffUp {
    pub api: SocketAddr,
    process: ServerProcess,
}

impl SkiffUp {
    /// Starts `skiff up` with data under `dir` and waits until it is ready.
    pub async fn start(skiff: &Program, dir: &Path) -> Result<SkiffUp> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let [api, client] = free_ports()?;
        let args = vec![
            "up".to_string(),
            "--data-dir".into(),
            dir.join("skiff").display().to_string(),
            "--api-listen".into(),
            api.to_string(),
            "--client-listen".into(),
            client.to_string(),
            "--scheduler=false".into(),
            // Only the simulated nodes.
            "--kubelet=false".into(),
        ];
        let process = ServerProcess::spawn("skiff up", &skiff.path, &args, &dir.join("skiff.log"))?;
        let mut up = SkiffUp { api, process };
        if let Err(err) = up.wait_ready().await {
            bail!(
                "skiff up did not become ready: {err:#}\n{}",
                up.process.log_tail()
            );
        }
        Ok(up)
    }

    async fn wait_ready(&mut self) -> Result<()> {
        let deadline = Instant::now() + START_TIMEOUT;
        let mut last = String::from("no answer yet");
        while Instant::now() < deadline {
            if let Some(status) = self.process.exited() {
                bail!("it exited while starting ({status})");
            }
            match ApiConnection::connect(self.api).await {
                Ok(mut conn) => match conn.get("/readyz").await {
                    Ok(answer) if answer.status == StatusCode::OK => return Ok(()),
                    Ok(answer) => last = format!("/readyz answered {}", answer.status),
                    Err(err) => last = format!("{err:#}"),
                },
                Err(err) => last = format!("{err:#}"),
            }
            tokio::time::sleep(READY_POLL).await;
        }
        bail!("not ready within {START_TIMEOUT:?} ({last})")
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.api)
    }

    pub fn cpu_time(&self) -> Duration {
        self.process.cpu_time()
    }

    pub fn log_tail(&self) -> String {
        self.process.log_tail()
    }

    /// Stops it; a note if it needed SIGKILL.
    pub async fn stop(self) -> Result<Option<String>> {
        let (status, killed) = self.process.stop(STOP_GRACE).await?;
        Ok(killed.then(|| {
            format!(
                "skiff up did not stop within {STOP_GRACE:?} of SIGTERM and was killed ({status})"
            )
        }))
    }
}

/// Two free ports on 127.0.0.1 (both held until chosen).
fn free_ports() -> Result<[SocketAddr; 2]> {
    let bind = || TcpListener::bind("127.0.0.1:0").context("finding a free port on 127.0.0.1");
    let (a, b) = (bind()?, bind()?);
    Ok([a.local_addr()?, b.local_addr()?])
}
