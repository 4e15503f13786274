//! Exec over WebSocket: the channel protocol's messages to and from an
//! exec session, then the session's end on the error channel and a close.

use std::time::Duration;

use axum::extract::ws::{CloseFrame, Message, Utf8Bytes, WebSocket};
use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use tokio::sync::mpsc;

use super::channel::{self, ChannelProtocol, Frame, TerminalSize};
use super::exec::{ClientEvent, OutputStream};
use super::idle::Activity;
use super::session::Session;

/// The most messages queued between the socket and the session each way.
const QUEUE: usize = 8;
/// The largest message a client may send; larger ones end the connection.
pub const MAX_MESSAGE: usize = 1024 * 1024;
/// How long, after our Close, the client has to answer with its own
/// before the connection is dropped. Dropping a socket with the client's
/// bytes unread makes the kernel reset it and throw away what is still
/// queued to send: the status and the Close themselves.
pub const CLOSE_LINGER: Duration = Duration::from_secs(5);

/// Runs one exec or attach session on an upgraded socket.
pub async fn serve_exec(
    socket: WebSocket,
    protocol: ChannelProtocol,
    session: Session,
    idle_timeout: Duration,
) {
    let activity = Activity::new();
    let request = session.request();
    let (mut sink, stream) = socket.split();
    // As the kubelet does: an empty message on the lowest channel written,
    // so the client knows the streams are open.
    let first = if request.stdout {
        channel::STDOUT
    } else if request.stderr {
        channel::STDERR
    } else {
        channel::ERROR
    };
    if sink.send(message(protocol, first, b"")).await.is_err() {
        return;
    }
    let (input_tx, input_rx) = mpsc::channel(QUEUE);
    let mut reading = tokio::spawn(read_client(stream, protocol, input_tx, activity.clone()));
    let (output_tx, mut output_rx) = mpsc::channel(QUEUE);
    let running = session.run(input_rx, output_tx);
    let writing = async {
        while let Some((stream, data)) = output_rx.recv().await {
            let channel = match stream {
                OutputStream::Stdout => channel::STDOUT,
                OutputStream::Stderr => channel::STDERR,
            };
            if sink.send(message(protocol, channel, &data)).await.is_err() {
                return false;
            }
            activity.touch();
        }
        true
    };
    let (outcome, open) = tokio::select! {
        ended = async { tokio::join!(running, writing) } => ended,
        () = activity.idle_for(idle_timeout) => {
            tracing::info!(?idle_timeout, "closing an idle streaming connection");
            reading.abort();
            return;
        }
    };
    if open {
        let end = if protocol.writes_status() {
            Some(outcome.status(&request.command).to_string())
        } else {
            outcome.message(&request.command)
        };
        if let Some(end) = end {
            let _ = sink
                .send(message(protocol, channel::ERROR, end.as_bytes()))
                .await;
        }
        let _ = sink
            .send(Message::Close(Some(CloseFrame {
                code: 1000,
                reason: Utf8Bytes::from_static(""),
            })))
            .await;
        // The client's Close (or its end) completes the handshake.
        let _ = tokio::time::timeout(CLOSE_LINGER, &mut reading).await;
    }
    reading.abort();
}

fn message(protocol: ChannelProtocol, channel: u8, payload: &[u8]) -> Message {
    match protocol.encode(channel, payload) {
        (true, text) => match Utf8Bytes::try_from(text) {
            Ok(text) => Message::Text(text),
            // Base64 and a digit are ASCII.
            Err(_) => Message::Binary(Bytes::new()),
        },
        (false, binary) => Message::Binary(binary),
    }
}

/// Turns the client's messages into session events until the connection
/// ends; then `input` closes, which tells the session the client is gone.
async fn read_client(
    mut stream: futures::stream::SplitStream<WebSocket>,
    protocol: ChannelProtocol,
    input: mpsc::Sender<ClientEvent>,
    activity: Activity,
) {
    while let Some(Ok(message)) = stream.next().await {
        activity.touch();
        let payload = match message {
            Message::Binary(bytes) => bytes,
            Message::Text(text) => Bytes::from(text),
            Message::Close(_) => break,
            Message::Ping(_) | Message::Pong(_) => continue,
        };
        let frame = match protocol.decode(&payload) {
            Ok(Some(frame)) => frame,
            Ok(None) => continue,
            Err(err) => {
                tracing::debug!(%err, "ignoring a bad message from an exec client");
                continue;
            }
        };
        let Some(event) = client_event(frame) else {
            continue;
        };
        if input.send(event).await.is_err() {
            // The session is over; keep reading so its end is written.
            continue;
        }
    }
}

/// What a client's message means to the session; `None` for channels it
/// does not use.
fn client_event(frame: Frame) -> Option<ClientEvent> {
    match frame {
        Frame::Data {
            channel: channel::STDIN,
            payload,
        } => Some(ClientEvent::Stdin(payload)),
        Frame::Data {
            channel: channel::RESIZE,
            payload,
        } => match serde_json::from_slice::<TerminalSize>(&payload) {
            Ok(size) => Some(ClientEvent::Resize {
                width: size.width,
                height: size.height,
            }),
            Err(err) => {
                tracing::debug!(%err, "ignoring a bad resize message");
                None
            }
        },
        Frame::Close {
            channel: channel::STDIN,
        } => Some(ClientEvent::StdinClosed),
        _ => None,
    }
}
