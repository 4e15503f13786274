//! The HTTP side of a webhook call: one POST of a JSON body to
//! `clientConfig.url`, over http or https, bounded by the webhook's timeout.
//! Not a general HTTP client: one request per connection, HTTP/1.1 only.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use base64::Engine;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::StatusCode;
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{CertificateError, ClientConfig, RootCertStore};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

/// The largest response read from a webhook.
const MAX_RESPONSE_BYTES: usize = 3 * 1024 * 1024;

/// The system's trust roots as one PEM bundle (the Debian, Ubuntu, Alpine
/// and Arch layout).
const SYSTEM_TRUST_ROOTS: &str = "/etc/ssl/certs/ca-certificates.crt";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    Http,
    Https,
}

impl Scheme {
    fn default_port(self) -> u16 {
        match self {
            Scheme::Http => 80,
            Scheme::Https => 443,
        }
    }
}

/// Where a webhook is: `http(s)://host:port/path?query`.
#[derive(Debug, PartialEq, Eq)]
pub struct Endpoint {
    pub scheme: Scheme,
    /// A DNS name or an IP address; an IPv6 address without its brackets.
    pub host: String,
    pub port: u16,
    /// The path and query, starting with `/`.
    pub path: String,
}

impl Endpoint {
    pub fn parse(url: &str) -> Result<Endpoint, String> {
        let (scheme, rest) = match url.split_once("://") {
            Some((s, rest)) if s.eq_ignore_ascii_case("http") => (Scheme::Http, rest),
            Some((s, rest)) if s.eq_ignore_ascii_case("https") => (Scheme::Https, rest),
            _ => return Err(format!("Post {url:?}: unsupported protocol scheme")),
        };
        // A fragment is never sent to the server.
        let rest = rest.split_once('#').map_or(rest, |(before, _)| before);
        let (authority, path) = match rest.find(['/', '?']) {
            Some(i) => (&rest[..i], rest[i..].to_string()),
            None => (rest, "/".to_string()),
        };
        let path = match path.starts_with('?') {
            true => format!("/{path}"),
            false => path,
        };
        if authority.contains('@') {
            return Err(format!(
                "Post {url:?}: user info in a webhook URL is not supported"
            ));
        }
        let (host, port) =
            split_host_port(authority).map_err(|why| format!("Post {url:?}: {why}"))?;
        Ok(Endpoint {
            scheme,
            host: host.to_string(),
            port: port.unwrap_or(scheme.default_port()),
            path,
        })
    }

    /// `host:port` as a Host header or a dial error writes it, an IPv6
    /// address in brackets.
    pub fn authority(&self) -> String {
        match self.host.contains(':') {
            true => format!("[{}]:{}", self.host, self.port),
            false => format!("{}:{}", self.host, self.port),
        }
    }
}

/// `host`, `host:port`, `[v6]` or `[v6]:port`; an empty port is the
/// scheme's default, as Go's URL parser reads it.
fn split_host_port(authority: &str) -> Result<(&str, Option<u16>), String> {
    let (host, port) = match authority.strip_prefix('[') {
        Some(bracketed) => {
            let Some((host, after)) = bracketed.split_once(']') else {
                return Err(format!("missing ']' in host {authority:?}"));
            };
            match after.strip_prefix(':') {
                Some(port) => (host, Some(port)),
                None if after.is_empty() => (host, None),
                None => return Err(format!("invalid port {after:?} after host")),
            }
        }
        // An unbracketed IPv6 address leaves a port with ':' in it, which
        // does not parse.
        None => match authority.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        },
    };
    if host.is_empty() {
        return Err("no host in the URL".to_string());
    }
    let port = match port.filter(|p| !p.is_empty()) {
        None => None,
        Some(port) => Some(
            port.parse::<u16>()
                .map_err(|_| format!("invalid port \":{port}\" after host"))?,
        ),
    };
    Ok((host, port))
}

/// POSTs `body` to `url` and returns the response body of a 2xx answer.
/// An https server is verified against `ca_bundle` (the webhook's
/// `clientConfig.caBundle`: base64 of PEM certificates) when it is set, else
/// against the system trust roots. `timeout` bounds the connect, the TLS
/// handshake and the exchange together. The error text reads as
/// Kubernetes' (`Post "url": …`).
pub async fn post_json(
    url: &str,
    ca_bundle: Option<&str>,
    body: Vec<u8>,
    timeout: Duration,
) -> Result<Vec<u8>, String> {
    let endpoint = Endpoint::parse(url)?;
    let tls = match endpoint.scheme {
        Scheme::Http => None,
        Scheme::Https => {
            let server_name = ServerName::try_from(endpoint.host.clone()).map_err(|e| {
                format!(
                    "Post {url:?}: {:?} is not a valid TLS server name: {e}",
                    endpoint.host
                )
            })?;
            let config = client_config(ca_bundle).await?;
            Some((TlsConnector::from(config), server_name))
        }
    };
    let request = request(&endpoint, body, timeout).map_err(|e| format!("Post {url:?}: {e}"))?;
    let call = async {
        let tcp = TcpStream::connect((endpoint.host.as_str(), endpoint.port))
            .await
            .map_err(|e| format!("Post {url:?}: dial tcp {}: {e}", endpoint.authority()))?;
        let exchanged = match tls {
            None => exchange(tcp, request).await,
            Some((connector, server_name)) => {
                let stream = connector
                    .connect(server_name, tcp)
                    .await
                    .map_err(|e| format!("Post {url:?}: {}", handshake_failure(&e)))?;
                exchange(stream, request).await
            }
        };
        exchanged.map_err(|e| format!("Post {url:?}: {e}"))
    };
    let (status, collected) = match tokio::time::timeout(timeout, call).await {
        Ok(result) => result?,
        Err(_) => return Err(format!("Post {url:?}: context deadline exceeded")),
    };
    if !status.is_success() {
        let text = String::from_utf8_lossy(&collected);
        let text: String = text.chars().take(256).collect();
        return Err(format!(
            "an error on the server ({text:?}) has prevented the request from succeeding (status {})",
            status.as_u16()
        ));
    }
    Ok(collected.to_vec())
}

/// The POST, with the `timeout` query parameter Kubernetes adds.
fn request(
    endpoint: &Endpoint,
    body: Vec<u8>,
    timeout: Duration,
) -> Result<hyper::Request<Full<Bytes>>, hyper::http::Error> {
    let seconds = timeout.as_secs().max(1);
    let path = match endpoint.path.contains('?') {
        true => format!("{}&timeout={seconds}s", endpoint.path),
        false => format!("{}?timeout={seconds}s", endpoint.path),
    };
    hyper::Request::post(path)
        .header(hyper::header::HOST, endpoint.authority())
        .header(hyper::header::CONTENT_TYPE, "application/json")
        .header(hyper::header::ACCEPT, "application/json")
        .body(Full::new(Bytes::from(body)))
}

/// One HTTP/1 request and its whole response over `io`, a TCP or TLS stream.
async fn exchange<S>(
    io: S,
    request: hyper::Request<Full<Bytes>>,
) -> Result<(StatusCode, Bytes), String>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .map_err(|e| e.to_string())?;
    // Stops driving the connection when the call ends, timed out or not.
    let _driver = crate::abort_on_drop::AbortOnDrop(tokio::spawn(connection));
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| e.to_string())?;
    let status = response.status();
    let collected = http_body_util::Limited::new(response.into_body(), MAX_RESPONSE_BYTES)
        .collect()
        .await
        .map_err(|e| format!("reading the response: {e}"))?
        .to_bytes();
    Ok((status, collected))
}

/// A failed TLS handshake in Go's words: `tls: failed to verify
/// certificate: x509: …` for a certificate the trust roots do not accept.
fn handshake_failure(error: &std::io::Error) -> String {
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

/// The TLS client settings for a webhook: its caBundle's roots, or the
/// system's when it has none (an empty caBundle is none, as in Kubernetes).
async fn client_config(ca_bundle: Option<&str>) -> Result<Arc<ClientConfig>, String> {
    match ca_bundle.filter(|bundle| !bundle.is_empty()) {
        Some(bundle) => client_config_with(ca_bundle_roots(bundle)?),
        None => system_client_config().await,
    }
}

fn client_config_with(roots: RootCertStore) -> Result<Arc<ClientConfig>, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("tls: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// The trust roots of `clientConfig.caBundle`: base64 of one or more PEM
/// certificates.
fn ca_bundle_roots(bundle: &str) -> Result<RootCertStore, String> {
    const WANTED: &str = "caBundle must be the base64 of PEM-encoded CA certificates";
    let pem = base64::engine::general_purpose::STANDARD
        .decode(bundle.trim())
        .map_err(|e| {
            format!("unable to load root certificates: clientConfig.caBundle is not base64 ({e}); {WANTED}")
        })?;
    let mut roots = RootCertStore::empty();
    for (index, certificate) in CertificateDer::pem_slice_iter(&pem).enumerate() {
        let certificate = certificate.map_err(|e| {
            format!("unable to load root certificates: clientConfig.caBundle is not valid PEM ({e}); {WANTED}")
        })?;
        roots.add(certificate).map_err(|e| {
            format!(
                "unable to load root certificates: certificate {} of clientConfig.caBundle cannot be a trust root: {e}",
                index + 1
            )
        })?;
    }
    if roots.is_empty() {
        return Err(format!(
            "unable to load root certificates: clientConfig.caBundle holds no PEM CERTIFICATE block; {WANTED}"
        ));
    }
    Ok(roots)
}

/// The TLS client settings for webhooks without a caBundle, read once.
/// The system's trust roots are the PEM bundle at [`SYSTEM_TRUST_ROOTS`];
/// where there is none the store is empty, so that only webhooks with a
/// `clientConfig.caBundle` can be called over https.
async fn system_client_config() -> Result<Arc<ClientConfig>, String> {
    static SYSTEM: OnceLock<Arc<ClientConfig>> = OnceLock::new();
    if let Some(config) = SYSTEM.get() {
        return Ok(config.clone());
    }
    let roots = tokio::task::spawn_blocking(system_roots)
        .await
        .map_err(|e| format!("unable to load the system trust roots: {e}"))?;
    let config = client_config_with(roots)?;
    Ok(SYSTEM.get_or_init(|| config).clone())
}

fn system_roots() -> RootCertStore {
    let mut roots = RootCertStore::empty();
    match std::fs::read(SYSTEM_TRUST_ROOTS) {
        Ok(pem) => {
            let certificates = CertificateDer::pem_slice_iter(&pem).filter_map(Result::ok);
            let (added, ignored) = roots.add_parsable_certificates(certificates);
            tracing::info!(
                path = SYSTEM_TRUST_ROOTS,
                added,
                ignored,
                "trust roots for https webhooks without a caBundle"
            );
        }
        Err(error) => tracing::warn!(
            path = SYSTEM_TRUST_ROOTS,
            %error,
            "no system trust roots: https webhooks need a clientConfig.caBundle"
        ),
    }
    roots
}

#[cfg(test)]
mod tests {
    use super::*;

    use axum::routing::post;
    use rustls::pki_types::PrivateKeyDer;
    use tokio::net::TcpListener;
    use tokio::sync::mpsc;

    #[test]
    fn endpoints_parse_from_urls() {
        assert_eq!(
            Endpoint::parse("http://127.0.0.1:8080/validate").unwrap(),
            Endpoint {
                scheme: Scheme::Http,
                host: "127.0.0.1".into(),
                port: 8080,
                path: "/validate".into()
            }
        );
        let bare = Endpoint::parse("http://hook.example").unwrap();
        assert_eq!((bare.port, bare.path.as_str()), (80, "/"));
        let query = Endpoint::parse("http://hook.example?x=1#frag").unwrap();
        assert_eq!(query.path, "/?x=1");
        assert!(Endpoint::parse("ftp://x").is_err());
        assert!(Endpoint::parse("http://h:notaport/").is_err());
        assert!(Endpoint::parse("http://:8080/").is_err());
        assert!(Endpoint::parse("http://user@h/").is_err());
    }

    #[test]
    fn https_endpoints_default_to_port_443() {
        let bare = Endpoint::parse("https://hook.example/mutate").unwrap();
        assert_eq!(
            bare,
            Endpoint {
                scheme: Scheme::Https,
                host: "hook.example".into(),
                port: 443,
                path: "/mutate".into()
            }
        );
        assert_eq!(bare.authority(), "hook.example:443");
        let upper = Endpoint::parse("HTTPS://hook.example:8443").unwrap();
        assert_eq!((upper.scheme, upper.port), (Scheme::Https, 8443));
        let empty_port = Endpoint::parse("https://hook.example:/x").unwrap();
        assert_eq!(empty_port.port, 443);
    }

    #[test]
    fn ipv6_hosts_are_bracketed() {
        let v6 = Endpoint::parse("https://[::1]:9443/v").unwrap();
        assert_eq!((v6.host.as_str(), v6.port), ("::1", 9443));
        assert_eq!(v6.authority(), "[::1]:9443");
        let bare = Endpoint::parse("https://[fe80::1]").unwrap();
        assert_eq!((bare.host.as_str(), bare.port), ("fe80::1", 443));
        assert!(Endpoint::parse("https://[::1/").is_err());
        assert!(Endpoint::parse("https://[::1]x/").is_err());
        assert!(Endpoint::parse("https://::1/").is_err());
    }

    fn base64(bytes: impl AsRef<[u8]>) -> String {
        base64::engine::general_purpose::STANDARD.encode(bytes)
    }

    #[test]
    fn ca_bundles_hold_base64_pem_certificates() {
        let one = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
        let two = rcgen::generate_simple_self_signed(vec!["example.com".to_string()]).unwrap();
        let roots = ca_bundle_roots(&base64(one.cert.pem())).unwrap();
        assert_eq!(roots.len(), 1);
        let both = format!("{}{}", one.cert.pem(), two.cert.pem());
        assert_eq!(ca_bundle_roots(&base64(both)).unwrap().len(), 2);
    }

    #[test]
    fn bad_ca_bundles_say_what_is_wrong() {
        let not_base64 = ca_bundle_roots("not base64!").unwrap_err();
        assert!(
            not_base64.contains("caBundle is not base64"),
            "{not_base64}"
        );
        let no_pem = ca_bundle_roots(&base64("just some text")).unwrap_err();
        assert!(no_pem.contains("no PEM CERTIFICATE block"), "{no_pem}");
        let key_only = rcgen::KeyPair::generate().unwrap().serialize_pem();
        let only_a_key = ca_bundle_roots(&base64(key_only)).unwrap_err();
        assert!(
            only_a_key.contains("no PEM CERTIFICATE block"),
            "{only_a_key}"
        );
        let cut = "-----BEGIN CERTIFICATE-----\nMIIB\n";
        let unterminated = ca_bundle_roots(&base64(cut)).unwrap_err();
        assert!(unterminated.contains("not valid PEM"), "{unterminated}");
        let garbage = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
        let not_a_certificate = ca_bundle_roots(&base64(garbage)).unwrap_err();
        assert!(
            not_a_certificate.contains("certificate 1 of clientConfig.caBundle"),
            "{not_a_certificate}"
        );
    }

    #[test]
    fn webpki_names_read_plainly() {
        assert_eq!(subject_alt_name("DnsName(\"localhost\")"), "localhost");
        assert_eq!(subject_alt_name("IpAddress(127.0.0.1)"), "127.0.0.1");
        assert_eq!(subject_alt_name("DirectoryName"), "DirectoryName");
    }

    /// Serves `POST /` with `{"ok":true}` over TLS with a new self-signed
    /// certificate for `names`, its subject `CN=common_name`; the address
    /// and the certificate's PEM.
    async fn tls_webhook(common_name: &str, names: &[&str]) -> (std::net::SocketAddr, String) {
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let mut params = rcgen::CertificateParams::new(names).unwrap();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, common_name);
        let signing_key = rcgen::KeyPair::generate().unwrap();
        let cert = params.self_signed(&signing_key).unwrap();
        let key = PrivateKeyDer::Pkcs8(signing_key.serialize_der().into());
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![cert.der().clone()], key)
            .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let tcp = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = tcp.local_addr().unwrap();
        let (accepted, incoming) = mpsc::channel(8);
        tokio::spawn(async move {
            while let Ok((stream, peer)) = tcp.accept().await {
                let (acceptor, accepted) = (acceptor.clone(), accepted.clone());
                tokio::spawn(async move {
                    if let Ok(tls) = acceptor.accept(stream).await {
                        let _ = accepted.send((tls, peer)).await;
                    }
                });
            }
        });
        let app = axum::Router::new().route("/", post(|| async { r#"{"ok":true}"# }));
        let listener = TlsListener { addr, incoming };
        tokio::spawn(async move { axum::serve(listener, app).await });
        (addr, cert.pem())
    }

    struct TlsListener {
        addr: std::net::SocketAddr,
        incoming: mpsc::Receiver<(
            tokio_rustls::server::TlsStream<TcpStream>,
            std::net::SocketAddr,
        )>,
    }

    impl axum::serve::Listener for TlsListener {
        type Io = tokio_rustls::server::TlsStream<TcpStream>;
        type Addr = std::net::SocketAddr;

        async fn accept(&mut self) -> (Self::Io, Self::Addr) {
            match self.incoming.recv().await {
                Some(accepted) => accepted,
                None => std::future::pending().await,
            }
        }

        fn local_addr(&self) -> std::io::Result<Self::Addr> {
            Ok(self.addr)
        }
    }

    const SECONDS: Duration = Duration::from_secs(5);

    #[tokio::test]
    async fn https_webhooks_are_called_with_their_ca_bundle() {
        let (addr, pem) = tls_webhook("hook", &["localhost", "127.0.0.1"]).await;
        let bundle = base64(&pem);
        for url in [
            format!("https://127.0.0.1:{}/", addr.port()),
            format!("https://localhost:{}/", addr.port()),
        ] {
            let body = post_json(&url, Some(&bundle), b"{}".to_vec(), SECONDS)
                .await
                .unwrap();
            assert_eq!(body, br#"{"ok":true}"#, "{url}");
        }
    }

    #[tokio::test]
    async fn another_authority_fails_certificate_verification() {
        let (addr, _) = tls_webhook("hook", &["127.0.0.1"]).await;
        let url = format!("https://127.0.0.1:{}/", addr.port());
        let unknown = format!(
            "Post {url:?}: tls: failed to verify certificate: x509: certificate signed by unknown authority"
        );
        let (_, other) = tls_webhook("another", &["127.0.0.1"]).await;
        let err = post_json(&url, Some(&base64(other)), b"{}".to_vec(), SECONDS)
            .await
            .unwrap_err();
        assert_eq!(err, unknown);
        // A root with the same name but another key.
        let (_, namesake) = tls_webhook("hook", &["127.0.0.1"]).await;
        let err = post_json(&url, Some(&base64(namesake)), b"{}".to_vec(), SECONDS)
            .await
            .unwrap_err();
        assert!(err.starts_with(&unknown), "{err}");
    }

    #[tokio::test]
    async fn a_certificate_for_another_name_is_refused() {
        let (addr, pem) = tls_webhook("hook", &["hook.example"]).await;
        let url = format!("https://127.0.0.1:{}/", addr.port());
        let err = post_json(&url, Some(&base64(pem)), b"{}".to_vec(), SECONDS)
            .await
            .unwrap_err();
        assert_eq!(
            err,
            format!("Post {url:?}: tls: failed to verify certificate: x509: certificate is valid for hook.example, not 127.0.0.1")
        );
    }

    #[tokio::test]
    async fn a_bad_ca_bundle_fails_the_call_before_dialing() {
        let err = post_json("https://127.0.0.1:1/", Some("%%%"), b"{}".to_vec(), SECONDS)
            .await
            .unwrap_err();
        assert!(err.contains("caBundle is not base64"), "{err}");
    }

    #[tokio::test]
    async fn an_http_server_is_not_a_tls_one() {
        let tcp = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = tcp.local_addr().unwrap();
        let app = axum::Router::new().route("/", post(|| async { "{}" }));
        tokio::spawn(async move { axum::serve(tcp, app).await });
        let url = format!("https://{addr}/");
        let (_, pem) = tls_webhook("hook", &["127.0.0.1"]).await;
        let err = post_json(&url, Some(&base64(pem)), b"{}".to_vec(), SECONDS)
            .await
            .unwrap_err();
        assert!(err.starts_with(&format!("Post {url:?}: tls")), "{err}");
    }

    #[tokio::test]
    async fn a_closed_port_fails_like_kubernetes_says() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        drop(listener);
        for scheme in ["http", "https"] {
            let url = format!("{scheme}://127.0.0.1:{port}/");
            let err = post_json(&url, None, b"{}".to_vec(), Duration::from_secs(2))
                .await
                .unwrap_err();
            assert!(
                err.starts_with(&format!("Post {url:?}: dial tcp 127.0.0.1:{port}: ")),
                "{err}"
            );
        }
    }
}
