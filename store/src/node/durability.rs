//! Durability chores: the data directory lock, and making sled's state
//! durable (flush, then fsync its files ourselves, since sled's flush uses
//! sync_file_range) before the log before it is released.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};

use super::driver::DriverRequest;
use crate::error::{Result, StoreError};
use crate::mvcc::KvStore;

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
    file.set_len(0)
        .and_then(|_| writeln!(file, "{}", std::process::id()))
        .map_err(|e| StoreError::storage("writing the data directory lock", e))?;
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

/// Periodically makes sled durable up to the applied index, then lets the
/// writer drop log segments at or below it.
pub(crate) async fn flush_loop(
    kv: Arc<KvStore>,
    requests: mpsc::Sender<DriverRequest>,
    every: Duration,
    mut shutdown: watch::Receiver<bool>,
) {
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
                tracing::warn!(error = %err, "flushing the state database failed; the log keeps everything")
            }
            Err(err) => tracing::warn!(error = %err, "flush task failed"),
        }
    }
}
