//! Search states and the memo of those already expanded (Lowe's cache of
//! (placed set, value)), so the search never explores one twice.
//! Not the search order; see `search`.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use super::model::{Val, ABSENT};

/// A search state: the register's value, whether the next op must observe
/// it, and which ops have been placed.
///
/// The memo's key for it is compact: answered ops are placed roughly in
/// the order they were called, so the placed set is "every op before the
/// first unplaced one" plus a few words of bits after it. A key holds that
/// index and those words, not the whole set, so that a history of a
/// hundred thousand ops costs the memo tens of bytes per state, not
/// kilobytes.
pub(super) struct State {
    /// `value << 1 | needs observer`.
    head: u64,
    /// One bit per answered op, set when it is placed.
    answered: Vec<u64>,
    /// Every answered op below this bit is placed; this one is not.
    first_unplaced: usize,
    /// No word of `answered` at or after this index has a bit set.
    end_word: usize,
    /// The memo's key, made by `make_key`: `[head, first_unplaced, the
    /// words of answered from first_unplaced's to the last that is not 0]`.
    key: Vec<u64>,
    unanswered: Vec<u64>,
}

impl State {
    pub fn new(answered: usize, unanswered: usize) -> State {
        State {
            head: ABSENT << 1,
            answered: vec![0; answered.div_ceil(64)],
            first_unplaced: 0,
            end_word: 0,
            key: Vec::new(),
            unanswered: vec![0; unanswered.div_ceil(64)],
        }
    }

    pub fn val(&self) -> Val {
        self.head >> 1
    }

    pub fn needs_observer(&self) -> bool {
        self.head & 1 == 1
    }

    /// Toggles whether the op with `bit` in the answered or unanswered set
    /// is placed, and sets the value and whether it must be observed.
    pub fn flip(&mut self, answered: bool, bit: usize, val: Val, needs_observer: bool) {
        self.head = val << 1 | u64::from(needs_observer);
        if !answered {
            self.unanswered[bit / 64] ^= 1 << (bit % 64);
            return;
        }
        let word = &mut self.answered[bit / 64];
        *word ^= 1 << (bit % 64);
        if *word & (1 << (bit % 64)) == 0 {
            self.first_unplaced = self.first_unplaced.min(bit);
            return;
        }
        self.end_word = self.end_word.max(bit / 64 + 1);
        if self.first_unplaced == bit {
            // Walk past the run of placed ops this one joined.
            let mut next = bit + 1;
            while next < self.answered.len() * 64 && self.is_placed(next) {
                next += 1;
            }
            self.first_unplaced = next;
        }
    }

    fn is_placed(&self, bit: usize) -> bool {
        self.answered[bit / 64] & (1 << (bit % 64)) != 0
    }

    /// Makes `key` describe the state as it is now.
    fn make_key(&mut self) {
        let start = self.first_unplaced / 64;
        while self.end_word > start && self.answered[self.end_word - 1] == 0 {
            self.end_word -= 1;
        }
        self.key.clear();
        self.key.push(self.head);
        self.key.push(self.first_unplaced as u64);
        let end = self.end_word.max(start);
        self.key.extend_from_slice(&self.answered[start..end]);
    }
}

/// States already expanded. Besides exact repeats, a state is skipped when
/// an expanded one covers it: same answered ops and value, a subset of its
/// unanswered ops, and no stricter need for an observer. Whatever the
/// covered state can still do, the covering one can too, since unanswered
/// ops are optional and the same answered ops wait in both.
#[derive(Default)]
pub(super) struct Memo {
    /// A state's key (see `State`) -> the unanswered sets expanded with
    /// it, none a superset of another.
    seen: HashMap<Words, Vec<Words>, BuildHasherDefault<WordHasher>>,
    /// About how much memory `seen` holds.
    pub bytes: u64,
}

type Words = Box<[u64]>;

/// What a map entry and a boxed slice cost besides their words, roughly.
const ENTRY_OVERHEAD: u64 = 64;
const SLICE_OVERHEAD: u64 = 16;

fn size_of_words(words: &[u64]) -> u64 {
    SLICE_OVERHEAD + 8 * words.len() as u64
}

impl Memo {
    /// Records `state` unless an expanded state covers it. Returns whether
    /// it is new, and the comparisons spent, which count against the budget.
    pub fn admit(&mut self, state: &mut State) -> (bool, u64) {
        state.make_key();
        let mut work = 0;
        if state.needs_observer() {
            // The same state without the need covers this one.
            state.key[0] ^= 1;
            let covered = self.covers(state, &mut work);
            state.key[0] ^= 1;
            if covered {
                return (false, work);
            }
        }
        if self.covers(state, &mut work) {
            return (false, work);
        }
        let unanswered = state.unanswered.clone().into_boxed_slice();
        let size = size_of_words(&unanswered);
        match self.seen.get_mut(&state.key[..]) {
            Some(expanded) => {
                let before = expanded.len() as u64;
                expanded.retain(|seen| !is_subset(&unanswered, seen));
                let dropped = before - expanded.len() as u64;
                self.bytes = self.bytes + size - dropped * size;
                expanded.push(unanswered);
            }
            None => {
                let key = state.key.clone().into_boxed_slice();
                self.bytes += ENTRY_OVERHEAD + size_of_words(&key) + size;
                self.seen.insert(key, vec![unanswered]);
            }
        }
        (true, work)
    }

    fn covers(&self, state: &State, work: &mut u64) -> bool {
        let Some(expanded) = self.seen.get(&state.key[..]) else {
            return false;
        };
        *work += expanded.len() as u64;
        expanded
            .iter()
            .any(|seen| is_subset(seen, &state.unanswered))
    }
}

fn is_subset(small: &[u64], large: &[u64]) -> bool {
    small.iter().zip(large).all(|(s, l)| s & !l == 0)
}

/// A fast hasher for the memo's word slices (FxHash-like, finished with a
/// MurmurHash3 mix). The memo holds only this process's own states, so
/// resistance to chosen collisions is not needed.
#[derive(Default)]
struct WordHasher(u64);

impl Hasher for WordHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            let mut word = [0; 8];
            word.copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(word));
        }
        for &byte in chunks.remainder() {
            self.write_u64(u64::from(byte));
        }
    }

    fn write_u64(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x517c_c1b7_2722_0a95);
    }

    fn write_usize(&mut self, word: usize) {
        self.write_u64(word as u64);
    }

    fn finish(&self) -> u64 {
        let mut h = self.0;
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
        h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        h ^ (h >> 33)
    }
}
