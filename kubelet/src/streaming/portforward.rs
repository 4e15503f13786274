//! Port-forward's common part: which ports a request names, and one
//! forwarded connection, to 127.0.0.1:port from the pod's network (its own
//! namespace, or the host's where pods share it), copied both ways until
//! the pod closes it.

use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;

use super::Refusal;
use axum::http::StatusCode;

/// The most read from the pod's connection at a time.
const CHUNK: usize = 32 * 1024;

/// The ports of `?ports=8080&ports=9090` (or `port=`, comma-separated
/// lists allowed); empty when none is named.
pub fn ports(query: &[(String, String)]) -> Result<Vec<u16>, Refusal> {
    let mut ports = Vec::new();
    for (_, value) in query.iter().filter(|(k, _)| k == "ports" || k == "port") {
        for part in value.split(',') {
            let port = part
                .trim()
                .parse::<u16>()
                .ok()
                .filter(|p| *p > 0)
                .ok_or_else(|| {
                    Refusal::new(
                        StatusCode::BAD_REQUEST,
                        format!("invalid port {part:?}: a port is a number from 1 to 65535"),
                    )
                })?;
            ports.push(port);
        }
    }
    Ok(ports)
}

/// What a forwarded connection sends towards the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Forwarded {
    Data(Bytes),
    /// The pod closed the connection.
    End,
    /// The connection failed; the client is told on the error stream.
    Error(String),
}

/// The pod a port-forward reaches: its name for messages, and its network
/// namespace (`None`: the host's network).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForwardTarget {
    pub label: String,
    pub netns: Option<std::path::PathBuf>,
}

impl std::fmt::Display for ForwardTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.label)
    }
}

/// A connection to the pod's `127.0.0.1:port`: made in its namespace (the
/// socket stays there) and handed to tokio.
async fn connect(port: u16, pod: &ForwardTarget) -> std::io::Result<TcpStream> {
    let Some(netns) = pod.netns.clone() else {
        return TcpStream::connect(("127.0.0.1", port)).await;
    };
    let stream = tokio::task::spawn_blocking(move || {
        crate::network::netns::run_in(&netns, move || {
            let stream = std::net::TcpStream::connect(("127.0.0.1", port))?;
            stream.set_nonblocking(true)?;
            Ok::<_, std::io::Error>(stream)
        })?
    })
    .await
    .map_err(std::io::Error::other)??;
    TcpStream::from_std(stream)
}

/// Connects to `port` and copies: `from_client` into the connection (its
/// end half-closes it) and the connection's bytes out through `to_client`
/// until the pod closes it or the client is gone.
pub async fn forward(
    port: u16,
    pod: &ForwardTarget,
    mut from_client: mpsc::Receiver<Bytes>,
    to_client: mpsc::Sender<Forwarded>,
) {
    let connection = match connect(port, pod).await {
        Ok(connection) => connection,
        Err(err) => {
            let message = format!("error forwarding port {port} to pod {pod}: {err}");
            let _ = to_client.send(Forwarded::Error(message)).await;
            return;
        }
    };
    let (mut read, mut write) = connection.into_split();
    let upload = tokio::spawn(async move {
        while let Some(data) = from_client.recv().await {
            if write.write_all(&data).await.is_err() {
                return;
            }
        }
        let _ = write.shutdown().await;
    });
    let mut buf = vec![0u8; CHUNK];
    loop {
        match read.read(&mut buf).await {
            Ok(0) => {
                let _ = to_client.send(Forwarded::End).await;
                break;
            }
            Ok(n) => {
                let chunk = Bytes::copy_from_slice(&buf[..n]);
                if to_client.send(Forwarded::Data(chunk)).await.is_err() {
                    break;
                }
            }
            Err(err) => {
                let message = format!("error forwarding port {port} to pod {pod}: {err}");
                let _ = to_client.send(Forwarded::Error(message)).await;
                break;
            }
        }
    }
    upload.abort();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn web() -> ForwardTarget {
        ForwardTarget {
            label: "web".into(),
            netns: None,
        }
    }

    fn query(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn ports_come_from_repeated_and_comma_separated_parameters() {
        let named = ports(&query(&[
            ("ports", "8080"),
            ("ports", "9090,80"),
            ("x", "1"),
        ]));
        assert_eq!(named.unwrap(), [8080, 9090, 80]);
        assert_eq!(ports(&query(&[("port", "1")])).unwrap(), [1]);
        assert!(ports(&[]).unwrap().is_empty());
        for bad in ["0", "65536", "http", ""] {
            assert!(ports(&query(&[("ports", bad)])).is_err(), "{bad}");
        }
    }

    #[tokio::test]
    async fn a_connection_is_copied_both_ways_until_the_pod_closes_it() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut got = Vec::new();
            socket.read_to_end(&mut got).await.unwrap();
            socket.write_all(&got).await.unwrap();
        });
        let (client_tx, client_rx) = mpsc::channel(4);
        let (pod_tx, mut pod_rx) = mpsc::channel(4);
        let forwarding =
            tokio::spawn(async move { forward(port, &web(), client_rx, pod_tx).await });
        client_tx.send(Bytes::from_static(b"ping")).await.unwrap();
        drop(client_tx);
        let mut echoed = Vec::new();
        loop {
            match pod_rx.recv().await.unwrap() {
                Forwarded::Data(data) => echoed.extend_from_slice(&data),
                Forwarded::End => break,
                Forwarded::Error(err) => panic!("{err}"),
            }
        }
        assert_eq!(echoed, b"ping");
        forwarding.await.unwrap();
    }

    #[tokio::test]
    async fn a_closed_port_is_an_error_for_the_client() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        drop(listener);
        let (_client_tx, client_rx) = mpsc::channel(1);
        let (pod_tx, mut pod_rx) = mpsc::channel(1);
        forward(port, &web(), client_rx, pod_tx).await;
        let Some(Forwarded::Error(message)) = pod_rx.recv().await else {
            panic!("no error");
        };
        assert!(
            message.starts_with(&format!("error forwarding port {port} to pod web: ")),
            "{message}"
        );
    }
}
