//! Which names and ports the members of a local cluster get: etcd's
//! local-cluster convention by default, consecutive ports from a base, or
//! ports the system says are free.

use std::net::{Ipv4Addr, SocketAddr, TcpListener};

use anyhow::{bail, Context, Result};

/// Where one member of a local cluster listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberLayout {
    pub name: String,
    pub client: SocketAddr,
    pub peer: SocketAddr,
    /// The member's Kubernetes API.
    pub api: SocketAddr,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ports {
    /// 2379/2380, 22379/22380, 32379/32380, …: etcd's Procfile; the API on
    /// 6443, 16443, 26443, ….
    EtcdConvention,
    /// Member k at BASE+10(k-1) for clients, the next port for peers, the
    /// one after for the API.
    Base(u16),
    /// Chosen by the system.
    Free,
}

/// Members `n1`…`nN` on 127.0.0.1.
pub fn plan(members: u16, ports: Ports) -> Result<Vec<MemberLayout>> {
    let triples = match ports {
        Ports::EtcdConvention => etcd_convention(members)?,
        Ports::Base(base) => from_base(members, base)?,
        Ports::Free => free_triples(members)?,
    };
    Ok(triples
        .into_iter()
        .enumerate()
        .map(|(index, (client, peer, api))| MemberLayout {
            name: format!("n{}", index + 1),
            client: loopback(client),
            peer: loopback(peer),
            api: loopback(api),
        })
        .collect())
}

fn loopback(port: u16) -> SocketAddr {
    SocketAddr::from((Ipv4Addr::LOCALHOST, port))
}

fn etcd_convention(members: u16) -> Result<Vec<(u16, u16, u16)>> {
    (1..=u32::from(members))
        .map(|k| {
            let client = if k == 1 { 2379 } else { k * 10_000 + 2379 };
            let api = (k - 1) * 10_000 + 6443;
            match (u16::try_from(client + 1), u16::try_from(api)) {
                (Ok(peer), Ok(api)) => Ok((peer - 1, peer, api)),
                _ => bail!(
                    "etcd's port convention has no ports for member {k}; use --base-port or --free-ports"
                ),
            }
        })
        .collect()
}

fn from_base(members: u16, base: u16) -> Result<Vec<(u16, u16, u16)>> {
    (0..u32::from(members))
        .map(|i| {
            let client = u32::from(base) + 10 * i;
            match (u16::try_from(client), u16::try_from(client + 2)) {
                (Ok(client), Ok(api)) if client > 0 => Ok((client, client + 1, api)),
                _ => bail!("--base-port {base} leaves no ports for member {}", i + 1),
            }
        })
        .collect()
}

/// Three free ports per member: all bound at once so they differ, then let go.
fn free_triples(members: u16) -> Result<Vec<(u16, u16, u16)>> {
    let listeners = (0..3 * members)
        .map(|_| TcpListener::bind((Ipv4Addr::LOCALHOST, 0)))
        .collect::<std::io::Result<Vec<_>>>()
        .context("finding free ports on 127.0.0.1")?;
    let ports = listeners
        .iter()
        .map(|l| l.local_addr().map(|a| a.port()))
        .collect::<std::io::Result<Vec<_>>>()
        .context("finding free ports on 127.0.0.1")?;
    Ok(ports.chunks(3).map(|p| (p[0], p[1], p[2])).collect())
}

/// `n1=127.0.0.1:2380,…`: every member's peer address.
pub fn initial_cluster(members: &[MemberLayout]) -> String {
    members
        .iter()
        .map(|m| format!("{}={}", m.name, m.peer))
        .collect::<Vec<_>>()
        .join(",")
}

/// `127.0.0.1:2379,…`: every member's client address, for `--endpoints`.
pub fn endpoints(members: &[MemberLayout]) -> String {
    members
        .iter()
        .map(|m| m.client.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ports(layout: &[MemberLayout]) -> Vec<(u16, u16)> {
        layout
            .iter()
            .map(|m| (m.client.port(), m.peer.port()))
            .collect()
    }

    #[test]
    fn etcd_convention_as_in_its_procfile() {
        let layout = plan(3, Ports::EtcdConvention).unwrap();
        assert_eq!(
            ports(&layout),
            [(2379, 2380), (22379, 22380), (32379, 32380)]
        );
        assert_eq!(layout[2].name, "n3");
        assert_eq!(
            initial_cluster(&layout),
            "n1=127.0.0.1:2380,n2=127.0.0.1:22380,n3=127.0.0.1:32380"
        );
        assert!(plan(7, Ports::EtcdConvention).is_err());
    }

    #[test]
    fn base_ports_are_consecutive_pairs() {
        let layout = plan(2, Ports::Base(12379)).unwrap();
        assert_eq!(ports(&layout), [(12379, 12380), (12389, 12390)]);
        assert!(plan(3, Ports::Base(65530)).is_err());
    }

    #[test]
    fn free_ports_all_differ() {
        let layout = plan(3, Ports::Free).unwrap();
        let mut all: Vec<u16> = ports(&layout)
            .into_iter()
            .flat_map(|(c, p)| [c, p])
            .collect();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), 6);
    }
}
