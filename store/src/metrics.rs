//! Prometheus metrics under etcd's names, for what skiff measures, so that
//! dashboards and `etcdctl check datascale` built for etcd read skiff. The
//! exposition is rendered per scrape from the store's own counters; only
//! the disk latency histograms are kept here, fed where the syncs happen.

use std::sync::atomic::Ordering;
use std::sync::LazyLock;
use std::time::Duration;

use prometheus::{Encoder, Histogram, HistogramOpts, IntCounter, IntGauge, Opts, Registry};

use crate::Store;

/// etcd's buckets for disk latencies: 1 ms to about 8 s, doubling.
fn disk_buckets() -> Vec<f64> {
    prometheus::exponential_buckets(0.001, 2.0, 14).unwrap_or_default()
}

fn histogram(name: &str, help: &str) -> Histogram {
    let opts = HistogramOpts::new(name, help).buckets(disk_buckets());
    Histogram::with_opts(opts).unwrap_or_else(|err| panic!("histogram {name}: {err}"))
}

/// Each fdatasync of the write-ahead log.
static WAL_FSYNC: LazyLock<Histogram> = LazyLock::new(|| {
    histogram(
        "etcd_disk_wal_fsync_duration_seconds",
        "The latency distributions of fsync called by WAL.",
    )
});

/// Each flush of the state database to disk (etcd's backend commit).
static BACKEND_COMMIT: LazyLock<Histogram> = LazyLock::new(|| {
    histogram(
        "etcd_disk_backend_commit_duration_seconds",
        "The latency distributions of commit called by backend.",
    )
});

pub(crate) fn observe_wal_fsync(took: Duration) {
    WAL_FSYNC.observe(took.as_secs_f64());
}

pub(crate) fn observe_backend_commit(took: Duration) {
    BACKEND_COMMIT.observe(took.as_secs_f64());
}

/// The content type of the text exposition format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The metrics of `store` now, in Prometheus's text exposition format.
pub fn render(store: &Store) -> String {
    let registry = Registry::new();
    let status = store.status();
    let stats = store.stats();
    let gauge = |name: &str, help: &str, value: i64| {
        let metric = IntGauge::new(name, help).expect("a valid gauge name");
        metric.set(value);
        let _ = registry.register(Box::new(metric));
    };
    let counter = |name: &str, help: &str, value: u64| {
        let metric = IntCounter::new(name, help).expect("a valid counter name");
        metric.inc_by(value);
        let _ = registry.register(Box::new(metric));
    };
    gauge(
        "etcd_server_has_leader",
        "Whether or not a leader exists. 1 is existence, 0 is not.",
        i64::from(status.leader != 0),
    );
    gauge(
        "etcd_server_is_leader",
        "Whether or not this member is a leader. 1 if is, 0 otherwise.",
        i64::from(store.is_leader()),
    );
    counter(
        "etcd_server_leader_changes_seen_total",
        "The number of leader changes seen.",
        store.leader_changes(),
    );
    counter(
        "etcd_server_proposals_committed_total",
        "The total number of consensus proposals committed.",
        status.raft_index,
    );
    counter(
        "etcd_server_proposals_applied_total",
        "The total number of consensus proposals applied.",
        status.raft_applied_index,
    );
    gauge(
        "etcd_server_proposals_pending",
        "The current number of pending proposals to commit.",
        stats.proposals_pending.load(Ordering::Relaxed),
    );
    counter(
        "etcd_server_proposals_failed_total",
        "The total number of failed proposals seen.",
        stats.proposals_failed.load(Ordering::Relaxed),
    );
    gauge(
        "etcd_mvcc_db_total_size_in_bytes",
        "Total size of the underlying database physically allocated in bytes.",
        i64::try_from(status.db_size).unwrap_or(i64::MAX),
    );
    gauge(
        "etcd_mvcc_db_total_size_in_use_in_bytes",
        "Total size of the underlying database logically in use in bytes.",
        i64::try_from(status.db_size_in_use.min(status.db_size)).unwrap_or(i64::MAX),
    );
    gauge(
        "etcd_server_quota_backend_bytes",
        "Current backend storage quota size in bytes.",
        i64::try_from(store.quota_backend_bytes()).unwrap_or(i64::MAX),
    );
    gauge(
        "etcd_debugging_mvcc_keys_total",
        "Total number of keys.",
        store.kv().live_keys() as i64,
    );
    let _ = registry.register(Box::new(skiff_machinery::metrics::ProcessCollector::new()));
    let version = IntGauge::with_opts(
        Opts::new(
            "etcd_server_version",
            "Which version is running. 1 for 'server_version' label with current version.",
        )
        .const_label("server_version", crate::grpc::ETCD_VERSION),
    )
    .expect("a valid gauge");
    version.set(1);
    let _ = registry.register(Box::new(version));
    let _ = registry.register(Box::new(WAL_FSYNC.clone()));
    let _ = registry.register(Box::new(BACKEND_COMMIT.clone()));

    let mut text = Vec::new();
    // Encoding into memory fails only for invalid metrics, which these are not.
    let _ = prometheus::TextEncoder::new().encode(&registry.gather(), &mut text);
    String::from_utf8(text).unwrap_or_default()
}

/// This process's resident set, from /proc (Linux).
#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_lone_member_reports_itself_leader_with_its_keys() {
        let (store, _dir) = crate::node::testing::open_temp().await;
        crate::node::testing::put(&store, "a", "1").await;
        crate::node::testing::put(&store, "b", "1").await;
        store
            .delete_range(crate::DeleteRangeRequest {
                key: b"b".to_vec(),
                ..Default::default()
            })
            .await
            .unwrap();
        let text = render(&store);
        for line in [
            "etcd_server_has_leader 1",
            "etcd_server_is_leader 1",
            "etcd_server_leader_changes_seen_total 1",
            "etcd_server_proposals_pending 0",
            "etcd_server_proposals_failed_total 0",
            "etcd_debugging_mvcc_keys_total 1",
            "etcd_server_version{server_version=\"3.5.0\"} 1",
        ] {
            assert!(text.lines().any(|l| l == line), "no {line:?} in\n{text}");
        }
        let value = |name: &str| -> f64 {
            text.lines()
                .find_map(|l| l.strip_prefix(&format!("{name} ")))
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("no {name} in\n{text}"))
        };
        assert!(value("etcd_server_proposals_applied_total") >= 3.0);
        assert!(value("etcd_server_proposals_committed_total") >= 3.0);
        assert!(value("etcd_disk_wal_fsync_duration_seconds_count") >= 3.0);
        assert!(value("process_resident_memory_bytes") > 1e6);
        assert!(value("etcd_mvcc_db_total_size_in_bytes") > 0.0);
        let in_use = value("etcd_mvcc_db_total_size_in_use_in_bytes");
        assert!(in_use > 0.0 && in_use <= value("etcd_mvcc_db_total_size_in_bytes"));
        assert_eq!(
            value("etcd_server_quota_backend_bytes"),
            2.0 * 1024.0 * 1024.0 * 1024.0
        );
        assert!(text.contains("# TYPE etcd_disk_wal_fsync_duration_seconds histogram"));
        store.close().await.unwrap();
    }
}
