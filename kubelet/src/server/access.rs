//! Who may use the kubelet's port, as the kubelet with
//! `--authentication-token-webhook` and `--authorization-mode=Webhook`
//! decides: the user of a client certificate of the cluster CA (the TLS
//! configuration checked it) or of a bearer token (a TokenReview), then a
//! SubjectAccessReview of `nodes/<subresource>` of this node (`stats`,
//! `metrics`, `log`, `spec`, else `proxy`) with the request's verb.
//! `/healthz` is open to anyone.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use skiff_machinery::serving::delegated::{Attributes, Delegated};
use skiff_machinery::serving::PeerUser;

/// The group whose members pass without a review when the kubelet has no
/// API client to ask (the agent alone, in tests).
const MASTERS: &str = "system:masters";

/// What the port checks requests with.
#[derive(Clone)]
pub struct Access {
    /// This node's name: the `nodes/…` a request is about.
    pub node: String,
    /// The reviews, through the kubelet's client; `None`: certificates of
    /// `system:masters` only.
    pub delegated: Option<Arc<Delegated>>,
}

/// The subresource of `nodes` a path is, as the kubelet names them.
pub fn subresource(path: &str) -> &'static str {
    let under = |prefix: &str| path == prefix || path.starts_with(&format!("{prefix}/"));
    if under("/stats") {
        "stats"
    } else if under("/metrics") {
        "metrics"
    } else if under("/logs") {
        "log"
    } else if under("/spec") {
        "spec"
    } else {
        "proxy"
    }
}

/// The API verb of an HTTP method, as the kubelet maps them.
pub fn verb(method: &Method) -> &'static str {
    match *method {
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE => "delete",
        _ => "get",
    }
}

fn refuse(code: StatusCode, message: String) -> Response {
    (
        code,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        message,
    )
        .into_response()
}

/// The middleware: authenticates and authorizes every request over TLS.
pub async fn authorize(State(access): State<Access>, request: Request, next: Next) -> Response {
    // The user of the connection's client certificate, if any; the
    // extension is absent on plain HTTP.
    let Some(PeerUser(from_certificate)) = request.extensions().get::<PeerUser>() else {
        // Plain HTTP: the agent alone, as tests run it.
        return next.run(request).await;
    };
    if request.uri().path() == "/healthz" {
        return next.run(request).await;
    }
    let bearer = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(str::to_string);
    let user = match (from_certificate.clone(), bearer, &access.delegated) {
        (Some(user), _, _) => user,
        (None, Some(token), Some(delegated)) => match delegated.authenticate_token(&token).await {
            Ok(Some(user)) => user,
            Ok(None) => return refuse(StatusCode::UNAUTHORIZED, "Unauthorized".into()),
            Err(err) => {
                tracing::warn!(error = %err, "could not authenticate a request to the kubelet's port");
                return refuse(StatusCode::UNAUTHORIZED, "Unauthorized".into());
            }
        },
        _ => return refuse(StatusCode::UNAUTHORIZED, "Unauthorized".into()),
    };
    let verb = verb(request.method());
    let subresource = subresource(request.uri().path());
    let described = format!(
        "(user={}, verb={verb}, resource=nodes, subresource={subresource})",
        user.name
    );
    let Some(delegated) = &access.delegated else {
        if user.groups.iter().any(|g| g == MASTERS) {
            return next.run(request).await;
        }
        return refuse(StatusCode::FORBIDDEN, format!("Forbidden {described}"));
    };
    let attributes = Attributes::Resource {
        verb: verb.to_string(),
        group: String::new(),
        resource: "nodes".into(),
        subresource: subresource.to_string(),
        namespace: String::new(),
        name: access.node.clone(),
    };
    match delegated.authorize_attributes(&user, &attributes).await {
        Ok(decision) if decision.allowed => next.run(request).await,
        Ok(_) => refuse(StatusCode::FORBIDDEN, format!("Forbidden {described}")),
        Err(err) => {
            tracing::warn!(error = %err, "could not authorize a request to the kubelet's port");
            refuse(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("Authorization error {described}"),
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_the_kubelets_subresources() {
        assert_eq!(subresource("/stats/summary"), "stats");
        assert_eq!(subresource("/stats"), "stats");
        assert_eq!(subresource("/metrics"), "metrics");
        assert_eq!(subresource("/metrics/resource"), "metrics");
        assert_eq!(subresource("/metricsx"), "proxy");
        assert_eq!(subresource("/logs/messages"), "log");
        assert_eq!(subresource("/spec/"), "spec");
        assert_eq!(subresource("/containerLogs/ns/p/c"), "proxy");
        assert_eq!(subresource("/exec/ns/p/c"), "proxy");
        assert_eq!(verb(&Method::GET), "get");
        assert_eq!(verb(&Method::HEAD), "get");
        assert_eq!(verb(&Method::POST), "create");
        assert_eq!(verb(&Method::DELETE), "delete");
    }
}
