//! The channel protocols of Kubernetes' WebSocket streams: each message is
//! one channel's bytes, the channel in the first byte (binary protocols) or
//! as an ASCII digit before base64 (the base64 protocols). v5 adds a
//! message `[255, channel]` that closes a channel (stdin's end of file).

use base64::Engine;
use bytes::Bytes;

pub const STDIN: u8 = 0;
pub const STDOUT: u8 = 1;
pub const STDERR: u8 = 2;
pub const ERROR: u8 = 3;
pub const RESIZE: u8 = 4;
/// v5: the channel byte of a close signal.
const CLOSE_SIGNAL: u8 = 255;

/// A negotiated remotecommand subprotocol over WebSocket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChannelProtocol {
    V5,
    V4,
    V4Base64,
    Base64,
    /// `channel.k8s.io`, also what a client offering no subprotocol gets.
    V1,
}

impl ChannelProtocol {
    /// Every remotecommand subprotocol served, newest first.
    pub const REMOTECOMMAND: [&'static str; 5] = [
        "v5.channel.k8s.io",
        "v4.channel.k8s.io",
        "v4.base64.channel.k8s.io",
        "base64.channel.k8s.io",
        "channel.k8s.io",
    ];

    pub fn from_name(name: &str) -> Option<Self> {
        Some(match name {
            "v5.channel.k8s.io" => ChannelProtocol::V5,
            "v4.channel.k8s.io" => ChannelProtocol::V4,
            "v4.base64.channel.k8s.io" => ChannelProtocol::V4Base64,
            "base64.channel.k8s.io" => ChannelProtocol::Base64,
            "channel.k8s.io" => ChannelProtocol::V1,
            _ => return None,
        })
    }

    pub fn is_base64(self) -> bool {
        matches!(self, ChannelProtocol::V4Base64 | ChannelProtocol::Base64)
    }

    /// Whether the error channel carries a Status (v4 and later) rather
    /// than a bare message.
    pub fn writes_status(self) -> bool {
        matches!(
            self,
            ChannelProtocol::V5 | ChannelProtocol::V4 | ChannelProtocol::V4Base64
        )
    }

    fn has_close_signal(self) -> bool {
        self == ChannelProtocol::V5
    }

    /// One channel's bytes as a message payload; `text` says whether it
    /// goes in a text message.
    pub fn encode(self, channel: u8, payload: &[u8]) -> (bool, Bytes) {
        if self.is_base64() {
            // Past channel 9 the "digit" is the next byte up, as the
            // kubelet writes it (port-forward has two channels a port).
            let mut text = vec![b'0'.wrapping_add(channel)];
            text.extend_from_slice(
                base64::engine::general_purpose::STANDARD
                    .encode(payload)
                    .as_bytes(),
            );
            (true, Bytes::from(text))
        } else {
            let mut binary = Vec::with_capacity(payload.len() + 1);
            binary.push(channel);
            binary.extend_from_slice(payload);
            (false, Bytes::from(binary))
        }
    }

    /// Reads one message from the client; `None` for an empty message,
    /// which carries nothing.
    pub fn decode(self, message: &[u8]) -> Result<Option<Frame>, FrameError> {
        let Some((&first, rest)) = message.split_first() else {
            return Ok(None);
        };
        if self.is_base64() {
            let channel = first
                .checked_sub(b'0')
                .ok_or(FrameError::BadChannel(first))?;
            let payload = base64::engine::general_purpose::STANDARD
                .decode(rest)
                .map_err(|_| FrameError::BadBase64)?;
            return Ok(Some(Frame::Data {
                channel,
                payload: Bytes::from(payload),
            }));
        }
        if first == CLOSE_SIGNAL && self.has_close_signal() {
            let channel = *rest.first().ok_or(FrameError::EmptyClose)?;
            return Ok(Some(Frame::Close { channel }));
        }
        Ok(Some(Frame::Data {
            channel: first,
            payload: Bytes::copy_from_slice(rest),
        }))
    }
}

/// One message from the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    Data {
        channel: u8,
        payload: Bytes,
    },
    /// v5: the client will send nothing more on `channel`.
    Close {
        channel: u8,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error("channel byte {0:?} is below '0'")]
    BadChannel(u8),
    #[error("the payload is not base64")]
    BadBase64,
    #[error("a close signal names no channel")]
    EmptyClose,
}

/// A resize message's payload: `{"Width":80,"Height":24}`. Go's JSON
/// decoding ignores case, so `width` and `height` are accepted too.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
pub struct TerminalSize {
    #[serde(rename = "Width", alias = "width")]
    pub width: u16,
    #[serde(rename = "Height", alias = "height")]
    pub height: u16,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binary_messages_carry_the_channel_in_the_first_byte() {
        let (text, bytes) = ChannelProtocol::V4.encode(STDOUT, b"hi");
        assert!(!text);
        assert_eq!(&bytes[..], b"\x01hi");
        assert_eq!(
            ChannelProtocol::V4.decode(b"\x00abc").unwrap(),
            Some(Frame::Data {
                channel: STDIN,
                payload: Bytes::from_static(b"abc")
            })
        );
        assert_eq!(ChannelProtocol::V4.decode(b"").unwrap(), None);
    }

    #[test]
    fn base64_messages_carry_a_digit_and_base64() {
        let (text, bytes) = ChannelProtocol::V4Base64.encode(STDERR, b"hi");
        assert!(text);
        assert_eq!(&bytes[..], b"2aGk=");
        assert_eq!(
            ChannelProtocol::Base64.decode(b"0aGk=").unwrap(),
            Some(Frame::Data {
                channel: STDIN,
                payload: Bytes::from_static(b"hi")
            })
        );
        assert_eq!(
            ChannelProtocol::Base64.decode(b"!"),
            Err(FrameError::BadChannel(b'!'))
        );
        let (_, eleventh) = ChannelProtocol::V4Base64.encode(11, b"");
        assert_eq!(&eleventh[..], b";");
        assert_eq!(
            ChannelProtocol::V4Base64.decode(b";").unwrap(),
            Some(Frame::Data {
                channel: 11,
                payload: Bytes::new()
            })
        );
        assert_eq!(
            ChannelProtocol::Base64.decode(b"0!!!"),
            Err(FrameError::BadBase64)
        );
    }

    #[test]
    fn only_v5_has_the_close_signal() {
        assert_eq!(
            ChannelProtocol::V5.decode(&[255, 0]).unwrap(),
            Some(Frame::Close { channel: STDIN })
        );
        assert_eq!(
            ChannelProtocol::V5.decode(&[255]),
            Err(FrameError::EmptyClose)
        );
        assert_eq!(
            ChannelProtocol::V4.decode(&[255, 0]).unwrap(),
            Some(Frame::Data {
                channel: 255,
                payload: Bytes::from_static(&[0])
            })
        );
    }

    #[test]
    fn protocols_are_known_by_name() {
        for name in ChannelProtocol::REMOTECOMMAND {
            assert!(ChannelProtocol::from_name(name).is_some(), "{name}");
        }
        assert_eq!(ChannelProtocol::from_name("v3.channel.k8s.io"), None);
        assert!(ChannelProtocol::V4.writes_status() && !ChannelProtocol::V1.writes_status());
    }

    #[test]
    fn resize_payloads_parse_in_either_case() {
        let size: TerminalSize = serde_json::from_str(r#"{"Width":80,"Height":24}"#).unwrap();
        assert_eq!((size.width, size.height), (80, 24));
        let size: TerminalSize = serde_json::from_str(r#"{"width":1,"height":2}"#).unwrap();
        assert_eq!((size.width, size.height), (1, 2));
        assert!(serde_json::from_str::<TerminalSize>(r#"{"Width":-1,"Height":2}"#).is_err());
    }
}
