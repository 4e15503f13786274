//! The one client both systems get: tonic channels (each its own HTTP/2
//! connection) to every member, readiness through Maintenance.Status, and
//! the pool of channels a workload's request streams share.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use skiff_store::grpc::pb::etcdserverpb::{maintenance_client::MaintenanceClient, StatusRequest};
use tonic::transport::{Channel, Endpoint};

/// How long one Status call may take while waiting for a member.
const STATUS_TIMEOUT: Duration = Duration::from_secs(1);
/// Pause between two readiness checks.
const RETRY_PAUSE: Duration = Duration::from_millis(50);

/// Which members the workloads send their requests to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Target {
    /// Every request to the leader (writes need no forwarding).
    Leader,
    /// Requests spread over every member, round robin (followers forward
    /// writes to the leader, as with a client given every endpoint).
    All,
}

impl Target {
    pub fn describe(self) -> &'static str {
        match self {
            Target::Leader => "every request (puts, gets, watches) sent to the leader",
            Target::All => "requests spread round robin over every member (followers forward writes to the leader)",
        }
    }
}

/// One member's address and connections.
pub struct MemberClient {
    pub name: String,
    pub addr: SocketAddr,
    channels: Vec<Channel>,
}

/// Connections to every member of a running cluster, and which one leads.
pub struct Endpoints {
    members: Vec<MemberClient>,
    leader: usize,
}

impl Endpoints {
    /// Waits (up to `timeout`) until every member answers Status and all
    /// name the same leader, then opens `connections` channels to each.
    pub async fn connect(
        addrs: &[(String, SocketAddr)],
        connections: usize,
        timeout: Duration,
    ) -> Result<Endpoints> {
        let deadline = Instant::now() + timeout;
        let leader_id = wait_for_leader(addrs, deadline).await?;
        let mut members = Vec::with_capacity(addrs.len());
        let mut leader = None;
        for (name, addr) in addrs {
            let mut channels = Vec::with_capacity(connections);
            for _ in 0..connections {
                channels.push(open(*addr).await?);
            }
            let status = status(&channels[0]).await?;
            if status.0 == leader_id {
                leader = Some(members.len());
            }
            members.push(MemberClient {
                name: name.clone(),
                addr: *addr,
                channels,
            });
        }
        let leader = leader.context("no member reported the leader's member ID as its own")?;
        Ok(Endpoints { members, leader })
    }

    pub fn leader(&self) -> &MemberClient {
        &self.members[self.leader]
    }

    /// The channels a workload shares: the leader's, or every member's
    /// interleaved so that request stream i lands on member i mod n.
    pub fn pool(&self, target: Target) -> Vec<Channel> {
        match target {
            Target::Leader => self.leader().channels.clone(),
            Target::All => {
                let per_member = self.members[0].channels.len();
                (0..per_member)
                    .flat_map(|c| self.members.iter().map(move |m| m.channels[c].clone()))
                    .collect()
            }
        }
    }

    /// Whether the leader is still the one found at start.
    pub async fn leader_moved(&self) -> Option<String> {
        let (id, leader) = status(&self.leader().channels[0]).await.ok()?;
        (id != leader).then(|| {
            format!(
                "WARNING: the leadership moved away from {} during the run; figures after that include an election",
                self.leader().name
            )
        })
    }
}

/// Polls every member until all answer and agree on a leader; returns its ID.
async fn wait_for_leader(addrs: &[(String, SocketAddr)], deadline: Instant) -> Result<u64> {
    let mut channels: Vec<Option<Channel>> = vec![None; addrs.len()];
    loop {
        let last_problem = match poll_leader(addrs, &mut channels).await {
            Ok(Some(leader)) => return Ok(leader),
            Ok(None) => "the members do not agree on a leader yet".to_string(),
            Err(err) => format!("{err:#}"),
        };
        if Instant::now() >= deadline {
            bail!("the members did not become ready: {last_problem}");
        }
        tokio::time::sleep(RETRY_PAUSE).await;
    }
}

/// One round of Status calls: the leader every member names, if they agree.
async fn poll_leader(
    addrs: &[(String, SocketAddr)],
    channels: &mut [Option<Channel>],
) -> Result<Option<u64>> {
    let mut leaders = Vec::with_capacity(addrs.len());
    for ((name, addr), channel) in addrs.iter().zip(channels.iter_mut()) {
        if channel.is_none() {
            *channel = Some(open(*addr).await.with_context(|| name.clone())?);
        }
        let Some(channel) = channel.as_ref() else {
            continue;
        };
        let (_, leader) = status(channel).await.with_context(|| name.clone())?;
        leaders.push(leader);
    }
    let first = leaders[0];
    Ok((first != 0 && leaders.iter().all(|&l| l == first)).then_some(first))
}

/// A new HTTP/2 connection to a member's client address.
pub async fn open(addr: SocketAddr) -> Result<Channel> {
    Endpoint::from_shared(format!("http://{addr}"))
        .context("building a client endpoint")?
        .tcp_nodelay(true)
        .connect_timeout(STATUS_TIMEOUT)
        .connect()
        .await
        .with_context(|| format!("connecting to {addr}"))
}

/// (this member's ID, the leader's ID) from Maintenance.Status.
async fn status(channel: &Channel) -> Result<(u64, u64)> {
    let mut client = MaintenanceClient::new(channel.clone());
    let response = tokio::time::timeout(STATUS_TIMEOUT, client.status(StatusRequest {}))
        .await
        .context("Status did not answer in time")?
        .context("Status failed")?
        .into_inner();
    let member = response.header.map(|h| h.member_id).unwrap_or_default();
    Ok((member, response.leader))
}
