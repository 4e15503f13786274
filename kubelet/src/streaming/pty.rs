//! Pseudo-terminals for `tty=true`: the command gets the terminal's
//! replica side as its controlling terminal, the kubelet reads and writes
//! the primary side without blocking a thread, and resizes it.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// A new terminal: the primary side (non-blocking, for the kubelet) and
/// the replica side (for the command's stdin, stdout and stderr).
pub fn open() -> io::Result<(PtyPrimary, OwnedFd)> {
    let (primary, replica) = open_pair()?;
    set_nonblocking(&primary)?;
    // SAFETY: an OwnedFd is open and keeps its fd until it is dropped,
    // which happens only with the AsyncFd.
    let fd = unsafe { AsyncFd::register(primary) }.map_err(io::Error::from)?;
    Ok((PtyPrimary { fd }, replica))
}

/// The kubelet's side of a terminal.
pub struct PtyPrimary {
    fd: AsyncFd<OwnedFd>,
}

impl PtyPrimary {
    /// What resizes this terminal while its reads and writes are elsewhere.
    pub fn resizer(&self) -> io::Result<PtyResizer> {
        Ok(PtyResizer {
            fd: self.fd.get_ref().try_clone()?,
        })
    }
}

/// Sets a terminal's size.
pub struct PtyResizer {
    fd: OwnedFd,
}

impl PtyResizer {
    /// Sets the terminal's size, as a terminal emulator does on resize;
    /// the command gets SIGWINCH.
    pub fn resize(&self, width: u16, height: u16) -> io::Result<()> {
        set_window_size(self.fd.as_raw_fd(), width, height)
    }
}

impl AsyncRead for PtyPrimary {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        loop {
            let mut guard = ready!(self.fd.poll_read_ready(cx))?;
            let unfilled = buf.initialize_unfilled();
            let fd = guard.get_inner().as_raw_fd();
            // SAFETY: reads at most `unfilled.len()` bytes into it.
            let read = unsafe { libc::read(fd, unfilled.as_mut_ptr().cast(), unfilled.len()) };
            if read >= 0 {
                buf.advance(read as usize);
                return Poll::Ready(Ok(()));
            }
            let err = io::Error::last_os_error();
            match err.raw_os_error() {
                Some(libc::EAGAIN) => guard.clear_ready(),
                Some(libc::EINTR) => {}
                // Every replica fd is closed: the command and what it
                // started are gone. That is the terminal's end of file.
                Some(libc::EIO) => return Poll::Ready(Ok(())),
                _ => return Poll::Ready(Err(err)),
            }
        }
    }
}

impl AsyncWrite for PtyPrimary {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        loop {
            let mut guard = ready!(self.fd.poll_write_ready(cx))?;
            let fd = guard.get_inner().as_raw_fd();
            // SAFETY: writes at most `data.len()` bytes from it.
            let written = unsafe { libc::write(fd, data.as_ptr().cast(), data.len()) };
            if written >= 0 {
                return Poll::Ready(Ok(written as usize));
            }
            let err = io::Error::last_os_error();
            match err.raw_os_error() {
                Some(libc::EAGAIN) => guard.clear_ready(),
                Some(libc::EINTR) => {}
                _ => return Poll::Ready(Err(err)),
            }
        }
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

fn set_nonblocking(fd: &OwnedFd) -> io::Result<()> {
    set_flag(
        fd.as_raw_fd(),
        libc::F_GETFL,
        libc::F_SETFL,
        libc::O_NONBLOCK,
    )
}

/// A new terminal's primary and replica sides, both closed on exec.
pub(crate) fn open_pair() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut primary: libc::c_int = -1;
    let mut replica: libc::c_int = -1;
    // SAFETY: openpty writes two fds into the provided ints; the name,
    // termios and winsize arguments may be null.
    let result = unsafe {
        libc::openpty(
            &mut primary,
            &mut replica,
            std::ptr::null_mut(),
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    if result != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: openpty succeeded, so both are open fds owned by nobody else.
    let (primary, replica) =
        unsafe { (OwnedFd::from_raw_fd(primary), OwnedFd::from_raw_fd(replica)) };
    set_cloexec(&primary)?;
    set_cloexec(&replica)?;
    Ok((primary, replica))
}

/// Sets the size of the terminal whose primary side is `fd`, as a terminal
/// emulator does on resize; the foreground process group gets SIGWINCH.
pub(crate) fn set_window_size(fd: RawFd, width: u16, height: u16) -> io::Result<()> {
    let size = libc::winsize {
        ws_row: height,
        ws_col: width,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCSWINSZ reads one winsize from the pointer.
    if unsafe { libc::ioctl(fd, libc::TIOCSWINSZ, &size) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn set_cloexec(fd: &OwnedFd) -> io::Result<()> {
    set_flag(
        fd.as_raw_fd(),
        libc::F_GETFD,
        libc::F_SETFD,
        libc::FD_CLOEXEC,
    )
}

fn set_flag(fd: RawFd, get: libc::c_int, set: libc::c_int, flag: libc::c_int) -> io::Result<()> {
    // SAFETY: fcntl on an open fd with integer arguments.
    unsafe {
        let flags = libc::fcntl(fd, get);
        if flags < 0 || libc::fcntl(fd, set, flags | flag) < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn what_is_written_to_the_replica_is_read_from_the_primary() {
        let (mut primary, replica) = open().unwrap();
        primary.resizer().unwrap().resize(100, 30).unwrap();
        let mut size: libc::winsize = unsafe { std::mem::zeroed() };
        // SAFETY: TIOCGWINSZ writes one winsize.
        assert_eq!(
            unsafe { libc::ioctl(replica.as_raw_fd(), libc::TIOCGWINSZ, &mut size) },
            0
        );
        assert_eq!((size.ws_col, size.ws_row), (100, 30));
        let mut replica = std::fs::File::from(replica);
        std::io::Write::write_all(&mut replica, b"hi\n").unwrap();
        let mut read = [0u8; 16];
        let n = primary.read(&mut read).await.unwrap();
        // The terminal's line discipline turns \n into \r\n.
        assert_eq!(&read[..n], b"hi\r\n");
        primary.write_all(b"x\n").await.unwrap();
        drop(replica);
        // With the replica closed, reading ends instead of failing.
        let mut rest = Vec::new();
        primary.read_to_end(&mut rest).await.unwrap();
    }
}
