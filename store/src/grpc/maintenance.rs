//! etcd's Maintenance service, the part skiff serves: status, alarms
//! (none are ever raised) and leader transfer.

use std::time::Duration;

use tonic::{Request, Response, Status};

use super::pb::etcdserverpb::{self as pb, maintenance_server::Maintenance};
use super::status::{self, from_store};
use super::{convert, ETCD_VERSION};
use crate::Store;

pub(crate) struct MaintenanceService {
    store: Store,
}

impl MaintenanceService {
    pub(crate) fn new(store: Store) -> Self {
        MaintenanceService { store }
    }
}

#[tonic::async_trait]
impl Maintenance for MaintenanceService {
    /// skiff raises no alarm (no space quota, no corruption check), so
    /// there is never one to list or to disarm.
    async fn alarm(
        &self,
        request: Request<pb::AlarmRequest>,
    ) -> Result<Response<pb::AlarmResponse>, Status> {
        use pb::alarm_request::AlarmAction;
        if request.into_inner().action == AlarmAction::Activate as i32 {
            return Err(Status::unimplemented(
                "skiff does not raise alarms by request",
            ));
        }
        Ok(Response::new(pb::AlarmResponse {
            header: convert::current_header(&self.store),
            alarms: Vec::new(),
        }))
    }

    async fn status(
        &self,
        _request: Request<pb::StatusRequest>,
    ) -> Result<Response<pb::StatusResponse>, Status> {
        let status = self.store.status();
        let db_size = i64::try_from(status.db_size).unwrap_or(i64::MAX);
        let mut errors = Vec::new();
        if status.leader == 0 {
            errors.push(status::NO_LEADER.to_string());
        }
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
            db_size_in_use: db_size,
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
