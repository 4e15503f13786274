//! `tailLines`: finds where the last N lines of a CRI log file start by
//! scanning it backwards, so a large log is not read from its beginning.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};

use super::cri::{peek_tag, LogTag};

const CHUNK: u64 = 64 * 1024;
/// Enough bytes of a record to hold its timestamp, stream and tag.
const HEAD: usize = 64;

/// The byte offset where the last `lines` lines of the file start. A line is
/// what a reader outputs: partial records joined up to their full record,
/// and a trailing run of partial records counts as one line. A record still
/// being written (no newline yet) is not counted.
pub(super) fn tail_start(file: &mut File, lines: u64) -> io::Result<u64> {
    let len = file.metadata()?.len();
    if lines == 0 {
        return Ok(len);
    }
    let mut counter = TailCounter {
        wanted: lines,
        counted: 0,
    };
    let mut pos = len;
    let mut carry: Vec<u8> = Vec::new();
    let mut record_end: Option<u64> = None;
    while pos > 0 {
        let start = pos.saturating_sub(CHUNK);
        let mut data = read_range(file, start, pos)?;
        let chunk_len = data.len();
        data.extend_from_slice(&carry);
        for i in (0..chunk_len).rev().filter(|i| data[*i] == b'\n') {
            let next_start = start + i as u64 + 1;
            if let Some(end) = record_end {
                if let Some(found) = counter.visit(tag_of(&data[i + 1..]), end) {
                    return Ok(found);
                }
            }
            record_end = Some(next_start);
        }
        carry = data[..data.len().min(HEAD)].to_vec();
        pos = start;
    }
    // The first record of the file starts at offset 0.
    if let Some(end) = record_end {
        if let Some(found) = counter.visit(tag_of(&carry), end) {
            return Ok(found);
        }
    }
    Ok(0)
}

fn tag_of(head: &[u8]) -> LogTag {
    peek_tag(&head[..head.len().min(HEAD)]).unwrap_or(LogTag::Full)
}

fn read_range(file: &mut File, start: u64, end: u64) -> io::Result<Vec<u8>> {
    let mut data = vec![0; (end - start) as usize];
    file.seek(SeekFrom::Start(start))?;
    file.read_exact(&mut data)?;
    Ok(data)
}

/// Counts lines while records are visited from the end of the file.
struct TailCounter {
    wanted: u64,
    counted: u64,
}

impl TailCounter {
    /// Visits the record ending at `end`; returns the start offset once
    /// enough lines lie after `end`.
    fn visit(&mut self, tag: LogTag, end: u64) -> Option<u64> {
        match tag {
            LogTag::Full if self.counted >= self.wanted => return Some(end),
            LogTag::Full => self.counted += 1,
            // Only the trailing run of partial records is a line of its own;
            // other partial records belong to the full record after them.
            LogTag::Partial if self.counted == 0 => self.counted = 1,
            LogTag::Partial => {}
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::super::cri::{encode_record, LogStream};
    use super::*;
    use std::io::Write;

    fn file_of(records: &[(LogTag, &str)]) -> (tempfile::NamedTempFile, Vec<u8>) {
        let ts: jiff::Timestamp = "2024-05-01T10:00:00.000000001Z".parse().unwrap();
        let mut bytes = Vec::new();
        for (tag, content) in records {
            encode_record(ts, LogStream::Stdout, *tag, content.as_bytes(), &mut bytes);
        }
        let mut file = tempfile::NamedTempFile::new().unwrap();
        file.write_all(&bytes).unwrap();
        (file, bytes)
    }

    fn tail(file: &tempfile::NamedTempFile, bytes: &[u8], lines: u64) -> String {
        let start = tail_start(&mut file.reopen().unwrap(), lines).unwrap();
        let rest = String::from_utf8(bytes[start as usize..].to_vec()).unwrap();
        rest.lines()
            .map(|l| l.rsplit(' ').next().unwrap())
            .collect::<Vec<_>>()
            .join(",")
    }

    #[test]
    fn counts_full_lines_from_the_end() {
        use LogTag::*;
        let (file, bytes) = file_of(&[(Full, "a"), (Partial, "b1"), (Full, "b2"), (Full, "c")]);
        assert_eq!(tail(&file, &bytes, 1), "c");
        assert_eq!(tail(&file, &bytes, 2), "b1,b2,c");
        assert_eq!(tail(&file, &bytes, 3), "a,b1,b2,c");
        assert_eq!(tail(&file, &bytes, 10), "a,b1,b2,c");
        assert_eq!(tail(&file, &bytes, 0), "");
    }

    #[test]
    fn a_trailing_partial_run_is_one_line() {
        use LogTag::*;
        let (file, bytes) = file_of(&[(Full, "a"), (Partial, "b1"), (Partial, "b2")]);
        assert_eq!(tail(&file, &bytes, 1), "b1,b2");
        assert_eq!(tail(&file, &bytes, 2), "a,b1,b2");
    }

    #[test]
    fn an_unfinished_record_is_not_counted() {
        use LogTag::*;
        let (mut file, mut bytes) = file_of(&[(Full, "a"), (Full, "b")]);
        file.write_all(b"2024-05-01T10:00:00Z stdout F half")
            .unwrap();
        bytes.extend_from_slice(b"2024-05-01T10:00:00Z stdout F half");
        assert_eq!(tail(&file, &bytes, 1), "b,half");
    }

    #[test]
    fn scans_across_chunk_boundaries() {
        let content: Vec<String> = (0..5000).map(|i| format!("line{i}")).collect();
        let records: Vec<_> = content.iter().map(|c| (LogTag::Full, c.as_str())).collect();
        let (file, bytes) = file_of(&records);
        assert!(bytes.len() as u64 > 2 * CHUNK);
        let tailed = tail(&file, &bytes, 4000);
        assert_eq!(tailed.split(',').count(), 4000);
        assert!(tailed.starts_with("line1000,"));
        assert_eq!(tail(&file, &bytes, 6000).split(',').count(), 5000);
    }

    #[test]
    fn empty_file_starts_at_zero() {
        let (file, bytes) = file_of(&[]);
        assert_eq!(tail(&file, &bytes, 3), "");
    }
}
