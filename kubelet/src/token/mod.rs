//! The kubelet's token manager: ServiceAccount tokens for pods'
//! `serviceAccountToken` projections, asked of the TokenRequest API
//! (`POST …/serviceaccounts/NAME/token`, bound to the pod) and kept until
//! they need refreshing — once 80 % of their lifetime has passed or they
//! are older than 24 hours, as Kubernetes' token manager decides. Not for
//! writing them: the projected volume does that.

use std::collections::HashMap;
use std::future::Future;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::PostParams;
use kube::{Api, Client};
use parking_lot::Mutex;

/// A token is refreshed once it is this old, whatever its lifetime.
const MAX_TTL: Duration = Duration::from_secs(24 * 60 * 60);
/// Refreshes are spread over this much so that pods' tokens do not all
/// expire together.
const MAX_JITTER: Duration = Duration::from_secs(10);
/// The shortest lifetime the API issues (and the kubelet asks).
pub const MIN_EXPIRATION_SECONDS: i64 = 600;
/// A projection's lifetime when it names none, as the API defaults it.
pub const DEFAULT_EXPIRATION_SECONDS: i64 = 3600;

/// Which token: the account, its audiences and lifetime, and the pod it
/// is bound to.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TokenKey {
    pub namespace: String,
    pub account: String,
    /// Empty: the API server's own audience.
    pub audiences: Vec<String>,
    pub expiration_seconds: i64,
    pub pod_name: String,
    pub pod_uid: String,
}

/// A token as the API issued it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssuedToken {
    pub token: String,
    pub expires_at: Timestamp,
    /// The lifetime it was issued for.
    pub expiration_seconds: i64,
}

impl IssuedToken {
    fn issued_at(&self) -> Timestamp {
        self.expires_at - SignedDuration::from_secs(self.expiration_seconds)
    }

    fn expired(&self, now: Timestamp) -> bool {
        now >= self.expires_at
    }

    /// Whether the token should be replaced at `now`: older than 24 hours,
    /// or less than a fifth of its lifetime left (both less `jitter`).
    pub fn requires_refresh(&self, now: Timestamp, jitter: Duration) -> bool {
        let jitter = SignedDuration::try_from(jitter).unwrap_or_default();
        let max_ttl = SignedDuration::try_from(MAX_TTL).unwrap_or_default();
        if now > self.issued_at() + max_ttl - jitter {
            return true;
        }
        let fifth = SignedDuration::from_secs(self.expiration_seconds * 20 / 100);
        now > self.expires_at - fifth - jitter
    }
}

/// Why a token could not be had (and none still valid was kept); the
/// projected volume's setup shows it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    #[error("failed to fetch token: {0}")]
    Fetch(String),
}

/// The tokens of this kubelet's pods, by [`TokenKey`].
pub struct TokenManager {
    client: Client,
    cache: Mutex<HashMap<TokenKey, IssuedToken>>,
}

impl TokenManager {
    pub fn new(client: Client) -> TokenManager {
        TokenManager {
            client,
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// The token for `key`: the one kept while it is fresh, else a new one
    /// from the API (or, if the API cannot give one, the one kept while it
    /// has not expired).
    pub async fn service_account_token(&self, key: &TokenKey) -> Result<String, TokenError> {
        let client = self.client.clone();
        let now = Timestamp::now();
        self.token_with(key, now, jitter(), |key| request(client, key))
            .await
    }

    async fn token_with<F, Fut>(
        &self,
        key: &TokenKey,
        now: Timestamp,
        jitter: Duration,
        fetch: F,
    ) -> Result<String, TokenError>
    where
        F: FnOnce(TokenKey) -> Fut,
        Fut: Future<Output = Result<IssuedToken, String>>,
    {
        let kept = {
            let mut cache = self.cache.lock();
            cache.retain(|_, issued| !issued.expired(now));
            cache.get(key).cloned()
        };
        if let Some(kept) = &kept {
            if !kept.requires_refresh(now, jitter) {
                return Ok(kept.token.clone());
            }
        }
        match fetch(key.clone()).await {
            Ok(issued) => {
                let token = issued.token.clone();
                self.cache.lock().insert(key.clone(), issued);
                Ok(token)
            }
            // What is kept has not expired (expired tokens were dropped).
            Err(why) => match kept {
                None => Err(TokenError::Fetch(why)),
                Some(kept) => {
                    tracing::warn!(namespace = %key.namespace, account = %key.account, pod = %key.pod_name, error = %why, "could not refresh a service account token; keeping the one still valid");
                    Ok(kept.token)
                }
            },
        }
    }

    /// Forgets the tokens bound to the pod with `uid`, once it is gone.
    pub fn forget_pod(&self, uid: &str) {
        self.cache.lock().retain(|key, _| key.pod_uid != uid);
    }

    /// How many tokens are kept.
    pub fn len(&self) -> usize {
        self.cache.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn jitter() -> Duration {
    Duration::from_secs_f64(rand::random::<f64>() * MAX_JITTER.as_secs_f64())
}

/// Asks the API for a token bound to the pod.
async fn request(client: Client, key: TokenKey) -> Result<IssuedToken, String> {
    let api: Api<ServiceAccount> = Api::namespaced(client, &key.namespace);
    let request = TokenRequest {
        spec: TokenRequestSpec {
            audiences: key.audiences.clone(),
            expiration_seconds: Some(key.expiration_seconds),
            bound_object_ref: Some(BoundObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                name: Some(key.pod_name.clone()),
                uid: Some(key.pod_uid.clone()),
            }),
        },
        ..Default::default()
    };
    let answer = api
        .create_token_request(&key.account, &PostParams::default(), &request)
        .await
        .map_err(|err| match err {
            kube::Error::Api(status) if !status.message.is_empty() => status.message,
            other => other.to_string(),
        })?;
    let status = answer
        .status
        .filter(|s| !s.token.is_empty())
        .ok_or_else(|| "the TokenRequest was answered without a token".to_string())?;
    Ok(IssuedToken {
        token: status.token,
        expires_at: status.expiration_timestamp.0,
        expiration_seconds: answer
            .spec
            .expiration_seconds
            .unwrap_or(key.expiration_seconds),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(pod_uid: &str) -> TokenKey {
        TokenKey {
            namespace: "default".into(),
            account: "default".into(),
            audiences: Vec::new(),
            expiration_seconds: 3607,
            pod_name: "web".into(),
            pod_uid: pod_uid.into(),
        }
    }

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + seconds).unwrap()
    }

    fn issued(token: &str, issued_at: i64, lifetime: i64) -> IssuedToken {
        IssuedToken {
            token: token.into(),
            expires_at: at(issued_at + lifetime),
            expiration_seconds: lifetime,
        }
    }

    #[test]
    fn a_token_is_refreshed_after_four_fifths_of_its_life_or_a_day() {
        let token = issued("t", 0, 1000);
        assert!(!token.requires_refresh(at(0), Duration::ZERO));
        assert!(!token.requires_refresh(at(800), Duration::ZERO));
        assert!(token.requires_refresh(at(801), Duration::ZERO));
        // The jitter brings it forward.
        assert!(token.requires_refresh(at(795), Duration::from_secs(10)));
        let long = issued("t", 0, 7 * 24 * 3600);
        assert!(!long.requires_refresh(at(24 * 3600), Duration::ZERO));
        assert!(long.requires_refresh(at(24 * 3600 + 1), Duration::ZERO));
    }

    #[tokio::test]
    async fn a_fresh_token_is_kept_and_a_stale_one_replaced() {
        let client =
            kube::Client::try_from(kube::Config::new("http://127.0.0.1:9".parse().unwrap()))
                .unwrap();
        let manager = TokenManager::new(client);
        let fetched = std::sync::atomic::AtomicUsize::new(0);
        let fetch = |token: &'static str, issued_at: i64| {
            fetched.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let answer = issued(token, issued_at, 1000);
            move |_key: TokenKey| async move { Ok::<_, String>(answer) }
        };
        let got = manager
            .token_with(&key("u1"), at(0), Duration::ZERO, fetch("first", 0))
            .await;
        assert_eq!(got.unwrap(), "first");
        let no_fetch = |_key: TokenKey| async { Err::<IssuedToken, _>("not asked".to_string()) };
        let got = manager
            .token_with(&key("u1"), at(500), Duration::ZERO, no_fetch)
            .await;
        assert_eq!(got.unwrap(), "first", "fresh: kept");
        let got = manager
            .token_with(&key("u1"), at(900), Duration::ZERO, fetch("second", 900))
            .await;
        assert_eq!(got.unwrap(), "second", "stale: replaced");
        assert_eq!(fetched.load(std::sync::atomic::Ordering::SeqCst), 2);

        // The API failing: the kept token while it is valid, then an error.
        let failing = |_key: TokenKey| async { Err::<IssuedToken, _>("API down".to_string()) };
        let got = manager
            .token_with(&key("u1"), at(1750), Duration::ZERO, failing)
            .await;
        assert_eq!(got.unwrap(), "second");
        let got = manager
            .token_with(&key("u1"), at(1900), Duration::ZERO, failing)
            .await;
        assert_eq!(
            got.unwrap_err(),
            TokenError::Fetch("API down".into()),
            "an expired token is dropped, not handed out"
        );

        // Another pod has tokens of its own; a pod gone takes its tokens.
        manager
            .token_with(&key("u2"), at(2000), Duration::ZERO, fetch("other", 2000))
            .await
            .unwrap();
        manager
            .token_with(&key("u3"), at(2000), Duration::ZERO, fetch("third", 2000))
            .await
            .unwrap();
        assert_eq!(manager.len(), 2);
        manager.forget_pod("u2");
        assert_eq!(manager.len(), 1);
    }
}
