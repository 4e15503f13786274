//! `admission.k8s.io/v1` AdmissionReview: the request sent to a webhook,
//! and what its response means (allowed, a denial's Status, a JSON patch).

use base64::Engine;
use serde_json::{json, Value};

use crate::admission::{Attributes, Operation};
use crate::status::{ApiError, Cause, Details};

/// The review of `attrs`, with a fresh `uid`.
pub fn request(attrs: &Attributes, uid: &str) -> Value {
    let resource = attrs.resource;
    // A create through a subresource writes the subresource's own type (a
    // pod's binding, a Binding); other writes are of the resource's kind.
    let (group, version, kind) = match attrs.subresource.as_deref() {
        Some(sub) if attrs.operation == Operation::Create => {
            crate::discovery::subresource_kind(resource, sub)
        }
        _ => (resource.group, resource.version, resource.kind),
    };
    let kind = json!({"group": group, "version": version, "kind": kind});
    let gvr =
        json!({"group": resource.group, "version": resource.version, "resource": resource.plural});
    let options_kind = match attrs.operation {
        Operation::Create => "CreateOptions",
        Operation::Update => "UpdateOptions",
        Operation::Delete => "DeleteOptions",
    };
    let mut request = json!({
        "uid": uid,
        "kind": kind,
        "resource": gvr,
        "requestKind": kind,
        "requestResource": gvr,
        "name": attrs.name,
        "operation": attrs.operation.as_str(),
        "userInfo": match &attrs.user {
            Some(user) => json!({"username": user.name, "groups": user.groups}),
            None => json!({}),
        },
        "object": attrs.object.clone().unwrap_or(Value::Null),
        "oldObject": attrs.old_object.clone().unwrap_or(Value::Null),
        "dryRun": attrs.dry_run,
        "options": {"apiVersion": "meta.k8s.io/v1", "kind": options_kind},
    });
    if let Some(namespace) = &attrs.namespace {
        request["namespace"] = json!(namespace);
    }
    if let Some(sub) = &attrs.subresource {
        request["subResource"] = json!(sub);
        request["requestSubResource"] = json!(sub);
    }
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request})
}

/// What a webhook answered.
#[derive(Debug)]
pub enum Verdict {
    Allowed {
        /// The decoded JSON patch of a mutating webhook.
        patch: Option<Value>,
        warnings: Vec<String>,
    },
    Denied(ApiError),
}

/// Reads the webhook's response body; `Err` is an invalid response (a call
/// failure for failurePolicy).
pub fn verdict(name: &str, uid: &str, body: &[u8]) -> Result<Verdict, String> {
    let invalid = |why: String| format!("received invalid webhook response: {why}");
    let review: Value = serde_json::from_slice(body).map_err(|e| invalid(e.to_string()))?;
    let response = review
        .get("response")
        .filter(|r| r.is_object())
        .ok_or_else(|| invalid("response is missing".into()))?;
    let got = response["uid"].as_str().unwrap_or("");
    if got != uid {
        return Err(invalid(format!(
            "expected response.uid={uid:?}, got {got:?}"
        )));
    }
    let warnings = response["warnings"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|w| w.as_str().map(str::to_string))
        .collect();
    if response["allowed"] != json!(true) {
        return Ok(Verdict::Denied(denial(name, &response["status"])));
    }
    let patch = match (response["patchType"].as_str(), response["patch"].as_str()) {
        (_, None) => None,
        (Some("JSONPatch"), Some(encoded)) => {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(encoded.trim())
                .map_err(|e| invalid(format!("the patch is not base64: {e}")))?;
            Some(
                serde_json::from_slice(&bytes)
                    .map_err(|e| invalid(format!("the patch is not JSON: {e}")))?,
            )
        }
        (other, Some(_)) => {
            return Err(invalid(format!(
                "unsupported patchType {:?}: only \"JSONPatch\" is supported",
                other.unwrap_or("")
            )))
        }
    };
    Ok(Verdict::Allowed { patch, warnings })
}

/// The Status of a denial: the webhook's own code (403 if none) and its
/// message after `admission webhook "name" denied the request`.
fn denial(name: &str, status: &Value) -> ApiError {
    let denied = format!("admission webhook {name:?} denied the request");
    let message = match (status["message"].as_str(), status["reason"].as_str()) {
        (Some(m), _) if !m.is_empty() => format!("{denied}: {m}"),
        (_, Some(r)) if !r.is_empty() => format!("{denied}: {r}"),
        _ => format!("{denied} without explanation"),
    };
    let code = status["code"]
        .as_u64()
        .filter(|c| (400..600).contains(c))
        .unwrap_or(403) as u16;
    let mut err = ApiError::new(
        code,
        known_reason(status["reason"].as_str().unwrap_or("")),
        message,
    );
    if let Some(causes) = status["details"]["causes"].as_array() {
        err.details = Some(Box::new(Details {
            causes: causes
                .iter()
                .map(|c| Cause {
                    reason: known_reason(c["reason"].as_str().unwrap_or("")),
                    message: c["message"].as_str().unwrap_or("").to_string(),
                    field: c["field"].as_str().unwrap_or("").to_string(),
                })
                .collect(),
            ..Details::default()
        }));
    }
    err
}

/// Reasons are `&'static str` in [`ApiError`]: the ones Kubernetes defines
/// are kept, others dropped.
fn known_reason(reason: &str) -> &'static str {
    const KNOWN: &[&str] = &[
        "Unauthorized",
        "Forbidden",
        "NotFound",
        "AlreadyExists",
        "Conflict",
        "Gone",
        "Invalid",
        "ServerTimeout",
        "Timeout",
        "TooManyRequests",
        "BadRequest",
        "MethodNotAllowed",
        "NotAcceptable",
        "RequestEntityTooLarge",
        "UnsupportedMediaType",
        "InternalError",
        "Expired",
        "ServiceUnavailable",
        "FieldValueInvalid",
        "FieldValueRequired",
        "FieldValueNotSupported",
        "FieldValueForbidden",
    ];
    KNOWN.iter().find(|k| **k == reason).copied().unwrap_or("")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::tests::attrs;

    #[test]
    fn a_review_carries_the_request() {
        let a = attrs(
            Operation::Create,
            "pods",
            json!({"metadata": {"name": "p"}}),
        );
        let review = request(&a, "u-1");
        assert_eq!(review["kind"], "AdmissionReview");
        let r = &review["request"];
        assert_eq!(r["uid"], "u-1");
        assert_eq!(r["operation"], "CREATE");
        assert_eq!(
            r["resource"],
            json!({"group": "", "version": "v1", "resource": "pods"})
        );
        assert_eq!(r["namespace"], "default");
        assert_eq!(r["object"]["metadata"]["name"], "p");
    }

    #[test]
    fn responses_allow_patch_or_deny() {
        let patch = base64::engine::general_purpose::STANDARD
            .encode(r#"[{"op":"add","path":"/metadata/labels","value":{"a":"b"}}]"#);
        let body = json!({"response": {"uid": "u", "allowed": true, "patchType": "JSONPatch", "patch": patch}});
        match verdict("w", "u", body.to_string().as_bytes()).unwrap() {
            Verdict::Allowed { patch: Some(p), .. } => assert_eq!(p[0]["op"], "add"),
            other => panic!("{other:?}"),
        }
        let body = json!({"response": {"uid": "u", "allowed": false, "status": {"message": "no pods named bad"}}});
        match verdict("w.example.com", "u", body.to_string().as_bytes()).unwrap() {
            Verdict::Denied(err) => {
                assert_eq!(err.code, 403);
                assert_eq!(
                    err.message,
                    "admission webhook \"w.example.com\" denied the request: no pods named bad"
                );
            }
            other => panic!("{other:?}"),
        }
        let body = json!({"response": {"uid": "u", "allowed": false, "status": {"code": 422, "reason": "Invalid"}}});
        match verdict("w", "u", body.to_string().as_bytes()).unwrap() {
            Verdict::Denied(err) => assert_eq!((err.code, err.reason), (422, "Invalid")),
            other => panic!("{other:?}"),
        }
        let wrong = json!({"response": {"uid": "other", "allowed": true}});
        assert!(verdict("w", "u", wrong.to_string().as_bytes())
            .unwrap_err()
            .contains("expected response.uid"));
        assert!(verdict("w", "u", b"not json").is_err());
    }
}
