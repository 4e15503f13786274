//! Gathering an HTTP/2 connection's writes. h2 hands each DATA frame of
//! more than a few hundred bytes to the socket by itself and flushes after
//! each: a pod's event to 1 000 watches multiplexed on one connection was
//! 1 000 `writev` calls, a third of the API server's CPU time under such a
//! fan-out (by perf). [`Coalescing`] takes the frames into one buffer,
//! writes it out when full, and turns h2's flushes into one flush at the
//! connection task's next turn: a flush marks the buffer due and wakes the
//! task, whose next poll reads the socket (h2 reads before it writes on
//! every turn), and the read writes the due bytes out first. So every frame
//! h2 wrote in one turn leaves in a few large writes, and nothing waits in
//! the buffer past that turn.
//!
//! Only for h2, whose connection task is polled again after a wake and
//! reads on each poll. HTTP/1.1 connections are not wrapped (hyper already
//! writes a response's head and body together).

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// How much is gathered before a write to the socket.
pub const CAPACITY: usize = 64 * 1024;

pub struct Coalescing<S> {
    inner: S,
    buf: Vec<u8>,
    /// How much of `buf` the socket has taken.
    written: usize,
    /// A flush was asked for and is still owed.
    flush_due: bool,
}

impl<S> Coalescing<S> {
    pub fn new(inner: S) -> Coalescing<S> {
        Coalescing {
            inner,
            buf: Vec::with_capacity(CAPACITY),
            written: 0,
            flush_due: false,
        }
    }

    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    fn pending(&self) -> usize {
        self.buf.len() - self.written
    }
}

impl<S: AsyncWrite + Unpin> Coalescing<S> {
    /// Writes out what the buffer holds.
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.written < self.buf.len() {
            let n = ready!(Pin::new(&mut self.inner).poll_write(cx, &self.buf[self.written..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.written += n;
        }
        self.buf.clear();
        self.written = 0;
        Poll::Ready(Ok(()))
    }

    /// Writes out the buffer and flushes the socket.
    fn poll_flush_now(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_drain(cx))?;
        ready!(Pin::new(&mut self.inner).poll_flush(cx))?;
        self.flush_due = false;
        Poll::Ready(Ok(()))
    }

    /// Makes room for `len` more bytes: the buffer is written out first if
    /// they do not fit.
    fn poll_room(&mut self, cx: &mut Context<'_>, len: usize) -> Poll<io::Result<()>> {
        if self.buf.len() + len > CAPACITY {
            ready!(self.poll_drain(cx))?;
        }
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for Coalescing<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.flush_due {
            // A full socket leaves the flush due: the write registered the
            // task for when it drains, and the next poll tries again.
            if let Poll::Ready(Err(err)) = this.poll_flush_now(cx) {
                return Poll::Ready(Err(err));
            }
        }
        Pin::new(&mut this.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Coalescing<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        ready!(this.poll_room(cx, data.len()))?;
        if data.len() >= CAPACITY {
            // The buffer is empty here: a large write goes straight out.
            return Pin::new(&mut this.inner).poll_write(cx, data);
        }
        this.buf.extend_from_slice(data);
        Poll::Ready(Ok(data.len()))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        ready!(this.poll_room(cx, total))?;
        if total >= CAPACITY {
            return Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        }
        for b in bufs {
            this.buf.extend_from_slice(b);
        }
        Poll::Ready(Ok(total))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.pending() > 0 {
            // Owed until the task's next turn, which the wake brings.
            this.flush_due = true;
            cx.waker().wake_by_ref();
            return Poll::Ready(Ok(()));
        }
        this.poll_flush_now(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_flush_now(cx))?;
        Pin::new(&mut this.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::task::Wake;

    use super::*;

    /// A socket that takes every write whole (up to `room` bytes at a time
    /// when set) and counts them; reads have nothing.
    #[derive(Default)]
    struct Socket {
        writes: usize,
        flushes: usize,
        shut: bool,
        out: Vec<u8>,
        /// Takes nothing while true.
        full: bool,
    }

    impl AsyncRead for Socket {
        fn poll_read(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
            _: &mut ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            Poll::Pending
        }
    }

    impl AsyncWrite for Socket {
        fn poll_write(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
            data: &[u8],
        ) -> Poll<io::Result<usize>> {
            if self.full {
                return Poll::Pending;
            }
            let this = self.get_mut();
            this.writes += 1;
            this.out.extend_from_slice(data);
            Poll::Ready(Ok(data.len()))
        }

        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            self.get_mut().flushes += 1;
            Poll::Ready(Ok(()))
        }

        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            self.get_mut().shut = true;
            Poll::Ready(Ok(()))
        }
    }

    #[derive(Default)]
    struct Wakes(AtomicUsize);

    impl Wake for Wakes {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
        fn wake_by_ref(self: &Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn frame(i: usize) -> Vec<u8> {
        format!("frame {i} ").repeat(300).into_bytes()
    }

    fn write_all(c: &mut Coalescing<Socket>, cx: &mut Context<'_>, data: &[u8]) {
        match Pin::new(c).poll_write(cx, data) {
            Poll::Ready(Ok(n)) => assert_eq!(n, data.len()),
            other => panic!("write: {other:?}"),
        }
    }

    fn read(c: &mut Coalescing<Socket>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut space = [0u8; 16];
        Pin::new(c).poll_read(cx, &mut ReadBuf::new(&mut space))
    }

    #[test]
    fn a_turns_frames_leave_in_one_write_at_the_next_read() {
        let wakes = Arc::new(Wakes::default());
        let waker = wakes.clone().into();
        let mut cx = Context::from_waker(&waker);
        let mut c = Coalescing::new(Socket::default());
        let mut expected = Vec::new();
        for i in 0..10 {
            let f = frame(i);
            write_all(&mut c, &mut cx, &f);
            expected.extend_from_slice(&f);
            // h2 flushes after each large frame.
            assert!(matches!(
                Pin::new(&mut c).poll_flush(&mut cx),
                Poll::Ready(Ok(()))
            ));
        }
        assert_eq!(c.get_ref().writes, 0, "nothing written within the turn");
        assert!(wakes.0.load(Ordering::SeqCst) > 0, "the task is woken");
        assert!(read(&mut c, &mut cx).is_pending());
        assert_eq!(c.get_ref().writes, 1);
        assert_eq!(c.get_ref().out, expected);
        assert!(!c.flush_due);
        // Nothing owed: a flush goes to the socket at once.
        assert!(matches!(
            Pin::new(&mut c).poll_flush(&mut cx),
            Poll::Ready(Ok(()))
        ));
        assert_eq!(c.get_ref().writes, 1);
        assert!(c.get_ref().flushes >= 2);
    }

    #[test]
    fn a_full_buffer_is_written_out_in_order() {
        let waker = Arc::new(Wakes::default()).into();
        let mut cx = Context::from_waker(&waker);
        let mut c = Coalescing::new(Socket::default());
        let mut expected = Vec::new();
        for i in 0..100 {
            let f = frame(i);
            write_all(&mut c, &mut cx, &f);
            expected.extend_from_slice(&f);
        }
        let big = vec![7u8; CAPACITY + 1];
        write_all(&mut c, &mut cx, &big);
        expected.extend_from_slice(&big);
        let vectored = [io::IoSlice::new(b"ab"), io::IoSlice::new(b"cd")];
        assert!(matches!(
            Pin::new(&mut c).poll_write_vectored(&mut cx, &vectored),
            Poll::Ready(Ok(4))
        ));
        expected.extend_from_slice(b"abcd");
        assert!(matches!(
            Pin::new(&mut c).poll_shutdown(&mut cx),
            Poll::Ready(Ok(()))
        ));
        let socket = c.get_ref();
        assert!(socket.shut);
        assert_eq!(socket.out, expected);
        // 100 frames of ~2.7 KB in 64 KiB writes, the big one alone.
        assert!(socket.writes < 10, "{} writes", socket.writes);
    }

    #[test]
    fn a_full_socket_keeps_the_flush_due() {
        let waker = Arc::new(Wakes::default()).into();
        let mut cx = Context::from_waker(&waker);
        let mut c = Coalescing::new(Socket::default());
        write_all(&mut c, &mut cx, b"hello");
        assert!(matches!(
            Pin::new(&mut c).poll_flush(&mut cx),
            Poll::Ready(Ok(()))
        ));
        c.inner.full = true;
        assert!(read(&mut c, &mut cx).is_pending());
        assert!(c.flush_due);
        assert!(c.get_ref().out.is_empty());
        c.inner.full = false;
        assert!(read(&mut c, &mut cx).is_pending());
        assert!(!c.flush_due);
        assert_eq!(c.get_ref().out, b"hello");
    }
}
