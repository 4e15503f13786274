//! Authorization: whether the request's user may do what it asks. Members
//! of `system:masters` may do anything; everyone else needs an RBAC rule
//! (rbac.rs) bound to their user, a group of theirs, or their
//! ServiceAccount. A denied request is 403 Forbidden with Kubernetes'
//! message naming the user, verb and resource.
//!
//! The rules are compiled from the watch caches of the four RBAC
//! resources and compiled again when any of them changes. A request that
//! would be denied first waits for those caches to catch up with the
//! store, so a binding just created is honoured by the next request.

pub mod bootstrap;
pub mod escalation;
pub mod node;
pub mod rbac;
pub mod review;

use std::sync::{Arc, Mutex};

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

pub use rbac::{Attributes, ResourceAttributes};

use crate::cache::Freshness;
use crate::registry::{ListOptions, Target};
use crate::request_info::RequestInfo;
use crate::resources::ResourceType;
use crate::status::{ApiError, ApiResult};
use crate::user::UserInfo;
use crate::Registry;

/// The group of the RBAC resources.
pub const RBAC_GROUP: &str = "rbac.authorization.k8s.io";
/// The four RBAC resources, in the order the index takes them.
const RBAC_RESOURCES: [&str; 4] = [
    "roles",
    "clusterroles",
    "rolebindings",
    "clusterrolebindings",
];
/// How long a denial waits for the RBAC caches to catch up.
const CATCH_UP_WAIT: std::time::Duration = std::time::Duration::from_secs(3);

/// How requests are authorized.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Mode {
    /// RBAC (kube-apiserver's `--authorization-mode=RBAC`).
    #[default]
    Rbac,
    /// Every authenticated request is allowed (`AlwaysAllow`).
    AlwaysAllow,
}

impl std::str::FromStr for Mode {
    type Err = String;
    fn from_str(text: &str) -> Result<Mode, String> {
        match text {
            "RBAC" => Ok(Mode::Rbac),
            "AlwaysAllow" => Ok(Mode::AlwaysAllow),
            _ => Err(format!(
                "unknown authorization mode {text:?}: use RBAC or AlwaysAllow"
            )),
        }
    }
}

impl Attributes {
    /// What a request asks, from its path and method.
    pub fn of_request(info: &RequestInfo, path: &str) -> Attributes {
        Attributes {
            verb: info.verb.clone(),
            resource: info.resource.as_ref().map(|r| ResourceAttributes {
                group: r.group.clone(),
                resource: r.resource.clone(),
                subresource: r.subresource.clone().unwrap_or_default(),
                namespace: r.namespace.clone().unwrap_or_default(),
                name: r.name.clone().unwrap_or_default(),
            }),
            path: path.to_string(),
        }
    }
}

/// The compiled rules and the cache generations they were compiled at.
struct Compiled {
    generations: [u64; 4],
    index: rbac::Index,
}

pub struct Authorizer {
    pub mode: Mode,
    registry: Registry,
    compiled: Mutex<Option<Arc<Compiled>>>,
    /// One compilation at a time.
    compiling: tokio::sync::Mutex<()>,
}

impl Authorizer {
    pub fn new(registry: Registry, mode: Mode) -> Authorizer {
        Authorizer {
            mode,
            registry,
            compiled: Mutex::new(None),
            compiling: tokio::sync::Mutex::new(()),
        }
    }

    fn resources() -> [&'static ResourceType; 4] {
        RBAC_RESOURCES.map(|plural| {
            crate::resources::find(RBAC_GROUP, "v1", plural).expect("the RBAC resources are served")
        })
    }

    fn generations(&self) -> [u64; 4] {
        Self::resources().map(|r| self.registry.cache.resource(r, 0).generation())
    }

    /// The rules as the caches hold them now.
    async fn compiled(&self) -> ApiResult<Arc<Compiled>> {
        let generations = self.generations();
        let current = |this: &Self| {
            this.compiled
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone()
                .filter(|c| c.generations == generations)
        };
        if let Some(compiled) = current(self) {
            return Ok(compiled);
        }
        let _one = self.compiling.lock().await;
        if let Some(compiled) = current(self) {
            return Ok(compiled);
        }
        let mut lists: Vec<Vec<serde_json::Value>> = Vec::new();
        for resource in Self::resources() {
            let target = Target {
                resource,
                namespace: None,
            };
            let options = ListOptions {
                resource_version: "0".into(),
                ..ListOptions::default()
            };
            let mut list = self.registry.list(&target, &options).await?;
            lists.push(match list["items"].take() {
                serde_json::Value::Array(items) => items,
                _ => Vec::new(),
            });
        }
        let index = rbac::Index::build(&lists[0], &lists[1], &lists[2], &lists[3]);
        let compiled = Arc::new(Compiled { generations, index });
        *self.compiled.lock().unwrap_or_else(|e| e.into_inner()) = Some(compiled.clone());
        Ok(compiled)
    }

    /// Whether `user` may do what `attributes` ask.
    pub async fn allows(&self, user: &UserInfo, attributes: &Attributes) -> ApiResult<bool> {
        if self.mode == Mode::AlwaysAllow || user.in_system_masters() {
            return Ok(true);
        }
        if self.compiled().await?.index.allows(user, attributes) {
            return Ok(true);
        }
        // Before denying: are the caches behind the store (a binding
        // written a moment ago)?
        for resource in Self::resources() {
            self.registry
                .cache
                .fresh(resource, Freshness::Consistent, CATCH_UP_WAIT)
                .await?;
        }
        Ok(self.compiled().await?.index.allows(user, attributes))
    }

    /// The rules of a role (`kind` ClusterRole, or Role in `namespace`),
    /// aggregated ones with what they gather; `None` if it does not exist.
    pub async fn role_rules(
        &self,
        kind: &str,
        namespace: &str,
        name: &str,
    ) -> ApiResult<Option<Arc<[rbac::Rule]>>> {
        if let Some(rules) = self
            .compiled()
            .await?
            .index
            .role_rules(kind, namespace, name)
        {
            return Ok(Some(rules));
        }
        // Perhaps written a moment ago.
        for resource in Self::resources() {
            self.registry
                .cache
                .fresh(resource, Freshness::Consistent, CATCH_UP_WAIT)
                .await?;
        }
        Ok(self
            .compiled()
            .await?
            .index
            .role_rules(kind, namespace, name))
    }

    /// The rules that apply to `user` in `namespace`, for
    /// SelfSubjectRulesReview.
    pub async fn rules_for(&self, user: &UserInfo, namespace: &str) -> ApiResult<Vec<rbac::Rule>> {
        let compiled = self.compiled().await?;
        let mut rules: Vec<rbac::Rule> = Vec::new();
        if user.in_system_masters() || self.mode == Mode::AlwaysAllow {
            rules.push(rbac::Rule::from_json(&serde_json::json!(
                {"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]})));
            rules.push(rbac::Rule::from_json(&serde_json::json!(
                {"verbs": ["*"], "nonResourceURLs": ["*"]})));
        }
        for rule in compiled.index.rules_for(user, namespace) {
            if !rules.contains(rule) {
                rules.push(rule.clone());
            }
        }
        Ok(rules)
    }
}

/// 403 with Kubernetes' message: `pods "web" is forbidden: User "alice"
/// cannot delete resource "pods" in API group "" in the namespace
/// "default"`.
pub fn forbidden(user: &UserInfo, attributes: &Attributes) -> ApiError {
    let Some(r) = &attributes.resource else {
        return ApiError::new(
            403,
            "Forbidden",
            format!(
                "forbidden: User \"{}\" cannot {} path \"{}\"",
                user.name, attributes.verb, attributes.path
            ),
        );
    };
    let qualified = if r.group.is_empty() {
        r.resource.clone()
    } else {
        format!("{}.{}", r.resource, r.group)
    };
    let object = if r.name.is_empty() {
        qualified
    } else {
        format!("{qualified} \"{}\"", r.name)
    };
    let resource = if r.subresource.is_empty() {
        r.resource.clone()
    } else {
        format!("{}/{}", r.resource, r.subresource)
    };
    let scope = if r.namespace.is_empty() {
        "at the cluster scope".to_string()
    } else {
        format!("in the namespace \"{}\"", r.namespace)
    };
    ApiError::forbidden(
        &r.group,
        &r.resource,
        &r.name,
        format!(
            "{object} is forbidden: User \"{}\" cannot {} resource \"{resource}\" in API group \"{}\" {scope}",
            user.name, attributes.verb, r.group
        ),
    )
}

/// The user a request asks to act as (`Impersonate-User` and
/// `Impersonate-Group` headers, as `kubectl --as` and `--as-group` send),
/// if its own user may impersonate them; 403 if not.
async fn impersonated(
    authorizer: &Authorizer,
    user: &UserInfo,
    headers: &axum::http::HeaderMap,
) -> ApiResult<Option<UserInfo>> {
    let Some(name) = headers.get("impersonate-user") else {
        if headers.contains_key("impersonate-group") {
            return Err(ApiError::bad_request(
                "Impersonate-Group is given without Impersonate-User",
            ));
        }
        return Ok(None);
    };
    let name = name
        .to_str()
        .map_err(|_| ApiError::bad_request("Impersonate-User is not text"))?
        .to_string();
    let groups: Vec<String> = headers
        .get_all("impersonate-group")
        .iter()
        .filter_map(|g| g.to_str().ok())
        .map(String::from)
        .collect();
    let mut asked = vec![match name.strip_prefix("system:serviceaccount:") {
        Some(account) => {
            let (namespace, account) = account.split_once(':').unwrap_or(("", account));
            impersonation("serviceaccounts", namespace, account)
        }
        None => impersonation("users", "", &name),
    }];
    asked.extend(groups.iter().map(|g| impersonation("groups", "", g)));
    for attributes in &asked {
        if !authorizer.allows(user, attributes).await? {
            return Err(forbidden(user, attributes));
        }
    }
    let mut groups = groups;
    if name != "system:anonymous" && !groups.iter().any(|g| g == crate::authn::AUTHENTICATED) {
        groups.push(crate::authn::AUTHENTICATED.into());
    }
    Ok(Some(UserInfo { name, groups }))
}

fn impersonation(resource: &str, namespace: &str, name: &str) -> Attributes {
    Attributes {
        verb: "impersonate".into(),
        resource: Some(ResourceAttributes {
            resource: resource.into(),
            namespace: namespace.into(),
            name: name.into(),
            ..Default::default()
        }),
        path: String::new(),
    }
}

/// The middleware: lets the request through (as the user it impersonates,
/// if it may), or answers 403.
pub async fn authorize(
    State(authorizer): State<Arc<Authorizer>>,
    mut request: Request,
    next: Next,
) -> Response {
    let mut user = request
        .extensions()
        .get::<UserInfo>()
        .cloned()
        .unwrap_or_else(UserInfo::anonymous);
    match impersonated(&authorizer, &user, request.headers()).await {
        Ok(Some(other)) => {
            request.extensions_mut().insert(other.clone());
            user = other;
        }
        Ok(None) => {}
        Err(err) => return err.into_response(),
    }
    let info = RequestInfo::of_request(&request);
    let attributes = Attributes::of_request(&info, request.uri().path());
    match authorizer.allows(&user, &attributes).await {
        Ok(true) => match node::restrict(&authorizer.registry, &user, &attributes).await {
            Some(refused) => refused.into_response(),
            // Admission reads the user from the task.
            None => crate::user::CURRENT.scope(user, next.run(request)).await,
        },
        Ok(false) => forbidden(&user, &attributes).into_response(),
        Err(err) => {
            tracing::warn!(error = %err, "authorization could not read the RBAC rules");
            ApiError::internal(format!("authorization failed: {}", err.message)).into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::Method;

    fn attributes(method: Method, uri: &str) -> Attributes {
        let uri: axum::http::Uri = uri.parse().unwrap();
        Attributes::of_request(&RequestInfo::of(&method, &uri), uri.path())
    }

    #[test]
    fn denials_name_the_user_verb_resource_and_scope() {
        let alice = UserInfo {
            name: "alice".into(),
            groups: vec![],
        };
        let err = forbidden(
            &alice,
            &attributes(Method::DELETE, "/api/v1/namespaces/default/pods/web"),
        );
        assert_eq!((err.code, err.reason), (403, "Forbidden"));
        assert_eq!(
            err.message,
            "pods \"web\" is forbidden: User \"alice\" cannot delete resource \"pods\" in API group \"\" in the namespace \"default\""
        );
        let err = forbidden(
            &alice,
            &attributes(Method::GET, "/apis/apps/v1/deployments"),
        );
        assert_eq!(
            err.message,
            "deployments.apps is forbidden: User \"alice\" cannot list resource \"deployments\" in API group \"apps\" at the cluster scope"
        );
        let err = forbidden(
            &alice,
            &attributes(Method::GET, "/api/v1/namespaces/d/pods/p/log"),
        );
        assert!(
            err.message.contains("cannot get resource \"pods/log\""),
            "{}",
            err.message
        );
        let err = forbidden(&alice, &attributes(Method::GET, "/metrics"));
        assert_eq!(
            err.message,
            "forbidden: User \"alice\" cannot get path \"/metrics\""
        );
        let status = forbidden(&alice, &attributes(Method::GET, "/api/v1/nodes/n1")).to_status();
        assert_eq!(status["details"]["kind"], "nodes");
        assert_eq!(status["details"]["name"], "n1");
    }

    #[test]
    fn modes_parse_by_kube_apiserver_names() {
        assert_eq!("RBAC".parse::<Mode>(), Ok(Mode::Rbac));
        assert_eq!("AlwaysAllow".parse::<Mode>(), Ok(Mode::AlwaysAllow));
        assert!("Node".parse::<Mode>().is_err());
    }
}
