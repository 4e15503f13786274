//! The KV workloads, each the same requests to either system: sequential
//! durable puts (latency), and closed-loop request streams — N clients,
//! each sending its next request as soon as the previous one is answered,
//! sharing a handful of connections — for put and range throughput.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use skiff_store::grpc::pb::etcdserverpb::{kv_client::KvClient, PutRequest, RangeRequest};
use tonic::transport::Channel;

use super::progress::Progress;
use crate::report::{self, Latencies};
use crate::store::random_value;

/// Distinct random values the writers cycle through.
const VALUES: usize = 256;
/// Keys the range workloads read, written before they start.
pub const READ_KEYS: usize = 1000;

/// Sequential puts: latency of each, and how long they took together.
pub struct Sequential {
    pub latencies: Latencies,
    pub elapsed: Duration,
    /// CPU time of every server process during the timed puts.
    pub server_cpu: Duration,
}

/// One closed-loop measurement.
pub struct Rate {
    /// Requests measured (issued after the warm-up).
    pub ops: u64,
    /// Requests answered, the warm-up's included: what server CPU time
    /// over the whole point divides by.
    pub all_ops: u64,
    /// First measured request issued -> last measured answer.
    pub elapsed: Duration,
    pub latencies: Latencies,
}

impl Rate {
    pub fn per_second(&self) -> u64 {
        report::per_second(self.ops, self.elapsed)
    }
}

fn values() -> Arc<Vec<Vec<u8>>> {
    Arc::new((0..VALUES).map(|_| random_value()).collect())
}

/// `warmup` unmeasured, then `puts` timed sequential puts to fresh keys;
/// put k goes over channel k mod n of `pool`. `server_cpu` reads the CPU
/// time the servers have used so far.
pub async fn sequential_puts(
    pool: &[Channel],
    warmup: usize,
    puts: usize,
    server_cpu: &dyn Fn() -> Duration,
    progress: &Progress,
) -> Result<Sequential> {
    let values = values();
    let mut clients: Vec<KvClient<Channel>> = pool.iter().cloned().map(KvClient::new).collect();
    let n = clients.len();
    for i in 0..warmup {
        let request = put_request(format!("/bench/seq-warmup/{i:08}"), &values[i % VALUES]);
        clients[i % n]
            .put(request)
            .await
            .context("a warm-up put failed")?;
    }
    progress.set_length(puts as u64);
    let mut samples = Vec::with_capacity(puts);
    let cpu_before = server_cpu();
    let started = Instant::now();
    for i in 0..puts {
        let request = put_request(format!("/bench/seq/{i:08}"), &values[i % VALUES]);
        let issued = Instant::now();
        clients[i % n]
            .put(request)
            .await
            .with_context(|| format!("sequential put {i} failed"))?;
        samples.push(issued.elapsed());
        progress.inc(1);
    }
    Ok(Sequential {
        elapsed: started.elapsed(),
        server_cpu: server_cpu().saturating_sub(cpu_before),
        latencies: Latencies::from_durations(&samples),
    })
}

/// `clients` request streams putting fresh keys for `warmup + duration`.
pub async fn put_throughput(
    pool: &[Channel],
    clients: usize,
    warmup: Duration,
    duration: Duration,
) -> Result<Rate> {
    let values = values();
    closed_loop(pool, clients, warmup, duration, move |mut kv, c, seq| {
        let request = put_request(
            format!("/bench/tput/{clients}/{c:04}/{seq:08}"),
            &values[(c + seq as usize) % VALUES],
        );
        async move { kv.put(request).await.map(drop) }
    })
    .await
    .with_context(|| format!("putting with {clients} concurrent clients"))
}

/// Writes the keys `range_throughput` reads.
pub async fn write_read_keys(pool: &[Channel]) -> Result<()> {
    let values = values();
    let writers = 16;
    let mut tasks = Vec::with_capacity(writers);
    for w in 0..writers {
        let mut kv = KvClient::new(pool[w % pool.len()].clone());
        let values = Arc::clone(&values);
        tasks.push(tokio::spawn(async move {
            for i in (w..READ_KEYS).step_by(writers) {
                kv.put(put_request(read_key(i), &values[i % VALUES]))
                    .await?;
            }
            Ok::<(), tonic::Status>(())
        }));
    }
    for task in tasks {
        task.await
            .context("a writer task panicked")?
            .context("writing the keys to read")?;
    }
    Ok(())
}

/// `clients` request streams each getting one key at a time.
pub async fn range_throughput(
    pool: &[Channel],
    clients: usize,
    serializable: bool,
    warmup: Duration,
    duration: Duration,
) -> Result<Rate> {
    closed_loop(pool, clients, warmup, duration, move |mut kv, c, seq| {
        let i = (c * 7919 + seq as usize * 31) % READ_KEYS;
        let request = RangeRequest {
            key: read_key(i).into_bytes(),
            serializable,
            ..Default::default()
        };
        async move {
            let response = kv.range(request).await?.into_inner();
            if response.kvs.len() != 1 {
                return Err(tonic::Status::not_found(format!(
                    "{} found no value",
                    read_key(i)
                )));
            }
            Ok(())
        }
    })
    .await
    .with_context(|| format!("getting with {clients} concurrent clients"))
}

fn read_key(i: usize) -> String {
    format!("/bench/read/{i:06}")
}

fn put_request(key: String, value: &[u8]) -> PutRequest {
    PutRequest {
        key: key.into_bytes(),
        value: value.to_vec(),
        ..Default::default()
    }
}

/// What one client stream measured.
struct StreamLog {
    latencies: Vec<u64>,
    answered: u64,
    last_answer: Option<Instant>,
}

/// Runs `op(client, stream, seq)` from `clients` concurrent streams, stream
/// c over channel c mod n of `pool`. Requests issued during `warmup` are
/// not counted; nothing new is issued after `warmup + duration`.
async fn closed_loop<Op, Fut>(
    pool: &[Channel],
    clients: usize,
    warmup: Duration,
    duration: Duration,
    op: Op,
) -> Result<Rate>
where
    Op: Fn(KvClient<Channel>, usize, u64) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = Result<(), tonic::Status>> + Send + 'static,
{
    let measure_from = Instant::now() + warmup;
    let until = measure_from + duration;
    let tasks: Vec<_> = (0..clients)
        .map(|c| {
            let kv = KvClient::new(pool[c % pool.len()].clone());
            let op = op.clone();
            tokio::spawn(async move {
                let mut log = StreamLog {
                    latencies: Vec::new(),
                    answered: 0,
                    last_answer: None,
                };
                let mut seq = 0u64;
                loop {
                    let issued = Instant::now();
                    if issued >= until {
                        return Ok::<_, tonic::Status>(log);
                    }
                    op(kv.clone(), c, seq).await?;
                    seq += 1;
                    log.answered += 1;
                    if issued >= measure_from {
                        let answered = Instant::now();
                        log.latencies
                            .push(report::duration_nanos(answered - issued));
                        log.last_answer = Some(answered);
                    }
                }
            })
        })
        .collect();
    let mut nanos = Vec::new();
    let mut all_ops = 0;
    let mut last_answer = measure_from;
    let mut first_error = None;
    for task in tasks {
        match task.await.context("a client task panicked")? {
            Ok(log) => {
                nanos.extend(log.latencies);
                all_ops += log.answered;
                last_answer = last_answer.max(log.last_answer.unwrap_or(measure_from));
            }
            Err(status) => {
                first_error.get_or_insert(status);
            }
        }
    }
    if let Some(status) = first_error {
        return Err(anyhow::Error::new(status).context("a request failed"));
    }
    Ok(Rate {
        ops: nanos.len() as u64,
        all_ops,
        elapsed: last_answer - measure_from,
        latencies: Latencies::from_nanos(nanos),
    })
}
