//! The etcd v3 API as a client sees it: a server on loopback over a store
//! in a temporary directory, spoken to with the generated tonic clients.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;
use tonic::{Code, Status, Streaming};

use super::pb::etcdserverpb::{
    self as pb, cluster_client::ClusterClient, compare, kv_client::KvClient,
    lease_client::LeaseClient, maintenance_client::MaintenanceClient, request_op, response_op,
    watch_client::WatchClient, watch_create_request::FilterType, watch_request::RequestUnion,
};
use super::pb::mvccpb;
use crate::mvcc::prefix_end;
use crate::node::testing::test_config;
use crate::{Store, StoreConfig};

const WAIT: Duration = Duration::from_secs(10);

/// A store and its gRPC server on 127.0.0.1.
struct Server {
    store: Store,
    channel: Channel,
    stop: Option<oneshot::Sender<()>>,
    serving: JoinHandle<Result<(), tonic::transport::Error>>,
    _dir: Option<tempfile::TempDir>,
}

impl Server {
    async fn start() -> Server {
        Self::start_with(|_| {}).await
    }

    async fn start_with(adjust: impl FnOnce(&mut StoreConfig)) -> Server {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut config = test_config(dir.path());
        adjust(&mut config);
        let store = Store::open(config).await.expect("open store");
        let mut server = Self::serve(store).await;
        server._dir = Some(dir);
        server
    }

    async fn serve(store: Store) -> Server {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let serving = tokio::spawn(super::serve(
            store.clone(),
            vec![super::ClientListener::plain(listener)],
            async {
                let _ = stopped.await;
            },
        ));
        Server {
            store,
            channel: connect(addr).await,
            stop: Some(stop),
            serving,
            _dir: None,
        }
    }

    fn kv(&self) -> KvClient<Channel> {
        KvClient::new(self.channel.clone())
    }

    fn lease(&self) -> LeaseClient<Channel> {
        LeaseClient::new(self.channel.clone())
    }

    fn cluster(&self) -> ClusterClient<Channel> {
        ClusterClient::new(self.channel.clone())
    }

    fn maintenance(&self) -> MaintenanceClient<Channel> {
        MaintenanceClient::new(self.channel.clone())
    }

    async fn watch_stream(&self) -> WatchStream {
        WatchStream::open(self.channel.clone()).await
    }

    /// Stops serving; open streams must not hold the shutdown up.
    async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        tokio::time::timeout(WAIT, &mut self.serving)
            .await
            .expect("server stops in time")
            .expect("server task")
            .expect("server ends cleanly");
        self.store.clone().close().await.expect("close store");
    }
}

async fn connect(addr: SocketAddr) -> Channel {
    tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .expect("connect")
}

/// One client watch stream.
struct WatchStream {
    requests: mpsc::Sender<pb::WatchRequest>,
    responses: Streaming<pb::WatchResponse>,
}

impl WatchStream {
    async fn open(channel: Channel) -> WatchStream {
        let (requests, outgoing) = mpsc::channel(16);
        let responses = WatchClient::new(channel)
            .watch(ReceiverStream::new(outgoing))
            .await
            .expect("watch stream")
            .into_inner();
        WatchStream {
            requests,
            responses,
        }
    }

    async fn send(&self, union: RequestUnion) {
        let request = pb::WatchRequest {
            request_union: Some(union),
        };
        self.requests.send(request).await.expect("stream open");
    }

    /// Creates a watch and returns its ID from the "created" answer.
    async fn create(&mut self, create: pb::WatchCreateRequest) -> i64 {
        self.send(RequestUnion::CreateRequest(create)).await;
        let created = self.next().await;
        assert!(created.created && !created.canceled, "{created:?}");
        created.watch_id
    }

    async fn cancel(&self, watch_id: i64) {
        self.send(RequestUnion::CancelRequest(pb::WatchCancelRequest {
            watch_id,
        }))
        .await;
    }

    async fn request_progress(&self) {
        self.send(RequestUnion::ProgressRequest(pb::WatchProgressRequest {}))
            .await;
    }

    async fn next(&mut self) -> pb::WatchResponse {
        tokio::time::timeout(WAIT, self.responses.message())
            .await
            .expect("watch response in time")
            .expect("stream healthy")
            .expect("stream open")
    }

    /// Nothing arrives for a while.
    async fn assert_quiet(&mut self) {
        let waited =
            tokio::time::timeout(Duration::from_millis(300), self.responses.message()).await;
        assert!(waited.is_err(), "unexpected {waited:?}");
    }

    /// Collects events until `count` have arrived.
    async fn events(&mut self, count: usize) -> Vec<mvccpb::Event> {
        let mut events = Vec::new();
        while events.len() < count {
            let resp = self.next().await;
            assert!(!resp.canceled, "{resp:?}");
            events.extend(resp.events);
        }
        events
    }
}

fn prefix_watch(prefix: &str, start_revision: i64) -> pb::WatchCreateRequest {
    pb::WatchCreateRequest {
        key: prefix.into(),
        range_end: prefix_end(prefix.as_bytes()),
        start_revision,
        ..Default::default()
    }
}

async fn put(kv: &mut KvClient<Channel>, key: &str, value: &str) -> i64 {
    let resp = kv
        .put(pb::PutRequest {
            key: key.into(),
            value: value.into(),
            ..Default::default()
        })
        .await
        .expect("put")
        .into_inner();
    resp.header.expect("header").revision
}

async fn get(kv: &mut KvClient<Channel>, req: pb::RangeRequest) -> pb::RangeResponse {
    kv.range(req).await.expect("range").into_inner()
}

fn prefix(prefix: &str) -> pb::RangeRequest {
    pb::RangeRequest {
        key: prefix.into(),
        range_end: prefix_end(prefix.as_bytes()),
        ..Default::default()
    }
}

fn key(key: &str) -> pb::RangeRequest {
    pb::RangeRequest {
        key: key.into(),
        ..Default::default()
    }
}

fn keys(kvs: &[mvccpb::KeyValue]) -> Vec<String> {
    kvs.iter()
        .map(|kv| String::from_utf8_lossy(&kv.key).into_owned())
        .collect()
}

fn assert_status<T: std::fmt::Debug>(result: Result<T, Status>, code: Code, message: &str) {
    let status = result.expect_err("an error");
    assert_eq!(
        (status.code(), status.message()),
        (code, message),
        "{status:?}"
    );
}

fn put_op(key: &str, value: &str) -> pb::RequestOp {
    pb::RequestOp {
        request: Some(request_op::Request::RequestPut(pb::PutRequest {
            key: key.into(),
            value: value.into(),
            ..Default::default()
        })),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn put_then_get_by_key_prefix_and_revision() {
    let server = Server::start().await;
    let mut kv = server.kv();
    assert_eq!(put(&mut kv, "/a/1", "one").await, 1);
    put(&mut kv, "/a/2", "two").await;
    put(&mut kv, "/b/1", "other").await;
    let rev = put(&mut kv, "/a/1", "uno").await;
    assert_eq!(rev, 4);

    let resp = get(&mut kv, prefix("/a/")).await;
    let header = resp.header.expect("header");
    assert_eq!(header.revision, 4);
    assert_eq!(header.cluster_id, server.store.cluster_id());
    assert_eq!(header.member_id, server.store.member_id());
    assert!(header.raft_term >= 1, "{header:?}");
    assert_eq!(keys(&resp.kvs), ["/a/1", "/a/2"]);
    assert_eq!(resp.count, 2);
    let first = &resp.kvs[0];
    assert_eq!(
        (
            first.value.as_slice(),
            first.create_revision,
            first.mod_revision,
            first.version
        ),
        (&b"uno"[..], 1, 4, 2)
    );

    // The past, at a revision.
    let old = get(
        &mut kv,
        pb::RangeRequest {
            revision: 1,
            ..key("/a/1")
        },
    )
    .await;
    assert_eq!(old.kvs[0].value, b"one");
    assert_eq!(
        old.header.unwrap().revision,
        4,
        "served at the current revision"
    );

    // Limit, sort, keys only, count only.
    let limited = get(
        &mut kv,
        pb::RangeRequest {
            limit: 1,
            sort_order: pb::range_request::SortOrder::Descend as i32,
            ..prefix("/")
        },
    )
    .await;
    assert_eq!(keys(&limited.kvs), ["/b/1"]);
    assert!(limited.more);
    assert_eq!(limited.count, 3);
    let keys_only = get(
        &mut kv,
        pb::RangeRequest {
            keys_only: true,
            serializable: true,
            ..prefix("/a/")
        },
    )
    .await;
    assert!(keys_only.kvs.iter().all(|kv| kv.value.is_empty()));
    let counted = get(
        &mut kv,
        pb::RangeRequest {
            count_only: true,
            ..prefix("/")
        },
    )
    .await;
    assert!(counted.kvs.is_empty());
    assert_eq!(counted.count, 3);
    let by_mod = get(
        &mut kv,
        pb::RangeRequest {
            min_mod_revision: 3,
            ..prefix("/")
        },
    )
    .await;
    assert_eq!(keys(&by_mod.kvs), ["/a/1", "/b/1"]);
    // Every key from "\0" on.
    let all = get(
        &mut kv,
        pb::RangeRequest {
            key: vec![0],
            range_end: vec![0],
            ..Default::default()
        },
    )
    .await;
    assert_eq!(all.count, 3);

    // Put with prev_kv and ignore_value.
    let resp = kv
        .put(pb::PutRequest {
            key: "/a/2".into(),
            prev_kv: true,
            ignore_value: true,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(resp.prev_kv.unwrap().value, b"two");
    let kept = get(&mut kv, key("/a/2")).await;
    assert_eq!(kept.kvs[0].value, b"two", "ignore_value keeps the value");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_range_returns_what_it_deleted() {
    let server = Server::start().await;
    let mut kv = server.kv();
    for k in ["/d/1", "/d/2", "/e"] {
        put(&mut kv, k, "v").await;
    }
    let resp = kv
        .delete_range(pb::DeleteRangeRequest {
            key: "/d/".into(),
            range_end: prefix_end(b"/d/"),
            prev_kv: true,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(resp.deleted, 2);
    assert_eq!(keys(&resp.prev_kvs), ["/d/1", "/d/2"]);
    assert_eq!(resp.header.unwrap().revision, 4);
    assert_eq!(get(&mut kv, prefix("/d/")).await.count, 0);
    let none = kv
        .delete_range(pb::DeleteRangeRequest {
            key: "/missing".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(none.deleted, 0);
    assert_eq!(get(&mut kv, key("/e")).await.count, 1);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn txn_compare_and_swap_takes_either_branch() {
    let server = Server::start().await;
    let mut kv = server.kv();
    let rev = put(&mut kv, "lock", "free").await;
    let cas = |expected_mod: i64| pb::TxnRequest {
        compare: vec![pb::Compare {
            result: compare::CompareResult::Equal as i32,
            target: compare::CompareTarget::Mod as i32,
            key: "lock".into(),
            target_union: Some(compare::TargetUnion::ModRevision(expected_mod)),
            range_end: Vec::new(),
        }],
        success: vec![put_op("lock", "taken")],
        failure: vec![pb::RequestOp {
            request: Some(request_op::Request::RequestRange(key("lock"))),
        }],
    };

    let won = kv.txn(cas(rev)).await.unwrap().into_inner();
    assert!(won.succeeded);
    assert_eq!(won.header.unwrap().revision, rev + 1);
    assert!(matches!(
        won.responses[0].response,
        Some(response_op::Response::ResponsePut(_))
    ));

    let lost = kv.txn(cas(rev)).await.unwrap().into_inner();
    assert!(!lost.succeeded);
    assert_eq!(lost.header.unwrap().revision, rev + 1, "no write");
    let Some(response_op::Response::ResponseRange(current)) = &lost.responses[0].response else {
        panic!("{lost:?}")
    };
    assert_eq!(current.kvs[0].value, b"taken");

    // A compare of the value over a range, and a nested txn.
    let nested = pb::TxnRequest {
        compare: vec![pb::Compare {
            result: compare::CompareResult::Equal as i32,
            target: compare::CompareTarget::Value as i32,
            key: "lock".into(),
            range_end: b"lock\0".to_vec(),
            target_union: Some(compare::TargetUnion::Value(b"taken".to_vec())),
        }],
        success: vec![pb::RequestOp {
            request: Some(request_op::Request::RequestTxn(pb::TxnRequest {
                compare: vec![pb::Compare {
                    result: compare::CompareResult::Greater as i32,
                    target: compare::CompareTarget::Version as i32,
                    key: "lock".into(),
                    target_union: Some(compare::TargetUnion::Version(1)),
                    range_end: Vec::new(),
                }],
                success: vec![put_op("inner", "then")],
                failure: vec![put_op("inner", "else")],
            })),
        }],
        failure: Vec::new(),
    };
    let resp = kv.txn(nested).await.unwrap().into_inner();
    assert!(resp.succeeded);
    let Some(response_op::Response::ResponseTxn(inner)) = &resp.responses[0].response else {
        panic!("{resp:?}")
    };
    assert!(inner.succeeded, "version 2 > 1");
    assert_eq!(get(&mut kv, key("inner")).await.kvs[0].value, b"then");
    server.shutdown().await;
}

/// A txn in a txn `depth` times, with `leaf` at the bottom.
fn nested_txn(depth: usize, leaf: Vec<pb::RequestOp>) -> pb::TxnRequest {
    (1..depth).fold(
        pb::TxnRequest {
            success: leaf,
            ..Default::default()
        },
        |inner, _| pb::TxnRequest {
            success: vec![pb::RequestOp {
                request: Some(request_op::Request::RequestTxn(inner)),
            }],
            ..Default::default()
        },
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn txns_nest_as_deep_as_a_client_can_read_the_answer() {
    let server = Server::start().await;
    let mut kv = server.kv();
    put(&mut kv, "deep", "before").await;
    // At the bottom, the answers that nest deepest: a range's key-values
    // and a put's previous key-value.
    let leaf = vec![
        pb::RequestOp {
            request: Some(request_op::Request::RequestRange(key("deep"))),
        },
        pb::RequestOp {
            request: Some(request_op::Request::RequestPut(pb::PutRequest {
                key: b"deep".to_vec(),
                value: b"after".to_vec(),
                prev_kv: true,
                ..Default::default()
            })),
        },
    ];
    let depth = crate::command::MAX_TXN_DEPTH;
    // The generated client (prost, recursion limit 100) reads the answer.
    let mut answer = kv
        .txn(nested_txn(depth, leaf.clone()))
        .await
        .expect("the deepest txn is applied and its answer read")
        .into_inner();
    for _ in 1..depth {
        let Some(response_op::Response::ResponseTxn(inner)) = answer.responses.remove(0).response
        else {
            panic!("a nested txn answers with a txn response")
        };
        answer = inner;
    }
    let [range, put] = &answer.responses[..] else {
        panic!("{answer:?}")
    };
    let Some(response_op::Response::ResponseRange(range)) = &range.response else {
        panic!("{range:?}")
    };
    assert_eq!(range.kvs[0].value, b"before");
    let Some(response_op::Response::ResponsePut(put)) = &put.response else {
        panic!("{put:?}")
    };
    assert_eq!(
        put.prev_kv.as_ref().map(|kv| &kv.value[..]),
        Some(&b"before"[..])
    );
    assert_eq!(get(&mut kv, key("deep")).await.kvs[0].value, b"after");
    // etcd's op budget would take 128 levels; a level more than the
    // client can read is refused as etcd refuses a txn past its budget.
    for depth in [depth + 1, 128, 129, 300] {
        assert_status(
            kv.txn(nested_txn(depth, vec![put_op("deeper", "v")])).await,
            Code::InvalidArgument,
            "etcdserver: too many operations in txn request",
        );
    }
    // A nested txn gets what its parent left: 128 - 100.
    let mut ops: Vec<_> = (0..99).map(|i| put_op(&format!("p{i}"), "v")).collect();
    ops.push(pb::RequestOp {
        request: Some(request_op::Request::RequestTxn(pb::TxnRequest {
            success: (0..29).map(|i| put_op(&format!("n{i}"), "v")).collect(),
            ..Default::default()
        })),
    });
    let over_budget = pb::TxnRequest {
        success: ops,
        ..Default::default()
    };
    assert_status(
        kv.txn(over_budget).await,
        Code::InvalidArgument,
        "etcdserver: too many operations in txn request",
    );
    assert!(get(&mut kv, key("deeper")).await.kvs.is_empty());
    assert!(get(&mut kv, key("p0")).await.kvs.is_empty());
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_from_a_negative_revision_is_compacted_below_any_compaction() {
    let server = Server::start().await;
    let mut stream = server.watch_stream().await;
    let id = stream.create(prefix_watch("/n", -5)).await;
    assert!(id >= 0);
    let canceled = stream.next().await;
    assert_eq!(
        (
            canceled.watch_id,
            canceled.canceled,
            canceled.compact_revision
        ),
        (id, true, -1),
        "{canceled:?}"
    );
    assert!(canceled.cancel_reason.is_empty());
    stream.assert_quiet().await;
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_over_the_receive_limit_ends_a_stream_resource_exhausted() {
    let server = Server::start().await;
    let mut stream = server.watch_stream().await;
    let create = pb::WatchCreateRequest {
        key: vec![b'k'; 3 * 1024 * 1024],
        ..Default::default()
    };
    let size = prost::Message::encoded_len(&pb::WatchRequest {
        request_union: Some(RequestUnion::CreateRequest(create.clone())),
    });
    stream.send(RequestUnion::CreateRequest(create)).await;
    let ended = tokio::time::timeout(WAIT, stream.responses.message())
        .await
        .expect("an answer in time");
    let limit = server.store.config().max_request_bytes + super::GRPC_OVERHEAD_BYTES;
    assert_status(
        ended,
        Code::ResourceExhausted,
        &format!("grpc: received message larger than max ({size} vs. {limit})"),
    );
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_may_have_a_negative_id_as_in_etcd() {
    let server = Server::start().await;
    let mut kv = server.kv();
    let mut lease = server.lease();
    let granted = lease
        .lease_grant(pb::LeaseGrantRequest { ttl: 60, id: -5 })
        .await
        .expect("granted")
        .into_inner();
    assert_eq!((granted.id, granted.ttl), (-5, 60));
    kv.put(pb::PutRequest {
        key: "leased".into(),
        value: "v".into(),
        lease: -5,
        ..Default::default()
    })
    .await
    .expect("put with the lease");
    let ttl = lease
        .lease_time_to_live(pb::LeaseTimeToLiveRequest { id: -5, keys: true })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(ttl.keys, [b"leased".to_vec()]);
    lease
        .lease_revoke(pb::LeaseRevokeRequest { id: -5 })
        .await
        .expect("revoked");
    assert!(get(&mut kv, key("leased")).await.kvs.is_empty());
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compares_outside_the_enums_are_evaluated_as_etcd_does() {
    let server = Server::start().await;
    let mut kv = server.kv();
    put(&mut kv, "present", "v").await;
    let outcome = |result: i32, target: i32, key: &str| {
        let txn = pb::TxnRequest {
            compare: vec![pb::Compare {
                result,
                target,
                key: key.into(),
                range_end: vec![],
                target_union: Some(compare::TargetUnion::Version(7)),
            }],
            ..Default::default()
        };
        let mut kv = kv.clone();
        async move { kv.txn(txn).await.expect("answered").into_inner().succeeded }
    };
    let (equal, not_equal, value, version) = (0, 3, 3, 0);
    // An unknown result holds, but a value compare of no key fails.
    assert!(outcome(9, version, "present").await);
    assert!(outcome(-1, version, "absent").await);
    assert!(outcome(9, value, "present").await);
    assert!(!outcome(9, value, "absent").await);
    // An unknown target compares as equal.
    assert!(outcome(equal, 9, "present").await);
    assert!(outcome(equal, 9, "absent").await);
    assert!(!outcome(not_equal, 9, "present").await);
    assert!(outcome(9, 9, "absent").await);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sort_outside_the_enums_is_an_invalid_sort_option() {
    let server = Server::start().await;
    let mut kv = server.kv();
    put(&mut kv, "k", "v").await;
    for (sort_order, sort_target) in [(7, 0), (-1, 1), (0, 9), (1, 5)] {
        let range = pb::RangeRequest {
            sort_order,
            sort_target,
            ..key("k")
        };
        assert_status(
            kv.range(range.clone()).await,
            Code::InvalidArgument,
            "etcdserver: invalid sort option",
        );
        let in_txn = pb::TxnRequest {
            success: vec![pb::RequestOp {
                request: Some(request_op::Request::RequestRange(range)),
            }],
            ..Default::default()
        };
        assert_status(
            kv.txn(in_txn).await,
            Code::InvalidArgument,
            "etcdserver: invalid sort option",
        );
    }
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_with_bad_peer_urls_is_refused_before_anything_else() {
    let server = Server::start().await;
    for urls in [vec![], vec!["not a url".to_string()]] {
        assert_status(
            server
                .cluster()
                .member_add(pb::MemberAddRequest {
                    peer_ur_ls: urls,
                    is_learner: false,
                })
                .await,
            Code::InvalidArgument,
            "etcdserver: given member URLs are invalid",
        );
    }
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_carry_etcds_codes_and_messages() {
    let server = Server::start().await;
    let mut kv = server.kv();
    let mut lease = server.lease();
    for i in 0..5 {
        put(&mut kv, "k", &i.to_string()).await;
    }

    assert_status(
        kv.range(key("")).await,
        Code::InvalidArgument,
        "etcdserver: key is not provided",
    );
    assert_status(
        kv.put(pb::PutRequest::default()).await,
        Code::InvalidArgument,
        "etcdserver: key is not provided",
    );
    assert_status(
        kv.put(pb::PutRequest {
            key: "k".into(),
            value: "v".into(),
            ignore_value: true,
            ..Default::default()
        })
        .await,
        Code::InvalidArgument,
        "etcdserver: value is provided",
    );
    assert_status(
        kv.put(pb::PutRequest {
            key: "absent".into(),
            ignore_value: true,
            ..Default::default()
        })
        .await,
        Code::InvalidArgument,
        "etcdserver: key not found",
    );
    assert_status(
        kv.range(pb::RangeRequest {
            revision: 100,
            ..key("k")
        })
        .await,
        Code::OutOfRange,
        "etcdserver: mvcc: required revision is a future revision",
    );
    assert_status(
        kv.compact(pb::CompactionRequest {
            revision: 100,
            physical: false,
        })
        .await,
        Code::OutOfRange,
        "etcdserver: mvcc: required revision is a future revision",
    );
    kv.compact(pb::CompactionRequest {
        revision: 4,
        physical: true,
    })
    .await
    .expect("compact");
    assert_status(
        kv.range(pb::RangeRequest {
            revision: 2,
            ..key("k")
        })
        .await,
        Code::OutOfRange,
        "etcdserver: mvcc: required revision has been compacted",
    );
    assert_status(
        kv.compact(pb::CompactionRequest {
            revision: 3,
            physical: false,
        })
        .await,
        Code::OutOfRange,
        "etcdserver: mvcc: required revision has been compacted",
    );

    let too_many = pb::TxnRequest {
        success: (0..129).map(|i| put_op(&format!("k{i}"), "v")).collect(),
        ..Default::default()
    };
    assert_status(
        kv.txn(too_many).await,
        Code::InvalidArgument,
        "etcdserver: too many operations in txn request",
    );
    let duplicate = pb::TxnRequest {
        success: vec![put_op("twice", "1"), put_op("twice", "2")],
        ..Default::default()
    };
    assert_status(
        kv.txn(duplicate).await,
        Code::InvalidArgument,
        "etcdserver: duplicate key given in txn request",
    );
    let empty_op = pb::TxnRequest {
        success: vec![pb::RequestOp { request: None }],
        ..Default::default()
    };
    assert_status(
        kv.txn(empty_op).await,
        Code::InvalidArgument,
        "etcdserver: key not found",
    );
    let big = server.store.config().max_request_bytes + 1;
    assert_status(
        kv.put(pb::PutRequest {
            key: "big".into(),
            value: vec![b'x'; big],
            ..Default::default()
        })
        .await,
        Code::InvalidArgument,
        "etcdserver: request is too large",
    );
    // Beyond the limit plus etcd's gRPC overhead the message itself is
    // refused, before the store sees it.
    let huge = pb::PutRequest {
        key: "huge".into(),
        value: vec![b'x'; big + super::GRPC_OVERHEAD_BYTES],
        ..Default::default()
    };
    let limit = big - 1 + super::GRPC_OVERHEAD_BYTES;
    let refusal = format!(
        "grpc: received message larger than max ({} vs. {limit})",
        prost::Message::encoded_len(&huge)
    );
    assert_status(kv.put(huge).await, Code::ResourceExhausted, &refusal);

    assert_status(
        lease.lease_revoke(pb::LeaseRevokeRequest { id: 42 }).await,
        Code::NotFound,
        "etcdserver: requested lease not found",
    );
    assert_status(
        kv.put(pb::PutRequest {
            key: "leased".into(),
            lease: 42,
            ..Default::default()
        })
        .await,
        Code::NotFound,
        "etcdserver: requested lease not found",
    );
    lease
        .lease_grant(pb::LeaseGrantRequest { ttl: 60, id: 7 })
        .await
        .unwrap();
    assert_status(
        lease
            .lease_grant(pb::LeaseGrantRequest { ttl: 60, id: 7 })
            .await,
        Code::FailedPrecondition,
        "etcdserver: lease already exists",
    );
    assert_status(
        lease
            .lease_grant(pb::LeaseGrantRequest {
                ttl: crate::lease::MAX_LEASE_TTL + 1,
                id: 0,
            })
            .await,
        Code::OutOfRange,
        "etcdserver: too large lease TTL",
    );
    assert_status(
        server
            .maintenance()
            .move_leader(pb::MoveLeaderRequest { target_id: 12345 })
            .await,
        Code::FailedPrecondition,
        "etcdserver: bad leader transferee",
    );
    assert_status(
        server
            .cluster()
            .member_remove(pb::MemberRemoveRequest { id: 12345 })
            .await,
        Code::NotFound,
        "etcdserver: member not found",
    );
    // Nothing above changed the data.
    assert_eq!(get(&mut kv, key("k")).await.kvs[0].value, b"4");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_replays_history_then_streams_live_events() {
    let server = Server::start().await;
    let mut kv = server.kv();
    put(&mut kv, "/w/a", "1").await;
    put(&mut kv, "/x", "other").await;
    put(&mut kv, "/w/b", "1").await;

    let mut stream = server.watch_stream().await;
    let id = stream
        .create(pb::WatchCreateRequest {
            prev_kv: true,
            ..prefix_watch("/w/", 1)
        })
        .await;
    assert_eq!(id, 0, "etcd numbers a stream's watches from 0");
    let history = stream.events(2).await;
    assert_eq!(keys_of(&history), ["/w/a", "/w/b"]);

    put(&mut kv, "/w/a", "2").await;
    kv.delete_range(pb::DeleteRangeRequest {
        key: "/w/b".into(),
        ..Default::default()
    })
    .await
    .unwrap();
    let resp = stream.next().await;
    assert_eq!(resp.watch_id, id);
    assert_eq!(resp.header.as_ref().unwrap().revision, 4);
    let event = &resp.events[0];
    assert_eq!(event.r#type, mvccpb::event::EventType::Put as i32);
    assert_eq!(event.kv.as_ref().unwrap().value, b"2");
    assert_eq!(event.prev_kv.as_ref().unwrap().value, b"1");
    let deleted = &stream.next().await.events[0];
    assert_eq!(deleted.r#type, mvccpb::event::EventType::Delete as i32);
    assert_eq!(deleted.kv.as_ref().unwrap().mod_revision, 5);
    assert_eq!(deleted.prev_kv.as_ref().unwrap().key, b"/w/b");

    stream.cancel(id).await;
    let canceled = stream.next().await;
    assert!(canceled.canceled && canceled.watch_id == id, "{canceled:?}");
    put(&mut kv, "/w/a", "3").await;
    stream.assert_quiet().await;
    server.shutdown().await;
}

fn keys_of(events: &[mvccpb::Event]) -> Vec<String> {
    events
        .iter()
        .map(|e| String::from_utf8_lossy(&e.kv.as_ref().unwrap().key).into_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watches_on_one_stream_keep_their_own_ids_and_filters() {
    let server = Server::start().await;
    let mut kv = server.kv();
    let mut stream = server.watch_stream().await;
    let puts = stream
        .create(pb::WatchCreateRequest {
            watch_id: 10,
            filters: vec![FilterType::Nodelete as i32],
            ..prefix_watch("/f/", 0)
        })
        .await;
    let deletes = stream
        .create(pb::WatchCreateRequest {
            filters: vec![FilterType::Noput as i32],
            ..prefix_watch("/f/", 0)
        })
        .await;
    assert_eq!((puts, deletes), (10, 0));

    // An ID already in use is refused.
    stream
        .send(RequestUnion::CreateRequest(pb::WatchCreateRequest {
            watch_id: 10,
            ..prefix_watch("/f/", 0)
        }))
        .await;
    let refused = stream.next().await;
    assert!(refused.created && refused.canceled, "{refused:?}");
    assert_eq!(refused.watch_id, -1);
    assert!(
        refused.cancel_reason.contains("duplicate watch ID"),
        "{refused:?}"
    );
    // So is a range that ends before it starts.
    stream
        .send(RequestUnion::CreateRequest(pb::WatchCreateRequest {
            key: "/f/b".into(),
            range_end: "/f/a".into(),
            ..Default::default()
        }))
        .await;
    let refused = stream.next().await;
    assert!(refused.created && refused.canceled && refused.watch_id == -1);
    assert_eq!(refused.cancel_reason, "mvcc: watcher range is empty");

    put(&mut kv, "/f/1", "v").await;
    kv.delete_range(pb::DeleteRangeRequest {
        key: "/f/1".into(),
        ..Default::default()
    })
    .await
    .unwrap();
    let first = stream.next().await;
    let second = stream.next().await;
    let mut seen = vec![
        (first.watch_id, first.events[0].r#type),
        (second.watch_id, second.events[0].r#type),
    ];
    seen.sort();
    assert_eq!(
        seen,
        [
            (deletes, mvccpb::event::EventType::Delete as i32),
            (puts, mvccpb::event::EventType::Put as i32)
        ]
    );

    // Canceling one leaves the other.
    stream.cancel(puts).await;
    assert!(stream.next().await.canceled);
    put(&mut kv, "/f/2", "v").await;
    kv.delete_range(pb::DeleteRangeRequest {
        key: "/f/2".into(),
        ..Default::default()
    })
    .await
    .unwrap();
    let resp = stream.next().await;
    assert_eq!(resp.watch_id, deletes);
    assert_eq!(resp.header.unwrap().revision, 4);
    stream.assert_quiet().await;
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_holds_up_neither_writers_nor_its_other_watch() {
    let server = Server::start().await;
    let mut stream = server.watch_stream().await;
    let busy = stream.create(prefix_watch("/busy/", 0)).await;
    let quiet = stream.create(prefix_watch("/quiet", 0)).await;
    // Far more than every queue and window between store and client holds.
    let (writers, each) = (8, 250);
    let value = "v".repeat(4096);
    let tasks: Vec<_> = (0..writers)
        .map(|w| {
            let (store, value) = (server.store.clone(), value.clone());
            tokio::spawn(async move {
                for i in 0..each {
                    let key = format!("/busy/{w}/{i:03}");
                    store
                        .put(crate::api::PutRequest::new(key, value.as_str()))
                        .await
                        .expect("put while nobody reads");
                }
            })
        })
        .collect();
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(60), task)
            .await
            .expect("writers are not held up")
            .unwrap();
    }
    let (_, unsynced) = server.store.watcher_counts();
    assert_eq!(unsynced, 1, "the busy watcher fell behind in the store");
    let quiet_rev = put(&mut server.kv(), "/quiet", "v").await;

    let mut busy_revisions = Vec::new();
    let mut quiet_seen = false;
    while busy_revisions.len() < writers * each || !quiet_seen {
        let resp = stream.next().await;
        for event in &resp.events {
            let revision = event.kv.as_ref().unwrap().mod_revision;
            if resp.watch_id == busy {
                busy_revisions.push(revision);
            } else {
                assert_eq!((resp.watch_id, revision), (quiet, quiet_rev));
                quiet_seen = true;
            }
        }
    }
    let expected: Vec<i64> = (1..=(writers * each) as i64).collect();
    assert_eq!(
        busy_revisions, expected,
        "caught up without gap or duplicate"
    );
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_progress_request_answers_for_every_watch_of_the_stream() {
    let server = Server::start().await;
    let mut kv = server.kv();
    let mut stream = server.watch_stream().await;
    // No watch yet: etcd answers nothing.
    stream.request_progress().await;
    stream.assert_quiet().await;

    for i in 0..3 {
        put(&mut kv, &format!("/p/{i}"), "v").await;
    }
    put(&mut kv, "/q", "v").await;
    let b = stream.create(prefix_watch("/q", 0)).await;
    let a = stream.create(prefix_watch("/p/", 1)).await;
    assert_ne!(a, b);
    stream.events(3).await;
    stream.request_progress().await;
    let progress = stream.next().await;
    assert_eq!(progress.watch_id, -1, "{progress:?}");
    assert!(progress.events.is_empty() && !progress.canceled);
    assert_eq!(progress.header.unwrap().revision, 4);

    // After more writes, progress again covers them.
    put(&mut kv, "/p/3", "v").await;
    put(&mut kv, "/elsewhere", "v").await;
    assert_eq!(
        stream.events(1).await[0].kv.as_ref().unwrap().mod_revision,
        5
    );
    stream.request_progress().await;
    let progress = stream.next().await;
    assert_eq!(
        (progress.watch_id, progress.header.unwrap().revision),
        (-1, 6)
    );
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_notify_watches_hear_the_revision_periodically() {
    let server = Server::start_with(|config| {
        config.watch.progress_interval = Duration::from_millis(200);
    })
    .await;
    let mut kv = server.kv();
    let mut stream = server.watch_stream().await;
    let id = stream
        .create(pb::WatchCreateRequest {
            progress_notify: true,
            ..prefix_watch("/n/", 0)
        })
        .await;
    put(&mut kv, "/unwatched", "v").await;
    let notification = loop {
        let resp = stream.next().await;
        if resp.header.as_ref().unwrap().revision == 1 {
            break resp;
        }
    };
    assert_eq!(notification.watch_id, id);
    assert!(notification.events.is_empty() && !notification.canceled);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watching_a_compacted_revision_is_canceled_with_the_compact_revision() {
    let server = Server::start().await;
    let mut kv = server.kv();
    for i in 0..5 {
        put(&mut kv, "/c", &i.to_string()).await;
    }
    kv.compact(pb::CompactionRequest {
        revision: 4,
        physical: true,
    })
    .await
    .unwrap();
    let mut stream = server.watch_stream().await;
    let id = stream.create(prefix_watch("/c", 2)).await;
    let canceled = stream.next().await;
    assert_eq!(canceled.watch_id, id);
    assert!(canceled.canceled, "{canceled:?}");
    assert_eq!(canceled.compact_revision, 4);
    assert!(canceled.events.is_empty());

    // A negative start revision is created, then canceled as compacted
    // at once, as etcd does.
    let negative = stream.create(prefix_watch("/c", -1)).await;
    let canceled = stream.next().await;
    assert_eq!(canceled.watch_id, negative);
    assert!(canceled.canceled && !canceled.created, "{canceled:?}");
    assert_eq!(canceled.compact_revision, 4);

    // From the compact revision on, history is there.
    let id = stream.create(prefix_watch("/c", 4)).await;
    let events = stream.events(2).await;
    assert_eq!(
        events
            .iter()
            .map(|e| e.kv.as_ref().unwrap().mod_revision)
            .collect::<Vec<_>>(),
        [4, 5]
    );
    assert!(id >= 0);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_big_revision_is_fragmented_for_watches_that_ask() {
    let server = Server::start().await;
    let mut kv = server.kv();
    let value = vec![b'v'; 14_000];
    let txn = || pb::TxnRequest {
        success: (0..100)
            .map(|i| pb::RequestOp {
                request: Some(request_op::Request::RequestPut(pb::PutRequest {
                    key: format!("/big/{i:03}").into_bytes(),
                    value: value.clone(),
                    ..Default::default()
                })),
            })
            .collect(),
        ..Default::default()
    };
    kv.txn(txn()).await.expect("first txn");
    let mut stream = server.watch_stream().await;
    let whole = stream
        .create(pb::WatchCreateRequest {
            prev_kv: true,
            ..prefix_watch("/big/", 0)
        })
        .await;
    let split = stream
        .create(pb::WatchCreateRequest {
            prev_kv: true,
            fragment: true,
            ..prefix_watch("/big/", 0)
        })
        .await;
    // With the previous values, this revision's events pass the limit.
    kv.txn(txn()).await.expect("second txn");
    let limit = server.store.config().max_request_bytes + super::GRPC_OVERHEAD_BYTES;
    let (mut whole_events, mut split_events, mut parts) = (0, 0, Vec::new());
    while whole_events < 100 || split_events < 100 {
        let resp = stream.next().await;
        if resp.watch_id == whole {
            assert!(!resp.fragment);
            whole_events += resp.events.len();
        } else {
            assert_eq!(resp.watch_id, split);
            assert!(prost::Message::encoded_len(&resp) < limit);
            split_events += resp.events.len();
            parts.push(resp.fragment);
        }
    }
    assert_eq!((whole_events, split_events), (100, 100));
    assert!(parts.len() >= 2, "{parts:?}");
    assert!(!parts.last().unwrap(), "the last part is not a fragment");
    assert!(parts[..parts.len() - 1].iter().all(|&f| f));
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_grant_keep_alive_list_and_revoke_with_their_keys() {
    let server = Server::start().await;
    let mut kv = server.kv();
    let mut lease = server.lease();
    let granted = lease
        .lease_grant(pb::LeaseGrantRequest { ttl: 30, id: 0 })
        .await
        .unwrap()
        .into_inner();
    assert!(granted.id > 0);
    assert_eq!(granted.ttl, 30);
    let id = granted.id;
    for k in ["/l/1", "/l/2"] {
        kv.put(pb::PutRequest {
            key: k.into(),
            value: "v".into(),
            lease: id,
            ..Default::default()
        })
        .await
        .unwrap();
    }

    let ttl = lease
        .lease_time_to_live(pb::LeaseTimeToLiveRequest { id, keys: true })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(ttl.granted_ttl, 30);
    assert!(ttl.ttl > 0 && ttl.ttl <= 30, "{ttl:?}");
    assert_eq!(ttl.keys, [b"/l/1".to_vec(), b"/l/2".to_vec()]);

    let leases = lease
        .lease_leases(pb::LeaseLeasesRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(leases.leases.iter().map(|l| l.id).collect::<Vec<_>>(), [id]);

    // Keep-alive: one answer per request, TTL 0 for a lease that is gone.
    let (asks, outgoing) = mpsc::channel(4);
    let mut answers = lease
        .lease_keep_alive(ReceiverStream::new(outgoing))
        .await
        .unwrap()
        .into_inner();
    for ask in [id, 999, id] {
        asks.send(pb::LeaseKeepAliveRequest { id: ask })
            .await
            .unwrap();
        let answer = tokio::time::timeout(WAIT, answers.message())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        assert_eq!(answer.id, ask);
        assert_eq!(answer.ttl, if ask == id { 30 } else { 0 });
        assert!(answer.header.is_some());
    }

    let revoked = lease
        .lease_revoke(pb::LeaseRevokeRequest { id })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        revoked.header.unwrap().revision,
        3,
        "one revision deletes both keys"
    );
    assert_eq!(get(&mut kv, prefix("/l/")).await.count, 0);
    let gone = lease
        .lease_time_to_live(pb::LeaseTimeToLiveRequest { id, keys: true })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(gone.ttl, -1);
    asks.send(pb::LeaseKeepAliveRequest { id }).await.unwrap();
    let answer = tokio::time::timeout(WAIT, answers.message())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!((answer.id, answer.ttl), (id, 0));
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn member_list_status_and_alarms_describe_a_lone_member() {
    let server = Server::start_with(|config| {
        config.name = "solo".into();
        config.client_urls = vec!["http://127.0.0.1:2379".into()];
    })
    .await;
    put(&mut server.kv(), "k", "v").await;
    let members = server
        .cluster()
        .member_list(pb::MemberListRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(members.members.len(), 1);
    let me = &members.members[0];
    assert_eq!(me.id, server.store.member_id());
    assert_eq!(me.name, "solo");
    assert_eq!(me.client_ur_ls, ["http://127.0.0.1:2379"]);
    assert!(!me.is_learner);
    assert_eq!(
        members.header.unwrap().cluster_id,
        server.store.cluster_id()
    );

    let status = server
        .maintenance()
        .status(pb::StatusRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(status.version, "3.5.0");
    assert_eq!(status.leader, server.store.member_id());
    assert!(
        status.raft_term >= 1 && status.raft_index >= 1,
        "{status:?}"
    );
    assert!(status.raft_applied_index >= 1);
    assert!(status.db_size > 0);
    assert!(status.errors.is_empty(), "{status:?}");
    assert_eq!(status.header.unwrap().revision, 1);

    let alarms = server
        .maintenance()
        .alarm(pb::AlarmRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert!(alarms.alarms.is_empty());
    assert!(alarms.header.is_some());

    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_ends_open_streams_with_unavailable() {
    let server = Server::start().await;
    let mut stream = server.watch_stream().await;
    stream.create(prefix_watch("/s/", 0)).await;
    let (_asks, outgoing) = mpsc::channel::<pb::LeaseKeepAliveRequest>(1);
    let mut answers = server
        .lease()
        .lease_keep_alive(ReceiverStream::new(outgoing))
        .await
        .unwrap()
        .into_inner();
    server.shutdown().await;
    let ended = tokio::time::timeout(WAIT, stream.responses.message())
        .await
        .expect("stream ends");
    assert_eq!(ended.unwrap_err().code(), Code::Unavailable);
    let ended = tokio::time::timeout(WAIT, answers.message())
        .await
        .expect("stream ends");
    assert_eq!(ended.unwrap_err().code(), Code::Unavailable);
}

/// Three members over loopback, each with its gRPC server.
mod replicated {
    use super::*;
    use crate::error::StoreError;
    use crate::node::ClusterConfig;

    fn free_addr() -> SocketAddr {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap()
    }

    async fn start_members(dirs: &[tempfile::TempDir]) -> Vec<Store> {
        let initial: Vec<(String, SocketAddr)> = (1..=dirs.len())
            .map(|i| (format!("n{i}"), free_addr()))
            .collect();
        let mut stores = Vec::new();
        for (i, dir) in dirs.iter().enumerate() {
            let mut config = test_config(dir.path());
            config.cluster = Some(ClusterConfig {
                name: initial[i].0.clone(),
                peer_listen: initial[i].1,
                initial_cluster: initial.clone(),
                initial_cluster_state: Default::default(),
                initial_cluster_token: String::new(),
            });
            stores.push(Store::open(config).await.expect("open member"));
        }
        stores
    }

    async fn leader(servers: &[Server]) -> usize {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
        loop {
            let leaders: Vec<usize> = (0..servers.len())
                .filter(|&i| servers[i].store.is_leader())
                .collect();
            if let [only] = leaders[..] {
                return only;
            }
            assert!(tokio::time::Instant::now() < deadline, "no leader");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Puts through any member, retrying while leadership moves; returns
    /// the revision of the put that was acknowledged.
    async fn put_anywhere(servers: &[Server], attempt: usize, key: &str) -> i64 {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        let mut i = attempt;
        loop {
            let store = &servers[i % servers.len()].store;
            match store.put(crate::api::PutRequest::new(key, "v")).await {
                Ok(resp) => return resp.header.revision,
                Err(StoreError::NoLeader | StoreError::Timeout | StoreError::InvalidConfig(_)) => {
                    assert!(tokio::time::Instant::now() < deadline, "put {key} stuck");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    i += 1;
                }
                Err(err) => panic!("put {key}: {err}"),
            }
        }
    }

    async fn move_leader(servers: &[Server], to: usize) {
        let from = leader(servers).await;
        if from == to {
            return;
        }
        servers[from]
            .maintenance()
            .move_leader(pb::MoveLeaderRequest {
                target_id: servers[to].store.member_id(),
            })
            .await
            .expect("move leader");
        assert_eq!(
            servers[from].store.leader_id(),
            servers[to].store.member_id()
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_follower_watch_sees_every_event_across_leader_changes() {
        let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
        let mut servers = Vec::new();
        for store in start_members(&dirs).await {
            servers.push(Server::serve(store).await);
        }
        let first = leader(&servers).await;
        let watched = (first + 1) % 3;
        let other = (first + 2) % 3;
        assert_status(
            servers[watched]
                .maintenance()
                .move_leader(pb::MoveLeaderRequest {
                    target_id: servers[other].store.member_id(),
                })
                .await,
            Code::FailedPrecondition,
            "etcdserver: not leader",
        );

        let mut stream = servers[watched].watch_stream().await;
        stream
            .create(pb::WatchCreateRequest {
                prev_kv: true,
                ..prefix_watch("/r/", 1)
            })
            .await;

        let writes = 150;
        let mut last = 0;
        for n in 0..writes {
            if n == 50 {
                move_leader(&servers, other).await;
            }
            if n == 100 {
                move_leader(&servers, watched).await;
            }
            last = put_anywhere(&servers, n, &format!("/r/{n:03}")).await;
        }
        assert!(servers[watched].store.is_leader());

        let mut revisions = Vec::new();
        while revisions.last() != Some(&last) {
            let resp = stream.next().await;
            assert!(!resp.canceled, "{resp:?}");
            for event in &resp.events {
                let kv = event.kv.as_ref().unwrap();
                assert_eq!(kv.mod_revision, resp.header.as_ref().unwrap().revision);
                revisions.push(kv.mod_revision);
            }
        }
        // Every revision is one put (retried puts included): exactly once each.
        let expected: Vec<i64> = (1..=last).collect();
        assert_eq!(revisions, expected);
        stream.assert_quiet().await;

        // The watched member's own view agrees.
        let mut kv = servers[watched].kv();
        let stored = get(&mut kv, prefix("/r/")).await;
        assert!(stored.count >= writes as i64);

        for server in servers {
            server.shutdown().await;
        }
        drop(dirs);
    }
}

/// The real `etcdctl` (v3) against the server, when it is installed.
mod etcdctl {
    use std::process::Stdio;

    use tokio::io::{AsyncBufReadExt, BufReader};
    use tokio::process::Command;

    use super::*;

    fn installed() -> bool {
        std::process::Command::new("etcdctl")
            .arg("version")
            .env("ETCDCTL_API", "3")
            .output()
            .is_ok_and(|out| out.status.success())
    }

    fn etcdctl(endpoint: &str) -> Command {
        let mut command = Command::new("etcdctl");
        command
            .env("ETCDCTL_API", "3")
            .args(["--endpoints", endpoint, "--dial-timeout", "5s"])
            .kill_on_drop(true);
        command
    }

    /// Runs etcdctl to success; returns what it printed on stdout.
    async fn run(endpoint: &str, args: &[&str]) -> String {
        run_for_output(endpoint, args).await.0
    }

    /// Runs etcdctl to success; returns its stdout and stderr.
    async fn run_for_output(endpoint: &str, args: &[&str]) -> (String, String) {
        let out = tokio::time::timeout(WAIT, etcdctl(endpoint).args(args).output())
            .await
            .expect("etcdctl in time")
            .expect("etcdctl runs");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "etcdctl {args:?}: {stdout}{stderr}");
        (stdout, stderr)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn etcdctl_puts_gets_watches_and_reports() {
        if !installed() {
            eprintln!("etcdctl is not installed: skipped");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(test_config(dir.path())).await.unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let endpoint = listener.local_addr().unwrap().to_string();
        let (stop, stopped) = oneshot::channel::<()>();
        let serving = tokio::spawn(super::super::serve(
            store.clone(),
            vec![super::super::ClientListener::plain(listener)],
            async {
                let _ = stopped.await;
            },
        ));

        let mut watch = etcdctl(&endpoint)
            .args(["watch", "--prefix", "/w/"])
            .stdout(Stdio::piped())
            .spawn()
            .expect("etcdctl watch");
        let mut watched = BufReader::new(watch.stdout.take().unwrap()).lines();

        assert_eq!(run(&endpoint, &["put", "a", "1"]).await, "OK\n");
        assert_eq!(run(&endpoint, &["get", "a"]).await, "a\n1\n");
        run(&endpoint, &["put", "a", "2"]).await;
        assert_eq!(run(&endpoint, &["get", "a", "--rev", "1"]).await, "a\n1\n");
        assert_eq!(run(&endpoint, &["del", "a"]).await, "1\n");

        // The watch is in place once a put to its prefix shows up.
        let mut lines = Vec::new();
        for attempt in 0..50 {
            run(&endpoint, &["put", &format!("/w/{attempt}"), "x"]).await;
            let line = tokio::time::timeout(Duration::from_millis(200), watched.next_line()).await;
            if let Ok(line) = line {
                lines.push(line.unwrap().expect("watch output"));
                break;
            }
        }
        for _ in 0..2 {
            let line = tokio::time::timeout(WAIT, watched.next_line()).await;
            lines.push(line.expect("watch output in time").unwrap().unwrap());
        }
        assert_eq!(lines[0], "PUT");
        assert!(lines[1].starts_with("/w/"), "{lines:?}");
        assert_eq!(lines[2], "x");
        let _ = watch.kill().await;

        let status = run(&endpoint, &["endpoint", "status", "-w", "table"]).await;
        assert!(
            status.contains("3.5.0") && status.contains("true"),
            "{status}"
        );
        let members = run(&endpoint, &["member", "list"]).await;
        assert!(
            members.contains(&format!("{:x}", store.member_id())),
            "{members}"
        );
        let lease = run(&endpoint, &["lease", "grant", "10"]).await;
        assert!(lease.contains("granted with TTL(10s)"), "{lease}");
        let id = lease.split_whitespace().nth(1).unwrap().to_string();
        run(&endpoint, &["put", "leased", "v", "--lease", &id]).await;
        let ttl = run(&endpoint, &["lease", "timetolive", &id, "--keys"]).await;
        assert!(ttl.contains("attached keys([leased])"), "{ttl}");
        let leases = run(&endpoint, &["lease", "list"]).await;
        assert!(leases.contains(&id), "{leases}");
        let kept = run(&endpoint, &["lease", "keep-alive", "--once", &id]).await;
        assert!(kept.contains("keepalived with TTL(10)"), "{kept}");
        run(&endpoint, &["lease", "revoke", &id]).await;
        assert_eq!(run(&endpoint, &["get", "leased"]).await, "");
        assert!(run(&endpoint, &["alarm", "list"]).await.is_empty());
        let current = store.kv().current_revision().to_string();
        let compacted = run(&endpoint, &["compaction", &current]).await;
        assert!(compacted.contains(&current), "{compacted}");
        // etcdctl prints the health of an endpoint on stderr.
        let (_, health) = run_for_output(&endpoint, &["endpoint", "health"]).await;
        assert!(health.contains("is healthy"), "{health}");

        let _ = stop.send(());
        serving.await.unwrap().unwrap();
        store.close().await.unwrap();
    }
}
