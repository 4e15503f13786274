//! Durable put latency from one client: sequential puts, each waiting for
//! its WAL fdatasync, so every sample is one full write path with no
//! batching to hide behind.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use skiff_store::{PutRequest, Store};

use super::{random_value, Plan, SyncCounters};
use crate::report::{self, micros, Latencies, Table};

pub async fn run(store: &Store, plan: &Plan) -> Result<String> {
    report::section(&format!(
        "Put latency: 1 writer, {} sequential durable puts of {} bytes (after {} warm-up puts)",
        report::group_digits(plan.puts as u64),
        super::VALUE_LEN,
        plan.warmup
    ));
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
    let elapsed = started.elapsed();
    let syncs = SyncCounters::read(store).since(before);
    let latencies = Latencies::from_durations(&samples);

    let mut table = Table::new(&[
        "writers",
        "puts",
        "puts/s",
        "mean µs",
        "p50 µs",
        "p99 µs",
        "p99.9 µs",
        "max µs",
        "entries/sync",
    ]);
    table.row(vec![
        "1".into(),
        report::group_digits(latencies.len() as u64),
        report::group_digits(report::per_second(plan.puts as u64, elapsed)),
        micros(latencies.mean()),
        micros(latencies.percentile(50.0)),
        micros(latencies.percentile(99.0)),
        micros(latencies.percentile(99.9)),
        micros(latencies.max()),
        format!("{:.2}", syncs.entries_per_sync()),
    ]);
    table.print();
    Ok(format!(
        "put latency (1 writer): p50 {} µs, p99 {} µs, p99.9 {} µs over {} durable puts",
        micros(latencies.percentile(50.0)),
        micros(latencies.percentile(99.0)),
        micros(latencies.percentile(99.9)),
        report::group_digits(plan.puts as u64),
    ))
}

async fn put(store: &Store, key: String, value: &[u8]) -> Result<Duration> {
    let issued = Instant::now();
    store
        .put(PutRequest::new(key.into_bytes(), value.to_vec()))
        .await
        .context("a put failed during the put-latency run")?;
    Ok(issued.elapsed())
}
