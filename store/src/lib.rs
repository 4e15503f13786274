//! skiff-store: an MVCC key-value store with etcd v3 semantics — revisions,
//! transactions, leases, compaction and watch — made durable by its own
//! write-ahead log and kept as state on sled.

pub mod api;
pub mod command;
pub mod error;
pub mod lease;
pub mod mvcc;
pub mod node;
pub mod wal;
pub mod watch;

pub use api::*;
pub use error::{Result, StoreError};
pub use node::{AutoCompaction, Store, StoreConfig};
pub use watch::Watcher;
