//! The events a Job's status change is recorded with, as the v1.33 Job
//! controller records them (`recordJobFinished`, and `syncJob` on suspend
//! and resume); its pods' creates and deletes are `common::events`'.

use k8s_openapi::api::batch::v1::{Job, JobCondition, JobStatus};
use skiff_machinery::events::{Event, EventType};

use super::conditions::{self, true_condition};
use crate::common::events::event;

/// The events of going from `job`'s status to `status`: suspended or
/// resumed, and completed or failed (with the Failed condition's reason
/// and message).
pub fn status_changed(job: &Job, status: &JobStatus) -> Vec<Event> {
    let before = conditions_of(job.status.as_ref());
    let after = conditions_of(Some(status));
    let mut events = Vec::new();
    let was_suspended = true_condition(before, conditions::SUSPENDED).is_some();
    let suspended = true_condition(after, conditions::SUSPENDED).is_some();
    let resumed = after
        .iter()
        .any(|c| c.type_ == conditions::SUSPENDED && c.status == "False");
    if suspended && !was_suspended {
        events.push(event(
            job,
            EventType::Normal,
            "Suspended",
            "Job suspended".into(),
        ));
    } else if was_suspended && resumed {
        events.push(event(
            job,
            EventType::Normal,
            "Resumed",
            "Job resumed".into(),
        ));
    }
    if finished(before).is_none() {
        events.extend(
            finished(after)
                .map(|done| job_finished(job, status, done))
                .into_iter()
                .flatten(),
        );
    }
    events
}

fn conditions_of(status: Option<&JobStatus>) -> &[JobCondition] {
    status
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or_default()
}

fn finished(conditions: &[JobCondition]) -> Option<&JobCondition> {
    true_condition(conditions, conditions::COMPLETE)
        .or_else(|| true_condition(conditions, conditions::FAILED))
}

/// `recordJobFinished`: Completed, after a warning when more pods
/// succeeded than `completions`; else the Failed condition as a warning.
fn job_finished(job: &Job, status: &JobStatus, done: &JobCondition) -> Vec<Event> {
    if done.type_ != conditions::COMPLETE {
        return vec![event(
            job,
            EventType::Warning,
            done.reason.as_deref().unwrap_or_default(),
            done.message.clone().unwrap_or_default(),
        )];
    }
    let completions = job.spec.as_ref().and_then(|s| s.completions);
    let mut events = Vec::new();
    if completions.is_some_and(|c| status.succeeded.unwrap_or(0) > c) {
        events.push(event(
            job,
            EventType::Warning,
            "TooManySucceededPods",
            "Too many succeeded pods running after completion count reached".into(),
        ));
    }
    events.push(event(
        job,
        EventType::Normal,
        "Completed",
        "Job completed".into(),
    ));
    events
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::fixtures::{job, NOW};

    fn with(type_: &str, status: &str, reason: &str, message: &str) -> JobStatus {
        let mut conditions = Vec::new();
        conditions::set(&mut conditions, type_, status, reason, message, NOW);
        JobStatus {
            conditions: Some(conditions),
            ..JobStatus::default()
        }
    }

    fn described(events: &[Event]) -> Vec<(EventType, &str, &str)> {
        events
            .iter()
            .map(|e| (e.type_, e.reason.as_str(), e.message.as_str()))
            .collect()
    }

    #[test]
    fn a_job_that_completes_is_recorded_once() {
        let j = job("pi", 1, 1);
        let mut done = with(
            "Complete",
            "True",
            "CompletionsReached",
            "Reached expected number of succeeded pods",
        );
        done.succeeded = Some(1);
        let events = status_changed(&j, &done);
        assert_eq!(
            described(&events),
            [(EventType::Normal, "Completed", "Job completed")]
        );
        assert_eq!(events[0].regarding.kind.as_deref(), Some("Job"));
        let mut again = j.clone();
        again.status = Some(done.clone());
        assert!(status_changed(&again, &done).is_empty());
    }

    #[test]
    fn too_many_successes_are_warned_about_before_completion() {
        let j = job("pi", 1, 2);
        let mut done = with("Complete", "True", "CompletionsReached", "");
        done.succeeded = Some(2);
        assert_eq!(
            described(&status_changed(&j, &done)),
            [
                (
                    EventType::Warning,
                    "TooManySucceededPods",
                    "Too many succeeded pods running after completion count reached"
                ),
                (EventType::Normal, "Completed", "Job completed"),
            ]
        );
    }

    #[test]
    fn a_failed_job_is_warned_about_with_its_condition() {
        let j = job("pi", 1, 1);
        let backoff = with(
            "Failed",
            "True",
            "BackoffLimitExceeded",
            "Job has reached the specified backoff limit",
        );
        assert_eq!(
            described(&status_changed(&j, &backoff)),
            [(
                EventType::Warning,
                "BackoffLimitExceeded",
                "Job has reached the specified backoff limit"
            )]
        );
        let deadline = with(
            "Failed",
            "True",
            "DeadlineExceeded",
            "Job was active longer than specified deadline",
        );
        assert_eq!(
            described(&status_changed(&j, &deadline)),
            [(
                EventType::Warning,
                "DeadlineExceeded",
                "Job was active longer than specified deadline"
            )]
        );
    }

    #[test]
    fn suspending_and_resuming_are_recorded() {
        let j = job("pi", 1, 1);
        let suspended = with("Suspended", "True", "JobSuspended", "Job suspended");
        assert_eq!(
            described(&status_changed(&j, &suspended)),
            [(EventType::Normal, "Suspended", "Job suspended")]
        );
        let mut was = j.clone();
        was.status = Some(suspended);
        let resumed = with("Suspended", "False", "JobResumed", "Job resumed");
        assert_eq!(
            described(&status_changed(&was, &resumed)),
            [(EventType::Normal, "Resumed", "Job resumed")]
        );
    }
}
