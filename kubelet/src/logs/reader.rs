//! Reads a CRI log file back as `kubectl logs` shows it: only each line's
//! content (optionally timestamped), partial records joined, with tail,
//! since, byte limit and follow-until-the-container-exits.

use std::future::Future;
use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::time::Duration;

use bytes::Bytes;
use futures::stream::{self, BoxStream, StreamExt};
use tokio::io::{AsyncBufReadExt, AsyncSeekExt, BufReader};

use super::cri::{parse_record, LogTag};
use super::tail::tail_start;
use super::LogOptions;

/// How often a follower looks for new lines in the file.
const FOLLOW_POLL: Duration = Duration::from_millis(100);
/// Output is handed out in chunks of about this size.
const CHUNK_BYTES: usize = 32 * 1024;

type ExitedFuture = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Opens the log file at `path` and streams its content shaped by `options`
/// (`options.previous` is the caller's choice of file, see
/// [`super::ContainerLogs::attempt_to_read`]). With `follow`, the stream
/// waits for new lines until `exited` resolves and the file is drained;
/// without it, `exited` is never polled.
pub async fn read_log<F>(
    path: &Path,
    options: LogOptions,
    exited: F,
) -> io::Result<BoxStream<'static, io::Result<Bytes>>>
where
    F: Future<Output = ()> + Send + 'static,
{
    let start = match options.tail_lines {
        Some(lines) if lines >= 0 => tail_offset(path, lines as u64).await?,
        _ => 0,
    };
    let mut file = tokio::fs::File::open(path).await?;
    file.seek(io::SeekFrom::Start(start)).await?;
    let reader = LogReader {
        path: path.to_path_buf(),
        file: BufReader::with_capacity(64 * 1024, file),
        record: Vec::new(),
        line_included: None,
        remaining: options.limit_bytes.filter(|l| *l > 0).map(|l| l as u64),
        exited: options.follow.then(|| Box::pin(exited) as ExitedFuture),
        options,
        failed: None,
        done: false,
    };
    Ok(stream::unfold(reader, |mut reader| async move {
        let item = reader.next_chunk().await?;
        Some((item, reader))
    })
    .boxed())
}

async fn tail_offset(path: &Path, lines: u64) -> io::Result<u64> {
    let path = path.to_path_buf();
    tokio::task::spawn_blocking(move || tail_start(&mut std::fs::File::open(path)?, lines))
        .await
        .map_err(io::Error::other)?
}

struct LogReader {
    path: PathBuf,
    file: BufReader<tokio::fs::File>,
    /// The record being read; may lack its newline while it is being written.
    record: Vec<u8>,
    /// Inside a line of partial records: whether that line is being output.
    line_included: Option<bool>,
    /// Bytes still allowed by `limitBytes`.
    remaining: Option<u64>,
    /// Resolves when the container has exited; `None` once it has (or when
    /// not following).
    exited: Option<ExitedFuture>,
    options: LogOptions,
    /// An error met after some output; reported by the next call.
    failed: Option<io::Error>,
    done: bool,
}

impl LogReader {
    async fn next_chunk(&mut self) -> Option<io::Result<Bytes>> {
        if self.done {
            return None;
        }
        if let Some(err) = self.failed.take() {
            self.done = true;
            return Some(Err(err));
        }
        let mut out = Vec::new();
        match self.fill(&mut out).await {
            Ok(()) => (!out.is_empty()).then(|| Ok(self.take(out))),
            Err(err) if out.is_empty() => {
                self.done = true;
                Some(Err(err))
            }
            Err(err) => {
                // Hand out what came before the error; the error comes next.
                self.failed = Some(err);
                Some(Ok(self.take(out)))
            }
        }
    }

    fn take(&mut self, mut out: Vec<u8>) -> Bytes {
        if let Some(remaining) = self.remaining.as_mut() {
            if out.len() as u64 >= *remaining {
                out.truncate(*remaining as usize);
                self.done = true;
            }
            *remaining -= out.len() as u64;
        }
        Bytes::from(out)
    }

    /// Appends output to `out` until a chunk is full, the limit is reached,
    /// or there is nothing more to read (now, or ever: then `done` is set).
    async fn fill(&mut self, out: &mut Vec<u8>) -> io::Result<()> {
        loop {
            self.file.read_until(b'\n', &mut self.record).await?;
            if self.record.ends_with(b"\n") {
                let record = std::mem::take(&mut self.record);
                self.render(&record, out)?;
                if out.len() >= CHUNK_BYTES || self.limit_reached(out) {
                    return Ok(());
                }
                continue;
            }
            if !out.is_empty() {
                return Ok(());
            }
            let Some(exited) = self.exited.as_mut() else {
                self.done = true;
                return Ok(());
            };
            tokio::select! {
                _ = exited => self.exited = None,
                _ = tokio::time::sleep(FOLLOW_POLL) => {}
            }
        }
    }

    fn limit_reached(&self, out: &[u8]) -> bool {
        self.remaining.is_some_and(|r| out.len() as u64 >= r)
    }

    fn render(&mut self, line: &[u8], out: &mut Vec<u8>) -> io::Result<()> {
        let record = parse_record(line).map_err(|err| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{}: {err}", self.path.display()),
            )
        })?;
        let starts_line = self.line_included.is_none();
        let included = self.line_included.unwrap_or_else(|| {
            self.options
                .since
                .is_none_or(|since| record.timestamp >= since)
        });
        if included {
            if starts_line && self.options.timestamps {
                out.extend_from_slice(format!("{:.9} ", record.timestamp).as_bytes());
            }
            out.extend_from_slice(record.content);
            if record.tag == LogTag::Full {
                out.push(b'\n');
            }
        }
        self.line_included = (record.tag == LogTag::Partial).then_some(included);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::cri::{encode_record, LogStream};
    use super::*;
    use std::io::Write;

    fn ts(second: u32) -> jiff::Timestamp {
        format!("2024-05-01T10:00:{second:02}.5Z").parse().unwrap()
    }

    fn encode(records: &[(u32, LogStream, LogTag, &str)]) -> Vec<u8> {
        let mut bytes = Vec::new();
        for (second, stream, tag, content) in records {
            encode_record(ts(*second), *stream, *tag, content.as_bytes(), &mut bytes);
        }
        bytes
    }

    fn sample() -> Vec<u8> {
        use LogStream::*;
        use LogTag::*;
        encode(&[
            (1, Stdout, Full, "one"),
            (2, Stderr, Full, "two"),
            (3, Stdout, Partial, "thr"),
            (3, Stdout, Full, "ee"),
            (4, Stdout, Partial, "four"),
        ])
    }

    async fn read_all(bytes: &[u8], options: LogOptions) -> String {
        let mut file = tempfile::NamedTempFile::new().unwrap();
        file.write_all(bytes).unwrap();
        collect(file.path(), options, std::future::pending()).await
    }

    async fn collect<F>(path: &Path, options: LogOptions, exited: F) -> String
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let chunks: Vec<_> = read_log(path, options, exited)
            .await
            .unwrap()
            .collect()
            .await;
        let bytes: Vec<u8> = chunks
            .into_iter()
            .flat_map(|c| c.unwrap().to_vec())
            .collect();
        String::from_utf8(bytes).unwrap()
    }

    #[tokio::test]
    async fn content_only_with_partials_joined() {
        let out = read_all(&sample(), LogOptions::default()).await;
        assert_eq!(out, "one\ntwo\nthree\nfour");
    }

    #[tokio::test]
    async fn timestamps_prefix_each_line_once() {
        let options = LogOptions {
            timestamps: true,
            ..Default::default()
        };
        let out = read_all(&sample(), options).await;
        let lines: Vec<_> = out.split('\n').collect();
        assert_eq!(lines[0], "2024-05-01T10:00:01.500000000Z one");
        assert_eq!(lines[2], "2024-05-01T10:00:03.500000000Z three");
        assert_eq!(lines[3], "2024-05-01T10:00:04.500000000Z four");
    }

    #[tokio::test]
    async fn tail_counts_lines() {
        let options = LogOptions {
            tail_lines: Some(2),
            ..Default::default()
        };
        assert_eq!(read_all(&sample(), options).await, "three\nfour");
        let options = LogOptions {
            tail_lines: Some(-1),
            ..Default::default()
        };
        assert_eq!(read_all(&sample(), options).await, "one\ntwo\nthree\nfour");
    }

    #[tokio::test]
    async fn since_skips_older_lines_and_keeps_joined_lines_whole() {
        let options = LogOptions {
            since: Some(ts(2)),
            ..Default::default()
        };
        assert_eq!(read_all(&sample(), options).await, "two\nthree\nfour");
        let options = LogOptions {
            since: Some(ts(3)),
            tail_lines: Some(1),
            ..Default::default()
        };
        assert_eq!(read_all(&sample(), options).await, "four");
    }

    #[tokio::test]
    async fn limit_bytes_cuts_the_output() {
        let options = LogOptions {
            limit_bytes: Some(6),
            ..Default::default()
        };
        assert_eq!(read_all(&sample(), options).await, "one\ntw");
        let options = LogOptions {
            limit_bytes: Some(0),
            ..Default::default()
        };
        assert_eq!(read_all(&sample(), options).await, "one\ntwo\nthree\nfour");
    }

    #[tokio::test]
    async fn limit_bytes_holds_across_chunks() {
        let line = "x".repeat(1000);
        let records: Vec<_> = (0..100)
            .map(|_| (1, LogStream::Stdout, LogTag::Full, line.as_str()))
            .collect();
        let options = LogOptions {
            limit_bytes: Some(50_000),
            ..Default::default()
        };
        assert_eq!(read_all(&encode(&records), options).await.len(), 50_000);
    }

    #[tokio::test]
    async fn malformed_line_is_an_error() {
        let mut bytes = sample();
        bytes.extend_from_slice(b"garbage\n");
        let mut file = tempfile::NamedTempFile::new().unwrap();
        file.write_all(&bytes).unwrap();
        let mut stream = read_log(file.path(), LogOptions::default(), async {})
            .await
            .unwrap();
        assert_eq!(
            stream.next().await.unwrap().unwrap(),
            "one\ntwo\nthree\nfour"
        );
        let err = stream.next().await.unwrap().unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
        assert!(stream.next().await.is_none());
    }

    #[tokio::test]
    async fn missing_file_fails_to_open() {
        let dir = tempfile::tempdir().unwrap();
        let result = read_log(&dir.path().join("0.log"), LogOptions::default(), async {}).await;
        assert_eq!(result.err().unwrap().kind(), io::ErrorKind::NotFound);
    }

    #[tokio::test]
    async fn follow_reads_new_lines_until_the_container_exits() {
        use LogStream::*;
        use LogTag::*;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("0.log");
        std::fs::write(&path, encode(&[(1, Stdout, Full, "first")])).unwrap();
        let (exit_tx, exit_rx) = tokio::sync::oneshot::channel::<()>();
        let writer_path = path.clone();
        let writer = tokio::spawn(async move {
            let mut file = std::fs::OpenOptions::new()
                .append(true)
                .open(writer_path)
                .unwrap();
            for (i, piece) in ["sec", "ond\n"].iter().enumerate() {
                tokio::time::sleep(Duration::from_millis(300)).await;
                let tag = if i == 0 { Partial } else { Full };
                file.write_all(&encode(&[(2, Stdout, tag, piece.trim_end())]))
                    .unwrap();
            }
            let _ = exit_tx.send(());
        });
        let options = LogOptions {
            follow: true,
            ..Default::default()
        };
        let exited = async move {
            let _ = exit_rx.await;
        };
        let out = tokio::time::timeout(Duration::from_secs(30), collect(&path, options, exited))
            .await
            .expect("follow ends once the container exited");
        assert_eq!(out, "first\nsecond\n");
        writer.await.unwrap();
    }
}
