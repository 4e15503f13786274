//! The bounded ring of recent events of one resource: what a watch from a
//! past resourceVersion replays. Bounded by a count and by the bytes of the
//! objects it keeps alive; a watch from before the oldest event it still
//! holds is too old (410 Gone).

use std::collections::VecDeque;
use std::sync::Arc;

use super::object::WatchEvent;

#[derive(Debug)]
pub struct EventRing {
    events: VecDeque<Arc<WatchEvent>>,
    max_events: usize,
    max_bytes: usize,
    bytes: usize,
    /// Every event with a revision above this one is in the ring.
    complete_after: i64,
}

/// A watch from this revision cannot be replayed: events after it have
/// left the ring. `oldest` is the oldest revision that still can.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TooOld {
    pub oldest: i64,
}

impl EventRing {
    /// An empty ring holding every event after `revision`.
    pub fn new(max_events: usize, max_bytes: usize, revision: i64) -> EventRing {
        EventRing {
            events: VecDeque::new(),
            max_events: max_events.max(1),
            max_bytes,
            bytes: 0,
            complete_after: revision,
        }
    }

    /// Empties the ring: it holds every event after `revision` (a relist).
    pub fn reset(&mut self, revision: i64) {
        self.events.clear();
        self.bytes = 0;
        self.complete_after = revision;
    }

    /// Appends an event, evicting the oldest ones past the bounds.
    pub fn push(&mut self, event: Arc<WatchEvent>) {
        let newest = self.newest_revision();
        assert!(
            event.revision >= newest,
            "events enter the ring in revision order ({} after {newest})",
            event.revision
        );
        self.bytes += event.size();
        self.events.push_back(event);
        while self.events.len() > self.max_events
            || (self.bytes > self.max_bytes && self.events.len() > 1)
        {
            let Some(evicted) = self.events.pop_front() else {
                break;
            };
            self.bytes -= evicted.size();
            self.complete_after = evicted.revision;
        }
    }

    fn newest_revision(&self) -> i64 {
        self.events
            .back()
            .map_or(self.complete_after, |e| e.revision)
    }

    /// The events after `revision`, in order; `TooOld` when some of them
    /// have left the ring.
    pub fn since(&self, revision: i64) -> Result<Vec<Arc<WatchEvent>>, TooOld> {
        if revision < self.complete_after {
            return Err(TooOld {
                oldest: self.complete_after,
            });
        }
        let first = self.events.partition_point(|e| e.revision <= revision);
        Ok(self.events.range(first..).cloned().collect())
    }

    pub fn len(&self) -> usize {
        self.events.len()
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::super::object::{CachedObject, ChangeType};
    use super::*;

    fn event(revision: i64) -> Arc<WatchEvent> {
        let pods = crate::resources::find("", "v1", "pods").unwrap();
        let object = CachedObject::new(
            pods,
            "/registry/core/pods/ns/p".into(),
            revision,
            bytes::Bytes::from_static(b"{}"),
        );
        Arc::new(WatchEvent::new(
            revision,
            ChangeType::Put,
            Arc::new(object),
            None,
        ))
    }

    fn revisions(events: &[Arc<WatchEvent>]) -> Vec<i64> {
        events.iter().map(|e| e.revision).collect()
    }

    #[test]
    fn a_watch_replays_what_follows_its_revision_until_it_leaves_the_ring() {
        let mut ring = EventRing::new(3, usize::MAX, 10);
        assert_eq!(revisions(&ring.since(10).unwrap()), Vec::<i64>::new());
        assert_eq!(ring.since(9).unwrap_err(), TooOld { oldest: 10 });
        for r in [11, 12, 13] {
            ring.push(event(r));
        }
        assert_eq!(revisions(&ring.since(10).unwrap()), vec![11, 12, 13]);
        assert_eq!(revisions(&ring.since(12).unwrap()), vec![13]);
        ring.push(event(14));
        assert_eq!(ring.len(), 3);
        assert_eq!(ring.since(10).unwrap_err(), TooOld { oldest: 11 });
        assert_eq!(revisions(&ring.since(11).unwrap()), vec![12, 13, 14]);
        assert_eq!(revisions(&ring.since(20).unwrap()), Vec::<i64>::new());
    }

    #[test]
    fn changes_of_one_revision_leave_together_or_make_it_too_old() {
        let mut ring = EventRing::new(2, usize::MAX, 0);
        ring.push(event(5));
        ring.push(event(5));
        ring.push(event(6));
        // One change of revision 5 is gone: a watch from 4 would miss it.
        assert_eq!(ring.since(4).unwrap_err(), TooOld { oldest: 5 });
        assert_eq!(revisions(&ring.since(5).unwrap()), vec![6]);
    }

    #[test]
    fn the_ring_is_bounded_by_bytes_too() {
        let one = event(1).size();
        let mut ring = EventRing::new(100, one * 2, 0);
        for r in 1..=10 {
            ring.push(event(r));
        }
        assert_eq!(ring.len(), 2);
        assert!(ring.bytes() <= one * 2);
        assert_eq!(ring.since(7).unwrap_err().oldest, 8);
        ring.reset(10);
        assert_eq!((ring.len(), ring.bytes()), (0, 0));
        assert_eq!(ring.since(9).unwrap_err().oldest, 10);
    }
}
