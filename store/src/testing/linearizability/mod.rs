//! Linearizability checker for recorded histories of single-key puts, gets,
//! deletes and compare-and-swaps (Wing & Gong's search with Lowe's memo).
//! For tests of the store; it does not model ranges, revisions, leases or watches.
//!
//! ```
//! use skiff_store::testing::linearizability::{check, Budget, Event, History, Op, Outcome, Verdict};
//!
//! let mut history = History::new();
//! let ev = |client, op, call, ret, outcome| Event { client, op, call, ret, outcome };
//! history.push(ev(1, Op::put("k", "v1"), 0, 10, Outcome::Put)).unwrap();
//! // Starts after the put returned, yet misses it: a stale read.
//! history.push(ev(2, Op::get("k"), 20, 30, Outcome::Get(None))).unwrap();
//! let verdict = check(&history, Budget::default());
//! assert!(matches!(verdict, Verdict::NotLinearizable { .. }), "{verdict}");
//! ```

mod explain;
mod history;
mod memo;
mod model;
mod pending;
mod search;

#[cfg(test)]
mod tests;

use std::fmt;

pub use history::{Event, History, HistoryError, Op, Outcome, Recorder, Ticket};

use history::show;

use search::{Found, Search};

/// How much work `check` may do on one key before it answers
/// `Inconclusive`. Explaining a violation reruns the search on a few
/// prefixes of the key's history, each run within this budget too.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Budget {
    /// Search steps: ops tried in some state, plus memo comparisons. A
    /// step takes 20 to 400 nanoseconds in a release build (the more ops
    /// without an answer, the longer), and about ten times that in a debug
    /// build.
    pub max_steps_per_key: u64,
    /// Memory for the states already explored (estimated).
    pub max_memo_bytes_per_key: u64,
}

impl Default for Budget {
    /// Settles thousands of ops per key at the concurrency of a test
    /// cluster; gives up within about a second of a release build.
    fn default() -> Budget {
        Budget {
            max_steps_per_key: 3_000_000,
            max_memo_bytes_per_key: 256 << 20,
        }
    }
}

/// The answer of `check`.
#[derive(Clone, Debug, PartialEq, Eq)]
#[must_use]
pub enum Verdict {
    Linearizable,
    /// No order of the ops on `key` explains what clients saw.
    NotLinearizable {
        key: Vec<u8>,
        explanation: String,
    },
    /// The search budget ran out on `key` before an answer was found.
    Inconclusive {
        key: Vec<u8>,
        reason: String,
    },
}

impl Verdict {
    pub fn is_linearizable(&self) -> bool {
        matches!(self, Verdict::Linearizable)
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Verdict::Linearizable => write!(f, "linearizable"),
            Verdict::NotLinearizable { key, explanation } => {
                write!(
                    f,
                    "not linearizable on key {}:\n{explanation}",
                    show(Some(key))
                )
            }
            Verdict::Inconclusive { key, reason } => {
                write!(f, "inconclusive on key {}: {reason}", show(Some(key)))
            }
        }
    }
}

/// Checks whether some order of the history's ops, each taking effect at
/// one instant between its call and its return, is legal for a map whose
/// keys all start absent. An op with `Outcome::Unknown` may take effect at
/// any time after its call, or never.
///
/// Keys are checked one at a time in byte order; the first key that fails
/// is reported. A key that exhausts the budget makes the verdict
/// `Inconclusive` unless another key fails.
pub fn check(history: &History, budget: Budget) -> Verdict {
    let mut inconclusive = None;
    for key_ops in model::split_by_key(history.events()) {
        match Search::new(&key_ops.ops, None).run(budget, false) {
            Found::Linearizable => {}
            Found::Stuck(stuck) => {
                let explanation = explain::explain(&key_ops, history.events(), &stuck, budget);
                return Verdict::NotLinearizable {
                    key: key_ops.key.to_vec(),
                    explanation,
                };
            }
            Found::Exhausted { steps, memo_bytes } if inconclusive.is_none() => {
                let reason = format!(
                    "gave up after {steps} search steps and about {} MiB of memo over {} ops; \
                     raise Budget::max_steps_per_key or Budget::max_memo_bytes_per_key, \
                     or check a shorter history",
                    memo_bytes >> 20,
                    key_ops.ops.len()
                );
                inconclusive = Some(Verdict::Inconclusive {
                    key: key_ops.key.to_vec(),
                    reason,
                });
            }
            Found::Exhausted { .. } => {}
        }
    }
    inconclusive.unwrap_or(Verdict::Linearizable)
}
