//! The peer transport: Raft messages between members over TCP. Each
//! connection opens with a handshake (magic, cluster ID, sender ID), then
//! carries length-prefixed protobuf messages. Every peer has a bounded
//! outbound queue drained by its own task; a full queue drops messages
//! (raft resends), so a slow or dead peer never blocks the Raft loop.
//!
//! A connection is only trusted while it is seen to work, since a dropped
//! path (a partition, a stopped peer) looks like silence, not like an
//! error, and TCP would wait out its retransmission back-off (minutes)
//! before telling. The sender writes an empty frame (a ping) when it has
//! had nothing to send for [`HEARTBEAT_INTERVAL`]; the receiver answers
//! one byte on the same connection every [`ANSWER_INTERVAL`] in which
//! something arrived. A sender that hears no answer for [`PEER_TIMEOUT`],
//! or whose write makes no progress for as long, drops the connection and
//! redials; a receiver to which nothing arrived for as long hangs up. A
//! peer silent for the timeout is logged once as unreachable, and once
//! more when it answers again.
//!
//! A snapshot (the whole engine state for a member too far behind) does not
//! go through the peer's queue: it gets a connection of its own, opened with
//! another magic, and is streamed in chunks; the receiver answers one byte
//! once it has handed the snapshot to raft, and the sender reports the
//! outcome so raft sends it again after a failure.
//!
//! With [`PeerTls`], every connection is TLS with certificates on both
//! sides: a member accepts only peers whose certificate the store's CA
//! signed, and checks that the peer it dials holds a certificate for the
//! address it dialled.

use std::collections::HashMap;
use std::io::ErrorKind;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use protobuf::Message as _;
use raft::eraftpb::Message;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::lease_forward::LEASE_MAGIC;

/// Opens a stream of Raft messages, answered (see the module comment).
const MAGIC: &[u8; 8] = b"SKIFFRF2";
const SNAPSHOT_MAGIC: &[u8; 8] = b"SKIFFSNP";
/// A member about to join asks for the member list (it has no ID yet).
const MEMBERS_MAGIC: &[u8; 8] = b"SKIFFMBR";
/// Bytes of snapshot data per write.
const SNAPSHOT_CHUNK: usize = 1024 * 1024;
/// The largest snapshot accepted.
const MAX_SNAPSHOT: u64 = 64 * 1024 * 1024 * 1024;
/// How long a snapshot may take to arrive and be taken by raft.
const SNAPSHOT_TIMEOUT: Duration = Duration::from_secs(600);
/// Messages waiting for one peer before new ones are dropped.
const PEER_QUEUE: usize = 4096;
/// The largest message accepted (a batch of entries or a snapshot chunk).
const MAX_FRAME: u32 = 64 * 1024 * 1024;

/// How long a TLS handshake with a peer may take, and how long an
/// accepted connection may take to say what it is.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// A sender that has written nothing for this long writes a ping.
pub const HEARTBEAT_INTERVAL: Duration = Duration::from_millis(100);
/// A receiver answers at most this often, and only when something arrived
/// since its last answer: a sender whose frames are lost on the way hears
/// nothing even while the way back works.
pub const ANSWER_INTERVAL: Duration = Duration::from_millis(100);
/// A connection over which nothing came back (sender) or arrived
/// (receiver) for this long, or on which a write made no progress for as
/// long, is dead. Ten heartbeats: a busy machine that starves the
/// transport that long only costs a redial.
pub const PEER_TIMEOUT: Duration = Duration::from_secs(1);
/// How long dialling a peer (TCP and TLS) may take before the next try.
pub const DIAL_TIMEOUT: Duration = Duration::from_millis(500);
/// The pause between two dials grows from the first to the second, so a
/// healed path is used again within a dial and a pause.
const REDIAL_BACKOFF: (Duration, Duration) =
    (Duration::from_millis(50), Duration::from_millis(250));
/// A ping: a frame of no bytes.
const PING: [u8; 4] = 0u32.to_le_bytes();
/// What a receiver answers.
const ANSWER: [u8; 1] = [1];
/// Bytes per write of a message batch: each write gets [`PEER_TIMEOUT`].
const WRITE_CHUNK: usize = 64 * 1024;

/// TLS between members: the configuration this member accepts peers with
/// (it should require a client certificate) and the one it dials them with
/// (it should present one).
#[derive(Clone)]
pub struct PeerTls {
    acceptor: tokio_rustls::TlsAcceptor,
    connector: tokio_rustls::TlsConnector,
}

impl PeerTls {
    pub fn new(
        server: std::sync::Arc<rustls::ServerConfig>,
        client: std::sync::Arc<rustls::ClientConfig>,
    ) -> PeerTls {
        PeerTls {
            acceptor: server.into(),
            connector: client.into(),
        }
    }
}

impl std::fmt::Debug for PeerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PeerTls")
    }
}

/// A connection to or from a peer: plain TCP or TLS over it.
pub(crate) trait PeerIo: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> PeerIo for T {}
pub(crate) type PeerStream = Box<dyn PeerIo>;

/// Connects to the peer at `addr`, over TLS if configured.
pub(crate) async fn dial(addr: SocketAddr, tls: Option<&PeerTls>) -> std::io::Result<PeerStream> {
    let stream = TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    let Some(tls) = tls else {
        return Ok(Box::new(stream));
    };
    let name = rustls::pki_types::ServerName::IpAddress(addr.ip().into());
    let stream = tokio::time::timeout(HANDSHAKE_TIMEOUT, tls.connector.connect(name, stream))
        .await
        .map_err(|_| std::io::Error::other("TLS handshake timed out"))??;
    Ok(Box::new(stream))
}

/// Takes a connection a peer opened, over TLS if configured.
async fn accept(stream: TcpStream, tls: Option<&PeerTls>) -> std::io::Result<PeerStream> {
    stream.set_nodelay(true)?;
    let Some(tls) = tls else {
        return Ok(Box::new(stream));
    };
    let stream = tokio::time::timeout(HANDSHAKE_TIMEOUT, tls.acceptor.accept(stream))
        .await
        .map_err(|_| std::io::Error::other("TLS handshake timed out"))??;
    Ok(Box::new(stream))
}

/// Whether a snapshot reached a member: (member ID, delivered).
pub type SnapshotReport = (u64, bool);

/// Answers a joining member: the cluster ID and the member list.
pub type Directory = std::sync::Arc<dyn Fn() -> (u64, Vec<crate::api::Member>) + Send + Sync>;

/// Asks the member listening for peers at `addr` for the cluster ID and
/// the member list.
pub async fn ask_members(
    addr: SocketAddr,
    tls: Option<&PeerTls>,
) -> std::io::Result<(u64, Vec<crate::api::Member>)> {
    tokio::time::timeout(Duration::from_secs(5), async {
        let mut stream = dial(addr, tls).await?;
        let mut hello = [0u8; 24];
        hello[..8].copy_from_slice(MEMBERS_MAGIC);
        stream.write_all(&hello).await?;
        stream.flush().await?;
        let len = stream.read_u32_le().await?;
        if len > MAX_FRAME {
            return Err(std::io::Error::other("member list too large"));
        }
        let mut bytes = vec![0u8; len as usize];
        stream.read_exact(&mut bytes).await?;
        bincode::deserialize(&bytes).map_err(std::io::Error::other)
    })
    .await
    .unwrap_or_else(|_| Err(std::io::Error::other("timed out")))
}

/// Where the transport hands what arrives, and what it answers.
pub struct Hooks {
    /// Raft messages from members of this cluster.
    pub inbound: mpsc::Sender<Message>,
    /// Whether snapshots sent reached their member.
    pub reports: mpsc::UnboundedSender<SnapshotReport>,
    /// The member list for a member about to join.
    pub directory: Directory,
    /// TLS with peers, if they use it.
    pub tls: Option<PeerTls>,
    /// Lease requests followers forward to this member as their leader.
    pub leases: super::lease_forward::LeaseHandler,
}

/// A member this one sends to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerMember {
    pub id: u64,
    /// Its name, for logs; empty for a member added but not started yet.
    pub name: String,
    /// Where it listens for peers.
    pub addr: SocketAddr,
}

/// How sending to one peer goes, as its sender sees it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PeerHealth {
    /// The peer answered within [`PEER_TIMEOUT`].
    pub reachable: bool,
    /// Connections made to it: the first, then one per redial.
    pub connections: u64,
    /// Times it stopped answering after it had answered.
    pub disconnects: u64,
    /// Times it answered again after that.
    pub reconnects: u64,
}

pub struct Transport {
    peers: HashMap<u64, Peer>,
    local_addr: SocketAddr,
    cluster_id: u64,
    member_id: u64,
    reports: mpsc::UnboundedSender<SnapshotReport>,
    tls: Option<PeerTls>,
    shutdown: watch::Receiver<bool>,
    runtime: tokio::runtime::Handle,
    tasks: Vec<JoinHandle<()>>,
}

struct Peer {
    addr: SocketAddr,
    queue: mpsc::Sender<Message>,
    /// Stops this peer's sender when the peer is removed.
    stop: watch::Sender<bool>,
    health: watch::Receiver<PeerHealth>,
}

impl Transport {
    /// Listens on `listen` and starts one sender per peer. Messages from
    /// members of this cluster go to `inbound`.
    pub async fn start(
        listen: SocketAddr,
        cluster_id: u64,
        member_id: u64,
        peers: &[PeerMember],
        hooks: Hooks,
        shutdown: watch::Receiver<bool>,
    ) -> std::io::Result<Transport> {
        let Hooks {
            inbound,
            reports,
            directory,
            tls,
            leases,
        } = hooks;
        let listener = TcpListener::bind(listen).await?;
        let local_addr = listener.local_addr()?;
        let tasks = vec![tokio::spawn(accept_loop(
            listener,
            cluster_id,
            Accepted {
                inbound,
                directory,
                leases,
            },
            tls.clone(),
            shutdown.clone(),
        ))];
        let mut transport = Transport {
            peers: HashMap::new(),
            local_addr,
            cluster_id,
            member_id,
            reports,
            tls,
            shutdown,
            runtime: tokio::runtime::Handle::current(),
            tasks,
        };
        for peer in peers {
            transport.add_peer(peer.clone());
        }
        Ok(transport)
    }

    /// Starts sending to `peer` (a member added to the cluster); a known
    /// member's address is updated.
    pub fn add_peer(&mut self, peer: PeerMember) {
        let id = peer.id;
        if id == self.member_id || self.peers.get(&id).is_some_and(|p| p.addr == peer.addr) {
            return;
        }
        self.remove_peer(id);
        let addr = peer.addr;
        let (queue, rx) = mpsc::channel(PEER_QUEUE);
        let (stop, stopped) = watch::channel(false);
        let (health_tx, health) = watch::channel(PeerHealth::default());
        let sender = PeerSender {
            peer,
            cluster_id: self.cluster_id,
            member_id: self.member_id,
            tls: self.tls.clone(),
            queue: rx,
            health: health_tx,
            last_answer: None,
        };
        let task = self
            .runtime
            .spawn(sender.run(self.shutdown.clone(), stopped));
        self.tasks.retain(|t| !t.is_finished());
        self.tasks.push(task);
        self.peers.insert(
            id,
            Peer {
                addr,
                queue,
                stop,
                health,
            },
        );
    }

    /// Stops sending to member `id` (removed from the cluster).
    pub fn remove_peer(&mut self, id: u64) {
        if let Some(peer) = self.peers.remove(&id) {
            peer.stop.send_replace(true);
        }
    }

    /// The peer address of member `id`, if it is a peer.
    pub fn peer_addr(&self, id: u64) -> Option<SocketAddr> {
        self.peers.get(&id).map(|p| p.addr)
    }

    /// How sending to member `id` goes, as it changes.
    pub fn health(&self, id: u64) -> Option<watch::Receiver<PeerHealth>> {
        self.peers.get(&id).map(|p| p.health.clone())
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Queues a message for its peer without waiting. Returns false when it
    /// was dropped (unknown peer, or its queue is full).
    pub fn send(&self, message: Message) -> bool {
        let Some(peer) = self.peers.get(&message.to) else {
            return false;
        };
        if message.get_msg_type() == raft::eraftpb::MessageType::MsgSnapshot {
            self.runtime.spawn(send_snapshot(
                peer.addr,
                self.cluster_id,
                self.member_id,
                self.tls.clone(),
                message,
                self.reports.clone(),
            ));
            return true;
        }
        peer.queue.try_send(message).is_ok()
    }

    pub fn take_tasks(&mut self) -> Vec<JoinHandle<()>> {
        std::mem::take(&mut self.tasks)
    }
}

/// Where what arrives on accepted connections goes.
#[derive(Clone)]
struct Accepted {
    inbound: mpsc::Sender<Message>,
    directory: Directory,
    leases: super::lease_forward::LeaseHandler,
}

async fn accept_loop(
    listener: TcpListener,
    cluster_id: u64,
    accepted_by: Accepted,
    tls: Option<PeerTls>,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = shutdown.changed() => return,
        };
        match accepted {
            Ok((stream, addr)) => {
                let accepted_by = accepted_by.clone();
                let shutdown = shutdown.clone();
                let tls = tls.clone();
                tokio::spawn(async move {
                    let stream = match accept(stream, tls.as_ref()).await {
                        Ok(stream) => stream,
                        Err(err) => {
                            tracing::warn!(peer = %addr, error = %err, "refused a peer connection: TLS failed");
                            return;
                        }
                    };
                    if let Err(err) = receive(stream, cluster_id, accepted_by, shutdown).await {
                        tracing::debug!(peer = %addr, error = %err, "peer connection closed");
                    }
                });
            }
            Err(err) => {
                tracing::warn!(error = %err, "accepting a peer connection failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

async fn receive(
    stream: PeerStream,
    cluster_id: u64,
    accepted_by: Accepted,
    mut shutdown: watch::Receiver<bool>,
) -> std::io::Result<()> {
    let Accepted {
        inbound,
        directory,
        leases,
    } = accepted_by;
    let mut reader = BufReader::new(stream);
    let mut hello = [0u8; 24];
    tokio::time::timeout(HANDSHAKE_TIMEOUT, reader.read_exact(&mut hello))
        .await
        .map_err(|_| std::io::Error::new(ErrorKind::TimedOut, "no handshake"))??;
    let magic = &hello[..8];
    if magic == MEMBERS_MAGIC {
        let bytes = bincode::serialize(&directory()).map_err(std::io::Error::other)?;
        let stream = reader.get_mut();
        stream
            .write_all(&(bytes.len() as u32).to_le_bytes())
            .await?;
        stream.write_all(&bytes).await?;
        stream.flush().await?;
        return Ok(());
    }
    let their_cluster = u64::from_le_bytes(hello[8..16].try_into().unwrap_or_default());
    let from = u64::from_le_bytes(hello[16..24].try_into().unwrap_or_default());
    if magic != MAGIC && magic != SNAPSHOT_MAGIC && magic != LEASE_MAGIC {
        tracing::warn!(
            from = format_args!("{from:x}"),
            "refused a peer connection that opened with an unknown handshake (another program, or a member of another skiff version?)"
        );
        return Ok(());
    }
    if their_cluster != cluster_id {
        tracing::warn!(
            from = format_args!("{from:x}"),
            cluster = format_args!("{their_cluster:x}"),
            ours = format_args!("{cluster_id:x}"),
            "refused a peer connection from another cluster"
        );
        return Ok(());
    }
    if magic == SNAPSHOT_MAGIC {
        return receive_snapshot(reader, from, inbound).await;
    }
    if magic == LEASE_MAGIC {
        return super::lease_forward::serve(reader, leases, shutdown).await;
    }
    let (frames, mut answers) = tokio::io::split(reader);
    let arrived = AtomicU64::new(0);
    let mut frames = Counting {
        inner: frames,
        bytes: &arrived,
    };
    tokio::select! {
        read = read_frames(&mut frames, from, &inbound) => read,
        answered = answer_while_alive(&mut answers, &arrived) => answered,
        _ = shutdown.changed() => Ok(()),
    }
}

/// Hands the messages of member `from` to raft until the connection ends.
async fn read_frames(
    reader: &mut (impl AsyncRead + Unpin),
    from: u64,
    inbound: &mpsc::Sender<Message>,
) -> std::io::Result<()> {
    let mut frame = Vec::new();
    loop {
        let len = reader.read_u32_le().await?;
        if len == 0 {
            continue; // a ping
        }
        if len > MAX_FRAME {
            return Err(std::io::Error::other(format!(
                "frame of {len} bytes from member {from:x}"
            )));
        }
        frame.resize(len as usize, 0);
        reader.read_exact(&mut frame).await?;
        let mut message = Message::default();
        if message.merge_from_bytes(&frame).is_err() || message.from != from {
            return Err(std::io::Error::other(format!(
                "bad message from member {from:x}"
            )));
        }
        // A full inbound queue drops the message; raft resends.
        let _ = inbound.try_send(message);
    }
}

/// Answers one byte every [`ANSWER_INTERVAL`] in which bytes `arrived`
/// (the first time for the handshake); fails once nothing arrived for
/// [`PEER_TIMEOUT`].
async fn answer_while_alive(
    answers: &mut (impl AsyncWrite + Unpin),
    arrived: &AtomicU64,
) -> std::io::Result<()> {
    let mut ticks = tokio::time::interval(ANSWER_INTERVAL);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut answered_for = None;
    let mut last_arrival = Instant::now();
    loop {
        ticks.tick().await;
        let bytes = arrived.load(Ordering::Relaxed);
        if answered_for != Some(bytes) {
            answered_for = Some(bytes);
            last_arrival = Instant::now();
            write_within(answers, &ANSWER).await?;
        } else if last_arrival.elapsed() >= PEER_TIMEOUT {
            return Err(std::io::Error::new(
                ErrorKind::TimedOut,
                format!("nothing arrived for {PEER_TIMEOUT:?}"),
            ));
        }
    }
}

/// A reader that counts the bytes read through it.
struct Counting<'a, R> {
    inner: R,
    bytes: &'a AtomicU64,
}

impl<R: AsyncRead + Unpin> AsyncRead for Counting<'_, R> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = std::pin::Pin::new(&mut self.inner).poll_read(cx, buf);
        let read = buf.filled().len() - before;
        self.bytes.fetch_add(read as u64, Ordering::Relaxed);
        polled
    }
}

/// Writes `bytes` and flushes them, in chunks that each must leave within
/// [`PEER_TIMEOUT`]: a path that drops everything fills the socket's
/// buffer, then stalls the write.
async fn write_within(out: &mut (impl AsyncWrite + Unpin), bytes: &[u8]) -> std::io::Result<()> {
    let stalled = |_| std::io::Error::new(ErrorKind::TimedOut, "a write to the peer stalled");
    for chunk in bytes.chunks(WRITE_CHUNK) {
        tokio::time::timeout(PEER_TIMEOUT, out.write_all(chunk))
            .await
            .map_err(stalled)??;
    }
    tokio::time::timeout(PEER_TIMEOUT, out.flush())
        .await
        .map_err(stalled)?
}

/// Sends one peer its messages: dials it, writes its queue (a ping when
/// there is nothing to write), listens for its answers, and redials when
/// it goes silent. Tells when the peer stops and starts answering.
struct PeerSender {
    peer: PeerMember,
    cluster_id: u64,
    member_id: u64,
    tls: Option<PeerTls>,
    queue: mpsc::Receiver<Message>,
    health: watch::Sender<PeerHealth>,
    /// When the peer last answered, on any connection.
    last_answer: Option<Instant>,
}

impl PeerSender {
    async fn run(
        mut self,
        mut shutdown: watch::Receiver<bool>,
        mut removed: watch::Receiver<bool>,
    ) {
        let addr = self.peer.addr;
        let mut backoff = REDIAL_BACKOFF.0;
        loop {
            let dialled = tokio::select! {
                d = tokio::time::timeout(DIAL_TIMEOUT, dial(addr, self.tls.as_ref())) => d,
                _ = shutdown.changed() => return,
                _ = removed.changed() => return,
            };
            match dialled {
                Ok(Ok(stream)) => {
                    self.health.send_modify(|h| h.connections += 1);
                    let answered_before = self.last_answer;
                    match self.converse(stream, &mut shutdown, &mut removed).await {
                        Ok(()) => return,
                        Err(err) => tracing::debug!(
                            peer = %self.label(), error = %err, "peer connection lost; redialling"
                        ),
                    }
                    if self.last_answer != answered_before {
                        backoff = REDIAL_BACKOFF.0;
                    }
                }
                failed => {
                    let err = failed.unwrap_or_else(|_| Err(ErrorKind::TimedOut.into()));
                    tracing::trace!(peer = %self.label(), error = ?err.err(), "dialling a peer failed");
                    // While the peer is away, what is queued is stale: drop it.
                    while self.queue.try_recv().is_ok() {}
                }
            }
            self.note_silence();
            tokio::select! {
                _ = tokio::time::sleep(backoff) => {}
                _ = shutdown.changed() => return,
                _ = removed.changed() => return,
            }
            backoff = (backoff * 2).min(REDIAL_BACKOFF.1);
        }
    }

    /// Writes the queue on `stream` and reads the peer's answers until the
    /// connection fails (an error) or the sender stops (`Ok`).
    async fn converse(
        &mut self,
        stream: PeerStream,
        shutdown: &mut watch::Receiver<bool>,
        removed: &mut watch::Receiver<bool>,
    ) -> std::io::Result<()> {
        let (mut answers, mut out) = tokio::io::split(stream);
        let mut batch = Vec::with_capacity(24);
        batch.extend_from_slice(MAGIC);
        batch.extend_from_slice(&self.cluster_id.to_le_bytes());
        batch.extend_from_slice(&self.member_id.to_le_bytes());
        write_within(&mut out, &batch).await?;
        let mut last_write = Instant::now();
        let mut last_heard = last_write;
        let mut answer = [0u8; 64];
        loop {
            // Unreachable once silent for the timeout, whether or not this
            // connection is the one that stopped hearing it.
            let reachable_until = self
                .last_answer
                .filter(|_| self.health.borrow().reachable)
                .map(|last| last + PEER_TIMEOUT);
            tokio::select! {
                next = self.queue.recv() => {
                    let Some(first) = next else { return Ok(()) };
                    batch.clear();
                    frame_into(&first, &mut batch);
                    // Whatever else is waiting goes in the same write.
                    while batch.len() < 1024 * 1024 {
                        match self.queue.try_recv() {
                            Ok(m) => frame_into(&m, &mut batch),
                            Err(_) => break,
                        }
                    }
                    crate::crash_point!("peer::send");
                    write_within(&mut out, &batch).await?;
                    last_write = Instant::now();
                }
                _ = tokio::time::sleep_until(last_write + HEARTBEAT_INTERVAL) => {
                    write_within(&mut out, &PING).await?;
                    last_write = Instant::now();
                }
                read = answers.read(&mut answer) => {
                    if read? == 0 {
                        return Err(ErrorKind::UnexpectedEof.into());
                    }
                    last_heard = Instant::now();
                    self.note_answer(last_heard);
                }
                _ = tokio::time::sleep_until(last_heard + PEER_TIMEOUT) => {
                    return Err(std::io::Error::new(
                        ErrorKind::TimedOut,
                        format!("no answer for {PEER_TIMEOUT:?}"),
                    ));
                }
                _ = tokio::time::sleep_until(reachable_until.unwrap_or(last_heard)),
                    if reachable_until.is_some() => self.note_silence(),
                _ = shutdown.changed() => return Ok(()),
                _ = removed.changed() => return Ok(()),
            }
        }
    }

    /// The peer answered at `now`: reachable (again, if it was not).
    fn note_answer(&mut self, now: Instant) {
        let previous = self.last_answer.replace(now);
        if self.health.borrow().reachable {
            return;
        }
        match previous {
            Some(last) => tracing::info!(
                peer = %self.label(),
                id = %format_args!("{:x}", self.peer.id),
                away = ?now.duration_since(last),
                "peer is reachable again"
            ),
            None => tracing::info!(
                peer = %self.label(),
                id = %format_args!("{:x}", self.peer.id),
                "peer is reachable"
            ),
        }
        self.health.send_modify(|h| {
            h.reachable = true;
            h.reconnects += u64::from(previous.is_some());
        });
    }

    /// Unreachable, if the peer answered once but not within the timeout.
    fn note_silence(&mut self) {
        let Some(last) = self.last_answer else {
            return;
        };
        if !self.health.borrow().reachable || last.elapsed() < PEER_TIMEOUT {
            return;
        }
        tracing::warn!(
            peer = %self.label(),
            id = %format_args!("{:x}", self.peer.id),
            silent_for = ?last.elapsed(),
            addr = %self.peer.addr,
            "peer became unreachable"
        );
        self.health.send_modify(|h| {
            h.reachable = false;
            h.disconnects += 1;
        });
    }

    /// The peer's name, or its hex ID before it has one.
    fn label(&self) -> String {
        match self.peer.name.as_str() {
            "" => format!("{:x}", self.peer.id),
            name => name.to_string(),
        }
    }
}

/// Streams a snapshot message on a connection of its own and reports
/// whether the peer took it.
async fn send_snapshot(
    addr: SocketAddr,
    cluster_id: u64,
    member_id: u64,
    tls: Option<PeerTls>,
    mut message: Message,
    reports: mpsc::UnboundedSender<SnapshotReport>,
) {
    let to = message.to;
    let data = std::mem::take(&mut message.mut_snapshot().data);
    let sent = tokio::time::timeout(SNAPSHOT_TIMEOUT, async {
        let mut stream = dial(addr, tls.as_ref()).await?;
        let mut head = Vec::with_capacity(64);
        head.extend_from_slice(SNAPSHOT_MAGIC);
        head.extend_from_slice(&cluster_id.to_le_bytes());
        head.extend_from_slice(&member_id.to_le_bytes());
        frame_into(&message, &mut head);
        head.extend_from_slice(&(data.len() as u64).to_le_bytes());
        stream.write_all(&head).await?;
        for chunk in data.chunks(SNAPSHOT_CHUNK) {
            stream.write_all(chunk).await?;
        }
        stream
            .write_all(&crc32fast::hash(&data).to_le_bytes())
            .await?;
        stream.flush().await?;
        match stream.read_u8().await? {
            1 => Ok(()),
            _ => Err(std::io::Error::other("the peer refused the snapshot")),
        }
    })
    .await
    .unwrap_or_else(|_| Err(std::io::Error::other("timed out")));
    match &sent {
        Ok(()) => tracing::info!(
            to = format_args!("{to:x}"),
            bytes = data.len(),
            "sent a snapshot"
        ),
        Err(err) => {
            tracing::warn!(to = format_args!("{to:x}"), error = %err, "sending a snapshot failed; raft will send it again")
        }
    }
    let _ = reports.send((to, sent.is_ok()));
}

/// Takes a streamed snapshot: the message, then its data in chunks and a
/// checksum; hands it to raft and answers one byte.
async fn receive_snapshot(
    mut reader: BufReader<PeerStream>,
    from: u64,
    inbound: mpsc::Sender<Message>,
) -> std::io::Result<()> {
    let len = reader.read_u32_le().await?;
    if len > MAX_FRAME {
        return Err(std::io::Error::other("snapshot message too large"));
    }
    let mut frame = vec![0u8; len as usize];
    reader.read_exact(&mut frame).await?;
    let mut message = Message::default();
    if message.merge_from_bytes(&frame).is_err()
        || message.from != from
        || message.get_msg_type() != raft::eraftpb::MessageType::MsgSnapshot
    {
        return Err(std::io::Error::other(format!(
            "bad snapshot message from member {from:x}"
        )));
    }
    let size = reader.read_u64_le().await?;
    if size > MAX_SNAPSHOT {
        return Err(std::io::Error::other(format!("snapshot of {size} bytes")));
    }
    let mut data = vec![0u8; size as usize];
    reader.read_exact(&mut data).await?;
    let crc = reader.read_u32_le().await?;
    let ok = crc32fast::hash(&data) == crc;
    if ok {
        message.mut_snapshot().data = data.into();
        let delivered = tokio::time::timeout(SNAPSHOT_TIMEOUT, inbound.send(message)).await;
        let ok = matches!(delivered, Ok(Ok(())));
        reader.get_mut().write_all(&[u8::from(ok)]).await?;
        reader.get_mut().flush().await?;
    } else {
        tracing::warn!(
            from = format_args!("{from:x}"),
            "a snapshot arrived damaged"
        );
        reader.get_mut().write_all(&[0]).await?;
        reader.get_mut().flush().await?;
    }
    Ok(())
}

fn frame_into(message: &Message, buffer: &mut Vec<u8>) {
    let Ok(bytes) = message.write_to_bytes() else {
        return;
    };
    buffer.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    buffer.extend_from_slice(&bytes);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reports() -> (
        mpsc::UnboundedSender<SnapshotReport>,
        mpsc::UnboundedReceiver<SnapshotReport>,
    ) {
        mpsc::unbounded_channel()
    }

    fn hooks(inbound: mpsc::Sender<Message>, directory: Directory) -> Hooks {
        Hooks {
            inbound,
            reports: reports().0,
            directory,
            tls: None,
            leases: mpsc::channel(1).0,
        }
    }

    fn no_directory() -> Directory {
        std::sync::Arc::new(|| (0, Vec::new()))
    }

    fn peer(id: u64, addr: SocketAddr) -> PeerMember {
        PeerMember {
            id,
            name: format!("n{id}"),
            addr,
        }
    }

    fn message(from: u64, to: u64, index: u64) -> Message {
        Message {
            from,
            to,
            index,
            ..Default::default()
        }
    }

    type Pair = (
        Transport,
        Transport,
        mpsc::Receiver<Message>,
        watch::Sender<bool>,
    );

    async fn pair(cluster_a: u64, cluster_b: u64) -> Pair {
        pair_with(cluster_a, cluster_b, None, None).await
    }

    /// Member 1 (cluster `cluster_a`) with member 2 (`cluster_b`) as its
    /// peer; member 2 answers the directory with cluster 7.
    async fn pair_with(
        cluster_a: u64,
        cluster_b: u64,
        a_tls: Option<PeerTls>,
        b_tls: Option<PeerTls>,
    ) -> Pair {
        let (stop, shutdown) = watch::channel(false);
        let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
        let (b_in, b_rx) = mpsc::channel(1024);
        let mut b_hooks = hooks(b_in, std::sync::Arc::new(|| (7, Vec::new())));
        b_hooks.tls = b_tls;
        let b = Transport::start(any, cluster_b, 2, &[], b_hooks, shutdown.clone())
            .await
            .unwrap();
        let (a_in, _a_rx) = mpsc::channel(16);
        let mut a_hooks = hooks(a_in, no_directory());
        a_hooks.tls = a_tls;
        let peers = [peer(1, any), peer(2, b.local_addr())];
        let a = Transport::start(any, cluster_a, 1, &peers, a_hooks, shutdown)
            .await
            .unwrap();
        (a, b, b_rx, stop)
    }

    #[tokio::test]
    async fn messages_arrive_in_order() {
        let (a, _b, mut b_rx, _stop) = pair(7, 7).await;
        for i in 0..100 {
            assert!(a.send(message(1, 2, i)));
        }
        for i in 0..100 {
            let m = tokio::time::timeout(Duration::from_secs(5), b_rx.recv())
                .await
                .unwrap()
                .unwrap();
            assert_eq!((m.from, m.index), (1, i));
        }
        assert!(!a.send(message(1, 9, 0)), "unknown peer");
    }

    #[tokio::test]
    async fn a_joining_member_gets_the_member_list() {
        let (_stop, shutdown) = watch::channel(false);
        let (inbound, _rx) = mpsc::channel(1);
        let member = crate::api::Member {
            id: 9,
            name: "n9".into(),
            peer_urls: vec!["http://127.0.0.1:1".into()],
            ..Default::default()
        };
        let listed = member.clone();
        let directory: Directory = std::sync::Arc::new(move || (77, vec![listed.clone()]));
        let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
        let t = Transport::start(any, 77, 1, &[], hooks(inbound, directory), shutdown)
            .await
            .unwrap();
        let (cluster, members) = ask_members(t.local_addr(), None).await.unwrap();
        assert_eq!((cluster, members), (77, vec![member]));
    }

    /// A CA, and TLS configurations for a member holding a certificate
    /// for 127.0.0.1 that it signed.
    struct TestCa {
        cert: rcgen::Certificate,
        issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
    }

    impl TestCa {
        fn new() -> TestCa {
            let key = rcgen::KeyPair::generate().unwrap();
            let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
            params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
            let cert = params.self_signed(&key).unwrap();
            TestCa {
                cert,
                issuer: rcgen::Issuer::new(params, key),
            }
        }

        fn member_tls(&self) -> PeerTls {
            use rustls::pki_types::{CertificateDer, PrivateKeyDer};
            let key = rcgen::KeyPair::generate().unwrap();
            let mut params = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()]).unwrap();
            params.extended_key_usages = vec![
                rcgen::ExtendedKeyUsagePurpose::ServerAuth,
                rcgen::ExtendedKeyUsagePurpose::ClientAuth,
            ];
            let cert = params.signed_by(&key, &self.issuer).unwrap();
            let chain = vec![CertificateDer::from(cert.der().to_vec())];
            let private = || PrivateKeyDer::try_from(key.serialize_der()).unwrap();
            let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
            let mut roots = rustls::RootCertStore::empty();
            roots.add(self.cert.der().clone()).unwrap();
            let roots = std::sync::Arc::new(roots);
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                roots.clone(),
                provider.clone(),
            )
            .build()
            .unwrap();
            let server = rustls::ServerConfig::builder_with_provider(provider.clone())
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_client_cert_verifier(verifier)
                .with_single_cert(chain.clone(), private())
                .unwrap();
            let client = rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_root_certificates(roots)
                .with_client_auth_cert(chain, private())
                .unwrap();
            PeerTls::new(std::sync::Arc::new(server), std::sync::Arc::new(client))
        }
    }

    #[tokio::test]
    async fn members_of_one_ca_talk_over_tls() {
        let ca = TestCa::new();
        let (a, b, mut b_rx, _stop) =
            pair_with(7, 7, Some(ca.member_tls()), Some(ca.member_tls())).await;
        for i in 0..50 {
            assert!(a.send(message(1, 2, i)));
        }
        for i in 0..50 {
            let m = tokio::time::timeout(Duration::from_secs(5), b_rx.recv())
                .await
                .unwrap()
                .unwrap();
            assert_eq!(m.index, i);
        }
        let tls = ca.member_tls();
        let (cluster, _) = ask_members(b.local_addr(), Some(&tls)).await.unwrap();
        assert_eq!(cluster, 7);
        // Plain TCP gets nothing from a member that speaks TLS.
        assert!(ask_members(b.local_addr(), None).await.is_err());
    }

    #[tokio::test]
    async fn a_member_of_another_ca_is_refused() {
        let (a, b, mut b_rx, _stop) = pair_with(
            7,
            7,
            Some(TestCa::new().member_tls()),
            Some(TestCa::new().member_tls()),
        )
        .await;
        a.send(message(1, 2, 1));
        let got = tokio::time::timeout(Duration::from_millis(500), b_rx.recv()).await;
        assert!(got.is_err(), "a message crossed CAs: {got:?}");
        let stranger = TestCa::new().member_tls();
        assert!(ask_members(b.local_addr(), Some(&stranger)).await.is_err());
    }

    #[tokio::test]
    async fn another_clusters_messages_are_refused() {
        let (a, _b, mut b_rx, _stop) = pair(7, 8).await;
        a.send(message(1, 2, 1));
        let got = tokio::time::timeout(Duration::from_millis(500), b_rx.recv()).await;
        assert!(got.is_err(), "a message crossed clusters: {got:?}");
    }

    #[tokio::test]
    async fn a_restarted_peer_is_reached_again() {
        let (stop, shutdown) = watch::channel(false);
        let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
        let (b_in, mut b_rx) = mpsc::channel(16);
        let (stop_b, shutdown_b) = watch::channel(false);
        let mut b = Transport::start(any, 7, 2, &[], hooks(b_in, no_directory()), shutdown_b)
            .await
            .unwrap();
        let b_addr = b.local_addr();
        let (a_in, _a_rx) = mpsc::channel(16);
        let a = Transport::start(
            any,
            7,
            1,
            &[peer(2, b_addr)],
            hooks(a_in, no_directory()),
            shutdown,
        )
        .await
        .unwrap();
        a.send(message(1, 2, 1));
        assert_eq!(b_rx.recv().await.unwrap().index, 1);

        stop_b.send_replace(true);
        for task in b.take_tasks() {
            let _ = task.await;
        }
        drop(b_rx);
        tokio::time::sleep(Duration::from_millis(100)).await;
        let (b_in, mut b_rx) = mpsc::channel(16);
        let (_stop_b2, shutdown_b2) = watch::channel(false);
        let _b2 = Transport::start(b_addr, 7, 2, &[], hooks(b_in, no_directory()), shutdown_b2)
            .await
            .unwrap();
        // Keep sending until one arrives over the new connection.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        let mut i = 2;
        loop {
            a.send(message(1, 2, i));
            if let Ok(Some(m)) = tokio::time::timeout(Duration::from_millis(100), b_rx.recv()).await
            {
                assert!(m.index >= 2);
                break;
            }
            assert!(tokio::time::Instant::now() < deadline, "never reconnected");
            i += 1;
        }
        stop.send_replace(true);
    }

    /// What a [`Relay`] does with the bytes of one direction.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Flow {
        Forward = 0,
        /// Reads and drops them, as a path that drops packets looks to a
        /// sender whose socket buffer has room.
        Swallow = 1,
        /// Stops reading: the sender's socket buffer fills and its writes
        /// stall.
        Stall = 2,
    }

    /// A TCP relay in front of a member's peer port. A connection on which
    /// it swallowed or stalled bytes never carries anything again and is
    /// never closed, as a TCP connection backing off its retransmissions
    /// far longer than a test waits; connections made later forward again
    /// once the flow is back to `Forward`.
    struct Relay {
        addr: SocketAddr,
        /// From the dialling member to the listening one.
        data: std::sync::Arc<std::sync::atomic::AtomicU8>,
        /// Back.
        answers: std::sync::Arc<std::sync::atomic::AtomicU8>,
        connections: std::sync::Arc<AtomicU64>,
    }

    impl Relay {
        async fn start(target: SocketAddr) -> Relay {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let relay = Relay {
                addr: listener.local_addr().unwrap(),
                data: Default::default(),
                answers: Default::default(),
                connections: Default::default(),
            };
            let (data, answers) = (relay.data.clone(), relay.answers.clone());
            let connections = relay.connections.clone();
            tokio::spawn(async move {
                while let Ok((dialler, _)) = listener.accept().await {
                    let Ok(listening) = TcpStream::connect(target).await else {
                        continue;
                    };
                    connections.fetch_add(1, Ordering::SeqCst);
                    let (from_dialler, to_dialler) = dialler.into_split();
                    let (from_listening, to_listening) = listening.into_split();
                    tokio::spawn(Relay::pump(from_dialler, to_listening, data.clone()));
                    tokio::spawn(Relay::pump(from_listening, to_dialler, answers.clone()));
                }
            });
            relay
        }

        fn set(&self, data: Flow, answers: Flow) {
            self.data.store(data as u8, Ordering::SeqCst);
            self.answers.store(answers as u8, Ordering::SeqCst);
        }

        async fn pump(
            mut from: tokio::net::tcp::OwnedReadHalf,
            mut to: tokio::net::tcp::OwnedWriteHalf,
            flow: std::sync::Arc<std::sync::atomic::AtomicU8>,
        ) {
            let mut buffer = vec![0u8; 16 * 1024];
            let flowing = || flow.load(Ordering::SeqCst);
            while flowing() != Flow::Stall as u8 {
                let read = from.read(&mut buffer).await;
                let forward = flowing() == Flow::Forward as u8;
                match read {
                    // A close crosses a working path only.
                    Ok(0) | Err(_) if forward => {
                        let _ = to.shutdown().await;
                        return;
                    }
                    Ok(0) | Err(_) => break,
                    Ok(read) if forward => {
                        if to.write_all(&buffer[..read]).await.is_err() {
                            return;
                        }
                    }
                    Ok(_) if flowing() == Flow::Swallow as u8 => {
                        // Drop everything from now on, and never tell.
                        while matches!(from.read(&mut buffer).await, Ok(n) if n > 0) {}
                        break;
                    }
                    Ok(_) => break,
                }
            }
            std::future::pending::<()>().await;
            drop((from, to));
        }
    }

    /// Member 1 sending to member 2 through a relay; member 2 does not
    /// send to member 1.
    struct Link {
        a: Transport,
        b_rx: mpsc::Receiver<Message>,
        relay: Relay,
        next_index: u64,
        _b: Transport,
        _stop: watch::Sender<bool>,
    }

    impl Link {
        async fn start() -> Link {
            let (stop, shutdown) = watch::channel(false);
            let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
            let (b_in, b_rx) = mpsc::channel(1024);
            let b = Transport::start(
                any,
                7,
                2,
                &[],
                hooks(b_in, no_directory()),
                shutdown.clone(),
            )
            .await
            .unwrap();
            let relay = Relay::start(b.local_addr()).await;
            let (a_in, _a_rx) = mpsc::channel(16);
            let a = Transport::start(
                any,
                7,
                1,
                &[peer(2, relay.addr)],
                hooks(a_in, no_directory()),
                shutdown,
            )
            .await
            .unwrap();
            Link {
                a,
                b_rx,
                relay,
                next_index: 0,
                _b: b,
                _stop: stop,
            }
        }

        fn health(&self) -> PeerHealth {
            *self.a.health(2).unwrap().borrow()
        }

        /// Waits until member 1's view of member 2 satisfies `ok`.
        async fn wait_health(&self, within: Duration, ok: impl Fn(&PeerHealth) -> bool) {
            let mut health = self.a.health(2).unwrap();
            let waited = tokio::time::timeout(within, health.wait_for(|h| ok(h))).await;
            assert!(waited.is_ok(), "within {within:?}: {:?}", self.health());
        }

        /// Sends messages until one arrives; how long that took.
        async fn deliver(&mut self, within: Duration) -> Duration {
            let started = Instant::now();
            while self.b_rx.try_recv().is_ok() {}
            loop {
                self.next_index += 1;
                self.a.send(message(1, 2, self.next_index));
                let arrived =
                    tokio::time::timeout(Duration::from_millis(50), self.b_rx.recv()).await;
                if let Ok(Some(m)) = arrived {
                    assert_eq!(m.from, 1);
                    return started.elapsed();
                }
                assert!(
                    started.elapsed() < within,
                    "nothing arrived within {within:?}: {:?}",
                    self.health()
                );
            }
        }
    }

    #[tokio::test]
    async fn a_black_holed_connection_is_redialled_once_the_partition_heals() {
        let mut link = Link::start().await;
        link.deliver(Duration::from_secs(5)).await;
        link.wait_health(Duration::from_secs(2), |h| h.reachable)
            .await;
        assert_eq!(link.health().connections, 1);

        link.relay.set(Flow::Swallow, Flow::Swallow);
        link.wait_health(Duration::from_secs(3), |h| !h.reachable)
            .await;
        // A partition of several seconds, over several redials.
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert!(
            link.b_rx.try_recv().is_err(),
            "a message crossed the partition"
        );
        let during = link.health();
        assert!(
            during.connections >= 2,
            "no redial during the partition: {during:?}"
        );
        assert_eq!(
            (during.disconnects, during.reconnects),
            (1, 0),
            "{during:?}"
        );

        link.relay.set(Flow::Forward, Flow::Forward);
        let took = link.deliver(Duration::from_secs(2)).await;
        link.wait_health(Duration::from_secs(1), |h| h.reachable)
            .await;
        let after = link.health();
        assert!(after.connections > during.connections, "{after:?}");
        assert_eq!(
            (after.disconnects, after.reconnects),
            (1, 1),
            "one report when the peer went, one when it came back: {after:?} (delivered after {took:?})"
        );
    }

    #[tokio::test]
    async fn frames_lost_on_the_way_are_noticed_though_the_way_back_works() {
        let mut link = Link::start().await;
        link.deliver(Duration::from_secs(5)).await;
        link.wait_health(Duration::from_secs(2), |h| h.reachable)
            .await;

        link.relay.set(Flow::Swallow, Flow::Forward);
        link.wait_health(Duration::from_secs(3), |h| !h.reachable)
            .await;

        link.relay.set(Flow::Forward, Flow::Forward);
        link.deliver(Duration::from_secs(2)).await;
        link.wait_health(Duration::from_secs(1), |h| h.reachable)
            .await;
        assert_eq!(
            (link.health().disconnects, link.health().reconnects),
            (1, 1)
        );
    }

    #[tokio::test]
    async fn answers_lost_on_the_way_back_are_noticed() {
        let mut link = Link::start().await;
        link.deliver(Duration::from_secs(5)).await;
        link.wait_health(Duration::from_secs(2), |h| h.reachable)
            .await;

        link.relay.set(Flow::Forward, Flow::Swallow);
        link.wait_health(Duration::from_secs(3), |h| {
            !h.reachable && h.connections >= 2
        })
        .await;

        link.relay.set(Flow::Forward, Flow::Forward);
        link.wait_health(Duration::from_secs(2), |h| h.reachable)
            .await;
        assert_eq!(
            (link.health().disconnects, link.health().reconnects),
            (1, 1)
        );
    }

    #[tokio::test]
    async fn a_stalled_write_is_given_up() {
        let mut link = Link::start().await;
        link.deliver(Duration::from_secs(5)).await;
        link.wait_health(Duration::from_secs(2), |h| h.reachable)
            .await;

        link.relay.set(Flow::Stall, Flow::Forward);
        // More than the socket buffers on both sides of the relay hold.
        let entry = raft::eraftpb::Entry {
            data: vec![7u8; 256 * 1024].into(),
            ..Default::default()
        };
        for i in 0..200 {
            let mut big = message(1, 2, 1_000 + i);
            big.entries = vec![entry.clone()].into();
            link.a.send(big);
        }
        link.wait_health(Duration::from_secs(4), |h| !h.reachable)
            .await;

        link.relay.set(Flow::Forward, Flow::Forward);
        link.deliver(Duration::from_secs(2)).await;
    }

    #[tokio::test]
    async fn a_quiet_peer_stays_connected_and_reachable() {
        let mut link = Link::start().await;
        link.deliver(Duration::from_secs(5)).await;
        link.wait_health(Duration::from_secs(2), |h| h.reachable)
            .await;
        // Nothing to send for many peer timeouts: pings keep it alive.
        tokio::time::sleep(PEER_TIMEOUT * 3).await;
        let health = link.health();
        assert_eq!(
            health,
            PeerHealth {
                reachable: true,
                connections: 1,
                disconnects: 0,
                reconnects: 0,
            }
        );
        assert_eq!(link.relay.connections.load(Ordering::SeqCst), 1);
        link.deliver(Duration::from_millis(500)).await;
    }

    #[tokio::test]
    async fn a_peer_never_reached_is_not_reported_as_lost() {
        let (_stop, shutdown) = watch::channel(false);
        let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
        // A port nothing listens on.
        let nobody = TcpListener::bind(any).await.unwrap().local_addr().unwrap();
        let (a_in, _a_rx) = mpsc::channel(16);
        let a = Transport::start(
            any,
            7,
            1,
            &[peer(2, nobody)],
            hooks(a_in, no_directory()),
            shutdown,
        )
        .await
        .unwrap();
        tokio::time::sleep(PEER_TIMEOUT * 2).await;
        assert_eq!(*a.health(2).unwrap().borrow(), PeerHealth::default());
    }
}
