//! What `store-writer` and `store-member` print on stdout and how they build keys and
//! values, so the binaries and the tests that check their output agree on one definition.
//! Not a wire protocol for anything else.

use std::fmt;
use std::str::FromStr;

/// Value size store-writer uses unless told otherwise.
pub const DEFAULT_VALUE_SIZE: usize = 256;

/// One line of store-writer's or store-member's stdout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriterLine {
    /// `ready <revision>`: the store is open at this current revision.
    Ready { revision: i64 },
    /// `ack <key> <revision>`: the put of `key` was acknowledged.
    Ack(Ack),
    /// `role leader` / `role follower`: a store-member's Raft role, printed when first
    /// seen and whenever it changes.
    Role(Role),
}

/// Whether a member leads its Raft group. A candidate counts as a follower.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    Leader,
    Follower,
}

impl Role {
    fn as_str(self) -> &'static str {
        match self {
            Role::Leader => "leader",
            Role::Follower => "follower",
        }
    }
}

/// A put the store acknowledged: durable at `mod_revision`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Ack {
    pub key: String,
    pub mod_revision: i64,
}

impl fmt::Display for WriterLine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WriterLine::Ready { revision } => write!(f, "ready {revision}"),
            WriterLine::Ack(ack) => write!(f, "ack {} {}", ack.key, ack.mod_revision),
            WriterLine::Role(role) => write!(f, "role {}", role.as_str()),
        }
    }
}

/// A stdout line that is not `ready <revision>`, `ack <key> <revision>` or `role <role>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineParseError {
    pub line: String,
}

impl fmt::Display for LineParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the child printed {:?}, expected `ready <revision>`, `ack <key> <revision>` or `role leader|follower`",
            self.line
        )
    }
}

impl std::error::Error for LineParseError {}

impl FromStr for WriterLine {
    type Err = LineParseError;

    fn from_str(line: &str) -> Result<Self, Self::Err> {
        let fields: Vec<&str> = line.split(' ').collect();
        let parsed = match fields.as_slice() {
            ["ready", revision] => revision
                .parse()
                .ok()
                .map(|revision| WriterLine::Ready { revision }),
            ["ack", key, revision] if !key.is_empty() => {
                revision.parse().ok().map(|mod_revision| {
                    WriterLine::Ack(Ack {
                        key: (*key).to_string(),
                        mod_revision,
                    })
                })
            }
            ["role", "leader"] => Some(WriterLine::Role(Role::Leader)),
            ["role", "follower"] => Some(WriterLine::Role(Role::Follower)),
            _ => None,
        };
        parsed.ok_or_else(|| LineParseError {
            line: line.to_string(),
        })
    }
}

/// The `seq`th key written by writer task `task`.
pub fn writer_key(prefix: &str, task: usize, seq: u64) -> String {
    format!("{prefix}{task}/{seq:08}")
}

/// The prefix under which store-member `name` writes its keys, `{prefix}{name}/`: its
/// writer task `task` puts `writer_key(&member_prefix(prefix, name), task, seq)`.
pub fn member_prefix(prefix: &str, name: &str) -> String {
    format!("{prefix}{name}/")
}

/// Inverse of [`writer_key`]: `(task, seq)`, or `None` for a key it did not make.
pub fn parse_writer_key(prefix: &str, key: &[u8]) -> Option<(usize, u64)> {
    let rest = std::str::from_utf8(key.strip_prefix(prefix.as_bytes())?).ok()?;
    let (task, seq) = rest.split_once('/')?;
    if seq.len() != 8 {
        return None;
    }
    Some((task.parse().ok()?, seq.parse().ok()?))
}

/// The key repeated to `value_size` bytes (never shorter than the key), so a
/// value read back can be checked against its key alone.
pub fn value_for_key(key: &[u8], value_size: usize) -> Vec<u8> {
    key.iter()
        .copied()
        .cycle()
        .take(value_size.max(key.len()))
        .collect()
}

/// Keys are printed space-separated in `ack` lines, so a prefix must be
/// non-empty and free of whitespace.
pub fn check_prefix(prefix: &str) -> anyhow::Result<()> {
    anyhow::ensure!(
        !prefix.is_empty() && !prefix.contains(char::is_whitespace),
        "--prefix {prefix:?} must be non-empty and without whitespace: acks are printed space-separated"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_round_trip() {
        for line in [
            WriterLine::Ready { revision: 0 },
            WriterLine::Ack(Ack {
                key: writer_key("/crash/r1/", 7, 42),
                mod_revision: 1234,
            }),
            WriterLine::Role(Role::Leader),
            WriterLine::Role(Role::Follower),
        ] {
            assert_eq!(line.to_string().parse::<WriterLine>(), Ok(line));
        }
    }

    #[test]
    fn malformed_lines_are_rejected() {
        for line in [
            "",
            "ack",
            "ack /k",
            "ack /k x",
            "ready",
            "ready 1 2",
            "nack /k 1",
            "role",
            "role candidate",
            "role leader now",
        ] {
            assert!(line.parse::<WriterLine>().is_err(), "{line:?} parsed");
        }
    }

    #[test]
    fn keys_parse_back() {
        let key = writer_key("/p/", 3, 17);
        assert_eq!(key, "/p/3/00000017");
        assert_eq!(parse_writer_key("/p/", key.as_bytes()), Some((3, 17)));
        assert_eq!(parse_writer_key("/q/", key.as_bytes()), None);
        let prefix = member_prefix("/raft/", "n2");
        let key = writer_key(&prefix, 1, 5);
        assert_eq!(key, "/raft/n2/1/00000005");
        assert_eq!(parse_writer_key(&prefix, key.as_bytes()), Some((1, 5)));
    }

    #[test]
    fn value_encodes_the_key() {
        assert_eq!(value_for_key(b"abc", 7), b"abcabca");
        assert_eq!(value_for_key(b"abcdef", 2), b"abcdef");
    }
}
