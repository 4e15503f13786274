//! RBAC's rules, compiled: which Roles and ClusterRoles are bound to which
//! users, groups and ServiceAccounts, and whether any of their rules
//! allows a request. Read from the Role, ClusterRole, RoleBinding and
//! ClusterRoleBinding objects (rbac.authorization.k8s.io/v1) as JSON.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::Value;

use crate::user::UserInfo;
use skiff_machinery::selectors::LabelSelector;

/// What a request asks to do, as authorization sees it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Attributes {
    pub verb: String,
    /// Set for API resources; `None` for a non-resource path.
    pub resource: Option<ResourceAttributes>,
    /// The URL path, for non-resource requests.
    pub path: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResourceAttributes {
    pub group: String,
    pub resource: String,
    pub subresource: String,
    pub namespace: String,
    pub name: String,
}

/// One PolicyRule.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rule {
    pub verbs: Vec<String>,
    pub api_groups: Vec<String>,
    pub resources: Vec<String>,
    pub resource_names: Vec<String>,
    pub non_resource_urls: Vec<String>,
}

impl Rule {
    pub fn from_json(rule: &Value) -> Rule {
        let strings = |field: &str| -> Vec<String> {
            rule[field]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|v| v.as_str().map(String::from))
                        .collect()
                })
                .unwrap_or_default()
        };
        Rule {
            verbs: strings("verbs"),
            api_groups: strings("apiGroups"),
            resources: strings("resources"),
            resource_names: strings("resourceNames"),
            non_resource_urls: strings("nonResourceURLs"),
        }
    }

    pub fn to_json(&self) -> Value {
        let mut rule = serde_json::json!({ "verbs": self.verbs });
        if !self.non_resource_urls.is_empty() {
            rule["nonResourceURLs"] = serde_json::json!(self.non_resource_urls);
        } else {
            rule["apiGroups"] = serde_json::json!(self.api_groups);
            rule["resources"] = serde_json::json!(self.resources);
        }
        if !self.resource_names.is_empty() {
            rule["resourceNames"] = serde_json::json!(self.resource_names);
        }
        rule
    }

    /// Whether this rule allows `attributes`, as Kubernetes' RBAC reads a
    /// rule: `*` matches any verb, group or resource; `pods/log` names a
    /// subresource and `*/scale` that subresource of any resource;
    /// resourceNames limit the rule to those objects; a nonResourceURL
    /// ending in `*` matches by prefix.
    pub fn allows(&self, attributes: &Attributes) -> bool {
        if !has(&self.verbs, &attributes.verb) {
            return false;
        }
        match &attributes.resource {
            Some(r) => {
                has(&self.api_groups, &r.group)
                    && self.matches_resource(r)
                    && (self.resource_names.is_empty()
                        || (!r.name.is_empty() && self.resource_names.contains(&r.name)))
            }
            None => self.non_resource_urls.iter().any(|url| {
                url == "*"
                    || *url == attributes.path
                    || url
                        .strip_suffix('*')
                        .is_some_and(|prefix| attributes.path.starts_with(prefix))
            }),
        }
    }

    fn matches_resource(&self, r: &ResourceAttributes) -> bool {
        let combined = if r.subresource.is_empty() {
            r.resource.clone()
        } else {
            format!("{}/{}", r.resource, r.subresource)
        };
        self.resources.iter().any(|rule| {
            rule == "*"
                || *rule == combined
                || (!r.subresource.is_empty()
                    && rule.strip_prefix("*/") == Some(r.subresource.as_str()))
        })
    }
}

fn has(list: &[String], wanted: &str) -> bool {
    list.iter().any(|item| item == "*" || item == wanted)
}

/// Whether the rules `owner` holds grant everything `requested` does, as
/// RBAC's escalation check asks: every verb × group × resource × name (or
/// verb × URL) of `requested` is allowed by one of `owner`. A `*` asked
/// for is covered only by a `*` held.
pub fn covers(owner: &[Rule], requested: &Rule) -> bool {
    let names: Vec<Option<&String>> = if requested.resource_names.is_empty() {
        vec![None]
    } else {
        requested.resource_names.iter().map(Some).collect()
    };
    requested.verbs.iter().all(|verb| {
        let urls_covered = requested.non_resource_urls.iter().all(|url| {
            owner.iter().any(|o| {
                has(&o.verbs, verb)
                    && o.non_resource_urls.iter().any(|held| {
                        held == "*"
                            || held == url
                            || held
                                .strip_suffix('*')
                                .is_some_and(|prefix| url.starts_with(prefix))
                    })
            })
        });
        let resources_covered = requested.api_groups.iter().all(|group| {
            requested.resources.iter().all(|resource| {
                names.iter().all(|name| {
                    owner.iter().any(|o| {
                        has(&o.verbs, verb)
                            && has(&o.api_groups, group)
                            && o.resources.iter().any(|held| {
                                held == "*"
                                    || held == resource
                                    || held.strip_prefix("*/").is_some_and(|sub| {
                                        resource.split_once('/').is_some_and(|(_, s)| s == sub)
                                    })
                            })
                            && (o.resource_names.is_empty()
                                || name.is_some_and(|n| o.resource_names.contains(n)))
                    })
                })
            })
        });
        urls_covered && resources_covered
    })
}

/// Who a binding's subject is, as the key the index files rules under.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Subject {
    User(String),
    Group(String),
}

fn subjects_of(binding: &Value) -> Vec<Subject> {
    let binding_namespace = binding["metadata"]["namespace"].as_str().unwrap_or("");
    let Some(subjects) = binding["subjects"].as_array() else {
        return Vec::new();
    };
    subjects
        .iter()
        .filter_map(|s| {
            let name = s["name"].as_str()?.to_string();
            match s["kind"].as_str()? {
                "User" => Some(Subject::User(name)),
                "Group" => Some(Subject::Group(name)),
                "ServiceAccount" => {
                    let namespace = s["namespace"]
                        .as_str()
                        .filter(|n| !n.is_empty())
                        .unwrap_or(binding_namespace);
                    Some(Subject::User(format!(
                        "system:serviceaccount:{namespace}:{name}"
                    )))
                }
                _ => None,
            }
        })
        .collect()
}

/// Rule sets by the subject they are bound to.
type BySubject = HashMap<Subject, Vec<Arc<[Rule]>>>;

/// The rules of every role, and which subjects hold them where.
#[derive(Debug, Default)]
pub struct Index {
    /// Cluster-wide: by subject, the rules of its ClusterRoleBindings.
    cluster: BySubject,
    /// By namespace, then subject: the rules of its RoleBindings there.
    namespaced: HashMap<String, BySubject>,
    /// Each ClusterRole's rules (aggregated ones with what they gather).
    cluster_roles: HashMap<String, Arc<[Rule]>>,
    /// Each Role's rules, by (namespace, name).
    roles: HashMap<(String, String), Arc<[Rule]>>,
}

fn rules_of(role: &Value) -> Arc<[Rule]> {
    role["rules"]
        .as_array()
        .map(|rules| rules.iter().map(Rule::from_json).collect::<Vec<_>>())
        .unwrap_or_default()
        .into()
}

fn name_of(object: &Value) -> &str {
    object["metadata"]["name"].as_str().unwrap_or("")
}

/// The rules of each ClusterRole by name, with those that have an
/// aggregationRule holding the union of the rules of every other
/// ClusterRole its selectors pick (repeated, so that `admin` takes in
/// `edit`, which takes in `view`).
pub fn cluster_role_rules(cluster_roles: &[Value]) -> HashMap<String, Arc<[Rule]>> {
    let mut rules: HashMap<String, Arc<[Rule]>> = cluster_roles
        .iter()
        .map(|r| (name_of(r).to_string(), rules_of(r)))
        .collect();
    let aggregated: Vec<(&str, Vec<LabelSelector>)> = cluster_roles
        .iter()
        .filter_map(|role| {
            let selectors = role["aggregationRule"]["clusterRoleSelectors"].as_array()?;
            let selectors = selectors
                .iter()
                .filter_map(|s| LabelSelector::from_json(s).ok())
                .collect();
            Some((name_of(role), selectors))
        })
        .collect();
    // Each round can only add rules, so this ends; a chain longer than
    // the number of roles cannot exist.
    for _ in 0..=aggregated.len() {
        let mut changed = false;
        for (name, selectors) in &aggregated {
            let mut union: Vec<Rule> = Vec::new();
            for role in cluster_roles {
                let other = name_of(role);
                if other == *name || !selectors.iter().any(|s| s.matches_object(role)) {
                    continue;
                }
                for rule in rules.get(other).into_iter().flat_map(|r| r.iter()) {
                    if !union.contains(rule) {
                        union.push(rule.clone());
                    }
                }
            }
            if rules.get(*name).map(|r| r.as_ref()) != Some(union.as_slice()) {
                rules.insert(name.to_string(), union.into());
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    rules
}

impl Index {
    /// Compiles the four kinds of objects. A binding to a role that does
    /// not exist grants nothing (until the role appears).
    pub fn build(
        roles: &[Value],
        cluster_roles: &[Value],
        bindings: &[Value],
        cluster_bindings: &[Value],
    ) -> Index {
        let cluster_rules = cluster_role_rules(cluster_roles);
        let role_rules: HashMap<(&str, &str), Arc<[Rule]>> = roles
            .iter()
            .map(|r| {
                let namespace = r["metadata"]["namespace"].as_str().unwrap_or("");
                ((namespace, name_of(r)), rules_of(r))
            })
            .collect();
        let mut index = Index {
            cluster_roles: cluster_rules.clone(),
            roles: role_rules
                .iter()
                .map(|((ns, name), rules)| ((ns.to_string(), name.to_string()), rules.clone()))
                .collect(),
            ..Index::default()
        };
        for binding in cluster_bindings {
            if binding["roleRef"]["kind"].as_str() != Some("ClusterRole") {
                continue;
            }
            let role = binding["roleRef"]["name"].as_str().unwrap_or("");
            let Some(rules) = cluster_rules.get(role) else {
                continue;
            };
            for subject in subjects_of(binding) {
                index
                    .cluster
                    .entry(subject)
                    .or_default()
                    .push(rules.clone());
            }
        }
        for binding in bindings {
            let namespace = binding["metadata"]["namespace"].as_str().unwrap_or("");
            let role = binding["roleRef"]["name"].as_str().unwrap_or("");
            let rules = match binding["roleRef"]["kind"].as_str() {
                Some("ClusterRole") => cluster_rules.get(role),
                Some("Role") => role_rules.get(&(namespace, role)),
                _ => None,
            };
            let Some(rules) = rules else {
                continue;
            };
            let by_subject = index.namespaced.entry(namespace.to_string()).or_default();
            for subject in subjects_of(binding) {
                by_subject.entry(subject).or_default().push(rules.clone());
            }
        }
        index
    }

    /// The rule sets that apply to `user` in `namespace` ("" for
    /// cluster-scoped requests): its cluster-wide ones, then the
    /// namespace's.
    pub fn rules_for<'a>(
        &'a self,
        user: &'a UserInfo,
        namespace: &'a str,
    ) -> impl Iterator<Item = &'a Rule> + 'a {
        let subjects = std::iter::once(Subject::User(user.name.clone()))
            .chain(user.groups.iter().map(|g| Subject::Group(g.clone())))
            .collect::<Vec<_>>();
        let namespaced = (!namespace.is_empty())
            .then(|| self.namespaced.get(namespace))
            .flatten();
        subjects.into_iter().flat_map(move |subject| {
            let cluster = self.cluster.get(&subject).into_iter().flatten();
            let local = namespaced
                .and_then(|by_subject| by_subject.get(&subject))
                .into_iter()
                .flatten();
            cluster.chain(local).flat_map(|rules| rules.iter())
        })
    }

    /// The rules of the role a binding refers to: `kind` ClusterRole or
    /// Role (in `namespace`); `None` if there is no such role.
    pub fn role_rules(&self, kind: &str, namespace: &str, name: &str) -> Option<Arc<[Rule]>> {
        match kind {
            "ClusterRole" => self.cluster_roles.get(name).cloned(),
            "Role" => self
                .roles
                .get(&(namespace.to_string(), name.to_string()))
                .cloned(),
            _ => None,
        }
    }

    /// Whether some rule bound to `user` allows `attributes`.
    pub fn allows(&self, user: &UserInfo, attributes: &Attributes) -> bool {
        let namespace = attributes
            .resource
            .as_ref()
            .map_or("", |r| r.namespace.as_str());
        self.rules_for(user, namespace)
            .any(|rule| rule.allows(attributes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn attrs(
        verb: &str,
        group: &str,
        resource: &str,
        sub: &str,
        ns: &str,
        name: &str,
    ) -> Attributes {
        Attributes {
            verb: verb.into(),
            resource: Some(ResourceAttributes {
                group: group.into(),
                resource: resource.into(),
                subresource: sub.into(),
                namespace: ns.into(),
                name: name.into(),
            }),
            path: String::new(),
        }
    }

    fn rule(value: Value) -> Rule {
        Rule::from_json(&value)
    }

    #[test]
    fn rules_match_verbs_groups_resources_subresources_and_names() {
        let pods =
            rule(json!({"verbs": ["get", "list"], "apiGroups": [""], "resources": ["pods"]}));
        assert!(pods.allows(&attrs("get", "", "pods", "", "d", "p")));
        assert!(!pods.allows(&attrs("delete", "", "pods", "", "d", "p")));
        assert!(!pods.allows(&attrs("get", "apps", "pods", "", "d", "p")));
        assert!(!pods.allows(&attrs("get", "", "pods", "log", "d", "p")));
        let log = rule(json!({"verbs": ["get"], "apiGroups": [""], "resources": ["pods/log"]}));
        assert!(log.allows(&attrs("get", "", "pods", "log", "d", "p")));
        assert!(!log.allows(&attrs("get", "", "pods", "", "d", "p")));
        let scale = rule(json!({"verbs": ["*"], "apiGroups": ["*"], "resources": ["*/scale"]}));
        assert!(scale.allows(&attrs("update", "apps", "deployments", "scale", "d", "x")));
        assert!(!scale.allows(&attrs("update", "apps", "deployments", "", "d", "x")));
        let named = rule(
            json!({"verbs": ["get", "update"], "apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["app"]}),
        );
        assert!(named.allows(&attrs("get", "", "configmaps", "", "d", "app")));
        assert!(!named.allows(&attrs("get", "", "configmaps", "", "d", "other")));
        assert!(!named.allows(&attrs("list", "", "configmaps", "", "d", "")));
        let all = rule(json!({"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}));
        assert!(all.allows(&attrs(
            "deletecollection",
            "batch",
            "jobs",
            "status",
            "",
            ""
        )));
    }

    #[test]
    fn non_resource_urls_match_exactly_or_by_prefix() {
        let health = rule(json!({"verbs": ["get"], "nonResourceURLs": ["/healthz", "/apis/*"]}));
        let path = |verb: &str, path: &str| Attributes {
            verb: verb.into(),
            resource: None,
            path: path.into(),
        };
        assert!(health.allows(&path("get", "/healthz")));
        assert!(!health.allows(&path("get", "/healthz/etcd")));
        assert!(health.allows(&path("get", "/apis/apps/v1")));
        assert!(!health.allows(&path("post", "/healthz")));
        // A resource rule never grants a path, nor a path rule a resource.
        let pods = rule(json!({"verbs": ["get"], "apiGroups": ["*"], "resources": ["*"]}));
        assert!(!pods.allows(&path("get", "/healthz")));
        assert!(!health.allows(&attrs("get", "", "pods", "", "d", "p")));
    }

    #[test]
    fn held_rules_cover_what_they_grant_and_no_more() {
        let owner = [
            rule(
                json!({"verbs": ["get", "list"], "apiGroups": [""], "resources": ["pods", "pods/log"]}),
            ),
            rule(json!({"verbs": ["*"], "apiGroups": ["apps"], "resources": ["deployments"]})),
            rule(
                json!({"verbs": ["get"], "apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["app"]}),
            ),
            rule(json!({"verbs": ["get"], "nonResourceURLs": ["/healthz*"]})),
        ];
        let covered = |r: Value| covers(&owner, &rule(r));
        assert!(covered(
            json!({"verbs": ["get"], "apiGroups": [""], "resources": ["pods", "pods/log"]})
        ));
        assert!(covered(
            json!({"verbs": ["update", "delete"], "apiGroups": ["apps"], "resources": ["deployments"]})
        ));
        assert!(!covered(
            json!({"verbs": ["delete"], "apiGroups": [""], "resources": ["pods"]})
        ));
        assert!(!covered(
            json!({"verbs": ["*"], "apiGroups": [""], "resources": ["pods"]})
        ));
        assert!(!covered(
            json!({"verbs": ["get"], "apiGroups": ["*"], "resources": ["pods"]})
        ));
        assert!(covered(
            json!({"verbs": ["get"], "apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["app"]})
        ));
        assert!(!covered(
            json!({"verbs": ["get"], "apiGroups": [""], "resources": ["configmaps"]})
        ));
        assert!(covered(
            json!({"verbs": ["get"], "nonResourceURLs": ["/healthz/etcd"]})
        ));
        assert!(!covered(
            json!({"verbs": ["get"], "nonResourceURLs": ["/metrics"]})
        ));
        let admin = [rule(
            json!({"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}),
        )];
        assert!(covers(
            &admin,
            &rule(json!({"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}))
        ));
        assert!(!covers(
            &admin,
            &rule(json!({"verbs": ["get"], "nonResourceURLs": ["/metrics"]}))
        ));
    }

    #[test]
    fn aggregated_roles_take_in_the_rules_of_the_roles_they_select() {
        let role = |name: &str, label: Option<&str>, aggregates: Option<&str>, verb: &str| {
            let mut role = json!({"metadata": {"name": name, "labels": {}}, "rules": [
                {"verbs": [verb], "apiGroups": [""], "resources": [name]}]});
            if let Some(label) = label {
                role["metadata"]["labels"][label] = json!("true");
            }
            if let Some(aggregates) = aggregates {
                role["aggregationRule"] =
                    json!({"clusterRoleSelectors": [{"matchLabels": {aggregates: "true"}}]});
            }
            role
        };
        let roles = [
            role("admin", None, Some("to-admin"), "x"),
            role("edit", Some("to-admin"), Some("to-edit"), "x"),
            role("view", Some("to-edit"), Some("to-view"), "x"),
            role("pods", Some("to-view"), None, "get"),
            role("secrets", Some("to-edit"), None, "update"),
        ];
        let rules = cluster_role_rules(&roles);
        let names = |role: &str| -> Vec<String> {
            let mut names: Vec<String> =
                rules[role].iter().map(|r| r.resources[0].clone()).collect();
            names.sort();
            names
        };
        assert_eq!(names("view"), ["pods"]);
        assert_eq!(names("edit"), ["pods", "secrets"]);
        assert_eq!(names("admin"), ["pods", "secrets"]);
        assert_eq!(names("pods"), ["pods"]);
    }

    #[test]
    fn bindings_grant_their_roles_to_users_groups_and_service_accounts() {
        let view = json!({"metadata": {"name": "view"}, "rules": [
            {"verbs": ["get", "list", "watch"], "apiGroups": [""], "resources": ["pods"]}]});
        let editor = json!({"metadata": {"name": "editor", "namespace": "team"}, "rules": [
            {"verbs": ["*"], "apiGroups": [""], "resources": ["configmaps"]}]});
        let cluster_binding = json!({"metadata": {"name": "viewers"},
            "roleRef": {"kind": "ClusterRole", "name": "view"},
            "subjects": [{"kind": "Group", "name": "viewers"}]});
        let local_binding = json!({"metadata": {"name": "b", "namespace": "team"},
            "roleRef": {"kind": "Role", "name": "editor"},
            "subjects": [{"kind": "User", "name": "alice"},
                         {"kind": "ServiceAccount", "name": "bot"}]});
        let view_in_team = json!({"metadata": {"name": "v", "namespace": "team"},
            "roleRef": {"kind": "ClusterRole", "name": "view"},
            "subjects": [{"kind": "User", "name": "bob"}]});
        let dangling = json!({"metadata": {"name": "d"},
            "roleRef": {"kind": "ClusterRole", "name": "missing"},
            "subjects": [{"kind": "User", "name": "bob"}]});
        let index = Index::build(
            &[editor],
            &[view],
            &[local_binding, view_in_team],
            &[cluster_binding, dangling],
        );
        let user = |name: &str, groups: &[&str]| UserInfo {
            name: name.into(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
        };
        let viewer = user("carol", &["viewers"]);
        assert!(index.allows(&viewer, &attrs("list", "", "pods", "", "any", "")));
        assert!(index.allows(&viewer, &attrs("list", "", "pods", "", "", "")));
        assert!(!index.allows(&viewer, &attrs("delete", "", "pods", "", "any", "p")));
        let alice = user("alice", &[]);
        assert!(index.allows(&alice, &attrs("create", "", "configmaps", "", "team", "")));
        assert!(!index.allows(&alice, &attrs("create", "", "configmaps", "", "other", "")));
        assert!(!index.allows(&alice, &attrs("list", "", "configmaps", "", "", "")));
        let bot = user("system:serviceaccount:team:bot", &[]);
        assert!(index.allows(&bot, &attrs("get", "", "configmaps", "", "team", "c")));
        let bob = user("bob", &[]);
        assert!(index.allows(&bob, &attrs("get", "", "pods", "", "team", "p")));
        assert!(!index.allows(&bob, &attrs("get", "", "pods", "", "other", "p")));
        assert!(!index.allows(
            &user("dave", &[]),
            &attrs("get", "", "pods", "", "team", "p")
        ));
    }
}
