//! PrioritySort: the active queue's order, higher `spec.priority` first,
//! then the pod queued earlier.

use std::sync::Arc;
use std::time::Instant;

use serde_json::Value;

use crate::framework::{Plugin, PodInfo, Point};

pub const NAME: &str = "PrioritySort";

pub struct PrioritySort;

pub fn new(args: &Value) -> Result<Arc<dyn Plugin>, String> {
    super::no_args(NAME, args)?;
    Ok(Arc::new(PrioritySort))
}

impl Plugin for PrioritySort {
    fn name(&self) -> &'static str {
        NAME
    }

    fn points(&self) -> &'static [Point] {
        &[Point::QueueSort]
    }

    fn less(&self, a: &PodInfo, a_since: Instant, b: &PodInfo, b_since: Instant) -> bool {
        let (pa, pb) = (a.priority(), b.priority());
        pa > pb || (pa == pb && a_since < b_since)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use k8s_openapi::api::core::v1::Pod;
    use serde_json::json;

    use super::*;

    fn pod(priority: Option<i32>) -> PodInfo {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "default"},
            "spec": {"priority": priority, "containers": [{"name": "c", "image": "i"}]},
        }))
        .unwrap();
        PodInfo::new(Arc::new(pod))
    }

    #[test]
    fn higher_priority_then_earlier_first() {
        let early = Instant::now();
        let late = early + Duration::from_secs(1);
        let cases = [
            (Some(10), early, Some(5), late, true),
            (Some(10), late, Some(5), early, true),
            (Some(5), early, Some(10), late, false),
            (None, early, Some(-1), late, true),
            (None, early, Some(0), late, true),
            (Some(3), late, Some(3), early, false),
            (Some(3), early, Some(3), early, false),
        ];
        for (pa, ta, pb, tb, less) in cases {
            assert_eq!(
                PrioritySort.less(&pod(pa), ta, &pod(pb), tb),
                less,
                "{pa:?}@{ta:?} < {pb:?}@{tb:?}"
            );
        }
    }
}
