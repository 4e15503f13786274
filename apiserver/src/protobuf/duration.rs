//! Go's `time.Duration` text (`1h2m3.5s`, `300ms`), which metav1.Duration
//! is in JSON, to and from nanoseconds.

const UNITS: &[(&str, f64)] = &[
    ("ns", 1.0),
    ("us", 1e3),
    ("µs", 1e3),
    ("μs", 1e3),
    ("ms", 1e6),
    ("s", 1e9),
    ("m", 60e9),
    ("h", 3600e9),
];

/// Nanoseconds of a Go duration, or `None` if it is not one.
pub fn parse(text: &str) -> Option<i64> {
    let (negative, mut rest) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    if rest == "0" {
        return Some(0);
    }
    if rest.is_empty() {
        return None;
    }
    let mut total = 0f64;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .filter(|&n| n > 0)?;
        let value: f64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let (unit, scale) = UNITS
            .iter()
            .filter(|(unit, _)| rest.starts_with(unit))
            .max_by_key(|(unit, _)| unit.len())?;
        total += value * scale;
        rest = &rest[unit.len()..];
    }
    if total > i64::MAX as f64 {
        return None;
    }
    let nanos = total.round() as i64;
    Some(if negative { -nanos } else { nanos })
}

/// The Go text of a duration in nanoseconds (`time.Duration.String`).
pub fn format(nanos: i64) -> String {
    if nanos == 0 {
        return "0s".into();
    }
    let sign = if nanos < 0 { "-" } else { "" };
    let n = nanos.unsigned_abs();
    if n < 1_000 {
        return format!("{sign}{n}ns");
    }
    if n < 1_000_000 {
        return format!("{sign}{}µs", fraction(n, 1_000));
    }
    if n < 1_000_000_000 {
        return format!("{sign}{}ms", fraction(n, 1_000_000));
    }
    let hours = n / 3_600_000_000_000;
    let minutes = n / 60_000_000_000 % 60;
    let seconds = fraction(n % 60_000_000_000, 1_000_000_000);
    match (hours, minutes) {
        (0, 0) => format!("{sign}{seconds}s"),
        (0, m) => format!("{sign}{m}m{seconds}s"),
        (h, m) => format!("{sign}{h}h{m}m{seconds}s"),
    }
}

/// `n / unit` with its fraction, trailing zeros dropped.
fn fraction(n: u64, unit: u64) -> String {
    let whole = n / unit;
    let rest = n % unit;
    if rest == 0 {
        return whole.to_string();
    }
    let width = unit.ilog10() as usize;
    let digits = format!("{rest:0width$}");
    format!("{whole}.{}", digits.trim_end_matches('0'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations_read_and_write_as_go_does() {
        for (text, nanos) in [
            ("0s", 0),
            ("1h0m0s", 3_600_000_000_000),
            ("1h2m3.5s", 3_723_500_000_000),
            ("300ms", 300_000_000),
            ("1.5µs", 1_500),
            ("-2m0s", -120_000_000_000),
            ("45s", 45_000_000_000),
        ] {
            assert_eq!(parse(text), Some(nanos), "{text}");
            assert_eq!(format(nanos), text, "{nanos}");
        }
        assert_eq!(parse("90m"), Some(5_400_000_000_000));
        for bad in ["", "1", "h", "1x", "--1s", "1.2.3s"] {
            assert_eq!(parse(bad), None, "{bad}");
        }
    }
}
