//! Go's durations (`time.ParseDuration`): how Kubernetes' flags,
//! configuration files and query parameters (`timeout=30s`) write them,
//! `300ms`, `1m30s`, `1.5h`, `0`. The one parser the API server, the
//! clients and the command line use.

use std::time::Duration;

use crate::quote::go_quote;

/// Go's time.ParseDuration (`30s`, `1m30s`, `1.5h`, `500ms`, `0`): the
/// magnitude and whether it is negative.
pub fn parse_signed(text: &str) -> Result<(Duration, bool), String> {
    let invalid = || format!("time: invalid duration {}", go_quote(text));
    let (negative, mut rest) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    if rest == "0" {
        return Ok((Duration::ZERO, false));
    }
    if rest.is_empty() {
        return Err(invalid());
    }
    const LIMIT: u128 = i64::MAX as u128;
    let mut total: u128 = 0;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        let (whole, after) = rest.split_at(digits);
        let (fraction, after) = match after.strip_prefix('.') {
            Some(after) => {
                let digits = after.bytes().take_while(u8::is_ascii_digit).count();
                after.split_at(digits)
            }
            None => ("", after),
        };
        if whole.is_empty() && fraction.is_empty() {
            return Err(invalid());
        }
        let unit_len = after
            .char_indices()
            .find(|(_, c)| *c == '.' || c.is_ascii_digit())
            .map_or(after.len(), |(i, _)| i);
        if unit_len == 0 {
            return Err(format!("time: missing unit in duration {}", go_quote(text)));
        }
        let (unit, after) = after.split_at(unit_len);
        let nanos_per: u128 = match unit {
            "ns" => 1,
            "us" | "µs" | "μs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            _ => {
                return Err(format!(
                    "time: unknown unit {} in duration {}",
                    go_quote(unit),
                    go_quote(text)
                ))
            }
        };
        let mut value: u128 = 0;
        for digit in whole.bytes() {
            value = value
                .checked_mul(10)
                .and_then(|v| v.checked_add(u128::from(digit - b'0')))
                .filter(|v| *v <= LIMIT)
                .ok_or_else(invalid)?;
        }
        let mut nanos = value
            .checked_mul(nanos_per)
            .filter(|v| *v <= LIMIT)
            .ok_or_else(invalid)?;
        // The fraction: its first 18 digits are plenty for nanoseconds.
        let fraction = &fraction[..fraction.len().min(18)];
        if !fraction.is_empty() {
            let numerator: u128 = fraction.parse().map_err(|_| invalid())?;
            let scale = 10u128.pow(fraction.len() as u32);
            nanos += numerator * nanos_per / scale;
        }
        total = total
            .checked_add(nanos)
            .filter(|v| *v <= LIMIT)
            .ok_or_else(invalid)?;
        rest = after;
    }
    let nanos = u64::try_from(total).map_err(|_| invalid())?;
    Ok((Duration::from_nanos(nanos), negative && nanos > 0))
}

/// A duration that may not be negative (a timeout, a period): Go's
/// syntax, and a negative one refused.
pub fn parse(text: &str) -> Result<Duration, String> {
    match parse_signed(text)? {
        (_, true) => Err(format!(
            "negative duration {} is not allowed",
            go_quote(text)
        )),
        (duration, false) => Ok(duration),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_as_go_parses_them() {
        let ok = |text: &str| parse_signed(text).unwrap();
        assert_eq!(ok("30s"), (Duration::from_secs(30), false));
        assert_eq!(ok("1m30s"), (Duration::from_secs(90), false));
        assert_eq!(ok("1.5h"), (Duration::from_secs(5400), false));
        assert_eq!(ok("500ms"), (Duration::from_millis(500), false));
        assert_eq!(ok(".5s"), (Duration::from_millis(500), false));
        assert_eq!(
            ok("1h2m3s4ms5us6ns"),
            (Duration::new(3723, 4_005_006), false)
        );
        assert_eq!(ok("2µs"), (Duration::from_micros(2), false));
        assert_eq!(ok("0"), (Duration::ZERO, false));
        assert_eq!(ok("+0"), (Duration::ZERO, false));
        assert_eq!(ok("-0s"), (Duration::ZERO, false));
        assert_eq!(ok("-2s"), (Duration::from_secs(2), true));
        assert_eq!(ok("2562047h"), (Duration::from_secs(2562047 * 3600), false));
        for bad in [
            "",
            "s",
            "1",
            "-",
            ".s",
            "1x",
            "1s2",
            "9999999999999h",
            "99999999999999999999s",
            "1..5s",
        ] {
            assert!(parse_signed(bad).is_err(), "{bad:?}");
        }
        assert_eq!(
            parse_signed("abc").unwrap_err(),
            "time: invalid duration \"abc\""
        );
    }

    #[test]
    fn negative_durations_are_refused_where_they_make_no_sense() {
        assert_eq!(parse("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse("0"), Ok(Duration::ZERO));
        assert_eq!(parse("-0s"), Ok(Duration::ZERO));
        assert!(parse("-5s").unwrap_err().contains("negative"));
        assert!(parse("5").unwrap_err().contains("missing unit"));
    }
}
