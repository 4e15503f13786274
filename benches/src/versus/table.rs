//! The one table of a versus run: a row per figure, and for each member
//! count the skiff figure, the etcd figure and how many times better skiff
//! is. Also the notes under it: where skiff is slower, incomplete watch
//! deliveries, how long each system took.

use std::time::Duration;

use super::load::{Rate, Sequential};
use super::members_label;
use super::watch::WatchPoint;
use super::Plan;
use crate::report::{self, Table};

/// A ratio below this counts as skiff being slower (noise aside).
const SLOWER_BELOW: f64 = 0.95;

/// Everything measured on one system with one member count.
pub struct Measured {
    pub sequential: Sequential,
    /// (concurrent clients, puts, server CPU time over the point).
    pub throughput: Vec<(usize, Rate, Duration)>,
    pub linearizable: Rate,
    pub serializable: Rate,
    pub watch: Vec<WatchPoint>,
    /// Processes started -> every member ready with a leader.
    pub started_in: Duration,
    /// Processes started -> every process stopped.
    pub total: Duration,
    /// The machine's load averages when this system was stopped: other
    /// work on the machine skews its figures.
    pub load_after: String,
    /// Leader moves, forced kills and the like.
    pub notes: Vec<String>,
}

/// Both systems with one member count; `etcd` is `None` when it was skipped.
pub struct MemberRun {
    pub members: usize,
    pub skiff: Measured,
    pub etcd: Option<Measured>,
}

#[derive(Clone, Copy)]
enum Better {
    Lower,
    Higher,
}

/// One row: its name, which way is better, and its value (µs for
/// latencies, per second for rates).
struct Figure {
    name: String,
    better: Better,
    value: Box<dyn Fn(&Measured) -> f64>,
}

fn latency(name: String, read: impl Fn(&Measured) -> Duration + 'static) -> Figure {
    Figure {
        name,
        better: Better::Lower,
        value: Box::new(move |m| read(m).as_secs_f64() * 1e6),
    }
}

fn rate(name: String, read: impl Fn(&Measured) -> &Rate + 'static) -> Figure {
    Figure {
        name,
        better: Better::Higher,
        value: Box::new(move |m| read(m).per_second() as f64),
    }
}

fn figures(plan: &Plan) -> Vec<Figure> {
    let mut figures = vec![
        latency("put latency p50, µs (1 client, sequential)".into(), |m| {
            m.sequential.latencies.percentile(50.0)
        }),
        latency("put latency p99, µs (1 client, sequential)".into(), |m| {
            m.sequential.latencies.percentile(99.0)
        }),
    ];
    figures.push(latency(
        "server CPU µs per put, all members (1 client)".into(),
        |m| {
            let puts = u32::try_from(m.sequential.latencies.len().max(1)).unwrap_or(u32::MAX);
            m.sequential
                .server_cpu
                .checked_div(puts)
                .unwrap_or_default()
        },
    ));
    for (i, &clients) in plan.clients.iter().enumerate() {
        figures.push(rate(
            format!(
                "put throughput, puts/s ({} clients)",
                report::group_digits(clients as u64)
            ),
            move |m| &m.throughput[i].1,
        ));
    }
    if let Some(&clients) = plan.clients.last() {
        let last = plan.clients.len() - 1;
        figures.push(latency(
            format!(
                "server CPU µs per put, all members ({} clients)",
                report::group_digits(clients as u64)
            ),
            move |m| {
                let (_, rate, cpu) = &m.throughput[last];
                let puts = u32::try_from(rate.all_ops.max(1)).unwrap_or(u32::MAX);
                cpu.checked_div(puts).unwrap_or_default()
            },
        ));
    }
    let readers = report::group_digits(plan.read_clients as u64);
    figures.push(rate(
        format!("range linearizable, gets/s ({readers} clients)"),
        |m| &m.linearizable,
    ));
    figures.push(rate(
        format!("range serializable, gets/s ({readers} clients)"),
        |m| &m.serializable,
    ));
    for (i, &watchers) in plan.watchers.iter().enumerate() {
        let w = report::group_digits(watchers as u64);
        let noun = if watchers == 1 { "watcher" } else { "watchers" };
        figures.push(latency(
            format!("watch latency p50, µs ({w} {noun})"),
            move |m| m.watch[i].latencies.percentile(50.0),
        ));
        figures.push(latency(
            format!("watch latency p99, µs ({w} {noun})"),
            move |m| m.watch[i].latencies.percentile(99.0),
        ));
    }
    if let Some(&watchers) = plan.watchers.last() {
        let last = plan.watchers.len() - 1;
        figures.push(latency(
            format!(
                "server CPU µs per watch event ({} watchers)",
                report::group_digits(watchers as u64)
            ),
            move |m| {
                let point = &m.watch[last];
                let events = u32::try_from(point.delivered.max(1)).unwrap_or(u32::MAX);
                point.server_cpu.checked_div(events).unwrap_or_default()
            },
        ));
    }
    figures
}

/// How many times better skiff is: etcd/skiff for latencies, skiff/etcd
/// for rates; above 1, skiff is faster.
fn advantage(better: Better, skiff: f64, etcd: f64) -> Option<f64> {
    let (num, den) = match better {
        Better::Lower => (etcd, skiff),
        Better::Higher => (skiff, etcd),
    };
    (den > 0.0).then(|| num / den)
}

fn cell(better: Better, value: f64) -> String {
    match better {
        Better::Lower => report::micros(Duration::from_secs_f64(value / 1e6)),
        Better::Higher => report::group_digits(value.round() as u64),
    }
}

/// Prints the table and its notes.
pub fn print(plan: &Plan, runs: &[MemberRun]) {
    let mut table = Table::new(&["figure"]);
    for run in runs {
        table.group(&members_label(run.members), &["skiff", "etcd", "ratio"]);
    }
    let mut slower = Vec::new();
    for figure in figures(plan) {
        let mut row = vec![figure.name.clone()];
        for run in runs {
            let skiff = (figure.value)(&run.skiff);
            row.push(cell(figure.better, skiff));
            let Some(etcd) = run.etcd.as_ref().map(|m| (figure.value)(m)) else {
                row.extend(["skipped".to_string(), "-".to_string()]);
                continue;
            };
            row.push(cell(figure.better, etcd));
            match advantage(figure.better, skiff, etcd) {
                Some(ratio) => {
                    if ratio < SLOWER_BELOW {
                        slower.push(format!(
                            "{} with {}: {ratio:.2}",
                            figure.name,
                            members_label(run.members)
                        ));
                    }
                    row.push(format!("{ratio:.2}"));
                }
                None => row.push("-".into()),
            }
        }
        table.row(row);
    }
    table.print();
    println!(
        "ratio: how many times faster skiff is — etcd/skiff for latencies, skiff/etcd for rates; > 1 means skiff is faster, < 1 means etcd is."
    );
    print_notes(runs, &slower);
}

fn print_notes(runs: &[MemberRun], slower: &[String]) {
    if runs.iter().all(|r| r.etcd.is_none()) {
        println!(
            "etcd was SKIPPED: it is not installed; `apt-get install -y {}` gives the side-by-side figures.",
            super::system::ETCD_PACKAGE
        );
    } else {
        if slower.is_empty() {
            println!(
                "skiff is not slower than etcd on any figure (no ratio below {SLOWER_BELOW})."
            );
        } else {
            println!("skiff is SLOWER than etcd on: {}", slower.join("; "));
        }
    }
    for run in runs {
        let label = members_label(run.members);
        let systems = [("skiff", Some(&run.skiff)), ("etcd", run.etcd.as_ref())];
        for (name, measured) in systems {
            let Some(m) = measured else { continue };
            let under_load: Vec<String> = m
                .throughput
                .iter()
                .map(|(clients, rate, _)| {
                    format!(
                        "{} clients {}/{}",
                        report::group_digits(*clients as u64),
                        report::micros(rate.latencies.percentile(50.0)),
                        report::micros(rate.latencies.percentile(99.0))
                    )
                })
                .collect();
            let watches: Vec<String> = m
                .watch
                .iter()
                .map(|p| {
                    format!(
                        "{} x {} puts on {} streams (created in {} ms)",
                        report::group_digits(p.watchers as u64),
                        p.puts,
                        p.streams,
                        report::group_digits(p.created_in.as_millis() as u64)
                    )
                })
                .collect();
            println!(
                "{name}, {label}: ready in {:.1} s, whole run {:.1} s, load average after {}; {} sequential puts/s; put p50/p99 µs under load: {}; watchers x puts: {}",
                m.started_in.as_secs_f64(),
                m.total.as_secs_f64(),
                m.load_after,
                report::group_digits(report::per_second(
                    m.sequential.latencies.len() as u64,
                    m.sequential.elapsed
                )),
                under_load.join(", "),
                watches.join(", ")
            );
            for note in &m.notes {
                println!("  NOTE ({name}, {label}): {note}");
            }
            for problem in m.watch.iter().flat_map(WatchPoint::problems) {
                println!("  ERROR ({name}, {label}): {problem}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratios_favour_skiff_above_one() {
        assert_eq!(advantage(Better::Lower, 100.0, 300.0), Some(3.0));
        assert_eq!(advantage(Better::Higher, 300.0, 100.0), Some(3.0));
        assert_eq!(advantage(Better::Higher, 100.0, 0.0), None);
        assert_eq!(advantage(Better::Lower, 0.0, 10.0), None);
    }
}
