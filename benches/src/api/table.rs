//! The one table of an api run: a row per figure, the in-process store and
//! etcd side by side with their ratio and which way is better; then the
//! issue's targets, met or not, and notes on each backend's run.

use std::time::Duration;

use super::list::ListPoint;
use super::pods::Creates;
use super::server::Backend;
use super::watch::{WatchPoint, WatchTransport};
use super::Plan;
use crate::report::{self, Table};

/// A list of this many pods from the cache should take under `LIST_TARGET`.
const LIST_TARGET_PODS: usize = 10_000;
const LIST_TARGET: Duration = Duration::from_millis(50);
/// This many watchers should all have an event within `WATCH_TARGET` (p99).
const WATCH_TARGET_WATCHERS: usize = 1000;
const WATCH_TARGET: Duration = Duration::from_millis(5);
/// With this many pods, the API server's RSS should stay within
/// `MEMORY_TARGET` times their JSON size.
const MEMORY_TARGET_PODS: usize = 100_000;
const MEMORY_TARGET: f64 = 2.0;

/// Everything measured on one backend.
pub struct Measured {
    pub creates: Vec<Creates>,
    /// One per `ListKind::ALL`, in its order.
    pub lists: Vec<ListPoint>,
    pub watches: Vec<WatchPoint>,
    /// The raw TCP floor at the largest HTTP/1.1 watcher count (`floor.rs`).
    pub floor: Option<WatchPoint>,
    pub memory: Memory,
    /// Processes started -> the API ready.
    pub started_in: Duration,
    /// Processes started -> processes stopped.
    pub total: Duration,
    pub load_after: String,
    pub notes: Vec<String>,
}

/// The API server's memory with the namespace full of pods.
pub struct Memory {
    pub pods: usize,
    /// The pods' JSON as a list serves them, items only.
    pub json_bytes: u64,
    /// VmRSS of the API server process (for etcd, without etcd's).
    pub rss: u64,
    pub rss_at_start: u64,
    pub etcd_rss: Option<u64>,
}

impl Memory {
    fn ratio(&self) -> f64 {
        self.rss as f64 / (self.json_bytes as f64).max(1.0)
    }
}

#[derive(Clone, Copy)]
enum Better {
    Lower,
    Higher,
    /// Context, not a score.
    Neither,
}

impl Better {
    fn label(self) -> &'static str {
        match self {
            Better::Lower => "lower",
            Better::Higher => "higher",
            Better::Neither => "-",
        }
    }
}

/// One row: its name, which way is better, its value and how to print it.
struct Figure {
    name: String,
    better: Better,
    value: Box<dyn Fn(&Measured) -> f64>,
    format: fn(f64) -> String,
}

fn ms(value: f64) -> String {
    format!("{value:.2}")
}

fn whole(value: f64) -> String {
    report::group_digits(value.round() as u64)
}

fn mib(value: f64) -> String {
    format!("{:.1}", value / (1024.0 * 1024.0))
}

fn one_decimal(value: f64) -> String {
    format!("{value:.1}")
}

fn two_decimals(value: f64) -> String {
    format!("{value:.2}")
}

fn latency_ms(name: String, read: impl Fn(&Measured) -> Duration + 'static) -> Figure {
    Figure {
        name,
        better: Better::Lower,
        value: Box::new(move |m| read(m).as_secs_f64() * 1e3),
        format: ms,
    }
}

fn figures(plan: &Plan, reference: &Measured) -> Vec<Figure> {
    let mut figures = Vec::new();
    for (i, &clients) in plan.clients.iter().enumerate() {
        let noun = if clients == 1 { "client" } else { "clients" };
        figures.push(Figure {
            name: format!("create throughput, pods/s ({clients} {noun})"),
            better: Better::Higher,
            value: Box::new(move |m| m.creates[i].per_second()),
            format: whole,
        });
    }
    for (i, point) in reference.lists.iter().enumerate() {
        let what = list_name(point);
        for p in [50.0, 99.0] {
            figures.push(latency_ms(format!("{what}, p{p:.0} ms"), move |m| {
                m.lists[i].latencies.percentile(p)
            }));
        }
    }
    let points = plan.watch_points();
    for (i, &(transport, watchers)) in points.iter().enumerate() {
        let w = report::group_digits(watchers as u64);
        let noun = if watchers == 1 { "watcher" } else { "watchers" };
        let over = transport.name();
        for p in [50.0, 99.0] {
            figures.push(latency_ms(
                format!("watch write->event p{p:.0} ms ({w} {noun}, {over})"),
                move |m| m.watches[i].latencies.percentile(p),
            ));
        }
        if Some(&watchers) != plan.watchers.last() {
            continue;
        }
        for p in [50.0, 99.0] {
            figures.push(latency_ms(
                format!("watch write->first watcher p{p:.0} ms ({w} {noun}, {over})"),
                move |m| m.watches[i].first_watcher.percentile(p),
            ));
        }
        figures.push(Figure {
            name: format!("server CPU µs per watch event ({w} {noun}, {over})"),
            better: Better::Lower,
            value: Box::new(move |m| {
                let point = &m.watches[i];
                point.server_cpu.as_secs_f64() * 1e6 / point.delivered.max(1) as f64
            }),
            format: one_decimal,
        });
        figures.push(Figure {
            name: format!("bench client CPU µs per watch event ({w} {noun}, {over})"),
            better: Better::Neither,
            value: Box::new(move |m| {
                let point = &m.watches[i];
                point.client_cpu.as_secs_f64() * 1e6 / point.delivered.max(1) as f64
            }),
            format: one_decimal,
        });
    }
    if let Some(watchers) = plan.floor_watchers() {
        let w = report::group_digits(watchers as u64);
        for p in [50.0, 99.0] {
            figures.push(latency_ms(
                format!("raw TCP floor p{p:.0} ms (same event, {w} connections, no HTTP)"),
                move |m| floor_of(m).latencies.percentile(p),
            ));
        }
        figures.push(Figure {
            name: format!("raw TCP floor sender CPU µs per event ({w} connections)"),
            better: Better::Neither,
            value: Box::new(move |m| {
                let point = floor_of(m);
                point.server_cpu.as_secs_f64() * 1e6 / point.delivered.max(1) as f64
            }),
            format: one_decimal,
        });
    }
    let pods = report::group_digits(reference.memory.pods as u64);
    figures.extend([
        Figure {
            name: format!("API server RSS with {pods} pods, MiB"),
            better: Better::Lower,
            value: Box::new(|m| m.memory.rss as f64),
            format: mib,
        },
        Figure {
            name: format!("JSON size of the {pods} pods, MiB"),
            better: Better::Neither,
            value: Box::new(|m| m.memory.json_bytes as f64),
            format: mib,
        },
        Figure {
            name: "API server RSS / pods' JSON size".into(),
            better: Better::Lower,
            value: Box::new(|m| m.memory.ratio()),
            format: two_decimals,
        },
    ]);
    figures
}

/// The floor of a run whose plan has one (`workloads` measures it then).
fn floor_of(m: &Measured) -> &WatchPoint {
    m.floor
        .as_ref()
        .expect("a run with an HTTP/1.1 point measures the floor")
}

fn list_name(point: &ListPoint) -> String {
    let items = report::group_digits(point.items as u64);
    let what = if point.kind.selector {
        format!("list {items} pods by label")
    } else {
        format!("list {items} pods")
    };
    let how = if point.kind.cached {
        "rv=0"
    } else {
        "consistent"
    };
    format!("{what}, {how}")
}

/// Prints the table, the targets and the notes.
pub fn print(plan: &Plan, in_process: &Measured, over_etcd: Option<&Measured>) {
    let mut table = Table::new(&["figure"]);
    table.group(
        "skiff up",
        &[
            Backend::InProcess.label(),
            Backend::Etcd.label(),
            "ratio",
            "better",
        ],
    );
    for figure in figures(plan, in_process) {
        let mine = (figure.value)(in_process);
        let mut row = vec![figure.name.clone(), (figure.format)(mine)];
        match over_etcd.map(|m| (figure.value)(m)) {
            Some(theirs) => {
                row.push((figure.format)(theirs));
                row.push(report::ratio(mine, theirs));
            }
            None => row.extend(["skipped".to_string(), "-".to_string()]),
        }
        row.push(figure.better.label().to_string());
        table.row(row);
    }
    table.print();
    println!(
        "ratio: in-process store ÷ etcd; for rows marked `higher` a ratio above 1 favours the in-process store, for rows marked `lower` a ratio below 1 does."
    );
    println!(
        "rv=0: resourceVersion=0 (may be served from the API server's cache); consistent: no resourceVersion (read from the store); by label: {}.",
        super::pods::SELECTOR
    );
    if over_etcd.is_none() {
        println!(
            "etcd was SKIPPED: it is not installed; `apt-get install -y {}` gives the side-by-side figures.",
            crate::versus::system::ETCD_PACKAGE
        );
    }
    print_targets(plan, in_process, over_etcd);
    print_notes(in_process, over_etcd);
}

fn print_targets(plan: &Plan, in_process: &Measured, over_etcd: Option<&Measured>) {
    println!("targets (from the issue):");
    let backends: Vec<(&str, &Measured)> =
        std::iter::once((Backend::InProcess.label(), in_process))
            .chain(over_etcd.map(|m| (Backend::Etcd.label(), m)))
            .collect();
    let judge = |name: String, verdicts: Vec<String>| {
        println!("  {name}: {}", verdicts.join("; "));
    };
    judge(
        format!(
            "list of {} pods from the cache (rv=0), p99 < {} ms",
            report::group_digits(LIST_TARGET_PODS as u64),
            LIST_TARGET.as_millis()
        ),
        backends
            .iter()
            .map(|(label, m)| {
                let Some(point) = m.lists.iter().find(|p| p.kind.cached && !p.kind.selector) else {
                    return format!("{label} not measured");
                };
                let p99 = point.latencies.percentile(99.0);
                let value = format!("{label} {} ms", report::millis(p99));
                if point.items < LIST_TARGET_PODS {
                    return format!("{value} (not judged: {} pods listed)", point.items);
                }
                format!("{value} {}", verdict(p99 < LIST_TARGET))
            })
            .collect(),
    );
    for transport in &plan.watch_transports {
        judge(
            format!(
                "{} watchers all served, p99 < {} ms ({})",
                report::group_digits(WATCH_TARGET_WATCHERS as u64),
                WATCH_TARGET.as_millis(),
                transport.name()
            ),
            backends
                .iter()
                .map(|(label, m)| {
                    match m
                        .watches
                        .iter()
                        .find(|p| p.watchers == WATCH_TARGET_WATCHERS && p.transport == *transport)
                    {
                        Some(point) => {
                            let p99 = point.latencies.percentile(99.0);
                            let complete = point.delivered == point.expected;
                            let floor = match &m.floor {
                                Some(floor) if *transport == WatchTransport::Http1 => format!(
                                    " (the raw TCP floor: {} ms)",
                                    report::millis(floor.latencies.percentile(99.0))
                                ),
                                _ => String::new(),
                            };
                            format!(
                                "{label} {} ms {}{floor}",
                                report::millis(p99),
                                verdict(complete && p99 < WATCH_TARGET)
                            )
                        }
                        None => format!(
                            "{label} not judged (no point with {WATCH_TARGET_WATCHERS} watchers)"
                        ),
                    }
                })
                .collect(),
        );
    }
    judge(
        format!(
            "API server RSS with {} pods <= {MEMORY_TARGET} x their JSON size",
            report::group_digits(MEMORY_TARGET_PODS as u64)
        ),
        backends
            .iter()
            .map(|(label, m)| {
                let value = format!("{label} {:.2} x", m.memory.ratio());
                if m.memory.pods < MEMORY_TARGET_PODS {
                    return format!("{value} (not judged: {} pods)", m.memory.pods);
                }
                format!("{value} {}", verdict(m.memory.ratio() <= MEMORY_TARGET))
            })
            .collect(),
    );
}

/// Bytes in KiB below a MiB, else in MiB.
fn size(bytes: u64) -> String {
    if bytes < 1024 * 1024 {
        format!("{:.0} KiB", bytes as f64 / 1024.0)
    } else {
        report::mib(bytes)
    }
}

fn verdict(met: bool) -> &'static str {
    if met {
        "met"
    } else {
        "NOT MET"
    }
}

fn print_notes(in_process: &Measured, over_etcd: Option<&Measured>) {
    let backends = std::iter::once((Backend::InProcess.label(), in_process))
        .chain(over_etcd.map(|m| (Backend::Etcd.label(), m)));
    for (label, m) in backends {
        let creates: Vec<String> = m
            .creates
            .iter()
            .map(|c| {
                format!(
                    "{} {} {}/{}",
                    c.clients,
                    if c.clients == 1 { "client" } else { "clients" },
                    report::millis(c.latencies.percentile(50.0)),
                    report::millis(c.latencies.percentile(99.0))
                )
            })
            .collect();
        let lists: Vec<String> = m
            .lists
            .iter()
            .map(|l| format!("{} {}", list_name(l), size(l.bytes as u64)))
            .collect();
        let opened: Vec<String> = m
            .watches
            .iter()
            .map(|w| {
                format!(
                    "{} (x {} writes) in {} ms",
                    report::group_digits(w.watchers as u64),
                    w.writes,
                    report::group_digits(w.opened_in.as_millis() as u64)
                )
            })
            .collect();
        let etcd_rss = match m.memory.etcd_rss {
            Some(rss) => format!(", etcd's own RSS {}", report::mib(rss)),
            None => String::new(),
        };
        println!(
            "{label}: ready in {:.1} s, whole run {:.1} s, load average after {}; create p50/p99 ms: {}; list sizes: {}; watches opened: {}; API server RSS at start {}{etcd_rss}",
            m.started_in.as_secs_f64(),
            m.total.as_secs_f64(),
            m.load_after,
            creates.join(", "),
            lists.join(", "),
            opened.join(", "),
            report::mib(m.memory.rss_at_start),
        );
        for note in &m.notes {
            println!("  NOTE ({label}): {note}");
        }
        for problem in m
            .watches
            .iter()
            .chain(m.floor.as_ref())
            .flat_map(WatchPoint::problems)
        {
            println!("  ERROR ({label}): {problem}");
        }
    }
}
