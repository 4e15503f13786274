//! revisionHistoryLimit: old ReplicaSets scaled to zero beyond the limit
//! are deleted, lowest revision first, so `kubectl rollout history` keeps
//! the newest ones.

use super::plan::{spec_replicas, Rollout};
use super::status::status_replicas;
use super::{revision, strategy};

impl Rollout<'_> {
    pub(super) fn cleanup(&mut self) {
        let mut cleanable: Vec<usize> = self
            .old()
            .into_iter()
            .filter(|i| self.sets[*i].rs.metadata.deletion_timestamp.is_none())
            .collect();
        let limit = usize::try_from(strategy::revision_history_limit(self.d)).unwrap_or(0);
        let excess = cleanable.len().saturating_sub(limit);
        if excess == 0 {
            return;
        }
        cleanable.sort_by_key(|i| {
            let rs = &self.sets[*i].rs;
            (
                revision::revision(rs),
                rs.metadata.creation_timestamp.as_ref().map(|t| t.0),
            )
        });
        for index in cleanable.into_iter().take(excess) {
            if self.deletable(index) {
                self.deleted.push(index);
            }
        }
    }

    /// Only a ReplicaSet without pods, whose status is current and that
    /// this sync did not touch.
    fn deletable(&self, index: usize) -> bool {
        let managed = &self.sets[index];
        let rs = &managed.rs;
        let observed = rs
            .status
            .as_ref()
            .and_then(|s| s.observed_generation)
            .unwrap_or(0);
        !managed.changed
            && !managed.created
            && status_replicas(rs) == 0
            && spec_replicas(rs) == 0
            && rs.metadata.generation.unwrap_or(0) <= observed
    }
}
