//! etcd's Lease service: grant, revoke, time-to-live, list, and the
//! keep-alive stream that renews a lease each time the client asks.

use std::pin::Pin;

use futures::Stream;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use super::pb::etcdserverpb::{self as pb, lease_server::Lease};
use super::status::{self, from_store};
use super::{convert, Stopping};
use crate::error::StoreError;
use crate::Store;

/// Keep-alive answers queued for a client that is slow to read them.
const KEEP_ALIVE_QUEUE: usize = 16;

pub(crate) struct LeaseService {
    store: Store,
    stopping: Stopping,
}

impl LeaseService {
    pub(crate) fn new(store: Store, stopping: Stopping) -> Self {
        LeaseService { store, stopping }
    }
}

type KeepAliveStream =
    Pin<Box<dyn Stream<Item = Result<pb::LeaseKeepAliveResponse, Status>> + Send>>;

#[tonic::async_trait]
impl Lease for LeaseService {
    type LeaseKeepAliveStream = KeepAliveStream;

    async fn lease_grant(
        &self,
        request: Request<pb::LeaseGrantRequest>,
    ) -> Result<Response<pb::LeaseGrantResponse>, Status> {
        let req = request.into_inner();
        let resp = self
            .store
            .lease_grant(req.ttl, req.id)
            .await
            .map_err(from_store)?;
        Ok(Response::new(pb::LeaseGrantResponse {
            header: convert::header(&self.store, resp.header.revision),
            id: resp.id,
            ttl: resp.ttl,
            error: String::new(),
        }))
    }

    async fn lease_revoke(
        &self,
        request: Request<pb::LeaseRevokeRequest>,
    ) -> Result<Response<pb::LeaseRevokeResponse>, Status> {
        let id = request.into_inner().id;
        let resp = self.store.lease_revoke(id).await.map_err(from_store)?;
        Ok(Response::new(pb::LeaseRevokeResponse {
            header: convert::header(&self.store, resp.header.revision),
        }))
    }

    async fn lease_keep_alive(
        &self,
        request: Request<Streaming<pb::LeaseKeepAliveRequest>>,
    ) -> Result<Response<Self::LeaseKeepAliveStream>, Status> {
        let (answers, stream) = mpsc::channel(KEEP_ALIVE_QUEUE);
        tokio::spawn(keep_alive(
            self.store.clone(),
            request.into_inner(),
            answers,
            self.stopping.clone(),
        ));
        Ok(Response::new(Box::pin(ReceiverStream::new(stream))))
    }

    async fn lease_time_to_live(
        &self,
        request: Request<pb::LeaseTimeToLiveRequest>,
    ) -> Result<Response<pb::LeaseTimeToLiveResponse>, Status> {
        let req = request.into_inner();
        let resp = self
            .store
            .lease_time_to_live(req.id, req.keys)
            .await
            .map_err(from_store)?;
        Ok(Response::new(pb::LeaseTimeToLiveResponse {
            header: convert::header(&self.store, resp.header.revision),
            id: resp.id,
            ttl: resp.ttl,
            granted_ttl: resp.granted_ttl,
            keys: resp.keys,
        }))
    }

    async fn lease_leases(
        &self,
        _request: Request<pb::LeaseLeasesRequest>,
    ) -> Result<Response<pb::LeaseLeasesResponse>, Status> {
        let resp = self.store.lease_leases().await.map_err(from_store)?;
        Ok(Response::new(pb::LeaseLeasesResponse {
            header: convert::header(&self.store, resp.header.revision),
            leases: resp
                .leases
                .into_iter()
                .map(|id| pb::LeaseStatus { id })
                .collect(),
        }))
    }
}

type Answers = mpsc::Sender<Result<pb::LeaseKeepAliveResponse, Status>>;

/// Renews each lease the client names, in order, until the client stops
/// asking or goes away. A lease that is gone is answered with TTL 0; any
/// other failure ends the stream with its status, as in etcd.
async fn keep_alive(
    store: Store,
    mut requests: Streaming<pb::LeaseKeepAliveRequest>,
    answers: Answers,
    mut stopping: Stopping,
) {
    loop {
        let request = tokio::select! {
            request = requests.message() => request,
            () = answers.closed() => return,
            () = stopping.wait() => {
                let _ = answers.try_send(Err(Status::unavailable(status::STOPPED)));
                return;
            }
        };
        let id = match request {
            Ok(Some(request)) => request.id,
            // The client closed its side.
            Ok(None) => return,
            // A broken connection hears nothing; a refused message is
            // answered, as etcd returns its receive error.
            Err(refused) => {
                let _ = answers.try_send(Err(status::over_receive_limit_as_etcd(refused)));
                return;
            }
        };
        let answer = match store.lease_keep_alive(id).await {
            Ok(resp) => Ok(pb::LeaseKeepAliveResponse {
                header: convert::header(&store, resp.header.revision),
                id,
                ttl: resp.ttl,
            }),
            Err(StoreError::LeaseNotFound) => Ok(pb::LeaseKeepAliveResponse {
                header: convert::current_header(&store),
                id,
                ttl: 0,
            }),
            Err(err) => Err(from_store(err)),
        };
        let failed = answer.is_err();
        let sent = tokio::select! {
            sent = answers.send(answer) => sent.is_ok(),
            () = stopping.wait() => false,
        };
        if !sent || failed {
            return;
        }
    }
}
