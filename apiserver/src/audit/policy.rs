//! An audit policy (`audit.k8s.io/v1` Policy): ordered rules, the first
//! that matches a request sets its level. No rule matched: level None.

use serde::Deserialize;

/// How much of a request is recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
pub enum Level {
    /// Nothing.
    None,
    /// Who, what, when and the response code; no bodies.
    Metadata,
    /// Metadata and the request's body.
    Request,
    /// Request and the response's body (not for watches and other streams).
    RequestResponse,
}

impl Level {
    pub fn as_str(self) -> &'static str {
        match self {
            Level::None => "None",
            Level::Metadata => "Metadata",
            Level::Request => "Request",
            Level::RequestResponse => "RequestResponse",
        }
    }
}

/// What a rule matches a request on.
pub struct Attributes<'a> {
    pub user: &'a str,
    pub groups: &'a [String],
    pub verb: &'a str,
    /// None: a non-resource request (`/healthz`, `/version`, …).
    pub resource: Option<ResourceAttributes<'a>>,
    pub path: &'a str,
}

pub struct ResourceAttributes<'a> {
    pub group: &'a str,
    pub resource: &'a str,
    pub subresource: Option<&'a str>,
    pub namespace: Option<&'a str>,
    pub name: Option<&'a str>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Policy {
    api_version: String,
    kind: String,
    #[serde(default)]
    metadata: Option<serde_yaml::Value>,
    #[serde(default)]
    rules: Vec<Rule>,
    /// Stages never recorded (`RequestReceived`, `ResponseStarted`, …).
    #[serde(default)]
    pub omit_stages: Vec<String>,
    #[serde(default)]
    pub omit_managed_fields: bool,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Rule {
    level: Level,
    #[serde(default)]
    users: Vec<String>,
    #[serde(default)]
    user_groups: Vec<String>,
    #[serde(default)]
    verbs: Vec<String>,
    #[serde(default)]
    resources: Vec<GroupResources>,
    #[serde(default)]
    namespaces: Vec<String>,
    #[serde(default, rename = "nonResourceURLs")]
    non_resource_urls: Vec<String>,
    #[serde(default)]
    omit_stages: Vec<String>,
    #[serde(default)]
    omit_managed_fields: Option<bool>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct GroupResources {
    #[serde(default)]
    group: String,
    #[serde(default)]
    resources: Vec<String>,
    #[serde(default)]
    resource_names: Vec<String>,
}

/// What the policy decides for one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub level: Level,
    pub omit_stages: Vec<String>,
    pub omit_managed_fields: bool,
}

/// Writes are recorded at Metadata, and every access to Secrets (whose
/// values must not land in the log); reads of anything else are not.
const DEFAULT_POLICY: &str = r#"
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
  resources:
  - group: ""
    resources: ["secrets", "serviceaccounts/token"]
- level: None
  verbs: ["get", "list", "watch"]
- level: None
  resources:
  - group: ""
    resources: ["events"]
  - group: "events.k8s.io"
    resources: ["events"]
- level: None
  nonResourceURLs: ["/healthz*", "/livez*", "/readyz*", "/version", "/metrics"]
- level: Metadata
"#;

impl Policy {
    pub fn parse(text: &str) -> Result<Policy, String> {
        let policy: Policy =
            serde_yaml::from_str(text).map_err(|e| format!("not an audit Policy: {e}"))?;
        if policy.kind != "Policy"
            || !matches!(
                policy.api_version.as_str(),
                "audit.k8s.io/v1" | "audit.k8s.io/v1beta1"
            )
        {
            return Err(format!(
                "kind {} of {} given; expected Policy of audit.k8s.io/v1",
                policy.kind, policy.api_version
            ));
        }
        let _ = &policy.metadata;
        Ok(policy)
    }

    /// The policy `skiff up` uses when given none.
    pub fn default_policy() -> Policy {
        Policy::parse(DEFAULT_POLICY).expect("the built-in policy parses")
    }

    pub fn decide(&self, request: &Attributes<'_>) -> Decision {
        let rule = self.rules.iter().find(|rule| rule.matches(request));
        let mut omit_stages = self.omit_stages.clone();
        let (level, omit_managed_fields) = match rule {
            Some(rule) => {
                omit_stages.extend(rule.omit_stages.iter().cloned());
                (
                    rule.level,
                    rule.omit_managed_fields.unwrap_or(self.omit_managed_fields),
                )
            }
            None => (Level::None, self.omit_managed_fields),
        };
        Decision {
            level,
            omit_stages,
            omit_managed_fields,
        }
    }
}

impl Rule {
    fn matches(&self, request: &Attributes<'_>) -> bool {
        if !self.users.is_empty() && !self.users.iter().any(|u| u == request.user) {
            return false;
        }
        if !self.user_groups.is_empty()
            && !self
                .user_groups
                .iter()
                .any(|g| request.groups.iter().any(|have| have == g))
        {
            return false;
        }
        if !self.verbs.is_empty() && !self.verbs.iter().any(|v| v == request.verb) {
            return false;
        }
        match &request.resource {
            None => {
                // A rule about resources or namespaces is not about
                // non-resource URLs.
                if !self.resources.is_empty() || !self.namespaces.is_empty() {
                    return false;
                }
                self.non_resource_urls.is_empty()
                    || self
                        .non_resource_urls
                        .iter()
                        .any(|url| url_matches(url, request.path))
            }
            Some(resource) => {
                if !self.non_resource_urls.is_empty() {
                    return false;
                }
                if !self.namespaces.is_empty() {
                    // "" names cluster-scoped objects.
                    let namespace = resource.namespace.unwrap_or("");
                    if !self.namespaces.iter().any(|n| n == namespace) {
                        return false;
                    }
                }
                self.resources.is_empty() || self.resources.iter().any(|g| g.matches(resource))
            }
        }
    }
}

impl GroupResources {
    fn matches(&self, request: &ResourceAttributes<'_>) -> bool {
        if self.group != "*" && self.group != request.group {
            return false;
        }
        if !self.resources.is_empty() {
            let full = match request.subresource {
                Some(sub) => format!("{}/{sub}", request.resource),
                None => request.resource.to_string(),
            };
            let matched = self.resources.iter().any(|r| {
                r == "*"
                    || *r == full
                    || (request.subresource.is_none() && r == request.resource)
                    || r.strip_prefix("*/")
                        .is_some_and(|sub| request.subresource == Some(sub))
                    || r.strip_suffix("/*")
                        .is_some_and(|res| res == request.resource && request.subresource.is_some())
            });
            if !matched {
                return false;
            }
        }
        self.resource_names.is_empty()
            || request
                .name
                .is_some_and(|name| self.resource_names.iter().any(|n| n == name))
    }
}

/// `/healthz*` matches by prefix; anything else exactly.
fn url_matches(pattern: &str, path: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => path.starts_with(prefix),
        None => pattern == path,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pods<'a>(verb: &'a str, user: &'a str, groups: &'a [String]) -> Attributes<'a> {
        Attributes {
            user,
            groups,
            verb,
            resource: Some(ResourceAttributes {
                group: "",
                resource: "pods",
                subresource: None,
                namespace: Some("default"),
                name: Some("web"),
            }),
            path: "/api/v1/namespaces/default/pods/web",
        }
    }

    #[test]
    fn the_first_matching_rule_decides() {
        let policy = Policy::parse(
            r#"
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: None
  users: ["system:kube-scheduler"]
- level: RequestResponse
  userGroups: ["auditors"]
  resources: [{group: "", resources: ["pods"], resourceNames: ["web"]}]
- level: Request
  verbs: ["create", "delete"]
  namespaces: ["default"]
- level: Metadata
  resources: [{group: "", resources: ["pods/status", "*/scale"]}]
- level: None
  nonResourceURLs: ["/healthz*"]
- level: Metadata
"#,
        )
        .unwrap();
        let none: Vec<String> = Vec::new();
        let auditors = vec!["auditors".to_string()];
        assert_eq!(
            policy
                .decide(&pods("get", "system:kube-scheduler", &auditors))
                .level,
            Level::None
        );
        assert_eq!(
            policy.decide(&pods("get", "alice", &auditors)).level,
            Level::RequestResponse
        );
        assert_eq!(
            policy.decide(&pods("create", "alice", &none)).level,
            Level::Request
        );
        assert_eq!(
            policy.decide(&pods("get", "alice", &none)).level,
            Level::Metadata
        );
        let mut status = pods("update", "alice", &none);
        status.resource.as_mut().unwrap().subresource = Some("status");
        assert_eq!(policy.decide(&status).level, Level::Metadata);
        let health = Attributes {
            user: "system:anonymous",
            groups: &none,
            verb: "get",
            resource: None,
            path: "/healthz/ready",
        };
        assert_eq!(policy.decide(&health).level, Level::None);
        let decision = policy.decide(&pods("create", "alice", &none));
        assert_eq!(decision.omit_stages, ["RequestReceived"]);
    }

    #[test]
    fn the_default_policy_records_writes_and_secrets_not_reads() {
        let policy = Policy::default_policy();
        let none: Vec<String> = Vec::new();
        assert_eq!(
            policy.decide(&pods("create", "alice", &none)).level,
            Level::Metadata
        );
        assert_eq!(
            policy.decide(&pods("list", "alice", &none)).level,
            Level::None
        );
        let mut secret = pods("get", "alice", &none);
        secret.resource.as_mut().unwrap().resource = "secrets";
        assert_eq!(policy.decide(&secret).level, Level::Metadata);
        // Events are written by the thousand and say what they are
        // themselves: not recorded, as GKE's policy has it.
        let mut event = pods("create", "alice", &none);
        event.resource.as_mut().unwrap().resource = "events";
        assert_eq!(policy.decide(&event).level, Level::None);
    }

    #[test]
    fn a_file_that_is_not_a_policy_is_refused() {
        assert!(Policy::parse("kind: Pod\napiVersion: v1\n")
            .unwrap_err()
            .contains("Policy"));
        assert!(Policy::parse(
            "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Loud\n"
        )
        .unwrap_err()
        .contains("Loud"));
    }
}
