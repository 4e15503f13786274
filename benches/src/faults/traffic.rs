//! What the clients do during a run, and what they record: KV ops for the
//! linearizability checker and the acknowledged-write check, leases with
//! keep-alives for the early-expiry check, and watches (with progress
//! requests, resumed on another member when one breaks) for the watch
//! checks. Every client runs here, outside the faults.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use skiff_store::grpc::pb::etcdserverpb::compare::{CompareResult, CompareTarget, TargetUnion};
use skiff_store::grpc::pb::etcdserverpb::kv_client::KvClient;
use skiff_store::grpc::pb::etcdserverpb::lease_client::LeaseClient;
use skiff_store::grpc::pb::etcdserverpb::request_op::Request;
use skiff_store::grpc::pb::etcdserverpb::watch_client::WatchClient;
use skiff_store::grpc::pb::etcdserverpb::watch_request::RequestUnion;
use skiff_store::grpc::pb::etcdserverpb::{
    Compare, DeleteRangeRequest, LeaseGrantRequest, LeaseKeepAliveRequest, LeaseRevokeRequest,
    PutRequest, RangeRequest, RequestOp, TxnRequest, WatchCreateRequest, WatchProgressRequest,
    WatchRequest,
};
use skiff_store::testing::linearizability::{Op, Outcome, Recorder};
use tokio::sync::watch;
use tonic::transport::Channel;

use super::check::{
    Ack, LeaseRecord, RestAck, RestList, WatchEvent, WatchRecord, WatchResponse, WatchSegment,
};
use super::cluster::CALL_TIMEOUT;

/// Every key of a run is under this prefix.
pub const PREFIX: &[u8] = b"/f/";
/// Keys the KV clients share (few, so that they contend).
const KEYS: usize = 5;

/// The end of the range of every key under `prefix`.
pub fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    if let Some(last) = end.last_mut() {
        *last += 1;
    }
    end
}

fn kv_key(i: usize) -> Vec<u8> {
    [PREFIX, format!("k{i}").as_bytes()].concat()
}

/// What the clients of a run recorded.
#[derive(Default)]
pub struct Records {
    pub history: Recorder,
    pub acks: Mutex<Vec<Ack>>,
    pub leases: Mutex<Vec<LeaseRecord>>,
    pub watches: Mutex<Vec<WatchRecord>>,
    /// The Kubernetes profile's (`rest`): writes acknowledged, lists read,
    /// watches.
    pub rest_acks: Mutex<Vec<RestAck>>,
    pub rest_lists: Mutex<Vec<RestList>>,
    pub rest_watches: Mutex<Vec<WatchRecord>>,
    /// Ops answered and not.
    pub answered: std::sync::atomic::AtomicU64,
    pub unanswered: std::sync::atomic::AtomicU64,
}

/// The clock every time a check compares is read from.
#[derive(Clone, Copy)]
pub struct Clock(pub Instant);

impl Clock {
    pub fn now(self) -> Duration {
        self.0.elapsed()
    }
}

/// A client's current member: it moves on to the next after an error.
struct Sticky {
    channels: Vec<Channel>,
    at: usize,
}

impl Sticky {
    fn channel(&self) -> Channel {
        self.channels[self.at % self.channels.len()].clone()
    }
    fn failed(&mut self) {
        self.at += 1;
    }
}

/// One KV client: puts, linearizable gets, deletes, compare-and-swaps and
/// ranges over the shared keys until `stop`.
pub async fn kv_client(
    id: u64,
    seed: u64,
    channels: Vec<Channel>,
    records: Arc<Records>,
    mut stop: watch::Receiver<bool>,
) {
    use std::sync::atomic::Ordering::Relaxed;
    let mut rng = StdRng::seed_from_u64(seed ^ id.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let mut member = Sticky {
        at: id as usize,
        channels,
    };
    let mut seen: Vec<Option<Vec<u8>>> = vec![None; KEYS];
    let mut seq = 0u64;
    while !*stop.borrow() {
        seq += 1;
        let k = rng.gen_range(0..KEYS);
        let key = kv_key(k);
        let value = format!("c{id}-{seq}").into_bytes();
        let mut client = KvClient::new(member.channel());
        let roll = rng.gen_range(0..100);
        let answered = if roll < 30 {
            let ticket = records
                .history
                .call(id, Op::put(key.clone(), value.clone()));
            let answer = call(client.put(PutRequest {
                key: key.clone(),
                value: value.clone(),
                ..Default::default()
            }))
            .await;
            let outcome = match &answer {
                Some(r) => {
                    records.acks.lock().unwrap().push(Ack {
                        key: key.clone(),
                        value: Some(value.clone()),
                        revision: revision(&r.header),
                        client: id,
                    });
                    Outcome::Put
                }
                None => Outcome::Unknown,
            };
            let _ = records.history.ret(ticket, outcome);
            answer.is_some()
        } else if roll < 60 {
            let ticket = records.history.call(id, Op::get(key.clone()));
            let answer = call(client.range(RangeRequest {
                key: key.clone(),
                ..Default::default()
            }))
            .await;
            let outcome = match &answer {
                Some(r) => {
                    let value = r.kvs.first().map(|kv| kv.value.clone());
                    seen[k] = value.clone();
                    Outcome::Get(value)
                }
                None => Outcome::Unknown,
            };
            let _ = records.history.ret(ticket, outcome);
            answer.is_some()
        } else if roll < 80 {
            // Swap from what this client last saw, or from absent.
            let expect = seen[k].clone();
            let new = Some(value.clone());
            let ticket = records
                .history
                .call(id, Op::cas(key.clone(), expect.clone(), new));
            let compare = match &expect {
                Some(v) => Compare {
                    result: CompareResult::Equal as i32,
                    target: CompareTarget::Value as i32,
                    key: key.clone(),
                    target_union: Some(TargetUnion::Value(v.clone())),
                    ..Default::default()
                },
                None => Compare {
                    result: CompareResult::Equal as i32,
                    target: CompareTarget::Version as i32,
                    key: key.clone(),
                    target_union: Some(TargetUnion::Version(0)),
                    ..Default::default()
                },
            };
            let answer = call(client.txn(TxnRequest {
                compare: vec![compare],
                success: vec![RequestOp {
                    request: Some(Request::RequestPut(PutRequest {
                        key: key.clone(),
                        value: value.clone(),
                        ..Default::default()
                    })),
                }],
                failure: vec![],
            }))
            .await;
            let outcome = match &answer {
                Some(r) => {
                    if r.succeeded {
                        seen[k] = Some(value.clone());
                        records.acks.lock().unwrap().push(Ack {
                            key: key.clone(),
                            value: Some(value.clone()),
                            revision: revision(&r.header),
                            client: id,
                        });
                    }
                    Outcome::Cas(r.succeeded)
                }
                None => Outcome::Unknown,
            };
            let _ = records.history.ret(ticket, outcome);
            answer.is_some()
        } else if roll < 90 {
            let ticket = records.history.call(id, Op::delete(key.clone()));
            let answer = call(client.delete_range(DeleteRangeRequest {
                key: key.clone(),
                ..Default::default()
            }))
            .await;
            let outcome = match &answer {
                Some(r) => {
                    if r.deleted > 0 {
                        records.acks.lock().unwrap().push(Ack {
                            key: key.clone(),
                            value: None,
                            revision: revision(&r.header),
                            client: id,
                        });
                    }
                    Outcome::Delete
                }
                None => Outcome::Unknown,
            };
            let _ = records.history.ret(ticket, outcome);
            answer.is_some()
        } else {
            // A range over every shared key: one read of each, at once.
            let tickets: Vec<_> = (0..KEYS)
                .map(|i| {
                    records
                        .history
                        .call(range_reader(id, i), Op::get(kv_key(i)))
                })
                .collect();
            let answer = call(client.range(RangeRequest {
                key: kv_key(0),
                range_end: prefix_end(&[PREFIX, b"k"].concat()),
                ..Default::default()
            }))
            .await;
            for (i, ticket) in tickets.into_iter().enumerate() {
                let outcome = match &answer {
                    Some(r) => Outcome::Get(
                        r.kvs
                            .iter()
                            .find(|kv| kv.key == kv_key(i))
                            .map(|kv| kv.value.clone()),
                    ),
                    None => Outcome::Unknown,
                };
                let _ = records.history.ret(ticket, outcome);
            }
            answer.is_some()
        };
        if answered {
            records.answered.fetch_add(1, Relaxed);
        } else {
            records.unanswered.fetch_add(1, Relaxed);
            member.failed();
            // Not a tight loop against a member that is down.
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(50)) => {}
                _ = stop.changed() => {}
            }
        }
    }
}

/// The client ID under which client `id` records its range's read of key
/// `i`: the reads of one range overlap, so each gets an ID of its own.
fn range_reader(id: u64, i: usize) -> u64 {
    1_000_000 + id * 64 + i as u64
}

fn revision(header: &Option<skiff_store::grpc::pb::etcdserverpb::ResponseHeader>) -> i64 {
    header.as_ref().map_or(0, |h| h.revision)
}

/// The answer of a call, or None if there was none in time (or an error:
/// the client cannot tell whether a failed write took effect).
async fn call<T>(
    future: impl std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>,
) -> Option<T> {
    match tokio::time::timeout(CALL_TIMEOUT, future).await {
        Ok(Ok(response)) => Some(response.into_inner()),
        _ => None,
    }
}

/// One lease client: grants a lease, puts a key under it, keeps it alive
/// for a while, then revokes it or lets it expire; again until `stop`.
pub async fn lease_client(
    id: u64,
    seed: u64,
    channels: Vec<Channel>,
    records: Arc<Records>,
    clock: Clock,
    mut stop: watch::Receiver<bool>,
) {
    let mut rng = StdRng::seed_from_u64(seed ^ 0x1ea5e ^ id);
    let mut member = Sticky {
        at: id as usize,
        channels,
    };
    let mut n = 0u64;
    while !*stop.borrow() {
        n += 1;
        let ttl: i64 = rng.gen_range(2..=4);
        let mut leases = LeaseClient::new(member.channel());
        let granted_at = clock.now();
        let Some(grant) = call(leases.lease_grant(LeaseGrantRequest { ttl, id: 0 })).await else {
            member.failed();
            pause(&mut stop, Duration::from_millis(200)).await;
            continue;
        };
        let key = [PREFIX, format!("lease/{id}-{n}").as_bytes()].concat();
        let mut record = LeaseRecord {
            id: grant.id,
            key: key.clone(),
            alive_until: granted_at + Duration::from_secs(grant.ttl.max(0) as u64),
            revoked_at: None,
        };
        let put = call(KvClient::new(member.channel()).put(PutRequest {
            key,
            value: b"leased".to_vec(),
            lease: grant.id,
            ..Default::default()
        }))
        .await;
        if put.is_none() {
            member.failed();
        }
        // Keep-alives every third of the TTL for a while.
        let keep_for = Duration::from_millis(rng.gen_range(500..6_000));
        let started = Instant::now();
        while started.elapsed() < keep_for && !*stop.borrow() {
            pause(&mut stop, Duration::from_millis(ttl as u64 * 1000 / 3)).await;
            let sent_at = clock.now();
            if let Some(ttl) = keep_alive(&member.channel(), grant.id).await {
                if ttl > 0 {
                    record.alive_until = record
                        .alive_until
                        .max(sent_at + Duration::from_secs(ttl as u64));
                }
            } else {
                member.failed();
            }
        }
        if rng.gen_bool(0.5) {
            record.revoked_at = Some(clock.now());
            let _ = call(
                LeaseClient::new(member.channel())
                    .lease_revoke(LeaseRevokeRequest { id: grant.id }),
            )
            .await;
        }
        records.leases.lock().unwrap().push(record);
    }
}

/// One keep-alive on a stream of its own: the TTL answered.
async fn keep_alive(channel: &Channel, id: i64) -> Option<i64> {
    let mut client = LeaseClient::new(channel.clone());
    let requests = tokio_stream::iter([LeaseKeepAliveRequest { id }]);
    let exchange = async {
        let mut answers = client.lease_keep_alive(requests).await.ok()?.into_inner();
        answers.message().await.ok().flatten().map(|a| a.ttl)
    };
    tokio::time::timeout(CALL_TIMEOUT, exchange)
        .await
        .ok()
        .flatten()
}

async fn pause(stop: &mut watch::Receiver<bool>, d: Duration) {
    tokio::select! {
        _ = tokio::time::sleep(d) => {}
        _ = stop.changed() => {}
    }
}

/// One watcher of every key of the run from `start`, asking for progress
/// now and then; when its stream breaks it resumes on the next member from
/// one past the newest revision it was told of.
pub async fn watcher(
    id: usize,
    start: i64,
    channels: Vec<Channel>,
    records: Arc<Records>,
    clock: Clock,
    mut stop: watch::Receiver<bool>,
) {
    let mut member = Sticky { at: id, channels };
    let mut record = WatchRecord {
        id,
        segments: Vec::new(),
    };
    let mut next = start;
    while !*stop.borrow() {
        let mut segment = WatchSegment {
            member: member.at % member.channels.len(),
            start: next,
            responses: Vec::new(),
        };
        let (requests, rx) = tokio::sync::mpsc::channel(8);
        let create = WatchRequest {
            request_union: Some(RequestUnion::CreateRequest(WatchCreateRequest {
                key: PREFIX.to_vec(),
                range_end: prefix_end(PREFIX),
                start_revision: next,
                progress_notify: true,
                ..Default::default()
            })),
        };
        let _ = requests.send(create).await;
        let mut client = WatchClient::new(member.channel());
        let opened = tokio::time::timeout(
            CALL_TIMEOUT,
            client.watch(tokio_stream::wrappers::ReceiverStream::new(rx)),
        )
        .await;
        let mut stream = match opened {
            Ok(Ok(stream)) => stream.into_inner(),
            _ => {
                member.failed();
                pause(&mut stop, Duration::from_millis(100)).await;
                continue;
            }
        };
        let mut progress_every = tokio::time::interval(Duration::from_millis(700));
        loop {
            let message = tokio::select! {
                m = tokio::time::timeout(Duration::from_secs(5), stream.message()) => m,
                _ = progress_every.tick() => {
                    let _ = requests.try_send(WatchRequest {
                        request_union: Some(RequestUnion::ProgressRequest(WatchProgressRequest {})),
                    });
                    continue;
                }
                _ = stop.changed() => break,
            };
            // Silent for 5 s though asked for progress: the member is gone.
            let Ok(Ok(Some(response))) = message else {
                break;
            };
            let at = clock.now();
            if response.canceled {
                segment
                    .responses
                    .push(WatchResponse::Canceled(response.cancel_reason));
                break;
            }
            if response.created {
                continue;
            }
            if response.events.is_empty() {
                let rev = revision(&response.header);
                segment.responses.push(WatchResponse::Progress(rev));
                next = next.max(rev + 1);
                continue;
            }
            let events: Vec<WatchEvent> = response
                .events
                .iter()
                .map(|e| {
                    let kv = e.kv.clone().unwrap_or_default();
                    WatchEvent {
                        revision: kv.mod_revision,
                        key: kv.key,
                        value: (e.r#type == 0).then_some(kv.value),
                    }
                })
                .collect();
            if let Some(last) = events.last() {
                next = next.max(last.revision + 1);
            }
            segment.responses.push(WatchResponse::Events { at, events });
        }
        record.segments.push(segment);
        member.failed();
    }
    records.watches.lock().unwrap().push(record);
}
