//! The checker against the definition of linearizability, tried by brute
//! force on thousands of small random histories.

use std::collections::HashMap;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::{bytes, check, history, Budget, Event, Op, Outcome, Verdict};

/// The definition, checked directly: try every order of the whole history
/// on one map, every unanswered op either placed somewhere after its call
/// or left out. Exponential, so only for a handful of ops; it shares no
/// code with the checker, not even the split by key.
fn brute_force(events: &[Event]) -> bool {
    fn go(events: &[&Event], placed: &mut Vec<bool>, map: &mut HashMap<Vec<u8>, Vec<u8>>) -> bool {
        let answered = |e: &Event| e.outcome != Outcome::Unknown;
        if (0..events.len()).all(|i| placed[i] || !answered(events[i])) {
            return true;
        }
        for i in 0..events.len() {
            let waits = (0..events.len()).any(|j| {
                j != i && !placed[j] && answered(events[j]) && events[j].ret < events[i].call
            });
            if placed[i] || waits {
                continue;
            }
            let key = events[i].op.key().to_vec();
            let before = map.get(&key).cloned();
            let after = match (&events[i].op, &events[i].outcome) {
                (Op::Put { value, .. }, _) => Some(Some(value.clone())),
                (Op::Delete { .. }, _) => Some(None),
                (Op::Get { .. }, Outcome::Get(seen)) => (*seen == before).then(|| before.clone()),
                (Op::Get { .. }, _) => Some(before.clone()),
                (Op::Cas { expect, new, .. }, outcome) => match (*expect == before, outcome) {
                    (true, Outcome::Cas(true) | Outcome::Unknown) => Some(new.clone()),
                    (false, Outcome::Cas(false) | Outcome::Unknown) => Some(before.clone()),
                    _ => None,
                },
            };
            let Some(after) = after else { continue };
            let set = |map: &mut HashMap<Vec<u8>, Vec<u8>>, value: Option<Vec<u8>>| match value {
                Some(value) => map.insert(key.clone(), value),
                None => map.remove(&key),
            };
            set(map, after);
            placed[i] = true;
            let found = go(events, placed, map);
            placed[i] = false;
            set(map, before);
            if found {
                return true;
            }
        }
        false
    }
    let events: Vec<&Event> = events.iter().collect();
    go(&events, &mut vec![false; events.len()], &mut HashMap::new())
}

/// A small history with random spans and random outcomes, so that some
/// are linearizable and some are not.
fn random_small(rng: &mut StdRng) -> Vec<Event> {
    let values = [None, Some("a"), Some("b"), Some("c")];
    let value = |rng: &mut StdRng| values[rng.gen_range(0..values.len())].map(bytes);
    let mut free_at = [0u64; 3];
    let mut events = Vec::new();
    for _ in 0..rng.gen_range(1..=8) {
        let client = rng.gen_range(0..free_at.len());
        let call = free_at[client] + rng.gen_range(0..4);
        let ret = call + rng.gen_range(0..6);
        free_at[client] = ret;
        let key = ["x", "y"][usize::from(rng.gen_bool(0.2))];
        let (op, outcome) = match rng.gen_range(0..4) {
            0 => {
                let put = value(rng).unwrap_or_else(|| bytes("a"));
                (Op::put(key, put), Outcome::Put)
            }
            1 => (Op::get(key), Outcome::Get(value(rng))),
            2 => (Op::delete(key), Outcome::Delete),
            _ => (
                Op::cas(key, value(rng), value(rng)),
                Outcome::Cas(rng.gen_bool(0.5)),
            ),
        };
        let outcome = if rng.gen_bool(0.3) {
            Outcome::Unknown
        } else {
            outcome
        };
        events.push(Event {
            client: client as u64,
            op,
            call,
            ret,
            outcome,
        });
    }
    events
}

/// The events on `key` as they stood at time `cut`: ops called later are
/// left out, and ops that had not returned yet have no answer.
fn prefix(events: &[Event], key: &[u8], cut: u64) -> Vec<Event> {
    let on_key = events.iter().filter(|e| e.op.key() == key && e.call <= cut);
    let at_cut = on_key.map(|e| match e.ret <= cut {
        true => e.clone(),
        false => Event {
            outcome: Outcome::Unknown,
            ..e.clone()
        },
    });
    at_cut.collect()
}

/// Checks, by brute force, that the response an explanation names first is
/// the first one that no order explains on that key.
fn assert_first_failure_is_named(events: &[Event], key: &[u8], explanation: &str) {
    let named = explanation
        .strip_prefix("first response that no order explains: #")
        .and_then(|rest| rest.split(' ').next())
        .and_then(|index| index.parse::<usize>().ok());
    let Some(named) = named else {
        panic!("no first response named in:\n{explanation}");
    };
    let cut = events[named].ret;
    assert!(!brute_force(&prefix(events, key, cut)), "{explanation}");
    let answered_on_key = events
        .iter()
        .filter(|e| e.op.key() == key && e.outcome != Outcome::Unknown);
    if let Some(before) = answered_on_key
        .map(|e| e.ret)
        .filter(|&ret| ret < cut)
        .max()
    {
        assert!(brute_force(&prefix(events, key, before)), "{explanation}");
    }
}

#[test]
fn agrees_with_brute_force_on_small_random_histories() {
    let mut rng = StdRng::seed_from_u64(42);
    let (mut accepted, mut rejected) = (0, 0);
    for case in 0..10_000 {
        let events = random_small(&mut rng);
        let expected = brute_force(&events);
        let verdict = check(&history(events.clone()), Budget::default());
        assert!(
            !matches!(verdict, Verdict::Inconclusive { .. }),
            "case {case}: {verdict}"
        );
        assert_eq!(
            verdict.is_linearizable(),
            expected,
            "case {case}: brute force says {expected}, checker says {verdict}\n{events:#?}"
        );
        match &verdict {
            Verdict::NotLinearizable { key, explanation } => {
                assert_first_failure_is_named(&events, key, explanation);
                rejected += 1;
            }
            _ => accepted += 1,
        }
    }
    // Both answers are common, so both directions were tested.
    assert!(
        accepted > 2500 && rejected > 2500,
        "{accepted} accepted, {rejected} rejected"
    );
}
