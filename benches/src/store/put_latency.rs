//! Durable put latency from one client: sequential puts, each waiting for
//! its WAL fdatasync (on a quorum of members, in a cluster), so every sample
//! is one full write path with no batching to hide behind.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use skiff_store::{PutRequest, Store};

use super::compare::{self, Run};
use super::{random_value, Plan, SyncCounters};
use crate::report::{self, micros, Latencies, Table};

/// One writer's sequential puts against one store.
pub struct Measurement {
    latencies: Latencies,
    elapsed: Duration,
    /// The leader's: how many entries shared each of its fdatasyncs.
    syncs: SyncCounters,
}

impl Measurement {
    fn puts_per_second(&self) -> u64 {
        report::per_second(self.latencies.len() as u64, self.elapsed)
    }
}

/// Warm-up puts, then `plan.puts` timed ones, to the leader.
pub async fn measure(store: &Store, plan: &Plan) -> Result<Measurement> {
    let values: Vec<Vec<u8>> = (0..64).map(|_| random_value()).collect();
    for i in 0..plan.warmup {
        put(
            store,
            format!("/bench/warmup/{i:08}"),
            &values[i % values.len()],
        )
        .await?;
    }

    let before = SyncCounters::read(store);
    let mut samples = Vec::with_capacity(plan.puts);
    let started = Instant::now();
    for i in 0..plan.puts {
        let key = format!("/bench/lat/{i:08}");
        samples.push(put(store, key, &values[i % values.len()]).await?);
    }
    Ok(Measurement {
        elapsed: started.elapsed(),
        syncs: SyncCounters::read(store).since(before),
        latencies: Latencies::from_durations(&samples),
    })
}

/// A figure read from the latency samples.
type LatencyFigure = fn(&Latencies) -> Duration;

/// Prints the section, one column per member count; returns its summary.
pub fn report(plan: &Plan, runs: &[Run<Measurement>]) -> String {
    report::section(&format!(
        "Put latency: 1 writer to the leader, {} sequential durable puts of {} bytes (after {} warm-up puts)",
        report::group_digits(plan.puts as u64),
        super::VALUE_LEN,
        plan.warmup
    ));
    let headers = compare::figure_headers(runs);
    let mut table = Table::new(&headers.iter().map(String::as_str).collect::<Vec<_>>());
    let rate = |m: &Measurement| m.puts_per_second() as f64;
    let rate_cell = |m: &Measurement| report::group_digits(m.puts_per_second());
    table.row(figure_row("puts/s", runs, rate_cell, rate));
    let timed: [(&str, LatencyFigure); 5] = [
        ("mean µs", Latencies::mean),
        ("p50 µs", |l| l.percentile(50.0)),
        ("p99 µs", |l| l.percentile(99.0)),
        ("p99.9 µs", |l| l.percentile(99.9)),
        ("max µs", Latencies::max),
    ];
    for (name, figure) in timed {
        let cell = |m: &Measurement| micros(figure(&m.latencies));
        let value = |m: &Measurement| figure(&m.latencies).as_secs_f64();
        table.row(figure_row(name, runs, cell, value));
    }
    let mut syncs = vec!["entries/sync (leader)".to_string()];
    syncs.extend(compare::row_cells(
        runs,
        |m| vec![format!("{:.2}", m.syncs.entries_per_sync())],
        |_| vec![],
    ));
    // No ratio: entries per sync is a count, not a cost.
    syncs.resize(headers.len(), String::new());
    table.row(syncs);
    table.print();
    let percentile = |p: f64| compare::across(runs, |m| micros(m.latencies.percentile(p)));
    format!(
        "put latency (1 writer), {} members: p50 {} µs, p99 {} µs, p99.9 {} µs over {} durable puts each",
        compare::counts(runs),
        percentile(50.0),
        percentile(99.0),
        percentile(99.9),
        report::group_digits(plan.puts as u64),
    )
}

/// One figure: its name, its cell per run, its ratio per later run.
fn figure_row(
    name: &str,
    runs: &[Run<Measurement>],
    cell: impl Fn(&Measurement) -> String,
    value: impl Fn(&Measurement) -> f64,
) -> Vec<String> {
    let mut row = vec![name.to_string()];
    row.extend(compare::row_cells(
        runs,
        |m| vec![cell(m)],
        |m| vec![value(m)],
    ));
    row
}

async fn put(store: &Store, key: String, value: &[u8]) -> Result<Duration> {
    let issued = Instant::now();
    store
        .put(PutRequest::new(key.into_bytes(), value.to_vec()))
        .await
        .context("a put failed during the put-latency run")?;
    Ok(issued.elapsed())
}
