//! Scaling a Deployment without rolling it (a paused Deployment, or
//! `spec.replicas` changed): one active ReplicaSet takes the new size; with
//! several, the change is shared in proportion, within replicas + maxSurge.

use std::cmp::Reverse;

use super::plan::{spec_replicas, Rollout};
use super::status::available_replicas;
use super::{revision, strategy, PlanError};

impl Rollout<'_> {
    /// Whether an active ReplicaSet was sized for another `spec.replicas`.
    pub(super) fn is_scaling_event(&self) -> bool {
        let replicas = strategy::replicas(self.d);
        self.active(&self.all())
            .iter()
            .any(|i| revision::desired_replicas(&self.sets[*i].rs).is_some_and(|r| r != replicas))
    }

    pub(super) fn sync_scale(&mut self) -> Result<(), PlanError> {
        self.scale_to_replicas()?;
        if strategy::is_paused(self.d) {
            self.cleanup();
        }
        self.sync_status()
    }

    fn scale_to_replicas(&mut self) -> Result<(), PlanError> {
        let replicas = strategy::replicas(self.d);
        if let Some(only) = self.active_or_latest() {
            if spec_replicas(&self.sets[only].rs) != replicas {
                self.scale(only, replicas)?;
            }
            return Ok(());
        }
        if self.is_saturated() {
            for index in self.active(&self.old()) {
                self.scale(index, 0)?;
            }
            return Ok(());
        }
        if strategy::is_recreate(self.d) {
            return Ok(());
        }
        self.scale_proportionally()
    }

    /// The one active ReplicaSet; with none active, the new one or else the
    /// newest; with several, none.
    fn active_or_latest(&self) -> Option<usize> {
        let active = self.active(&self.all());
        match active.as_slice() {
            [] => self.new.or_else(|| self.old().last().copied()),
            [only] => Some(*only),
            _ => None,
        }
    }

    /// The new ReplicaSet runs every replica, all available.
    fn is_saturated(&self) -> bool {
        let Some(new) = self.new else {
            return false;
        };
        let rs = &self.sets[new].rs;
        let replicas = strategy::replicas(self.d);
        revision::desired_replicas(rs) == Some(replicas)
            && spec_replicas(rs) == replicas
            && available_replicas(rs) == replicas
    }

    /// Shares the difference between replicas + maxSurge and the pods of
    /// the active ReplicaSets among them, each in proportion to its size
    /// (kube-controller-manager's proportional scaling); the largest takes
    /// what rounding leaves.
    fn scale_proportionally(&mut self) -> Result<(), PlanError> {
        let replicas = strategy::replicas(self.d);
        let mut active = self.active(&self.all());
        let current = self.sum(&active, spec_replicas);
        let allowed = if replicas > 0 {
            replicas + strategy::max_surge(self.d)?
        } else {
            0
        };
        let to_add = allowed - current;
        // Largest first; among equals, the newest when growing and the
        // oldest when shrinking (indices are oldest first).
        if to_add > 0 {
            active.sort_by_key(|i| (Reverse(spec_replicas(&self.sets[*i].rs)), Reverse(*i)));
        } else {
            active.sort_by_key(|i| (Reverse(spec_replicas(&self.sets[*i].rs)), *i));
        }
        let mut added = 0;
        let mut sizes = Vec::with_capacity(active.len());
        for &index in &active {
            let share = self.proportion(index, to_add, added)?;
            sizes.push(spec_replicas(&self.sets[index].rs) + share);
            added += share;
        }
        if let Some(first) = sizes.first_mut() {
            *first = (*first + to_add - added).max(0);
        }
        for (index, size) in active.into_iter().zip(sizes) {
            self.scale(index, size)?;
        }
        Ok(())
    }

    /// This ReplicaSet's share of `to_add`, of which `added` is given out.
    fn proportion(&self, index: usize, to_add: i32, added: i32) -> Result<i32, PlanError> {
        let rs = &self.sets[index].rs;
        if spec_replicas(rs) == 0 || to_add == 0 || to_add == added {
            return Ok(0);
        }
        let fraction = self.fraction(index)?;
        let left = to_add - added;
        Ok(if to_add > 0 {
            fraction.min(left)
        } else {
            fraction.max(left)
        })
    }

    /// How much a ReplicaSet grows (or shrinks) when the Deployment's
    /// maximum size goes from its max-replicas annotation to today's.
    fn fraction(&self, index: usize) -> Result<i32, PlanError> {
        let rs = &self.sets[index].rs;
        let replicas = strategy::replicas(self.d);
        if replicas == 0 {
            return Ok(-spec_replicas(rs));
        }
        let max_now = replicas + strategy::max_surge(self.d)?;
        let before = revision::max_replicas(rs).filter(|m| *m > 0).or_else(|| {
            self.d
                .status
                .as_ref()
                .and_then(|s| s.replicas)
                .filter(|r| *r > 0)
        });
        let Some(before) = before else {
            return Ok(0);
        };
        let size = f64::from(spec_replicas(rs)) * f64::from(max_now) / f64::from(before);
        Ok(size.round() as i32 - spec_replicas(rs))
    }
}
