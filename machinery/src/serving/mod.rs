//! The secure port of kube-scheduler and kube-controller-manager (10259,
//! 10257): HTTPS serving `/metrics` (a Prometheus registry) and
//! `/healthz`, `/livez`, `/readyz`, with delegated authentication and
//! authorization ([`delegated`]). The health paths are always allowed
//! (kube's `--authorization-always-allow-paths`); any other path needs a
//! user (401 without one) whom a SubjectAccessReview allows (403 if not).

pub mod delegated;

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Router};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use delegated::{Delegated, User};

/// Paths served to anyone: kube's `--authorization-always-allow-paths`
/// default.
pub const ALWAYS_ALLOW_PATHS: [&str; 3] = ["/healthz", "/readyz", "/livez"];

/// How long a client's TLS handshake may take.
const HANDSHAKE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// How the port is served.
#[derive(Debug, Clone)]
pub struct SecureServingOptions {
    /// Where to listen (`--bind-address` and `--secure-port`); port 0
    /// takes a free one.
    pub bind: SocketAddr,
    /// `--tls-cert-file` and `--tls-private-key-file` (PEM); without
    /// them, a self-signed certificate for the bind address and
    /// localhost.
    pub cert_file: Option<PathBuf>,
    pub key_file: Option<PathBuf>,
    /// The CAs whose client certificates name users (`--client-ca-file`,
    /// else the kubeconfig's CA); empty: no client certificates.
    pub client_ca: Vec<CertificateDer<'static>>,
}

/// Why the port could not be served.
#[derive(Debug, thiserror::Error)]
pub enum ServingError {
    #[error("reading {what} {path}: {message}")]
    File {
        what: &'static str,
        path: PathBuf,
        message: String,
    },
    #[error("--tls-cert-file and --tls-private-key-file go together; only {given} was given")]
    HalfAPair { given: &'static str },
    #[error("making a self-signed serving certificate: {0}")]
    SelfSigned(#[from] rcgen::Error),
    #[error("the serving certificate or the client CA was refused: {0}")]
    Tls(String),
    #[error("cannot listen on {bind}: {source}")]
    Listen {
        bind: SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

/// The certificates of a PEM bundle (`--client-ca-file`).
pub fn read_certificates(
    path: &std::path::Path,
) -> Result<Vec<CertificateDer<'static>>, ServingError> {
    let fail = |message: String| ServingError::File {
        what: "certificates",
        path: path.to_path_buf(),
        message,
    };
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| fail(e.to_string()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| fail(e.to_string()))?;
    if certs.is_empty() {
        return Err(fail("it holds no PEM certificate".into()));
    }
    Ok(certs)
}

/// The serving certificate chain and key: the files given, or a
/// self-signed certificate for `bind` and localhost.
fn serving_certificate(
    options: &SecureServingOptions,
    bind: SocketAddr,
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), ServingError> {
    match (&options.cert_file, &options.key_file) {
        (Some(cert), Some(key)) => {
            let chain = read_certificates(cert)?;
            let key = PrivateKeyDer::from_pem_file(key).map_err(|e| ServingError::File {
                what: "the private key",
                path: key.clone(),
                message: e.to_string(),
            })?;
            Ok((chain, key))
        }
        (Some(_), None) => Err(ServingError::HalfAPair {
            given: "--tls-cert-file",
        }),
        (None, Some(_)) => Err(ServingError::HalfAPair {
            given: "--tls-private-key-file",
        }),
        (None, None) => self_signed(bind.ip()),
    }
}

/// A self-signed certificate for `ip` (unless unspecified), localhost,
/// 127.0.0.1 and ::1, as kube components make one when given none.
fn self_signed(
    ip: IpAddr,
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), ServingError> {
    let key = rcgen::KeyPair::generate()?;
    let mut params = rcgen::CertificateParams::new(vec!["localhost".to_string()])?;
    let mut ips = vec![
        IpAddr::from([127, 0, 0, 1]),
        IpAddr::from(std::net::Ipv6Addr::LOCALHOST),
    ];
    if !ip.is_unspecified() && !ips.contains(&ip) {
        ips.push(ip);
    }
    params
        .subject_alt_names
        .extend(ips.into_iter().map(rcgen::SanType::IpAddress));
    let host = if ip.is_unspecified() {
        "localhost".to_string()
    } else {
        ip.to_string()
    };
    let now = time::OffsetDateTime::now_utc();
    params.distinguished_name.push(
        rcgen::DnType::CommonName,
        format!("{host}@{}", now.unix_timestamp()),
    );
    params.not_before = now - time::Duration::hours(1);
    params.not_after = now + time::Duration::days(365);
    let cert = params.self_signed(&key)?;
    let key = PrivateKeyDer::try_from(key.serialize_der())
        .map_err(|e| ServingError::Tls(e.to_string()))?;
    Ok((vec![cert.der().clone()], key))
}

fn tls_config(
    options: &SecureServingOptions,
    bind: SocketAddr,
) -> Result<rustls::ServerConfig, ServingError> {
    let tls = |e: rustls::Error| ServingError::Tls(e.to_string());
    let (chain, key) = serving_certificate(options, bind)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(tls)?;
    let builder = if options.client_ca.is_empty() {
        builder.with_no_client_auth()
    } else {
        let mut roots = rustls::RootCertStore::empty();
        for ca in &options.client_ca {
            roots.add(ca.clone()).map_err(tls)?;
        }
        // A client may come without a certificate and show a token.
        let verifier =
            rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .allow_unauthenticated()
                .build()
                .map_err(|e| ServingError::Tls(e.to_string()))?;
        builder.with_client_cert_verifier(verifier)
    };
    let mut config = builder.with_single_cert(chain, key).map_err(tls)?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

/// What every request is served from.
struct Served {
    delegated: Delegated,
    registry: prometheus::Registry,
}

/// The user of a connection's client certificate, if it showed one: in
/// the extensions of every request [`serve_tls`] serves.
#[derive(Debug, Clone)]
pub struct PeerUser(pub Option<User>);

/// A running secure port, stopped by [`SecureServer::stop`] or on drop.
pub struct SecureServer {
    local_addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl SecureServer {
    /// Listens on `options.bind` and serves `registry` at `/metrics`,
    /// asking the API server behind `client` who callers are and what
    /// they may see.
    pub async fn start(
        options: SecureServingOptions,
        client: kube::Client,
        registry: prometheus::Registry,
    ) -> Result<SecureServer, ServingError> {
        let listener = tokio::net::TcpListener::bind(options.bind)
            .await
            .map_err(|source| ServingError::Listen {
                bind: options.bind,
                source,
            })?;
        let local_addr = listener
            .local_addr()
            .map_err(|source| ServingError::Listen {
                bind: options.bind,
                source,
            })?;
        let tls = tls_config(&options, local_addr)?;
        let served = Arc::new(Served {
            delegated: Delegated::new(client),
            registry,
        });
        let router = Router::new().fallback(handle).with_state(served);
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let task = tokio::spawn(serve_tls(listener, router, Arc::new(tls), async move {
            let _ = stopped.await;
        }));
        Ok(SecureServer {
            local_addr,
            stop: Some(stop),
            task,
        })
    }

    /// The address listened on (with the port taken when 0 was asked).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let task = &mut self.task;
        if tokio::time::timeout(std::time::Duration::from_secs(2), task)
            .await
            .is_err()
        {
            self.task.abort();
        }
    }
}

impl Drop for SecureServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Serves `router` over TLS on `listener` until `shutdown` resolves, each
/// request with its connection's [`PeerUser`], upgrades allowed (the
/// kubelet's exec and port-forward switch protocols); open connections
/// are dropped at the end (a followed log never ends by itself).
pub async fn serve_tls(
    listener: tokio::net::TcpListener,
    router: Router,
    tls: Arc<rustls::ServerConfig>,
    shutdown: impl std::future::Future<Output = ()>,
) {
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    let mut connections = tokio::task::JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(err) => {
                    tracing::warn!(error = %err, "accepting a connection failed");
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
            // Reap finished connections so that the set stays small.
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
        };
        let acceptor = acceptor.clone();
        let router = router.clone();
        connections.spawn(async move {
            let stream =
                match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                    Ok(Ok(stream)) => stream,
                    Ok(Err(err)) => {
                        tracing::debug!(%peer, error = %err, "refused a TLS connection");
                        return;
                    }
                    Err(_) => return,
                };
            let user = stream
                .get_ref()
                .1
                .peer_certificates()
                .and_then(|chain| chain.first())
                .and_then(|cert| delegated::user_of_certificate(cert));
            let service = hyper_util::service::TowerToHyperService::new(
                router.layer(Extension(PeerUser(user))),
            );
            let builder =
                hyper_util::server::conn::auto::Builder::new(hyper_util::rt::TokioExecutor::new());
            let _ = builder
                .serve_connection_with_upgrades(hyper_util::rt::TokioIo::new(stream), service)
                .await;
        });
    }
    connections.abort_all();
}

/// A Kubernetes Status answer.
fn status(code: StatusCode, reason: &str, message: &str) -> Response {
    let body = serde_json::json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "details": {},
        "code": code.as_u16(),
    });
    (
        code,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        body.to_string(),
    )
        .into_response()
}

fn unauthorized() -> Response {
    status(StatusCode::UNAUTHORIZED, "Unauthorized", "Unauthorized")
}

/// Authenticates, authorizes, then serves the path.
async fn handle(
    State(served): State<Arc<Served>>,
    Extension(PeerUser(peer)): Extension<PeerUser>,
    request: Request,
) -> Response {
    let path = request.uri().path().to_string();
    if !ALWAYS_ALLOW_PATHS.contains(&path.as_str()) {
        let user = match peer {
            Some(user) => user,
            None => match bearer_token(&request) {
                None => return unauthorized(),
                Some(token) => match served.delegated.authenticate_token(token).await {
                    Ok(Some(user)) => user,
                    Ok(None) => return unauthorized(),
                    Err(err) => {
                        tracing::warn!(error = %err, "authenticating a request to the secure port");
                        return unauthorized();
                    }
                },
            },
        };
        // A non-resource request's verb is its method, lowercased.
        let verb = request.method().as_str().to_ascii_lowercase();
        let decision = match served.delegated.authorize(&user, &verb, &path).await {
            Ok(decision) => decision,
            Err(err) => {
                tracing::warn!(error = %err, "authorizing a request to the secure port");
                delegated::Decision {
                    allowed: false,
                    reason: err.to_string(),
                }
            }
        };
        if !decision.allowed {
            let mut message = format!(
                "forbidden: User \"{}\" cannot {verb} path \"{path}\"",
                user.name
            );
            if !decision.reason.is_empty() {
                message.push_str(": ");
                message.push_str(&decision.reason);
            }
            return status(StatusCode::FORBIDDEN, "Forbidden", &message);
        }
    }
    match path.as_str() {
        "/metrics" => (
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static(crate::metrics::TEXT_CONTENT_TYPE),
            )],
            crate::metrics::encode(&served.registry),
        )
            .into_response(),
        "/healthz" | "/livez" | "/readyz" => Response::new(Body::from("ok")),
        _ => (StatusCode::NOT_FOUND, "404 page not found\n").into_response(),
    }
}

/// The token of an `Authorization: Bearer` header.
fn bearer_token(request: &Request) -> Option<&str> {
    let value = request
        .headers()
        .get(header::AUTHORIZATION)?
        .to_str()
        .ok()?;
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

#[cfg(test)]
mod tests;
