//! The kubelet's port (10250 by default; HTTPS, with client certificates
//! of the cluster CA or bearer tokens, each request authorized as
//! [`access`] says): the containers' logs at
//! `/containerLogs/{namespace}/{pod}/{container}` for the apiserver's
//! `pods/log`, [`crate::streaming`]'s exec, attach and port-forward, and
//! `/healthz`; what the node uses at `/stats/summary` and
//! `/metrics/resource`, and the kubelet's own `/metrics`. Errors are plain
//! text, as the kubelet's are; the apiserver turns them into a Status.

pub mod access;

use std::collections::HashMap;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

use crate::logs::{read_log, LogOptions};
use crate::metrics::KubeletMetrics;
use crate::pod::PodManager;
use crate::runtime::{ContainerHandle, ContainerId, ProcessRuntime};
use crate::stats::StatsProvider;
use crate::streaming::{self, ContainerFinder, Refusal};

#[derive(Clone)]
struct Kubelet {
    pods: Arc<PodManager>,
    runtime: Arc<ProcessRuntime>,
}

pub fn router(
    pods: Arc<PodManager>,
    runtime: Arc<ProcessRuntime>,
    streaming_idle_timeout: std::time::Duration,
    observability: Observability,
    access: access::Access,
) -> Router {
    let finder: Arc<dyn ContainerFinder> = Arc::new(NodePods(pods.clone()));
    Router::new()
        .merge(streaming::router_with_idle_timeout(
            finder,
            runtime.clone(),
            streaming_idle_timeout,
        ))
        .route(
            "/containerLogs/{namespace}/{pod}/{container}",
            get(container_logs),
        )
        .with_state(Kubelet { pods, runtime })
        .merge(observability_router(observability))
        .layer(axum::middleware::from_fn_with_state(
            access,
            access::authorize,
        ))
}

/// What the stats and metrics paths serve from.
#[derive(Clone)]
pub struct Observability {
    pub stats: Arc<StatsProvider>,
    pub metrics: Arc<KubeletMetrics>,
    /// The node's pods, to count the running ones at each scrape.
    pub pods: Option<Arc<PodManager>>,
}

/// `/healthz`, `/stats/summary`, `/metrics/resource` and `/metrics`.
pub fn observability_router(observability: Observability) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/stats/summary", get(stats_summary))
        .route("/metrics/resource", get(resource_metrics))
        .route("/metrics", get(kubelet_metrics))
        .with_state(observability)
}

async fn stats_summary(State(o): State<Observability>) -> Response {
    axum::Json(o.stats.summary()).into_response()
}

async fn resource_metrics(State(o): State<Observability>) -> Response {
    let summary = o.stats.summary();
    let families = crate::stats::resource_metrics::families(Some(&summary));
    prometheus_text(crate::stats::resource_metrics::encode(&families))
}

async fn kubelet_metrics(State(o): State<Observability>) -> Response {
    if let Some(pods) = &o.pods {
        crate::stats::count_running(pods, &o.metrics);
    }
    prometheus_text(o.metrics.encode())
}

fn prometheus_text(text: Result<String, prometheus::Error>) -> Response {
    match text {
        Ok(text) => (
            StatusCode::OK,
            [(
                header::CONTENT_TYPE,
                crate::stats::resource_metrics::CONTENT_TYPE,
            )],
            text,
        )
            .into_response(),
        Err(err) => refuse(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("encoding the metrics: {err}"),
        ),
    }
}

/// The pods this node runs, as the streaming endpoints look them up.
struct NodePods(Arc<PodManager>);

impl ContainerFinder for NodePods {
    fn running_container(
        &self,
        namespace: &str,
        pod: &str,
        container: &str,
    ) -> Result<ContainerHandle, Refusal> {
        let Some(context) = self.0.pod(namespace, pod) else {
            return Err(Refusal::new(
                StatusCode::NOT_FOUND,
                format!("pod {namespace}/{pod} is not running on this node"),
            ));
        };
        let shared = &context.shared;
        let (init, containers, _) = shared.snapshot();
        if !init.iter().chain(&containers).any(|c| c.name == container) {
            return Err(Refusal::new(
                StatusCode::BAD_REQUEST,
                format!("container {container} is not valid for pod {pod}"),
            ));
        }
        shared
            .handle(container)
            .filter(|handle| handle.exited().is_none())
            .ok_or_else(|| {
                Refusal::new(
                    StatusCode::BAD_REQUEST,
                    format!("container {container} is not running in pod {pod}"),
                )
            })
    }

    fn running_pod(
        &self,
        namespace: &str,
        pod: &str,
    ) -> Result<Option<std::path::PathBuf>, Refusal> {
        let Some(context) = self.0.pod(namespace, pod) else {
            return Err(Refusal::new(
                StatusCode::NOT_FOUND,
                format!("pod {namespace}/{pod} is not running on this node"),
            ));
        };
        if context.shared.handles().is_empty() {
            return Err(Refusal::new(
                StatusCode::BAD_REQUEST,
                format!("pod {namespace}/{pod} has no running container"),
            ));
        }
        Ok(context.shared.network().and_then(|place| place.netns))
    }
}

/// Serves the router on `listener` until `shutdown` resolves: over TLS
/// with `tls`, else plain HTTP (tests of the agent alone).
pub async fn serve(
    listener: tokio::net::TcpListener,
    router: Router,
    tls: Option<Arc<rustls::ServerConfig>>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let Some(tls) = tls else {
        return axum::serve(listener, router)
            .with_graceful_shutdown(shutdown)
            .await;
    };
    skiff_machinery::serving::serve_tls(listener, router, tls, shutdown).await;
    Ok(())
}

fn refuse(code: StatusCode, message: String) -> Response {
    (code, [(header::CONTENT_TYPE, "text/plain")], message).into_response()
}

async fn container_logs(
    State(kubelet): State<Kubelet>,
    Path((namespace, pod, container)): Path<(String, String, String)>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let options = match log_options(&query) {
        Ok(options) => options,
        Err(message) => return refuse(StatusCode::BAD_REQUEST, message),
    };
    let Some(context) = kubelet.pods.pod(&namespace, &pod) else {
        return refuse(
            StatusCode::NOT_FOUND,
            format!("pod {namespace}/{pod} is not running on this node"),
        );
    };
    let shared = &context.shared;
    let (init, containers, _) = shared.snapshot();
    let Some(status) = init.iter().chain(&containers).find(|c| c.name == container) else {
        return refuse(
            StatusCode::BAD_REQUEST,
            format!("container {container} is not valid for pod {pod}"),
        );
    };
    let logs = kubelet.runtime.container_logs(&ContainerId {
        pod_uid: shared.uid.clone(),
        pod_namespace: namespace.clone(),
        pod_name: pod.clone(),
        container: container.clone(),
        attempt: 0,
    });
    let attempt = match logs.attempt_to_read(options.previous) {
        Ok(Some(attempt)) => attempt,
        Ok(None) if options.previous => {
            return refuse(
                StatusCode::BAD_REQUEST,
                format!("previous terminated container \"{container}\" in pod \"{pod}\" not found"),
            )
        }
        Ok(None) => {
            let reason = status
                .state
                .as_ref()
                .and_then(|s| s.waiting.as_ref())
                .and_then(|w| w.reason.clone())
                .unwrap_or_else(|| "ContainerCreating".into());
            return refuse(
                StatusCode::BAD_REQUEST,
                format!("container \"{container}\" in pod \"{pod}\" is waiting to start: {reason}"),
            );
        }
        Err(err) => {
            return refuse(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("reading the logs of {container}: {err}"),
            )
        }
    };
    // Following the current run ends when it exits; anything else is
    // read to its end.
    let running = shared
        .handle(&container)
        .filter(|h| h.id().attempt == attempt && !options.previous);
    let exited = async move {
        if let Some(handle) = running {
            handle.wait().await;
        }
    };
    match read_log(&logs.path(attempt), options, exited).await {
        Ok(stream) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "text/plain")],
            Body::from_stream(stream),
        )
            .into_response(),
        Err(err) => refuse(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("reading the logs of {container}: {err}"),
        ),
    }
}

/// The query of a log request as the apiserver forwards it.
fn log_options(query: &HashMap<String, String>) -> Result<LogOptions, String> {
    let flag = |name: &str| {
        query
            .get(name)
            .is_some_and(|v| matches!(v.as_str(), "true" | "1" | "True"))
    };
    let number = |name: &str| -> Result<Option<i64>, String> {
        query
            .get(name)
            .map(|v| {
                v.parse::<i64>()
                    .map_err(|_| format!("{name}={v:?} is not an integer"))
            })
            .transpose()
    };
    let since = match (number("sinceSeconds")?, query.get("sinceTime")) {
        (Some(seconds), _) => Some(
            jiff::Timestamp::now()
                .checked_sub(jiff::SignedDuration::from_secs(seconds.max(0)))
                .map_err(|err| format!("sinceSeconds={seconds}: {err}"))?,
        ),
        (None, Some(time)) => Some(
            time.parse::<jiff::Timestamp>()
                .map_err(|_| format!("sinceTime={time:?} is not an RFC 3339 time"))?,
        ),
        (None, None) => None,
    };
    Ok(LogOptions {
        follow: flag("follow"),
        tail_lines: number("tailLines")?,
        since,
        timestamps: flag("timestamps"),
        previous: flag("previous"),
        limit_bytes: number("limitBytes")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn log_queries_become_options() {
        let options = log_options(&query(&[
            ("follow", "true"),
            ("tailLines", "5"),
            ("timestamps", "1"),
            ("limitBytes", "100"),
        ]))
        .unwrap();
        assert!(options.follow && options.timestamps && !options.previous);
        assert_eq!(options.tail_lines, Some(5));
        assert_eq!(options.limit_bytes, Some(100));
        let since = log_options(&query(&[("sinceTime", "2026-01-02T03:04:05Z")])).unwrap();
        assert_eq!(since.since.unwrap().to_string(), "2026-01-02T03:04:05Z");
        let recent = log_options(&query(&[("sinceSeconds", "60")])).unwrap();
        let age = jiff::Timestamp::now().duration_since(recent.since.unwrap());
        assert!(age.as_secs() >= 59 && age.as_secs() <= 120, "{age:?}");
    }

    async fn get(app: &Router, uri: &str, certificate: Option<bool>) -> (StatusCode, String) {
        use tower::ServiceExt;
        let mut request = axum::http::Request::get(uri).body(Body::empty()).unwrap();
        if let Some(presented) = certificate {
            let admin = skiff_machinery::serving::delegated::User {
                name: "admin".into(),
                groups: vec!["system:masters".into()],
                uid: None,
            };
            request
                .extensions_mut()
                .insert(skiff_machinery::serving::PeerUser(
                    presented.then_some(admin),
                ));
        }
        let answer = app.clone().oneshot(request).await.unwrap();
        let status = answer.status();
        let body = axum::body::to_bytes(answer.into_body(), 1 << 20)
            .await
            .unwrap();
        (status, String::from_utf8(body.to_vec()).unwrap())
    }

    #[tokio::test]
    async fn the_stats_and_metrics_paths_answer_and_want_a_certificate() {
        let stats = Arc::new(StatsProvider::new("node-1"));
        stats.housekeep(Vec::new(), jiff::Timestamp::now());
        let observability = Observability {
            stats,
            metrics: Arc::new(KubeletMetrics::new("node-1").unwrap()),
            pods: None,
        };
        let app = observability_router(observability).layer(axum::middleware::from_fn_with_state(
            access::Access {
                node: "node-1".into(),
                delegated: None,
            },
            access::authorize,
        ));
        let (status, body) = get(&app, "/stats/summary", Some(true)).await;
        assert_eq!(status, StatusCode::OK);
        let summary: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(summary["node"]["nodeName"], "node-1");
        assert!(
            summary["node"]["memory"]["workingSetBytes"]
                .as_u64()
                .unwrap()
                > 0
        );
        assert_eq!(summary["pods"], serde_json::json!([]));
        let (status, body) = get(&app, "/metrics/resource", None).await;
        assert_eq!(status, StatusCode::OK);
        assert!(body.contains("node_memory_working_set_bytes "), "{body}");
        assert!(body.lines().any(|l| l == "scrape_error 0"), "{body}");
        let (status, body) = get(&app, "/metrics", Some(true)).await;
        assert_eq!(status, StatusCode::OK);
        assert!(
            body.contains("kubelet_node_name{node=\"node-1\"} 1"),
            "{body}"
        );
        // Over TLS without a client certificate: only /healthz.
        for path in ["/stats/summary", "/metrics/resource", "/metrics"] {
            let (status, _) = get(&app, path, Some(false)).await;
            assert_eq!(status, StatusCode::UNAUTHORIZED, "{path}");
        }
        assert_eq!(
            get(&app, "/healthz", Some(false)).await,
            (StatusCode::OK, "ok".into())
        );
    }

    #[test]
    fn bad_log_queries_are_refused() {
        assert!(log_options(&query(&[("tailLines", "x")])).is_err());
        assert!(log_options(&query(&[("sinceTime", "noon")])).is_err());
    }
}
