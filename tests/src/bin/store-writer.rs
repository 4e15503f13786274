//! `store-writer`: opens a store and puts new keys from concurrent tasks until it is
//! killed, printing `ack <key> <revision>` after each acknowledged put. The crash tests
//! SIGKILL it and check every printed ack survived; it is not a benchmark.

use std::convert::Infallible;
use std::path::PathBuf;

use anyhow::{anyhow, Context, Result};
use clap::Parser;
use skiff_store::{PutRequest, Store, StoreConfig};
use skiff_tests::line_printer::LinePrinter;
use skiff_tests::writer_protocol::{
    check_prefix, value_for_key, writer_key, Ack, WriterLine, DEFAULT_VALUE_SIZE,
};
use tokio::task::JoinSet;

#[derive(Debug, Parser)]
#[command(about = "Put keys into a skiff store forever, printing each acknowledged put")]
struct Args {
    /// The store's data directory (created if absent).
    #[arg(
        long,
        env = "SKIFF_WRITER_DATA_DIR",
        default_value = "store-writer.data"
    )]
    data_dir: PathBuf,
    /// Concurrent put loops; their puts share log syncs.
    #[arg(long, env = "SKIFF_WRITER_WRITERS", default_value_t = 8,
          value_parser = clap::value_parser!(u16).range(1..))]
    writers: u16,
    /// Keys are `{prefix}{task}/{seq:08}`; no whitespace.
    #[arg(long, env = "SKIFF_WRITER_PREFIX", default_value = "/store-writer/")]
    prefix: String,
    /// Value bytes per put: the key repeated (at least the whole key).
    #[arg(long, env = "SKIFF_WRITER_VALUE_SIZE", default_value_t = DEFAULT_VALUE_SIZE)]
    value_size: usize,
    /// Log segment size in bytes (small values make the log roll and
    /// release segments while the writer runs).
    #[arg(long, env = "SKIFF_WRITER_WAL_SEGMENT_SIZE", default_value_t = 64 << 20)]
    wal_segment_size: u64,
    /// How often the state is flushed so that log segments can be released.
    #[arg(long, env = "SKIFF_WRITER_FLUSH_INTERVAL_MS", default_value_t = 1000)]
    flush_interval_ms: u64,
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    check_prefix(&args.prefix)?;
    let mut config = StoreConfig::new(&args.data_dir);
    config.wal_segment_size = args.wal_segment_size;
    config.flush_interval = std::time::Duration::from_millis(args.flush_interval_ms);
    let store = Store::open(config)
        .await
        .with_context(|| format!("opening the store in {}", args.data_dir.display()))?;
    let stdout = LinePrinter::start();
    let revision = store.kv().current_revision();
    stdout.print(WriterLine::Ready { revision }).await?;

    let mut loops = JoinSet::new();
    for task in 0..usize::from(args.writers) {
        let (store, stdout, prefix) = (store.clone(), stdout.clone(), args.prefix.clone());
        loops.spawn(put_forever(store, stdout, prefix, task, args.value_size));
    }
    // The loops end only by failing; the first failure ends the process.
    match loops.join_next().await {
        Some(Ok(Err(err))) => Err(err),
        Some(Ok(Ok(never))) => match never {},
        Some(Err(join)) => Err(anyhow!(join).context("a put loop panicked")),
        None => Ok(()),
    }
}

/// Puts `{prefix}{task}/0`, `/1`, ... one at a time; each is printed only once acknowledged.
async fn put_forever(
    store: Store,
    stdout: LinePrinter,
    prefix: String,
    task: usize,
    value_size: usize,
) -> Result<Infallible> {
    for seq in 0.. {
        let key = writer_key(&prefix, task, seq);
        let value = value_for_key(key.as_bytes(), value_size);
        let resp = store
            .put(PutRequest::new(key.clone(), value))
            .await
            .with_context(|| format!("putting {key}"))?;
        let mod_revision = resp.header.revision;
        stdout
            .print(WriterLine::Ack(Ack { key, mod_revision }))
            .await?;
    }
    unreachable!("a u64 sequence of puts does not run out")
}
