//! A revision: the main revision of a write transaction and the sub-revision
//! of one change inside it. Its byte form sorts in revision order.

/// Leading byte of every key-value record in the state tree.
pub(crate) const RECORD_PREFIX: u8 = b'k';
pub(crate) const REVISION_KEY_LEN: usize = 17;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Revision {
    pub main: i64,
    pub sub: i64,
}

impl Revision {
    pub fn new(main: i64, sub: i64) -> Self {
        Revision { main, sub }
    }

    /// The record key in the state tree: prefix, then big-endian main and sub.
    pub(crate) fn to_key(self) -> [u8; REVISION_KEY_LEN] {
        debug_assert!(self.main >= 0 && self.sub >= 0);
        let mut out = [0u8; REVISION_KEY_LEN];
        out[0] = RECORD_PREFIX;
        out[1..9].copy_from_slice(&(self.main as u64).to_be_bytes());
        out[9..17].copy_from_slice(&(self.sub as u64).to_be_bytes());
        out
    }

    pub(crate) fn from_key(key: &[u8]) -> Option<Revision> {
        if key.len() != REVISION_KEY_LEN || key[0] != RECORD_PREFIX {
            return None;
        }
        let main = u64::from_be_bytes(key[1..9].try_into().ok()?);
        let sub = u64::from_be_bytes(key[9..17].try_into().ok()?);
        Some(Revision::new(main as i64, sub as i64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_form_sorts_in_revision_order() {
        let revs = [
            Revision::new(1, 0),
            Revision::new(1, 1),
            Revision::new(2, 0),
            Revision::new(256, 0),
            Revision::new(256, 300),
        ];
        for pair in revs.windows(2) {
            assert!(pair[0].to_key() < pair[1].to_key(), "{:?}", pair);
        }
        for rev in revs {
            assert_eq!(Revision::from_key(&rev.to_key()), Some(rev));
        }
        assert_eq!(Revision::from_key(b"m-short"), None);
    }
}
