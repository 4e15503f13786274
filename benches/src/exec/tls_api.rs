//! The API server as kubectl reaches it: the HTTPS address of `skiff up`'s
//! admin kubeconfig, its CA trusted and its client certificate presented,
//! and a WebSocket upgrade of one subresource over a new connection.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use anyhow::{anyhow, bail, ensure, Context, Result};
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::WebSocketStream;

pub type Socket = WebSocketStream<TlsStream<TcpStream>>;

/// The API's HTTPS port with the administrator's credentials.
pub struct TlsApi {
    pub address: SocketAddr,
    server_name: ServerName<'static>,
    connector: TlsConnector,
}

impl TlsApi {
    /// From the kubeconfig `skiff up` wrote at `path`.
    pub fn from_kubeconfig(path: &Path) -> Result<TlsApi> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading the kubeconfig {}", path.display()))?;
        Self::from_kubeconfig_text(&text).with_context(|| format!("{}", path.display()))
    }

    fn from_kubeconfig_text(text: &str) -> Result<TlsApi> {
        let config: serde_yaml::Value = serde_yaml::from_str(text).context("not YAML")?;
        let cluster = &config["clusters"][0]["cluster"];
        let user = &config["users"][0]["user"];
        let server = cluster["server"]
            .as_str()
            .context("the cluster has no server")?;
        let Some(authority) = server.strip_prefix("https://") else {
            bail!("the server {server} is not https://");
        };
        let address: SocketAddr = authority
            .trim_end_matches('/')
            .parse()
            .with_context(|| format!("the server {server} is not https://IP:PORT"))?;
        let pem = |value: &serde_yaml::Value, what: &str| -> Result<Vec<u8>> {
            let data = value
                .as_str()
                .with_context(|| format!("no {what} in the kubeconfig"))?;
            STANDARD
                .decode(data.trim())
                .with_context(|| format!("the {what} is not base64"))
        };
        let ca = pem(
            &cluster["certificate-authority-data"],
            "certificate-authority-data",
        )?;
        let cert = pem(&user["client-certificate-data"], "client-certificate-data")?;
        let key = pem(&user["client-key-data"], "client-key-data")?;
        let mut roots = rustls::RootCertStore::empty();
        for der in CertificateDer::pem_slice_iter(&ca) {
            roots.add(der.map_err(|e| anyhow!("the CA: {e}"))?)?;
        }
        let chain = CertificateDer::pem_slice_iter(&cert)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| anyhow!("the client certificate: {e}"))?;
        ensure!(!chain.is_empty(), "the client certificate holds no PEM");
        let key =
            PrivateKeyDer::from_pem_slice(&key).map_err(|e| anyhow!("the client key: {e}"))?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots)
            .with_client_auth_cert(chain, key)?;
        Ok(TlsApi {
            address,
            server_name: ServerName::IpAddress(address.ip().into()),
            connector: TlsConnector::from(Arc::new(tls)),
        })
    }

    /// A new TLS connection, handshake done.
    pub async fn connect(&self) -> Result<TlsStream<TcpStream>> {
        let tcp = TcpStream::connect(self.address)
            .await
            .with_context(|| format!("connecting to the API at {}", self.address))?;
        tcp.set_nodelay(true)?;
        self.connector
            .connect(self.server_name.clone(), tcp)
            .await
            .context("the TLS handshake with the API")
    }

    /// Upgrades `tls` to a WebSocket at `path` offering `protocol`, and
    /// checks that the server chose it.
    pub async fn upgrade(
        &self,
        tls: TlsStream<TcpStream>,
        path: &str,
        protocol: &'static str,
    ) -> Result<Socket> {
        let mut request = format!("wss://{}{path}", self.address).into_client_request()?;
        request
            .headers_mut()
            .insert("Sec-WebSocket-Protocol", HeaderValue::from_static(protocol));
        let (socket, response) = tokio_tungstenite::client_async(request, tls)
            .await
            .map_err(|err| match err {
                tokio_tungstenite::tungstenite::Error::Http(response) => anyhow!(
                    "the API answered {} to the upgrade of {path}: {}",
                    response.status(),
                    String::from_utf8_lossy(response.body().as_deref().unwrap_or_default())
                ),
                other => anyhow!("upgrading {path}: {other}"),
            })?;
        let chosen = response
            .headers()
            .get("Sec-WebSocket-Protocol")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        ensure!(
            chosen == protocol,
            "the API chose subprotocol {chosen:?} for {path}, not {protocol}"
        );
        Ok(socket)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kubeconfig_without_https_is_refused() {
        let text = "clusters:\n- cluster:\n    server: http://127.0.0.1:8080\n";
        let err = TlsApi::from_kubeconfig_text(text).err().unwrap();
        assert!(err.to_string().contains("not https://"), "{err}");
        let text = "clusters:\n- cluster:\n    server: https://127.0.0.1:6443\n";
        let err = TlsApi::from_kubeconfig_text(text).err().unwrap();
        assert!(
            err.to_string().contains("certificate-authority-data"),
            "{err}"
        );
    }
}
