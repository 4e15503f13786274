//! skiff-store: an MVCC key-value store with etcd v3 semantics — revisions,
//! transactions, leases, compaction and watch — made durable by its own
//! write-ahead log and kept as state on sled.
//!
//! ```
//! use skiff_store::{PutRequest, RangeRequest, Store, StoreConfig, WatchRequest};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), skiff_store::StoreError> {
//! # let dir = tempfile::tempdir().unwrap();
//! let store = Store::open(StoreConfig::new(dir.path())).await?;
//! let mut watcher = store.watch(WatchRequest {
//!     key: b"/registry/".to_vec(),
//!     range_end: skiff_store::mvcc::prefix_end(b"/registry/"),
//!     ..Default::default()
//! })?;
//!
//! // Answered once the write is in the log and fdatasync'ed.
//! let put = store.put(PutRequest::new("/registry/pods/a", "{}")).await?;
//! assert_eq!(put.header.revision, 1);
//!
//! let read = store.range(RangeRequest::prefix("/registry/")).await?;
//! assert_eq!((read.count, read.kvs[0].mod_revision), (1, 1));
//!
//! let event = watcher.next().await.expect("an event");
//! assert_eq!(event.events[0].kv.key, b"/registry/pods/a");
//! store.close().await?;
//! # Ok(())
//! # }
//! ```

pub mod api;
pub mod command;
pub mod error;
pub mod failpoints;
pub mod grpc;
pub mod lease;
pub mod metrics;
pub mod mvcc;
pub mod node;
pub mod raft;
pub mod snapshot;
pub mod testing;
pub mod wal;
pub mod watch;

pub use api::*;
pub use error::{Result, StoreError};
pub use node::{
    AlarmAction, AutoCompaction, ClusterConfig, InitialClusterState, Member, Store, StoreConfig,
    StoreStatus,
};
pub use raft::transport::PeerTls;
pub use watch::Watcher;
