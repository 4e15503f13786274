//! One transfer to the sink through `pods/portforward` over WebSocket
//! (`v4.channel.k8s.io`): API over TLS → kubelet → the pod's port. The
//! payload goes in data-channel messages of [`CHUNK`] bytes while the
//! answer is read on the other half of the socket.

use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use tokio_tungstenite::tungstenite::Message;

use super::channel::{self, PortMessage, PortStreams, PORT_DATA};
use super::sink::{self, pod_path, CHUNK};
use super::tls_api::TlsApi;

pub const PROTOCOL: &str = "v4.channel.k8s.io";
/// How long the socket may stay silent before the run fails.
const PATIENCE: Duration = Duration::from_secs(60);

pub struct Forwarded {
    /// Connect, TLS, upgrade and both channels opened.
    pub setup: Duration,
    /// First payload byte sent → the sink's count read.
    pub transfer: Duration,
}

pub async fn transfer(api: &TlsApi, port: u16, bytes: u64) -> Result<Forwarded> {
    let path = format!("{}/portforward?ports={port}", pod_path());
    let started = Instant::now();
    let tls = api.connect().await?;
    let mut socket = api.upgrade(tls, &path, PROTOCOL).await?;
    let mut streams = PortStreams::new(port);
    while !streams.is_open() {
        let message = next_binary(&mut socket)
            .await?
            .context("the port-forward closed before its channels opened")?;
        if let PortMessage::Error(text) = streams.receive(&message)? {
            bail!("port-forward error: {}", String::from_utf8_lossy(text));
        }
    }
    let setup = started.elapsed();
    let (mut to_pod, mut from_pod) = socket.split();
    let started = Instant::now();
    let send = async {
        let header = channel::encode(PORT_DATA, &sink::header(bytes));
        to_pod.send(Message::Binary(header.into())).await?;
        let full = Bytes::from(channel::encode(PORT_DATA, &[0u8; CHUNK]));
        let mut left = bytes;
        while left > 0 {
            let n = left.min(CHUNK as u64) as usize;
            // The bytes are shared, not copied, for every full chunk.
            to_pod
                .send(Message::Binary(full.slice(..n + 1)))
                .await
                .context("sending to the port-forward")?;
            left -= n as u64;
        }
        anyhow::Ok(())
    };
    let receive = async {
        let mut reply = Vec::new();
        while reply.len() < 8 {
            let Some(message) = next_binary(&mut from_pod).await? else {
                bail!(
                    "the port-forward closed after {} byte(s) of the sink's answer",
                    reply.len()
                );
            };
            match streams.receive(&message)? {
                PortMessage::Data(data) => reply.extend_from_slice(data),
                PortMessage::Error(text) => {
                    bail!("port-forward error: {}", String::from_utf8_lossy(text))
                }
                PortMessage::Opened(channel) => bail!("channel {channel} opened twice"),
            }
        }
        anyhow::Ok(reply)
    };
    let ((), reply) = tokio::try_join!(send, receive)?;
    let transfer = started.elapsed();
    sink::check_count(&reply, bytes)?;
    let _ = to_pod.send(Message::Close(None)).await;
    Ok(Forwarded { setup, transfer })
}

/// The next binary message's bytes; `None` at the close.
async fn next_binary<S>(socket: &mut S) -> Result<Option<Bytes>>
where
    S: futures::Stream<Item = Result<Message, tokio_tungstenite::tungstenite::Error>> + Unpin,
{
    loop {
        let message = tokio::time::timeout(PATIENCE, socket.next())
            .await
            .map_err(|_| anyhow!("the port-forward sent nothing for {PATIENCE:?}"))?;
        match message {
            Some(Ok(Message::Binary(bytes))) => return Ok(Some(bytes)),
            Some(Ok(Message::Close(_))) | None => return Ok(None),
            Some(Ok(Message::Text(text))) => {
                bail!("a text message over {PROTOCOL}: {text:?}")
            }
            Some(Ok(_)) => {}
            Some(Err(err)) => return Err(err).context("reading the port-forward"),
        }
    }
}
