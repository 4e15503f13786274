//! etcd's KV service: range, put, delete, txn and compact, each one call
//! of the store.

use tonic::{Request, Response, Status};

use super::convert;
use super::pb::etcdserverpb::{self as pb, kv_server::Kv};
use super::status::{self, from_store};
use crate::Store;

pub(crate) struct KvService {
    store: Store,
}

impl KvService {
    pub(crate) fn new(store: Store) -> Self {
        KvService { store }
    }
}

#[tonic::async_trait]
impl Kv for KvService {
    async fn range(
        &self,
        request: Request<pb::RangeRequest>,
    ) -> Result<Response<pb::RangeResponse>, Status> {
        let req = convert::range_request(request.into_inner())?;
        if !req.serializable && self.store.is_learner() {
            // A learner's state may lag: it serves only what may lag.
            return Err(Status::unavailable(status::NOT_SUPPORTED_FOR_LEARNER));
        }
        let resp = self.store.range(req).await.map_err(from_store)?;
        Ok(Response::new(convert::range_response(&self.store, resp)))
    }

    async fn put(
        &self,
        request: Request<pb::PutRequest>,
    ) -> Result<Response<pb::PutResponse>, Status> {
        let req = convert::put_request(request.into_inner());
        let resp = self.store.put(req).await.map_err(from_store)?;
        Ok(Response::new(convert::put_response(&self.store, resp)))
    }

    async fn delete_range(
        &self,
        request: Request<pb::DeleteRangeRequest>,
    ) -> Result<Response<pb::DeleteRangeResponse>, Status> {
        let req = convert::delete_range_request(request.into_inner());
        let resp = self.store.delete_range(req).await.map_err(from_store)?;
        Ok(Response::new(convert::delete_range_response(
            &self.store,
            resp,
        )))
    }

    async fn txn(
        &self,
        request: Request<pb::TxnRequest>,
    ) -> Result<Response<pb::TxnResponse>, Status> {
        let req = convert::txn_request(request.into_inner())?;
        let resp = self.store.txn(req).await.map_err(from_store)?;
        Ok(Response::new(convert::txn_response(&self.store, resp)))
    }

    async fn compact(
        &self,
        request: Request<pb::CompactionRequest>,
    ) -> Result<Response<pb::CompactionResponse>, Status> {
        let req = request.into_inner();
        let resp = self
            .store
            .compact(req.revision, req.physical)
            .await
            .map_err(from_store)?;
        Ok(Response::new(pb::CompactionResponse {
            header: convert::header(&self.store, resp.header.revision),
        }))
    }
}
