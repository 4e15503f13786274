//! The output of a child process left running (a `kubectl get -w`, an
//! `etcdctl watch`), collected by two reader threads: stdout line by line,
//! stderr as text, each readable while the process runs.

use std::io::{BufRead, BufReader};
use std::process::Child;
use std::sync::{Arc, Mutex};

use anyhow::{Context, Result};

pub type Lines = Arc<Mutex<Vec<String>>>;
pub type Text = Arc<Mutex<String>>;

/// Starts collecting `child`'s piped stdout (as lines) and stderr (as text).
pub fn capture(child: &mut Child, what: &str) -> Result<(Lines, Text)> {
    let lines: Lines = Arc::default();
    let stderr: Text = Arc::default();
    let out = child
        .stdout
        .take()
        .with_context(|| format!("{what} has no stdout"))?;
    let err = child
        .stderr
        .take()
        .with_context(|| format!("{what} has no stderr"))?;
    let sink = Arc::clone(&lines);
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            sink.lock().unwrap().push(line);
        }
    });
    let sink = Arc::clone(&stderr);
    std::thread::spawn(move || {
        for line in BufReader::new(err).lines() {
            let Ok(line) = line else { break };
            let mut text = sink.lock().unwrap();
            text.push_str(&line);
            text.push('\n');
        }
    });
    Ok((lines, stderr))
}
