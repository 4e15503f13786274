//! The value stored under a revision in the state tree: one change to one
//! key. Fixed little-endian header, then key and value.

use crate::api::KeyValue;

const PUT: u8 = 0;
const TOMBSTONE: u8 = 1;
const HEADER_LEN: usize = 1 + 8 + 8 + 8 + 4;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub tombstone: bool,
    pub key: Vec<u8>,
    pub create_revision: i64,
    pub version: i64,
    pub lease: i64,
    pub value: Vec<u8>,
}

impl Record {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER_LEN + self.key.len() + self.value.len());
        out.push(if self.tombstone { TOMBSTONE } else { PUT });
        out.extend_from_slice(&self.create_revision.to_le_bytes());
        out.extend_from_slice(&self.version.to_le_bytes());
        out.extend_from_slice(&self.lease.to_le_bytes());
        out.extend_from_slice(&(self.key.len() as u32).to_le_bytes());
        out.extend_from_slice(&self.key);
        out.extend_from_slice(&self.value);
        out
    }

    #[cfg(test)]
    pub fn decode(bytes: &[u8]) -> Option<Record> {
        RecordView::parse(bytes).map(|view| Record {
            tombstone: view.tombstone,
            key: view.key.to_vec(),
            create_revision: view.create_revision,
            version: view.version,
            lease: view.lease,
            value: view.value.to_vec(),
        })
    }
}

/// A record read in place, without copying key or value.
#[derive(Debug, Clone, Copy)]
pub struct RecordView<'a> {
    pub tombstone: bool,
    pub key: &'a [u8],
    pub create_revision: i64,
    pub version: i64,
    pub lease: i64,
    pub value: &'a [u8],
}

impl<'a> RecordView<'a> {
    pub fn parse(bytes: &'a [u8]) -> Option<RecordView<'a>> {
        if bytes.len() < HEADER_LEN {
            return None;
        }
        let tombstone = match bytes[0] {
            PUT => false,
            TOMBSTONE => true,
            _ => return None,
        };
        let int = |at: usize| i64::from_le_bytes(bytes[at..at + 8].try_into().unwrap_or([0; 8]));
        let key_len = u32::from_le_bytes(bytes[25..29].try_into().ok()?) as usize;
        let rest = &bytes[HEADER_LEN..];
        if rest.len() < key_len {
            return None;
        }
        Some(RecordView {
            tombstone,
            create_revision: int(1),
            version: int(9),
            lease: int(17),
            key: &rest[..key_len],
            value: &rest[key_len..],
        })
    }

    pub fn into_key_value(self, mod_revision: i64, with_value: bool) -> KeyValue {
        KeyValue {
            key: self.key.to_vec(),
            create_revision: self.create_revision,
            mod_revision,
            version: self.version,
            value: if with_value {
                self.value.to_vec()
            } else {
                Vec::new()
            },
            lease: self.lease,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_rejects_garbage() {
        let rec = Record {
            tombstone: false,
            key: b"/registry/pods/default/a".to_vec(),
            create_revision: 7,
            version: 3,
            lease: 0x1234,
            value: vec![9; 300],
        };
        assert_eq!(Record::decode(&rec.encode()), Some(rec.clone()));
        let tomb = Record {
            tombstone: true,
            value: Vec::new(),
            ..rec
        };
        assert_eq!(Record::decode(&tomb.encode()), Some(tomb.clone()));
        assert_eq!(Record::decode(b"short"), None);
        let mut bad = tomb.encode();
        bad[0] = 7;
        assert_eq!(Record::decode(&bad), None);
    }
}
