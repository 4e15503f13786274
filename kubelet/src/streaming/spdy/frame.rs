//! SPDY/3 frames as the SPDY/3 draft defines them: an 8-byte header (a
//! control bit, then version and type, or the stream id of a data frame;
//! flags; a 24-bit length) and the payload. Header blocks are compressed
//! with one zlib context per direction, primed with the SPDY/3 dictionary.

use bytes::Bytes;
use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress, Status};
use tokio::io::{AsyncRead, AsyncReadExt};

use super::dictionary::HEADER_DICTIONARY;

const VERSION: u16 = 3;
pub const FLAG_FIN: u8 = 0x01;

const SYN_STREAM: u16 = 1;
const SYN_REPLY: u16 = 2;
const RST_STREAM: u16 = 3;
const SETTINGS: u16 = 4;
const PING: u16 = 6;
const GOAWAY: u16 = 7;
const HEADERS: u16 = 8;
const WINDOW_UPDATE: u16 = 9;

/// The largest frame payload accepted; a peer sending more is cut off, so
/// one connection holds a bounded amount of memory.
pub const MAX_PAYLOAD: usize = 1024 * 1024;
/// The largest decompressed header block accepted.
const MAX_HEADER_BLOCK: usize = 64 * 1024;

/// A header block's name/value pairs; names are lower case.
pub type Headers = Vec<(String, String)>;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    Data {
        stream_id: u32,
        fin: bool,
        data: Bytes,
    },
    SynStream {
        stream_id: u32,
        fin: bool,
        headers: Headers,
    },
    SynReply {
        stream_id: u32,
        fin: bool,
        headers: Headers,
    },
    RstStream {
        stream_id: u32,
        status: u32,
    },
    Ping {
        id: u32,
    },
    GoAway {
        last_good_stream_id: u32,
        status: u32,
    },
    Headers {
        stream_id: u32,
        fin: bool,
        headers: Headers,
    },
    WindowUpdate {
        stream_id: u32,
        delta: u32,
    },
    /// SETTINGS, and control frames of unknown types: read and ignored.
    Ignored,
}

#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("reading the connection: {0}")]
    Io(#[from] std::io::Error),
    #[error("a frame of {0} bytes is larger than the {MAX_PAYLOAD} accepted")]
    TooLarge(usize),
    #[error("SPDY version {0} is not 3")]
    Version(u16),
    #[error("a frame of type {kind} is too short ({length} bytes)")]
    Short { kind: u16, length: usize },
    #[error("a header block cannot be decompressed: {0}")]
    Compression(String),
    #[error("a header block is malformed")]
    BadHeaderBlock,
}

/// Reads frames from the peer, decompressing header blocks.
pub struct FrameReader<R> {
    io: R,
    headers: Decompress,
}

impl<R: AsyncRead + Unpin> FrameReader<R> {
    pub fn new(io: R) -> Self {
        FrameReader {
            io,
            headers: Decompress::new(true),
        }
    }

    /// The next frame; `None` when the peer closed the connection between
    /// frames.
    pub async fn next(&mut self) -> Result<Option<Frame>, FrameError> {
        let mut head = [0u8; 8];
        match self.io.read_exact(&mut head).await {
            Ok(_) => {}
            Err(err) if err.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
            Err(err) => return Err(err.into()),
        }
        let flags = head[4];
        let length = usize::from(head[5]) << 16 | usize::from(head[6]) << 8 | usize::from(head[7]);
        if length > MAX_PAYLOAD {
            return Err(FrameError::TooLarge(length));
        }
        let mut payload = vec![0u8; length];
        self.io.read_exact(&mut payload).await?;
        let first = u32::from_be_bytes([head[0], head[1], head[2], head[3]]);
        if first & 0x8000_0000 == 0 {
            return Ok(Some(Frame::Data {
                stream_id: first,
                fin: flags & FLAG_FIN != 0,
                data: Bytes::from(payload),
            }));
        }
        let version = ((first >> 16) & 0x7fff) as u16;
        if version != VERSION {
            return Err(FrameError::Version(version));
        }
        let kind = (first & 0xffff) as u16;
        self.control(kind, flags, &payload).map(Some)
    }

    fn control(&mut self, kind: u16, flags: u8, payload: &[u8]) -> Result<Frame, FrameError> {
        let fin = flags & FLAG_FIN != 0;
        let need = |n: usize| {
            if payload.len() < n {
                Err(FrameError::Short {
                    kind,
                    length: payload.len(),
                })
            } else {
                Ok(())
            }
        };
        let word = |at: usize| {
            u32::from_be_bytes([
                payload[at],
                payload[at + 1],
                payload[at + 2],
                payload[at + 3],
            ]) & 0x7fff_ffff
        };
        Ok(match kind {
            SYN_STREAM => {
                need(10)?;
                let headers = self.decompress(&payload[10..])?;
                Frame::SynStream {
                    stream_id: word(0),
                    fin,
                    headers,
                }
            }
            SYN_REPLY | HEADERS => {
                need(4)?;
                let headers = self.decompress(&payload[4..])?;
                let stream_id = word(0);
                if kind == SYN_REPLY {
                    Frame::SynReply {
                        stream_id,
                        fin,
                        headers,
                    }
                } else {
                    Frame::Headers {
                        stream_id,
                        fin,
                        headers,
                    }
                }
            }
            RST_STREAM => {
                need(8)?;
                Frame::RstStream {
                    stream_id: word(0),
                    status: word(4),
                }
            }
            PING => {
                need(4)?;
                Frame::Ping {
                    id: u32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]]),
                }
            }
            GOAWAY => {
                need(8)?;
                Frame::GoAway {
                    last_good_stream_id: word(0),
                    status: word(4),
                }
            }
            WINDOW_UPDATE => {
                need(8)?;
                Frame::WindowUpdate {
                    stream_id: word(0),
                    delta: word(4),
                }
            }
            SETTINGS => Frame::Ignored,
            _ => Frame::Ignored,
        })
    }

    /// Inflates one header block in the connection's zlib context and
    /// parses its pairs.
    fn decompress(&mut self, block: &[u8]) -> Result<Headers, FrameError> {
        let mut out =
            Vec::with_capacity(block.len().saturating_mul(4).clamp(256, MAX_HEADER_BLOCK));
        let mut input = block;
        loop {
            if out.len() == out.capacity() {
                if out.len() >= MAX_HEADER_BLOCK {
                    return Err(FrameError::Compression(format!(
                        "more than {MAX_HEADER_BLOCK} bytes of headers"
                    )));
                }
                out.reserve(out.len().min(MAX_HEADER_BLOCK - out.len()).max(1));
            }
            let before = self.headers.total_in();
            let produced_before = out.len();
            let result = self
                .headers
                .decompress_vec(input, &mut out, FlushDecompress::Sync);
            let consumed = usize::try_from(self.headers.total_in() - before).unwrap_or(input.len());
            input = &input[consumed.min(input.len())..];
            let stalled = consumed == 0 && out.len() == produced_before;
            match result {
                Ok(Status::StreamEnd) => break,
                Ok(_) if input.is_empty() && out.len() < out.capacity() => break,
                Ok(_) if stalled && out.len() < out.capacity() => {
                    return Err(FrameError::Compression("no progress".into()))
                }
                Ok(_) => {}
                Err(err) if err.needs_dictionary().is_some() => {
                    self.headers
                        .set_dictionary(&HEADER_DICTIONARY)
                        .map_err(|err| FrameError::Compression(err.to_string()))?;
                }
                Err(err) => return Err(FrameError::Compression(err.to_string())),
            }
        }
        parse_header_block(&out)
    }
}

/// `count`, then each name and value with a 32-bit length before it.
fn parse_header_block(block: &[u8]) -> Result<Headers, FrameError> {
    let mut cursor = Cursor(block);
    let count = cursor.length()?;
    let mut headers = Vec::new();
    for _ in 0..count {
        let n = cursor.length()?;
        let name = String::from_utf8_lossy(cursor.take(n)?).to_ascii_lowercase();
        let n = cursor.length()?;
        let value = String::from_utf8_lossy(cursor.take(n)?).into_owned();
        headers.push((name, value));
    }
    Ok(headers)
}

/// The unread rest of a header block.
struct Cursor<'a>(&'a [u8]);

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], FrameError> {
        if self.0.len() < n {
            return Err(FrameError::BadHeaderBlock);
        }
        let (taken, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(taken)
    }

    fn length(&mut self) -> Result<usize, FrameError> {
        let b = self.take(4)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize)
    }
}

/// Writes frames to the peer, compressing header blocks.
pub struct FrameWriter {
    headers: Compress,
}

impl Default for FrameWriter {
    fn default() -> Self {
        Self::new()
    }
}

impl FrameWriter {
    pub fn new() -> Self {
        let mut headers = Compress::new(Compression::default(), true);
        // Only fails on a stream that already started.
        let _ = headers.set_dictionary(&HEADER_DICTIONARY);
        FrameWriter { headers }
    }

    /// The bytes of `frame`. Data larger than a frame holds must be split
    /// by the caller (see [`MAX_PAYLOAD`]).
    pub fn encode(&mut self, frame: &Frame) -> Vec<u8> {
        match frame {
            Frame::Data {
                stream_id,
                fin,
                data,
            } => {
                let mut out = Vec::with_capacity(8 + data.len());
                out.extend_from_slice(&(stream_id & 0x7fff_ffff).to_be_bytes());
                push_flags_length(&mut out, flag(*fin), data.len());
                out.extend_from_slice(data);
                out
            }
            Frame::SynStream {
                stream_id,
                fin,
                headers,
            } => {
                let mut payload = (stream_id & 0x7fff_ffff).to_be_bytes().to_vec();
                payload.extend_from_slice(&[0, 0, 0, 0, 0, 0]);
                payload.extend(self.compress(headers));
                control(SYN_STREAM, flag(*fin), &payload)
            }
            Frame::SynReply {
                stream_id,
                fin,
                headers,
            } => {
                let mut payload = (stream_id & 0x7fff_ffff).to_be_bytes().to_vec();
                payload.extend(self.compress(headers));
                control(SYN_REPLY, flag(*fin), &payload)
            }
            Frame::Headers {
                stream_id,
                fin,
                headers,
            } => {
                let mut payload = (stream_id & 0x7fff_ffff).to_be_bytes().to_vec();
                payload.extend(self.compress(headers));
                control(HEADERS, flag(*fin), &payload)
            }
            Frame::RstStream { stream_id, status } => {
                control(RST_STREAM, 0, &two_words(*stream_id, *status))
            }
            Frame::Ping { id } => control(PING, 0, &id.to_be_bytes()),
            Frame::GoAway {
                last_good_stream_id,
                status,
            } => control(GOAWAY, 0, &two_words(*last_good_stream_id, *status)),
            Frame::WindowUpdate { stream_id, delta } => {
                control(WINDOW_UPDATE, 0, &two_words(*stream_id, *delta))
            }
            Frame::Ignored => control(SETTINGS, 0, &0u32.to_be_bytes()),
        }
    }

    fn compress(&mut self, headers: &Headers) -> Vec<u8> {
        let mut block = Vec::new();
        block.extend_from_slice(&(headers.len() as u32).to_be_bytes());
        for (name, value) in headers {
            for part in [name.as_bytes(), value.as_bytes()] {
                block.extend_from_slice(&(part.len() as u32).to_be_bytes());
                block.extend_from_slice(part);
            }
        }
        let mut out = Vec::with_capacity(block.len() + 64);
        let mut input = &block[..];
        loop {
            if out.capacity() - out.len() < 64 {
                out.reserve(256);
            }
            let before = self.headers.total_in();
            let _ = self
                .headers
                .compress_vec(input, &mut out, FlushCompress::Sync);
            let consumed = usize::try_from(self.headers.total_in() - before).unwrap_or(input.len());
            input = &input[consumed.min(input.len())..];
            // A sync flush is complete once the input is used up and the
            // output was not cut short.
            if input.is_empty() && out.len() < out.capacity() {
                return out;
            }
        }
    }
}

fn flag(fin: bool) -> u8 {
    if fin {
        FLAG_FIN
    } else {
        0
    }
}

fn two_words(first: u32, second: u32) -> [u8; 8] {
    let mut out = [0u8; 8];
    out[..4].copy_from_slice(&(first & 0x7fff_ffff).to_be_bytes());
    out[4..].copy_from_slice(&second.to_be_bytes());
    out
}

fn control(kind: u16, flags: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + payload.len());
    out.extend_from_slice(&(0x8000 | VERSION).to_be_bytes());
    out.extend_from_slice(&kind.to_be_bytes());
    push_flags_length(&mut out, flags, payload.len());
    out.extend_from_slice(payload);
    out
}

fn push_flags_length(out: &mut Vec<u8>, flags: u8, length: usize) {
    out.push(flags);
    out.extend_from_slice(&(length as u32).to_be_bytes()[1..]);
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

    async fn read_all(bytes: Vec<u8>) -> Vec<Frame> {
        let mut reader = FrameReader::new(&bytes[..]);
        let mut frames = Vec::new();
        while let Some(frame) = reader.next().await.unwrap() {
            frames.push(frame);
        }
        frames
    }

    #[tokio::test]
    async fn frames_round_trip_with_one_zlib_context_per_direction() {
        let mut writer = FrameWriter::new();
        let frames = vec![
            Frame::SynStream {
                stream_id: 1,
                fin: false,
                headers: headers(&[("streamtype", "error")]),
            },
            Frame::SynStream {
                stream_id: 3,
                fin: false,
                headers: headers(&[("streamtype", "stdout"), ("port", "8080")]),
            },
            Frame::SynReply {
                stream_id: 3,
                fin: false,
                headers: Vec::new(),
            },
            Frame::Data {
                stream_id: 3,
                fin: true,
                data: Bytes::from_static(b"hi"),
            },
            Frame::Ping { id: 7 },
            Frame::RstStream {
                stream_id: 5,
                status: 5,
            },
            Frame::GoAway {
                last_good_stream_id: 3,
                status: 0,
            },
            Frame::WindowUpdate {
                stream_id: 1,
                delta: 1000,
            },
        ];
        let bytes: Vec<u8> = frames.iter().flat_map(|f| writer.encode(f)).collect();
        assert_eq!(read_all(bytes).await, frames);
    }

    #[tokio::test]
    async fn a_header_block_starts_with_the_spdy3_dictionary_id() {
        let bytes = FrameWriter::new().encode(&Frame::SynReply {
            stream_id: 1,
            fin: false,
            headers: Vec::new(),
        });
        // Control bit and version 3, type 2; the zlib header after the
        // stream id names the dictionary by its Adler-32.
        assert_eq!(&bytes[..4], &[0x80, 0x03, 0x00, 0x02]);
        assert_eq!(&bytes[14..18], &[0xe3, 0xc6, 0xa7, 0xc2]);
    }

    #[tokio::test]
    async fn oversized_and_malformed_frames_are_errors_not_panics() {
        let huge = [0, 0, 0, 1, 0, 0xff, 0xff, 0xff];
        assert!(matches!(
            FrameReader::new(&huge[..]).next().await,
            Err(FrameError::TooLarge(_))
        ));
        let short_rst = [0x80, 3, 0, 3, 0, 0, 0, 2, 0, 0];
        assert!(matches!(
            FrameReader::new(&short_rst[..]).next().await,
            Err(FrameError::Short { .. })
        ));
        // A header block that inflates to far more than a header block
        // holds: an error, not that much memory.
        let mut bomb_writer = FrameWriter::new();
        let bomb = bomb_writer.encode(&Frame::SynReply {
            stream_id: 1,
            fin: false,
            headers: vec![("x".into(), "y".repeat(MAX_HEADER_BLOCK * 4))],
        });
        assert!(bomb.len() < MAX_PAYLOAD);
        assert!(matches!(
            FrameReader::new(&bomb[..]).next().await,
            Err(FrameError::Compression(_))
        ));
        let garbage_headers = [0x80, 3, 0, 2, 0, 0, 0, 8, 0, 0, 0, 1, 1, 2, 3, 4];
        assert!(FrameReader::new(&garbage_headers[..]).next().await.is_err());
        let torn = [0, 0, 0, 1, 0, 0, 0, 5, b'a'];
        assert!(FrameReader::new(&torn[..]).next().await.is_err());
        assert!(parse_header_block(&[0, 0, 0, 9, 0, 0]).is_err());
        assert!(parse_header_block(&[0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff]).is_err());
    }
}
