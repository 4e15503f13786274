//! A real etcd (Debian's etcd-server) alone on free loopback ports, plain
//! HTTP, in a temporary data directory: what skiff is compared against.
//! It is killed on drop.

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::skiff_process::free_addrs;

pub struct RealEtcd {
    pub client: SocketAddr,
    child: Child,
    _dir: tempfile::TempDir,
}

impl RealEtcd {
    /// Starts `etcd` and waits until it says it serves clients.
    pub async fn start(etcd: &Path) -> Result<RealEtcd> {
        let dir = tempfile::tempdir()?;
        let ports = free_addrs(2)?;
        let log_path = dir.path().join("etcd.log");
        let log = std::fs::File::create(&log_path)?;
        let child = Command::new(etcd)
            .args(["--name", "e1", "--data-dir"])
            .arg(dir.path().join("data"))
            .arg(format!("--listen-client-urls=http://{}", ports[0]))
            .arg(format!("--advertise-client-urls=http://{}", ports[0]))
            .arg(format!("--listen-peer-urls=http://{}", ports[1]))
            .arg(format!("--initial-advertise-peer-urls=http://{}", ports[1]))
            .arg(format!("--initial-cluster=e1=http://{}", ports[1]))
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("starting etcd")?;
        let etcd = RealEtcd {
            client: ports[0],
            child,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let logged = std::fs::read_to_string(&log_path).unwrap_or_default();
            if logged.contains("ready to serve client requests") {
                break;
            }
            if Instant::now() > deadline {
                bail!("etcd did not start within 30 s; its log:\n{logged}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok(etcd)
    }
}

impl Drop for RealEtcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
