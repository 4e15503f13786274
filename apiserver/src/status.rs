//! Errors as Kubernetes `Status` objects: the HTTP code, the reason a client
//! switches on, a message for people, and details (name, kind, causes).

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

/// One field problem of an Invalid (422) error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cause {
    /// `FieldValueRequired`, `FieldValueInvalid`, `FieldValueDuplicate`, …
    pub reason: &'static str,
    pub message: String,
    /// The field path, e.g. `metadata.name`.
    pub field: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub code: u16,
    /// `NotFound`, `AlreadyExists`, `Conflict`, `Invalid`, `BadRequest`, …
    pub reason: &'static str,
    pub message: String,
    /// (group, kind in lower-case plural form as Kubernetes sends it, name)
    /// Boxed: errors travel in every `Result` of the request path.
    pub details: Option<Box<Details>>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Details {
    pub group: String,
    /// The resource (plural), as Kubernetes fills `details.kind`.
    pub kind: String,
    pub name: String,
    pub causes: Vec<Cause>,
    /// For 429 and some 5xx: seconds before a retry.
    pub retry_after_seconds: Option<u32>,
}

pub type ApiResult<T> = Result<T, ApiError>;

impl ApiError {
    pub fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            code,
            reason,
            message: message.into(),
            details: None,
        }
    }

    fn with(mut self, group: &str, resource: &str, name: &str) -> Self {
        self.details = Some(Box::new(Details {
            group: group.into(),
            kind: resource.into(),
            name: name.into(),
            ..Details::default()
        }));
        self
    }

    /// 403, naming what was refused in the details.
    pub fn forbidden(group: &str, resource: &str, name: &str, message: impl Into<String>) -> Self {
        Self::new(403, "Forbidden", message).with(group, resource, name)
    }

    /// `pods "web" not found`
    pub fn not_found(group: &str, resource: &str, name: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("{} \"{name}\" not found", qualified(group, resource)),
        )
        .with(group, resource, name)
    }

    /// `pods "web" already exists`
    pub fn already_exists(group: &str, resource: &str, name: &str) -> Self {
        Self::new(
            409,
            "AlreadyExists",
            format!("{} \"{name}\" already exists", qualified(group, resource)),
        )
        .with(group, resource, name)
    }

    /// `Operation cannot be fulfilled on pods "web": <why>`
    pub fn conflict(group: &str, resource: &str, name: &str, why: &str) -> Self {
        Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": {why}",
                qualified(group, resource)
            ),
        )
        .with(group, resource, name)
    }

    /// `Pod "Bad" is invalid: metadata.name: Invalid value: "Bad": …`
    pub fn invalid(
        group: &str,
        kind: &str,
        resource: &str,
        name: &str,
        causes: Vec<Cause>,
    ) -> Self {
        let listed: Vec<String> = causes
            .iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect();
        let shown_kind = if group.is_empty() {
            kind.to_string()
        } else {
            format!("{kind}.{group}")
        };
        let message = match listed.len() {
            1 => format!("{shown_kind} \"{name}\" is invalid: {}", listed[0]),
            _ => format!(
                "{shown_kind} \"{name}\" is invalid: [{}]",
                listed.join(", ")
            ),
        };
        let mut err = Self::new(422, "Invalid", message).with(group, resource, name);
        if let Some(details) = err.details.as_mut() {
            details.kind = kind.to_string();
            details.causes = causes;
        }
        err
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    pub fn method_not_allowed(message: impl Into<String>) -> Self {
        Self::new(405, "MethodNotAllowed", message)
    }

    /// 405 for a verb a resource does not take: `watch is not supported
    /// on resources of kind "nodes.metrics.k8s.io"`, as Kubernetes'
    /// `NewMethodNotSupported` words it.
    pub fn method_not_supported(group: &str, resource: &str, verb: &str) -> Self {
        Self::method_not_allowed(format!(
            "{verb} is not supported on resources of kind \"{}\"",
            qualified(group, resource)
        ))
        .with(group, resource, "")
    }

    pub fn too_large(message: impl Into<String>) -> Self {
        Self::new(413, "RequestEntityTooLarge", message)
    }

    /// 410: the resourceVersion asked for is compacted.
    pub fn gone(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message)
    }

    pub fn unsupported_media_type(message: impl Into<String>) -> Self {
        Self::new(415, "UnsupportedMediaType", message)
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(500, "InternalError", message)
    }

    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(503, "ServiceUnavailable", message)
    }

    /// 429: over a limit; the client may retry after `retry_after` seconds.
    pub fn too_many_requests(message: impl Into<String>, retry_after: u32) -> Self {
        let mut err = Self::new(429, "TooManyRequests", message);
        err.details = Some(Box::new(Details {
            retry_after_seconds: Some(retry_after),
            ..Details::default()
        }));
        err
    }

    pub fn timeout(message: impl Into<String>) -> Self {
        Self::new(504, "Timeout", message)
    }

    /// The `Status` object.
    pub fn to_status(&self) -> Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some(details) = &self.details {
            let mut d = json!({});
            if !details.name.is_empty() {
                d["name"] = json!(details.name);
            }
            if !details.group.is_empty() {
                d["group"] = json!(details.group);
            }
            if !details.kind.is_empty() {
                d["kind"] = json!(details.kind);
            }
            if !details.causes.is_empty() {
                d["causes"] = details
                    .causes
                    .iter()
                    .map(|c| json!({"reason": c.reason, "message": c.message, "field": c.field}))
                    .collect();
            }
            if let Some(seconds) = details.retry_after_seconds {
                d["retryAfterSeconds"] = json!(seconds);
            }
            status["details"] = d;
        }
        status
    }
}

/// `pods` or `deployments.apps`, as Kubernetes names a resource in messages.
fn qualified(group: &str, resource: &str) -> String {
    if group.is_empty() {
        resource.to_string()
    } else {
        format!("{resource}.{group}")
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({}): {}", self.code, self.reason, self.message)
    }
}

impl std::error::Error for ApiError {}

/// A label or field selector the API cannot read: a 400 with its message.
impl From<skiff_machinery::selectors::SelectorError> for ApiError {
    fn from(err: skiff_machinery::selectors::SelectorError) -> Self {
        ApiError::bad_request(err.message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let code = StatusCode::from_u16(self.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let body = serde_json::to_vec(&self.to_status()).unwrap_or_default();
        let mut response =
            (code, [(header::CONTENT_TYPE, "application/json")], body).into_response();
        if let Some(seconds) = self.details.as_ref().and_then(|d| d.retry_after_seconds) {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, seconds.into());
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_read_as_kubernetes_writes_them() {
        let s = ApiError::not_found("", "pods", "web").to_status();
        assert_eq!(s["message"], "pods \"web\" not found");
        assert_eq!(
            (s["code"].as_u64(), s["reason"].as_str()),
            (Some(404), Some("NotFound"))
        );
        assert_eq!(s["details"]["kind"], "pods");
        let s = ApiError::already_exists("apps", "deployments", "d").to_status();
        assert_eq!(s["message"], "deployments.apps \"d\" already exists");
        let cause = Cause {
            reason: "FieldValueInvalid",
            message: "Invalid value: \"Bad\": a lowercase RFC 1123 subdomain must consist of …"
                .into(),
            field: "metadata.name".into(),
        };
        let s = ApiError::invalid("", "Pod", "pods", "Bad", vec![cause]).to_status();
        assert_eq!(s["code"], 422);
        assert!(s["message"]
            .as_str()
            .unwrap()
            .starts_with("Pod \"Bad\" is invalid: metadata.name: Invalid value"));
        assert_eq!(s["details"]["causes"][0]["field"], "metadata.name");
        assert_eq!(s["details"]["kind"], "Pod");
    }
}
