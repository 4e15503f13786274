//! The eviction manager: while the node is under memory or disk pressure
//! (the hard thresholds crossed), it evicts one pod per interval in
//! Kubernetes' order — an Evicted event is recorded, the pod is killed at
//! once and left Failed with the reason Evicted — until the pressure is
//! gone.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use skiff_machinery::quantity::Quantity;
use tokio::sync::watch;

use crate::eviction::{
    directory_usage, eviction_status, process_memory_bytes, rank_for_eviction, EvictionResource,
    PodUsage,
};
use crate::node::conditions::Pressure;
use crate::node::config::EvictionThresholds;
use crate::pod::{PodContext, PodManager};

/// Entries walked per pod when measuring its disk use.
const DISK_WALK_LIMIT: u64 = 100_000;

/// Evicts pods while `pressure` says the node is short of memory or disk,
/// one every `interval`.
pub async fn run(
    pods: Arc<PodManager>,
    mut pressure: watch::Receiver<Pressure>,
    thresholds: EvictionThresholds,
    interval: Duration,
) {
    loop {
        let now = *pressure.borrow_and_update();
        if let Some(resource) = short_of(&now) {
            evict_one(&pods, resource, &now, &thresholds).await;
            tokio::time::sleep(interval).await;
            continue;
        }
        if pressure.changed().await.is_err() {
            return;
        }
    }
}

/// The resource to reclaim: memory first, as the kubelet ranks signals.
fn short_of(pressure: &Pressure) -> Option<EvictionResource> {
    if pressure.memory {
        Some(EvictionResource::Memory)
    } else if pressure.disk {
        Some(EvictionResource::EphemeralStorage)
    } else {
        None
    }
}

/// A pod that can still be evicted, with what its containers use.
struct Candidate {
    pod: Arc<Pod>,
    context: Arc<PodContext>,
    /// (container, bytes of the resource) for the eviction message.
    containers: Vec<(String, u64)>,
    memory: u64,
    disk: u64,
}

async fn evict_one(
    pods: &PodManager,
    resource: EvictionResource,
    pressure: &Pressure,
    thresholds: &EvictionThresholds,
) {
    let candidates = candidates(pods, resource);
    let usages: Vec<PodUsage> = candidates
        .iter()
        .map(|c| PodUsage {
            pod: &c.pod,
            memory_usage_bytes: c.memory,
            disk_usage_bytes: c.disk,
        })
        .collect();
    let Some(&first) = rank_for_eviction(&usages, resource).first() else {
        return;
    };
    let victim = &candidates[first];
    let (threshold, available, total) = match resource {
        EvictionResource::Memory => (
            thresholds.memory_available,
            pressure.memory_available_bytes,
            pressure.memory_total_bytes,
        ),
        EvictionResource::EphemeralStorage => (
            thresholds.nodefs_available,
            pressure.disk_available_bytes,
            pressure.disk_total_bytes,
        ),
    };
    let threshold = Quantity {
        milli: i128::from(threshold.map_or(0, |t| t.amount_of(total))) * 1000,
        binary: true,
    };
    let (reason, message) = eviction_status(
        resource,
        threshold,
        available,
        &victim.pod,
        &victim.containers,
    );
    tracing::warn!(pod = %victim.context.shared.pod_label(), resource = resource.name(), %message, "evicting a pod");
    let event = crate::pod::events::evicted(&victim.pod, &message);
    victim.context.recorder.record(event);
    victim.context.shared.evict(reason, &message);
}

/// The active pods (not finished, not evicted) and their usage.
fn candidates(pods: &PodManager, resource: EvictionResource) -> Vec<Candidate> {
    pods.pods()
        .into_iter()
        .filter(|(pod, context)| {
            let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
            !matches!(phase, Some("Succeeded" | "Failed"))
                && pod.metadata.deletion_timestamp.is_none()
                && !context.shared.is_evicted()
        })
        .map(|(pod, context)| {
            let containers: Vec<(String, u64)> = context
                .shared
                .handles()
                .iter()
                .map(|h| {
                    let used = match resource {
                        EvictionResource::Memory => process_memory_bytes(h.pid()).unwrap_or(0),
                        EvictionResource::EphemeralStorage => 0,
                    };
                    (h.id().container.clone(), used)
                })
                .collect();
            let memory = containers.iter().map(|(_, b)| b).sum();
            let disk = match resource {
                EvictionResource::EphemeralStorage => {
                    let dir = context.launcher.pods_dir.join(&context.shared.uid);
                    directory_usage(&dir, DISK_WALK_LIMIT).bytes
                }
                EvictionResource::Memory => 0,
            };
            Candidate {
                pod,
                context,
                containers,
                memory,
                disk,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_is_reclaimed_before_disk() {
        let both = Pressure {
            memory: true,
            disk: true,
            ..Default::default()
        };
        assert_eq!(short_of(&both), Some(EvictionResource::Memory));
        let disk = Pressure {
            disk: true,
            ..Default::default()
        };
        assert_eq!(short_of(&disk), Some(EvictionResource::EphemeralStorage));
        assert_eq!(short_of(&Pressure::default()), None);
    }
}
