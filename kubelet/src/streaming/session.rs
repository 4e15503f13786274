//! What a remotecommand connection runs: an exec'd command or an attach
//! to the container's output; the protocols carry either the same way.

use std::path::PathBuf;

use bytes::Bytes;
use tokio::sync::mpsc;

use super::attach;
use super::exec::{self, ClientEvent, ExecRequest, OutputStream};
use super::status::ExecOutcome;
use crate::runtime::{ContainerHandle, ExecContext};

pub enum Session {
    Exec {
        context: ExecContext,
        request: ExecRequest,
    },
    Attach {
        handle: ContainerHandle,
        log_path: PathBuf,
        /// Where the container's stdin is written, when the client sends it.
        stdin_socket: Option<PathBuf>,
        /// The container runs on a terminal: its output and input go
        /// through `stdin_socket` in the shim's frames.
        terminal: bool,
        request: ExecRequest,
    },
}

impl Session {
    /// The streams asked for (and, for exec, the command).
    pub fn request(&self) -> &ExecRequest {
        match self {
            Session::Exec { request, .. } | Session::Attach { request, .. } => request,
        }
    }

    /// Runs to the end; `input` ending means the client is gone.
    pub async fn run(
        &self,
        input: mpsc::Receiver<ClientEvent>,
        output: mpsc::Sender<(OutputStream, Bytes)>,
    ) -> ExecOutcome {
        match self {
            Session::Exec { context, request } => exec::run(context, request, input, output).await,
            Session::Attach {
                handle,
                stdin_socket,
                terminal: true,
                request,
                ..
            } => {
                attach::run_on_terminal(handle, stdin_socket.as_deref(), request, input, output)
                    .await
            }
            Session::Attach {
                handle,
                log_path,
                stdin_socket,
                terminal: false,
                request,
            } => {
                attach::run(
                    handle,
                    log_path,
                    stdin_socket.as_deref(),
                    request,
                    input,
                    output,
                )
                .await
            }
        }
    }
}
