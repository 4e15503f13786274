//! Who is in the cluster and how this member is doing: the member list
//! (etcd's Cluster service) and the status (etcd's Maintenance.Status).

use std::sync::atomic::Ordering;

use serde::{Deserialize, Serialize};

use super::Store;
use crate::error::Result;
use crate::mvcc::kvstore::META_CONF_STATE;

/// A member of the cluster, as `MemberList` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Member {
    pub id: u64,
    /// Empty until the member has started and told the cluster its name.
    pub name: String,
    pub peer_urls: Vec<String>,
    pub client_urls: Vec<String>,
    pub is_learner: bool,
}

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
    /// Bytes the state machine takes on disk.
    pub db_size: u64,
    pub is_learner: bool,
}

impl Store {
    pub fn cluster_id(&self) -> u64 {
        self.inner.cluster_id
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
            db_size: self.inner.db.size_on_disk().unwrap_or(0),
            is_learner: false,
        }
    }

    /// Every member of the cluster as of what this member has applied.
    pub fn members(&self) -> Result<Vec<Member>> {
        let conf_state = match self.inner.kv.tree.get(META_CONF_STATE)? {
            Some(bytes) => crate::raft::decode_conf_state(&bytes)?,
            None => raft::eraftpb::ConfState::default(),
        };
        let founders = self
            .inner
            .config
            .cluster
            .as_ref()
            .map(|c| c.initial_cluster.clone())
            .unwrap_or_default();
        let mut voters: Vec<(u64, bool)> = conf_state.voters.iter().map(|&id| (id, false)).collect();
        voters.extend(conf_state.learners.iter().map(|&id| (id, true)));
        if voters.is_empty() {
            voters.push((self.member_id(), false));
        }
        let mut members = Vec::new();
        for (id, is_learner) in voters {
            let founder = founders
                .iter()
                .find(|(name, _)| super::cluster::member_id(name) == id);
            let mut member = Member {
                id,
                is_learner,
                ..Member::default()
            };
            if let Some((name, addr)) = founder {
                member.name = name.clone();
                member.peer_urls = vec![format!("http://{addr}")];
            }
            if id == self.member_id() {
                member.client_urls = self.inner.config.client_urls.clone();
                if member.name.is_empty() {
                    member.name = self.inner.config.name.clone();
                }
            }
            members.push(member);
        }
        Ok(members)
    }
}

impl Store {
    /// Adds a member that will listen for peers at `peer_urls`; answers
    /// with the new member (its ID assigned here) and every member after
    /// the change. The new member then starts with the cluster's
    /// `--initial-cluster` plus itself, joining an existing cluster.
    pub async fn add_member(
        &self,
        peer_urls: Vec<String>,
        is_learner: bool,
    ) -> Result<(Member, Vec<Member>)> {
        let _ = (peer_urls, is_learner);
        Err(crate::error::StoreError::InvalidConfig(
            "adding members is being built".into(),
        ))
    }
}
