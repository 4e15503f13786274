//! A `skiff` child process as the process tests drive it: its stdout and
//! stderr go to files that can be read while it runs and after it exits;
//! it can be signalled and awaited; it is SIGKILLed on drop (a failing test
//! leaves nothing behind) and its stderr is shown if the test panicked.
//! Unix only.

use std::ffi::OsStr;
use std::fs::File;
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::skiff_bin::skiff_bin;

const POLL: Duration = Duration::from_millis(20);

pub struct SkiffProcess {
    label: String,
    child: Child,
    stdout: PathBuf,
    stderr: PathBuf,
    exit: Option<ExitStatus>,
    _output_dir: tempfile::TempDir,
}

impl SkiffProcess {
    /// Starts `skiff ARGS`; `label` names it in messages.
    pub fn spawn<I, S>(label: &str, args: I) -> Result<SkiffProcess>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let mut command = Command::new(skiff_bin());
        command.args(args);
        Self::spawn_command(label, command)
    }

    /// Starts `skiff ARGS` in the network namespace `netns` (`ip netns
    /// exec`, which also gives it the namespace's own /sys), as on a host
    /// of its own.
    pub fn spawn_in_netns<I, S>(label: &str, netns: &str, args: I) -> Result<SkiffProcess>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let mut command = Command::new("ip");
        command
            .args(["netns", "exec", netns])
            .arg(skiff_bin())
            .args(args);
        Self::spawn_command(label, command)
    }

    fn spawn_command(label: &str, mut command: Command) -> Result<SkiffProcess> {
        let output_dir = tempfile::tempdir().context("a directory for the process's output")?;
        let stdout = output_dir.path().join("stdout");
        let stderr = output_dir.path().join("stderr");
        // Kubelets share the host's network unless a test asks for pod
        // networks (`--pod-network=cni`, which beats the environment):
        // concurrent tests would otherwise share the default bridge and
        // cluster CIDR.
        if std::env::var_os("SKIFF_POD_NETWORK").is_none() {
            command.env("SKIFF_POD_NETWORK", "host");
        }
        // Nor do they program Services into the host's nftables unless a
        // test asks (`--service-proxy=true`, with a table and a Service
        // range of its own).
        if std::env::var_os("SKIFF_SERVICE_PROXY").is_none() {
            command.env("SKIFF_SERVICE_PROXY", "false");
        }
        let child = command
            .env("SKIFF_PKI_DIR", crate::test_pki::dir())
            .stdin(Stdio::null())
            .stdout(File::create(&stdout)?)
            .stderr(File::create(&stderr)?)
            .spawn()
            .with_context(|| format!("starting {label}"))?;
        Ok(SkiffProcess {
            label: label.to_string(),
            child,
            stdout,
            stderr,
            exit: None,
            _output_dir: output_dir,
        })
    }

    /// Runs `skiff ARGS` to its end (at most `timeout`): exit status, stdout, stderr.
    pub async fn run<I, S>(args: I, timeout: Duration) -> Result<(ExitStatus, String, String)>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let mut process = SkiffProcess::spawn("skiff", args)?;
        let status = process.wait_exit(timeout).await?;
        Ok((status, process.stdout(), process.stderr()))
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn label(&self) -> &str {
        &self.label
    }

    pub fn stdout(&self) -> String {
        std::fs::read_to_string(&self.stdout).unwrap_or_default()
    }

    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// The exit status, if it has exited.
    pub fn try_exit(&mut self) -> Result<Option<ExitStatus>> {
        if self.exit.is_none() {
            self.exit = self.child.try_wait()?;
        }
        Ok(self.exit)
    }

    /// Waits for a stdout line containing `needle` and returns it; fails if
    /// the process exits first or `timeout` passes.
    pub async fn wait_for_line(&mut self, needle: &str, timeout: Duration) -> Result<String> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(line) = self.stdout().lines().find(|l| l.contains(needle)) {
                return Ok(line.to_string());
            }
            if let Some(status) = self.try_exit()? {
                bail!(
                    "{} exited ({status}) before printing {needle:?}; stderr:\n{}",
                    self.label,
                    self.stderr()
                );
            }
            if Instant::now() >= deadline {
                bail!(
                    "{} printed no {needle:?} within {timeout:?}; stdout:\n{}\nstderr:\n{}",
                    self.label,
                    self.stdout(),
                    self.stderr()
                );
            }
            tokio::time::sleep(POLL).await;
        }
    }

    pub fn signal(&self, signal: i32) -> Result<()> {
        let pid = libc::pid_t::try_from(self.pid())?;
        // SAFETY: kill touches no memory; the pid is our unreaped child.
        if unsafe { libc::kill(pid, signal) } != 0 {
            return Err(std::io::Error::last_os_error())
                .with_context(|| format!("signalling {}", self.label));
        }
        Ok(())
    }

    /// Waits for the process to exit, at most `timeout`.
    pub async fn wait_exit(&mut self, timeout: Duration) -> Result<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.try_exit()? {
                return Ok(status);
            }
            if Instant::now() >= deadline {
                bail!(
                    "{} did not exit within {timeout:?}; stderr:\n{}",
                    self.label,
                    self.stderr()
                );
            }
            tokio::time::sleep(POLL).await;
        }
    }
}

impl Drop for SkiffProcess {
    fn drop(&mut self) {
        if matches!(self.try_exit(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        if std::thread::panicking() {
            eprintln!("--- stderr of {} ---\n{}", self.label, self.stderr());
        }
    }
}

/// Whether a process with this pid exists (a zombie counts).
pub fn pid_exists(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    // SAFETY: signal 0 only checks that the process exists.
    unsafe { libc::kill(pid, 0) == 0 }
}

/// Addresses on 127.0.0.1 nothing listens on: all bound at once so they
/// differ, then let go. They are picked at random below the kernel's
/// ephemeral range (32768–60999 on Linux), where the outgoing connections
/// of every other test could take a port between this check and the
/// server's bind.
pub fn free_addrs(count: usize) -> Result<Vec<SocketAddr>> {
    use rand::Rng;
    const PORTS: std::ops::Range<u16> = 10_000..32_768;
    let mut rng = rand::thread_rng();
    let mut listeners = Vec::with_capacity(count);
    let mut tries = 0;
    while listeners.len() < count {
        tries += 1;
        if tries > 10_000 {
            bail!("no free port on 127.0.0.1 in {PORTS:?} after {tries} tries");
        }
        let port = rng.gen_range(PORTS);
        if let Ok(listener) = TcpListener::bind((Ipv4Addr::LOCALHOST, port)) {
            listeners.push(listener);
        }
    }
    Ok(listeners
        .iter()
        .map(TcpListener::local_addr)
        .collect::<std::io::Result<_>>()?)
}

/// `skiff store` flags for one member.
pub fn store_args(
    name: &str,
    data_dir: &Path,
    client: SocketAddr,
    cluster: Option<(SocketAddr, &str)>,
) -> Vec<String> {
    let mut args = vec![
        "store".to_string(),
        "--name".into(),
        name.into(),
        "--data-dir".into(),
        data_dir.display().to_string(),
        "--client-listen".into(),
        client.to_string(),
    ];
    if let Some((peer, initial_cluster)) = cluster {
        args.extend([
            "--peer-listen".into(),
            peer.to_string(),
            "--initial-cluster".into(),
            initial_cluster.into(),
        ]);
    }
    args
}
