//! The audit log: who did what, as kube-apiserver's `--audit-log-path` and
//! `--audit-policy-file`. Each request the policy selects becomes an
//! `audit.k8s.io/v1` Event, one JSON line: its user, verb, object, source
//! address, user agent, response code, timestamps and, at the Request and
//! RequestResponse levels, the bodies. Lines go to a writer thread through
//! a bounded queue: a request never waits on the disk (when the queue is
//! full, the event is dropped and counted). The file rotates at a size.
//! Long-running requests (watches, followed logs) get a ResponseStarted
//! event when they start and a ResponseComplete event when they end.

mod log;
pub mod policy;

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

pub use log::{AuditLog, LogConfig};
pub use policy::{Level, Policy};

use crate::limits::{Peer, RequestKind};
use crate::user::UserInfo;

/// The policy and the log, shared by every request.
#[derive(Clone)]
pub struct Auditor {
    policy: Arc<Policy>,
    log: AuditLog,
}

impl std::fmt::Debug for Auditor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (written, dropped) = self.log.counts();
        f.debug_struct("Auditor")
            .field("written", &written)
            .field("dropped", &dropped)
            .finish()
    }
}

impl Auditor {
    pub fn new(policy: Policy, log: AuditLog) -> Auditor {
        Auditor {
            policy: Arc::new(policy),
            log,
        }
    }

    pub fn log(&self) -> &AuditLog {
        &self.log
    }
}

/// The request as an event records it before it is served.
#[derive(Clone)]
struct Pending {
    decision: policy::Decision,
    event: Value,
}

impl Pending {
    fn finish(mut self, stage: &str, status: StatusCode, response: Option<Value>) -> Option<Value> {
        if self.decision.omit_stages.iter().any(|s| s == stage) {
            return None;
        }
        self.event["stage"] = json!(stage);
        self.event["stageTimestamp"] = json!(now());
        let mut response_status = json!({"metadata": {}, "code": status.as_u16()});
        if let Some(body) = &response {
            if body["kind"] == "Status" && body["status"] == "Failure" {
                for field in ["status", "message", "reason"] {
                    response_status[field] = body[field].clone();
                }
            }
        }
        self.event["responseStatus"] = response_status;
        if self.decision.level >= Level::RequestResponse {
            if let Some(mut body) = response {
                if self.decision.omit_managed_fields {
                    strip_managed_fields(&mut body);
                }
                self.event["responseObject"] = body;
            }
        }
        Some(self.event)
    }
}

fn now() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%S%.6fZ")
        .to_string()
}

/// The middleware: records the request as the policy says, then serves it.
pub async fn record(State(auditor): State<Auditor>, request: Request, next: Next) -> Response {
    let user = request
        .extensions()
        .get::<UserInfo>()
        .cloned()
        .unwrap_or_else(UserInfo::anonymous);
    let info = crate::request_info::RequestInfo::of_request(&request).into_owned();
    let decision = auditor.policy.decide(&policy::Attributes {
        user: &user.name,
        groups: &user.groups,
        verb: &info.verb,
        resource: info.resource.as_ref().map(|r| policy::ResourceAttributes {
            group: &r.group,
            resource: &r.resource,
            subresource: r.subresource.as_deref(),
            namespace: r.namespace.as_deref(),
            name: r.name.as_deref(),
        }),
        path: request.uri().path(),
    });
    if decision.level == Level::None {
        return next.run(request).await;
    }
    let audit_id = crate::object::new_uid();
    let mut event = json!({
        "kind": "Event",
        "apiVersion": "audit.k8s.io/v1",
        "level": decision.level.as_str(),
        "auditID": audit_id,
        "requestURI": request.uri().to_string(),
        "verb": info.verb,
        "user": {"username": user.name, "groups": user.groups},
        "sourceIPs": request.extensions().get::<Peer>().map(|p| vec![p.0.ip().to_string()]).unwrap_or_default(),
        "requestReceivedTimestamp": now(),
    });
    if let Some(agent) = request
        .headers()
        .get(axum::http::header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
    {
        event["userAgent"] = json!(agent);
    }
    if let Some(resource) = &info.resource {
        let mut object = json!({"resource": resource.resource, "apiVersion": resource.version});
        if !resource.group.is_empty() {
            object["apiGroup"] = json!(resource.group);
        }
        for (field, value) in [
            ("namespace", &resource.namespace),
            ("name", &resource.name),
            ("subresource", &resource.subresource),
        ] {
            if let Some(value) = value {
                object[field] = json!(value);
            }
        }
        event["objectRef"] = object;
    }
    let kind = RequestKind::of_request(&request);
    let request = if decision.level >= Level::Request {
        let (parts, body) = request.into_parts();
        let bytes = match axum::body::to_bytes(body, crate::server::MAX_BODY_BYTES).await {
            Ok(bytes) => bytes,
            Err(_) => {
                return crate::status::ApiError::too_large(format!(
                    "the request body is over {} bytes",
                    crate::server::MAX_BODY_BYTES
                ))
                .into_response()
            }
        };
        if let Ok(mut object) = serde_json::from_slice::<Value>(&bytes) {
            if decision.omit_managed_fields {
                strip_managed_fields(&mut object);
            }
            event["requestObject"] = object;
        }
        Request::from_parts(parts, Body::from(bytes))
    } else {
        request
    };
    let pending = Pending { decision, event };
    let mut response = next.run(request).await;
    if let Ok(id) = HeaderValue::from_str(&audit_id) {
        response.headers_mut().insert("audit-id", id);
    }
    let status = response.status();
    if matches!(kind, RequestKind::Watch | RequestKind::LongRunning) && status.is_success() {
        if let Some(started) = pending.clone().finish("ResponseStarted", status, None) {
            auditor.log.write(&started);
        }
        // ResponseComplete when the stream ends and its body is dropped.
        let done = Completion {
            auditor: auditor.clone(),
            pending: Some(pending),
            status,
        };
        return response.map(|body| crate::holding::Holding::body(body, done));
    }
    let wants_body = pending.decision.level >= Level::RequestResponse || !status.is_success();
    let (response, body) = if wants_body {
        let (parts, body) = response.into_parts();
        match axum::body::to_bytes(body, usize::MAX).await {
            Ok(bytes) => {
                let value = serde_json::from_slice::<Value>(&bytes).ok();
                (Response::from_parts(parts, Body::from(bytes)), value)
            }
            Err(err) => {
                tracing::warn!(error = %err, "reading a response for the audit log failed");
                (Response::from_parts(parts, Body::empty()), None)
            }
        }
    } else {
        (response, None)
    };
    if let Some(event) = pending.finish("ResponseComplete", status, body) {
        auditor.log.write(&event);
    }
    response
}

/// Writes a long-running request's ResponseComplete event when dropped.
struct Completion {
    auditor: Auditor,
    pending: Option<Pending>,
    status: StatusCode,
}

impl Drop for Completion {
    fn drop(&mut self) {
        if let Some(pending) = self.pending.take() {
            if let Some(event) = pending.finish("ResponseComplete", self.status, None) {
                self.auditor.log.write(&event);
            }
        }
    }
}

/// Drops `metadata.managedFields` of an object, or of each item of a list.
fn strip_managed_fields(object: &mut Value) {
    if let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        metadata.remove("managedFields");
    }
    if let Some(items) = object.get_mut("items").and_then(Value::as_array_mut) {
        for item in items {
            strip_managed_fields(item);
        }
    }
}
