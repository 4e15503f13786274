//! The pod the benchmark execs into and forwards to: `python3` serving a
//! byte sink on a loopback port of the host (pods share the host's
//! network under the process runtime). A transfer is an 8-byte big-endian
//! length, then that many bytes; the sink answers the count it read, as 8
//! bytes, and closes. A port-forward over WebSocket has no half-close, so
//! the length, not an end of file, says where the transfer ends.

use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

pub const POD: &str = "exec-bench";
pub const NAMESPACE: &str = "default";
pub const CONTAINER: &str = "sink";

/// Bytes written at a time, and the payload of one port-forward message.
pub const CHUNK: usize = 64 * 1024;

/// The sink, run as `python3 -c SINK PORT`: one connection at a time.
const SINK: &str = r#"
import socket, struct, sys
server = socket.socket()
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind(("127.0.0.1", int(sys.argv[1])))
server.listen(16)
buf = bytearray(1 << 20)
while True:
    conn, _ = server.accept()
    with conn:
        head = b""
        while len(head) < 8:
            part = conn.recv(8 - len(head))
            if not part:
                break
            head += part
        if len(head) < 8:
            continue
        want = struct.unpack(">Q", head)[0]
        got = 0
        while got < want:
            n = conn.recv_into(buf, min(len(buf), want - got))
            if n == 0:
                break
            got += n
        conn.sendall(struct.pack(">Q", got))
"#;

/// The pod: one container running the sink on `port`; the image is
/// recorded, not pulled.
pub fn pod_json(port: u16) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": POD, "namespace": NAMESPACE},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "containers": [{
                "name": CONTAINER,
                "image": "python",
                "command": ["python3", "-c", SINK, port.to_string()],
            }],
        },
    })
}

/// The API path of the pod, under which `exec` and `portforward` are.
pub fn pod_path() -> String {
    format!("/api/v1/namespaces/{NAMESPACE}/pods/{POD}")
}

/// Fails early, and clearly, on a host without python3.
pub fn check_python() -> Result<()> {
    let status = std::process::Command::new("python3")
        .args(["-c", "pass"])
        .status()
        .context("running python3, which the benchmark's pod runs as its sink: install python3")?;
    ensure!(status.success(), "python3 -c pass failed ({status})");
    Ok(())
}

/// The transfer header: the payload's length.
pub fn header(bytes: u64) -> [u8; 8] {
    bytes.to_be_bytes()
}

/// The sink's answer, once 8 bytes of it are in `reply`.
pub fn counted(reply: &[u8]) -> Option<u64> {
    let bytes: [u8; 8] = reply.get(..8)?.try_into().ok()?;
    Some(u64::from_be_bytes(bytes))
}

/// Checks the sink's count against what was sent.
pub fn check_count(reply: &[u8], sent: u64) -> Result<()> {
    match counted(reply) {
        Some(count) if count == sent && reply.len() == 8 => Ok(()),
        Some(count) => bail!(
            "the sink counted {count} bytes of {sent} sent (answer of {} bytes)",
            reply.len()
        ),
        None => bail!("the sink answered {} bytes, not 8", reply.len()),
    }
}

/// `bytes` to the sink over a plain loopback connection: the floor of
/// what a port-forward to it can do. The time runs from the first byte
/// written to the count read back.
pub async fn transfer_direct(port: u16, bytes: u64) -> Result<Duration> {
    let mut tcp = TcpStream::connect(("127.0.0.1", port))
        .await
        .with_context(|| format!("connecting to the sink on 127.0.0.1:{port}"))?;
    tcp.set_nodelay(true)?;
    let chunk = vec![0u8; CHUNK];
    let started = Instant::now();
    tcp.write_all(&header(bytes)).await?;
    let mut left = bytes;
    while left > 0 {
        let n = left.min(CHUNK as u64) as usize;
        tcp.write_all(&chunk[..n]).await?;
        left -= n as u64;
    }
    let mut reply = Vec::with_capacity(8);
    tcp.read_to_end(&mut reply)
        .await
        .context("reading the sink's count")?;
    let elapsed = started.elapsed();
    check_count(&reply, bytes)?;
    Ok(elapsed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_count_is_eight_big_endian_bytes() {
        assert_eq!(header(258), [0, 0, 0, 0, 0, 0, 1, 2]);
        assert_eq!(counted(&header(100_000_000)), Some(100_000_000));
        assert_eq!(counted(&[0; 7]), None);
        assert!(check_count(&header(5), 5).is_ok());
        let err = check_count(&header(4), 5).err().unwrap();
        assert!(err.to_string().contains("counted 4 bytes of 5"), "{err}");
    }

    #[test]
    fn the_pod_runs_the_sink_on_the_port() {
        let pod = pod_json(4321);
        let command = &pod["spec"]["containers"][0]["command"];
        assert_eq!(command[0], "python3");
        assert_eq!(command[3], "4321");
        assert_eq!(pod["metadata"]["name"], POD);
    }

    /// The sink itself, where python3 is installed.
    #[tokio::test]
    async fn the_sink_counts_what_it_is_sent() {
        if check_python().is_err() {
            eprintln!("no python3: not testing the sink");
            return;
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut sink = std::process::Command::new("python3")
            .args(["-c", SINK, &port.to_string()])
            .spawn()
            .unwrap();
        let mut outcome = Err(anyhow::anyhow!("the sink never listened"));
        for _ in 0..200 {
            if TcpStream::connect(("127.0.0.1", port)).await.is_ok() {
                outcome = async {
                    transfer_direct(port, 3 * CHUNK as u64 + 5).await?;
                    transfer_direct(port, 0).await
                }
                .await;
                break;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        let _ = sink.kill();
        let _ = sink.wait();
        outcome.unwrap();
    }
}
