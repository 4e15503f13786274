//! Plain-text output of a benchmark: latency percentiles from raw samples,
//! aligned tables, and number formatting. No statistics beyond sorting.

use std::fmt::Write as _;
use std::time::Duration;

/// Latency samples of one measurement, sorted once for percentiles.
#[derive(Debug, Clone, Default)]
pub struct Latencies {
    sorted_nanos: Vec<u64>,
}

impl Latencies {
    pub fn from_nanos(mut nanos: Vec<u64>) -> Self {
        nanos.sort_unstable();
        Latencies {
            sorted_nanos: nanos,
        }
    }

    pub fn from_durations(samples: &[Duration]) -> Self {
        Self::from_nanos(samples.iter().map(|d| duration_nanos(*d)).collect())
    }

    pub fn len(&self) -> usize {
        self.sorted_nanos.len()
    }

    /// Nearest-rank percentile (`p` in 0..=100); zero when there are no samples.
    pub fn percentile(&self, p: f64) -> Duration {
        let n = self.sorted_nanos.len();
        if n == 0 {
            return Duration::ZERO;
        }
        let rank = ((p / 100.0) * n as f64).ceil() as usize;
        let index = rank.clamp(1, n) - 1;
        Duration::from_nanos(self.sorted_nanos[index])
    }

    pub fn max(&self) -> Duration {
        Duration::from_nanos(self.sorted_nanos.last().copied().unwrap_or(0))
    }

    pub fn mean(&self) -> Duration {
        if self.sorted_nanos.is_empty() {
            return Duration::ZERO;
        }
        let total: u128 = self.sorted_nanos.iter().map(|&n| u128::from(n)).sum();
        Duration::from_nanos((total / self.sorted_nanos.len() as u128) as u64)
    }
}

pub fn duration_nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// A table printed with right-aligned columns, a header and a rule; runs of
/// columns may share a title printed above their headers.
pub struct Table {
    headers: Vec<String>,
    groups: Vec<ColumnGroup>,
    rows: Vec<Vec<String>>,
}

/// A title over `len` adjacent columns starting at `first`.
struct ColumnGroup {
    title: String,
    first: usize,
    len: usize,
}

impl Table {
    pub fn new(headers: &[&str]) -> Self {
        Table {
            headers: headers.iter().map(|h| h.to_string()).collect(),
            groups: Vec::new(),
            rows: Vec::new(),
        }
    }

    /// Appends `headers` as new columns under one `title`; call before
    /// adding rows.
    pub fn group(&mut self, title: &str, headers: &[&str]) {
        assert!(self.rows.is_empty(), "columns are added before rows");
        assert!(!headers.is_empty(), "a column group has columns");
        self.groups.push(ColumnGroup {
            title: title.to_string(),
            first: self.headers.len(),
            len: headers.len(),
        });
        self.headers.extend(headers.iter().map(|h| h.to_string()));
    }

    pub fn row(&mut self, cells: Vec<String>) {
        assert_eq!(
            cells.len(),
            self.headers.len(),
            "a row has one cell per column"
        );
        self.rows.push(cells);
    }

    /// First column left-aligned (labels), the others right-aligned (numbers).
    pub fn render(&self) -> String {
        let widths = self.widths();
        let mut out = String::new();
        if !self.groups.is_empty() {
            self.render_groups(&mut out, &widths);
        }
        render_line(&mut out, &self.headers, &widths);
        let rule_len = widths.iter().sum::<usize>() + 2 * widths.len().saturating_sub(1);
        out.push_str(&"-".repeat(rule_len));
        out.push('\n');
        for row in &self.rows {
            render_line(&mut out, row, &widths);
        }
        out
    }

    pub fn print(&self) {
        print!("{}", self.render());
    }

    /// Each column as wide as its widest cell; a group's last column widens
    /// until the group's title fits over the group.
    fn widths(&self) -> Vec<usize> {
        let mut widths: Vec<usize> = (0..self.headers.len())
            .map(|c| {
                self.rows
                    .iter()
                    .map(|r| r[c].chars().count())
                    .chain([self.headers[c].chars().count()])
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        for group in &self.groups {
            let needed = group_title(&group.title, 0).chars().count();
            let span = group_span(group, &widths);
            if span < needed {
                widths[group.first + group.len - 1] += needed - span;
            }
        }
        widths
    }

    /// The line above the headers: each group's title centred in dashes
    /// over its columns.
    fn render_groups(&self, out: &mut String, widths: &[usize]) {
        let mut column = 0;
        for group in &self.groups {
            while column < group.first {
                let gap = if column == 0 { 0 } else { 2 };
                out.push_str(&" ".repeat(gap + widths[column]));
                column += 1;
            }
            if column > 0 {
                out.push_str("  ");
            }
            out.push_str(&group_title(&group.title, group_span(group, widths)));
            column += group.len;
        }
        out.push('\n');
    }
}

/// The width of a group's columns and the gaps between them.
fn group_span(group: &ColumnGroup, widths: &[usize]) -> usize {
    widths[group.first..group.first + group.len]
        .iter()
        .sum::<usize>()
        + 2 * (group.len - 1)
}

/// "-- title --" centred in dashes, at least `width` characters wide.
fn group_title(title: &str, width: usize) -> String {
    format!("{:-^width$}", format!("-- {title} --"))
}

fn render_line(out: &mut String, cells: &[String], widths: &[usize]) {
    for (c, (cell, width)) in cells.iter().zip(widths).enumerate() {
        if c == 0 {
            let _ = write!(out, "{cell:<width$}");
        } else {
            let _ = write!(out, "  {cell:>width$}");
        }
    }
    while out.ends_with(' ') {
        out.pop();
    }
    out.push('\n');
}

/// Prints a section title, underlined.
pub fn section(title: &str) {
    println!();
    println!("{title}");
    println!("{}", "=".repeat(title.chars().count()));
}

/// A duration in microseconds, with one decimal below 100 µs.
pub fn micros(d: Duration) -> String {
    let us = d.as_secs_f64() * 1e6;
    if us < 100.0 {
        format!("{us:.1}")
    } else {
        group_digits(us.round() as u64)
    }
}

/// A duration in milliseconds with two decimals.
pub fn millis(d: Duration) -> String {
    format!("{:.2}", d.as_secs_f64() * 1e3)
}

/// 1234567 -> "1 234 567".
pub fn group_digits(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, ch) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(' ');
        }
        out.push(ch);
    }
    out
}

/// Bytes in MiB with one decimal.
pub fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

/// A rate per second, rounded to a whole number.
pub fn per_second(count: u64, elapsed: Duration) -> u64 {
    let secs = elapsed.as_secs_f64();
    if secs <= 0.0 {
        return 0;
    }
    (count as f64 / secs).round() as u64
}

/// `value / base` with two decimals ("3.10" = 3.1 times the base); "-"
/// when the base is zero.
pub fn ratio(value: f64, base: f64) -> String {
    if base == 0.0 {
        return "-".into();
    }
    format!("{:.2}", value / base)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_use_nearest_rank() {
        let l = Latencies::from_nanos((1..=100).rev().collect());
        assert_eq!(l.percentile(50.0), Duration::from_nanos(50));
        assert_eq!(l.percentile(99.0), Duration::from_nanos(99));
        assert_eq!(l.percentile(99.9), Duration::from_nanos(100));
        assert_eq!(l.percentile(0.0), Duration::from_nanos(1));
        assert_eq!(l.max(), Duration::from_nanos(100));
        assert_eq!(Latencies::default().percentile(50.0), Duration::ZERO);
    }

    #[test]
    fn digits_are_grouped_by_three() {
        assert_eq!(group_digits(0), "0");
        assert_eq!(group_digits(999), "999");
        assert_eq!(group_digits(1000), "1 000");
        assert_eq!(group_digits(1_000_000), "1 000 000");
    }

    #[test]
    fn tables_align_columns() {
        let mut t = Table::new(&["name", "n"]);
        t.row(vec!["a".into(), "1 000".into()]);
        t.row(vec!["long name".into(), "2".into()]);
        assert_eq!(
            t.render(),
            "name           n\n----------------\na          1 000\nlong name      2\n"
        );
    }

    #[test]
    fn column_groups_are_titled_over_their_columns() {
        let mut t = Table::new(&["w"]);
        t.group("one", &["a", "b"]);
        t.group("a longer title", &["a"]);
        t.row(vec!["1".into(), "10".into(), "200".into(), "3".into()]);
        assert_eq!(
            t.render(),
            concat!(
                "   -- one --  -- a longer title --\n",
                "w   a      b                     a\n",
                "----------------------------------\n",
                "1  10    200                     3\n",
            )
        );
    }

    #[test]
    fn ratios_have_two_decimals() {
        assert_eq!(ratio(3.0, 1.0), "3.00");
        assert_eq!(ratio(1.0, 3.0), "0.33");
        assert_eq!(ratio(1.0, 0.0), "-");
    }
}
