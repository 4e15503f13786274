//! The peer transport: Raft messages between members over TCP. Each
//! connection opens with a handshake (magic, cluster ID, sender ID), then
//! carries length-prefixed protobuf messages. Every peer has a bounded
//! outbound queue drained by its own task, which reconnects after a peer
//! restarts; a full queue drops messages (raft resends), so a slow or dead
//! peer never blocks the Raft loop.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use protobuf::Message as _;
use raft::eraftpb::Message;
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

const MAGIC: &[u8; 8] = b"SKIFFRFT";
/// Messages waiting for one peer before new ones are dropped.
const PEER_QUEUE: usize = 4096;
/// The largest message accepted (a batch of entries or a snapshot chunk).
const MAX_FRAME: u32 = 64 * 1024 * 1024;

pub struct Transport {
    peers: HashMap<u64, mpsc::Sender<Message>>,
    local_addr: SocketAddr,
    tasks: Vec<JoinHandle<()>>,
}

impl Transport {
    /// Listens on `listen` and starts one sender per peer. Messages from
    /// members of this cluster go to `inbound`.
    pub async fn start(
        listen: SocketAddr,
        cluster_id: u64,
        member_id: u64,
        peers: &[(u64, SocketAddr)],
        inbound: mpsc::Sender<Message>,
        shutdown: watch::Receiver<bool>,
    ) -> std::io::Result<Transport> {
        let listener = TcpListener::bind(listen).await?;
        let local_addr = listener.local_addr()?;
        let mut tasks = vec![tokio::spawn(accept_loop(
            listener,
            cluster_id,
            inbound,
            shutdown.clone(),
        ))];
        let mut senders = HashMap::new();
        for &(id, addr) in peers.iter().filter(|(id, _)| *id != member_id) {
            let (tx, rx) = mpsc::channel(PEER_QUEUE);
            senders.insert(id, tx);
            tasks.push(tokio::spawn(send_loop(
                addr,
                cluster_id,
                member_id,
                rx,
                shutdown.clone(),
            )));
        }
        Ok(Transport {
            peers: senders,
            local_addr,
            tasks,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Queues a message for its peer without waiting. Returns false when it
    /// was dropped (unknown peer, or its queue is full).
    pub fn send(&self, message: Message) -> bool {
        match self.peers.get(&message.to) {
            Some(queue) => queue.try_send(message).is_ok(),
            None => false,
        }
    }

    pub fn take_tasks(&mut self) -> Vec<JoinHandle<()>> {
        std::mem::take(&mut self.tasks)
    }
}

async fn accept_loop(
    listener: TcpListener,
    cluster_id: u64,
    inbound: mpsc::Sender<Message>,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = shutdown.changed() => return,
        };
        match accepted {
            Ok((stream, addr)) => {
                let inbound = inbound.clone();
                let shutdown = shutdown.clone();
                tokio::spawn(async move {
                    if let Err(err) = receive(stream, cluster_id, inbound, shutdown).await {
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
    stream: TcpStream,
    cluster_id: u64,
    inbound: mpsc::Sender<Message>,
    mut shutdown: watch::Receiver<bool>,
) -> std::io::Result<()> {
    stream.set_nodelay(true)?;
    let mut reader = BufReader::new(stream);
    let mut hello = [0u8; 24];
    reader.read_exact(&mut hello).await?;
    let their_cluster = u64::from_le_bytes(hello[8..16].try_into().unwrap_or_default());
    let from = u64::from_le_bytes(hello[16..24].try_into().unwrap_or_default());
    if &hello[..8] != MAGIC || their_cluster != cluster_id {
        tracing::warn!(
            from,
            cluster = format_args!("{their_cluster:x}"),
            ours = format_args!("{cluster_id:x}"),
            "refused a peer connection from another cluster"
        );
        return Ok(());
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
    mut queue: mpsc::Receiver<Message>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut backoff = Duration::from_millis(50);
    loop {
        let connected = tokio::select! {
            c = tokio::time::timeout(Duration::from_secs(1), TcpStream::connect(addr)) => c,
            _ = shutdown.changed() => return,
        };
        let mut stream = match connected {
            Ok(Ok(stream)) => stream,
            _ => {
                // While the peer is away, what is queued is stale: drop it.
                while queue.try_recv().is_ok() {}
                tokio::select! {
                    _ = tokio::time::sleep(backoff) => {}
                    _ = shutdown.changed() => return,
                }
                backoff = (backoff * 2).min(Duration::from_secs(1));
                continue;
            }
        };
        backoff = Duration::from_millis(50);
        let _ = stream.set_nodelay(true);
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
            if let Err(err) = stream.write_all(&buffer).await {
                tracing::debug!(peer = %addr, error = %err, "peer connection lost; reconnecting");
                break;
            }
        }
    }
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

    fn message(from: u64, to: u64, index: u64) -> Message {
        Message {
            from,
            to,
            index,
            ..Default::default()
        }
    }

    async fn pair(
        cluster_a: u64,
        cluster_b: u64,
    ) -> (
        Transport,
        Transport,
        mpsc::Receiver<Message>,
        watch::Sender<bool>,
    ) {
        let (stop, shutdown) = watch::channel(false);
        let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
        let (b_in, b_rx) = mpsc::channel(1024);
        let b = Transport::start(any, cluster_b, 2, &[], b_in, shutdown.clone())
            .await
            .unwrap();
        let (a_in, _a_rx) = mpsc::channel(16);
        let peers = [(1, any), (2, b.local_addr())];
        let a = Transport::start(any, cluster_a, 1, &peers, a_in, shutdown)
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
        let mut b = Transport::start(any, 7, 2, &[], b_in, shutdown_b)
            .await
            .unwrap();
        let b_addr = b.local_addr();
        let (a_in, _a_rx) = mpsc::channel(16);
        let a = Transport::start(any, 7, 1, &[(2, b_addr)], a_in, shutdown)
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
        let _b2 = Transport::start(b_addr, 7, 2, &[], b_in, shutdown_b2)
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
