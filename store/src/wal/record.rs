//! Encoding and decoding of single WAL records; knows nothing about files.
//! Layout: `len u32 LE | crc32 u32 LE | type u8 | payload`, see the `wal` module docs.

use std::fmt;

/// Bytes before the body: length and CRC.
pub(crate) const HEADER_LEN: usize = 8;

/// Largest body (type byte + payload) a reader accepts. A length field above it
/// can only come from a torn or corrupt header, so it is never trusted enough to
/// allocate for.
pub(crate) const MAX_BODY_LEN: u32 = 64 << 20;

const TYPE_ENTRY: u8 = 1;
const TYPE_HARD_STATE: u8 = 2;
const TYPE_SNAPSHOT: u8 = 3;

const ENTRY_FIXED_LEN: usize = 16;
const HARD_STATE_LEN: usize = 24;
const SNAPSHOT_LEN: usize = 16;

/// One record of the write-ahead log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WalRecord {
    /// A log entry: (index, term) and the encoded command it carries.
    Entry {
        index: u64,
        term: u64,
        data: Vec<u8>,
    },
    /// Raft hard state.
    HardState { term: u64, vote: u64, commit: u64 },
    /// A snapshot covers everything up to (index, term).
    Snapshot { index: u64, term: u64 },
}

/// Why bytes read back from a segment are not a valid record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Corruption {
    /// Fewer than the 8 header bytes left in the file.
    ShortHeader {
        available: u64,
    },
    /// The header promises more bytes than the file holds.
    ShortBody {
        expected: u32,
        available: u64,
    },
    /// Length zero or above the 64 MiB limit.
    AbsurdLength {
        len: u32,
    },
    ChecksumMismatch {
        stored: u32,
        computed: u32,
    },
    /// The checksum is right, so the writer meant this: a newer format or a bug.
    UnknownType {
        record_type: u8,
    },
    /// The checksum is right but the payload does not fit the record type.
    BadPayload {
        record_type: u8,
        len: usize,
    },
}

impl Corruption {
    /// True when a crash in the middle of a write can explain the damage.
    /// Damage that passed the checksum cannot be a torn write, so it is never
    /// "repaired" by truncation.
    pub(crate) fn is_torn_write(&self) -> bool {
        matches!(
            self,
            Corruption::ShortHeader { .. }
                | Corruption::ShortBody { .. }
                | Corruption::AbsurdLength { .. }
                | Corruption::ChecksumMismatch { .. }
        )
    }
}

impl fmt::Display for Corruption {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Corruption::ShortHeader { available } => write!(
                f,
                "record header cut short ({available} of {HEADER_LEN} bytes present)"
            ),
            Corruption::ShortBody {
                expected,
                available,
            } => write!(
                f,
                "record body cut short ({available} of {expected} bytes present)"
            ),
            Corruption::AbsurdLength { len } => write!(
                f,
                "record length {len} is outside 1..={MAX_BODY_LEN} (damaged header)"
            ),
            Corruption::ChecksumMismatch { stored, computed } => write!(
                f,
                "CRC32 mismatch (stored {stored:#010x}, computed {computed:#010x})"
            ),
            Corruption::UnknownType { record_type } => write!(
                f,
                "unknown record type {record_type} with a valid checksum \
                 (written by a newer skiff version?)"
            ),
            Corruption::BadPayload { record_type, len } => write!(
                f,
                "record type {record_type} has a {len}-byte payload that does not fit its layout"
            ),
        }
    }
}

/// Length and checksum of the body that follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Header {
    pub body_len: u32,
    pub crc: u32,
}

impl Header {
    pub(crate) fn parse(bytes: &[u8; HEADER_LEN]) -> Result<Header, Corruption> {
        let body_len = u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
        let crc = u32::from_le_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]);
        if body_len == 0 || body_len > MAX_BODY_LEN {
            return Err(Corruption::AbsurdLength { len: body_len });
        }
        Ok(Header { body_len, crc })
    }
}

impl WalRecord {
    /// Appends the framed record to `buf`.
    ///
    /// # Panics
    /// If the body would exceed [`MAX_BODY_LEN`]: readers would reject it as
    /// corruption, so writing it would lose it and everything after it. Callers
    /// bound command size far below this.
    pub(crate) fn encode_into(&self, buf: &mut Vec<u8>) {
        let start = buf.len();
        buf.extend_from_slice(&[0; HEADER_LEN]);
        match self {
            WalRecord::Entry { index, term, data } => {
                buf.push(TYPE_ENTRY);
                buf.extend_from_slice(&index.to_le_bytes());
                buf.extend_from_slice(&term.to_le_bytes());
                buf.extend_from_slice(data);
            }
            WalRecord::HardState { term, vote, commit } => {
                buf.push(TYPE_HARD_STATE);
                buf.extend_from_slice(&term.to_le_bytes());
                buf.extend_from_slice(&vote.to_le_bytes());
                buf.extend_from_slice(&commit.to_le_bytes());
            }
            WalRecord::Snapshot { index, term } => {
                buf.push(TYPE_SNAPSHOT);
                buf.extend_from_slice(&index.to_le_bytes());
                buf.extend_from_slice(&term.to_le_bytes());
            }
        }
        let body = &buf[start + HEADER_LEN..];
        let body_len = u32::try_from(body.len())
            .ok()
            .filter(|len| *len <= MAX_BODY_LEN);
        let Some(body_len) = body_len else {
            panic!(
                "WAL record body of {} bytes exceeds the {MAX_BODY_LEN}-byte limit",
                body.len()
            );
        };
        let crc = crc32fast::hash(body);
        buf[start..start + 4].copy_from_slice(&body_len.to_le_bytes());
        buf[start + 4..start + HEADER_LEN].copy_from_slice(&crc.to_le_bytes());
    }

    /// Decodes a body (type byte + payload) whose length came from `header`.
    pub(crate) fn decode(header: Header, body: &[u8]) -> Result<WalRecord, Corruption> {
        let computed = crc32fast::hash(body);
        if computed != header.crc {
            return Err(Corruption::ChecksumMismatch {
                stored: header.crc,
                computed,
            });
        }
        let (&record_type, payload) = body
            .split_first()
            .ok_or(Corruption::AbsurdLength { len: 0 })?;
        let bad_payload = || Corruption::BadPayload {
            record_type,
            len: payload.len(),
        };
        match record_type {
            TYPE_ENTRY if payload.len() >= ENTRY_FIXED_LEN => Ok(WalRecord::Entry {
                index: u64_at(payload, 0),
                term: u64_at(payload, 8),
                data: payload[ENTRY_FIXED_LEN..].to_vec(),
            }),
            TYPE_HARD_STATE if payload.len() == HARD_STATE_LEN => Ok(WalRecord::HardState {
                term: u64_at(payload, 0),
                vote: u64_at(payload, 8),
                commit: u64_at(payload, 16),
            }),
            TYPE_SNAPSHOT if payload.len() == SNAPSHOT_LEN => Ok(WalRecord::Snapshot {
                index: u64_at(payload, 0),
                term: u64_at(payload, 8),
            }),
            TYPE_ENTRY | TYPE_HARD_STATE | TYPE_SNAPSHOT => Err(bad_payload()),
            _ => Err(Corruption::UnknownType { record_type }),
        }
    }
}

/// Callers check the payload length first, so the slice is always 8 bytes.
fn u64_at(payload: &[u8], at: usize) -> u64 {
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(&payload[at..at + 8]);
    u64::from_le_bytes(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encode(record: &WalRecord) -> Vec<u8> {
        let mut buf = Vec::new();
        record.encode_into(&mut buf);
        buf
    }

    fn decode(bytes: &[u8]) -> Result<WalRecord, Corruption> {
        let header_bytes: [u8; HEADER_LEN] = bytes[..HEADER_LEN].try_into().unwrap();
        let header = Header::parse(&header_bytes)?;
        assert_eq!(header.body_len as usize, bytes.len() - HEADER_LEN);
        WalRecord::decode(header, &bytes[HEADER_LEN..])
    }

    #[test]
    fn every_kind_round_trips() {
        let records = [
            WalRecord::Entry {
                index: 7,
                term: 3,
                data: b"put /registry/pods/a".to_vec(),
            },
            WalRecord::Entry {
                index: u64::MAX,
                term: u64::MAX,
                data: Vec::new(),
            },
            WalRecord::HardState {
                term: 4,
                vote: 2,
                commit: 99,
            },
            WalRecord::Snapshot { index: 50, term: 4 },
        ];
        for record in records {
            assert_eq!(decode(&encode(&record)), Ok(record));
        }
    }

    #[test]
    fn flipped_payload_bit_fails_the_checksum() {
        let mut bytes = encode(&WalRecord::Snapshot { index: 1, term: 1 });
        let last = bytes.len() - 1;
        bytes[last] ^= 0x01;
        let err = decode(&bytes).unwrap_err();
        assert!(
            matches!(err, Corruption::ChecksumMismatch { .. }),
            "{err:?}"
        );
        assert!(err.is_torn_write());
    }

    #[test]
    fn zero_and_huge_lengths_are_rejected_before_reading_the_body() {
        let zero = [0u8; HEADER_LEN];
        assert_eq!(
            Header::parse(&zero),
            Err(Corruption::AbsurdLength { len: 0 })
        );
        let mut huge = [0u8; HEADER_LEN];
        huge[..4].copy_from_slice(&(MAX_BODY_LEN + 1).to_le_bytes());
        assert_eq!(
            Header::parse(&huge),
            Err(Corruption::AbsurdLength {
                len: MAX_BODY_LEN + 1
            })
        );
    }

    #[test]
    fn checksummed_but_undecodable_records_are_not_torn_writes() {
        let body = [9u8, 1, 2, 3];
        let header = Header {
            body_len: body.len() as u32,
            crc: crc32fast::hash(&body),
        };
        let err = WalRecord::decode(header, &body).unwrap_err();
        assert_eq!(err, Corruption::UnknownType { record_type: 9 });
        assert!(!err.is_torn_write());

        let body = [TYPE_HARD_STATE, 1, 2, 3];
        let header = Header {
            body_len: body.len() as u32,
            crc: crc32fast::hash(&body),
        };
        let err = WalRecord::decode(header, &body).unwrap_err();
        assert!(matches!(err, Corruption::BadPayload { .. }), "{err:?}");
        assert!(!err.is_torn_write());
    }

    #[test]
    #[should_panic(expected = "exceeds")]
    fn oversized_entry_is_refused_at_encode_time() {
        let record = WalRecord::Entry {
            index: 1,
            term: 1,
            data: vec![0; MAX_BODY_LEN as usize],
        };
        encode(&record);
    }
}
