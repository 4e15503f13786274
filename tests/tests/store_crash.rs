//! Durability across process death: `store-writer` is SIGKILLed mid-stream and every put
//! it acknowledged must read back unchanged from the reopened data directory. Also: a torn
//! log tail is cut off on open, and a second process cannot open a directory in use.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, ensure, Context, Result};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use skiff_store::{KeyValue, PutRequest, RangeRequest, Store, StoreConfig, StoreError};
use skiff_tests::writer_process::WriterProcess;
use skiff_tests::writer_protocol::{parse_writer_key, value_for_key, Ack, DEFAULT_VALUE_SIZE};

/// Every key these tests write is under this prefix.
const ROOT: &str = "/crash/";
const KILL_ROUNDS: usize = 6;
const WRITERS: usize = 8;

/// Keys under [`ROOT`] as the reopened store has them.
type Kvs = HashMap<Vec<u8>, KeyValue>;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_mid_stream_loses_no_acknowledged_put() -> Result<()> {
    let dir = tempfile::tempdir()?;
    kill_rounds(dir.path(), &[]).await
}

/// The same with a log that rolls to new segments and releases old ones
/// (state flushed every 20 ms) while the kills land.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_while_log_segments_roll_and_release() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let small_log = ["--wal-segment-size", "65536", "--flush-interval-ms", "20"];
    kill_rounds(dir.path(), &small_log).await?;
    let first_segment = std::fs::read_dir(dir.path().join("wal"))?
        .filter_map(|entry| entry.ok())
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .find(|name| name.starts_with("0000000000000001-"));
    ensure!(
        first_segment.is_none(),
        "the first log segment {first_segment:?} was never released: the test did not exercise release"
    );
    Ok(())
}

/// SIGKILLs store-writer mid-stream for several rounds on `dir`, checking
/// after each that every acknowledged put survived.
async fn kill_rounds(dir: &Path, extra_args: &[&str]) -> Result<()> {
    let mut rng = seeded_rng();
    // Every put acknowledged so far, by any process, in any round.
    let mut acked: Vec<Ack> = Vec::new();
    let mut revision = 0;
    for round in 0..KILL_ROUNDS {
        let prefix = format!("{ROOT}r{round}/");
        let writer =
            WriterProcess::start_with(store_writer(), dir, &prefix, WRITERS, extra_args).await?;
        ensure!(
            writer.ready_revision() == revision,
            "round {round}: store-writer opened at revision {}, but the last close left {revision}",
            writer.ready_revision()
        );
        let run_for = Duration::from_millis(kill_delay_ms(&mut rng, round));
        let killed = writer.kill_after(run_for).await?;
        ensure!(
            !killed.acks.is_empty(),
            "round {round}: store-writer acknowledged no put in {run_for:?}; nothing was tested"
        );

        let store = open(dir).await?;
        let kvs = read_all(&store).await?;
        let current = store.kv().current_revision();
        eprintln!(
            "round {round}: {} puts acknowledged in {run_for:?} before SIGKILL; \
             {} more recovered that were never printed; torn last line: {}",
            killed.acks.len(),
            current - revision - killed.acks.len() as i64,
            killed.torn_last_line
        );
        check_writer_run(&kvs, &prefix, revision, current, &killed.acks)
            .with_context(|| format!("round {round}"))?;
        acked.extend(killed.acks);
        check_acked(&kvs, &acked).with_context(|| format!("round {round}"))?;
        let next = put_next(&store, format!("{ROOT}after/{round}")).await?;
        revision = next.mod_revision;
        acked.push(next);
        store.close().await?;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn torn_wal_tail_is_cut_off_on_open() -> Result<()> {
    let mut rng = seeded_rng();
    let dir = tempfile::tempdir()?;
    let mut acked = Vec::new();
    let store = open(dir.path()).await?;
    put_several(&store, "b0", 50, &mut acked).await?;
    store.close().await?;

    // A record whose header promises 200 bytes, cut off 5 bytes into its body.
    let mut partial = 200u32.to_le_bytes().to_vec();
    partial.extend(rng.gen::<[u8; 9]>());
    let (segment, intact_len) = append_to_newest_segment(dir.path(), &partial)?;
    let store = open(dir.path()).await?;
    // Opening writes again (the member takes the lead), so the segment may
    // have grown; the torn bytes must not be where they were.
    let after = std::fs::read(&segment)?;
    let intact = usize::try_from(intact_len)?;
    ensure!(
        after.len() >= intact && !after[intact..].starts_with(&partial),
        "{} still holds the torn record after open",
        segment.display()
    );
    check_acked(&read_all(&store).await?, &acked)?;
    put_several(&store, "b1", 50, &mut acked).await?;
    store.close().await?;

    append_to_newest_segment(dir.path(), &rng.gen::<[u8; 13]>())?;
    let store = open(dir.path()).await?;
    check_acked(&read_all(&store).await?, &acked)?;
    put_several(&store, "b2", 20, &mut acked).await?;
    store.close().await?;

    let store = open(dir.path()).await?;
    check_acked(&read_all(&store).await?, &acked)?;
    store.close().await?;
    Ok(())
}

/// The torn tail a power cut would leave on top of a killed writer's log, which the
/// reopened store must replay (sled has not flushed yet) up to the tear.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn torn_wal_tail_after_sigkill_keeps_acknowledged_puts() -> Result<()> {
    let mut rng = seeded_rng();
    let dir = tempfile::tempdir()?;
    let prefix = format!("{ROOT}torn/");
    let writer = WriterProcess::start(store_writer(), dir.path(), &prefix, WRITERS).await?;
    let run_for = Duration::from_millis(rng.gen_range(200..=600));
    let mut acked = writer.kill_after(run_for).await?.acks;
    ensure!(
        !acked.is_empty(),
        "store-writer acknowledged no put in {run_for:?}"
    );
    append_to_newest_segment(dir.path(), &rng.gen::<[u8; 13]>())?;

    let store = open(dir.path()).await?;
    let current = store.kv().current_revision();
    check_writer_run(&read_all(&store).await?, &prefix, 0, current, &acked)?;
    acked.push(put_next(&store, format!("{ROOT}after/torn")).await?);
    store.close().await?;

    let store = open(dir.path()).await?;
    check_acked(&read_all(&store).await?, &acked)?;
    store.close().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn second_process_on_a_data_dir_is_refused() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let prefix = format!("{ROOT}locked/");
    let writer = WriterProcess::start(store_writer(), dir.path(), &prefix, 2).await?;
    let pid = writer.pid().context("store-writer has no pid")?;
    match Store::open(StoreConfig::new(dir.path())).await {
        Err(err @ StoreError::DataDirLocked { .. }) => {
            let message = err.to_string();
            let path = dir.path().display().to_string();
            ensure!(message.contains(&path), "{message:?} does not name {path}");
            ensure!(
                message.contains(&format!("pid {pid}")),
                "{message:?} does not name the holder, pid {pid}"
            );
        }
        Err(other) => bail!(
            "opening a directory pid {pid} holds failed with {other:?}, expected DataDirLocked"
        ),
        Ok(_) => bail!("opened a data directory store-writer (pid {pid}) is writing to"),
    }
    let killed = writer.kill_after(Duration::from_millis(100)).await?;

    let store = open(dir.path()).await?;
    check_acked(&read_all(&store).await?, &killed.acks)?;
    store.close().await?;
    Ok(())
}

/// Most rounds die before the store's first 1 s sled flush, so reopening replays the log
/// from scratch; the last one lives past it and dies with the state partly flushed.
fn kill_delay_ms(rng: &mut StdRng, round: usize) -> u64 {
    if round + 1 < KILL_ROUNDS {
        rng.gen_range(200..=800)
    } else {
        rng.gen_range(1_200..=1_800)
    }
}

fn store_writer() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_store-writer"))
}

/// Kill delays and garbage bytes come from here; `SKIFF_TEST_SEED=<u64>` replays them.
fn seeded_rng() -> StdRng {
    let seed = match std::env::var("SKIFF_TEST_SEED") {
        Ok(seed) => seed.parse().expect("SKIFF_TEST_SEED must be a u64"),
        Err(_) => rand::random(),
    };
    eprintln!("SKIFF_TEST_SEED={seed}");
    StdRng::seed_from_u64(seed)
}

async fn open(dir: &Path) -> Result<Store> {
    Store::open(StoreConfig::new(dir))
        .await
        .with_context(|| format!("reopening the store in {}", dir.display()))
}

async fn read_all(store: &Store) -> Result<Kvs> {
    let resp = store.range(RangeRequest::prefix(ROOT)).await?;
    ensure!(
        !resp.more && resp.count == resp.kvs.len() as i64,
        "a prefix read without a limit returned {} of {} keys",
        resp.kvs.len(),
        resp.count
    );
    Ok(resp
        .kvs
        .into_iter()
        .map(|kv| (kv.key.clone(), kv))
        .collect())
}

/// A put on a reopened store takes the revision right after the recovered one.
async fn put_next(store: &Store, key: String) -> Result<Ack> {
    let current = store.kv().current_revision();
    let value = value_for_key(key.as_bytes(), DEFAULT_VALUE_SIZE);
    let resp = store.put(PutRequest::new(key.clone(), value)).await?;
    let mod_revision = resp.header.revision;
    ensure!(
        mod_revision == current + 1,
        "a put on a store at revision {current} got revision {mod_revision}"
    );
    Ok(Ack { key, mod_revision })
}

async fn put_several(store: &Store, batch: &str, count: usize, acked: &mut Vec<Ack>) -> Result<()> {
    for i in 0..count {
        acked.push(put_next(store, format!("{ROOT}{batch}/{i:08}")).await?);
    }
    Ok(())
}

/// Every acknowledged put is there, unchanged, at the revision it was acknowledged with.
fn check_acked(kvs: &Kvs, acked: &[Ack]) -> Result<()> {
    for ack in acked {
        let kv = kvs.get(ack.key.as_bytes()).with_context(|| {
            format!(
                "the put of {} acknowledged at revision {} is gone",
                ack.key, ack.mod_revision
            )
        })?;
        ensure!(
            (kv.mod_revision, kv.create_revision, kv.version) == (ack.mod_revision, ack.mod_revision, 1),
            "{} was acknowledged at revision {} as a new key, but reads back with mod_revision {}, create_revision {}, version {}",
            ack.key,
            ack.mod_revision,
            kv.mod_revision,
            kv.create_revision,
            kv.version
        );
        check_value(kv)?;
    }
    Ok(())
}

/// What one killed writer that opened the store at `ready_revision` left behind. Its acked
/// revisions are distinct and not beyond the store's. Its keys, acked or not, hold their
/// values and take exactly the revisions `ready_revision + 1 ..= current_revision`: none
/// invented, none skipped. Each task's keys are a gapless run from seq 0, since a task puts
/// its next key only once the previous put was acknowledged.
fn check_writer_run(
    kvs: &Kvs,
    prefix: &str,
    ready_revision: i64,
    current_revision: i64,
    acks: &[Ack],
) -> Result<()> {
    let distinct: HashSet<i64> = acks.iter().map(|ack| ack.mod_revision).collect();
    ensure!(
        distinct.len() == acks.len(),
        "{} acks share only {} revisions",
        acks.len(),
        distinct.len()
    );
    let max_acked = distinct.iter().copied().max().unwrap_or(ready_revision);
    ensure!(
        current_revision >= max_acked,
        "the store reopened at revision {current_revision}, below the acked revision {max_acked}"
    );
    check_acked(kvs, acks)?;

    let mut revisions = Vec::new();
    let mut seqs_by_task: BTreeMap<usize, Vec<u64>> = BTreeMap::new();
    for kv in kvs
        .values()
        .filter(|kv| kv.key.starts_with(prefix.as_bytes()))
    {
        let key = String::from_utf8_lossy(&kv.key);
        let (task, seq) = parse_writer_key(prefix, &kv.key)
            .with_context(|| format!("{key} is not a key store-writer writes"))?;
        check_value(kv)?;
        revisions.push(kv.mod_revision);
        seqs_by_task.entry(task).or_default().push(seq);
    }
    revisions.sort_unstable();
    let expected: Vec<i64> = (ready_revision + 1..=current_revision).collect();
    if let Some((found, wanted)) = revisions.iter().zip(&expected).find(|(f, w)| f != w) {
        bail!(
            "keys under {prefix} skip or repeat a revision: found {found} where {wanted} was due"
        );
    }
    ensure!(
        revisions.len() == expected.len(),
        "keys under {prefix} hold {} revisions, but the store moved from {ready_revision} to {current_revision}",
        revisions.len()
    );
    for (task, mut seqs) in seqs_by_task {
        seqs.sort_unstable();
        let count = seqs.len() as u64;
        ensure!(
            seqs.into_iter().eq(0..count),
            "task {task} under {prefix} has {count} keys but not seqs 0..{count}: an acknowledged put in the middle is gone"
        );
    }
    Ok(())
}

fn check_value(kv: &KeyValue) -> Result<()> {
    ensure!(
        kv.value == value_for_key(&kv.key, DEFAULT_VALUE_SIZE),
        "{} reads back with a value ({} bytes) other than the one written",
        String::from_utf8_lossy(&kv.key),
        kv.value.len()
    );
    Ok(())
}

/// Appends `bytes` to the newest `wal/*.wal` segment (lexically last), as a write cut off
/// by a crash would leave them. Returns the segment and its length before.
fn append_to_newest_segment(data_dir: &Path, bytes: &[u8]) -> Result<(PathBuf, u64)> {
    let wal_dir = data_dir.join("wal");
    let mut segments = Vec::new();
    for entry in std::fs::read_dir(&wal_dir)? {
        let path = entry?.path();
        if path.extension().is_some_and(|ext| ext == "wal") {
            segments.push(path);
        }
    }
    segments.sort();
    let newest = segments
        .pop()
        .with_context(|| format!("no *.wal segment in {}", wal_dir.display()))?;
    let mut file = OpenOptions::new().append(true).open(&newest)?;
    let intact_len = file.metadata()?.len();
    file.write_all(bytes)?;
    file.sync_all()?;
    Ok((newest, intact_len))
}
