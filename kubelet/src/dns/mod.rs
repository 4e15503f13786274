//! The cluster DNS: a list-watch client of Services and EndpointSlices
//! that answers the names of the Kubernetes DNS specification
//! (`<svc>.<ns>.svc.<domain>`, SRV, headless endpoints, ExternalName) over
//! UDP and TCP on one address, and forwards every other name to upstream
//! resolvers. Not a cache, and it never reads the store.
//!
//! ```no_run
//! # async fn run(client: kube::Client) -> anyhow::Result<()> {
//! use skiff_kubelet::dns::{self, DnsConfig};
//! let config = DnsConfig::new("127.0.0.1:0".parse()?);
//! let bound = dns::bind(config).await?;
//! println!("cluster DNS on {}", bound.local_addr());
//! bound.serve(client, std::future::pending()).await
//! # }
//! ```

pub mod forward;
pub mod handler;
pub mod informer;
pub mod names;
pub mod records;
pub mod zone;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hickory_server::Server;
use tokio::net::{TcpListener, UdpSocket};

use forward::Forwarder;
use handler::ClusterDnsHandler;
use informer::Informed;
use zone::Zone;

/// The cluster domain of a cluster that names none.
pub const DEFAULT_DOMAIN: &str = "cluster.local";
/// Where the upstreams are read from when none are given.
pub const HOST_RESOLV_CONF: &str = "/etc/resolv.conf";
/// A TCP connection without a query for this long is closed.
const TCP_IDLE_TIMEOUT: Duration = Duration::from_secs(10);
/// Answers queued for sending on one TCP connection.
const TCP_RESPONSE_BUFFER: usize = 32;
/// Tries at a port free for both UDP and TCP when any port will do.
const PORT_TRIES: usize = 32;

/// Where and for what domain the cluster DNS answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DnsConfig {
    /// The one address of UDP and TCP (port 0: a port free for both).
    pub listen: SocketAddr,
    /// The cluster domain (`cluster.local`).
    pub domain: String,
    /// Where other names go; empty: the `nameserver`s of the host's
    /// /etc/resolv.conf.
    pub upstream: Vec<SocketAddr>,
}

impl DnsConfig {
    /// `cluster.local` on `listen`, forwarding as the host resolves.
    pub fn new(listen: SocketAddr) -> DnsConfig {
        DnsConfig {
            listen,
            domain: DEFAULT_DOMAIN.to_string(),
            upstream: Vec::new(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum DnsError {
    #[error("the cluster DNS domain: {0}")]
    Domain(#[from] zone::BadDomain),
    #[error("cannot listen for DNS on {address} ({protocol}): {source}")]
    Bind {
        address: SocketAddr,
        protocol: &'static str,
        source: std::io::Error,
    },
    #[error("found no port free for both UDP and TCP on {0} in {PORT_TRIES} tries")]
    NoCommonPort(std::net::IpAddr),
}

/// The cluster DNS with its sockets bound, not answering yet.
pub struct BoundDns {
    local: SocketAddr,
    udp: UdpSocket,
    tcp: TcpListener,
    zone: Zone,
    upstream: Vec<SocketAddr>,
}

/// Binds UDP and TCP on `config.listen` (the same port for both) and
/// settles the domain and the upstreams.
pub async fn bind(config: DnsConfig) -> Result<BoundDns, DnsError> {
    let zone = Zone::new(&config.domain)?;
    let (udp, tcp) = bind_both(config.listen).await?;
    let local = udp.local_addr().map_err(|source| DnsError::Bind {
        address: config.listen,
        protocol: "UDP",
        source,
    })?;
    let upstream = match config.upstream.is_empty() {
        true => {
            forward::host_upstreams(&std::fs::read_to_string(HOST_RESOLV_CONF).unwrap_or_default())
        }
        false => config.upstream,
    };
    let upstream: Vec<SocketAddr> = upstream
        .into_iter()
        .filter(|u| !is_itself(*u, local))
        .collect();
    if upstream.is_empty() {
        tracing::warn!(
            listen = %local,
            "the cluster DNS has no upstream resolver (give upstreams, or a nameserver line in /etc/resolv.conf): names outside the cluster get SERVFAIL"
        );
    }
    Ok(BoundDns {
        local,
        udp,
        tcp,
        zone,
        upstream,
    })
}

/// Whether `upstream` is this server listening on `local`: itself as its
/// upstream would send a query round until it timed out.
fn is_itself(upstream: SocketAddr, local: SocketAddr) -> bool {
    upstream.port() == local.port()
        && (upstream.ip() == local.ip()
            || (local.ip().is_unspecified() && upstream.ip().is_loopback()))
}

async fn bind_both(listen: SocketAddr) -> Result<(UdpSocket, TcpListener), DnsError> {
    let udp_error = |address, source| DnsError::Bind {
        address,
        protocol: "UDP",
        source,
    };
    let tcp_error = |address, source| DnsError::Bind {
        address,
        protocol: "TCP",
        source,
    };
    if listen.port() != 0 {
        let udp = UdpSocket::bind(listen)
            .await
            .map_err(|e| udp_error(listen, e))?;
        let tcp = TcpListener::bind(listen)
            .await
            .map_err(|e| tcp_error(listen, e))?;
        return Ok((udp, tcp));
    }
    for _ in 0..PORT_TRIES {
        let udp = UdpSocket::bind(listen)
            .await
            .map_err(|e| udp_error(listen, e))?;
        let picked = udp.local_addr().map_err(|e| udp_error(listen, e))?;
        match TcpListener::bind(picked).await {
            Ok(tcp) => return Ok((udp, tcp)),
            Err(err) if err.kind() == std::io::ErrorKind::AddrInUse => continue,
            Err(err) => return Err(tcp_error(picked, err)),
        }
    }
    Err(DnsError::NoCommonPort(listen.ip()))
}

impl BoundDns {
    /// The address of both sockets.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// The upstream resolvers names outside the cluster go to.
    pub fn upstream(&self) -> &[SocketAddr] {
        &self.upstream
    }

    /// Answers until `stop` resolves: cluster names once the first lists
    /// of Services and EndpointSlices from `client` are in (SERVFAIL
    /// before), other names through the upstreams.
    pub async fn serve(
        self,
        client: kube::Client,
        stop: impl Future<Output = ()>,
    ) -> anyhow::Result<()> {
        let informed = Arc::new(Informed::default());
        let informer = tokio::spawn(informer::run(client, informed.clone()));
        let local = self.local;
        let forwarder = Forwarder::new(self.upstream, forward::UPSTREAM_TIMEOUT);
        let mut server = Server::new(ClusterDnsHandler::new(self.zone, informed, forwarder));
        server.register_socket(self.udp);
        server.register_listener(self.tcp, TCP_IDLE_TIMEOUT, TCP_RESPONSE_BUFFER);
        tracing::info!(listen = %local, "cluster DNS serving");
        let result = tokio::select! {
            () = stop => server.shutdown_gracefully().await,
            done = server.block_until_done() => done,
        };
        informer.abort();
        result.map_err(|err| anyhow::anyhow!("the cluster DNS on {local} stopped: {err}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn udp_and_tcp_share_one_port_and_bad_settings_are_refused() {
        let bound = bind(DnsConfig {
            upstream: vec!["192.0.2.53:53".parse().unwrap()],
            ..DnsConfig::new("127.0.0.1:0".parse().unwrap())
        })
        .await
        .unwrap();
        let address = bound.local_addr();
        assert_ne!(address.port(), 0);
        assert_eq!(bound.udp.local_addr().unwrap(), address);
        assert_eq!(bound.tcp.local_addr().unwrap(), address);
        assert_eq!(
            bound.upstream(),
            ["192.0.2.53:53".parse::<SocketAddr>().unwrap()]
        );

        // The same port again: taken, and said so.
        let err = bind(DnsConfig::new(address))
            .await
            .err()
            .unwrap()
            .to_string();
        assert!(
            err.contains(&address.to_string()) && err.contains("UDP"),
            "{err}"
        );
        let err = bind(DnsConfig {
            domain: "not a domain".into(),
            ..DnsConfig::new("127.0.0.1:0".parse().unwrap())
        })
        .await
        .err()
        .unwrap()
        .to_string();
        assert!(err.contains("not a domain"), "{err}");
    }

    #[test]
    fn the_server_is_not_its_own_upstream() {
        let local: SocketAddr = "127.0.0.1:53".parse().unwrap();
        assert!(is_itself("127.0.0.1:53".parse().unwrap(), local));
        assert!(!is_itself("127.0.0.1:5353".parse().unwrap(), local));
        assert!(!is_itself("192.0.2.53:53".parse().unwrap(), local));
        let any: SocketAddr = "0.0.0.0:53".parse().unwrap();
        assert!(is_itself("127.0.0.53:53".parse().unwrap(), any));
        assert!(!is_itself("192.0.2.53:53".parse().unwrap(), any));
    }
}
