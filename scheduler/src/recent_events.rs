//! The events a scheduler recorded lately, so that the same event again
//! raises the first one's count instead of adding another (as client-go's
//! event correlator does).
//!
//! Entries expire after a while. Expired ones are swept at most once per
//! [`SWEEP_EVERY`]: sweeping on every event made recording one cost time in
//! proportion to all the events of the last ten minutes, which at hundreds
//! of pods a second was the scheduler's biggest cost.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// An event's pod key, reason and message.
pub type EventKey = (String, String, String);

/// How often expired entries are swept out.
const SWEEP_EVERY: Duration = Duration::from_secs(1);

pub struct RecentEvents {
    /// How long a repeated event counts up on the first one.
    window: Duration,
    /// key → (event name, empty while its create is in flight; count; when
    /// last seen).
    entries: HashMap<EventKey, (String, i32, Instant)>,
    swept: Instant,
}

/// What to do with an event about to be recorded.
#[derive(Debug, PartialEq, Eq)]
pub enum Seen {
    /// New (or expired): create it; it is reserved meanwhile.
    New,
    /// The first one is still being created; it takes this count when it
    /// lands.
    Pending,
    /// Raise the existing event `name` to `count`.
    Repeat { name: String, count: i32 },
}

impl RecentEvents {
    pub fn new(window: Duration) -> RecentEvents {
        RecentEvents {
            window,
            entries: HashMap::new(),
            swept: Instant::now(),
        }
    }

    /// Records that `key` happened at `now`.
    pub fn seen(&mut self, key: &EventKey, now: Instant) -> Seen {
        self.sweep(now);
        let window = self.window;
        match self.entries.get_mut(key) {
            Some((name, count, at)) if now.saturating_duration_since(*at) < window => {
                *count += 1;
                *at = now;
                if name.is_empty() {
                    Seen::Pending
                } else {
                    Seen::Repeat {
                        name: name.clone(),
                        count: *count,
                    }
                }
            }
            _ => {
                self.entries.insert(key.clone(), (String::new(), 1, now));
                Seen::New
            }
        }
    }

    /// The event for `key` was created as `name`; returns the count it
    /// should carry (more than 1 if repeats came while it was in flight).
    pub fn created(&mut self, key: &EventKey, name: String, now: Instant) -> i32 {
        let entry = self
            .entries
            .entry(key.clone())
            .or_insert((String::new(), 1, now));
        entry.0 = name;
        entry.1
    }

    /// The event for `key` could not be recorded: forget it, so the next
    /// one is created anew.
    pub fn forget(&mut self, key: &EventKey) {
        self.entries.remove(key);
    }

    fn sweep(&mut self, now: Instant) {
        if now.saturating_duration_since(self.swept) < SWEEP_EVERY {
            return;
        }
        self.swept = now;
        let window = self.window;
        self.entries
            .retain(|_, (_, _, at)| now.saturating_duration_since(*at) < window);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(pod: &str) -> EventKey {
        (pod.into(), "Scheduled".into(), format!("{pod} to n1"))
    }

    #[test]
    fn a_repeat_counts_on_the_first_event() {
        let mut recent = RecentEvents::new(Duration::from_secs(600));
        let t = Instant::now();
        assert_eq!(recent.seen(&key("a"), t), Seen::New);
        // A repeat while the create is in flight is counted on it.
        assert_eq!(recent.seen(&key("a"), t), Seen::Pending);
        assert_eq!(recent.created(&key("a"), "a.1".into(), t), 2);
        assert_eq!(
            recent.seen(&key("a"), t + Duration::from_secs(5)),
            Seen::Repeat {
                name: "a.1".into(),
                count: 3
            }
        );
        // Another pod's event is its own.
        assert_eq!(recent.seen(&key("b"), t), Seen::New);
    }

    #[test]
    fn an_event_after_the_window_is_new_and_old_ones_are_swept() {
        let window = Duration::from_secs(600);
        let mut recent = RecentEvents::new(window);
        let t = Instant::now();
        for i in 0..100 {
            recent.seen(&key(&format!("p{i}")), t);
        }
        recent.created(&key("p0"), "p0.1".into(), t);
        let later = t + window + Duration::from_secs(1);
        assert_eq!(recent.seen(&key("p0"), later), Seen::New);
        // The sweep dropped the 99 expired ones.
        assert_eq!(recent.entries.len(), 1);
    }

    #[test]
    fn a_forgotten_event_is_created_anew() {
        let mut recent = RecentEvents::new(Duration::from_secs(600));
        let t = Instant::now();
        assert_eq!(recent.seen(&key("a"), t), Seen::New);
        recent.forget(&key("a"));
        assert!(recent.entries.is_empty());
        assert_eq!(recent.seen(&key("a"), t), Seen::New);
    }
}
