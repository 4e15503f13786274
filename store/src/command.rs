//! Commands: every change to the store is one, applied at a log index.
//! Encoded once by the proposer; checked here for what can be checked
//! without the state (the rest is checked at apply, deterministically).

use serde::{Deserialize, Serialize};

use crate::api::{Compare, DeleteRangeRequest, PutRequest, RangeRequest, RequestOp, TxnRequest};
use crate::error::{Result, StoreError};
use crate::mvcc::KeyRange;

/// etcd's default `--max-request-bytes`.
pub const MAX_REQUEST_BYTES: usize = 1536 * 1024;
/// etcd's default `--max-txn-ops`.
pub const MAX_TXN_OPS: usize = 128;
/// How many txns deep a request may nest, the outermost counting as one.
/// etcd bounds nesting only by its op budget (129 levels with 128 ops),
/// but its answer nests two messages a level (`ResponseOp`, `TxnResponse`)
/// and three more at the bottom (an op's response, its header or
/// key-value): 2 × 49 + 1 = 99 levels, which every protobuf decoder with
/// the usual recursion limit of 100 (prost, C++, Java, Python) still
/// reads. One more level and the client could not read the answer to the
/// write it made, so it is refused as etcd refuses a txn past its budget.
pub const MAX_TXN_DEPTH: usize = 49;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Command {
    Put(PutRequest),
    DeleteRange(DeleteRangeRequest),
    Txn(TxnRequest),
    Compact {
        revision: i64,
    },
    LeaseGrant {
        id: i64,
        ttl: i64,
    },
    LeaseRevoke {
        id: i64,
    },
    /// Remaining TTLs, so that a restart resumes long leases where they were.
    LeaseCheckpoint {
        checkpoints: Vec<(i64, i64)>,
    },
    /// A keep-alive made on a follower, as members before lease forwarding
    /// proposed it; still applied (a renewal on every member) when their
    /// logs are replayed. Followers now forward keep-alives to the leader.
    LeaseRenew {
        id: i64,
    },
    /// A member tells the cluster its name and client URLs once started
    /// (etcd's attribute publication); applied only to a current member.
    PublishMember {
        id: u64,
        name: String,
        client_urls: Vec<String>,
    },
    /// New peer URLs for a member (etcd's MemberUpdate); applied only to a
    /// current member.
    UpdateMember {
        id: u64,
        peer_urls: Vec<String>,
    },
    /// Raises (or disarms) an alarm for a member (etcd's Alarm activate and
    /// deactivate); every member then refuses what the alarm refuses.
    Alarm {
        activate: bool,
        member_id: u64,
        alarm: i32,
    },
}

impl Command {
    pub fn encode(&self) -> Vec<u8> {
        bincode::serialize(self).expect("commands always serialize")
    }

    pub fn decode(bytes: &[u8]) -> Result<Command> {
        bincode::deserialize(bytes).map_err(|e| StoreError::storage("decoding a log entry", e))
    }
}

pub fn check_range(req: &RangeRequest) -> Result<()> {
    if req.key.is_empty() {
        return Err(StoreError::EmptyKey);
    }
    Ok(())
}

pub fn check_put(req: &PutRequest) -> Result<()> {
    if req.key.is_empty() {
        return Err(StoreError::EmptyKey);
    }
    if req.ignore_value && !req.value.is_empty() {
        return Err(StoreError::ValueProvided);
    }
    if req.ignore_lease && req.lease != 0 {
        return Err(StoreError::LeaseProvided);
    }
    Ok(())
}

pub fn check_delete_range(req: &DeleteRangeRequest) -> Result<()> {
    if req.key.is_empty() {
        return Err(StoreError::EmptyKey);
    }
    Ok(())
}

/// Limits (operations and depth), empty keys and duplicate keys of a txn,
/// nested txns included.
pub fn check_txn(req: &TxnRequest, max_ops: usize) -> Result<()> {
    check_txn_ops(req, max_ops)?;
    let _ = branch_writes(&req.success)?;
    let _ = branch_writes(&req.failure)?;
    Ok(())
}

/// etcd's budget: a txn may hold `max_ops` compares and as many operations
/// in each branch; a txn nested in it gets what its parent left over
/// (`max_ops` less the parent's largest list), so nesting ends at most
/// `max_ops` levels down. The error names the configured limit. Nesting
/// also ends [`MAX_TXN_DEPTH`] levels down, whatever the budget left.
fn check_txn_ops(req: &TxnRequest, max_ops: usize) -> Result<()> {
    check_txn_budget(req, max_ops, max_ops, 1)
}

fn check_txn_budget(req: &TxnRequest, budget: usize, max_ops: usize, depth: usize) -> Result<()> {
    if depth > MAX_TXN_DEPTH {
        return Err(StoreError::TxnTooDeep {
            limit: MAX_TXN_DEPTH,
        });
    }
    let ops = req
        .compare
        .len()
        .max(req.success.len())
        .max(req.failure.len());
    if ops > budget {
        return Err(StoreError::TooManyOps { limit: max_ops });
    }
    if req.compare.iter().any(|c: &Compare| c.key.is_empty()) {
        return Err(StoreError::EmptyKey);
    }
    for op in req.success.iter().chain(&req.failure) {
        match op {
            RequestOp::Range(r) => check_range(r)?,
            RequestOp::Put(p) => check_put(p)?,
            RequestOp::DeleteRange(d) => check_delete_range(d)?,
            RequestOp::Txn(t) => check_txn_budget(t, budget - ops, max_ops, depth + 1)?,
        }
    }
    Ok(())
}

/// The keys a branch puts and the ranges it deletes, nested txns included.
/// A key put twice, or put and deleted, in one branch is a duplicate (as in
/// etcd); the two branches of a nested txn may put the same key because only
/// one of them runs.
fn branch_writes(ops: &[RequestOp]) -> Result<(Vec<Vec<u8>>, Vec<KeyRange>)> {
    let mut deletes: Vec<KeyRange> = ops
        .iter()
        .filter_map(|op| match op {
            RequestOp::DeleteRange(d) => Some(KeyRange::new(&d.key, &d.range_end)),
            _ => None,
        })
        .collect();
    let mut puts: Vec<Vec<u8>> = Vec::new();
    let deleted = |deletes: &[KeyRange], key: &[u8]| deletes.iter().any(|r| r.contains(key));
    for op in ops {
        let RequestOp::Txn(nested) = op else { continue };
        let (then_puts, then_dels) = branch_writes(&nested.success)?;
        let (else_puts, else_dels) = branch_writes(&nested.failure)?;
        for key in &then_puts {
            if puts.contains(key) || deleted(&deletes, key) {
                return Err(StoreError::DuplicateKey);
            }
        }
        let before_then = puts.len();
        puts.extend(then_puts.iter().cloned());
        for key in else_puts {
            let clash = puts[..before_then].contains(&key) || deleted(&deletes, &key);
            if clash {
                return Err(StoreError::DuplicateKey);
            }
            if !then_puts.contains(&key) {
                puts.push(key);
            }
        }
        deletes.extend(then_dels);
        deletes.extend(else_dels);
    }
    for op in ops {
        let RequestOp::Put(put) = op else { continue };
        if puts.contains(&put.key) || deleted(&deletes, &put.key) {
            return Err(StoreError::DuplicateKey);
        }
        puts.push(put.key.clone());
    }
    Ok((puts, deletes))
}

/// The encoded size of a request must stay under the limit.
pub fn check_size(encoded: &[u8], limit: usize) -> Result<()> {
    if encoded.len() > limit {
        return Err(StoreError::RequestTooLarge {
            size: encoded.len(),
            limit,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(key: &str) -> RequestOp {
        RequestOp::Put(PutRequest::new(key, "v"))
    }

    fn del(key: &str, end: &str) -> RequestOp {
        RequestOp::DeleteRange(DeleteRangeRequest {
            key: key.into(),
            range_end: end.into(),
            prev_kv: false,
        })
    }

    fn txn(success: Vec<RequestOp>, failure: Vec<RequestOp>) -> TxnRequest {
        TxnRequest {
            compare: vec![],
            success,
            failure,
        }
    }

    fn dup(t: &TxnRequest) -> bool {
        matches!(check_txn(t, MAX_TXN_OPS), Err(StoreError::DuplicateKey))
    }

    #[test]
    fn duplicate_puts_in_one_branch() {
        assert!(dup(&txn(vec![put("a"), put("a")], vec![])));
        assert!(
            !dup(&txn(vec![put("a")], vec![put("a")])),
            "branches are exclusive"
        );
        assert!(dup(&txn(vec![del("a", "c"), put("b")], vec![])));
        assert!(!dup(&txn(vec![del("a", "c"), put("c")], vec![])));
    }

    #[test]
    fn duplicates_across_nested_txns() {
        let nested = RequestOp::Txn(txn(vec![put("x")], vec![put("x")]));
        assert!(!dup(&txn(vec![nested.clone()], vec![])));
        assert!(dup(&txn(vec![nested.clone(), put("x")], vec![])));
        let nested_else = RequestOp::Txn(txn(vec![put("y")], vec![put("x")]));
        assert!(dup(&txn(vec![put("x"), nested_else], vec![])));
        let nested_del = RequestOp::Txn(txn(vec![del("w", "z")], vec![]));
        assert!(dup(&txn(vec![nested_del, put("x")], vec![])));
    }

    #[test]
    fn op_limits_and_empty_keys() {
        let many = (0..129).map(|i| put(&format!("k{i}"))).collect();
        assert!(matches!(
            check_txn(&txn(many, vec![]), MAX_TXN_OPS),
            Err(StoreError::TooManyOps { limit: 128 })
        ));
        assert!(matches!(
            check_txn(&txn(vec![put("")], vec![]), MAX_TXN_OPS),
            Err(StoreError::EmptyKey)
        ));
        assert!(matches!(
            check_put(&PutRequest::new("", "v")),
            Err(StoreError::EmptyKey)
        ));
        let mut p = PutRequest::new("k", "v");
        p.ignore_value = true;
        assert!(matches!(check_put(&p), Err(StoreError::ValueProvided)));
    }

    fn nested(depth: usize, leaf: TxnRequest) -> TxnRequest {
        (1..depth).fold(leaf, |inner, _| txn(vec![RequestOp::Txn(inner)], vec![]))
    }

    #[test]
    fn a_nested_txn_gets_what_its_parent_left_of_the_op_budget() {
        let too_many = |t: &TxnRequest| {
            matches!(
                check_txn(t, MAX_TXN_OPS),
                Err(StoreError::TooManyOps { limit: 128 })
            )
        };
        let puts = |prefix: &str, n: usize| -> Vec<RequestOp> {
            (0..n).map(|i| put(&format!("{prefix}{i}"))).collect()
        };
        let with_nested = |outer: usize, inner: usize| {
            let mut ops = puts("outer", outer - 1);
            ops.push(RequestOp::Txn(txn(puts("inner", inner), vec![])));
            txn(ops, vec![])
        };
        assert!(!too_many(&with_nested(100, 28)));
        assert!(too_many(&with_nested(100, 29)));
        // The compares count against the budget as much as either branch.
        let mut compared = with_nested(1, 29);
        assert!(!too_many(&compared));
        compared.compare = (0..100)
            .map(|_| Compare {
                result: crate::api::CompareResult::Equal,
                target: crate::api::CompareTarget::Version(0),
                key: b"c".to_vec(),
                range_end: vec![],
            })
            .collect();
        assert!(too_many(&compared));
        // The budget shrinks level by level: 50 operations fit at the
        // top (128) and below it (78), not a third time (28 left).
        let wide = |levels: usize| {
            (0..levels).fold(txn(puts("leaf", 50), vec![]), |inner, level| {
                let mut ops = puts(&format!("l{level}-"), 49);
                ops.push(RequestOp::Txn(inner));
                txn(ops, vec![])
            })
        };
        assert!(!too_many(&wide(1)));
        assert!(too_many(&wide(2)));
    }

    #[test]
    fn nesting_ends_at_the_depth_a_client_can_read_the_answer_of() {
        let deep = |levels: usize| {
            check_txn(
                &nested(levels, txn(vec![put("leaf")], vec![put("other")])),
                MAX_TXN_OPS,
            )
        };
        assert!(deep(MAX_TXN_DEPTH).is_ok());
        // etcd's budget would allow 128 levels of one operation each.
        for levels in [MAX_TXN_DEPTH + 1, 128, 129] {
            assert!(
                matches!(
                    deep(levels),
                    Err(StoreError::TxnTooDeep {
                        limit: MAX_TXN_DEPTH
                    })
                ),
                "{levels} levels"
            );
        }
        // Deep in the failure branch counts the same.
        let mut in_failure = nested(MAX_TXN_DEPTH, txn(vec![], vec![]));
        in_failure.failure = std::mem::take(&mut in_failure.success);
        let outer = txn(vec![], vec![RequestOp::Txn(in_failure)]);
        assert!(matches!(
            check_txn(&outer, MAX_TXN_OPS),
            Err(StoreError::TxnTooDeep { .. })
        ));
    }

    #[test]
    fn commands_round_trip() {
        let cmd = Command::Txn(txn(vec![put("a"), del("b", "\0")], vec![]));
        assert_eq!(Command::decode(&cmd.encode()).unwrap(), cmd);
        assert!(Command::decode(b"\xff\xff\xff").is_err());
    }
}
