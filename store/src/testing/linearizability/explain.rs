//! Turns a failed search into text a person can act on: the first response
//! that no order explains, the deepest partial order found, and why no
//! pending op fits after it. Not the verdict itself; see `check`.

use std::fmt::Write;

use super::history::{show, Event};
use super::model::{apply, KeyOps, Step, Val, ABSENT};
use super::search::{Found, Search, Stuck};
use super::Budget;

/// At most this many ops are listed from the deepest partial order (the
/// latest ones, which are where it got stuck).
const SHOWN_PLACED: usize = 15;
/// At most this many writers are named for a value that was read.
const SHOWN_WRITERS: usize = 3;
/// At most this many unanswered ops are named where the search got stuck.
const SHOWN_UNANSWERED: usize = 10;

/// Explains why the ops of `key_ops` have no linearization, as `failed`
/// showed. Reruns the search on prefixes to find the smallest that already
/// fails, each run within `max_steps` and a few times the steps `failed`
/// took: a failing prefix usually takes about as long as the whole did.
pub(super) fn explain(
    key_ops: &KeyOps<'_>,
    events: &[Event],
    failed: &Stuck,
    budget: Budget,
) -> String {
    let steps = failed.steps.saturating_mul(4).max(100_000);
    let budget = Budget {
        max_steps_per_key: steps.min(budget.max_steps_per_key),
        ..budget
    };
    let first = Prefixes::new(key_ops, budget).first_failure(failed.horizon);
    let frontier = Search::new(&key_ops.ops, first.cut).frontier(&key_ops.ops, &first.deepest);
    let text = Text {
        key_ops,
        events,
        cut: first.cut.unwrap_or(u64::MAX),
    };

    let mut out = text.header(first.proven);
    text.placed(&mut out, &first.deepest, frontier.val);
    text.stuck(&mut out, &frontier.candidates, frontier.val);
    out
}

/// The prefixes of one key's history, one per distinct return time. A
/// prefix that fails makes every longer one fail, so the failing ones are
/// the longest few, and where they start can be searched for.
struct Prefixes<'a, 'h> {
    key_ops: &'a KeyOps<'h>,
    cuts: Vec<u64>,
    budget: Budget,
}

enum Probe {
    /// With the deepest partial order, if traced.
    Fails(Option<Vec<usize>>),
    Passes,
    /// The budget ran out.
    Unsettled,
}

/// The smallest failing prefix that was found.
struct FirstFailure {
    /// None for the whole history.
    cut: Option<u64>,
    deepest: Vec<usize>,
    /// Whether every shorter prefix was shown to pass.
    proven: bool,
}

/// What the probes so far have shown, as indices into `Prefixes::cuts`:
/// prefixes `high..` fail, and those before `low` pass or are unsettled.
struct Bisection {
    low: usize,
    high: usize,
    /// The deepest partial order of prefix `high`, if known.
    deepest: Option<Vec<usize>>,
    passing: Vec<usize>,
}

impl Bisection {
    fn record(&mut self, i: usize, probe: Probe) {
        match probe {
            Probe::Fails(deepest) => (self.high, self.deepest) = (i, deepest),
            Probe::Passes => {
                self.low = self.low.max(i + 1);
                self.passing.push(i);
            }
            Probe::Unsettled => self.low = self.low.max(i + 1),
        }
    }
}

impl<'a, 'h> Prefixes<'a, 'h> {
    fn new(key_ops: &'a KeyOps<'h>, budget: Budget) -> Prefixes<'a, 'h> {
        let mut cuts: Vec<u64> = key_ops.ops.iter().filter_map(|op| op.ret).collect();
        cuts.sort_unstable();
        cuts.dedup();
        Prefixes {
            key_ops,
            cuts,
            budget,
        }
    }

    fn probe(&self, i: usize, trace: bool) -> Probe {
        let search = Search::new(&self.key_ops.ops, Some(self.cuts[i]));
        match search.run(self.budget, trace) {
            Found::Stuck(stuck) => Probe::Fails(trace.then_some(stuck.deepest)),
            Found::Linearizable => Probe::Passes,
            Found::Exhausted { .. } => Probe::Unsettled,
        }
    }

    /// Binary search for the smallest failing prefix. `guess` is where the
    /// search of the whole history got deepest, which is almost always
    /// where the first response that no order explains returned: it and
    /// the prefix just before it are tried first, and usually settle it.
    /// A prefix the budget could not settle is taken as passing; the answer
    /// is then a longer prefix, which still fails, but is not proven first.
    fn first_failure(&self, guess: u64) -> FirstFailure {
        let mut bisection = Bisection {
            low: 0,
            high: self.cuts.len(),
            deepest: None,
            passing: Vec::new(),
        };
        let first = self.cuts.partition_point(|&cut| cut < guess);
        if first < self.cuts.len() {
            bisection.record(first, self.probe(first, true));
            if bisection.high == first && first > 0 {
                bisection.record(first - 1, self.probe(first - 1, true));
            }
        }
        while bisection.low < bisection.high {
            let mid = bisection.low + (bisection.high - bisection.low) / 2;
            bisection.record(mid, self.probe(mid, false));
        }
        let Bisection {
            high,
            deepest,
            passing,
            ..
        } = bisection;
        let cut = self.cuts.get(high).copied();
        FirstFailure {
            cut,
            deepest: deepest.unwrap_or_else(|| self.deepest_at(cut)),
            proven: high == 0 || passing.contains(&(high - 1)),
        }
    }

    fn deepest_at(&self, cut: Option<u64>) -> Vec<usize> {
        match Search::new(&self.key_ops.ops, cut).run(self.budget, true) {
            Found::Stuck(stuck) => stuck.deepest,
            // The search is deterministic and this prefix failed before, so
            // this is not expected; an explanation from the start still holds.
            Found::Linearizable | Found::Exhausted { .. } => Vec::new(),
        }
    }
}

struct Text<'a, 'h> {
    key_ops: &'a KeyOps<'h>,
    events: &'a [Event],
    /// `u64::MAX` when the whole history is explained.
    cut: u64,
}

impl Text<'_, '_> {
    /// `#12 client 3 get -> "v1" @[120, 130]`: the number is the event's
    /// index in the history.
    fn name(&self, op: usize) -> String {
        let event = self.key_ops.ops[op].event;
        match self.events.get(event) {
            Some(e) => format!("#{event} {}", e.summary()),
            None => format!("#{event}"),
        }
    }

    fn value(&self, val: Val) -> String {
        show(self.key_ops.value(val))
    }

    fn answered_by_cut(&self, op: usize) -> bool {
        self.key_ops.ops[op].ret.is_some_and(|ret| ret <= self.cut)
    }

    fn header(&self, proven_first: bool) -> String {
        let ops = &self.key_ops.ops;
        let called = ops.iter().filter(|op| op.call <= self.cut).count();
        let last: Vec<String> = (0..ops.len())
            .filter(|&op| ops[op].ret == Some(self.cut))
            .map(|op| self.name(op))
            .collect();
        match (last.is_empty(), proven_first) {
            (true, _) => format!(
                "no order of the {} on this key explains what clients saw.\n",
                count(called, "op")
            ),
            (false, true) => format!(
                "first response that no order explains: {}\n\
                 (the {} called by then have no linearization; every earlier prefix has one)\n",
                last.join(", "),
                count(called, "op")
            ),
            (false, false) => format!(
                "a response that no order explains: {}\n\
                 (the {} called by then have no linearization; the budget ran out \
                 before all earlier prefixes were settled)\n",
                last.join(", "),
                count(called, "op")
            ),
        }
    }

    fn placed(&self, out: &mut String, deepest: &[usize], val: Val) {
        if deepest.is_empty() {
            let _ = writeln!(out, "no op fits first, with the key absent:");
            return;
        }
        let placed = deepest.iter().filter(|&&op| self.answered_by_cut(op));
        let total = (0..self.key_ops.ops.len()).filter(|&op| self.answered_by_cut(op));
        let _ = writeln!(
            out,
            "deepest partial order places {} of {} answered ops, leaving the value {}:",
            placed.count(),
            total.count(),
            self.value(val)
        );
        let skipped = deepest.len().saturating_sub(SHOWN_PLACED);
        if skipped > 0 {
            let _ = writeln!(out, "  ... {}", count(skipped, "earlier op"));
        }
        for &op in &deepest[skipped..] {
            let _ = writeln!(out, "  {}", self.name(op));
        }
        let _ = writeln!(out, "and no answered op that may go next fits:");
    }

    fn stuck(&self, out: &mut String, candidates: &[usize], val: Val) {
        let mut unanswered = Vec::new();
        for &op in candidates {
            if self.answered_by_cut(op) {
                let reason = self.reason(op, val);
                let _ = writeln!(out, "  {}: {reason}", self.name(op));
            } else {
                unanswered.push(format!("#{}", self.key_ops.ops[op].event));
            }
        }
        if unanswered.len() > SHOWN_UNANSWERED {
            let more = unanswered.len() - SHOWN_UNANSWERED;
            unanswered.truncate(SHOWN_UNANSWERED);
            unanswered.push(format!("and {more} more"));
        }
        if !unanswered.is_empty() {
            let _ = writeln!(
                out,
                "(ops without an answer that may take effect there lead nowhere either: {})",
                unanswered.join(", ")
            );
        }
    }

    fn reason(&self, op: usize, val: Val) -> String {
        let step = self.key_ops.ops[op].step;
        if apply(step, val, true).is_some() {
            return "fits, but every order after it fails".to_string();
        }
        let now = self.value(val);
        match step {
            Step::Read(seen) => format!(
                "read {} but the value is {now}{}",
                self.value(seen),
                self.writers(seen)
            ),
            Step::Cas {
                expect,
                succeeded: Some(true),
                ..
            } => format!(
                "succeeded expecting {} but the value is {now}{}",
                self.value(expect),
                self.writers(expect)
            ),
            Step::Cas { .. } => format!("failed, yet the value {now} is what it expected"),
            Step::Write(_) => "cannot take effect".to_string(),
        }
    }

    /// Which ops of the whole history could have written `val`, to show
    /// whether a read value came from nowhere, too early, or was overwritten.
    fn writers(&self, val: Val) -> String {
        if val == ABSENT {
            return String::new();
        }
        let writers: Vec<String> = (0..self.key_ops.ops.len())
            .filter(|&op| match self.key_ops.ops[op].step {
                Step::Write(new) => new == val,
                Step::Cas { new, succeeded, .. } => new == val && succeeded != Some(false),
                Step::Read(_) => false,
            })
            .map(|op| self.name(op))
            .collect();
        match writers.len() {
            0 => format!("; no op on this key writes {}", self.value(val)),
            n if n <= SHOWN_WRITERS => format!("; it is written by {}", writers.join(", ")),
            n => format!(
                "; it is written by {} and {} more",
                writers[..SHOWN_WRITERS].join(", "),
                n - SHOWN_WRITERS
            ),
        }
    }
}

/// `1 op`, `2 ops`.
fn count(n: usize, noun: &str) -> String {
    match n {
        1 => format!("1 {noun}"),
        n => format!("{n} {noun}s"),
    }
}
