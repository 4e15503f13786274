//! Protobuf messages ↔ the store's `api` types, field for field. Requests
//! are taken as etcd takes them: a compare outside its enums as etcd
//! evaluates it, a missing compare operand as zero or empty, and a sort
//! outside its enums refused (etcd 3.6's answer; 3.4 crashed on it).

use tonic::Status;

use super::pb::{etcdserverpb as pb, mvccpb};
use crate::api::{self, Member};
use crate::Store;

/// The header etcd puts on every response: who answered, at which
/// revision and term.
pub(crate) fn header(store: &Store, revision: i64) -> Option<pb::ResponseHeader> {
    Some(pb::ResponseHeader {
        cluster_id: store.cluster_id(),
        member_id: store.member_id(),
        revision,
        raft_term: store.raft_term(),
    })
}

/// A header at the store's current revision, for answers that read none.
pub(crate) fn current_header(store: &Store) -> Option<pb::ResponseHeader> {
    header(store, store.kv().current_revision())
}

/// etcd's answer to a sort order or target outside its enums.
const INVALID_SORT_OPTION: &str = "etcdserver: invalid sort option";

pub(crate) fn range_request(req: pb::RangeRequest) -> Result<api::RangeRequest, Status> {
    use pb::range_request::{SortOrder, SortTarget};
    let invalid = |_| Status::invalid_argument(INVALID_SORT_OPTION);
    let sort_order = match SortOrder::try_from(req.sort_order).map_err(invalid)? {
        SortOrder::None => api::SortOrder::None,
        SortOrder::Ascend => api::SortOrder::Ascend,
        SortOrder::Descend => api::SortOrder::Descend,
    };
    let sort_target = match SortTarget::try_from(req.sort_target).map_err(invalid)? {
        SortTarget::Key => api::SortTarget::Key,
        SortTarget::Version => api::SortTarget::Version,
        SortTarget::Create => api::SortTarget::Create,
        SortTarget::Mod => api::SortTarget::Mod,
        SortTarget::Value => api::SortTarget::Value,
    };
    Ok(api::RangeRequest {
        key: req.key,
        range_end: req.range_end,
        limit: req.limit,
        revision: req.revision,
        sort_order,
        sort_target,
        serializable: req.serializable,
        keys_only: req.keys_only,
        count_only: req.count_only,
        min_mod_revision: req.min_mod_revision,
        max_mod_revision: req.max_mod_revision,
        min_create_revision: req.min_create_revision,
        max_create_revision: req.max_create_revision,
    })
}

pub(crate) fn put_request(req: pb::PutRequest) -> api::PutRequest {
    api::PutRequest {
        key: req.key,
        value: req.value,
        lease: req.lease,
        prev_kv: req.prev_kv,
        ignore_value: req.ignore_value,
        ignore_lease: req.ignore_lease,
    }
}

pub(crate) fn delete_range_request(req: pb::DeleteRangeRequest) -> api::DeleteRangeRequest {
    api::DeleteRangeRequest {
        key: req.key,
        range_end: req.range_end,
        prev_kv: req.prev_kv,
    }
}

pub(crate) fn txn_request(req: pb::TxnRequest) -> Result<api::TxnRequest, Status> {
    Ok(api::TxnRequest {
        compare: req
            .compare
            .into_iter()
            .map(compare)
            .collect::<Result<_, _>>()?,
        success: request_ops(req.success)?,
        failure: request_ops(req.failure)?,
    })
}

fn request_ops(ops: Vec<pb::RequestOp>) -> Result<Vec<api::RequestOp>, Status> {
    use pb::request_op::Request;
    ops.into_iter()
        .map(|op| {
            Ok(match op.request {
                Some(Request::RequestRange(r)) => api::RequestOp::Range(range_request(r)?),
                Some(Request::RequestPut(p)) => api::RequestOp::Put(put_request(p)),
                Some(Request::RequestDeleteRange(d)) => {
                    api::RequestOp::DeleteRange(delete_range_request(d))
                }
                Some(Request::RequestTxn(t)) => api::RequestOp::Txn(txn_request(t)?),
                // An operation with nothing in it, answered as etcd does.
                None => return Err(Status::invalid_argument("etcdserver: key not found")),
            })
        })
        .collect()
}

/// The operand is read according to `target`, as etcd does: a compare of
/// the value with no value given compares against the empty value.
fn compare(c: pb::Compare) -> Result<api::Compare, Status> {
    use pb::compare::{CompareResult, CompareTarget, TargetUnion};
    let result = match CompareResult::try_from(c.result) {
        Ok(CompareResult::Equal) => Some(api::CompareResult::Equal),
        Ok(CompareResult::Greater) => Some(api::CompareResult::Greater),
        Ok(CompareResult::Less) => Some(api::CompareResult::Less),
        Ok(CompareResult::NotEqual) => Some(api::CompareResult::NotEqual),
        Err(_) => None,
    };
    let operand = c.target_union;
    let int = |pick: fn(&TargetUnion) -> Option<i64>| operand.as_ref().and_then(pick).unwrap_or(0);
    let target = match CompareTarget::try_from(c.target) {
        Ok(CompareTarget::Version) => Some(api::CompareTarget::Version(int(|u| match u {
            TargetUnion::Version(v) => Some(*v),
            _ => None,
        }))),
        Ok(CompareTarget::Create) => Some(api::CompareTarget::CreateRevision(int(|u| match u {
            TargetUnion::CreateRevision(v) => Some(*v),
            _ => None,
        }))),
        Ok(CompareTarget::Mod) => Some(api::CompareTarget::ModRevision(int(|u| match u {
            TargetUnion::ModRevision(v) => Some(*v),
            _ => None,
        }))),
        Ok(CompareTarget::Lease) => Some(api::CompareTarget::Lease(int(|u| match u {
            TargetUnion::Lease(v) => Some(*v),
            _ => None,
        }))),
        Ok(CompareTarget::Value) => Some(api::CompareTarget::Value(match operand {
            Some(TargetUnion::Value(v)) => v,
            _ => Vec::new(),
        })),
        Err(_) => None,
    };
    let (result, target) = match (result, target) {
        (Some(result), Some(target)) => (result, target),
        (result, target) => compare_outside_enums(result, target),
    };
    Ok(api::Compare {
        result,
        target,
        key: c.key,
        range_end: c.range_end,
    })
}

/// etcd takes a compare whose result or target is outside its enums
/// (`compareKV`): an unknown target compares as equal whatever the key
/// holds, and an unknown result holds, except that a value compare fails
/// when no key is in the range. Each case is a version compare with the
/// same outcome: versions are never negative, a missing key's is 0 and a
/// present key's at least 1.
fn compare_outside_enums(
    result: Option<api::CompareResult>,
    target: Option<api::CompareTarget>,
) -> (api::CompareResult, api::CompareTarget) {
    use api::{CompareResult, CompareTarget};
    let holds = (CompareResult::NotEqual, CompareTarget::Version(-1));
    match (result, target) {
        (None, Some(CompareTarget::Value(_))) => {
            (CompareResult::Greater, CompareTarget::Version(0))
        }
        (None, _) | (Some(CompareResult::Equal), None) => holds,
        (Some(_), _) => (CompareResult::Equal, CompareTarget::Version(-1)),
    }
}

/// A watch as the store takes it: no key is the smallest key, as in etcd.
/// Whether its range is empty or its start revision negative is the watch
/// stream's to answer.
pub(crate) fn watch_request(req: &pb::WatchCreateRequest) -> api::WatchRequest {
    use pb::watch_create_request::FilterType;
    let key = if req.key.is_empty() {
        vec![0]
    } else {
        req.key.clone()
    };
    let has_filter = |filter: FilterType| req.filters.contains(&(filter as i32));
    api::WatchRequest {
        key,
        range_end: req.range_end.clone(),
        start_revision: req.start_revision,
        progress_notify: req.progress_notify,
        no_put: has_filter(FilterType::Noput),
        no_delete: has_filter(FilterType::Nodelete),
        prev_kv: req.prev_kv,
    }
}

pub(crate) fn key_value(kv: api::KeyValue) -> mvccpb::KeyValue {
    mvccpb::KeyValue {
        key: kv.key,
        create_revision: kv.create_revision,
        mod_revision: kv.mod_revision,
        version: kv.version,
        value: kv.value,
        lease: kv.lease,
    }
}

pub(crate) fn range_response(store: &Store, resp: api::RangeResponse) -> pb::RangeResponse {
    pb::RangeResponse {
        header: header(store, resp.header.revision),
        kvs: resp.kvs.into_iter().map(key_value).collect(),
        more: resp.more,
        count: resp.count,
    }
}

pub(crate) fn put_response(store: &Store, resp: api::PutResponse) -> pb::PutResponse {
    pb::PutResponse {
        header: header(store, resp.header.revision),
        prev_kv: resp.prev_kv.map(key_value),
    }
}

pub(crate) fn delete_range_response(
    store: &Store,
    resp: api::DeleteRangeResponse,
) -> pb::DeleteRangeResponse {
    pb::DeleteRangeResponse {
        header: header(store, resp.header.revision),
        deleted: resp.deleted,
        prev_kvs: resp.prev_kvs.into_iter().map(key_value).collect(),
    }
}

pub(crate) fn txn_response(store: &Store, resp: api::TxnResponse) -> pb::TxnResponse {
    use pb::response_op::Response;
    let responses = resp
        .responses
        .into_iter()
        .map(|op| pb::ResponseOp {
            response: Some(match op {
                api::ResponseOp::Range(r) => Response::ResponseRange(range_response(store, r)),
                api::ResponseOp::Put(p) => Response::ResponsePut(put_response(store, p)),
                api::ResponseOp::DeleteRange(d) => {
                    Response::ResponseDeleteRange(delete_range_response(store, d))
                }
                api::ResponseOp::Txn(t) => Response::ResponseTxn(txn_response(store, t)),
            }),
        })
        .collect();
    pb::TxnResponse {
        header: header(store, resp.header.revision),
        succeeded: resp.succeeded,
        responses,
    }
}

pub(crate) fn event(event: api::Event) -> mvccpb::Event {
    let kind = match event.kind {
        api::EventType::Put => mvccpb::event::EventType::Put,
        api::EventType::Delete => mvccpb::event::EventType::Delete,
    };
    mvccpb::Event {
        r#type: kind as i32,
        kv: Some(key_value(event.kv)),
        prev_kv: event.prev_kv.map(key_value),
    }
}

/// A watcher's response as the client sees it on its stream, under the
/// stream's `watch_id`.
pub(crate) fn watch_response(
    store: &Store,
    watch_id: i64,
    resp: api::WatchResponse,
) -> pb::WatchResponse {
    pb::WatchResponse {
        header: header(store, resp.header.revision),
        watch_id,
        created: false,
        canceled: resp.canceled,
        compact_revision: resp.compact_revision,
        // etcd sends no reason with a compaction: the compact revision
        // says it all (clients turn it into ErrCompacted).
        cancel_reason: if resp.compact_revision != 0 {
            String::new()
        } else {
            resp.cancel_reason
        },
        fragment: false,
        events: resp.events.into_iter().map(event).collect(),
    }
}

pub(crate) fn member(member: Member) -> pb::Member {
    pb::Member {
        id: member.id,
        name: member.name,
        peer_ur_ls: member.peer_urls,
        client_ur_ls: member.client_urls,
        is_learner: member.is_learner,
    }
}

pub(crate) fn members(store: &Store) -> Result<Vec<pb::Member>, Status> {
    let members = store.members().map_err(super::status::from_store)?;
    Ok(members.into_iter().map(member).collect())
}
