//! etcd's Watch service. One bidirectional stream carries many watches,
//! each known to the client by an ID of that stream. A task per watch
//! reads its store `Watcher` and hands responses to the stream's own task,
//! which alone talks to the client: it answers creates and cancels, sends
//! events (split into fragments when asked), and turns a progress request
//! into one notification for every watch of the stream.
//!
//! A client that reads slowly holds up only its own stream; the store's
//! watchers behind it fall behind and catch up from disk, so writers and
//! other streams never wait for it.

use std::collections::{HashMap, HashSet};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures::Stream;
use prost::Message;
use tokio::sync::{mpsc, Notify};
use tokio::task::JoinHandle;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use super::pb::etcdserverpb::{self as pb, watch_request::RequestUnion, watch_server::Watch};
use super::status::{self, from_store};
use super::{convert, Stopping, GRPC_OVERHEAD_BYTES};
use crate::mvcc::KeyRange;
use crate::{Store, Watcher};

/// Responses queued for the client before the stream stops reading its
/// watchers (which then fall behind in the store, not here).
const OUTBOUND_QUEUE: usize = 128;
/// Responses of the stream's watchers waiting for the stream's task.
const DELIVERY_QUEUE: usize = 256;
/// How often a pending progress request is asked again of the watchers
/// that have not answered it yet.
const PROGRESS_RETRY: Duration = Duration::from_millis(250);
/// The watch ID of answers about no single watch: a refused create, and a
/// progress notification for every watch of the stream (etcd's
/// `InvalidWatchID`).
const EVERY_WATCH: i64 = -1;
/// etcd's answer to a watch ID already taken on the stream.
const DUPLICATE_WATCH_ID: &str = "mvcc: duplicate watch ID provided on the WatchStream";
/// etcd's answer to a watch whose range end is not after its key.
const EMPTY_RANGE: &str = "mvcc: watcher range is empty";

pub(crate) struct WatchService {
    store: Store,
    stopping: Stopping,
}

impl WatchService {
    pub(crate) fn new(store: Store, stopping: Stopping) -> Self {
        WatchService { store, stopping }
    }
}

type ResponseStream = Pin<Box<dyn Stream<Item = Result<pb::WatchResponse, Status>> + Send>>;

#[tonic::async_trait]
impl Watch for WatchService {
    type WatchStream = ResponseStream;

    async fn watch(
        &self,
        request: Request<Streaming<pb::WatchRequest>>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        let (out, responses) = mpsc::channel(OUTBOUND_QUEUE);
        let stream = ServerWatchStream::new(self.store.clone(), out, self.stopping.clone());
        tokio::spawn(stream.run(request.into_inner()));
        Ok(Response::new(Box::pin(ReceiverStream::new(responses))))
    }
}

/// One client's watch stream (etcd's `serverWatchStream`).
struct ServerWatchStream {
    store: Store,
    out: mpsc::Sender<Result<pb::WatchResponse, Status>>,
    stopping: Stopping,
    deliveries_tx: mpsc::Sender<Delivery>,
    deliveries: mpsc::Receiver<Delivery>,
    /// By the ID the client knows the watch by.
    watches: HashMap<i64, ActiveWatch>,
    next_watch_id: i64,
    /// Tells a watch from an earlier one that had the same ID.
    next_serial: u64,
    progress: Option<ProgressRound>,
    /// A fragmenting watch splits responses of this many bytes or more.
    fragment_limit: usize,
}

struct ActiveWatch {
    serial: u64,
    progress_notify: bool,
    fragment: bool,
    wake_progress: Arc<Notify>,
    task: JoinHandle<()>,
}

impl Drop for ActiveWatch {
    fn drop(&mut self) {
        // Dropping the task's Watcher leaves the store's watcher group.
        self.task.abort();
    }
}

/// A response from one watch's task.
struct Delivery {
    serial: u64,
    watch_id: i64,
    kind: DeliveryKind,
    response: pb::WatchResponse,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DeliveryKind {
    Events,
    Progress,
    /// The watch is over (its start revision was compacted, or the store
    /// stopped); the response says so.
    Ended,
}

/// A progress request of the client being answered: each watch reports a
/// revision up to which it has delivered everything; the smallest one
/// holds for the whole stream.
struct ProgressRound {
    awaiting: HashSet<u64>,
    revision: Option<i64>,
    /// The client asked again meanwhile: another round follows.
    again: bool,
}

enum Step {
    Request(Result<Option<pb::WatchRequest>, Status>),
    Delivery(Delivery),
    RetryProgress,
    Stop,
}

impl ServerWatchStream {
    fn new(
        store: Store,
        out: mpsc::Sender<Result<pb::WatchResponse, Status>>,
        stopping: Stopping,
    ) -> Self {
        let (deliveries_tx, deliveries) = mpsc::channel(DELIVERY_QUEUE);
        let fragment_limit = store.config().max_request_bytes + GRPC_OVERHEAD_BYTES;
        ServerWatchStream {
            store,
            out,
            stopping,
            deliveries_tx,
            deliveries,
            watches: HashMap::new(),
            next_watch_id: 0,
            next_serial: 0,
            progress: None,
            fragment_limit,
        }
    }

    /// Serves the stream until the client goes away or the server stops.
    /// A client that only closes its sending side keeps receiving events,
    /// as with etcd.
    async fn run(mut self, mut requests: Streaming<pb::WatchRequest>) {
        let mut reading = true;
        let mut retry = tokio::time::interval(PROGRESS_RETRY);
        retry.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let step = tokio::select! {
                () = self.stopping.wait() => Step::Stop,
                () = self.out.closed() => return,
                request = requests.message(), if reading => Step::Request(request),
                Some(delivery) = self.deliveries.recv() => Step::Delivery(delivery),
                _ = retry.tick(), if self.progress.is_some() => Step::RetryProgress,
            };
            let carry_on = match step {
                Step::Request(Ok(Some(request))) => self.handle(request).await,
                Step::Request(Ok(None)) => {
                    reading = false;
                    true
                }
                Step::Request(Err(refused)) => {
                    let _ = self
                        .out
                        .try_send(Err(status::over_receive_limit_as_etcd(refused)));
                    false
                }
                Step::Delivery(delivery) => self.deliver(delivery).await,
                Step::RetryProgress => {
                    self.ask_progress_again();
                    true
                }
                Step::Stop => {
                    let _ = self.out.try_send(Err(Status::unavailable(status::STOPPED)));
                    false
                }
            };
            if !carry_on {
                return;
            }
        }
    }

    /// Returns whether the stream goes on.
    async fn handle(&mut self, request: pb::WatchRequest) -> bool {
        match request.request_union {
            Some(RequestUnion::CreateRequest(create)) => self.create(create).await,
            Some(RequestUnion::CancelRequest(cancel)) => self.cancel(cancel.watch_id).await,
            Some(RequestUnion::ProgressRequest(_)) => {
                self.request_progress();
                true
            }
            // etcd ignores a request with nothing in it.
            None => true,
        }
    }

    async fn create(&mut self, req: pb::WatchCreateRequest) -> bool {
        let watch_request = convert::watch_request(&req);
        if KeyRange::new(&watch_request.key, &watch_request.range_end).is_empty() {
            return self.send(self.refusal(EMPTY_RANGE.into())).await;
        }
        // etcd's AutoWatchID is 0: any other ID is the client's choice.
        let id = if req.watch_id != 0 {
            if self.watches.contains_key(&req.watch_id) {
                return self.send(self.refusal(DUPLICATE_WATCH_ID.into())).await;
            }
            req.watch_id
        } else {
            self.unused_watch_id()
        };
        if req.start_revision < 0 {
            return self.compacted_at_once(id).await;
        }
        let watcher = match self.store.watch(watch_request) {
            Ok(watcher) => watcher,
            Err(err) => {
                let reason = from_store(err).message().to_string();
                return self.send(self.refusal(reason)).await;
            }
        };
        let created = pb::WatchResponse {
            header: convert::current_header(&self.store),
            watch_id: id,
            created: true,
            ..Default::default()
        };
        // Sent before the watch's task starts: "created" comes first.
        if !self.send(created).await {
            return false;
        }
        self.start(id, watcher, &req);
        true
    }

    fn unused_watch_id(&mut self) -> i64 {
        while self.watches.contains_key(&self.next_watch_id) {
            self.next_watch_id += 1;
        }
        let id = self.next_watch_id;
        self.next_watch_id += 1;
        id
    }

    fn start(&mut self, id: i64, watcher: Watcher, req: &pb::WatchCreateRequest) {
        let serial = self.next_serial;
        self.next_serial += 1;
        let wake_progress = Arc::new(Notify::new());
        let task = tokio::spawn(forward(
            self.store.clone(),
            watcher,
            serial,
            id,
            Arc::clone(&wake_progress),
            self.deliveries_tx.clone(),
        ));
        if let Some(round) = &mut self.progress {
            // Its history may reach below what the round will announce.
            round.awaiting.insert(serial);
            wake_progress.notify_one();
        }
        self.watches.insert(
            id,
            ActiveWatch {
                serial,
                progress_notify: req.progress_notify,
                fragment: req.fragment,
                wake_progress,
                task,
            },
        );
    }

    /// A watch from a negative revision: etcd creates it, then cancels it
    /// as compacted, with its compact revision (-1 before any compaction),
    /// which clients turn into ErrCompacted.
    async fn compacted_at_once(&mut self, id: i64) -> bool {
        let created = pb::WatchResponse {
            header: convert::current_header(&self.store),
            watch_id: id,
            created: true,
            ..Default::default()
        };
        let compacted = self.store.kv().compact_revision();
        let canceled = pb::WatchResponse {
            header: convert::current_header(&self.store),
            watch_id: id,
            canceled: true,
            compact_revision: if compacted > 0 { compacted } else { -1 },
            ..Default::default()
        };
        self.send(created).await && self.send(canceled).await
    }

    /// A create answered with a refusal (etcd: created and canceled at once).
    fn refusal(&self, reason: String) -> pb::WatchResponse {
        pb::WatchResponse {
            header: convert::current_header(&self.store),
            watch_id: EVERY_WATCH,
            created: true,
            canceled: true,
            cancel_reason: reason,
            ..Default::default()
        }
    }

    /// Cancels a watch of this stream; an unknown ID gets no answer, as in
    /// etcd.
    async fn cancel(&mut self, id: i64) -> bool {
        let Some(mut watch) = self.watches.remove(&id) else {
            return true;
        };
        watch.task.abort();
        // Whatever it was sending is dropped or sent before the answer.
        let _ = (&mut watch.task).await;
        let canceled = pb::WatchResponse {
            header: convert::current_header(&self.store),
            watch_id: id,
            canceled: true,
            ..Default::default()
        };
        self.forget_in_round(watch.serial);
        self.send(canceled).await && self.finish_round().await
    }

    async fn deliver(&mut self, delivery: Delivery) -> bool {
        let Some(watch) = self.watches.get(&delivery.watch_id) else {
            return true;
        };
        if watch.serial != delivery.serial {
            // From a canceled watch whose ID was given again.
            return true;
        }
        match delivery.kind {
            DeliveryKind::Events => {
                let fragment = watch.fragment;
                self.send_events(delivery.response, fragment).await
            }
            DeliveryKind::Progress => {
                let revision = delivery.response.header.as_ref().map_or(0, |h| h.revision);
                let progress_notify = watch.progress_notify;
                if self.answer_round(delivery.serial, revision) {
                    self.finish_round().await
                } else if progress_notify {
                    self.send(delivery.response).await
                } else {
                    // A late answer to a progress request already answered.
                    true
                }
            }
            DeliveryKind::Ended => {
                self.watches.remove(&delivery.watch_id);
                self.forget_in_round(delivery.serial);
                self.send(delivery.response).await && self.finish_round().await
            }
        }
    }

    async fn send_events(&mut self, response: pb::WatchResponse, fragment: bool) -> bool {
        if !fragment || response.events.len() < 2 || response.encoded_len() < self.fragment_limit {
            return self.send(response).await;
        }
        for part in fragments(response, self.fragment_limit) {
            if !self.send(part).await {
                return false;
            }
        }
        true
    }

    /// Queues a response for the client; false once the stream is over.
    async fn send(&mut self, response: pb::WatchResponse) -> bool {
        tokio::select! {
            sent = self.out.send(Ok(response)) => sent.is_ok(),
            () = self.stopping.wait() => false,
        }
    }

    /// A progress request: etcd answers it once every watch of the stream
    /// is caught up, with one notification (watch ID -1) at a revision
    /// below every event still to come. A stream without watches gets no
    /// answer.
    fn request_progress(&mut self) {
        if self.watches.is_empty() {
            return;
        }
        match &mut self.progress {
            Some(round) => round.again = true,
            None => self.start_round(),
        }
    }

    fn start_round(&mut self) {
        let awaiting = self
            .watches
            .values()
            .map(|watch| {
                watch.wake_progress.notify_one();
                watch.serial
            })
            .collect();
        self.progress = Some(ProgressRound {
            awaiting,
            revision: None,
            again: false,
        });
    }

    /// The store may coalesce or miss a request made while a watcher's
    /// buffer was full; asking again costs nothing.
    fn ask_progress_again(&self) {
        let Some(round) = &self.progress else { return };
        for watch in self.watches.values() {
            if round.awaiting.contains(&watch.serial) {
                watch.wake_progress.notify_one();
            }
        }
    }

    /// Counts a watch's progress toward the round; false if the round was
    /// not waiting for it.
    fn answer_round(&mut self, serial: u64, revision: i64) -> bool {
        let Some(round) = &mut self.progress else {
            return false;
        };
        if !round.awaiting.remove(&serial) {
            return false;
        }
        round.revision = Some(round.revision.map_or(revision, |r| r.min(revision)));
        true
    }

    fn forget_in_round(&mut self, serial: u64) {
        if let Some(round) = &mut self.progress {
            round.awaiting.remove(&serial);
        }
    }

    /// Sends the round's notification once every watch has answered.
    async fn finish_round(&mut self) -> bool {
        let Some(round) = &self.progress else {
            return true;
        };
        if !round.awaiting.is_empty() {
            return true;
        }
        let (revision, again) = (round.revision, round.again);
        self.progress = None;
        if let Some(revision) = revision {
            let notification = pb::WatchResponse {
                header: convert::header(&self.store, revision),
                watch_id: EVERY_WATCH,
                ..Default::default()
            };
            if !self.send(notification).await {
                return false;
            }
        }
        if again {
            self.request_progress();
        }
        true
    }
}

/// Reads one watch's store watcher and hands its responses, converted, to
/// the stream's task. Ends after the watch's last response.
async fn forward(
    store: Store,
    mut watcher: Watcher,
    serial: u64,
    watch_id: i64,
    wake_progress: Arc<Notify>,
    deliveries: mpsc::Sender<Delivery>,
) {
    loop {
        let next = tokio::select! {
            next = watcher.next() => next,
            () = wake_progress.notified() => {
                watcher.request_progress();
                continue;
            }
        };
        let (kind, response) = match next {
            Some(resp) => {
                let kind = if resp.canceled {
                    DeliveryKind::Ended
                } else if resp.is_progress_notify() {
                    DeliveryKind::Progress
                } else {
                    DeliveryKind::Events
                };
                (kind, convert::watch_response(&store, watch_id, resp))
            }
            None => (
                DeliveryKind::Ended,
                pb::WatchResponse {
                    header: convert::current_header(&store),
                    watch_id,
                    canceled: true,
                    cancel_reason: status::STOPPED.into(),
                    ..Default::default()
                },
            ),
        };
        let delivery = Delivery {
            serial,
            watch_id,
            kind,
            response,
        };
        if deliveries.send(delivery).await.is_err() || kind == DeliveryKind::Ended {
            return;
        }
    }
}

/// Splits a response into parts under `limit` bytes (a part with a single
/// event may be bigger), each but the last marked `fragment`, as etcd does.
fn fragments(mut response: pb::WatchResponse, limit: usize) -> Vec<pb::WatchResponse> {
    let events = std::mem::take(&mut response.events);
    response.fragment = true;
    let base_len = response.encoded_len();
    let mut parts = Vec::new();
    let mut part = Vec::new();
    let mut size = base_len;
    for event in events {
        let event_len = prost::encoding::message::encoded_len(11, &event);
        if !part.is_empty() && size + event_len >= limit {
            parts.push(pb::WatchResponse {
                events: std::mem::take(&mut part),
                ..response.clone()
            });
            size = base_len;
        }
        size += event_len;
        part.push(event);
    }
    parts.push(pb::WatchResponse {
        events: part,
        fragment: false,
        ..response
    });
    parts
}

#[cfg(test)]
mod fragment_tests {
    use super::*;
    use crate::grpc::pb::mvccpb;

    fn event(value_len: usize) -> mvccpb::Event {
        mvccpb::Event {
            r#type: 0,
            kv: Some(mvccpb::KeyValue {
                key: b"k".to_vec(),
                value: vec![b'v'; value_len],
                ..Default::default()
            }),
            prev_kv: None,
        }
    }

    #[test]
    fn a_big_response_is_split_under_the_limit_and_reassembles() {
        let response = pb::WatchResponse {
            watch_id: 7,
            events: (0..10).map(|_| event(1000)).collect(),
            ..Default::default()
        };
        let parts = fragments(response.clone(), 3500);
        assert_eq!(parts.len(), 4, "three events per part, then one");
        for part in &parts[..3] {
            assert!(part.fragment);
            assert!(part.encoded_len() < 3500);
            assert_eq!(part.watch_id, 7);
        }
        assert!(!parts[3].fragment);
        let events: Vec<_> = parts.into_iter().flat_map(|p| p.events).collect();
        assert_eq!(events, response.events);
    }

    #[test]
    fn an_event_bigger_than_the_limit_goes_alone() {
        let response = pb::WatchResponse {
            events: vec![event(10), event(5000), event(10)],
            ..Default::default()
        };
        let parts = fragments(response, 1000);
        let sizes: Vec<usize> = parts.iter().map(|p| p.events.len()).collect();
        assert_eq!(sizes, [1, 1, 1]);
        assert_eq!(
            parts.iter().map(|p| p.fragment).collect::<Vec<_>>(),
            [true, true, false]
        );
    }
}
