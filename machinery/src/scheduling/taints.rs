//! Taints and tolerations as Kubernetes' component-helpers match them
//! (`Toleration.ToleratesTaint`): what the scheduler filters nodes by,
//! and the DaemonSet and taint-eviction controllers check pods against.

use k8s_openapi::api::core::v1::{Taint, Toleration};

/// The taint effects.
pub const NO_SCHEDULE: &str = "NoSchedule";
pub const NO_EXECUTE: &str = "NoExecute";
pub const PREFER_NO_SCHEDULE: &str = "PreferNoSchedule";

/// Whether `toleration` tolerates `taint`, as `Toleration.ToleratesTaint`:
/// an empty effect matches every effect, an empty key (with Exists) every
/// key; the operator is Equal unless it says Exists.
pub fn tolerates(toleration: &Toleration, taint: &Taint) -> bool {
    let effect = toleration.effect.as_deref().unwrap_or_default();
    if !effect.is_empty() && effect != taint.effect {
        return false;
    }
    let key = toleration.key.as_deref().unwrap_or_default();
    if !key.is_empty() && key != taint.key {
        return false;
    }
    match toleration.operator.as_deref().unwrap_or_default() {
        "" | "Equal" => {
            toleration.value.as_deref().unwrap_or_default()
                == taint.value.as_deref().unwrap_or_default()
        }
        "Exists" => true,
        _ => false,
    }
}

/// Whether any of `tolerations` tolerates `taint`.
pub fn tolerated(tolerations: &[Toleration], taint: &Taint) -> bool {
    tolerations.iter().any(|t| tolerates(t, taint))
}
