//! Tests of the checker: hand-written histories with known verdicts and
//! budget limits here; generated histories and a brute-force cross-check
//! in the submodules.

mod brute_force;
mod generated;

use std::collections::HashMap;

use super::*;

fn bytes(s: &str) -> Vec<u8> {
    s.as_bytes().to_vec()
}

fn event(client: u64, op: Op, call: u64, ret: u64, outcome: Outcome) -> Event {
    Event {
        client,
        op,
        call,
        ret,
        outcome,
    }
}

fn put(client: u64, key: &str, value: &str, call: u64, ret: u64) -> Event {
    event(client, Op::put(key, value), call, ret, Outcome::Put)
}

fn put_unanswered(client: u64, key: &str, value: &str, call: u64) -> Event {
    event(client, Op::put(key, value), call, call, Outcome::Unknown)
}

fn get(client: u64, key: &str, seen: Option<&str>, call: u64, ret: u64) -> Event {
    event(
        client,
        Op::get(key),
        call,
        ret,
        Outcome::Get(seen.map(bytes)),
    )
}

fn delete(client: u64, key: &str, call: u64, ret: u64) -> Event {
    event(client, Op::delete(key), call, ret, Outcome::Delete)
}

/// A compare-and-swap from `from` to `to` (None: absent) that answered `ok`.
fn cas(
    client: u64,
    key: &str,
    from: Option<&str>,
    to: Option<&str>,
    ok: bool,
    span: (u64, u64),
) -> Event {
    let op = Op::cas(key, from.map(bytes), to.map(bytes));
    event(client, op, span.0, span.1, Outcome::Cas(ok))
}

fn cas_unanswered(
    client: u64,
    key: &str,
    from: Option<&str>,
    to: Option<&str>,
    call: u64,
) -> Event {
    let op = Op::cas(key, from.map(bytes), to.map(bytes));
    event(client, op, call, call, Outcome::Unknown)
}

fn history(events: Vec<Event>) -> History {
    let mut history = History::new();
    for event in events {
        history.push(event).expect("test events are well-formed");
    }
    history
}

fn verdict(events: Vec<Event>) -> Verdict {
    check(&history(events), Budget::default())
}

fn assert_linearizable(events: Vec<Event>) {
    let verdict = verdict(events);
    assert_eq!(verdict, Verdict::Linearizable, "{verdict}");
}

/// Asserts the verdict names `key` and that its explanation mentions each
/// of `mentions` (event numbers like "#3", values like "\"v1\"").
fn assert_rejected(events: Vec<Event>, key: &str, mentions: &[&str]) -> String {
    let verdict = verdict(events);
    let Verdict::NotLinearizable {
        key: bad,
        explanation,
    } = &verdict
    else {
        panic!("expected a violation on {key:?}, got {verdict}");
    };
    assert_eq!(bad, key.as_bytes(), "{verdict}");
    for mention in mentions {
        assert!(
            explanation.contains(mention),
            "{mention} missing from:\n{explanation}"
        );
    }
    explanation.clone()
}

// ---- accepted histories ----

#[test]
fn accepts_sequential_history() {
    assert_linearizable(vec![
        get(1, "k", None, 0, 1),
        put(1, "k", "a", 2, 3),
        get(2, "k", Some("a"), 4, 5),
        put(2, "k", "b", 6, 7),
        get(1, "k", Some("b"), 8, 9),
        delete(1, "k", 10, 11),
        get(2, "k", None, 12, 13),
    ]);
}

#[test]
fn accepts_overlapping_ops_when_some_order_works() {
    // Only the order put b, get b, put a, get a explains the reads.
    assert_linearizable(vec![
        put(1, "k", "a", 0, 100),
        put(2, "k", "b", 10, 90),
        get(3, "k", Some("b"), 20, 30),
        get(3, "k", Some("a"), 40, 50),
        get(4, "k", Some("a"), 95, 105),
    ]);
}

#[test]
fn accepts_read_concurrent_with_write_seeing_either_value() {
    assert_linearizable(vec![
        put(1, "k", "a", 0, 10),
        put(1, "k", "b", 20, 60),
        get(2, "k", Some("a"), 25, 30),
        get(3, "k", Some("b"), 30, 40),
        get(2, "k", Some("b"), 45, 50),
    ]);
}

#[test]
fn accepts_cas_chain() {
    assert_linearizable(vec![
        cas(1, "k", None, Some("0"), true, (0, 10)),
        cas(1, "k", Some("0"), Some("1"), true, (20, 30)),
        cas(2, "k", Some("0"), Some("9"), false, (25, 35)),
        // Two racing swaps from "1": exactly one wins.
        cas(1, "k", Some("1"), Some("2"), true, (40, 60)),
        cas(2, "k", Some("1"), Some("3"), false, (41, 59)),
        get(3, "k", Some("2"), 70, 80),
        cas(3, "k", Some("2"), None, true, (90, 100)),
        cas(1, "k", None, Some("5"), true, (110, 120)),
        get(2, "k", Some("5"), 130, 140),
    ]);
}

#[test]
fn accepts_unanswered_put_that_is_later_observed() {
    assert_linearizable(vec![
        put(1, "k", "a", 0, 10),
        put_unanswered(2, "k", "b", 20),
        get(3, "k", Some("a"), 30, 40),
        get(3, "k", Some("b"), 200, 210),
        get(1, "k", Some("b"), 300, 310),
    ]);
}

#[test]
fn accepts_unanswered_put_that_is_never_observed() {
    assert_linearizable(vec![
        put(1, "k", "a", 0, 10),
        put_unanswered(2, "k", "b", 20),
        get(3, "k", Some("a"), 30, 40),
        get(1, "k", Some("a"), 300, 310),
    ]);
}

#[test]
fn accepts_unanswered_get_whatever_it_would_have_seen() {
    let unanswered_get = Event {
        client: 2,
        op: Op::get("k"),
        call: 5,
        ret: 5,
        outcome: Outcome::Unknown,
    };
    assert_linearizable(vec![put(1, "k", "a", 0, 10), unanswered_get]);
}

#[test]
fn accepts_unanswered_cas_that_takes_effect_after_later_writes() {
    // The swap may land at any time after its call, even after a later put
    // restored the value it expected.
    assert_linearizable(vec![
        put(1, "k", "a", 0, 10),
        cas_unanswered(2, "k", Some("a"), Some("b"), 20),
        get(3, "k", Some("a"), 30, 40),
        put(1, "k", "a", 50, 60),
        get(3, "k", Some("b"), 70, 80),
    ]);
}

#[test]
fn accepts_empty_history() {
    assert_linearizable(Vec::new());
}

// ---- rejected histories ----

#[test]
fn rejects_stale_read() {
    let explanation = assert_rejected(
        vec![
            put(1, "k", "v0", 0, 10),
            put(1, "k", "v1", 20, 30),
            get(2, "k", Some("v0"), 40, 50),
        ],
        "k",
        &["#1", "#2", "\"v0\"", "\"v1\""],
    );
    assert!(
        explanation.contains("first response that no order explains: #2"),
        "{explanation}"
    );
}

#[test]
fn rejects_stale_read_of_absent_key() {
    assert_rejected(
        vec![put(1, "k", "v1", 0, 10), get(2, "k", None, 20, 30)],
        "k",
        &["#0", "#1", "absent"],
    );
}

#[test]
fn rejects_lost_write() {
    // The put of "b" is acknowledged, nothing overwrites it, yet every
    // later read sees "a".
    assert_rejected(
        vec![
            put(1, "k", "a", 0, 10),
            put(2, "k", "b", 20, 30),
            get(3, "k", Some("a"), 25, 28),
            get(1, "k", Some("a"), 40, 50),
            get(3, "k", Some("a"), 60, 70),
        ],
        "k",
        &["#1", "#3", "\"b\""],
    );
}

#[test]
fn rejects_read_of_value_never_written() {
    assert_rejected(
        vec![put(1, "k", "a", 0, 10), get(2, "k", Some("zzz"), 5, 15)],
        "k",
        &["#1", "no op on this key writes \"zzz\""],
    );
}

#[test]
fn rejects_two_successful_cas_from_same_value() {
    assert_rejected(
        vec![
            put(1, "k", "0", 0, 10),
            cas(2, "k", Some("0"), Some("1"), true, (20, 40)),
            cas(3, "k", Some("0"), Some("2"), true, (25, 35)),
        ],
        "k",
        &["#1", "#2", "succeeded expecting \"0\""],
    );
}

#[test]
fn rejects_failed_cas_whose_comparison_held() {
    assert_rejected(
        vec![
            put(1, "k", "0", 0, 10),
            cas(2, "k", Some("0"), Some("1"), false, (20, 30)),
        ],
        "k",
        &["#1", "failed"],
    );
}

#[test]
fn rejects_read_before_its_write_was_called() {
    assert_rejected(
        vec![get(1, "k", Some("v"), 10, 20), put(2, "k", "v", 50, 60)],
        "k",
        // The writer is named, with times that show it came too late.
        &["#0", "it is written by #1 client 2 put \"v\" @[50, 60]"],
    );
}

// ---- unanswered ops ----

#[test]
fn accepts_read_of_value_written_only_by_unanswered_put() {
    assert_linearizable(vec![
        put(1, "k", "v0", 0, 10),
        put_unanswered(2, "k", "v1", 20),
        get(3, "k", Some("v1"), 30, 40),
    ]);
}

#[test]
fn rejects_unseeing_the_value_of_unanswered_put() {
    // Once "v1" has been read, the put took effect; "v0" cannot come back
    // without a write.
    assert_rejected(
        vec![
            put(1, "k", "v0", 0, 10),
            put_unanswered(2, "k", "v1", 20),
            get(3, "k", Some("v1"), 30, 40),
            get(3, "k", Some("v0"), 50, 60),
        ],
        "k",
        &["#3", "\"v0\"", "\"v1\""],
    );
}

#[test]
fn rejects_unanswered_cas_taking_effect_twice() {
    assert_rejected(
        vec![
            put(1, "k", "a", 0, 10),
            cas_unanswered(2, "k", Some("a"), Some("b"), 20),
            get(3, "k", Some("b"), 30, 40),
            put(1, "k", "a", 50, 60),
            get(3, "k", Some("b"), 70, 80),
            put(1, "k", "a", 90, 100),
            get(3, "k", Some("b"), 110, 120),
        ],
        "k",
        &["#4"],
    );
}

// ---- keys ----

#[test]
fn reports_the_key_that_fails_when_others_are_fine() {
    let explanation = assert_rejected(
        vec![
            put(1, "a", "1", 0, 10),
            put(1, "b", "1", 20, 30),
            put(2, "c", "1", 5, 15),
            get(2, "a", Some("1"), 40, 50),
            get(2, "b", None, 60, 70),
            get(1, "c", Some("1"), 80, 90),
        ],
        "b",
        &["#1", "#4"],
    );
    assert!(!explanation.contains("#0"), "{explanation}");
}

#[test]
fn keys_are_independent() {
    // On one key this would be a stale read; on two keys it is fine.
    assert_linearizable(vec![
        put(1, "x", "1", 0, 10),
        get(2, "y", None, 20, 30),
        get(2, "x", Some("1"), 40, 50),
    ]);
}

// ---- history and recorder ----

#[test]
fn history_rejects_malformed_events() {
    let mut h = History::new();
    let mismatch = Event {
        outcome: Outcome::Cas(true),
        ..put(1, "k", "a", 0, 1)
    };
    assert!(matches!(
        h.push(mismatch),
        Err(HistoryError::OutcomeMismatch { .. })
    ));
    let backwards = put(1, "k", "a", 10, 5);
    assert!(matches!(
        h.push(backwards),
        Err(HistoryError::ReturnBeforeCall { .. })
    ));
    h.push(put(1, "k", "a", 10, 20))
        .expect("first op of client 1");
    let overlapping = get(1, "k", None, 15, 25);
    assert!(matches!(
        h.push(overlapping),
        Err(HistoryError::ClientOverlap { .. })
    ));
    let enclosing = get(1, "k", None, 5, 30);
    assert!(matches!(
        h.push(enclosing),
        Err(HistoryError::ClientOverlap { .. })
    ));
    // Touching ends, other clients and unanswered ops are all fine.
    h.push(get(1, "k", Some("a"), 20, 30))
        .expect("client 1 waited");
    h.push(get(2, "k", Some("a"), 15, 25))
        .expect("another client");
    h.push(put_unanswered(1, "k", "b", 12)).expect("unanswered");
    assert_eq!(h.len(), 4);
}

#[test]
fn recorder_records_threads_against_a_real_register() {
    let recorder = Recorder::new();
    let register = std::sync::Mutex::new(HashMap::<Vec<u8>, Vec<u8>>::new());
    std::thread::scope(|scope| {
        for client in 0..4u64 {
            let (recorder, register) = (recorder.clone(), &register);
            scope.spawn(move || {
                for i in 0..50u64 {
                    let key = bytes(["a", "b"][(i % 2) as usize]);
                    let (op, outcome) = if i % 3 == 0 {
                        let value = format!("{client}-{i}").into_bytes();
                        let ticket = recorder.call(client, Op::put(key.clone(), value.clone()));
                        register.lock().expect("register").insert(key, value);
                        (ticket, Outcome::Put)
                    } else {
                        let ticket = recorder.call(client, Op::get(key.clone()));
                        let seen = register.lock().expect("register").get(&key).cloned();
                        (ticket, Outcome::Get(seen))
                    };
                    recorder.ret(op, outcome).expect("matching outcome");
                }
            });
        }
    });
    let history = recorder.history();
    assert_eq!(history.len(), 200);
    let verdict = check(&history, Budget::default());
    assert_eq!(verdict, Verdict::Linearizable, "{verdict}");
}

#[test]
fn recorder_keeps_unreturned_and_misreported_ops_as_unanswered() {
    let recorder = Recorder::new();
    let put = recorder.call(1, Op::put("k", "a"));
    recorder.ret(put, Outcome::Put).expect("answered put");
    let _lost = recorder.call(2, Op::put("k", "b"));
    let wrong = recorder.call(3, Op::delete("k"));
    let error = recorder.ret(wrong, Outcome::Get(None));
    assert!(matches!(error, Err(HistoryError::OutcomeMismatch { .. })));
    let other = Recorder::new().call(1, Op::get("k"));
    assert_eq!(
        recorder.ret(other, Outcome::Get(None)),
        Err(HistoryError::UnknownTicket)
    );

    let history = recorder.history();
    let outcomes: Vec<_> = history.events().iter().map(|e| e.outcome.clone()).collect();
    assert_eq!(outcomes, [Outcome::Put, Outcome::Unknown, Outcome::Unknown]);
    assert!(check(&history, Budget::default()).is_linearizable());
}

// ---- budget ----

/// `n` puts that all overlap, then a read of the first one called. The
/// search tries that put first, so it has to go through many orders of the
/// rest before finding one that ends with it.
fn adversarial(n: usize, seen: &str) -> Vec<Event> {
    let mut events: Vec<Event> = (0..n)
        .map(|i| put(i as u64, "k", &format!("p{i}"), i as u64, 1000))
        .collect();
    events.push(get(n as u64, "k", Some(seen), 2000, 2010));
    events
}

#[test]
fn exhausted_budget_is_inconclusive_not_a_wrong_verdict() {
    let few_steps = Budget {
        max_steps_per_key: 1000,
        ..Budget::default()
    };
    let little_memory = Budget {
        max_memo_bytes_per_key: 64 << 10,
        ..Budget::default()
    };
    for budget in [few_steps, little_memory] {
        for seen in ["p0", "never written"] {
            let verdict = check(&history(adversarial(20, seen)), budget);
            let Verdict::Inconclusive { key, reason } = &verdict else {
                panic!("{budget:?}, reading {seen}: expected inconclusive, got {verdict}");
            };
            assert_eq!(key, b"k");
            assert!(
                reason.contains("raise Budget::max_steps_per_key"),
                "{reason}"
            );
        }
    }
    // With room to search, the same shapes get real verdicts.
    assert!(check(&history(adversarial(10, "p0")), Budget::default()).is_linearizable());
    let verdict = check(
        &history(adversarial(10, "never written")),
        Budget::default(),
    );
    assert!(
        matches!(verdict, Verdict::NotLinearizable { .. }),
        "{verdict}"
    );
}

#[test]
fn a_failing_key_outranks_an_inconclusive_one() {
    let mut events = adversarial(20, "p0");
    events.push(put(100, "z", "1", 0, 10));
    events.push(get(100, "z", None, 20, 30));
    let verdict = check(
        &history(events),
        Budget {
            max_steps_per_key: 1000,
            ..Budget::default()
        },
    );
    assert!(
        matches!(&verdict, Verdict::NotLinearizable { key, .. } if key == b"z"),
        "{verdict}"
    );
}
