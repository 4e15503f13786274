//! raft-rs logs through `slog`; this drain hands its records to `tracing`
//! with their key-values, so one subscriber sees everything.

use std::fmt::Write as _;

use slog::{Drain, Key, Level, OwnedKVList, Record, Serializer, KV};

struct TracingDrain;

/// Collects a record's key-values as `key=value` pairs.
struct Pairs(String);

impl Serializer for Pairs {
    fn emit_arguments(&mut self, key: Key, value: &std::fmt::Arguments) -> slog::Result {
        if !self.0.is_empty() {
            self.0.push(' ');
        }
        let _ = write!(self.0, "{key}={value}");
        Ok(())
    }
}

impl Drain for TracingDrain {
    type Ok = ();
    type Err = slog::Never;

    fn log(&self, record: &Record, values: &OwnedKVList) -> Result<(), slog::Never> {
        let mut pairs = Pairs(String::new());
        let _ = record.kv().serialize(record, &mut pairs);
        let _ = values.serialize(record, &mut pairs);
        let message = record.msg();
        let fields = pairs.0;
        match record.level() {
            Level::Critical | Level::Error => tracing::error!(target: "raft", %fields, "{message}"),
            Level::Warning => tracing::warn!(target: "raft", %fields, "{message}"),
            Level::Info => tracing::info!(target: "raft", %fields, "{message}"),
            Level::Debug => tracing::debug!(target: "raft", %fields, "{message}"),
            Level::Trace => tracing::trace!(target: "raft", %fields, "{message}"),
        }
        Ok(())
    }
}

/// A logger for one Raft member.
pub fn raft_logger(member_id: u64) -> slog::Logger {
    slog::Logger::root(TracingDrain.fuse(), slog::o!("raft_id" => member_id))
}
