//! TokenReview (authentication.k8s.io/v1): another server asks whether a
//! bearer token is valid here, and whose it is — the static tokens and
//! ServiceAccount tokens this server accepts, for the audiences asked (a
//! ServiceAccount token must be for one of them; the API server's own by
//! default). Created and answered at once, never stored; creating one
//! needs `create` on `tokenreviews` (the `system:auth-delegator` role).

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use serde_json::{json, Value};

use super::{with_authenticated, Authenticator};
use crate::status::ApiError;

pub fn router(authenticator: Arc<Authenticator>) -> Router {
    Router::new()
        .route(
            "/apis/authentication.k8s.io/v1/tokenreviews",
            post(token_review),
        )
        .with_state(authenticator)
}

/// The review with its status: who the token is, or that it is not valid.
pub async fn review(authenticator: &Authenticator, mut review: Value) -> Result<Value, ApiError> {
    let token = review["spec"]["token"].as_str().unwrap_or("").to_string();
    if token.is_empty() {
        return Err(ApiError::invalid(
            "authentication.k8s.io",
            "TokenReview",
            "tokenreviews",
            "",
            vec![crate::status::Cause {
                reason: "FieldValueRequired",
                message: "Required value: token is required".into(),
                field: "spec.token".into(),
            }],
        ));
    }
    let audiences = super::service_account::audiences_of(&review["spec"]);
    let wanted: Vec<&str> = audiences.iter().map(String::as_str).collect();
    let user = match authenticator.tokens.user(&token) {
        Some(user) => Ok(with_authenticated(user.clone())),
        None => match &authenticator.service_accounts {
            Some(accounts) => accounts
                .authenticate_for(&token, &wanted)
                .await
                .map(with_authenticated),
            None => Err("the token is not valid".to_string()),
        },
    };
    review["status"] = match user {
        Ok(user) => json!({
            "authenticated": true,
            "user": {"username": user.name, "groups": user.groups},
            "audiences": audiences,
        }),
        Err(why) => json!({"authenticated": false, "error": why}),
    };
    review["metadata"] = json!({"creationTimestamp": null});
    Ok(review)
}

async fn token_review(
    State(authenticator): State<Arc<Authenticator>>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let body: Value = serde_json::from_slice(&body).map_err(|e| {
        ApiError::bad_request(format!("the body is not a TokenReview in JSON: {e}"))
    })?;
    let answered = review(&authenticator, body).await?;
    Ok((
        StatusCode::CREATED,
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        serde_json::to_vec(&answered).unwrap_or_default(),
    )
        .into_response())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::authn::TokenFile;

    #[tokio::test]
    async fn a_static_token_is_reviewed_as_its_user_and_a_wrong_one_is_not() {
        let authenticator = Authenticator {
            tokens: TokenFile::parse("t1,alice,1,qa\n").unwrap(),
            service_accounts: None,
        };
        let ok = review(&authenticator, json!({"spec": {"token": "t1"}}))
            .await
            .unwrap();
        assert_eq!(ok["status"]["authenticated"], true);
        assert_eq!(ok["status"]["user"]["username"], "alice");
        assert_eq!(
            ok["status"]["user"]["groups"],
            json!(["qa", "system:authenticated"])
        );
        let bad = review(&authenticator, json!({"spec": {"token": "t2"}}))
            .await
            .unwrap();
        assert_eq!(bad["status"]["authenticated"], false);
        assert!(review(&authenticator, json!({"spec": {}})).await.is_err());
    }
}
