//! The sequential model each key is checked against, a register that is
//! absent or holds a value, and the translation of a history into one op
//! list per key. Not the search; see `search`.

use std::collections::{BTreeMap, HashMap, HashSet};

use super::history::{Event, Op, Outcome};

/// A value of one key, interned: `ABSENT`, or 1 + an index into
/// `KeyOps::values`. Small and `Copy`, so states hash cheaply.
pub(super) type Val = u64;
pub(super) const ABSENT: Val = 0;
/// Stands for every value that no op reads or compares against: no op can
/// tell them apart, so the search need not either.
pub(super) const UNOBSERVED: Val = Val::MAX >> 1;

/// What an op does to, or asks of, the register.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Step {
    /// A put (of a value) or a delete (of `ABSENT`).
    Write(Val),
    /// An answered get that saw this value.
    Read(Val),
    /// `succeeded` is None when the client got no answer.
    Cas {
        expect: Val,
        new: Val,
        succeeded: Option<bool>,
    },
}

/// One op of one key's sub-history.
#[derive(Clone, Copy, Debug)]
pub(super) struct KeyOp {
    /// Index of the event in the history, which is how explanations name it.
    pub event: usize,
    pub call: u64,
    /// None when the client got no answer.
    pub ret: Option<u64>,
    pub step: Step,
}

/// The sub-history of one key. Single-key ops on different keys commute,
/// so each key can be checked on its own (linearizability is local).
pub(super) struct KeyOps<'h> {
    pub key: &'h [u8],
    pub ops: Vec<KeyOp>,
    values: Vec<&'h [u8]>,
}

impl<'h> KeyOps<'h> {
    pub fn value(&self, val: Val) -> Option<&'h [u8]> {
        let index = usize::try_from(val).ok()?.checked_sub(1)?;
        self.values.get(index).copied()
    }
}

/// The register after `step` runs on `val`, or None if the step cannot run
/// there as the client saw it. An op without an answer (`answered` false)
/// is optional: it is offered only where it changes the value, because
/// leaving out an op that changes nothing explains at least as much.
pub(super) fn apply(step: Step, val: Val, answered: bool) -> Option<Val> {
    let after = match step {
        Step::Write(new) => Some(new),
        Step::Read(seen) => (val == seen).then_some(val),
        Step::Cas {
            expect,
            new,
            succeeded,
        } => match succeeded.filter(|_| answered) {
            Some(true) | None => (val == expect).then_some(new),
            Some(false) => (val != expect).then_some(val),
        },
    };
    match after {
        Some(after) if !answered && after == val => None,
        after => after,
    }
}

/// Replaces the values that no step observes by `UNOBSERVED`, so that
/// search states differing only in such a value meet in the memo.
pub(super) fn merge_unobserved(steps: &mut [Step]) {
    let observed: HashSet<Val> = steps
        .iter()
        .filter_map(|step| match *step {
            Step::Read(seen) => Some(seen),
            Step::Cas { expect, .. } => Some(expect),
            Step::Write(_) => None,
        })
        .collect();
    let merge = |val: Val| match val == ABSENT || observed.contains(&val) {
        true => val,
        false => UNOBSERVED,
    };
    for step in steps {
        match step {
            Step::Write(new) | Step::Cas { new, .. } => *new = merge(*new),
            Step::Read(_) => {}
        }
    }
}

/// Splits a history into one op list per key, ordered by key. Gets without
/// an answer are left out: they neither change nor reveal anything.
pub(super) fn split_by_key(events: &[Event]) -> Vec<KeyOps<'_>> {
    let mut keys: BTreeMap<&[u8], KeyBuilder<'_>> = BTreeMap::new();
    for (index, event) in events.iter().enumerate() {
        let key = event.op.key();
        let builder = keys.entry(key).or_insert_with(|| KeyBuilder {
            key_ops: KeyOps {
                key,
                ops: Vec::new(),
                values: Vec::new(),
            },
            interned: HashMap::new(),
        });
        let step = match (&event.op, &event.outcome) {
            (Op::Put { value, .. }, _) => Step::Write(builder.intern(Some(value))),
            (Op::Delete { .. }, _) => Step::Write(ABSENT),
            (Op::Get { .. }, Outcome::Get(seen)) => Step::Read(builder.intern(seen.as_deref())),
            (Op::Get { .. }, _) => continue,
            (Op::Cas { expect, new, .. }, outcome) => Step::Cas {
                expect: builder.intern(expect.as_deref()),
                new: builder.intern(new.as_deref()),
                succeeded: match outcome {
                    Outcome::Cas(succeeded) => Some(*succeeded),
                    _ => None,
                },
            },
        };
        let answered = event.outcome != Outcome::Unknown;
        builder.key_ops.ops.push(KeyOp {
            event: index,
            call: event.call,
            ret: answered.then_some(event.ret),
            step,
        });
    }
    keys.into_values().map(|builder| builder.key_ops).collect()
}

struct KeyBuilder<'h> {
    key_ops: KeyOps<'h>,
    interned: HashMap<&'h [u8], Val>,
}

impl<'h> KeyBuilder<'h> {
    fn intern(&mut self, value: Option<&'h [u8]>) -> Val {
        let Some(value) = value else { return ABSENT };
        let values = &mut self.key_ops.values;
        *self.interned.entry(value).or_insert_with(|| {
            values.push(value);
            values.len() as Val
        })
    }
}
