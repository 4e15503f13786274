//! The audit log file: a writer thread fed through a bounded queue, so a
//! request never waits on the disk. A full queue drops the event and
//! counts it. At `max_size` bytes the file is renamed `FILE.1` (older
//! ones shift to `.2`, … up to `max_backups`) and a new one begun.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender, TryRecvError, TrySendError};
use std::sync::Arc;

use serde_json::Value;

#[derive(Debug, Clone)]
pub struct LogConfig {
    /// The file, or `-` for standard output.
    pub path: PathBuf,
    /// Bytes before the file is rotated (0: never).
    pub max_size: u64,
    /// Rotated files kept.
    pub max_backups: usize,
    /// Events waiting for the writer before new ones are dropped.
    pub queue: usize,
}

impl LogConfig {
    pub fn new(path: PathBuf) -> LogConfig {
        LogConfig {
            path,
            max_size: 100 << 20,
            max_backups: 3,
            queue: 10_000,
        }
    }
}

/// Where events go. Cheap to clone.
#[derive(Clone)]
pub struct AuditLog {
    sender: SyncSender<Vec<u8>>,
    counts: Arc<Counts>,
}

#[derive(Default)]
struct Counts {
    written: AtomicU64,
    dropped: AtomicU64,
}

impl AuditLog {
    /// Opens (appends to) the file and starts its writer thread.
    pub fn open(config: LogConfig) -> std::io::Result<AuditLog> {
        let output = Output::open(&config)?;
        let (sender, receiver) = mpsc::sync_channel(config.queue.max(1));
        let counts = Arc::new(Counts::default());
        let thread_counts = counts.clone();
        std::thread::Builder::new()
            .name("skiff-audit".into())
            .spawn(move || write_events(receiver, output, config, &thread_counts))?;
        Ok(AuditLog { sender, counts })
    }

    /// Queues one event; never blocks.
    pub fn write(&self, event: &Value) {
        let mut line = serde_json::to_vec(event).unwrap_or_default();
        line.push(b'\n');
        match self.sender.try_send(line) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
                let dropped = self.counts.dropped.fetch_add(1, Ordering::Relaxed) + 1;
                if dropped.is_power_of_two() {
                    tracing::warn!(dropped, "the audit log falls behind; events dropped");
                }
            }
        }
    }

    /// (events written, events dropped) so far.
    pub fn counts(&self) -> (u64, u64) {
        (
            self.counts.written.load(Ordering::Relaxed),
            self.counts.dropped.load(Ordering::Relaxed),
        )
    }
}

enum Output {
    Stdout(std::io::Stdout),
    File { file: BufWriter<File>, size: u64 },
}

impl Output {
    fn open(config: &LogConfig) -> std::io::Result<Output> {
        if config.path == Path::new("-") {
            return Ok(Output::Stdout(std::io::stdout()));
        }
        if let Some(dir) = config.path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)?;
        }
        let file = open_private(&config.path)?;
        let size = file.metadata()?.len();
        Ok(Output::File {
            file: BufWriter::new(file),
            size,
        })
    }

    fn write(&mut self, line: &[u8], config: &LogConfig) -> std::io::Result<()> {
        match self {
            Output::Stdout(out) => out.write_all(line),
            Output::File { file, size } => {
                if config.max_size > 0 && *size > 0 && *size + line.len() as u64 > config.max_size {
                    file.flush()?;
                    rotate(&config.path, config.max_backups)?;
                    *file = BufWriter::new(open_private(&config.path)?);
                    *size = 0;
                }
                file.write_all(line)?;
                *size += line.len() as u64;
                Ok(())
            }
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Output::Stdout(out) => out.flush(),
            Output::File { file, .. } => file.flush(),
        }
    }
}

/// The log holds who did what: readable by its owner only.
fn open_private(path: &Path) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
}

/// FILE → FILE.1, FILE.1 → FILE.2, …; the oldest beyond `keep` removed.
fn rotate(path: &Path, keep: usize) -> std::io::Result<()> {
    let numbered = |n: usize| {
        let mut name = path.as_os_str().to_owned();
        name.push(format!(".{n}"));
        PathBuf::from(name)
    };
    if keep == 0 {
        return std::fs::remove_file(path);
    }
    let _ = std::fs::remove_file(numbered(keep));
    for n in (1..keep).rev() {
        let from = numbered(n);
        if from.exists() {
            std::fs::rename(&from, numbered(n + 1))?;
        }
    }
    std::fs::rename(path, numbered(1))
}

fn write_events(
    receiver: Receiver<Vec<u8>>,
    mut output: Output,
    config: LogConfig,
    counts: &Counts,
) {
    let mut failing = false;
    while let Ok(mut line) = receiver.recv() {
        loop {
            match output.write(&line, &config) {
                Ok(()) => {
                    counts.written.fetch_add(1, Ordering::Relaxed);
                    failing = false;
                }
                Err(err) => {
                    counts.dropped.fetch_add(1, Ordering::Relaxed);
                    if !failing {
                        tracing::error!(error = %err, path = %config.path.display(), "writing the audit log failed");
                        failing = true;
                    }
                }
            }
            // Flush once the queue is empty: a burst is one write.
            match receiver.try_recv() {
                Ok(next) => line = next,
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => {
                    let _ = output.flush();
                    return;
                }
            }
        }
        if let Err(err) = output.flush() {
            if !failing {
                tracing::error!(error = %err, "flushing the audit log failed");
                failing = true;
            }
        }
        // Events that come meanwhile wait in the queue: a writer asleep
        // here is not woken by each of them (a thread wake-up per request
        // cost the API more than the write), and the next turn writes them
        // as one burst.
        std::thread::sleep(WRITE_PAUSE);
    }
    let _ = output.flush();
}

/// How long the writer rests after a burst: the most an event waits for
/// the file beyond the writing itself.
const WRITE_PAUSE: std::time::Duration = std::time::Duration::from_millis(5);

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn wait_written(log: &AuditLog, n: u64) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while log.counts().0 < n {
            assert!(
                std::time::Instant::now() < deadline,
                "only {:?}",
                log.counts()
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }

    #[test]
    fn events_are_json_lines_and_the_file_rotates_at_its_size() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.log");
        let mut config = LogConfig::new(path.clone());
        config.max_size = 1000;
        config.max_backups = 2;
        let log = AuditLog::open(config).unwrap();
        for i in 0..40 {
            log.write(&json!({"n": i, "pad": "x".repeat(80)}));
        }
        wait_written(&log, 40);
        let mut lines = Vec::new();
        for name in ["audit.log.2", "audit.log.1", "audit.log"] {
            let text = std::fs::read_to_string(dir.path().join(name)).unwrap();
            assert!(text.len() <= 1000, "{name} is {} bytes", text.len());
            lines.extend(text.lines().map(|l| {
                serde_json::from_str::<Value>(l).unwrap()["n"]
                    .as_u64()
                    .unwrap()
            }));
        }
        assert!(!dir.path().join("audit.log.3").exists());
        // The newest events, in order, with no gap.
        assert_eq!(lines.last(), Some(&39));
        assert!(lines.windows(2).all(|w| w[1] == w[0] + 1), "{lines:?}");
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o077, 0);
    }

    #[test]
    fn a_full_queue_drops_events_instead_of_blocking() {
        // A writer that never reads: the queue holds one event.
        let (sender, receiver) = mpsc::sync_channel(1);
        let log = AuditLog {
            sender,
            counts: Arc::default(),
        };
        for i in 0..3 {
            log.write(&json!({"n": i}));
        }
        assert_eq!(log.counts(), (0, 2));
        let kept: Value = serde_json::from_slice(&receiver.recv().unwrap()).unwrap();
        assert_eq!(kept["n"], 0);
    }
}
