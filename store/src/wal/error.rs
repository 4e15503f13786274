//! Errors of the write-ahead log. Each message names the file or directory and
//! says what the operator can do about it.

use std::io;
use std::path::PathBuf;

use super::record::Corruption;

#[derive(Debug, thiserror::Error)]
pub enum WalError {
    #[error("write-ahead log: failed to {op} {}: {source}", path.display())]
    Io {
        /// What was being done, e.g. "fdatasync segment".
        op: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },

    #[error(
        "write-ahead log segment {} is corrupt at byte offset {offset}: {reason}. \
         Only a torn write at the end of the newest segment is repaired automatically; \
         this is not one, so acknowledged records would be lost: restore this member \
         from a snapshot or a healthy peer",
        path.display()
    )]
    Corrupt {
        path: PathBuf,
        offset: u64,
        reason: Corruption,
    },

    #[error(
        "write-ahead log in {} has segment {found:016x} right after {previous:016x}; \
         segments are numbered consecutively and only removed oldest first, so a file \
         was deleted, lost or copied in by hand: put the directory back as it was or \
         recover this member from a snapshot or a healthy peer",
        dir.display()
    )]
    SegmentGap {
        dir: PathBuf,
        previous: u64,
        found: u64,
    },

    #[error(
        "write-ahead log segment {} holds entry {found} where entry {expected} or an \
         earlier one was appended next; an entry between them is missing, so acknowledged \
         records would be lost: restore this member from a snapshot or a healthy peer",
        path.display()
    )]
    EntryGap {
        path: PathBuf,
        expected: u64,
        found: u64,
    },

    #[error(
        "write-ahead log in {} is already open by another process or handle; \
         stop the other skiff instance using this data directory",
        dir.display()
    )]
    Locked { dir: PathBuf },

    #[error(
        "write-ahead log in {} refuses writes after an earlier failure ({cause}); \
         a failed write or fsync cannot be retried safely: restart the process to \
         recover from what is on disk",
        dir.display()
    )]
    Failed {
        dir: PathBuf,
        cause: String,
        /// The earlier failure was a full file system.
        no_space: bool,
    },

    /// Returned by the caller's replay visitor to abort [`super::Wal::open`].
    #[error("replaying the write-ahead log failed: {0}")]
    Replay(#[source] Box<dyn std::error::Error + Send + Sync>),
}

impl WalError {
    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: io::Error) -> WalError {
        WalError::Io {
            op,
            path: path.into(),
            source,
        }
    }

    /// Whether the log failed because its file system was full (ENOSPC)
    /// or the disk quota was used up (EDQUOT), now or before.
    pub fn is_no_space(&self) -> bool {
        match self {
            WalError::Io { source, .. } => is_no_space(source),
            WalError::Failed { no_space, .. } => *no_space,
            _ => false,
        }
    }
}

pub(crate) fn is_no_space(err: &io::Error) -> bool {
    matches!(err.raw_os_error(), Some(libc::ENOSPC | libc::EDQUOT))
        || err.kind() == io::ErrorKind::StorageFull
        || err.kind() == io::ErrorKind::QuotaExceeded
}

/// Whether an error's text (sled's errors reach the store as text only)
/// names a full file system or a used-up disk quota.
pub fn names_no_space(text: &str) -> bool {
    [
        "No space left on device",
        "Disk quota exceeded",
        "StorageFull",
        "QuotaExceeded",
    ]
    .iter()
    .any(|name| text.contains(name))
}
