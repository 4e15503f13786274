//! A WebSocket as a byte stream, for SPDY tunnelled in binary messages
//! (`SPDY/3.1+portforward.k8s.io`, kubectl's port-forward since 1.31).

use axum::extract::ws::{Message, WebSocket};
use futures::{SinkExt, StreamExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};

/// Bytes buffered each way between the socket and the stream.
const BUFFER: usize = 64 * 1024;

/// The stream's reads are the socket's binary messages; its writes
/// become binary messages. Either side closing ends both.
pub fn byte_stream(socket: WebSocket) -> DuplexStream {
    let (ours, theirs) = tokio::io::duplex(BUFFER);
    let (mut read, mut write) = tokio::io::split(ours);
    let (mut sink, mut stream) = socket.split();
    tokio::spawn(async move {
        let inbound = async {
            // Once the stream is gone, the socket is still read to its end.
            let mut open = true;
            while let Some(Ok(message)) = stream.next().await {
                let bytes = match message {
                    Message::Binary(bytes) => bytes,
                    Message::Text(text) => text.into(),
                    Message::Close(_) => break,
                    Message::Ping(_) | Message::Pong(_) => continue,
                };
                if open && write.write_all(&bytes).await.is_err() {
                    open = false;
                }
            }
            let _ = write.shutdown().await;
        };
        let outbound = async {
            let mut buf = vec![0u8; BUFFER];
            loop {
                match read.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        let chunk = bytes::Bytes::copy_from_slice(&buf[..n]);
                        if sink.send(Message::Binary(chunk)).await.is_err() {
                            break;
                        }
                    }
                }
            }
            let _ = sink.send(Message::Close(None)).await;
        };
        // After our Close the client has a moment to answer with its own.
        let mut inbound = std::pin::pin!(inbound);
        tokio::select! {
            () = &mut inbound => {}
            () = outbound => {
                let _ = tokio::time::timeout(super::websocket::CLOSE_LINGER, inbound).await;
            }
        }
    });
    theirs
}
