//! Raft replication with raft-rs: the log storage raft-rs reads, the
//! deterministic core that drives `RawNode` over our WAL and engine, and
//! the simulated network used to test several real nodes in one process.

mod core;
pub mod lease_forward;
#[cfg(test)]
mod linearizability_tests;
mod log_store;
mod logger;
#[cfg(test)]
mod sim;
#[cfg(test)]
mod tests;
pub mod transport;

pub use self::core::{
    decode_conf_state, membership_change, promotion, Advanced, CoreConfig, PeerChange, RaftCore,
    Readiness, CATCH_UP_ENTRIES,
};
pub use log_store::LogStore;
pub use logger::raft_logger;
