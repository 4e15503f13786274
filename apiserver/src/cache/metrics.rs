//! `/metrics`: the API server's request metrics ([`crate::metrics`]), the
//! store requests the apiserver made, the objects stored and the watch
//! caches' gauges, in Prometheus' text format, for an operator to scrape.

use axum::routing::{get, MethodRouter};
use prometheus::{IntCounterVec, IntGaugeVec, Opts, Registry as Metrics};

use super::resource::Stats;
use crate::registry::Registry;
use crate::storage::requests;

/// The route of `/metrics`, whatever the router's state.
pub fn route<S: Clone + Send + Sync + 'static>(registry: &Registry) -> MethodRouter<S> {
    let registry = registry.clone();
    get(move || {
        let text = render(&registry);
        async move { crate::metrics::response(text) }
    })
}

/// Every metric as Prometheus text.
pub fn render(registry: &Registry) -> String {
    crate::metrics::render(|metrics| register(registry, metrics))
}

/// A vector of counters or gauges holding `values` as read now.
fn counters(name: &str, help: &str, label: &str, values: &[(String, u64)]) -> IntCounterVec {
    let vec = IntCounterVec::new(Opts::new(name, help), &[label]).expect("a valid counter");
    for (value_label, value) in values {
        vec.with_label_values(&[value_label.as_str()])
            .inc_by(*value);
    }
    vec
}

fn gauges(name: &str, help: &str, label: &str, values: &[(String, u64)]) -> IntGaugeVec {
    let vec = IntGaugeVec::new(Opts::new(name, help), &[label]).expect("a valid gauge");
    for (value_label, value) in values {
        vec.with_label_values(&[value_label.as_str()])
            .set(i64::try_from(*value).unwrap_or(i64::MAX));
    }
    vec
}

fn register(registry: &Registry, metrics: &Metrics) {
    let requests = registry.storage().requests();
    let operations: Vec<(String, u64)> = requests::OPERATIONS
        .iter()
        .map(|op| (op.to_string(), requests.total(op)))
        .collect();
    let _ = metrics.register(Box::new(counters(
        "skiff_storage_requests_total",
        "Requests the apiserver sent to the store, by operation.",
        "operation",
        &operations,
    )));
    let _ = metrics.register(Box::new(counters(
        "skiff_storage_watches_total",
        "Watches the apiserver opened on the store, by the start of their key range.",
        "prefix",
        &requests.watches(),
    )));
    let caches = registry.cache.caches();
    let stats: Vec<_> = caches
        .iter()
        .map(|c| (resource_label(c.resource), c.stats()))
        .collect();
    let objects: Vec<(String, u64)> = stats
        .iter()
        .map(|(resource, s)| (resource.clone(), s.objects as u64))
        .collect();
    let _ = metrics.register(Box::new(gauges(
        "apiserver_storage_objects",
        "Number of stored objects at the time of last check split by kind.",
        "resource",
        &objects,
    )));
    for (name, kind, help, value) in CACHE_METRICS {
        let values: Vec<(String, u64)> = stats
            .iter()
            .map(|(resource, s)| (resource.clone(), value(s)))
            .collect();
        let _ = match kind {
            "counter" => metrics.register(Box::new(counters(name, help, "resource", &values))),
            _ => metrics.register(Box::new(gauges(name, help, "resource", &values))),
        };
    }
}

/// A cache metric: name, type, help, and its value in a cache's stats.
type CacheMetric = (&'static str, &'static str, &'static str, fn(&Stats) -> u64);

const CACHE_METRICS: [CacheMetric; 10] = [
    ("skiff_watch_cache_watchers", "gauge", "Open watches served by the cache.", |s| s.watchers as u64),
    ("skiff_watch_cache_objects", "gauge", "Objects held.", |s| s.objects as u64),
    ("skiff_watch_cache_object_bytes", "gauge", "Bytes of the objects held, roughly.", |s| s.object_bytes as u64),
    ("skiff_watch_cache_events", "gauge", "Events in the ring.", |s| s.ring_events as u64),
    ("skiff_watch_cache_event_bytes", "gauge", "Bytes the ring's events keep alive, roughly.", |s| s.ring_bytes as u64),
    ("skiff_watch_cache_resource_version", "gauge", "The revision the cache has reached.", |s| s.revision.max(0) as u64),
    ("skiff_watch_cache_dropped_watchers_total", "counter", "Watchers dropped because they did not keep up.", |s| s.dropped_watchers),
    ("skiff_watch_cache_too_old_watches_total", "counter", "Watches answered 410 Gone: their resourceVersion had left the ring.", |s| s.too_old_watches),
    ("skiff_watch_cache_store_fallbacks_total", "counter", "Reads the cache could not serve in time (not ready, or behind the revision asked), served by the store.", |s| s.store_fallbacks),
    ("skiff_watch_cache_relists_total", "counter", "Relists after the cache's revision was compacted.", |s| s.relists),
];

/// `pods`, `deployments.apps`: the resource as Kubernetes labels it.
fn resource_label(resource: &crate::resources::ResourceType) -> String {
    if resource.group.is_empty() {
        resource.plural.to_string()
    } else {
        format!("{}.{}", resource.plural, resource.group)
    }
}
