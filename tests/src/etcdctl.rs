//! The real `etcdctl` (ETCDCTL_API=3) as a client of skiff: find it (or
//! skip, or fail under CI), run one command against one endpoint, feed a
//! txn on stdin, and run a watch whose printed events are collected until
//! it is killed. Parsers for the outputs the tests check.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};

const INSTALL_HINT: &str = "apt-get install -y etcd-client";
const POLL: Duration = Duration::from_millis(20);

/// The etcdctl on PATH. Missing: under CI=true a panic that says how to
/// install it; otherwise a note that the test is skipped, and `None`.
pub fn etcdctl_or_skip(test: &str) -> Option<PathBuf> {
    crate::tool::on_path_or_skip("etcdctl", test, INSTALL_HINT)
}

/// etcdctl pointed at some endpoints.
#[derive(Clone)]
pub struct Etcdctl {
    binary: PathBuf,
    endpoints: String,
    /// Present the shared client certificate (skiff's client ports want it).
    tls: bool,
}

impl Etcdctl {
    pub fn new(binary: PathBuf, endpoints: impl Into<String>) -> Etcdctl {
        Etcdctl {
            binary,
            endpoints: endpoints.into(),
            tls: true,
        }
    }

    /// etcdctl over plain HTTP/2, as to a real etcd started without TLS.
    pub fn plain(binary: PathBuf, endpoints: impl Into<String>) -> Etcdctl {
        Etcdctl {
            tls: false,
            ..Etcdctl::new(binary, endpoints)
        }
    }

    /// etcdctl without endpoints, for its offline commands (`snapshot
    /// status`, `snapshot restore`).
    pub fn offline(binary: PathBuf) -> Etcdctl {
        Etcdctl::plain(binary, "127.0.0.1:1")
    }

    /// `etcdctl` with the shared client certificate
    /// ([`crate::test_pki`]): every skiff member's client port wants one.
    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(&self.binary);
        command
            .env("ETCDCTL_API", "3")
            .args(["--endpoints", &self.endpoints]);
        if self.tls {
            let [ca, cert, key] = crate::test_pki::store_files();
            command
                .arg("--cacert")
                .arg(&ca)
                .arg("--cert")
                .arg(&cert)
                .arg("--key")
                .arg(&key);
        }
        command
            .args(["--dial-timeout", "5s", "--command-timeout", "20s"])
            .args(args);
        command
    }

    /// Runs `etcdctl ARGS` to its end.
    pub fn run(&self, args: &[&str]) -> Result<Output> {
        self.command(args)
            .stdin(Stdio::null())
            .output()
            .with_context(|| format!("running etcdctl {}", args.join(" ")))
    }

    /// Runs `etcdctl ARGS`, which must succeed; returns its stdout.
    pub fn ok(&self, args: &[&str]) -> Result<String> {
        let output = self.run(args)?;
        check_success(args, &output)
    }

    /// Runs `etcdctl ARGS`, which must fail; returns its stderr.
    pub fn fails(&self, args: &[&str]) -> Result<String> {
        let output = self.run(args)?;
        ensure!(
            !output.status.success(),
            "etcdctl {} succeeded; stdout:\n{}",
            args.join(" "),
            String::from_utf8_lossy(&output.stdout)
        );
        Ok(String::from_utf8_lossy(&output.stderr).into_owned())
    }

    /// Runs `etcdctl ARGS` with `input` on stdin; it must succeed.
    pub fn ok_with_stdin(&self, args: &[&str], input: &str) -> Result<String> {
        let output = self.run_with_stdin(args, input)?;
        check_success(args, &output)
    }

    /// Runs `etcdctl ARGS` with `input` on stdin, to its end.
    pub fn run_with_stdin(&self, args: &[&str], input: &str) -> Result<Output> {
        let mut child = self
            .command(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("running etcdctl {}", args.join(" ")))?;
        child
            .stdin
            .take()
            .context("etcdctl has no stdin")?
            .write_all(input.as_bytes())?;
        Ok(child.wait_with_output()?)
    }

    /// Starts `etcdctl watch ARGS`; its events are collected as it prints them.
    pub fn watch(&self, args: &[&str]) -> Result<WatchProcess> {
        let mut all = vec!["watch"];
        all.extend_from_slice(args);
        self.background(&all)
    }

    /// Starts `etcdctl ARGS` that runs until it is killed (a watch, a
    /// lease keep-alive); its lines are collected as it prints them.
    pub fn background(&self, args: &[&str]) -> Result<WatchProcess> {
        let mut child = self
            .command(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("running etcdctl {}", args.join(" ")))?;
        let (lines, stderr) = crate::captured::capture(&mut child, "etcdctl")?;
        Ok(WatchProcess {
            child,
            lines,
            stderr,
        })
    }
}

fn check_success(args: &[&str], output: &Output) -> Result<String> {
    ensure!(
        output.status.success(),
        "etcdctl {} failed ({}); stderr:\n{}",
        args.join(" "),
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// One event as `etcdctl watch` prints it: type, key, value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchEvent {
    pub kind: String,
    pub key: String,
    pub value: String,
}

impl WatchEvent {
    pub fn put(key: &str, value: &str) -> WatchEvent {
        WatchEvent {
            kind: "PUT".into(),
            key: key.into(),
            value: value.into(),
        }
    }

    pub fn delete(key: &str) -> WatchEvent {
        WatchEvent {
            kind: "DELETE".into(),
            key: key.into(),
            value: String::new(),
        }
    }
}

/// A running `etcdctl watch` (or other long-running command), killed on drop.
pub struct WatchProcess {
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
    stderr: Arc<Mutex<String>>,
}

impl WatchProcess {
    /// The events printed so far (each is three lines; a partial one is left out).
    pub fn events(&self) -> Vec<WatchEvent> {
        let lines = self.lines.lock().unwrap();
        lines
            .chunks_exact(3)
            .map(|event| WatchEvent {
                kind: event[0].clone(),
                key: event[1].clone(),
                value: event[2].clone(),
            })
            .collect()
    }

    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Every line printed on stdout so far.
    pub fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }

    /// Sends SIGINT, as Ctrl-C would: `etcdctl lock` and `elect` then give
    /// up what they hold and close their session.
    pub fn interrupt(&self) -> Result<()> {
        let pid = libc::pid_t::try_from(self.child.id())?;
        // SAFETY: a signal to a child this value owns.
        if unsafe { libc::kill(pid, libc::SIGINT) } != 0 {
            bail!("SIGINT to etcdctl: {}", std::io::Error::last_os_error());
        }
        Ok(())
    }

    /// The exit status, if etcdctl has exited.
    pub fn try_exit(&mut self) -> Result<Option<std::process::ExitStatus>> {
        Ok(self.child.try_wait()?)
    }

    /// Waits until at least `count` events are printed, at most `timeout`.
    pub async fn wait_for_events(
        &mut self,
        count: usize,
        timeout: Duration,
    ) -> Result<Vec<WatchEvent>> {
        let deadline = Instant::now() + timeout;
        loop {
            let events = self.events();
            if events.len() >= count {
                return Ok(events);
            }
            if let Some(status) = self.child.try_wait()? {
                bail!(
                    "etcdctl watch exited ({status}) after {} of {count} events; stderr:\n{}",
                    events.len(),
                    self.stderr()
                );
            }
            if Instant::now() >= deadline {
                bail!(
                    "etcdctl watch printed {} of {count} events within {timeout:?}: {events:?}; stderr:\n{}",
                    events.len(),
                    self.stderr()
                );
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Waits for etcdctl to exit by itself (a watch the server cancelled).
    pub async fn wait_exit(&mut self, timeout: Duration) -> Result<std::process::ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait()? {
                // Let the reader threads drain the pipes.
                tokio::time::sleep(Duration::from_millis(100)).await;
                return Ok(status);
            }
            if Instant::now() >= deadline {
                bail!(
                    "etcdctl watch still runs after {timeout:?}; stdout: {:?}; stderr:\n{}",
                    self.lines.lock().unwrap(),
                    self.stderr()
                );
            }
            tokio::time::sleep(POLL).await;
        }
    }
}

impl Drop for WatchProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Standard base64 (as etcdctl's JSON output encodes keys and values).
pub fn base64_decode(text: &str) -> Result<Vec<u8>> {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = Vec::new();
    let mut buffer = 0u32;
    let mut bits = 0;
    for byte in text.bytes().filter(|&b| b != b'=') {
        let Some(sextet) = ALPHABET.iter().position(|&a| a == byte) else {
            bail!("{text:?} is not base64");
        };
        buffer = (buffer << 6) | sextet as u32;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((buffer >> bits) as u8);
            buffer &= (1 << bits) - 1;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::base64_decode;

    #[test]
    fn base64_round_trips_etcdctl_output() {
        assert_eq!(base64_decode("L3QvYQ==").unwrap(), b"/t/a");
        assert_eq!(base64_decode("YWJj").unwrap(), b"abc");
        assert_eq!(base64_decode("YWI=").unwrap(), b"ab");
        assert!(base64_decode("!!").is_err());
    }
}
