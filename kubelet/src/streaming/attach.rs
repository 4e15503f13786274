//! Attach to a running container: its log file followed from now, each
//! record on the stream it came from, until the container exits; and, for
//! a container started with `stdin`, the client's stdin written to it
//! through its shim's socket. A container on a terminal (`tty`) is relayed
//! through that socket both ways instead, with resizes.

use std::io::SeekFrom;
use std::path::Path;
use std::time::Duration;

use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncSeekExt, AsyncWriteExt};
use tokio::sync::mpsc;

use super::exec::{ClientEvent, ExecRequest, OutputStream};
use super::status::ExecOutcome;
use crate::logs::cri::{parse_record, LogStream, LogTag};
use crate::runtime::ContainerHandle;
use crate::shim::terminal::{Frame, MAX_INPUT};

/// How often the log is looked at for new records.
const POLL: Duration = Duration::from_millis(100);
/// The longest partial record kept while waiting for its end; CRI records
/// are far shorter, so anything longer is not a record.
const MAX_LINE: usize = 64 * 1024;

/// Streams the container's new output until it exits or the client leaves.
pub async fn run(
    handle: &ContainerHandle,
    log_path: &Path,
    stdin_socket: Option<&Path>,
    request: &ExecRequest,
    mut input: mpsc::Receiver<ClientEvent>,
    output: mpsc::Sender<(OutputStream, Bytes)>,
) -> ExecOutcome {
    let mut file = match tokio::fs::File::open(log_path).await {
        Ok(file) => file,
        Err(err) => {
            return ExecOutcome::Failed {
                message: format!("cannot read the output of {}: {err}", handle.id()),
            }
        }
    };
    if let Err(err) = file.seek(SeekFrom::End(0)).await {
        return ExecOutcome::Failed {
            message: format!("cannot read the output of {}: {err}", handle.id()),
        };
    }
    let mut stdin = match stdin_socket.filter(|_| request.stdin) {
        Some(socket) => match tokio::net::UnixStream::connect(socket).await {
            Ok(stream) => Some(stream),
            Err(err) => {
                return ExecOutcome::Failed {
                    message: format!("cannot attach to the stdin of {}: {err}", handle.id()),
                }
            }
        },
        None => None,
    };
    let mut line = Vec::new();
    let mut buf = vec![0u8; 32 * 1024];
    loop {
        let exited = handle.exited().is_some();
        loop {
            let read = match file.read(&mut buf).await {
                Ok(0) => break,
                Ok(read) => read,
                Err(err) => {
                    return ExecOutcome::Failed {
                        message: format!("cannot read the output of {}: {err}", handle.id()),
                    }
                }
            };
            for chunk in buf[..read].split_inclusive(|b| *b == b'\n') {
                line.extend_from_slice(chunk);
                if line.ends_with(b"\n") {
                    if !send_record(&line, request, &output).await {
                        return ExecOutcome::Failed {
                            message: "the client went away".into(),
                        };
                    }
                    line.clear();
                } else if line.len() > MAX_LINE {
                    line.clear();
                }
            }
        }
        if exited {
            return ExecOutcome::Exited { code: 0 };
        }
        tokio::select! {
            event = input.recv() => match event {
                None => return ExecOutcome::Failed { message: "the client went away".into() },
                Some(ClientEvent::Stdin(data)) => {
                    if let Some(writer) = stdin.as_mut() {
                        if writer.write_all(&data).await.is_err() {
                            stdin = None;
                        }
                    }
                }
                // Closing the connection tells the shim: the container's
                // stdin stays open for the next client, unless stdinOnce.
                // The output goes on until the container exits.
                Some(ClientEvent::StdinClosed) => stdin = None,
                Some(ClientEvent::Resize { .. }) => {}
            },
            () = tokio::time::sleep(POLL) => {}
        }
    }
}

/// Relays a terminal container: its output as it is written, the client's
/// input and resizes to the terminal, until the container exits or the
/// client leaves. As with containerd, the client's stdin ending ends its
/// session and leaves the terminal open (even with `stdinOnce`), so a
/// later `kubectl attach -it` resumes it.
pub async fn run_on_terminal(
    handle: &ContainerHandle,
    socket: Option<&Path>,
    request: &ExecRequest,
    mut input: mpsc::Receiver<ClientEvent>,
    output: mpsc::Sender<(OutputStream, Bytes)>,
) -> ExecOutcome {
    let connected = match socket {
        Some(socket) => tokio::net::UnixStream::connect(socket).await,
        None => Err(std::io::ErrorKind::NotFound.into()),
    };
    let (mut reader, mut writer) = match connected {
        Ok(stream) => stream.into_split(),
        Err(err) => {
            return ExecOutcome::Failed {
                message: format!("cannot attach to the terminal of {}: {err}", handle.id()),
            }
        }
    };
    let mut buf = vec![0u8; 32 * 1024];
    loop {
        tokio::select! {
            read = reader.read(&mut buf) => match read {
                // The shim ends the connection when the container has exited.
                Ok(0) | Err(_) => return ExecOutcome::Exited { code: 0 },
                Ok(read) => {
                    let chunk = Bytes::copy_from_slice(&buf[..read]);
                    if request.stdout && output.send((OutputStream::Stdout, chunk)).await.is_err() {
                        return ExecOutcome::Failed { message: "the client went away".into() };
                    }
                }
            },
            event = input.recv() => {
                let frames = match event {
                    None => return ExecOutcome::Failed { message: "the client went away".into() },
                    Some(ClientEvent::StdinClosed) => return ExecOutcome::Exited { code: 0 },
                    Some(ClientEvent::Stdin(data)) if request.stdin => data
                        .chunks(MAX_INPUT)
                        .flat_map(|chunk| Frame::Input(chunk.to_vec()).encode())
                        .collect(),
                    Some(ClientEvent::Stdin(_)) => continue,
                    Some(ClientEvent::Resize { width, height }) => {
                        Frame::Resize { width, height }.encode()
                    }
                };
                if let Err(err) = writer.write_all(&frames).await {
                    return ExecOutcome::Failed {
                        message: format!("lost the terminal of {}: {err}", handle.id()),
                    };
                }
            }
        }
    }
}

/// Passes one record's content on, if its stream was asked for; false
/// once the client is gone.
async fn send_record(
    line: &[u8],
    request: &ExecRequest,
    output: &mpsc::Sender<(OutputStream, Bytes)>,
) -> bool {
    let Ok(record) = parse_record(line) else {
        return true;
    };
    let stream = match record.stream {
        LogStream::Stdout if request.stdout => OutputStream::Stdout,
        LogStream::Stderr if request.stderr => OutputStream::Stderr,
        _ => return true,
    };
    let mut content = record.content.to_vec();
    if record.tag == LogTag::Full {
        content.push(b'\n');
    }
    output.send((stream, Bytes::from(content))).await.is_ok()
}
