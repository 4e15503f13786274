//! etcd's Cluster service: the member list, and member changes (add,
//! remove, update peer URLs, promote a learner) handed to the store.

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
        if !peer_urls_are_valid(&req.peer_ur_ls) {
            return Err(Status::invalid_argument(status::MEMBER_BAD_URLS));
        }
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
        request: Request<pb::MemberUpdateRequest>,
    ) -> Result<Response<pb::MemberUpdateResponse>, Status> {
        let req = request.into_inner();
        let known = self.store.members().map_err(from_store)?;
        if !known.iter().any(|m| m.id == req.id) {
            return Err(Status::not_found(status::MEMBER_NOT_FOUND));
        }
        if !peer_urls_are_valid(&req.peer_ur_ls) {
            return Err(Status::invalid_argument(status::MEMBER_BAD_URLS));
        }
        let members = self
            .store
            .update_member(req.id, req.peer_ur_ls)
            .await
            .map_err(from_store)?;
        Ok(Response::new(pb::MemberUpdateResponse {
            header: convert::current_header(&self.store),
            members: members.into_iter().map(convert::member).collect(),
        }))
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
        request: Request<pb::MemberPromoteRequest>,
    ) -> Result<Response<pb::MemberPromoteResponse>, Status> {
        let id = request.into_inner().id;
        let members = self.store.promote_member(id).await.map_err(from_store)?;
        Ok(Response::new(pb::MemberPromoteResponse {
            header: convert::current_header(&self.store),
            members: members.into_iter().map(convert::member).collect(),
        }))
    }
}

/// etcd's `types.NewURLs`: at least one URL, each of scheme http, https,
/// unix or unixs, with an address of the form host:port and no path.
fn peer_urls_are_valid(urls: &[String]) -> bool {
    !urls.is_empty() && urls.iter().all(|url| peer_url_is_valid(url.trim()))
}

fn peer_url_is_valid(url: &str) -> bool {
    let Some((scheme, rest)) = url.split_once("://") else {
        return false;
    };
    if !matches!(scheme, "http" | "https" | "unix" | "unixs") {
        return false;
    }
    let rest = rest.split(['?', '#']).next().unwrap_or_default();
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let host_port = authority.rsplit('@').next().unwrap_or_default();
    path.is_empty() && splits_as_host_port(host_port)
}

/// Go's `net.SplitHostPort` succeeds: one colon, or a bracketed IPv6
/// host followed by one.
fn splits_as_host_port(address: &str) -> bool {
    match address.strip_prefix('[') {
        Some(bracketed) => bracketed
            .split_once(']')
            .and_then(|(_, after)| after.strip_prefix(':'))
            .is_some_and(|port| !port.contains(':')),
        None => address.matches(':').count() == 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peer_urls_as_etcd_reads_them() {
        let valid = |urls: &[&str]| {
            peer_urls_are_valid(&urls.iter().map(|u| u.to_string()).collect::<Vec<_>>())
        };
        assert!(valid(&["http://10.0.0.2:2380"]));
        assert!(valid(&[" https://node-2:2380 ", "http://[::1]:2380"]));
        assert!(valid(&["unix://sock:1"]));
        assert!(!valid(&[]));
        assert!(!valid(&["not a url"]));
        assert!(!valid(&["ftp://10.0.0.2:2380"]));
        assert!(!valid(&["http://10.0.0.2"]), "no port");
        assert!(!valid(&["http://10.0.0.2:2380/path"]));
        assert!(!valid(&["http://::1:2380"]), "IPv6 without brackets");
        assert!(!valid(&["http://10.0.0.2:2380", "10.0.0.3:2380"]));
    }
}
