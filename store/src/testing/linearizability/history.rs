//! What clients did and saw: operations, their outcomes and call/return times,
//! collected into a `History` directly or through a shared `Recorder`.
//! Not the checking itself; see `search` and `model`.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

/// One operation on one key.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    Put {
        key: Vec<u8>,
        value: Vec<u8>,
    },
    Get {
        key: Vec<u8>,
    },
    Delete {
        key: Vec<u8>,
    },
    /// Compare-and-swap as an etcd txn: if the key's current value equals
    /// `expect` (None = key absent) then set it to `new` (None = delete).
    Cas {
        key: Vec<u8>,
        expect: Option<Vec<u8>>,
        new: Option<Vec<u8>>,
    },
}

impl Op {
    pub fn put(key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>) -> Op {
        Op::Put {
            key: key.into(),
            value: value.into(),
        }
    }

    pub fn get(key: impl Into<Vec<u8>>) -> Op {
        Op::Get { key: key.into() }
    }

    pub fn delete(key: impl Into<Vec<u8>>) -> Op {
        Op::Delete { key: key.into() }
    }

    pub fn cas(key: impl Into<Vec<u8>>, expect: Option<Vec<u8>>, new: Option<Vec<u8>>) -> Op {
        Op::Cas {
            key: key.into(),
            expect,
            new,
        }
    }

    pub fn key(&self) -> &[u8] {
        match self {
            Op::Put { key, .. } | Op::Get { key } | Op::Delete { key } | Op::Cas { key, .. } => key,
        }
    }

    fn kind(&self) -> &'static str {
        match self {
            Op::Put { .. } => "put",
            Op::Get { .. } => "get",
            Op::Delete { .. } => "delete",
            Op::Cas { .. } => "cas",
        }
    }
}

/// What the client saw.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Outcome {
    Put,
    Get(Option<Vec<u8>>),
    Delete,
    /// Whether the comparison held and the swap was applied.
    Cas(bool),
    /// No answer (timeout, crash, connection lost): the op may or may not
    /// have taken effect, at any time after its call.
    Unknown,
}

impl Outcome {
    fn kind(&self) -> &'static str {
        match self {
            Outcome::Put => "put",
            Outcome::Get(_) => "get",
            Outcome::Delete => "delete",
            Outcome::Cas(_) => "cas",
            Outcome::Unknown => "unknown",
        }
    }

    fn answers(&self, op: &Op) -> bool {
        matches!(
            (op, self),
            (_, Outcome::Unknown)
                | (Op::Put { .. }, Outcome::Put)
                | (Op::Get { .. }, Outcome::Get(_))
                | (Op::Delete { .. }, Outcome::Delete)
                | (Op::Cas { .. }, Outcome::Cas(_))
        )
    }
}

/// One operation as one client saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    pub client: u64,
    pub op: Op,
    /// Time of invocation, in any monotonic unit shared by all clients.
    pub call: u64,
    /// Time of the response; ignored for `Outcome::Unknown`, which is
    /// treated as never having returned.
    pub ret: u64,
    pub outcome: Outcome,
}

impl Event {
    fn answered(&self) -> bool {
        self.outcome != Outcome::Unknown
    }

    /// What the client did and saw, without the key, for explanations:
    /// `client 3 get -> "v1" @[120, 130]`.
    pub fn summary(&self) -> String {
        let what = match (&self.op, &self.outcome) {
            (Op::Put { value, .. }, _) => format!("put {}", show(Some(value))),
            (Op::Get { .. }, Outcome::Get(seen)) => format!("get -> {}", show(seen.as_deref())),
            (Op::Get { .. }, _) => "get".to_string(),
            (Op::Delete { .. }, _) => "delete".to_string(),
            (Op::Cas { expect, new, .. }, outcome) => {
                let result = match outcome {
                    Outcome::Cas(true) => " succeeded",
                    Outcome::Cas(false) => " failed",
                    _ => "",
                };
                let (expect, new) = (show(expect.as_deref()), show(new.as_deref()));
                format!("cas {expect} => {new}{result}")
            }
        };
        let ret = match self.answered() {
            true => self.ret.to_string(),
            false => "no answer".to_string(),
        };
        format!("client {} {what} @[{}, {ret}]", self.client, self.call)
    }
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "key {}: {}", show(Some(self.op.key())), self.summary())
    }
}

/// A key or value for people: quoted and escaped, cut short if long, and
/// `absent` for a key that holds nothing.
pub(super) fn show(value: Option<&[u8]>) -> String {
    const SHOWN: usize = 40;
    match value {
        None => "absent".to_string(),
        Some(bytes) if bytes.len() <= SHOWN => format!("\"{}\"", bytes.escape_ascii()),
        Some(bytes) => format!(
            "\"{}\"... ({} bytes)",
            bytes[..SHOWN].escape_ascii(),
            bytes.len()
        ),
    }
}

/// Why an event cannot be part of a history.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HistoryError {
    /// The outcome is for a different kind of op than the one called.
    OutcomeMismatch {
        client: u64,
        op: &'static str,
        outcome: &'static str,
    },
    /// An answered op returned before it was called: the clock is not
    /// monotonic or the times were swapped.
    ReturnBeforeCall { client: u64, call: u64, ret: u64 },
    /// Two answered ops of one client overlap in time; a client is expected
    /// to wait for each answer before its next call.
    ClientOverlap {
        client: u64,
        first_call: u64,
        second_call: u64,
    },
    /// The ticket was not issued by this recorder.
    UnknownTicket,
}

impl fmt::Display for HistoryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HistoryError::OutcomeMismatch {
                client,
                op,
                outcome,
            } => write!(
                f,
                "client {client}: a {op} op was answered with a {outcome} outcome; \
                 record the outcome that matches the op, or Outcome::Unknown"
            ),
            HistoryError::ReturnBeforeCall { client, call, ret } => write!(
                f,
                "client {client}: op returned at {ret}, before its call at {call}; \
                 take both times from one monotonic clock"
            ),
            HistoryError::ClientOverlap {
                client,
                first_call,
                second_call,
            } => write!(
                f,
                "client {client}: ops called at {first_call} and {second_call} overlap; \
                 give each concurrent task its own client id"
            ),
            HistoryError::UnknownTicket => write!(
                f,
                "ticket was not issued by this recorder; return it to the recorder that made it"
            ),
        }
    }
}

impl std::error::Error for HistoryError {}

/// The events of a run, in the order they were pushed (not necessarily
/// by time). Every event in it has an outcome that matches its op.
#[derive(Clone, Debug, Default)]
pub struct History {
    events: Vec<Event>,
    /// Answered ops by (client, call, index) -> return, to catch a client
    /// id shared by two concurrent tasks.
    answered_spans: BTreeMap<(u64, u64, usize), u64>,
}

impl History {
    pub fn new() -> History {
        History::default()
    }

    pub fn push(&mut self, event: Event) -> Result<(), HistoryError> {
        if !event.outcome.answers(&event.op) {
            return Err(HistoryError::OutcomeMismatch {
                client: event.client,
                op: event.op.kind(),
                outcome: event.outcome.kind(),
            });
        }
        if event.answered() {
            self.admit_span(&event)?;
        }
        self.events.push(event);
        Ok(())
    }

    fn admit_span(&mut self, event: &Event) -> Result<(), HistoryError> {
        let (client, call, ret) = (event.client, event.call, event.ret);
        if ret < call {
            return Err(HistoryError::ReturnBeforeCall { client, call, ret });
        }
        // Spans already admitted do not overlap each other, so only the
        // neighbours by call time can overlap the new one.
        let before = self
            .answered_spans
            .range((client, 0, 0)..=(client, call, usize::MAX))
            .next_back();
        let after = self
            .answered_spans
            .range((client, call, usize::MAX)..=(client, u64::MAX, usize::MAX))
            .next();
        let overlap = match (before, after) {
            (Some((&(_, first_call, _), &first_ret)), _) if first_ret > call => Some(first_call),
            (_, Some((&(_, next_call, _), _))) if next_call < ret => Some(next_call),
            _ => None,
        };
        if let Some(other) = overlap {
            return Err(HistoryError::ClientOverlap {
                client,
                first_call: other.min(call),
                second_call: other.max(call),
            });
        }
        self.answered_spans
            .insert((client, call, self.events.len()), ret);
        Ok(())
    }

    pub fn events(&self) -> &[Event] {
        &self.events
    }

    pub fn len(&self) -> usize {
        self.events.len()
    }

    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }
}

/// An op that has been called and not yet answered; hand it back to
/// `Recorder::ret`. A ticket that is never handed back counts as
/// `Outcome::Unknown`.
#[must_use = "hand the ticket back to Recorder::ret, or the op counts as unanswered"]
#[derive(Debug)]
pub struct Ticket {
    recorder: usize,
    id: u64,
}

/// A history shared by concurrent clients (threads or async tasks), with
/// times read from one monotonic clock while holding its lock, so that
/// every client's times are ordered against every other's.
#[derive(Clone, Debug)]
pub struct Recorder {
    id: usize,
    inner: Arc<Mutex<Recording>>,
}

/// Tells recorders apart, so a ticket cannot be answered by the wrong one.
static NEXT_RECORDER: AtomicUsize = AtomicUsize::new(0);

#[derive(Debug)]
struct Recording {
    start: Instant,
    history: History,
    /// Calls not yet answered, by ticket id.
    pending: BTreeMap<u64, PendingCall>,
    next_ticket: u64,
}

#[derive(Debug)]
struct PendingCall {
    client: u64,
    op: Op,
    call: u64,
}

impl Default for Recorder {
    fn default() -> Recorder {
        Recorder::new()
    }
}

impl Recorder {
    pub fn new() -> Recorder {
        Recorder {
            id: NEXT_RECORDER.fetch_add(1, Ordering::Relaxed),
            inner: Arc::new(Mutex::new(Recording {
                start: Instant::now(),
                history: History::new(),
                pending: BTreeMap::new(),
                next_ticket: 0,
            })),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Recording> {
        // A client that panicked mid-record leaves the recording intact:
        // every update below is a single insert or remove.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Note that `client` is about to send `op`. Call it before sending, so
    /// the recorded call time is no later than the real one.
    pub fn call(&self, client: u64, op: Op) -> Ticket {
        let mut recording = self.lock();
        let call = recording.now();
        let id = recording.next_ticket;
        recording.next_ticket += 1;
        recording
            .pending
            .insert(id, PendingCall { client, op, call });
        Ticket {
            recorder: self.id,
            id,
        }
    }

    /// Note what the client saw. Call it after the answer arrived (or the
    /// client gave up, with `Outcome::Unknown`).
    pub fn ret(&self, ticket: Ticket, outcome: Outcome) -> Result<(), HistoryError> {
        if ticket.recorder != self.id {
            return Err(HistoryError::UnknownTicket);
        }
        let mut recording = self.lock();
        let now = recording.now();
        let PendingCall { client, op, call } = recording
            .pending
            .remove(&ticket.id)
            .ok_or(HistoryError::UnknownTicket)?;
        let event = Event {
            client,
            op,
            call,
            ret: now,
            outcome,
        };
        let unanswered = Event {
            outcome: Outcome::Unknown,
            ..event.clone()
        };
        recording.history.push(event).inspect_err(|_| {
            // Keep the op as unanswered rather than lose it: a write that
            // vanished from the history would make the checker reject runs
            // that were fine.
            let _ = recording.history.push(unanswered);
        })
    }

    /// The history so far; ops still awaiting an answer are in it as
    /// `Outcome::Unknown`.
    pub fn history(&self) -> History {
        let recording = self.lock();
        let mut history = recording.history.clone();
        for pending in recording.pending.values() {
            let event = Event {
                client: pending.client,
                op: pending.op.clone(),
                call: pending.call,
                ret: pending.call,
                outcome: Outcome::Unknown,
            };
            // Unknown outcomes fit every op and have no span to overlap.
            if history.push(event).is_err() {
                debug_assert!(false, "an unanswered event is always admitted");
            }
        }
        history
    }
}

impl Recording {
    fn now(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }
}
