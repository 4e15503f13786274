//! The status a sync leaves: counts and Available always; the Progressing
//! condition (paused, resumed, progressing, complete, deadline exceeded)
//! and when to look again for a deadline.

use std::time::Duration;

use jiff::SignedDuration;
use k8s_openapi::api::apps::v1::{DeploymentCondition, DeploymentStatus};

use super::plan::Rollout;
use super::status::{self, condition, get_condition, remove_condition, set_condition};
use super::{strategy, PlanError};

impl Rollout<'_> {
    /// Counts and the Available condition (syncDeploymentStatus).
    pub(super) fn sync_status(&mut self) -> Result<(), PlanError> {
        self.status = self.calculate_status()?;
        Ok(())
    }

    fn calculate_status(&self) -> Result<DeploymentStatus, PlanError> {
        let all: Vec<_> = self.sets.iter().map(|m| &m.rs).collect();
        let new = self.new.map(|i| &self.sets[i].rs);
        status::calculate_status(self.d, &all, new, &self.status, self.now)
    }

    /// The Progressing condition says DeploymentPaused while paused and
    /// DeploymentResumed after, unless the deadline was already exceeded.
    pub(super) fn check_paused_conditions(&mut self) {
        if strategy::progress_deadline_seconds(self.d).is_none() {
            return;
        }
        let reason =
            get_condition(&self.status, status::PROGRESSING).and_then(|c| c.reason.clone());
        if reason.as_deref() == Some(status::PROGRESS_DEADLINE_EXCEEDED) {
            return;
        }
        let paused_recorded = reason.as_deref() == Some(status::DEPLOYMENT_PAUSED);
        let paused = strategy::is_paused(self.d);
        let (reason, message) = match (paused, paused_recorded) {
            (true, false) => (status::DEPLOYMENT_PAUSED, "Deployment is paused"),
            (false, true) => (status::DEPLOYMENT_RESUMED, "Deployment is resumed"),
            _ => return,
        };
        set_condition(
            &mut self.status,
            condition(
                status::PROGRESSING,
                "Unknown",
                reason,
                message.into(),
                self.now,
            ),
        );
    }

    /// Counts, Available, and Progressing as the rollout stands
    /// (syncRolloutStatus).
    pub(super) fn sync_rollout_status(&mut self) -> Result<(), PlanError> {
        let mut next = self.calculate_status()?;
        let deadline = strategy::progress_deadline_seconds(self.d);
        if deadline.is_none() {
            remove_condition(&mut next, status::PROGRESSING);
        }
        let current = get_condition(&self.status, status::PROGRESSING).cloned();
        let finished = next.replicas.unwrap_or(0) == next.updated_replicas.unwrap_or(0)
            && current.as_ref().and_then(|c| c.reason.as_deref())
                == Some(status::NEW_REPLICA_SET_AVAILABLE);
        if deadline.is_some() && !finished {
            self.set_progressing(&mut next, current);
        }
        match status::replica_failure(
            &self.sets.iter().map(|m| &m.rs).collect::<Vec<_>>(),
            self.new.map(|i| &self.sets[i].rs),
        ) {
            Some(failure) => set_condition(&mut next, failure),
            None => remove_condition(&mut next, status::REPLICA_FAILURE),
        }
        self.requeue_after = self.requeue_stuck(&next);
        self.status = next;
        Ok(())
    }

    fn set_progressing(&self, next: &mut DeploymentStatus, current: Option<DeploymentCondition>) {
        let subject = match self.new {
            Some(i) => format!(
                "ReplicaSet {:?}",
                self.sets[i].rs.metadata.name.as_deref().unwrap_or_default()
            ),
            None => format!(
                "Deployment {:?}",
                self.d.metadata.name.as_deref().unwrap_or_default()
            ),
        };
        if status::deployment_complete(self.d, next) {
            let message = format!("{subject} has successfully progressed.");
            set_condition(
                next,
                condition(
                    status::PROGRESSING,
                    "True",
                    status::NEW_REPLICA_SET_AVAILABLE,
                    message,
                    self.now,
                ),
            );
        } else if status::deployment_progressing(&self.status, next) {
            // Progress refreshes lastUpdateTime even when the reason stays.
            let mut progressing = condition(
                status::PROGRESSING,
                "True",
                status::REPLICA_SET_UPDATED,
                format!("{subject} is progressing."),
                self.now,
            );
            if let Some(current) = current.filter(|c| c.status == "True") {
                progressing.last_transition_time = current.last_transition_time;
            }
            remove_condition(next, status::PROGRESSING);
            set_condition(next, progressing);
        } else if status::deployment_timed_out(self.d, next, self.now) {
            let message = format!("{subject} has timed out progressing.");
            set_condition(
                next,
                condition(
                    status::PROGRESSING,
                    "False",
                    status::PROGRESS_DEADLINE_EXCEEDED,
                    message,
                    self.now,
                ),
            );
        }
    }

    /// When the progress deadline of a rollout that is still going passes.
    fn requeue_stuck(&self, next: &DeploymentStatus) -> Option<Duration> {
        let deadline = strategy::progress_deadline_seconds(self.d)?;
        let progressing = get_condition(next, status::PROGRESSING)?;
        if status::deployment_complete(self.d, next)
            || progressing.reason.as_deref() == Some(status::PROGRESS_DEADLINE_EXCEEDED)
        {
            return None;
        }
        let updated = progressing.last_update_time.as_ref()?.0;
        let at = updated + SignedDuration::from_secs(i64::from(deadline));
        let after = at.duration_since(self.now);
        Some(
            Duration::try_from(after)
                .unwrap_or_default()
                .max(Duration::from_secs(1)),
        )
    }
}
