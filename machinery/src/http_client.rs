//! The HTTP client of the calls skiff makes out to servers that users
//! run: the API server's admission webhooks and the scheduler's extenders.
//! One request per connection, HTTP/1.1, over TCP or TLS (rustls), with
//! errors worded as Go's `net/http` and `crypto/tls` word them, so that a
//! caller that prefixes `Post "url": ` reads as Kubernetes does.

use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{CertificateError, ClientConfig, RootCertStore};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

/// The system's trust roots as one PEM bundle (the Debian, Ubuntu, Alpine
/// and Arch layout).
pub const SYSTEM_TRUST_ROOTS: &str = "/etc/ssl/certs/ca-certificates.crt";

/// Where a call goes: `http(s)://host[:port]/path?query`, as Go's URL
/// parser reads it (a fragment is never sent; an empty port is the
/// scheme's default).
#[derive(Debug, PartialEq, Eq)]
pub struct Url {
    pub https: bool,
    /// A DNS name or an IP address (an IPv6 one without brackets).
    pub host: String,
    pub port: u16,
    /// `host[:port]` as written in the URL: the Host header Go sends.
    pub authority: String,
    /// The path and query, from `/`.
    pub path: String,
}

impl Url {
    pub fn parse(url: &str) -> Result<Url, String> {
        let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
        let https = match scheme.to_ascii_lowercase().as_str() {
            "http" => false,
            "https" => true,
            other => return Err(format!("unsupported protocol scheme {other:?}")),
        };
        let rest = rest.split_once('#').map_or(rest, |(before, _)| before);
        let (authority, path) = match rest.find(['/', '?']) {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        let path = match path.starts_with('?') {
            true => format!("/{path}"),
            false => path.to_string(),
        };
        if authority.contains('@') {
            return Err("user info in the URL is not supported".to_string());
        }
        let (host, port) = match authority.strip_prefix('[') {
            Some(bracketed) => {
                let (host, after) = bracketed
                    .split_once(']')
                    .ok_or_else(|| format!("missing ']' in host {authority:?}"))?;
                match after.strip_prefix(':') {
                    Some(port) => (host, Some(port)),
                    None if after.is_empty() => (host, None),
                    None => return Err(format!("invalid port {after:?} after host")),
                }
            }
            // An unbracketed IPv6 address leaves a port with ':' in it,
            // which does not parse.
            None => match authority.split_once(':') {
                Some((host, port)) => (host, Some(port)),
                None => (authority, None),
            },
        };
        if host.is_empty() {
            return Err("no host in the URL".to_string());
        }
        let port = match port.filter(|p| !p.is_empty()) {
            None if https => 443,
            None => 80,
            Some(port) => port
                .parse::<u16>()
                .map_err(|_| format!("invalid port \":{port}\" after host"))?,
        };
        Ok(Url {
            https,
            host: host.to_string(),
            port,
            authority: authority.to_string(),
            path,
        })
    }

    /// `host:port`, an IPv6 address in brackets: what a dial error names.
    pub fn dial_address(&self) -> String {
        match self.host.contains(':') {
            true => format!("[{}]:{}", self.host, self.port),
            false => format!("{}:{}", self.host, self.port),
        }
    }
}

/// The TLS side of an https call: the client settings and the name the
/// server's certificate must hold (the URL's host unless set).
#[derive(Debug, Clone)]
pub struct Tls {
    pub config: Arc<ClientConfig>,
    pub server_name: Option<String>,
}

/// Keeps the task that drives a call's connection; dropping it closes the
/// connection (when the caller has read what it wanted, or gave up).
pub struct Connection(tokio::task::JoinHandle<()>);

impl Drop for Connection {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Sends `request` to `url` on a new connection: resolves and dials the
/// host, does the TLS handshake for https (with `tls`, else the system's
/// trust roots), and returns the response, its body still to read, with
/// the connection that carries it. No timeout of its own: the caller
/// bounds the call.
pub async fn send(
    url: &Url,
    tls: Option<&Tls>,
    request: hyper::Request<Full<Bytes>>,
) -> Result<(hyper::Response<hyper::body::Incoming>, Connection), String> {
    let connector = match url.https {
        false => None,
        true => {
            let (config, name) = match tls {
                Some(tls) => (tls.config.clone(), tls.server_name.clone()),
                None => (system_client_config()?, None),
            };
            let name = name.unwrap_or_else(|| url.host.clone());
            let server_name = ServerName::try_from(name.clone())
                .map_err(|e| format!("{name:?} is not a valid TLS server name: {e}"))?;
            Some((tokio_rustls::TlsConnector::from(config), server_name))
        }
    };
    let tcp = dial(url).await?;
    match connector {
        None => exchange(tcp, request).await,
        Some((connector, server_name)) => {
            let stream = connector
                .connect(server_name, tcp)
                .await
                .map_err(|e| handshake_failure(&e))?;
            exchange(stream, request).await
        }
    }
}

/// Reads a response's body, at most `limit` bytes of it.
pub async fn read_body(
    body: hyper::body::Incoming,
    limit: usize,
) -> Result<Bytes, Box<dyn std::error::Error + Send + Sync>> {
    Ok(http_body_util::Limited::new(body, limit)
        .collect()
        .await?
        .to_bytes())
}

/// Resolves the host and connects to the first address that answers.
async fn dial(url: &Url) -> Result<TcpStream, String> {
    let addresses: Vec<std::net::SocketAddr> =
        tokio::net::lookup_host((url.host.as_str(), url.port))
            .await
            .map_err(|e| format!("dial tcp: lookup {}: {e}", url.host))?
            .collect();
    let mut last = None;
    for address in addresses {
        match TcpStream::connect(address).await {
            Ok(stream) => {
                let _ = stream.set_nodelay(true);
                return Ok(stream);
            }
            Err(e) => last = Some(e),
        }
    }
    let why = match last {
        Some(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
            "connect: connection refused".to_string()
        }
        Some(e) => e.to_string(),
        None => "no such host".to_string(),
    };
    Err(format!("dial tcp {}: {why}", url.dial_address()))
}

/// One request over `io`, a TCP or TLS stream: the response and the task
/// that drives the connection.
async fn exchange<S>(
    io: S,
    request: hyper::Request<Full<Bytes>>,
) -> Result<(hyper::Response<hyper::body::Incoming>, Connection), String>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .map_err(|e| e.to_string())?;
    let driver = Connection(tokio::spawn(async move {
        let _ = connection.await;
    }));
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| e.to_string())?;
    Ok((response, driver))
}

/// A failed TLS handshake in Go's words: `tls: failed to verify
/// certificate: x509: …` for a certificate the trust roots do not accept.
pub fn handshake_failure(error: &std::io::Error) -> String {
    match error
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
    {
        Some(rustls::Error::InvalidCertificate(why)) => {
            format!("tls: failed to verify certificate: {}", x509_failure(why))
        }
        Some(other) => format!("tls: {other}"),
        None => format!("tls handshake: {error}"),
    }
}

fn x509_failure(error: &CertificateError) -> String {
    match error {
        CertificateError::UnknownIssuer => {
            "x509: certificate signed by unknown authority".to_string()
        }
        // A trust root has the issuer's name but not its key.
        CertificateError::BadSignature => "x509: certificate signed by unknown authority \
            (possibly because of a bad signature while trying to verify a trust root of the same name)"
            .to_string(),
        CertificateError::NotValidForNameContext {
            expected,
            presented,
        } if !presented.is_empty() => {
            let presented: Vec<&str> = presented.iter().map(|n| subject_alt_name(n)).collect();
            format!(
                "x509: certificate is valid for {}, not {}",
                presented.join(", "),
                expected.to_str()
            )
        }
        CertificateError::Expired
        | CertificateError::ExpiredContext { .. }
        | CertificateError::NotValidYet
        | CertificateError::NotValidYetContext { .. } => {
            format!("x509: certificate has expired or is not yet valid: {error}")
        }
        other => format!("x509: {other}"),
    }
}

/// `localhost` from webpki's `DnsName("localhost")`, `127.0.0.1` from
/// `IpAddress(127.0.0.1)`; anything else as it is.
fn subject_alt_name(presented: &str) -> &str {
    presented
        .strip_prefix("DnsName(\"")
        .and_then(|rest| rest.strip_suffix("\")"))
        .or_else(|| {
            presented
                .strip_prefix("IpAddress(")
                .and_then(|rest| rest.strip_suffix(')'))
        })
        .unwrap_or(presented)
}

// ---- TLS settings ----

/// Why a PEM bundle gives no trust roots; each caller says where the
/// bundle came from.
#[derive(Debug, PartialEq, Eq)]
pub enum RootsError {
    NotPem(String),
    /// The certificate at this position (from 1) cannot be a trust root.
    NotATrustRoot(usize, String),
    NoCertificate,
}

/// The trust roots of a PEM bundle of one or more certificates.
pub fn trust_roots(pem: &[u8]) -> Result<RootCertStore, RootsError> {
    let mut roots = RootCertStore::empty();
    for (i, certificate) in CertificateDer::pem_slice_iter(pem).enumerate() {
        let certificate = certificate.map_err(|e| RootsError::NotPem(e.to_string()))?;
        roots
            .add(certificate)
            .map_err(|e| RootsError::NotATrustRoot(i + 1, e.to_string()))?;
    }
    if roots.is_empty() {
        return Err(RootsError::NoCertificate);
    }
    Ok(roots)
}

/// How an https call checks the server's certificate.
pub enum Verify {
    Roots(RootCertStore),
    /// Go's `InsecureSkipVerify`.
    Nothing,
}

/// A client certificate chain and its key, as PEM.
pub struct ClientAuth {
    pub chain: Vec<CertificateDer<'static>>,
    pub key: PrivateKeyDer<'static>,
}

/// TLS client settings speaking HTTP/1.1.
pub fn client_config(
    verify: Verify,
    client_auth: Option<ClientAuth>,
) -> Result<Arc<ClientConfig>, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("tls: {e}"))?;
    let builder = match verify {
        Verify::Roots(roots) => builder.with_root_certificates(roots),
        Verify::Nothing => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(
                crate::skip_verify::SkipServerVerification(provider),
            )),
    };
    let mut config = match client_auth {
        None => builder.with_no_client_auth(),
        Some(ClientAuth { chain, key }) => builder
            .with_client_auth_cert(chain, key)
            .map_err(|e| format!("tls: {e}"))?,
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// The system's trust roots, from [`SYSTEM_TRUST_ROOTS`]: how many were
/// added and how many ignored, or why there are none.
pub fn system_roots() -> (RootCertStore, Result<(usize, usize), std::io::Error>) {
    let mut roots = RootCertStore::empty();
    match std::fs::read(SYSTEM_TRUST_ROOTS) {
        Ok(pem) => {
            let certificates = CertificateDer::pem_slice_iter(&pem).filter_map(Result::ok);
            let counted = roots.add_parsable_certificates(certificates);
            (roots, Ok(counted))
        }
        Err(error) => (roots, Err(error)),
    }
}

/// The settings of https calls with no TLS settings of their own: the
/// system's trust roots, read once. Where there are none the store is
/// empty, so that only servers whose CA the caller gives can be called.
pub fn system_client_config() -> Result<Arc<ClientConfig>, String> {
    static SYSTEM: OnceLock<Arc<ClientConfig>> = OnceLock::new();
    if let Some(config) = SYSTEM.get() {
        return Ok(config.clone());
    }
    let (roots, read) = system_roots();
    match read {
        Ok((added, ignored)) => tracing::info!(
            path = SYSTEM_TRUST_ROOTS,
            added,
            ignored,
            "trust roots for https calls without a CA of their own"
        ),
        Err(error) => tracing::warn!(
            path = SYSTEM_TRUST_ROOTS,
            %error,
            "no system trust roots: https calls need a CA of their own"
        ),
    }
    let config = client_config(Verify::Roots(roots), None)?;
    Ok(SYSTEM.get_or_init(|| config).clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse_as_go_reads_them() {
        assert_eq!(
            Url::parse("http://127.0.0.1:8080/scheduler/filter").unwrap(),
            Url {
                https: false,
                host: "127.0.0.1".into(),
                port: 8080,
                authority: "127.0.0.1:8080".into(),
                path: "/scheduler/filter".into(),
            }
        );
        let bare = Url::parse("http://hook.example").unwrap();
        assert_eq!((bare.port, bare.path.as_str()), (80, "/"));
        assert_eq!(Url::parse("HTTP://e?q#frag").unwrap().path, "/?q");
        let https = Url::parse("HTTPS://hook.example:/x").unwrap();
        assert_eq!((https.https, https.port), (true, 443));
        assert_eq!(https.authority, "hook.example:");
        assert_eq!(
            Url::parse("ftp://x").unwrap_err(),
            "unsupported protocol scheme \"ftp\""
        );
        assert_eq!(
            Url::parse("e:80/x").unwrap_err(),
            "unsupported protocol scheme \"\""
        );
        assert!(Url::parse("http://h:notaport/").is_err());
        assert!(Url::parse("http://:8080/").is_err());
        assert!(Url::parse("http:///x").is_err());
        assert!(Url::parse("http://user@h/").is_err());
    }

    #[test]
    fn ipv6_hosts_are_bracketed() {
        let v6 = Url::parse("https://[::1]:9443/v").unwrap();
        assert_eq!((v6.host.as_str(), v6.port), ("::1", 9443));
        assert_eq!(v6.dial_address(), "[::1]:9443");
        let bare = Url::parse("https://[fe80::1]").unwrap();
        assert_eq!((bare.host.as_str(), bare.port), ("fe80::1", 443));
        assert_eq!(bare.dial_address(), "[fe80::1]:443");
        assert!(Url::parse("https://[::1/").is_err());
        assert!(Url::parse("https://[::1]x/").is_err());
        assert!(Url::parse("https://::1/").is_err());
    }

    #[test]
    fn webpki_names_read_plainly() {
        assert_eq!(subject_alt_name("DnsName(\"localhost\")"), "localhost");
        assert_eq!(subject_alt_name("IpAddress(127.0.0.1)"), "127.0.0.1");
        assert_eq!(subject_alt_name("DirectoryName"), "DirectoryName");
    }

    #[test]
    fn pem_bundles_give_their_certificates_as_trust_roots() {
        let one = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
        let two = rcgen::generate_simple_self_signed(vec!["example.com".to_string()]).unwrap();
        assert_eq!(trust_roots(one.cert.pem().as_bytes()).unwrap().len(), 1);
        let both = format!("{}{}", one.cert.pem(), two.cert.pem());
        assert_eq!(trust_roots(both.as_bytes()).unwrap().len(), 2);
        assert_eq!(
            trust_roots(b"just some text").unwrap_err(),
            RootsError::NoCertificate
        );
        let key_only = rcgen::KeyPair::generate().unwrap().serialize_pem();
        assert_eq!(
            trust_roots(key_only.as_bytes()).unwrap_err(),
            RootsError::NoCertificate
        );
        let cut = "-----BEGIN CERTIFICATE-----\nMIIB\n";
        assert!(matches!(
            trust_roots(cut.as_bytes()),
            Err(RootsError::NotPem(_))
        ));
        let garbage = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
        assert!(matches!(
            trust_roots(garbage.as_bytes()),
            Err(RootsError::NotATrustRoot(1, _))
        ));
    }

    #[tokio::test]
    async fn a_closed_port_is_refused_as_go_words_it() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        drop(listener);
        let url = Url::parse(&format!("http://127.0.0.1:{port}/")).unwrap();
        let request = hyper::Request::post("/")
            .body(Full::new(Bytes::new()))
            .unwrap();
        let err = send(&url, None, request).await.err().unwrap();
        assert_eq!(
            err,
            format!("dial tcp 127.0.0.1:{port}: connect: connection refused")
        );
    }
}
