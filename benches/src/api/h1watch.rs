//! A watch on its own HTTP/1.1 connection, read from the socket by the
//! benchmark itself.
//!
//! The benchmark shares the machine's two cores with the server it
//! measures. Through hyper's client every event cost a wake-up of the
//! connection's task, which decoded the chunk and handed it over a channel
//! to the body, whose reader was woken in turn: 4 µs of CPU per event per
//! watcher with 1 000 watchers, about what the server spent sending it.
//! Here a reader task polls the sockets of many watches itself: a read, the
//! chunked framing walked, the events (JSON lines or protobuf frames)
//! handed on. What the bench needs of HTTP/1.1 and no more: one GET, a
//! `200` status line and a chunked body.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::encoding::{Encoding, WatchEvents, PROTOBUF};

/// How long the server may take to answer the watch.
const OPEN_TIMEOUT: Duration = Duration::from_secs(120);
/// Room made in the buffer before each read.
const READ_ROOM: usize = 16 * 1024;
/// Most bytes of a refusal's body shown in the error.
const SHOWN: usize = 300;

/// Where the chunked body's framing stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    /// Before a chunk's size line.
    Size,
    /// Inside a chunk, with this many bytes of it to come.
    Data(usize),
    /// After a chunk's bytes, before its CRLF.
    DataEnd,
    /// The last (empty) chunk was read.
    Done,
}

pub struct H1Watch {
    stream: TcpStream,
    /// Bytes read and not yet decoded, from `at` on.
    buf: Vec<u8>,
    at: usize,
    framing: Framing,
    events: WatchEvents,
}

impl H1Watch {
    /// Opens a connection and a watch on `path`, accepting `encoding`;
    /// returns once the server has answered 200 with a chunked body in it.
    pub async fn open(addr: SocketAddr, path: &str, encoding: Encoding) -> Result<H1Watch> {
        let mut stream = TcpStream::connect(addr)
            .await
            .with_context(|| format!("connecting to the API at {addr}"))?;
        stream.set_nodelay(true)?;
        let accept = encoding.accept();
        let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nAccept: {accept}\r\n\r\n");
        stream.write_all(request.as_bytes()).await?;
        let mut watch = H1Watch {
            stream,
            buf: Vec::with_capacity(READ_ROOM),
            at: 0,
            framing: Framing::Size,
            events: encoding.watch_events(),
        };
        let head_end = tokio::time::timeout(OPEN_TIMEOUT, watch.read_head())
            .await
            .with_context(|| format!("GET {path}: no answer within {OPEN_TIMEOUT:?}"))?
            .with_context(|| format!("GET {path}"))?;
        let head = String::from_utf8_lossy(&watch.buf[..head_end]).into_owned();
        let status = head.lines().next().unwrap_or_default();
        if status.split(' ').nth(1) != Some("200") {
            let rest = &watch.buf[head_end..watch.buf.len().min(head_end + SHOWN)];
            bail!(
                "GET {path}: the API answered {status:?} instead of 200: {}",
                String::from_utf8_lossy(rest)
            );
        }
        let chunked = head.lines().any(|line| {
            let line = line.to_ascii_lowercase();
            line.starts_with("transfer-encoding:") && line.contains("chunked")
        });
        if !chunked {
            bail!("GET {path}: the watch's answer is not chunked:\n{head}");
        }
        let protobuf = head.lines().any(|line| {
            let line = line.to_ascii_lowercase();
            line.starts_with("content-type:") && line.contains(PROTOBUF)
        });
        if encoding == Encoding::Protobuf && !protobuf {
            bail!("GET {path}: asked for protobuf ({accept}), answered otherwise:\n{head}");
        }
        watch.at = head_end;
        Ok(watch)
    }

    /// Reads until the response's head is complete; where it ends.
    async fn read_head(&mut self) -> Result<usize> {
        loop {
            if let Some(end) = memchr::memmem::find(&self.buf, b"\r\n\r\n") {
                return Ok(end + 4);
            }
            if self.read().await?.is_none() {
                bail!("the connection closed before the response's head");
            }
        }
    }

    /// Waits for bytes from the server and reads what it has; the instant
    /// they arrived, or `None` once it closed the connection.
    pub async fn read(&mut self) -> Result<Option<Instant>> {
        if self.buf.capacity() - self.buf.len() < READ_ROOM / 4 {
            self.buf.reserve(READ_ROOM);
        }
        let read = self
            .stream
            .read_buf(&mut self.buf)
            .await
            .context("reading a watch")?;
        Ok((read > 0).then(Instant::now))
    }

    /// Walks the chunked framing of what was read, handing `on_event`
    /// every event it completes. `Ok(false)` after the body's last chunk.
    pub fn decode(&mut self, mut on_event: impl FnMut(&[u8])) -> Result<bool> {
        loop {
            let rest = &self.buf[self.at..];
            match self.framing {
                Framing::Size => {
                    let Some(end) = memchr::memmem::find(rest, b"\r\n") else {
                        break;
                    };
                    let line = &rest[..end];
                    let digits = line.split(|&b| b == b';').next().unwrap_or_default();
                    let size = std::str::from_utf8(digits)
                        .ok()
                        .and_then(|d| usize::from_str_radix(d.trim(), 16).ok())
                        .with_context(|| {
                            format!("a chunk size of {:?}", String::from_utf8_lossy(line))
                        })?;
                    self.at += end + 2;
                    self.framing = match size {
                        0 => Framing::Done,
                        size => Framing::Data(size),
                    };
                }
                Framing::Data(left) => {
                    if rest.is_empty() {
                        break;
                    }
                    let take = left.min(rest.len());
                    self.events.split(&rest[..take], &mut on_event)?;
                    self.at += take;
                    self.framing = match left - take {
                        0 => Framing::DataEnd,
                        left => Framing::Data(left),
                    };
                }
                Framing::DataEnd => {
                    if rest.len() < 2 {
                        break;
                    }
                    if &rest[..2] != b"\r\n" {
                        bail!("a chunk not followed by CRLF");
                    }
                    self.at += 2;
                    self.framing = Framing::Size;
                }
                Framing::Done => return Ok(false),
            }
        }
        // What is left is part of a size line or of a CRLF: a few bytes.
        self.buf.drain(..self.at);
        self.at = 0;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A JSON watch fed `reads` one after another.
    async fn fed(reads: &[&[u8]]) -> (Vec<String>, Result<bool>) {
        fed_as(Encoding::Json, reads).await
    }

    /// A watch in `encoding` fed `reads` one after another (no socket: a
    /// listener's connection that is never read from).
    async fn fed_as(encoding: Encoding, reads: &[&[u8]]) -> (Vec<String>, Result<bool>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let stream = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let mut watch = H1Watch {
            stream,
            buf: Vec::new(),
            at: 0,
            framing: Framing::Size,
            events: encoding.watch_events(),
        };
        let mut lines = Vec::new();
        let mut last = Ok(true);
        for read in reads {
            watch.buf.extend_from_slice(read);
            last = watch.decode(|line| lines.push(String::from_utf8_lossy(line).into_owned()));
            if !matches!(last, Ok(true)) {
                break;
            }
        }
        (lines, last)
    }

    #[tokio::test]
    async fn lines_come_out_of_chunks_however_the_reads_split_them() {
        let whole: &[u8] = b"6\r\n{\"a\":1\r\n3\r\n}\n{\r\nA;ext=1\r\n\"b\":2}\n{\"c\r\n0\r\n\r\n";
        let (lines, last) = fed(&[whole]).await;
        assert_eq!(lines, ["{\"a\":1}", "{\"b\":2}"]);
        assert!(matches!(last, Ok(false)), "the last chunk ends the body");
        for split in 1..whole.len() {
            let (a, b) = whole.split_at(split);
            let (lines, last) = fed(&[a, b]).await;
            assert_eq!(lines, ["{\"a\":1}", "{\"b\":2}"], "split at {split}");
            assert!(matches!(last, Ok(false)), "split at {split}");
        }
        // A byte at a time.
        let bytes: Vec<&[u8]> = whole.chunks(1).collect();
        let (lines, last) = fed(&bytes).await;
        assert_eq!(lines, ["{\"a\":1}", "{\"b\":2}"]);
        assert!(matches!(last, Ok(false)));
    }

    #[tokio::test]
    async fn protobuf_frames_come_out_of_chunks_that_cut_them_anywhere() {
        // Frames "ab" and "cde", cut by the chunks after 3 and 9 bytes.
        let whole: &[u8] =
            b"3\r\n\0\0\0\r\n6\r\n\x02ab\0\0\0\r\n2\r\n\x03c\r\n2\r\nde\r\n0\r\n\r\n";
        for split in 1..whole.len() {
            let (a, b) = whole.split_at(split);
            let (frames, last) = fed_as(Encoding::Protobuf, &[a, b]).await;
            assert_eq!(frames, ["ab", "cde"], "split at {split}");
            assert!(matches!(last, Ok(false)), "split at {split}");
        }
        // JSON read as frames: an impossible length, an error.
        let (_, last) = fed_as(Encoding::Protobuf, &[b"8\r\n{\"type\":\r\n"]).await;
        assert!(last
            .unwrap_err()
            .to_string()
            .contains("not length-prefixed"));
    }

    #[tokio::test]
    async fn bad_framing_is_an_error() {
        let (_, last) = fed(&[b"zz\r\nab"]).await;
        assert!(last.unwrap_err().to_string().contains("chunk size"));
        let (_, last) = fed(&[b"2\r\nabXY"]).await;
        assert!(last.unwrap_err().to_string().contains("CRLF"));
    }
}
