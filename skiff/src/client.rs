//! Talking to running members over etcd's v3 gRPC API: endpoint lists,
//! connections with timeouts (TLS with the store CA's client certificate,
//! unless an endpoint says `http://`, a member's --insecure-client-listen),
//! and server errors turned into one line.

use std::path::Path;

use std::time::Duration;

use anyhow::{anyhow, bail, Result};
use skiff_store::grpc::pb::etcdserverpb::maintenance_client::MaintenanceClient;
use skiff_store::grpc::pb::etcdserverpb::{StatusRequest, StatusResponse};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

/// Connecting to one member.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// One request, including a write that waits for a quorum (the store gives
/// up after 5 s).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(15);

/// The store's client credentials kept in a PKI directory (`DIR/etcd`):
/// its CA and the client certificate that `skiff store` made.
pub fn store_tls(pki_dir: &Path) -> Result<ClientTlsConfig> {
    let dir = pki_dir.join(crate::pki::STORE_DIR);
    let read = |file: &str| {
        let path = dir.join(file);
        std::fs::read_to_string(&path).map_err(|err| {
            anyhow!(
                "cannot read {}: {err}; pass --pki-dir, the PKI directory the members use \
                 (DATA_DIR/pki, or their --pki-dir)",
                path.display()
            )
        })
    };
    Ok(ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(read(crate::pki::STORE_CA_CERT)?))
        .identity(Identity::from_pem(
            read(crate::pki::STORE_CLIENT_CERT)?,
            read(crate::pki::STORE_CLIENT_KEY)?,
        )))
}

/// Members to talk to: their endpoints, and the TLS for those that use it.
#[derive(Debug, Clone)]
pub struct StoreClients {
    pub endpoints: Vec<String>,
    tls: Option<ClientTlsConfig>,
}

impl StoreClients {
    /// `list` as in [`parse_endpoints`]; TLS from `pki_dir` unless every
    /// endpoint is plain `http://`.
    pub fn new(list: &str, pki_dir: &Path) -> Result<StoreClients> {
        let endpoints = parse_endpoints(list)?;
        let tls = match endpoints.iter().any(|e| e.starts_with("https://")) {
            true => Some(store_tls(pki_dir)?),
            false => None,
        };
        Ok(StoreClients { endpoints, tls })
    }

    /// A connection to the member at `endpoint`.
    pub async fn connect(&self, endpoint: &str) -> Result<Channel> {
        connect(endpoint, self.tls.as_ref()).await
    }

    /// A connection to the first of the endpoints that answers.
    pub async fn connect_any(&self) -> Result<(String, Channel)> {
        let mut failures = Vec::new();
        for endpoint in &self.endpoints {
            match self.connect(endpoint).await {
                Ok(channel) => return Ok((endpoint.clone(), channel)),
                Err(err) => failures.push(err.to_string()),
            }
        }
        bail!(
            "{}; is a member running there? start one with `skiff store` or pass --endpoints",
            failures.join("; ")
        )
    }
}

/// Client addresses as `https://host:port`, from `host:port` or URLs,
/// separated by commas.
pub fn parse_endpoints(list: &str) -> Result<Vec<String>> {
    let endpoints: Vec<String> = list
        .split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .map(endpoint_url)
        .collect();
    if endpoints.is_empty() {
        bail!("--endpoints is empty; give the client address of a member, e.g. 127.0.0.1:2379");
    }
    Ok(endpoints)
}

/// `host:port` as a URL; URLs stay as they are.
pub fn endpoint_url(endpoint: &str) -> String {
    if endpoint.contains("://") {
        endpoint.to_string()
    } else {
        format!("https://{endpoint}")
    }
}

/// `http://host:port` as `host:port`.
pub fn host_port(url: &str) -> &str {
    url.split_once("://").map_or(url, |(_, rest)| rest)
}

/// A connection to the member at `endpoint`, with `tls` if it is
/// `https://`.
pub async fn connect(endpoint: &str, tls: Option<&ClientTlsConfig>) -> Result<Channel> {
    let mut builder = Endpoint::from_shared(endpoint.to_string())
        .map_err(|err| anyhow!("{endpoint} is not a valid endpoint: {err}"))?;
    if endpoint.starts_with("https://") {
        let tls =
            tls.ok_or_else(|| anyhow!("{endpoint} wants TLS, and no credentials were given"))?;
        builder = builder
            .tls_config(tls.clone())
            .map_err(|err| anyhow!("TLS for {endpoint}: {}", source_text(&err)))?;
    }
    let channel = builder
        .connect_timeout(CONNECT_TIMEOUT)
        .timeout(REQUEST_TIMEOUT)
        .connect()
        .await
        .map_err(|err| {
            anyhow!(
                "cannot reach {}: {}",
                host_port(endpoint),
                source_text(&err)
            )
        })?;
    Ok(channel)
}

/// Maintenance.Status of the member behind `channel`.
pub async fn status(channel: Channel) -> Result<StatusResponse> {
    let response = MaintenanceClient::new(channel)
        .status(StatusRequest {})
        .await
        .map_err(server_error)?;
    Ok(response.into_inner())
}

/// A server's answer as one line: its message (etcd's own text).
pub fn server_error(status: tonic::Status) -> anyhow::Error {
    let message = status.message().trim();
    if message.is_empty() {
        anyhow!("the server answered {:?}", status.code())
    } else if status.code() == tonic::Code::Unavailable {
        anyhow!("{} (is the member running?)", message.replace('\n', " "))
    } else {
        anyhow!("{}", message.replace('\n', " "))
    }
}

/// The innermost cause of a transport error, which says what happened
/// (connection refused, timed out), rather than "transport error".
fn source_text(err: &(dyn std::error::Error + 'static)) -> String {
    let mut innermost = err;
    while let Some(source) = innermost.source() {
        innermost = source;
    }
    innermost.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_become_urls() {
        assert_eq!(
            parse_endpoints(" 127.0.0.1:2379, http://h:1 ,").unwrap(),
            ["https://127.0.0.1:2379", "http://h:1"]
        );
        assert!(parse_endpoints(" , ").is_err());
        assert_eq!(host_port("http://127.0.0.1:2379"), "127.0.0.1:2379");
        assert_eq!(host_port("127.0.0.1:2379"), "127.0.0.1:2379");
    }

    #[test]
    fn server_errors_are_their_message_on_one_line() {
        let err = server_error(tonic::Status::not_found("etcdserver: member not found"));
        assert_eq!(err.to_string(), "etcdserver: member not found");
        let err = server_error(tonic::Status::internal("two\nlines"));
        assert_eq!(err.to_string(), "two lines");
    }
}
