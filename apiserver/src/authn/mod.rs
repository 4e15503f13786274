//! Authentication: who a request comes from, as kube-apiserver finds it.
//! In order: the transport (the loopback plain-HTTP port, when asked for,
//! is trusted as the cluster's administrator, as kube-apiserver's old
//! insecure port was), a client certificate the cluster CA signed (user
//! from its CN, groups from its O), then a bearer token (a static token
//! from `--token-auth-file`, or a ServiceAccount token). Every
//! authenticated user is also in `system:authenticated`.
//!
//! A request with no credentials is `system:anonymous` only on the health
//! checks and `/version`; anywhere else it is 401 Unauthorized, as is a
//! request whose token is not valid.

pub mod service_account;
pub mod token_file;
pub mod token_request;
pub mod token_review;
pub mod x509;

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::header::AUTHORIZATION;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

pub use token_file::TokenFile;

use crate::request_info::is_health_check;
use crate::status::ApiError;
use crate::user::UserInfo;

/// The group every authenticated user belongs to.
pub const AUTHENTICATED: &str = "system:authenticated";
/// The group whose members may do anything, authorization unasked.
pub const MASTERS: &str = "system:masters";

/// How a request reached the server, put in its extensions by the
/// connection that carried it.
#[derive(Debug, Clone)]
pub enum Transport {
    /// The plain-HTTP loopback port: trusted as the administrator.
    Insecure,
    /// TLS, with the user of the client certificate if one was presented
    /// and the cluster CA signed it.
    Tls { client: Option<Arc<UserInfo>> },
    /// A client in the server's own process, made for this user (see
    /// [`crate::serving::InProcess`]).
    InProcess { user: Arc<UserInfo> },
}

/// The credentials the server accepts beyond client certificates.
#[derive(Debug, Clone, Default)]
pub struct Authenticator {
    pub tokens: TokenFile,
    /// ServiceAccount tokens, when the server has a signing key.
    pub service_accounts: Option<ServiceAccountTokens>,
}

/// Checks ServiceAccount tokens: the signature, expiry and audience, then
/// that the account (and the pod it is bound to) still exist.
#[derive(Clone)]
pub struct ServiceAccountTokens {
    pub issuer: Arc<service_account::TokenIssuer>,
    pub registry: crate::Registry,
}

impl std::fmt::Debug for ServiceAccountTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServiceAccountTokens")
            .field("issuer", &self.issuer)
            .finish()
    }
}

impl ServiceAccountTokens {
    /// The user of `token`, or why it is not valid.
    pub async fn authenticate(&self, token: &str) -> Result<UserInfo, String> {
        self.authenticate_for(token, &[service_account::ISSUER])
            .await
    }

    /// The user of `token` if it is for one of `audiences`.
    pub async fn authenticate_for(
        &self,
        token: &str,
        audiences: &[&str],
    ) -> Result<UserInfo, String> {
        let now = jiff::Timestamp::now().as_second();
        let claims = self.issuer.verify(token, audiences, now)?;
        let namespace = Some(claims.namespace.as_str());
        let live_uid = |plural: &'static str, name: String| {
            let registry = self.registry.clone();
            async move {
                let resource =
                    crate::resources::find("", "v1", plural).expect("core resources are served");
                let target = crate::registry::Target {
                    resource,
                    namespace,
                };
                // The watch cache is enough: a deletion reaches it at once.
                registry
                    .get_at(&target, &name, "0")
                    .await
                    .ok()
                    .and_then(|o| o["metadata"]["uid"].as_str().map(String::from))
            }
        };
        if live_uid("serviceaccounts", claims.account.clone())
            .await
            .as_deref()
            != Some(claims.account_uid.as_str())
        {
            return Err(format!(
                "the service account {}/{} no longer exists",
                claims.namespace, claims.account
            ));
        }
        if let Some((pod, uid)) = &claims.pod {
            if live_uid("pods", pod.clone()).await.as_deref() != Some(uid.as_str()) {
                return Err(format!(
                    "the pod {}/{pod} no longer exists",
                    claims.namespace
                ));
            }
        }
        Ok(claims.user())
    }
}

/// Whether anonymous requests may reach `path`: the health checks and
/// `/version`, which load balancers and probes ask without credentials.
pub fn anonymous_allowed(path: &str) -> bool {
    is_health_check(path) || path == "/version" || path == "/version/"
}

/// The user of the plain-HTTP loopback port.
pub fn insecure_user() -> UserInfo {
    UserInfo {
        name: "system:unsecured".into(),
        groups: vec![MASTERS.into(), AUTHENTICATED.into()],
    }
}

/// What a request carries that names its user: how it came, and its
/// `Authorization` header.
pub struct Credentials {
    pub transport: Option<Transport>,
    pub authorization: Option<String>,
}

impl Credentials {
    pub fn of(request: &Request) -> Credentials {
        Credentials {
            transport: request.extensions().get::<Transport>().cloned(),
            authorization: request
                .headers()
                .get(AUTHORIZATION)
                .map(|h| h.to_str().unwrap_or("").to_string()),
        }
    }
}

impl Authenticator {
    /// The user `credentials` name; `Ok(None)` for a request with no
    /// credentials, `Err` for credentials that are not valid.
    pub async fn authenticate(
        &self,
        credentials: &Credentials,
    ) -> Result<Option<UserInfo>, ApiError> {
        match &credentials.transport {
            Some(Transport::Insecure) => return Ok(Some(insecure_user())),
            Some(Transport::Tls {
                client: Some(client),
            })
            | Some(Transport::InProcess { user: client }) => {
                return Ok(Some(with_authenticated(client.as_ref().clone())))
            }
            _ => {}
        }
        let Some(header) = &credentials.authorization else {
            return Ok(None);
        };
        let token = header
            .split_once(' ')
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .map(|(_, token)| token.trim())
            .filter(|t| !t.is_empty());
        let Some(token) = token else {
            // Basic authentication and other schemes are not supported.
            return Err(unauthorized());
        };
        if let Some(user) = self.tokens.user(token) {
            return Ok(Some(with_authenticated(user.clone())));
        }
        if let Some(accounts) = &self.service_accounts {
            if service_account::TokenIssuer::is_jwt(token) {
                return match accounts.authenticate(token).await {
                    Ok(user) => Ok(Some(with_authenticated(user))),
                    Err(why) => {
                        tracing::debug!(why, "a service account token was refused");
                        Err(unauthorized())
                    }
                };
            }
        }
        Err(unauthorized())
    }
}

pub(crate) fn with_authenticated(mut user: UserInfo) -> UserInfo {
    if !user.groups.iter().any(|g| g == AUTHENTICATED) {
        user.groups.push(AUTHENTICATED.into());
    }
    user
}

/// 401, with kube-apiserver's message.
pub fn unauthorized() -> ApiError {
    ApiError::new(401, "Unauthorized", "Unauthorized")
}

/// The middleware: puts the request's [`UserInfo`] in its extensions, or
/// answers 401.
pub async fn authenticate(
    State(authenticator): State<Arc<Authenticator>>,
    mut request: Request,
    next: Next,
) -> Response {
    let credentials = Credentials::of(&request);
    let user = match authenticator.authenticate(&credentials).await {
        Ok(Some(user)) => user,
        Ok(None) if anonymous_allowed(request.uri().path()) => UserInfo::anonymous(),
        Ok(None) | Err(_) => return unauthorized().into_response(),
    };
    request.extensions_mut().insert(user);
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;

    fn request(path: &str, token: Option<&str>, transport: Option<Transport>) -> Request {
        let mut builder = axum::http::Request::builder().uri(path);
        if let Some(token) = token {
            builder = builder.header(AUTHORIZATION, format!("Bearer {token}"));
        }
        let mut request = builder.body(Body::empty()).unwrap();
        if let Some(transport) = transport {
            request.extensions_mut().insert(transport);
        }
        request
    }

    fn authenticator() -> Authenticator {
        Authenticator {
            tokens: TokenFile::parse("s3cret,alice,1001,\"dev,ops\"\n").unwrap(),
            service_accounts: None,
        }
    }

    async fn user_of(auth: &Authenticator, request: Request) -> Result<Option<UserInfo>, ApiError> {
        auth.authenticate(&Credentials::of(&request)).await
    }

    #[tokio::test]
    async fn tokens_certificates_and_the_insecure_port_each_name_a_user() {
        let auth = authenticator();
        let alice = user_of(&auth, request("/api", Some("s3cret"), None))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(alice.name, "alice");
        assert_eq!(alice.groups, ["dev", "ops", AUTHENTICATED]);

        let cert_user = Arc::new(UserInfo {
            name: "bob".into(),
            groups: vec!["qa".into()],
        });
        let tls = Transport::Tls {
            client: Some(cert_user),
        };
        let bob = user_of(&auth, request("/api", None, Some(tls)))
            .await
            .unwrap()
            .unwrap();
        assert_eq!((bob.name.as_str(), bob.groups.len()), ("bob", 2));

        let admin = user_of(&auth, request("/api", None, Some(Transport::Insecure)))
            .await
            .unwrap()
            .unwrap();
        assert!(admin.groups.iter().any(|g| g == MASTERS));
    }

    #[tokio::test]
    async fn a_wrong_token_is_refused_and_no_credentials_is_nobody() {
        let auth = authenticator();
        let wrong = user_of(&auth, request("/api", Some("guess"), None)).await;
        assert_eq!(wrong.unwrap_err().code, 401);
        let tls = Some(Transport::Tls { client: None });
        let none = user_of(&auth, request("/api", None, tls)).await;
        assert_eq!(none.unwrap(), None);
        assert!(anonymous_allowed("/healthz"));
        assert!(anonymous_allowed("/readyz/ping"));
        assert!(anonymous_allowed("/version"));
        assert!(!anonymous_allowed("/api"));
        assert!(!anonymous_allowed("/healthzfoo"));
    }
}
