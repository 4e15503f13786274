//! Put throughput with concurrent writers: each writer task puts to its own
//! fresh keys for a fixed time. Puts that arrive together should share one
//! WAL fdatasync (group commit), which entries/sync makes visible.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use skiff_store::{PutRequest, Store};

use super::{random_value, Plan, SyncCounters};
use crate::report::{self, micros, Latencies, Table};

struct Point {
    writers: usize,
    puts: u64,
    elapsed: Duration,
    latencies: Latencies,
    syncs: SyncCounters,
}

pub async fn run(store: &Store, plan: &Plan) -> Result<Vec<String>> {
    report::section(&format!(
        "Put throughput: concurrent writers, {:?} per point, {}-byte values, fresh keys per point",
        plan.duration,
        super::VALUE_LEN
    ));
    let values: Arc<Vec<Vec<u8>>> = Arc::new((0..256).map(|_| random_value()).collect());
    let mut table = Table::new(&[
        "writers",
        "puts",
        "puts/s",
        "p50 µs",
        "p99 µs",
        "max µs",
        "syncs/s",
        "entries/sync",
    ]);
    let mut points = Vec::new();
    for &writers in &plan.writers {
        let point = run_point(store, writers, plan.duration, &values).await?;
        table.row(vec![
            report::group_digits(writers as u64),
            report::group_digits(point.puts),
            report::group_digits(report::per_second(point.puts, point.elapsed)),
            micros(point.latencies.percentile(50.0)),
            micros(point.latencies.percentile(99.0)),
            micros(point.latencies.max()),
            report::group_digits(report::per_second(point.syncs.syncs, point.elapsed)),
            format!("{:.1}", point.syncs.entries_per_sync()),
        ]);
        points.push(point);
    }
    table.print();
    let summary = points
        .iter()
        .map(|p| {
            format!(
                "{} w: {} puts/s ({:.1}/sync)",
                p.writers,
                report::group_digits(report::per_second(p.puts, p.elapsed)),
                p.syncs.entries_per_sync()
            )
        })
        .collect::<Vec<_>>()
        .join("; ");
    Ok(vec![format!("put throughput: {summary}")])
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
        writers,
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
