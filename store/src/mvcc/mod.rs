//! Multi-version concurrency control: revisions, the key index, the state
//! tree on sled, the write path (apply) and the read path (range, history).

pub mod alarm;
pub mod apply;
pub mod backend;
pub mod compaction;
pub mod hash;
mod index;
mod key_index;
mod key_range;
pub mod kvstore;
pub(crate) mod record;
pub(crate) mod revision;
pub mod snapshot;
#[cfg(test)]
mod tests;

pub use apply::{Applier, CommandResult, Committed, CompactionJob, RevisionEvents};
pub use key_range::{prefix_end, KeyRange};
pub use kvstore::{KvStore, ModRevisions};
pub use revision::Revision;
