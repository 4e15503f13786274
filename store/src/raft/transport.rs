//! The peer transport: Raft messages between members over TCP. Each
//! connection opens with a handshake (magic, cluster ID, sender ID), then
//! carries length-prefixed protobuf messages. Every peer has a bounded
//! outbound queue drained by its own task, which reconnects after a peer
//! restarts; a full queue drops messages (raft resends), so a slow or dead
//! peer never blocks the Raft loop.
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
use std::net::SocketAddr;
use std::time::Duration;

use protobuf::Message as _;
use raft::eraftpb::Message;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use super::lease_forward::LEASE_MAGIC;

const MAGIC: &[u8; 8] = b"SKIFFRFT";
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

/// How long a TLS handshake with a peer may take.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

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
}

impl Transport {
    /// Listens on `listen` and starts one sender per peer. Messages from
    /// members of this cluster go to `inbound`.
    pub async fn start(
        listen: SocketAddr,
        cluster_id: u64,
        member_id: u64,
        peers: &[(u64, SocketAddr)],
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
        for &(id, addr) in peers {
            transport.add_peer(id, addr);
        }
        Ok(transport)
    }

    /// Starts sending to member `id` at `addr` (a member added to the
    /// cluster); a known member's address is updated.
    pub fn add_peer(&mut self, id: u64, addr: SocketAddr) {
        if id == self.member_id || self.peers.get(&id).is_some_and(|p| p.addr == addr) {
            return;
        }
        self.remove_peer(id);
        let (queue, rx) = mpsc::channel(PEER_QUEUE);
        let (stop, stopped) = watch::channel(false);
        let task = self.runtime.spawn(send_loop(
            addr,
            self.cluster_id,
            self.member_id,
            self.tls.clone(),
            rx,
            self.shutdown.clone(),
            stopped,
        ));
        self.tasks.retain(|t| !t.is_finished());
        self.tasks.push(task);
        self.peers.insert(id, Peer { addr, queue, stop });
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
    reader.read_exact(&mut hello).await?;
    if &hello[..8] == MEMBERS_MAGIC {
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
    let snapshot = &hello[..8] == SNAPSHOT_MAGIC;
    let lease = &hello[..8] == LEASE_MAGIC;
    if (&hello[..8] != MAGIC && !snapshot && !lease) || their_cluster != cluster_id {
        tracing::warn!(
            from,
            cluster = format_args!("{their_cluster:x}"),
            ours = format_args!("{cluster_id:x}"),
            "refused a peer connection from another cluster"
        );
        return Ok(());
    }
    if snapshot {
        return receive_snapshot(reader, from, inbound).await;
    }
    if lease {
        return super::lease_forward::serve(reader, leases, shutdown).await;
    }
    let mut frame = Vec::new();
    loop {
        let len = tokio::select! {
            len = reader.read_u32_le() => len?,
            _ = shutdown.changed() => return Ok(()),
        };
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

async fn send_loop(
    addr: SocketAddr,
    cluster_id: u64,
    member_id: u64,
    tls: Option<PeerTls>,
    mut queue: mpsc::Receiver<Message>,
    mut shutdown: watch::Receiver<bool>,
    mut removed: watch::Receiver<bool>,
) {
    let mut backoff = Duration::from_millis(50);
    loop {
        let connected = tokio::select! {
            c = tokio::time::timeout(Duration::from_secs(1), dial(addr, tls.as_ref())) => c,
            _ = shutdown.changed() => return,
            _ = removed.changed() => return,
        };
        let mut stream = match connected {
            Ok(Ok(stream)) => stream,
            _ => {
                // While the peer is away, what is queued is stale: drop it.
                while queue.try_recv().is_ok() {}
                tokio::select! {
                    _ = tokio::time::sleep(backoff) => {}
                    _ = shutdown.changed() => return,
                    _ = removed.changed() => return,
                }
                backoff = (backoff * 2).min(Duration::from_secs(1));
                continue;
            }
        };
        backoff = Duration::from_millis(50);
        let mut hello = Vec::with_capacity(24);
        hello.extend_from_slice(MAGIC);
        hello.extend_from_slice(&cluster_id.to_le_bytes());
        hello.extend_from_slice(&member_id.to_le_bytes());
        if stream.write_all(&hello).await.is_err() {
            continue;
        }
        let mut buffer = Vec::new();
        loop {
            let first = tokio::select! {
                m = queue.recv() => match m { Some(m) => m, None => return },
                _ = shutdown.changed() => return,
                _ = removed.changed() => return,
            };
            buffer.clear();
            frame_into(&first, &mut buffer);
            // Whatever else is waiting goes in the same write.
            while buffer.len() < 1024 * 1024 {
                match queue.try_recv() {
                    Ok(m) => frame_into(&m, &mut buffer),
                    Err(_) => break,
                }
            }
            let written = match stream.write_all(&buffer).await {
                Ok(()) => stream.flush().await,
                Err(err) => Err(err),
            };
            if let Err(err) = written {
                tracing::debug!(peer = %addr, error = %err, "peer connection lost; reconnecting");
                break;
            }
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
        let peers = [(1, any), (2, b.local_addr())];
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
            &[(2, b_addr)],
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
}
