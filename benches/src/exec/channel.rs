//! The binary channel frames of Kubernetes' WebSocket streams as a client
//! reads and writes them (`v4.channel.k8s.io`, `v5.channel.k8s.io`): a
//! message is one channel byte, then that channel's bytes. Port-forward
//! opens each channel with the port as two little-endian bytes. No base64
//! variants: the benchmark offers only the binary protocols.

use thiserror::Error;

/// exec's channels (remotecommand).
pub const STDOUT: u8 = 1;
pub const STDERR: u8 = 2;
pub const ERROR: u8 = 3;
/// v5's close signal: `[255, channel]` says `channel` is done.
pub const CLOSE_SIGNAL: u8 = 255;

/// Port-forward's channels for the first (here the only) port.
pub const PORT_DATA: u8 = 0;
pub const PORT_ERROR: u8 = 1;

#[derive(Debug, Error, PartialEq, Eq)]
pub enum FrameError {
    #[error("an empty message: every channel message starts with its channel byte")]
    Empty,
    #[error("channel {channel} opened with {len} byte(s) where a port takes 2")]
    ShortPort { channel: u8, len: usize },
    #[error("channel {channel} opened for port {port}, but port {expected} was asked for")]
    WrongPort {
        channel: u8,
        port: u16,
        expected: u16,
    },
    #[error("a message on channel {0}, which port-forward of one port does not have")]
    UnknownChannel(u8),
}

/// One channel's bytes as a message payload.
pub fn encode(channel: u8, payload: &[u8]) -> Vec<u8> {
    let mut message = Vec::with_capacity(payload.len() + 1);
    message.push(channel);
    message.extend_from_slice(payload);
    message
}

/// A message payload as its channel and that channel's bytes.
pub fn decode(message: &[u8]) -> Result<(u8, &[u8]), FrameError> {
    message
        .split_first()
        .map(|(c, p)| (*c, p))
        .ok_or(FrameError::Empty)
}

/// What one port-forward message from the server carries.
#[derive(Debug, PartialEq, Eq)]
pub enum PortMessage<'a> {
    /// A channel's opening frame (the port), already checked.
    Opened(u8),
    Data(&'a [u8]),
    Error(&'a [u8]),
}

/// The server side of a port-forward of one port, frame by frame: each
/// channel's first frame must carry `port`; later ones are its bytes.
#[derive(Debug)]
pub struct PortStreams {
    port: u16,
    /// Whether the data and the error channel have had their port frame.
    opened: [bool; 2],
}

impl PortStreams {
    pub fn new(port: u16) -> PortStreams {
        PortStreams {
            port,
            opened: [false; 2],
        }
    }

    /// Both channels have said their port: data may flow.
    pub fn is_open(&self) -> bool {
        self.opened == [true; 2]
    }

    pub fn receive<'a>(&mut self, message: &'a [u8]) -> Result<PortMessage<'a>, FrameError> {
        let (channel, payload) = decode(message)?;
        let index = match channel {
            PORT_DATA => 0,
            PORT_ERROR => 1,
            other => return Err(FrameError::UnknownChannel(other)),
        };
        if !self.opened[index] {
            let bytes: [u8; 2] = payload.try_into().map_err(|_| FrameError::ShortPort {
                channel,
                len: payload.len(),
            })?;
            let port = u16::from_le_bytes(bytes);
            if port != self.port {
                return Err(FrameError::WrongPort {
                    channel,
                    port,
                    expected: self.port,
                });
            }
            self.opened[index] = true;
            return Ok(PortMessage::Opened(channel));
        }
        Ok(match channel {
            PORT_DATA => PortMessage::Data(payload),
            _ => PortMessage::Error(payload),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_is_its_channel_byte_then_its_bytes() {
        assert_eq!(encode(PORT_DATA, b"abc"), b"\0abc");
        assert_eq!(encode(ERROR, b""), [3]);
        assert_eq!(decode(b"\x01out").unwrap(), (STDOUT, &b"out"[..]));
        assert_eq!(decode(&[ERROR]).unwrap(), (ERROR, &b""[..]));
        assert_eq!(decode(b""), Err(FrameError::Empty));
        let big = vec![7u8; 70_000];
        let framed = encode(PORT_DATA, &big);
        assert_eq!(framed.len(), 70_001);
        assert_eq!(decode(&framed).unwrap(), (PORT_DATA, &big[..]));
    }

    #[test]
    fn port_forward_channels_open_with_the_little_endian_port() {
        let mut streams = PortStreams::new(0x1f90); // 8080
        assert!(!streams.is_open());
        assert_eq!(
            streams.receive(&[0, 0x90, 0x1f]),
            Ok(PortMessage::Opened(PORT_DATA))
        );
        assert!(!streams.is_open(), "the error channel has not opened");
        assert_eq!(
            streams.receive(&[1, 0x90, 0x1f]),
            Ok(PortMessage::Opened(PORT_ERROR))
        );
        assert!(streams.is_open());
        // After the opening frame, two bytes are data like any others.
        assert_eq!(
            streams.receive(&[0, 0x90, 0x1f]),
            Ok(PortMessage::Data(&[0x90, 0x1f]))
        );
        assert_eq!(
            streams.receive(b"\x01refused"),
            Ok(PortMessage::Error(b"refused"))
        );
    }

    #[test]
    fn a_bad_opening_frame_is_an_error() {
        let mut streams = PortStreams::new(8080);
        assert_eq!(
            streams.receive(&[0, 0x90]),
            Err(FrameError::ShortPort { channel: 0, len: 1 })
        );
        assert_eq!(
            streams.receive(&[0, 0x91, 0x1f]),
            Err(FrameError::WrongPort {
                channel: 0,
                port: 8081,
                expected: 8080
            })
        );
        assert_eq!(
            streams.receive(&[2, 0x90, 0x1f]),
            Err(FrameError::UnknownChannel(2))
        );
        assert_eq!(streams.receive(&[]), Err(FrameError::Empty));
    }
}
