//! `pods/log`: the pod's container is found here, its log is streamed from
//! the kubelet of the pod's node (`GET /containerLogs/{ns}/{pod}/{container}`
//! on the port the Node advertises), as kube-apiserver does.

use std::collections::HashMap;

use axum::body::Body;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http_body_util::Empty;
use hyper::{header, StatusCode};
use serde_json::Value;

use crate::kubelet;
use crate::registry::{Registry, Target};
use crate::status::{ApiError, ApiResult, Cause};

/// The query parameters of `pods/log` passed on to the kubelet, checked
/// first as kube-apiserver validates PodLogOptions.
const FORWARDED: [&str; 7] = [
    "follow",
    "previous",
    "timestamps",
    "sinceSeconds",
    "sinceTime",
    "tailLines",
    "limitBytes",
];

/// GET pods/NAME/log.
pub async fn logs(
    registry: &Registry,
    target: &Target<'_>,
    name: &str,
    query: &HashMap<String, String>,
) -> ApiResult<Response> {
    let options = log_options(name, query)?;
    let pod = registry.get(target, name).await?;
    let container = container_of(&pod, name, query.get("container").map(String::as_str))?;
    let Some(node) = pod["spec"]["nodeName"].as_str().filter(|n| !n.is_empty()) else {
        return Err(ApiError::bad_request(format!(
            "container \"{container}\" in pod \"{name}\" is waiting to start: the pod is not scheduled to a node"
        )));
    };
    let authority =
        kubelet::authority_of(registry, node, &format!("get the logs of pod \"{name}\"")).await?;
    let namespace = target.namespace.unwrap_or("default");
    let path = format!(
        "/containerLogs/{}/{}/{}{}",
        kubelet::encode(namespace),
        kubelet::encode(name),
        kubelet::encode(&container),
        options
    );
    stream_from(&authority, &path, registry.kubelet_client()).await
}

/// The container whose log is asked for: the one named, or the pod's only
/// container.
pub(crate) fn container_of(pod: &Value, name: &str, container: Option<&str>) -> ApiResult<String> {
    let names: Vec<&str> = ["containers", "initContainers", "ephemeralContainers"]
        .iter()
        .flat_map(|list| pod["spec"][*list].as_array().into_iter().flatten())
        .filter_map(|c| c["name"].as_str())
        .collect();
    let regular = pod["spec"]["containers"]
        .as_array()
        .map(Vec::len)
        .unwrap_or(0);
    match container.filter(|c| !c.is_empty()) {
        Some(c) if names.contains(&c) => Ok(c.to_string()),
        Some(c) => Err(ApiError::bad_request(format!(
            "container {c} is not valid for pod {name}"
        ))),
        None if regular == 1 => Ok(names[0].to_string()),
        None => Err(ApiError::bad_request(format!(
            "a container name must be specified for pod {name}, choose one of: [{}]",
            names.join(" ")
        ))),
    }
}

/// The forwarded query string (with its `?`), after checking each value.
fn log_options(name: &str, query: &HashMap<String, String>) -> ApiResult<String> {
    let mut causes = Vec::new();
    let mut invalid = |field: &str, value: &str, message: &str| {
        causes.push(Cause {
            reason: "FieldValueInvalid",
            message: format!("Invalid value: \"{value}\": {message}"),
            field: field.to_string(),
        });
    };
    for flag in ["follow", "previous", "timestamps"] {
        if let Some(value) = query.get(flag) {
            if !matches!(
                value.as_str(),
                "" | "true" | "false" | "1" | "0" | "True" | "False"
            ) {
                invalid(flag, value, "must be a boolean");
            }
        }
    }
    for (field, minimum) in [("sinceSeconds", 1), ("tailLines", 0), ("limitBytes", 1)] {
        if let Some(value) = query.get(field) {
            match value.parse::<i64>() {
                Ok(n) if n >= minimum => {}
                Ok(_) if minimum == 0 => {
                    invalid(field, value, "must be greater than or equal to 0")
                }
                Ok(_) => invalid(field, value, "must be greater than 0"),
                Err(_) => invalid(field, value, "must be an integer"),
            }
        }
    }
    if let Some(value) = query.get("sinceTime") {
        if value.parse::<jiff::Timestamp>().is_err() {
            invalid("sinceTime", value, "must be an RFC 3339 time");
        }
    }
    if query.contains_key("sinceSeconds") && query.contains_key("sinceTime") {
        causes.push(Cause {
            reason: "FieldValueForbidden",
            message: "Forbidden: at most one of `sinceTime` or `sinceSeconds` may be specified"
                .into(),
            field: "sinceSeconds".into(),
        });
    }
    if !causes.is_empty() {
        return Err(ApiError::invalid("", "PodLogOptions", "pods", name, causes));
    }
    let pairs: Vec<String> = FORWARDED
        .iter()
        .filter_map(|key| {
            query
                .get(*key)
                .map(|value| format!("{key}={}", kubelet::encode(value)))
        })
        .collect();
    Ok(if pairs.is_empty() {
        String::new()
    } else {
        format!("?{}", pairs.join("&"))
    })
}

/// Calls the kubelet and streams its answer back; its errors become a
/// Status with the kubelet's code and words.
async fn stream_from(
    authority: &str,
    path: &str,
    tls: Option<&std::sync::Arc<rustls::ClientConfig>>,
) -> ApiResult<Response> {
    let scheme = if tls.is_some() { "https" } else { "http" };
    let url = format!("{scheme}://{authority}{path}");
    let unreachable =
        |err: &dyn std::fmt::Display| ApiError::internal(format!("Get \"{url}\": {err}"));
    let mut sender = kubelet::connect::<Empty<Bytes>>(authority, tls, &url).await?;
    let request = hyper::Request::get(path)
        .header(header::HOST, authority)
        .body(Empty::<Bytes>::new())
        .map_err(|err| ApiError::internal(format!("building the kubelet request: {err}")))?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|err| unreachable(&err))?;
    if response.status() != StatusCode::OK {
        return Err(kubelet::refusal(response).await);
    }
    let body = Body::new(response.into_body());
    Ok((StatusCode::OK, [(header::CONTENT_TYPE, "text/plain")], body).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn query(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn log_options_are_forwarded_in_a_fixed_order() {
        let q = query(&[("tailLines", "5"), ("follow", "true"), ("container", "c")]);
        assert_eq!(log_options("p", &q).unwrap(), "?follow=true&tailLines=5");
        assert_eq!(log_options("p", &query(&[])).unwrap(), "");
        let since = query(&[("sinceTime", "2026-01-02T03:04:05Z")]);
        assert_eq!(
            log_options("p", &since).unwrap(),
            "?sinceTime=2026-01-02T03:04:05Z"
        );
    }

    #[test]
    fn bad_log_options_are_invalid_with_the_field_named() {
        for (pairs, field) in [
            (vec![("tailLines", "-1")], "tailLines"),
            (vec![("tailLines", "x")], "tailLines"),
            (vec![("limitBytes", "0")], "limitBytes"),
            (vec![("sinceSeconds", "0")], "sinceSeconds"),
            (vec![("sinceTime", "yesterday")], "sinceTime"),
            (vec![("follow", "yes")], "follow"),
            (
                vec![("sinceSeconds", "5"), ("sinceTime", "2026-01-02T03:04:05Z")],
                "sinceSeconds",
            ),
        ] {
            let err = log_options("p", &query(&pairs)).unwrap_err();
            let status = err.to_status();
            assert_eq!(status["code"], 422, "{pairs:?}");
            assert_eq!(status["details"]["causes"][0]["field"], field, "{pairs:?}");
        }
    }

    #[test]
    fn the_only_container_is_chosen_and_others_must_be_named() {
        let pod = json!({"spec": {
            "initContainers": [{"name": "setup"}],
            "containers": [{"name": "app"}]
        }});
        assert_eq!(container_of(&pod, "p", None).unwrap(), "app");
        assert_eq!(container_of(&pod, "p", Some("setup")).unwrap(), "setup");
        let err = container_of(&pod, "p", Some("nope")).unwrap_err();
        assert_eq!(err.to_status()["code"], 400);
        let two = json!({"spec": {"containers": [{"name": "a"}, {"name": "b"}]}});
        let err = container_of(&two, "p", None).unwrap_err();
        assert!(err.to_status()["message"]
            .as_str()
            .unwrap()
            .contains("choose one of: [a b]"));
    }
}
