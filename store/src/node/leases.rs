//! Leases as the leader sees them. Keep-alive, time-to-live and the lease
//! list are answered from the leader's lessor, since only its clock
//! decides expiry: a follower forwards them to the leader over the peer
//! port (as etcd does), trying again through a leader change. Grants and
//! revokes are not here: they go through the log.

use std::net::SocketAddr;
use std::sync::Weak;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, watch};

use super::{Inner, Store};
use crate::api::{LeaseKeepAliveResponse, LeaseLeasesResponse, LeaseTimeToLiveResponse};
use crate::command::Command;
use crate::error::{Result, StoreError};
use crate::raft::lease_forward::{LeaseAnswer, LeaseConnection, LeaseQuery};

/// How long a follower waits before asking again (no leader yet, the
/// leader unreachable or no longer leading).
const RETRY: Duration = Duration::from_millis(50);
/// Idle connections to the leader kept for the next forwarded request.
const IDLE_CONNECTIONS: usize = 8;
/// Forwarded requests waiting for this member before its peers wait.
pub(crate) const FORWARDED_QUEUE: usize = 1024;

/// Forwarded requests arriving from the transport, each with its reply.
pub(crate) type Forwarded = mpsc::Receiver<(LeaseQuery, oneshot::Sender<LeaseAnswer>)>;

/// A follower's connections to the leader's peer port.
#[derive(Default)]
pub(crate) struct LeaderLink {
    /// The leader's ID and peer address, as last looked up.
    leader: Option<(u64, SocketAddr)>,
    idle: Vec<LeaseConnection>,
}

impl Store {
    /// Renews a lease to its full TTL from now, on the leader (which alone
    /// decides expiry); a follower forwards the renewal to it.
    pub async fn lease_keep_alive(&self, id: i64) -> Result<LeaseKeepAliveResponse> {
        match self.ask_leader(LeaseQuery::Renew { id }).await? {
            LeaseAnswer::Renewed { ttl } => Ok(LeaseKeepAliveResponse {
                header: self.inner.kv.header(),
                id,
                ttl,
            }),
            other => Err(answer_error(other)),
        }
    }

    /// Remaining and granted TTL as the leader knows them; `ttl` -1 when
    /// the lease does not exist (expired or revoked), as etcd answers.
    pub async fn lease_time_to_live(
        &self,
        id: i64,
        with_keys: bool,
    ) -> Result<LeaseTimeToLiveResponse> {
        let query = LeaseQuery::TimeToLive {
            id,
            keys: with_keys,
        };
        let answer = self.ask_leader(query).await?;
        let header = self.inner.kv.header();
        match answer {
            LeaseAnswer::TimeToLive {
                granted_ttl,
                ttl,
                keys,
            } => Ok(LeaseTimeToLiveResponse {
                header,
                id,
                ttl,
                granted_ttl,
                keys,
            }),
            LeaseAnswer::NotFound => Ok(LeaseTimeToLiveResponse {
                header,
                id,
                ttl: -1,
                ..Default::default()
            }),
            other => Err(answer_error(other)),
        }
    }

    /// Every lease, as the leader holds them. Without a reachable leader
    /// the applied grants and revokes of this member answer, as etcd's
    /// members always do.
    pub async fn lease_leases(&self) -> Result<LeaseLeasesResponse> {
        let mut leases = None;
        if self.leader_id() != 0 {
            match self.ask_leader(LeaseQuery::Leases).await {
                Ok(LeaseAnswer::Leases(ids)) => leases = Some(ids),
                Ok(other) => return Err(answer_error(other)),
                Err(err) => tracing::debug!(error = %err, "listing leases on the leader"),
            }
        }
        Ok(LeaseLeasesResponse {
            header: self.inner.kv.header(),
            leases: leases.unwrap_or_else(|| self.inner.lessor.ids()),
        })
    }

    /// The leader's answer to `query`: this member's own while it leads,
    /// else the leader's over the peer port, asked again through a leader
    /// change until the request timeout.
    pub(super) async fn ask_leader(&self, query: LeaseQuery) -> Result<LeaseAnswer> {
        let deadline = tokio::time::Instant::now() + self.inner.config.request_timeout;
        loop {
            let leader = self.leader_id();
            if leader != 0 && leader == self.member_id() {
                match self.answer_as_leader(&query).await? {
                    LeaseAnswer::NotLeader => {}
                    answer => return Ok(answer),
                }
            } else if leader != 0 {
                match self.forward(leader, &query).await {
                    // Stopping or demoted: its successor will answer.
                    Ok(LeaseAnswer::NotLeader) => {}
                    Ok(LeaseAnswer::Failed(why)) => {
                        tracing::debug!(leader = format_args!("{leader:x}"), error = %why, "the leader could not answer a lease request; trying again");
                    }
                    Ok(answer) => return Ok(answer),
                    Err(err) => {
                        tracing::debug!(leader = format_args!("{leader:x}"), error = %err, "forwarding a lease request to the leader; trying again");
                    }
                }
            }
            if tokio::time::Instant::now() + RETRY >= deadline {
                return Err(match leader {
                    0 => StoreError::NoLeader,
                    _ => StoreError::Timeout,
                });
            }
            tokio::time::sleep(RETRY).await;
        }
    }

    /// Answers `query` from this member's lessor if it leads;
    /// [`LeaseAnswer::NotLeader`] if it does not.
    pub(crate) async fn answer_as_leader(&self, query: &LeaseQuery) -> Result<LeaseAnswer> {
        if !self.is_leader() {
            return Ok(LeaseAnswer::NotLeader);
        }
        let mut answer = self.answer_from_lessor(query).await?;
        if answer == LeaseAnswer::NotFound {
            // A lease granted through a follower may be committed and not
            // yet applied here (etcd's waitAppliedIndex).
            self.linearize().await?;
            answer = self.answer_from_lessor(query).await?;
        }
        // Demoted meanwhile: this lessor's clock no longer counts.
        if !self.is_leader() {
            return Ok(LeaseAnswer::NotLeader);
        }
        Ok(answer)
    }

    async fn answer_from_lessor(&self, query: &LeaseQuery) -> Result<LeaseAnswer> {
        let lessor = &self.inner.lessor;
        Ok(match *query {
            LeaseQuery::Renew { id } => match self.renew_as_leader(id).await {
                Ok(ttl) => LeaseAnswer::Renewed { ttl },
                Err(StoreError::LeaseNotFound) => LeaseAnswer::NotFound,
                Err(err) => return Err(err),
            },
            LeaseQuery::TimeToLive { id, keys } => match lessor.time_to_live(id) {
                Some((granted_ttl, ttl, attached)) => LeaseAnswer::TimeToLive {
                    granted_ttl,
                    ttl,
                    keys: if keys { attached } else { Vec::new() },
                },
                None => LeaseAnswer::NotFound,
            },
            LeaseQuery::Leases => LeaseAnswer::Leases(lessor.ids()),
            LeaseQuery::HashKv { revision } => return self.answer_hash_kv(revision).await,
            LeaseQuery::LearnerReadiness { id } => match self
                .ask_driver(|reply| super::driver::DriverRequest::LearnerReadiness(id, reply))
                .await
            {
                Ok(readiness) => LeaseAnswer::LearnerReadiness(readiness),
                Err(StoreError::NotLeader) => LeaseAnswer::NotLeader,
                Err(err) => return Err(err),
            },
        })
    }

    /// Renewal on the leader is a matter of its clock, as in etcd; only a
    /// stale checkpoint goes through the log.
    async fn renew_as_leader(&self, id: i64) -> Result<i64> {
        let (ttl, stale_checkpoint) = self.inner.lessor.renew(id)?;
        if stale_checkpoint {
            // A restart must not resume from the old, shorter remaining TTL.
            let checkpoints = vec![(id, 0)];
            self.propose(Command::LeaseCheckpoint { checkpoints })
                .await?;
        }
        Ok(ttl)
    }

    /// Asks member `leader` over a pooled connection to its peer port.
    async fn forward(&self, leader: u64, query: &LeaseQuery) -> std::io::Result<LeaseAnswer> {
        let addr = self.leader_peer_addr(leader)?;
        let pooled = {
            let mut link = self.inner.leader_link.lock();
            link.idle.retain(|c| c.addr() == addr);
            link.idle.pop()
        };
        let answer = match pooled {
            Some(mut connection) => match connection.ask(query).await {
                Ok(answer) => Ok((answer, connection)),
                // The leader restarted, or the connection sat idle too long:
                // the others are as old, so start afresh at once.
                Err(_) => {
                    self.inner.leader_link.lock().idle.clear();
                    self.ask_on_new_connection(addr, query).await
                }
            },
            None => self.ask_on_new_connection(addr, query).await,
        };
        let (answer, connection) = answer.inspect_err(|_| {
            // The address may have changed: look it up again next time.
            self.inner.leader_link.lock().leader = None;
        })?;
        let mut link = self.inner.leader_link.lock();
        if link.idle.len() < IDLE_CONNECTIONS {
            link.idle.push(connection);
        }
        Ok(answer)
    }

    async fn ask_on_new_connection(
        &self,
        addr: SocketAddr,
        query: &LeaseQuery,
    ) -> std::io::Result<(LeaseAnswer, LeaseConnection)> {
        let mut connection = LeaseConnection::open(
            addr,
            self.cluster_id(),
            self.member_id(),
            self.inner.config.peer_tls.as_ref(),
        )
        .await?;
        let answer = connection.ask(query).await?;
        Ok((answer, connection))
    }

    /// Where member `leader` listens for peers, as the member list says.
    fn leader_peer_addr(&self, leader: u64) -> std::io::Result<SocketAddr> {
        if let Some((id, addr)) = self.inner.leader_link.lock().leader {
            if id == leader {
                return Ok(addr);
            }
        }
        let members = self.members().map_err(std::io::Error::other)?;
        let addr = members
            .iter()
            .find(|m| m.id == leader)
            .and_then(|m| {
                m.peer_urls
                    .iter()
                    .find_map(|url| super::members::parse_peer_url(url).ok())
            })
            .ok_or_else(|| {
                std::io::Error::other(format!("no peer URL is known for leader {leader:x}"))
            })?;
        self.inner.leader_link.lock().leader = Some((leader, addr));
        Ok(addr)
    }
}

/// A member's leases answer refused or unexpected for what was asked.
fn answer_error(answer: LeaseAnswer) -> StoreError {
    match answer {
        LeaseAnswer::NotFound => StoreError::LeaseNotFound,
        LeaseAnswer::Failed(why) => StoreError::storage("asking the leader about a lease", why),
        other => StoreError::storage(
            "asking the leader about a lease",
            format!("unexpected answer {other:?}"),
        ),
    }
}

/// Answers the lease requests followers forward to this member, each on a
/// task of its own, until the member stops.
pub(crate) async fn serve_forwarded(
    inner: Weak<Inner>,
    mut requests: Forwarded,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        let (query, reply) = tokio::select! {
            request = requests.recv() => match request {
                Some(request) => request,
                None => return,
            },
            _ = shutdown.changed() => return,
        };
        let Some(inner) = inner.upgrade() else { return };
        let store = Store { inner };
        tokio::spawn(async move {
            let answer = match query {
                // Every member answers for its own state.
                LeaseQuery::HashKv { revision } => store.answer_hash_kv(revision).await,
                query => store.answer_as_leader(&query).await,
            }
            .unwrap_or_else(|err| LeaseAnswer::Failed(err.to_string()));
            let _ = reply.send(answer);
        });
    }
}
