//! The in-memory ordered index from key to its generations, rebuilt from
//! the state tree on open. Holds revisions only; values live on disk.

use std::collections::{BTreeMap, HashSet};

use super::key_index::{KeyAt, KeyIndex};
use super::key_range::KeyRange;
use super::revision::Revision;

#[derive(Debug, Default)]
pub struct TreeIndex {
    tree: BTreeMap<Vec<u8>, KeyIndex>,
}

impl TreeIndex {
    /// Records a put of `key` at `rev` and returns where the key stood at
    /// `at` before it, in one search of the tree.
    pub fn put(&mut self, key: &[u8], rev: Revision, at: i64) -> Option<KeyAt> {
        match self.tree.get_mut(key) {
            Some(ki) => {
                let before = ki.get(at);
                ki.put(rev);
                before
            }
            None => {
                let mut ki = KeyIndex::default();
                ki.put(rev);
                self.tree.insert(key.to_vec(), ki);
                None
            }
        }
    }

    /// Marks `key` deleted at `rev`; false when it was not alive.
    pub fn tombstone(&mut self, key: &[u8], rev: Revision) -> bool {
        self.tree.get_mut(key).is_some_and(|ki| ki.tombstone(rev))
    }

    pub fn get(&self, key: &[u8], at: i64) -> Option<KeyAt> {
        self.tree.get(key)?.get(at)
    }

    /// Calls `visit` for every key in `range` that existed at `at`, in key
    /// order, until it returns false.
    pub fn visit_range(
        &self,
        range: &KeyRange,
        at: i64,
        mut visit: impl FnMut(&[u8], KeyAt) -> bool,
    ) {
        let Some(bounds) = range.bounds() else {
            return;
        };
        for (key, ki) in self.tree.range::<[u8], _>(bounds) {
            if let Some(found) = ki.get(at) {
                if !visit(key, found) {
                    return;
                }
            }
        }
    }

    /// Keys alive at `at` in `range`, with where each stood.
    pub fn range(&self, range: &KeyRange, at: i64) -> Vec<(Vec<u8>, KeyAt)> {
        let mut out = Vec::new();
        self.visit_range(range, at, |key, found| {
            out.push((key.to_vec(), found));
            true
        });
        out
    }

    /// Compacts every key at main revision `at`; returns the revisions at or
    /// below `at` that must stay on disk.
    pub fn compact(&mut self, at: i64) -> HashSet<Revision> {
        let mut keep = HashSet::new();
        self.tree.retain(|_, ki| !ki.compact(at, &mut keep));
        keep
    }

    pub fn len(&self) -> usize {
        self.tree.len()
    }

    /// Keys that exist now (not deleted), as etcd's keys gauge counts.
    pub fn live_keys(&self) -> usize {
        self.tree.values().filter(|ki| ki.is_alive()).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rev(main: i64) -> Revision {
        Revision::new(main, 0)
    }

    #[test]
    fn range_sees_keys_alive_at_revision() {
        let mut idx = TreeIndex::default();
        idx.put(b"a", rev(1), 0);
        idx.put(b"b", rev(2), 0);
        idx.put(b"c", rev(3), 0);
        assert!(idx.tombstone(b"b", rev(4)));
        assert!(!idx.tombstone(b"zz", rev(5)));
        let all = KeyRange::new(b"a", b"\0");
        let keys = |at| {
            idx.range(&all, at)
                .into_iter()
                .map(|(k, _)| k)
                .collect::<Vec<_>>()
        };
        assert_eq!(keys(1), vec![b"a".to_vec()]);
        assert_eq!(keys(3), vec![b"a".to_vec(), b"b".to_vec(), b"c".to_vec()]);
        assert_eq!(keys(4), vec![b"a".to_vec(), b"c".to_vec()]);
        assert!(idx.range(&KeyRange::new(b"c", b"a"), 4).is_empty());
    }

    #[test]
    fn compact_drops_dead_keys_entirely() {
        let mut idx = TreeIndex::default();
        idx.put(b"a", rev(1), 0);
        idx.put(b"b", rev(2), 0);
        idx.tombstone(b"b", rev(3));
        let keep = idx.compact(3);
        assert_eq!(keep, HashSet::from([rev(1)]));
        assert_eq!(idx.len(), 1);
        assert!(idx.get(b"b", 3).is_none());
        assert_eq!(idx.get(b"a", 3).unwrap().modified, rev(1));
    }
}
