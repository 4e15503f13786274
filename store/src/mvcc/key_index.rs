//! The history of one key as generations: a generation runs from the put
//! that created the key to the tombstone that deleted it. The last
//! generation is the live one (empty when the key is currently deleted).

use std::collections::HashSet;

use super::revision::Revision;

#[derive(Debug, Clone, PartialEq, Eq)]
struct Generation {
    /// Puts in this generation so far (the key's `version` at its last put).
    version: i64,
    created: Revision,
    /// Every change in this generation, oldest first; a closed generation
    /// ends with its tombstone.
    revs: Vec<Revision>,
}

impl Generation {
    fn empty() -> Self {
        Generation {
            version: 0,
            created: Revision::default(),
            revs: Vec::new(),
        }
    }
}

/// Where a key stood at some revision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyAt {
    pub modified: Revision,
    pub created: Revision,
    pub version: i64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyIndex {
    generations: Vec<Generation>,
}

impl Default for KeyIndex {
    fn default() -> Self {
        KeyIndex {
            generations: vec![Generation::empty()],
        }
    }
}

impl KeyIndex {
    pub fn put(&mut self, rev: Revision) {
        let current = self.current_mut();
        if let Some(last) = current.revs.last() {
            assert!(rev > *last, "key index: put at {rev:?} after {last:?}");
        }
        if current.revs.is_empty() {
            current.created = rev;
        }
        current.revs.push(rev);
        current.version += 1;
    }

    /// Ends the live generation. Returns false (and changes nothing) when
    /// the key is not alive.
    pub fn tombstone(&mut self, rev: Revision) -> bool {
        if self.current().revs.is_empty() {
            return false;
        }
        self.put(rev);
        self.generations.push(Generation::empty());
        true
    }

    /// The key exists now (its latest generation is not ended).
    pub fn is_alive(&self) -> bool {
        !self.current().revs.is_empty()
    }

    /// The key as of revision `at` (main revision), if it existed then.
    pub fn get(&self, at: i64) -> Option<KeyAt> {
        let last = self.generations.len() - 1;
        for (i, generation) in self.generations.iter().enumerate().rev() {
            let Some(first) = generation.revs.first() else {
                continue;
            };
            if i != last {
                let tombstone = generation.revs[generation.revs.len() - 1];
                if tombstone.main <= at {
                    return None;
                }
            }
            if first.main <= at {
                let n = generation.revs.partition_point(|r| r.main <= at) - 1;
                let newer = (generation.revs.len() - 1 - n) as i64;
                return Some(KeyAt {
                    modified: generation.revs[n],
                    created: generation.created,
                    version: generation.version - newer,
                });
            }
        }
        None
    }

    /// Drops history older than main revision `at`, keeping what a read at
    /// `at` needs. Revisions still needed on disk at or below `at` are added
    /// to `keep`. Returns true when nothing of the key remains.
    pub fn compact(&mut self, at: i64, keep: &mut HashSet<Revision>) -> bool {
        // The first generation that still matters: one whose tombstone
        // is after `at`, or the live generation.
        let mut start = 0;
        while start < self.generations.len() - 1 {
            let g = &self.generations[start];
            if g.revs[g.revs.len() - 1].main > at {
                break;
            }
            start += 1;
        }
        let last = self.generations.len() - 1;
        let generation = &mut self.generations[start];
        let n = generation.revs.partition_point(|r| r.main <= at);
        if n > 0 {
            let newest_old = generation.revs[n - 1];
            generation.revs.drain(..n - 1);
            keep.insert(newest_old);
            // A generation left holding only its tombstone is over.
            if generation.revs.len() == 1 && start != last {
                keep.remove(&newest_old);
                start += 1;
            }
        }
        self.generations.drain(..start);
        self.generations.len() == 1 && self.generations[0].revs.is_empty()
    }

    fn current(&self) -> &Generation {
        &self.generations[self.generations.len() - 1]
    }

    fn current_mut(&mut self) -> &mut Generation {
        let last = self.generations.len() - 1;
        &mut self.generations[last]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rev(main: i64) -> Revision {
        Revision::new(main, 0)
    }

    /// puts at 2, 4, 6; deleted at 8; puts at 10, 12; deleted at 14; put at 16.
    fn three_generations() -> KeyIndex {
        let mut ki = KeyIndex::default();
        for m in [2, 4, 6] {
            ki.put(rev(m));
        }
        assert!(ki.tombstone(rev(8)));
        for m in [10, 12] {
            ki.put(rev(m));
        }
        assert!(ki.tombstone(rev(14)));
        ki.put(rev(16));
        ki
    }

    #[test]
    fn get_walks_generations() {
        let ki = three_generations();
        assert_eq!(ki.get(1), None);
        let at3 = ki.get(3).unwrap();
        assert_eq!(
            (at3.modified, at3.created, at3.version),
            (rev(2), rev(2), 1)
        );
        let at7 = ki.get(7).unwrap();
        assert_eq!(
            (at7.modified, at7.created, at7.version),
            (rev(6), rev(2), 3)
        );
        assert_eq!(ki.get(8), None, "deleted at its tombstone");
        assert_eq!(ki.get(9), None);
        let at13 = ki.get(13).unwrap();
        assert_eq!(
            (at13.modified, at13.created, at13.version),
            (rev(12), rev(10), 2)
        );
        assert_eq!(ki.get(15), None);
        let at99 = ki.get(99).unwrap();
        assert_eq!(
            (at99.modified, at99.created, at99.version),
            (rev(16), rev(16), 1)
        );
    }

    #[test]
    fn tombstone_of_dead_key_is_refused() {
        let mut ki = KeyIndex::default();
        assert!(!ki.tombstone(rev(1)));
        ki.put(rev(2));
        assert!(ki.tombstone(rev(3)));
        assert!(!ki.tombstone(rev(4)));
        assert!(!ki.is_alive());
    }

    #[test]
    fn compact_keeps_what_reads_need() {
        let mut ki = three_generations();
        let mut keep = HashSet::new();
        assert!(!ki.compact(5, &mut keep));
        assert_eq!(keep, HashSet::from([rev(4)]));
        assert_eq!(ki.get(5).unwrap().modified, rev(4));
        assert_eq!(ki.get(5).unwrap().version, 2, "version survives compaction");
        assert_eq!(ki.get(7).unwrap().modified, rev(6));

        // Compacting at the tombstone drops the whole first generation.
        let mut keep = HashSet::new();
        assert!(!ki.compact(8, &mut keep));
        assert!(keep.is_empty());
        assert_eq!(ki.get(9), None);
        assert_eq!(ki.get(11).unwrap().modified, rev(10));

        let mut keep = HashSet::new();
        assert!(!ki.compact(13, &mut keep));
        assert_eq!(keep, HashSet::from([rev(12)]));

        let mut keep = HashSet::new();
        assert!(!ki.compact(20, &mut keep));
        assert_eq!(keep, HashSet::from([rev(16)]));
        assert_eq!(ki.get(20).unwrap().modified, rev(16));
    }

    #[test]
    fn compact_of_deleted_key_empties_it() {
        let mut ki = KeyIndex::default();
        ki.put(rev(1));
        ki.put(rev(2));
        ki.tombstone(rev(3));
        let mut keep = HashSet::new();
        assert!(!ki.compact(2, &mut keep), "still readable at 2");
        assert_eq!(keep, HashSet::from([rev(2)]));
        let mut keep = HashSet::new();
        assert!(ki.compact(3, &mut keep), "nothing left after the tombstone");
        assert!(keep.is_empty());
    }

    #[test]
    fn compact_before_first_revision_changes_nothing() {
        let mut ki = three_generations();
        let before = ki.clone();
        let mut keep = HashSet::new();
        assert!(!ki.compact(1, &mut keep));
        assert!(keep.is_empty());
        assert_eq!(ki, before);
    }
}
