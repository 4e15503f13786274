//! The two rollout strategies as one sync step each: RollingUpdate (grow
//! the new ReplicaSet within maxSurge, shrink old ones within
//! maxUnavailable) and Recreate (old pods gone before new ones start).

use k8s_openapi::api::apps::v1::ReplicaSet;

use super::plan::{spec_replicas, Rollout};
use super::status::{available_replicas, deployment_complete, status_replicas};
use super::{strategy, PlanError};

/// The available pods a ReplicaSet keeps: its status may still count
/// pods it was just told to shed (its controller has not caught up), and
/// those will go.
fn kept_available(rs: &ReplicaSet) -> i32 {
    available_replicas(rs).min(spec_replicas(rs))
}

impl Rollout<'_> {
    pub(super) fn rollout_rolling(&mut self) -> Result<(), PlanError> {
        if self.new.is_none() {
            self.create_new()?;
        }
        if self.reconcile_new()? || self.reconcile_old()? {
            return self.sync_rollout_status();
        }
        if deployment_complete(self.d, &self.status) {
            self.cleanup();
        }
        self.sync_rollout_status()
    }

    pub(super) fn rollout_recreate(&mut self) -> Result<(), PlanError> {
        let mut scaled = false;
        for index in self.active(&self.old()) {
            scaled |= self.scale(index, 0)?;
        }
        if scaled || self.old_pods_running() {
            return self.sync_rollout_status();
        }
        if self.new.is_none() {
            self.create_new()?;
        }
        if deployment_complete(self.d, &self.status) {
            self.cleanup();
        }
        if let Some(new) = self.new {
            self.scale(new, strategy::replicas(self.d))?;
        }
        self.sync_rollout_status()
    }

    /// Whether an old ReplicaSet may still have pods: its status counts
    /// some, or it has not yet observed its latest spec.
    fn old_pods_running(&self) -> bool {
        self.old().iter().any(|i| {
            let rs = &self.sets[*i].rs;
            let observed = rs.status.as_ref().and_then(|s| s.observed_generation);
            status_replicas(rs) > 0 || observed.unwrap_or(0) < rs.metadata.generation.unwrap_or(0)
        })
    }

    /// Scales the new ReplicaSet toward `spec.replicas` within maxSurge;
    /// true when its size changed.
    fn reconcile_new(&mut self) -> Result<bool, PlanError> {
        let Some(new) = self.new else {
            return Ok(false);
        };
        let replicas = strategy::replicas(self.d);
        let current = spec_replicas(&self.sets[new].rs);
        if current == replicas {
            return Ok(false);
        }
        let target = if current > replicas {
            replicas
        } else {
            self.new_replica_set_replicas(current)?
        };
        self.scale(new, target)
    }

    /// Scales old ReplicaSets down, unhealthy pods first, as far as
    /// `replicas − maxUnavailable` available pods allow; true when any
    /// shrank.
    fn reconcile_old(&mut self) -> Result<bool, PlanError> {
        let old = self.old();
        if self.sum(&old, spec_replicas) == 0 {
            return Ok(false);
        }
        let min_available = strategy::replicas(self.d) - strategy::max_unavailable(self.d)?;
        let new_unavailable = self.new.map_or(0, |i| {
            let rs = &self.sets[i].rs;
            spec_replicas(rs) - kept_available(rs)
        });
        let all_pods = self.sum(&self.all(), spec_replicas);
        let max_scaled_down = all_pods - min_available - new_unavailable;
        if max_scaled_down <= 0 {
            return Ok(false);
        }
        let active = self.active(&old);
        let cleaned = self.scale_down_unhealthy(&active, max_scaled_down)?;
        let scaled = self.scale_down_available(&active, min_available)?;
        Ok(cleaned + scaled > 0)
    }

    /// Takes away old replicas that are not available, at most `max`.
    fn scale_down_unhealthy(&mut self, old: &[usize], max: i32) -> Result<i32, PlanError> {
        let mut total = 0;
        for &index in old {
            if total >= max {
                break;
            }
            let rs = &self.sets[index].rs;
            let (replicas, available) = (spec_replicas(rs), available_replicas(rs));
            if replicas == 0 || replicas <= available {
                continue;
            }
            let down = (max - total).min(replicas - available);
            self.scale(index, replicas - down)?;
            total += down;
        }
        Ok(total)
    }

    /// Takes away available old replicas, oldest ReplicaSet first, while
    /// more than `min_available` pods stay available.
    fn scale_down_available(
        &mut self,
        old: &[usize],
        min_available: i32,
    ) -> Result<i32, PlanError> {
        let available = self.sum(&self.all(), kept_available);
        if available <= min_available {
            return Ok(0);
        }
        let wanted = available - min_available;
        let mut total = 0;
        for &index in old {
            if total >= wanted {
                break;
            }
            let replicas = spec_replicas(&self.sets[index].rs);
            if replicas == 0 {
                continue;
            }
            let down = replicas.min(wanted - total);
            self.scale(index, replicas - down)?;
            total += down;
        }
        Ok(total)
    }
}
