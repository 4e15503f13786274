//! The CRI container log line format (`<RFC3339Nano> <stream> <F|P> <content>\n`),
//! as containerd and CRI-O write it and the kubelet reads it: encoding,
//! parsing, and splitting a byte stream into full and partial records.

use jiff::Timestamp;

/// A line longer than this is written as several partial (`P`) records.
pub const MAX_RECORD_CONTENT: usize = 16 * 1024;

/// Which output of the container a record came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogStream {
    Stdout,
    Stderr,
}

impl LogStream {
    pub fn as_str(self) -> &'static str {
        match self {
            LogStream::Stdout => "stdout",
            LogStream::Stderr => "stderr",
        }
    }
}

/// `F` ends a line; `P` is a piece of a line that continues in the next record
/// (or that ended without a newline when the stream closed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogTag {
    Full,
    Partial,
}

impl LogTag {
    fn as_str(self) -> &'static str {
        match self {
            LogTag::Full => "F",
            LogTag::Partial => "P",
        }
    }
}

/// One parsed log record; `content` excludes the trailing newline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogRecord<'a> {
    pub timestamp: Timestamp,
    pub stream: LogStream,
    pub tag: LogTag,
    pub content: &'a [u8],
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ParseError {
    #[error("CRI log line has {0} space-separated fields before the content, want 3")]
    MissingFields(usize),
    #[error("CRI log line has an invalid timestamp {0:?}")]
    Timestamp(String),
    #[error("CRI log line has stream {0:?}, want stdout or stderr")]
    Stream(String),
    #[error("CRI log line has tag {0:?}, want F or P")]
    Tag(String),
}

/// Appends one encoded record (with its trailing newline) to `out`.
pub fn encode_record(
    timestamp: Timestamp,
    stream: LogStream,
    tag: LogTag,
    content: &[u8],
    out: &mut Vec<u8>,
) {
    out.extend_from_slice(timestamp.to_string().as_bytes());
    out.push(b' ');
    out.extend_from_slice(stream.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(tag.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(content);
    out.push(b'\n');
}

/// Parses one record; `line` may or may not end with its newline.
pub fn parse_record(line: &[u8]) -> Result<LogRecord<'_>, ParseError> {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    let mut fields = line.splitn(4, |b| *b == b' ');
    let (Some(ts), Some(stream), Some(tag)) = (fields.next(), fields.next(), fields.next()) else {
        return Err(ParseError::MissingFields(
            line.split(|b| *b == b' ').count() - 1,
        ));
    };
    let content = fields.next().unwrap_or(b"");
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    let timestamp = std::str::from_utf8(ts)
        .ok()
        .and_then(|s| s.parse::<Timestamp>().ok())
        .ok_or_else(|| ParseError::Timestamp(text(ts)))?;
    let stream = match stream {
        b"stdout" => LogStream::Stdout,
        b"stderr" => LogStream::Stderr,
        other => return Err(ParseError::Stream(text(other))),
    };
    let tag = match tag {
        b"F" => LogTag::Full,
        b"P" => LogTag::Partial,
        other => return Err(ParseError::Tag(text(other))),
    };
    Ok(LogRecord {
        timestamp,
        stream,
        tag,
        content,
    })
}

/// Reads only the tag of a record from its first bytes, for scanning a file
/// backwards without parsing whole records. `None` if the head is malformed.
pub fn peek_tag(head: &[u8]) -> Option<LogTag> {
    let mut fields = head.splitn(4, |b| *b == b' ');
    fields.next()?;
    fields.next()?;
    match fields.next()? {
        b"F" | b"F\n" => Some(LogTag::Full),
        b"P" | b"P\n" => Some(LogTag::Partial),
        _ => None,
    }
}

/// Cuts the bytes of one output stream into records: a record per line, lines
/// longer than [`MAX_RECORD_CONTENT`] split into partial records, and a last
/// unterminated line flushed as partial when the stream closes.
#[derive(Debug, Default)]
pub struct LineSplitter {
    pending: Vec<u8>,
}

impl LineSplitter {
    /// Feeds bytes read from the stream, calling `emit` for each complete record.
    pub fn push(&mut self, mut bytes: &[u8], mut emit: impl FnMut(LogTag, &[u8])) {
        while let Some(&first) = bytes.first() {
            if self.pending.len() == MAX_RECORD_CONTENT {
                // A full buffer ends a record only now that we know whether
                // the line goes on.
                let tag = if first == b'\n' {
                    LogTag::Full
                } else {
                    LogTag::Partial
                };
                emit(tag, &self.pending);
                self.pending.clear();
                if tag == LogTag::Full {
                    bytes = &bytes[1..];
                }
                continue;
            }
            let room = MAX_RECORD_CONTENT - self.pending.len();
            let window = &bytes[..bytes.len().min(room)];
            match window.iter().position(|b| *b == b'\n') {
                Some(newline) => {
                    self.pending.extend_from_slice(&window[..newline]);
                    emit(LogTag::Full, &self.pending);
                    self.pending.clear();
                    bytes = &bytes[newline + 1..];
                }
                None => {
                    self.pending.extend_from_slice(window);
                    bytes = &bytes[window.len()..];
                }
            }
        }
    }

    /// The stream closed: a line without its newline becomes a partial record.
    pub fn finish(&mut self, mut emit: impl FnMut(LogTag, &[u8])) {
        if !self.pending.is_empty() {
            emit(LogTag::Partial, &self.pending);
            self.pending.clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(chunks: &[&[u8]]) -> Vec<(LogTag, Vec<u8>)> {
        let mut splitter = LineSplitter::default();
        let mut records = Vec::new();
        for chunk in chunks {
            splitter.push(chunk, |tag, content| records.push((tag, content.to_vec())));
        }
        splitter.finish(|tag, content| records.push((tag, content.to_vec())));
        records
    }

    #[test]
    fn record_round_trips() {
        let ts: Timestamp = "2024-05-01T10:00:00.123456789Z".parse().unwrap();
        let mut out = Vec::new();
        encode_record(ts, LogStream::Stderr, LogTag::Partial, b"a b  c", &mut out);
        assert_eq!(out, b"2024-05-01T10:00:00.123456789Z stderr P a b  c\n");
        let record = parse_record(&out).unwrap();
        assert_eq!(record.timestamp, ts);
        assert_eq!(record.stream, LogStream::Stderr);
        assert_eq!(record.tag, LogTag::Partial);
        assert_eq!(record.content, b"a b  c");
        assert_eq!(peek_tag(&out[..40]), Some(LogTag::Partial));
    }

    #[test]
    fn timestamps_are_rfc3339nano_without_trailing_zeros() {
        let ts: Timestamp = "2024-05-01T10:00:00.5Z".parse().unwrap();
        let mut out = Vec::new();
        encode_record(ts, LogStream::Stdout, LogTag::Full, b"", &mut out);
        assert_eq!(out, b"2024-05-01T10:00:00.5Z stdout F \n");
        assert_eq!(parse_record(&out).unwrap().content, b"");
    }

    #[test]
    fn malformed_records_say_what_is_wrong() {
        assert_eq!(parse_record(b"hello"), Err(ParseError::MissingFields(0)));
        assert!(matches!(
            parse_record(b"yesterday stdout F x"),
            Err(ParseError::Timestamp(_))
        ));
        assert!(matches!(
            parse_record(b"2024-05-01T10:00:00Z stdin F x"),
            Err(ParseError::Stream(_))
        ));
        assert!(matches!(
            parse_record(b"2024-05-01T10:00:00Z stdout X x"),
            Err(ParseError::Tag(_))
        ));
        assert_eq!(peek_tag(b"2024-05-01T10:00:00Z stdout"), None);
    }

    #[test]
    fn splitter_emits_a_record_per_line_across_chunks() {
        let records = split(&[b"one\ntw", b"o\n\nthree"]);
        assert_eq!(
            records,
            vec![
                (LogTag::Full, b"one".to_vec()),
                (LogTag::Full, b"two".to_vec()),
                (LogTag::Full, b"".to_vec()),
                (LogTag::Partial, b"three".to_vec()),
            ]
        );
    }

    #[test]
    fn splitter_cuts_long_lines_at_16_kib() {
        let mut long = vec![b'x'; MAX_RECORD_CONTENT * 2 + 10];
        long.push(b'\n');
        let records = split(&[&long[..100], &long[100..]]);
        let tags: Vec<_> = records.iter().map(|(t, c)| (*t, c.len())).collect();
        assert_eq!(
            tags,
            vec![
                (LogTag::Partial, MAX_RECORD_CONTENT),
                (LogTag::Partial, MAX_RECORD_CONTENT),
                (LogTag::Full, 10),
            ]
        );
    }

    #[test]
    fn splitter_line_of_exactly_16_kib_is_one_full_record() {
        let mut line = vec![b'y'; MAX_RECORD_CONTENT];
        line.push(b'\n');
        let records = split(&[&line[..MAX_RECORD_CONTENT], b"\n"]);
        assert_eq!(
            records,
            vec![(LogTag::Full, line[..MAX_RECORD_CONTENT].to_vec())]
        );
    }
}
