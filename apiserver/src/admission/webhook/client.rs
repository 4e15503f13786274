//! The HTTP side of a webhook call: one POST of a JSON body to
//! `clientConfig.url`, over http or https, bounded by the webhook's timeout,
//! through the client the scheduler's extenders use too
//! (`skiff_machinery::http_client`).

use std::time::Duration;

use base64::Engine;
use bytes::Bytes;
use http_body_util::Full;
use skiff_machinery::http_client::{self, RootsError, Tls, Url, Verify};

/// The largest response read from a webhook.
const MAX_RESPONSE_BYTES: usize = 3 * 1024 * 1024;

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
    let target = Url::parse(url).map_err(|why| format!("Post {url:?}: {why}"))?;
    // An empty caBundle is none, as in Kubernetes: the system's roots.
    let tls = match ca_bundle.filter(|bundle| !bundle.is_empty() && target.https) {
        None => None,
        Some(bundle) => Some(Tls {
            config: http_client::client_config(Verify::Roots(ca_bundle_roots(bundle)?), None)?,
            server_name: None,
        }),
    };
    let request = request(&target, body, timeout).map_err(|e| format!("Post {url:?}: {e}"))?;
    let call = async {
        let (response, _connection) = http_client::send(&target, tls.as_ref(), request).await?;
        let status = response.status();
        let collected = http_client::read_body(response.into_body(), MAX_RESPONSE_BYTES)
            .await
            .map_err(|e| format!("reading the response: {e}"))?;
        Ok::<_, String>((status, collected))
    };
    let (status, collected) = match tokio::time::timeout(timeout, call).await {
        Ok(result) => result.map_err(|why| format!("Post {url:?}: {why}"))?,
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
    target: &Url,
    body: Vec<u8>,
    timeout: Duration,
) -> Result<hyper::Request<Full<Bytes>>, hyper::http::Error> {
    let seconds = timeout.as_secs().max(1);
    let path = match target.path.contains('?') {
        true => format!("{}&timeout={seconds}s", target.path),
        false => format!("{}?timeout={seconds}s", target.path),
    };
    hyper::Request::post(path)
        .header(hyper::header::HOST, target.dial_address())
        .header(hyper::header::CONTENT_TYPE, "application/json")
        .header(hyper::header::ACCEPT, "application/json")
        .body(Full::new(Bytes::from(body)))
}

/// The trust roots of `clientConfig.caBundle`: base64 of one or more PEM
/// certificates.
fn ca_bundle_roots(bundle: &str) -> Result<rustls::RootCertStore, String> {
    const WANTED: &str = "caBundle must be the base64 of PEM-encoded CA certificates";
    let pem = base64::engine::general_purpose::STANDARD
        .decode(bundle.trim())
        .map_err(|e| {
            format!("unable to load root certificates: clientConfig.caBundle is not base64 ({e}); {WANTED}")
        })?;
    http_client::trust_roots(&pem).map_err(|why| match why {
        RootsError::NotPem(e) => format!(
            "unable to load root certificates: clientConfig.caBundle is not valid PEM ({e}); {WANTED}"
        ),
        RootsError::NotATrustRoot(index, e) => format!(
            "unable to load root certificates: certificate {index} of clientConfig.caBundle cannot be a trust root: {e}"
        ),
        RootsError::NoCertificate => format!(
            "unable to load root certificates: clientConfig.caBundle holds no PEM CERTIFICATE block; {WANTED}"
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    use axum::routing::post;
    use std::sync::Arc;

    use rustls::pki_types::PrivateKeyDer;
    use tokio::net::{TcpListener, TcpStream};
    use tokio::sync::mpsc;

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
