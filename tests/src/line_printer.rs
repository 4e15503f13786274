//! Prints protocol lines on a child's stdout from one thread, each with a single write,
//! so a SIGKILL can cut the output short but never mix or tear printed lines.
//! Shared by `store-writer` and `store-member`.

use std::io::Write;

use anyhow::{anyhow, Result};
use tokio::sync::mpsc;

use crate::writer_protocol::WriterLine;

/// Lines waiting for stdout; a slow reader then slows the put loops down.
const PRINT_QUEUE: usize = 1024;

#[derive(Clone)]
pub struct LinePrinter {
    lines: mpsc::Sender<WriterLine>,
}

impl LinePrinter {
    pub fn start() -> LinePrinter {
        let (lines, mut queued) = mpsc::channel::<WriterLine>(PRINT_QUEUE);
        std::thread::spawn(move || {
            let mut out = std::io::stdout().lock();
            while let Some(line) = queued.blocking_recv() {
                let text = format!("{line}\n");
                if out
                    .write_all(text.as_bytes())
                    .and_then(|()| out.flush())
                    .is_err()
                {
                    // The reader is gone; dropping `queued` fails the printing loops.
                    return;
                }
            }
        });
        LinePrinter { lines }
    }

    /// Queues `line`; it is on stdout soon after, unless the process dies first.
    pub async fn print(&self, line: WriterLine) -> Result<()> {
        self.lines
            .send(line)
            .await
            .map_err(|_| anyhow!("stdout is closed: whoever read this process's output went away"))
    }
}
