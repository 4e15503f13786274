//! The few etcd v3 gRPC calls the process tests make themselves, through
//! the generated client, against a member's client address.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Context, Result};
use skiff_store::grpc::pb::etcdserverpb::kv_client::KvClient;
use skiff_store::grpc::pb::etcdserverpb::maintenance_client::MaintenanceClient;
use skiff_store::grpc::pb::etcdserverpb::{
    PutRequest, RangeRequest, RangeResponse, StatusRequest, StatusResponse,
};
use tonic::transport::{Channel, Endpoint};

const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
const REQUEST_TIMEOUT: Duration = Duration::from_secs(15);

/// A TLS connection to the member at `addr`, with the shared client
/// certificate ([`crate::test_pki`]).
pub async fn connect(addr: SocketAddr) -> Result<Channel> {
    Endpoint::from_shared(format!("https://{addr}"))?
        .tls_config(crate::test_pki::store_client_tls()?)?
        .connect_timeout(CONNECT_TIMEOUT)
        .timeout(REQUEST_TIMEOUT)
        .connect()
        .await
        .with_context(|| format!("connecting to {addr}"))
}

pub async fn status(addr: SocketAddr) -> Result<StatusResponse> {
    let mut client = MaintenanceClient::new(connect(addr).await?);
    Ok(client.status(StatusRequest {}).await?.into_inner())
}

/// Puts `key` = `value` through the member at `addr`; returns the revision.
pub async fn put(addr: SocketAddr, key: &str, value: &str) -> Result<i64> {
    let mut client = KvClient::new(connect(addr).await?);
    let response = client
        .put(PutRequest {
            key: key.into(),
            value: value.into(),
            ..Default::default()
        })
        .await
        .with_context(|| format!("put {key} through {addr}"))?
        .into_inner();
    Ok(response.header.map_or(0, |h| h.revision))
}

/// A linearizable read of `key` from the member at `addr`.
pub async fn get(addr: SocketAddr, key: &str) -> Result<RangeResponse> {
    let mut client = KvClient::new(connect(addr).await?);
    Ok(client
        .range(RangeRequest {
            key: key.into(),
            ..Default::default()
        })
        .await
        .with_context(|| format!("get {key} from {addr}"))?
        .into_inner())
}

/// The value of `key` as text, `None` if it does not exist.
pub async fn get_value(addr: SocketAddr, key: &str) -> Result<Option<String>> {
    let response = get(addr, key).await?;
    Ok(response
        .kvs
        .first()
        .map(|kv| String::from_utf8_lossy(&kv.value).into_owned()))
}

/// Every key under `prefix` with its mod revision and value, in key
/// order: a dump to compare before and after requests that must change
/// nothing.
pub async fn dump(addr: SocketAddr, prefix: &str) -> Result<Vec<(String, i64, Vec<u8>)>> {
    let mut client = KvClient::new(connect(addr).await?);
    let mut end = prefix.as_bytes().to_vec();
    if let Some(last) = end.last_mut() {
        *last += 1;
    }
    let response = client
        .range(RangeRequest {
            key: prefix.into(),
            range_end: end,
            ..Default::default()
        })
        .await
        .with_context(|| format!("range {prefix} from {addr}"))?
        .into_inner();
    Ok(response
        .kvs
        .into_iter()
        .map(|kv| {
            (
                String::from_utf8_lossy(&kv.key).into_owned(),
                kv.mod_revision,
                kv.value,
            )
        })
        .collect())
}
