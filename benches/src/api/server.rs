//! The two API servers under test, one at a time: `skiff up` with its
//! in-process store, and `skiff up --store-endpoints` over a real etcd
//! started beside it. Each on free loopback ports with its own data
//! directory; processes are the versus benchmark's (never left behind).

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use hyper::StatusCode;

use super::http::ApiConnection;
use crate::machine;
use crate::versus::process::ServerProcess;
use crate::versus::system::{self, Program, System};

/// How long a server may take to answer /readyz.
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a server may take to stop after SIGTERM before it gets SIGKILL.
pub const STOP_GRACE: Duration = Duration::from_secs(10);
/// Pause between two readiness checks.
const READY_POLL: Duration = Duration::from_millis(50);

/// Which store the API server runs over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// `skiff up`: skiff's store in the API server's process.
    InProcess,
    /// `skiff up --store-endpoints`: real etcd in its own process.
    Etcd,
}

impl Backend {
    pub fn label(self) -> &'static str {
        match self {
            Backend::InProcess => "in-process store",
            Backend::Etcd => "over etcd",
        }
    }

    fn dir_name(self) -> &'static str {
        match self {
            Backend::InProcess => "skiff-inprocess",
            Backend::Etcd => "skiff-etcd",
        }
    }
}

/// A running API server (and its etcd, for that backend).
pub struct ApiServer {
    pub api: SocketAddr,
    /// The data directories of the processes, removed by `stop`.
    dir: PathBuf,
    skiff: ServerProcess,
    etcd: Option<ServerProcess>,
    /// Processes started -> /readyz answers 200.
    pub started_in: Duration,
}

impl ApiServer {
    /// Starts `backend`'s processes with data under `root` and waits until
    /// the API is ready. `etcd` is required for `Backend::Etcd`.
    /// `scheduling`: whether `skiff up` runs its scheduler (the API
    /// benchmark leaves it off: its pods are for the API alone, and a
    /// scheduler would write their status and events as well).
    pub async fn start(
        backend: Backend,
        skiff: &Program,
        etcd: Option<&Program>,
        root: &Path,
        scheduling: bool,
        extra: &[&str],
    ) -> Result<ApiServer> {
        let dir = root.join(backend.dir_name());
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let [api, client] = free_ports()?;
        let started = Instant::now();
        let mut args = vec![
            "up".to_string(),
            "--data-dir".into(),
            dir.join("skiff").display().to_string(),
            // The API over HTTPS on any port; the bench talks to its plain
            // loopback port (the administrator, no TLS on the client side).
            "--api-listen".into(),
            "127.0.0.1:0".into(),
            "--insecure-api-listen".into(),
            api.to_string(),
            "--client-listen".into(),
            client.to_string(),
            format!("--scheduler={scheduling}"),
            "--kubelet=false".into(),
            "--controller-manager=false".into(),
            // Every connection of the bench comes from 127.0.0.1, one
            // client to the per-client rate limit, which would answer the
            // creates 429 past 5 000/s rather than let them be measured.
            "--client-qps=0".into(),
        ];
        args.extend(extra.iter().map(|a| a.to_string()));
        let etcd = match backend {
            Backend::InProcess => None,
            Backend::Etcd => {
                let program = etcd.context("the etcd backend needs an etcd binary")?;
                let (process, client) = start_etcd(program, &dir)?;
                args.extend(["--store-endpoints".into(), client.to_string()]);
                Some(process)
            }
        };
        let log = dir.join("skiff.log");
        let skiff = ServerProcess::spawn("skiff up", &skiff.path, &args, &log)?;
        let mut server = ApiServer {
            api,
            dir: dir.clone(),
            skiff,
            etcd,
            started_in: Duration::ZERO,
        };
        if let Err(err) = server.wait_ready().await {
            let why = server.exited();
            bail!(
                "{} did not become ready: {err:#}{why}\n  the API server's log ends:\n{}",
                backend.label(),
                server.skiff.log_tail()
            );
        }
        server.started_in = started.elapsed();
        Ok(server)
    }

    /// Polls /readyz (which reads the store) until it answers 200.
    async fn wait_ready(&mut self) -> Result<()> {
        let (skiff, etcd) = (&mut self.skiff, &mut self.etcd);
        wait_ready(self.api, || {
            let gone =
                skiff.exited().is_some() || etcd.as_mut().is_some_and(|e| e.exited().is_some());
            gone.then(|| "a process exited while starting".to_string())
        })
        .await
    }

    /// The processes that have exited, with the end of their logs.
    pub fn exited(&mut self) -> String {
        let mut out = String::new();
        for process in std::iter::once(&mut self.skiff).chain(self.etcd.as_mut()) {
            if let Some(status) = process.exited() {
                out.push_str(&format!("\n  {} exited ({status})\n", process.name()));
                out.push_str(&process.log_tail());
            }
        }
        out
    }

    /// The end of the API server's log, for an error.
    pub fn log_tail(&self) -> String {
        self.skiff.log_tail()
    }

    /// Resident memory of the API server process (not etcd's).
    pub fn api_resident_bytes(&self) -> Option<u64> {
        machine::resident_bytes_of(self.skiff.pid())
    }

    /// Resident memory of etcd, for the etcd backend.
    pub fn etcd_resident_bytes(&self) -> Option<u64> {
        machine::resident_bytes_of(self.etcd.as_ref()?.pid())
    }

    /// CPU time of the API server and etcd processes so far.
    pub fn cpu_time(&self) -> Duration {
        self.skiff.cpu_time()
            + self
                .etcd
                .as_ref()
                .map(ServerProcess::cpu_time)
                .unwrap_or_default()
    }

    /// Stops the API server, then etcd, and removes their data; notes the
    /// ones that needed SIGKILL.
    pub async fn stop(self) -> Result<Vec<String>> {
        let dir = self.dir;
        let mut notes = Vec::new();
        for process in std::iter::once(self.skiff).chain(self.etcd) {
            let name = process.name().to_string();
            let (status, killed) = process.stop(STOP_GRACE).await?;
            if killed {
                notes.push(format!(
                    "{name} did not stop within {STOP_GRACE:?} of SIGTERM and was killed ({status})"
                ));
            }
        }
        std::fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()))?;
        Ok(notes)
    }
}

/// One etcd member, as shipped, data under `dir`; returns it and its
/// client address.
fn start_etcd(program: &Program, dir: &Path) -> Result<(ServerProcess, SocketAddr)> {
    let layout = system::layout(1)?;
    let member = &layout[0];
    let args = system::member_args(System::Etcd, member, &layout, &dir.join("etcd"));
    let process = ServerProcess::spawn("etcd", &program.path, &args, &dir.join("etcd.log"))?;
    Ok((process, member.client))
}

/// Two free ports on 127.0.0.1 (held until both are chosen).
fn free_ports() -> Result<[SocketAddr; 2]> {
    let a = TcpListener::bind("127.0.0.1:0").context("finding a free port on 127.0.0.1")?;
    let b = TcpListener::bind("127.0.0.1:0").context("finding a free port on 127.0.0.1")?;
    Ok([a.local_addr()?, b.local_addr()?])
}

/// Polls the API's /readyz until it answers 200 (at most a minute);
/// `exited` says whether a server process died meanwhile, and how.
pub async fn wait_ready(api: SocketAddr, mut exited: impl FnMut() -> Option<String>) -> Result<()> {
    let deadline = Instant::now() + START_TIMEOUT;
    let mut last = String::from("no answer yet");
    while Instant::now() < deadline {
        if let Some(how) = exited() {
            bail!("{how}");
        }
        match ApiConnection::connect(api).await {
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
