//! `/metrics`: the store requests the apiserver made and the watch caches'
//! gauges, in Prometheus' text format, for an operator to scrape.

use std::fmt::Write;

use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::{get, MethodRouter};

use super::resource::Stats;
use crate::registry::Registry;
use crate::storage::requests;

/// The route of `/metrics`, whatever the router's state.
pub fn route<S: Clone + Send + Sync + 'static>(registry: &Registry) -> MethodRouter<S> {
    let registry = registry.clone();
    get(move || {
        let text = render(&registry);
        async move { ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response() }
    })
}

/// The metrics as Prometheus text.
pub fn render(registry: &Registry) -> String {
    let mut out = String::new();
    out.push_str(
        "# HELP skiff_storage_requests_total Requests the apiserver sent to the store, by operation.\n\
         # TYPE skiff_storage_requests_total counter\n",
    );
    for operation in requests::OPERATIONS {
        let _ = writeln!(
            out,
            "skiff_storage_requests_total{{operation=\"{operation}\"}} {}",
            registry.storage().requests().total(operation)
        );
    }
    out.push_str(
        "# HELP skiff_storage_watches_total Watches the apiserver opened on the store, by the start of their key range.\n\
         # TYPE skiff_storage_watches_total counter\n",
    );
    for (prefix, count) in registry.storage().requests().watches() {
        let prefix = prefix.replace('\\', "\\\\").replace('"', "\\\"");
        let _ = writeln!(
            out,
            "skiff_storage_watches_total{{prefix=\"{prefix}\"}} {count}"
        );
    }
    let caches = registry.cache.caches();
    let stats: Vec<_> = caches
        .iter()
        .map(|c| (resource_label(c.resource), c.stats()))
        .collect();
    for (name, kind, help, value) in CACHE_METRICS {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for (resource, stats) in &stats {
            let _ = writeln!(out, "{name}{{resource=\"{resource}\"}} {}", value(stats));
        }
    }
    out
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
