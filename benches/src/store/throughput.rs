//! Put throughput with concurrent writers: each writer task puts to its own
//! fresh keys for a fixed time. Puts that arrive together should share one
//! WAL fdatasync (group commit), which entries/sync makes visible.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use skiff_store::{PutRequest, Store};

use super::compare::{self, Run};
use super::{random_value, Plan, SyncCounters};
use crate::report::{self, micros, Latencies, Table};

/// One number of writers for `plan.duration`.
pub struct Point {
    puts: u64,
    elapsed: Duration,
    latencies: Latencies,
    /// The leader's: how many entries shared each of its fdatasyncs.
    syncs: SyncCounters,
}

impl Point {
    fn puts_per_second(&self) -> u64 {
        report::per_second(self.puts, self.elapsed)
    }
}

/// One point per entry of `plan.writers`, writing to the leader.
pub async fn measure(store: &Store, plan: &Plan) -> Result<Vec<Point>> {
    let values: Arc<Vec<Vec<u8>>> = Arc::new((0..256).map(|_| random_value()).collect());
    let mut points = Vec::with_capacity(plan.writers.len());
    for &writers in &plan.writers {
        points.push(run_point(store, writers, plan.duration, &values).await?);
    }
    Ok(points)
}

/// Prints the section, a column group per member count; returns its
/// summary.
pub fn report(plan: &Plan, runs: &[Run<Vec<Point>>]) -> String {
    report::section(&format!(
        "Put throughput: concurrent writers to the leader, {:?} per point, {}-byte values, fresh keys per point",
        plan.duration,
        super::VALUE_LEN
    ));
    let mut table = Table::new(&["writers"]);
    compare::add_groups(
        &mut table,
        runs,
        &["puts/s", "p50 µs", "p99 µs", "max µs", "entries/sync"],
        &["puts/s", "p50", "p99"],
    );
    for (i, &writers) in plan.writers.iter().enumerate() {
        let mut row = vec![report::group_digits(writers as u64)];
        row.extend(compare::row_cells(
            runs,
            |points| {
                let p = &points[i];
                vec![
                    report::group_digits(p.puts_per_second()),
                    micros(p.latencies.percentile(50.0)),
                    micros(p.latencies.percentile(99.0)),
                    micros(p.latencies.max()),
                    format!("{:.1}", p.syncs.entries_per_sync()),
                ]
            },
            |points| {
                let p = &points[i];
                vec![
                    p.puts_per_second() as f64,
                    p.latencies.percentile(50.0).as_secs_f64(),
                    p.latencies.percentile(99.0).as_secs_f64(),
                ]
            },
        ));
        table.row(row);
    }
    table.print();
    println!("(entries/sync: entries per fdatasync of the leader's WAL, i.e. how much group commit shares)");
    let summary = plan
        .writers
        .iter()
        .enumerate()
        .map(|(i, writers)| {
            format!(
                "{writers} w: {}",
                compare::across(runs, |points| format!(
                    "{} ({:.1})",
                    report::group_digits(points[i].puts_per_second()),
                    points[i].syncs.entries_per_sync()
                ))
            )
        })
        .collect::<Vec<_>>()
        .join("; ");
    format!(
        "put throughput, puts/s (entries/sync) with {} members: {summary}",
        compare::counts(runs)
    )
}

async fn run_point(
    store: &Store,
    writers: usize,
    duration: Duration,
    values: &Arc<Vec<Vec<u8>>>,
) -> Result<Point> {
    let before = SyncCounters::read(store);
    let started = Instant::now();
    let deadline = started + duration;
    let tasks: Vec<_> = (0..writers)
        .map(|w| {
            let store = store.clone();
            let values = Arc::clone(values);
            tokio::spawn(async move { write_until(store, writers, w, deadline, values).await })
        })
        .collect();
    let mut nanos = Vec::new();
    for task in tasks {
        nanos.extend(task.await.context("a writer task panicked")??);
    }
    let elapsed = started.elapsed();
    let syncs = SyncCounters::read(store).since(before);
    Ok(Point {
        puts: nanos.len() as u64,
        elapsed,
        latencies: Latencies::from_nanos(nanos),
        syncs,
    })
}

/// One writer: puts until the deadline; returns each put's latency in ns.
async fn write_until(
    store: Store,
    writers: usize,
    writer: usize,
    deadline: Instant,
    values: Arc<Vec<Vec<u8>>>,
) -> Result<Vec<u64>> {
    let mut nanos = Vec::new();
    let mut i = 0usize;
    while Instant::now() < deadline {
        let key = format!("/bench/tput/{writers}/{writer:04}/{i:08}");
        let value = values[(writer + i) % values.len()].clone();
        let issued = Instant::now();
        store
            .put(PutRequest::new(key.into_bytes(), value))
            .await
            .with_context(|| format!("a put failed with {writers} concurrent writers"))?;
        nanos.push(report::duration_nanos(issued.elapsed()));
        i += 1;
    }
    Ok(nanos)
}
