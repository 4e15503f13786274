//! Seeing pods get bound, as scheduler_perf's informer does: one watch of
//! the namespace's pods, opened before the first create, noting for each
//! measured pod the instant its first event with `spec.nodeName` arrived
//! and on which node. Also counts deleted pods of another name prefix (the
//! preemption workload's victims). Reopens from the last resourceVersion
//! if the server ends the watch.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{anyhow, bail, Context, Result};
use hyper::StatusCode;
use serde_json::Value;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::objects::{self, pods_path};
use crate::api::http::{query_value, ApiConnection, WatchStream};

/// Times a watch may be reopened before the run gives up on it.
const MAX_REOPENS: usize = 20;

/// A measured pod's binding as the watch saw it.
#[derive(Debug, Clone, Copy)]
pub struct Bound {
    pub at: Instant,
    /// The node's index in `node-NNNNN`; `None` for any other name.
    pub node: Option<usize>,
}

/// What the watch saw, once stopped.
pub struct Observed {
    /// Per measured pod index.
    pub bound: Vec<Option<Bound>>,
    /// DELETED events of pods named `<victim prefix>-…`.
    pub deleted: usize,
    pub reopens: usize,
}

/// The running watch.
pub struct BindingWatch {
    counters: Arc<Counters>,
    stop: watch::Sender<bool>,
    task: JoinHandle<Result<Observed>>,
}

impl BindingWatch {
    /// Opens the watch from the namespace's current resourceVersion for
    /// pods `<prefix>-00000`…`<prefix>-{count-1}`.
    pub async fn start(
        api: SocketAddr,
        conn: &mut ApiConnection,
        prefix: &'static str,
        count: usize,
        victim_prefix: Option<&'static str>,
    ) -> Result<BindingWatch> {
        let revision = current_revision(conn).await?;
        let counters = Arc::new(Counters::default());
        let (stop, stopped) = watch::channel(false);
        let mut state = State {
            prefix,
            victim_prefix,
            revision,
            observed: Observed {
                bound: vec![None; count],
                deleted: 0,
                reopens: 0,
            },
            counters: Arc::clone(&counters),
            error: None,
        };
        // The first open happens here, so no create can precede it.
        let stream = WatchStream::open(api, &state.watch_path()).await?;
        let task = tokio::spawn(async move {
            watch_loop(api, stream, &mut state, stopped).await?;
            Ok(state.observed)
        });
        Ok(BindingWatch {
            counters,
            stop,
            task,
        })
    }

    /// Measured pods bound so far.
    pub fn bound(&self) -> usize {
        self.counters.bound.load(Ordering::Acquire)
    }

    /// Pod events seen so far, of any pod: while they come the scheduler
    /// is at work (nominating, preempting) even if nothing is bound yet.
    pub fn events(&self) -> usize {
        self.counters.events.load(Ordering::Acquire)
    }

    /// Whether the watch has ended by itself (all bound, or an error).
    pub fn is_finished(&self) -> bool {
        self.task.is_finished()
    }

    /// Stops the watch and returns what it saw (or why it failed).
    pub async fn finish(mut self) -> Result<Observed> {
        let _ = self.stop.send(true);
        // By reference: `Drop` (which aborts an unfinished watch) still runs.
        (&mut self.task)
            .await
            .context("the binding watch panicked")?
    }
}

impl Drop for BindingWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// What the watch has seen so far, read while it runs.
#[derive(Default)]
struct Counters {
    /// Measured pods bound.
    bound: AtomicUsize,
    /// Pod events other than bookmarks.
    events: AtomicUsize,
}

struct State {
    prefix: &'static str,
    victim_prefix: Option<&'static str>,
    /// The last resourceVersion seen, where a reopened watch resumes.
    revision: String,
    observed: Observed,
    counters: Arc<Counters>,
    error: Option<anyhow::Error>,
}

impl State {
    fn watch_path(&self) -> String {
        format!(
            "{}?watch=true&allowWatchBookmarks=true&resourceVersion={}",
            pods_path(),
            query_value(&self.revision)
        )
    }

    fn all_bound(&self) -> bool {
        self.counters.bound.load(Ordering::Acquire) == self.observed.bound.len()
    }

    fn on_line(&mut self, line: &[u8], arrived: Instant) {
        if line.is_empty() || self.error.is_some() {
            return;
        }
        let event: Value = match serde_json::from_slice(line) {
            Ok(event) => event,
            Err(err) => {
                self.error = Some(anyhow!("a watch event is not JSON: {err}"));
                return;
            }
        };
        let object = &event["object"];
        if event["type"] == "ERROR" {
            self.error = Some(anyhow!(
                "the pod watch failed: {}",
                object["message"]
                    .as_str()
                    .unwrap_or("(an ERROR event without a message)")
            ));
            return;
        }
        if event["type"] != "BOOKMARK" {
            self.counters.events.fetch_add(1, Ordering::AcqRel);
        }
        if let Some(rv) = object["metadata"]["resourceVersion"].as_str() {
            self.revision = rv.to_string();
        }
        let name = object["metadata"]["name"].as_str().unwrap_or_default();
        if event["type"] == "DELETED" {
            if self
                .victim_prefix
                .is_some_and(|p| objects::pod_index(p, name).is_some())
            {
                self.observed.deleted += 1;
            }
            return;
        }
        let Some(index) = objects::pod_index(self.prefix, name) else {
            return;
        };
        let node = object["spec"]["nodeName"].as_str().unwrap_or_default();
        let Some(slot) = self.observed.bound.get_mut(index) else {
            return;
        };
        if slot.is_none() && !node.is_empty() {
            *slot = Some(Bound {
                at: arrived,
                node: objects::node_index(node),
            });
            self.counters.bound.fetch_add(1, Ordering::AcqRel);
        }
    }
}

/// Reads events until every pod is bound or `stop` is set; reopens the
/// watch where it left off when the server ends it.
async fn watch_loop(
    api: SocketAddr,
    mut stream: WatchStream,
    state: &mut State,
    mut stop: watch::Receiver<bool>,
) -> Result<()> {
    loop {
        let more = tokio::select! {
            more = stream.next_lines(|line, arrived| state.on_line(line, arrived)) => more,
            _ = stop.changed() => return Ok(()),
        };
        if let Some(err) = state.error.take() {
            return Err(err);
        }
        if state.all_bound() {
            return Ok(());
        }
        if matches!(more, Ok(true)) {
            continue;
        }
        state.observed.reopens += 1;
        if state.observed.reopens > MAX_REOPENS {
            let why = more.err().map(|e| format!(": {e:#}")).unwrap_or_default();
            bail!("the pod watch ended {MAX_REOPENS} times{why}");
        }
        stream = WatchStream::open(api, &state.watch_path()).await?;
    }
}

/// The resourceVersion of the namespace's pod list now.
async fn current_revision(conn: &mut ApiConnection) -> Result<String> {
    let path = format!("{}?limit=1", pods_path());
    let body = conn
        .get(&path)
        .await?
        .expect(StatusCode::OK, "listing the pods")?;
    let list: Value = serde_json::from_slice(&body).context("the pod list is not JSON")?;
    list["metadata"]["resourceVersion"]
        .as_str()
        .map(str::to_string)
        .context("the pod list has no metadata.resourceVersion")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(count: usize) -> State {
        State {
            prefix: "high",
            victim_prefix: Some("low"),
            revision: "1".into(),
            observed: Observed {
                bound: vec![None; count],
                deleted: 0,
                reopens: 0,
            },
            counters: Arc::new(Counters::default()),
            error: None,
        }
    }

    #[test]
    fn the_first_event_with_a_node_name_binds_a_pod() {
        let mut s = state(2);
        let now = Instant::now();
        s.on_line(br#"{"type":"ADDED","object":{"metadata":{"name":"high-00001","resourceVersion":"5"},"spec":{}}}"#, now);
        assert!(s.observed.bound[1].is_none());
        s.on_line(br#"{"type":"MODIFIED","object":{"metadata":{"name":"high-00001","resourceVersion":"6"},"spec":{"nodeName":"node-00007"}},"status":{"nominatedNodeName":"node-00001"}}"#, now);
        s.on_line(br#"{"type":"MODIFIED","object":{"metadata":{"name":"high-00001","resourceVersion":"7"},"spec":{"nodeName":"node-00007"}}}"#, now);
        s.on_line(br#"{"type":"DELETED","object":{"metadata":{"name":"low-00003","resourceVersion":"8"},"spec":{"nodeName":"node-00007"}}}"#, now);
        s.on_line(br#"{"type":"MODIFIED","object":{"metadata":{"name":"pod-00000","resourceVersion":"9"},"spec":{"nodeName":"node-00002"}}}"#, now);
        assert_eq!(s.observed.bound[1].map(|b| b.node), Some(Some(7)));
        assert!(s.observed.bound[0].is_none());
        assert_eq!(s.counters.bound.load(Ordering::Acquire), 1);
        assert_eq!(s.counters.events.load(Ordering::Acquire), 5);
        assert_eq!(s.observed.deleted, 1);
        assert_eq!(s.revision, "9");
        assert!(s.error.is_none());
    }

    #[test]
    fn an_error_event_fails_the_watch() {
        let mut s = state(1);
        s.on_line(
            br#"{"type":"ERROR","object":{"kind":"Status","code":410,"message":"too old resource version"}}"#,
            Instant::now(),
        );
        let err = s.error.expect("an error");
        assert!(
            err.to_string().contains("too old resource version"),
            "{err}"
        );
    }
}
