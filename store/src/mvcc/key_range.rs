//! etcd's rules for what a `(key, range_end)` pair selects.

use std::ops::Bound;

/// Lower and upper bounds of a key scan.
pub type KeyBounds<'a> = (Bound<&'a [u8]>, Bound<&'a [u8]>);

/// The keys a request selects.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum KeyRange {
    /// Exactly one key (`range_end` empty).
    Single(Vec<u8>),
    /// `[start, end)`, or every key `>= start` when `end` is `None`
    /// (`range_end` is `\0`).
    Span {
        start: Vec<u8>,
        end: Option<Vec<u8>>,
    },
}

impl KeyRange {
    pub fn new(key: &[u8], range_end: &[u8]) -> KeyRange {
        match range_end {
            [] => KeyRange::Single(key.to_vec()),
            [0] => KeyRange::Span {
                start: key.to_vec(),
                end: None,
            },
            end => KeyRange::Span {
                start: key.to_vec(),
                end: Some(end.to_vec()),
            },
        }
    }

    pub fn contains(&self, key: &[u8]) -> bool {
        match self {
            KeyRange::Single(k) => k.as_slice() == key,
            KeyRange::Span { start, end } => {
                key >= start.as_slice() && end.as_deref().is_none_or(|end| key < end)
            }
        }
    }

    /// Whether the range can select nothing at all (`range_end <= key`).
    pub fn is_empty(&self) -> bool {
        matches!(self, KeyRange::Span { start, end: Some(end) } if end <= start)
    }

    pub fn intersects(&self, other: &KeyRange) -> bool {
        if self.is_empty() || other.is_empty() {
            return false;
        }
        match (self, other) {
            (KeyRange::Single(k), r) | (r, KeyRange::Single(k)) => r.contains(k),
            (KeyRange::Span { start: s1, end: e1 }, KeyRange::Span { start: s2, end: e2 }) => {
                let before = |start: &Vec<u8>, end: &Option<Vec<u8>>| {
                    end.as_ref().is_some_and(|end| end <= start)
                };
                !before(s2, e1) && !before(s1, e2)
            }
        }
    }

    /// The bounds to scan an ordered map with; `None` when nothing can match.
    pub fn bounds(&self) -> Option<KeyBounds<'_>> {
        if self.is_empty() {
            return None;
        }
        Some(match self {
            KeyRange::Single(k) => (Bound::Included(k.as_slice()), Bound::Included(k.as_slice())),
            KeyRange::Span { start, end } => (
                Bound::Included(start.as_slice()),
                end.as_deref().map_or(Bound::Unbounded, Bound::Excluded),
            ),
        })
    }
}

/// The `range_end` that selects every key with `prefix`: the prefix with its
/// last byte below 0xff incremented, or `\0` (to the end) when there is none.
pub fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_range_end_is_one_key() {
        let r = KeyRange::new(b"foo", b"");
        assert!(r.contains(b"foo"));
        assert!(!r.contains(b"foo1"));
        assert!(!r.contains(b"fo"));
    }

    #[test]
    fn nul_range_end_is_everything_from_key() {
        let r = KeyRange::new(b"b", b"\0");
        assert!(r.contains(b"b"));
        assert!(r.contains(b"zzzz"));
        assert!(!r.contains(b"a"));
        let all = KeyRange::new(b"\0", b"\0");
        assert!(all.contains(b"\0"));
        assert!(all.contains(b"anything"));
    }

    #[test]
    fn half_open_span() {
        let r = KeyRange::new(b"a", b"c");
        assert!(r.contains(b"a"));
        assert!(r.contains(b"bzz"));
        assert!(!r.contains(b"c"));
        assert!(KeyRange::new(b"c", b"a").is_empty());
        assert!(KeyRange::new(b"c", b"c").is_empty());
        assert!(KeyRange::new(b"c", b"a").bounds().is_none());
    }

    #[test]
    fn prefix_end_rules() {
        assert_eq!(prefix_end(b"abc"), b"abd".to_vec());
        assert_eq!(prefix_end(b"a\xff"), b"b".to_vec());
        assert_eq!(prefix_end(b"\xff\xff"), vec![0]);
        assert_eq!(prefix_end(b""), vec![0]);
    }

    #[test]
    fn intersections() {
        let single = KeyRange::new(b"b", b"");
        assert!(single.intersects(&KeyRange::new(b"a", b"c")));
        assert!(!single.intersects(&KeyRange::new(b"c", b"d")));
        assert!(KeyRange::new(b"a", b"c").intersects(&KeyRange::new(b"b", b"\0")));
        assert!(!KeyRange::new(b"a", b"c").intersects(&KeyRange::new(b"c", b"\0")));
        assert!(!KeyRange::new(b"a", b"c").intersects(&KeyRange::new(b"x", b"a")));
    }
}
