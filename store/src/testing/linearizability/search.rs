//! The search over one key's sub-history: Wing & Gong's depth-first
//! backtracking over which pending op takes effect next, pruned by Lowe's
//! memo and two rules of the register model. Not the explanations.
//!
//! The two rules, each of which keeps some linearization if any exists:
//! - A read that fits the current value goes next and nothing else is
//!   tried: moving a read earlier changes no value and only lets others go
//!   sooner.
//! - An op without an answer goes only right before an op that observes its
//!   effect (a read or compare-and-swap). It never returned, so moving it
//!   later is always allowed; if a blind write came next instead, or nothing
//!   did, leaving it out would change nothing.

use super::memo::{Memo, State};
use super::model::{apply, KeyOp, Step, Val, ABSENT};
use super::pending::{Pending, Want};
use super::Budget;

/// How a search ended.
#[derive(Debug)]
pub(super) enum Found {
    Linearizable,
    /// No order exists.
    Stuck(Stuck),
    /// The budget ran out, after this many steps and with about this much
    /// memory in use.
    Exhausted {
        steps: u64,
        memo_bytes: u64,
    },
}

/// How a search that found no order ended.
#[derive(Debug)]
pub(super) struct Stuck {
    /// A partial linearization (indices into the key's ops) that placed the
    /// most answered ops; empty unless the search was asked to trace.
    pub deepest: Vec<usize>,
    /// The horizon at that partial linearization: the earliest return among
    /// the answered ops it could not place.
    pub horizon: u64,
    pub steps: u64,
}

/// A state of the search, for explanations: the value, and the pending ops
/// (indices into the key's ops) that may go next, answered ones first.
#[derive(Debug)]
pub(super) struct Frontier {
    pub val: Val,
    pub candidates: Vec<usize>,
}

/// Marks the bottom frame, which placed no op.
const ROOT: usize = usize::MAX;

/// Where a frame is in trying its candidates.
#[derive(Clone, Copy, Debug)]
enum Cursor {
    /// A read that fits: the only candidate worth trying here.
    Forced(usize),
    /// Walking the answered candidates; the next one is this node.
    Answered(usize),
    /// Trying `Frame::offers` from this index.
    Offers(usize),
    Exhausted,
}

struct Frame {
    /// The node placed to reach this frame.
    node: usize,
    /// The value before that node took effect.
    before: Val,
    /// That node was unanswered, so only an observer may come next.
    needs_observer: bool,
    cursor: Cursor,
    /// What the candidates here need to see; filled with `offers`.
    wants: Vec<Want>,
    /// Unanswered nodes that would write something in `wants`; filled once
    /// the answered candidates have all been tried.
    offers: Vec<usize>,
}

/// The mutable part of a run.
struct Dfs {
    state: State,
    memo: Memo,
    stack: Vec<Frame>,
    steps: u64,
    /// How many answered ops are placed.
    placed: usize,
}

/// The search for one key's sub-history, or for its prefix up to a cut.
pub(super) struct Search {
    pending: Pending,
}

impl Search {
    /// A search over the ops called by `cut` (all ops if None); ops that
    /// return after the cut count as unanswered, which makes it the search
    /// for the history's prefix up to that moment.
    pub fn new(ops: &[KeyOp], cut: Option<u64>) -> Search {
        Search {
            pending: Pending::new(ops, cut.unwrap_or(u64::MAX)),
        }
    }

    /// Looks for an order of all answered ops, and any of the unanswered
    /// ones, that the register explains, within `budget`. With `trace`, a
    /// failed search reports the deepest state it reached.
    pub fn run(mut self, budget: Budget, trace: bool) -> Found {
        if self.pending.done() {
            return Found::Linearizable;
        }
        let mut state = State::new(self.pending.answered_count, self.pending.unanswered_count);
        let mut memo = Memo::default();
        memo.admit(&mut state);
        let root = self.frame(ROOT, ABSENT, false, ABSENT);
        let mut dfs = Dfs {
            state,
            memo,
            stack: vec![root],
            steps: 0,
            placed: 0,
        };
        let mut stuck = Stuck {
            deepest: Vec::new(),
            horizon: self.pending.horizon(),
            steps: 0,
        };
        let mut most_placed = 0;
        loop {
            if dfs.steps > budget.max_steps_per_key
                || dfs.memo.bytes > budget.max_memo_bytes_per_key
            {
                let (steps, memo_bytes) = (dfs.steps, dfs.memo.bytes);
                return Found::Exhausted { steps, memo_bytes };
            }
            let Some(top) = dfs.stack.last_mut() else {
                stuck.steps = dfs.steps;
                return Found::Stuck(stuck);
            };
            let Some(n) = self.next_candidate(top) else {
                self.backtrack(&mut dfs);
                continue;
            };
            dfs.steps += 1;
            if !self.advance(&mut dfs, n) {
                continue;
            }
            if self.pending.done() {
                return Found::Linearizable;
            }
            if dfs.placed > most_placed {
                most_placed = dfs.placed;
                stuck.horizon = self.pending.horizon();
                if trace {
                    let path = dfs.stack[1..].iter();
                    stuck.deepest = path.map(|f| self.pending.node(f.node).op).collect();
                }
            }
        }
    }

    /// The frame for the state reached by placing `node`, now holding `val`.
    fn frame(&self, node: usize, before: Val, needs_observer: bool, val: Val) -> Frame {
        let fitting_read = self.pending.answered_candidates().find(|&n| {
            let step = self.pending.node(n).step;
            is_pure_read(step) && apply(step, val, true).is_some()
        });
        let first = Cursor::Answered(self.pending.first_answered());
        Frame {
            node,
            before,
            needs_observer,
            cursor: fitting_read.map_or(first, Cursor::Forced),
            wants: Vec::new(),
            offers: Vec::new(),
        }
    }

    /// The top frame's next candidate, if any are left.
    fn next_candidate(&self, frame: &mut Frame) -> Option<usize> {
        loop {
            match frame.cursor {
                Cursor::Forced(n) => {
                    frame.cursor = Cursor::Exhausted;
                    return Some(n);
                }
                Cursor::Answered(cursor) => match self.pending.answered_at(cursor) {
                    Some(n) => {
                        frame.cursor = Cursor::Answered(self.pending.after(n));
                        return Some(n);
                    }
                    None if self.pending.unanswered_count == 0 => {
                        frame.cursor = Cursor::Exhausted;
                    }
                    None => {
                        frame.wants = self.pending.wants();
                        frame.offers = self.pending.offers(&frame.wants);
                        frame.cursor = Cursor::Offers(0);
                    }
                },
                Cursor::Offers(i) => match frame.offers.get(i) {
                    Some(&n) => {
                        frame.cursor = Cursor::Offers(i + 1);
                        return Some(n);
                    }
                    None => frame.cursor = Cursor::Exhausted,
                },
                Cursor::Exhausted => return None,
            }
        }
    }

    /// Places `n` next if the register allows it, the rules above do, and
    /// the state it leads to is new. Returns whether it did.
    fn advance(&mut self, dfs: &mut Dfs, n: usize) -> bool {
        let node = self.pending.node(n);
        let Some(top) = dfs.stack.last() else {
            return false;
        };
        let before = dfs.state.val();
        if top.needs_observer && !observes(node.step) {
            return false;
        }
        let Some(after) = apply(node.step, before, node.answered) else {
            return false;
        };
        if !node.answered && !top.wants.iter().any(|want| want.admits(after)) {
            return false;
        }
        let restore = top.needs_observer;
        dfs.state
            .flip(node.answered, node.bit, after, !node.answered);
        let (fresh, work) = dfs.memo.admit(&mut dfs.state);
        dfs.steps += work;
        if !fresh {
            dfs.state.flip(node.answered, node.bit, before, restore);
            return false;
        }
        self.pending.place(n);
        dfs.placed += usize::from(node.answered);
        let frame = self.frame(n, before, !node.answered, after);
        dfs.stack.push(frame);
        true
    }

    /// Takes back the op that led to the top frame, whose candidates have
    /// all been tried.
    fn backtrack(&mut self, dfs: &mut Dfs) {
        let Some(frame) = dfs.stack.pop().filter(|frame| frame.node != ROOT) else {
            return;
        };
        let node = self.pending.node(frame.node);
        self.pending.unplace(frame.node);
        let needs_observer = dfs.stack.last().is_some_and(|f| f.needs_observer);
        dfs.state
            .flip(node.answered, node.bit, frame.before, needs_observer);
        dfs.placed -= usize::from(node.answered);
    }

    /// The state after placing `path` (indices into `ops`, the key's ops
    /// this search was made from, in order), and the pending ops that may
    /// go next there.
    pub fn frontier(mut self, ops: &[KeyOp], path: &[usize]) -> Frontier {
        let mut val = ABSENT;
        for &op in path {
            let Some(n) = self.pending.node_of_op(op) else {
                continue;
            };
            // The search's own steps merge unobserved values; people need
            // the real ones.
            val = apply(ops[op].step, val, self.pending.node(n).answered).unwrap_or(val);
            self.pending.place(n);
        }
        let answered = self.pending.answered_candidates();
        let candidates = answered.chain(self.pending.unanswered_candidates());
        Frontier {
            val,
            candidates: candidates.map(|n| self.pending.node(n).op).collect(),
        }
    }
}

/// Whether the step's outcome depends on the value before it.
fn observes(step: Step) -> bool {
    matches!(step, Step::Read(_) | Step::Cas { .. })
}

/// Whether an answered step looks at the value without changing it.
fn is_pure_read(step: Step) -> bool {
    matches!(
        step,
        Step::Read(_)
            | Step::Cas {
                succeeded: Some(false),
                ..
            }
    )
}
