//! The value stored under a revision in the state tree: one change to one
//! key. A kind byte and varint fields, then key and value.

use crate::api::KeyValue;

const PUT: u8 = 0;
const TOMBSTONE: u8 = 1;

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
    /// kind byte, then create_revision, version, lease and the key length as
    /// LEB128 varints (a few bytes where fixed fields took 28), then key and
    /// value. Small records matter: every byte is paid again in sled.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(1 + 4 * 10 + self.key.len() + self.value.len());
        out.push(if self.tombstone { TOMBSTONE } else { PUT });
        put_varint(&mut out, self.create_revision as u64);
        put_varint(&mut out, self.version as u64);
        put_varint(&mut out, self.lease as u64);
        put_varint(&mut out, self.key.len() as u64);
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

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Reads a varint from the front of `bytes`, advancing it.
fn take_varint(bytes: &mut &[u8]) -> Option<u64> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let (&byte, rest) = bytes.split_first()?;
        *bytes = rest;
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Some(value);
        }
    }
    None
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
        let (&kind, mut rest) = bytes.split_first()?;
        let tombstone = match kind {
            PUT => false,
            TOMBSTONE => true,
            _ => return None,
        };
        let create_revision = take_varint(&mut rest)? as i64;
        let version = take_varint(&mut rest)? as i64;
        let lease = take_varint(&mut rest)? as i64;
        let key_len = usize::try_from(take_varint(&mut rest)?).ok()?;
        if rest.len() < key_len {
            return None;
        }
        let (key, value) = rest.split_at(key_len);
        Some(RecordView {
            tombstone,
            key,
            create_revision,
            version,
            lease,
            value,
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
        assert_eq!(Record::decode(b"\x00\x80"), None, "cut inside a varint");
        assert_eq!(
            Record::decode(b"\x00\x01\x01\x00\x09ab"),
            None,
            "key longer than the record"
        );
        let negative_lease = Record {
            lease: -5,
            create_revision: i64::MAX,
            ..tomb.clone()
        };
        assert_eq!(
            Record::decode(&negative_lease.encode()),
            Some(negative_lease)
        );
        let mut bad = tomb.encode();
        bad[0] = 7;
        assert_eq!(Record::decode(&bad), None);
    }
}
