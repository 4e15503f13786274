//! A `Status` body for the refusals hyper writes itself on an HTTP/1.1
//! connection, before any handler runs: `414 URI Too Long` for a request
//! target over its hard-coded 65 534 bytes and `431 Request Header Fields
//! Too Large` for a head over its buffer or its count of fields, and `400
//! Bad Request` for a head it cannot parse. hyper
//! writes them with an empty body (`content-length: 0`) and closes the
//! connection; the wrapper below recognises such a write (a whole head of
//! that status, with no body, as the only bytes of the write) and sends
//! the same head with a Kubernetes `Status` instead. A handler's own 414
//! or 431 has a body and is left alone.

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::serving::{MAX_HEADER_BYTES, MAX_URI_BYTES};
use crate::status::ApiError;

/// A connection whose empty 414 and 431 answers get a Status body.
pub struct RefusalBodies<S> {
    inner: S,
    /// A rewritten answer being written: its bytes, how many are written,
    /// and the length of the write it stands for.
    pending: Option<(Vec<u8>, usize, usize)>,
}

impl<S> RefusalBodies<S> {
    pub fn new(inner: S) -> Self {
        RefusalBodies {
            inner,
            pending: None,
        }
    }
}

/// The answer to send instead of `written`, if it is one of hyper's own
/// empty 414 or 431 answers.
fn rewrite(written: &[u8]) -> Option<Vec<u8>> {
    let (code, reason, message) = if written.starts_with(b"HTTP/1.1 414 ") {
        (
            414,
            "RequestURITooLong",
            format!(
                "the request URI is too long; the API server reads at most {MAX_URI_BYTES} bytes"
            ),
        )
    } else if written.starts_with(b"HTTP/1.1 431 ") {
        (
            431,
            "RequestHeaderFieldsTooLarge",
            format!(
                "the request's line and headers are too large; the API server reads at most {MAX_HEADER_BYTES} bytes"
            ),
        )
    } else if written.starts_with(b"HTTP/1.1 400 ") {
        (
            400,
            "BadRequest",
            "the request could not be read as HTTP/1.1 (its method, target, version or a header is malformed)".to_string(),
        )
    } else {
        return None;
    };
    let head_end = written.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    if head_end != written.len() {
        return None;
    }
    let head = std::str::from_utf8(&written[..head_end - 2]).ok()?;
    let mut lines: Vec<&str> = head.split("\r\n").filter(|l| !l.is_empty()).collect();
    let empty = lines
        .iter()
        .position(|l| l.eq_ignore_ascii_case("content-length: 0"))?;
    lines.remove(empty);
    let body = serde_json::to_vec(&ApiError::new(code, reason, message).to_status()).ok()?;
    let mut answer = lines.join("\r\n").into_bytes();
    answer.extend_from_slice(
        format!(
            "\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
            body.len()
        )
        .as_bytes(),
    );
    answer.extend_from_slice(&body);
    Some(answer)
}

impl<S: AsyncWrite + Unpin> RefusalBodies<S> {
    /// Writes what is pending; `Ready(Some(n))` once all of it is written
    /// (`n`: the length of the write it replaced).
    fn drive(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<Option<usize>>> {
        let Some((bytes, done, stands_for)) = self.pending.as_mut() else {
            return Poll::Ready(Ok(None));
        };
        while *done < bytes.len() {
            let n = ready!(Pin::new(&mut self.inner).poll_write(cx, &bytes[*done..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            *done += n;
        }
        let stands_for = *stands_for;
        self.pending = None;
        Poll::Ready(Ok(Some(stands_for)))
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for RefusalBodies<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for RefusalBodies<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if self.pending.is_none() {
            match rewrite(buf) {
                Some(answer) => self.pending = Some((answer, 0, buf.len())),
                None => return Pin::new(&mut self.inner).poll_write(cx, buf),
            }
        }
        match ready!(self.drive(cx))? {
            Some(n) => Poll::Ready(Ok(n)),
            None => Pin::new(&mut self.inner).poll_write(cx, buf),
        }
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.drive(cx))?;
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.drive(cx))?;
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_empty_refusal_written_alone_is_rewritten() {
        let empty = b"HTTP/1.1 414 URI Too Long\r\ncontent-length: 0\r\ndate: Sat, 05 Dec 2026 22:00:00 GMT\r\n\r\n";
        let answer = String::from_utf8(rewrite(empty).unwrap()).unwrap();
        let (head, body) = answer.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 414 URI Too Long\r\n"), "{head}");
        assert!(head.contains("date: Sat, 05 Dec 2026 22:00:00 GMT"));
        assert!(head.contains(&format!("content-length: {}", body.len())));
        assert!(!head.contains("content-length: 0"));
        let status: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(
            (status["code"].as_u64(), status["reason"].as_str()),
            (Some(414), Some("RequestURITooLong"))
        );
        let large = b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-length: 0\r\n\r\n";
        let answer = String::from_utf8(rewrite(large).unwrap()).unwrap();
        assert!(
            answer.contains("\"reason\":\"RequestHeaderFieldsTooLarge\""),
            "{answer}"
        );
        // A handler's own answers, anything else, and a head with more
        // after it are left alone.
        for untouched in [
            &b"HTTP/1.1 414 URI Too Long\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}"[..],
            b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n",
            b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-length: 0\r\n\r\nHTTP/1.1 200 OK\r\n",
            b"HTTP/1.1 414 URI Too Long\r\ncontent-length: 0\r\n",
        ] {
            assert!(rewrite(untouched).is_none(), "{}", String::from_utf8_lossy(untouched));
        }
    }
}
