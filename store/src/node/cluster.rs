//! Who this member is in which cluster: IDs derived from the initial
//! cluster, and the identity a data directory keeps so that it is never
//! opened as a member of another cluster or under another name.

use std::fs;
use std::net::SocketAddr;
use std::path::Path;

use crate::error::{Result, StoreError};

/// A member of a replicated store, as `--name` and `--initial-cluster`
/// describe it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterConfig {
    /// This member's name; one of `initial_cluster`.
    pub name: String,
    /// Where this member listens for its peers.
    pub peer_listen: SocketAddr,
    /// Every founding member: name and peer address (when joining an
    /// existing cluster: its members and this one).
    pub initial_cluster: Vec<(String, SocketAddr)>,
    /// `New`: found a cluster with `initial_cluster`. `Existing`: join a
    /// running cluster that has already added this member (MemberAdd);
    /// the member learns its ID from its peers.
    pub initial_cluster_state: InitialClusterState,
}

/// etcd's `--initial-cluster-state`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum InitialClusterState {
    #[default]
    New,
    Existing,
}

impl std::str::FromStr for InitialClusterState {
    type Err = StoreError;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "new" => Ok(InitialClusterState::New),
            "existing" => Ok(InitialClusterState::Existing),
            other => Err(StoreError::InvalidConfig(format!(
                "--initial-cluster-state must be \"new\" or \"existing\", not {other:?}"
            ))),
        }
    }
}

/// The IDs a cluster config stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub cluster_id: u64,
    pub member_id: u64,
    /// (member ID, peer address) of every founding member.
    pub peers: Vec<(u64, SocketAddr)>,
    /// Those of `peers` that are learners (a member joining a running
    /// cluster finds them in its member list).
    pub learners: Vec<u64>,
}

/// FNV-1a: a stable 64-bit hash, so every member derives the same IDs.
fn fnv1a(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash.max(1)
}

/// The ID MemberAdd gives a new member: from the cluster, its peer URL
/// and the time, so a member added again after a removal is a new one.
pub fn new_member_id(cluster_id: u64, peer_url: &str) -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    let mut bytes = cluster_id.to_le_bytes().to_vec();
    bytes.extend_from_slice(peer_url.as_bytes());
    bytes.extend_from_slice(&nanos.to_le_bytes());
    fnv1a(&bytes)
}

pub fn member_id(name: &str) -> u64 {
    fnv1a(name.as_bytes())
}

impl ClusterConfig {
    /// Parses `n1=127.0.0.1:2380,n2=…` (etcd's `--initial-cluster`, with
    /// or without an `http://` scheme).
    pub fn parse_initial_cluster(spec: &str) -> Result<Vec<(String, SocketAddr)>> {
        let invalid = |why: String| StoreError::InvalidConfig(why);
        let mut members = Vec::new();
        for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (name, addr) = part.split_once('=').ok_or_else(|| {
                invalid(format!(
                    "--initial-cluster entry {part:?} is not name=host:port"
                ))
            })?;
            let addr = addr.trim_start_matches("http://");
            let addr: SocketAddr = addr.parse().map_err(|e| {
                invalid(format!("--initial-cluster address {addr:?} of {name}: {e}"))
            })?;
            if members
                .iter()
                .any(|(n, _): &(String, SocketAddr)| n == name)
            {
                return Err(invalid(format!("--initial-cluster names {name} twice")));
            }
            members.push((name.to_string(), addr));
        }
        if members.is_empty() {
            return Err(invalid("--initial-cluster is empty".into()));
        }
        Ok(members)
    }

    pub fn identity(&self) -> Result<Identity> {
        if !self.initial_cluster.iter().any(|(n, _)| *n == self.name) {
            let names: Vec<&str> = self
                .initial_cluster
                .iter()
                .map(|(n, _)| n.as_str())
                .collect();
            return Err(StoreError::InvalidConfig(format!(
                "member name {:?} is not in --initial-cluster ({}); use one of those names or add it",
                self.name,
                names.join(", ")
            )));
        }
        let mut sorted: Vec<String> = self
            .initial_cluster
            .iter()
            .map(|(n, a)| format!("{n}={a}"))
            .collect();
        sorted.sort();
        Ok(Identity {
            cluster_id: fnv1a(sorted.join(",").as_bytes()),
            member_id: member_id(&self.name),
            peers: self
                .initial_cluster
                .iter()
                .map(|(n, a)| (member_id(n), *a))
                .collect(),
            learners: Vec::new(),
        })
    }
}

const IDENTITY_FILE: &str = "member";

/// (cluster ID, member ID, name) recorded in a data directory.
fn recorded_identity(dir: &Path) -> Result<Option<(u64, u64, String)>> {
    let text = match fs::read_to_string(dir.join(IDENTITY_FILE)) {
        Ok(text) => text,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(err) => return Err(StoreError::storage("reading the member identity", err)),
    };
    let field = |name: &str| {
        text.lines()
            .find_map(|line| line.strip_prefix(name)?.strip_prefix('='))
            .map(str::to_string)
    };
    let hex = |name: &str| field(name).and_then(|v| u64::from_str_radix(&v, 16).ok());
    match (hex("cluster_id"), hex("member_id"), field("name")) {
        (Some(cluster), Some(member), Some(name)) => Ok(Some((cluster, member, name))),
        _ => Err(StoreError::storage(
            "reading the member identity",
            format!("{} is damaged", dir.join(IDENTITY_FILE).display()),
        )),
    }
}

/// Who this member is. A new cluster's members derive their IDs from the
/// initial cluster; a member joining an existing cluster asks its peers
/// for the member list and finds itself by its peer URL (the cluster added
/// it with MemberAdd). Once recorded in the data directory, the identity
/// is kept.
pub async fn resolve_identity(
    dir: &Path,
    cluster: &ClusterConfig,
    tls: Option<&crate::raft::transport::PeerTls>,
) -> Result<Identity> {
    if cluster.initial_cluster_state == InitialClusterState::New {
        let identity = cluster.identity()?;
        check_data_dir(dir, &cluster.name, &identity)?;
        return Ok(identity);
    }
    let founders: Vec<(u64, SocketAddr)> = cluster
        .initial_cluster
        .iter()
        .map(|(n, a)| (member_id(n), *a))
        .collect();
    if let Some((cluster_id, member_id, name)) = recorded_identity(dir)? {
        if name != cluster.name {
            return Err(StoreError::InvalidConfig(format!(
                "data directory {} belongs to member {name:?}, not {:?}; start it with its own --data-dir or --name {name}",
                dir.display(),
                cluster.name
            )));
        }
        return Ok(Identity {
            cluster_id,
            member_id,
            peers: founders,
            learners: Vec::new(),
        });
    }
    // Found by the address the cluster was told (MemberAdd), which is this
    // member's entry in --initial-cluster, not necessarily where it listens.
    let advertised = cluster
        .initial_cluster
        .iter()
        .find(|(name, _)| *name == cluster.name)
        .map_or(cluster.peer_listen, |(_, addr)| *addr);
    let ours = super::members::peer_url(advertised, tls.is_some());
    let mut last_error = String::from("no peer in --initial-cluster other than this member");
    for &(name_id, addr) in &founders {
        if addr == advertised || name_id == member_id(&cluster.name) {
            continue;
        }
        let (cluster_id, members) = match crate::raft::transport::ask_members(addr, tls).await {
            Ok(answer) => answer,
            Err(err) => {
                last_error = format!("{addr}: {err}");
                continue;
            }
        };
        let Some(me) = members.iter().find(|m| {
            m.peer_urls
                .iter()
                .any(|url| super::members::parse_peer_url(url).ok() == Some(advertised))
        }) else {
            return Err(StoreError::InvalidConfig(format!(
                "the cluster at {addr} has no member with peer URL {ours}; add it first (skiff member add {} --peer-urls {ours}), then start it with --initial-cluster-state existing",
                cluster.name
            )));
        };
        let identity = Identity {
            cluster_id,
            member_id: me.id,
            peers: members
                .iter()
                .filter_map(|m| {
                    let addr = m.peer_urls.first()?;
                    Some((m.id, super::members::parse_peer_url(addr).ok()?))
                })
                .collect(),
            learners: members
                .iter()
                .filter(|m| m.is_learner)
                .map(|m| m.id)
                .collect(),
        };
        check_data_dir(dir, &cluster.name, &identity)?;
        return Ok(identity);
    }
    Err(StoreError::InvalidConfig(format!(
        "cannot join the existing cluster: no member of --initial-cluster answered ({last_error})"
    )))
}

/// Records the identity in a new data directory, or checks it against the
/// one recorded.
pub fn check_data_dir(dir: &Path, name: &str, identity: &Identity) -> Result<()> {
    let path = dir.join(IDENTITY_FILE);
    let ours = format!(
        "cluster_id={:016x}\nmember_id={:016x}\nname={name}\n",
        identity.cluster_id, identity.member_id
    );
    match fs::read_to_string(&path) {
        Ok(recorded) if recorded == ours => Ok(()),
        Ok(recorded) => Err(StoreError::InvalidConfig(format!(
            "data directory {} belongs to another cluster or member:\n{recorded}but this member is:\n{ours}\
             start it with its own --data-dir, or with the --name and --initial-cluster it was created with",
            dir.display()
        ))),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
            fs::write(&path, ours)
                .and_then(|()| fs::File::open(&path)?.sync_all())
                .map_err(|e| StoreError::storage("recording the member identity", e))
        }
        Err(err) => Err(StoreError::storage("reading the member identity", err)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(name: &str) -> ClusterConfig {
        ClusterConfig {
            name: name.into(),
            peer_listen: "127.0.0.1:2380".parse().unwrap(),
            initial_cluster: ClusterConfig::parse_initial_cluster(
                "n1=127.0.0.1:2380,n2=http://127.0.0.1:2381,n3=127.0.0.1:2382",
            )
            .unwrap(),
            initial_cluster_state: InitialClusterState::New,
        }
    }

    #[test]
    fn every_member_derives_the_same_ids() {
        let a = config("n1").identity().unwrap();
        let mut reordered = config("n2");
        reordered.initial_cluster.reverse();
        let b = reordered.identity().unwrap();
        assert_eq!(a.cluster_id, b.cluster_id);
        assert_ne!(a.member_id, b.member_id);
        assert_eq!(a.peers.len(), 3);
    }

    #[test]
    fn bad_initial_clusters_are_explained() {
        for (spec, needle) in [
            ("", "empty"),
            ("n1", "name=host:port"),
            ("n1=nowhere", "address"),
            ("n1=127.0.0.1:1,n1=127.0.0.1:2", "twice"),
        ] {
            let err = ClusterConfig::parse_initial_cluster(spec)
                .unwrap_err()
                .to_string();
            assert!(err.contains(needle), "{spec:?}: {err}");
        }
        let err = config("n4").identity().unwrap_err().to_string();
        assert!(
            err.contains("\"n4\" is not in --initial-cluster (n1, n2, n3)"),
            "{err}"
        );
    }

    #[test]
    fn a_data_directory_keeps_its_identity() {
        let dir = tempfile::tempdir().unwrap();
        let n1 = config("n1").identity().unwrap();
        check_data_dir(dir.path(), "n1", &n1).unwrap();
        check_data_dir(dir.path(), "n1", &n1).unwrap();
        let n2 = config("n2").identity().unwrap();
        let err = check_data_dir(dir.path(), "n2", &n2)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("belongs to another cluster or member"),
            "{err}"
        );
    }
}
