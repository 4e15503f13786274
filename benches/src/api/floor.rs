//! The floor under the HTTP/1.1 watch figure: the same event line, sent to
//! the same number of loopback TCP connections by the cheapest sender
//! there is, and read by the same readers as the API server's watches.
//!
//! The sender is no server: a few threads (as many as the API server has
//! workers), each holding a share of the connections, write one prebuilt
//! chunk to each with one `write` — no HTTP, no JSON, no cache, no task
//! wake-ups. What that costs per event per connection is Linux's loopback
//! TCP (the send, the receiver's processing in the same call, the reader's
//! read and its ACK) and the readers' own work; no API server can fan an
//! event out to that many connections faster on the same machine. Printed
//! beside the API server's figure, it tells how much of it is the server's.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde_json::Value;

use super::encoding::Encoding;
use super::pods::SEQ_ANNOTATION;
use super::watch::{
    open_each, own_cpu_time, paced, thread_cpu_time, Readers, Shared, WatchPoint, WatchTransport,
};
use crate::versus::progress::Progress;

/// Sending threads: the API server's worker threads on a 2-core machine.
const SENDERS: usize = 2;
/// How long a watch's request may take to arrive once connected.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// The answer each watch gets before its events, as the API server's.
const RESPONSE_HEAD: &[u8] =
    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n";

/// Measures the floor: `watchers` connections, `writes` measured events
/// (after a warm-up), each line `event` with its object's sequence
/// annotation set to the write's number.
pub async fn measure(
    watchers: usize,
    writes: usize,
    event: &Value,
    progress: &Progress,
) -> Result<WatchPoint> {
    let lines = (0..=writes)
        .map(|seq| chunk(event, seq))
        .collect::<Result<Vec<_>>>()?;
    let listener = TcpListener::bind("127.0.0.1:0").context("binding the floor's listener")?;
    let addr = listener.local_addr()?;
    let acceptor = std::thread::spawn(move || accept(listener, watchers));
    let shared = Arc::new(Shared::new(watchers, writes, "floor", Encoding::Json));
    let mut readers = Readers::new(&shared);
    let opening = Instant::now();
    progress.set_length(watchers as u64);
    let streams = open_each(addr, "/floor", watchers, Encoding::Json, progress).await;
    let accepted = acceptor
        .join()
        .map_err(|_| anyhow::anyhow!("the floor's acceptor panicked"))?;
    let (streams, accepted) = (streams?, accepted?);
    readers.read_h1(streams);
    let opened_in = opening.elapsed();
    let mut senders = Senders::start(accepted);
    progress.set_length(writes as u64 + 1);
    let client_before = own_cpu_time();
    let stalled = paced(&shared, writes, progress, async |seq| {
        shared.mark_sent(seq);
        senders.send(Arc::clone(&lines[seq]))
    })
    .await;
    let total_cpu = own_cpu_time().saturating_sub(client_before);
    let sender_cpu = senders.stop()?;
    let stalled = stalled?;
    let outcome = readers.finish().await?;
    Ok(WatchPoint {
        watchers,
        transport: WatchTransport::Http1,
        encoding: Encoding::Json,
        writes,
        delivered: outcome.delivered,
        expected: ((writes + 1) * watchers) as u64,
        latencies: crate::report::Latencies::from_nanos(outcome.nanos),
        first_watcher: shared.first_watchers(),
        unexpected: outcome.unexpected,
        event_bytes: outcome.bytes,
        opened_in,
        server_cpu: sender_cpu,
        client_cpu: total_cpu.saturating_sub(sender_cpu),
        stalled,
    })
}

/// Write `seq`'s line as one HTTP/1.1 chunk: `event` with its object's
/// sequence annotation set to `seq`.
fn chunk(event: &Value, seq: usize) -> Result<Arc<Vec<u8>>> {
    let mut event = event.clone();
    let annotations = event
        .pointer_mut("/object/metadata/annotations")
        .and_then(Value::as_object_mut)
        .context("the floor's event has no object annotations")?;
    annotations.insert(SEQ_ANNOTATION.into(), Value::String(seq.to_string()));
    let mut line = serde_json::to_vec(&event)?;
    line.push(b'\n');
    let mut chunk = format!("{:x}\r\n", line.len()).into_bytes();
    chunk.extend_from_slice(&line);
    chunk.extend_from_slice(b"\r\n");
    Ok(Arc::new(chunk))
}

/// Accepts `count` connections, reads each one's request and answers it
/// with a chunked response's head.
fn accept(listener: TcpListener, count: usize) -> Result<Vec<TcpStream>> {
    let mut streams = Vec::with_capacity(count);
    for _ in 0..count {
        let (mut stream, _) = listener.accept().context("accepting a floor connection")?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(REQUEST_TIMEOUT))?;
        read_request(&mut stream)?;
        stream.write_all(RESPONSE_HEAD)?;
        streams.push(stream);
    }
    Ok(streams)
}

/// Reads up to the end of a request's head.
fn read_request(stream: &mut TcpStream) -> Result<()> {
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while memchr::memmem::find(&head, b"\r\n\r\n").is_none() {
        let read = stream.read(&mut buf).context("reading a floor request")?;
        if read == 0 {
            bail!("a floor connection closed before its request");
        }
        head.extend_from_slice(&buf[..read]);
    }
    Ok(())
}

/// The sending threads, each with its share of the connections.
struct Senders {
    lines: Vec<mpsc::Sender<Arc<Vec<u8>>>>,
    threads: Vec<JoinHandle<Result<Duration>>>,
}

impl Senders {
    fn start(streams: Vec<TcpStream>) -> Senders {
        let mut shares: Vec<Vec<TcpStream>> = (0..SENDERS).map(|_| Vec::new()).collect();
        for (i, stream) in streams.into_iter().enumerate() {
            shares[i % SENDERS].push(stream);
        }
        let (mut lines, mut threads) = (Vec::new(), Vec::new());
        for share in shares.into_iter().filter(|s| !s.is_empty()) {
            let (tx, rx) = mpsc::channel::<Arc<Vec<u8>>>();
            lines.push(tx);
            threads.push(std::thread::spawn(move || send_all(share, rx)));
        }
        Senders { lines, threads }
    }

    /// Hands `line` to every sender.
    fn send(&mut self, line: Arc<Vec<u8>>) -> Result<()> {
        for tx in &self.lines {
            if tx.send(Arc::clone(&line)).is_err() {
                bail!("a floor sender stopped");
            }
        }
        Ok(())
    }

    /// Stops the senders: the CPU time they spent.
    fn stop(self) -> Result<Duration> {
        drop(self.lines);
        let mut cpu = Duration::ZERO;
        for thread in self.threads {
            cpu += thread
                .join()
                .map_err(|_| anyhow::anyhow!("a floor sender panicked"))??;
        }
        Ok(cpu)
    }
}

/// Writes each line it is handed to each of its connections; once the
/// lines end, the CPU time this thread spent.
fn send_all(mut streams: Vec<TcpStream>, lines: mpsc::Receiver<Arc<Vec<u8>>>) -> Result<Duration> {
    for line in lines {
        for stream in &mut streams {
            stream.write_all(&line).context("writing a floor event")?;
        }
    }
    Ok(thread_cpu_time())
}

/// The floor's readers open their connections as the API benchmark's
/// watches do (`H1Watch::open`): a few connections and writes check them
/// against the floor's acceptor and senders.
#[cfg(test)]
mod tests {
    use super::*;

    fn event() -> Value {
        serde_json::json!({
            "type": "ADDED",
            "object": {"kind": "Pod", "metadata": {"name": "p", "annotations": {"a": "b"}}}
        })
    }

    #[test]
    fn a_chunk_is_the_event_with_its_sequence_framed() {
        let chunk = chunk(&event(), 7).unwrap();
        let text = String::from_utf8(chunk.to_vec()).unwrap();
        let (size, rest) = text.split_once("\r\n").unwrap();
        let line = rest.strip_suffix("\r\n").unwrap();
        assert_eq!(usize::from_str_radix(size, 16).unwrap(), line.len());
        assert!(line.ends_with('\n'));
        let parsed: Value = serde_json::from_str(line.trim_end()).unwrap();
        assert_eq!(
            parsed["object"]["metadata"]["annotations"][SEQ_ANNOTATION],
            "7"
        );
        assert_eq!(parsed["object"]["metadata"]["annotations"]["a"], "b");
        assert!(super::chunk(&serde_json::json!({"type": "ADDED"}), 1).is_err());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_connection_gets_every_event() {
        let progress = Progress::new();
        let point = measure(5, 3, &event(), &progress).await.unwrap();
        assert!(!point.stalled);
        assert_eq!(point.delivered, 5 * 4);
        assert_eq!(point.expected, 5 * 4);
        assert_eq!(point.unexpected, 0);
        assert_eq!(point.latencies.len(), 5 * 3, "the warm-up is not timed");
        assert_eq!(point.first_watcher.len(), 3);
    }
}
