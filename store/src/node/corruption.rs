//! The periodic corruption check (etcd's --experimental-corrupt-check-time):
//! the leader hashes its key history (HashKV), asks every other member
//! for its hash at the same revision over the peer port, hashes again
//! after a read index, and raises CORRUPT for a member whose history
//! disagrees; every member then refuses writes until an operator disarms
//! it. Not a repair: which copy is right is the operator's call.

use std::sync::Weak;
use std::time::Duration;

use tokio::sync::watch;

use super::{Inner, Store};
use crate::command::Command;
use crate::error::{Result, StoreError};
use crate::mvcc::alarm;
use crate::mvcc::hash::KvHash;
use crate::raft::lease_forward::{LeaseAnswer, LeaseConnection, LeaseQuery, PeerHash};

impl Store {
    /// This member's HashKV through `revision`, for the leader's check.
    pub(crate) async fn answer_hash_kv(&self, revision: i64) -> Result<LeaseAnswer> {
        let hash = self.hash_kv(revision).await?;
        Ok(LeaseAnswer::HashKv(PeerHash {
            hash: hash.hash,
            compact_revision: hash.compact_revision,
            hash_revision: hash.hash_revision,
            current_revision: hash.current_revision,
        }))
    }

    /// etcd's HashKV of this member through `revision` (0: its current
    /// one), computed off the async threads.
    pub async fn hash_kv(&self, revision: i64) -> Result<KvHash> {
        let kv = std::sync::Arc::clone(&self.inner.kv);
        tokio::task::spawn_blocking(move || kv.hash_kv(revision))
            .await
            .map_err(|e| StoreError::storage("hashing the key history", e))?
    }

    /// One check, on the leader: the members found to disagree with it
    /// (this one included, if its own history changed under the same
    /// revision), each with why. Members that cannot answer are skipped.
    pub(crate) async fn check_peer_hashes(&self) -> Result<Vec<(u64, String)>> {
        let first = self.hash_kv(0).await?;
        let mut peers = Vec::new();
        for member in self.members()? {
            if member.id == self.member_id() {
                continue;
            }
            match self.ask_peer_hash(&member, first.current_revision).await {
                Ok(hash) => peers.push((member.id, hash)),
                Err(why) => tracing::warn!(
                    peer = format_args!("{:x}", member.id),
                    revision = first.current_revision,
                    error = %why,
                    "could not check a peer's hash; it is skipped this time"
                ),
            }
        }
        self.linearize().await?;
        let second = self.hash_kv(0).await?;
        Ok(disagreeing(self.member_id(), &first, &second, &peers))
    }

    async fn ask_peer_hash(
        &self,
        member: &crate::api::Member,
        revision: i64,
    ) -> std::result::Result<PeerHash, String> {
        let addr = member
            .peer_urls
            .iter()
            .find_map(|url| super::members::parse_peer_url(url).ok())
            .ok_or("no peer URL is known")?;
        let mut connection = LeaseConnection::open(
            addr,
            self.cluster_id(),
            self.member_id(),
            self.inner.config.peer_tls.as_ref(),
        )
        .await
        .map_err(|e| e.to_string())?;
        match connection
            .ask(&LeaseQuery::HashKv { revision })
            .await
            .map_err(|e| e.to_string())?
        {
            LeaseAnswer::HashKv(hash) => Ok(hash),
            LeaseAnswer::Failed(why) => Err(why),
            other => Err(format!("unexpected answer {other:?}")),
        }
    }

    /// Raises CORRUPT for `member`, through the log.
    async fn raise_corrupt(&self, member: u64) -> Result<()> {
        let raised = self
            .inner
            .kv
            .alarms(alarm::CORRUPT)
            .iter()
            .any(|a| a.member_id == member);
        if raised {
            return Ok(());
        }
        let command = Command::Alarm {
            activate: true,
            member_id: member,
            alarm: alarm::CORRUPT,
        };
        let raising = super::send_proposal(&self.inner.requests, command.encode(), None);
        tokio::time::timeout(self.inner.config.request_timeout, raising)
            .await
            .map_err(|_| StoreError::Timeout)??;
        Ok(())
    }
}

/// etcd's verdict (`checkHashKV`) on the leader's hashes before and after
/// asking its peers at `first`'s revision, and the peers' answers: the
/// leader itself disagrees if its history hashed differently at the same
/// revision and compaction; a peer disagrees if it is ahead of the leader
/// (revision or compaction), or if at the same compaction its hash
/// differs.
pub(crate) fn disagreeing(
    leader: u64,
    first: &KvHash,
    second: &KvHash,
    peers: &[(u64, PeerHash)],
) -> Vec<(u64, String)> {
    let mut found = Vec::new();
    if second.hash != first.hash
        && second.current_revision == first.current_revision
        && second.compact_revision == first.compact_revision
    {
        found.push((
            leader,
            format!(
                "its own hash changed from {} to {} at revision {}",
                first.hash, second.hash, first.current_revision
            ),
        ));
    }
    for (id, peer) in peers {
        let why = if peer.current_revision > second.current_revision {
            format!(
                "its revision {} is past the leader's {}",
                peer.current_revision, second.current_revision
            )
        } else if peer.compact_revision > second.compact_revision {
            format!(
                "its compaction revision {} is past the leader's {}",
                peer.compact_revision, second.compact_revision
            )
        } else if peer.compact_revision == first.compact_revision && peer.hash != first.hash {
            format!(
                "its hash {} at revision {} differs from the leader's {}",
                peer.hash, peer.hash_revision, first.hash
            )
        } else {
            continue;
        };
        found.push((*id, why));
    }
    found
}

/// Checks the members' hashes every `every` while this member leads,
/// until the member stops.
pub(crate) async fn run(inner: Weak<Inner>, every: Duration, mut shutdown: watch::Receiver<bool>) {
    tracing::info!(
        interval_ms = every.as_millis() as u64,
        "periodic corruption check enabled"
    );
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.changed() => return,
        }
        let Some(inner) = inner.upgrade() else { return };
        let store = Store { inner };
        if !store.is_leader() {
            continue;
        }
        let found = match store.check_peer_hashes().await {
            Ok(found) => found,
            Err(err) => {
                tracing::warn!(error = %err, "the corruption check could not run; it runs again next time");
                continue;
            }
        };
        if found.is_empty() {
            tracing::debug!("corruption check passed: every member's history agrees");
        }
        for (member, why) in found {
            tracing::error!(
                member = format_args!("{member:x}"),
                why = %why,
                "found data inconsistency between members; raising CORRUPT"
            );
            if let Err(err) = store.raise_corrupt(member).await {
                tracing::warn!(error = %err, "could not raise CORRUPT; the next check tries again");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn local(hash: u32, revision: i64, compacted: i64) -> KvHash {
        KvHash {
            hash,
            compact_revision: compacted,
            hash_revision: revision,
            current_revision: revision,
        }
    }

    fn peer(hash: u32, revision: i64, compacted: i64, current: i64) -> PeerHash {
        PeerHash {
            hash,
            compact_revision: compacted,
            hash_revision: revision,
            current_revision: current,
        }
    }

    fn ids(found: Vec<(u64, String)>) -> Vec<u64> {
        found.into_iter().map(|(id, _)| id).collect()
    }

    #[test]
    fn members_that_agree_raise_nothing() {
        let leader = local(0xabc, 10, 4);
        // The leader moved on meanwhile: its second hash covers more.
        let after = local(0xdef, 12, 4);
        let peers = [(2, peer(0xabc, 10, 4, 10)), (3, peer(0xabc, 10, 4, 11))];
        assert!(disagreeing(1, &leader, &after, &peers).is_empty());
        // A peer behind on compaction is not compared (its hash covers
        // history the leader dropped).
        let behind = [(2, peer(0x123, 10, 2, 10))];
        assert!(disagreeing(1, &leader, &after, &behind).is_empty());
    }

    #[test]
    fn a_peer_with_another_history_is_found() {
        let leader = local(0xabc, 10, 4);
        let peers = [(2, peer(0xabc, 10, 4, 10)), (3, peer(0x999, 10, 4, 10))];
        let found = disagreeing(1, &leader, &leader, &peers);
        assert_eq!(ids(found.clone()), [3]);
        assert!(found[0].1.contains("differs"), "{}", found[0].1);
    }

    #[test]
    fn a_peer_ahead_of_the_leader_is_found() {
        let leader = local(0xabc, 10, 4);
        let ahead = [(2, peer(0xabc, 10, 4, 11))];
        assert_eq!(ids(disagreeing(1, &leader, &leader, &ahead)), [2]);
        let compacted_further = [(3, peer(0xabc, 10, 6, 10))];
        assert_eq!(
            ids(disagreeing(1, &leader, &leader, &compacted_further)),
            [3]
        );
    }

    #[test]
    fn a_leader_whose_history_changed_under_it_finds_itself() {
        let first = local(0xabc, 10, 4);
        let second = local(0xabd, 10, 4);
        assert_eq!(ids(disagreeing(1, &first, &second, &[])), [1]);
        // A compaction in between changes the hash legitimately.
        let compacted = local(0xabd, 10, 6);
        assert!(disagreeing(1, &first, &compacted, &[]).is_empty());
    }
}
