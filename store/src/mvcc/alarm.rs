//! Alarms raised in the cluster, as etcd's alarm store keeps them: NOSPACE
//! (a member's database passed its quota) and CORRUPT (members' hashes
//! disagree), each raised for a member. They are raised and disarmed
//! through the log, so every member holds the same set, and kept with the
//! state; while one is raised the applier refuses what etcd refuses (see
//! [`refusal`]). As etcd does, an alarm is kept for whatever type and
//! member ID it was raised with.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::api::{RequestOp, TxnRequest};
use crate::command::Command;
use crate::error::{Result, StoreError};

/// etcd's `AlarmType` values.
pub const NONE: i32 = 0;
pub const NOSPACE: i32 = 1;
pub const CORRUPT: i32 = 2;

/// Alarms under this prefix + the type (i32 BE) + the member (u64 BE),
/// with an empty value.
const ALARM_PREFIX: &[u8] = b"m/alarm/";

/// One raised alarm: its type and the member it was raised for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct AlarmMember {
    pub alarm: i32,
    pub member_id: u64,
}

impl AlarmMember {
    pub fn new(member_id: u64, alarm: i32) -> Self {
        AlarmMember { alarm, member_id }
    }

    pub(crate) fn key(&self) -> Vec<u8> {
        let mut key = ALARM_PREFIX.to_vec();
        key.extend_from_slice(&self.alarm.to_be_bytes());
        key.extend_from_slice(&self.member_id.to_be_bytes());
        key
    }

    fn from_key(key: &[u8]) -> Option<AlarmMember> {
        let rest = key.strip_prefix(ALARM_PREFIX)?;
        if rest.len() != 12 {
            return None;
        }
        Some(AlarmMember {
            alarm: i32::from_be_bytes(rest[..4].try_into().ok()?),
            member_id: u64::from_be_bytes(rest[4..].try_into().ok()?),
        })
    }
}

/// The type's name as etcd prints it; an unknown type as its number.
pub fn alarm_name(alarm: i32) -> String {
    match alarm {
        NONE => "NONE".into(),
        NOSPACE => "NOSPACE".into(),
        CORRUPT => "CORRUPT".into(),
        other => other.to_string(),
    }
}

/// etcd's text form of an `AlarmMember` (`etcdctl alarm list`, and the
/// errors of `Status`): each field not zero as `name:value `.
impl std::fmt::Display for AlarmMember {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.member_id != 0 {
            write!(f, "memberID:{} ", self.member_id)?;
        }
        if self.alarm != NONE {
            write!(f, "alarm:{} ", alarm_name(self.alarm))?;
        }
        Ok(())
    }
}

/// Every alarm stored in `tree`.
pub(crate) fn load(tree: &sled::Tree) -> Result<BTreeSet<AlarmMember>> {
    let mut alarms = BTreeSet::new();
    for item in tree.scan_prefix(ALARM_PREFIX) {
        let (key, _) = item?;
        let alarm = AlarmMember::from_key(&key).ok_or_else(|| {
            StoreError::storage("loading alarms", format!("bad alarm record under {key:?}"))
        })?;
        alarms.insert(alarm);
    }
    Ok(alarms)
}

/// What a write adds to the database, as etcd counts it against the
/// quota (`quota.go`): a put its key and value and 256 bytes of metadata; a
/// txn the puts of its costlier branch (nested txns included); a lease
/// grant 64 bytes. 0 for what adds nothing.
pub fn quota_cost(command: &Command) -> usize {
    match command {
        Command::Put(put) => put_cost(put.key.len(), put.value.len()),
        Command::Txn(txn) => txn_cost(txn),
        Command::LeaseGrant { .. } => 64,
        _ => 0,
    }
}

fn put_cost(key: usize, value: usize) -> usize {
    256 + key + value
}

fn txn_cost(txn: &TxnRequest) -> usize {
    let branch = |ops: &[RequestOp]| -> usize {
        ops.iter()
            .map(|op| match op {
                RequestOp::Put(put) => put_cost(put.key.len(), put.value.len()),
                RequestOp::Txn(nested) => txn_cost(nested),
                RequestOp::Range(_) | RequestOp::DeleteRange(_) => 0,
            })
            .sum()
    };
    branch(&txn.success).max(branch(&txn.failure))
}

/// Why `command` must be refused while `alarms` are raised, as etcd's
/// appliers refuse it: under CORRUPT every change of keys, leases and
/// compaction; under NOSPACE whatever adds to the database (puts, txns
/// with puts, lease grants), while deletes, compaction and revokes still
/// free space.
pub(crate) fn refusal(alarms: &BTreeSet<AlarmMember>, command: &Command) -> Option<StoreError> {
    let raised = |alarm: i32| alarms.iter().any(|a| a.alarm == alarm);
    let changes_keys = matches!(
        command,
        Command::Put(_)
            | Command::DeleteRange(_)
            | Command::Txn(_)
            | Command::Compact { .. }
            | Command::LeaseGrant { .. }
            | Command::LeaseRevoke { .. }
    );
    if changes_keys && raised(CORRUPT) {
        return Some(StoreError::Corrupt);
    }
    if quota_cost(command) > 0 && raised(NOSPACE) {
        return Some(StoreError::NoSpace);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{DeleteRangeRequest, PutRequest};

    #[test]
    fn alarms_print_as_etcd_prints_them() {
        assert_eq!(
            AlarmMember::new(3319814642761637952, NOSPACE).to_string(),
            "memberID:3319814642761637952 alarm:NOSPACE "
        );
        assert_eq!(AlarmMember::new(0, CORRUPT).to_string(), "alarm:CORRUPT ");
        assert_eq!(AlarmMember::new(6, NONE).to_string(), "memberID:6 ");
        assert_eq!(AlarmMember::new(5, 7).to_string(), "memberID:5 alarm:7 ");
    }

    #[test]
    fn alarm_keys_round_trip() {
        for alarm in [
            AlarmMember::new(0, NONE),
            AlarmMember::new(u64::MAX, CORRUPT),
            AlarmMember::new(42, -3),
        ] {
            assert_eq!(AlarmMember::from_key(&alarm.key()), Some(alarm));
        }
        assert_eq!(AlarmMember::from_key(b"m/alarm/short"), None);
        assert_eq!(AlarmMember::from_key(b"m/revision"), None);
    }

    fn txn(success: Vec<RequestOp>, failure: Vec<RequestOp>) -> Command {
        Command::Txn(TxnRequest {
            compare: vec![],
            success,
            failure,
        })
    }

    #[test]
    fn the_quota_counts_what_a_write_adds() {
        let put = |k: &str, v: &str| RequestOp::Put(PutRequest::new(k, v));
        assert_eq!(quota_cost(&Command::Put(PutRequest::new("ab", "cde"))), 261);
        assert_eq!(quota_cost(&Command::LeaseGrant { id: 1, ttl: 5 }), 64);
        assert_eq!(quota_cost(&Command::LeaseRevoke { id: 1 }), 0);
        assert_eq!(quota_cost(&Command::Compact { revision: 1 }), 0);
        let delete = RequestOp::DeleteRange(DeleteRangeRequest::default());
        assert_eq!(quota_cost(&txn(vec![delete.clone()], vec![])), 0);
        let both = txn(vec![put("a", "1"), put("b", "2")], vec![put("c", "12345")]);
        assert_eq!(quota_cost(&both), 2 * 258, "the costlier branch");
        let nested = txn(
            vec![RequestOp::Txn(TxnRequest {
                compare: vec![],
                success: vec![],
                failure: vec![put("n", "1")],
            })],
            vec![],
        );
        assert_eq!(quota_cost(&nested), 258, "a nested txn's puts count");
    }

    #[test]
    fn raised_alarms_refuse_what_etcd_refuses() {
        let put = Command::Put(PutRequest::new("k", "v"));
        let delete = Command::DeleteRange(DeleteRangeRequest {
            key: b"k".to_vec(),
            ..Default::default()
        });
        let reads_only = txn(vec![], vec![]);
        let writes = txn(vec![RequestOp::Put(PutRequest::new("k", "v"))], vec![]);
        let grant = Command::LeaseGrant { id: 1, ttl: 5 };
        let revoke = Command::LeaseRevoke { id: 1 };
        let compact = Command::Compact { revision: 1 };
        let publish = Command::PublishMember {
            id: 1,
            name: "n1".into(),
            client_urls: vec![],
        };
        let all = [
            &put,
            &delete,
            &reads_only,
            &writes,
            &grant,
            &revoke,
            &compact,
            &publish,
        ];

        let none = BTreeSet::new();
        assert!(all.iter().all(|c| refusal(&none, c).is_none()));
        // Another type raised (etcd keeps any) refuses nothing.
        let other = BTreeSet::from([AlarmMember::new(5, 7)]);
        assert!(all.iter().all(|c| refusal(&other, c).is_none()));

        let nospace = BTreeSet::from([AlarmMember::new(9, NOSPACE)]);
        let refused: Vec<bool> = all
            .iter()
            .map(|c| matches!(refusal(&nospace, c), Some(StoreError::NoSpace)))
            .collect();
        assert_eq!(
            refused,
            [true, false, false, true, true, false, false, false]
        );

        let corrupt = BTreeSet::from([AlarmMember::new(9, NOSPACE), AlarmMember::new(0, CORRUPT)]);
        let refused: Vec<bool> = all
            .iter()
            .map(|c| matches!(refusal(&corrupt, c), Some(StoreError::Corrupt)))
            .collect();
        assert_eq!(refused, [true, true, true, true, true, true, true, false]);
    }
}
