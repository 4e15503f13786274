//! Kubernetes resource quantities (`500m`, `1Gi`, `2`, `1e3`) as exact
//! thousandths, for the plugins that add and compare them (LimitRanger,
//! ResourceQuota) and for validation, which reads them with Kubernetes'
//! own grammar ([`Quantity::parse_strict`]). Not a general decimal type:
//! precision below 1m is rounded up, as Kubernetes' `MilliValue` does.

use std::cmp::Ordering;
use std::fmt;

/// A quantity in thousandths of its unit, and whether it was written with
/// a binary suffix (`Ki`, `Mi`…), which its printed form keeps.
#[derive(Debug, Clone, Copy, Default)]
pub struct Quantity {
    pub milli: i128,
    pub binary: bool,
}

impl PartialEq for Quantity {
    fn eq(&self, other: &Self) -> bool {
        self.milli == other.milli
    }
}

impl Eq for Quantity {}

impl PartialOrd for Quantity {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Quantity {
    fn cmp(&self, other: &Self) -> Ordering {
        self.milli.cmp(&other.milli)
    }
}

const BINARY: &[(&str, u32)] = &[
    ("Ki", 10),
    ("Mi", 20),
    ("Gi", 30),
    ("Ti", 40),
    ("Pi", 50),
    ("Ei", 60),
];
const DECIMAL: &[(&str, i32)] = &[
    ("n", -9),
    ("u", -6),
    ("m", -3),
    ("k", 3),
    ("M", 6),
    ("G", 9),
    ("T", 12),
    ("P", 15),
    ("E", 18),
];

/// Why a text is not a quantity, worded as k8s.io/apimachinery's
/// `resource.ErrFormatWrong` and `resource.ErrSuffix`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    #[error("quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'")]
    Format,
    #[error("unable to parse quantity's suffix")]
    Suffix,
}

/// The characters a quantity's suffix is scanned over before its
/// optional signed exponent digits.
const SUFFIX_CHARS: &[u8] = b"eEinumkKMGTP";

impl Quantity {
    /// Reads `text` as Kubernetes' `resource.ParseQuantity` does: a sign,
    /// digits with an optional fraction (either may be empty: `.5`, `1.`,
    /// even `+`), then a suffix that is a decimal SI prefix, a binary one
    /// (`Ki`…`Ei`) or an exponent (`e3`, `E-2`). Values too large for the
    /// thousandths kept here saturate; only the grammar is refused.
    pub fn parse_strict(text: &str) -> Result<Quantity, QuantityError> {
        let bytes = text.as_bytes();
        if bytes.is_empty() {
            return Err(QuantityError::Format);
        }
        let negative = bytes[0] == b'-';
        let mut pos = usize::from(matches!(bytes[0], b'-' | b'+'));
        let digits = |from: usize| {
            from + bytes[from..]
                .iter()
                .take_while(|b| b.is_ascii_digit())
                .count()
        };
        let whole_end = digits(pos);
        let whole = &text[pos..whole_end];
        pos = whole_end;
        let mut fraction = "";
        if bytes.get(pos) == Some(&b'.') {
            let end = digits(pos + 1);
            fraction = &text[pos + 1..end];
            pos = end;
        }
        let suffix_start = pos;
        pos += bytes[pos..]
            .iter()
            .take_while(|b| SUFFIX_CHARS.contains(b))
            .count();
        if matches!(bytes.get(pos), Some(b'-' | b'+')) {
            pos += 1;
        }
        if digits(pos) != bytes.len() {
            return Err(QuantityError::Format);
        }
        let (exponent10, binary_shift) = match &text[suffix_start..] {
            "" => (0, 0),
            suffix => {
                if let Some((_, shift)) = BINARY.iter().find(|(name, _)| *name == suffix) {
                    (0, *shift)
                } else if let Some((_, exp)) = DECIMAL.iter().find(|(name, _)| *name == suffix) {
                    (i64::from(*exp), 0)
                } else {
                    let exponent = suffix
                        .strip_prefix(['e', 'E'])
                        .filter(|e| !e.is_empty())
                        .ok_or(QuantityError::Suffix)?;
                    let exponent = exponent.parse::<i64>().map_err(|_| QuantityError::Suffix)?;
                    (exponent, 0)
                }
            }
        };
        let magnitude = saturating_milli(whole, fraction, exponent10, binary_shift);
        Ok(Quantity {
            milli: if negative { -magnitude } else { magnitude },
            binary: binary_shift > 0,
        })
    }

    /// A count of whole things (`pods=3`).
    pub fn count(n: i64) -> Quantity {
        Quantity {
            milli: i128::from(n) * 1000,
            binary: false,
        }
    }

    /// Parses `1.5Gi`, `250m`, `1e3`, `-2`; None when it is not a quantity.
    pub fn parse(text: &str) -> Option<Quantity> {
        let text = text.trim();
        let split = text
            .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
            .unwrap_or(text.len());
        let (number, suffix) = text.split_at(split);
        let (negative, digits) = match number.as_bytes().first() {
            Some(b'-') => (true, &number[1..]),
            Some(b'+') => (false, &number[1..]),
            _ => (false, number),
        };
        let (whole, fraction) = digits.split_once('.').unwrap_or((digits, ""));
        let significant = format!("{whole}{fraction}");
        let significant = significant.trim_start_matches('0');
        // Up to the 39 digits of i128::MAX, which a canonical form can have.
        if whole.is_empty() && fraction.is_empty()
            || !whole
                .bytes()
                .chain(fraction.bytes())
                .all(|b| b.is_ascii_digit())
            || significant.len() > 39
        {
            return None;
        }
        // The digits as an integer, scaled by 10^-fraction.len().
        let mantissa: i128 = match significant {
            "" => 0,
            digits => digits.parse().ok()?,
        };
        let mut exponent10 = -(fraction.len() as i32) + 3; // thousandths
        let mut binary_shift = 0u32;
        let mut binary = false;
        if let Some((_, shift)) = BINARY.iter().find(|(name, _)| *name == suffix) {
            binary_shift = *shift;
            binary = true;
        } else if let Some((_, exp)) = DECIMAL.iter().find(|(name, _)| *name == suffix) {
            exponent10 += exp;
        } else if !suffix.is_empty() {
            // `1e3`, `5E-2`
            let exponent = suffix.strip_prefix(['e', 'E'])?;
            exponent10 += exponent.parse::<i32>().ok()?;
        }
        if !(-40..=40).contains(&exponent10) {
            return None;
        }
        let mut value = mantissa.checked_mul(1i128.checked_shl(binary_shift)?)?;
        if exponent10 >= 0 {
            value = value.checked_mul(10i128.checked_pow(exponent10 as u32)?)?;
        } else {
            let divisor = 10i128.checked_pow((-exponent10) as u32)?;
            // Round up below a thousandth, as Kubernetes' MilliValue does.
            value = div_round_up(value, divisor);
        }
        Some(Quantity {
            milli: if negative { -value } else { value },
            binary,
        })
    }

    /// The value of a JSON field: a quantity string or a plain number.
    pub fn from_json(value: &serde_json::Value) -> Option<Quantity> {
        match value {
            serde_json::Value::String(s) => Quantity::parse(s),
            serde_json::Value::Number(n) => Quantity::parse(&n.to_string()),
            _ => None,
        }
    }

    /// The sum, saturated at what a parsed quantity can hold (a sum of
    /// quantities near the limit, as a quota adds them, must not wrap).
    pub fn plus(self, other: Quantity) -> Quantity {
        Quantity {
            milli: saturated(self.milli.saturating_add(other.milli)),
            binary: self.binary || (self.milli == 0 && other.binary),
        }
    }

    /// The difference, saturated as [`Quantity::plus`] is.
    pub fn minus(self, other: Quantity) -> Quantity {
        Quantity {
            milli: saturated(self.milli.saturating_sub(other.milli)),
            binary: self.binary || other.binary,
        }
    }

    pub fn is_zero(&self) -> bool {
        self.milli == 0
    }
}

/// Thousandths within what parsing yields, `±i128::MAX`: `i128::MIN`
/// has no printed form that parses back to it.
fn saturated(milli: i128) -> i128 {
    milli.max(-i128::MAX)
}

/// `whole.fraction × 2^binary_shift × 10^exponent10` in thousandths,
/// rounded up below a thousandth and saturated above what i128 holds.
fn saturating_milli(whole: &str, fraction: &str, exponent10: i64, binary_shift: u32) -> i128 {
    let digits: String = format!("{whole}{fraction}")
        .trim_start_matches('0')
        .to_string();
    if digits.is_empty() {
        return 0;
    }
    let Ok(mantissa) = digits.parse::<i128>() else {
        return i128::MAX;
    };
    let Some(value) = 1i128
        .checked_shl(binary_shift)
        .and_then(|factor| mantissa.checked_mul(factor))
    else {
        return i128::MAX;
    };
    // An exponent as written may be any i64 (`1e9223372036854775807`).
    let exponent = exponent10
        .saturating_add(3)
        .saturating_sub(i64::try_from(fraction.len()).unwrap_or(i64::MAX));
    if exponent >= 0 {
        let scaled = u32::try_from(exponent)
            .ok()
            .and_then(|e| 10i128.checked_pow(e))
            .and_then(|factor| value.checked_mul(factor));
        return scaled.unwrap_or(i128::MAX);
    }
    match u32::try_from(exponent.unsigned_abs())
        .ok()
        .and_then(|e| 10i128.checked_pow(e))
    {
        Some(divisor) => div_round_up(value, divisor),
        // Far below a thousandth: rounds up to one.
        None => 1,
    }
}

/// `value / divisor` rounded up, for a value ≥ 0 up to i128::MAX (where
/// `value + divisor - 1` would overflow).
fn div_round_up(value: i128, divisor: i128) -> i128 {
    value / divisor + i128::from(value % divisor != 0)
}

impl fmt::Display for Quantity {
    /// The canonical form: `500m`, `2`, `1Gi`, `1536Mi`, `2k`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let milli = self.milli;
        if milli % 1000 != 0 {
            return write!(f, "{milli}m");
        }
        let value = milli / 1000;
        if value == 0 {
            return write!(f, "0");
        }
        if self.binary {
            let found = BINARY
                .iter()
                .rev()
                .find(|(_, shift)| value % (1i128 << shift) == 0);
            if let Some((name, shift)) = found {
                return write!(f, "{}{name}", value >> shift);
            }
        }
        let found = DECIMAL
            .iter()
            .rev()
            .filter(|(_, exp)| *exp > 0)
            .find(|(_, exp)| value % 10i128.pow(*exp as u32) == 0);
        match found {
            Some((name, exp)) => write!(f, "{}{name}", value / 10i128.pow(*exp as u32)),
            None => write!(f, "{value}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(text: &str) -> Quantity {
        Quantity::parse(text).unwrap_or_else(|| panic!("{text} is a quantity"))
    }

    #[test]
    fn quantities_parse_as_kubernetes_writes_them() {
        assert_eq!(q("500m").milli, 500);
        assert_eq!(q("0.5").milli, 500);
        assert_eq!(q("2").milli, 2000);
        assert_eq!(q("1Ki").milli, 1024 * 1000);
        assert_eq!(q("1.5Gi").milli, 1536 * 1024 * 1024 * 1000);
        assert_eq!(q("1k").milli, 1_000_000);
        assert_eq!(q("1e3").milli, 1_000_000);
        assert_eq!(q("2E").milli, 2_000_000_000_000_000_000_000);
        assert_eq!(q("1n").milli, 1, "below a thousandth rounds up");
        assert_eq!(q("-1").milli, -1000);
        for bad in ["", "abc", "1Qi", "1..2", "m"] {
            assert!(Quantity::parse(bad).is_none(), "{bad}");
        }
        assert!(q("1Gi") > q("1G"));
    }

    #[test]
    fn strict_parsing_follows_kubernetes_grammar() {
        let strict = |text: &str| Quantity::parse_strict(text).map(|q| q.milli);
        let good: &[(&str, i128)] = &[
            ("0", 0),
            ("500m", 500),
            ("1.5Gi", 1536 * 1024 * 1024 * 1000),
            ("1e3", 1_000_000),
            ("1E-3", 1),
            ("2e+2", 200_000),
            ("+1", 1000),
            ("-1", -1000),
            ("-0", 0),
            ("1.", 1000),
            (".5", 500),
            ("1n", 1),
            ("-1n", -1),
            ("1E", 1_000_000_000_000_000_000_000),
            (".", 0),
            ("+", 0),
            ("00010", 10_000),
            ("1e400", i128::MAX),
            // The scanner lets the digits be empty, as Kubernetes' does.
            ("m", 0),
        ];
        for (text, milli) in good {
            assert_eq!(strict(text), Ok(*milli), "{text}");
        }
        let format = [
            "", "1.2.3", "10Gigs", "NaN", "abc", "1Qi", "1..2", " 1", "1 ", "1Ki5x",
        ];
        for text in format {
            assert_eq!(strict(text), Err(QuantityError::Format), "{text:?}");
        }
        for text in ["1KK", "1e", "1e+", "5m5", "1iK", "1Kii"] {
            assert_eq!(strict(text), Err(QuantityError::Suffix), "{text:?}");
        }
        assert_eq!(
            QuantityError::Format.to_string(),
            "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
        );
        assert!(Quantity::parse_strict("1Gi").unwrap().binary);
    }

    /// Fuzzing (`quantity`) found `plus` overflowing i128: two requests
    /// of `1e35` (each within what a quantity holds) panicked a quota's sum
    /// in debug builds and wrapped it negative in release builds.
    #[test]
    fn adding_or_subtracting_huge_quantities_saturates() {
        let huge = q("1e35");
        assert_eq!(huge.plus(huge).milli, i128::MAX);
        assert_eq!(huge.plus(huge).plus(huge).milli, i128::MAX);
        let negative = q("-1e35");
        assert_eq!(negative.minus(huge).minus(huge).milli, -i128::MAX);
        let most = Quantity::parse_strict("1e400").unwrap();
        assert_eq!(most.plus(most).milli, i128::MAX);
        let least = Quantity::parse_strict("-1e400").unwrap();
        let floor = least.minus(most);
        assert_eq!(floor.milli, -i128::MAX);
        let printed = floor.to_string();
        assert_eq!(Quantity::parse_strict(&printed).unwrap(), floor);
        assert_eq!(q("1").plus(q("500m")).milli, 1500);
    }

    /// Fuzzing (`quantity`) found large quantities that validation
    /// accepts printing in a canonical form quota and limits could not
    /// read back (`20000000000000000000000000001.2k` prints as 32 digits;
    /// the lenient parser took at most 30), so a quota ignored them.
    #[test]
    fn a_large_quantity_prints_in_a_form_the_quota_parser_reads_back() {
        for text in [
            "20000000000000000000000000001.2k",
            "6666666636660183.0596Pi",
            "200000000000.2000000Ei",
            "-0000220315326340000000106.08045Ti",
        ] {
            let strict = Quantity::parse_strict(text).unwrap();
            let printed = strict.to_string();
            let lenient = Quantity::parse(&printed)
                .unwrap_or_else(|| panic!("{text} prints as {printed}, which does not parse"));
            assert_eq!(lenient.milli, strict.milli, "{text} printed as {printed}");
        }
        assert_eq!(q("0000000000000000000000000000000000000001").milli, 1000);
        assert_eq!(Quantity::parse(&"1".repeat(40)), None);
    }

    /// Fuzzing (`quantity`) found two overflows that panicked parsing in
    /// debug builds: an exponent of `i64::MAX` (`6e9223372036854775807`),
    /// and rounding up a fraction of a thousandth of a value near
    /// `i128::MAX`.
    #[test]
    fn an_exponent_or_a_fraction_at_the_limits_saturates_not_overflows() {
        let most = Quantity::parse_strict("6e9223372036854775807").unwrap();
        assert_eq!(most.milli, i128::MAX);
        let least = Quantity::parse_strict("6e-9223372036854775808").unwrap();
        assert_eq!(least.milli, 1);
        let near_max = "17014118346046923173168730371588410.5727";
        assert_eq!(
            Quantity::parse_strict(near_max).unwrap().milli,
            i128::MAX / 10 + 1
        );
        assert_eq!(Quantity::parse(near_max).unwrap().milli, i128::MAX / 10 + 1);
        assert_eq!(q("1.0001").milli, 1001);
    }

    #[test]
    fn quantities_print_in_canonical_form() {
        assert_eq!(q("500m").to_string(), "500m");
        assert_eq!(q("1000m").to_string(), "1");
        assert_eq!(q("1024Mi").to_string(), "1Gi");
        assert_eq!(q("1536Mi").to_string(), "1536Mi");
        assert_eq!(q("2000").to_string(), "2k");
        assert_eq!(q("0").to_string(), "0");
        assert_eq!(q("1Gi").plus(q("512Mi")).to_string(), "1536Mi");
        assert_eq!(Quantity::count(0).plus(q("1Gi")).to_string(), "1Gi");
        assert_eq!(Quantity::count(3).to_string(), "3");
    }
}
