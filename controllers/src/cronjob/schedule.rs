//! Cron schedules as kube's CronJob reads them (robfig/cron's standard
//! parser): five fields `minute hour day-of-month month day-of-week`
//! with `*`, `?`, values, names (JAN–DEC, SUN–SAT), ranges `a-b`, steps
//! `/n` and lists `a,b`; the macros `@yearly`/`@annually`, `@monthly`,
//! `@weekly`, `@daily`/`@midnight`, `@hourly` and `@every <duration>`.
//!
//! A schedule fires at every instant whose wall-clock time in the time
//! zone matches: a time skipped by a DST jump does not fire that day, a
//! time repeated by one fires twice, as robfig/cron does.

use std::time::Duration;

use jiff::civil::{Date, DateTime};
use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp, Zoned};

/// A parsed schedule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Schedule {
    Cron(Fields),
    /// `@every <duration>`: fixed intervals from the previous time.
    Every(Duration),
}

/// The times a cron expression allows, one bit per value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fields {
    minutes: u64,
    hours: u64,
    days_of_month: u64,
    months: u64,
    days_of_week: u64,
    /// Day of month or day of week was `*`/`?`: both must match
    /// (else either may).
    day_star: bool,
}

/// Why a schedule does not parse; the message says what to fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid schedule {schedule:?}: {reason}")]
pub struct ParseError {
    pub schedule: String,
    pub reason: String,
}

struct Bounds {
    name: &'static str,
    min: u32,
    max: u32,
    names: &'static [&'static str],
}

const MINUTE: Bounds = Bounds {
    name: "minute",
    min: 0,
    max: 59,
    names: &[],
};
const HOUR: Bounds = Bounds {
    name: "hour",
    min: 0,
    max: 23,
    names: &[],
};
const DAY_OF_MONTH: Bounds = Bounds {
    name: "day of month",
    min: 1,
    max: 31,
    names: &[],
};
const MONTH: Bounds = Bounds {
    name: "month",
    min: 1,
    max: 12,
    names: &[
        "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
    ],
};
const DAY_OF_WEEK: Bounds = Bounds {
    name: "day of week",
    min: 0,
    max: 6,
    names: &["sun", "mon", "tue", "wed", "thu", "fri", "sat"],
};

/// How far ahead a next time is looked for before the schedule is taken
/// to never fire (e.g. `0 0 30 2 *`).
const SEARCH_YEARS: i16 = 5;

/// Parses a schedule.
pub fn parse(schedule: &str) -> Result<Schedule, ParseError> {
    let error = |reason: String| ParseError {
        schedule: schedule.to_string(),
        reason,
    };
    let text = schedule.trim();
    if let Some(macro_) = text.strip_prefix('@') {
        let expanded = match macro_.to_ascii_lowercase().as_str() {
            "yearly" | "annually" => "0 0 1 1 *",
            "monthly" => "0 0 1 * *",
            "weekly" => "0 0 * * 0",
            "daily" | "midnight" => "0 0 * * *",
            "hourly" => "0 * * * *",
            other => {
                let Some(duration) = other.strip_prefix("every ") else {
                    return Err(error(format!("unknown macro @{macro_}; use @yearly, @monthly, @weekly, @daily, @hourly or @every <duration>")));
                };
                let every = go_duration(duration.trim()).map_err(error)?;
                return Ok(Schedule::Every(every.max(Duration::from_secs(1))));
            }
        };
        return parse(expanded).map_err(|e| error(e.reason));
    }
    let fields: Vec<&str> = text.split_whitespace().collect();
    if fields.len() != 5 {
        return Err(error(format!(
            "expected 5 fields (minute hour day-of-month month day-of-week), found {}",
            fields.len()
        )));
    }
    let (days_of_month, dom_star) = field(fields[2], &DAY_OF_MONTH).map_err(error)?;
    let (mut days_of_week, dow_star) = field(fields[4], &DAY_OF_WEEK).map_err(error)?;
    // 7 is Sunday too.
    if days_of_week & (1 << 7) != 0 {
        days_of_week = (days_of_week & !(1 << 7)) | 1;
    }
    Ok(Schedule::Cron(Fields {
        minutes: field(fields[0], &MINUTE).map_err(error)?.0,
        hours: field(fields[1], &HOUR).map_err(error)?.0,
        days_of_month,
        months: field(fields[3], &MONTH).map_err(error)?.0,
        days_of_week,
        day_star: dom_star || dow_star,
    }))
}

/// One field: its bits and whether it was a plain `*` or `?`.
fn field(text: &str, bounds: &Bounds) -> Result<(u64, bool), String> {
    let mut bits = 0u64;
    let mut star = false;
    for part in text.split(',') {
        let (part_bits, part_star) = range(part, bounds)?;
        bits |= part_bits;
        star |= part_star;
    }
    Ok((bits, star))
}

/// `*`, `?`, `v`, `a-b`, each with an optional `/step`.
fn range(part: &str, bounds: &Bounds) -> Result<(u64, bool), String> {
    let what = bounds.name;
    let (range, step) = match part.split_once('/') {
        Some((range, step)) => {
            let step: u32 = step
                .parse()
                .map_err(|_| format!("bad step {step:?} in the {what} field"))?;
            if step == 0 {
                return Err(format!(
                    "step 0 in the {what} field; use a step of 1 or more"
                ));
            }
            (range, Some(step))
        }
        None => (part, None),
    };
    // Day of week may be 7 (Sunday) in a value or range end.
    let max = if bounds.name == DAY_OF_WEEK.name {
        7
    } else {
        bounds.max
    };
    let (start, end, star) = if range == "*" || range == "?" {
        (bounds.min, bounds.max, step.unwrap_or(1) == 1)
    } else {
        match range.split_once('-') {
            Some((a, b)) => (value(a, bounds)?, value(b, bounds)?, false),
            None => {
                let v = value(range, bounds)?;
                // "v/step" runs from v to the end of the field.
                (v, if step.is_some() { bounds.max } else { v }, false)
            }
        }
    };
    if start < bounds.min || end > max {
        return Err(format!(
            "{what} {start}-{end} is outside {}-{}",
            bounds.min, bounds.max
        ));
    }
    if start > end {
        return Err(format!("{what} range {start}-{end} runs backwards"));
    }
    let step = step.unwrap_or(1);
    let bits = (start..=end)
        .step_by(step as usize)
        .fold(0u64, |b, v| b | (1 << v));
    Ok((bits, star))
}

/// A number or, where the field has them, a name (case-insensitive).
fn value(text: &str, bounds: &Bounds) -> Result<u32, String> {
    if let Some(at) = bounds
        .names
        .iter()
        .position(|n| n.eq_ignore_ascii_case(text))
    {
        return Ok(bounds.min + at as u32);
    }
    text.parse()
        .map_err(|_| format!("{text:?} is not a valid {}", bounds.name))
}

/// A Go duration (`90s`, `1h30m`, `1.5h`, `500ms`), as `@every` takes.
fn go_duration(text: &str) -> Result<Duration, String> {
    let (every, negative) = skiff_machinery::duration::parse_signed(text)
        .map_err(|err| format!("bad duration after @every: {err}; write it like 1h30m or 90s"))?;
    // Like robfig/cron, whole seconds; below one second is every second.
    Ok(match negative {
        true => Duration::ZERO,
        false => Duration::from_secs(every.as_secs()),
    })
}

impl Schedule {
    /// The first time strictly after `after`, in `tz`; `None` when the
    /// schedule never fires (within five years).
    pub fn next_after(&self, after: Timestamp, tz: &TimeZone) -> Option<Timestamp> {
        match self {
            Schedule::Every(every) => {
                let whole = Timestamp::from_second(after.as_second()).ok()?;
                whole
                    .checked_add(SignedDuration::try_from(*every).ok()?)
                    .ok()
            }
            Schedule::Cron(fields) => fields.next_after(after, tz),
        }
    }
}

impl Fields {
    fn next_after(&self, after: Timestamp, tz: &TimeZone) -> Option<Timestamp> {
        let minute = after.as_second().div_euclid(60) * 60;
        let mut t = Timestamp::from_second(minute + 60).ok()?;
        let limit = after.to_zoned(tz.clone()).year() + SEARCH_YEARS;
        loop {
            let z = t.to_zoned(tz.clone());
            if z.year() > limit {
                return None;
            }
            if !bit(self.months, z.month()) {
                t = start_of(first_of_next_month(z.date())?, tz)?;
            } else if !self.day_matches(&z) {
                t = start_of(z.date().tomorrow().ok()?, tz)?;
            } else if !bit(self.hours, z.hour()) {
                t = t
                    .checked_add(SignedDuration::from_mins(60 - i64::from(z.minute())))
                    .ok()?;
            } else if !bit(self.minutes, z.minute()) {
                t = t.checked_add(SignedDuration::from_mins(1)).ok()?;
            } else {
                return Some(t);
            }
        }
    }

    fn day_matches(&self, z: &Zoned) -> bool {
        let dom = bit(self.days_of_month, z.day());
        let dow = bit(self.days_of_week, z.weekday().to_sunday_zero_offset());
        match self.day_star {
            true => dom && dow,
            false => dom || dow,
        }
    }
}

fn bit(bits: u64, value: i8) -> bool {
    value >= 0 && bits & (1 << value) != 0
}

fn first_of_next_month(date: Date) -> Option<Date> {
    date.first_of_month()
        .checked_add(jiff::Span::new().months(1))
        .ok()
}

/// The first instant of `date` in `tz` (01:00 where midnight is skipped).
fn start_of(date: Date, tz: &TimeZone) -> Option<Timestamp> {
    let midnight = DateTime::from(date);
    tz.to_ambiguous_zoned(midnight)
        .compatible()
        .ok()
        .map(|z| z.timestamp())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn utc(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    fn zone(name: &str) -> TimeZone {
        TimeZone::get(name).unwrap()
    }

    /// The next `count` times after `from`, as RFC 3339 in `tz`.
    fn times(schedule: &str, from: &str, tz: &str, count: usize) -> Vec<String> {
        let schedule = parse(schedule).unwrap();
        let tz = zone(tz);
        let mut t = utc(from);
        (0..count)
            .map(|_| {
                t = schedule.next_after(t, &tz).unwrap();
                t.to_zoned(tz.clone())
                    .strftime("%Y-%m-%dT%H:%M%:z")
                    .to_string()
            })
            .collect()
    }

    fn cron(text: &str) -> Fields {
        match parse(text).unwrap() {
            Schedule::Cron(f) => f,
            other => panic!("{other:?}"),
        }
    }

    fn bits(values: &[u32]) -> u64 {
        values.iter().fold(0, |b, v| b | (1 << v))
    }

    #[test]
    fn fields_take_values_ranges_steps_lists_and_names() {
        let f = cron("5,10-12 */6 1-31/10 jan-MAR,Dec mon-fri");
        assert_eq!(f.minutes, bits(&[5, 10, 11, 12]));
        assert_eq!(f.hours, bits(&[0, 6, 12, 18]));
        assert_eq!(f.days_of_month, bits(&[1, 11, 21, 31]));
        assert_eq!(f.months, bits(&[1, 2, 3, 12]));
        assert_eq!(f.days_of_week, bits(&[1, 2, 3, 4, 5]));
        assert!(!f.day_star);
        let f = cron("30/15 * ? * 7");
        assert_eq!(f.minutes, bits(&[30, 45]));
        assert_eq!(f.days_of_week, bits(&[0]), "7 is Sunday");
        assert!(f.day_star);
        assert_eq!(cron("* * * * 5-7").days_of_week, bits(&[0, 5, 6]));
        // "*/2" is not a plain star: both day fields must not be ANDed.
        assert!(!cron("0 0 */2 * 1").day_star);
    }

    #[test]
    fn macros_expand_to_their_schedules() {
        assert_eq!(parse("@hourly").unwrap(), parse("0 * * * *").unwrap());
        assert_eq!(parse("@daily").unwrap(), parse("0 0 * * *").unwrap());
        assert_eq!(parse("@midnight").unwrap(), parse("0 0 * * *").unwrap());
        assert_eq!(parse("@weekly").unwrap(), parse("0 0 * * 0").unwrap());
        assert_eq!(parse("@monthly").unwrap(), parse("0 0 1 * *").unwrap());
        assert_eq!(parse("@yearly").unwrap(), parse("0 0 1 1 *").unwrap());
        assert_eq!(parse("@annually").unwrap(), parse("@YEARLY").unwrap());
        assert_eq!(
            parse("@every 1h30m").unwrap(),
            Schedule::Every(Duration::from_secs(5400))
        );
        assert_eq!(
            parse("@every 1.5m").unwrap(),
            Schedule::Every(Duration::from_secs(90))
        );
        assert_eq!(
            parse("@every 10ms").unwrap(),
            Schedule::Every(Duration::from_secs(1))
        );
    }

    #[test]
    fn bad_schedules_say_what_is_wrong() {
        for (text, says) in [
            ("* * * *", "expected 5 fields"),
            ("* * * * * *", "expected 5 fields"),
            ("60 * * * *", "outside 0-59"),
            ("* 24 * * *", "outside 0-23"),
            ("* * 0 * *", "outside 1-31"),
            ("* * * 13 *", "outside 1-12"),
            ("* * * * 8", "outside 0-6"),
            ("*/0 * * * *", "step 0"),
            ("*/x * * * *", "bad step"),
            ("5-1 * * * *", "runs backwards"),
            ("* * * foo *", "not a valid month"),
            ("a * * * *", "not a valid minute"),
            ("@fortnightly", "unknown macro"),
            ("@every", "unknown macro"),
            ("@every 5x", "bad duration"),
            ("", "expected 5 fields"),
        ] {
            let err = parse(text).unwrap_err();
            assert!(err.to_string().contains(says), "{text:?}: {err}");
        }
    }

    #[test]
    fn next_times_in_utc() {
        assert_eq!(
            times("* * * * *", "2025-01-01T00:00:30Z", "UTC", 2),
            ["2025-01-01T00:01+00:00", "2025-01-01T00:02+00:00"]
        );
        // Strictly after: a time on the minute moves on.
        assert_eq!(
            times("* * * * *", "2025-01-01T00:01:00Z", "UTC", 1),
            ["2025-01-01T00:02+00:00"]
        );
        assert_eq!(
            times("*/20 9-10 * * *", "2025-01-01T10:30:00Z", "UTC", 3),
            [
                "2025-01-01T10:40+00:00",
                "2025-01-02T09:00+00:00",
                "2025-01-02T09:20+00:00"
            ]
        );
        assert_eq!(
            times("@monthly", "2025-01-31T12:00:00Z", "UTC", 2),
            ["2025-02-01T00:00+00:00", "2025-03-01T00:00+00:00"]
        );
        // Leap days only.
        assert_eq!(
            times("0 12 29 2 *", "2025-01-01T00:00:00Z", "UTC", 2),
            ["2028-02-29T12:00+00:00", "2032-02-29T12:00+00:00"]
        );
        assert_eq!(
            parse("0 0 30 2 *")
                .unwrap()
                .next_after(utc("2025-01-01T00:00:00Z"), &TimeZone::UTC),
            None
        );
    }

    #[test]
    fn day_of_month_and_day_of_week_are_ored_unless_one_is_a_star() {
        // 2025-06-01 is a Sunday. Either the 13th or any Friday.
        assert_eq!(
            times("0 0 13 * 5", "2025-06-01T00:00:00Z", "UTC", 3),
            [
                "2025-06-06T00:00+00:00",
                "2025-06-13T00:00+00:00",
                "2025-06-20T00:00+00:00"
            ]
        );
        // With a star, only Fridays.
        assert_eq!(
            times("0 0 * * fri", "2025-06-07T00:00:00Z", "UTC", 1),
            ["2025-06-13T00:00+00:00"]
        );
        assert_eq!(
            times("0 0 ? jun sun", "2025-06-01T00:00:00Z", "UTC", 1),
            ["2025-06-08T00:00+00:00"]
        );
    }

    #[test]
    fn next_times_follow_the_wall_clock_of_the_time_zone() {
        assert_eq!(
            times("30 9 * * *", "2025-01-01T00:00:00Z", "Asia/Tokyo", 2),
            ["2025-01-01T09:30+09:00", "2025-01-02T09:30+09:00"]
        );
        assert_eq!(
            times("0 0 * * *", "2025-03-10T12:00:00Z", "America/New_York", 1),
            ["2025-03-11T00:00-04:00"]
        );
        assert_eq!(
            times("0 0 * * *", "2025-01-01T00:00:00Z", "Asia/Kolkata", 1),
            ["2025-01-02T00:00+05:30"]
        );
    }

    #[test]
    fn a_time_skipped_by_dst_does_not_fire_and_a_repeated_time_fires_twice() {
        // New York springs forward on 2025-03-09 at 02:00 → 03:00.
        assert_eq!(
            times("30 2 * * *", "2025-03-08T12:00:00Z", "America/New_York", 2),
            ["2025-03-10T02:30-04:00", "2025-03-11T02:30-04:00"]
        );
        // Hourly jobs: 01:00 then 03:00 on the spring-forward day.
        assert_eq!(
            times("0 * * * *", "2025-03-09T05:30:00Z", "America/New_York", 2),
            ["2025-03-09T01:00-05:00", "2025-03-09T03:00-04:00"]
        );
        // Falls back on 2025-11-02 at 02:00 → 01:00: 01:30 happens twice.
        assert_eq!(
            times("30 1 * * *", "2025-11-02T04:00:00Z", "America/New_York", 3),
            [
                "2025-11-02T01:30-04:00",
                "2025-11-02T01:30-05:00",
                "2025-11-03T01:30-05:00"
            ]
        );
        // Midnight in a zone whose DST starts at midnight (Santiago,
        // 2025-09-07 00:00 → 01:00) does not exist that day: skipped.
        assert_eq!(
            times("0 0 * * *", "2025-09-06T12:00:00Z", "America/Santiago", 2),
            ["2025-09-08T00:00-03:00", "2025-09-09T00:00-03:00"]
        );
    }

    #[test]
    fn every_counts_from_the_previous_time() {
        let every = parse("@every 90s").unwrap();
        let next = every
            .next_after(utc("2025-01-01T00:00:10.5Z"), &TimeZone::UTC)
            .unwrap();
        assert_eq!(next, utc("2025-01-01T00:01:40Z"));
    }
}
