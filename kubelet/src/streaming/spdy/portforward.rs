//! Port-forward over SPDY (`portforward.k8s.io`): the client opens a pair
//! of streams per connection, `error` and `data`, with the same `port` and
//! `requestID` headers; once both are open the kubelet connects to the
//! port and copies between it and the data stream. Any number of pairs,
//! for as long as the client keeps the connection.

use std::collections::HashMap;

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use super::frame::{Frame, FrameReader, Headers};
use super::{write_frames, QUEUE, REFUSED_STREAM};
use crate::streaming::portforward::{self, ForwardTarget, Forwarded};

/// The subprotocol of port-forward over SPDY.
pub const PROTOCOL: &str = "portforward.k8s.io";

/// The streams of one forwarded connection, as they arrive.
#[derive(Debug, Default)]
struct Pair {
    port: u16,
    error: Option<u32>,
    data: Option<u32>,
}

/// Serves port-forward streams on an upgraded connection until the client
/// ends it; `allowed` limits the ports when the request named some.
pub async fn serve<IO>(io: IO, pod: ForwardTarget, allowed: Vec<u16>)
where
    IO: AsyncRead + AsyncWrite + Send + 'static,
{
    let (read, write) = tokio::io::split(io);
    let mut reader = FrameReader::new(read);
    let (frames_tx, frames_rx) = mpsc::channel(QUEUE);
    let writing = tokio::spawn(write_frames(write, frames_rx));
    let mut pending: HashMap<String, Pair> = HashMap::new();
    // The data stream of each running connection, to its forwarder.
    let mut uploads: HashMap<u32, mpsc::Sender<Bytes>> = HashMap::new();
    let mut forwarders = JoinSet::new();
    loop {
        let frame = match reader.next().await {
            Ok(Some(frame)) => frame,
            Ok(None) => break,
            Err(err) => {
                tracing::debug!(%err, "a SPDY port-forward client sent a bad frame");
                break;
            }
        };
        while forwarders.try_join_next().is_some() {}
        match frame {
            Frame::SynStream {
                stream_id, headers, ..
            } => {
                let opened = open_stream(&mut pending, stream_id, &headers, &allowed);
                let reply = match &opened {
                    Ok(_) => Frame::SynReply {
                        stream_id,
                        fin: false,
                        headers: Vec::new(),
                    },
                    Err(message) => {
                        tracing::debug!(%message, "refused a port-forward stream");
                        Frame::RstStream {
                            stream_id,
                            status: REFUSED_STREAM,
                        }
                    }
                };
                // The reply is queued before the forwarder can write.
                if frames_tx.send(reply).await.is_err() {
                    break;
                }
                if let Ok(Some(pair)) = opened {
                    let (upload_tx, upload_rx) = mpsc::channel(QUEUE);
                    if let Some(data) = pair.data {
                        uploads.insert(data, upload_tx);
                    }
                    let forwarder = forward_pair(pair, pod.clone(), upload_rx, frames_tx.clone());
                    forwarders.spawn(forwarder);
                }
            }
            Frame::Data {
                stream_id,
                fin,
                data,
            } => {
                if let Some(upload) = uploads.get(&stream_id) {
                    if !data.is_empty() && upload.send(data).await.is_err() {
                        uploads.remove(&stream_id);
                    }
                    if fin {
                        uploads.remove(&stream_id);
                    }
                }
            }
            Frame::RstStream { stream_id, .. } => {
                uploads.remove(&stream_id);
            }
            Frame::Ping { id } if frames_tx.send(Frame::Ping { id }).await.is_err() => break,
            Frame::GoAway { .. } => break,
            _ => {}
        }
    }
    forwarders.abort_all();
    drop(frames_tx);
    let _ = writing.await;
}

/// Records a new stream; the pair once both of its streams are open.
fn open_stream(
    pending: &mut HashMap<String, Pair>,
    stream_id: u32,
    headers: &Headers,
    allowed: &[u16],
) -> Result<Option<Pair>, String> {
    let header = |name: &str| {
        headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    };
    let port = header("port")
        .and_then(|p| p.parse::<u16>().ok())
        .filter(|p| *p > 0)
        .ok_or_else(|| format!("stream {stream_id} has no valid port header"))?;
    if !allowed.is_empty() && !allowed.contains(&port) {
        return Err(format!("port {port} was not requested"));
    }
    let kind = header("streamtype").unwrap_or_default();
    // Clients before requestID open the error stream, then the data
    // stream two ids later.
    let request_id = match (header("requestid"), kind) {
        (Some(id), _) => id.to_string(),
        (None, "data") => format!("stream-{}", stream_id.saturating_sub(2)),
        (None, _) => format!("stream-{stream_id}"),
    };
    let pair = pending.entry(request_id.clone()).or_default();
    pair.port = port;
    let slot = match kind {
        "error" => &mut pair.error,
        "data" => &mut pair.data,
        other => return Err(format!("unknown stream type {other:?}")),
    };
    if slot.is_some() {
        return Err(format!("request {request_id} already has a {kind} stream"));
    }
    *slot = Some(stream_id);
    if pair.error.is_some() && pair.data.is_some() {
        return Ok(pending.remove(&request_id));
    }
    Ok(None)
}

/// Runs one forwarded connection and ends its streams.
async fn forward_pair(
    pair: Pair,
    pod: ForwardTarget,
    upload: mpsc::Receiver<Bytes>,
    frames: mpsc::Sender<Frame>,
) {
    let (Some(error), Some(data)) = (pair.error, pair.data) else {
        return;
    };
    let (down_tx, mut down_rx) = mpsc::channel(QUEUE);
    let port = pair.port;
    let forwarding = tokio::spawn(async move {
        portforward::forward(port, &pod, upload, down_tx).await;
    });
    while let Some(forwarded) = down_rx.recv().await {
        let frame = match forwarded {
            Forwarded::Data(bytes) => Frame::Data {
                stream_id: data,
                fin: false,
                data: bytes,
            },
            Forwarded::End => break,
            Forwarded::Error(message) => Frame::Data {
                stream_id: error,
                fin: false,
                data: Bytes::from(message),
            },
        };
        if frames.send(frame).await.is_err() {
            forwarding.abort();
            return;
        }
    }
    for stream_id in [data, error] {
        let fin = Frame::Data {
            stream_id,
            fin: true,
            data: Bytes::new(),
        };
        if frames.send(fin).await.is_err() {
            break;
        }
    }
    forwarding.abort();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> Headers {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn streams_pair_up_by_request_id() {
        let mut pending = HashMap::new();
        let error = headers(&[("streamtype", "error"), ("port", "80"), ("requestid", "0")]);
        let data = headers(&[("streamtype", "data"), ("port", "80"), ("requestid", "0")]);
        assert!(open_stream(&mut pending, 1, &error, &[]).unwrap().is_none());
        let pair = open_stream(&mut pending, 3, &data, &[]).unwrap().unwrap();
        assert_eq!((pair.port, pair.error, pair.data), (80, Some(1), Some(3)));
        assert!(pending.is_empty());
    }

    #[test]
    fn streams_without_request_id_pair_by_stream_id() {
        let mut pending = HashMap::new();
        let error = headers(&[("streamtype", "error"), ("port", "80")]);
        let data = headers(&[("streamtype", "data"), ("port", "80")]);
        assert!(open_stream(&mut pending, 5, &error, &[]).unwrap().is_none());
        assert!(open_stream(&mut pending, 7, &data, &[]).unwrap().is_some());
    }

    #[test]
    fn bad_streams_are_refused() {
        let mut pending = HashMap::new();
        let no_port = headers(&[("streamtype", "data")]);
        assert!(open_stream(&mut pending, 1, &no_port, &[]).is_err());
        let other_port = headers(&[("streamtype", "data"), ("port", "22")]);
        assert!(open_stream(&mut pending, 1, &other_port, &[80]).is_err());
        let odd = headers(&[("streamtype", "resize"), ("port", "80")]);
        assert!(open_stream(&mut pending, 1, &odd, &[]).is_err());
        let error = headers(&[("streamtype", "error"), ("port", "80"), ("requestid", "1")]);
        open_stream(&mut pending, 1, &error, &[]).unwrap();
        assert!(open_stream(&mut pending, 3, &error, &[]).is_err());
    }
}
