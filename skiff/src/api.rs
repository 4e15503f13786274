//! How the Kubernetes API is reached and secured on the command line: the
//! PKI directory, extra names for the serving certificate, static tokens,
//! and the loopback plain-HTTP port when an operator asks for one. Also
//! the API's clients in this process (scheduler, controllers, kubelet),
//! each with a client certificate of its own identity.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result};
use clap::Args;
use skiff_apiserver::authn::{Authenticator, TokenFile};
use skiff_apiserver::ApiListener;

use crate::pki::{Credentials, Pki};

/// How long the API keeps Events (kube-apiserver's `--event-ttl`).
#[derive(Debug, Clone, Args)]
pub struct EventFlags {
    /// Events expire this long after their last write (e.g. 1h, 30m);
    /// 0 keeps them until deleted.
    #[arg(long, env = "SKIFF_EVENT_TTL", default_value = "1h", value_parser = crate::control_plane::parse_duration)]
    pub event_ttl: std::time::Duration,
}

impl EventFlags {
    /// `registry`, its Events expiring as asked.
    pub fn apply(&self, registry: skiff_apiserver::Registry) -> skiff_apiserver::Registry {
        match self.event_ttl.is_zero() {
            true => registry,
            false => registry.with_event_ttl(self.event_ttl),
        }
    }
}

/// Where Services' cluster IPs and node ports come from (kube-apiserver's
/// flags of the same names).
#[derive(Debug, Clone, Args)]
pub struct ServiceRangeFlags {
    /// The network Services' cluster IPs are allocated from (IPv4 CIDR);
    /// its first address is the `kubernetes` Service's.
    #[arg(
        long,
        env = "SKIFF_SERVICE_CLUSTER_IP_RANGE",
        default_value = "10.96.0.0/12"
    )]
    pub service_cluster_ip_range: String,
    /// The ports NodePort Services are allocated from (LOW-HIGH).
    #[arg(
        long,
        env = "SKIFF_SERVICE_NODE_PORT_RANGE",
        default_value = "30000-32767"
    )]
    pub service_node_port_range: String,
}

impl ServiceRangeFlags {
    /// The `kubernetes` Service's address (the range's first), which
    /// in-cluster clients dial and the serving certificate must name.
    pub fn kubernetes_names(&self) -> Vec<String> {
        skiff_apiserver::service_alloc::ServiceRanges::parse(
            &self.service_cluster_ip_range,
            &self.service_node_port_range,
        )
        .map(|ranges| vec![ranges.first_ip().to_string()])
        .unwrap_or_default()
    }

    /// `registry`, allocating from these ranges.
    pub fn apply(&self, registry: skiff_apiserver::Registry) -> Result<skiff_apiserver::Registry> {
        let ranges = skiff_apiserver::service_alloc::ServiceRanges::parse(
            &self.service_cluster_ip_range,
            &self.service_node_port_range,
        )
        .map_err(|err| {
            anyhow::anyhow!("--service-cluster-ip-range / --service-node-port-range: {err}")
        })?;
        Ok(registry.with_service_ranges(ranges))
    }
}

#[derive(Debug, Clone, Args)]
pub struct SecurityFlags {
    /// Where the cluster CA and the administrator's credentials are kept
    /// (created on first start) [default: DATA_DIR/pki]. Every member of a
    /// cluster needs the same one.
    #[arg(long, env = "SKIFF_PKI_DIR")]
    pub pki_dir: Option<PathBuf>,
    /// More names or addresses for the API's serving certificate (beside
    /// localhost, 127.0.0.1, this host's name and the listening address).
    #[arg(long, value_delimiter = ',')]
    pub tls_san: Vec<String>,
    /// Static bearer tokens: a CSV file of token,user,uid[,"group1,group2"]
    /// lines, as kube-apiserver's --token-auth-file.
    #[arg(long)]
    pub token_auth_file: Option<PathBuf>,
    /// Also serve the API over plain HTTP on this loopback address
    /// (host:port), where every request acts as the administrator, as
    /// kube-apiserver's old insecure port. Off unless given.
    #[arg(long, value_parser = parse_loopback)]
    pub insecure_api_listen: Option<SocketAddr>,
    /// RBAC (Roles, ClusterRoles and their bindings decide), or
    /// AlwaysAllow (every authenticated request may do anything).
    #[arg(long, default_value = "RBAC")]
    pub authorization_mode: skiff_apiserver::authz::Mode,
}

pub(crate) fn parse_loopback(text: &str) -> Result<SocketAddr, String> {
    let addr: SocketAddr = text
        .parse()
        .map_err(|_| format!("{text:?} is not host:port (e.g. 127.0.0.1:8080)"))?;
    if !addr.ip().is_loopback() {
        return Err(format!(
            "{addr} is not a loopback address; the plain-HTTP port trusts every request as the administrator, so it is served on loopback only (e.g. 127.0.0.1:8080)"
        ));
    }
    Ok(addr)
}

/// The security settings resolved: the CA loaded, the tokens read.
#[derive(Debug, Clone)]
pub struct Security {
    pub pki: Arc<Pki>,
    pub tls_sans: Vec<String>,
    pub authn: Arc<Authenticator>,
    pub insecure_listen: Option<SocketAddr>,
    pub authorization: skiff_apiserver::authz::Mode,
}

impl Security {
    /// With `names` (the `kubernetes` Service's address) on the serving
    /// certificate too.
    pub fn with_names(mut self, names: Vec<String>) -> Security {
        for name in names {
            if !self.tls_sans.contains(&name) {
                self.tls_sans.push(name);
            }
        }
        self
    }
}

impl SecurityFlags {
    /// Loads (or on first start creates) the CA under `data_dir` unless
    /// --pki-dir says where, and reads the token file.
    pub fn resolve(&self, data_dir: &Path) -> Result<Security> {
        let dir = self
            .pki_dir
            .clone()
            .unwrap_or_else(|| data_dir.join(crate::pki::DEFAULT_DIR));
        let pki = Pki::ensure(&dir)?;
        let tokens = match &self.token_auth_file {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .with_context(|| format!("reading --token-auth-file {}", path.display()))?;
                TokenFile::parse(&text)
                    .map_err(|e| anyhow::anyhow!("--token-auth-file {}: {e}", path.display()))?
            }
            None => TokenFile::default(),
        };
        Ok(Security {
            pki,
            tls_sans: self.tls_san.clone(),
            authn: Arc::new(Authenticator {
                tokens,
                service_accounts: None,
            }),
            insecure_listen: self.insecure_api_listen,
            authorization: self.authorization_mode,
        })
    }
}

/// The API's addresses once bound, for the clients in this process.
#[derive(Debug, Clone)]
pub struct LocalApi {
    pub addr: SocketAddr,
    pub insecure: Option<SocketAddr>,
    pub pki: Arc<Pki>,
    /// The API for this process's own clients, without a socket: hand it
    /// to the serving API in its `ServeOptions`.
    pub in_process: skiff_apiserver::serving::InProcess,
}

/// Binds the API's HTTPS address `listen` (and the plain-HTTP loopback
/// port if asked for), with a serving certificate for its names.
pub async fn bind(listen: &str, security: &Security) -> Result<(Vec<ApiListener>, LocalApi)> {
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| {
            format!(
                "cannot listen for the Kubernetes API on {listen}; is another skiff running there? choose another --api-listen"
            )
        })?;
    let addr = listener
        .local_addr()
        .context("reading the API listener's address")?;
    let names = crate::pki::serving_names(&addr, &security.tls_sans);
    let tls = security.pki.api_tls(&names)?;
    let mut listeners = vec![ApiListener {
        listener,
        tls: Some(tls),
    }];
    let mut insecure = None;
    if let Some(plain) = security.insecure_listen {
        let listener = tokio::net::TcpListener::bind(plain)
            .await
            .with_context(|| format!("cannot listen on --insecure-api-listen {plain}"))?;
        insecure = Some(listener.local_addr()?);
        listeners.push(ApiListener {
            listener,
            tls: None,
        });
    }
    let local = LocalApi {
        addr,
        insecure,
        pki: security.pki.clone(),
        in_process: Default::default(),
    };
    Ok((listeners, local))
}

impl LocalApi {
    /// `https://host:port`, with `localhost` for an unspecified address.
    pub fn url(&self) -> String {
        let mut addr = self.addr;
        if addr.ip().is_unspecified() {
            addr.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
        }
        format!("https://{addr}")
    }

    /// A client of this API as `user` in `groups`, inside this process:
    /// its requests take the API's whole path (authentication as that
    /// user, authorization, admission, audit) but no socket, TLS or HTTP
    /// framing, which cost the scheduler's loop about a tenth of the
    /// server's CPU. The API must be given `in_process` when it serves.
    pub fn client(&self, user: &str, groups: &[&str]) -> kube::Client {
        let user = skiff_apiserver::user::UserInfo {
            name: user.to_string(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
        };
        let agent = axum::http::HeaderValue::from_static(concat!(
            "skiff/",
            env!("CARGO_PKG_VERSION"),
            " (in-process)"
        ));
        let service = tower::ServiceBuilder::new()
            .map_request(
                move |mut request: axum::http::Request<kube::client::Body>| {
                    request
                        .headers_mut()
                        .insert(axum::http::header::USER_AGENT, agent.clone());
                    request
                },
            )
            .service(self.in_process.service(user));
        kube::Client::new(service, "default")
    }

    /// Writes the administrator's kubeconfig to `path` (mode 0600).
    pub fn write_admin_kubeconfig(&self, path: &Path) -> Result<()> {
        write_admin_kubeconfig(path, &self.url(), &self.pki)
    }
}

/// Writes a kubeconfig for the API at `url` with the administrator's
/// credentials to `path` (mode 0600).
pub fn write_admin_kubeconfig(path: &Path, url: &str, pki: &Pki) -> Result<()> {
    let admin: Credentials = pki.admin()?;
    let text = crate::kubeconfig::render(url, pki.ca_pem(), &admin);
    crate::files::write_private(path, text.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plain_port_is_loopback_only() {
        assert!(parse_loopback("127.0.0.1:8080").is_ok());
        assert!(parse_loopback("[::1]:8080").is_ok());
        assert!(parse_loopback("0.0.0.0:8080")
            .unwrap_err()
            .contains("loopback"));
        assert!(parse_loopback("10.0.0.1:8080").is_err());
        assert!(parse_loopback("nonsense").is_err());
    }
}
