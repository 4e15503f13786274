//! Who is in the cluster and how this member is doing: the member list
//! (etcd's Cluster service), adding members, and the status (etcd's
//! Maintenance.Status).
//!
//! Who is a member, and whether it votes, is the Raft membership's say;
//! names and URLs are kept beside it in the engine: an added member's peer
//! URLs come with the change that adds it (and change with MemberUpdate,
//! through the log), and every member publishes its name and client URLs
//! through the log once it runs. A learner is promoted once the leader
//! sees its log caught up (etcd's rule: 90% of the leader's).

use std::net::SocketAddr;
use std::sync::atomic::Ordering;

use super::driver::DriverRequest;
use super::Store;
use crate::api::Member;
use crate::error::{Result, StoreError};
use crate::mvcc::KvStore;
use crate::raft::transport::PeerMember;

/// This member's view of itself and the cluster.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoreStatus {
    pub member_id: u64,
    pub cluster_id: u64,
    /// 0 when no leader is known.
    pub leader: u64,
    pub raft_term: u64,
    /// The last committed log index this member knows of.
    pub raft_index: u64,
    pub raft_applied_index: u64,
    pub revision: i64,
    pub compact_revision: i64,
    /// Bytes the state database takes on disk.
    pub db_size: u64,
    /// Bytes of the keys and values it holds; a defrag gives back the rest.
    pub db_size_in_use: u64,
    pub is_learner: bool,
}

/// Learners a cluster may have at once (etcd 3.4's `maxLearners`).
pub const MAX_LEARNERS: usize = 1;

/// `http://HOST:PORT` → the socket address (the scheme is optional).
pub fn parse_peer_url(url: &str) -> Result<SocketAddr> {
    let addr = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
        .unwrap_or(url)
        .trim_end_matches('/');
    addr.parse().map_err(|e| {
        StoreError::InvalidConfig(format!(
            "peer URL {url:?} is not http://IP:PORT or https://IP:PORT ({e})"
        ))
    })
}

/// A founding member's peer URL: `https://` when members speak TLS.
pub fn peer_url(addr: SocketAddr, tls: bool) -> String {
    match tls {
        true => format!("https://{addr}"),
        false => format!("http://{addr}"),
    }
}

/// Every member as of what `kv` has applied: the membership, with the
/// attributes recorded for each, or (for a founding member that has not
/// published yet) its name and address from the initial cluster.
pub(crate) fn list_members(
    kv: &KvStore,
    founders: &[PeerMember],
    tls: bool,
) -> Result<Vec<Member>> {
    let conf_state = match kv.conf_state_bytes()? {
        Some(bytes) => crate::raft::decode_conf_state(&bytes)?,
        None => raft::eraftpb::ConfState::default(),
    };
    let registry = kv.member_registry()?;
    let mut ids: Vec<(u64, bool)> = conf_state.voters.iter().map(|&id| (id, false)).collect();
    ids.extend(conf_state.learners.iter().map(|&id| (id, true)));
    let mut members = Vec::with_capacity(ids.len());
    for (id, is_learner) in ids {
        let mut member = registry
            .iter()
            .find(|m| m.id == id)
            .cloned()
            .unwrap_or(Member {
                id,
                ..Member::default()
            });
        member.is_learner = is_learner;
        if let Some(founder) = founders.iter().find(|f| f.id == id) {
            if member.name.is_empty() {
                member.name = founder.name.clone();
            }
            if member.peer_urls.is_empty() {
                member.peer_urls = vec![peer_url(founder.addr, tls)];
            }
        }
        members.push(member);
    }
    Ok(members)
}

impl Store {
    pub fn cluster_id(&self) -> u64 {
        self.inner.cluster_id
    }

    /// Whether this member has been removed from the cluster (it should
    /// stop; it takes no part any more).
    pub fn is_removed(&self) -> bool {
        self.inner.leadership.removed.load(Ordering::Acquire)
    }

    /// The Raft term this member is in.
    pub fn raft_term(&self) -> u64 {
        self.inner.leadership.term.load(Ordering::Acquire)
    }

    pub fn status(&self) -> StoreStatus {
        let kv = &self.inner.kv;
        StoreStatus {
            member_id: self.member_id(),
            cluster_id: self.cluster_id(),
            leader: self.leader_id(),
            raft_term: self.raft_term(),
            raft_index: self
                .inner
                .leadership
                .commit_index
                .load(Ordering::Acquire)
                .max(kv.applied_index()),
            raft_applied_index: kv.applied_index(),
            revision: kv.current_revision(),
            compact_revision: kv.compact_revision(),
            db_size: kv.db_size(),
            db_size_in_use: kv.db_size_in_use(),
            is_learner: self.is_learner(),
        }
    }

    /// Whether this member is a learner (a non-voting member catching up).
    pub fn is_learner(&self) -> bool {
        self.inner.leadership.is_learner.load(Ordering::Acquire)
    }

    /// Every member of the cluster as of what this member has applied.
    pub fn members(&self) -> Result<Vec<Member>> {
        let mut members = list_members(
            &self.inner.kv,
            &self.founders(),
            self.config().peer_tls.is_some(),
        )?;
        if members.is_empty() {
            // A store alone has no membership entries of its own.
            members.push(Member {
                id: self.member_id(),
                ..Member::default()
            });
        }
        for member in &mut members {
            if member.id == self.member_id() {
                if member.name.is_empty() {
                    member.name = self.inner.config.name.clone();
                }
                if member.client_urls.is_empty() {
                    member.client_urls = self.inner.config.client_urls.clone();
                }
                if member.peer_urls.is_empty() {
                    // Alone, where it would listen for peers.
                    member.peer_urls = self.inner.config.peer_urls.clone();
                }
            }
        }
        Ok(members)
    }

    fn founders(&self) -> Vec<PeerMember> {
        self.inner
            .config
            .cluster
            .as_ref()
            .map(super::cluster::ClusterConfig::founders)
            .unwrap_or_default()
    }

    /// Adds a member that will listen for peers at `peer_urls` (etcd's
    /// MemberAdd); answers with the new member, its ID assigned here, and
    /// every member after the change. The new member then starts with
    /// `--initial-cluster-state existing` and learns its ID from its peers.
    pub async fn add_member(
        &self,
        peer_urls: Vec<String>,
        is_learner: bool,
    ) -> Result<(Member, Vec<Member>)> {
        if self.inner.config.cluster.is_none() {
            return Err(StoreError::InvalidConfig(
                "this store runs alone (no --initial-cluster): it has no peers to add members to"
                    .into(),
            ));
        }
        let Some(first) = peer_urls.first() else {
            return Err(StoreError::InvalidConfig(
                "a member needs at least one peer URL".into(),
            ));
        };
        let mut urls = Vec::with_capacity(peer_urls.len());
        let tls = self.inner.config.peer_tls.is_some();
        for url in &peer_urls {
            urls.push(peer_url(parse_peer_url(url)?, tls));
        }
        // Check against every change committed so far, not just those
        // this member has applied.
        self.linearize().await?;
        let members = self.members()?;
        for member in &members {
            if let Some(url) = member.peer_urls.iter().find(|u| urls.contains(u)) {
                return Err(StoreError::PeerUrlExists(url.clone()));
            }
        }
        let learners = members.iter().filter(|m| m.is_learner).count();
        if is_learner && learners >= MAX_LEARNERS {
            return Err(StoreError::TooManyLearners { max: MAX_LEARNERS });
        }
        let id = super::cluster::new_member_id(self.cluster_id(), first);
        let member = Member {
            id,
            name: String::new(),
            peer_urls: urls,
            client_urls: Vec::new(),
            is_learner,
        };
        let change = crate::raft::membership_change(&member, true)?;
        self.ask_driver(|reply| DriverRequest::ChangeMembership(change, reply))
            .await?;
        let members = self.members()?;
        Ok((member, members))
    }

    /// Turns learner `id` into a voter (etcd's MemberPromote), on any
    /// member: only the leader knows how far the learner has caught up,
    /// so a follower asks it, then proposes the change (forwarded to the
    /// leader by raft). Answers with every member after the change.
    pub async fn promote_member(&self, id: u64) -> Result<Vec<Member>> {
        self.linearize().await?;
        // etcd's order: the leader's view of the log first, then (as it
        // applies the change) whether it names a learner at all.
        if let Some(readiness) = self.learner_readiness(id).await? {
            if !readiness.is_ready() {
                return Err(StoreError::LearnerNotReady {
                    learner_match: readiness.learner_match,
                    leader_match: readiness.leader_match,
                });
            }
        }
        let member = self
            .members()?
            .into_iter()
            .find(|m| m.id == id)
            .ok_or(StoreError::MemberNotFound)?;
        if !member.is_learner {
            return Err(StoreError::MemberNotLearner);
        }
        let change = crate::raft::promotion(id);
        self.ask_driver(|reply| DriverRequest::ChangeMembership(change, reply))
            .await?;
        self.members()
    }

    /// How far member `id`'s log matches the leader's, as the leader says;
    /// `None` if it tracks no such member.
    async fn learner_readiness(&self, id: u64) -> Result<Option<crate::raft::Readiness>> {
        use crate::raft::lease_forward::{LeaseAnswer, LeaseQuery};
        match self.ask_leader(LeaseQuery::LearnerReadiness { id }).await? {
            LeaseAnswer::LearnerReadiness(readiness) => Ok(readiness),
            other => Err(StoreError::storage(
                "asking the leader how far a learner has caught up",
                format!("unexpected answer {other:?}"),
            )),
        }
    }

    /// Gives member `id` new peer URLs (etcd's MemberUpdate), through the
    /// log so that every member lists them and reaches it there. Answers
    /// with every member after the change.
    pub async fn update_member(&self, id: u64, peer_urls: Vec<String>) -> Result<Vec<Member>> {
        self.linearize().await?;
        let members = self.members()?;
        if !members.iter().any(|m| m.id == id) {
            return Err(StoreError::MemberNotFound);
        }
        if peer_urls.is_empty() {
            return Err(StoreError::InvalidConfig(
                "a member needs at least one peer URL".into(),
            ));
        }
        let tls = self.inner.config.peer_tls.is_some();
        let mut urls = Vec::with_capacity(peer_urls.len());
        for url in &peer_urls {
            urls.push(peer_url(parse_peer_url(url)?, tls));
        }
        for member in members.iter().filter(|m| m.id != id) {
            if let Some(url) = member.peer_urls.iter().find(|u| urls.contains(u)) {
                return Err(StoreError::PeerUrlExists(url.clone()));
            }
        }
        let command = crate::command::Command::UpdateMember {
            id,
            peer_urls: urls,
        };
        match self.propose(command).await? {
            crate::mvcc::CommandResult::UpdateMember(Some(_)) => self.members(),
            // Removed meanwhile.
            crate::mvcc::CommandResult::UpdateMember(None) => Err(StoreError::MemberNotFound),
            other => Err(StoreError::storage(
                "updating a member",
                format!("unexpected result {other:?}"),
            )),
        }
    }

    /// Removes member `id` from the cluster (on any member; it is
    /// forwarded to the leader). Returns the voters after the change.
    pub async fn remove_member(&self, id: u64) -> Result<Vec<u64>> {
        if !self.members()?.iter().any(|m| m.id == id) {
            return Err(StoreError::MemberNotFound);
        }
        let member = Member {
            id,
            ..Member::default()
        };
        let change = crate::raft::membership_change(&member, false)?;
        self.ask_driver(|reply| DriverRequest::ChangeMembership(change, reply))
            .await
    }
}

/// Tells the cluster this member's name and client URLs once a leader is
/// known, and again whenever the member list shows something else.
pub(crate) async fn publish_loop(
    inner: std::sync::Weak<super::Inner>,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    let mut interval = tokio::time::interval(std::time::Duration::from_millis(500));
    loop {
        tokio::select! {
            _ = interval.tick() => {}
            _ = shutdown.changed() => return,
        }
        let Some(inner) = inner.upgrade() else { return };
        let store = Store { inner };
        if store.leader_id() == 0 || store.inner.leadership.removed.load(Ordering::Acquire) {
            continue;
        }
        let name = store.inner.config.name.clone();
        let client_urls = store.inner.config.client_urls.clone();
        let recorded = store
            .inner
            .kv
            .member_registry()
            .ok()
            .and_then(|r| r.into_iter().find(|m| m.id == store.member_id()));
        if recorded.is_some_and(|m| m.name == name && m.client_urls == client_urls) {
            continue;
        }
        let command = crate::command::Command::PublishMember {
            id: store.member_id(),
            name,
            client_urls,
        };
        if let Err(err) = store.propose(command).await {
            tracing::debug!(error = %err, "publishing this member's attributes; will retry");
        }
    }
}
