//! A hashed timing wheel: thousands of heartbeats due at spread-out times,
//! kept by one task instead of one sleeping task each. Items are due at a
//! tick; a slot holds the items of every tick that maps to it.

use std::time::Duration;

/// Items due at ticks of a fixed length, counted from the wheel's start.
#[derive(Debug)]
pub struct TimingWheel<T> {
    tick: Duration,
    slots: Vec<Vec<(u64, T)>>,
    /// The first tick not yet expired.
    next_tick: u64,
    len: usize,
}

impl<T> TimingWheel<T> {
    /// `slots` should cover the longest delay in use, so that a slot holds
    /// items of one tick (it stays correct when it does not).
    pub fn new(tick: Duration, slots: usize) -> TimingWheel<T> {
        assert!(!tick.is_zero(), "a timing wheel needs a tick length");
        TimingWheel {
            tick,
            slots: (0..slots.max(1)).map(|_| Vec::new()).collect(),
            next_tick: 0,
            len: 0,
        }
    }

    /// The wheel for delays up to `horizon` at `tick` resolution.
    pub fn covering(tick: Duration, horizon: Duration) -> TimingWheel<T> {
        let slots = horizon.as_nanos() / tick.as_nanos().max(1) + 2;
        TimingWheel::new(tick, usize::try_from(slots).unwrap_or(usize::MAX))
    }

    pub fn tick(&self) -> Duration {
        self.tick
    }

    /// The tick at `offset` from the start, rounded down.
    pub fn tick_at(&self, offset: Duration) -> u64 {
        u64::try_from(offset.as_nanos() / self.tick.as_nanos()).unwrap_or(u64::MAX)
    }

    /// When the next unexpired tick begins, from the start.
    pub fn next_deadline(&self) -> Duration {
        self.tick
            .saturating_mul(u32::try_from(self.next_tick).unwrap_or(u32::MAX))
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Adds `item` due at `offset` from the start; one due in the past
    /// comes out at the next expiry.
    pub fn schedule(&mut self, offset: Duration, item: T) {
        let due = self.tick_at(offset).max(self.next_tick);
        let slot = (due % self.slots.len() as u64) as usize;
        self.slots[slot].push((due, item));
        self.len += 1;
    }

    /// Takes every item due at or before the tick holding `now` (from the
    /// start), in no particular order within a tick.
    pub fn expire(&mut self, now: Duration) -> Vec<T> {
        let now_tick = self.tick_at(now);
        let mut due = Vec::new();
        if now_tick < self.next_tick {
            return due;
        }
        let count = self.slots.len() as u64;
        let span = (now_tick - self.next_tick + 1).min(count);
        for t in self.next_tick..self.next_tick + span {
            let slot = &mut self.slots[(t % count) as usize];
            let mut i = 0;
            while i < slot.len() {
                if slot[i].0 <= now_tick {
                    due.push(slot.swap_remove(i).1);
                } else {
                    i += 1;
                }
            }
        }
        self.len -= due.len();
        self.next_tick = now_tick + 1;
        due
    }
}

/// Where the `index`-th of `count` heartbeats falls within `interval`, so
/// that they are spread evenly over it.
pub fn spread(index: usize, count: usize, interval: Duration) -> Duration {
    if count == 0 {
        return Duration::ZERO;
    }
    let nanos = interval.as_nanos() * index as u128 / count as u128;
    Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    const TICK: Duration = Duration::from_millis(10);

    #[test]
    fn n_nodes_are_spread_evenly_over_the_interval() {
        let interval = Duration::from_secs(10);
        let mut wheel = TimingWheel::covering(TICK, interval);
        let count = 5000;
        for i in 0..count {
            wheel.schedule(spread(i, count, interval), i);
        }
        assert_eq!(wheel.len(), count);
        // Each 1-second window of the interval gets a tenth of the nodes.
        let mut seen = Vec::new();
        for second in 1..=10 {
            let batch = wheel.expire(Duration::from_millis(second * 1000 - 1));
            assert_eq!(batch.len(), count / 10, "second {second}");
            seen.extend(batch);
        }
        seen.sort_unstable();
        assert_eq!(seen, (0..count).collect::<Vec<_>>());
        assert!(wheel.is_empty());
    }

    #[test]
    fn items_come_out_at_their_tick_not_before() {
        let mut wheel = TimingWheel::covering(TICK, Duration::from_secs(1));
        wheel.schedule(Duration::from_millis(55), "a");
        wheel.schedule(Duration::from_millis(120), "b");
        assert!(wheel.expire(Duration::from_millis(49)).is_empty());
        assert_eq!(wheel.expire(Duration::from_millis(50)), vec!["a"]);
        assert!(wheel.expire(Duration::from_millis(119)).is_empty());
        assert_eq!(wheel.next_deadline(), Duration::from_millis(120));
        assert_eq!(wheel.expire(Duration::from_millis(500)), vec!["b"]);
    }

    #[test]
    fn delays_beyond_one_turn_wait_for_their_round() {
        // Four slots of 10 ms: 25 ms and 65 ms share a slot.
        let mut wheel = TimingWheel::new(TICK, 4);
        wheel.schedule(Duration::from_millis(25), 1);
        wheel.schedule(Duration::from_millis(65), 2);
        assert_eq!(wheel.expire(Duration::from_millis(30)), vec![1]);
        assert!(wheel.expire(Duration::from_millis(59)).is_empty());
        assert_eq!(wheel.expire(Duration::from_millis(69)), vec![2]);
    }

    #[test]
    fn a_late_expiry_catches_up_and_the_past_is_due_at_once() {
        let mut wheel = TimingWheel::covering(TICK, Duration::from_secs(1));
        for ms in [10, 300, 700] {
            wheel.schedule(Duration::from_millis(ms), ms);
        }
        let mut all = wheel.expire(Duration::from_secs(5));
        all.sort_unstable();
        assert_eq!(all, vec![10, 300, 700]);
        wheel.schedule(Duration::from_secs(1), 1);
        assert_eq!(wheel.expire(Duration::from_millis(5_010)), vec![1]);
    }
}
