//! What a request path and method say, as kube-apiserver's RequestInfo:
//! the verb (get, list, watch, create, update, patch, delete,
//! deletecollection; a lower-case method for non-resource paths) and, for
//! API paths, the group, version, resource, subresource, namespace and name.

use std::borrow::Cow;

use axum::extract::Request;
use axum::http::{Method, Uri};
use axum::middleware::Next;
use axum::response::Response;

/// The outermost middleware's: works the request's info out once and
/// hands it down in the request's extensions, for the limits, audit,
/// authorization and metrics to read rather than each parse the path.
pub async fn attach(mut request: Request, next: Next) -> Response {
    let info = RequestInfo::of(request.method(), request.uri());
    request.extensions_mut().insert(info);
    next.run(request).await
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestInfo {
    pub verb: String,
    pub resource: Option<ResourceInfo>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceInfo {
    pub group: String,
    pub version: String,
    pub resource: String,
    pub subresource: Option<String>,
    pub namespace: Option<String>,
    pub name: Option<String>,
    /// The path's segments from the resource on (resource, name,
    /// subresource and any more), as Kubernetes' `RequestInfo.Parts`: a
    /// route that takes no more than three refuses a longer path.
    pub parts: Vec<String>,
}

impl RequestInfo {
    /// The info [`attach`] handed down with `request`; worked out here for
    /// a request that did not pass it (a handler tested on its own).
    pub fn of_request<B>(request: &axum::http::Request<B>) -> Cow<'_, RequestInfo> {
        match request.extensions().get::<RequestInfo>() {
            Some(info) => Cow::Borrowed(info),
            None => Cow::Owned(RequestInfo::of(request.method(), request.uri())),
        }
    }

    pub fn of(method: &Method, uri: &Uri) -> RequestInfo {
        let non_resource = || RequestInfo {
            verb: method.as_str().to_ascii_lowercase(),
            resource: None,
        };
        let parts: Vec<&str> = uri.path().split('/').filter(|s| !s.is_empty()).collect();
        let (group, version, mut rest) = match parts.as_slice() {
            ["api", version, rest @ ..] => ("", *version, rest),
            ["apis", group, version, rest @ ..] => (*group, *version, rest),
            _ => return non_resource(),
        };
        if rest.is_empty() {
            return non_resource();
        }
        let mut watch_path = false;
        if rest[0] == "watch" {
            watch_path = true;
            rest = &rest[1..];
        }
        let mut namespace = None;
        if rest.first() == Some(&"namespaces") && rest.len() >= 2 {
            // A namespace itself (and its status and finalize
            // subresources) has its name as its namespace.
            namespace = Some(rest[1].to_string());
            if rest.len() >= 3 && !matches!(rest[2], "status" | "finalize") {
                rest = &rest[2..];
            }
        }
        let Some(resource) = rest.first() else {
            return non_resource();
        };
        let name = rest.get(1).map(|n| n.to_string());
        let subresource = rest.get(2).map(|s| s.to_string());
        let watch_param = query_flag(uri, "watch");
        // A connection to a pod (exec, attach, port-forward) is a `create`
        // whichever method upgrades it: WebSocket clients send GET, and
        // Kubernetes asks `create` of them too.
        let connects = *resource == "pods"
            && matches!(
                subresource.as_deref(),
                Some("exec" | "attach" | "portforward")
            )
            && matches!(*method, Method::GET | Method::POST);
        let verb = match *method {
            _ if connects => "create",
            Method::GET | Method::HEAD if watch_path || watch_param => "watch",
            Method::GET | Method::HEAD if name.is_some() => "get",
            Method::GET | Method::HEAD => "list",
            Method::POST => "create",
            Method::PUT => "update",
            Method::PATCH => "patch",
            Method::DELETE if name.is_some() => "delete",
            Method::DELETE => "deletecollection",
            // Any other method is still a request on the resource, with
            // the method as its verb (Kubernetes' default): the router
            // answers it 405, and only a role granting every verb lets
            // it get that far.
            _ => &method.as_str().to_ascii_lowercase(),
        };
        RequestInfo {
            verb: verb.to_string(),
            resource: Some(ResourceInfo {
                group: group.to_string(),
                version: version.to_string(),
                resource: resource.to_string(),
                subresource,
                namespace,
                name,
                parts: rest.iter().map(|s| s.to_string()).collect(),
            }),
        }
    }
}

/// Whether `path` is a health check: `/healthz`, `/livez`, `/readyz` or
/// one of their named checks (`/readyz/ping`).
pub fn is_health_check(path: &str) -> bool {
    ["/healthz", "/livez", "/readyz"].iter().any(|p| {
        path.strip_prefix(p)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
    })
}

/// Whether the query sets boolean parameter `name` (`name=true`, `name=1`
/// or a bare `name`).
pub fn query_flag(uri: &Uri, name: &str) -> bool {
    uri.query().unwrap_or("").split('&').any(|pair| {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        key == name && matches!(value, "true" | "1" | "")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The layers inside read the info `attach` worked out, not their own.
    #[tokio::test]
    async fn the_info_is_worked_out_once_and_handed_down() {
        use tower::ServiceExt;
        let app = axum::Router::new()
            .route(
                "/api/v1/namespaces/{namespace}/pods",
                axum::routing::get(|request: Request| async move {
                    let info = RequestInfo::of_request(&request);
                    let handed_down = matches!(info, Cow::Borrowed(_));
                    format!("{} {handed_down}", info.verb)
                }),
            )
            .layer(axum::middleware::from_fn(attach));
        let request = axum::http::Request::builder()
            .uri("/api/v1/namespaces/default/pods?watch=true")
            .body(axum::body::Body::empty())
            .unwrap();
        let response = app.oneshot(request).await.unwrap();
        let body = axum::body::to_bytes(response.into_body(), 1024)
            .await
            .unwrap();
        assert_eq!(&body[..], b"watch true");
    }

    fn info(method: Method, uri: &str) -> RequestInfo {
        RequestInfo::of(&method, &uri.parse().unwrap())
    }

    #[test]
    fn paths_and_methods_read_as_kubernetes_reads_them() {
        let get = info(Method::GET, "/api/v1/namespaces/default/pods/web");
        assert_eq!(get.verb, "get");
        let r = get.resource.unwrap();
        assert_eq!(
            (r.group.as_str(), r.version.as_str(), r.resource.as_str()),
            ("", "v1", "pods")
        );
        assert_eq!(
            (r.namespace.as_deref(), r.name.as_deref()),
            (Some("default"), Some("web"))
        );
        let log = info(Method::GET, "/api/v1/namespaces/d/pods/web/log?follow=true");
        assert_eq!(log.resource.unwrap().subresource.as_deref(), Some("log"));
        for (method, sub) in [
            (Method::GET, "exec"),
            (Method::POST, "exec"),
            (Method::GET, "attach"),
            (Method::GET, "portforward"),
        ] {
            let connect = info(
                method,
                &format!("/api/v1/namespaces/d/pods/p/{sub}?command=ls"),
            );
            assert_eq!(connect.verb, "create", "{sub}");
        }
        assert_eq!(info(Method::GET, "/apis/apps/v1/deployments").verb, "list");
        let options = info(Method::OPTIONS, "/api/v1/namespaces/d/pods");
        assert_eq!(options.verb, "options");
        assert_eq!(options.resource.unwrap().resource, "pods");
        let parts = info(Method::GET, "/api/v1/namespaces/d/pods/p/exec/more");
        assert_eq!(parts.resource.unwrap().parts, ["pods", "p", "exec", "more"]);
        assert_eq!(
            info(Method::GET, "/apis/apps/v1/deployments?watch=true").verb,
            "watch"
        );
        assert_eq!(
            info(Method::GET, "/api/v1/watch/namespaces/d/pods").verb,
            "watch"
        );
        assert_eq!(
            info(Method::POST, "/api/v1/namespaces/d/pods").verb,
            "create"
        );
        assert_eq!(
            info(Method::DELETE, "/api/v1/namespaces/d/pods").verb,
            "deletecollection"
        );
        assert_eq!(
            info(Method::DELETE, "/api/v1/namespaces/d/pods/p").verb,
            "delete"
        );
        let ns = info(Method::PUT, "/api/v1/namespaces/team-a")
            .resource
            .unwrap();
        assert_eq!(
            (ns.resource.as_str(), ns.name.as_deref()),
            ("namespaces", Some("team-a"))
        );
        let finalize = info(Method::PUT, "/api/v1/namespaces/team-a/finalize");
        let f = finalize.resource.unwrap();
        assert_eq!(
            (f.resource.as_str(), f.name.as_deref()),
            ("namespaces", Some("team-a"))
        );
        assert_eq!(f.subresource.as_deref(), Some("finalize"));
        let nodes = info(Method::PATCH, "/api/v1/nodes/n1/status");
        assert_eq!(nodes.verb, "patch");
        assert_eq!(
            nodes.resource.unwrap().subresource.as_deref(),
            Some("status")
        );
        let health = info(Method::GET, "/healthz");
        assert_eq!((health.verb.as_str(), health.resource), ("get", None));
        assert_eq!(info(Method::GET, "/apis/apps/v1").resource, None);
    }
}
