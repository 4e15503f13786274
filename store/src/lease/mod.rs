//! Leases: TTL-bound grants that keys attach to. The lessor keeps them in
//! memory and decides expiry; every change to them is a logged command.

mod lessor;
#[cfg(test)]
mod tests;

pub use lessor::{Lessor, LessorConfig, MAX_LEASE_TTL};
