//! The members of a run: `skiff store` processes, each in its own network
//! namespace, their logs appended across restarts; and the clients' TLS
//! connections to them from this machine.

use std::fs::OpenOptions;
use std::net::SocketAddr;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use skiff_store::grpc::pb::etcdserverpb::maintenance_client::MaintenanceClient;
use skiff_store::grpc::pb::etcdserverpb::{DefragmentRequest, HashKvRequest, StatusRequest};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

use super::net::Hosts;

pub const CLIENT_PORT: u16 = 2379;
pub const PEER_PORT: u16 = 2380;
/// A `skiff server` member's Kubernetes API.
pub const API_PORT: u16 = 6443;
/// How long a call may go unanswered before the client counts it unknown.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(3);

/// One member: its process while it runs.
pub struct Member {
    pub name: String,
    pub client: SocketAddr,
    netns: String,
    data_dir: PathBuf,
    /// The small tmpfs its data directory is on, for full-disk faults.
    disk: Option<PathBuf>,
    log: PathBuf,
    child: Option<Child>,
    paused: bool,
    /// Failpoints for its next start (`FAILPOINTS`), if any.
    pub failpoints: Option<String>,
    /// More environment for its starts (libfaketime's, for a clock jump).
    pub env: Vec<(String, String)>,
}

pub struct Cluster {
    pub members: Vec<Member>,
    pub channels: Vec<Channel>,
    pub token: String,
    skiff: PathBuf,
    initial_cluster: String,
    pki_dir: PathBuf,
    dir: PathBuf,
    /// `skiff server` members (the API beside the store) or `skiff store`.
    server: bool,
}

impl Cluster {
    /// Starts one member per host and waits for a leader. With
    /// `disk_mib`, each member's data directory is on a tmpfs of its own
    /// of that size, which a full-disk fault fills.
    pub async fn start(
        skiff: &Path,
        hosts: &Hosts,
        dir: &Path,
        token: &str,
        server: bool,
        disk_mib: Option<u64>,
    ) -> Result<Cluster> {
        let initial_cluster = hosts
            .members
            .iter()
            .enumerate()
            .map(|(i, h)| format!("m{i}={}:{PEER_PORT}", h.ip))
            .collect::<Vec<_>>()
            .join(",");
        let members: Vec<Member> = hosts
            .members
            .iter()
            .enumerate()
            .map(|(i, h)| Member {
                name: format!("m{i}"),
                client: SocketAddr::new(h.ip.into(), CLIENT_PORT),
                netns: h.netns.clone(),
                data_dir: match disk_mib {
                    Some(_) => dir.join(format!("m{i}-disk")).join("data"),
                    None => dir.join(format!("m{i}")),
                },
                disk: disk_mib.map(|_| dir.join(format!("m{i}-disk"))),
                log: dir.join(format!("m{i}.log")),
                child: None,
                paused: false,
                failpoints: None,
                env: Vec::new(),
            })
            .collect();
        let mut cluster = Cluster {
            members,
            channels: Vec::new(),
            token: token.to_string(),
            skiff: skiff.to_path_buf(),
            initial_cluster,
            pki_dir: dir.join("pki"),
            dir: dir.to_path_buf(),
            server,
        };
        if let Some(mib) = disk_mib {
            for member in &cluster.members {
                let disk = member.disk.as_ref().expect("a disk per member");
                mount_tmpfs(disk, mib)?;
            }
        }
        // The first member makes the CA the others share.
        cluster.spawn(0)?;
        let client_files =
            ["ca.crt", "client.crt", "client.key"].map(|f| cluster.pki_dir.join("etcd").join(f));
        let deadline = Instant::now() + Duration::from_secs(30);
        while !client_files.iter().all(|f| f.is_file()) {
            if let Some(exited) = cluster.exited(0) {
                bail!(
                    "m0 exited ({exited}) before it wrote its CA\n{}",
                    cluster.log_tail(0)
                );
            }
            if Instant::now() > deadline {
                bail!("m0 wrote no CA in 30 s\n{}", cluster.log_tail(0));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        for i in 1..cluster.members.len() {
            cluster.spawn(i)?;
        }
        let read = |p: &PathBuf| {
            std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))
        };
        let tls = ClientTlsConfig::new()
            .ca_certificate(Certificate::from_pem(read(&client_files[0])?))
            .identity(Identity::from_pem(
                read(&client_files[1])?,
                read(&client_files[2])?,
            ));
        for member in &cluster.members {
            let channel = Endpoint::from_shared(format!("https://{}", member.client))?
                .tls_config(tls.clone())?
                .tcp_nodelay(true)
                .connect_timeout(Duration::from_secs(1))
                .timeout(CALL_TIMEOUT)
                .connect_lazy();
            cluster.channels.push(channel);
        }
        cluster.wait_healthy(Duration::from_secs(60)).await?;
        Ok(cluster)
    }

    fn spawn(&mut self, i: usize) -> Result<()> {
        let member = &mut self.members[i];
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&member.log)
            .with_context(|| format!("opening {}", member.log.display()))?;
        let ip = member.client.ip().to_string();
        let mut command = Command::new("ip");
        command
            .args(["netns", "exec", &member.netns])
            .arg(&self.skiff)
            .args([
                if self.server { "server" } else { "store" },
                "--name",
                &member.name,
            ])
            .arg("--data-dir")
            .arg(&member.data_dir)
            .arg("--pki-dir")
            .arg(&self.pki_dir)
            .args(["--client-listen", &format!("{ip}:{CLIENT_PORT}")])
            .args(["--peer-listen", &format!("{ip}:{PEER_PORT}")])
            .args(["--initial-cluster", &self.initial_cluster])
            .args(["--initial-cluster-token", &self.token])
            .args(["--tls-san", &ip]);
        if self.server {
            command.args(["--api-listen", &format!("{ip}:{API_PORT}")]);
        }
        command
            .env("RUST_LOG", "info")
            .env_remove("FAILPOINTS")
            .stdin(Stdio::null())
            .stdout(Stdio::from(log.try_clone()?))
            .stderr(Stdio::from(log))
            .process_group(0);
        if let Some(failpoints) = &member.failpoints {
            command.env("FAILPOINTS", failpoints);
        }
        command.envs(member.env.iter().map(|(k, v)| (k, v)));
        // SAFETY: prctl is async-signal-safe and touches no memory of the parent.
        unsafe {
            command.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) == -1 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = command
            .spawn()
            .with_context(|| format!("starting {} in {}", member.name, member.netns))?;
        member.child = Some(child);
        member.paused = false;
        Ok(())
    }

    pub fn paused(&self, i: usize) -> bool {
        self.members[i].paused
    }

    /// How member `i` ended, if its process has (it is then forgotten).
    pub fn exited(&mut self, i: usize) -> Option<String> {
        let member = &mut self.members[i];
        let status = member.child.as_mut()?.try_wait().ok().flatten()?;
        member.child = None;
        Some(status.to_string())
    }

    /// Whether member `i` is not running, without forgetting how it ended
    /// (`exited` still tells).
    pub fn gone(&mut self, i: usize) -> bool {
        self.members[i]
            .child
            .as_mut()
            .is_none_or(|child| !matches!(child.try_wait(), Ok(None)))
    }

    /// Every member's Kubernetes API (`skiff server` members), from the
    /// administrator's kubeconfig each writes in its data directory.
    pub async fn apis(&self) -> Result<Vec<super::rest::Api>> {
        let mut apis = Vec::new();
        for member in &self.members {
            let path = member.data_dir.join("kubeconfig");
            let deadline = Instant::now() + Duration::from_secs(30);
            while !path.is_file() && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            let api = crate::exec::tls_api::TlsApi::from_kubeconfig(&path)?;
            apis.push(std::sync::Arc::new(api));
        }
        Ok(apis)
    }

    /// The tmpfs member `i`'s data directory is on, if it has one.
    pub fn disk(&self, i: usize) -> Option<&Path> {
        self.members[i].disk.as_deref()
    }

    /// The file of member `i`'s wall clock offset, under libfaketime.
    pub fn clock_file(&self, i: usize) -> PathBuf {
        self.dir.join(format!("m{i}.faketime"))
    }

    /// Waits up to `within` for member `i` to end on its own: how it ended.
    pub async fn wait_exit(&mut self, i: usize, within: Duration) -> Option<String> {
        let deadline = Instant::now() + within;
        loop {
            if let Some(exited) = self.exited(i) {
                return Some(exited);
            }
            if self.members[i].child.is_none() || Instant::now() > deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// SIGKILL, and wait for it to be gone.
    pub fn kill(&mut self, i: usize) {
        let member = &mut self.members[i];
        if let Some(mut child) = member.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        member.paused = false;
    }

    /// Starts member `i` again if it is not running.
    pub fn restart(&mut self, i: usize) -> Result<()> {
        let _ = self.exited(i);
        if self.members[i].child.is_none() {
            self.spawn(i)?;
        }
        Ok(())
    }

    pub fn pause(&mut self, i: usize) {
        self.signal(i, libc::SIGSTOP);
        self.members[i].paused = true;
    }

    pub fn resume(&mut self, i: usize) {
        self.signal(i, libc::SIGCONT);
        self.members[i].paused = false;
    }

    fn signal(&self, i: usize, signal: libc::c_int) {
        if let Some(child) = &self.members[i].child {
            if let Ok(pid) = libc::pid_t::try_from(child.id()) {
                // SAFETY: kill has no memory effects; the pid is our child, not yet reaped.
                unsafe { libc::kill(pid, signal) };
            }
        }
    }

    /// (member ID, the leader it knows, its raft term) of member `i`.
    pub async fn status(&self, i: usize) -> Result<(u64, u64, u64)> {
        let mut client = MaintenanceClient::new(self.channels[i].clone());
        let status = tokio::time::timeout(Duration::from_secs(2), client.status(StatusRequest {}))
            .await
            .context("no answer")??
            .into_inner();
        let id = status.header.map(|h| h.member_id).unwrap_or_default();
        Ok((id, status.leader, status.raft_term))
    }

    /// The member that leads, as the members that answer agree.
    pub async fn leader(&self) -> Option<usize> {
        let mut ids = Vec::new();
        let mut leaders = Vec::new();
        for i in 0..self.members.len() {
            match self.status(i).await {
                Ok((id, leader, _)) => {
                    ids.push(Some(id));
                    leaders.push(leader);
                }
                Err(_) => ids.push(None),
            }
        }
        let leader = *leaders.first()?;
        if leader == 0 || leaders.iter().any(|&l| l != leader) {
            return None;
        }
        ids.iter().position(|&id| id == Some(leader))
    }

    /// Waits until every member answers and all name the same leader.
    pub async fn wait_healthy(&mut self, within: Duration) -> Result<()> {
        let deadline = Instant::now() + within;
        loop {
            let mut agreed = true;
            let mut leader = None;
            for i in 0..self.members.len() {
                if let Some(exited) = self.exited(i) {
                    bail!(
                        "{} exited ({exited})\n{}",
                        self.members[i].name,
                        self.log_tail(i)
                    );
                }
                match self.status(i).await {
                    Ok((_, l, _)) if l != 0 && leader.is_none_or(|x| x == l) => leader = Some(l),
                    _ => agreed = false,
                }
            }
            if agreed {
                return Ok(());
            }
            if Instant::now() > deadline {
                let tails: String = (0..self.members.len()).map(|i| self.log_tail(i)).collect();
                bail!("the members did not agree on a leader within {within:?}\n{tails}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Asks member `i` to defragment its state database.
    pub async fn defragment(&self, i: usize) -> Result<(), tonic::Status> {
        let mut client = MaintenanceClient::new(self.channels[i].clone());
        client.defragment(DefragmentRequest {}).await?;
        Ok(())
    }

    /// Every member's HashKV at `revision`: (hash, compact revision).
    pub async fn hashes(&self, revision: i64) -> Result<Vec<(u32, i64)>> {
        let mut hashes = Vec::new();
        for (i, channel) in self.channels.iter().enumerate() {
            let mut client = MaintenanceClient::new(channel.clone());
            let response = client
                .hash_kv(HashKvRequest { revision })
                .await
                .with_context(|| format!("HashKV of {}", self.members[i].name))?
                .into_inner();
            hashes.push((response.hash, response.compact_revision));
        }
        Ok(hashes)
    }

    /// How long member `i`'s log is: where what comes next starts.
    pub fn log_len(&self, i: usize) -> u64 {
        std::fs::metadata(&self.members[i].log).map_or(0, |m| m.len())
    }

    /// Member `i`'s log from byte `from` on.
    pub fn log_since(&self, i: usize, from: u64) -> String {
        let text = std::fs::read(&self.members[i].log).unwrap_or_default();
        String::from_utf8_lossy(text.get(from as usize..).unwrap_or_default()).into_owned()
    }

    /// The end of member `i`'s log.
    pub fn log_tail(&self, i: usize) -> String {
        let text = std::fs::read_to_string(&self.members[i].log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let start = lines.len().saturating_sub(25);
        let mut tail = format!("--- last lines of {} ---\n", self.members[i].log.display());
        for line in &lines[start..] {
            tail.push_str(line);
            tail.push('\n');
        }
        tail
    }

    /// Copies what is on each member's tmpfs (if it has one) beside it, to
    /// `m<i>-disk-kept`, as a failed run's data is kept.
    pub fn keep_disks(&self) {
        for disk in self.members.iter().filter_map(|m| m.disk.as_ref()) {
            let mut kept = disk.as_os_str().to_owned();
            kept.push("-kept");
            let copied = Command::new("cp")
                .arg("-a")
                .arg(disk)
                .arg(&kept)
                .status()
                .is_ok_and(|s| s.success());
            if !copied {
                eprintln!("could not keep a copy of {}", disk.display());
            }
        }
    }

    /// Stops every member (SIGCONT first for a paused one).
    pub fn stop(&mut self) {
        for i in 0..self.members.len() {
            if self.members[i].paused {
                self.resume(i);
            }
            self.kill(i);
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.stop();
        for disk in self.members.iter().filter_map(|m| m.disk.as_ref()) {
            unmount(disk);
        }
    }
}

/// Mounts a tmpfs of `mib` MiB at `path` (made if missing).
fn mount_tmpfs(path: &Path, mib: u64) -> Result<()> {
    std::fs::create_dir_all(path).with_context(|| format!("creating {}", path.display()))?;
    let status = Command::new("mount")
        .args(["-t", "tmpfs", "-o", &format!("size={mib}m"), "tmpfs"])
        .arg(path)
        .status()
        .context("running mount")?;
    if !status.success() {
        bail!("mount -t tmpfs at {} failed: {status}", path.display());
    }
    Ok(())
}

/// Unmounts the tmpfs at `path`; detaches it if something still holds it.
/// Its contents go with it, as a failed run's logs (kept beside it) do not.
fn unmount(path: &Path) {
    let unmounted = Command::new("umount")
        .arg(path)
        .status()
        .is_ok_and(|s| s.success());
    if !unmounted {
        let _ = Command::new("umount").arg("-l").arg(path).status();
    }
}
