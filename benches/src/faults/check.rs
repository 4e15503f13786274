//! The checks after every run, each a pure function of what was recorded
//! and of the reference: the events of the run's revisions as every member
//! replays them once the faults are over. Each is tested below on records
//! with a planted bug.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::time::Duration;

use skiff_store::testing::linearizability::{check, Budget, History, Verdict};

/// A write a client saw acknowledged: `value` None for a delete.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ack {
    pub key: Vec<u8>,
    pub value: Option<Vec<u8>>,
    pub revision: i64,
    pub client: u64,
}

/// A change as a watch reports it: `value` None for a delete.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchEvent {
    pub revision: i64,
    pub key: Vec<u8>,
    pub value: Option<Vec<u8>>,
}

#[derive(Debug, Clone)]
pub enum WatchResponse {
    /// Events, and when they arrived (the run's clock).
    Events {
        at: Duration,
        events: Vec<WatchEvent>,
    },
    /// A progress notification: every event up to this revision was sent.
    Progress(i64),
    Canceled(String),
}

/// One stream of a watcher, from one member.
#[derive(Debug, Clone)]
pub struct WatchSegment {
    pub member: usize,
    pub start: i64,
    pub responses: Vec<WatchResponse>,
}

#[derive(Debug, Clone)]
pub struct WatchRecord {
    pub id: usize,
    pub segments: Vec<WatchSegment>,
}

/// A lease a client kept alive: it may not expire before `alive_until`
/// (the latest keep-alive's send time plus the TTL it answered).
#[derive(Debug, Clone)]
pub struct LeaseRecord {
    pub id: i64,
    pub key: Vec<u8>,
    pub alive_until: Duration,
    /// When the client started revoking it, if it did.
    pub revoked_at: Option<Duration>,
}

/// A write the Kubernetes API acknowledged: the resourceVersion it
/// answered (for a delete, the revision of the delete, as Kubernetes
/// answers it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestAck {
    pub key: Vec<u8>,
    pub revision: i64,
    pub deleted: bool,
    pub member: usize,
    pub client: u64,
}

/// A list the Kubernetes API answered, all its pages read: its
/// resourceVersion (negative when pages disagreed) and every item's key
/// and resourceVersion.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestList {
    pub revision: i64,
    pub items: Vec<(Vec<u8>, i64)>,
    pub member: usize,
}

/// Something a run did that the store promises never happens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub kind: &'static str,
    pub detail: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.kind, self.detail)
    }
}

fn violation(kind: &'static str, detail: String) -> Violation {
    Violation { kind, detail }
}

fn show(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The KV history is linearizable. An inconclusive search is reported
/// apart (Err), not as a violation.
pub fn linearizable(history: &History) -> Result<Option<Violation>, String> {
    match check(history, Budget::default()) {
        Verdict::Linearizable => Ok(None),
        wrong @ Verdict::NotLinearizable { .. } => {
            Ok(Some(violation("not linearizable", wrong.to_string())))
        }
        inconclusive @ Verdict::Inconclusive { .. } => Err(inconclusive.to_string()),
    }
}

/// Every member replays the same events.
pub fn members_agree(references: &[(String, Vec<WatchEvent>)]) -> Vec<Violation> {
    let Some((first_name, first)) = references.first() else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for (name, events) in &references[1..] {
        if events != first {
            let at = events
                .iter()
                .zip(first)
                .position(|(a, b)| a != b)
                .unwrap_or(events.len().min(first.len()));
            found.push(violation(
                "members disagree",
                format!(
                    "{name} and {first_name} differ at event {at}: {:?} against {:?} ({} and {} events)",
                    events.get(at),
                    first.get(at),
                    events.len(),
                    first.len()
                ),
            ));
        }
    }
    found
}

/// Every member's HashKV at one revision is the same.
pub fn hashes_agree(revision: i64, hashes: &[(String, u32)]) -> Option<Violation> {
    let first = hashes.first()?.1;
    hashes.iter().any(|&(_, h)| h != first).then(|| {
        violation(
            "HashKV differs",
            format!("at revision {revision}: {hashes:?}"),
        )
    })
}

/// Every acknowledged write is in the reference at its revision, and no
/// two acknowledged writes got one revision.
pub fn acknowledged_writes(acks: &[Ack], reference: &[WatchEvent]) -> Vec<Violation> {
    let mut by_revision: HashMap<i64, Vec<&WatchEvent>> = HashMap::new();
    for event in reference {
        by_revision.entry(event.revision).or_default().push(event);
    }
    let mut found = Vec::new();
    let mut owners: BTreeMap<i64, &Ack> = BTreeMap::new();
    for ack in acks {
        if let Some(other) = owners.insert(ack.revision, ack) {
            found.push(violation(
                "duplicated revision",
                format!(
                    "revision {} acknowledged to client {} (key {}) and to client {} (key {})",
                    ack.revision,
                    other.client,
                    show(&other.key),
                    ack.client,
                    show(&ack.key)
                ),
            ));
        }
        let present = by_revision.get(&ack.revision).is_some_and(|events| {
            events
                .iter()
                .any(|e| e.key == ack.key && e.value == ack.value)
        });
        if !present {
            let what = match &ack.value {
                Some(v) => format!("put {}={}", show(&ack.key), show(v)),
                None => format!("delete {}", show(&ack.key)),
            };
            found.push(violation(
                "lost acknowledged write",
                format!(
                    "{what} acknowledged to client {} at revision {}, which holds {:?}",
                    ack.client,
                    ack.revision,
                    by_revision.get(&ack.revision)
                ),
            ));
        }
    }
    found
}

/// Every write the API acknowledged is in the store's history: a create or
/// update at the resourceVersion it answered, a delete at its revision.
pub fn rest_writes(acks: &[RestAck], reference: &[WatchEvent]) -> Vec<Violation> {
    let at: HashMap<(&[u8], i64), bool> = reference
        .iter()
        .map(|e| ((e.key.as_slice(), e.revision), e.value.is_none()))
        .collect();
    let mut found = Vec::new();
    for ack in acks {
        let what = if ack.deleted { "delete" } else { "write" };
        match at.get(&(ack.key.as_slice(), ack.revision)) {
            Some(&deleted) if deleted == ack.deleted => {}
            Some(_) => found.push(violation(
                "REST write changed",
                format!(
                    "client {}'s {what} of {} through member {} answered resourceVersion {}, where the store has the other kind of change",
                    ack.client,
                    show(&ack.key),
                    ack.member,
                    ack.revision
                ),
            )),
            None => found.push(violation(
                "REST write lost",
                format!(
                    "client {}'s {what} of {} through member {} answered resourceVersion {}, which the store's history lacks",
                    ack.client,
                    show(&ack.key),
                    ack.member,
                    ack.revision
                ),
            )),
        }
    }
    found
}

/// Every list (all its pages) is the store's state at its
/// resourceVersion: the keys alive then, each at its last change.
pub fn rest_lists(lists: &[RestList], reference: &[WatchEvent]) -> Vec<Violation> {
    let mut found = Vec::new();
    for list in lists {
        if list.revision < 0 {
            found.push(violation(
                "REST list pages disagree",
                format!(
                    "a paged list through member {} had pages at resourceVersions {} and others",
                    list.member, -list.revision
                ),
            ));
            continue;
        }
        let mut alive: BTreeMap<&[u8], i64> = BTreeMap::new();
        for event in reference.iter().take_while(|e| e.revision <= list.revision) {
            match event.value {
                Some(_) => alive.insert(&event.key, event.revision),
                None => alive.remove(event.key.as_slice()),
            };
        }
        let listed: BTreeMap<&[u8], i64> = list
            .items
            .iter()
            .map(|(k, rv)| (k.as_slice(), *rv))
            .collect();
        if listed != alive || listed.len() != list.items.len() {
            let show_all = |m: &BTreeMap<&[u8], i64>| {
                m.iter()
                    .map(|(k, rv)| format!("{}@{rv}", show(k)))
                    .collect::<Vec<_>>()
                    .join(" ")
            };
            found.push(violation(
                "REST list is not the store at its resourceVersion",
                format!(
                    "member {} listed [{}] at resourceVersion {}; the store then held [{}]",
                    list.member,
                    show_all(&listed),
                    list.revision,
                    show_all(&alive)
                ),
            ));
        }
    }
    found
}

/// Each watch stream delivered the reference from its start revision in
/// order, without gaps or duplicates, each revision in one response, and
/// never told of progress past an event it had not sent.
pub fn watches(records: &[WatchRecord], reference: &[WatchEvent]) -> Vec<Violation> {
    let mut found = Vec::new();
    for record in records {
        for (s, segment) in record.segments.iter().enumerate() {
            let expected: Vec<&WatchEvent> = reference
                .iter()
                .filter(|e| e.revision >= segment.start)
                .collect();
            let name = format!(
                "watcher {} stream {s} (member {}, from revision {})",
                record.id, segment.member, segment.start
            );
            if let Some(v) = segment_violation(&name, segment, &expected) {
                found.push(v);
            }
        }
    }
    found
}

fn segment_violation(
    name: &str,
    segment: &WatchSegment,
    expected: &[&WatchEvent],
) -> Option<Violation> {
    let mut delivered = 0usize;
    let mut last_revision = None;
    for response in &segment.responses {
        match response {
            WatchResponse::Events { events, .. } => {
                if let (Some(last), Some(first)) = (last_revision, events.first()) {
                    if first.revision <= last {
                        let repeated = delivered > 0 && expected.get(delivered - 1) == Some(&first);
                        let kind = if first.revision < last {
                            "watch out of order"
                        } else if repeated {
                            "watch duplicated or reordered an event"
                        } else {
                            "watch split a revision"
                        };
                        return Some(violation(
                            kind,
                            format!(
                                "{name}: a response starts at revision {} after one that ended at {last}",
                                first.revision
                            ),
                        ));
                    }
                }
                for event in events {
                    let Some(want) = expected.get(delivered) else {
                        return Some(violation(
                            "watch invented an event",
                            format!("{name}: {event:?} after the last event of the reference"),
                        ));
                    };
                    if event != *want {
                        let kind = if event.revision < want.revision {
                            "watch duplicated or reordered an event"
                        } else if event.revision > want.revision {
                            "watch skipped an event"
                        } else {
                            "watch changed an event"
                        };
                        return Some(violation(
                            kind,
                            format!("{name}: got {event:?} where the reference has {want:?}"),
                        ));
                    }
                    delivered += 1;
                }
                last_revision = events.last().map(|e| e.revision).or(last_revision);
            }
            WatchResponse::Progress(revision) => {
                if let Some(next) = expected.get(delivered) {
                    if next.revision <= *revision {
                        return Some(violation(
                            "watch progress past an unsent event",
                            format!(
                                "{name}: progress to revision {revision} before the event {next:?}"
                            ),
                        ));
                    }
                }
            }
            WatchResponse::Canceled(reason) => {
                return Some(violation("watch canceled", format!("{name}: {reason}")));
            }
        }
    }
    None
}

/// No lease's key was deleted by expiry before the lease could expire: the
/// first watch to report the delete did so no earlier than the lease's
/// last keep-alive allowed (or after the client began to revoke it).
pub fn leases(
    records: &[LeaseRecord],
    watches: &[WatchRecord],
    reference: &[WatchEvent],
) -> Vec<Violation> {
    // The earliest arrival of each revision at any watcher.
    let mut arrived: HashMap<i64, Duration> = HashMap::new();
    for record in watches {
        for segment in &record.segments {
            for response in &segment.responses {
                if let WatchResponse::Events { at, events } = response {
                    for event in events {
                        let seen = arrived.entry(event.revision).or_insert(*at);
                        *seen = (*seen).min(*at);
                    }
                }
            }
        }
    }
    let mut found = Vec::new();
    for lease in records {
        let Some(deleted) = reference
            .iter()
            .find(|e| e.key == lease.key && e.value.is_none())
        else {
            continue;
        };
        let Some(&at) = arrived.get(&deleted.revision) else {
            continue;
        };
        let revoked_before = lease.revoked_at.is_some_and(|r| r <= at);
        if at < lease.alive_until && !revoked_before {
            found.push(violation(
                "lease expired early",
                format!(
                    "lease {:x}: its key {} was deleted at revision {} and reported {:?} before the lease could expire",
                    lease.id,
                    show(&lease.key),
                    deleted.revision,
                    lease.alive_until - at
                ),
            ));
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use skiff_store::testing::linearizability::{Event, Op, Outcome};

    use super::*;

    fn put(revision: i64, key: &str, value: &str) -> WatchEvent {
        WatchEvent {
            revision,
            key: key.into(),
            value: Some(value.into()),
        }
    }

    fn delete(revision: i64, key: &str) -> WatchEvent {
        WatchEvent {
            revision,
            key: key.into(),
            value: None,
        }
    }

    fn ack(revision: i64, key: &str, value: &str, client: u64) -> Ack {
        Ack {
            key: key.into(),
            value: Some(value.into()),
            revision,
            client,
        }
    }

    fn reference() -> Vec<WatchEvent> {
        vec![
            put(5, "a", "1"),
            put(6, "b", "1"),
            delete(7, "a"),
            put(8, "a", "2"),
        ]
    }

    fn events(at: u64, events: &[WatchEvent]) -> WatchResponse {
        WatchResponse::Events {
            at: Duration::from_millis(at),
            events: events.to_vec(),
        }
    }

    fn one_stream(start: i64, responses: Vec<WatchResponse>) -> Vec<WatchRecord> {
        vec![WatchRecord {
            id: 0,
            segments: vec![WatchSegment {
                member: 0,
                start,
                responses,
            }],
        }]
    }

    fn kinds(found: &[Violation]) -> Vec<&'static str> {
        found.iter().map(|v| v.kind).collect()
    }

    #[test]
    fn a_stale_read_is_not_linearizable() {
        let mut history = History::new();
        let ev = |client, op, call, ret, outcome| Event {
            client,
            op,
            call,
            ret,
            outcome,
        };
        history
            .push(ev(1, Op::put("k", "v1"), 0, 10, Outcome::Put))
            .unwrap();
        assert_eq!(linearizable(&history), Ok(None));
        history
            .push(ev(2, Op::get("k"), 20, 30, Outcome::Get(None)))
            .unwrap();
        let found = linearizable(&history).unwrap().expect("a violation");
        assert_eq!(found.kind, "not linearizable");
        assert!(found.detail.contains("\"k\""), "{found}");
    }

    #[test]
    fn a_lost_write_is_found() {
        let mut acks = vec![ack(5, "a", "1", 1), ack(8, "a", "2", 2)];
        assert_eq!(acknowledged_writes(&acks, &reference()), vec![]);
        acks.push(ack(9, "b", "2", 3));
        assert_eq!(
            kinds(&acknowledged_writes(&acks, &reference())),
            ["lost acknowledged write"]
        );
        // A write acknowledged with the revision of another key's.
        let acks = [ack(6, "a", "9", 1)];
        assert_eq!(
            kinds(&acknowledged_writes(&acks, &reference())),
            ["lost acknowledged write"]
        );
    }

    #[test]
    fn a_duplicated_revision_is_found() {
        let acks = [ack(5, "a", "1", 1), ack(5, "a", "1", 2)];
        assert_eq!(
            kinds(&acknowledged_writes(&acks, &reference())),
            ["duplicated revision"]
        );
    }

    #[test]
    fn a_whole_watch_passes() {
        let r = reference();
        let streams = one_stream(
            5,
            vec![
                events(1, &r[..2]),
                WatchResponse::Progress(6),
                events(2, &r[2..]),
                WatchResponse::Progress(9),
            ],
        );
        assert_eq!(watches(&streams, &r), vec![]);
        // From a later revision, stopping early.
        let streams = one_stream(7, vec![events(1, &r[2..3])]);
        assert_eq!(watches(&streams, &r), vec![]);
    }

    #[test]
    fn watch_gaps_duplicates_and_split_revisions_are_found() {
        let r = reference();
        let gap = one_stream(5, vec![events(1, &r[..1]), events(2, &r[2..])]);
        assert_eq!(kinds(&watches(&gap, &r)), ["watch skipped an event"]);
        let duplicate = one_stream(5, vec![events(1, &r[..2]), events(2, &r[1..])]);
        assert_eq!(
            kinds(&watches(&duplicate, &r)),
            ["watch duplicated or reordered an event"]
        );
        let backwards = one_stream(5, vec![events(1, &r[..2]), events(2, &r[..1])]);
        assert_eq!(kinds(&watches(&backwards, &r)), ["watch out of order"]);
        let inside = one_stream(5, vec![events(1, &[r[0].clone(), r[0].clone()])]);
        assert_eq!(
            kinds(&watches(&inside, &r)),
            ["watch duplicated or reordered an event"]
        );
        // Two events of one revision (a transaction) split over responses.
        let txn = vec![put(5, "a", "1"), put(5, "b", "1"), put(6, "c", "1")];
        let split = one_stream(5, vec![events(1, &txn[..1]), events(2, &txn[1..])]);
        assert_eq!(kinds(&watches(&split, &txn)), ["watch split a revision"]);
        let changed = one_stream(5, vec![events(1, &[put(5, "a", "other")])]);
        assert_eq!(kinds(&watches(&changed, &r)), ["watch changed an event"]);
    }

    #[test]
    fn progress_past_an_unsent_event_is_found() {
        let r = reference();
        let lying = one_stream(5, vec![events(1, &r[..1]), WatchResponse::Progress(6)]);
        assert_eq!(
            kinds(&watches(&lying, &r)),
            ["watch progress past an unsent event"]
        );
        let honest = one_stream(5, vec![events(1, &r[..1]), WatchResponse::Progress(5)]);
        assert_eq!(watches(&honest, &r), vec![]);
    }

    #[test]
    fn an_early_lease_expiry_is_found() {
        let r = vec![put(5, "l", "x"), delete(6, "l")];
        let stream = one_stream(5, vec![events(100, &r[..1]), events(3_000, &r[1..])]);
        let lease = |alive_until_ms, revoked_at: Option<u64>| LeaseRecord {
            id: 7,
            key: "l".into(),
            alive_until: Duration::from_millis(alive_until_ms),
            revoked_at: revoked_at.map(Duration::from_millis),
        };
        assert_eq!(leases(&[lease(2_900, None)], &stream, &r), vec![]);
        assert_eq!(
            kinds(&leases(&[lease(3_500, None)], &stream, &r)),
            ["lease expired early"]
        );
        // Revoked by its client first: not an expiry.
        assert_eq!(leases(&[lease(3_500, Some(2_000))], &stream, &r), vec![]);
    }

    #[test]
    fn members_that_replay_different_events_are_found() {
        let r = reference();
        let mut other = r.clone();
        other[2] = put(7, "a", "x");
        let found = members_agree(&[
            ("m0".into(), r.clone()),
            ("m1".into(), r.clone()),
            ("m2".into(), other),
        ]);
        assert_eq!(kinds(&found), ["members disagree"]);
        assert!(
            found[0].detail.starts_with("m2 and m0 differ at event 2"),
            "{}",
            found[0]
        );
        assert_eq!(hashes_agree(8, &[("m0".into(), 1), ("m1".into(), 1)]), None);
        assert!(hashes_agree(8, &[("m0".into(), 1), ("m1".into(), 2)]).is_some());
    }

    fn rest_ack(revision: i64, key: &str, deleted: bool) -> RestAck {
        RestAck {
            key: key.into(),
            revision,
            deleted,
            member: 0,
            client: 1,
        }
    }

    #[test]
    fn a_rest_write_missing_from_the_history_is_lost() {
        let history = [put(5, "a", "1"), put(6, "b", "1"), delete(7, "a")];
        let good = [
            rest_ack(5, "a", false),
            rest_ack(6, "b", false),
            rest_ack(7, "a", true),
        ];
        assert!(rest_writes(&good, &history).is_empty());
        let lost = rest_writes(&[rest_ack(8, "a", false)], &history);
        assert_eq!(lost.len(), 1);
        assert_eq!(lost[0].kind, "REST write lost");
        // A delete answered with the object's last write, not the delete.
        let wrong = rest_writes(&[rest_ack(5, "a", true)], &history);
        assert_eq!(wrong[0].kind, "REST write changed");
    }

    #[test]
    fn a_rest_list_must_be_the_store_at_its_revision() {
        let history = [
            put(5, "a", "1"),
            put(6, "b", "1"),
            delete(7, "a"),
            put(8, "b", "2"),
        ];
        let list = |revision: i64, items: &[(&str, i64)]| RestList {
            revision,
            items: items
                .iter()
                .map(|(k, rv)| (k.as_bytes().to_vec(), *rv))
                .collect(),
            member: 1,
        };
        let good = [
            list(4, &[]),
            list(6, &[("a", 5), ("b", 6)]),
            list(7, &[("b", 6)]),
            list(9, &[("b", 8)]),
        ];
        assert!(rest_lists(&good, &history).is_empty());
        // A stale item, a deleted one still listed, one listed twice, pages
        // at two revisions.
        for bad in [
            list(8, &[("b", 6)]),
            list(7, &[("a", 5), ("b", 6)]),
            list(6, &[("a", 5), ("b", 6), ("b", 6)]),
            list(-6, &[("a", 5), ("b", 6)]),
        ] {
            assert_eq!(
                rest_lists(std::slice::from_ref(&bad), &history).len(),
                1,
                "{bad:?}"
            );
        }
    }
}
