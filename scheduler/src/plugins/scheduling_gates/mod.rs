//! SchedulingGates: a pod with `spec.schedulingGates` waits outside the
//! active queue until every gate is removed.

use std::sync::Arc;

use serde_json::Value;

use crate::framework::{Code, Plugin, PodInfo, Point, Status};

pub const NAME: &str = "SchedulingGates";

pub struct SchedulingGates;

pub fn new(args: &Value) -> Result<Arc<dyn Plugin>, String> {
    super::no_args(NAME, args)?;
    Ok(Arc::new(SchedulingGates))
}

impl Plugin for SchedulingGates {
    fn name(&self) -> &'static str {
        NAME
    }

    fn points(&self) -> &'static [Point] {
        &[Point::PreEnqueue]
    }

    fn pre_enqueue(&self, pod: &PodInfo) -> Status {
        let gates: Vec<&str> = pod
            .pod
            .spec
            .as_ref()
            .and_then(|s| s.scheduling_gates.as_ref())
            .into_iter()
            .flatten()
            .map(|gate| gate.name.as_str())
            .collect();
        if gates.is_empty() {
            return Status::success();
        }
        Status::new(
            Code::Pending,
            vec![format!(
                "waiting for scheduling gates: [{}]",
                gates.join(" ")
            )],
        )
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::Pod;
    use serde_json::json;

    use super::*;

    fn pod(gates: Value) -> PodInfo {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "default"},
            "spec": {"schedulingGates": gates, "containers": [{"name": "c", "image": "i"}]},
        }))
        .unwrap();
        PodInfo::new(Arc::new(pod))
    }

    #[test]
    fn gated_pods_stay_pending() {
        assert!(SchedulingGates.pre_enqueue(&pod(json!(null))).is_success());
        assert!(SchedulingGates.pre_enqueue(&pod(json!([]))).is_success());
        let status =
            SchedulingGates.pre_enqueue(&pod(json!([{"name": "gate-a"}, {"name": "gate-b"}])));
        assert_eq!(status.code, Code::Pending);
        assert_eq!(
            status.reasons[..],
            vec!["waiting for scheduling gates: [gate-a gate-b]"]
        );
    }

    #[test]
    fn takes_no_args() {
        assert!(new(&Value::Null).is_ok());
        assert!(new(&json!({"gates": 1})).is_err());
    }
}
