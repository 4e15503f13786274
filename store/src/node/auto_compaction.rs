//! Automatic compaction, as etcd's `--auto-compaction-mode`: keep the last
//! N revisions, or keep a time window of history. It only proposes
//! Compact commands; the engine does the rest.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use super::driver::DriverRequest;
use crate::command::Command;
use crate::error::StoreError;
use crate::mvcc::KvStore;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AutoCompaction {
    #[default]
    Off,
    /// Keep this many revisions; checked every `check_interval`.
    Revisions { keep: i64, check_interval: Duration },
    /// Keep this much time of history (sampled ten times per window).
    Periodic { retention: Duration },
}

impl AutoCompaction {
    /// etcd's revision mode checks every five minutes.
    pub fn revisions(keep: i64) -> Self {
        AutoCompaction::Revisions {
            keep,
            check_interval: Duration::from_secs(300),
        }
    }
}

pub(crate) async fn run(
    policy: AutoCompaction,
    kv: Arc<KvStore>,
    requests: mpsc::Sender<DriverRequest>,
    mut shutdown: watch::Receiver<bool>,
) {
    let (every, retention) = match policy {
        AutoCompaction::Off => return,
        AutoCompaction::Revisions { check_interval, .. } => (check_interval, None),
        AutoCompaction::Periodic { retention } => (retention / 10, Some(retention)),
    };
    let mut tick = tokio::time::interval(every.max(Duration::from_millis(1)));
    let mut samples: VecDeque<(Instant, i64)> = VecDeque::new();
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.changed() => return,
        }
        let current = kv.current_revision();
        let target = match (policy, retention) {
            (AutoCompaction::Revisions { keep, .. }, _) => current - keep,
            (_, Some(retention)) => {
                let now = Instant::now();
                samples.push_back((now, current));
                oldest_past_window(&mut samples, now, retention)
            }
            _ => return,
        };
        if target <= kv.compact_revision() || target <= 0 {
            continue;
        }
        let command = Command::Compact { revision: target };
        match super::propose_to(&requests, command).await {
            Ok(_) => tracing::info!(revision = target, "automatic compaction"),
            Err(StoreError::Compacted { .. }) => {}
            Err(StoreError::Stopped) => return,
            Err(err) => {
                tracing::warn!(revision = target, error = %err, "automatic compaction failed")
            }
        }
    }
}

/// The newest sampled revision at least `retention` old, dropping the
/// samples older than it.
fn oldest_past_window(
    samples: &mut VecDeque<(Instant, i64)>,
    now: Instant,
    retention: Duration,
) -> i64 {
    let mut target = 0;
    while let Some(&(at, rev)) = samples.front() {
        if now.duration_since(at) < retention {
            break;
        }
        target = rev;
        samples.pop_front();
    }
    target
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::testing::{put, test_config};
    use crate::Store;

    async fn wait_for_compaction(store: &Store, at_least: i64) {
        let deadline = Instant::now() + Duration::from_secs(5);
        while store.kv().compact_revision() < at_least {
            assert!(Instant::now() < deadline, "no automatic compaction");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    #[tokio::test]
    async fn revision_mode_keeps_the_last_revisions() {
        let dir = tempfile::tempdir().unwrap();
        let mut config = test_config(dir.path());
        config.auto_compaction = AutoCompaction::Revisions {
            keep: 5,
            check_interval: Duration::from_millis(20),
        };
        let store = Store::open(config).await.unwrap();
        for i in 0..20 {
            put(&store, "k", &i.to_string()).await;
        }
        wait_for_compaction(&store, 15).await;
        assert_eq!(store.kv().compact_revision(), 15);
    }

    #[tokio::test]
    async fn periodic_mode_keeps_a_time_window() {
        let dir = tempfile::tempdir().unwrap();
        let mut config = test_config(dir.path());
        config.auto_compaction = AutoCompaction::Periodic {
            retention: Duration::from_millis(300),
        };
        let store = Store::open(config).await.unwrap();
        for i in 0..10 {
            put(&store, "k", &i.to_string()).await;
        }
        wait_for_compaction(&store, 10).await;
        // Nothing written since: the window never compacts past the present.
        assert_eq!(store.kv().compact_revision(), 10);
    }

    #[test]
    fn window_picks_the_newest_old_enough_sample() {
        let start = Instant::now();
        let s = |ms: u64, rev| (start + Duration::from_millis(ms), rev);
        let mut samples: VecDeque<_> = [s(0, 1), s(100, 5), s(200, 9)].into();
        let now = start + Duration::from_millis(250);
        assert_eq!(
            oldest_past_window(&mut samples, now, Duration::from_millis(120)),
            5
        );
        assert_eq!(samples.len(), 1);
    }
}
