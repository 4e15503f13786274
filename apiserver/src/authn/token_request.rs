//! `POST …/serviceaccounts/NAME/token`: a TokenRequest (`kubectl create
//! token NAME`) answered with a token for the account, signed now, for the
//! audiences asked (the API server's by default), valid for
//! `expirationSeconds` (an hour by default, ten minutes at least), and
//! bound to a pod if asked.

use serde_json::{json, Value};

use super::service_account::Claims;
use crate::registry::Target;
use crate::status::{ApiError, ApiResult, Cause};
use crate::Registry;

const DEFAULT_SECONDS: i64 = 3600;
const MIN_SECONDS: i64 = 600;
const MAX_SECONDS: i64 = 1 << 32;

fn invalid(name: &str, field: &str, message: String) -> ApiError {
    ApiError::invalid(
        "authentication.k8s.io",
        "TokenRequest",
        "tokenrequests",
        name,
        vec![Cause {
            reason: "FieldValueInvalid",
            message,
            field: field.into(),
        }],
    )
}

fn find(plural: &str) -> &'static crate::resources::ResourceType {
    crate::resources::find("", "v1", plural).expect("core resources are served")
}

/// Issues the token `request` asks for ServiceAccount `name` in
/// `namespace`; the TokenRequest with its status.
pub async fn create(
    registry: &Registry,
    namespace: &str,
    name: &str,
    request: Value,
) -> ApiResult<Value> {
    let issuer = registry.token_issuer().ok_or_else(|| {
        ApiError::unavailable(
            "this API server has no service-account signing key, so it cannot issue tokens",
        )
    })?;
    let spec = &request["spec"];
    let audiences = super::service_account::audiences_of(spec);
    let seconds = match &spec["expirationSeconds"] {
        Value::Null => DEFAULT_SECONDS,
        value => value.as_i64().ok_or_else(|| {
            invalid(
                name,
                "spec.expirationSeconds",
                format!("Invalid value: {value}: must be a number of seconds"),
            )
        })?,
    };
    if seconds < MIN_SECONDS {
        return Err(invalid(
            name,
            "spec.expirationSeconds",
            format!("Invalid value: {seconds}: may not specify a duration less than 10 minutes"),
        ));
    }
    if seconds > MAX_SECONDS {
        return Err(invalid(
            name,
            "spec.expirationSeconds",
            format!(
                "Invalid value: {seconds}: may not specify a duration larger than 2^32 seconds"
            ),
        ));
    }
    let accounts = Target {
        resource: find("serviceaccounts"),
        namespace: Some(namespace),
    };
    let account = registry.get(&accounts, name).await?;
    let bound = &spec["boundObjectRef"];
    let pod = match bound["kind"].as_str() {
        None | Some("") => None,
        Some("Pod") => {
            let pod_name = bound["name"].as_str().unwrap_or("");
            let pods = Target {
                resource: find("pods"),
                namespace: Some(namespace),
            };
            let pod = registry.get(&pods, pod_name).await?;
            let uid = pod["metadata"]["uid"].as_str().unwrap_or("").to_string();
            if let Some(wanted) = bound["uid"].as_str().filter(|u| !u.is_empty()) {
                if wanted != uid {
                    return Err(ApiError::conflict(
                        "",
                        "pods",
                        pod_name,
                        &format!("the UID in the bound object reference ({wanted}) does not match the UID in record ({uid}); the object might have been deleted and then recreated"),
                    ));
                }
            }
            Some((pod_name.to_string(), uid))
        }
        Some(other) => {
            return Err(invalid(
                name,
                "spec.boundObjectRef.kind",
                format!("Unsupported value: \"{other}\": supported values: \"Pod\""),
            ))
        }
    };
    let now = jiff::Timestamp::now();
    let claims = Claims {
        namespace: namespace.to_string(),
        account: name.to_string(),
        account_uid: account["metadata"]["uid"]
            .as_str()
            .unwrap_or("")
            .to_string(),
        audiences: audiences.clone(),
        issued_at: now.as_second(),
        expires_at: now.as_second() + seconds,
        pod,
    };
    let token = issuer.sign(&claims).map_err(ApiError::internal)?;
    let expires = jiff::Timestamp::from_second(claims.expires_at)
        .map(|t| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
        .unwrap_or_default();
    let mut spec = json!({"audiences": audiences, "expirationSeconds": seconds});
    if bound.is_object() {
        spec["boundObjectRef"] = bound.clone();
    }
    Ok(json!({
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "creationTimestamp": now.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
        },
        "spec": spec,
        "status": {"token": token, "expirationTimestamp": expires},
    }))
}
