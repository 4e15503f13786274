//! Named crash points for the fault-injection suite (docs/failpoints.md).
//! With the `failpoints` feature, a point configured to `return` ends the
//! process on the spot, as SIGKILL would (or, for `wal::lose_unsynced`, as
//! a power cut would); without it every point compiles to nothing. Not for
//! errors a member survives: those are tested beside their code.

/// Ends the process at this point when the failpoint `name` is set to
/// `return` (the `FAILPOINTS` variable, read at start). Other actions of the
/// `fail` crate (`sleep`, `pause`, `print`, `panic`) act here as usual.
///
/// - `crash_point!("wal::after_fsync")`
/// - `crash_point!("apply::before_answer" if !answers.is_empty())`: only
///   counted when the condition holds.
/// - `crash_point!("wal::lose_unsynced", |arg| lose(arg))`: runs the
///   expression with `return`'s argument first, then ends the process.
#[cfg(feature = "failpoints")]
#[macro_export]
macro_rules! crash_point {
    ($name:literal) => {
        if $crate::failpoints::hit($name).is_some() {
            $crate::failpoints::crash($name)
        }
    };
    ($name:literal if $cond:expr) => {
        if $cond && $crate::failpoints::hit($name).is_some() {
            $crate::failpoints::crash($name)
        }
    };
    ($name:literal, |$arg:ident| $before:expr) => {
        if let Some($arg) = $crate::failpoints::hit($name) {
            $before;
            $crate::failpoints::crash($name)
        }
    };
}

/// Without the `failpoints` feature a crash point is nothing at all.
#[cfg(not(feature = "failpoints"))]
#[macro_export]
macro_rules! crash_point {
    ($name:literal) => {};
    ($name:literal if $cond:expr) => {};
    ($name:literal, |$arg:ident| $before:expr) => {};
}

#[cfg(feature = "failpoints")]
pub use enabled::*;

#[cfg(feature = "failpoints")]
mod enabled {
    use std::collections::BTreeMap;
    use std::path::{Path, PathBuf};
    use std::sync::Mutex;

    use crate::error::{Result, StoreError};
    use crate::mvcc::KvStore;

    /// Every crash point, as docs/failpoints.md lists them. `FAILPOINTS`
    /// naming anything else is refused: a typo would test nothing.
    pub const POINTS: &[&str] = &[
        "wal::before_fsync",
        "wal::after_fsync",
        "wal::lose_unsynced",
        "raft::before_persist",
        "raft::after_persist",
        "apply::before_answer",
        "snapshot::install",
        "compaction::mid",
        "defrag::mid",
        "defrag::switched",
        "peer::send",
    ];

    /// The point that simulates a power cut, for which the state database
    /// keeps a copy of itself as of its last fsync.
    const LOSE_UNSYNCED: &str = "wal::lose_unsynced";

    /// Where the copies of the state database are kept, in the data directory.
    const COPIES: &str = "failpoints-synced";

    /// Sets every failpoint `FAILPOINTS` names (`name=actions;...`, the
    /// `fail` crate's syntax) and returns them as (name, actions).
    pub fn configure_from_env() -> Result<Vec<(String, String)>> {
        let Ok(spec) = std::env::var("FAILPOINTS") else {
            return Ok(Vec::new());
        };
        configure(&spec)
    }

    /// Sets the failpoints of `spec` (`name=actions;...`).
    pub fn configure(spec: &str) -> Result<Vec<(String, String)>> {
        let mut configured = Vec::new();
        for entry in spec.split(';').map(str::trim).filter(|e| !e.is_empty()) {
            let Some((name, actions)) = entry.split_once('=') else {
                return Err(StoreError::InvalidConfig(format!(
                    "FAILPOINTS entry {entry:?} is not name=actions (e.g. wal::before_fsync=5%return)"
                )));
            };
            let (name, actions) = (name.trim(), actions.trim());
            if !POINTS.contains(&name) {
                return Err(StoreError::InvalidConfig(format!(
                    "FAILPOINTS names {name:?}, which is no failpoint; the failpoints are {}",
                    POINTS.join(", ")
                )));
            }
            fail::cfg(name, actions).map_err(|err| {
                StoreError::InvalidConfig(format!(
                    "FAILPOINTS: bad actions {actions:?} for {name}: {err}"
                ))
            })?;
            configured.push((name.to_string(), actions.to_string()));
        }
        Ok(configured)
    }

    /// Whether failpoint `name` fires now, with `return`'s argument.
    pub fn hit(name: &str) -> Option<Option<String>> {
        fail::eval(name, |arg| arg)
    }

    /// Ends the process as SIGKILL would: one line on stderr, then abort,
    /// with no unwinding, no destructor and no buffer flushed.
    pub fn crash(name: &str) -> ! {
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "skiff: crashing at failpoint {name} (pid {})",
            std::process::id()
        );
        std::process::abort()
    }

    /// The state databases' copies as of their last fsync: live directory
    /// to copy.
    static SYNCED: Mutex<BTreeMap<PathBuf, PathBuf>> = Mutex::new(BTreeMap::new());

    /// After the state database `kv` was fsynced: while a power cut is
    /// asked for, copies it as it is on disk, which is what a power cut
    /// could leave of it (writes made since are a subset of what it could
    /// keep). Applied batches wait meanwhile.
    pub(crate) fn keep_synced_state(kv: &KvStore) {
        let armed = fail::list().iter().any(|(name, _)| name == LOSE_UNSYNCED);
        let Some(location) = kv.location.as_ref().filter(|_| armed) else {
            return;
        };
        let _no_batch_written = kv.behind.lock();
        let Some(live) = kv.state_dir() else {
            return;
        };
        let mut synced = SYNCED.lock().unwrap_or_else(|e| e.into_inner());
        if let Err(err) =
            copy_state(&location.data_dir, &live).map(|copy| synced.insert(live, copy))
        {
            tracing::warn!(error = %err, "could not copy the state database for wal::lose_unsynced");
        }
    }

    fn copy_state(data_dir: &Path, live: &Path) -> std::io::Result<PathBuf> {
        let copies = data_dir.join(COPIES);
        std::fs::create_dir_all(&copies)?;
        let name = live.file_name().unwrap_or_default().to_string_lossy();
        let copy = copies.join(name.as_ref());
        let partial = copies.join(format!("{name}.partial"));
        if partial.exists() {
            std::fs::remove_dir_all(&partial)?;
        }
        copy_dir(live, &partial)?;
        if copy.exists() {
            std::fs::remove_dir_all(&copy)?;
        }
        std::fs::rename(&partial, &copy)?;
        Ok(copy)
    }

    /// Copies `from` into a new directory `to`. A file sled removes while
    /// this runs is skipped: a power cut could have lost it too.
    fn copy_dir(from: &Path, to: &Path) -> std::io::Result<()> {
        std::fs::create_dir(to)?;
        for entry in std::fs::read_dir(from)? {
            let entry = entry?;
            let target = to.join(entry.file_name());
            let copied = match entry.file_type()? {
                kind if kind.is_dir() => copy_dir(&entry.path(), &target),
                _ => std::fs::copy(entry.path(), &target).map(|_| ()),
            };
            match copied {
                Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
                other => other?,
            }
        }
        Ok(())
    }

    /// Puts every state database back as it was at its last fsync, as a
    /// power cut could leave it; the live one moves aside into the copies'
    /// directory (sled's threads may still write to its open files).
    pub(crate) fn lose_unsynced_state() {
        let synced = SYNCED.lock().unwrap_or_else(|e| e.into_inner());
        for (live, copy) in synced.iter() {
            if !live.is_dir() || !copy.is_dir() {
                continue;
            }
            let Some(copies) = copy.parent() else {
                continue;
            };
            let name = live.file_name().unwrap_or_default().to_string_lossy();
            let lost = copies.join(format!("{name}.lost"));
            let restored = std::fs::remove_dir_all(&lost)
                .or_else(|err| match err.kind() {
                    std::io::ErrorKind::NotFound => Ok(()),
                    _ => Err(err),
                })
                .and_then(|()| std::fs::rename(live, &lost))
                .and_then(|()| std::fs::rename(copy, live));
            match restored {
                Ok(()) => eprintln!(
                    "skiff: wal::lose_unsynced put {} back as of its last fsync",
                    live.display()
                ),
                Err(err) => eprintln!(
                    "skiff: wal::lose_unsynced could not put {} back as of its last fsync: {err}",
                    live.display()
                ),
            }
        }
    }
}
