//! The streaming connection idle timeout (`--streaming-connection-idle-timeout`,
//! 4 h by default): a connection on which nothing moved for that long is
//! closed, and what it ran is stopped.

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;

/// The kubelet's default idle timeout.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(4 * 60 * 60);

/// When a connection last carried anything; cheap to clone and touch.
#[derive(Debug, Clone)]
pub struct Activity {
    start: Instant,
    /// Milliseconds after `start` of the last activity.
    last: Arc<AtomicU64>,
}

impl Default for Activity {
    fn default() -> Self {
        Self::new()
    }
}

impl Activity {
    pub fn new() -> Self {
        Activity {
            start: Instant::now(),
            last: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Something moved now.
    pub fn touch(&self) {
        let now = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last.fetch_max(now, Ordering::Relaxed);
    }

    /// Resolves once nothing moved for `timeout`.
    pub async fn idle_for(&self, timeout: Duration) {
        loop {
            let last = self.start + Duration::from_millis(self.last.load(Ordering::Relaxed));
            let deadline = last + timeout;
            if Instant::now() >= deadline {
                return;
            }
            tokio::time::sleep_until(deadline).await;
        }
    }
}

/// A byte stream whose reads and writes count as activity.
pub struct Watched<IO> {
    io: IO,
    activity: Activity,
}

impl<IO> Watched<IO> {
    pub fn new(io: IO, activity: Activity) -> Self {
        Watched { io, activity }
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for Watched<IO> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.io).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.activity.touch();
        }
        polled
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Watched<IO> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.io).poll_write(cx, data);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        polled
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn activity_postpones_the_timeout() {
        let activity = Activity::new();
        let timeout = Duration::from_secs(10);
        let idle = {
            let activity = activity.clone();
            tokio::spawn(async move { activity.idle_for(timeout).await })
        };
        tokio::time::sleep(Duration::from_secs(8)).await;
        activity.touch();
        tokio::time::sleep(Duration::from_secs(8)).await;
        assert!(!idle.is_finished(), "touched 8 s ago");
        tokio::time::sleep(Duration::from_secs(3)).await;
        tokio::time::timeout(Duration::from_millis(1), idle)
            .await
            .expect("idle for 11 s")
            .unwrap();
    }
}
