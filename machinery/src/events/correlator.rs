//! What becomes of an event before it is written, as client-go's event
//! correlator decides: a source that says too much about one object is
//! held back (a token bucket per source, object and event type); ten events of one
//! reason on one object with different messages within ten minutes are
//! folded into one "combined from similar events"; and the same event
//! again raises the count of the one already written instead of adding
//! another. Pure: the time is given, and the writes are the caller's.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

/// How long similar events are folded together, and how long a repeat
/// counts on the event already written once nothing more is heard of it.
pub const WINDOW: Duration = Duration::from_secs(600);
/// How many different messages of one reason on one object stand on
/// their own before they are combined.
pub const SIMILAR: usize = 10;
/// What a source may say about one object at once …
pub const BURST: f64 = 25.0;
/// … and how often it earns another word.
pub const REFILL_EVERY: Duration = Duration::from_secs(300);
/// How often expired entries are swept out.
const SWEEP_EVERY: Duration = Duration::from_secs(1);
/// The prefix of a combined event's message.
pub const COMBINED: &str = "(combined from similar events): ";

/// What an event is about and says, as the correlator keys it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct EventKey {
    /// The involved object: kind, namespace, name, uid, apiVersion, and
    /// the field path (a container) it is about.
    pub object: String,
    pub type_: String,
    pub reason: String,
    /// The message; empty for a combined event's key.
    pub message: String,
}

/// What to do with an event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Held back: its source said too much about the object lately.
    Drop,
    /// Write a new event with this message (combined, or as given); it is
    /// reserved under `key` meanwhile.
    Create { key: EventKey, message: String },
    /// The first one is still being written; it takes this repeat's count
    /// when it lands.
    Pending,
    /// Raise the event `name` to `count`, with this message.
    Patch {
        key: EventKey,
        name: String,
        count: i32,
        message: String,
    },
}

struct Bucket {
    tokens: f64,
    at: Instant,
}

struct Similar {
    messages: HashSet<String>,
    at: Instant,
}

struct Written {
    /// Empty while its create is in flight.
    name: String,
    count: i32,
    at: Instant,
}

#[derive(Default)]
pub struct Correlator {
    buckets: HashMap<String, Bucket>,
    similar: HashMap<EventKey, Similar>,
    written: HashMap<EventKey, Written>,
    swept: Option<Instant>,
}

impl Correlator {
    /// Decides what becomes of the event `key` at `now`.
    pub fn observe(&mut self, key: &EventKey, now: Instant) -> Decision {
        self.sweep(now);
        if !self.take_token(&format!("{}/{}", key.object, key.type_), now) {
            return Decision::Drop;
        }
        let (key, message) = self.aggregate(key, now);
        match self.written.get_mut(&key) {
            Some(written) => {
                written.count += 1;
                written.at = now;
                match written.name.is_empty() {
                    true => Decision::Pending,
                    false => Decision::Patch {
                        name: written.name.clone(),
                        count: written.count,
                        key,
                        message,
                    },
                }
            }
            None => {
                self.written.insert(
                    key.clone(),
                    Written {
                        name: String::new(),
                        count: 1,
                        at: now,
                    },
                );
                Decision::Create { key, message }
            }
        }
    }

    /// The event reserved under `key` was written as `name`; the count it
    /// should carry (more than 1 when repeats came while it was in flight).
    pub fn created(&mut self, key: &EventKey, name: String, now: Instant) -> i32 {
        let written = self.written.entry(key.clone()).or_insert(Written {
            name: String::new(),
            count: 1,
            at: now,
        });
        written.name = name;
        written.count
    }

    /// The event under `key` could not be written, or is gone: the next
    /// one is created anew.
    pub fn forget(&mut self, key: &EventKey) {
        self.written.remove(key);
    }

    /// Takes a token of the bucket of the source's words of one type about
    /// one object.
    fn take_token(&mut self, bucket: &str, now: Instant) -> bool {
        let bucket = self.buckets.entry(bucket.to_string()).or_insert(Bucket {
            tokens: BURST,
            at: now,
        });
        let earned =
            now.saturating_duration_since(bucket.at).as_secs_f64() / REFILL_EVERY.as_secs_f64();
        bucket.tokens = (bucket.tokens + earned).min(BURST);
        bucket.at = now;
        if bucket.tokens < 1.0 {
            return false;
        }
        bucket.tokens -= 1.0;
        true
    }

    /// The key and message the event is written under: its own, or once
    /// [`SIMILAR`] messages of its reason on its object came within
    /// [`WINDOW`], the combined event's.
    fn aggregate(&mut self, key: &EventKey, now: Instant) -> (EventKey, String) {
        let combined = EventKey {
            message: String::new(),
            ..key.clone()
        };
        let similar = self.similar.entry(combined.clone()).or_insert(Similar {
            messages: HashSet::new(),
            at: now,
        });
        if now.saturating_duration_since(similar.at) > WINDOW {
            similar.messages.clear();
        }
        similar.at = now;
        similar.messages.insert(key.message.clone());
        match similar.messages.len() < SIMILAR {
            true => (key.clone(), key.message.clone()),
            false => (combined, format!("{COMBINED}{}", key.message)),
        }
    }

    fn sweep(&mut self, now: Instant) {
        if self
            .swept
            .is_some_and(|at| now.saturating_duration_since(at) < SWEEP_EVERY)
        {
            return;
        }
        self.swept = Some(now);
        let fresh = |at: Instant| now.saturating_duration_since(at) <= WINDOW;
        self.written.retain(|_, w| fresh(w.at));
        self.similar.retain(|_, s| fresh(s.at));
        // A full bucket is as good as none.
        self.buckets.retain(|_, b| {
            let earned =
                now.saturating_duration_since(b.at).as_secs_f64() / REFILL_EVERY.as_secs_f64();
            b.tokens + earned < BURST
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(object: &str, reason: &str, message: &str) -> EventKey {
        EventKey {
            object: object.into(),
            type_: "Normal".into(),
            reason: reason.into(),
            message: message.into(),
        }
    }

    #[test]
    fn a_repeat_counts_on_the_event_written() {
        let mut c = Correlator::default();
        let t = Instant::now();
        let started = key("Pod/default/web", "Started", "Started container app");
        let Decision::Create {
            key: reserved,
            message,
        } = c.observe(&started, t)
        else {
            panic!("the first is created");
        };
        assert_eq!(message, "Started container app");
        // While it is being written, a repeat waits for it.
        assert_eq!(c.observe(&started, t), Decision::Pending);
        assert_eq!(c.created(&reserved, "web.1".into(), t), 2);
        assert_eq!(
            c.observe(&started, t + Duration::from_secs(5)),
            Decision::Patch {
                key: reserved.clone(),
                name: "web.1".into(),
                count: 3,
                message: "Started container app".into()
            }
        );
        // Another object's, or another reason's, is its own.
        assert!(matches!(
            c.observe(
                &key("Pod/default/db", "Started", "Started container app"),
                t
            ),
            Decision::Create { .. }
        ));
        // Gone: created anew.
        c.forget(&reserved);
        assert!(matches!(c.observe(&started, t), Decision::Create { .. }));
    }

    #[test]
    fn after_the_window_a_repeat_is_a_new_event() {
        let mut c = Correlator::default();
        let t = Instant::now();
        let k = key("Pod/default/web", "BackOff", "Back-off restarting");
        let Decision::Create { key: reserved, .. } = c.observe(&k, t) else {
            panic!()
        };
        c.created(&reserved, "web.1".into(), t);
        let later = t + WINDOW + Duration::from_secs(1);
        assert!(matches!(c.observe(&k, later), Decision::Create { .. }));
    }

    #[test]
    fn ten_different_messages_of_one_reason_are_combined() {
        let mut c = Correlator::default();
        let t = Instant::now();
        for i in 0..SIMILAR - 1 {
            let decision = c.observe(
                &key("Pod/default/web", "Unhealthy", &format!("probe {i}")),
                t,
            );
            assert!(
                matches!(&decision, Decision::Create { message, .. } if message == &format!("probe {i}")),
                "{decision:?}"
            );
        }
        let Decision::Create {
            key: combined,
            message,
        } = c.observe(&key("Pod/default/web", "Unhealthy", "probe 9"), t)
        else {
            panic!("the tenth starts the combined event");
        };
        assert_eq!(message, format!("{COMBINED}probe 9"));
        assert_eq!(combined.message, "");
        c.created(&combined, "web.c".into(), t);
        // More of them count on the combined one, with the latest message.
        assert_eq!(
            c.observe(&key("Pod/default/web", "Unhealthy", "probe 10"), t),
            Decision::Patch {
                key: combined,
                name: "web.c".into(),
                count: 2,
                message: format!("{COMBINED}probe 10")
            }
        );
    }

    #[test]
    fn a_source_that_says_too_much_about_an_object_is_held_back() {
        let mut c = Correlator::default();
        let t = Instant::now();
        let mut kept = 0;
        for i in 0..40 {
            let k = key("Pod/default/web", &format!("Reason{i}"), "m");
            if c.observe(&k, t) != Decision::Drop {
                kept += 1;
            }
        }
        assert_eq!(kept, BURST as usize);
        // Another object has its own bucket.
        assert_ne!(
            c.observe(&key("Pod/default/db", "R", "m"), t),
            Decision::Drop
        );
        // A token comes back every REFILL_EVERY.
        let later = t + REFILL_EVERY;
        assert_ne!(
            c.observe(&key("Pod/default/web", "Late", "m"), later),
            Decision::Drop
        );
        assert_eq!(
            c.observe(&key("Pod/default/web", "Later", "m"), later),
            Decision::Drop
        );
    }
}
