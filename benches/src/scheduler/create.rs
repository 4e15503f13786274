//! Creating many objects as fast as the API server takes them: C clients,
//! each on its own keep-alive connection, taking the next index until all
//! are created, each create's send instant kept (the start of a pod's
//! create→bound latency).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use bytes::Bytes;
use hyper::StatusCode;

use crate::api::http::ApiConnection;
use crate::versus::progress::Progress;

/// How often a long create run updates the progress bar.
const PROGRESS_TICK: Duration = Duration::from_millis(200);

/// Object `index`'s name and JSON.
pub type Body = Arc<dyn Fn(usize) -> (String, Bytes) + Send + Sync>;

/// A finished create run.
pub struct Created {
    /// Per index, when its create was sent.
    pub sent: Vec<Instant>,
    /// First send → last answer.
    pub elapsed: Duration,
}

impl Created {
    pub fn first_sent(&self) -> Option<Instant> {
        self.sent.iter().min().copied()
    }

    pub fn per_second(&self) -> f64 {
        self.sent.len() as f64 / self.elapsed.as_secs_f64().max(f64::EPSILON)
    }
}

/// POSTs objects `0..count` (`body(i)`) to `path` with every connection
/// of `conns` at once; the bar counts them.
pub async fn create_all(
    conns: &mut Vec<ApiConnection>,
    path: &str,
    count: usize,
    body: Body,
    progress: &Progress,
) -> Result<Created> {
    let next = Arc::new(AtomicUsize::new(0));
    progress.set_length(count as u64);
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(conns.len());
    for mut conn in conns.drain(..) {
        let (next, body, path) = (Arc::clone(&next), Arc::clone(&body), path.to_string());
        tasks.push(tokio::spawn(async move {
            let result = create_loop(&mut conn, &path, &next, count, &body).await;
            (conn, result, Instant::now())
        }));
    }
    let mut reported = 0;
    let mut tick = tokio::time::interval(PROGRESS_TICK);
    while !tasks.iter().all(|t| t.is_finished()) {
        tick.tick().await;
        let done = next.load(Ordering::Relaxed).min(count);
        progress.inc((done - reported) as u64);
        reported = done;
    }
    let mut sent = vec![started; count];
    let mut last_done = started;
    let mut failure = None;
    for task in tasks {
        let (conn, result, done) = task.await.context("a create client panicked")?;
        conns.push(conn);
        last_done = last_done.max(done);
        match result {
            Ok(own) => own.into_iter().for_each(|(i, at)| sent[i] = at),
            Err(err) => failure = failure.or(Some(err)),
        }
    }
    if let Some(err) = failure {
        return Err(err);
    }
    let first = sent.iter().min().copied().unwrap_or(started);
    Ok(Created {
        sent,
        elapsed: last_done - first,
    })
}

/// One client: creates the next index until `end`; returns each index it
/// created with its send instant.
async fn create_loop(
    conn: &mut ApiConnection,
    path: &str,
    next: &AtomicUsize,
    end: usize,
    body: &Body,
) -> Result<Vec<(usize, Instant)>> {
    let mut sent = Vec::new();
    loop {
        let index = next.fetch_add(1, Ordering::Relaxed);
        if index >= end {
            return Ok(sent);
        }
        let (name, json) = body(index);
        let at = Instant::now();
        conn.post(path, json)
            .await?
            .expect(StatusCode::CREATED, &format!("creating {name}"))?;
        sent.push((index, at));
    }
}

/// POSTs one object; `exists_ok`: a 409 (it is there already) is fine.
pub async fn create_one(
    conn: &mut ApiConnection,
    path: &str,
    json: Bytes,
    what: &str,
    exists_ok: bool,
) -> Result<()> {
    let answer = conn.post(path, json).await?;
    if exists_ok && answer.status == StatusCode::CONFLICT {
        return Ok(());
    }
    answer.expect(StatusCode::CREATED, &format!("creating {what}"))?;
    Ok(())
}
