//! A container started with `tty: true`: the shim holds its terminal's
//! primary side, copies what the container writes there to the log and to
//! every attached client, and takes input and resizes from attach as
//! [`Frame`]s. Not for exec's terminals, which the kubelet opens itself.

use std::fs::File;
use std::io::{self, Read, Write};
use std::net::Shutdown;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::mpsc::{self, SyncSender, TrySendError};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::logs::cri::LogStream;

/// The most input one frame carries; attach splits longer input.
pub const MAX_INPUT: usize = 32 * 1024;
/// Output chunks kept for an attached client that reads slowly; one that
/// falls further behind is disconnected rather than holding up the log.
const CLIENT_BACKLOG: usize = 256;

const INPUT_TAG: u8 = b'i';
const RESIZE_TAG: u8 = b'r';

/// What attach sends the shim of a terminal container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// Typed input: `i`, a big-endian u32 length, the bytes.
    Input(Vec<u8>),
    /// The client's terminal size: `r`, big-endian u16 columns and rows.
    Resize { width: u16, height: u16 },
}

impl Frame {
    pub fn encode(&self) -> Vec<u8> {
        match self {
            Frame::Input(data) => {
                let mut out = Vec::with_capacity(5 + data.len());
                out.push(INPUT_TAG);
                out.extend_from_slice(&(data.len() as u32).to_be_bytes());
                out.extend_from_slice(data);
                out
            }
            Frame::Resize { width, height } => {
                let mut out = vec![RESIZE_TAG];
                out.extend_from_slice(&width.to_be_bytes());
                out.extend_from_slice(&height.to_be_bytes());
                out
            }
        }
    }

    /// The next frame, or `None` at a clean end of the connection.
    pub fn read(from: &mut impl Read) -> io::Result<Option<Frame>> {
        let mut tag = [0u8; 1];
        match from.read_exact(&mut tag) {
            Ok(()) => {}
            Err(err) if err.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
            Err(err) => return Err(err),
        }
        match tag[0] {
            INPUT_TAG => {
                let mut len = [0u8; 4];
                from.read_exact(&mut len)?;
                let len = u32::from_be_bytes(len) as usize;
                if len > MAX_INPUT {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("input frame of {len} bytes, more than {MAX_INPUT}"),
                    ));
                }
                let mut data = vec![0u8; len];
                from.read_exact(&mut data)?;
                Ok(Some(Frame::Input(data)))
            }
            RESIZE_TAG => {
                let mut size = [0u8; 4];
                from.read_exact(&mut size)?;
                Ok(Some(Frame::Resize {
                    width: u16::from_be_bytes([size[0], size[1]]),
                    height: u16::from_be_bytes([size[2], size[3]]),
                }))
            }
            other => Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("unknown frame tag {other:#04x}"),
            )),
        }
    }
}

/// A new terminal: the primary side for the shim and the replica side for
/// the container's stdin, stdout and stderr; neither survives an exec.
pub fn open() -> io::Result<(File, OwnedFd)> {
    let (primary, replica) = crate::streaming::pty::open_pair()?;
    Ok((File::from(primary), replica))
}

/// In the forked child, its stdin already the replica: a session of its
/// own (so it leads its process group, as without a terminal), with the
/// terminal as its controlling terminal, so ^C and resizes signal it.
pub fn take_controlling_terminal() -> io::Result<()> {
    // SAFETY: setsid and ioctl are async-signal-safe and take no pointers.
    unsafe {
        if libc::setsid() < 0 {
            return Err(io::Error::last_os_error());
        }
        if libc::ioctl(libc::STDIN_FILENO, libc::TIOCSCTTY, 0) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// The shim's side of a container's terminal and its attached clients.
pub struct Terminal {
    primary: File,
    /// Whether the container was started with `stdin`; without it, input
    /// frames are dropped and the terminal only shows output.
    stdin: bool,
    clients: Mutex<Vec<SyncSender<Arc<[u8]>>>>,
}

impl Terminal {
    pub fn new(primary: File, stdin: bool) -> Arc<Self> {
        Arc::new(Terminal {
            primary,
            stdin,
            clients: Mutex::new(Vec::new()),
        })
    }

    /// Copies the container's output into the log as stdout records and to
    /// the attached clients, until no process holds the terminal; then the
    /// clients are disconnected and `done` told.
    pub fn spawn_output(self: &Arc<Self>, log: Arc<Mutex<File>>, done: mpsc::Sender<()>) {
        let terminal = self.clone();
        std::thread::spawn(move || {
            super::copy_stream(Output(&terminal), LogStream::Stdout, &log);
            terminal.clients.lock().clear();
            let _ = done.send(());
        });
    }

    /// Serves attach connections: each gets the output from now on, and
    /// its frames are applied to the terminal.
    pub fn spawn_clients(self: &Arc<Self>, listener: UnixListener) {
        let terminal = self.clone();
        std::thread::spawn(move || {
            for connection in listener.incoming() {
                let Ok(connection) = connection else {
                    continue;
                };
                terminal.connect(connection);
            }
        });
    }

    fn connect(self: &Arc<Self>, connection: UnixStream) {
        let Ok(mut writer) = connection.try_clone() else {
            return;
        };
        let (sender, chunks) = mpsc::sync_channel::<Arc<[u8]>>(CLIENT_BACKLOG);
        self.clients.lock().push(sender);
        std::thread::spawn(move || {
            for chunk in chunks {
                if writer.write_all(&chunk).is_err() {
                    break;
                }
            }
            // The container is gone or this client fell behind: its end
            // of file tells attach so.
            let _ = writer.shutdown(Shutdown::Both);
        });
        let terminal = self.clone();
        std::thread::spawn(move || terminal.apply_frames(connection));
    }

    fn apply_frames(&self, mut connection: UnixStream) {
        loop {
            match Frame::read(&mut connection) {
                Ok(Some(Frame::Input(data))) => {
                    if self.stdin && (&self.primary).write_all(&data).is_err() {
                        return;
                    }
                }
                Ok(Some(Frame::Resize { width, height })) => {
                    if let Err(err) = self.resize(width, height) {
                        eprintln!("kubelet-shim: resizing the terminal: {err}");
                    }
                }
                Ok(None) => return,
                Err(err) => {
                    eprintln!("kubelet-shim: attach connection: {err}");
                    return;
                }
            }
        }
    }

    /// Sets the terminal's size; the kernel sends the foreground process
    /// group SIGWINCH.
    pub fn resize(&self, width: u16, height: u16) -> io::Result<()> {
        crate::streaming::pty::set_window_size(self.primary.as_raw_fd(), width, height)
    }

    /// Passes a chunk of output to every client that keeps up.
    fn broadcast(&self, chunk: &[u8]) {
        let mut clients = self.clients.lock();
        if clients.is_empty() {
            return;
        }
        let chunk: Arc<[u8]> = Arc::from(chunk);
        clients.retain(|client| match client.try_send(chunk.clone()) {
            Ok(()) => true,
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => false,
        });
    }
}

/// The terminal's output as a stream for the log copier, handing each
/// chunk to the attached clients as it is read.
struct Output<'a>(&'a Terminal);

impl Read for Output<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match (&self.0.primary).read(buf) {
            Ok(read) => {
                self.0.broadcast(&buf[..read]);
                Ok(read)
            }
            // Every replica fd is closed: the container and what it
            // started are gone, the terminal's end of file.
            Err(err) if err.raw_os_error() == Some(libc::EIO) => Ok(0),
            Err(err) => Err(err),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::CommandExt;
    use std::process::{Command, Stdio};

    #[test]
    fn frames_round_trip_and_bad_ones_are_refused() {
        let frames = [
            Frame::Input(b"ls\r".to_vec()),
            Frame::Resize {
                width: 132,
                height: 43,
            },
            Frame::Input(Vec::new()),
        ];
        let mut wire: Vec<u8> = frames.iter().flat_map(Frame::encode).collect();
        let mut reader = &wire[..];
        for frame in &frames {
            assert_eq!(Frame::read(&mut reader).unwrap().as_ref(), Some(frame));
        }
        assert_eq!(Frame::read(&mut reader).unwrap(), None);
        wire = vec![INPUT_TAG];
        wire.extend_from_slice(&(MAX_INPUT as u32 + 1).to_be_bytes());
        assert!(Frame::read(&mut &wire[..]).is_err());
        assert!(Frame::read(&mut &b"x"[..]).is_err());
        // A frame cut short is an error, not a clean end.
        assert!(Frame::read(&mut &b"r\x00"[..]).is_err());
    }

    /// A shell on a terminal, as the shim starts a `tty` container: an
    /// attached client types into it, resizes it, sees its echo and
    /// output, and the log gets the output too.
    #[test]
    fn a_shell_on_the_terminal_serves_an_attached_client_and_the_log() {
        let dir = tempfile::tempdir().unwrap();
        let (primary, replica) = open().unwrap();
        let mut command = Command::new("sh");
        command
            .stdin(Stdio::from(replica.try_clone().unwrap()))
            .stdout(Stdio::from(replica.try_clone().unwrap()))
            .stderr(Stdio::from(replica));
        // SAFETY: the closure calls only async-signal-safe functions.
        unsafe {
            command.pre_exec(take_controlling_terminal);
        }
        let mut child = command.spawn().unwrap();
        drop(command);
        let terminal = Terminal::new(primary, true);
        let log_path = dir.path().join("0.log");
        let log = Arc::new(Mutex::new(File::create(&log_path).unwrap()));
        let (done, drained) = mpsc::channel();
        terminal.spawn_output(log, done);
        let socket = dir.path().join("attach.sock");
        terminal.spawn_clients(UnixListener::bind(&socket).unwrap());
        let mut client = UnixStream::connect(&socket).unwrap();
        let mut wire = Frame::Resize {
            width: 91,
            height: 17,
        }
        .encode();
        wire.extend(
            Frame::Input(b"tty; stty size; echo typed-$((6*7)); exit 3\n".to_vec()).encode(),
        );
        client.write_all(&wire).unwrap();
        let mut seen = Vec::new();
        client.read_to_end(&mut seen).unwrap();
        let seen = String::from_utf8_lossy(&seen);
        assert!(seen.contains("/dev/pts/"), "{seen:?}");
        assert!(seen.contains("17 91\r\n"), "{seen:?}");
        assert!(seen.contains("typed-42\r\n"), "{seen:?}");
        assert_eq!(child.wait().unwrap().code(), Some(3));
        drained
            .recv_timeout(std::time::Duration::from_secs(10))
            .unwrap();
        let log = std::fs::read_to_string(&log_path).unwrap();
        assert!(log.contains(" stdout F typed-42\r\n"), "{log}");
    }
}
