//! etcd's Maintenance service, the part skiff serves: status, alarms,
//! leader transfer, snapshots in etcd's own file format, the consistency
//! hashes, and defragmentation.

use std::pin::Pin;
use std::time::Duration;

use tokio_stream::Stream;
use tonic::{Request, Response, Status};

use super::pb::etcdserverpb::{self as pb, maintenance_server::Maintenance};
use super::status::{self, from_store};
use super::{convert, ETCD_VERSION};
use crate::{AlarmAction, Store};

pub(crate) struct MaintenanceService {
    store: Store,
}

impl MaintenanceService {
    pub(crate) fn new(store: Store) -> Self {
        MaintenanceService { store }
    }
}

/// etcd sends a snapshot in chunks of this many bytes.
const SNAPSHOT_CHUNK: usize = 32 * 1024;

type SnapshotStream = Pin<Box<dyn Stream<Item = Result<pb::SnapshotResponse, Status>> + Send>>;

fn snapshot_error(err: crate::snapshot::SnapshotError) -> Status {
    match err {
        crate::snapshot::SnapshotError::Store(err) => from_store(err),
        other => {
            tracing::warn!(error = %other, "could not take a snapshot");
            Status::internal(other.to_string())
        }
    }
}

/// A snapshot as etcd streams it: the database in chunks, each saying how
/// many bytes are still to come, then its sha256 as the last blob.
fn snapshot_messages(db: Vec<u8>, header: Option<pb::ResponseHeader>) -> Vec<pb::SnapshotResponse> {
    let checksum = crate::snapshot::checksum(&db);
    let total = db.len();
    let mut sent = 0;
    let mut messages = Vec::with_capacity(total / SNAPSHOT_CHUNK + 2);
    for chunk in db.chunks(SNAPSHOT_CHUNK) {
        sent += chunk.len();
        messages.push(pb::SnapshotResponse {
            header,
            remaining_bytes: (total - sent) as u64,
            blob: chunk.to_vec(),
            version: String::new(),
        });
    }
    messages.push(pb::SnapshotResponse {
        header,
        remaining_bytes: 0,
        blob: checksum.to_vec(),
        version: String::new(),
    });
    messages
}

#[tonic::async_trait]
impl Maintenance for MaintenanceService {
    type SnapshotStream = SnapshotStream;

    async fn snapshot(
        &self,
        _request: Request<pb::SnapshotRequest>,
    ) -> Result<Response<Self::SnapshotStream>, Status> {
        let db = crate::snapshot::database(&self.store)
            .await
            .map_err(snapshot_error)?;
        tracing::info!(bytes = db.len(), "sending a database snapshot to a client");
        let messages = snapshot_messages(db, convert::current_header(&self.store));
        Ok(Response::new(Box::pin(tokio_stream::iter(
            messages.into_iter().map(Ok),
        ))))
    }

    async fn hash_kv(
        &self,
        request: Request<pb::HashKvRequest>,
    ) -> Result<Response<pb::HashKvResponse>, Status> {
        let revision = request.into_inner().revision;
        let kv = std::sync::Arc::clone(self.store.kv());
        let hash = tokio::task::spawn_blocking(move || kv.hash_kv(revision))
            .await
            .map_err(|e| Status::internal(e.to_string()))?
            .map_err(from_store)?;
        let mut header = convert::current_header(&self.store);
        if let Some(header) = header.as_mut() {
            header.revision = hash.current_revision;
        }
        Ok(Response::new(pb::HashKvResponse {
            header,
            hash: hash.hash,
            compact_revision: hash.compact_revision,
            hash_revision: hash.hash_revision,
        }))
    }

    async fn hash(
        &self,
        _request: Request<pb::HashRequest>,
    ) -> Result<Response<pb::HashResponse>, Status> {
        let kv = std::sync::Arc::clone(self.store.kv());
        let (hash, revision) =
            tokio::task::spawn_blocking(move || crate::snapshot::backend_hash(&kv))
                .await
                .map_err(|e| Status::internal(e.to_string()))?
                .map_err(snapshot_error)?;
        let mut header = convert::current_header(&self.store);
        if let Some(header) = header.as_mut() {
            header.revision = revision;
        }
        Ok(Response::new(pb::HashResponse { header, hash }))
    }

    /// Copies this member's live state into a fresh database and
    /// switches to it, giving back the space of compacted history (see
    /// [`crate::mvcc::backend`]).
    async fn defragment(
        &self,
        _request: Request<pb::DefragmentRequest>,
    ) -> Result<Response<pb::DefragmentResponse>, Status> {
        self.store.defragment().await.map_err(from_store)?;
        Ok(Response::new(pb::DefragmentResponse {
            header: convert::current_header(&self.store),
        }))
    }

    /// Lists, raises or disarms alarms, as etcd answers: any alarm type
    /// and member ID is taken as given. An action etcd does not define
    /// (which makes etcd 3.4 crash) is refused.
    async fn alarm(
        &self,
        request: Request<pb::AlarmRequest>,
    ) -> Result<Response<pb::AlarmResponse>, Status> {
        let request = request.into_inner();
        let Some(action) = AlarmAction::from_i32(request.action) else {
            return Err(Status::invalid_argument(format!(
                "{}: {} (GET, ACTIVATE or DEACTIVATE)",
                status::UNKNOWN_ALARM_ACTION,
                request.action
            )));
        };
        let alarms = self
            .store
            .alarm(action, request.member_id, request.alarm)
            .await
            .map_err(from_store)?;
        Ok(Response::new(pb::AlarmResponse {
            header: convert::current_header(&self.store),
            alarms: alarms.into_iter().map(alarm_member).collect(),
        }))
    }

    async fn status(
        &self,
        _request: Request<pb::StatusRequest>,
    ) -> Result<Response<pb::StatusResponse>, Status> {
        let status = self.store.status();
        let db_size = i64::try_from(status.db_size).unwrap_or(i64::MAX);
        let in_use = i64::try_from(status.db_size_in_use.min(status.db_size)).unwrap_or(i64::MAX);
        let mut errors = Vec::new();
        if status.leader == 0 {
            errors.push(status::NO_LEADER.to_string());
        }
        // As etcd: every alarm raised, in its text form.
        errors.extend(self.store.alarms().iter().map(|a| a.to_string()));
        Ok(Response::new(pb::StatusResponse {
            header: Some(pb::ResponseHeader {
                cluster_id: status.cluster_id,
                member_id: status.member_id,
                revision: status.revision,
                raft_term: status.raft_term,
            }),
            version: ETCD_VERSION.to_string(),
            db_size,
            leader: status.leader,
            raft_index: status.raft_index,
            raft_term: status.raft_term,
            raft_applied_index: status.raft_applied_index,
            errors,
            db_size_in_use: in_use,
            is_learner: status.is_learner,
        }))
    }

    /// Asked of the leader; answers once `target` leads, as etcd does.
    async fn move_leader(
        &self,
        request: Request<pb::MoveLeaderRequest>,
    ) -> Result<Response<pb::MoveLeaderResponse>, Status> {
        let target = request.into_inner().target_id;
        if !self.store.is_leader() {
            return Err(Status::failed_precondition(status::NOT_LEADER));
        }
        let members = self.store.members().map_err(from_store)?;
        if !members.iter().any(|m| m.id == target && !m.is_learner) {
            return Err(Status::failed_precondition(status::BAD_LEADER_TRANSFEREE));
        }
        if target != self.store.member_id() {
            self.store
                .transfer_leadership(target)
                .await
                .map_err(from_store)?;
            self.wait_for_leader(target).await?;
        }
        Ok(Response::new(pb::MoveLeaderResponse {
            header: convert::current_header(&self.store),
        }))
    }
}

fn alarm_member(alarm: crate::mvcc::alarm::AlarmMember) -> pb::AlarmMember {
    pb::AlarmMember {
        member_id: alarm.member_id,
        alarm: alarm.alarm,
    }
}

impl MaintenanceService {
    async fn wait_for_leader(&self, target: u64) -> Result<(), Status> {
        let deadline = tokio::time::Instant::now() + self.store.config().request_timeout;
        while self.store.leader_id() != target {
            if tokio::time::Instant::now() >= deadline {
                return Err(Status::unknown(status::LEADER_TRANSFER_TIMEOUT));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_snapshot_streams_as_etcd_frames_it() {
        let db: Vec<u8> = (0..SNAPSHOT_CHUNK * 2 + 100).map(|i| i as u8).collect();
        let messages = snapshot_messages(db.clone(), None);
        let remaining: Vec<u64> = messages.iter().map(|m| m.remaining_bytes).collect();
        assert_eq!(remaining, [SNAPSHOT_CHUNK as u64 + 100, 100, 0, 0]);
        let body: Vec<u8> = messages[..3].iter().flat_map(|m| m.blob.clone()).collect();
        assert_eq!(body, db);
        assert_eq!(messages[3].blob, crate::snapshot::checksum(&db));
        // A database of exactly whole chunks still ends with its checksum.
        let messages = snapshot_messages(vec![7; SNAPSHOT_CHUNK], None);
        assert_eq!(messages.len(), 2);
        assert_eq!(messages[1].blob.len(), crate::snapshot::CHECKSUM_LEN);
    }
}
