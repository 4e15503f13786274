//! What a learner serves clients, as etcd's learners do: serializable
//! reads (`Range` with `serializable`, checked in the KV service), the
//! member's `Status`, and `Snapshot` (a backup taken off the voters);
//! every other call, unary or stream, is refused with "rpc not supported
//! for learner" (Unavailable), which sends etcd clients to another member.
//! Not for the HTTP endpoints beside the gRPC API.

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;

use super::status;
use crate::Store;

/// The gRPC methods a learner answers.
const SERVED_BY_LEARNERS: [&str; 3] = [
    "/etcdserverpb.KV/Range",
    "/etcdserverpb.Maintenance/Status",
    "/etcdserverpb.Maintenance/Snapshot",
];

/// Refuses what a learner does not serve, while this member is one.
pub(crate) fn refuse_on_learners(
    mut routes: tonic::service::Routes,
    store: Store,
) -> tonic::service::Routes {
    let grpc = std::mem::take(routes.axum_router_mut());
    *routes.axum_router_mut() = grpc.layer(axum::middleware::from_fn_with_state(
        store,
        refuse_unless_served,
    ));
    routes
}

async fn refuse_unless_served(
    State(store): State<Store>,
    request: Request,
    next: Next,
) -> Response {
    if store.is_learner() && !is_served_by_learners(request.uri().path()) {
        return tonic::Status::unavailable(status::NOT_SUPPORTED_FOR_LEARNER).into_http();
    }
    next.run(request).await
}

fn is_served_by_learners(path: &str) -> bool {
    SERVED_BY_LEARNERS.contains(&path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_learner_serves_reads_status_and_snapshots_only() {
        for served in SERVED_BY_LEARNERS {
            assert!(is_served_by_learners(served));
        }
        for refused in [
            "/etcdserverpb.KV/Put",
            "/etcdserverpb.KV/Txn",
            "/etcdserverpb.Watch/Watch",
            "/etcdserverpb.Lease/LeaseGrant",
            "/etcdserverpb.Lease/LeaseKeepAlive",
            "/etcdserverpb.Cluster/MemberList",
            "/etcdserverpb.Cluster/MemberPromote",
            "/etcdserverpb.Maintenance/Defragment",
            "/etcdserverpb.KV/Range/",
        ] {
            assert!(!is_served_by_learners(refused), "{refused}");
        }
    }
}
