//! Many watches as streams of one HTTP/2 connection (h2c, prior
//! knowledge), read by one task that parses the frames itself.
//!
//! The benchmark shares the machine's two cores with the server it
//! measures, so what reading costs it is taken from the server. Through
//! hyper's client a DATA frame costs a wake-up of the stream's body, the
//! connection's stream lock a few times and a flow-control release; for
//! 1 000 streams that is 5 µs of CPU per event per watcher, as much as the
//! server spends sending. Here a frame costs its header, a scan for the
//! newline and the line handed on: the fan-out is measured, not the client.
//!
//! Only what a watch needs: GET requests (HPACK literals, no Huffman, no
//! dynamic table), response headers checked for `:status: 200` by their
//! first byte (the static-table index an HTTP/2 server uses for it) and not
//! otherwise decoded, DATA split into events per stream (JSON lines or
//! protobuf frames), SETTINGS and PING acknowledged, windows kept open with
//! WINDOW_UPDATE.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::encoding::{Encoding, WatchEvents};

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const DATA: u8 = 0x0;
const HEADERS: u8 = 0x1;
const RST_STREAM: u8 = 0x3;
const SETTINGS: u8 = 0x4;
const PING: u8 = 0x6;
const GOAWAY: u8 = 0x7;
const END_STREAM: u8 = 0x1;
const ACK: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const PRIORITY: u8 = 0x20;
/// The largest flow-control window HTTP/2 allows.
const MAX_WINDOW: u32 = (1 << 31) - 1;
/// The window every stream starts with before our SETTINGS count.
const DEFAULT_WINDOW: u32 = 65_535;
/// Received bytes after which a window is opened again by as much.
const REFILL_AFTER: u64 = 1 << 30;
/// `:status: 200` as an HTTP/2 server encodes it: static-table entry 8.
const STATUS_OK: u8 = 0x88;
/// How long the server may take to answer every watch.
const OPEN_TIMEOUT: Duration = Duration::from_secs(120);

/// Where a stream stands.
#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    /// Asked, not answered.
    Waiting,
    /// Answered 200; events flow.
    Open,
    /// Answered with another status; the body's first line says why.
    Refused(String),
    /// Ended by the server (END_STREAM, RST_STREAM or GOAWAY).
    Ended,
}

struct Watch {
    state: State,
    events: WatchEvents,
    /// Bytes received since its window was last opened again.
    received: u64,
}

/// The frames of one connection, without the socket: bytes in, events
/// and the bytes to send back out.
struct Frames {
    encoding: Encoding,
    watches: Vec<Watch>,
    /// To write to the server: acknowledgements and window updates.
    out: Vec<u8>,
    /// Bytes received on the connection since its window was last opened.
    received: u64,
    goaway: bool,
}

fn frame(out: &mut Vec<u8>, kind: u8, flags: u8, stream: u32, payload: &[u8]) {
    let len = payload.len() as u32;
    out.extend_from_slice(&len.to_be_bytes()[1..]);
    out.extend_from_slice(&[kind, flags]);
    out.extend_from_slice(&(stream & MAX_WINDOW).to_be_bytes());
    out.extend_from_slice(payload);
}

fn window_update(out: &mut Vec<u8>, stream: u32, increment: u32) {
    frame(out, 0x8, 0, stream, &increment.to_be_bytes());
}

/// An HPACK integer with an `n`-bit prefix whose high bits are `first`.
fn hpack_int(out: &mut Vec<u8>, first: u8, n: u32, mut value: usize) {
    let max = (1usize << n) - 1;
    if value < max {
        out.push(first | value as u8);
        return;
    }
    out.push(first | max as u8);
    value -= max;
    while value >= 128 {
        out.push((value % 128) as u8 | 0x80);
        value /= 128;
    }
    out.push(value as u8);
}

/// A header field literal, not indexed, whose name is static entry `index`.
fn hpack_literal(out: &mut Vec<u8>, index: usize, value: &str) {
    hpack_int(out, 0x00, 4, index);
    hpack_int(out, 0x00, 7, value.len());
    out.extend_from_slice(value.as_bytes());
}

/// The header block of `GET path` to `authority`, accepting `accept`.
fn get_headers(path: &str, authority: &str, accept: &str) -> Vec<u8> {
    let mut block = vec![0x82, 0x86]; // :method GET, :scheme http
    hpack_literal(&mut block, 4, path); // :path
    hpack_literal(&mut block, 1, authority); // :authority
    hpack_literal(&mut block, 19, accept); // accept
    block
}

impl Frames {
    fn new(watches: usize, encoding: Encoding) -> Frames {
        Frames {
            encoding,
            watches: (0..watches)
                .map(|_| Watch {
                    state: State::Waiting,
                    events: encoding.watch_events(),
                    received: 0,
                })
                .collect(),
            out: Vec::new(),
            received: 0,
            goaway: false,
        }
    }

    /// The connection's opening and one GET per watch, as bytes to send.
    fn opening(&self, path: &str, authority: &str) -> Vec<u8> {
        let mut out = PREFACE.to_vec();
        let mut settings = Vec::new();
        settings.extend_from_slice(&0x2u16.to_be_bytes()); // ENABLE_PUSH
        settings.extend_from_slice(&0u32.to_be_bytes());
        settings.extend_from_slice(&0x4u16.to_be_bytes()); // INITIAL_WINDOW_SIZE
        settings.extend_from_slice(&MAX_WINDOW.to_be_bytes());
        frame(&mut out, SETTINGS, 0, 0, &settings);
        window_update(&mut out, 0, MAX_WINDOW - DEFAULT_WINDOW);
        let block = get_headers(path, authority, self.encoding.accept());
        for i in 0..self.watches.len() {
            frame(
                &mut out,
                HEADERS,
                END_STREAM | END_HEADERS,
                stream_id(i),
                &block,
            );
        }
        out
    }

    /// Parses every whole frame at the start of `bytes`, handing each
    /// completed line of an open watch to `on_line` with the watch's index;
    /// returns how many bytes it used (a frame cut short waits for more).
    fn parse(&mut self, bytes: &[u8], mut on_line: impl FnMut(usize, &[u8])) -> Result<usize> {
        let mut at = 0;
        while let Some(head) = bytes.get(at..at + 9) {
            let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
            let Some(payload) = bytes.get(at + 9..at + 9 + len) else {
                break;
            };
            let (kind, flags) = (head[3], head[4]);
            let stream = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & MAX_WINDOW;
            self.frame(kind, flags, stream, payload, &mut on_line)?;
            at += 9 + len;
        }
        Ok(at)
    }

    fn frame(
        &mut self,
        kind: u8,
        flags: u8,
        stream: u32,
        payload: &[u8],
        on_line: &mut impl FnMut(usize, &[u8]),
    ) -> Result<()> {
        match kind {
            DATA => {
                self.received += payload.len() as u64;
                if self.received >= REFILL_AFTER {
                    window_update(&mut self.out, 0, self.received as u32);
                    self.received = 0;
                }
                let data = unpadded(flags, payload, 0)?;
                let Some(index) = watch_index(stream, self.watches.len()) else {
                    return Ok(());
                };
                let watch = &mut self.watches[index];
                watch.received += payload.len() as u64;
                if watch.received >= REFILL_AFTER {
                    window_update(&mut self.out, stream, watch.received as u32);
                    watch.received = 0;
                }
                match &mut watch.state {
                    State::Open => watch.events.split(data, |event| on_line(index, event))?,
                    State::Refused(why) if why.is_empty() => {
                        *why = String::from_utf8_lossy(&data[..data.len().min(300)]).into_owned();
                    }
                    _ => {}
                }
                if flags & END_STREAM != 0 && watch.state == State::Open {
                    watch.state = State::Ended;
                }
            }
            HEADERS => {
                let skip = if flags & PRIORITY != 0 { 5 } else { 0 };
                let block = unpadded(flags, payload, skip)?;
                let Some(index) = watch_index(stream, self.watches.len()) else {
                    return Ok(());
                };
                let watch = &mut self.watches[index];
                if watch.state == State::Waiting {
                    watch.state = match block.first() {
                        Some(&STATUS_OK) => State::Open,
                        _ => State::Refused(String::new()),
                    };
                }
                if flags & END_STREAM != 0 && watch.state == State::Open {
                    watch.state = State::Ended;
                }
            }
            RST_STREAM => {
                if let Some(index) = watch_index(stream, self.watches.len()) {
                    let watch = &mut self.watches[index];
                    if matches!(watch.state, State::Waiting | State::Open) {
                        watch.state = State::Ended;
                    }
                }
            }
            SETTINGS if flags & ACK == 0 => frame(&mut self.out, SETTINGS, ACK, 0, &[]),
            PING if flags & ACK == 0 => frame(&mut self.out, PING, ACK, 0, payload),
            GOAWAY => self.goaway = true,
            // WINDOW_UPDATE, PRIORITY, CONTINUATION of headers not decoded,
            // acknowledgements, unknown types: nothing to do.
            _ => {}
        }
        Ok(())
    }

    /// The first watch the server refused or ended before answering.
    fn refusal(&self) -> Option<String> {
        self.watches.iter().find_map(|w| match &w.state {
            State::Refused(why) => Some(format!(
                "the server answered a watch with a status other than 200: {why}"
            )),
            _ => None,
        })
    }

    fn all_answered(&self) -> bool {
        self.watches.iter().all(|w| w.state != State::Waiting)
    }
}

/// Client streams are odd: watch `i` is stream `2i + 1`.
fn stream_id(index: usize) -> u32 {
    index as u32 * 2 + 1
}

fn watch_index(stream: u32, watches: usize) -> Option<usize> {
    let index = (stream.checked_sub(1)? / 2) as usize;
    (stream % 2 == 1 && index < watches).then_some(index)
}

/// A frame's payload without its padding (and `skip` bytes of fields
/// after the pad length).
fn unpadded(flags: u8, payload: &[u8], skip: usize) -> Result<&[u8]> {
    let (start, pad) = match flags & PADDED {
        0 => (0, 0),
        _ => (
            1,
            usize::from(
                *payload
                    .first()
                    .context("a padded frame without its length")?,
            ),
        ),
    };
    let end = payload.len().checked_sub(pad);
    match end {
        Some(end) if start + skip <= end => Ok(&payload[start + skip..end]),
        _ => bail!("a frame's padding is longer than the frame"),
    }
}

/// `count` watches of `path` on one connection to `addr`.
pub struct H2Watches {
    socket: TcpStream,
    frames: Frames,
    /// What was read; its first `filled` bytes are a frame not yet whole.
    buf: Vec<u8>,
    filled: usize,
}

/// Read buffer: many frames (at most 16 KiB each, the default the server
/// keeps to) per system call.
const READ_BUFFER: usize = 256 * 1024;

impl H2Watches {
    /// Connects, asks for every watch at once (accepting `encoding`) and
    /// returns when the server has answered each one 200.
    pub async fn open(
        addr: SocketAddr,
        path: &str,
        count: usize,
        encoding: Encoding,
    ) -> Result<H2Watches> {
        let mut socket = TcpStream::connect(addr)
            .await
            .with_context(|| format!("connecting to the API at {addr}"))?;
        socket.set_nodelay(true)?;
        let frames = Frames::new(count, encoding);
        let opening = frames.opening(path, &addr.to_string());
        socket
            .write_all(&opening)
            .await
            .context("asking for the watches")?;
        let mut watches = H2Watches {
            socket,
            frames,
            buf: vec![0; READ_BUFFER],
            filled: 0,
        };
        let answered = async {
            while !watches.frames.all_answered() {
                if !watches.read(|_, _, _| {}).await? {
                    bail!("the server closed the connection before answering every watch");
                }
            }
            Ok(())
        };
        tokio::time::timeout(OPEN_TIMEOUT, answered)
            .await
            .with_context(|| format!("GET {path}: no answer within {OPEN_TIMEOUT:?}"))??;
        if let Some(refusal) = watches.frames.refusal() {
            bail!("GET {path}: {refusal}");
        }
        Ok(watches)
    }

    /// Reads what the socket has and hands `on_line` each completed line
    /// with its watch's index and the instant it was read. `Ok(false)` once
    /// the connection is over.
    pub async fn read(&mut self, mut on_line: impl FnMut(usize, &[u8], Instant)) -> Result<bool> {
        let n = self
            .socket
            .read(&mut self.buf[self.filled..])
            .await
            .context("reading the watches")?;
        if n == 0 {
            return Ok(false);
        }
        let arrived = Instant::now();
        let end = self.filled + n;
        let used = self.frames.parse(&self.buf[..end], |watch, line| {
            on_line(watch, line, arrived)
        })?;
        self.buf.copy_within(used..end, 0);
        self.filled = end - used;
        if !self.frames.out.is_empty() {
            let out = std::mem::take(&mut self.frames.out);
            self.socket
                .write_all(&out)
                .await
                .context("answering the server")?;
        }
        Ok(!self.frames.goaway)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server_frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        frame(&mut out, kind, flags, stream, payload);
        out
    }

    /// Parses `input` as if read in pieces of `piece` bytes.
    fn feed(
        frames: &mut Frames,
        input: &[u8],
        piece: usize,
        mut on_line: impl FnMut(usize, &[u8]),
    ) -> Result<()> {
        let mut buf = Vec::new();
        for chunk in input.chunks(piece) {
            buf.extend_from_slice(chunk);
            let used = frames.parse(&buf, &mut on_line)?;
            buf.drain(..used);
        }
        assert!(buf.is_empty(), "a frame was left unparsed");
        Ok(())
    }

    #[test]
    fn hpack_integers_take_their_prefix_then_continue() {
        let mut out = Vec::new();
        hpack_int(&mut out, 0, 5, 10);
        assert_eq!(out, [10]);
        // RFC 7541 C.1.2: 1337 with a 5-bit prefix.
        out.clear();
        hpack_int(&mut out, 0, 5, 1337);
        assert_eq!(out, [31, 154, 10]);
        out.clear();
        hpack_literal(&mut out, 4, "/a");
        assert_eq!(out, [0x04, 2, b'/', b'a']);
    }

    #[test]
    fn the_opening_asks_for_each_watch_on_its_own_stream() {
        let frames = Frames::new(2, Encoding::Json);
        let out = frames.opening("/api/v1/pods?watch=true", "127.0.0.1:1");
        assert!(out.starts_with(PREFACE));
        let rest = &out[PREFACE.len()..];
        // SETTINGS, WINDOW_UPDATE, then two HEADERS on streams 1 and 3.
        assert_eq!(rest[3], SETTINGS);
        let after_settings = 9 + 12;
        assert_eq!(rest[after_settings + 3], 0x8);
        let headers = &rest[after_settings + 13..];
        assert_eq!(
            (headers[3], headers[4]),
            (HEADERS, END_STREAM | END_HEADERS)
        );
        assert_eq!(&headers[5..9], &1u32.to_be_bytes());
        let block_len = u32::from_be_bytes([0, headers[0], headers[1], headers[2]]) as usize;
        let second = &headers[9 + block_len..];
        assert_eq!(&second[5..9], &3u32.to_be_bytes());
        assert_eq!(&headers[9..11], &[0x82, 0x86]);
    }

    #[test]
    fn lines_are_split_per_stream_across_frames_and_reads() {
        let mut frames = Frames::new(2, Encoding::Json);
        let mut input = server_frame(SETTINGS, 0, 0, &[0, 3, 0, 0, 3, 0xe8]);
        input.extend(server_frame(HEADERS, END_HEADERS, 1, &[STATUS_OK]));
        input.extend(server_frame(HEADERS, END_HEADERS, 3, &[STATUS_OK]));
        input.extend(server_frame(DATA, 0, 1, b"{\"a\":1}\n{\"b\""));
        input.extend(server_frame(DATA, 0, 3, b"{\"c\":3}\n"));
        // Padded: one byte of pad length, then two bytes of padding.
        input.extend(server_frame(DATA, PADDED, 1, b"\x02:2}\n\0\0"));
        input.extend(server_frame(PING, 0, 0, b"12345678"));
        let mut seen = Vec::new();
        // Fed in pieces that cut frames anywhere.
        feed(&mut frames, &input, 7, |i, line| {
            seen.push((i, String::from_utf8_lossy(line).into_owned()))
        })
        .unwrap();
        assert!(frames.all_answered());
        assert_eq!(frames.refusal(), None);
        assert_eq!(
            seen,
            [
                (0, "{\"a\":1}".to_string()),
                (1, "{\"c\":3}".to_string()),
                (0, "{\"b\":2}".to_string()),
            ]
        );
        // The server's SETTINGS and PING were acknowledged.
        let mut expected = server_frame(SETTINGS, ACK, 0, &[]);
        expected.extend(server_frame(PING, ACK, 0, b"12345678"));
        assert_eq!(frames.out, expected);
    }

    #[test]
    fn protobuf_watches_ask_for_protobuf_and_get_frames_across_data_frames() {
        let mut frames = Frames::new(2, Encoding::Protobuf);
        let opening = frames.opening("/api/v1/pods?watch=true", "127.0.0.1:1");
        let accept = Encoding::Protobuf.accept().as_bytes();
        assert!(memchr::memmem::find(&opening, accept).is_some());
        let mut input = server_frame(HEADERS, END_HEADERS, 1, &[STATUS_OK]);
        input.extend(server_frame(HEADERS, END_HEADERS, 3, &[STATUS_OK]));
        input.extend(server_frame(DATA, 0, 1, b"\0\0\0\x03ab"));
        input.extend(server_frame(DATA, 0, 3, b"\0\0\0\x01z\0\0"));
        input.extend(server_frame(DATA, 0, 1, b"c\0\0\0\0"));
        input.extend(server_frame(DATA, 0, 3, b"\0\x02xy"));
        let mut seen = Vec::new();
        feed(&mut frames, &input, 5, |i, event| {
            seen.push((i, event.to_vec()))
        })
        .unwrap();
        let want: [(usize, &[u8]); 4] = [(1, b"z"), (0, b"abc"), (0, b""), (1, b"xy")];
        let want: Vec<(usize, Vec<u8>)> = want.iter().map(|(i, e)| (*i, e.to_vec())).collect();
        assert_eq!(seen, want);
        // JSON where frames were asked for: an error, not garbage events.
        let mut frames = Frames::new(1, Encoding::Protobuf);
        let mut input = server_frame(HEADERS, END_HEADERS, 1, &[STATUS_OK]);
        input.extend(server_frame(DATA, 0, 1, b"{\"type\":\"ADDED\"}\n"));
        assert!(frames.parse(&input, |_, _| {}).is_err());
    }

    #[test]
    fn a_watch_answered_otherwise_than_200_is_a_refusal_with_its_body() {
        let mut frames = Frames::new(1, Encoding::Json);
        // 0x8d: static entry 13, ":status: 404".
        let mut input = server_frame(HEADERS, END_HEADERS, 1, &[0x8d]);
        input.extend(server_frame(DATA, END_STREAM, 1, b"{\"kind\":\"Status\"}"));
        feed(&mut frames, &input, input.len(), |_, _| {
            panic!("no line of a refused watch")
        })
        .unwrap();
        assert!(frames.all_answered());
        assert!(frames.refusal().unwrap().contains("\"kind\":\"Status\""));
    }

    #[test]
    fn ended_streams_and_goaway_are_noted() {
        let mut frames = Frames::new(2, Encoding::Json);
        let mut input = server_frame(HEADERS, END_HEADERS, 1, &[STATUS_OK]);
        input.extend(server_frame(RST_STREAM, 0, 3, &[0, 0, 0, 8]));
        input.extend(server_frame(DATA, END_STREAM, 1, b"{}\n"));
        input.extend(server_frame(GOAWAY, 0, 0, &[0; 8]));
        feed(&mut frames, &input, 5, |_, _| {}).unwrap();
        assert_eq!(frames.watches[0].state, State::Ended);
        assert_eq!(frames.watches[1].state, State::Ended);
        assert!(frames.goaway);
    }

    #[test]
    fn bad_padding_is_an_error_not_a_panic() {
        let mut frames = Frames::new(1, Encoding::Json);
        let input = server_frame(DATA, PADDED, 1, &[9, b'x']);
        assert!(frames.parse(&input, |_, _| {}).is_err());
        assert!(unpadded(PADDED, &[], 0).is_err());
    }

    #[test]
    fn windows_are_opened_again_after_a_gigabyte() {
        let mut frames = Frames::new(1, Encoding::Json);
        frames.watches[0].state = State::Open;
        frames.received = REFILL_AFTER - 2;
        frames.watches[0].received = REFILL_AFTER - 2;
        let input = server_frame(DATA, 0, 1, b"ab");
        assert_eq!(frames.parse(&input, |_, _| {}).unwrap(), input.len());
        let mut expected = Vec::new();
        window_update(&mut expected, 0, REFILL_AFTER as u32);
        window_update(&mut expected, 1, REFILL_AFTER as u32);
        assert_eq!(frames.out, expected);
    }
}
