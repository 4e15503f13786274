//! Any etcd v3 endpoint (real etcd, or skiff members) over gRPC, through
//! the client generated from skiff's own .proto files.

use bytes::Bytes;
use skiff_store::grpc::pb::etcdserverpb::compare::{CompareResult, CompareTarget, TargetUnion};
use skiff_store::grpc::pb::etcdserverpb::kv_client::KvClient;
use skiff_store::grpc::pb::etcdserverpb::lease_client::LeaseClient;
use skiff_store::grpc::pb::etcdserverpb::request_op::Request;
use skiff_store::grpc::pb::etcdserverpb::response_op::Response;
use skiff_store::grpc::pb::etcdserverpb::watch_client::WatchClient;
use skiff_store::grpc::pb::etcdserverpb::watch_request::RequestUnion;
use skiff_store::grpc::pb::etcdserverpb::{
    Compare, DeleteRangeRequest, LeaseGrantRequest, PutRequest, RangeRequest, RequestOp,
    TxnRequest, WatchCreateRequest, WatchRequest, WatchResponse,
};
use skiff_store::grpc::pb::mvccpb::event::EventType;
use tokio::sync::mpsc;
use tonic::transport::{Channel, Endpoint};

use super::{Change, ChangeKind, Kv, Page, StorageError, StorageResult, WatchItem};

/// Responses bigger than this are refused by the client (etcd's own
/// default limit is far above tonic's 4 MiB).
const MAX_RESPONSE_BYTES: usize = 2 * 1024 * 1024 * 1024 - 1;

#[derive(Clone)]
pub struct EtcdStorage {
    channel: Channel,
}

fn convert(status: tonic::Status) -> StorageError {
    let message = status.message();
    if message.contains("required revision has been compacted") {
        return StorageError::Compacted {
            requested: 0,
            compacted: 0,
        };
    }
    if message.contains("future revision") {
        return StorageError::FutureRevision;
    }
    if message.contains("requested lease not found") {
        return StorageError::LeaseNotFound;
    }
    match status.code() {
        tonic::Code::Unavailable | tonic::Code::DeadlineExceeded | tonic::Code::Cancelled => {
            StorageError::Unavailable(message.to_string())
        }
        _ => StorageError::Internal(format!("{:?}: {message}", status.code())),
    }
}

fn kv(kv: skiff_store::grpc::pb::mvccpb::KeyValue) -> Kv {
    Kv {
        key: String::from_utf8_lossy(&kv.key).into_owned(),
        value: Bytes::from(kv.value),
        create_revision: kv.create_revision,
        mod_revision: kv.mod_revision,
    }
}

fn compare(key: &str, target: CompareTarget, operand: TargetUnion) -> Compare {
    Compare {
        result: CompareResult::Equal as i32,
        target: target as i32,
        key: key.as_bytes().to_vec(),
        range_end: Vec::new(),
        target_union: Some(operand),
    }
}

impl EtcdStorage {
    /// Connects (lazily) to the endpoints, e.g. `127.0.0.1:2379,…`; requests
    /// go to any of them. `https://` endpoints use `tls`.
    pub fn connect(
        endpoints: &[String],
        tls: Option<&tonic::transport::ClientTlsConfig>,
    ) -> Result<EtcdStorage, String> {
        let mut list = Vec::new();
        for endpoint in endpoints {
            let url = if endpoint.contains("://") {
                endpoint.clone()
            } else {
                format!("http://{endpoint}")
            };
            let mut endpoint = Endpoint::from_shared(url.clone())
                .map_err(|e| format!("store endpoint {url:?}: {e}"))?;
            if url.starts_with("https://") {
                let tls =
                    tls.ok_or_else(|| format!("store endpoint {url:?} wants TLS credentials"))?;
                endpoint = endpoint
                    .tls_config(tls.clone())
                    .map_err(|e| format!("TLS for store endpoint {url:?}: {e}"))?;
            }
            let endpoint = endpoint
                .connect_timeout(std::time::Duration::from_secs(3))
                .tcp_nodelay(true);
            list.push(endpoint);
        }
        if list.is_empty() {
            return Err("no store endpoint given".into());
        }
        Ok(EtcdStorage {
            channel: Channel::balance_list(list.into_iter()),
        })
    }

    fn kv_client(&self) -> KvClient<Channel> {
        KvClient::new(self.channel.clone()).max_decoding_message_size(MAX_RESPONSE_BYTES)
    }

    pub(super) async fn get(&self, key: &str) -> StorageResult<Option<Kv>> {
        let resp = self
            .kv_client()
            .range(RangeRequest {
                key: key.as_bytes().to_vec(),
                ..Default::default()
            })
            .await
            .map_err(convert)?
            .into_inner();
        Ok(resp.kvs.into_iter().next().map(kv))
    }

    pub(super) async fn list(
        &self,
        start: &str,
        end: &str,
        revision: i64,
        limit: i64,
    ) -> StorageResult<Page> {
        let resp = self
            .kv_client()
            .range(RangeRequest {
                key: start.as_bytes().to_vec(),
                range_end: end.as_bytes().to_vec(),
                revision,
                limit,
                ..Default::default()
            })
            .await
            .map_err(|status| match convert(status) {
                StorageError::Compacted { .. } => StorageError::Compacted {
                    requested: revision,
                    compacted: 0,
                },
                other => other,
            })?
            .into_inner();
        Ok(Page {
            revision: resp.header.map_or(0, |h| h.revision),
            more: resp.more,
            kvs: resp.kvs.into_iter().map(kv).collect(),
        })
    }

    async fn txn(
        &self,
        compare: Compare,
        op: Request,
    ) -> StorageResult<(bool, i64, Vec<Response>)> {
        let resp = self
            .kv_client()
            .txn(TxnRequest {
                compare: vec![compare],
                success: vec![RequestOp { request: Some(op) }],
                failure: Vec::new(),
            })
            .await
            .map_err(convert)?
            .into_inner();
        let responses = resp
            .responses
            .into_iter()
            .filter_map(|r| r.response)
            .collect();
        Ok((
            resp.succeeded,
            resp.header.map_or(0, |h| h.revision),
            responses,
        ))
    }

    pub(super) async fn grant_lease(&self, ttl: i64) -> StorageResult<i64> {
        let granted = LeaseClient::new(self.channel.clone())
            .lease_grant(LeaseGrantRequest { ttl, id: 0 })
            .await
            .map_err(convert)?
            .into_inner();
        if !granted.error.is_empty() {
            return Err(StorageError::Internal(granted.error));
        }
        Ok(granted.id)
    }

    pub(super) async fn create(&self, key: &str, value: Vec<u8>, lease: i64) -> StorageResult<i64> {
        let put = Request::RequestPut(PutRequest {
            key: key.as_bytes().to_vec(),
            value,
            lease,
            ..Default::default()
        });
        let (ok, revision, _) = self
            .txn(
                compare(key, CompareTarget::Create, TargetUnion::CreateRevision(0)),
                put,
            )
            .await?;
        if !ok {
            return Err(StorageError::AlreadyExists);
        }
        Ok(revision)
    }

    pub(super) async fn update(
        &self,
        key: &str,
        value: Vec<u8>,
        expected: i64,
        lease: i64,
    ) -> StorageResult<i64> {
        let put = Request::RequestPut(PutRequest {
            key: key.as_bytes().to_vec(),
            value,
            lease,
            ..Default::default()
        });
        let (ok, revision, _) = self
            .txn(
                compare(key, CompareTarget::Mod, TargetUnion::ModRevision(expected)),
                put,
            )
            .await?;
        if !ok {
            return Err(StorageError::Conflict);
        }
        Ok(revision)
    }

    pub(super) async fn delete(&self, key: &str, expected: i64) -> StorageResult<i64> {
        let delete = Request::RequestDeleteRange(DeleteRangeRequest {
            key: key.as_bytes().to_vec(),
            ..Default::default()
        });
        let (ok, revision, responses) = self
            .txn(
                compare(key, CompareTarget::Mod, TargetUnion::ModRevision(expected)),
                delete,
            )
            .await?;
        if !ok {
            return Err(StorageError::Conflict);
        }
        let deleted = responses
            .iter()
            .any(|r| matches!(r, Response::ResponseDeleteRange(d) if d.deleted > 0));
        if !deleted {
            return Err(StorageError::NotFound);
        }
        Ok(revision)
    }

    pub(super) async fn watch(
        &self,
        start: &str,
        end: &str,
        from: i64,
        with_previous: bool,
    ) -> StorageResult<EtcdWatch> {
        let (requests, rx) = mpsc::channel(4);
        let create = WatchRequest {
            request_union: Some(RequestUnion::CreateRequest(WatchCreateRequest {
                key: start.as_bytes().to_vec(),
                range_end: end.as_bytes().to_vec(),
                start_revision: from,
                prev_kv: with_previous,
                ..Default::default()
            })),
        };
        requests
            .send(create)
            .await
            .map_err(|_| StorageError::Internal("watch request queue closed".into()))?;
        let stream = WatchClient::new(self.channel.clone())
            .max_decoding_message_size(MAX_RESPONSE_BYTES)
            .watch(tokio_stream::wrappers::ReceiverStream::new(rx))
            .await
            .map_err(convert)?
            .into_inner();
        Ok(EtcdWatch {
            stream,
            _requests: requests,
            from,
        })
    }
}

pub struct EtcdWatch {
    stream: tonic::Streaming<WatchResponse>,
    /// Kept open: closing it would end the watch stream. No progress
    /// request is sent on it (see `Storage::progress_is_reliable`).
    _requests: mpsc::Sender<WatchRequest>,
    from: i64,
}

impl EtcdWatch {
    pub async fn next(&mut self) -> Option<StorageResult<WatchItem>> {
        loop {
            let resp = match self.stream.message().await {
                Ok(Some(resp)) => resp,
                Ok(None) => return None,
                Err(status) => return Some(Err(convert(status))),
            };
            if resp.compact_revision > 0 {
                return Some(Err(StorageError::Compacted {
                    requested: self.from,
                    compacted: resp.compact_revision,
                }));
            }
            if resp.canceled {
                return Some(Err(StorageError::Unavailable(format!(
                    "the store cancelled the watch: {}",
                    resp.cancel_reason
                ))));
            }
            if resp.created {
                // The watch's creation, not its progress: history may follow.
                continue;
            }
            if resp.events.is_empty() {
                let revision = resp.header.map_or(0, |h| h.revision);
                return Some(Ok(WatchItem::Progress(revision)));
            }
            let changes = resp
                .events
                .into_iter()
                .filter_map(|e| {
                    let kind = match EventType::try_from(e.r#type).ok()? {
                        EventType::Put => ChangeKind::Put,
                        EventType::Delete => ChangeKind::Delete,
                    };
                    let current = e.kv?;
                    Some(Change {
                        kind,
                        key: String::from_utf8_lossy(&current.key).into_owned(),
                        revision: current.mod_revision,
                        value: Bytes::from(current.value),
                        prev: e.prev_kv.map(|p| Bytes::from(p.value)),
                    })
                })
                .collect();
            return Some(Ok(WatchItem::Changes(changes)));
        }
    }
}
