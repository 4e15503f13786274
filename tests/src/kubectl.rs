//! The real `kubectl` as a client of skiff: found on PATH (or skipped, or
//! failed under CI=true), always with the kubeconfig `skiff up` wrote and a
//! discovery cache of its own, run to its end or left running (`get -w`)
//! with its output collected until it is killed.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use tempfile::TempDir;

const INSTALL_HINT: &str =
    "install kubectl v1.32 (e.g. `apt-get install -y kubectl` from the Kubernetes apt repository)";
const POLL: Duration = Duration::from_millis(20);

/// The kubectl on PATH. Missing: under CI=true a panic that says how to
/// install it; otherwise a note that the test is skipped, and `None`.
pub fn kubectl_or_skip(test: &str) -> Option<PathBuf> {
    crate::tool::on_path_or_skip("kubectl", test, INSTALL_HINT)
}

/// The kubectl versions the Google Cloud SDK installs beside its
/// dispatcher (kubectl.1.27 … kubectl.1.33).
pub const MINORS: std::ops::RangeInclusive<u32> = 27..=33;
const SDK_BIN: &str = "/usr/lib/google-cloud-sdk/bin";

/// Every kubectl.1.NN found, by minor; a missing one is skipped with a
/// note outside CI and a panic under CI=true.
pub fn every_kubectl_version() -> Vec<(u32, PathBuf)> {
    MINORS
        .filter_map(|minor| kubectl_binary(minor).map(|binary| (minor, binary)))
        .collect()
}

/// The directories kubectl.1.NN may be in: beside the `kubectl` on PATH
/// (the dispatcher, followed through its links), then the SDK's.
fn search_dirs() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .map(|dir| dir.join("kubectl"))
        .filter(|candidate| candidate.is_file())
        .filter_map(|candidate| std::fs::canonicalize(candidate).ok())
        .filter_map(|real| real.parent().map(Path::to_path_buf))
        .collect();
    dirs.push(PathBuf::from(SDK_BIN));
    dirs
}

/// kubectl.1.`minor`, or `None` (skipped with a note; a panic under CI).
fn kubectl_binary(minor: u32) -> Option<PathBuf> {
    let name = format!("kubectl.1.{minor}");
    let found = search_dirs()
        .into_iter()
        .map(|dir| dir.join(&name))
        .find(|candidate| candidate.is_file());
    if found.is_none() {
        let hint = "install the Google Cloud SDK's kubectl component (`apt-get install google-cloud-cli-kubectl`), which ships kubectl.1.NN beside the dispatcher";
        if std::env::var("CI").is_ok_and(|ci| ci == "true") {
            panic!("{name} is not installed, and CI must run every kubectl version: {hint}");
        }
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED kubectl {name}: not found ({hint})"
        );
    }
    found
}

/// kubectl pointed at one kubeconfig, with its own discovery cache (a
/// cache shared between servers would describe the wrong one).
pub struct Kubectl {
    binary: PathBuf,
    kubeconfig: PathBuf,
    cache: TempDir,
}

/// What a finished kubectl printed.
#[derive(Debug)]
pub struct KubectlOutput {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl From<Output> for KubectlOutput {
    fn from(output: Output) -> Self {
        KubectlOutput {
            code: output.status.code(),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }
}

impl Kubectl {
    pub fn new(binary: PathBuf, kubeconfig: &Path) -> Result<Kubectl> {
        Ok(Kubectl {
            binary,
            kubeconfig: kubeconfig.to_path_buf(),
            cache: tempfile::tempdir().context("a kubectl cache directory")?,
        })
    }

    /// The same kubectl pointed at another kubeconfig (another member's
    /// API), with a cache of its own.
    pub fn with_kubeconfig(&self, kubeconfig: &Path) -> Result<Kubectl> {
        Kubectl::new(self.binary.clone(), kubeconfig)
    }

    /// Writes `text` to a manifest file named `name` and returns its path.
    pub fn manifest(&self, name: &str, text: &str) -> Result<PathBuf> {
        let path = self.cache.path().join(name);
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
        Ok(path)
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(&self.binary);
        command
            .env_remove("KUBECONFIG")
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .arg("--cache-dir")
            .arg(self.cache.path().join("cache"))
            .args(["--request-timeout", "20s"])
            .args(args)
            .current_dir(self.cache.path());
        command
    }

    /// Runs `kubectl ARGS` to its end.
    pub fn run(&self, args: &[&str]) -> Result<KubectlOutput> {
        self.command(args)
            .stdin(Stdio::null())
            .output()
            .map(KubectlOutput::from)
            .with_context(|| format!("running kubectl {}", args.join(" ")))
    }

    /// `kubectl ARGS` as one shell command line (for a wrapper such as
    /// `script`), each word quoted.
    pub fn command_line(&self, args: &[&str]) -> String {
        let command = self.command(args);
        std::iter::once(command.get_program())
            .chain(command.get_args())
            .map(|word| format!("'{}'", word.to_string_lossy().replace('\'', "'\\''")))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// Runs `kubectl ARGS` with `input` on its stdin, to its end.
    pub fn run_with_input(&self, args: &[&str], input: &[u8]) -> Result<KubectlOutput> {
        let mut child = self
            .command(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting kubectl {}", args.join(" ")))?;
        let mut stdin = child.stdin.take().context("kubectl's stdin")?;
        let input = input.to_vec();
        let writer = std::thread::spawn(move || stdin.write_all(&input));
        let output = child
            .wait_with_output()
            .with_context(|| format!("running kubectl {}", args.join(" ")))?;
        // kubectl may end before reading all of its input.
        let _ = writer.join();
        Ok(KubectlOutput::from(output))
    }

    /// Runs `kubectl ARGS`, which must succeed; returns its stdout.
    pub fn ok(&self, args: &[&str]) -> Result<String> {
        let output = self.run(args)?;
        ensure!(
            output.code == Some(0),
            "kubectl {} failed ({:?}); stdout:\n{}\nstderr:\n{}",
            args.join(" "),
            output.code,
            output.stdout,
            output.stderr
        );
        Ok(output.stdout)
    }

    /// Runs `kubectl ARGS`, which must fail with exit code 1; returns its stderr.
    pub fn fails(&self, args: &[&str]) -> Result<String> {
        let output = self.run(args)?;
        ensure!(
            output.code == Some(1),
            "kubectl {} should have failed with exit code 1 but gave {:?}; stdout:\n{}\nstderr:\n{}",
            args.join(" "),
            output.code,
            output.stdout,
            output.stderr
        );
        Ok(output.stderr)
    }

    /// Starts `kubectl ARGS` (a `get -w`); its lines are collected as printed.
    pub fn spawn(&self, args: &[&str]) -> Result<RunningKubectl> {
        let mut child = self
            .command(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting kubectl {}", args.join(" ")))?;
        let (lines, stderr) = crate::captured::capture(&mut child, "kubectl")?;
        Ok(RunningKubectl {
            child,
            lines,
            stderr,
        })
    }
}

/// A kubectl left running, killed on drop.
pub struct RunningKubectl {
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
    stderr: Arc<Mutex<String>>,
}

impl RunningKubectl {
    pub fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }

    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Waits until at least `count` lines are printed, at most `timeout`.
    pub async fn wait_for_lines(&mut self, count: usize, timeout: Duration) -> Result<Vec<String>> {
        let deadline = Instant::now() + timeout;
        loop {
            let lines = self.lines();
            if lines.len() >= count {
                return Ok(lines);
            }
            if let Some(status) = self.child.try_wait()? {
                // Let the reader threads drain the pipes.
                tokio::time::sleep(Duration::from_millis(100)).await;
                let lines = self.lines();
                if lines.len() >= count {
                    return Ok(lines);
                }
                bail!(
                    "kubectl exited ({status}) after {} of {count} lines: {lines:?}; stderr:\n{}",
                    lines.len(),
                    self.stderr()
                );
            }
            if Instant::now() >= deadline {
                bail!(
                    "kubectl printed {} of {count} lines within {timeout:?}: {lines:?}; stderr:\n{}",
                    lines.len(),
                    self.stderr()
                );
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Whether kubectl is still running.
    pub fn running(&mut self) -> Result<bool> {
        Ok(self.child.try_wait()?.is_none())
    }
}

impl Drop for RunningKubectl {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
