//! The benchmark's HTTP client of the Kubernetes API: one HTTP/1.1
//! keep-alive connection per concurrent client (hyper's connection-level
//! client, no pool in between), JSON or protobuf bodies in and out
//! (`Encoding`), and JSON watch responses
//! read line by line, each on its own HTTP/1.1 connection (`h2watch` reads
//! watches multiplexed on HTTP/2). Plain HTTP on loopback only; not a
//! general client.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context, Result};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::client::conn::http1::{self, SendRequest};
use hyper::header::{ACCEPT, CONTENT_TYPE, HOST};
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::TokioIo;

use super::encoding::Encoding;
use tokio::net::TcpStream;
use tokio::task::JoinHandle;

/// Longest a single request may take (a list of 100 000 pods included).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(120);
/// How much of an unexpected answer's body an error shows.
const ERROR_BODY_CHARS: usize = 300;

/// One keep-alive connection to the API server, reconnected if the server
/// closed it.
pub struct ApiConnection {
    addr: SocketAddr,
    host: String,
    sender: SendRequest<Full<Bytes>>,
    conn: JoinHandle<()>,
}

/// A response read to its end.
pub struct Answer {
    pub status: StatusCode,
    pub body: Bytes,
    /// When the body's last byte was read (before its chunks were joined).
    pub complete: Instant,
}

impl Answer {
    /// The body, if the status is `expected`; else an error naming `what`
    /// and showing the start of the body (a Kubernetes Status, usually).
    pub fn expect(self, expected: StatusCode, what: &str) -> Result<Bytes> {
        if self.status == expected {
            return Ok(self.body);
        }
        Err(self.unexpected(expected, what))
    }

    fn unexpected(&self, expected: StatusCode, what: &str) -> anyhow::Error {
        let text = String::from_utf8_lossy(&self.body);
        let shown: String = text.chars().take(ERROR_BODY_CHARS).collect();
        anyhow!(
            "{what}: the API answered {} instead of {expected}: {shown}",
            self.status
        )
    }
}

impl ApiConnection {
    pub async fn connect(addr: SocketAddr) -> Result<ApiConnection> {
        let (sender, conn) = handshake(addr).await?;
        Ok(ApiConnection {
            addr,
            host: addr.to_string(),
            sender,
            conn,
        })
    }

    pub async fn get(&mut self, path: &str) -> Result<Answer> {
        self.get_as(path, Encoding::Json).await
    }

    /// GET, accepting `encoding`.
    pub async fn get_as(&mut self, path: &str, encoding: Encoding) -> Result<Answer> {
        self.send(Method::GET, path, Bytes::new(), encoding).await
    }

    pub async fn post(&mut self, path: &str, json: Bytes) -> Result<Answer> {
        self.post_as(path, json, Encoding::Json).await
    }

    /// POST of a body in `encoding`, accepting `encoding`.
    pub async fn post_as(&mut self, path: &str, body: Bytes, encoding: Encoding) -> Result<Answer> {
        self.send(Method::POST, path, body, encoding).await
    }

    pub async fn put(&mut self, path: &str, json: Bytes) -> Result<Answer> {
        self.send(Method::PUT, path, json, Encoding::Json).await
    }

    pub async fn delete(&mut self, path: &str) -> Result<Answer> {
        self.send(Method::DELETE, path, Bytes::new(), Encoding::Json)
            .await
    }

    async fn send(
        &mut self,
        method: Method,
        path: &str,
        body: Bytes,
        encoding: Encoding,
    ) -> Result<Answer> {
        if self.sender.is_closed() {
            self.conn.abort();
            (self.sender, self.conn) = handshake(self.addr).await?;
        }
        let request = request(method.clone(), path, &self.host, body, encoding)?;
        let exchange = async {
            self.sender
                .ready()
                .await
                .context("the connection to the API closed")?;
            let response = self.sender.send_request(request).await?;
            let status = response.status();
            let collected = response.into_body().collect().await?;
            let complete = Instant::now();
            let body = collected.to_bytes();
            anyhow::Ok(Answer {
                status,
                body,
                complete,
            })
        };
        tokio::time::timeout(REQUEST_TIMEOUT, exchange)
            .await
            .with_context(|| format!("{method} {path}: no answer within {REQUEST_TIMEOUT:?}"))?
            .with_context(|| format!("{method} {path}"))
    }
}

impl Drop for ApiConnection {
    fn drop(&mut self) {
        self.conn.abort();
    }
}

/// An open watch: the chunked response of `?watch=true`, closed when
/// dropped.
pub struct WatchStream {
    body: Incoming,
    lines: Lines,
    /// Its own HTTP/1.1 connection, ended with the watch.
    own: Option<(SendRequest<Full<Bytes>>, JoinHandle<()>)>,
}

impl WatchStream {
    /// Opens a connection and a watch on `path`; returns once the server
    /// has answered 200 with its headers.
    pub async fn open(addr: SocketAddr, path: &str) -> Result<WatchStream> {
        let (mut sender, conn) = handshake(addr).await?;
        let request = request(
            Method::GET,
            path,
            &addr.to_string(),
            Bytes::new(),
            Encoding::Json,
        )?;
        let answer = tokio::time::timeout(REQUEST_TIMEOUT, sender.send_request(request)).await;
        match Self::started(path, answer).await {
            Ok(body) => Ok(WatchStream {
                body,
                lines: Lines::default(),
                own: Some((sender, conn)),
            }),
            Err(err) => {
                conn.abort();
                Err(err)
            }
        }
    }

    /// The body of a watch answered 200, else the error.
    async fn started(
        path: &str,
        answer: Result<hyper::Result<hyper::Response<Incoming>>, tokio::time::error::Elapsed>,
    ) -> Result<Incoming> {
        let response = answer
            .with_context(|| format!("GET {path}: no answer within {REQUEST_TIMEOUT:?}"))?
            .with_context(|| format!("GET {path}"))?;
        let status = response.status();
        if status != StatusCode::OK {
            let body = response.into_body().collect().await?.to_bytes();
            let complete = Instant::now();
            return Err(Answer {
                status,
                body,
                complete,
            }
            .unexpected(StatusCode::OK, &format!("GET {path}")));
        }
        Ok(response.into_body())
    }

    /// Waits for the next chunk and hands `on_line` every line it
    /// completes (without the newline), all stamped with the one instant
    /// the chunk arrived. `Ok(false)` once the server ended the stream.
    pub async fn next_lines(&mut self, mut on_line: impl FnMut(&[u8], Instant)) -> Result<bool> {
        loop {
            let Some(frame) = self.body.frame().await else {
                return Ok(false);
            };
            let arrived = Instant::now();
            let Ok(data) = frame.context("reading a watch")?.into_data() else {
                continue; // trailers
            };
            self.split(&data, |line| on_line(line, arrived));
            return Ok(true);
        }
    }

    /// Hands `on_line` every line `data` completes, keeping the rest.
    pub fn split(&mut self, data: &[u8], on_line: impl FnMut(&[u8])) {
        self.lines.split(data, on_line);
    }
}

/// Newline-delimited lines from chunks that may end mid-line.
#[derive(Default)]
pub struct Lines {
    /// Bytes of a line not yet complete.
    partial: Vec<u8>,
}

impl Lines {
    /// Hands `on_line` every line `data` completes (without its newline),
    /// keeping the rest for the next chunk.
    pub fn split(&mut self, data: &[u8], mut on_line: impl FnMut(&[u8])) {
        let mut rest = data;
        while let Some(end) = memchr::memchr(b'\n', rest) {
            if self.partial.is_empty() {
                on_line(&rest[..end]);
            } else {
                self.partial.extend_from_slice(&rest[..end]);
                on_line(&self.partial);
                self.partial.clear();
            }
            rest = &rest[end + 1..];
        }
        self.partial.extend_from_slice(rest);
    }
}

impl Drop for WatchStream {
    fn drop(&mut self) {
        if let Some((_, conn)) = &self.own {
            conn.abort();
        }
    }
}

async fn handshake(addr: SocketAddr) -> Result<(SendRequest<Full<Bytes>>, JoinHandle<()>)> {
    let stream = TcpStream::connect(addr)
        .await
        .with_context(|| format!("connecting to the API at {addr}"))?;
    stream.set_nodelay(true)?;
    let (sender, conn) = http1::handshake(TokioIo::new(stream))
        .await
        .with_context(|| format!("HTTP/1.1 handshake with {addr}"))?;
    let conn = tokio::spawn(async move {
        // The connection ends when the server closes it or its owner is
        // dropped; a request on it then reports the error.
        let _ = conn.await;
    });
    Ok((sender, conn))
}

fn request(
    method: Method,
    path: &str,
    host: &str,
    body: Bytes,
    encoding: Encoding,
) -> Result<Request<Full<Bytes>>> {
    let mut builder = Request::builder()
        .method(method)
        .uri(path)
        .header(HOST, host)
        .header(ACCEPT, encoding.accept());
    if !body.is_empty() {
        builder = builder.header(CONTENT_TYPE, encoding.content_type());
    }
    builder
        .body(Full::new(body))
        .with_context(|| format!("building a request for {path}"))
}

/// Percent-encodes a query parameter's value.
pub fn query_value(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for byte in value.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// Where `needle` first starts in `haystack`.
pub fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    memchr::memmem::find(haystack, needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_values_are_percent_encoded() {
        assert_eq!(query_value("bench-group=g3"), "bench-group%3Dg3");
        assert_eq!(query_value("a b/c+"), "a%20b%2Fc%2B");
    }

    #[test]
    fn needles_are_found() {
        assert_eq!(find(b"abcabd", b"abd"), Some(3));
        assert_eq!(find(b"ab", b"abd"), None);
    }

    #[test]
    fn lines_are_joined_across_chunks() {
        let mut lines = Lines::default();
        let mut seen = Vec::new();
        for chunk in [&b"{\"a\":1}\n{\"b\""[..], b":2", b"}\n\n{\"c\":3}\n{"] {
            lines.split(chunk, |line| {
                seen.push(String::from_utf8_lossy(line).into_owned())
            });
        }
        assert_eq!(seen, ["{\"a\":1}", "{\"b\":2}", "", "{\"c\":3}"]);
        lines.split(b"}\n", |line| {
            seen.push(String::from_utf8_lossy(line).into_owned())
        });
        assert_eq!(seen.last().map(String::as_str), Some("{}"));
    }
}
