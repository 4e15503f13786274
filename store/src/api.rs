//! Requests and responses of the store, shaped like etcd's v3 API
//! (`etcdserverpb`, `mvccpb`) so the gRPC layer maps them field for field.

use serde::{Deserialize, Serialize};

/// A key's value at one revision (`mvccpb.KeyValue`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct KeyValue {
    pub key: Vec<u8>,
    pub create_revision: i64,
    pub mod_revision: i64,
    pub version: i64,
    pub value: Vec<u8>,
    pub lease: i64,
}

/// What every response carries: the store revision when it was served.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ResponseHeader {
    pub revision: i64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum SortOrder {
    #[default]
    None,
    Ascend,
    Descend,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum SortTarget {
    #[default]
    Key,
    Version,
    Create,
    Mod,
    Value,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct RangeRequest {
    pub key: Vec<u8>,
    /// Empty: the single key. `\0`: every key >= `key`. Otherwise `[key, range_end)`.
    pub range_end: Vec<u8>,
    /// 0 means no limit.
    pub limit: i64,
    /// <= 0 means the current revision.
    pub revision: i64,
    pub sort_order: SortOrder,
    pub sort_target: SortTarget,
    pub serializable: bool,
    pub keys_only: bool,
    pub count_only: bool,
    pub min_mod_revision: i64,
    pub max_mod_revision: i64,
    pub min_create_revision: i64,
    pub max_create_revision: i64,
}

impl RangeRequest {
    pub fn key(key: impl Into<Vec<u8>>) -> Self {
        RangeRequest {
            key: key.into(),
            ..Default::default()
        }
    }

    pub fn prefix(prefix: impl Into<Vec<u8>>) -> Self {
        let key = prefix.into();
        RangeRequest {
            range_end: crate::mvcc::prefix_end(&key),
            key,
            ..Default::default()
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RangeResponse {
    pub header: ResponseHeader,
    pub kvs: Vec<KeyValue>,
    /// More keys matched than `limit` allowed to return.
    pub more: bool,
    /// Keys in the range at the read revision, regardless of limit.
    pub count: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct PutRequest {
    pub key: Vec<u8>,
    pub value: Vec<u8>,
    pub lease: i64,
    pub prev_kv: bool,
    pub ignore_value: bool,
    pub ignore_lease: bool,
}

impl PutRequest {
    pub fn new(key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>) -> Self {
        PutRequest {
            key: key.into(),
            value: value.into(),
            ..Default::default()
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PutResponse {
    pub header: ResponseHeader,
    pub prev_kv: Option<KeyValue>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct DeleteRangeRequest {
    pub key: Vec<u8>,
    pub range_end: Vec<u8>,
    pub prev_kv: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DeleteRangeResponse {
    pub header: ResponseHeader,
    pub deleted: i64,
    pub prev_kvs: Vec<KeyValue>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum CompareResult {
    Equal,
    Greater,
    Less,
    NotEqual,
}

/// What a compare looks at, with the operand to compare it against.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum CompareTarget {
    Version(i64),
    CreateRevision(i64),
    ModRevision(i64),
    Value(Vec<u8>),
    Lease(i64),
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Compare {
    pub result: CompareResult,
    pub target: CompareTarget,
    pub key: Vec<u8>,
    /// As in a range: compare every key in `[key, range_end)`.
    pub range_end: Vec<u8>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum RequestOp {
    Range(RangeRequest),
    Put(PutRequest),
    DeleteRange(DeleteRangeRequest),
    Txn(TxnRequest),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResponseOp {
    Range(RangeResponse),
    Put(PutResponse),
    DeleteRange(DeleteRangeResponse),
    Txn(TxnResponse),
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct TxnRequest {
    pub compare: Vec<Compare>,
    pub success: Vec<RequestOp>,
    pub failure: Vec<RequestOp>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TxnResponse {
    pub header: ResponseHeader,
    pub succeeded: bool,
    pub responses: Vec<ResponseOp>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CompactionResponse {
    pub header: ResponseHeader,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LeaseGrantResponse {
    pub header: ResponseHeader,
    pub id: i64,
    pub ttl: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LeaseRevokeResponse {
    pub header: ResponseHeader,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LeaseKeepAliveResponse {
    pub header: ResponseHeader,
    pub id: i64,
    pub ttl: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LeaseTimeToLiveResponse {
    pub header: ResponseHeader,
    pub id: i64,
    /// Remaining seconds; -1 when the lease has expired or does not exist.
    pub ttl: i64,
    pub granted_ttl: i64,
    pub keys: Vec<Vec<u8>>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LeaseLeasesResponse {
    pub header: ResponseHeader,
    pub leases: Vec<i64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Put,
    Delete,
}

/// One change (`mvccpb.Event`). A delete carries the key and its deletion
/// revision as `mod_revision`, everything else zero, as etcd does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub kind: EventType,
    pub kv: KeyValue,
    pub prev_kv: Option<KeyValue>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct WatchRequest {
    pub key: Vec<u8>,
    pub range_end: Vec<u8>,
    /// 0 (or less) means "from the next revision".
    pub start_revision: i64,
    pub progress_notify: bool,
    pub no_put: bool,
    pub no_delete: bool,
    pub prev_kv: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct WatchResponse {
    pub header: ResponseHeader,
    pub watch_id: i64,
    /// Set when the watch ended because its start revision was compacted.
    pub compact_revision: i64,
    pub canceled: bool,
    pub cancel_reason: String,
    pub events: Vec<Event>,
}

impl WatchResponse {
    /// An empty response carrying only the revision: a progress notification.
    pub fn is_progress_notify(&self) -> bool {
        self.events.is_empty() && !self.canceled && self.compact_revision == 0
    }
}

/// A member of the cluster (`etcdserverpb.Member`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Member {
    pub id: u64,
    /// Empty until the member has started and told the cluster its name.
    pub name: String,
    pub peer_urls: Vec<String>,
    pub client_urls: Vec<String>,
    pub is_learner: bool,
}
