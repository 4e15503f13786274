//! `skiff-bench store`: the storage engine in-process on a local data
//! directory — durable put latency, group-commit throughput, watch fan-out
//! latency, and the memory and disk footprint of a million keys.

mod footprint;
mod put_latency;
mod throughput;
mod watch_latency;

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use rand::RngCore;
use skiff_store::{Store, StoreConfig};

use crate::machine;

/// Every value the benchmark writes has this many bytes.
pub const VALUE_LEN: usize = 256;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Section {
    /// Durable put latency from one sequential writer.
    Latency,
    /// Put throughput with many concurrent writers (group commit).
    Throughput,
    /// Put issued -> event received, with many watchers on one prefix.
    Watch,
    /// Resident memory and disk use of the engine holding many keys.
    Footprint,
}

#[derive(Debug, clap::Args)]
pub struct StoreArgs {
    /// Where the data directories go (`ops/` and `footprint/` inside it,
    /// removed afterwards); its filesystem is the one under test.
    /// [default: a temporary directory under ./target, or the system
    /// temporary directory when there is no ./target]
    #[arg(long, env = "SKIFF_BENCH_DATA_DIR")]
    data_dir: Option<PathBuf>,

    /// Sequential puts timed for put latency [default: 5000; --quick: 500]
    #[arg(long, env = "SKIFF_BENCH_PUTS")]
    puts: Option<usize>,

    /// Seconds each throughput point runs [default: 5; --quick: 1]
    #[arg(long, env = "SKIFF_BENCH_DURATION")]
    duration: Option<f64>,

    /// Concurrent writers, one throughput point each [default: 1,16,256,1000]
    #[arg(long, value_delimiter = ',', env = "SKIFF_BENCH_WRITERS")]
    writers: Option<Vec<usize>>,

    /// Watchers on one prefix, one watch point each
    /// [default: 1,1000,10000; --quick: 1,100,1000]
    #[arg(long, value_delimiter = ',', env = "SKIFF_BENCH_WATCHERS")]
    watchers: Option<Vec<usize>>,

    /// Puts observed by the watchers at each watch point [default: 200; --quick: 50]
    #[arg(long, env = "SKIFF_BENCH_WATCH_PUTS")]
    watch_puts: Option<usize>,

    /// Pause between two watched puts, in milliseconds [default: 5; --quick: 2]
    #[arg(long, env = "SKIFF_BENCH_WATCH_INTERVAL_MS")]
    watch_interval_ms: Option<u64>,

    /// Keys loaded for the footprint [default: 1000000; --quick: 50000]
    #[arg(long, env = "SKIFF_BENCH_KEYS")]
    keys: Option<u64>,

    /// Sections to run (the footprint always runs first, so that its memory
    /// baseline is a fresh process)
    #[arg(
        long,
        value_delimiter = ',',
        env = "SKIFF_BENCH_SECTIONS",
        default_value = "latency,throughput,watch,footprint"
    )]
    sections: Vec<Section>,

    /// Shrink every size so the whole run takes under 30 s (CI smoke test)
    #[arg(long, env = "SKIFF_BENCH_QUICK")]
    quick: bool,
}

/// The sizes of one run: flags, else the defaults for --quick or a real run.
#[derive(Debug, Clone)]
pub struct Plan {
    pub puts: usize,
    pub warmup: usize,
    pub duration: Duration,
    pub writers: Vec<usize>,
    pub watchers: Vec<usize>,
    pub watch_puts: usize,
    pub watch_interval: Duration,
    pub keys: u64,
    pub load_writers: usize,
}

impl Plan {
    fn from_args(args: &StoreArgs) -> Result<Plan> {
        let q = args.quick;
        let puts = args.puts.unwrap_or(if q { 500 } else { 5000 });
        let duration_secs = args.duration.unwrap_or(if q { 1.0 } else { 5.0 });
        let plan = Plan {
            puts,
            warmup: (puts / 10).clamp(10, 500),
            duration: Duration::try_from_secs_f64(duration_secs)
                .context("--duration must be a positive number of seconds")?,
            writers: args.writers.clone().unwrap_or(vec![1, 16, 256, 1000]),
            watchers: args.watchers.clone().unwrap_or(if q {
                vec![1, 100, 1000]
            } else {
                vec![1, 1000, 10_000]
            }),
            watch_puts: args.watch_puts.unwrap_or(if q { 50 } else { 200 }),
            watch_interval: Duration::from_millis(args.watch_interval_ms.unwrap_or(if q {
                2
            } else {
                5
            })),
            keys: args.keys.unwrap_or(if q { 50_000 } else { 1_000_000 }),
            load_writers: 256,
        };
        if plan.puts == 0 || plan.watch_puts == 0 || plan.keys == 0 || plan.duration.is_zero() {
            bail!("--puts, --watch-puts, --keys and --duration must be greater than zero");
        }
        if plan.writers.contains(&0) || plan.watchers.contains(&0) {
            bail!("--writers and --watchers take counts greater than zero, e.g. 1,16,256");
        }
        Ok(plan)
    }
}

pub fn run(args: StoreArgs) -> Result<()> {
    let plan = Plan::from_args(&args)?;
    let root = DataRoot::create(args.data_dir.as_deref())?;
    print_setup(&plan, root.path());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the tokio runtime")?;
    let summaries = runtime.block_on(run_sections(&plan, &args.sections, &root))?;
    crate::report::section("Summary");
    for line in summaries {
        println!("{line}");
    }
    root.remove()
}

async fn run_sections(plan: &Plan, sections: &[Section], root: &DataRoot) -> Result<Vec<String>> {
    let mut summaries = Vec::new();
    if sections.contains(&Section::Footprint) {
        let dir = root.subdir("footprint")?;
        summaries.push(footprint::run(plan, &dir).await?);
        std::fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()))?;
    }
    let ops = [Section::Latency, Section::Throughput, Section::Watch];
    if !ops.iter().any(|s| sections.contains(s)) {
        return Ok(summaries);
    }
    let dir = root.subdir("ops")?;
    let store = open_store(&dir).await?;
    if sections.contains(&Section::Latency) {
        summaries.push(put_latency::run(&store, plan).await?);
    }
    if sections.contains(&Section::Throughput) {
        summaries.extend(throughput::run(&store, plan).await?);
    }
    if sections.contains(&Section::Watch) {
        summaries.extend(watch_latency::run(&store, plan).await?);
    }
    store.close().await.context("closing the store")?;
    Ok(summaries)
}

pub async fn open_store(dir: &Path) -> Result<Store> {
    Store::open(StoreConfig::new(dir))
        .await
        .with_context(|| format!("opening a store in {}", dir.display()))
}

fn print_setup(plan: &Plan, root: &Path) {
    let args: Vec<String> = std::env::args().collect();
    println!("skiff-bench store");
    println!("command: {}", args.join(" "));
    for line in machine::describe() {
        println!("{line}");
    }
    println!(
        "data:    {} [{}]",
        root.display(),
        machine::filesystem_of(root)
    );
    let config = StoreConfig::new(root);
    println!(
        "store:   sled cache {}, flush every {:?}, max batch {}, watch buffer {} revisions",
        crate::report::mib(config.cache_capacity),
        config.flush_interval,
        config.max_batch,
        config.watch.buffer
    );
    println!(
        "sizes:   {} timed puts; {:?} per throughput point; writers {:?}; watchers {:?} x {} puts every {:?}; {} keys for the footprint",
        plan.puts, plan.duration, plan.writers, plan.watchers, plan.watch_puts, plan.watch_interval, plan.keys
    );
    println!("values:  {VALUE_LEN} random bytes; every put is durable (WAL fdatasync) before it is answered");
}

/// The directory holding the benchmark's data directories: a temporary one
/// (removed on drop), or the one the user named (only our subdirectories
/// are removed).
struct DataRoot {
    temp: Option<tempfile::TempDir>,
    path: PathBuf,
}

impl DataRoot {
    fn create(requested: Option<&Path>) -> Result<DataRoot> {
        if let Some(dir) = requested {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("creating the data directory {}", dir.display()))?;
            return Ok(DataRoot {
                temp: None,
                path: dir.to_path_buf(),
            });
        }
        let parent = if Path::new("target").is_dir() {
            PathBuf::from("target")
        } else {
            std::env::temp_dir()
        };
        let temp = tempfile::Builder::new()
            .prefix("skiff-bench-")
            .tempdir_in(&parent)
            .with_context(|| format!("creating a temporary directory in {}", parent.display()))?;
        let path = temp.path().canonicalize()?;
        Ok(DataRoot {
            temp: Some(temp),
            path,
        })
    }

    fn path(&self) -> &Path {
        &self.path
    }

    /// A fresh, empty subdirectory: a benchmark never runs on old data.
    fn subdir(&self, name: &str) -> Result<PathBuf> {
        let dir = self.path.join(name);
        if dir.exists() && std::fs::read_dir(&dir)?.next().is_some() {
            bail!(
                "{} is not empty; remove it or pass another --data-dir",
                dir.display()
            );
        }
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        Ok(dir)
    }

    fn remove(self) -> Result<()> {
        match self.temp {
            Some(temp) => temp
                .close()
                .context("removing the temporary data directory"),
            None => {
                let ops = self.path.join("ops");
                if ops.exists() {
                    std::fs::remove_dir_all(&ops)
                        .with_context(|| format!("removing {}", ops.display()))?;
                }
                Ok(())
            }
        }
    }
}

/// Incompressible bytes: sled must store what a real object would cost.
pub fn random_value() -> Vec<u8> {
    let mut value = vec![0u8; VALUE_LEN];
    rand::thread_rng().fill_bytes(&mut value);
    value
}

/// The writer's sync counters at one moment; the difference of two shows
/// how many entries shared each WAL fdatasync.
#[derive(Debug, Clone, Copy)]
pub struct SyncCounters {
    pub syncs: u64,
    pub entries: u64,
}

impl SyncCounters {
    pub fn read(store: &Store) -> SyncCounters {
        let stats = store.stats();
        SyncCounters {
            syncs: stats.syncs.load(Ordering::Relaxed),
            entries: stats.entries.load(Ordering::Relaxed),
        }
    }

    pub fn since(self, earlier: SyncCounters) -> SyncCounters {
        SyncCounters {
            syncs: self.syncs - earlier.syncs,
            entries: self.entries - earlier.entries,
        }
    }

    pub fn entries_per_sync(self) -> f64 {
        if self.syncs == 0 {
            return 0.0;
        }
        self.entries as f64 / self.syncs as f64
    }
}
