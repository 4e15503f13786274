//! The real etcd server (Debian's etcd-server) beside skiff in the tests
//! that move data between the two: find it (or skip, or fail under CI),
//! start it on free loopback ports over plain HTTP, SIGKILL it on drop.

use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::etcdctl::Etcdctl;

const INSTALL_HINT: &str = "apt-get install -y etcd-server etcd-client";
const READY_TIMEOUT: Duration = Duration::from_secs(60);

fn on_path(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|dir| dir.join(name))
            .find(|candidate| candidate.is_file())
    })
}

/// (etcd, etcdctl) on PATH. Missing: under CI=true a panic that says how
/// to install them; otherwise a note that the test is skipped, and `None`.
pub fn etcd_or_skip(test: &str) -> Option<(PathBuf, PathBuf)> {
    let found = on_path("etcd").zip(on_path("etcdctl"));
    if found.is_none() {
        if std::env::var("CI").is_ok_and(|ci| ci == "true") {
            panic!("etcd and etcdctl are not installed, and CI must run {test}: {INSTALL_HINT}");
        }
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED {test}: etcd or etcdctl is not installed (install them with `{INSTALL_HINT}`)"
        );
    }
    found
}

/// One etcd member alone, serving clients over plain HTTP.
pub struct RealEtcd {
    child: Child,
    pub name: String,
    pub client: SocketAddr,
    pub peer: SocketAddr,
    stderr: PathBuf,
    etcdctl: PathBuf,
    /// The data directory of a member started by [`RealEtcd::alone`].
    _dir: Option<tempfile::TempDir>,
}

impl RealEtcd {
    /// `--initial-cluster` of a member `name` alone at `peer`.
    pub fn initial_cluster(name: &str, peer: SocketAddr) -> String {
        format!("{name}=http://{peer}")
    }

    /// Starts etcd as member `name` on `data_dir` (new, or made by
    /// `etcdctl snapshot restore` with the same name and `peer`), and
    /// waits until it answers.
    pub async fn start(
        binaries: &(PathBuf, PathBuf),
        name: &str,
        data_dir: &Path,
        peer: SocketAddr,
        client: SocketAddr,
    ) -> Result<RealEtcd> {
        Self::start_with(binaries, name, data_dir, peer, client, &[]).await
    }

    /// [`RealEtcd::start`] with more of etcd's flags.
    pub async fn start_with(
        (etcd, etcdctl): &(PathBuf, PathBuf),
        name: &str,
        data_dir: &Path,
        peer: SocketAddr,
        client: SocketAddr,
        flags: &[String],
    ) -> Result<RealEtcd> {
        let stderr = data_dir.with_extension("etcd.log");
        let peer_url = format!("http://{peer}");
        let client_url = format!("http://{client}");
        let child = Command::new(etcd)
            .arg("--name")
            .arg(name)
            .arg("--data-dir")
            .arg(data_dir)
            .args(["--listen-client-urls", &client_url])
            .args(["--advertise-client-urls", &client_url])
            .args(["--listen-peer-urls", &peer_url])
            .args(["--initial-advertise-peer-urls", &peer_url])
            .args(["--initial-cluster", &Self::initial_cluster(name, peer)])
            .args(flags)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&stderr)?)
            .spawn()
            .context("starting etcd")?;
        let mut member = RealEtcd {
            child,
            name: name.into(),
            client,
            peer,
            stderr,
            etcdctl: etcdctl.clone(),
            _dir: None,
        };
        member.wait_ready().await?;
        Ok(member)
    }

    /// A fresh member `e1` in a temporary directory on free ports, to
    /// compare skiff with.
    pub async fn alone(binaries: &(PathBuf, PathBuf)) -> Result<RealEtcd> {
        Self::alone_with(binaries, &[]).await
    }

    /// [`RealEtcd::alone`] with more of etcd's flags.
    pub async fn alone_with(binaries: &(PathBuf, PathBuf), flags: &[String]) -> Result<RealEtcd> {
        let dir = tempfile::tempdir()?;
        let ports = crate::skiff_process::free_addrs(2)?;
        let data = dir.path().join("data");
        let mut etcd =
            RealEtcd::start_with(binaries, "e1", &data, ports[1], ports[0], flags).await?;
        etcd._dir = Some(dir);
        Ok(etcd)
    }

    pub fn etcdctl(&self) -> Etcdctl {
        Etcdctl::plain(self.etcdctl.clone(), self.client.to_string())
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    async fn wait_ready(&mut self) -> Result<()> {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if let Some(status) = self.child.try_wait()? {
                bail!("etcd exited ({status}); its log:\n{}", self.log());
            }
            if self
                .etcdctl()
                .run(&["endpoint", "health"])?
                .status
                .success()
            {
                return Ok(());
            }
            if Instant::now() >= deadline {
                bail!(
                    "etcd did not become healthy within {READY_TIMEOUT:?}; its log:\n{}",
                    self.log()
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

impl Drop for RealEtcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
