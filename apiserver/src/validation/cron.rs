//! A CronJob's `schedule` and `timeZone`, judged as Kubernetes judges them:
//! the schedule parsed as the cron library it uses parses a standard
//! five-field spec (names, ranges, steps, `@hourly`-style descriptors,
//! `@every`), with that library's error texts, and time zones looked up in
//! the IANA database. Not a scheduler: the CronJob controller computes
//! run times.

use serde_json::Value;

use super::{field, go_quote, invalid, not_supported, required, text};
use crate::status::Cause;

/// The inclusive range and the names one field of a spec accepts.
struct Bounds {
    min: u64,
    max: u64,
    names: &'static [(&'static str, u64)],
}

const MINUTES: Bounds = Bounds {
    min: 0,
    max: 59,
    names: &[],
};
const HOURS: Bounds = Bounds {
    min: 0,
    max: 23,
    names: &[],
};
const DAYS_OF_MONTH: Bounds = Bounds {
    min: 1,
    max: 31,
    names: &[],
};
const MONTHS: Bounds = Bounds {
    min: 1,
    max: 12,
    names: &[
        ("jan", 1),
        ("feb", 2),
        ("mar", 3),
        ("apr", 4),
        ("may", 5),
        ("jun", 6),
        ("jul", 7),
        ("aug", 8),
        ("sep", 9),
        ("oct", 10),
        ("nov", 11),
        ("dec", 12),
    ],
};
const DAYS_OF_WEEK: Bounds = Bounds {
    min: 0,
    max: 6,
    names: &[
        ("sun", 0),
        ("mon", 1),
        ("tue", 2),
        ("wed", 3),
        ("thu", 4),
        ("fri", 5),
        ("sat", 6),
    ],
};

const DESCRIPTORS: [&str; 7] = [
    "@yearly",
    "@annually",
    "@monthly",
    "@weekly",
    "@daily",
    "@midnight",
    "@hourly",
];

/// Parses `spec` as a standard cron schedule; the error as the cron
/// library words it.
pub(super) fn parse_schedule(spec: &str) -> Result<(), String> {
    if spec.is_empty() {
        return Err("empty spec string".into());
    }
    let mut spec = spec;
    if spec.starts_with("TZ=") || spec.starts_with("CRON_TZ=") {
        let (zone, rest) = match spec.find(' ') {
            Some(space) => (
                &spec[spec.find('=').map_or(0, |e| e + 1)..space],
                &spec[space..],
            ),
            None => (&spec[spec.find('=').map_or(0, |e| e + 1)..], ""),
        };
        if let Err(err) = load_location(zone) {
            return Err(format!("provided bad location {zone}: {err}"));
        }
        spec = rest.trim();
    }
    if spec.starts_with('@') {
        return parse_descriptor(spec);
    }
    let fields: Vec<&str> = spec.split_whitespace().collect();
    if fields.len() != 5 {
        return Err(format!(
            "expected exactly 5 fields, found {}: [{}]",
            fields.len(),
            fields.join(" ")
        ));
    }
    for (text, bounds) in
        fields
            .iter()
            .zip([&MINUTES, &HOURS, &DAYS_OF_MONTH, &MONTHS, &DAYS_OF_WEEK])
    {
        for range in text.split(',').filter(|r| !r.is_empty()) {
            check_range(range, bounds)?;
        }
    }
    Ok(())
}

fn parse_descriptor(spec: &str) -> Result<(), String> {
    if DESCRIPTORS.contains(&spec) {
        return Ok(());
    }
    match spec.strip_prefix("@every ") {
        Some(duration) => parse_duration(duration)
            .map_err(|err| format!("failed to parse duration {spec}: {err}")),
        None => Err(format!("unrecognized descriptor: {spec}")),
    }
}

/// One `a`, `a-b`, `*`, `?`, each optionally `/step`.
fn check_range(expr: &str, bounds: &Bounds) -> Result<(), String> {
    let range_and_step: Vec<&str> = expr.split('/').collect();
    let low_and_high: Vec<&str> = range_and_step[0].split('-').collect();
    let (start, mut end) = if matches!(low_and_high[0], "*" | "?") {
        (bounds.min, bounds.max)
    } else {
        let start = int_or_name(low_and_high[0], bounds)?;
        match low_and_high.len() {
            1 => (start, start),
            2 => (start, int_or_name(low_and_high[1], bounds)?),
            _ => return Err(format!("too many hyphens: {expr}")),
        }
    };
    let step = match range_and_step.len() {
        1 => 1,
        2 => {
            let step = non_negative_int(range_and_step[1])?;
            // `N/step` runs from N to the field's maximum.
            if low_and_high.len() == 1 {
                end = bounds.max;
            }
            step
        }
        _ => return Err(format!("too many slashes: {expr}")),
    };
    if start < bounds.min {
        return Err(format!(
            "beginning of range ({start}) below minimum ({}): {expr}",
            bounds.min
        ));
    }
    if end > bounds.max {
        return Err(format!(
            "end of range ({end}) above maximum ({}): {expr}",
            bounds.max
        ));
    }
    if start > end {
        return Err(format!(
            "beginning of range ({start}) beyond end of range ({end}): {expr}"
        ));
    }
    if step == 0 {
        return Err(format!("step of range should be a positive number: {expr}"));
    }
    Ok(())
}

fn int_or_name(expr: &str, bounds: &Bounds) -> Result<u64, String> {
    let lower = expr.to_ascii_lowercase();
    match bounds.names.iter().find(|(name, _)| *name == lower) {
        Some((_, value)) => Ok(*value),
        None => non_negative_int(expr),
    }
}

/// Go's `strconv.Atoi` and its errors, then the library's refusal of
/// negative numbers.
fn non_negative_int(expr: &str) -> Result<u64, String> {
    let digits = expr.strip_prefix(['+', '-']).unwrap_or(expr);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "failed to parse int from {expr}: strconv.Atoi: parsing {}: invalid syntax",
            go_quote(expr)
        ));
    }
    match expr.parse::<i64>() {
        Err(_) => Err(format!(
            "failed to parse int from {expr}: strconv.Atoi: parsing {}: value out of range",
            go_quote(expr)
        )),
        Ok(n) if n < 0 => Err(format!("negative number ({n}) not allowed: {expr}")),
        Ok(n) => Ok(n as u64),
    }
}

/// Go's `time.ParseDuration`, whose errors robfig/cron passes on.
fn parse_duration(text: &str) -> Result<(), String> {
    skiff_machinery::duration::parse_signed(text).map(|_| ())
}

/// Go's `time.LoadLocation` of an IANA name.
fn load_location(name: &str) -> Result<(), String> {
    if name.is_empty() || name == "UTC" || name == "Local" {
        return Ok(());
    }
    let plain = name.split('/').all(|part| !matches!(part, "" | "." | ".."));
    match plain && jiff::tz::TimeZone::get(name).is_ok() {
        true => Ok(()),
        false => Err(format!("unknown time zone {name}")),
    }
}

/// The characters one part of an IANA name may hold (digits and `+` kept
/// for legacy names), at most 14 of them.
fn is_time_zone_part(part: &str) -> bool {
    (1..=14).contains(&part.len())
        && part
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_' | b'+'))
        && !matches!(part, "." | "..")
        && !part.starts_with('-')
}

fn check_time_zone(causes: &mut Vec<Cause>, spec: &Value) {
    let Some(zone) = spec.get("timeZone").and_then(Value::as_str) else {
        return;
    };
    let at = "spec.timeZone";
    let shown = go_quote(zone);
    if zone.is_empty() {
        causes.push(invalid(
            at,
            &shown,
            "timeZone must be nil or non-empty string",
        ));
        return;
    }
    if !zone.split('/').all(is_time_zone_part) {
        causes.push(invalid(at, &shown, &format!("unknown time zone {zone}")));
        return;
    }
    if zone.eq_ignore_ascii_case("Local") {
        let detail =
            "timeZone must be an explicit time zone as defined in https://www.iana.org/time-zones";
        causes.push(invalid(at, &shown, detail));
    }
    if let Err(err) = load_location(zone) {
        causes.push(invalid(at, &shown, &err));
    }
}

/// A CronJob spec's own values: schedule, time zone, concurrency policy,
/// deadlines and history limits, and the selector its jobs get from the
/// server. As on create: a `TZ=` prefix is refused (Kubernetes lets an
/// update keep one that was stored before it refused them, which no
/// object here can have been).
pub(super) fn validate_cron_job_spec(causes: &mut Vec<Cause>, spec: &Value) {
    let schedule = text(spec, "schedule");
    if schedule.is_empty() {
        causes.push(required("spec.schedule", ""));
    } else {
        let at = "spec.schedule";
        if let Err(err) = parse_schedule(schedule) {
            causes.push(invalid(at, &go_quote(schedule), &err));
        }
        if schedule.contains("TZ") {
            let detail = "cannot use TZ or CRON_TZ in schedule, use timeZone field instead";
            causes.push(invalid(at, &go_quote(schedule), detail));
        }
    }
    super::non_negative(causes, spec, "startingDeadlineSeconds", "spec");
    check_time_zone(causes, spec);
    let policy = text(spec, "concurrencyPolicy");
    if !policy.is_empty() && !matches!(policy, "Allow" | "Forbid" | "Replace") {
        causes.push(not_supported(
            "spec.concurrencyPolicy",
            policy,
            &["Allow", "Forbid", "Replace"],
        ));
    }
    let job_spec = field(field(spec, "jobTemplate"), "spec");
    super::validate_job_spec(causes, job_spec, "spec.jobTemplate.spec");
    if let Some(selector) = job_spec.get("selector").filter(|s| !s.is_null()) {
        causes.push(invalid(
            "spec.jobTemplate.spec.selector",
            &super::go_label_selector(selector),
            "`selector` will be auto-generated",
        ));
    }
    if job_spec.get("manualSelector") == Some(&Value::Bool(true)) {
        let message = "Unsupported value: true: supported values: \"nil\", \"false\"";
        causes.push(super::cause(
            "FieldValueNotSupported",
            "spec.jobTemplate.spec.manualSelector",
            message.to_string(),
        ));
    }
    for name in ["successfulJobsHistoryLimit", "failedJobsHistoryLimit"] {
        super::non_negative(causes, spec, name, "spec");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn standard_schedules_and_descriptors_parse() {
        for good in [
            "* * * * *",
            "*/5 * * * *",
            "0 0 1 1 *",
            "0 9-17/2 * * mon-fri",
            "15,45 * ? JAN,jul SUN",
            "@hourly",
            "@daily",
            "@midnight",
            "@every 1h30m",
            "@every 0",
            "  0   1  * * *  ",
            "TZ=UTC 0 1 * * *",
            "CRON_TZ=Europe/Berlin @daily",
        ] {
            assert_eq!(parse_schedule(good), Ok(()), "{good}");
        }
    }

    #[test]
    fn bad_schedules_are_worded_as_the_cron_library_words_them() {
        let table = [
            ("", "empty spec string"),
            ("x", "expected exactly 5 fields, found 1: [x]"),
            (
                "* * * * * *",
                "expected exactly 5 fields, found 6: [* * * * * *]",
            ),
            ("60 * * * *", "end of range (60) above maximum (59): 60"),
            ("* * 0 * *", "beginning of range (0) below minimum (1): 0"),
            (
                "5-2 * * * *",
                "beginning of range (5) beyond end of range (2): 5-2",
            ),
            (
                "*/0 * * * *",
                "step of range should be a positive number: */0",
            ),
            ("1-2-3 * * * *", "too many hyphens: 1-2-3"),
            ("1/2/3 * * * *", "too many slashes: 1/2/3"),
            (
                "a * * * *",
                "failed to parse int from a: strconv.Atoi: parsing \"a\": invalid syntax",
            ),
            ("* * * * sun-8", "end of range (8) above maximum (6): sun-8"),
            ("@fortnightly", "unrecognized descriptor: @fortnightly"),
            (
                "@every soon",
                "failed to parse duration @every soon: time: invalid duration \"soon\"",
            ),
            (
                "@every 5",
                "failed to parse duration @every 5: time: missing unit in duration \"5\"",
            ),
            (
                "@every 5y",
                "failed to parse duration @every 5y: time: unknown unit \"y\" in duration \"5y\"",
            ),
            (
                "TZ=Mars/Olympus * * * * *",
                "provided bad location Mars/Olympus: unknown time zone Mars/Olympus",
            ),
        ];
        for (spec, error) in table {
            assert_eq!(parse_schedule(spec), Err(error.to_string()), "{spec:?}");
        }
    }
}
