//! etcd's Cluster service: the member list, and member changes handed to
//! the store. Updating peer URLs and promoting learners are not served.

use tonic::{Request, Response, Status};

use super::convert;
use super::pb::etcdserverpb::{self as pb, cluster_server::Cluster};
use super::status::{self, from_store};
use crate::Store;

pub(crate) struct ClusterService {
    store: Store,
}

impl ClusterService {
    pub(crate) fn new(store: Store) -> Self {
        ClusterService { store }
    }
}

#[tonic::async_trait]
impl Cluster for ClusterService {
    async fn member_add(
        &self,
        request: Request<pb::MemberAddRequest>,
    ) -> Result<Response<pb::MemberAddResponse>, Status> {
        let req = request.into_inner();
        let (added, members) = self
            .store
            .add_member(req.peer_ur_ls, req.is_learner)
            .await
            .map_err(from_store)?;
        Ok(Response::new(pb::MemberAddResponse {
            header: convert::current_header(&self.store),
            member: Some(convert::member(added)),
            members: members.into_iter().map(convert::member).collect(),
        }))
    }

    async fn member_remove(
        &self,
        request: Request<pb::MemberRemoveRequest>,
    ) -> Result<Response<pb::MemberRemoveResponse>, Status> {
        let id = request.into_inner().id;
        let known = self.store.members().map_err(from_store)?;
        if !known.iter().any(|m| m.id == id) {
            return Err(Status::not_found(status::MEMBER_NOT_FOUND));
        }
        self.store.remove_member(id).await.map_err(from_store)?;
        Ok(Response::new(pb::MemberRemoveResponse {
            header: convert::current_header(&self.store),
            members: convert::members(&self.store)?,
        }))
    }

    async fn member_update(
        &self,
        _request: Request<pb::MemberUpdateRequest>,
    ) -> Result<Response<pb::MemberUpdateResponse>, Status> {
        Err(Status::unimplemented(
            "skiff does not change a member's peer URLs; remove the member and add it again",
        ))
    }

    async fn member_list(
        &self,
        _request: Request<pb::MemberListRequest>,
    ) -> Result<Response<pb::MemberListResponse>, Status> {
        Ok(Response::new(pb::MemberListResponse {
            header: convert::current_header(&self.store),
            members: convert::members(&self.store)?,
        }))
    }

    async fn member_promote(
        &self,
        _request: Request<pb::MemberPromoteRequest>,
    ) -> Result<Response<pb::MemberPromoteResponse>, Status> {
        Err(Status::unimplemented(
            "skiff has no learners to promote; members join as voters",
        ))
    }
}
