//! `--plot FILE.svg`: the latency distributions of both systems as
//! cumulative curves — log time across, the share of requests up: linear
//! to 90%, then stretched so that 99% and 99.9% get room — one row of
//! panels per member count (sequential put latency; watch latency with
//! the most watchers). Plain SVG text, no plotting library.

use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result};

use super::members_label;
use super::table::{Measured, MemberRun};
use crate::report::{self, Latencies};

const PANEL_W: f64 = 460.0;
const PANEL_H: f64 = 280.0;
const MARGIN_L: f64 = 58.0;
const MARGIN_R: f64 = 30.0;
const MARGIN_T: f64 = 30.0;
const MARGIN_B: f64 = 42.0;
const HEADER_H: f64 = 54.0;
const SKIFF_COLOR: &str = "#1f6fb4";
const ETCD_COLOR: &str = "#e8710a";

/// One panel: a title and, per system, the latencies drawn.
struct Panel<'a> {
    title: String,
    curves: Vec<(&'a str, &'static str, &'a Latencies)>,
}

/// Writes the plot of `runs` to `path`.
pub fn write(path: &Path, runs: &[MemberRun]) -> Result<()> {
    let rows: Vec<Vec<Panel>> = runs.iter().map(panels).collect();
    let columns = rows.iter().map(Vec::len).max().unwrap_or(1).max(1);
    let width = PANEL_W * columns as f64;
    let height = HEADER_H + PANEL_H * rows.len() as f64;
    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11">"#
    );
    let _ = writeln!(svg, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        svg,
        r#"<text x="12" y="20" font-size="14" font-weight="bold">skiff vs etcd: share of requests answered within a latency (linear to 90%, then 99% and 99.9% stretched)</text>"#
    );
    legend(&mut svg, 12.0, 40.0);
    for (r, row) in rows.iter().enumerate() {
        for (c, panel) in row.iter().enumerate() {
            let x = PANEL_W * c as f64;
            let y = HEADER_H + PANEL_H * r as f64;
            draw_panel(&mut svg, panel, x, y);
        }
    }
    svg.push_str("</svg>\n");
    std::fs::write(path, svg).with_context(|| format!("writing the plot to {}", path.display()))
}

fn panels(run: &MemberRun) -> Vec<Panel<'_>> {
    let label = members_label(run.members);
    let systems: Vec<(&str, &'static str, &Measured)> = [
        Some(("skiff", SKIFF_COLOR, &run.skiff)),
        run.etcd.as_ref().map(|m| ("etcd", ETCD_COLOR, m)),
    ]
    .into_iter()
    .flatten()
    .collect();
    let mut panels = vec![Panel {
        title: format!("sequential put latency, {label}"),
        curves: systems
            .iter()
            .map(|(name, color, m)| (*name, *color, &m.sequential.latencies))
            .collect(),
    }];
    if let Some(last) = run.skiff.watch.len().checked_sub(1) {
        let watchers = run.skiff.watch[last].watchers;
        panels.push(Panel {
            title: format!(
                "watch latency, {} watchers, {label}",
                report::group_digits(watchers as u64)
            ),
            curves: systems
                .iter()
                .filter_map(|(name, color, m)| {
                    m.watch.get(last).map(|p| (*name, *color, &p.latencies))
                })
                .collect(),
        });
    }
    panels
}

fn legend(svg: &mut String, x: f64, y: f64) {
    for (i, (name, color)) in [("skiff", SKIFF_COLOR), ("etcd", ETCD_COLOR)]
        .iter()
        .enumerate()
    {
        let lx = x + 90.0 * i as f64;
        let _ = writeln!(
            svg,
            r#"<line x1="{lx}" y1="{y}" x2="{}" y2="{y}" stroke="{color}" stroke-width="2.5"/><text x="{}" y="{}">{name}</text>"#,
            lx + 24.0,
            lx + 30.0,
            y + 4.0
        );
    }
}

/// Nines shown at the top of a panel: 3 is 99.9%.
const TOP_NINES: f64 = 3.0;

/// The share of samples (0..=1) at which the curve is sampled: dense in
/// the tail, where the systems differ most.
fn shares() -> Vec<f64> {
    let mut shares: Vec<f64> = (0..=90).map(|p| p as f64 / 100.0).collect();
    shares.extend((1..=18).map(|i| 0.90 + i as f64 * 0.005));
    shares.extend((1..=9).map(|i| 0.99 + i as f64 * 0.001));
    shares.push(1.0);
    shares
}

fn draw_panel(svg: &mut String, panel: &Panel, x0: f64, y0: f64) {
    let (left, top) = (x0 + MARGIN_L, y0 + MARGIN_T);
    let (w, h) = (PANEL_W - MARGIN_L - MARGIN_R, PANEL_H - MARGIN_T - MARGIN_B);
    let _ = writeln!(
        svg,
        r#"<text x="{left}" y="{}" font-weight="bold">{}</text>"#,
        top - 10.0,
        panel.title
    );
    let samples: Vec<&&Latencies> = panel
        .curves
        .iter()
        .map(|(_, _, l)| l)
        .filter(|l| l.len() > 0)
        .collect();
    if samples.is_empty() {
        let _ = writeln!(
            svg,
            r#"<text x="{left}" y="{}">no samples</text>"#,
            top + 20.0
        );
        return;
    }
    let lowest = samples
        .iter()
        .map(|l| l.percentile(0.0))
        .min()
        .unwrap_or_default();
    let highest = samples.iter().map(|l| l.max()).max().unwrap_or_default();
    let (lo, hi) = decades(lowest, highest);
    let to_x = |d: Duration| {
        let us = (d.as_secs_f64() * 1e6).max(1e-3);
        left + (us.log10() - lo) / (hi - lo) * w
    };
    let to_y = |share: f64| top + (1.0 - height_of(share)) * h;
    axes(svg, left, top, w, h, lo, hi, &to_y);
    for (name, color, latencies) in &panel.curves {
        if latencies.len() == 0 {
            continue;
        }
        let points: Vec<String> = shares()
            .into_iter()
            .map(|s| {
                let d = latencies.percentile(s * 100.0);
                format!("{:.1},{:.1}", to_x(d), to_y(s))
            })
            .collect();
        let _ = writeln!(
            svg,
            r#"<polyline fill="none" stroke="{color}" stroke-width="2" points="{}"><title>{name}: p50 {} µs, p99 {} µs</title></polyline>"#,
            points.join(" "),
            report::micros(latencies.percentile(50.0)),
            report::micros(latencies.percentile(99.0)),
        );
    }
}

/// The axis frame, decade ticks (10 µs, 100 µs, 1 ms…) and share lines
/// (including p99).
#[allow(clippy::too_many_arguments)]
fn axes(
    svg: &mut String,
    left: f64,
    top: f64,
    w: f64,
    h: f64,
    lo: f64,
    hi: f64,
    to_y: &dyn Fn(f64) -> f64,
) {
    let bottom = top + h;
    let _ = writeln!(
        svg,
        r##"<rect x="{left}" y="{top}" width="{w}" height="{h}" fill="none" stroke="#444"/>"##
    );
    let mut decade = lo;
    while decade <= hi + 1e-9 {
        let x = left + (decade - lo) / (hi - lo) * w;
        let _ = writeln!(
            svg,
            r##"<line x1="{x:.1}" y1="{top}" x2="{x:.1}" y2="{bottom}" stroke="#ddd"/><text x="{x:.1}" y="{}" text-anchor="middle">{}</text>"##,
            bottom + 14.0,
            decade_label(decade)
        );
        decade += 1.0;
    }
    let _ = writeln!(
        svg,
        r#"<text x="{}" y="{}" text-anchor="middle">latency (log scale)</text>"#,
        left + w / 2.0,
        bottom + 32.0
    );
    for (share, label) in [
        (0.0, "0%"),
        (0.25, "25%"),
        (0.5, "50%"),
        (0.9, "90%"),
        (0.99, "99%"),
        (0.999, "99.9%"),
    ] {
        let y = to_y(share);
        let _ = writeln!(
            svg,
            r##"<line x1="{left}" y1="{y:.1}" x2="{}" y2="{y:.1}" stroke="#ddd"/><text x="{}" y="{:.1}" text-anchor="end">{label}</text>"##,
            left + w,
            left - 6.0,
            y + 4.0
        );
    }
}

/// Where `share` sits, 0 at the bottom to 1 at the top: the body (to 90%)
/// linear over the lower `BODY` of the height, the tail above it by nines.
fn height_of(share: f64) -> f64 {
    const BODY: f64 = 0.4;
    if share <= 0.9 {
        BODY * share.max(0.0) / 0.9
    } else {
        BODY + (1.0 - BODY) * (nines(share) - 1.0) / (TOP_NINES - 1.0)
    }
}

/// How many nines `share` has (0.9 -> 1, 0.99 -> 2), at most `TOP_NINES`.
fn nines(share: f64) -> f64 {
    let rest = (1.0 - share).max(10f64.powf(-TOP_NINES));
    (-rest.log10()).clamp(0.0, TOP_NINES)
}

/// log10 of µs at whole decades around [lowest, highest].
fn decades(lowest: Duration, highest: Duration) -> (f64, f64) {
    let lo = (lowest.as_secs_f64() * 1e6).max(1.0).log10().floor();
    let hi = (highest.as_secs_f64() * 1e6).max(1.0).log10().ceil();
    if hi <= lo {
        (lo, lo + 1.0)
    } else {
        (lo, hi)
    }
}

fn decade_label(log_us: f64) -> String {
    let us = 10f64.powf(log_us).round();
    if us >= 1e6 {
        format!("{} s", us / 1e6)
    } else if us >= 1e3 {
        format!("{} ms", us / 1e3)
    } else {
        format!("{us} µs")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decades_cover_the_samples() {
        let (lo, hi) = decades(Duration::from_micros(150), Duration::from_millis(20));
        assert_eq!((lo, hi), (2.0, 5.0));
        assert_eq!(decade_label(2.0), "100 µs");
        assert_eq!(decade_label(3.0), "1 ms");
        assert_eq!(decade_label(6.0), "1 s");
    }

    #[test]
    fn nines_stretch_the_tail() {
        assert_eq!(nines(0.0), 0.0);
        assert!((nines(0.9) - 1.0).abs() < 1e-9);
        assert!((nines(0.99) - 2.0).abs() < 1e-9);
        assert_eq!(nines(1.0), TOP_NINES);
        assert_eq!(height_of(0.0), 0.0);
        assert!((height_of(0.9) - 0.4).abs() < 1e-9);
        assert!((height_of(0.99) - 0.7).abs() < 1e-9);
        assert_eq!(height_of(1.0), 1.0);
    }

    #[test]
    fn shares_rise_to_one() {
        let shares = shares();
        assert!(shares.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(shares.last(), Some(&1.0));
    }
}
