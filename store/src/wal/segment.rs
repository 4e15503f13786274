//! Segment files: naming, listing a log directory, and reading one file back.
//! Knows nothing about which segment is active or when to roll.

use std::fs::File;
use std::io::{BufReader, Read};
use std::path::{Path, PathBuf};

use super::error::WalError;
use super::record::{Corruption, Header, WalRecord, HEADER_LEN};

const SUFFIX: &str = ".wal";
const HEX_DIGITS: usize = 16;

/// Replay reads sequentially; a large buffer keeps it to few syscalls.
const READ_BUFFER: usize = 256 << 10;

/// What the log knows about one segment file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Segment {
    /// Position in the log; consecutive from the oldest remaining segment.
    pub seq: u64,
    pub path: PathBuf,
    /// Bytes of whole, valid records on disk.
    pub size: u64,
    /// Lowest and highest Entry index in the file, `None` if it holds no entries.
    /// Both are kept because entries are not monotonic once Raft rewrites a suffix.
    pub min_index: Option<u64>,
    pub max_index: Option<u64>,
}

impl Segment {
    pub(crate) fn new(seq: u64, path: PathBuf, size: u64) -> Segment {
        Segment {
            seq,
            path,
            size,
            min_index: None,
            max_index: None,
        }
    }

    pub(crate) fn note_entry(&mut self, index: u64) {
        self.min_index = Some(self.min_index.map_or(index, |min| min.min(index)));
        self.max_index = Some(self.max_index.map_or(index, |max| max.max(index)));
    }

    /// True if every entry in the file is at or below `index`.
    pub(crate) fn covered_by(&self, index: u64) -> bool {
        self.max_index.is_none_or(|max| max <= index)
    }
}

/// `{seq:016x}-{first_index:016x}.wal`: fixed-width hex so that lexical order
/// is log order for anyone running `ls`. `first_index` is a hint for humans;
/// the log itself never relies on it.
pub(crate) fn file_name(seq: u64, first_index: u64) -> String {
    format!("{seq:016x}-{first_index:016x}{SUFFIX}")
}

/// Inverse of [`file_name`]: `(seq, first_index)`.
pub(crate) fn parse_file_name(name: &str) -> Option<(u64, u64)> {
    let stem = name.strip_suffix(SUFFIX)?;
    let (seq, first_index) = stem.split_once('-')?;
    if seq.len() != HEX_DIGITS || first_index.len() != HEX_DIGITS {
        return None;
    }
    let seq = u64::from_str_radix(seq, 16).ok()?;
    let first_index = u64::from_str_radix(first_index, 16).ok()?;
    Some((seq, first_index))
}

/// Segment files in `dir`, oldest first, as `(seq, path)`.
/// A gap in the numbering is an error: releasing only ever removes a prefix.
pub(crate) fn list(dir: &Path) -> Result<Vec<(u64, PathBuf)>, WalError> {
    let entries = std::fs::read_dir(dir).map_err(|e| WalError::io("list directory", dir, e))?;
    let mut found = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| WalError::io("list directory", dir, e))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        match parse_file_name(name) {
            Some((seq, _)) => found.push((seq, entry.path())),
            None if name.ends_with(SUFFIX) => {
                tracing::warn!(
                    dir = %dir.display(),
                    file = name,
                    "ignoring .wal file with an unexpected name"
                );
            }
            None => {}
        }
    }
    found.sort();
    for pair in found.windows(2) {
        let (previous, found) = (pair[0].0, pair[1].0);
        if previous.checked_add(1) != Some(found) {
            return Err(WalError::SegmentGap {
                dir: dir.to_path_buf(),
                previous,
                found,
            });
        }
    }
    Ok(found)
}

/// How reading a segment ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Scan {
    /// Offset just past the last good record.
    pub valid_len: u64,
    pub file_len: u64,
    /// Set when the file ends in damage a torn write can explain. `None`
    /// with `valid_len < file_len`: the rest is zeros, space the writer
    /// allocated ahead of its records.
    pub torn: Option<Corruption>,
}

/// Reads every record of the segment at `path` in order, handing each to
/// `on_record`, and stops at the first torn record. Damage a torn write cannot
/// explain (a valid checksum over an undecodable record) is an error.
pub(crate) fn scan(
    path: &Path,
    mut on_record: impl FnMut(WalRecord) -> Result<(), WalError>,
) -> Result<Scan, WalError> {
    let read_err = |e| WalError::io("read segment", path, e);
    let file = File::open(path).map_err(read_err)?;
    let file_len = file.metadata().map_err(read_err)?.len();
    let mut reader = BufReader::with_capacity(READ_BUFFER, file);
    let mut body = Vec::new();
    let mut offset = 0u64;
    let torn = loop {
        let remaining = file_len - offset;
        if remaining == 0 {
            break None;
        }
        if remaining < HEADER_LEN as u64 {
            break Some(Corruption::ShortHeader {
                available: remaining,
            });
        }
        let mut header = [0u8; HEADER_LEN];
        reader.read_exact(&mut header).map_err(read_err)?;
        if header == [0; HEADER_LEN] {
            // No record starts with a zero length: the end of the records,
            // if all that follows is zeros too.
            match only_zeros(&mut reader).map_err(read_err)? {
                true => break None,
                false => break Some(Corruption::AbsurdLength { len: 0 }),
            }
        }
        let header = match Header::parse(&header) {
            Ok(header) => header,
            Err(reason) => break Some(reason),
        };
        let available = remaining - HEADER_LEN as u64;
        if u64::from(header.body_len) > available {
            break Some(Corruption::ShortBody {
                expected: header.body_len,
                available,
            });
        }
        body.resize(header.body_len as usize, 0);
        reader.read_exact(&mut body).map_err(read_err)?;
        match WalRecord::decode(header, &body) {
            Ok(record) => on_record(record)?,
            Err(reason) if reason.is_torn_write() => break Some(reason),
            Err(reason) => {
                return Err(WalError::Corrupt {
                    path: path.to_path_buf(),
                    offset,
                    reason,
                })
            }
        }
        offset += HEADER_LEN as u64 + u64::from(header.body_len);
    };
    Ok(Scan {
        valid_len: offset,
        file_len,
        torn,
    })
}

/// Whether everything `reader` has left is zero bytes.
fn only_zeros(reader: &mut impl Read) -> std::io::Result<bool> {
    let mut chunk = [0u8; 8192];
    loop {
        match reader.read(&mut chunk) {
            Ok(0) => return Ok(true),
            Ok(n) if chunk[..n].iter().any(|&b| b != 0) => return Ok(false),
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// Makes creating or removing files in `dir` durable; without it a crash can
/// bring back a released segment or lose a new one along with its records.
pub(crate) fn sync_dir(dir: &Path) -> Result<(), WalError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| WalError::io("fsync directory", dir, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_round_trip_and_sort_in_log_order() {
        let names = [file_name(9, 100), file_name(10, 7), file_name(0x1_0000, 1)];
        let mut sorted = names.clone();
        sorted.sort();
        assert_eq!(sorted, names, "lexical order must be sequence order");
        assert_eq!(parse_file_name(&names[1]), Some((10, 7)));
        assert_eq!(parse_file_name("0000000000000001.wal"), None);
        assert_eq!(parse_file_name("1-1.wal"), None);
        assert_eq!(
            parse_file_name(&file_name(1, 1).replace(".wal", ".tmp")),
            None
        );
    }

    #[test]
    fn listing_skips_foreign_files_and_refuses_gaps() {
        let dir = tempfile::tempdir().unwrap();
        for name in [
            file_name(3, 1),
            file_name(4, 9),
            "LOCK".into(),
            "notes.wal".into(),
        ] {
            std::fs::write(dir.path().join(name), b"").unwrap();
        }
        let seqs: Vec<u64> = list(dir.path())
            .unwrap()
            .into_iter()
            .map(|(s, _)| s)
            .collect();
        assert_eq!(seqs, [3, 4]);

        std::fs::write(dir.path().join(file_name(6, 20)), b"").unwrap();
        let err = list(dir.path()).unwrap_err();
        assert!(
            matches!(
                err,
                WalError::SegmentGap {
                    previous: 4,
                    found: 6,
                    ..
                }
            ),
            "{err}"
        );
    }

    #[test]
    fn scan_stops_at_a_short_tail_and_reports_where() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(file_name(1, 1));
        let mut bytes = Vec::new();
        WalRecord::Snapshot { index: 1, term: 1 }.encode_into(&mut bytes);
        let good = bytes.len() as u64;
        WalRecord::Snapshot { index: 2, term: 1 }.encode_into(&mut bytes);
        bytes.truncate(bytes.len() - 3);
        std::fs::write(&path, &bytes).unwrap();

        let mut seen = Vec::new();
        let scan = scan(&path, |r| {
            seen.push(r);
            Ok(())
        })
        .unwrap();
        assert_eq!(seen, [WalRecord::Snapshot { index: 1, term: 1 }]);
        assert_eq!(scan.valid_len, good);
        assert_eq!(scan.file_len, bytes.len() as u64);
        assert!(
            matches!(scan.torn, Some(Corruption::ShortBody { .. })),
            "{scan:?}"
        );
    }
}
