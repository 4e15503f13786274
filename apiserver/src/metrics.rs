//! The API server's Prometheus metrics, under kube-apiserver's names so
//! that the dashboards and alerts operators already have read skiff:
//! requests by verb, resource, scope and code with their latency, the
//! requests in flight, open long-running requests, objects stored, watch
//! events sent; beside skiff's own watch cache and store-request counters
//! and the process's. Kept with the `prometheus` crate and written in its
//! text exposition format at `/metrics`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::LazyLock;
use std::time::Instant;

use axum::extract::Request;
use axum::http::{header, Method};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use prometheus::{
    Encoder, HistogramOpts, HistogramVec, IntCounterVec, IntGaugeVec, Opts, Registry as Metrics,
};

use crate::limits::RequestKind;
use crate::request_info::RequestInfo;

/// The labels that name what a request was about.
const REQUEST_LABELS: [&str; 7] = [
    "verb",
    "group",
    "version",
    "resource",
    "subresource",
    "scope",
    "component",
];

/// kube-apiserver's buckets for request latencies, 5 ms to 60 s.
const LATENCY_BUCKETS: [f64; 21] = [
    0.005, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.25, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0,
    10.0, 15.0, 20.0, 60.0,
];

struct RequestMetrics {
    total: IntCounterVec,
    duration: HistogramVec,
    inflight: IntGaugeVec,
    longrunning: IntGaugeVec,
    watch_events: IntCounterVec,
}

static REQUESTS: LazyLock<RequestMetrics> = LazyLock::new(|| {
    let mut total_labels = REQUEST_LABELS.to_vec();
    total_labels.push("code");
    RequestMetrics {
        total: IntCounterVec::new(
            Opts::new(
                "apiserver_request_total",
                "Counter of apiserver requests broken out for each verb, dry run value, group, version, resource, scope, component, and HTTP response code.",
            ),
            &total_labels,
        )
        .expect("a valid counter"),
        duration: HistogramVec::new(
            HistogramOpts::new(
                "apiserver_request_duration_seconds",
                "Response latency distribution in seconds for each verb, dry run value, group, version, resource, subresource, scope and component.",
            )
            .buckets(LATENCY_BUCKETS.to_vec()),
            &REQUEST_LABELS,
        )
        .expect("a valid histogram"),
        inflight: IntGaugeVec::new(
            Opts::new(
                "apiserver_current_inflight_requests",
                "Maximal number of currently used inflight request limit of this apiserver per request kind in last second.",
            ),
            &["request_kind"],
        )
        .expect("a valid gauge"),
        longrunning: IntGaugeVec::new(
            Opts::new(
                "apiserver_longrunning_requests",
                "Gauge of all active long-running apiserver requests broken out by verb, group, version, resource, scope and component. Not all requests are tracked this way.",
            ),
            &REQUEST_LABELS,
        )
        .expect("a valid gauge"),
        watch_events: IntCounterVec::new(
            Opts::new(
                "apiserver_watch_events_total",
                "Number of events sent in watch clients",
            ),
            &["group", "version", "kind"],
        )
        .expect("a valid counter"),
    }
});

/// Whether requests are recorded: on unless the process turned it off
/// (to measure what recording costs).
static RECORDING: AtomicBool = AtomicBool::new(true);

/// Turns the recording of request and watch-event metrics on or off for
/// this process.
pub fn set_recording(on: bool) {
    RECORDING.store(on, Ordering::Relaxed);
}

/// Counts `events` watch events of `kind` sent to a client.
pub fn watch_events_sent(group: &str, version: &str, kind: &str, events: u64) {
    if !RECORDING.load(Ordering::Relaxed) {
        return;
    }
    REQUESTS
        .watch_events
        .with_label_values(&[group, version, kind])
        .inc_by(events);
}

/// What a request was about, as the metrics label it.
struct Labels([String; 7]);

impl Labels {
    fn of(request: &Request) -> Labels {
        let info = RequestInfo::of_request(request);
        let method = request.method();
        let apply = *method == Method::PATCH
            && request
                .headers()
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|t| t.starts_with("application/apply-patch"));
        let verb = match info.verb.as_str() {
            "list" => "LIST".to_string(),
            "watch" => "WATCH".to_string(),
            _ if apply => "APPLY".to_string(),
            _ => match info
                .resource
                .as_ref()
                .and_then(|r| r.subresource.as_deref())
            {
                Some("exec" | "attach" | "portforward" | "proxy") => "CONNECT".to_string(),
                _ => method.as_str().to_string(),
            },
        };
        let (group, version, resource, subresource, scope) = match &info.resource {
            Some(r) => {
                let scope = match (&r.name, &r.namespace) {
                    (Some(_), _) => "resource",
                    (None, Some(_)) => "namespace",
                    (None, None) => "cluster",
                };
                (
                    r.group.clone(),
                    r.version.clone(),
                    r.resource.clone(),
                    r.subresource.clone().unwrap_or_default(),
                    scope.to_string(),
                )
            }
            None => Default::default(),
        };
        Labels([
            verb,
            group,
            version,
            resource,
            subresource,
            scope,
            "apiserver".to_string(),
        ])
    }

    fn values(&self) -> [&str; 7] {
        self.0.each_ref().map(String::as_str)
    }
}

/// Counts one open long-running request until its response body ends.
struct LongRunning(Labels);

impl Drop for LongRunning {
    fn drop(&mut self) {
        REQUESTS
            .longrunning
            .with_label_values(&self.0.values())
            .dec();
    }
}

/// Counts one request in flight until it is answered.
struct InFlight(&'static str);

impl Drop for InFlight {
    fn drop(&mut self) {
        REQUESTS.inflight.with_label_values(&[self.0]).dec();
    }
}

/// The middleware: every request counted, timed and labelled.
pub async fn measure(request: Request, next: Next) -> Response {
    let kind = RequestKind::of_request(&request);
    if kind == RequestKind::Exempt || !RECORDING.load(Ordering::Relaxed) {
        return next.run(request).await;
    }
    let labels = Labels::of(&request);
    let started = Instant::now();
    let long_running = matches!(kind, RequestKind::Watch | RequestKind::LongRunning);
    let inflight = (!long_running).then(|| {
        let kind = match kind {
            RequestKind::Mutating => "mutating",
            _ => "readOnly",
        };
        REQUESTS.inflight.with_label_values(&[kind]).inc();
        InFlight(kind)
    });
    let response = next.run(request).await;
    drop(inflight);
    let code = response.status().as_u16().to_string();
    let mut with_code = labels.values().to_vec();
    with_code.push(&code);
    REQUESTS.total.with_label_values(&with_code).inc();
    if !long_running {
        REQUESTS
            .duration
            .with_label_values(&labels.values())
            .observe(started.elapsed().as_secs_f64());
        return response;
    }
    if !response.status().is_success() && response.status().as_u16() != 101 {
        return response;
    }
    REQUESTS
        .longrunning
        .with_label_values(&labels.values())
        .inc();
    let guard = LongRunning(labels);
    response.map(|body| crate::holding::Holding::body(body, guard))
}

/// Every metric, in the text exposition format: the requests', what
/// `extra` registers (the watch caches', the store requests'), and the
/// process's.
pub fn render(extra: impl FnOnce(&Metrics)) -> String {
    let registry = Metrics::new();
    let requests = &*REQUESTS;
    for collector in [
        Box::new(requests.total.clone()) as Box<dyn prometheus::core::Collector>,
        Box::new(requests.duration.clone()),
        Box::new(requests.inflight.clone()),
        Box::new(requests.longrunning.clone()),
        Box::new(requests.watch_events.clone()),
    ] {
        let _ = registry.register(collector);
    }
    extra(&registry);
    let _ = registry.register(Box::new(skiff_machinery::metrics::ProcessCollector::new()));
    let mut text = Vec::new();
    if let Err(err) = prometheus::TextEncoder::new().encode(&registry.gather(), &mut text) {
        tracing::warn!(error = %err, "writing the metrics");
    }
    String::from_utf8(text).unwrap_or_default()
}

/// The body of `/metrics`.
pub fn response(text: String) -> Response {
    ([(header::CONTENT_TYPE, prometheus::TEXT_FORMAT)], text).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use tower::ServiceExt;

    fn sample(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        text.lines()
            .filter(|l| l.starts_with(&format!("{name}{{")))
            .find(|l| {
                labels
                    .iter()
                    .all(|(k, v)| l.contains(&format!("{k}=\"{v}\"")))
            })
            .and_then(|l| l.rsplit_once(' '))
            .and_then(|(_, v)| v.parse().ok())
    }

    #[tokio::test]
    async fn requests_are_counted_by_verb_resource_scope_and_code() {
        let (registry, _dir) = crate::registry::test_registry().await;
        registry.ensure_default_namespaces().await.unwrap();
        let app = crate::server::router(registry.clone()).layer(axum::middleware::from_fn(measure));
        let call = |method: &str, path: &str, body: Option<&str>| {
            let request = axum::extract::Request::builder()
                .method(method)
                .uri(path)
                .header("content-type", "application/json")
                .body(body.map_or(Body::empty(), |b| Body::from(b.to_string())))
                .unwrap();
            let app = app.clone();
            async move { app.oneshot(request).await.unwrap() }
        };
        let cm = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a"}}"#;
        assert_eq!(
            call("POST", "/api/v1/namespaces/default/configmaps", Some(cm))
                .await
                .status(),
            201
        );
        assert_eq!(
            call("POST", "/api/v1/namespaces/default/configmaps", Some(cm))
                .await
                .status(),
            409
        );
        assert_eq!(
            call("GET", "/api/v1/namespaces/default/configmaps", None)
                .await
                .status(),
            200
        );
        assert_eq!(
            call("GET", "/api/v1/namespaces/default/configmaps/a", None)
                .await
                .status(),
            200
        );
        assert_eq!(call("GET", "/api/v1/nodes", None).await.status(), 200);
        let watch = call(
            "GET",
            "/api/v1/namespaces/default/configmaps?watch=true&resourceVersion=0",
            None,
        )
        .await;
        assert_eq!(watch.status(), 200);
        let text = crate::cache::metrics::render(&registry);
        let created = [
            ("verb", "POST"),
            ("resource", "configmaps"),
            ("scope", "namespace"),
            ("component", "apiserver"),
        ];
        assert_eq!(
            sample(
                &text,
                "apiserver_request_total",
                &[created.as_slice(), &[("code", "201")]].concat()
            ),
            Some(1.0),
            "{text}"
        );
        assert_eq!(
            sample(
                &text,
                "apiserver_request_total",
                &[created.as_slice(), &[("code", "409")]].concat()
            ),
            Some(1.0)
        );
        assert_eq!(
            sample(
                &text,
                "apiserver_request_total",
                &[
                    ("verb", "LIST"),
                    ("resource", "configmaps"),
                    ("code", "200")
                ]
            ),
            Some(1.0)
        );
        assert_eq!(
            sample(
                &text,
                "apiserver_request_total",
                &[("verb", "GET"), ("scope", "resource"), ("code", "200")]
            ),
            Some(1.0)
        );
        assert_eq!(
            sample(
                &text,
                "apiserver_request_total",
                &[
                    ("verb", "LIST"),
                    ("resource", "nodes"),
                    ("scope", "cluster")
                ]
            ),
            Some(1.0)
        );
        assert_eq!(
            sample(
                &text,
                "apiserver_request_duration_seconds_count",
                &[("verb", "POST"), ("resource", "configmaps")]
            ),
            Some(2.0)
        );
        // The watch is open, so counted as long-running, not timed.
        assert_eq!(
            sample(
                &text,
                "apiserver_longrunning_requests",
                &[("verb", "WATCH"), ("resource", "configmaps")]
            ),
            Some(1.0)
        );
        assert_eq!(
            sample(
                &text,
                "apiserver_request_duration_seconds_count",
                &[("verb", "WATCH")]
            ),
            None
        );
        assert_eq!(
            sample(
                &text,
                "apiserver_current_inflight_requests",
                &[("request_kind", "mutating")]
            ),
            Some(0.0)
        );
        drop(watch);
        let text = crate::cache::metrics::render(&registry);
        assert_eq!(
            sample(
                &text,
                "apiserver_longrunning_requests",
                &[("verb", "WATCH")]
            ),
            Some(0.0)
        );
        assert!(sample(&text, "process_resident_memory_bytes", &[]).is_none_or(|v| v > 0.0));
        assert!(text.contains("\nprocess_resident_memory_bytes "), "{text}");
    }
}
