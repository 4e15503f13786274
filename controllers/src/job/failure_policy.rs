//! `spec.podFailurePolicy`: which rule a failed pod matches (by the exit
//! codes of its terminated containers or by its conditions) and what the
//! rule's action does to the Job.

use k8s_openapi::api::batch::v1::{PodFailurePolicy, PodFailurePolicyRule};
use k8s_openapi::api::core::v1::{ContainerStatus, Pod};

/// What a failed pod does to its Job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Counts toward `backoffLimit` (no rule matched, or `Count`).
    Count,
    /// Not counted at all (`Ignore`).
    Ignore,
    /// The Job fails at once (`FailJob`), with this message.
    FailJob(String),
}

/// Applies `policy` to a pod in phase Failed: the first matching rule
/// decides; `FailIndex` (per-index back-off) is counted as `Count`.
pub fn judge(policy: Option<&PodFailurePolicy>, pod: &Pod) -> Verdict {
    let Some(policy) = policy else {
        return Verdict::Count;
    };
    for (at, rule) in policy.rules.iter().enumerate() {
        let Some(matched) = matches(rule, pod) else {
            continue;
        };
        return match rule.action.as_str() {
            "Ignore" => Verdict::Ignore,
            "FailJob" => Verdict::FailJob(format!("{matched} matching FailJob rule at index {at}")),
            _ => Verdict::Count,
        };
    }
    Verdict::Count
}

/// What about `pod` matches `rule`, described as kube describes it.
fn matches(rule: &PodFailurePolicyRule, pod: &Pod) -> Option<String> {
    let pod_name = format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        pod.metadata.name.as_deref().unwrap_or_default()
    );
    if let Some(requirement) = &rule.on_exit_codes {
        let status = pod.status.as_ref()?;
        let containers = status
            .init_container_statuses
            .iter()
            .chain(status.container_statuses.iter())
            .flatten();
        for container in containers {
            let Some(code) = exit_code(container).filter(|c| *c != 0) else {
                continue;
            };
            if requirement
                .container_name
                .as_ref()
                .is_some_and(|n| *n != container.name)
            {
                continue;
            }
            let listed = requirement.values.contains(&code);
            let hit = match requirement.operator.as_str() {
                "In" => listed,
                "NotIn" => !listed,
                _ => false,
            };
            if hit {
                return Some(format!(
                    "Container {} for pod {pod_name} failed with exit code {code}",
                    container.name
                ));
            }
        }
        return None;
    }
    let patterns = rule.on_pod_conditions.as_ref()?;
    let conditions = pod.status.as_ref()?.conditions.as_ref()?;
    for pattern in patterns {
        let found = conditions
            .iter()
            .any(|c| c.type_ == pattern.type_ && c.status == pattern.status);
        if found {
            return Some(format!("Pod {pod_name} has condition {}", pattern.type_));
        }
    }
    None
}

fn exit_code(container: &ContainerStatus) -> Option<i32> {
    let terminated = container.state.as_ref()?.terminated.as_ref()?;
    Some(terminated.exit_code)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn failed_pod(exit_codes: &[(&str, i32)], conditions: serde_json::Value) -> Pod {
        let statuses: Vec<_> = exit_codes
            .iter()
            .map(|(name, code)| {
                json!({"name": name, "ready": false, "restartCount": 0,
                "image": "x", "imageID": "",
                "state": {"terminated": {"exitCode": code}}})
            })
            .collect();
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "default"},
            "status": {"phase": "Failed", "containerStatuses": statuses, "conditions": conditions},
        }))
        .unwrap()
    }

    fn policy(rules: serde_json::Value) -> PodFailurePolicy {
        serde_json::from_value(json!({ "rules": rules })).unwrap()
    }

    #[test]
    fn no_policy_or_no_match_counts() {
        let pod = failed_pod(&[("main", 1)], json!([]));
        assert_eq!(judge(None, &pod), Verdict::Count);
        let p = policy(
            json!([{"action": "FailJob", "onExitCodes": {"operator": "In", "values": [42]}}]),
        );
        assert_eq!(judge(Some(&p), &pod), Verdict::Count);
    }

    #[test]
    fn exit_codes_in_and_not_in_match_the_first_rule() {
        let p = policy(json!([
            {"action": "Ignore", "onExitCodes": {"operator": "In", "values": [3]}},
            {"action": "FailJob", "onExitCodes": {"containerName": "main", "operator": "NotIn", "values": [1, 2]}},
            {"action": "Count", "onExitCodes": {"operator": "In", "values": [5]}},
        ]));
        assert_eq!(
            judge(Some(&p), &failed_pod(&[("main", 3)], json!([]))),
            Verdict::Ignore
        );
        assert_eq!(
            judge(Some(&p), &failed_pod(&[("main", 5)], json!([]))),
            Verdict::FailJob(
                "Container main for pod default/p failed with exit code 5 matching FailJob rule at index 1".into()
            )
        );
        // The FailJob rule is for "main" only: "side" exiting 5 reaches the Count rule.
        assert_eq!(
            judge(Some(&p), &failed_pod(&[("side", 5)], json!([]))),
            Verdict::Count
        );
        // Exit code 0 never matches NotIn.
        assert_eq!(
            judge(
                Some(&p),
                &failed_pod(&[("main", 0), ("main", 1)], json!([]))
            ),
            Verdict::Count
        );
    }

    #[test]
    fn pod_conditions_match_by_type_and_status() {
        let p = policy(json!([
            {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
        ]));
        let disrupted = failed_pod(
            &[("main", 137)],
            json!([{"type": "DisruptionTarget", "status": "True"}]),
        );
        assert_eq!(judge(Some(&p), &disrupted), Verdict::Ignore);
        let not = failed_pod(
            &[("main", 137)],
            json!([{"type": "DisruptionTarget", "status": "False"}]),
        );
        assert_eq!(judge(Some(&p), &not), Verdict::Count);
    }
}
