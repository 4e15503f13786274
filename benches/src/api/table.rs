//! The one table of an api run: a row per figure and encoding, the
//! in-process store and etcd side by side with their ratio and which way is
//! better, and each protobuf row's ratio to its JSON row; then the issue's
//! targets, met or not, and notes on each backend's run.

use std::time::Duration;

use super::encoding::Encoding;
use super::list::{ListKind, ListPoint};
use super::pods::Creates;
use super::server::Backend;
use super::watch::{WatchPoint, WatchSetup, WatchTransport};
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
#[derive(Default)]
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

/// How a row reads its value from one backend's measurements.
type Value = Box<dyn Fn(&Measured) -> f64>;

/// One row: its name, which way is better, its value and how to print it.
struct Figure {
    name: String,
    better: Better,
    value: Value,
    format: fn(f64) -> String,
    /// A protobuf row measured beside JSON: the JSON row's value, for the
    /// protobuf ÷ JSON ratio.
    json: Option<Value>,
}

impl Figure {
    fn new(
        name: String,
        better: Better,
        value: impl Fn(&Measured) -> f64 + 'static,
        format: fn(f64) -> String,
    ) -> Figure {
        Figure {
            name,
            better,
            value: Box::new(value),
            format,
            json: None,
        }
    }
}

impl Measured {
    fn create(&self, encoding: Encoding, clients: usize) -> &Creates {
        self.creates
            .iter()
            .find(|c| c.encoding == encoding && c.clients == clients)
            .expect("every create point of the plan is measured")
    }

    fn list(&self, encoding: Encoding, kind: ListKind) -> &ListPoint {
        self.lists
            .iter()
            .find(|l| l.encoding == encoding && l.kind == kind)
            .expect("every list point of the plan is measured")
    }

    fn watch(&self, setup: WatchSetup) -> &WatchPoint {
        self.watches
            .iter()
            .find(|w| {
                w.encoding == setup.encoding
                    && w.transport == setup.transport
                    && w.watchers == setup.watchers
            })
            .expect("every watch point of the plan is measured")
    }
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

fn kib(value: f64) -> String {
    whole(value / 1024.0)
}

fn one_decimal(value: f64) -> String {
    format!("{value:.1}")
}

fn two_decimals(value: f64) -> String {
    format!("{value:.2}")
}

fn latency_ms(name: String, read: impl Fn(&Measured) -> Duration + 'static) -> Figure {
    Figure::new(
        name,
        Better::Lower,
        move |m| read(m).as_secs_f64() * 1e3,
        ms,
    )
}

/// One row per encoding of the plan, from `figure`; the protobuf row of a
/// run with both carries the JSON row's value for its ratio.
fn per_encoding(plan: &Plan, figures: &mut Vec<Figure>, figure: impl Fn(Encoding) -> Figure) {
    for &encoding in &plan.encodings {
        let mut row = figure(encoding);
        if encoding == Encoding::Protobuf && plan.both_encodings() {
            row.json = Some(figure(Encoding::Json).value);
        }
        figures.push(row);
    }
}

fn plural(count: usize, noun: &str) -> String {
    let count_text = report::group_digits(count as u64);
    match count {
        1 => format!("{count_text} {noun}"),
        _ => format!("{count_text} {noun}s"),
    }
}

fn figures(plan: &Plan, reference: &Measured) -> Vec<Figure> {
    let mut figures = Vec::new();
    for &clients in &plan.clients {
        let who = plural(clients, "client");
        per_encoding(plan, &mut figures, |e| {
            Figure::new(
                format!("create throughput, pods/s ({who}, {})", e.name()),
                Better::Higher,
                move |m| m.create(e, clients).per_second(),
                whole,
            )
        });
    }
    list_figures(plan, reference, &mut figures);
    watch_figures(plan, &mut figures);
    if let Some(watchers) = plan.floor_watchers() {
        let w = report::group_digits(watchers as u64);
        for p in [50.0, 99.0] {
            figures.push(latency_ms(
                format!("raw TCP floor p{p:.0} ms (same JSON event, {w} connections, no HTTP)"),
                move |m| floor_of(m).latencies.percentile(p),
            ));
        }
        figures.push(Figure::new(
            format!("raw TCP floor sender CPU µs per event ({w} connections)"),
            Better::Neither,
            move |m| {
                let point = floor_of(m);
                point.server_cpu.as_secs_f64() * 1e6 / point.delivered.max(1) as f64
            },
            one_decimal,
        ));
    }
    let pods = report::group_digits(reference.memory.pods as u64);
    figures.extend([
        Figure::new(
            format!("API server RSS with {pods} pods, MiB"),
            Better::Lower,
            |m| m.memory.rss as f64,
            mib,
        ),
        Figure::new(
            format!("JSON size of the {pods} pods, MiB"),
            Better::Neither,
            |m| m.memory.json_bytes as f64,
            mib,
        ),
        Figure::new(
            "API server RSS / pods' JSON size".into(),
            Better::Lower,
            |m| m.memory.ratio(),
            two_decimals,
        ),
    ]);
    figures
}

/// Per kind of list: p50 and p99 in each encoding, and for the cached
/// lists (the consistent ones answer the same bytes) the answer's size.
fn list_figures(plan: &Plan, reference: &Measured, figures: &mut Vec<Figure>) {
    for kind in ListKind::ALL {
        let items = reference.list(plan.encodings[0], kind).items;
        let what = list_name(kind, items);
        for p in [50.0, 99.0] {
            per_encoding(plan, figures, |e| {
                latency_ms(format!("{what}, p{p:.0} ms ({})", e.name()), move |m| {
                    m.list(e, kind).latencies.percentile(p)
                })
            });
        }
        if kind.cached {
            per_encoding(plan, figures, |e| {
                Figure::new(
                    format!("{what}, answer KiB ({})", e.name()),
                    Better::Lower,
                    move |m| m.list(e, kind).bytes as f64,
                    kib,
                )
            });
        }
    }
}

/// Per watch point: p50 and p99 in each encoding; at the largest watcher
/// count the first watcher and the CPU spent per event too; then the
/// size of one event.
fn watch_figures(plan: &Plan, figures: &mut Vec<Figure>) {
    let largest = plan.watchers.iter().copied().max();
    for &transport in &plan.watch_transports {
        for &watchers in &plan.watchers {
            let setup = move |encoding| WatchSetup {
                transport,
                encoding,
                watchers,
            };
            let at = format!("{}, {}", plural(watchers, "watcher"), transport.name());
            for p in [50.0, 99.0] {
                per_encoding(plan, figures, |e| {
                    latency_ms(
                        format!("watch write->event p{p:.0} ms ({at}, {})", e.name()),
                        move |m| m.watch(setup(e)).latencies.percentile(p),
                    )
                });
            }
            if Some(watchers) != largest {
                continue;
            }
            for p in [50.0, 99.0] {
                per_encoding(plan, figures, |e| {
                    latency_ms(
                        format!("watch write->first watcher p{p:.0} ms ({at}, {})", e.name()),
                        move |m| m.watch(setup(e)).first_watcher.percentile(p),
                    )
                });
            }
            per_encoding(plan, figures, |e| {
                Figure::new(
                    format!("server CPU µs per watch event ({at}, {})", e.name()),
                    Better::Lower,
                    move |m| {
                        let point = m.watch(setup(e));
                        point.server_cpu.as_secs_f64() * 1e6 / point.delivered.max(1) as f64
                    },
                    one_decimal,
                )
            });
            per_encoding(plan, figures, |e| {
                Figure::new(
                    format!("bench client CPU µs per watch event ({at}, {})", e.name()),
                    Better::Neither,
                    move |m| {
                        let point = m.watch(setup(e));
                        point.client_cpu.as_secs_f64() * 1e6 / point.delivered.max(1) as f64
                    },
                    one_decimal,
                )
            });
        }
    }
    let Some(&first) = plan.watch_points().first() else {
        return;
    };
    per_encoding(plan, figures, |e| {
        let setup = WatchSetup {
            encoding: e,
            ..first
        };
        Figure::new(
            format!("watch event size, bytes ({})", e.name()),
            Better::Lower,
            move |m| {
                let point = m.watch(setup);
                point.event_bytes as f64 / point.delivered.max(1) as f64
            },
            whole,
        )
    });
}

/// The floor of a run whose plan has one (`workloads` measures it then).
fn floor_of(m: &Measured) -> &WatchPoint {
    m.floor
        .as_ref()
        .expect("a run with an HTTP/1.1 JSON point measures the floor")
}

fn list_name(kind: ListKind, items: usize) -> String {
    let items = report::group_digits(items as u64);
    let what = if kind.selector {
        format!("list {items} pods by label")
    } else {
        format!("list {items} pods")
    };
    let how = if kind.cached { "rv=0" } else { "consistent" };
    format!("{what}, {how}")
}

/// The protobuf ÷ JSON ratio of `figure` on one backend, if it has one.
fn encoding_ratio(figure: &Figure, measured: Option<&Measured>) -> String {
    match (&figure.json, measured) {
        (None, _) => String::new(),
        (Some(_), None) => "-".into(),
        (Some(json), Some(m)) => report::ratio((figure.value)(m), json(m)),
    }
}

/// Prints the table, the targets and the notes.
pub fn print(plan: &Plan, in_process: &Measured, over_etcd: Option<&Measured>) {
    let backends = [Backend::InProcess.label(), Backend::Etcd.label()];
    let mut table = Table::new(&["figure"]);
    table.group("skiff up", &[backends[0], backends[1], "ratio", "better"]);
    if plan.both_encodings() {
        table.group("protobuf ÷ JSON", &backends);
    }
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
        if plan.both_encodings() {
            row.push(encoding_ratio(&figure, Some(in_process)));
            row.push(encoding_ratio(&figure, over_etcd));
        }
        table.row(row);
    }
    table.print();
    println!(
        "ratio: in-process store ÷ etcd; for rows marked `higher` a ratio above 1 favours the in-process store, for rows marked `lower` a ratio below 1 does."
    );
    if plan.both_encodings() {
        println!(
            "protobuf ÷ JSON: a protobuf row's value over the JSON row's above it, on the same backend; for `higher` rows above 1 favours protobuf, for `lower` rows below 1 does."
        );
    }
    println!(
        "rv=0: resourceVersion=0 (may be served from the API server's cache); consistent: no resourceVersion (read from the store); by label: {}; answer KiB: the whole list as answered; event size: a pod's watch event without the stream's framing.",
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
    let cached_full = ListKind {
        selector: false,
        cached: true,
    };
    for &encoding in &plan.encodings {
        judge(
            format!(
                "list of {} pods from the cache (rv=0, {}), p99 < {} ms",
                report::group_digits(LIST_TARGET_PODS as u64),
                encoding.name(),
                LIST_TARGET.as_millis()
            ),
            backends
                .iter()
                .map(|(label, m)| {
                    let point = m.list(encoding, cached_full);
                    let p99 = point.latencies.percentile(99.0);
                    let value = format!("{label} {} ms", report::millis(p99));
                    if point.items < LIST_TARGET_PODS {
                        return format!("{value} (not judged: {} pods listed)", point.items);
                    }
                    format!("{value} {}", verdict(p99 < LIST_TARGET))
                })
                .collect(),
        );
    }
    for &transport in &plan.watch_transports {
        for &encoding in &plan.encodings {
            let setup = WatchSetup {
                transport,
                encoding,
                watchers: WATCH_TARGET_WATCHERS,
            };
            judge(
                format!(
                    "{} watchers all served, p99 < {} ms ({}, {})",
                    report::group_digits(WATCH_TARGET_WATCHERS as u64),
                    WATCH_TARGET.as_millis(),
                    transport.name(),
                    encoding.name()
                ),
                backends
                    .iter()
                    .map(|(label, m)| watch_verdict(label, m, setup))
                    .collect(),
            );
        }
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

/// The watch target judged on one backend's point `setup`, if measured.
fn watch_verdict(label: &str, m: &Measured, setup: WatchSetup) -> String {
    let Some(point) = m.watches.iter().find(|p| {
        p.watchers == setup.watchers
            && p.transport == setup.transport
            && p.encoding == setup.encoding
    }) else {
        return format!("{label} not judged (no point with {WATCH_TARGET_WATCHERS} watchers)");
    };
    let p99 = point.latencies.percentile(99.0);
    let complete = point.delivered == point.expected;
    let floor = match &m.floor {
        Some(floor)
            if setup.transport == WatchTransport::Http1 && setup.encoding == Encoding::Json =>
        {
            format!(
                " (the raw TCP floor: {} ms)",
                report::millis(floor.latencies.percentile(99.0))
            )
        }
        _ => String::new(),
    };
    format!(
        "{label} {} ms {}{floor}",
        report::millis(p99),
        verdict(complete && p99 < WATCH_TARGET)
    )
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
                    plural(c.clients, "client"),
                    c.encoding.name(),
                    report::millis(c.latencies.percentile(50.0)),
                    report::millis(c.latencies.percentile(99.0))
                )
            })
            .collect();
        let opened: Vec<String> = m
            .watches
            .iter()
            .map(|w| {
                format!(
                    "{} {} {} (x {} writes) in {} ms",
                    report::group_digits(w.watchers as u64),
                    w.transport.name(),
                    w.encoding.name(),
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
            "{label}: ready in {:.1} s, whole run {:.1} s, load average after {}; create p50/p99 ms: {}; watches opened: {}; API server RSS at start {}{etcd_rss}",
            m.started_in.as_secs_f64(),
            m.total.as_secs_f64(),
            m.load_after,
            creates.join(", "),
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

/// The create and watch points with request metrics on (the full
/// in-process run) and off, side by side: what recording costs.
pub fn print_metrics_overhead(plan: &Plan, on: &Measured, off: &Measured) {
    let mut table = Table::new(&["figure"]);
    table.group(
        "in-process store",
        &["metrics on", "metrics off", "on ÷ off", "better"],
    );
    let mut row = |name: String, better: Better, on: f64, off: f64, format: fn(f64) -> String| {
        table.row(vec![
            name,
            format(on),
            format(off),
            report::ratio(on, off),
            better.label().to_string(),
        ]);
    };
    for &clients in &plan.clients {
        for &encoding in &plan.encodings {
            let (a, b) = (on.create(encoding, clients), off.create(encoding, clients));
            let what = format!("{}, {}", plural(clients, "client"), encoding.name());
            row(
                format!("creates/s, {what}"),
                Better::Higher,
                a.per_second(),
                b.per_second(),
                whole,
            );
            for p in [50.0, 99.0] {
                row(
                    format!("create p{p} ms, {what}"),
                    Better::Lower,
                    a.latencies.percentile(p).as_secs_f64() * 1e3,
                    b.latencies.percentile(p).as_secs_f64() * 1e3,
                    ms,
                );
            }
        }
    }
    for setup in plan.watch_points() {
        let (a, b) = (on.watch(setup), off.watch(setup));
        let what = format!(
            "{} over {}, {}",
            plural(setup.watchers, "watcher"),
            setup.transport.name(),
            setup.encoding.name()
        );
        for p in [50.0, 99.0] {
            row(
                format!("watch event p{p} ms, {what}"),
                Better::Lower,
                a.latencies.percentile(p).as_secs_f64() * 1e3,
                b.latencies.percentile(p).as_secs_f64() * 1e3,
                ms,
            );
        }
    }
    table.print();
    println!(
        "on ÷ off: the run with request metrics (the in-process column above) over a run of the same points, after the same load, with `--request-metrics=false`, one after the other on this machine; one run each, so the ratio also holds the two runs' noise."
    );
}
