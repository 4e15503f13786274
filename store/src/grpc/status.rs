//! Store errors as the gRPC statuses etcd answers with: the same code and
//! the same message, because etcd clients recognise errors by their
//! message (`rpctypes.Error`). Our extra detail goes to the log, not the
//! client.

use tonic::codegen::http;
use tonic::{Code, Status};

use crate::error::StoreError;

pub(crate) const EMPTY_KEY: &str = "etcdserver: key is not provided";
pub(crate) const TOO_MANY_OPS: &str = "etcdserver: too many operations in txn request";
pub(crate) const COMPACTED: &str = "etcdserver: mvcc: required revision has been compacted";
pub(crate) const FUTURE_REVISION: &str = "etcdserver: mvcc: required revision is a future revision";
pub(crate) const NOT_LEADER: &str = "etcdserver: not leader";
pub(crate) const BAD_LEADER_TRANSFEREE: &str = "etcdserver: bad leader transferee";
pub(crate) const LEADER_TRANSFER_TIMEOUT: &str =
    "etcdserver: request timed out, leader transfer took too long";
pub(crate) const MEMBER_NOT_FOUND: &str = "etcdserver: member not found";
pub(crate) const NO_LEADER: &str = "etcdserver: no leader";
pub(crate) const STOPPED: &str = "etcdserver: server stopped";
pub(crate) const MEMBER_BAD_URLS: &str = "etcdserver: given member URLs are invalid";
pub(crate) const MEMBER_NOT_LEARNER: &str = "etcdserver: can only promote a learner member";
pub(crate) const LEARNER_NOT_READY: &str =
    "etcdserver: can only promote a learner member which is in sync with leader";
pub(crate) const TOO_MANY_LEARNERS: &str = "etcdserver: too many learner members in cluster";
pub(crate) const UNKNOWN_ALARM_ACTION: &str = "etcdserver: unknown alarm action";
pub(crate) const NO_SPACE: &str = "etcdserver: mvcc: database space exceeded";
pub(crate) const CORRUPT: &str = "etcdserver: corrupt cluster";
pub(crate) const NOT_SUPPORTED_FOR_LEARNER: &str = "etcdserver: rpc not supported for learner";

/// tonic refuses a message over the receive limit as OutOfRange; grpc-go,
/// and so etcd, as ResourceExhausted with its own words, which is what
/// etcd clients expect. Any other status is kept.
pub(crate) fn over_receive_limit_as_etcd(status: Status) -> Status {
    let sizes = (status.code() == Code::OutOfRange)
        .then(|| status.message())
        .and_then(|m| m.strip_prefix("Error, decoded message length too large: found "))
        .and_then(|m| m.strip_suffix(" bytes"))
        .and_then(|m| m.split_once(" bytes, the limit is: "));
    match sizes {
        Some((found, limit)) => Status::resource_exhausted(format!(
            "grpc: received message larger than max ({found} vs. {limit})"
        )),
        None => status,
    }
}

/// [`over_receive_limit_as_etcd`] for a unary call, whose refusal is in
/// the response's headers.
pub(crate) fn over_receive_limit_in_headers(
    mut response: http::Response<tonic::body::Body>,
) -> http::Response<tonic::body::Body> {
    let Some(status) = Status::from_header_map(response.headers()) else {
        return response;
    };
    if status.code() == Code::OutOfRange {
        let status = over_receive_limit_as_etcd(status);
        if status.code() == Code::ResourceExhausted {
            // Only fails for a message that is not a header value; ours is.
            let _ = status.add_header(response.headers_mut());
        }
    }
    response
}

/// The status etcd answers for `err`.
pub(crate) fn from_store(err: StoreError) -> Status {
    let (code, message): (Code, &str) = match &err {
        StoreError::EmptyKey => (Code::InvalidArgument, EMPTY_KEY),
        StoreError::KeyNotFound => (Code::InvalidArgument, "etcdserver: key not found"),
        StoreError::ValueProvided => (Code::InvalidArgument, "etcdserver: value is provided"),
        StoreError::LeaseProvided => (Code::InvalidArgument, "etcdserver: lease is provided"),
        // etcd's one limit on a txn's shape; a txn nested past what a
        // client could read the answer of is refused in its words.
        StoreError::TooManyOps { .. } | StoreError::TxnTooDeep { .. } => {
            (Code::InvalidArgument, TOO_MANY_OPS)
        }
        StoreError::DuplicateKey => (
            Code::InvalidArgument,
            "etcdserver: duplicate key given in txn request",
        ),
        StoreError::RequestTooLarge { .. } => {
            (Code::InvalidArgument, "etcdserver: request is too large")
        }
        StoreError::Compacted { .. } => (Code::OutOfRange, COMPACTED),
        StoreError::FutureRevision { .. } => (Code::OutOfRange, FUTURE_REVISION),
        StoreError::LeaseNotFound => (Code::NotFound, "etcdserver: requested lease not found"),
        StoreError::LeaseExists => (Code::FailedPrecondition, "etcdserver: lease already exists"),
        StoreError::LeaseTtlTooLarge { .. } => {
            (Code::OutOfRange, "etcdserver: too large lease TTL")
        }
        StoreError::Stopped => (Code::Unavailable, STOPPED),
        StoreError::NoLeader => (Code::Unavailable, NO_LEADER),
        StoreError::NotLeader => (Code::Unavailable, NOT_LEADER),
        StoreError::Timeout => (Code::Unavailable, "etcdserver: request timed out"),
        StoreError::MemberNotFound => (Code::NotFound, MEMBER_NOT_FOUND),
        StoreError::MemberNotLearner => (Code::FailedPrecondition, MEMBER_NOT_LEARNER),
        StoreError::LearnerNotReady { .. } => {
            tracing::info!(error = %err, "member promotion refused");
            (Code::FailedPrecondition, LEARNER_NOT_READY)
        }
        StoreError::NoSpace => (Code::ResourceExhausted, NO_SPACE),
        StoreError::Corrupt => (Code::DataLoss, CORRUPT),
        StoreError::TooManyLearners { .. } => (Code::FailedPrecondition, TOO_MANY_LEARNERS),
        StoreError::PeerUrlExists(_) => (
            Code::FailedPrecondition,
            "etcdserver: Peer URLs already exists",
        ),
        // The cluster's state does not allow the request (a member change
        // or a leader transfer asked of the wrong member).
        StoreError::InvalidConfig(_) => return Status::failed_precondition(err.to_string()),
        // etcd answers errors it has no status for with Unknown and the
        // error's text.
        StoreError::DataDirLocked { .. } | StoreError::Storage { .. } | StoreError::Wal(_) => {
            tracing::warn!(error = %err, "store error answered to a client");
            return Status::unknown(err.to_string());
        }
    };
    if matches!(code, Code::Unavailable) {
        tracing::debug!(error = %err, "request not served");
    }
    Status::new(code, message)
}
