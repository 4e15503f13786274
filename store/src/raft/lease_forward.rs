//! Lease requests a follower forwards to the leader over the peer port,
//! as etcd forwards them over HTTP to the leader's peer URL: renewals and
//! remaining TTLs are the leader's to answer, since only its clock decides
//! expiry. The same way, a follower asks how far a learner has caught up
//! before promoting it: only the leader tracks the learner's log; and the
//! leader asks every member for its HashKV in the corruption check, as
//! etcd's leader asks its peers' `/members/hashkv`. A connection, opened
//! with its own magic after the usual handshake, carries one request and
//! its answer at a time, then the next. Not for anything that changes
//! stored state: that goes through the log.

use std::net::SocketAddr;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::sync::{mpsc, oneshot, watch};

use super::transport::{dial, PeerStream, PeerTls};

pub(crate) const LEASE_MAGIC: &[u8; 8] = b"SKIFFLSE";
/// The largest request or answer (a time-to-live with many keys).
const MAX_LEASE_FRAME: u32 = 64 * 1024 * 1024;
/// How long one forwarded request may take on the wire.
const ASK_TIMEOUT: Duration = Duration::from_secs(5);

/// What a follower asks the leader.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum LeaseQuery {
    /// A keep-alive: renew lease `id` to its full TTL from now.
    Renew { id: i64 },
    /// Granted and remaining TTL of lease `id`, with its keys if asked.
    TimeToLive { id: i64, keys: bool },
    /// Every lease the leader holds.
    Leases,
    /// How far member `id`'s log matches the leader's (MemberPromote).
    LearnerReadiness { id: u64 },
    /// The member's HashKV through `revision`, asked by the leader of any
    /// member (the corruption check).
    HashKv { revision: i64 },
}

/// A member's HashKV, as it answers the leader's corruption check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerHash {
    pub hash: u32,
    pub compact_revision: i64,
    pub hash_revision: i64,
    /// The member's revision when it hashed.
    pub current_revision: i64,
}

/// What the leader answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum LeaseAnswer {
    Renewed {
        ttl: i64,
    },
    TimeToLive {
        granted_ttl: i64,
        ttl: i64,
        keys: Vec<Vec<u8>>,
    },
    Leases(Vec<i64>),
    /// `None`: the leader tracks no such member.
    LearnerReadiness(Option<super::Readiness>),
    HashKv(PeerHash),
    /// No such lease (never granted, revoked, or expired).
    NotFound,
    /// The member asked does not lead (any more): ask the leader again.
    NotLeader,
    /// The leader could not answer; why.
    Failed(String),
}

/// Where the transport hands forwarded requests, each with its reply.
pub type LeaseHandler = mpsc::Sender<(LeaseQuery, oneshot::Sender<LeaseAnswer>)>;

/// Answers forwarded requests on a connection a peer opened (its
/// handshake already read) until the peer hangs up or the member stops.
pub(crate) async fn serve(
    mut reader: BufReader<PeerStream>,
    handler: LeaseHandler,
    mut shutdown: watch::Receiver<bool>,
) -> std::io::Result<()> {
    loop {
        let query: LeaseQuery = tokio::select! {
            query = read_frame(&mut reader) => query?,
            _ = shutdown.changed() => return Ok(()),
        };
        let (reply, answer) = oneshot::channel();
        let answer = match handler.send((query, reply)).await {
            Ok(()) => answer
                .await
                .unwrap_or_else(|_| LeaseAnswer::Failed("the member is stopping".into())),
            Err(_) => LeaseAnswer::Failed("the member is stopping".into()),
        };
        write_frame(reader.get_mut(), &answer).await?;
    }
}

/// A connection to a member's peer port for forwarded lease requests.
pub struct LeaseConnection {
    addr: SocketAddr,
    stream: BufReader<PeerStream>,
}

impl LeaseConnection {
    /// Dials `addr` and introduces this member of `cluster_id`.
    pub async fn open(
        addr: SocketAddr,
        cluster_id: u64,
        member_id: u64,
        tls: Option<&PeerTls>,
    ) -> std::io::Result<LeaseConnection> {
        let mut stream = tokio::time::timeout(ASK_TIMEOUT, dial(addr, tls))
            .await
            .map_err(|_| std::io::Error::other("timed out connecting"))??;
        let mut hello = Vec::with_capacity(24);
        hello.extend_from_slice(LEASE_MAGIC);
        hello.extend_from_slice(&cluster_id.to_le_bytes());
        hello.extend_from_slice(&member_id.to_le_bytes());
        stream.write_all(&hello).await?;
        Ok(LeaseConnection {
            addr,
            stream: BufReader::new(stream),
        })
    }

    /// The peer address this connection reaches.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Sends `query` and waits for its answer. After an error the
    /// connection is unusable: drop it.
    pub async fn ask(&mut self, query: &LeaseQuery) -> std::io::Result<LeaseAnswer> {
        tokio::time::timeout(ASK_TIMEOUT, async {
            write_frame(self.stream.get_mut(), query).await?;
            read_frame(&mut self.stream).await
        })
        .await
        .map_err(|_| std::io::Error::other("the member did not answer in time"))?
    }
}

async fn write_frame(stream: &mut PeerStream, value: &impl Serialize) -> std::io::Result<()> {
    let bytes = bincode::serialize(value).map_err(std::io::Error::other)?;
    let len = u32::try_from(bytes.len())
        .ok()
        .filter(|&len| len <= MAX_LEASE_FRAME)
        .ok_or_else(|| std::io::Error::other("lease message too large"))?;
    let mut frame = Vec::with_capacity(4 + bytes.len());
    frame.extend_from_slice(&len.to_le_bytes());
    frame.extend_from_slice(&bytes);
    stream.write_all(&frame).await?;
    stream.flush().await
}

async fn read_frame<T: serde::de::DeserializeOwned>(
    reader: &mut BufReader<PeerStream>,
) -> std::io::Result<T> {
    let len = reader.read_u32_le().await?;
    if len > MAX_LEASE_FRAME {
        return Err(std::io::Error::other(format!(
            "lease message of {len} bytes"
        )));
    }
    let mut bytes = vec![0u8; len as usize];
    reader.read_exact(&mut bytes).await?;
    bincode::deserialize(&bytes).map_err(std::io::Error::other)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::raft::transport::{Hooks, Transport};

    /// A member's peer port whose lessor knows lease 7 with 10 s left.
    async fn member(cluster_id: u64) -> (Transport, watch::Sender<bool>) {
        let (stop, shutdown) = watch::channel(false);
        let (leases, mut asked) = mpsc::channel(8);
        tokio::spawn(async move {
            while let Some((query, reply)) = asked.recv().await {
                let reply: oneshot::Sender<LeaseAnswer> = reply;
                let _ = reply.send(match query {
                    LeaseQuery::Renew { id: 7 } => LeaseAnswer::Renewed { ttl: 10 },
                    LeaseQuery::Leases => LeaseAnswer::Leases(vec![7]),
                    _ => LeaseAnswer::NotFound,
                });
            }
        });
        let hooks = Hooks {
            inbound: mpsc::channel(1).0,
            reports: mpsc::unbounded_channel().0,
            directory: std::sync::Arc::new(|| (0, Vec::new())),
            tls: None,
            leases,
        };
        let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
        let transport = Transport::start(any, cluster_id, 2, &[], hooks, shutdown)
            .await
            .unwrap();
        (transport, stop)
    }

    #[tokio::test]
    async fn one_connection_carries_request_after_request() {
        let (leader, _stop) = member(7).await;
        let mut connection = LeaseConnection::open(leader.local_addr(), 7, 1, None)
            .await
            .unwrap();
        for _ in 0..3 {
            let renewed = connection.ask(&LeaseQuery::Renew { id: 7 }).await.unwrap();
            assert_eq!(renewed, LeaseAnswer::Renewed { ttl: 10 });
            let query = LeaseQuery::TimeToLive { id: 8, keys: true };
            assert_eq!(connection.ask(&query).await.unwrap(), LeaseAnswer::NotFound);
        }
        let listed = connection.ask(&LeaseQuery::Leases).await.unwrap();
        assert_eq!(listed, LeaseAnswer::Leases(vec![7]));
    }

    #[tokio::test]
    async fn a_member_of_another_cluster_is_not_answered() {
        let (leader, _stop) = member(7).await;
        let mut connection = LeaseConnection::open(leader.local_addr(), 8, 1, None)
            .await
            .unwrap();
        assert!(connection.ask(&LeaseQuery::Leases).await.is_err());
    }

    #[tokio::test]
    async fn a_stopped_member_closes_its_lease_connections() {
        let (leader, stop) = member(7).await;
        let mut connection = LeaseConnection::open(leader.local_addr(), 7, 1, None)
            .await
            .unwrap();
        assert!(connection.ask(&LeaseQuery::Leases).await.is_ok());
        stop.send_replace(true);
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(connection.ask(&LeaseQuery::Leases).await.is_err());
    }
}
