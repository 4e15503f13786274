//! A Deployment's spec read with the API's defaults: replicas, strategy,
//! maxSurge/maxUnavailable resolved against replicas (surge rounds up,
//! unavailable rounds down), history limit and progress deadline.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::PlanError;

const DEFAULT_MAX_SURGE: &str = "25%";
const DEFAULT_MAX_UNAVAILABLE: &str = "25%";
const DEFAULT_REVISION_HISTORY_LIMIT: i32 = 10;

/// `spec.replicas` (default 1).
pub fn replicas(d: &Deployment) -> i32 {
    d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)
}

/// Whether `spec.strategy.type` is `Recreate` (the default is RollingUpdate).
pub fn is_recreate(d: &Deployment) -> bool {
    strategy_type(d) == "Recreate"
}

fn strategy_type(d: &Deployment) -> &str {
    d.spec
        .as_ref()
        .and_then(|s| s.strategy.as_ref())
        .and_then(|s| s.type_.as_deref())
        .unwrap_or("RollingUpdate")
}

pub fn is_paused(d: &Deployment) -> bool {
    d.spec.as_ref().and_then(|s| s.paused).unwrap_or(false)
}

pub fn min_ready_seconds(d: &Deployment) -> Option<i32> {
    d.spec.as_ref().and_then(|s| s.min_ready_seconds)
}

/// `spec.revisionHistoryLimit` (default 10).
pub fn revision_history_limit(d: &Deployment) -> i32 {
    d.spec
        .as_ref()
        .and_then(|s| s.revision_history_limit)
        .unwrap_or(DEFAULT_REVISION_HISTORY_LIMIT)
}

/// `spec.progressDeadlineSeconds`, unless unset or MaxInt32 (no deadline).
pub fn progress_deadline_seconds(d: &Deployment) -> Option<i32> {
    d.spec
        .as_ref()
        .and_then(|s| s.progress_deadline_seconds)
        .filter(|s| *s != i32::MAX)
}

/// maxSurge and maxUnavailable as pod counts; never both zero (Kubernetes'
/// `ResolveFenceposts`: when rounding makes both zero, unavailable is 1).
pub fn fenceposts(d: &Deployment) -> Result<(i32, i32), PlanError> {
    let rolling = d
        .spec
        .as_ref()
        .and_then(|s| s.strategy.as_ref())
        .and_then(|s| s.rolling_update.as_ref());
    let default = |v: &str| IntOrString::String(v.to_string());
    let surge = rolling
        .and_then(|r| r.max_surge.clone())
        .unwrap_or_else(|| default(DEFAULT_MAX_SURGE));
    let unavailable = rolling
        .and_then(|r| r.max_unavailable.clone())
        .unwrap_or_else(|| default(DEFAULT_MAX_UNAVAILABLE));
    let total = replicas(d);
    let surge = scaled_value(&surge, total, true)?;
    let unavailable = scaled_value(&unavailable, total, false)?;
    if surge == 0 && unavailable == 0 {
        return Ok((0, 1));
    }
    Ok((surge, unavailable))
}

/// Extra pods a rolling update may run (0 for Recreate).
pub fn max_surge(d: &Deployment) -> Result<i32, PlanError> {
    if is_recreate(d) {
        return Ok(0);
    }
    Ok(fenceposts(d)?.0)
}

/// Pods a rolling update may have unavailable, at most `replicas`
/// (0 for Recreate or zero replicas).
pub fn max_unavailable(d: &Deployment) -> Result<i32, PlanError> {
    if is_recreate(d) || replicas(d) == 0 {
        return Ok(0);
    }
    Ok(fenceposts(d)?.1.min(replicas(d)))
}

/// An int or a percentage of `total`, rounded up or down.
fn scaled_value(value: &IntOrString, total: i32, round_up: bool) -> Result<i32, PlanError> {
    let percent = match value {
        IntOrString::Int(n) => return Ok(*n),
        IntOrString::String(s) => s
            .strip_suffix('%')
            .and_then(|p| p.parse::<i64>().ok())
            .ok_or_else(|| PlanError::InvalidIntOrPercent(s.clone()))?,
    };
    let scaled = percent * i64::from(total);
    let value = if round_up {
        (scaled + 99).div_euclid(100)
    } else {
        scaled.div_euclid(100)
    };
    i32::try_from(value).map_err(|_| PlanError::InvalidIntOrPercent(format!("{percent}%")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deployment(
        replicas: i32,
        surge: serde_json::Value,
        unavailable: serde_json::Value,
    ) -> Deployment {
        serde_json::from_value(json!({
            "metadata": {"name": "web"},
            "spec": {"replicas": replicas, "selector": {},
                     "strategy": {"type": "RollingUpdate",
                                  "rollingUpdate": {"maxSurge": surge, "maxUnavailable": unavailable}},
                     "template": {}}
        }))
        .unwrap()
    }

    #[test]
    fn percentages_round_surge_up_and_unavailable_down() {
        let d = deployment(10, json!("25%"), json!("25%"));
        assert_eq!(fenceposts(&d).unwrap(), (3, 2));
        let d = deployment(3, json!(1), json!("50%"));
        assert_eq!(fenceposts(&d).unwrap(), (1, 1));
    }

    #[test]
    fn both_zero_after_rounding_makes_one_unavailable() {
        let d = deployment(1, json!(0), json!("25%"));
        assert_eq!(fenceposts(&d).unwrap(), (0, 1));
    }

    #[test]
    fn max_unavailable_is_capped_at_replicas() {
        let d = deployment(2, json!(0), json!(5));
        assert_eq!(max_unavailable(&d).unwrap(), 2);
    }

    #[test]
    fn a_bad_percentage_is_an_error() {
        let d = deployment(2, json!("ten"), json!(1));
        assert!(matches!(fenceposts(&d), Err(PlanError::InvalidIntOrPercent(v)) if v == "ten"));
    }

    #[test]
    fn defaults_apply_when_the_strategy_is_absent() {
        let d: Deployment = serde_json::from_value(json!({
            "metadata": {"name": "web"},
            "spec": {"replicas": 4, "selector": {}, "template": {}}
        }))
        .unwrap();
        assert_eq!(fenceposts(&d).unwrap(), (1, 1));
        assert!(!is_recreate(&d));
        assert_eq!(revision_history_limit(&d), 10);
    }
}
