//! The reviews that ask the server about access and identity, created
//! and answered at once, never stored: SelfSubjectAccessReview (`kubectl
//! auth can-i`), SubjectAccessReview and LocalSubjectAccessReview (the
//! same for another user), SelfSubjectRulesReview (`kubectl auth can-i
//! --list`) and authentication.k8s.io's SelfSubjectReview (`kubectl auth
//! whoami`).

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Extension, Router};
use serde_json::{json, Value};

use super::{Attributes, Authorizer, ResourceAttributes};
use crate::status::{ApiError, ApiResult};
use crate::user::UserInfo;

const AUTHORIZATION: &str = "/apis/authorization.k8s.io/v1";

pub fn router(authorizer: Arc<Authorizer>) -> Router {
    Router::new()
        .route(
            &format!("{AUTHORIZATION}/selfsubjectaccessreviews"),
            post(self_subject_access_review),
        )
        .route(
            &format!("{AUTHORIZATION}/subjectaccessreviews"),
            post(subject_access_review),
        )
        .route(
            &format!("{AUTHORIZATION}/namespaces/{{namespace}}/localsubjectaccessreviews"),
            post(local_subject_access_review),
        )
        .route(
            &format!("{AUTHORIZATION}/selfsubjectrulesreviews"),
            post(self_subject_rules_review),
        )
        .route(
            "/apis/authentication.k8s.io/v1/selfsubjectreviews",
            post(self_subject_review),
        )
        .with_state(authorizer)
}

/// The review sent, as JSON (kubectl's typed client sends protobuf).
fn body_of(bytes: &Bytes, kind: &str) -> ApiResult<Value> {
    let body: Value = if bytes.starts_with(crate::protobuf::MAGIC) {
        crate::object::protobuf_body(bytes)?
    } else {
        serde_json::from_slice(bytes)
            .map_err(|e| ApiError::bad_request(format!("the body is not a {kind} in JSON: {e}")))?
    };
    if body["kind"].as_str().is_some_and(|k| k != kind) {
        return Err(ApiError::bad_request(format!(
            "the body is a {}, not a {kind}",
            body["kind"].as_str().unwrap_or("")
        )));
    }
    Ok(body)
}

/// The attributes a review's spec asks about.
fn attributes_of(spec: &Value) -> ApiResult<Attributes> {
    let text = |v: &Value, field: &str| v[field].as_str().unwrap_or("").to_string();
    if let Some(r) = spec.get("resourceAttributes").filter(|r| r.is_object()) {
        return Ok(Attributes {
            verb: text(r, "verb"),
            resource: Some(ResourceAttributes {
                group: text(r, "group"),
                resource: text(r, "resource"),
                subresource: text(r, "subresource"),
                namespace: text(r, "namespace"),
                name: text(r, "name"),
            }),
            path: String::new(),
        });
    }
    if let Some(n) = spec.get("nonResourceAttributes").filter(|n| n.is_object()) {
        return Ok(Attributes {
            verb: text(n, "verb"),
            resource: None,
            path: text(n, "path"),
        });
    }
    Err(ApiError::invalid(
        "authorization.k8s.io",
        "SelfSubjectAccessReview",
        "selfsubjectaccessreviews",
        "",
        vec![crate::status::Cause {
            reason: "FieldValueRequired",
            message: "Required value: exactly one of nonResourceAttributes or resourceAttributes must be specified".into(),
            field: "spec.resourceAttributes".into(),
        }],
    ))
}

/// The review answered: the body sent, with `status` set.
async fn answer(
    authorizer: &Authorizer,
    mut review: Value,
    user: &UserInfo,
    attributes: &Attributes,
) -> ApiResult<Response> {
    let allowed = authorizer.allows(user, attributes).await?;
    let reason = if allowed {
        if user.in_system_masters() {
            "the user is in system:masters".to_string()
        } else {
            "RBAC: allowed by a role bound to the user or one of its groups".to_string()
        }
    } else {
        String::new()
    };
    let mut status = json!({ "allowed": allowed });
    if !reason.is_empty() {
        status["reason"] = json!(reason);
    }
    review["status"] = status;
    review["metadata"] = json!({ "creationTimestamp": null });
    Ok(created(review))
}

fn created(body: Value) -> Response {
    (
        StatusCode::CREATED,
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        serde_json::to_vec(&body).unwrap_or_default(),
    )
        .into_response()
}

fn user_of(user: Option<Extension<UserInfo>>) -> UserInfo {
    user.map(|Extension(u)| u)
        .unwrap_or_else(UserInfo::anonymous)
}

async fn self_subject_access_review(
    State(authorizer): State<Arc<Authorizer>>,
    user: Option<Extension<UserInfo>>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let review = body_of(&body, "SelfSubjectAccessReview")?;
    let attributes = attributes_of(&review["spec"])?;
    answer(&authorizer, review, &user_of(user), &attributes).await
}

/// The user a SubjectAccessReview asks about.
fn subject_of(spec: &Value) -> ApiResult<UserInfo> {
    let name = spec["user"].as_str().unwrap_or("").to_string();
    let groups: Vec<String> = spec["groups"]
        .as_array()
        .map(|g| {
            g.iter()
                .filter_map(|g| g.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    if name.is_empty() && groups.is_empty() {
        return Err(ApiError::invalid(
            "authorization.k8s.io",
            "SubjectAccessReview",
            "subjectaccessreviews",
            "",
            vec![crate::status::Cause {
                reason: "FieldValueRequired",
                message: "Required value: at least one of user or group must be specified".into(),
                field: "spec.user".into(),
            }],
        ));
    }
    Ok(UserInfo { name, groups })
}

async fn subject_access_review(
    State(authorizer): State<Arc<Authorizer>>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let review = body_of(&body, "SubjectAccessReview")?;
    let subject = subject_of(&review["spec"])?;
    let attributes = attributes_of(&review["spec"])?;
    answer(&authorizer, review, &subject, &attributes).await
}

async fn local_subject_access_review(
    State(authorizer): State<Arc<Authorizer>>,
    Path(namespace): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let review = body_of(&body, "LocalSubjectAccessReview")?;
    let subject = subject_of(&review["spec"])?;
    let attributes = attributes_of(&review["spec"])?;
    match &attributes.resource {
        Some(r) if r.namespace == namespace => {}
        _ => {
            return Err(ApiError::bad_request(format!(
            "spec.resourceAttributes.namespace must be {namespace:?}, the namespace of the request"
        )))
        }
    }
    answer(&authorizer, review, &subject, &attributes).await
}

async fn self_subject_rules_review(
    State(authorizer): State<Arc<Authorizer>>,
    user: Option<Extension<UserInfo>>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let mut review = body_of(&body, "SelfSubjectRulesReview")?;
    let namespace = review["spec"]["namespace"]
        .as_str()
        .unwrap_or("")
        .to_string();
    let rules = authorizer.rules_for(&user_of(user), &namespace).await?;
    let (resource_rules, non_resource_rules): (Vec<_>, Vec<_>) = rules
        .iter()
        .partition(|rule| rule.non_resource_urls.is_empty());
    let resource_rules: Vec<Value> = resource_rules
        .iter()
        .map(|rule| {
            let mut out = json!({
                "verbs": rule.verbs,
                "apiGroups": rule.api_groups,
                "resources": rule.resources,
            });
            if !rule.resource_names.is_empty() {
                out["resourceNames"] = json!(rule.resource_names);
            }
            out
        })
        .collect();
    let non_resource_rules: Vec<Value> = non_resource_rules
        .iter()
        .map(|rule| json!({"verbs": rule.verbs, "nonResourceURLs": rule.non_resource_urls}))
        .collect();
    review["status"] = json!({
        "resourceRules": resource_rules,
        "nonResourceRules": non_resource_rules,
        "incomplete": false,
    });
    review["metadata"] = json!({ "creationTimestamp": null });
    Ok(created(review))
}

async fn self_subject_review(
    user: Option<Extension<UserInfo>>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let mut review = if body.is_empty() || body.starts_with(crate::protobuf::MAGIC) {
        json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})
    } else {
        body_of(&body, "SelfSubjectReview")?
    };
    let user = user_of(user);
    review["status"] = json!({"userInfo": {"username": user.name, "groups": user.groups}});
    review["metadata"] = json!({ "creationTimestamp": null });
    Ok(created(review))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_review_asks_about_a_resource_or_a_path() {
        let spec =
            json!({"resourceAttributes": {"verb": "delete", "resource": "pods", "namespace": "d"}});
        let attributes = attributes_of(&spec).unwrap();
        assert_eq!(attributes.verb, "delete");
        assert_eq!(attributes.resource.unwrap().namespace, "d");
        let spec = json!({"nonResourceAttributes": {"verb": "get", "path": "/healthz"}});
        let attributes = attributes_of(&spec).unwrap();
        assert_eq!(
            (attributes.path.as_str(), attributes.resource),
            ("/healthz", None)
        );
        assert_eq!(attributes_of(&json!({})).unwrap_err().code, 422);
        assert_eq!(subject_of(&json!({})).unwrap_err().code, 422);
        assert_eq!(subject_of(&json!({"groups": ["g"]})).unwrap().groups, ["g"]);
        assert_eq!(
            body_of(&Bytes::from_static(b"{"), "SelfSubjectAccessReview")
                .unwrap_err()
                .code,
            400
        );
    }
}
