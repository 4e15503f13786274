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
