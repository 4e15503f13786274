//! SPDY/3.1 connections as the kubelet serves them after `Upgrade:
//! SPDY/3.1` (kubectl before 1.30, client-go's default executor): the
//! client opens one stream per `streamType`, the kubelet replies to each
//! and writes on the ones it owns. Flow-control windows are neither
//! tracked nor sent, as Kubernetes' spdystream does; memory stays bounded
//! because every frame is bounded and read only as the session takes it.

mod dictionary;
pub mod frame;
pub mod portforward;

use std::collections::HashMap;
use std::time::Duration;

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;

use self::frame::{Frame, FrameReader, FrameWriter, Headers};
use super::channel::TerminalSize;
use super::exec::{ClientEvent, ExecRequest, OutputStream};
use super::session::Session;

/// How long the client has to open every stream it asked for.
const STREAMS_TIMEOUT: Duration = Duration::from_secs(60);
/// Frames queued for the connection's writer.
const QUEUE: usize = 8;
/// The most bytes of a partial resize message kept.
const MAX_RESIZE_BUFFER: usize = 4096;
/// GOAWAY's status for a clean end.
const GOAWAY_OK: u32 = 0;
/// RST_STREAM's status for a stream that is not wanted.
const REFUSED_STREAM: u32 = 3;

/// The remotecommand subprotocols served over SPDY, newest first.
pub const REMOTECOMMAND: [&str; 4] = [
    "v4.channel.k8s.io",
    "v3.channel.k8s.io",
    "v2.channel.k8s.io",
    "channel.k8s.io",
];

/// A remotecommand version over SPDY: 4 writes a Status on the error
/// stream, 3 and later have a resize stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct RemoteCommandVersion(pub u8);

impl RemoteCommandVersion {
    pub fn from_name(name: &str) -> Option<Self> {
        Some(RemoteCommandVersion(match name {
            "v4.channel.k8s.io" => 4,
            "v3.channel.k8s.io" => 3,
            "v2.channel.k8s.io" => 2,
            "channel.k8s.io" => 1,
            _ => return None,
        }))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum StreamType {
    Error,
    Stdin,
    Stdout,
    Stderr,
    Resize,
}

impl StreamType {
    fn from_header(headers: &Headers) -> Option<Self> {
        let value = headers.iter().find(|(k, _)| k == "streamtype")?.1.as_str();
        Some(match value {
            "error" => StreamType::Error,
            "stdin" => StreamType::Stdin,
            "stdout" => StreamType::Stdout,
            "stderr" => StreamType::Stderr,
            "resize" => StreamType::Resize,
            _ => return None,
        })
    }
}

/// Runs one exec or attach session on an upgraded SPDY connection.
pub async fn serve_exec<IO>(io: IO, version: RemoteCommandVersion, session: Session)
where
    IO: AsyncRead + AsyncWrite + Send + 'static,
{
    let (read, write) = tokio::io::split(io);
    let mut reader = FrameReader::new(read);
    let (frames_tx, frames_rx) = mpsc::channel(QUEUE);
    let writing = tokio::spawn(write_frames(write, frames_rx));
    let expected = expected_streams(session.request(), version);
    let streams = match tokio::time::timeout(
        STREAMS_TIMEOUT,
        accept_streams(&mut reader, &frames_tx, &expected),
    )
    .await
    {
        Ok(Some(streams)) => streams,
        Ok(None) | Err(_) => {
            tracing::info!("an exec client did not open its streams");
            drop(frames_tx);
            let _ = writing.await;
            return;
        }
    };
    let (input_tx, input_rx) = mpsc::channel(QUEUE);
    let reading = tokio::spawn(read_client(
        reader,
        streams.clone(),
        input_tx,
        frames_tx.clone(),
    ));
    let (output_tx, mut output_rx) = mpsc::channel::<(OutputStream, Bytes)>(QUEUE);
    let request = session.request();
    let running = session.run(input_rx, output_tx);
    let forwarding = async {
        while let Some((stream, data)) = output_rx.recv().await {
            let kind = match stream {
                OutputStream::Stdout => StreamType::Stdout,
                OutputStream::Stderr => StreamType::Stderr,
            };
            let Some(&stream_id) = streams.get(&kind) else {
                continue;
            };
            let frame = Frame::Data {
                stream_id,
                fin: false,
                data,
            };
            if frames_tx.send(frame).await.is_err() {
                return;
            }
        }
    };
    let (outcome, ()) = tokio::join!(running, forwarding);
    let end = if version.0 >= 4 {
        Some(outcome.status(&request.command).to_string())
    } else {
        outcome.message(&request.command)
    };
    if let (Some(end), Some(&stream_id)) = (end, streams.get(&StreamType::Error)) {
        let _ = frames_tx
            .send(Frame::Data {
                stream_id,
                fin: false,
                data: Bytes::from(end),
            })
            .await;
    }
    for kind in [StreamType::Stdout, StreamType::Stderr, StreamType::Error] {
        if let Some(&stream_id) = streams.get(&kind) {
            let _ = frames_tx
                .send(Frame::Data {
                    stream_id,
                    fin: true,
                    data: Bytes::new(),
                })
                .await;
        }
    }
    let last = streams.values().copied().max().unwrap_or(0);
    let _ = frames_tx
        .send(Frame::GoAway {
            last_good_stream_id: last,
            status: GOAWAY_OK,
        })
        .await;
    drop(frames_tx);
    let _ = writing.await;
    reading.abort();
}

fn expected_streams(request: &ExecRequest, version: RemoteCommandVersion) -> Vec<StreamType> {
    let mut expected = vec![StreamType::Error];
    for (wanted, kind) in [
        (request.stdin, StreamType::Stdin),
        (request.stdout, StreamType::Stdout),
        (request.stderr, StreamType::Stderr),
        (request.tty && version.0 >= 3, StreamType::Resize),
    ] {
        if wanted {
            expected.push(kind);
        }
    }
    expected
}

/// Replies to the client's streams until every expected one is open;
/// `None` if the connection ends first.
async fn accept_streams<R: AsyncRead + Unpin>(
    reader: &mut FrameReader<R>,
    frames: &mpsc::Sender<Frame>,
    expected: &[StreamType],
) -> Option<HashMap<StreamType, u32>> {
    let mut streams = HashMap::new();
    while !expected.iter().all(|kind| streams.contains_key(kind)) {
        match reader.next().await {
            Ok(Some(Frame::SynStream {
                stream_id, headers, ..
            })) => {
                let reply = match StreamType::from_header(&headers) {
                    Some(kind) if expected.contains(&kind) && !streams.contains_key(&kind) => {
                        streams.insert(kind, stream_id);
                        Frame::SynReply {
                            stream_id,
                            fin: false,
                            headers: Vec::new(),
                        }
                    }
                    _ => Frame::RstStream {
                        stream_id,
                        status: REFUSED_STREAM,
                    },
                };
                frames.send(reply).await.ok()?;
            }
            Ok(Some(Frame::Ping { id })) => frames.send(Frame::Ping { id }).await.ok()?,
            Ok(Some(Frame::GoAway { .. })) | Ok(None) => return None,
            Ok(Some(_)) => {}
            Err(err) => {
                tracing::debug!(%err, "a SPDY exec client sent a bad frame");
                return None;
            }
        }
    }
    Some(streams)
}

/// Turns the client's frames into session events until the connection
/// ends; then `input` closes, which tells the session the client is gone.
async fn read_client<R: AsyncRead + Unpin>(
    mut reader: FrameReader<R>,
    streams: HashMap<StreamType, u32>,
    input: mpsc::Sender<ClientEvent>,
    frames: mpsc::Sender<Frame>,
) {
    let stdin = streams.get(&StreamType::Stdin).copied();
    let resize = streams.get(&StreamType::Resize).copied();
    let mut resize_buffer = Vec::new();
    loop {
        let frame = match reader.next().await {
            Ok(Some(frame)) => frame,
            Ok(None) => return,
            Err(err) => {
                tracing::debug!(%err, "a SPDY exec client sent a bad frame");
                return;
            }
        };
        let events = match frame {
            Frame::Data {
                stream_id,
                fin,
                data,
            } if Some(stream_id) == stdin => {
                let mut events = Vec::new();
                if !data.is_empty() {
                    events.push(ClientEvent::Stdin(data));
                }
                if fin {
                    events.push(ClientEvent::StdinClosed);
                }
                events
            }
            Frame::Data {
                stream_id, data, ..
            } if Some(stream_id) == resize => resizes(&mut resize_buffer, &data),
            Frame::RstStream { stream_id, .. } if Some(stream_id) == stdin => {
                vec![ClientEvent::StdinClosed]
            }
            Frame::Ping { id } => {
                let _ = frames.send(Frame::Ping { id }).await;
                Vec::new()
            }
            Frame::SynStream { stream_id, .. } => {
                let _ = frames
                    .send(Frame::RstStream {
                        stream_id,
                        status: REFUSED_STREAM,
                    })
                    .await;
                Vec::new()
            }
            Frame::GoAway { .. } => return,
            _ => Vec::new(),
        };
        for event in events {
            // A session that is over takes nothing more; keep reading so
            // its end is written.
            let _ = input.send(event).await;
        }
    }
}

/// The complete JSON sizes in the resize stream so far; a partial one
/// stays in `buffer` (bounded: a client sending garbage loses it).
fn resizes(buffer: &mut Vec<u8>, data: &[u8]) -> Vec<ClientEvent> {
    buffer.extend_from_slice(data);
    let mut events = Vec::new();
    let mut stream = serde_json::Deserializer::from_slice(buffer).into_iter::<TerminalSize>();
    let mut used = 0;
    loop {
        match stream.next() {
            Some(Ok(size)) => {
                used = stream.byte_offset();
                events.push(ClientEvent::Resize {
                    width: size.width,
                    height: size.height,
                });
            }
            Some(Err(err)) if err.is_eof() => break,
            Some(Err(_)) => {
                used = buffer.len();
                break;
            }
            None => {
                used = buffer.len();
                break;
            }
        }
    }
    buffer.drain(..used);
    if buffer.len() > MAX_RESIZE_BUFFER {
        buffer.clear();
    }
    events
}

async fn write_frames<W: AsyncWrite + Unpin>(mut write: W, mut frames: mpsc::Receiver<Frame>) {
    let mut writer = FrameWriter::new();
    while let Some(frame) = frames.recv().await {
        let bytes = writer.encode(&frame);
        if write.write_all(&bytes).await.is_err() || write.flush().await.is_err() {
            return;
        }
    }
    let _ = write.shutdown().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resize_messages_may_arrive_in_pieces() {
        let mut buffer = Vec::new();
        assert!(resizes(&mut buffer, br#"{"Width":80,"He"#).is_empty());
        assert_eq!(
            resizes(&mut buffer, br#"ight":24}{"Width":100,"Height":40}"#),
            vec![
                ClientEvent::Resize {
                    width: 80,
                    height: 24
                },
                ClientEvent::Resize {
                    width: 100,
                    height: 40
                },
            ]
        );
        assert!(buffer.is_empty());
        assert!(resizes(&mut buffer, b"garbage").is_empty());
        assert!(buffer.is_empty());
    }

    #[test]
    fn streams_expected_follow_the_request_and_version() {
        let request = ExecRequest {
            command: vec!["sh".into()],
            stdin: true,
            stdout: true,
            stderr: false,
            tty: true,
        };
        assert_eq!(
            expected_streams(&request, RemoteCommandVersion(4)),
            [
                StreamType::Error,
                StreamType::Stdin,
                StreamType::Stdout,
                StreamType::Resize
            ]
        );
        assert_eq!(expected_streams(&request, RemoteCommandVersion(2)).len(), 3);
    }
}
