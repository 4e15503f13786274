//! Which scheduled time a CronJob should run now: the most recent one
//! since its last schedule (or creation), within its starting deadline,
//! and how many were missed (kube's `mostRecentScheduleTime`).

use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp};

use super::schedule::Schedule;

/// Beyond this many missed times, kube warns (`TooManyMissedTimes`).
pub const TOO_MANY_MISSED: usize = 100;

/// The scheduled times between the earliest time and now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Missed {
    /// The latest scheduled time not after now, if any.
    pub most_recent: Option<Timestamp>,
    /// How many times were missed, counting `most_recent`; at most
    /// `TOO_MANY_MISSED + 1`.
    pub count: usize,
}

/// The earliest time to consider: the last schedule (else creation),
/// moved up to `now - startingDeadlineSeconds` when that is later.
pub fn earliest(
    last_schedule: Option<Timestamp>,
    created: Timestamp,
    starting_deadline_seconds: Option<i64>,
    now: Timestamp,
) -> Timestamp {
    let earliest = last_schedule.unwrap_or(created);
    let deadline =
        starting_deadline_seconds.and_then(|s| now.checked_sub(SignedDuration::from_secs(s)).ok());
    match deadline {
        Some(deadline) if deadline > earliest => deadline,
        _ => earliest,
    }
}

/// The times of `schedule` after `earliest` and not after `now`.
pub fn missed(schedule: &Schedule, tz: &TimeZone, earliest: Timestamp, now: Timestamp) -> Missed {
    let mut most_recent = None;
    let mut count = 0;
    let mut t = earliest;
    while let Some(next) = schedule.next_after(t, tz).filter(|n| *n <= now) {
        most_recent = Some(next);
        count += 1;
        t = next;
        if count > TOO_MANY_MISSED {
            return Missed {
                most_recent: latest_before(schedule, tz, next, now),
                count,
            };
        }
    }
    Missed { most_recent, count }
}

/// The latest time not after `now`, searching back in growing windows
/// (never before `floor`, a time known to be scheduled).
fn latest_before(
    schedule: &Schedule,
    tz: &TimeZone,
    floor: Timestamp,
    now: Timestamp,
) -> Option<Timestamp> {
    for hours in [1, 24, 24 * 32, 24 * 367, 24 * 367 * 5] {
        let from = now
            .checked_sub(SignedDuration::from_hours(hours))
            .ok()?
            .max(floor);
        let mut latest = None;
        let mut t = from;
        while let Some(next) = schedule.next_after(t, tz).filter(|n| *n <= now) {
            latest = Some(next);
            t = next;
        }
        if latest.is_some() || from == floor {
            return latest.or(Some(floor));
        }
    }
    Some(floor)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cronjob::schedule::parse;

    fn at(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    #[test]
    fn the_earliest_time_is_the_last_schedule_or_creation_within_the_deadline() {
        let created = at("2025-01-01T00:00:00Z");
        let now = at("2025-01-01T01:00:00Z");
        assert_eq!(earliest(None, created, None, now), created);
        let last = at("2025-01-01T00:30:00Z");
        assert_eq!(earliest(Some(last), created, None, now), last);
        assert_eq!(
            earliest(Some(last), created, Some(60), now),
            at("2025-01-01T00:59:00Z")
        );
        assert_eq!(earliest(Some(last), created, Some(7200), now), last);
    }

    #[test]
    fn none_one_or_several_missed() {
        let every_minute = parse("* * * * *").unwrap();
        let tz = TimeZone::UTC;
        let t0 = at("2025-01-01T00:00:00Z");
        assert_eq!(
            missed(&every_minute, &tz, t0, at("2025-01-01T00:00:59Z")),
            Missed {
                most_recent: None,
                count: 0
            }
        );
        assert_eq!(
            missed(&every_minute, &tz, t0, at("2025-01-01T00:01:00Z")),
            Missed {
                most_recent: Some(at("2025-01-01T00:01:00Z")),
                count: 1
            }
        );
        assert_eq!(
            missed(&every_minute, &tz, t0, at("2025-01-01T00:05:30Z")),
            Missed {
                most_recent: Some(at("2025-01-01T00:05:00Z")),
                count: 5
            }
        );
    }

    #[test]
    fn too_many_missed_still_finds_the_most_recent() {
        let every_minute = parse("* * * * *").unwrap();
        let tz = TimeZone::UTC;
        let found = missed(
            &every_minute,
            &tz,
            at("2025-01-01T00:00:00Z"),
            at("2025-03-01T10:07:30Z"),
        );
        assert_eq!(found.count, TOO_MANY_MISSED + 1);
        assert_eq!(found.most_recent, Some(at("2025-03-01T10:07:00Z")));
        let yearly = parse("@yearly").unwrap();
        let found = missed(
            &yearly,
            &tz,
            at("1800-06-01T00:00:00Z"),
            at("2025-03-01T00:00:00Z"),
        );
        assert_eq!(found.count, TOO_MANY_MISSED + 1);
        assert_eq!(found.most_recent, Some(at("2025-01-01T00:00:00Z")));
    }
}
