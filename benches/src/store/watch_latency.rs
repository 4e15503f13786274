//! Watch fan-out latency: W watchers on one prefix, one writer putting M
//! values; each value carries the time its put was issued, and each watcher
//! records (event received - put issued). Every watcher must see every put,
//! once and in revision order.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use skiff_store::mvcc::prefix_end;
use skiff_store::{PutRequest, Store, WatchRequest, Watcher};
use tokio::sync::watch;

use super::compare::{self, Run};
use super::{random_value, Plan};
use crate::report::{self, micros, millis, Latencies, Table};

const PREFIX: &[u8] = b"/bench/watch/";
/// How long deliveries may make no progress before the point is declared
/// incomplete.
const STALL_TIMEOUT: Duration = Duration::from_secs(20);

/// What one watcher saw.
#[derive(Default)]
struct WatcherLog {
    /// Event received - put issued, per event, in ns.
    latencies: Vec<u64>,
    events: u64,
    /// Events whose revision was not above the previous one.
    out_of_order: u64,
    /// Values without a send time (not written by this benchmark).
    malformed: u64,
    /// The watch ended or was canceled before the run was over.
    ended: bool,
    /// When the last event arrived, in ns on the shared clock.
    last_received: u64,
}

/// One number of watchers, all on the leader.
pub struct Point {
    watchers: usize,
    puts: usize,
    delivered: u64,
    latencies: Latencies,
    put_latencies: Latencies,
    /// Last put answered -> last event received.
    drain: Duration,
    /// Deliveries per second from the first put to the last delivery.
    delivery_rate: u64,
    max_unsynced: usize,
    out_of_order: u64,
    malformed: u64,
    ended: u64,
}

impl Point {
    fn expected(&self) -> u64 {
        (self.watchers * self.puts) as u64
    }

    fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        if self.delivered != self.expected() {
            problems.push(format!(
                "{} watchers x {} puts should deliver {} events, but {} were delivered",
                self.watchers,
                self.puts,
                self.expected(),
                self.delivered
            ));
        }
        if self.out_of_order > 0 {
            problems.push(format!(
                "{} events arrived out of revision order or twice",
                self.out_of_order
            ));
        }
        if self.malformed > 0 {
            problems.push(format!(
                "{} events carried a value this benchmark did not write",
                self.malformed
            ));
        }
        if self.ended > 0 {
            problems.push(format!(
                "{} watches ended (canceled or closed) before the run was over",
                self.ended
            ));
        }
        problems
    }
}

/// One point per entry of `plan.watchers`, watchers and writer on the
/// leader.
pub async fn measure(store: &Store, plan: &Plan) -> Result<Vec<Point>> {
    let mut points = Vec::with_capacity(plan.watchers.len());
    for &watchers in &plan.watchers {
        points.push(run_point(store, watchers, plan).await?);
    }
    Ok(points)
}

/// Prints the section, a column group per member count, and every
/// incomplete delivery; returns its summary.
pub fn report(plan: &Plan, runs: &[Run<Vec<Point>>]) -> String {
    report::section(&format!(
        "Watch latency: put issued -> event received, watchers on the leader on one prefix, {} puts of {} bytes every {:?}",
        plan.watch_puts,
        super::VALUE_LEN,
        plan.watch_interval
    ));
    let mut table = Table::new(&["watchers"]);
    compare::add_groups(
        &mut table,
        runs,
        &["delivered", "p50 µs", "p99 µs", "put p50 µs", "drain ms"],
        &["p50", "p99"],
    );
    for (i, &watchers) in plan.watchers.iter().enumerate() {
        let mut row = vec![report::group_digits(watchers as u64)];
        row.extend(compare::row_cells(
            runs,
            |points| {
                let p = &points[i];
                vec![
                    report::group_digits(p.delivered),
                    micros(p.latencies.percentile(50.0)),
                    micros(p.latencies.percentile(99.0)),
                    micros(p.put_latencies.percentile(50.0)),
                    millis(p.drain),
                ]
            },
            |points| {
                let p = &points[i];
                vec![
                    p.latencies.percentile(50.0).as_secs_f64(),
                    p.latencies.percentile(99.0).as_secs_f64(),
                ]
            },
        ));
        table.row(row);
    }
    table.print();
    println!(
        "(delivered: of {} puts x watchers; drain: last put answered -> last event received; put p50: the writer's own put latency meanwhile)",
        plan.watch_puts
    );
    let complete = print_notes(runs);
    let summary = plan
        .watchers
        .iter()
        .enumerate()
        .map(|(i, watchers)| {
            let percentile =
                |p: f64| compare::across(runs, |points| micros(points[i].latencies.percentile(p)));
            format!(
                "{watchers} w: p50 {} µs, p99 {} µs",
                percentile(50.0),
                percentile(99.0)
            )
        })
        .collect::<Vec<_>>()
        .join("; ");
    let verdict = if complete {
        "every event delivered"
    } else {
        "INCOMPLETE, see errors above"
    };
    format!(
        "watch latency with {} members: {summary} ({verdict})",
        compare::counts(runs)
    )
}

/// Prints, per run and point, the delivery rate, any watchers that fell
/// behind, and every problem; returns whether every event was delivered.
fn print_notes(runs: &[Run<Vec<Point>>]) -> bool {
    let mut complete = true;
    for run in runs {
        let label = compare::label(run.members);
        let rates: Vec<String> = run
            .measured
            .iter()
            .map(|p| {
                let mut note = format!(
                    "{} w: {}",
                    report::group_digits(p.watchers as u64),
                    report::group_digits(p.delivery_rate)
                );
                if p.max_unsynced > 0 {
                    note.push_str(&format!(
                        " ({} fell behind their buffer)",
                        report::group_digits(p.max_unsynced as u64)
                    ));
                }
                note
            })
            .collect();
        println!(
            "deliveries/s (first put -> last event), {label}: {}",
            rates.join("; ")
        );
        for point in &run.measured {
            for problem in point.problems() {
                complete = false;
                println!("ERROR ({label}): {problem}");
            }
        }
    }
    complete
}

async fn run_point(store: &Store, watchers: usize, plan: &Plan) -> Result<Point> {
    let clock = Instant::now();
    let delivered = Arc::new(AtomicU64::new(0));
    let (stop, stop_rx) = watch::channel(false);
    // Every watch exists before the first put: none may miss an event.
    let mut watches = Vec::with_capacity(watchers);
    for _ in 0..watchers {
        let req = WatchRequest {
            key: PREFIX.to_vec(),
            range_end: prefix_end(PREFIX),
            ..Default::default()
        };
        watches.push(store.watch(req).context("creating a watch")?);
    }
    let tasks: Vec<_> = watches
        .into_iter()
        .map(|w| {
            let delivered = Arc::clone(&delivered);
            let stop = stop_rx.clone();
            let expected = plan.watch_puts as u64;
            tokio::spawn(watch_events(w, clock, expected, delivered, stop))
        })
        .collect();
    // Let every task reach its first next() before writing.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let (synced, unsynced) = store.watcher_counts();
    if synced != watchers || unsynced != 0 {
        bail!("expected {watchers} synced watchers before the first put, the store has {synced} synced and {unsynced} unsynced");
    }

    let writes = write_values(store, watchers, plan, clock).await?;
    let expected = (watchers * plan.watch_puts) as u64;
    wait_for_deliveries(&delivered, expected).await;
    stop.send_replace(true);

    let mut logs = Vec::with_capacity(watchers);
    for task in tasks {
        logs.push(task.await.context("a watcher task panicked")?);
    }
    Ok(summarize(watchers, plan.watch_puts, writes, logs))
}

/// What the writer saw.
struct Writes {
    put_latencies: Latencies,
    first_issued: u64,
    last_answered: u64,
    max_unsynced: usize,
}

async fn write_values(
    store: &Store,
    watchers: usize,
    plan: &Plan,
    clock: Instant,
) -> Result<Writes> {
    let mut put_latencies = Vec::with_capacity(plan.watch_puts);
    let mut max_unsynced = 0;
    let mut last_answered = 0;
    let first_issued = report::duration_nanos(clock.elapsed());
    for i in 0..plan.watch_puts {
        let key = format!("/bench/watch/{watchers}/{i:06}");
        let mut value = random_value();
        let issued = Instant::now();
        let issued_at = report::duration_nanos(issued.duration_since(clock));
        value[..8].copy_from_slice(&issued_at.to_le_bytes());
        store
            .put(PutRequest::new(key.into_bytes(), value))
            .await
            .with_context(|| format!("a put failed with {watchers} watchers"))?;
        put_latencies.push(issued.elapsed());
        last_answered = report::duration_nanos(clock.elapsed());
        max_unsynced = max_unsynced.max(store.watcher_counts().1);
        tokio::time::sleep(plan.watch_interval).await;
    }
    Ok(Writes {
        put_latencies: Latencies::from_durations(&put_latencies),
        first_issued,
        last_answered,
        max_unsynced,
    })
}

/// Waits until every event is delivered, or until deliveries stall.
async fn wait_for_deliveries(delivered: &AtomicU64, expected: u64) {
    let mut last = delivered.load(Ordering::Relaxed);
    let mut last_progress = Instant::now();
    while last < expected && last_progress.elapsed() < STALL_TIMEOUT {
        tokio::time::sleep(Duration::from_millis(5)).await;
        let now = delivered.load(Ordering::Relaxed);
        if now != last {
            last = now;
            last_progress = Instant::now();
        }
    }
}

/// One watcher: records every event until it has `expected` or is stopped.
async fn watch_events(
    mut watcher: Watcher,
    clock: Instant,
    expected: u64,
    delivered: Arc<AtomicU64>,
    mut stop: watch::Receiver<bool>,
) -> WatcherLog {
    let mut log = WatcherLog {
        latencies: Vec::with_capacity(expected as usize),
        ..Default::default()
    };
    let mut last_revision = 0;
    while log.events < expected {
        let response = tokio::select! {
            biased;
            response = watcher.next() => response,
            _ = stop.changed() => break,
        };
        let Some(response) = response.filter(|r| !r.canceled) else {
            log.ended = true;
            break;
        };
        let received = report::duration_nanos(clock.elapsed());
        for event in &response.events {
            if event.kv.mod_revision <= last_revision {
                log.out_of_order += 1;
            }
            last_revision = event.kv.mod_revision;
            match issued_at(&event.kv.value) {
                Some(issued) => log.latencies.push(received.saturating_sub(issued)),
                None => log.malformed += 1,
            }
        }
        log.events += response.events.len() as u64;
        log.last_received = received;
        delivered.fetch_add(response.events.len() as u64, Ordering::Relaxed);
    }
    log
}

fn issued_at(value: &[u8]) -> Option<u64> {
    let stamp: [u8; 8] = value.get(..8)?.try_into().ok()?;
    (value.len() == super::VALUE_LEN).then(|| u64::from_le_bytes(stamp))
}

fn summarize(watchers: usize, puts: usize, writes: Writes, logs: Vec<WatcherLog>) -> Point {
    let mut nanos = Vec::with_capacity(watchers * puts);
    let (mut delivered, mut out_of_order, mut malformed, mut ended) = (0, 0, 0, 0);
    let mut last_received = 0;
    for log in logs {
        nanos.extend(log.latencies);
        delivered += log.events;
        out_of_order += log.out_of_order;
        malformed += log.malformed;
        ended += u64::from(log.ended);
        last_received = last_received.max(log.last_received);
    }
    let span = Duration::from_nanos(last_received.saturating_sub(writes.first_issued));
    Point {
        watchers,
        puts,
        delivered,
        latencies: Latencies::from_nanos(nanos),
        put_latencies: writes.put_latencies,
        drain: Duration::from_nanos(last_received.saturating_sub(writes.last_answered)),
        delivery_rate: report::per_second(delivered, span),
        max_unsynced: writes.max_unsynced,
        out_of_order,
        malformed,
        ended,
    }
}
