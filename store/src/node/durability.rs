//! Durability chores: the data directory lock, making sled's state
//! durable (flush, then fsync its files ourselves, since sled's flush uses
//! sync_file_range) before the log before it is released, and stopping a
//! member whose log or state can no longer be written.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};

use super::disk_space::SpaceGuard;
use super::driver::DriverRequest;
use crate::error::{Result, StoreError};
use crate::mvcc::KvStore;

/// The exit status of a process whose member stopped because its log or
/// state database could not be written (sysexits' EX_IOERR).
pub const EXIT_STORAGE_FAILED: i32 = 74;

/// Stops a member whose log or state database could not be written: after
/// a failed write or fsync neither can be trusted to hold what comes next
/// (see `disk_space`), and nothing acknowledged depends on them, since a
/// write is only acknowledged once its log record was synced. With `exit`
/// the process ends, as etcd's does, and a restart recovers from disk;
/// otherwise only the member's driver stops (the caller's part).
pub(crate) fn stop_member(exit: bool, what: &str, error: &StoreError) {
    if error.is_no_space() {
        tracing::error!(
            error = %error,
            "{what} failed: the file system of the data directory is full. This member stops; free space there (or delete its reserved-space file) and start it again: every acknowledged write is in its write-ahead log"
        );
    } else {
        tracing::error!(
            error = %error,
            "{what} failed: the data directory cannot be written. This member stops; fix the disk and start it again: every acknowledged write is in its write-ahead log"
        );
    }
    if exit {
        std::process::exit(EXIT_STORAGE_FAILED);
    }
}

/// Takes the data directory for this process: a second process gets a
/// clear error instead of two writers on one log.
pub(crate) fn lock_data_dir(dir: &Path) -> Result<File> {
    fs::create_dir_all(dir).map_err(|e| StoreError::storage("creating the data directory", e))?;
    let path = dir.join("LOCK");
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(|e| StoreError::storage("opening the data directory lock", e))?;
    if file.try_lock().is_err() {
        let holder = fs::read_to_string(&path)
            .ok()
            .map(|pid| pid.trim().to_string())
            .filter(|pid| !pid.is_empty())
            .map(|pid| format!(" (pid {pid})"))
            .unwrap_or_default();
        return Err(StoreError::DataDirLocked {
            path: dir.to_path_buf(),
            holder,
        });
    }
    // Only a hint for the next process's error message: a full disk must
    // not keep the member from starting.
    if let Err(err) = file
        .set_len(0)
        .and_then(|_| writeln!(file, "{}", std::process::id()))
    {
        tracing::warn!(path = %path.display(), error = %err, "could not write this process's ID into the data directory lock");
    }
    Ok(file)
}

/// fsyncs every file under `dir`, and `dir` itself. sled may replace a
/// file of its own (a snapshot of its page table) while this runs: a file
/// gone between listing and opening is not an error, as there is nothing
/// of it left to make durable.
pub(crate) fn fsync_tree(dir: &Path) -> std::io::Result<()> {
    let gone = |err: &std::io::Error| err.kind() == std::io::ErrorKind::NotFound;
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let path = entry.path();
        let synced = match entry.file_type() {
            Ok(kind) if kind.is_dir() => fsync_tree(&path),
            Ok(_) => File::open(&path).and_then(|file| file.sync_all()),
            Err(err) => Err(err),
        };
        match synced {
            Err(err) if !gone(&err) => return Err(err),
            _ => {}
        }
    }
    File::open(dir)?.sync_all()
}

/// How the flush loop runs.
pub(crate) struct Flushing {
    pub every: Duration,
    /// Looked at before each flush, so that the reserve is given back
    /// before sled would find the file system full.
    pub space: Arc<SpaceGuard>,
    /// See [`super::StoreConfig::exit_on_storage_failure`].
    pub exit_on_failure: bool,
}

/// Periodically makes sled durable up to the applied index, then lets the
/// writer drop log segments at or below it. A failed flush stops the
/// member: sled keeps its first I/O error, and a failed fsync cannot be
/// retried.
pub(crate) async fn flush_loop(
    kv: Arc<KvStore>,
    requests: mpsc::Sender<DriverRequest>,
    flushing: Flushing,
    mut shutdown: watch::Receiver<bool>,
) {
    let every = flushing.every;
    let mut flushed = kv.applied_index();
    // The first flush comes one interval after open, not at once.
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.changed() => return,
        }
        let applied = kv.applied_index();
        if applied == flushed {
            continue;
        }
        flushing.space.check();
        let state = kv.clone();
        // Everything applied up to `applied` goes to sled, then to disk.
        let flush = move || state.sync_to_disk();
        match tokio::task::spawn_blocking(flush).await {
            Ok(Ok(())) => {
                flushed = applied;
                if requests
                    .send(DriverRequest::Release(applied))
                    .await
                    .is_err()
                {
                    return;
                }
            }
            Ok(Err(err)) => {
                stop_member(
                    flushing.exit_on_failure,
                    "flushing the state database",
                    &err,
                );
                let _ = requests.send(DriverRequest::Stop).await;
                return;
            }
            Err(err) => tracing::warn!(error = %err, "flush task failed"),
        }
    }
}
