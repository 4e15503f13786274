//! Who this member is in which cluster: IDs derived from the initial
//! cluster, and the identity a data directory keeps so that it is never
//! opened as a member of another cluster or under another name.

use std::fs;
use std::net::SocketAddr;
use std::path::Path;

use crate::error::{Result, StoreError};
use crate::raft::transport::PeerMember;

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
    /// etcd's `--initial-cluster-token`: mixed into the cluster ID and the
    /// founding members' IDs, so that two clusters founded from the same
    /// `initial_cluster` do not take each other's members. Empty derives
    /// the IDs as skiff did before it had the token.
    pub initial_cluster_token: String,
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
    /// Every founding member (when joining: every member the cluster
    /// listed).
    pub peers: Vec<PeerMember>,
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

/// A founding member's ID: from its name and the cluster token, so every
/// member derives the same one.
pub fn member_id(token: &str, name: &str) -> u64 {
    fnv1a(&with_token(name.as_bytes(), token))
}

/// `bytes`, then the token after a NUL; `bytes` alone for the empty
/// token, which keeps the IDs of data directories made before the token.
fn with_token(bytes: &[u8], token: &str) -> Vec<u8> {
    let mut hashed = bytes.to_vec();
    if !token.is_empty() {
        hashed.push(0);
        hashed.extend_from_slice(token.as_bytes());
    }
    hashed
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
        let token = &self.initial_cluster_token;
        Ok(Identity {
            cluster_id: fnv1a(&with_token(sorted.join(",").as_bytes(), token)),
            member_id: member_id(token, &self.name),
            peers: self.founders(),
            learners: Vec::new(),
        })
    }

    /// Every founding member with the ID it was founded with.
    pub fn founders(&self) -> Vec<PeerMember> {
        self.initial_cluster
            .iter()
            .map(|(name, addr)| PeerMember {
                id: member_id(&self.initial_cluster_token, name),
                name: name.clone(),
                addr: *addr,
            })
            .collect()
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
    let founders = cluster.founders();
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
    for founder in &founders {
        let addr = founder.addr;
        if addr == advertised || founder.name == cluster.name {
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
                    Some(PeerMember {
                        id: m.id,
                        name: m.name.clone(),
                        addr: super::members::parse_peer_url(addr).ok()?,
                    })
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
             start it with its own --data-dir, or with the --name, --initial-cluster and \
             --initial-cluster-token it was created with",
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
            initial_cluster_token: String::new(),
        }
    }

    fn config_with_token(name: &str, token: &str) -> ClusterConfig {
        ClusterConfig {
            initial_cluster_token: token.into(),
            ..config(name)
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
    fn the_token_sets_the_cluster_and_member_ids() {
        let a = config_with_token("n1", "cluster-a").identity().unwrap();
        let b = config_with_token("n1", "cluster-b").identity().unwrap();
        assert_ne!(a.cluster_id, b.cluster_id);
        assert_ne!(a.member_id, b.member_id);
        for (x, y) in a.peers.iter().zip(&b.peers) {
            assert_eq!((&x.name, x.addr), (&y.name, y.addr));
            assert_ne!(x.id, y.id, "founder {} keeps its ID across tokens", x.name);
        }
        // Every member of one cluster derives the same IDs from the token.
        let mut n2 = config_with_token("n2", "cluster-a");
        n2.initial_cluster.reverse();
        let n2 = n2.identity().unwrap();
        assert_eq!(n2.cluster_id, a.cluster_id);
        let n1_as_seen_by_n2 = n2.peers.iter().find(|p| p.name == "n1").unwrap();
        assert_eq!(n1_as_seen_by_n2.id, a.member_id);
        assert_eq!(config_with_token("n1", "cluster-a").identity().unwrap(), a);
    }

    #[test]
    fn the_empty_token_keeps_the_ids_of_skiff_before_the_token() {
        // As the derivation without a token gave them: data directories
        // recorded then still open.
        let n1 = config("n1").identity().unwrap();
        assert_eq!(n1.cluster_id, 0xba25_cf3d_355d_a595);
        assert_eq!(n1.member_id, 0x08b3_7b07_b558_d4c0);
        let ids: Vec<u64> = n1.peers.iter().map(|p| p.id).collect();
        assert_eq!(
            ids,
            [
                0x08b3_7b07_b558_d4c0,
                0x08b3_7e07_b558_d9d9,
                0x08b3_7d07_b558_d826
            ]
        );
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

    #[test]
    fn a_data_directory_refuses_another_token() {
        let dir = tempfile::tempdir().unwrap();
        let made = config_with_token("n1", "cluster-a").identity().unwrap();
        check_data_dir(dir.path(), "n1", &made).unwrap();
        let other = config_with_token("n1", "cluster-b").identity().unwrap();
        let err = check_data_dir(dir.path(), "n1", &other)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("belongs to another cluster or member")
                && err.contains("--initial-cluster-token it was created with"),
            "{err}"
        );
    }
}
