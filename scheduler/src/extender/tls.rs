//! The extenders' HTTP client: one connection per call over plain TCP or
//! TLS (with the configuration's CA, client certificate or `insecure`).

use super::*;

/// Where a call goes: `http(s)://host[:port]/path?query`.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Target {
    pub(super) https: bool,
    /// A DNS name or an IP address (an IPv6 one without brackets).
    pub(super) host: String,
    pub(super) port: u16,
    /// `host[:port]` as written in the URL: the Host header.
    pub(super) authority: String,
    /// The path and query, from `/`.
    pub(super) path: String,
}

impl Target {
    pub(super) fn parse(url: &str) -> Result<Target, String> {
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
            return Err("user info in an extender URL is not supported".to_string());
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
        Ok(Target {
            https,
            host: host.to_string(),
            port,
            authority: authority.to_string(),
            path,
        })
    }

    /// `host:port` as a dial error writes it.
    pub(super) fn dial_address(&self) -> String {
        match self.host.contains(':') {
            true => format!("[{}]:{}", self.host, self.port),
            false => format!("{}:{}", self.host, self.port),
        }
    }
}

/// Resolves the host and connects to the first address that answers.
pub(super) async fn dial(target: &Target) -> Result<TcpStream, String> {
    let addresses: Vec<SocketAddr> = tokio::net::lookup_host((target.host.as_str(), target.port))
        .await
        .map_err(|e| format!("dial tcp: lookup {}: {e}", target.host))?
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
    Err(format!("dial tcp {}: {why}", target.dial_address()))
}

/// Drives one HTTP/1 connection while the call needs it.
pub(super) struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// One request over `io`: the response (its body still to read) and the
/// task that drives the connection.
pub(super) async fn exchange<S>(
    io: S,
    request: hyper::Request<Full<Bytes>>,
) -> Result<(hyper::Response<hyper::body::Incoming>, AbortOnDrop), String>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .map_err(|e| e.to_string())?;
    let driver = AbortOnDrop(tokio::spawn(async move {
        let _ = connection.await;
    }));
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| e.to_string())?;
    Ok((response, driver))
}

/// A failed TLS handshake as Go words it.
pub(super) fn handshake_failure(error: &std::io::Error) -> String {
    match error
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
    {
        Some(rustls::Error::InvalidCertificate(why)) => {
            let why = match why {
                rustls::CertificateError::UnknownIssuer
                | rustls::CertificateError::BadSignature => {
                    "x509: certificate signed by unknown authority".to_string()
                }
                other => format!("x509: {other}"),
            };
            format!("tls: failed to verify certificate: {why}")
        }
        Some(other) => format!("tls: {other}"),
        None => format!("tls handshake: {error}"),
    }
}

// ---- TLS ----

/// The TLS settings of an extender, as kube-scheduler's makeTransport and
/// client-go's TLSConfigFor make them: `None` when nothing is configured
/// (an https URL then uses the system's trust roots). With `enableHTTPS`
/// and no CA the server's certificate is not verified, as kube-scheduler
/// does.
pub(super) fn tls_settings(
    config: Option<&TlsConfig>,
    enable_https: bool,
) -> Result<Option<Tls>, ConfigError> {
    let empty = TlsConfig::default();
    let config = config.unwrap_or(&empty);
    let ca = data_or_file(&config.ca_data, &config.ca_file, "caData", "caFile")?;
    let cert = data_or_file(&config.cert_data, &config.cert_file, "certData", "certFile")?;
    let key = data_or_file(&config.key_data, &config.key_file, "keyData", "keyFile")?;
    let server_name = config.server_name.clone().filter(|n| !n.is_empty());
    let explicit_insecure = config.insecure.unwrap_or(false);
    if explicit_insecure && ca.is_some() {
        return Err(ConfigError::new(
            "tlsConfig",
            "specifying a root certificates file with the insecure flag is not allowed",
        ));
    }
    let insecure = explicit_insecure || (enable_https && ca.is_none());
    let client_auth = match (cert, key) {
        (None, None) => None,
        (Some(cert), Some(key)) => Some((cert, key)),
        _ => {
            return Err(ConfigError::new(
                "tlsConfig",
                "a client certificate (certData or certFile) needs its key (keyData or keyFile), and the other way round",
            ))
        }
    };
    if ca.is_none() && client_auth.is_none() && !insecure && server_name.is_none() {
        return Ok(None);
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| ConfigError::new("tlsConfig", format!("tls: {e}")))?;
    let builder = match (insecure, ca) {
        (true, _) => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(
                skiff_machinery::skip_verify::SkipServerVerification(provider),
            )),
        (false, Some(pem)) => builder.with_root_certificates(trust_roots(&pem)?),
        (false, None) => builder.with_root_certificates(system_roots()),
    };
    let mut client_config = match client_auth {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => {
            let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&cert)
                .collect::<Result<_, _>>()
                .map_err(|e| {
                    ConfigError::new(
                        "tlsConfig",
                        format!("the client certificate is not valid PEM: {e}"),
                    )
                })?;
            if chain.is_empty() {
                return Err(ConfigError::new(
                    "tlsConfig",
                    "the client certificate holds no PEM CERTIFICATE block",
                ));
            }
            let key = PrivateKeyDer::from_pem_slice(&key).map_err(|e| {
                ConfigError::new(
                    "tlsConfig",
                    format!("the client key is not a PEM private key: {e}"),
                )
            })?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| ConfigError::new("tlsConfig", format!("tls: {e}")))?
        }
    };
    client_config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Some(Tls {
        config: Arc::new(client_config),
        server_name,
    }))
}

/// `*Data` (base64) when set, else the `*File`'s content, else `None`.
pub(super) fn data_or_file(
    data: &Option<String>,
    file: &Option<String>,
    data_field: &str,
    file_field: &str,
) -> Result<Option<Vec<u8>>, ConfigError> {
    if let Some(data) = data.as_deref().filter(|d| !d.is_empty()) {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(data.trim())
            .map_err(|e| {
                ConfigError::new(
                    format!("tlsConfig.{data_field}"),
                    format!("not base64: {e}"),
                )
            })?;
        return Ok(Some(bytes).filter(|b| !b.is_empty()));
    }
    match file.as_deref().filter(|f| !f.is_empty()) {
        None => Ok(None),
        Some(path) => std::fs::read(path).map(Some).map_err(|e| {
            ConfigError::new(
                format!("tlsConfig.{file_field}"),
                format!("open {path}: {e}"),
            )
        }),
    }
}

/// The trust roots of a PEM bundle.
pub(super) fn trust_roots(pem: &[u8]) -> Result<RootCertStore, ConfigError> {
    let mut roots = RootCertStore::empty();
    for (i, certificate) in CertificateDer::pem_slice_iter(pem).enumerate() {
        let certificate = certificate.map_err(|e| {
            ConfigError::new(
                "tlsConfig",
                format!("unable to load root certificates: not valid PEM: {e}"),
            )
        })?;
        roots.add(certificate).map_err(|e| {
            ConfigError::new(
                "tlsConfig",
                format!(
                    "unable to load root certificates: certificate {} cannot be a trust root: {e}",
                    i + 1
                ),
            )
        })?;
    }
    if roots.is_empty() {
        return Err(ConfigError::new(
            "tlsConfig",
            "unable to load root certificates: no PEM CERTIFICATE block",
        ));
    }
    Ok(roots)
}

pub(super) fn system_roots() -> RootCertStore {
    let mut roots = RootCertStore::empty();
    match std::fs::read(SYSTEM_TRUST_ROOTS) {
        Ok(pem) => {
            let _ = roots.add_parsable_certificates(
                CertificateDer::pem_slice_iter(&pem).filter_map(Result::ok),
            );
        }
        Err(error) => {
            tracing::warn!(path = SYSTEM_TRUST_ROOTS, %error, "no system trust roots for https extenders")
        }
    }
    roots
}

/// The settings of https extenders without TLS configuration: the
/// system's trust roots, read once.
pub(super) fn system_client_config() -> Result<Arc<ClientConfig>, String> {
    static SYSTEM: OnceLock<Arc<ClientConfig>> = OnceLock::new();
    if let Some(config) = SYSTEM.get() {
        return Ok(config.clone());
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("tls: {e}"))?
        .with_root_certificates(system_roots())
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(SYSTEM.get_or_init(|| Arc::new(config)).clone())
}
