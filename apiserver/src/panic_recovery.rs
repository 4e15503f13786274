//! The last line of defence, as kube-apiserver's `WithPanicRecovery`: a
//! panic in a request's handler (or in a layer inside this one) answers
//! 500 with a `Status` and an error log line naming the request, and the
//! connection goes on serving. Not a way of handling errors: every panic
//! caught here is a bug to fix where it happens.

use std::panic::AssertUnwindSafe;

use axum::extract::Request;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures::FutureExt;

use crate::status::ApiError;

/// What the client is told, in kube-apiserver's words; the panic itself
/// is for the log only.
pub const PANIC_MESSAGE: &str =
    "This request caused apiserver to panic. Look in the logs for details.";

/// Runs the rest of the request's layers and its handler; a panic in them
/// becomes a 500 `InternalError` Status. The log line names the method
/// and path (never the body, which may hold a Secret) and the panic's
/// message.
pub async fn recover(request: Request, next: Next) -> Response {
    // Cheap clones (a reference count): the request itself moves on.
    let method = request.method().clone();
    let uri = request.uri().clone();
    // Unwind safety: what the handler shared with other requests (the
    // registry, caches) is left as the panic left it, as with a panicking
    // task; the panic is logged so that it gets fixed.
    match AssertUnwindSafe(next.run(request)).catch_unwind().await {
        Ok(response) => response,
        Err(panic) => {
            tracing::error!(
                method = %method,
                path = uri.path(),
                panic = panic_message(panic.as_ref()),
                "an API request's handler panicked; answered 500"
            );
            ApiError::internal(PANIC_MESSAGE).into_response()
        }
    }
}

/// The text a panic was raised with (`panic!("…")`, `expect`, an index
/// out of bounds), when it is text.
fn panic_message(panic: &(dyn std::any::Any + Send)) -> &str {
    if let Some(text) = panic.downcast_ref::<&'static str>() {
        text
    } else if let Some(text) = panic.downcast_ref::<String>() {
        text
    } else {
        "a panic without a message"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::http::StatusCode;
    use axum::routing::get;
    use axum::Router;
    use tower::ServiceExt;

    fn router() -> Router {
        Router::new()
            .route("/panic", get(panics))
            .route("/ok", get(|| async { "fine" }))
            .layer(axum::middleware::from_fn(recover))
    }

    async fn panics() -> &'static str {
        panic!("a handler made to panic")
    }

    async fn get_from(router: &Router, path: &str) -> (StatusCode, bytes::Bytes) {
        let request = axum::http::Request::get(path).body(Body::empty()).unwrap();
        let response = router.clone().oneshot(request).await.unwrap();
        let status = response.status();
        let body = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        (status, body)
    }

    /// The 500 is a Kubernetes Status; the service serves the next request.
    #[tokio::test]
    async fn a_panicking_handler_answers_500_with_a_status() {
        let router = router();
        let (code, body) = get_from(&router, "/panic").await;
        assert_eq!(code, StatusCode::INTERNAL_SERVER_ERROR);
        let status: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            status,
            serde_json::json!({
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Failure",
                "reason": "InternalError",
                "code": 500,
                "message": PANIC_MESSAGE,
            })
        );
        let (code, body) = get_from(&router, "/ok").await;
        assert_eq!((code, &body[..]), (StatusCode::OK, &b"fine"[..]));
    }

    #[test]
    fn panic_messages_are_read_from_either_payload() {
        let text = std::panic::catch_unwind(|| panic!("plain")).unwrap_err();
        assert_eq!(panic_message(text.as_ref()), "plain");
        let formatted = std::panic::catch_unwind(|| panic!("{}", 7)).unwrap_err();
        assert_eq!(panic_message(formatted.as_ref()), "7");
        let other = std::panic::catch_unwind(|| std::panic::panic_any(7u8)).unwrap_err();
        assert_eq!(panic_message(other.as_ref()), "a panic without a message");
    }
}

/// Requests a fuzzer found to panic, and their kin: an object whose
/// `status`, `spec` or `metadata` is of the wrong JSON type, created,
/// replaced or patched, is refused as bad (400 or 422). The router here
/// has no recovery layer, so a panic fails the test.
#[cfg(test)]
mod wrong_types {
    use axum::body::Body;
    use axum::http::{Method, Request, StatusCode};
    use serde_json::{json, Value};
    use tower::ServiceExt;

    async fn send(
        router: &axum::Router,
        method: Method,
        path: &str,
        content_type: &str,
        body: &Value,
    ) -> (StatusCode, Value) {
        let request = Request::builder()
            .method(method)
            .uri(path)
            .header("content-type", content_type)
            .body(Body::from(body.to_string()))
            .unwrap();
        let response = router.clone().oneshot(request).await.unwrap();
        let code = response.status();
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        (code, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
    }

    /// (collection path, a valid object named `x`); each has a spec and
    /// a status, and a /status subresource.
    fn objects() -> Vec<(&'static str, Value)> {
        vec![
            (
                "/api/v1/namespaces/default/pods",
                json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"},
                       "spec": {"containers": [{"name": "c", "image": "i"}]}}),
            ),
            (
                "/api/v1/namespaces",
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "x"}}),
            ),
            (
                "/apis/apps/v1/namespaces/default/deployments",
                json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x"},
                       "spec": {"selector": {"matchLabels": {"a": "b"}},
                                "template": {"metadata": {"labels": {"a": "b"}},
                                             "spec": {"containers": [{"name": "c", "image": "i"}]}}}}),
            ),
            (
                "/api/v1/namespaces/default/services",
                json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "x"},
                       "spec": {"ports": [{"port": 80}]}}),
            ),
            (
                "/api/v1/nodes",
                json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "x"}}),
            ),
        ]
    }

    #[tokio::test]
    async fn objects_of_wrong_json_types_are_refused_not_panics() {
        let (registry, _dir) = crate::registry::test_registry().await;
        let router = crate::server::router(registry);
        let wrong = [json!("x"), json!([1]), json!(1), json!(true)];
        let merge = "application/merge-patch+json";
        for (collection, valid) in objects() {
            let (code, stored) = send(
                &router,
                Method::POST,
                collection,
                "application/json",
                &valid,
            )
            .await;
            assert_eq!(code, StatusCode::CREATED, "{collection}: {stored}");
            let named = format!("{collection}/x");
            for field in ["status", "spec", "metadata"] {
                for value in &wrong {
                    let mut created = valid.clone();
                    created["metadata"]["name"] = json!("new");
                    created[field] = value.clone();
                    // Without a resourceVersion: an unconditional update.
                    let mut replaced = stored.clone();
                    replaced["metadata"]["resourceVersion"].take();
                    replaced[field] = value.clone();
                    let patched = json!({ field: value });
                    // Decoding refuses a new object of a wrong type.
                    let what = format!("POST {collection} {field}={value}");
                    let (code, answer) = send(
                        &router,
                        Method::POST,
                        collection,
                        "application/json",
                        &created,
                    )
                    .await;
                    assert!(
                        code == StatusCode::BAD_REQUEST || code == StatusCode::UNPROCESSABLE_ENTITY,
                        "{what}: {code} {answer}"
                    );
                    assert_eq!(answer["kind"], "Status", "{what}: {answer}");
                    let status = format!("{named}/status");
                    let tries = [
                        (
                            Method::PUT,
                            named.clone(),
                            "application/json",
                            replaced.clone(),
                        ),
                        (Method::PATCH, named.clone(), merge, patched.clone()),
                        (Method::PUT, status.clone(), "application/json", replaced),
                        (Method::PATCH, status, merge, patched),
                    ];
                    for (method, path, content_type, body) in tries {
                        let what = format!("{method} {path} {field}={value}");
                        let (code, answer) =
                            send(&router, method, &path, content_type, &body).await;
                        assert!(code.as_u16() < 500, "{what}: {code} {answer}");
                        if !code.is_success() {
                            assert_eq!(answer["kind"], "Status", "{what}: {answer}");
                        }
                    }
                }
            }
        }
    }

    /// The fuzzer's case exactly: a Pod's status that is not an object is
    /// a 400 worded as Kubernetes words it, created or written to /status.
    #[tokio::test]
    async fn a_pod_status_that_is_not_an_object_is_a_bad_request() {
        let (registry, _dir) = crate::registry::test_registry().await;
        let router = crate::server::router(registry);
        let pods = "/api/v1/namespaces/default/pods";
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web"},
                         "spec": {"containers": [{"name": "c", "image": "i"}]}});
        for status in [json!("x"), json!([1])] {
            let mut bad = pod.clone();
            bad["status"] = status.clone();
            let (code, answer) = send(&router, Method::POST, pods, "application/json", &bad).await;
            assert_eq!(code, StatusCode::BAD_REQUEST, "{answer}");
            assert_eq!(answer["reason"], "BadRequest");
            let message = answer["message"].as_str().unwrap_or_default();
            assert!(
                message.starts_with(
                    "Pod in version \"v1\" cannot be handled as a Pod: json: cannot unmarshal "
                ),
                "{message}"
            );
        }
        let (code, stored) = send(&router, Method::POST, pods, "application/json", &pod).await;
        assert_eq!(code, StatusCode::CREATED, "{stored}");
        let status = format!("{pods}/web/status");
        let mut replaced = stored.clone();
        replaced["status"] = json!("x");
        let (code, answer) =
            send(&router, Method::PUT, &status, "application/json", &replaced).await;
        assert_eq!(code, StatusCode::BAD_REQUEST, "{answer}");
        let patch = json!({"status": [1]});
        let merge = "application/merge-patch+json";
        let (code, answer) = send(&router, Method::PATCH, &status, merge, &patch).await;
        // As Kubernetes answers a patch whose result does not decode.
        assert_eq!(code, StatusCode::UNPROCESSABLE_ENTITY, "{answer}");
        assert_eq!(answer["details"]["causes"][0]["field"], "patch");
        // Neither was stored.
        let request = Request::get(format!("{pods}/web"))
            .body(Body::empty())
            .unwrap();
        let response = router.clone().oneshot(request).await.unwrap();
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        let now: Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(
            now["metadata"]["resourceVersion"],
            stored["metadata"]["resourceVersion"]
        );
        assert_eq!(now["status"], stored["status"]);
    }
}
