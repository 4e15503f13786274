//! Delegated authentication and authorization, as a Kubernetes
//! component's secure port does them: a client certificate of the client
//! CA names its user (CN) and groups (O); a bearer token is asked about
//! with a TokenReview; what a user may do is asked with a
//! SubjectAccessReview. Answers are cached for a while, each review a
//! request to the API server otherwise.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};
use x509_parser::prelude::{FromDer, X509Certificate};

/// How long a review's answer is used (kube's
/// `--authentication-token-webhook-cache-ttl` and
/// `--authorization-webhook-cache-*-ttl` defaults).
pub const CACHE_TTL: Duration = Duration::from_secs(10);

/// Answers kept at most per cache; expired ones go first.
const CACHE_LIMIT: usize = 4096;

/// Who made a request.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct User {
    pub name: String,
    pub groups: Vec<String>,
    pub uid: Option<String>,
}

/// The user a client certificate names; `None` when it cannot be read or
/// has no common name.
pub fn user_of_certificate(der: &[u8]) -> Option<User> {
    let (_, cert) = X509Certificate::from_der(der).ok()?;
    let subject = cert.subject();
    let name = subject
        .iter_common_name()
        .next()
        .and_then(|cn| cn.as_str().ok())?
        .to_string();
    if name.is_empty() {
        return None;
    }
    let groups = subject
        .iter_organization()
        .filter_map(|o| o.as_str().ok())
        .map(String::from)
        .collect();
    Some(User {
        name,
        groups,
        uid: None,
    })
}

/// What a request asks to do, as a SubjectAccessReview names it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Attributes {
    /// A path that is not a resource (`/metrics`).
    NonResource { verb: String, path: String },
    /// A resource, e.g. the kubelet's `nodes/metrics` of its node.
    Resource {
        verb: String,
        group: String,
        resource: String,
        subresource: String,
        namespace: String,
        name: String,
    },
}

impl Attributes {
    fn spec(&self, user: &User) -> SubjectAccessReviewSpec {
        let mut spec = SubjectAccessReviewSpec {
            user: Some(user.name.clone()),
            groups: Some(user.groups.clone()),
            uid: user.uid.clone(),
            ..Default::default()
        };
        let given = |s: &String| (!s.is_empty()).then(|| s.clone());
        match self {
            Attributes::NonResource { verb, path } => {
                spec.non_resource_attributes = Some(NonResourceAttributes {
                    path: Some(path.clone()),
                    verb: Some(verb.clone()),
                });
            }
            Attributes::Resource {
                verb,
                group,
                resource,
                subresource,
                namespace,
                name,
            } => {
                spec.resource_attributes = Some(ResourceAttributes {
                    verb: Some(verb.clone()),
                    group: Some(group.clone()),
                    resource: Some(resource.clone()),
                    subresource: given(subresource),
                    namespace: given(namespace),
                    name: given(name),
                    ..Default::default()
                });
            }
        }
        spec
    }
}

/// Why a review could not be answered.
#[derive(Debug, thiserror::Error)]
pub enum ReviewError {
    #[error("the API server did not answer the {review}: {source}")]
    Api {
        review: &'static str,
        #[source]
        source: kube::Error,
    },
}

/// A cache of answers, each for [`CACHE_TTL`].
struct Cache<K, V> {
    entries: Mutex<HashMap<K, (Instant, V)>>,
    ttl: Duration,
}

impl<K: std::hash::Hash + Eq, V: Clone> Cache<K, V> {
    fn new(ttl: Duration) -> Self {
        Cache {
            entries: Mutex::new(HashMap::new()),
            ttl,
        }
    }

    fn get(&self, key: &K) -> Option<V> {
        let entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries
            .get(key)
            .filter(|(at, _)| at.elapsed() < self.ttl)
            .map(|(_, v)| v.clone())
    }

    fn put(&self, key: K, value: V) {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        if entries.len() >= CACHE_LIMIT {
            let ttl = self.ttl;
            entries.retain(|_, (at, _)| at.elapsed() < ttl);
            if entries.len() >= CACHE_LIMIT {
                entries.clear();
            }
        }
        entries.insert(key, (Instant::now(), value));
    }
}

/// What a SubjectAccessReview said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub allowed: bool,
    /// The authorizer's reason, if it gave one.
    pub reason: String,
}

/// The component's delegated authenticator and authorizer, through its
/// client of the API server.
pub struct Delegated {
    client: kube::Client,
    tokens: Cache<String, Option<User>>,
    decisions: Cache<(User, Attributes), Decision>,
}

impl Delegated {
    pub fn new(client: kube::Client) -> Delegated {
        Delegated::with_ttl(client, CACHE_TTL)
    }

    pub fn with_ttl(client: kube::Client, ttl: Duration) -> Delegated {
        Delegated {
            client,
            tokens: Cache::new(ttl),
            decisions: Cache::new(ttl),
        }
    }

    /// The user of a bearer token, `None` when the API server does not
    /// know it.
    pub async fn authenticate_token(&self, token: &str) -> Result<Option<User>, ReviewError> {
        if let Some(user) = self.tokens.get(&token.to_string()) {
            return Ok(user);
        }
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: Some(token.to_string()),
                audiences: None,
            },
            ..Default::default()
        };
        let answer = Api::<TokenReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await
            .map_err(|source| ReviewError::Api {
                review: "TokenReview",
                source,
            })?;
        let user = answer
            .status
            .filter(|s| s.authenticated == Some(true))
            .and_then(|s| s.user)
            .and_then(|u| {
                let name = u.username.filter(|n| !n.is_empty())?;
                Some(User {
                    name,
                    groups: u.groups.unwrap_or_default(),
                    uid: u.uid.filter(|uid| !uid.is_empty()),
                })
            });
        self.tokens.put(token.to_string(), user.clone());
        Ok(user)
    }

    /// Whether `user` may `verb` the non-resource `path`.
    pub async fn authorize(
        &self,
        user: &User,
        verb: &str,
        path: &str,
    ) -> Result<Decision, ReviewError> {
        let attributes = Attributes::NonResource {
            verb: verb.to_string(),
            path: path.to_string(),
        };
        self.authorize_attributes(user, &attributes).await
    }

    /// Whether `user` may do what `attributes` say.
    pub async fn authorize_attributes(
        &self,
        user: &User,
        attributes: &Attributes,
    ) -> Result<Decision, ReviewError> {
        let key = (user.clone(), attributes.clone());
        if let Some(decision) = self.decisions.get(&key) {
            return Ok(decision);
        }
        let review = SubjectAccessReview {
            spec: attributes.spec(user),
            ..Default::default()
        };
        let answer = Api::<SubjectAccessReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await
            .map_err(|source| ReviewError::Api {
                review: "SubjectAccessReview",
                source,
            })?;
        let status = answer.status.unwrap_or_default();
        let decision = Decision {
            allowed: status.allowed && status.denied != Some(true),
            reason: status.reason.unwrap_or_default(),
        };
        self.decisions.put(key, decision.clone());
        Ok(decision)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_certificate_names_its_user_by_common_name_and_groups_by_organization() {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "system:kube-scheduler");
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, "system:monitoring");
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        let user = user_of_certificate(cert.der()).unwrap();
        assert_eq!(user.name, "system:kube-scheduler");
        assert_eq!(user.groups, ["system:monitoring"]);
        assert!(user_of_certificate(b"not a certificate").is_none());
    }

    #[test]
    fn resource_attributes_leave_out_what_is_empty() {
        let user = User {
            name: "prometheus".into(),
            groups: vec!["system:monitoring".into()],
            uid: None,
        };
        let spec = Attributes::Resource {
            verb: "get".into(),
            group: String::new(),
            resource: "nodes".into(),
            subresource: "metrics".into(),
            namespace: String::new(),
            name: "n1".into(),
        }
        .spec(&user);
        let attributes = spec.resource_attributes.unwrap();
        assert_eq!(attributes.resource.as_deref(), Some("nodes"));
        assert_eq!(attributes.subresource.as_deref(), Some("metrics"));
        assert_eq!(attributes.name.as_deref(), Some("n1"));
        assert_eq!(attributes.namespace, None);
        assert!(spec.non_resource_attributes.is_none());
        assert_eq!(spec.groups.unwrap(), ["system:monitoring"]);
    }

    #[test]
    fn cached_answers_expire() {
        let cache = Cache::new(Duration::from_millis(20));
        cache.put("a", 1);
        assert_eq!(cache.get(&"a"), Some(1));
        std::thread::sleep(Duration::from_millis(30));
        assert_eq!(cache.get(&"a"), None);
    }
}
