//! RBAC's escalation check: a user may write a Role or ClusterRole only
//! with rules they hold themselves (or with the `escalate` verb on it),
//! and a RoleBinding or ClusterRoleBinding only to a role whose rules they
//! hold where the binding applies (or with the `bind` verb on that role).
//! So the `admin` of a namespace, who may write bindings there, cannot
//! hand out more than `admin`. A ClusterRole with an aggregationRule takes
//! the rules of whatever roles it selects, so writing one needs `escalate`.

use serde_json::Value;

use super::rbac::{covers, Rule};
use super::{Attributes, Mode, ResourceAttributes, RBAC_GROUP};
use crate::admission::{self, Operation};
use crate::status::{ApiError, ApiResult};
use crate::user::UserInfo;
use crate::Registry;

fn verb_on(verb: &str, resource: &str, namespace: &str, name: &str) -> Attributes {
    Attributes {
        verb: verb.into(),
        resource: Some(ResourceAttributes {
            group: RBAC_GROUP.into(),
            resource: resource.into(),
            namespace: namespace.into(),
            name: name.into(),
            ..Default::default()
        }),
        path: String::new(),
    }
}

fn describe(rule: &Rule) -> String {
    let list = |items: &[String]| {
        items
            .iter()
            .map(|i| format!("{i:?}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    if rule.non_resource_urls.is_empty() {
        let mut text = format!(
            "{{APIGroups:[{}], Resources:[{}]",
            list(&rule.api_groups),
            list(&rule.resources)
        );
        if !rule.resource_names.is_empty() {
            text.push_str(&format!(", ResourceNames:[{}]", list(&rule.resource_names)));
        }
        text + &format!(", Verbs:[{}]}}", list(&rule.verbs))
    } else {
        format!(
            "{{NonResourceURLs:[{}], Verbs:[{}]}}",
            list(&rule.non_resource_urls),
            list(&rule.verbs)
        )
    }
}

fn refuse(attrs: &admission::Attributes, user: &UserInfo, why: String) -> ApiError {
    let groups = user
        .groups
        .iter()
        .map(|g| format!("{g:?}"))
        .collect::<Vec<_>>()
        .join(" ");
    attrs.forbidden(format!(
        "user {:?} (groups=[{groups}]) is attempting to grant RBAC permissions not currently held:\n{why}",
        user.name
    ))
}

/// Ok when `held` covers every rule of `granted`; else 403 listing those
/// it does not.
fn held_or_refuse(
    attrs: &admission::Attributes,
    user: &UserInfo,
    held: &[Rule],
    granted: &[Rule],
) -> ApiResult<()> {
    let missing: Vec<String> = granted
        .iter()
        .filter(|r| !covers(held, r))
        .map(describe)
        .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(refuse(attrs, user, missing.join("\n")))
    }
}

/// Refuses a write of a role or binding that would grant its writer more
/// than it holds.
pub async fn validate(registry: &Registry, attrs: &admission::Attributes) -> ApiResult<()> {
    if attrs.resource.group != RBAC_GROUP
        || attrs.subresource.is_some()
        || !matches!(attrs.operation, Operation::Create | Operation::Update)
    {
        return Ok(());
    }
    let (Some(user), Some(object)) = (&attrs.user, &attrs.object) else {
        return Ok(());
    };
    let Some(authorizer) = registry.authorizer() else {
        return Ok(());
    };
    if authorizer.mode == Mode::AlwaysAllow || user.in_system_masters() {
        return Ok(());
    }
    let namespace = attrs.namespace.as_deref().unwrap_or("");
    let plural = attrs.resource.plural;
    match attrs.resource.kind {
        "Role" | "ClusterRole" => {
            if authorizer
                .allows(user, &verb_on("escalate", plural, namespace, &attrs.name))
                .await?
            {
                return Ok(());
            }
            if object.get("aggregationRule").is_some_and(Value::is_object) {
                return Err(refuse(
                    attrs,
                    user,
                    "an aggregated ClusterRole gathers the rules of the roles it selects; writing one needs the escalate verb".into(),
                ));
            }
            let requested: Vec<Rule> = object["rules"]
                .as_array()
                .map(|rules| rules.iter().map(Rule::from_json).collect())
                .unwrap_or_default();
            let held = authorizer.rules_for(user, namespace).await?;
            held_or_refuse(attrs, user, &held, &requested)
        }
        "RoleBinding" | "ClusterRoleBinding" => {
            let kind = object["roleRef"]["kind"].as_str().unwrap_or("");
            let name = object["roleRef"]["name"].as_str().unwrap_or("");
            let role_plural = if kind == "Role" {
                "roles"
            } else {
                "clusterroles"
            };
            if authorizer
                .allows(user, &verb_on("bind", role_plural, namespace, name))
                .await?
            {
                return Ok(());
            }
            let Some(rules) = authorizer.role_rules(kind, namespace, name).await? else {
                return Err(refuse(
                    attrs,
                    user,
                    format!(
                        "the {kind} {name:?} does not exist; binding it needs the bind verb on it"
                    ),
                ));
            };
            let held = authorizer.rules_for(user, namespace).await?;
            held_or_refuse(attrs, user, &held, &rules)
        }
        _ => Ok(()),
    }
}
