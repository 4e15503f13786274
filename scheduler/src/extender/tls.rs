//! An extender's TLS settings (`tlsConfig`, `enableHTTPS`), as
//! kube-scheduler reads them; the calls go through
//! `skiff_machinery::http_client`, the client admission webhooks use too.

use super::*;

use skiff_machinery::http_client::{self, ClientAuth, RootsError, Tls, Verify};

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
    let verify = match (insecure, ca) {
        (true, _) => Verify::Nothing,
        (false, Some(pem)) => Verify::Roots(trust_roots(&pem)?),
        (false, None) => Verify::Roots(http_client::system_roots().0),
    };
    let client_auth = match client_auth {
        None => None,
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
            Some(ClientAuth { chain, key })
        }
    };
    let config = http_client::client_config(verify, client_auth)
        .map_err(|why| ConfigError::new("tlsConfig", why))?;
    Ok(Some(Tls {
        config,
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
    http_client::trust_roots(pem).map_err(|why| {
        let why = match why {
            RootsError::NotPem(e) => format!("not valid PEM: {e}"),
            RootsError::NotATrustRoot(i, e) => {
                format!("certificate {i} cannot be a trust root: {e}")
            }
            RootsError::NoCertificate => "no PEM CERTIFICATE block".to_string(),
        };
        ConfigError::new(
            "tlsConfig",
            format!("unable to load root certificates: {why}"),
        )
    })
}
