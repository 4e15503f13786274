//! The store's error type. Messages match etcd's so that clients (and the
//! gRPC layer) can recognise them; every variant says what was wrong.

use std::path::PathBuf;

use crate::wal::WalError;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("etcdserver: key is not provided")]
    EmptyKey,
    #[error("etcdserver: key not found")]
    KeyNotFound,
    #[error("etcdserver: value is provided")]
    ValueProvided,
    #[error("etcdserver: lease is provided")]
    LeaseProvided,
    #[error("etcdserver: too many operations in txn request (the limit is {limit})")]
    TooManyOps { limit: usize },
    #[error(
        "etcdserver: too many operations in txn request (txns nested deeper than {limit} levels)"
    )]
    TxnTooDeep { limit: usize },
    #[error("etcdserver: duplicate key given in txn request")]
    DuplicateKey,
    #[error("etcdserver: request is too large ({size} bytes; the limit is {limit})")]
    RequestTooLarge { size: usize, limit: usize },
    #[error("mvcc: required revision has been compacted (compacted revision {compact_revision})")]
    Compacted { compact_revision: i64 },
    #[error("mvcc: required revision is a future revision (current revision {current_revision})")]
    FutureRevision { current_revision: i64 },
    #[error("etcdserver: requested lease not found")]
    LeaseNotFound,
    #[error("etcdserver: lease already exists")]
    LeaseExists,
    #[error("etcdserver: too large lease TTL (the maximum is {max} seconds)")]
    LeaseTtlTooLarge { max: i64 },
    #[error(
        "data directory {path} is in use by another process{holder}; stop that process or choose another --data-dir"
    )]
    DataDirLocked { path: PathBuf, holder: String },
    #[error("storage error while {action}: {detail}")]
    Storage {
        action: &'static str,
        detail: String,
    },
    #[error(transparent)]
    Wal(#[from] WalError),
    #[error("etcdserver: server stopped")]
    Stopped,
    #[error("invalid configuration: {0}")]
    InvalidConfig(String),
    #[error("etcdserver: no leader")]
    NoLeader,
    #[error("etcdserver: not leader")]
    NotLeader,
    #[error("etcdserver: request timed out")]
    Timeout,
    #[error("etcdserver: member not found")]
    MemberNotFound,
    #[error("etcdserver: Peer URLs already exists ({0})")]
    PeerUrlExists(String),
    #[error("etcdserver: can only promote a learner member")]
    MemberNotLearner,
    #[error(
        "etcdserver: can only promote a learner member which is in sync with leader (it has {learner_match} of the leader's {leader_match} log entries; promote it once it has 90%)"
    )]
    LearnerNotReady {
        learner_match: u64,
        leader_match: u64,
    },
    #[error("etcdserver: mvcc: database space exceeded")]
    NoSpace,
    #[error("etcdserver: corrupt cluster")]
    Corrupt,
    #[error("etcdserver: too many learner members in cluster (at most {max}; promote or remove the learner first)")]
    TooManyLearners { max: usize },
}

impl StoreError {
    pub(crate) fn storage(action: &'static str, err: impl std::fmt::Display) -> Self {
        StoreError::Storage {
            action,
            detail: err.to_string(),
        }
    }

    /// Whether this is a write that failed because the file system was
    /// full (ENOSPC) or the user's disk quota was used up (EDQUOT).
    pub fn is_no_space(&self) -> bool {
        match self {
            StoreError::Wal(err) => err.is_no_space(),
            // sled's errors reach us as their text only.
            StoreError::Storage { detail, .. } => crate::wal::names_no_space(detail),
            _ => false,
        }
    }
}

impl From<sled::Error> for StoreError {
    fn from(err: sled::Error) -> Self {
        StoreError::storage("accessing the state database", err)
    }
}

pub type Result<T, E = StoreError> = std::result::Result<T, E>;
