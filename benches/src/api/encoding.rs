//! The two encodings a point is measured in — JSON, and Kubernetes'
//! protobuf as client-go asks for it — their request headers, and how a
//! watch body splits into events: lines of JSON, or length-prefixed frames.

use anyhow::Result;

use super::http::Lines;
use super::protobuf::Frames;

/// Kubernetes' protobuf media type, for request bodies.
pub const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";
/// client-go's Accept when its content type is protobuf: protobuf first,
/// JSON for what has no protobuf form.
const CLIENT_GO_ACCEPT: &str = "application/vnd.kubernetes.protobuf, application/json";
const JSON: &str = "application/json";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    Json,
    /// Bodies in the `k8s\0` envelope, Accept as client-go's.
    Protobuf,
}

impl Encoding {
    pub fn parse(text: &str) -> Result<Encoding, String> {
        match text {
            "json" => Ok(Encoding::Json),
            "protobuf" | "proto" | "pb" => Ok(Encoding::Protobuf),
            other => Err(format!("unknown encoding {other:?}: use json or protobuf")),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Encoding::Json => "JSON",
            Encoding::Protobuf => "protobuf",
        }
    }

    pub fn accept(self) -> &'static str {
        match self {
            Encoding::Json => JSON,
            Encoding::Protobuf => CLIENT_GO_ACCEPT,
        }
    }

    pub fn content_type(self) -> &'static str {
        match self {
            Encoding::Json => JSON,
            Encoding::Protobuf => PROTOBUF,
        }
    }

    /// An empty splitter for a watch body in this encoding.
    pub fn watch_events(self) -> WatchEvents {
        match self {
            Encoding::Json => WatchEvents::Lines(Lines::default()),
            Encoding::Protobuf => WatchEvents::Frames(Frames::default()),
        }
    }
}

/// What the benchmark reads of one watch event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    Bookmark,
    /// An event of a pod the benchmark wrote: its sequence annotation.
    Sequence(usize),
    /// Anything else: an ERROR event, a foreign object, bytes that do not
    /// decode.
    Unexpected,
}

/// A watch body's events, from chunks that may cut them anywhere.
pub enum WatchEvents {
    /// `application/json`: one event per line.
    Lines(Lines),
    /// `application/vnd.kubernetes.protobuf;stream=watch`: a 4-byte
    /// big-endian length, then a `WatchEvent`.
    Frames(Frames),
}

impl WatchEvents {
    /// Hands `on_event` every event `data` completes (a line without its
    /// newline, a frame without its length), keeping the rest.
    pub fn split(&mut self, data: &[u8], on_event: impl FnMut(&[u8])) -> Result<()> {
        match self {
            WatchEvents::Lines(lines) => {
                lines.split(data, on_event);
                Ok(())
            }
            WatchEvents::Frames(frames) => frames.split(data, on_event),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodings_are_named_and_parsed() {
        for encoding in [Encoding::Json, Encoding::Protobuf] {
            let flag = encoding.name().to_ascii_lowercase();
            assert_eq!(Encoding::parse(&flag), Ok(encoding));
        }
        assert!(Encoding::parse("yaml").is_err());
        assert!(Encoding::Protobuf.accept().starts_with(PROTOBUF));
    }

    #[test]
    fn each_encoding_splits_its_own_stream() {
        let mut seen = Vec::new();
        let mut json = Encoding::Json.watch_events();
        json.split(b"{\"a\":1}\n{\"b\"", |e| seen.push(e.to_vec()))
            .unwrap();
        json.split(b":2}\n", |e| seen.push(e.to_vec())).unwrap();
        let mut protobuf = Encoding::Protobuf.watch_events();
        protobuf
            .split(b"\0\0\0\x02ab\0\0", |e| seen.push(e.to_vec()))
            .unwrap();
        protobuf
            .split(b"\0\x01c", |e| seen.push(e.to_vec()))
            .unwrap();
        assert_eq!(seen, [&b"{\"a\":1}"[..], b"{\"b\":2}", b"ab", b"c"]);
    }
}
