//! Port-forward over WebSocket's channel protocol: port i of the request
//! has data channel 2i and error channel 2i+1, each opened by the kubelet
//! with the port as two little-endian bytes; one connection per port, and
//! the socket closes once every connection has ended.

use std::time::Duration;

use axum::extract::ws::{CloseFrame, Message, Utf8Bytes, WebSocket};
use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use super::channel::{ChannelProtocol, Frame};
use super::idle::Activity;
use super::portforward::{self, ForwardTarget, Forwarded};
use super::websocket;

/// Messages queued each way per port.
const QUEUE: usize = 8;

/// Forwards `ports` of `pod` over an upgraded socket.
pub async fn serve(
    socket: WebSocket,
    protocol: ChannelProtocol,
    pod: ForwardTarget,
    ports: Vec<u16>,
    idle_timeout: Duration,
) {
    let activity = Activity::new();
    let (mut sink, mut stream) = socket.split();
    for (i, port) in ports.iter().enumerate() {
        for channel in [data_channel(i), data_channel(i) + 1] {
            if sink
                .send(message(protocol, channel, &port.to_le_bytes()))
                .await
                .is_err()
            {
                return;
            }
        }
    }
    let (down_tx, mut down_rx) = mpsc::channel::<(usize, Forwarded)>(QUEUE);
    let mut uploads = Vec::new();
    let mut forwarders = JoinSet::new();
    for (i, &port) in ports.iter().enumerate() {
        let (upload_tx, upload_rx) = mpsc::channel(QUEUE);
        uploads.push(Some(upload_tx));
        let (port_tx, mut port_rx) = mpsc::channel(QUEUE);
        let pod = pod.clone();
        forwarders.spawn(async move { portforward::forward(port, &pod, upload_rx, port_tx).await });
        let down_tx = down_tx.clone();
        forwarders.spawn(async move {
            while let Some(forwarded) = port_rx.recv().await {
                if down_tx.send((i, forwarded)).await.is_err() {
                    return;
                }
            }
        });
    }
    drop(down_tx);
    let reading = async {
        while let Some(Ok(message)) = stream.next().await {
            activity.touch();
            let payload = match message {
                Message::Binary(bytes) => bytes,
                Message::Text(text) => Bytes::from(text),
                Message::Close(_) => break,
                Message::Ping(_) | Message::Pong(_) => continue,
            };
            let Ok(Some(Frame::Data { channel, payload })) = protocol.decode(&payload) else {
                continue;
            };
            let index = usize::from(channel / 2);
            if channel % 2 != 0 || payload.is_empty() {
                continue;
            }
            if let Some(Some(upload)) = uploads.get(index) {
                if upload.send(payload).await.is_err() {
                    uploads[index] = None;
                }
            }
        }
    };
    let writing = async {
        while let Some((i, forwarded)) = down_rx.recv().await {
            let message = match forwarded {
                Forwarded::Data(data) => message(protocol, data_channel(i), &data),
                Forwarded::Error(text) => message(protocol, data_channel(i) + 1, text.as_bytes()),
                Forwarded::End => continue,
            };
            if sink.send(message).await.is_err() {
                return;
            }
            activity.touch();
        }
        let _ = sink
            .send(Message::Close(Some(CloseFrame {
                code: 1000,
                reason: Utf8Bytes::from_static(""),
            })))
            .await;
    };
    // The client leaving, or every connection ending, ends the session;
    // after our Close the client has a moment to answer with its own.
    let mut reading = std::pin::pin!(reading);
    tokio::select! {
        () = &mut reading => {}
        () = writing => {
            let _ = tokio::time::timeout(websocket::CLOSE_LINGER, reading).await;
        }
        () = activity.idle_for(idle_timeout) => {
            tracing::info!(?idle_timeout, "closing an idle port-forward connection");
        }
    }
    forwarders.abort_all();
}

fn data_channel(index: usize) -> u8 {
    u8::try_from(index * 2).unwrap_or(u8::MAX - 1)
}

fn message(protocol: ChannelProtocol, channel: u8, payload: &[u8]) -> Message {
    match protocol.encode(channel, payload) {
        (true, text) => match Utf8Bytes::try_from(text) {
            Ok(text) => Message::Text(text),
            Err(_) => Message::Binary(Bytes::new()),
        },
        (false, binary) => Message::Binary(binary),
    }
}
