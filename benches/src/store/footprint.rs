//! Footprint: a fresh single-member store loaded with N keys of 256 random
//! bytes, then its resident memory and disk use against the raw data size
//! (target: both within 2x), and how long a reopen takes to rebuild the
//! index from disk. One member only: members in one process share its RSS.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use skiff_store::{PutRequest, RangeRequest, Store};

use super::{open_store, random_value, Plan, SyncCounters};
use crate::machine::{self, DiskUsage};
use crate::report::{self, mib, Table};

const PREFIX: &str = "/bench/mem/";
/// Both memory and disk should stay within this multiple of the raw data.
const TARGET_RATIO: f64 = 2.0;

struct Load {
    raw_bytes: u64,
    elapsed: Duration,
    syncs: SyncCounters,
}

/// Memory of the loaded engine, read from /proc.
struct Memory {
    before_open: u64,
    open_empty: u64,
    loaded: u64,
    peak: Option<u64>,
}

impl Memory {
    /// What the engine holds: loaded minus the process before the store.
    fn engine(&self) -> u64 {
        self.loaded.saturating_sub(self.before_open)
    }
}

struct Reopen {
    elapsed: Duration,
    index_len: usize,
    count: i64,
}

pub async fn run(plan: &Plan, dir: &Path) -> Result<String> {
    report::section(&format!(
        "Footprint, 1 member only: {} keys with {}-byte random values, loaded by {} writers into a fresh store",
        report::group_digits(plan.keys),
        super::VALUE_LEN,
        plan.load_writers
    ));
    let before_open = machine::resident_bytes()?;
    let store = open_store(dir).await?;
    let open_empty = machine::resident_bytes()?;
    let load = load(&store, plan).await?;
    // The background flush makes sled durable and then releases the WAL.
    tokio::time::sleep(store.config().flush_interval * 3).await;
    let memory = Memory {
        before_open,
        open_empty,
        loaded: machine::resident_bytes()?,
        peak: machine::peak_resident_bytes(),
    };
    let disk_open = usage(dir)?;
    let index_len = store.kv().index_len();
    store.close().await.context("closing the loaded store")?;
    let disk_closed = usage(dir)?;
    let reopen = reopen(dir).await?;

    print_load(plan, &load);
    print_memory(&memory, load.raw_bytes);
    print_disk(&disk_open, &disk_closed, load.raw_bytes);
    println!(
        "reopen: {} ms to open {} keys (index rebuilt from disk: {} entries; range count {})",
        report::millis(reopen.elapsed),
        report::group_digits(plan.keys),
        report::group_digits(reopen.index_len as u64),
        report::group_digits(reopen.count as u64),
    );
    println!("(memory: glibc keeps what a closed store freed, so a reopen in this process is not measured again)");

    let expected = plan.keys as usize;
    if index_len != expected || reopen.index_len != expected || reopen.count as usize != expected {
        bail!(
            "the store lost keys: {expected} written, the index held {index_len} after the load and {} after reopening, a range counted {}",
            reopen.index_len,
            reopen.count
        );
    }
    let raw = load.raw_bytes;
    let disk = disk_open.total.allocated.max(disk_closed.total.allocated);
    let ratio = |bytes: u64| bytes as f64 / raw as f64;
    if plan.keys < 1_000_000 {
        println!("(the 2x target is set for 1 000 000 keys; fixed costs such as sled's cache and the open WAL segment weigh more in a smaller load)");
    }
    Ok(format!(
        "footprint ({} keys, raw {}): memory {} = {:.2}x raw ({}), disk {} = {:.2}x raw ({}); reopen {} ms",
        report::group_digits(plan.keys),
        mib(raw),
        mib(memory.engine()),
        ratio(memory.engine()),
        verdict(ratio(memory.engine())),
        mib(disk),
        ratio(disk),
        verdict(ratio(disk)),
        report::millis(reopen.elapsed),
    ))
}

/// Reopens the closed store: the index is rebuilt from sled.
async fn reopen(dir: &Path) -> Result<Reopen> {
    let started = Instant::now();
    let store = open_store(dir).await?;
    let elapsed = started.elapsed();
    let index_len = store.kv().index_len();
    let count = store
        .range(RangeRequest {
            count_only: true,
            ..RangeRequest::prefix(PREFIX.as_bytes())
        })
        .await
        .context("counting the loaded keys")?
        .count;
    store.close().await.context("closing the reopened store")?;
    Ok(Reopen {
        elapsed,
        index_len,
        count,
    })
}

fn print_memory(memory: &Memory, raw: u64) {
    let mut table = Table::new(&["memory (VmRSS)", "bytes", "x raw"]);
    table.row(row("before opening the store", memory.before_open, None));
    table.row(row("store open, empty", memory.open_empty, None));
    table.row(row("loaded, after the flush", memory.loaded, None));
    table.row(row("engine (loaded - before)", memory.engine(), Some(raw)));
    if let Some(peak) = memory.peak {
        table.row(row("peak while loading (VmHWM)", peak, None));
    }
    table.print();
    println!();
}

fn print_disk(open: &DirUsage, closed: &DirUsage, raw: u64) {
    let mut table = Table::new(&["disk", "files", "apparent", "allocated", "x raw (alloc.)"]);
    table.row(disk_row("open, after the flush: total", open.total, raw));
    table.row(disk_row("  wal/", open.wal, raw));
    table.row(disk_row("  db/ (sled)", open.db, raw));
    table.row(disk_row("after close: total", closed.total, raw));
    table.row(disk_row("  wal/", closed.wal, raw));
    table.row(disk_row("  db/ (sled)", closed.db, raw));
    table.print();
    println!();
}

fn verdict(ratio: f64) -> &'static str {
    if ratio <= TARGET_RATIO {
        "within the 2x target"
    } else {
        "ABOVE the 2x target"
    }
}

fn print_load(plan: &Plan, load: &Load) {
    let mut table = Table::new(&[
        "load",
        "keys",
        "raw data",
        "seconds",
        "puts/s",
        "entries/sync",
    ]);
    table.row(vec![
        format!("{} writers", plan.load_writers),
        report::group_digits(plan.keys),
        mib(load.raw_bytes),
        format!("{:.1}", load.elapsed.as_secs_f64()),
        report::group_digits(report::per_second(plan.keys, load.elapsed)),
        format!("{:.1}", load.syncs.entries_per_sync()),
    ]);
    table.print();
    println!();
}

fn row(label: &str, bytes: u64, raw: Option<u64>) -> Vec<String> {
    vec![
        label.to_string(),
        mib(bytes),
        raw.map(|raw| format!("{:.2}", bytes as f64 / raw as f64))
            .unwrap_or_default(),
    ]
}

fn disk_row(label: &str, usage: DiskUsage, raw: u64) -> Vec<String> {
    vec![
        label.to_string(),
        usage.files.to_string(),
        mib(usage.apparent),
        mib(usage.allocated),
        format!("{:.2}", usage.allocated as f64 / raw as f64),
    ]
}

struct DirUsage {
    total: DiskUsage,
    wal: DiskUsage,
    db: DiskUsage,
}

fn usage(dir: &Path) -> Result<DirUsage> {
    let measure = |p: &Path| {
        machine::disk_usage(p).with_context(|| format!("measuring the disk use of {}", p.display()))
    };
    Ok(DirUsage {
        total: measure(dir)?,
        wal: measure(&dir.join("wal"))?,
        db: measure(&dir.join("db"))?,
    })
}

/// Loads `plan.keys` keys with many writers, each taking the next key
/// number; returns the raw size (keys + values) and the time taken.
async fn load(store: &Store, plan: &Plan) -> Result<Load> {
    let next_key = Arc::new(AtomicU64::new(0));
    let before = SyncCounters::read(store);
    let started = Instant::now();
    let writers: Vec<_> = (0..plan.load_writers)
        .map(|_| {
            let store = store.clone();
            let next_key = Arc::clone(&next_key);
            let keys = plan.keys;
            tokio::spawn(async move { load_keys(store, next_key, keys).await })
        })
        .collect();
    let mut raw_bytes = 0;
    for writer in writers {
        raw_bytes += writer.await.context("a loading task panicked")??;
    }
    Ok(Load {
        raw_bytes,
        elapsed: started.elapsed(),
        syncs: SyncCounters::read(store).since(before),
    })
}

async fn load_keys(store: Store, next_key: Arc<AtomicU64>, keys: u64) -> Result<u64> {
    let progress_every = (keys / 10).max(1);
    let mut raw_bytes = 0;
    loop {
        let i = next_key.fetch_add(1, Ordering::Relaxed);
        if i >= keys {
            return Ok(raw_bytes);
        }
        let key = format!("{PREFIX}{i:010}").into_bytes();
        let value = random_value();
        raw_bytes += (key.len() + value.len()) as u64;
        store
            .put(PutRequest::new(key, value))
            .await
            .with_context(|| format!("loading key {i} failed"))?;
        if (i + 1).is_multiple_of(progress_every) {
            eprintln!("  loaded {} / {} keys", i + 1, keys);
        }
    }
}
