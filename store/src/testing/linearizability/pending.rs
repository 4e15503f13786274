//! The ops of one key that are still to be placed in a linearization, and
//! which of them may go next. Not the search order or its pruning; see `search`.

use std::collections::HashMap;

use super::model::{merge_unobserved, KeyOp, Step, Val};

/// One op of the search. Nodes are numbered by call time.
#[derive(Clone, Copy, Debug)]
pub(super) struct Node {
    /// Index into the key's ops.
    pub op: usize,
    pub call: u64,
    /// `u64::MAX` for an op without an answer: it never makes others wait.
    pub ret: u64,
    pub answered: bool,
    /// Its bit in the answered or the unanswered set of a search state.
    pub bit: usize,
    pub step: Step,
}

/// A value that some pending op needs to see in order to fit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Want {
    Is(Val),
    /// A compare-and-swap that failed needs anything but what it expected.
    IsNot(Val),
}

impl Want {
    pub fn admits(self, val: Val) -> bool {
        match self {
            Want::Is(want) => val == want,
            Want::IsNot(unwanted) => val != unwanted,
        }
    }

    /// What `step` must see, if it looks at the value at all.
    pub fn of(step: Step, answered: bool) -> Option<Want> {
        match step {
            Step::Read(seen) => Some(Want::Is(seen)),
            Step::Cas {
                expect, succeeded, ..
            } => match succeeded.filter(|_| answered) {
                Some(false) => Some(Want::IsNot(expect)),
                Some(true) | None => Some(Want::Is(expect)),
            },
            Step::Write(_) => None,
        }
    }
}

/// Pending nodes in intrusive circular lists, so that placing a node and
/// taking it back are O(1), as in Wing & Gong.
pub(super) struct Pending {
    nodes: Vec<Node>,
    node_of_op: HashMap<usize, usize>,
    /// By call time: answered nodes in the list headed by `answered_head`,
    /// unanswered ones in the list headed by `unanswered_head`.
    next: Vec<usize>,
    prev: Vec<usize>,
    answered_head: usize,
    unanswered_head: usize,
    /// Answered nodes by return time, headed by `nodes.len()`.
    by_ret_next: Vec<usize>,
    by_ret_prev: Vec<usize>,
    placed: Vec<bool>,
    /// Unanswered puts and deletes by the value they write, by call time.
    /// Those writing one value are interchangeable, and any that may go
    /// next may also go at any later point (the horizon only grows), so
    /// only the earliest pending one is ever offered.
    unanswered_writes: HashMap<Val, Vec<usize>>,
    unanswered_cas: Vec<usize>,
    pub answered_count: usize,
    pub unanswered_count: usize,
}

impl Pending {
    /// The ops called by `cut`; those that return after it count as
    /// unanswered, which makes this the prefix of the history at `cut`.
    pub fn new(ops: &[KeyOp], cut: u64) -> Pending {
        let mut kept: Vec<(usize, bool)> = ops
            .iter()
            .enumerate()
            .filter(|(_, op)| op.call <= cut)
            .map(|(index, op)| (index, op.ret.is_some_and(|ret| ret <= cut)))
            // A read without an answer constrains nothing.
            .filter(|&(index, answered)| answered || !matches!(ops[index].step, Step::Read(_)))
            .collect();
        kept.sort_by_key(|&(index, _)| (ops[index].call, index));

        let mut steps: Vec<Step> = kept.iter().map(|&(op, _)| ops[op].step).collect();
        merge_unobserved(&mut steps);

        let (mut answered_count, mut unanswered_count) = (0, 0);
        let nodes: Vec<Node> = kept
            .iter()
            .zip(steps)
            .map(|(&(op, answered), step)| {
                let count = match answered {
                    true => &mut answered_count,
                    false => &mut unanswered_count,
                };
                *count += 1;
                Node {
                    op,
                    call: ops[op].call,
                    ret: ops[op].ret.filter(|_| answered).unwrap_or(u64::MAX),
                    answered,
                    bit: *count - 1,
                    step,
                }
            })
            .collect();
        let len = nodes.len();
        let mut pending = Pending {
            node_of_op: nodes
                .iter()
                .enumerate()
                .map(|(n, node)| (node.op, n))
                .collect(),
            next: vec![0; len + 2],
            prev: vec![0; len + 2],
            answered_head: len,
            unanswered_head: len + 1,
            by_ret_next: vec![0; len + 1],
            by_ret_prev: vec![0; len + 1],
            placed: vec![false; len],
            unanswered_writes: HashMap::new(),
            unanswered_cas: Vec::new(),
            answered_count,
            unanswered_count,
            nodes,
        };
        pending.link_all();
        pending
    }

    fn link_all(&mut self) {
        let (answered, unanswered): (Vec<usize>, Vec<usize>) =
            (0..self.nodes.len()).partition(|&n| self.nodes[n].answered);
        link(
            &mut self.next,
            &mut self.prev,
            self.answered_head,
            &answered,
        );
        let head = self.unanswered_head;
        link(&mut self.next, &mut self.prev, head, &unanswered);
        let mut by_ret = answered;
        by_ret.sort_by_key(|&n| (self.nodes[n].ret, n));
        let head = self.nodes.len();
        link(&mut self.by_ret_next, &mut self.by_ret_prev, head, &by_ret);

        for n in unanswered {
            match self.nodes[n].step {
                Step::Write(val) => self.unanswered_writes.entry(val).or_default().push(n),
                Step::Cas { .. } => self.unanswered_cas.push(n),
                Step::Read(_) => {}
            }
        }
    }

    pub fn node(&self, n: usize) -> Node {
        self.nodes[n]
    }

    pub fn node_of_op(&self, op: usize) -> Option<usize> {
        self.node_of_op.get(&op).copied()
    }

    /// True when every answered op has been placed.
    pub fn done(&self) -> bool {
        self.by_ret_next[self.nodes.len()] == self.nodes.len()
    }

    /// The earliest return among pending answered ops. An op called after
    /// it must take effect after that op, so it cannot go next.
    pub fn horizon(&self) -> u64 {
        let first = self.by_ret_next[self.nodes.len()];
        self.nodes.get(first).map_or(u64::MAX, |node| node.ret)
    }

    pub fn place(&mut self, n: usize) {
        unlink(&mut self.next, &mut self.prev, n);
        if self.nodes[n].answered {
            unlink(&mut self.by_ret_next, &mut self.by_ret_prev, n);
        }
        self.placed[n] = true;
    }

    /// Undoes the latest `place`, which must have been of `n`.
    pub fn unplace(&mut self, n: usize) {
        relink(&mut self.next, &mut self.prev, n);
        if self.nodes[n].answered {
            relink(&mut self.by_ret_next, &mut self.by_ret_prev, n);
        }
        self.placed[n] = false;
    }

    /// Where a walk over the answered candidates starts.
    pub fn first_answered(&self) -> usize {
        self.next[self.answered_head]
    }

    /// The answered candidate at `cursor`, if the walk has not ended; the
    /// walk goes on at `after(n)`.
    pub fn answered_at(&self, cursor: usize) -> Option<usize> {
        let node = self.nodes.get(cursor)?;
        (node.call <= self.horizon()).then_some(cursor)
    }

    pub fn after(&self, n: usize) -> usize {
        self.next[n]
    }

    /// Pending answered ops that may go next, by call time.
    pub fn answered_candidates(&self) -> impl Iterator<Item = usize> + '_ {
        self.walk(self.answered_head)
    }

    /// Pending unanswered ops that may go next, by call time.
    pub fn unanswered_candidates(&self) -> impl Iterator<Item = usize> + '_ {
        self.walk(self.unanswered_head)
    }

    fn walk(&self, head: usize) -> impl Iterator<Item = usize> + '_ {
        let horizon = self.horizon();
        std::iter::successors(Some(self.next[head]), |&n| Some(self.next[n]))
            .take_while(move |&n| self.nodes.get(n).is_some_and(|node| node.call <= horizon))
    }

    /// What the ops that may go next need to see.
    pub fn wants(&self) -> Vec<Want> {
        let horizon = self.horizon();
        let unanswered_cas = self.unanswered_cas.iter().copied();
        let observers = self
            .answered_candidates()
            .chain(unanswered_cas.filter(|&n| !self.placed[n] && self.nodes[n].call <= horizon));
        let mut wants = Vec::new();
        for n in observers {
            let node = self.nodes[n];
            if let Some(want) = Want::of(node.step, node.answered) {
                if !wants.contains(&want) {
                    wants.push(want);
                }
            }
        }
        wants
    }

    /// The unanswered ops that may go next and would write a value in
    /// `wants`, by call time. Whether they fit the current value is left
    /// to the caller.
    pub fn offers(&self, wants: &[Want]) -> Vec<usize> {
        let horizon = self.horizon();
        let may_go = |n: &usize| !self.placed[*n] && self.nodes[*n].call <= horizon;
        let admitted = |val: Val| wants.iter().any(|want| want.admits(val));
        let writes = self.unanswered_writes.iter();
        let first_writes = writes
            .filter(|&(&val, _)| admitted(val))
            .filter_map(|(_, writers)| writers.iter().find(|n| !self.placed[**n]))
            .filter(|n| may_go(n));
        let swaps = self
            .unanswered_cas
            .iter()
            .filter(|n| may_go(n))
            .filter(|&&n| matches!(self.nodes[n].step, Step::Cas { new, .. } if admitted(new)));
        let mut offers: Vec<usize> = first_writes.chain(swaps).copied().collect();
        offers.sort_unstable();
        offers
    }
}

/// Links `members` in order into the circular list headed by `head`.
fn link(next: &mut [usize], prev: &mut [usize], head: usize, members: &[usize]) {
    let mut last = head;
    for &n in members {
        next[last] = n;
        prev[n] = last;
        last = n;
    }
    next[last] = head;
    prev[head] = last;
}

fn unlink(next: &mut [usize], prev: &mut [usize], n: usize) {
    next[prev[n]] = next[n];
    prev[next[n]] = prev[n];
}

/// Undoes `unlink(n)`: `n` still holds its old neighbours, and unlinks are
/// undone in reverse order, so they are its neighbours again.
fn relink(next: &mut [usize], prev: &mut [usize], n: usize) {
    next[prev[n]] = n;
    prev[next[n]] = n;
}
