//! Watch fan-out latency over gRPC: W watchers on one prefix, spread over
//! S watch streams, and one writer whose values carry the time their put
//! was sent; every watcher's event gives one sample (event received - put
//! sent). Puts are paced — the next goes out once every watcher has the
//! last one — so a sample is one put's fan-out, not time spent in a queue.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use skiff_store::grpc::pb::etcdserverpb::{
    kv_client::KvClient, watch_client::WatchClient, watch_request::RequestUnion, PutRequest,
    WatchCreateRequest, WatchRequest, WatchResponse,
};
use tokio::sync::{mpsc, oneshot, watch, Notify};
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;

use super::progress::Progress;
use crate::report::{self, Latencies};
use crate::store::{random_value, VALUE_LEN};

/// How long deliveries may make no progress before the point is cut short.
const STALL_TIMEOUT: Duration = Duration::from_secs(20);
/// How long creating every watch may take.
const CREATE_TIMEOUT: Duration = Duration::from_secs(120);
/// Pause after a put's last event before the next put.
const PAUSE: Duration = Duration::from_millis(2);

/// One number of watchers.
pub struct WatchPoint {
    pub watchers: usize,
    pub streams: usize,
    /// Measured puts (a warm-up put goes first, unmeasured).
    pub puts: usize,
    /// Events received, the warm-up put's included.
    pub delivered: u64,
    pub expected: u64,
    pub latencies: Latencies,
    pub out_of_order: u64,
    /// Time to create every watch.
    pub created_in: Duration,
    /// CPU time of every server process while the puts were fanned out.
    pub server_cpu: Duration,
    pub stalled: bool,
}

impl WatchPoint {
    /// What went wrong, if anything: the figures of an incomplete point
    /// are not comparable.
    pub fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        if self.delivered != self.expected {
            problems.push(format!(
                "{} watchers: {} of {} events delivered{}",
                self.watchers,
                self.delivered,
                self.expected,
                if self.stalled {
                    " (deliveries stalled)"
                } else {
                    ""
                }
            ));
        }
        if self.out_of_order > 0 {
            problems.push(format!(
                "{} watchers: {} events out of revision order or repeated",
                self.watchers, self.out_of_order
            ));
        }
        problems
    }
}

/// Counters the stream tasks and the writer share.
struct Shared {
    clock: Instant,
    delivered: AtomicU64,
    /// Deliveries the writer waits for; crossing it wakes the writer.
    target: AtomicU64,
    reached: Notify,
}

impl Shared {
    fn now(&self) -> u64 {
        report::duration_nanos(self.clock.elapsed())
    }

    fn add_delivered(&self, n: u64) {
        let before = self.delivered.fetch_add(n, Ordering::AcqRel);
        let target = self.target.load(Ordering::Acquire);
        if before < target && before + n >= target {
            self.reached.notify_one();
        }
    }
}

/// What one watch stream saw.
#[derive(Default)]
struct StreamLog {
    latencies: Vec<u64>,
    out_of_order: u64,
}

/// `watchers` watches over `streams` streams of `watch_pool`, `puts`
/// measured puts through `put_pool`; `server_cpu` reads the CPU time the
/// servers have used so far.
pub async fn measure_point(
    watch_pool: &[Channel],
    put_pool: &[Channel],
    watchers: usize,
    streams: usize,
    puts: usize,
    server_cpu: &dyn Fn() -> Duration,
    progress: &Progress,
) -> Result<WatchPoint> {
    let streams = streams.clamp(1, watchers);
    let prefix = format!("/bench/watch/{watchers}/").into_bytes();
    let shared = Arc::new(Shared {
        clock: Instant::now(),
        delivered: AtomicU64::new(0),
        target: AtomicU64::new(0),
        reached: Notify::new(),
    });
    let (stop, stopped) = watch::channel(false);
    let mut ready = Vec::with_capacity(streams);
    let mut tasks = Vec::with_capacity(streams);
    let creating = Instant::now();
    for s in 0..streams {
        let count = watchers / streams + usize::from(s < watchers % streams);
        let (ready_tx, ready_rx) = oneshot::channel();
        ready.push(ready_rx);
        tasks.push(tokio::spawn(run_stream(
            watch_pool[s % watch_pool.len()].clone(),
            prefix.clone(),
            count,
            Arc::clone(&shared),
            ready_tx,
            stopped.clone(),
        )));
    }
    let created = tokio::time::timeout(CREATE_TIMEOUT, futures_all(ready)).await;
    let created_in = creating.elapsed();
    let cpu_before = server_cpu();
    let writes = match created {
        Ok(true) => write_paced(put_pool, &prefix, watchers, puts, &shared, progress).await,
        Ok(false) => Err(anyhow::anyhow!(
            "a watch stream failed while creating its watches"
        )),
        Err(_) => Err(anyhow::anyhow!(
            "creating {watchers} watches took longer than {CREATE_TIMEOUT:?}"
        )),
    };
    let cpu_used = server_cpu().saturating_sub(cpu_before);
    stop.send_replace(true);
    let mut logs = Vec::with_capacity(streams);
    let mut stream_error = None;
    for task in tasks {
        match task.await.context("a watch stream task panicked")? {
            Ok(log) => logs.push(log),
            Err(err) => {
                stream_error.get_or_insert(err);
            }
        }
    }
    let stalled = writes?;
    if let Some(err) = stream_error {
        return Err(err.context(format!("a watch stream with {watchers} watchers failed")));
    }
    let mut point = summarize(watchers, streams, puts, &shared, logs, created_in, stalled);
    point.server_cpu = cpu_used;
    Ok(point)
}

/// True once every stream has created its watches; false if one failed.
async fn futures_all(ready: Vec<oneshot::Receiver<()>>) -> bool {
    for r in ready {
        if r.await.is_err() {
            return false;
        }
    }
    true
}

fn summarize(
    watchers: usize,
    streams: usize,
    puts: usize,
    shared: &Shared,
    logs: Vec<StreamLog>,
    created_in: Duration,
    stalled: bool,
) -> WatchPoint {
    let mut nanos = Vec::with_capacity(watchers * puts);
    let mut out_of_order = 0;
    for log in logs {
        nanos.extend(log.latencies);
        out_of_order += log.out_of_order;
    }
    WatchPoint {
        watchers,
        streams,
        puts,
        delivered: shared.delivered.load(Ordering::Acquire),
        expected: (watchers * (puts + 1)) as u64,
        latencies: Latencies::from_nanos(nanos),
        out_of_order,
        created_in,
        server_cpu: Duration::ZERO,
        stalled,
    }
}

/// One warm-up put then `puts` measured ones, each after every watcher has
/// the previous one. Returns whether deliveries stalled.
async fn write_paced(
    put_pool: &[Channel],
    prefix: &[u8],
    watchers: usize,
    puts: usize,
    shared: &Shared,
    progress: &Progress,
) -> Result<bool> {
    progress.set_length(puts as u64);
    let mut clients: Vec<KvClient<Channel>> = put_pool.iter().cloned().map(KvClient::new).collect();
    for index in 0..=puts {
        let target = (watchers * (index + 1)) as u64;
        shared.target.store(target, Ordering::Release);
        let mut key = prefix.to_vec();
        key.extend_from_slice(format!("{index:06}").as_bytes());
        let mut value = random_value();
        value[8..16].copy_from_slice(&(index as u64).to_le_bytes());
        value[..8].copy_from_slice(&shared.now().to_le_bytes());
        let request = PutRequest {
            key,
            value,
            ..Default::default()
        };
        let n = clients.len();
        clients[index % n]
            .put(request)
            .await
            .with_context(|| format!("a put failed with {watchers} watchers"))?;
        if !wait_for(shared, target).await {
            return Ok(true);
        }
        if index > 0 {
            progress.inc(1);
        }
        tokio::time::sleep(PAUSE).await;
    }
    Ok(false)
}

/// Waits until `target` events are delivered; false if deliveries make
/// no progress for `STALL_TIMEOUT`.
async fn wait_for(shared: &Shared, target: u64) -> bool {
    let mut last = shared.delivered.load(Ordering::Acquire);
    let mut progressed = Instant::now();
    while last < target {
        let quiet = progressed.elapsed();
        if quiet >= STALL_TIMEOUT {
            return false;
        }
        // A wake-up may be left over from an earlier put: only the count
        // says whether this one is done.
        let _ = tokio::time::timeout(STALL_TIMEOUT - quiet, shared.reached.notified()).await;
        let now = shared.delivered.load(Ordering::Acquire);
        if now != last {
            last = now;
            progressed = Instant::now();
        }
    }
    true
}

/// One watch stream: creates `count` watches on `prefix`, says so on
/// `ready`, then records every event until told to stop.
async fn run_stream(
    channel: Channel,
    prefix: Vec<u8>,
    count: usize,
    shared: Arc<Shared>,
    ready: oneshot::Sender<()>,
    mut stop: watch::Receiver<bool>,
) -> Result<StreamLog> {
    let (requests, outgoing) = mpsc::channel(count + 1);
    let range_end = skiff_store::mvcc::prefix_end(&prefix);
    for _ in 0..count {
        let create = WatchRequest {
            request_union: Some(RequestUnion::CreateRequest(WatchCreateRequest {
                key: prefix.clone(),
                range_end: range_end.clone(),
                ..Default::default()
            })),
        };
        requests
            .try_send(create)
            .context("queueing a watch create request")?;
    }
    let mut client = WatchClient::new(channel);
    // Servers send the response headers with the first response, which
    // the queued creates bring about.
    let mut responses = client
        .watch(ReceiverStream::new(outgoing))
        .await
        .context("opening a watch stream")?
        .into_inner();
    let mut created = 0;
    while created < count {
        let response = tokio::select! {
            response = next(&mut responses) => response?,
            _ = stop.changed() => return Ok(StreamLog::default()),
        };
        if response.created {
            created += 1;
        }
    }
    let _ = ready.send(());
    let mut log = StreamLog::default();
    let mut last_revision: HashMap<i64, i64> = HashMap::with_capacity(count);
    loop {
        let response = tokio::select! {
            biased;
            response = next(&mut responses) => response?,
            _ = stop.changed() => break,
        };
        record(&response, &shared, &mut log, &mut last_revision);
    }
    drop(requests);
    Ok(log)
}

async fn next(responses: &mut tonic::Streaming<WatchResponse>) -> Result<WatchResponse> {
    let response = responses
        .message()
        .await
        .context("a watch stream failed")?
        .context("a watch stream ended")?;
    if response.canceled {
        bail!("a watch was canceled: {}", response.cancel_reason);
    }
    Ok(response)
}

fn record(
    response: &WatchResponse,
    shared: &Shared,
    log: &mut StreamLog,
    last_revision: &mut HashMap<i64, i64>,
) {
    if response.events.is_empty() {
        return;
    }
    let received = shared.now();
    let last = last_revision.entry(response.watch_id).or_insert(0);
    for event in &response.events {
        let Some(kv) = &event.kv else {
            continue;
        };
        if kv.mod_revision <= *last {
            log.out_of_order += 1;
        }
        *last = kv.mod_revision;
        if let Some((sent, index)) = stamp(&kv.value) {
            if index > 0 {
                log.latencies.push(received.saturating_sub(sent));
            }
        }
    }
    shared.add_delivered(response.events.len() as u64);
}

/// (put sent, put index) from a value this benchmark wrote.
fn stamp(value: &[u8]) -> Option<(u64, u64)> {
    if value.len() != VALUE_LEN {
        return None;
    }
    let sent = u64::from_le_bytes(value[..8].try_into().ok()?);
    let index = u64::from_le_bytes(value[8..16].try_into().ok()?);
    Some((sent, index))
}
