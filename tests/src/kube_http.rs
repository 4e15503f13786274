//! A minimal HTTP/1.1 client for the Kubernetes API, found through a
//! kubeconfig: one connection per request, bodies sent exactly as given
//! (a missing Content-Type stays missing), chunked replies decoded, and a
//! watch read one newline-delimited event at a time. HTTPS with the
//! kubeconfig's CA and client certificate (or a bearer token, or no
//! credentials at all), or plain `http://`.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, bail, ensure, Context, Result};
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// A connection, plain or TLS.
trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}
type Reader = BufReader<Box<dyn Io>>;

/// How long any one request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(20);

/// The API server a kubeconfig names, and who the client is.
#[derive(Clone)]
pub struct KubeHttp {
    /// `host:port` of the server.
    authority: String,
    /// The local address connections come from (any loopback address
    /// works on Linux), to act as distinct clients.
    source: Option<std::net::IpAddr>,
    /// For `https://`: the CA to trust.
    ca_pem: Option<String>,
    /// The client certificate and key (PEM) presented over TLS.
    client_cert: Option<(String, String)>,
    /// Sent as `Authorization: Bearer`.
    token: Option<String>,
    /// The Accept header; `application/json` unless set.
    accept: Option<String>,
    /// Any server certificate is accepted (a component's self-signed one).
    skip_verify: bool,
}

/// The parts of a kubeconfig this client uses, from its text.
struct KubeconfigParts {
    server: String,
    ca_pem: Option<String>,
    client_cert: Option<(String, String)>,
    token: Option<String>,
}

fn kubeconfig_parts(text: &str) -> Result<KubeconfigParts> {
    let config: serde_yaml::Value = serde_yaml::from_str(text).context("not YAML")?;
    let clusters = config["clusters"].as_sequence().map_or(0, |c| c.len());
    ensure!(
        clusters == 1,
        "it names {clusters} clusters; one was expected"
    );
    let cluster = &config["clusters"][0]["cluster"];
    let user = &config["users"][0]["user"];
    let decoded = |value: &serde_yaml::Value| -> Result<Option<String>> {
        value
            .as_str()
            .map(|data| {
                let bytes = STANDARD.decode(data.trim()).context("not base64")?;
                String::from_utf8(bytes).context("not text")
            })
            .transpose()
    };
    let client_cert = match (
        decoded(&user["client-certificate-data"])?,
        decoded(&user["client-key-data"])?,
    ) {
        (Some(cert), Some(key)) => Some((cert, key)),
        _ => None,
    };
    Ok(KubeconfigParts {
        server: cluster["server"]
            .as_str()
            .context("the cluster has no server")?
            .to_string(),
        ca_pem: decoded(&cluster["certificate-authority-data"])?,
        client_cert,
        token: user["token"].as_str().map(String::from),
    })
}

#[derive(Debug, Clone)]
pub struct HttpResponse {
    pub status: u16,
    /// Header names in lower case.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl HttpResponse {
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> Result<Value> {
        serde_json::from_slice(&self.body).with_context(|| {
            format!(
                "the {} reply is not JSON: {}",
                self.status,
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

impl KubeHttp {
    /// The client for the `server:` of the kubeconfig at `path`, which must
    /// name exactly one cluster, with the kubeconfig's credentials.
    pub fn from_kubeconfig(path: &Path) -> Result<KubeHttp> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading the kubeconfig {}", path.display()))?;
        let parts = kubeconfig_parts(&text).with_context(|| format!("{}", path.display()))?;
        let (authority, tls) = match parts.server.split_once("://") {
            Some(("https", rest)) => (rest, true),
            Some(("http", rest)) => (rest, false),
            _ => bail!(
                "the kubeconfig's server {} is not http:// or https://",
                parts.server
            ),
        };
        ensure!(
            !tls || parts.ca_pem.is_some(),
            "{}: an https:// server with no certificate-authority-data",
            path.display()
        );
        Ok(KubeHttp {
            authority: authority.trim_end_matches('/').to_string(),
            source: None,
            ca_pem: if tls { parts.ca_pem } else { None },
            client_cert: parts.client_cert,
            token: parts.token,
            accept: None,
            skip_verify: false,
        })
    }

    /// A plain-HTTP server at `authority` (host:port).
    pub fn from_plain(authority: &str) -> KubeHttp {
        KubeHttp {
            authority: authority.to_string(),
            source: None,
            ca_pem: None,
            client_cert: None,
            token: None,
            accept: None,
            skip_verify: false,
        }
    }

    /// Another server (host:port), with the same credentials and trust.
    pub fn at(&self, authority: &str) -> KubeHttp {
        KubeHttp {
            authority: authority.to_string(),
            ..self.clone()
        }
    }

    /// The same server with no credentials at all.
    /// The same client sending `accept` as its Accept header.
    pub fn accepting(&self, accept: &str) -> KubeHttp {
        KubeHttp {
            accept: Some(accept.to_string()),
            ..self.clone()
        }
    }

    pub fn anonymous(&self) -> KubeHttp {
        KubeHttp {
            client_cert: None,
            token: None,
            ..self.clone()
        }
    }

    /// The same server with only a bearer token.
    pub fn with_token(&self, token: &str) -> KubeHttp {
        KubeHttp {
            client_cert: None,
            token: Some(token.to_string()),
            ..self.clone()
        }
    }

    /// The same server with only a client certificate (PEM).
    pub fn with_client_cert(&self, cert_pem: &str, key_pem: &str) -> KubeHttp {
        KubeHttp {
            client_cert: Some((cert_pem.to_string(), key_pem.to_string())),
            token: None,
            ..self.clone()
        }
    }

    /// The same server, trusting `ca_pem` instead of the kubeconfig's CA.
    pub fn trusting(&self, ca_pem: &str) -> KubeHttp {
        KubeHttp {
            ca_pem: Some(ca_pem.to_string()),
            ..self.clone()
        }
    }

    /// The same client over TLS accepting any server certificate, as
    /// Go's InsecureSkipVerify (for components' self-signed certificates).
    pub fn skipping_verification(&self) -> KubeHttp {
        KubeHttp {
            ca_pem: Some(self.ca_pem.clone().unwrap_or_default()),
            skip_verify: true,
            ..self.clone()
        }
    }

    /// `host:port` of the server.
    pub fn authority(&self) -> &str {
        &self.authority
    }

    /// The same server, reached from `source` (e.g. 127.0.0.2).
    pub fn from_source(&self, source: std::net::IpAddr) -> KubeHttp {
        KubeHttp {
            source: Some(source),
            ..self.clone()
        }
    }

    /// One request; `content_type` None sends no Content-Type header.
    pub async fn request(
        &self,
        method: &str,
        path: &str,
        content_type: Option<&str>,
        body: Option<&[u8]>,
    ) -> Result<HttpResponse> {
        let exchange = async {
            let mut reader = self.send(method, path, content_type, body).await?;
            let (status, headers) = read_head(&mut reader).await?;
            let body = read_body(&mut reader, &headers).await?;
            anyhow::Ok(HttpResponse {
                status,
                headers,
                body,
            })
        };
        tokio::time::timeout(REQUEST_TIMEOUT, exchange)
            .await
            .with_context(|| format!("{method} {path}: no reply within {REQUEST_TIMEOUT:?}"))?
            .with_context(|| format!("{method} {path}"))
    }

    pub async fn get(&self, path: &str) -> Result<HttpResponse> {
        self.request("GET", path, None, None).await
    }

    /// GET that must answer 200 with JSON.
    pub async fn get_json(&self, path: &str) -> Result<Value> {
        let response = self.get(path).await?;
        ensure!(
            response.status == 200,
            "GET {path}: {} {}",
            response.status,
            response.text()
        );
        response.json()
    }

    /// POST of `object` as `application/json`.
    pub async fn post(&self, path: &str, object: &Value) -> Result<HttpResponse> {
        let body = serde_json::to_vec(object)?;
        self.request("POST", path, Some("application/json"), Some(&body))
            .await
    }

    /// PUT of `object` as `application/json`.
    pub async fn put(&self, path: &str, object: &Value) -> Result<HttpResponse> {
        let body = serde_json::to_vec(object)?;
        self.request("PUT", path, Some("application/json"), Some(&body))
            .await
    }

    pub async fn delete(&self, path: &str) -> Result<HttpResponse> {
        self.request("DELETE", path, None, None).await
    }

    /// Starts a watch (`path` carries `watch=true`); it must answer 200.
    pub async fn watch(&self, path: &str) -> Result<WatchStream> {
        let start = async {
            let mut reader = self.send("GET", path, None, None).await?;
            let (status, headers) = read_head(&mut reader).await?;
            if status != 200 {
                let body = read_body(&mut reader, &headers).await?;
                bail!("{status} {}", String::from_utf8_lossy(&body));
            }
            anyhow::Ok(WatchStream {
                chunked: is_chunked(&headers),
                reader,
                pending: Vec::new(),
                ended: false,
            })
        };
        tokio::time::timeout(REQUEST_TIMEOUT, start)
            .await
            .with_context(|| format!("watch {path}: no reply within {REQUEST_TIMEOUT:?}"))?
            .with_context(|| format!("watch {path}"))
    }

    /// Sends a request without reading the reply: the connection, for a
    /// test to read (or not) as it likes.
    pub async fn open(
        &self,
        method: &str,
        path: &str,
    ) -> Result<impl AsyncRead + Unpin + Send + 'static> {
        self.send(method, path, None, None).await
    }

    async fn send(
        &self,
        method: &str,
        path: &str,
        content_type: Option<&str>,
        body: Option<&[u8]>,
    ) -> Result<Reader> {
        let connect = async {
            let Some(source) = self.source else {
                return Ok(TcpStream::connect(&self.authority).await?);
            };
            let server: std::net::SocketAddr = self.authority.parse()?;
            let socket = tokio::net::TcpSocket::new_v4()?;
            socket.bind(std::net::SocketAddr::new(source, 0))?;
            anyhow::Ok(socket.connect(server).await?)
        };
        let stream = connect
            .await
            .with_context(|| format!("connecting to {}", self.authority))?;
        let mut stream: Box<dyn Io> = match &self.ca_pem {
            None => Box::new(stream),
            Some(ca_pem) => {
                let connector = tokio_rustls::TlsConnector::from(self.tls_config(ca_pem)?);
                let host = self
                    .authority
                    .rsplit_once(':')
                    .map_or(self.authority.as_str(), |(host, _)| host)
                    .trim_matches(|c| c == '[' || c == ']')
                    .to_string();
                let name = ServerName::try_from(host)?;
                Box::new(
                    connector
                        .connect(name, stream)
                        .await
                        .context("TLS handshake")?,
                )
            }
        };
        let mut head = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nAccept: {}\r\nUser-Agent: skiff-tests\r\nConnection: close\r\n",
            self.authority,
            self.accept.as_deref().unwrap_or("application/json"),
        );
        if let Some(content_type) = content_type {
            head.push_str(&format!("Content-Type: {content_type}\r\n"));
        }
        if let Some(token) = &self.token {
            head.push_str(&format!("Authorization: Bearer {token}\r\n"));
        }
        if let Some(body) = body {
            head.push_str(&format!("Content-Length: {}\r\n", body.len()));
        }
        head.push_str("\r\n");
        stream.write_all(head.as_bytes()).await?;
        if let Some(body) = body {
            // A server may refuse a large body before reading it all.
            if let Err(err) = stream.write_all(body).await {
                if err.kind() != std::io::ErrorKind::BrokenPipe
                    && err.kind() != std::io::ErrorKind::ConnectionReset
                {
                    return Err(err.into());
                }
            }
        }
        stream.flush().await?;
        Ok(BufReader::new(stream))
    }

    fn tls_config(&self, ca_pem: &str) -> Result<Arc<rustls::ClientConfig>> {
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
            roots.add(cert.map_err(|e| anyhow!("the CA: {e}"))?)?;
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()?;
        let builder = if self.skip_verify {
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(
                    skiff_machinery::skip_verify::SkipServerVerification(provider),
                ))
        } else {
            builder.with_root_certificates(roots)
        };
        let config = match &self.client_cert {
            Some((cert, key)) => {
                let chain = CertificateDer::pem_slice_iter(cert.as_bytes())
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| anyhow!("the client certificate: {e}"))?;
                let key = PrivateKeyDer::from_pem_slice(key.as_bytes())
                    .map_err(|e| anyhow!("the client key: {e}"))?;
                builder.with_client_auth_cert(chain, key)?
            }
            None => builder.with_no_client_auth(),
        };
        Ok(Arc::new(config))
    }
}

async fn read_head(reader: &mut Reader) -> Result<(u16, Vec<(String, String)>)> {
    let mut line = String::new();
    reader.read_line(&mut line).await?;
    let status = line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse::<u16>().ok())
        .with_context(|| format!("not an HTTP status line: {line:?}"))?;
    let mut headers = Vec::new();
    loop {
        line.clear();
        ensure!(
            reader.read_line(&mut line).await? > 0,
            "the connection closed inside the headers"
        );
        let header = line.trim_end();
        if header.is_empty() {
            return Ok((status, headers));
        }
        if let Some((name, value)) = header.split_once(':') {
            headers.push((name.trim().to_ascii_lowercase(), value.trim().to_string()));
        }
    }
}

fn is_chunked(headers: &[(String, String)]) -> bool {
    headers
        .iter()
        .any(|(n, v)| n == "transfer-encoding" && v.eq_ignore_ascii_case("chunked"))
}

async fn read_body(reader: &mut Reader, headers: &[(String, String)]) -> Result<Vec<u8>> {
    let mut body = Vec::new();
    if is_chunked(headers) {
        while let Some(chunk) = read_chunk(reader).await? {
            body.extend_from_slice(&chunk);
        }
    } else if let Some((_, length)) = headers.iter().find(|(n, _)| n == "content-length") {
        body.resize(length.parse()?, 0);
        reader.read_exact(&mut body).await?;
    } else {
        reader.read_to_end(&mut body).await?;
    }
    Ok(body)
}

/// One chunk of a chunked body; `None` after the last.
async fn read_chunk(reader: &mut Reader) -> Result<Option<Vec<u8>>> {
    let mut line = String::new();
    if reader.read_line(&mut line).await? == 0 {
        // The server went away without the last chunk (it was stopped).
        return Ok(None);
    }
    let size_text = line.trim().split(';').next().unwrap_or("");
    let size = usize::from_str_radix(size_text, 16)
        .with_context(|| format!("not a chunk size: {line:?}"))?;
    if size == 0 {
        return Ok(None);
    }
    let mut chunk = vec![0; size + 2];
    reader.read_exact(&mut chunk).await?;
    ensure!(chunk.ends_with(b"\r\n"), "a chunk does not end in CRLF");
    chunk.truncate(size);
    Ok(Some(chunk))
}

/// An open watch: its events as they arrive.
pub struct WatchStream {
    reader: Reader,
    chunked: bool,
    /// Bytes received after the last complete line.
    pending: Vec<u8>,
    ended: bool,
}

impl WatchStream {
    /// The next event, `None` once the server ended the stream; fails if
    /// nothing arrives within `timeout`.
    pub async fn next_event(&mut self, timeout: Duration) -> Result<Option<Value>> {
        tokio::time::timeout(timeout, self.next_event_inner())
            .await
            .with_context(|| format!("no watch event within {timeout:?}"))?
    }

    /// The next event if one arrives within `quiet`: `Ok(None)` when none
    /// does or the stream ended.
    pub async fn next_event_within(&mut self, quiet: Duration) -> Result<Option<Value>> {
        match tokio::time::timeout(quiet, self.next_event_inner()).await {
            Ok(event) => event,
            Err(_) => Ok(None),
        }
    }

    /// The next frame of a protobuf watch (`stream=watch`: a 4-byte
    /// big-endian length, then a `WatchEvent`), without its length;
    /// `None` once the server ended the stream.
    pub async fn next_frame(&mut self, timeout: Duration) -> Result<Option<Vec<u8>>> {
        let read = async {
            loop {
                if self.pending.len() >= 4 {
                    let length = u32::from_be_bytes(self.pending[..4].try_into()?) as usize;
                    if self.pending.len() >= 4 + length {
                        let frame = self.pending[4..4 + length].to_vec();
                        self.pending.drain(..4 + length);
                        return Ok(Some(frame));
                    }
                }
                if self.ended {
                    ensure!(
                        self.pending.is_empty(),
                        "the watch ended inside a frame ({} bytes left)",
                        self.pending.len()
                    );
                    return Ok(None);
                }
                self.read_more().await?;
            }
        };
        tokio::time::timeout(timeout, read)
            .await
            .with_context(|| format!("no watch frame within {timeout:?}"))?
    }

    async fn read_more(&mut self) -> Result<()> {
        let more = if self.chunked {
            read_chunk(&mut self.reader).await?
        } else {
            let mut buffer = vec![0; 64 * 1024];
            let n = self.reader.read(&mut buffer).await?;
            buffer.truncate(n);
            (n > 0).then_some(buffer)
        };
        match more {
            Some(bytes) => self.pending.extend_from_slice(&bytes),
            None => self.ended = true,
        }
        Ok(())
    }

    async fn next_event_inner(&mut self) -> Result<Option<Value>> {
        loop {
            if let Some(end) = self.pending.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.pending.drain(..=end).collect();
                let text = String::from_utf8_lossy(&line);
                if text.trim().is_empty() {
                    continue;
                }
                return serde_json::from_str(text.trim())
                    .map(Some)
                    .with_context(|| format!("a watch line is not JSON: {text}"));
            }
            if self.ended {
                ensure!(
                    self.pending.iter().all(u8::is_ascii_whitespace),
                    "the watch ended inside an event: {}",
                    String::from_utf8_lossy(&self.pending)
                );
                return Ok(None);
            }
            self.read_more().await?;
        }
    }
}

/// The JSON body of `reply`, which must have the HTTP status `code`;
/// otherwise an error naming `what` with the status and body received.
/// The `/metrics` of a component's secure port at `authority` (its
/// certificate self-signed, as kube-scheduler's is) with `admin`'s
/// credentials, once the port has answered `/healthz` to anyone and
/// `/metrics` to no one without credentials.
pub async fn secure_port_metrics(admin: &KubeHttp, authority: &str) -> Result<String> {
    let port = admin.at(authority).skipping_verification();
    let health = port.anonymous().get("/healthz").await?;
    ensure!(
        health.status == 200,
        "{authority}/healthz: {}",
        health.status
    );
    let refused = port.anonymous().get("/metrics").await?;
    ensure!(
        refused.status == 401,
        "{authority}/metrics without credentials: {}",
        refused.status
    );
    let metrics = port.get("/metrics").await?;
    ensure!(
        metrics.status == 200,
        "{authority}/metrics: {} {}",
        metrics.status,
        metrics.text()
    );
    Ok(metrics.text())
}

pub fn expect_status(reply: &HttpResponse, code: u16, what: &str) -> Result<Value> {
    anyhow::ensure!(
        reply.status == code,
        "{what}: wanted {code}, got {} {}",
        reply.status,
        reply.text()
    );
    reply.json()
}
