//! The pure part of a StatefulSet sync (`updateStatefulSet`): which pod to
//! create, replace or delete next. OrderedReady goes one pod at a time,
//! creating in ordinal order once the previous pod is Running and Ready,
//! and scaling down from the highest ordinal; Parallel creates and
//! deletes all at once. A RollingUpdate replaces pods from the highest
//! ordinal down to the partition, one at a time. Nothing here talks to
//! the API.

use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;

use super::identity::{ordinal_of, revision_of};
use crate::common::pods::{is_available, is_ready, phase};

/// Which revision's template a new pod is made from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Revision {
    Current,
    Update,
}

/// One write of a sync.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// Create the claims, then the pod, at this ordinal.
    Create { ordinal: usize, revision: Revision },
    /// Delete a pod: failed, condemned by a scale-down, or outdated.
    Delete { pod: Arc<Pod>, condemned: bool },
}

/// The revisions of a sync, by name.
pub struct Revisions<'a> {
    pub current: &'a str,
    pub update: &'a str,
}

/// `spec.replicas`, 1 when unset.
pub fn desired_replicas(set: &StatefulSet) -> usize {
    let replicas = set.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    usize::try_from(replicas).unwrap_or(0)
}

fn is_parallel(set: &StatefulSet) -> bool {
    set.spec
        .as_ref()
        .and_then(|s| s.pod_management_policy.as_deref())
        == Some("Parallel")
}

/// `spec.updateStrategy.type`, RollingUpdate when unset.
pub fn is_rolling_update(set: &StatefulSet) -> bool {
    let strategy = set.spec.as_ref().and_then(|s| s.update_strategy.as_ref());
    strategy
        .and_then(|s| s.type_.as_deref())
        .unwrap_or("RollingUpdate")
        == "RollingUpdate"
}

/// `spec.updateStrategy.rollingUpdate.partition`, if set.
pub fn partition(set: &StatefulSet) -> Option<usize> {
    let rolling = set
        .spec
        .as_ref()?
        .update_strategy
        .as_ref()?
        .rolling_update
        .as_ref()?;
    rolling.partition.map(|p| usize::try_from(p).unwrap_or(0))
}

fn min_ready_seconds(set: &StatefulSet) -> i32 {
    set.spec
        .as_ref()
        .and_then(|s| s.min_ready_seconds)
        .unwrap_or(0)
}

pub fn is_terminating(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_some()
}

fn is_finished(pod: &Pod) -> bool {
    matches!(phase(pod), "Failed" | "Succeeded")
}

/// Running with Ready True (`isRunningAndReady`).
pub fn is_running_and_ready(pod: &Pod) -> bool {
    phase(pod) == "Running" && is_ready(pod)
}

fn is_healthy(pod: &Pod) -> bool {
    is_running_and_ready(pod) && !is_terminating(pod)
}

/// Which revision a new pod at `ordinal` gets: ordinals below the
/// partition keep the current one (`newVersionedStatefulSetPod`).
pub fn revision_for(set: &StatefulSet, ordinal: usize) -> Revision {
    let current_replicas = set
        .status
        .as_ref()
        .and_then(|s| s.current_replicas)
        .and_then(|n| usize::try_from(n).ok())
        .unwrap_or(0);
    let below = match partition(set) {
        Some(partition) => ordinal < partition,
        None => is_rolling_update(set) && ordinal < current_replicas,
    };
    match below {
        true => Revision::Current,
        false => Revision::Update,
    }
}

/// The set's pods (those named `<set>-<ordinal>`) split into the
/// `replicas` slots and the condemned beyond them, highest first.
fn members(set: &StatefulSet, pods: &[Arc<Pod>]) -> (Vec<Option<Arc<Pod>>>, Vec<Arc<Pod>>) {
    let replicas = desired_replicas(set);
    let mut slots = vec![None; replicas];
    let mut condemned = Vec::new();
    for pod in pods {
        match ordinal_of(set, pod) {
            Some(ordinal) if ordinal < replicas => slots[ordinal] = Some(pod.clone()),
            Some(ordinal) => condemned.push((ordinal, pod.clone())),
            None => {}
        }
    }
    condemned.sort_by_key(|c| std::cmp::Reverse(c.0));
    (slots, condemned.into_iter().map(|(_, p)| p).collect())
}

/// The steps of one sync of `set` with its `pods` at `now`.
pub fn plan(
    set: &StatefulSet,
    pods: &[Arc<Pod>],
    revisions: &Revisions<'_>,
    now: Timestamp,
) -> Vec<Step> {
    let mut steps = Vec::new();
    if set.metadata.deletion_timestamp.is_some() {
        return steps;
    }
    let monotonic = !is_parallel(set);
    let (slots, condemned) = members(set, pods);
    let first_unhealthy = slots
        .iter()
        .flatten()
        .chain(condemned.iter())
        .find(|p| !is_healthy(p))
        .cloned();
    let min_ready = min_ready_seconds(set);
    for (ordinal, slot) in slots.iter().enumerate() {
        let Some(pod) = slot else {
            let revision = revision_for(set, ordinal);
            steps.push(Step::Create { ordinal, revision });
            if monotonic {
                return steps;
            }
            continue;
        };
        if is_finished(pod) {
            // Replaced on a later sync, once it is gone.
            if !is_terminating(pod) {
                let pod = pod.clone();
                steps.push(Step::Delete {
                    pod,
                    condemned: false,
                });
            }
            if monotonic {
                return steps;
            }
            continue;
        }
        let waiting = is_terminating(pod) || !is_available(pod, min_ready, now);
        if waiting && monotonic {
            return steps;
        }
    }
    for pod in &condemned {
        if is_terminating(pod) {
            if monotonic {
                return steps;
            }
            continue;
        }
        let first = first_unhealthy
            .as_ref()
            .is_some_and(|f| f.metadata.name == pod.metadata.name);
        if monotonic && !is_running_and_ready(pod) && !first {
            return steps;
        }
        steps.push(Step::Delete {
            pod: pod.clone(),
            condemned: true,
        });
        if monotonic {
            return steps;
        }
    }
    if !is_rolling_update(set) {
        return steps;
    }
    let partition = partition(set).unwrap_or(0);
    for ordinal in (partition..slots.len()).rev() {
        let Some(pod) = &slots[ordinal] else {
            return steps;
        };
        if revision_of(pod) != revisions.update && !is_terminating(pod) {
            steps.push(Step::Delete {
                pod: pod.clone(),
                condemned: false,
            });
            return steps;
        }
        if !is_healthy(pod) {
            return steps;
        }
    }
    steps
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::statefulset::fixtures::{ago, member, stateful_set, NOW};
    use serde_json::json;

    const REVISIONS: Revisions = Revisions {
        current: "web-1",
        update: "web-1",
    };

    fn ready(ordinal: usize, revision: &str) -> Arc<Pod> {
        Arc::new(
            member("web", ordinal, revision)
                .ready_since(ago(60))
                .build(),
        )
    }

    fn pending(ordinal: usize) -> Arc<Pod> {
        Arc::new(member("web", ordinal, "web-1").build())
    }

    fn create(ordinal: usize) -> Step {
        Step::Create {
            ordinal,
            revision: Revision::Update,
        }
    }

    fn deleted(steps: &[Step]) -> Vec<(&str, bool)> {
        steps
            .iter()
            .filter_map(|s| match s {
                Step::Delete { pod, condemned } => {
                    Some((pod.metadata.name.as_deref().unwrap(), *condemned))
                }
                Step::Create { .. } => None,
            })
            .collect()
    }

    #[test]
    fn ordered_ready_creates_one_pod_after_the_previous_is_ready() {
        let set = stateful_set("web", 3);
        assert_eq!(plan(&set, &[], &REVISIONS, NOW), [create(0)]);
        assert!(plan(&set, &[pending(0)], &REVISIONS, NOW).is_empty());
        let not_ready = Arc::new(member("web", 0, "web-1").not_ready().build());
        assert!(plan(&set, &[not_ready], &REVISIONS, NOW).is_empty());
        assert_eq!(
            plan(&set, &[ready(0, "web-1")], &REVISIONS, NOW),
            [create(1)]
        );
        let both = [ready(0, "web-1"), ready(1, "web-1")];
        assert_eq!(plan(&set, &both, &REVISIONS, NOW), [create(2)]);
        // A gap is filled first, in ordinal order.
        let gap = [ready(0, "web-1"), ready(2, "web-1")];
        assert_eq!(plan(&set, &gap, &REVISIONS, NOW), [create(1)]);
    }

    #[test]
    fn min_ready_seconds_hold_the_next_pod_back() {
        let mut set = stateful_set("web", 2);
        set.spec.as_mut().unwrap().min_ready_seconds = Some(30);
        let fresh = Arc::new(member("web", 0, "web-1").ready_since(ago(10)).build());
        assert!(plan(&set, &[fresh], &REVISIONS, NOW).is_empty());
        assert_eq!(
            plan(&set, &[ready(0, "web-1")], &REVISIONS, NOW),
            [create(1)]
        );
    }

    #[test]
    fn parallel_creates_and_deletes_all_at_once() {
        let mut set = stateful_set("web", 3);
        set.spec.as_mut().unwrap().pod_management_policy = Some("Parallel".into());
        assert_eq!(
            plan(&set, &[], &REVISIONS, NOW),
            [create(0), create(1), create(2)]
        );
        set.spec.as_mut().unwrap().replicas = Some(1);
        let pods = [pending(0), pending(1), pending(2)];
        assert_eq!(
            deleted(&plan(&set, &pods, &REVISIONS, NOW)),
            [("web-2", true), ("web-1", true)]
        );
    }

    #[test]
    fn ordered_scale_down_goes_from_the_highest_ordinal_one_at_a_time() {
        let set = stateful_set("web", 1);
        let pods = [ready(0, "web-1"), ready(1, "web-1"), ready(2, "web-1")];
        assert_eq!(
            deleted(&plan(&set, &pods, &REVISIONS, NOW)),
            [("web-2", true)]
        );
        // While web-2 terminates, web-1 waits.
        let terminating = Arc::new(
            member("web", 2, "web-1")
                .ready_since(ago(60))
                .terminating()
                .build(),
        );
        let pods = [ready(0, "web-1"), ready(1, "web-1"), terminating];
        assert!(plan(&set, &pods, &REVISIONS, NOW).is_empty());
        let pods = [ready(0, "web-1"), ready(1, "web-1")];
        assert_eq!(
            deleted(&plan(&set, &pods, &REVISIONS, NOW)),
            [("web-1", true)]
        );
        // Nothing is removed while a remaining pod is unhealthy.
        let pods = [pending(0), ready(1, "web-1")];
        assert!(plan(&set, &pods, &REVISIONS, NOW).is_empty());
    }

    #[test]
    fn failed_pods_are_deleted_to_be_recreated() {
        let set = stateful_set("web", 2);
        let failed = Arc::new(member("web", 0, "web-1").phase("Failed").build());
        let pods = [failed, ready(1, "web-1")];
        assert_eq!(
            deleted(&plan(&set, &pods, &REVISIONS, NOW)),
            [("web-0", false)]
        );
        assert_eq!(plan(&set, &pods[1..], &REVISIONS, NOW), [create(0)]);
    }

    #[test]
    fn rolling_update_goes_from_the_highest_ordinal_down_to_the_partition() {
        let mut set = stateful_set("web", 4);
        let revisions = Revisions {
            current: "web-1",
            update: "web-2",
        };
        let old: Vec<Arc<Pod>> = (0..4).map(|i| ready(i, "web-1")).collect();
        assert_eq!(
            deleted(&plan(&set, &old, &revisions, NOW)),
            [("web-3", false)]
        );
        // web-3 comes back at the update revision; until it is ready, wait.
        let mut pods = old.clone();
        pods[3] = Arc::new(member("web", 3, "web-2").build());
        assert!(plan(&set, &pods, &revisions, NOW).is_empty());
        pods[3] = ready(3, "web-2");
        assert_eq!(
            deleted(&plan(&set, &pods, &revisions, NOW)),
            [("web-2", false)]
        );

        // With partition 2, ordinals 0 and 1 keep the current revision.
        set.spec.as_mut().unwrap().update_strategy = serde_json::from_value(json!({
            "type": "RollingUpdate", "rollingUpdate": {"partition": 2}}))
        .unwrap();
        pods[2] = ready(2, "web-2");
        assert!(plan(&set, &pods, &revisions, NOW).is_empty());
        assert_eq!(revision_for(&set, 1), Revision::Current);
        assert_eq!(revision_for(&set, 2), Revision::Update);
        // A deleted pod below the partition comes back at the current revision.
        let without_1 = [pods[0].clone(), pods[2].clone(), pods[3].clone()];
        assert_eq!(
            plan(&set, &without_1, &revisions, NOW),
            [Step::Create {
                ordinal: 1,
                revision: Revision::Current
            }]
        );
    }

    #[test]
    fn on_delete_replaces_only_deleted_pods_at_the_update_revision() {
        let mut set = stateful_set("web", 2);
        set.spec.as_mut().unwrap().update_strategy =
            serde_json::from_value(json!({"type": "OnDelete"})).unwrap();
        let revisions = Revisions {
            current: "web-1",
            update: "web-2",
        };
        let pods = [ready(0, "web-1"), ready(1, "web-1")];
        assert!(plan(&set, &pods, &revisions, NOW).is_empty());
        assert_eq!(plan(&set, &pods[..1], &revisions, NOW), [create(1)]);
    }

    #[test]
    fn a_set_being_deleted_does_nothing() {
        let mut set = stateful_set("web", 3);
        set.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(NOW));
        assert!(plan(&set, &[], &REVISIONS, NOW).is_empty());
    }
}
